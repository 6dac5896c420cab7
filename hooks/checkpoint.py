"""PeriodicCheckpointer: the trainer's whole state, every N epochs or iterations, and at the end."""
from __future__ import annotations

import logging
import pickle
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from launcher.engine import distributed
from launcher.engine.hook import HookBase, Priority, is_number
from launcher.engine.checkpoint import TRUST_RISK, BackgroundWriter, objects_beyond_weights, unsaveable_hook_state

logger = logging.getLogger(__name__)


class PeriodicCheckpointer(HookBase):
    """Saves ``trainer.state_dict()`` (model, optimizer, counters, RNG, storage, every hook's state).

    Periodic files ``checkpoints/epoch_NNNN.pt`` or ``iter_NNNNNNN.pt`` are taken at the step boundary after each
    period and written on a background thread; one due under ``min_interval_secs`` after the last is skipped
    (except the run's last; 0 saves every period). The newest ``keep_last`` are kept (0: all). A run that ends
    writes ``final.pt``; one interrupted by a signal writes ``iter_NNNNNNN.pt`` to resume from, outside the
    rotation. ``checkpoints/last`` names the newest file (docs/resume.md).
    """

    saves_checkpoints = True

    priority = Priority.VERY_LOW

    def __init__(
        self,
        period: int = 1,
        by_epoch: bool = True,
        keep_last: int = 3,
        save_final: bool = True,
        min_interval_secs: float = 10.0,
        priority: Optional[int] = None,
    ) -> None:
        super().__init__(priority)
        if not isinstance(period, int) or period <= 0:
            raise ValueError(f"PeriodicCheckpointer: period should be an integer greater than zero, got {period!r}")
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"PeriodicCheckpointer: keep_last should be an integer >= 0 (0 keeps all), got {keep_last!r}")
        if not is_number(min_interval_secs) or not 0 <= min_interval_secs < float("inf"):
            raise ValueError(f"PeriodicCheckpointer: min_interval_secs should be a number of seconds >= 0 (0 saves every "
                             f"period), got {min_interval_secs!r}")
        self.min_interval_secs = float(min_interval_secs)
        self._last_save = 0.0  # time.monotonic() of the last periodic save, or of the start of training
        self._skip_said = False
        self.period = period
        self.by_epoch = by_epoch
        self.keep_last = keep_last
        self.save_final = save_final
        self._saved: List[str] = []  # periodic checkpoints on disk, oldest first
        self._interrupt_file: Optional[str] = None  # the interrupt checkpoint this run resumed from
        self._strays: List[str] = []  # periodic checkpoints out of the rotation, to remove
        self._writer = BackgroundWriter()
        self._objects_said: set = set()  # parts of the state said to hold Python objects
        if by_epoch:  # the trainer skips an event set to None
            self.after_step = None  # type: ignore[assignment]
        else:
            self.after_epoch = None  # type: ignore[assignment]

    def save(self, name: str, background: bool = False, then_remove: Sequence[str] = (), say: bool = True) -> Path:
        directory = self.trainer.checkpoint_dir
        state = self.trainer.state_dict()  # on every rank: under DDP it gathers the ranks' random states
        if not self.trainer.is_main:
            return directory / name
        self._say_objects(state)
        try:
            path = self._writer.write(state, directory / name, [directory / n for n in then_remove], background)
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            unsaveable = unsaveable_hook_state(state["hooks"], self.trainer.hooks)  # which hook: not in the traceback
            if unsaveable is None:
                raise
            raise unsaveable from err
        logger.log(logging.DEBUG if background or not say else logging.INFO, "Saved checkpoint %s", path)
        return path

    def _say_objects(self, state: Mapping[str, Any]) -> None:
        """Warn, once for each, of a part of the state holding Python objects, which ``weights_only`` loading refuses."""
        if not objects_beyond_weights(state):
            return
        hooks = {h.name: h for h in self.trainer.hooks}
        parts = [(f"hook {n} ({type(hooks[n]).__module__}.{type(hooks[n]).__qualname__})" if n in hooks else f"hook {n}", v)
                 for n, v in state.get("hooks", {}).items()]
        parts += [(f"the trainer's {key}", value) for key, value in state.items() if key != "hooks"]
        for what, part in parts:
            objects = [] if what in self._objects_said else objects_beyond_weights(part)
            if objects:
                self._objects_said.add(what)
                logger.warning("The state of %s holds Python objects (%s): resuming will need trainer.trust_checkpoint=true "
                               "(%s); return plain values from its state_dict()", what, ", ".join(objects[:5]), TRUST_RISK)

    def _due(self, last: bool) -> bool:
        """Whether the periodic checkpoint due now is saved: not while the last one is under ``min_interval_secs``
        old, unless it is the run's last. Under DDP any rank past it saves on all (the save gathers from each)."""
        if not self.min_interval_secs or last:
            return True
        due = time.monotonic() - self._last_save >= self.min_interval_secs
        if self.trainer.dist is not None:
            due = bool(distributed.max_int(int(due)))
        if not due and not self._skip_said and self.trainer.is_main:
            self._skip_said = True
            every = ("epoch" if self.period == 1 else f"{self.period} epochs") if self.by_epoch else \
                ("iteration" if self.period == 1 else f"{self.period} iterations")
            logger.info("Periodic checkpoints: at most one every %g s, and one at the end (hooks.%s.min_interval_secs=0 "
                        "saves every %s)", self.min_interval_secs, self.name or "checkpointer", every)
        return due

    def _save_periodic(self, name: str, background: bool = True, last: bool = False) -> Path:
        if not self._due(last):
            return self.trainer.checkpoint_dir / name
        self._last_save = time.monotonic()
        if name in self._saved:
            self._saved.remove(name)
        self._saved.append(name)  # before saving, so the saved state knows of its own file
        expired = self._saved[: -self.keep_last] if self.keep_last else []
        del self._saved[: len(expired)]
        strays, self._strays = [n for n in self._strays if n != name], []
        return self.save(name, background, then_remove=expired + strays + self._take_interrupt_file(name))

    def _find_strays(self) -> List[str]:
        """Periodic checkpoints older than the rotation's oldest that it no longer lists (a kill between writing one
        and removing the expired one): removed with the next periodic checkpoint."""
        pattern = re.compile(r"epoch_(\d{4,})\.pt" if self.by_epoch else r"iter_(\d{7,})\.pt")
        kept = [int(m.group(1)) for m in map(pattern.fullmatch, self._saved) if m]
        if not self.keep_last or not kept:
            return []
        resumed = Path(self.trainer.resumed_from).name if self.trainer.resumed_from else None
        try:
            names = [p.name for p in Path(self.trainer.checkpoint_dir).iterdir()]
        except OSError:
            return []
        return sorted(n for n, m in zip(names, map(pattern.fullmatch, names)) if m and int(m.group(1)) < min(kept)
                      and n not in self._saved and n != resumed and n != self._interrupt_file)

    def _take_interrupt_file(self, saving: str) -> List[str]:
        """The interrupt checkpoint resumed from, to remove once a newer checkpoint is safe."""
        name, self._interrupt_file = self._interrupt_file, None
        return [name] if name and name != saving and name not in self._saved else []

    def before_train(self) -> None:
        self._writer.rerun_hint = self.trainer.rerun_hint
        if self.trainer.is_main:  # a checkpoint dir that refuses files stops the run now
            self._writer.prepare(self.trainer.checkpoint_dir)
        # and so does a user hook whose state a checkpoint cannot hold (asked on every rank, as a save asks)
        states = {}
        for hook in self.trainer.hooks:
            if type(hook).__module__.startswith("launcher.hooks.") or type(hook).state_dict is HookBase.state_dict:
                continue
            try:
                states[hook.name] = hook.state_dict()
            except Exception:  # noqa: BLE001 -- not ready before training: its first save asks it again
                continue
        unsaveable = unsaveable_hook_state(states, self.trainer.hooks)
        if unsaveable is not None:
            raise unsaveable
        # an interrupt checkpoint is outside the rotation: it goes once the next checkpoint is written
        resumed = self.trainer.resumed_from
        if resumed is not None and Path(resumed).parent == Path(self.trainer.checkpoint_dir) and \
                Path(resumed).name.startswith("iter_") and Path(resumed).name not in self._saved:
            self._interrupt_file = Path(resumed).name
        if resumed is not None and self.trainer.is_main:
            self._strays = self._find_strays()
        self._last_save = time.monotonic()

    def after_step(self) -> None:
        if not self.by_epoch and (self.trainer.iter + 1) % self.period == 0:
            name = f"iter_{self.trainer.iter + 1:07d}.pt"
            last = self.trainer.iter + 1 == self.trainer.max_iters
            self.trainer.call_at_boundary(lambda: self._save_periodic(name, last=last))

    def after_epoch(self) -> None:
        if self.by_epoch and (self.trainer.epoch + 1) % self.period == 0:
            name = f"epoch_{self.trainer.epoch + 1:04d}.pt"
            last = self.trainer.epoch + 1 == self.trainer.max_epochs
            self.trainer.call_at_boundary(lambda: self._save_periodic(name, last=last))

    def after_train(self) -> None:
        status = self.trainer.status
        if self.save_final and status in ("completed", "stopped"):
            self.save("final.pt", then_remove=self._take_interrupt_file("final.pt"))
        elif status == "interrupted":
            name = f"iter_{self.trainer.iter:07d}.pt"
            resumable = getattr(self.trainer, "stopping_for", None) is None  # else: mend the config first
            path = self.save(name, then_remove=self._take_interrupt_file(name), say=not resumable)
            if self.trainer.is_main and resumable:
                logger.warning("Saved %s to resume from", path)  # the launcher's next line says how
        self._writer.close()  # every checkpoint is on disk when training returns; the writer thread ends

    def state_dict(self) -> Dict[str, Any]:
        return {"saved": list(self._saved)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._saved = list(state["saved"])
