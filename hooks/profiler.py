"""Profiler: ``torch.profiler`` over a window of steps, a Chrome trace in the run dir."""
from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Optional

from launcher.engine.hook import HookBase, Priority

logger = logging.getLogger(__name__)

_HOW_TO_OPEN = "a Chrome trace (JSON): open it in https://ui.perfetto.dev or chrome://tracing"


class Profiler(HookBase):
    """Skips ``wait`` steps, warms up for ``warmup``, records ``active`` steps once (CUDA too when in use) and
    writes ``<run dir>/profiler/<host>_<pid>.<time>.pt.trace.json``. The window counts the steps this run trains;
    a run too short for it says so as it starts."""

    priority = Priority.HIGHEST  # its step() marks the end of each step before other hooks add work

    def __init__(self, wait: int = 5, warmup: int = 2, active: int = 5, record_shapes: bool = False,
                 profile_memory: bool = False, dirname: str = "profiler", priority: Optional[int] = None) -> None:
        super().__init__(priority)
        for key, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"Profiler: {key} should be an integer of at least {least} (steps), got {value!r}")
        self.wait, self.warmup, self.active = wait, warmup, active
        self.record_shapes, self.profile_memory, self.dirname = record_shapes, profile_memory, dirname
        self.profiler: Any = None
        self.trace_path: Optional[Path] = None  # the trace written, once it is
        self._first = 0  # 0-based iteration of the first step recorded
        self._recorded = 0  # steps in the trace
        self._started = False  # profiling in this run (not skipped as too short)

    def before_train(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        t = self.trainer
        self.trace_path, self._recorded, self._started = None, 0, False
        steps, skipped = t.max_iters - t.iter, self.wait + self.warmup
        if steps < skipped + self.active and getattr(t, "rank", 0) == 0:
            logger.warning(
                "hooks.profiler: wait=%d + warmup=%d + active=%d need %d steps and the run has %d%s: %s",
                self.wait, self.warmup, self.active, skipped + self.active, steps,
                f" left (resumed at iteration {t.iter})" if t.iter else "",
                f"the trace will hold {steps - skipped} of the {self.active} active steps" if steps > skipped else
                "no trace will be written (lower hooks.profiler.wait or hooks.profiler.warmup)")
        if steps <= skipped:
            return
        activities = [ProfilerActivity.CPU]
        if t.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._first, self._started = t.iter + skipped, True
        self.profiler = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._write_trace,
            record_shapes=self.record_shapes, profile_memory=self.profile_memory,
        )
        self.profiler.__enter__()

    def after_step(self) -> None:
        profiler = self.profiler
        if profiler is None:
            return
        if self.trainer.iter + 1 >= self.trainer.max_iters:  # the run's last step: the trace ends with it
            self._stop(steps_done=profiler.step_num + 1)  # (a step() would open one more step, after training)
            return
        profiler.step()
        if self.trace_path is not None:  # the window is written: nothing more to record
            self._stop(steps_done=profiler.step_num)

    def after_train(self) -> None:
        if self.profiler is not None:  # the run stopped early
            self._stop(steps_done=self.profiler.step_num)
        if self.trace_path is not None:
            logger.info("hooks.profiler: the trace of iterations %d-%d is %s, %s",
                        self._first + 1, self._first + self._recorded, self.trace_path, _HOW_TO_OPEN)
        elif self._recorded == 0 and getattr(self.trainer, "rank", 0) == 0 and self._started:
            logger.warning("hooks.profiler: no trace written: the run stopped before the profiled window "
                           "(hooks.profiler.wait=%d + warmup=%d steps)", self.wait, self.warmup)

    def _stop(self, steps_done: int) -> None:
        """Stop profiling after ``steps_done`` steps; the trace is written if one of them was recorded."""
        profiler, self.profiler = self.profiler, None
        self._recorded = max(0, min(steps_done - self.wait - self.warmup, self.active))
        if self._recorded == 0:  # only the time after the last step would be in it
            profiler.on_trace_ready = None
        profiler.__exit__(None, None, None)

    def _write_trace(self, profiler: Any) -> None:
        """torch.profiler's ``on_trace_ready``; the file is named as ``tensorboard_trace_handler`` names it."""
        directory = Path(self.trainer.work_dir) / self.dirname
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json"
        profiler.export_chrome_trace(str(path))
        self.trace_path = path
