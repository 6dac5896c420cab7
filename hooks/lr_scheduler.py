"""LRScheduler: any ``torch.optim.lr_scheduler`` stepped per iteration or per epoch."""
from __future__ import annotations

import difflib
import functools
import inspect
import logging
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from launcher.engine.hook import HookBase, Priority, is_number, iterations_per_step
from launcher.engine.errors import ConfigError, not_a_metric

_HORIZON_PARAMS = ("T_max", "total_steps", "total_iters")  # filled in from the run's length when left out
_INF = float("inf")
DEFAULT_MONITOR = "val/loss"  # the metric ReduceLROnPlateau steps on unless told; others warn when given another
logger = logging.getLogger(__name__)


# Arguments torch's schedules accept that make no schedule (eta_min=-1, T_max=-1): what each must be, and the test.
_BOUNDS = {
    "eta_min": ("a number >= 0 (the lowest lr)", lambda v: 0 <= v < _INF),
    "T_max": ("an integer >= 1 (steps or epochs)", lambda v: isinstance(v, int) and v >= 1),
    "T_0": ("an integer >= 1 (steps or epochs)", lambda v: isinstance(v, int) and v >= 1),
    "step_size": ("an integer >= 1 (steps or epochs)", lambda v: isinstance(v, int) and v >= 1),
    "gamma": ("a number greater than zero", lambda v: 0 < v < _INF),
    "total_iters": ("an integer >= 1 (steps or epochs)", lambda v: isinstance(v, int) and v >= 1),
    "max_lr": ("a number greater than zero (the peak lr)", lambda v: 0 < v < _INF),  # 0: trained nothing
    "div_factor": ("a number greater than zero", lambda v: 0 < v < _INF),  # 0: a ZeroDivisionError
    "final_div_factor": ("a number greater than zero", lambda v: 0 < v < _INF),
    "factor": ("a number >= 0", lambda v: 0 <= v < _INF),
    "patience": ("an integer >= 0 (validations)", lambda v: isinstance(v, int) and v >= 0),
    "min_lr": ("a number >= 0 (the lowest lr)", lambda v: 0 <= v < _INF),
}


