"""PeriodicCheckpointer: the trainer's whole state, every N epochs or iterations, and at the end."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from hooks.base import HookBase, Priority
from launcher.checkpoint import save_checkpoint

logger = logging.getLogger(__name__)


class PeriodicCheckpointer(HookBase):
    """Saves ``trainer.state_dict()`` (model, optimizer, counters, storage, every hook's state).

    Periodic files are ``checkpoints/epoch_NNNN.pt`` or ``checkpoints/iter_NNNNNNN.pt``; the
    newest ``keep_last`` are kept (0 keeps all). A run that completes (or stops early) also
    writes ``checkpoints/final.pt``. ``checkpoints/last`` names the newest file.
    """

    priority = Priority.VERY_LOW

    def __init__(
        self,
        period: int = 1,
        by_epoch: bool = True,
        keep_last: int = 3,
        save_final: bool = True,
        dirname: str = "checkpoints",
        priority: Optional[int] = None,
    ) -> None:
        super().__init__(priority)
        if not isinstance(period, int) or period <= 0:
            raise ValueError(f"PeriodicCheckpointer: period should be an integer greater than zero, got {period!r}")
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"PeriodicCheckpointer: keep_last should be an integer >= 0 (0 keeps all), got {keep_last!r}")
        self.period = period
        self.by_epoch = by_epoch
        self.keep_last = keep_last
        self.save_final = save_final
        self.dirname = dirname
        self._saved: List[str] = []

    @property
    def directory(self) -> Path:
        return self.trainer.work_dir / self.dirname

    def save(self, name: str) -> Path:
        path = save_checkpoint(self.trainer.state_dict(), self.directory / name)
        logger.log(logging.INFO if name == "final.pt" else logging.DEBUG, "Saved checkpoint %s", path)
        return path

    def _save_periodic(self, name: str) -> None:
        self.save(name)
        if name in self._saved:
            self._saved.remove(name)
        self._saved.append(name)
        while self.keep_last and len(self._saved) > self.keep_last:
            (self.directory / self._saved.pop(0)).unlink(missing_ok=True)

    def after_step(self) -> None:
        if not self.by_epoch and (self.trainer.iter + 1) % self.period == 0:
            self._save_periodic(f"iter_{self.trainer.iter + 1:07d}.pt")

    def after_epoch(self) -> None:
        if self.by_epoch and (self.trainer.epoch + 1) % self.period == 0:
            self._save_periodic(f"epoch_{self.trainer.epoch + 1:04d}.pt")

    def after_train(self) -> None:
        if self.save_final and self.trainer.status in ("completed", "stopped"):
            self.save("final.pt")

    def state_dict(self) -> Dict[str, Any]:
        return {"saved": list(self._saved)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._saved = list(state["saved"])
