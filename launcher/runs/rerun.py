"""A run started in a run dir that holds a run already: its record checked against the config, and what the
rerun says (another config refused, a finished run not trained again, settings that changed)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig

from launcher.engine.errors import ConfigError, RunDirBusy
from launcher.engine.files import resume_off
from launcher.runs.objective import warn_if_objective_unknown
from launcher.runs.rundir import (LENGTH, REPORTED, another_run_here, check_rerun, check_resume_source, describe_changes,
                                  new_dir_advice, recorded_config, split_additions, training_here_now)

logger = logging.getLogger("launcher")
Changes = Sequence[Tuple[str, Any, Any]]


def resumes(cfg: DictConfig) -> bool:
    """Whether the run takes up its run dir's own run (``trainer.resume=auto``), not a checkpoint named."""
    return cfg.trainer.get("resume", "auto") in ("auto", True)


def check_run_dir_free(run_dir: Path, main: bool) -> None:
    """No other run trains here now (one on another host, or of a launcher that took no lock); then a killed
    run's half-written files go."""
    record = run_dir / "run.json"
    if record.exists() and not record.is_file():
        raise ConfigError(f"{record}: {'a directory' if record.is_dir() else 'not a file'} where the run's record "
                          f"(a file) goes; move it away, or give this run {new_dir_advice()}")
    if not main:
        return
    other = training_here_now(run_dir)
    if other:
        job = other.partition("SLURM job ")[2].split()[0].rstrip(",") if "SLURM job " in other else None
        raise RunDirBusy(another_run_here(run_dir, other, f"scancel --signal=TERM {job}" if job else "kill -TERM its pid"))
    from launcher.engine.checkpoint import remove_stale_temporaries  # imports torch

    remove_stale_temporaries(run_dir, ".run.json.tmp*")  # not the sweep's files beside it (submitted.json)
    remove_stale_temporaries(run_dir / ".hydra")


def changes_since_record(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], main: bool) -> List[Any]:
    """The settings that differ from the run dir's record (refusing those that define another run); settings
    the record lacks that no override names are only logged."""
    changes, added = split_additions(run_dir, check_rerun(run_dir, cfg), overrides)
    if added and main:
        logger.info("Settings the run's record lacks (added to the config files since it started), at their values "
                    "now: %s", describe_changes(added))
    resume = cfg.trainer.get("resume", "auto")
    if isinstance(resume, str) and resume != "auto" and not resume_off(resume):
        elsewhere = check_resume_source(resume, run_dir, cfg)
        if elsewhere:
            logger.warning("The run of %s was started with other settings; continuing with: %s", resume,
                           describe_changes(elsewhere))
    return changes


def say_finished(cfg: DictConfig, run_dir: Path, done: Mapping[str, Any], changes: Changes, gone: bool) -> float:
    """Log that the run finished and is not trained again; returns its recorded objective (NaN if it has none).
    ``gone``: its checkpoints are gone, its results standing in its record alone."""
    value = done["metrics"].get(cfg.objective)
    if value is None:  # asked for another objective than it was run with
        warn_if_objective_unknown(str(cfg.objective), done["metrics"], "the finished run's metrics", "It returns NaN")
        value = float("nan")
    why = "it saved no checkpoint, having no checkpointer hook" if _saved_none(run_dir) else \
        f"its checkpoints are gone from {run_dir / 'checkpoints'}"
    logger.info("This run already finished (%s): %s = %s; not training again%s", done["status"], cfg.objective,
                f"{value:.4f}" if isinstance(value, float) else value,
                f" ({why}: trainer.resume=false trains it again from the start)" if gone else "")
    unapplied = [c for c in changes if c[0] not in REPORTED]  # what it reports is applied to its record
    if unapplied:
        logger.warning("Not applied, as the run is over: %s. Raise trainer.max_epochs (or max_iters) to train it on, "
                       "or choose %s", describe_changes(unapplied), new_dir_advice())
    return float(value)


def nothing_to_train_on(run_dir: Path, done: Mapping[str, Any], changes: Changes) -> str:
    """The refusal of a finished run lengthened by ``changes`` whose dir holds no checkpoint."""
    what = "saved no checkpoint (it ran without a checkpointer hook)" if _saved_none(run_dir) else \
        f"{run_dir / 'checkpoints'} holds no checkpoint"
    return (f"{describe_changes([c for c in changes if c[0] in LENGTH])}: this run finished ({done['status']} at "
            f"iteration {done.get('iter')}), and {what} to train it on from (its results stay in run.json); train it "
            f"again from the start with trainer.resume=false, or choose {new_dir_advice()}")


def warn_of_changes(changes: Changes, done: Optional[Mapping[str, Any]]) -> None:
    """What a resumed run goes on with: a new length (its LR schedule made for the old one), changed settings."""
    schedule = "the LR schedule goes on from its checkpointed state, made for the old length"
    if done is not None:
        logger.warning("This run finished (%s) at iteration %s; training it on to the new length (%s; start a new run "
                       "dir for one that spans it)", done["status"], done.get("iter"), schedule)
    if not changes:
        return
    length = done is None and any(k in LENGTH for k, _, _ in changes)
    workers = [(a, b) for k, a, b in changes if k == "data.num_workers" and isinstance(a, int) and isinstance(b, int)
               and (a == 0) != (b == 0)]
    logger.warning("This run dir's run was started with other settings; continuing with: %s%s%s",
                   describe_changes(changes), f"; {schedule}" if length else "",
                   f"; data.num_workers {workers[0][0]} -> {workers[0][1]}: augmentation draws differently with workers "
                   f"and without, so the run goes on but is no longer bitwise the uninterrupted one" if workers else "")


def _saved_none(run_dir: Path) -> bool:
    """Whether ``run_dir``'s run never saved a checkpoint: no checkpoints dir, and no checkpointer hook."""
    return not (run_dir / "checkpoints").exists() and not _had_checkpointer(run_dir)


def _had_checkpointer(run_dir: Path) -> bool:
    """Whether the config ``run_dir``'s run was last started with has a checkpointer hook (True where unknown)."""
    from hydra.utils import get_class

    hooks = (recorded_config(run_dir) or {}).get("hooks")
    if not isinstance(hooks, dict):
        return True
    for hook in hooks.values():
        try:
            if isinstance(hook, dict) and getattr(get_class(str(hook.get("_target_"))), "saves_checkpoints", False):
                return True
        except Exception:  # noqa: BLE001 -- a hook's class that no longer imports: it may have been one
            return True
    return False
