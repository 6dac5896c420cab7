"""The run's objective (the metric it returns to Hydra, what a sweep ranks): checks and warnings about it."""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence, Tuple

from launcher.engine.errors import ConfigError, did_you_mean
from launcher.engine.hook import HookBase, Priority

logger = logging.getLogger("launcher")


def warn_if_objective_unknown(objective: str, recorded: Mapping[str, Any], among: str, outcome: str) -> bool:
    """Warn, with the closest recorded name, when ``objective`` is not among the ``recorded`` metrics (True if warned)."""
    if objective in recorded:
        return False
    close = did_you_mean(objective, recorded, "objective")
    advice = ""
    if not close and objective.startswith("val/"):  # not a typo: the model may not return it
        advice = (f" In eval mode the model returns a dict of metrics, logged as val/<name> "
                  f"({{'{objective[4:]}': ...}}); or name one recorded.")
    logger.warning("objective %r is not among %s (%s)%s %s.%s", objective, among, ", ".join(sorted(recorded)) or "none",
                   close or ".", outcome, advice)
    return True


def warn_if_objective_never_recorded(trainer: Any, objective: str) -> bool:
    """A ``val/`` objective in a run that never validates would end as NaN: say so before training (True if said)."""
    if not objective.startswith("val/") or not trainer.is_main:
        return False
    if trainer.val_loader is None:
        why = trainer.no_val_set
    elif not any(h.validates for h in trainer.hooks) and \
            not any(phase == "val" for phase, _ in getattr(trainer, "workflow", ())):
        why = "it has no evaluator hook (hooks.evaluator) and no val phase in trainer.workflow"
    else:
        evaluators = [h for h in trainer.hooks if h.validates]
        if not evaluators or any(phase == "val" for phase, _ in getattr(trainer, "workflow", ())):
            return False
        lengths = {True: getattr(trainer, "max_epochs", None), False: trainer.max_iters}
        if not all(not e.at_end and lengths[bool(e.by_epoch)] is not None and e.period > lengths[bool(e.by_epoch)]
                   for e in evaluators):
            return False
        e = evaluators[0]
        unit = "epochs" if e.by_epoch else "iterations"
        why = (f"hooks.{e.name}.period={e.period} ({unit}) is longer than the run ({lengths[bool(e.by_epoch)]} {unit}) "
               f"and hooks.{e.name}.at_end=false")
    logger.warning("objective %r will not be recorded: this run never validates, as %s; it will return NaN (add "
                   "validation, or e.g. objective=train/loss objective_mode=min)", objective, why)
    return True


def last_validated_epoch(workflow: Sequence[Tuple[str, int]], max_epochs: int) -> Optional[int]:
    """The training epoch after which a workflow's last val phase runs (None: it never validates)."""
    phases = [phase for phase, epochs in workflow for _ in range(epochs)]
    done, last, i = 0, None, 0
    while True:
        phase = phases[i % len(phases)]
        if phase == "train":
            if done >= max_epochs:
                return last
            done += 1
        else:
            last = done
        i += 1


def warn_if_last_epochs_unvalidated(trainer: Any) -> None:
    """``workflow=[[train, 2], [val, 1]]`` with ``max_epochs=3``: the last epoch trains after the last
    validation, so ``val/*`` and the objective describe epoch 2's weights, not ``final.pt``'s. Say so."""
    def validates_last(h: Any) -> bool:  # an evaluator that runs after the last epoch anyway
        return h.validates and (h.at_end or (h.by_epoch and trainer.max_epochs % h.period == 0) or
                                             (not h.by_epoch and trainer.max_iters % h.period == 0))

    workflow = getattr(trainer, "workflow", None)
    if not trainer.is_main or not workflow or not any(phase == "val" for phase, _ in workflow) or \
            any(validates_last(h) for h in trainer.hooks):
        return
    last = last_validated_epoch(workflow, trainer.max_epochs)
    if last is None or last == trainer.max_epochs:
        return
    fits = next(m for m in range(trainer.max_epochs + 1, 2 * trainer.max_epochs + 100)
                if last_validated_epoch(workflow, m) == m)
    logger.warning("trainer.workflow=%s with trainer.max_epochs=%d: the last val phase comes after epoch %d, so the "
                   "last %d epoch(s) are not validated (val/* is epoch %d's); set trainer.max_epochs=%d, or add "
                   "hooks.evaluator", [list(w) for w in workflow], trainer.max_epochs, last, trainer.max_epochs - last,
                   last, fits)


def warn_if_a_loss_is_maximized(cfg: Any) -> None:
    mode = getattr(cfg.get("objective_mode"), "value", cfg.get("objective_mode"))
    if "loss" in cfg.objective.rsplit("/", 1)[-1].lower() and mode == "max":
        logger.warning("objective=%s with objective_mode=max: a sweep ranks the highest %s best; set objective_mode=min",
                       cfg.objective, cfg.objective)


class ObjectiveCheck(HookBase):
    """Stops the run, with a checkpoint, at the first validation that does not record the ``val/`` objective: a
    :class:`ConfigError` naming the closest metric recorded (a run that went on would return NaN)."""

    priority = Priority.BELOW_NORMAL  # once every hook before it has judged the validation (ReduceLROnPlateau's step)

    def __init__(self, objective: str, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        self.objective = objective

    def before_train(self) -> None:
        # resumed: the checkpoint holds the last validation's metrics; a misspelt objective stops the rerun now
        if self.trainer.resumed_from is not None and self.trainer.last_val:
            self.after_val()

    def after_val(self) -> None:
        metrics = self.trainer.last_val
        if self.objective in metrics:
            return
        close = did_you_mean(self.objective, metrics, "objective")
        advice = close or (f"; in eval mode the model's forward returns the metrics, recorded as val/<name> (a dict such "
                           f"as {{'loss': ..., '{self.objective[4:]}': ...}}), or name one recorded, e.g. "
                           f"objective=val/loss objective_mode=min")
        raise ConfigError(f"objective: {self.objective!r} is not a validation metric (validation records: "
                          f"{', '.join(sorted(metrics)) or 'none'}){advice}")
