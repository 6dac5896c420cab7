"""EventStorage: the metrics store that hooks and writers share during one training run.

Values may be put as 0-d tensors: they are kept as they are and turned into floats only
when a reader asks (a writer at its period), so the training step never waits on the
device just to record a number.
"""
from __future__ import annotations

import statistics
from collections import deque
from itertools import islice
from typing import Any, Deque, Dict, Iterable, List, Mapping, Tuple

import torch

Scalar = Any  # float, int or a 0-d tensor


class HistoryBuffer:
    """The last ``max_length`` values of one scalar, each with the iteration it was put at."""

    __slots__ = ("_values", "_iters", "_pending")

    def __init__(self, max_length: int = 1000) -> None:
        self._values: Deque[Scalar] = deque(maxlen=max_length)
        self._iters: Deque[int] = deque(maxlen=max_length)
        self._pending = 0  # how many of the newest values may still be tensors

    def update(self, value: Scalar, iteration: int) -> None:
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
            try:  # one stack and one transfer; values of one key share a dtype and device
                floats = torch.stack(tensors).reshape(-1).double().cpu().tolist()
            except RuntimeError:
                floats = [float(t.reshape(())) for t in tensors]
            for i, f in zip(slots, floats):
                tail[i] = f
        self._values.extend(tail)
        self._pending = 0

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
        return float(statistics.median(self._window(window)))

    def avg(self, window: int) -> float:
        vals = self._window(window)
        return sum(vals) / len(vals)

    def __len__(self) -> int:
        return len(self._values)

    def state_dict(self) -> Dict[str, Any]:
        # Two tensors rather than lists of numbers: torch.save pickles a list item by item.
        self._materialize()
        return {
            "values": torch.tensor([float(v) for v in self._values], dtype=torch.float64),
            "iters": torch.tensor(list(self._iters), dtype=torch.int64),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._values = deque(torch.as_tensor(state["values"], dtype=torch.float64).tolist(), maxlen=self._values.maxlen)
        self._iters = deque(torch.as_tensor(state["iters"], dtype=torch.int64).tolist(), maxlen=self._iters.maxlen)
        self._pending = 0


class EventStorage:
    """Scalars keyed like ``train/loss``, ``val/accuracy`` or ``lr``, with their history.

    The trainer sets ``iter`` and ``epoch`` before each step, so every hook that reads or
    writes the storage during a step sees the trainer's iteration.
    """

    def __init__(self, start_iter: int = 0, max_length: int = 1000) -> None:
        self.iter = start_iter
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

    def latest(self) -> Dict[str, Tuple[float, int]]:
        """``{name: (latest value, iteration it was put at)}`` for every key."""
        return {k: (b.latest(), b.latest_iter()) for k, b in self._history.items()}

    def latest_with_smoothing_hint(self, window: int = 20) -> Dict[str, Tuple[float, int]]:
        """Like :meth:`latest`, but keys put with ``smoothing_hint`` report their windowed median."""
        puts, cached_window, summary = self._summary
        if puts != self._puts or cached_window != window:
            summary = {
                k: (b.median(window) if self._smoothing_hints[k] else b.latest(), b.latest_iter())
                for k, b in self._history.items()
            }
            self._summary = (self._puts, window, summary)
        return dict(summary)

    def state_dict(self) -> Dict[str, Any]:
        return {
            "iter": self.iter,
            "epoch": self.epoch,
            "history": {k: b.state_dict() for k, b in self._history.items()},
            "smoothing_hints": dict(self._smoothing_hints),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.iter = state["iter"]
        self.epoch = state["epoch"]
        self._smoothing_hints = dict(state["smoothing_hints"])
        self._summary = (-1, 0, {})
        self._history = {}
        for k, s in state["history"].items():
            buf = self._history[k] = HistoryBuffer(self._max_length)
            buf.load_state_dict(s)
