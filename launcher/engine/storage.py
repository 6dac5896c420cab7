"""EventStorage: the metrics store hooks and writers share during a run. A value put as a 0-d tensor is read
into a float only when a reader asks, so the step never waits on the device to record a number."""
from __future__ import annotations

import bisect
import logging
import math
import sys
from array import array
from itertools import accumulate
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import torch

Scalar = Any  # float, int or a 0-d tensor
Reducer = Callable[[torch.Tensor, int], Optional[torch.Tensor]]  # (values, layout id) -> mean over ranks, or None
logger = logging.getLogger(__name__)


def to_le_bytes(values: array) -> bytes:
    """An ``array``'s bytes in little-endian order, so a checkpoint reads the same on any machine."""
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def from_le_bytes(typecode: str, data: Any) -> array:
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def unpack_le(packed: Any, typecode: str) -> List[Any]:
    """The values of :func:`to_le_bytes`'s bytes (or of an older checkpoint's tensor or sequence)."""
    if isinstance(packed, (bytes, bytearray, memoryview)):
        return from_le_bytes(typecode, packed).tolist()
    return packed.tolist() if isinstance(packed, torch.Tensor) else list(packed)


class HistoryBuffer:
    """The last ``max_length`` values of one scalar with their iterations, in arrays appended to until twice
    ``max_length`` and then cut back. A tensor waits aside (its slot NaN) until a reader asks."""

    __slots__ = ("_max", "_limit", "_values", "_iters", "_tensors", "_synced")

    def __init__(self, max_length: int = 1000) -> None:
        self._max = max_length
        self._limit = 2 * max_length
        self._values = array("d")
        self._iters = array("q")
        self._tensors: List[Tuple[int, torch.Tensor]] = []  # (slot in _values, tensor) not read yet
        self._synced = 0  # slot of the first value not yet averaged over the ranks (DDP)

    def update(self, value: Scalar, iteration: int) -> None:
        """Append ``value`` (:meth:`EventStorage.put_scalar` appends plain floats itself)."""
        values = self._values
        if len(values) >= self._limit:
            self._trim()
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:  # refused now, where the caller is
                raise TypeError(f"a tensor of shape {list(value.shape)}")
            self._tensors.append((len(values), value.detach()))
            value = math.nan
        values.append(value)  # TypeError for anything that is not a number
        self._iters.append(iteration)

    def _trim(self) -> None:
        cut = len(self._values) - self._max
        del self._values[:cut]
        del self._iters[:cut]
        self._synced = max(self._synced - cut, 0)
        if self._tensors:
            self._tensors = [(slot - cut, t) for slot, t in self._tensors if slot >= cut]

    def _start(self) -> int:  # index of the oldest kept value
        return max(len(self._values) - self._max, 0)

    def _materialize(self) -> None:
        """Read the tensors put since the last read into their slots (one host transfer)."""
        if not self._tensors:
            return
        pending, self._tensors = self._tensors, []
        tensors = [t for _, t in pending]
        if tensors[0].device.type == "cpu":  # reading each costs less than a stack
            floats = [t.item() for t in tensors]
        else:
            try:
                floats = torch.stack(tensors).reshape(-1).double().cpu().tolist()
            except RuntimeError:
                floats = [float(t.reshape(())) for t in tensors]
        values = self._values
        for (slot, _), f in zip(pending, floats):
            values[slot] = f

    def has_unsynced(self) -> bool:
        return self._synced < len(self._values)

    def take_unsynced(self) -> List[float]:
        """The newest values not yet averaged over the ranks (the kept ones), as floats."""
        self._materialize()
        return self._values[max(self._synced, self._start()):].tolist()

    def put_synced(self, values: List[float]) -> None:
        """Replace the newest ``len(values)`` values with their average over the ranks."""
        n = len(self._values)
        self._values[n - len(values):] = array("d", values)
        self.mark_synced()

    def mark_synced(self) -> None:
        self._synced = len(self._values)

    def values(self) -> List[Tuple[float, int]]:
        """All kept ``(value, iteration)`` pairs, oldest first."""
        self._materialize()
        start = self._start()
        return list(zip(self._values[start:].tolist(), self._iters[start:].tolist()))

    def latest(self) -> float:
        self._materialize()
        return self._values[-1]

    def latest_iter(self) -> int:
        return self._iters[-1]

    def _window(self, window: int) -> List[float]:  # the newest ``window`` values, newest first
        self._materialize()
        vals = self._values[max(self._start(), len(self._values) - window):].tolist()
        vals.reverse()
        return vals

    def median(self, window: int) -> float:
        """The median of the last ``window`` values; NaN when one of them is (sorting cannot place a NaN)."""
        vals = self._window(window)
        if any(map(math.isnan, vals)):
            return math.nan
        vals = sorted(vals)
        mid = len(vals) // 2
        return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2

    def avg(self, window: int) -> float:
        vals = self._window(window)
        return sum(vals) / len(vals)

    def __len__(self) -> int:
        return min(len(self._values), self._max)

    def packed(self) -> Tuple[array, array]:
        """The kept values and iterations as arrays (copies), for :meth:`EventStorage.state_dict`."""
        self._materialize()
        start = self._start()
        return self._values[start:], self._iters[start:]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``{"values", "iters"}`` (lists or tensors)."""
        values, iters = state["values"], state["iters"]
        values = values.tolist() if isinstance(values, torch.Tensor) else values
        iters = iters.tolist() if isinstance(iters, torch.Tensor) else iters
        self._values = array("d", values[-self._max:])
        self._iters = array("q", iters[-self._max:])
        self._tensors = []
        self._synced = len(self._values)


class EventStorage:
    """Scalars keyed like ``train/loss``, ``val/accuracy`` or ``lr``, with their history. The trainer sets ``iter`` and
    ``epoch`` before each step: a value put is keyed by the step it belongs to.

    Under DDP ``reduce`` averages the values put since the last read over the ranks (every rank reads at the same
    points: writers at their period, the end), and ``gather`` (all_gather_object) finds the scalars every rank has
    when some rank recorded others too.
    """

    def __init__(self, start_iter: int = 0, max_length: int = 1000, reduce: Optional[Reducer] = None,
                 gather: Optional[Callable[[Any], List[Any]]] = None) -> None:
        self.iter = start_iter
        self._reduce = reduce
        self._gather = gather
        self._warned = False
        self.epoch = 0
        self._epoch_starts: List[Tuple[int, int]] = []  # (first step, epoch) of each epoch begun
        self._max_length = max_length
        self._history: Dict[str, HistoryBuffer] = {}
        self._smoothing_hints: Dict[str, bool] = {}
        self._puts = 0  # bumps on every put: several writers reading at one step share one summary
        self._summary: Tuple[int, int, Dict[str, Tuple[float, int]]] = (-1, 0, {})

    def begin_epoch(self, epoch: int, iteration: int) -> None:
        """The trainer begins ``epoch`` at step ``iteration``: values put from now on are of that epoch."""
        self.epoch = epoch
        if not self._epoch_starts or self._epoch_starts[-1] != (iteration, epoch):
            self._epoch_starts.append((iteration, epoch))

    def epoch_of(self, iteration: int) -> int:
        """The epoch step ``iteration`` belongs to (a value may be written after its epoch ended); else :attr:`epoch`."""
        i = bisect.bisect_right(self._epoch_starts, (iteration, sys.maxsize)) - 1
        return self._epoch_starts[i][1] if i >= 0 else self.epoch

    def put_scalar(self, name: str, value: Scalar, smoothing_hint: bool = True) -> None:
        """Record ``value`` for ``name`` at the current iteration. ``smoothing_hint``: whether writers show a windowed
        median (noisy per-step losses) rather than the latest value (val metrics); a key keeps its first hint."""
        buf = self._history.get(name)
        if buf is None:
            buf = self._history[name] = HistoryBuffer(self._max_length)
            self._smoothing_hints[name] = bool(smoothing_hint)
        elif smoothing_hint != self._smoothing_hints[name]:
            raise ValueError(f"put_scalar({name!r}, ...): smoothing_hint={bool(smoothing_hint)}, but {name!r} was put "
                             f"with smoothing_hint={self._smoothing_hints[name]} before; use one hint, or another name")
        values = buf._values
        if value.__class__ is float and len(values) < buf._limit:
            # the common case, several times a step: appended here, without HistoryBuffer.update's call and checks
            values.append(value)
            buf._iters.append(self.iter)
        else:
            try:
                buf.update(value, self.iter)
            except TypeError as err:
                if not len(values):  # not recorded: no empty history for the writers to read
                    del self._history[name], self._smoothing_hints[name]
                what = str(err) if isinstance(value, torch.Tensor) else f"a {type(value).__name__} ({value!r:.80})"
                raise TypeError(f"put_scalar({name!r}, ...): a scalar is a number or a one-element tensor, not {what}") from None
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
        """Average every value put since the last call over the ranks (DDP only): a collective, which every rank must
        reach at the same point (the built-in writers read on every rank and write on rank 0)."""
        if self._reduce is None:
            return
        keys = [k for k in sorted(self._history) if self._history[k].has_unsynced()]
        if not keys:
            return
        chunks = [self._history[k].take_unsynced() for k in keys]
        flat = torch.tensor([v for chunk in chunks for v in chunk], dtype=torch.float64)
        from launcher.engine.distributed import layout_id

        layout = [(k, len(c)) for k, c in zip(keys, chunks)]
        averaged = self._reduce(flat, layout_id(layout))
        if averaged is None:  # the ranks recorded different scalars (every rank is here): average those all have
            common = set(layout)
            if self._gather is not None:
                for other in self._gather(layout):
                    common &= {tuple(entry) for entry in other}
            else:
                common = set()
            local = [k for k, n in layout if (k, n) not in common]
            if local and not self._warned:
                logger.warning("The ranks recorded different scalars since the last write (%s): logging this rank's own "
                               "values of those; the others are averaged over the ranks", ", ".join(local))
                self._warned = True
            for k in local:
                self._history[k].mark_synced()
            shared = [(k, c) for k, c in zip(keys, chunks) if (k, len(c)) in common]  # the same list on every rank
            averaged = self._reduce(torch.tensor([v for _, c in shared for v in c], dtype=torch.float64),
                                    layout_id([(k, len(c)) for k, c in shared])) if shared else None
            if averaged is None:
                for k, _ in shared:
                    self._history[k].mark_synced()
                return
            keys, chunks = [k for k, _ in shared], [c for _, c in shared]
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
        """Counters and every history, packed into little-endian bytes ``values`` (float64) and ``iters`` (int64) cut by
        ``lengths``: plain types, cheap for ``torch.save`` (a tensor costs tens of µs) and read with ``weights_only``."""
        keys = list(self._history)
        values, iters, lengths = array("d"), array("q"), []
        oldest = self.iter
        for k in keys:
            vals, its = self._history[k].packed()
            values.extend(vals)
            iters.extend(its)
            lengths.append(len(vals))
            oldest = min(oldest, its[0]) if its else oldest
        # the epoch starts from the one holding the oldest value still kept
        first = max(bisect.bisect_right(self._epoch_starts, (oldest, sys.maxsize)) - 1, 0)
        return {
            "iter": self.iter,
            "epoch": self.epoch,
            "epoch_starts": [n for start in self._epoch_starts[first:] for n in start],  # a few ints: (step, epoch) pairs
            "keys": keys,
            "lengths": lengths,
            "values": to_le_bytes(values),
            "iters": to_le_bytes(iters),
            "smoothing_hints": dict(self._smoothing_hints),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.iter = state["iter"]
        self.epoch = state["epoch"]
        starts = list(state.get("epoch_starts", []))
        self._epoch_starts = list(zip(starts[::2], starts[1::2]))
        self._smoothing_hints = dict(state["smoothing_hints"])
        self._summary = (-1, 0, {})
        self._history = {}
        if "history" in state:  # an older checkpoint's, not packed
            histories = state["history"].items()
        else:
            values, iters = unpack_le(state["values"], "d"), unpack_le(state["iters"], "q")
            bounds = list(accumulate(state["lengths"], initial=0))
            histories = (
                (k, {"values": values[a:b], "iters": iters[a:b]}) for k, a, b in zip(state["keys"], bounds, bounds[1:])
            )
        for k, s in histories:
            buf = self._history[k] = HistoryBuffer(self._max_length)
            buf.load_state_dict(s)
