"""EventStorage: the metrics store that hooks and writers share during one training run.

Values may be put as 0-d tensors: they are kept as they are and turned into floats only
when a reader asks (a writer at its period), so the training step never waits on the
device just to record a number.
"""
from __future__ import annotations

import logging
from collections import deque
from array import array
from itertools import accumulate, islice
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple

import torch

Scalar = Any  # float, int or a 0-d tensor
Reducer = Callable[[torch.Tensor, int], Optional[torch.Tensor]]  # (values, layout id) -> mean over ranks, or None
logger = logging.getLogger(__name__)


class HistoryBuffer:
    """The last ``max_length`` values of one scalar, each with the iteration it was put at."""

    __slots__ = ("_values", "_iters", "_pending", "_unsynced")

    def __init__(self, max_length: int = 1000) -> None:
        self._values: Deque[Scalar] = deque(maxlen=max_length)
        self._iters: Deque[int] = deque(maxlen=max_length)
        self._pending = 0  # how many of the newest values may still be tensors
        self._unsynced = 0  # how many of the newest values are not yet averaged over the ranks (DDP)

    def update(self, value: Scalar, iteration: int) -> None:
        self._unsynced += 1
        if isinstance(value, torch.Tensor):
            value = value.detach()
            self._pending += 1
        elif self._pending:
            self._pending += 1
        self._values.append(value)
        self._iters.append(iteration)

    def _materialize(self) -> None:
        """Turn the newest values that are tensors into floats, with one host transfer."""
        if not self._pending:
            return
        k = min(self._pending, len(self._values))
        tail = [self._values.pop() for _ in range(k)][::-1]
        slots = [i for i, v in enumerate(tail) if isinstance(v, torch.Tensor)]
        if slots:
            tensors = [tail[i] for i in slots]
            if tensors[0].device.type == "cpu":  # no transfer to save: reading each costs less than a stack
                floats = [t.item() for t in tensors]
            else:
                try:  # one stack and one transfer; values of one key share a dtype and device
                    floats = torch.stack(tensors).reshape(-1).double().cpu().tolist()
                except RuntimeError:
                    floats = [float(t.reshape(())) for t in tensors]
            for i, f in zip(slots, floats):
                tail[i] = f
        self._values.extend(tail)
        self._pending = 0

    def take_unsynced(self) -> List[float]:
        """The newest values not yet averaged over the ranks, as floats."""
        self._materialize()
        k = min(self._unsynced, len(self._values))
        return [float(v) for v in islice(self._values, len(self._values) - k, None)]

    def put_synced(self, values: List[float]) -> None:
        """Replace the newest ``len(values)`` values with their average over the ranks."""
        for _ in values:
            self._values.pop()
        self._values.extend(values)
        self._unsynced = 0

    def values(self) -> List[Tuple[float, int]]:
        """All kept ``(value, iteration)`` pairs, oldest first."""
        self._materialize()
        return list(zip(self._values, self._iters))

    def latest(self) -> float:
        self._materialize()
        return float(self._values[-1])

    def latest_iter(self) -> int:
        return self._iters[-1]

    def _window(self, window: int) -> List[float]:
        self._materialize()
        return [float(v) for v in islice(reversed(self._values), window)]

    def median(self, window: int) -> float:
        vals = sorted(self._window(window))
        mid = len(vals) // 2
        return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2

    def avg(self, window: int) -> float:
        vals = self._window(window)
        return sum(vals) / len(vals)

    def __len__(self) -> int:
        return len(self._values)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``{"values", "iters"}`` (tensors or lists); :meth:`EventStorage.state_dict` packs every buffer."""
        values, iters = state["values"], state["iters"]
        values = values.tolist() if isinstance(values, torch.Tensor) else [float(v) for v in values]
        iters = iters.tolist() if isinstance(iters, torch.Tensor) else [int(i) for i in iters]
        self._values = deque(values, maxlen=self._values.maxlen)
        self._iters = deque(iters, maxlen=self._iters.maxlen)
        self._pending = 0
        self._unsynced = 0


class EventStorage:
    """Scalars keyed like ``train/loss``, ``val/accuracy`` or ``lr``, with their history.

    The trainer sets ``iter`` and ``epoch`` before each step, so every hook that reads or
    writes the storage during a step sees the trainer's iteration.
    """

    def __init__(self, start_iter: int = 0, max_length: int = 1000, reduce: Optional[Reducer] = None) -> None:
        self.iter = start_iter
        # Under DDP: averages the values put since the last read over the ranks (launcher.distributed).
        # Every rank reads at the same points (writers at their period, the end), so the ranks meet there.
        self._reduce = reduce
        self._warned = False
        self.epoch = 0
        self._max_length = max_length
        self._history: Dict[str, HistoryBuffer] = {}
        self._smoothing_hints: Dict[str, bool] = {}
        self._puts = 0  # bumps on every put: several writers reading at one step share one summary
        self._summary: Tuple[int, int, Dict[str, Tuple[float, int]]] = (-1, 0, {})

    def put_scalar(self, name: str, value: Scalar, smoothing_hint: bool = True) -> None:
        """Record ``value`` for ``name`` at the current iteration.

        ``smoothing_hint`` tells writers whether a windowed median of the key means more
        than its latest value (true for noisy per-step losses, false for val metrics).
        """
        buf = self._history.get(name)
        if buf is None:
            buf = self._history[name] = HistoryBuffer(self._max_length)
            self._smoothing_hints[name] = smoothing_hint
        buf.update(value, self.iter)
        self._puts += 1

    def put_scalars(self, *, smoothing_hint: bool = True, **values: Scalar) -> None:
        for name, value in values.items():
            self.put_scalar(name, value, smoothing_hint)

    def history(self, name: str) -> HistoryBuffer:
        buf = self._history.get(name)
        if buf is None:
            raise KeyError(f"EventStorage has no scalar named {name!r}; it has: {sorted(self._history)}")
        return buf

    def has(self, name: str) -> bool:
        return name in self._history

    def keys(self) -> Iterable[str]:
        return self._history.keys()

    def stop_syncing(self) -> None:
        """From now on every read returns this rank's own values (after a failure, peers may be gone)."""
        self._reduce = None

    def synchronize(self) -> None:
        """Average every value put since the last call over the ranks: one all-reduce (DDP only).

        A collective: every rank must reach it at the same point. The built-in writers run on every
        rank and write only on rank 0; a hook that reads the storage on rank 0 alone would wait here.
        """
        if self._reduce is None:
            return
        keys = [k for k in sorted(self._history) if self._history[k]._unsynced]
        if not keys:
            return
        chunks = [self._history[k].take_unsynced() for k in keys]
        flat = torch.tensor([v for chunk in chunks for v in chunk], dtype=torch.float64)
        from launcher.distributed import layout_id

        averaged = self._reduce(flat, layout_id([(k, len(c)) for k, c in zip(keys, chunks)]))
        if averaged is None:  # the ranks recorded different scalars: keep each rank's own
            if not self._warned:
                logger.warning("The ranks recorded different scalars since the last write; logging rank-local values")
                self._warned = True
            for k in keys:
                self._history[k]._unsynced = 0
            return
        values = averaged.tolist()
        start = 0
        for k, chunk in zip(keys, chunks):
            self._history[k].put_synced(values[start:start + len(chunk)])
            start += len(chunk)
        self._summary = (-1, 0, {})

    def latest(self, sync: bool = True) -> Dict[str, Tuple[float, int]]:
        """``{name: (latest value, iteration it was put at)}`` for every key (averaged over ranks unless not ``sync``)."""
        if sync:
            self.synchronize()
        return {k: (b.latest(), b.latest_iter()) for k, b in self._history.items()}

    def latest_with_smoothing_hint(self, window: int = 20) -> Dict[str, Tuple[float, int]]:
        """Like :meth:`latest`, but keys put with ``smoothing_hint`` report their windowed median."""
        self.synchronize()
        puts, cached_window, summary = self._summary
        if puts != self._puts or cached_window != window:
            summary = {
                k: (b.median(window) if self._smoothing_hints[k] else b.latest(), b.latest_iter())
                for k, b in self._history.items()
            }
            self._summary = (self._puts, window, summary)
        return dict(summary)

    def state_dict(self) -> Dict[str, Any]:
        """Counters and every history, packed into two tensors (``values``, ``iters``) cut by ``lengths``.

        Two tensors for any number of keys: ``torch.save`` pays tens of µs per tensor, and a
        checkpoint is taken at a step boundary while training waits.
        """
        keys = list(self._history)
        values, iters, lengths = array("d"), array("q"), []
        for k in keys:
            buf = self._history[k]
            buf._materialize()
            values.extend(buf._values)
            iters.extend(buf._iters)
            lengths.append(len(buf))
        return {
            "iter": self.iter,
            "epoch": self.epoch,
            "keys": keys,
            "lengths": lengths,
            "values": torch.frombuffer(values, dtype=torch.float64) if values else torch.zeros(0, dtype=torch.float64),
            "iters": torch.frombuffer(iters, dtype=torch.int64) if iters else torch.zeros(0, dtype=torch.int64),
            "smoothing_hints": dict(self._smoothing_hints),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.iter = state["iter"]
        self.epoch = state["epoch"]
        self._smoothing_hints = dict(state["smoothing_hints"])
        self._summary = (-1, 0, {})
        self._history = {}
        if "history" in state:  # written before histories were packed (2026-12-03)
            histories = state["history"].items()
        else:
            values, iters = state["values"].tolist(), state["iters"].tolist()
            bounds = list(accumulate(state["lengths"], initial=0))
            histories = (
                (k, {"values": values[a:b], "iters": iters[a:b]}) for k, a, b in zip(state["keys"], bounds, bounds[1:])
            )
        for k, s in histories:
            buf = self._history[k] = HistoryBuffer(self._max_length)
            buf.load_state_dict(s)
