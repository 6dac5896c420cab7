"""Counts of each token -> an MLP: enough to learn parity of one token's count."""
import torch.nn.functional as F
from torch import nn


class BagOfTokens(nn.Module):
    def __init__(self, vocab: int = 12, hidden: int = 64, pad_id: int = 0):
        super().__init__()
        self.vocab, self.pad_id = vocab, pad_id
        self.net = nn.Sequential(nn.Linear(vocab, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, batch):
        counts = F.one_hot(batch["tokens"], self.vocab).float()
        counts[..., self.pad_id] = 0
        logits = self.net(counts.sum(dim=1))
        loss = F.cross_entropy(logits, batch["label"])
        if self.training:
            return {"loss_cls": loss, "loss_l2": 1e-5 * sum((p ** 2).sum() for p in self.parameters())}
        return {"loss": loss, "accuracy": (logits.argmax(1) == batch["label"]).float().mean()}
