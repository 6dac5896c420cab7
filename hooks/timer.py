"""IterationTimer: how long each step and the whole run take."""
from __future__ import annotations

import datetime
import logging
import time
from typing import Optional

from launcher.engine.hook import HookBase, Priority

logger = logging.getLogger(__name__)


class IterationTimer(HookBase):
    """Records ``time`` (seconds per step, data loading included) and ``data_time`` (waiting for the batch) each
    step; at the end logs the training time and speed (without the first ``warmup`` steps)."""

    priority = Priority.VERY_HIGH

    def __init__(self, warmup: int = 3, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"IterationTimer: warmup should be an integer >= 0 (the first steps left out of the "
                             f"speed), got {warmup!r}")
        self.warmup = warmup
        self._step_start = 0.0
        self._train_start = 0.0
        self._steps = 0
        self._timed_steps = 0
        self._timed_seconds = 0.0

    def before_train(self) -> None:
        self._train_start = time.perf_counter()

    def before_step(self) -> None:
        self._step_start = time.perf_counter()

    def after_step(self) -> None:
        seconds = time.perf_counter() - self._step_start
        trainer = self.trainer
        storage = trainer.storage
        storage.put_scalar("time", seconds)
        storage.put_scalar("data_time", trainer.data_time)
        self._steps += 1
        if self._steps > self.warmup:
            self._timed_steps += 1
            self._timed_seconds += seconds

    def after_train(self) -> None:
        total = time.perf_counter() - self._train_start
        if self._timed_steps:
            line = ("Trained %d steps in %s (%.4f s/step over the last %d steps)", self._steps,
                    datetime.timedelta(seconds=int(total)) if total >= 60 else f"{total:.1f} s",
                    self._timed_seconds / self._timed_steps, self._timed_steps)
            self.trainer.call_at_boundary(lambda: logger.info(*line))
