"""A tiny text task made in memory: does a sentence hold an even number of the marker token?"""
from typing import Dict, List

import torch
from torch.utils.data import Dataset


class ParitySentences(Dataset):
    """Sentences of 4-24 token ids in [2, vocab); label 1 when token 2 occurs an even number of times."""

    def __init__(self, size: int = 2000, vocab: int = 12, split: str = "train", seed: int = 0):
        g = torch.Generator().manual_seed(seed + (0 if split == "train" else 1))
        lengths = torch.randint(4, 25, (size,), generator=g)
        self.items: List[Dict[str, torch.Tensor]] = []
        for n in lengths.tolist():
            tokens = torch.randint(2, vocab, (n,), generator=g)
            self.items.append({"tokens": tokens, "label": torch.tensor(int((tokens == 2).sum()) % 2 == 0)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        return self.items[i]


def pad_batch(items: List[Dict[str, torch.Tensor]], pad_id: int = 0) -> Dict[str, torch.Tensor]:
    """Stack variable-length sentences into one padded batch."""
    tokens = torch.nn.utils.rnn.pad_sequence([it["tokens"] for it in items], batch_first=True, padding_value=pad_id)
    return {"tokens": tokens, "label": torch.stack([it["label"] for it in items]).long()}
