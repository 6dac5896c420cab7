"""Snapshots of every random generator a run draws from (Python, NumPy, torch CPU and CUDA), in plain types."""
from __future__ import annotations

import random
from array import array
from typing import Any, Dict, Mapping

import torch

from launcher.engine.storage import to_le_bytes, unpack_le


def get_rng_state() -> Dict[str, Any]:
    """Python, NumPy, torch CPU and every CUDA device's generator states, in plain types (read with
    ``weights_only=True``) and bytes rather than small tensors (each a file record for ``torch.save``)."""
    import numpy as np

    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": (version, to_le_bytes(array("Q", words)), gauss),  # "Q": "q"'s bytes, parsed faster
        "numpy": (kind, keys.astype("<u4").tobytes(), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state().numpy().tobytes(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore :func:`get_rng_state`'s states (or an older checkpoint's tensors and arrays)."""
    import numpy as np

    version, words, gauss = state["python"]
    random.setstate((version, tuple(unpack_le(words, "q")), gauss))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.frombuffer(keys, dtype="<u4") if isinstance(keys, bytes) else keys, *rest))
    cpu = state["torch"]
    torch.set_rng_state(torch.frombuffer(bytearray(cpu), dtype=torch.uint8) if isinstance(cpu, bytes) else cpu)
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
