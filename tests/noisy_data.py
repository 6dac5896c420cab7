"""A dataset for tests: the built-in synthetic data with random augmentation drawn in ``__getitem__``,
from torch, ``random`` and numpy's global generators, as torchvision-style transforms do."""
import random

import numpy as np
import torch
from torch.utils.data import Dataset

from launcher.data import synthetic
from launcher.models import MLP


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


class NoisyStream(torch.utils.data.IterableDataset):
    """The built-in synthetic data as a stream: each pass in an order fixed by ``set_epoch``, shared out among
    the loader's workers, with random augmentation from the global generators; no ``__len__``."""

    def __init__(self, **kwargs):
        self.data = synthetic(**kwargs)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.epoch))
        for index in order[worker::workers].tolist():
            x, y = self.data[index]
            yield x + 0.1 * random.uniform(0.5, 1.5) * torch.randn_like(x), y


class SizedNoisyStream(NoisyStream):
    """The same with a ``__len__``, which promises ``promise`` more samples than a pass yields."""

    def __init__(self, promise=0, **kwargs):
        super().__init__(**kwargs)
        self.promise = promise

    def __len__(self):
        return len(self.data) + self.promise


class RankShardedStream(NoisyStream):
    """The stream shared out by DDP rank, with ``extra`` more samples on rank 0 than on the others."""

    def __init__(self, extra=0, **kwargs):
        super().__init__(**kwargs)
        self.extra = extra

    def __iter__(self):
        import torch.distributed as dist

        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.epoch)).tolist()
        for index in order[rank::world] + (order[:self.extra] if rank == 0 else []):
            x, y = self.data[index]
            yield x + 0.1 * random.uniform(0.5, 1.5) * torch.randn_like(x), y


class RaggedAt(NoisySynthetic):
    """The same, but sample ``at`` is one feature short: the batch holding it cannot be stacked."""

    def __init__(self, at=10, **kwargs):
        super().__init__(**kwargs)
        self.at = at

    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return (x[..., :-1] if index == self.at else x), y


class MissingAt(NoisySynthetic):
    """The same, but sample ``at`` is a file that cannot be read, until the environment says ``MENDED=1``: a data set
    with one image missing on the first run."""

    def __init__(self, at=10, **kwargs):
        super().__init__(**kwargs)
        self.at, self.split = at, kwargs.get("split", "val")

    def __getitem__(self, index):
        import os

        if index == self.at and os.environ.get("MENDED") != "1":
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '{self.split}/{index:05d}.png'")
        return super().__getitem__(index)


class DiesAt(NoisySynthetic):
    """The same, but the process loading sample ``at`` dies there, as a DataLoader worker the kernel's OOM killer ends."""

    def __init__(self, at=10, **kwargs):
        super().__init__(**kwargs)
        self.at = at

    def __getitem__(self, index):
        import os

        if index == self.at:
            os._exit(1)
        return super().__getitem__(index)


class KilledAt(NoisySynthetic):
    """The same, but the worker loading sample ``at`` is killed there by ``signal`` (``KILL``: the kernel's OOM killer;
    ``SEGV``: a crash in native code), once: it writes its pid to the file ``flag`` first, and a rerun loads the sample."""

    def __init__(self, at=10, signal="KILL", flag="killed", **kwargs):
        super().__init__(**kwargs)
        self.at, self.signal, self.flag = at, signal, flag

    def __getitem__(self, index):
        import os
        import signal

        if index == self.at and not os.path.exists(self.flag):
            with open(self.flag + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.flag + ".tmp", self.flag)
            os.kill(os.getpid(), getattr(signal, f"SIG{self.signal}"))
        return super().__getitem__(index)


class BusyWhenAWorkerDies(MLP):
    """The built-in MLP, whose ``step``-th training forward of a process waits for the death of the worker
    :class:`KilledAt` names in ``flag`` (once: a file beside it marks the wait done), then trains on: the worker
    dies while the training process is inside a step, not waiting for a batch."""

    def __init__(self, flag="killed", step=3, **kwargs):
        super().__init__(**kwargs)
        self.flag, self.step, self.calls = flag, step, 0

    def forward(self, batch):
        import os
        import time

        self.calls += self.training
        if self.training and self.calls == self.step and not os.path.exists(self.flag + ".waited"):
            deadline = time.monotonic() + 120
            while not os.path.exists(self.flag):
                assert time.monotonic() < deadline, f"no worker wrote {self.flag}"
                time.sleep(0.01)
            with open(self.flag) as f:
                os.waitid(os.P_PID, int(f.read()), os.WEXITED | os.WNOWAIT)  # dead; left for its loader to reap
            open(self.flag + ".waited", "w").close()
        return super().forward(batch)


class UserLoaders:
    """A data object of the user's own: torch's ``DataLoader(shuffle=True)`` over the run's datasets, drawing its order
    (and its workers' seeds) from the global generator, or from a ``generator`` of its own seeded with ``seed``."""

    def __init__(self, train, val=None, batch_size=32, num_workers=0, seed=0, generator=False, **unused):
        self.train, self.val, self.batch_size, self.num_workers = train, val, batch_size, num_workers
        self.generator = torch.Generator().manual_seed(seed) if generator else None

    def train_loader(self):
        return torch.utils.data.DataLoader(self.train, batch_size=self.batch_size, shuffle=True,
                                           num_workers=self.num_workers, generator=self.generator)

    def val_loader(self):
        return torch.utils.data.DataLoader(self.val, batch_size=self.batch_size) if self.val is not None else None
