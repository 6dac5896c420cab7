"""Evaluator: periodic validation (``val/loss``, ``val/accuracy``, whatever the model reports); ObjectiveCheck: the
run's ``objective`` must be among what validation records."""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional

from launcher.engine.hook import HookBase, Priority

logger = logging.getLogger(__name__)


class Evaluator(HookBase):
    """Runs ``trainer.validate()`` every ``period`` epochs (iterations unless ``by_epoch``); with ``at_end`` once
    more after training if the last validation is older than the last step."""

    validates = True

    priority = Priority.NORMAL

    def __init__(self, period: int = 1, by_epoch: bool = True, at_end: bool = True, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if not isinstance(period, int) or period <= 0:
            raise ValueError(f"Evaluator: period should be an integer greater than zero, got {period!r}")
        self.period = period
        self.by_epoch = by_epoch
        self.at_end = at_end
        self._enabled = True  # false when the data has no val set
        self._missed = False  # a validation raised (the run stopped there): the mended rerun does it first
        if by_epoch:  # the trainer skips an event set to None
            self.after_step = None  # type: ignore[assignment]
        else:
            self.after_epoch = None  # type: ignore[assignment]

    def before_train(self) -> None:
        if self.trainer.val_loader is None:
            logger.warning("hooks.evaluator: %s; no validation will run", getattr(self.trainer, "no_val_set", "there is no val set"))
            self._enabled = False
        elif self._missed:  # at the first step boundary, once every hook is ready
            self.trainer.call_at_boundary(self._validate)

    def _validate(self) -> None:
        self._missed = True
        self.trainer.validate()
        self._missed = False

    def after_step(self) -> None:
        if self._enabled and not self.by_epoch and (self.trainer.iter + 1) % self.period == 0:
            self._validate()

    def after_epoch(self) -> None:
        if self._enabled and self.by_epoch and (self.trainer.epoch + 1) % self.period == 0:
            self._validate()

    def state_dict(self) -> Dict[str, Any]:
        return {"missed": self._missed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._missed = bool(state.get("missed"))

    def after_train(self) -> None:
        t = self.trainer
        if not self.at_end or t.status not in ("completed", "stopped") or t.val_loader is None or t.iter == 0:
            return
        fresh = bool(t.last_val) and t.storage.history(next(iter(t.last_val))).latest_iter() >= t.iter - 1
        if not fresh:
            t.validate()
