"""The loaders the trainers draw batches from, made for exact resume: an epoch's order follows (``seed``, epoch);
a worker reseeds ``torch``, ``random`` and ``numpy`` from (``seed``, rank, epoch, batch number) before each training
batch, so augmentation does not depend on which worker loads it; the main process is never reseeded (the run's
random state, in its checkpoints, covers loading without workers). Also the val shard and the dead-worker watch.
"""
from __future__ import annotations

import hashlib
import random
import signal
import sys
import threading
from typing import Any, Callable, Iterator, List, Sequence

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler, get_worker_info

from launcher.engine.rng import get_rng_state, set_rng_state


class SeededBatch(list):
    """The indices of one batch, and the seed a worker reseeds its generators from to load it."""

    def __init__(self, indices: Sequence[int], seed: int) -> None:
        super().__init__(indices)
        self.seed = seed


def batch_seed(*key: int) -> int:
    """A 64-bit seed that depends on ``key`` only (not on ``PYTHONHASHSEED`` or the Python version)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "little")


class SkippingBatchSampler(BatchSampler):
    """``BatchSampler`` that starts past the first ``skip`` batches of an epoch without loading them; with a ``key``
    (seed, rank, epoch) each batch is a ``SeededBatch`` seeded by it and the batch's number."""

    skip = 0
    key: tuple = ()  # empty: plain batches (no workers to seed; nothing added to the step)

    def __iter__(self) -> Iterator[List[int]]:
        batches = super().__iter__()
        if not self.key:
            for _ in range(self.skip):
                next(batches, None)
            yield from batches
            return
        for number, batch in enumerate(batches):
            if number >= self.skip:
                yield SeededBatch(batch, batch_seed(*self.key, number))

    def __len__(self) -> int:
        return max(super().__len__() - self.skip, 0)


class BatchSeededDataset(Dataset):
    """A dataset whose loading of a ``SeededBatch`` in a DataLoader worker starts from the batch's seed (a worker's
    generators would otherwise run on from what it loaded before, which a resumed run cannot reproduce)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: List[int]) -> List[Any]:
        if isinstance(indices, SeededBatch) and get_worker_info() is not None:
            random.seed(indices.seed)
            torch.default_generator.manual_seed(indices.seed)  # torch.manual_seed: ~150 us a call
            if torch.cuda.is_initialized():
                torch.cuda.manual_seed_all(indices.seed)
            if "numpy" in sys.modules:  # as torch seeds it in workers: only when imported
                sys.modules["numpy"].random.seed([indices.seed & 0xFFFF_FFFF, indices.seed >> 32])
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems:
            return getitems(list(indices))
        return [self.dataset[i] for i in indices]

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet, e.g. while unpickling in a spawned worker
            raise AttributeError(name)
        return getattr(self.dataset, name)


class EpochLoader(DataLoader):
    """A ``DataLoader`` whose epoch order and worker seeds follow ``(seed, epoch)`` only: ``set_epoch(epoch,
    skip_batches)`` before each ``iter()`` reshuffles, skips the batches done, and reseeds the workers' base seed."""

    def __init__(self, dataset: Dataset, batch_size: int, sampler: Sampler, drop_last: bool, seed: int, **kwargs: Any):
        workers = kwargs.get("num_workers", 0) > 0
        super().__init__(
            BatchSeededDataset(dataset) if workers else dataset,
            batch_sampler=SkippingBatchSampler(sampler, batch_size, drop_last),
            generator=torch.Generator(),
            **kwargs,
        )
        self.seed = seed
        self._seeded = workers
        self.set_epoch(0)

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        sampler = self.batch_sampler.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        self.batch_sampler.skip = skip_batches
        if self._seeded:
            self.batch_sampler.key = (self.seed, getattr(sampler, "rank", 0), epoch)
        self.generator.manual_seed((self.seed * 1_000_003 + epoch) % 2**63)


_DEAD_WORKER = "DataLoader worker (pid"  # torch's words for a worker that died


