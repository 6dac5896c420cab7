"""A dataset for tests: the built-in synthetic data with random augmentation drawn in ``__getitem__``,
from torch, ``random`` and numpy's global generators, as torchvision-style transforms do."""
import random

import numpy as np
import torch
from torch.utils.data import Dataset

from launcher.data import synthetic


class NoisySynthetic(Dataset):
    def __init__(self, **kwargs):
        self.data = synthetic(**kwargs)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        x, y = self.data[index]
        scale = 0.1 * random.uniform(0.5, 1.5) * float(np.random.uniform(0.5, 1.5))
        return x + scale * torch.randn_like(x), y


class NoisyBatches(NoisySynthetic):
    """The same, loading a batch at a time through ``__getitems__``, and marking the samples it loaded so."""

    def __getitems__(self, indices):
        assert type(indices) is list, type(indices)
        x, y = self.data[indices]
        return [(xi + 0.1 * torch.randn_like(xi), yi, True) for xi, yi in zip(x, y)]


class NoisyWithPid(NoisySynthetic):
    """The same, each sample also naming the process that loaded it."""

    def __getitem__(self, index):
        import os

        return (*super().__getitem__(index), os.getpid())
