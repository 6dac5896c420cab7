"""ProgressBar: a tqdm bar with epoch, iteration, ETA and the latest loss, for people at a terminal."""
from __future__ import annotations

import sys
from typing import Any, Optional

from hooks.base import HookBase, Priority


class ProgressBar(HookBase):
    """Redrawn at most ``refresh_per_second`` times a second. Off when stdout is not a terminal
    (logs, SLURM output files) unless ``force``, and on every rank but 0."""

    priority = Priority.LOWER

    def __init__(self, refresh_per_second: float = 4.0, force: bool = False, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        self.refresh_per_second = refresh_per_second
        self.force = force
        self.bar: Any = None

    def before_train(self) -> None:
        t = self.trainer
        if getattr(t, "rank", 0) != 0 or not (self.force or sys.stdout.isatty()):
            return
        from tqdm import tqdm  # imported here: only a terminal run needs it

        self.bar = tqdm(total=t.max_iters, initial=t.iter, unit="it", dynamic_ncols=True,
                        mininterval=1.0 / self.refresh_per_second, file=sys.stdout)

    def after_step(self) -> None:
        bar = self.bar
        if bar is None:
            return
        bar.update(1)
        if bar.n == bar.total or bar.last_print_n == bar.n:  # tqdm redrew just now: refresh the text too
            t = self.trainer
            loss = t.storage.history("train/loss").latest() if t.storage.has("train/loss") else float("nan")
            bar.set_description(f"epoch {t.epoch + 1}/{t.max_epochs}", refresh=False)
            bar.set_postfix(loss=f"{loss:.4g}", refresh=False)

    def after_train(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