class DeadWorkerWatch:
    """Wraps torch's SIGCHLD handler, which raises a dead worker's ``RuntimeError`` at whatever line runs (inside a
    backward, an optimizer step, a checkpoint's write): it is raised only where the process waits for a batch (a
    watched iterator's ``__next__``); elsewhere ``on_death(err)`` is told, and the work under way ends whole.
    Main thread only.
    """

    def __init__(self, on_death: Callable[[RuntimeError], None]) -> None:
        self.on_death = on_death
        self.previous: Any = None  # torch's handler, installed by the first iterator with workers
        self._fetches: set = set()  # the code of the watched iterators' __next__

    def watch(self, batches: Any) -> None:
        """Watch the fetches of ``batches`` (just made by ``iter(loader)``, which installs torch's handler)."""
        code = getattr(getattr(type(batches), "__next__", None), "__code__", None)
        if code is not None:
            self._fetches.add(code)
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGCHLD)
            if current is not self and callable(current):
                self.previous = current
                signal.signal(signal.SIGCHLD, self)

    def release(self) -> None:
        """Put the wrapped handler back."""
        if self.previous is not None and threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGCHLD) is self:
            signal.signal(signal.SIGCHLD, self.previous)
        self.previous = None

    def __call__(self, signum: int, frame: Any) -> None:
        try:
            self.previous(signum, frame)
        except RuntimeError as err:
            if _DEAD_WORKER not in str(err) or self._fetching(frame):
                raise
            self.on_death(err)

    def _fetching(self, frame: Any) -> bool:
        while frame is not None:
            if frame.f_code in self._fetches:
                return True
            frame = frame.f_back
        return False


def is_sized(obj: Any) -> bool:
    """Whether ``len(obj)`` answers (an ``IterableDataset`` may have no ``__len__``)."""
    try:
        len(obj)
    except TypeError:
        return False
    return True


class StreamLoader(DataLoader):
    """A ``DataLoader`` over an ``IterableDataset``, an epoch being one pass. ``set_epoch(epoch, skip_batches)``
    passes the epoch to the dataset's own ``set_epoch``, seeds the workers from (``seed``, rank, epoch), and has the
    next iterator read and drop ``skip_batches`` (a stream cannot skip otherwise); without workers the run's random
    state is put back after them, so a stream drawing augmentation from it resumes exactly."""

    def __init__(self, dataset: IterableDataset, batch_size: int, drop_last: bool, seed: int, rank: int = 0, **kwargs: Any):
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last, generator=torch.Generator(), **kwargs)
        self.seed, self.rank = seed, rank
        self._skip = 0
        self._seed_workers(0)  # the dataset's own epoch is left alone until the trainer sets one

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        if callable(getattr(self.dataset, "set_epoch", None)):
            self.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        self._skip = skip_batches
        self._seed_workers(epoch)

    def _seed_workers(self, epoch: int) -> None:  # each rank's workers draw their own
        self.generator.manual_seed(batch_seed(self.seed, self.rank, epoch) % 2**63)

    def __iter__(self) -> Any:
        batches = super().__iter__()
        skip, self._skip = self._skip, 0
        if skip:
            state = get_rng_state() if self.num_workers == 0 else None
            end = object()
            for _ in range(skip):
                if next(batches, end) is end:
                    break
            if state is not None:
                set_rng_state(state)
        return batches


class ValLoader(DataLoader):
    """A ``DataLoader`` for validation whose workers' base seed comes from ``seed`` at each ``iter()``, not from
    torch's global generator: a validation more or less (a resume, a run's end) leaves training's draws alone."""

    def __init__(self, dataset: Dataset, seed: int, **kwargs: Any) -> None:
        super().__init__(dataset, generator=torch.Generator(), **kwargs)
        self.seed = seed

    def __iter__(self) -> Any:
        self.generator.manual_seed(self.seed)
        return super().__iter__()


class ShardSampler(Sampler[int]):
    """Every ``world_size``-th index from ``rank``, without ``DistributedSampler``'s padding: over the ranks each val
    sample is seen once, so summed metrics equal a single process's."""

    def __init__(self, size: int, rank: int = 0, world_size: int = 1) -> None:
        self.indices = range(rank, size, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)