class LRScheduler(HookBase):
    """Builds ``scheduler(optimizer)`` (a ``_partial_`` factory) and steps it after each optimizer step, or epoch
    with ``by_epoch``; ``ReduceLROnPlateau`` after each validation, on ``monitor``. A horizon the config leaves out
    (``T_max``, ``total_steps``, ``total_iters``) is the run's length; the lr each step used is recorded as ``lr``.
    """

    priority = Priority.HIGH

    def __init__(
        self,
        scheduler: Callable[[torch.optim.Optimizer], Any],
        by_epoch: bool = False,
        monitor: str = DEFAULT_MONITOR,
        warmup_iters: int = 0,
        warmup: str = "linear",
        warmup_factor: float = 0.001,
        log_all_groups: bool = False,
        priority: Optional[int] = None,
    ) -> None:
        super().__init__(priority)
        if warmup not in ("linear", "constant"):
            raise ValueError(f"LRScheduler: warmup should be linear or constant, got {warmup!r}")
        if isinstance(warmup_iters, bool) or not isinstance(warmup_iters, int) or warmup_iters < 0:
            raise ValueError(f"LRScheduler: warmup_iters should be an integer >= 0 (0: no warmup), got {warmup_iters!r}")
        if not is_number(warmup_factor) or not 0 < warmup_factor <= 1:
            raise ValueError(f"LRScheduler: warmup_factor should be a number in (0, 1] (the warmup's first lr as a "
                             f"fraction of the schedule's), got {warmup_factor!r}")
        if warmup_iters and by_epoch:
            raise ValueError("LRScheduler: warmup_iters counts iterations; it needs by_epoch=false")
        self.warmup_iters, self.warmup, self.warmup_factor = warmup_iters, warmup, warmup_factor
        self.log_all_groups = log_all_groups
        if not callable(scheduler):
            raise TypeError(f"LRScheduler: scheduler must be a factory taking the optimizer (a _partial_ config), got {scheduler!r}")
        self._factory = scheduler
        self.by_epoch = by_epoch
        self.monitor = monitor
        self.scheduler: Any = None
        self._plateau = False
        self._unjudged = False  # ReduceLROnPlateau not stepped on the last validation for want of the monitor

    def _target_and_given(self) -> Tuple[Any, Dict[str, Any]]:
        """The schedule's class (or function) and the arguments the config gives it."""
        factory = self._factory
        partial = isinstance(factory, functools.partial)
        return (factory.func, factory.keywords) if partial else (factory, {})

    @property
    def _key(self) -> str:
        return f"hooks.{self.name or 'lr_scheduler'}"
        self._every = 1  # iterations per optimizer step (gradient accumulation), set when the scheduler is built

    def _build(self) -> Any:
        if self.scheduler is None:
            factory = self._factory
            target, given = self._target_and_given()
            schedules = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            if isinstance(target, type) and not issubclass(target, schedules) and not (
                    callable(getattr(target, "step", None)) and callable(getattr(target, "state_dict", None))):
                raise ConfigError(f"{self._key}.scheduler._target_: {target.__module__}.{target.__qualname__} is not a "
                                  f"learning-rate schedule; use torch.optim.lr_scheduler's (CosineAnnealingLR, ...) "
                                  f"or a class with step() and state_dict()")
            try:
                params = inspect.signature(target).parameters
            except (TypeError, ValueError):
                params = {}
            accumulate = self._every = iterations_per_step(self.trainer)
            warmup = -(-self.warmup_iters // accumulate)  # in optimizer steps, as the schedule is stepped
            horizon = self.trainer.max_epochs if self.by_epoch else self.trainer.max_iters // accumulate - warmup
            if warmup and horizon is not None and horizon < 1:
                most = (self.trainer.max_iters // accumulate - 1) * accumulate  # whole optimizer steps, in iterations
                raise ConfigError(f"{self._key}.warmup_iters={self.warmup_iters}: the warmup would last the whole run "
                                  f"({self.trainer.max_iters} iterations); use 0 to {most}")
            for name in _HORIZON_PARAMS:
                if name in params and name not in given:
                    if horizon is None:  # by epoch, over a stream of unknown length
                        raise ConfigError(f"{self._key}.by_epoch: a train stream without __len__ has no count of "
                                          f"epochs for the schedule's {name}; set {self._key}.scheduler.{name}=... or "
                                          f"by_epoch=false")
                    factory = functools.partial(factory, **{name: max(horizon, 1)})
                    break
            for name, value in given.items():
                bound = _BOUNDS.get(name) if name in params else None
                if bound is not None and is_number(value) and not bound[1](value):
                    raise ConfigError(f"{self._key}.scheduler.{name}={value!r}: {name} should be {bound[0]}")
            optimizer = self.trainer.optimizer
            try:
                main = factory(optimizer)
            except (TypeError, ValueError) as err:  # e.g. StepLR without step_size
                missing = re.findall(r"'(\w+)'", str(err).partition("missing")[2])
                key = f"{self._key}.scheduler"
                hint = "; add " + " ".join(f"+{key}.{m}=<value>" for m in missing) if missing else ""
                unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(err))
                if unexpected and isinstance(target, type):
                    from launcher.runs.build import factory_arguments

                    takes = factory_arguments(f"{target.__module__}.{target.__qualname__}", partial=True)
                    close = difflib.get_close_matches(unexpected.group(1), takes, n=1)
                    hint = (f"; did you mean {key}.{close[0]}?" if close else "") + \
                        (f" {target.__qualname__} takes: {', '.join(takes)}" if takes else "")
                raise ConfigError(f"{self._describe()}: {type(err).__name__}: {err}{hint}") from err
            if self.warmup_iters and isinstance(main, torch.optim.lr_scheduler.ReduceLROnPlateau):
                raise ConfigError(f"{self._key}.warmup_iters={self.warmup_iters}: a warmup cannot go in front of "
                                  f"ReduceLROnPlateau (torch's SequentialLR does not take it); set warmup_iters=0 or use "
                                  f"another scheduler")
            if self.warmup_iters:
                sched = torch.optim.lr_scheduler
                kind = sched.LinearLR if self.warmup == "linear" else sched.ConstantLR
                kwargs = {"start_factor": self.warmup_factor} if self.warmup == "linear" else {"factor": self.warmup_factor}
                first = kind(optimizer, total_iters=warmup, **kwargs)
                main = sched.SequentialLR(optimizer, [first, main], milestones=[warmup])
            self.scheduler = main
            self._plateau = isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            if not self._plateau and self.monitor != DEFAULT_MONITOR and getattr(self.trainer, "is_main", True):
                logger.warning("%s.monitor=%s is not used: only ReduceLROnPlateau steps on a metric, and %s "
                               "follows its own schedule", self._key, self.monitor, type(main).__name__)
        return self.scheduler

    def before_train(self) -> None:
        self._build()
        if self._unjudged:  # the run stopped for a wrong monitor: the mended rerun steps on that validation now
            self._unjudged = False
            self.after_val()

    def after_step(self) -> None:
        groups = self.trainer.optimizer.param_groups
        self.trainer.storage.put_scalar("lr", groups[0]["lr"], smoothing_hint=False)
        if self.log_all_groups:
            for i, group in enumerate(groups):
                self.trainer.storage.put_scalar(f"lr/group{i}", group["lr"], smoothing_hint=False)
        # with gradient accumulation, once per optimizer step
        if not self.by_epoch and not self._plateau and (self._every == 1 or (self.trainer.iter + 1) % self._every == 0):
            self._step(self.trainer.iter + 1 < self.trainer.max_iters)

    def after_epoch(self) -> None:
        if self.by_epoch and not self._plateau:
            self._step(self.trainer.iter < self.trainer.max_iters)

    def _step(self, more: bool = True) -> None:
        """Step the schedule; where a step follows (``more``), the lr it set for it must be a finite number >= 0."""
        try:
            self.scheduler.step()
            for group in self.trainer.optimizer.param_groups if more else ():  # the lr of the next step, before it is taken
                lr = group["lr"]
                if lr.__class__ is float and not 0.0 <= lr < _INF:  # a tensor lr (capturable) would sync here
                    raise ValueError(f"it set lr={lr!r} for the next step; an lr is a finite number >= 0")
        except (ZeroDivisionError, ValueError, TypeError, OverflowError) as err:  # torch checks few arguments up front
            resumed = self.trainer.resumed_from
            hint = (f"; its schedule, restored from {resumed}, was made for the earlier length (OneCycleLR cannot run "
                    f"past it): start a new run dir for the longer run" if resumed is not None and resumed.name == "final.pt"
                    else "; check its arguments")
            raise ConfigError(f"{self._describe()}: stepping the schedule failed with {type(err).__name__}: {err}{hint}") from err

    def _describe(self) -> str:
        """``hooks.<name>.scheduler (module.Class, given k=v, ...)``: the config that built the schedule."""
        target, given = self._target_and_given()
        what = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', target)}"
        given_text = f", given {', '.join(f'{k}={v!r}' for k, v in given.items())}" if given else ""
        return f"{self._key}.scheduler ({what}{given_text})"

    def after_val(self) -> None:
        if self._plateau:
            metrics = self.trainer.last_val
            if self.monitor not in metrics:
                self._unjudged = True  # the run stops here for this error (TrainerBase._stop_for)
                raise not_a_metric(f"{self._key}.monitor", self.monitor, metrics)
            self._unjudged = False
            self.scheduler.step(metrics[self.monitor])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # building a scheduler may rewrite the lr the optimizer state just restored: keep the groups' values
        groups = self.trainer.optimizer.param_groups
        restored = [{k: v for k, v in g.items() if k != "params"} for g in groups]
        self._build()
        for group, values in zip(groups, restored):
            group.update(values)
        self.scheduler.load_state_dict(state["scheduler"])
        self._unjudged = bool(state.get("unjudged"))
        saved_every = state.get("every", 1)  # absent: a launcher before 2026-12-04 stepped every iteration
        if saved_every != self._every and not self.by_epoch and not self._plateau and getattr(self.trainer, "is_main", True):
            logger.warning(
                "%s: the checkpoint's schedule was stepped once every %d iteration(s)%s, and this run steps it once every "
                "%d (hooks.optimizer_step.accumulate=%d), so the lr will not end with the run; resume with %s, or use a "
                "new run dir", self._key, saved_every, "" if "every" in state else " (a checkpoint of a launcher before "
                "2026-12-04)", self._every, self._every, f"hooks.optimizer_step.accumulate={saved_every}" if "every" in
                state else "the launcher it started with (run.json's git commit), or accumulate=1 if it started so")

    def state_dict(self) -> Dict[str, Any]:
        return {"scheduler": self._build().state_dict(), "unjudged": self._unjudged, "every": self._every}
