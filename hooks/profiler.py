"""Profiler: ``torch.profiler`` over a window of steps, traces in the run dir for TensorBoard."""
from __future__ import annotations

from typing import Any, Optional

import torch

from hooks.base import HookBase, Priority


class Profiler(HookBase):
    """Skips ``wait`` steps, warms up for ``warmup``, records ``active`` steps (once), and writes the
    trace to ``<run dir>/profiler/`` (open it with TensorBoard's profiler plugin). CUDA activity is
    recorded when CUDA is in use."""

    priority = Priority.HIGHEST  # its step() marks the end of each step before other hooks add work

    def __init__(self, wait: int = 5, warmup: int = 2, active: int = 5, record_shapes: bool = False,
                 profile_memory: bool = False, dirname: str = "profiler", priority: Optional[int] = None) -> None:
        super().__init__(priority)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.record_shapes, self.profile_memory, self.dirname = record_shapes, profile_memory, dirname
        self.profiler: Any = None

    def before_train(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU]
        if self.trainer.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self.profiler = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=tensorboard_trace_handler(str(self.trainer.work_dir / self.dirname)),
            record_shapes=self.record_shapes, profile_memory=self.profile_memory,
        )
        self.profiler.__enter__()

    def after_step(self) -> None:
        self.profiler.step()

    def after_train(self) -> None:
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            self.profiler = None
