"""EarlyStopping: stop when a validation metric stops improving."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

from launcher.engine.hook import HookBase, Priority, is_number
from launcher.engine.errors import not_a_metric


class EarlyStopping(HookBase):
    """After ``patience`` validations in which ``monitor`` did not beat the best by more than ``min_delta``
    (``mode`` min or max), stop at the next step boundary: the run ends ``stopped`` with ``final.pt``. With
    ``check_finite`` a NaN or infinite ``monitor`` stops it at once.
    """

    priority = Priority.BELOW_NORMAL  # after the Evaluator (50) has recorded val/*

    def __init__(self, monitor: str = "val/loss", mode: str = "min", patience: int = 5, min_delta: float = 0.0,
                 check_finite: bool = True, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping: mode should be min or max, got {mode!r}")
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(f"EarlyStopping: patience should be an integer >= 1, got {patience!r}")
        if not is_number(min_delta) or not 0 <= min_delta < math.inf:
            raise ValueError(f"EarlyStopping: min_delta should be a number >= 0 (how much a validation must beat "
                             f"the best by), got {min_delta!r}")
        if not isinstance(check_finite, bool):
            raise ValueError(f"EarlyStopping: check_finite should be true or false, got {check_finite!r}")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.check_finite = check_finite
        self.best = math.inf if mode == "min" else -math.inf
        self.best_iter = -1
        self.bad = 0
        # a validation not judged for want of the monitor (the run stopped for that): the mended rerun judges it first
        self.unjudged: Optional[int] = None
        self.stopped = False  # this hook stopped the run while it trained
        self.not_finite: Optional[List[float]] = None  # [value, steps] of the validation that stopped it

    def before_train(self) -> None:
        # resumed after the decision to stop: stop again at once, unless the run was lengthened
        if self.unjudged is not None:
            self._judge(self.unjudged)
        elif self.stopped and not self.trainer.lengthened:
            self._stop()
        else:
            self.stopped = False
            self.not_finite = None

    def _stop(self) -> None:
        # a decision at the run's end (after_train) stops nothing: the run has completed
        self.stopped = self.trainer.status == "running"
        if self.not_finite is not None:
            value, steps = self.not_finite
            self.trainer.request_stop(f"early stopping: {self.monitor} is {value} in the validation after "
                                      f"{self._after(int(steps))} (not finite; hooks.{self.name or 'early_stopping'}."
                                      f"check_finite=false counts it towards patience instead)")
            return
        if self.best_iter < 0:
            self.trainer.request_stop(f"early stopping: no validation gave {self.monitor} a value to improve on (NaN or "
                                      f"infinite each time) in {self.bad} validations")
            return
        where = f"{self._after(self.best_iter)}: iter {max(self.best_iter - 1, 0)} in metrics.jsonl"
        self.trainer.request_stop(f"early stopping: {self.monitor} did not improve on {self.best:.6g} (validated after "
                                  f"{where}) by more than {self.min_delta} for {self.bad} validations")

    def _after(self, steps: int) -> str:
        """``epoch 2/20, 8 steps`` for a validation after ``steps`` steps (the epoch where the run counts in epochs)."""
        after = self.trainer.epochs_in(steps)
        if after is not None and self.trainer.LENGTH_KEY == "max_epochs":  # epochs are what the run counts in
            return f"epoch {after}, {steps} steps"
        return f"{steps} steps"

    def after_val(self) -> None:
        self._judge(self.trainer.steps_done)

    def _judge(self, iteration: int) -> None:
        metrics = self.trainer.last_val
        if self.monitor not in metrics:
            self.unjudged = iteration
            raise not_a_metric(f"hooks.{self.name or 'early_stopping'}.monitor", self.monitor, metrics)
        self.unjudged = None
        value = metrics[self.monitor]
        if self.check_finite and not math.isfinite(value):
            self.not_finite = [float(value), iteration]
            self._stop()
            return
        better = value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        if better:
            self.best, self.best_iter, self.bad = value, iteration, 0
            return
        self.bad += 1
        if self.bad >= self.patience:
            self._stop()

    def state_dict(self) -> Dict[str, Any]:
        return {"best": self.best, "best_iter": self.best_iter, "bad": self.bad, "unjudged": self.unjudged,
                "stopped": self.stopped, "not_finite": self.not_finite}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_iter, self.bad = state["best"], state["best_iter"], state["bad"]
        self.unjudged = state.get("unjudged")
        self.stopped = bool(state.get("stopped", self.bad >= self.patience))  # older checkpoints lack it
        self.not_finite = state.get("not_finite")
