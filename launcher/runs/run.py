"""One run from its config, as a sequence of steps::

    run(cfg, run_dir):
        devices = check_config(cfg)               # what needs no run dir: a typo costs nothing
        job = Job(cfg, claim_run_dir(run_dir), overrides, devices)
        with RunDirLock(run_dir):
            if finished := decide_resume(job):    # the record found there: refused, or a finished run's result
                return finished
            train_where_asked(job)                # here, in trainer.devices=N workers, or as one rank:
                train_and_record(job)             # start_record, build_trainer, trainer.train(), record_end

From Python: ``cfg = launcher.compose(["trainer=iter"])``, then ``launcher.run(cfg, "some/dir")``.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from omegaconf import DictConfig

from launcher.engine import distributed
from launcher.engine.errors import ConfigError
from launcher.engine.files import candidates
from launcher.engine.signals import EXIT_INTERRUPTED, GracefulStop, SignalLatch, pass_on_late
from launcher.runs.build import build, call
from launcher.runs.checks import (build_hook, check_config, check_data, check_loader_settings, check_model, check_objective,
                                  check_optimizer_numbers, check_optimizer_settings, check_seed, check_targets,
                                  check_trainer_config, check_values_not_applied)
from launcher.runs.config import CONFIG_DIR, register_configs
from launcher.runs.objective import (ObjectiveCheck, warn_if_a_loss_is_maximized, warn_if_last_epochs_unvalidated,
                                     warn_if_objective_never_recorded, warn_if_objective_unknown)
from launcher.runs.rerun import (changes_since_record, check_run_dir_free, nothing_to_train_on, resumes, say_finished,
                                 warn_of_changes)
from launcher.runs.rundir import (ConfigFilesBefore, RunDirLock, RunRecord, check_world_size, finished_result,
                                  ignore_outputs_in_git, lengthens, plain_config, same_command, save_config_files)
from launcher.runs.spawn import run_spawned

logger = logging.getLogger("launcher")

__all__ = ["ConfigError", "RunResult", "build_trainer", "compose", "run"]


register_configs()


@dataclass
class RunResult:
    objective: float
    metrics: Dict[str, float] = field(default_factory=dict)
    status: str = "completed"
    run_dir: Optional[Path] = None
    stop_reason: Optional[str] = None  # why a run ended early ("received SIGTERM", early stopping's reason)


# Torch's random state, its threads and the loggers are the process's: runs in threads side by side would not repeat.
_ONE_RUN_AT_A_TIME = threading.Lock()


def compose(overrides: Sequence[str] = (), config_dir: Optional[str] = None) -> DictConfig:
    """The run config for ``overrides``, as ``python -m launcher <overrides>`` would compose it; ``config_dir``
    adds a user's config directory in front of the built-in one. Raises :class:`ConfigError` in the CLI's words."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from launcher.runs.build import composition_message, group_list_message, group_value_message

    overrides = list(overrides)
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0].strip()
        if (key.startswith(("hydra.", "hydra/")) or key == "hydra") and key != "hydra.searchpath":
            raise ConfigError(f"{override}: compose() returns the run's config without Hydra's own settings; give the "
                              f"run dir as launcher.run(cfg, run_dir=...), and sweep with python -m launcher -m")
    if config_dir:
        if not Path(config_dir).is_dir():
            raise ConfigError(f"config_dir: {str(config_dir)!r} is not a directory of config groups (model/, data/, ...)")
        overrides.append(f"hydra.searchpath=[file://{Path(config_dir).resolve()}]")
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        try:
            return hydra_compose(config_name="config", overrides=overrides)
        except (MissingConfigException, ConfigCompositionException, OverrideParseException) as err:
            raise ConfigError(composition_message(err, overrides)) from err
        except ValueError as err:
            if isinstance(err, ConfigError) or not group_value_message(err):
                raise
            raise ConfigError(composition_message(err, overrides)) from err
        except TypeError as err:  # hooks=[1,2]
            listed = group_list_message(err, overrides)
            if listed is None:
                raise
            raise ConfigError(listed) from err


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_trainer(cfg: DictConfig, run_dir: Union[str, Path]) -> Any:
    """Seed, then build the model, optimizer, data, hooks and trainer of ``cfg`` (nothing runs).

    Raises :class:`ConfigError`, naming the key, for anything that cannot be built.
    """
    from launcher.data import check_splits

    check_trainer_config(cfg)
    seed = check_seed(cfg)
    check_objective(cfg)
    check_targets(cfg)  # what needs neither the model nor the data, before either is built (minutes, maybe)
    factory = check_optimizer_settings(cfg)
    check_loader_settings(cfg)
    seed_everything(seed)
    if cfg.model.get("_target_"):
        logger.info("Instantiating model <%s>", cfg.model.get("_target_"))
    model = build("model", cfg.model)
    check_model(cfg, model)
    optimizer = call("optimizer", cfg.optimizer, factory, model.parameters())  # before the trainer moves the model
    check_optimizer_numbers(optimizer)
    check_splits(cfg.data)
    data = build("data", cfg.data)
    check_data(cfg, data)
    hooks: Dict[str, Any] = {}
    for name, node in cfg.hooks.items():
        hook = build_hook(name, node)
        if hook is not None:
            hooks[name] = hook
    logger.info("Hooks: %s", ", ".join(hooks) or "none")
    trainer = build("trainer", cfg.trainer, model=model, optimizer=optimizer, data=data, hooks=hooks, work_dir=Path(run_dir))
    trainer.rerun_hint = same_command(Path(run_dir))
    return trainer


def run(cfg: DictConfig, run_dir: Union[str, Path, None] = None, overrides: Optional[List[str]] = None,
        on_start: Optional[Callable[[], None]] = None, checked: bool = False) -> RunResult:
    """Build everything in ``cfg`` and train; ``run.json`` in ``run_dir`` (default: a new ``outputs/<date>/<time>``)
    records how it went.

    Running again in the same ``run_dir`` resumes from its newest checkpoint; a finished run returns its recorded
    result unless its length was raised (then it trains on); a run dir of another model, data, seed... is refused.
    Raises :class:`ConfigError` before any training and before the run dir changes. ``on_start``: called once the
    run will train (the CLI writes its config files there); ``checked``: the run dir was checked already (a worker
    of ``trainer.devices=N``). From Python, one run at a time per process, and a Ctrl-C stops the run with a
    checkpoint, then raises ``KeyboardInterrupt`` naming the dir that resumes it.
    """
    if checked or on_start is not None:  # the CLI, a spawned worker
        return _run(cfg, run_dir, overrides, on_start, checked)
    if not _ONE_RUN_AT_A_TIME.acquire(blocking=False):
        raise RuntimeError("launcher.run: another run is training in this process now (in another thread); torch's "
                           "random state and loggers are shared: run one after the other, or a sweep (-m)")
    try:
        result = _run(cfg, run_dir, overrides, None, False)
    finally:
        _ONE_RUN_AT_A_TIME.release()
    _raise_if_stopped_by_ctrl_c(result)
    return result


@dataclass
class Job:
    """What the steps of one run share."""
    cfg: DictConfig
    run_dir: Path
    overrides: Optional[List[str]]
    devices: int  # trainer.devices
    env: Any = field(default_factory=distributed.from_environment)  # None: a single process; else this rank's

    @property
    def main(self) -> bool:
        """Whether this process records the run (rank 0 under DDP)."""
        return self.env is None or self.env.is_main


def _run(cfg: DictConfig, run_dir: Union[str, Path, None], overrides: Optional[List[str]],
         on_start: Optional[Callable[[], None]], checked: bool) -> RunResult:
    devices = check_config(cfg)
    job = Job(cfg, claim_run_dir(run_dir), overrides, devices)
    run_dir = job.run_dir
    python_api = not checked and on_start is None
    # one holder per run: this process, or rank 0 of torchrun's or SLURM's (spawned workers run under their parent's)
    with RunDirLock(run_dir) if not checked and job.main else contextlib.nullcontext(), \
            _log_to_run_dir(run_dir) if python_api else contextlib.nullcontext():
        if python_api:  # train.log and .hydra/ as the CLI leaves them
            on_start = functools.partial(save_config_files, run_dir, {"config.yaml": cfg, "overrides.yaml": list(overrides or [])})
        ignore_outputs_in_git(run_dir)
        if not checked:
            finished = decide_resume(job)
            if finished is not None:
                return finished
        with _config_files_kept_if_nothing_trained(run_dir, on_start is not None and job.main) as before:
            return train_where_asked(job, on_start, before)


def claim_run_dir(run_dir: Union[str, Path, None]) -> Path:
    """``run_dir`` created and absolute (a resume from another directory finds it); a new one where None."""
    path = Path(run_dir if run_dir is not None else new_run_dir()).absolute()
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_run_dir(root: Union[str, Path] = "outputs") -> Path:
    """A new, empty ``<root>/<date>/<time to the microsecond>``, as the CLI names a run's dir; made here, so that
    runs started at the same moment never share one."""
    import datetime

    while True:
        now = datetime.datetime.now()
        path = Path(root) / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S-%f")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


def decide_resume(job: Job) -> Optional[RunResult]:
    """The run dir's record checked against the config: a finished run's recorded result where it has nothing more
    to train, else None (a new run, a resumed one, or a finished one lengthened)."""
    cfg, run_dir = job.cfg, job.run_dir
    check_run_dir_free(run_dir, job.main)
    check_trainer_config(cfg)  # a value no run takes is named as such, before "another config" or "finished"
    changes = changes_since_record(cfg, run_dir, job.overrides, job.main)
    done = finished_result(run_dir) if resumes(cfg) else None
    gone = done is not None and not candidates(run_dir / "checkpoints")  # its results stand in its record alone
    if done is not None and not lengthens(changes):
        check_values_not_applied(cfg, changes)
        value = say_finished(cfg, run_dir, done, changes, gone)
        return RunResult(objective=value, metrics=done["metrics"], status=done["status"], run_dir=run_dir,
                         stop_reason=done.get("stop_reason"))
    if gone:
        raise ConfigError(nothing_to_train_on(run_dir, done, changes))
    if resumes(cfg):
        check_world_size(run_dir, job.env.world_size if job.env is not None else job.devices)
    warn_of_changes(changes, done)
    return None


@contextlib.contextmanager
def _config_files_kept_if_nothing_trained(run_dir: Path, enabled: bool) -> Iterator[Optional[ConfigFilesBefore]]:
    """A rerun that trains nothing (a bad value found while building) keeps the run dir's record and config files."""
    before = ConfigFilesBefore(run_dir) if enabled else None
    try:
        yield before
    except BaseException:
        if before is not None:
            before.restore_if_record_kept()
        raise


def train_where_asked(job: Job, on_start: Optional[Callable[[], None]], before: Optional[ConfigFilesBefore]) -> RunResult:
    """Train in this process, in ``trainer.devices=N`` workers spawned here, or as one rank of torchrun's, SLURM's
    or the spawned workers."""
    if job.env is not None:
        return _train_as_rank(job, on_start)
    if on_start is not None:
        on_start()
    if job.devices > 1:
        status, metrics, stop_reason = run_spawned(job.cfg, job.run_dir, job.overrides, job.devices, before, run)
        return RunResult(objective=float(metrics.get(job.cfg.objective, float("nan"))), metrics=metrics, status=status,
                         run_dir=job.run_dir, stop_reason=stop_reason)
    return _train(job)


def _train_as_rank(job: Job, on_start: Optional[Callable[[], None]]) -> RunResult:
    """One rank: joins the process group, trains its share, and leaves it."""
    env = job.env
    if job.devices > 1 and job.devices != env.world_size:
        logger.warning("trainer.devices=%d is ignored: this process is rank %d of %d started by %s",
                       job.devices, env.rank, env.world_size, env.source)
    if env.source == "slurm" and not env.is_main:  # Hydra pointed every task's log at the one train.log
        distributed.rank_log_files(env.rank, job.run_dir)
    distributed.init(env, str(job.cfg.trainer.get("device", "auto")))
    if on_start is not None:
        distributed.broadcast_object(None)  # every rank has checked the run dir against its record by now
        on_start()
    try:
        result = _train(job, before_chain=distributed.shutdown)
    except BaseException:
        distributed.shutdown(wait_for_peers=False)
        raise
    distributed.shutdown()
    return result


def _train(job: Job, before_chain: Callable[[], None] = lambda: None) -> RunResult:
    """Build and train in this process, a SIGTERM while building held for the first step; ``before_chain`` runs
    before an interrupted run hands its signal on (leaving DDP's group)."""
    distributed.share_cores(job.env)  # before anything is built: a sweep's jobs side by side must not each take every core
    if "SUBMITIT_EXECUTOR" in os.environ and logging.getLogger("submitit").handlers:
        logging.getLogger("submitit").propagate = False  # it writes the job's log itself: each line showed twice
    with distributed.errors_in_main_log(job.run_dir, job.env):
        if job.env is not None and job.env.source != "spawn":  # torchrun's agent (srun) ends the others when a rank fails
            return train_and_record(job, before_chain)
        with SignalLatch(say=job.main) as latch:
            result = train_and_record(job, before_chain)
            if result.status == "interrupted":  # stopped on a signal, its checkpoint saved: another one asks nothing more
                latch.received = None
            return result


def train_and_record(job: Job, before_chain: Callable[[], None]) -> RunResult:
    """Build the trainer and train; ``run.json`` records how the run started and how it ended."""
    cfg = job.cfg
    record = start_record(job)
    trainer = stopper = None
    said, unsaved_since = False, None
    try:
        trainer = build_trainer(cfg, job.run_dir)
        said, unsaved_since = prepare_trainer(trainer, job)
        logger.info("Training %s for %d steps on %s; run dir %s", type(trainer).__name__, trainer.max_iters,
                    trainer.device, job.run_dir)
        stopper = GracefulStop(trainer).__enter__()
        metrics = trainer.train()
        stopper.trained = True  # a second Ctrl-C from here finds the run over: its record and exit status stand
    except BaseException as err:
        if stopper is not None:
            stopper.__exit__(type(err), err, err.__traceback__)
        record_failure(record, trainer, err, unsaved_since)
        raise
    try:  # a signal until the record is written is held by GracefulStop: the record says how the run ended
        objective = record_end(record, trainer, cfg, metrics, said, unsaved_since)
        if trainer.status == "interrupted" and job.main:  # said with the handlers still ours
            say_interrupted(trainer, job.run_dir, stopper.name or trainer.stop_reason)
    finally:
        stopper.__exit__(None, None, None)
    hand_on_signal(stopper, trainer.status, before_chain)
    if trainer.status != "interrupted":
        logger.info("Finished (%s): %s = %.4f%s", trainer.status, cfg.objective, objective, _measured_when(trainer, cfg.objective))
    return RunResult(objective=float(objective), metrics=metrics, status=trainer.status, run_dir=job.run_dir,
                     stop_reason=trainer.stop_reason if trainer.status != "completed" else None)


def start_record(job: Job) -> RunRecord:
    """``run.json`` saying the run is running (written by rank 0 alone)."""
    record = RunRecord(job.run_dir, job.cfg.seed, job.overrides, write=job.main,
                       config=plain_config(job.cfg) if job.main else None)
    record.start()
    return record


def prepare_trainer(trainer: Any, job: Job) -> Tuple[bool, Optional[int]]:
    """The run's meta, its warnings before training, and the objective's check at the first validation. Returns
    whether the objective's warning was given, and :func:`warn_if_resumed_without_checkpointer`'s time."""
    objective = str(job.cfg.objective)
    trainer.meta = {"overrides": list(job.overrides or []), "seed": job.cfg.seed, "objective": job.cfg.objective}
    said = warn_if_objective_never_recorded(trainer, objective)
    warn_if_last_epochs_unvalidated(trainer)
    unsaved_since = warn_if_resumed_without_checkpointer(trainer)
    if objective.startswith("val/"):  # a misspelt one stops the run at the first validation, on every rank
        trainer.register_hooks({"objective_check": ObjectiveCheck(objective)})
    if job.main:
        warn_if_a_loss_is_maximized(job.cfg)
    return said, unsaved_since


def record_end(record: RunRecord, trainer: Any, cfg: DictConfig, metrics: Dict[str, Any], said: bool,
               unsaved_since: Optional[int]) -> float:
    """``run.json`` says how the trained run ended; returns its objective (NaN where it was never recorded)."""
    objective = metrics.get(cfg.objective)
    if objective is None:
        # an interrupted run has not validated yet; under DDP rank 0 says it, as it said the others
        if trainer.status != "interrupted" and not said and trainer.is_main:
            warn_if_objective_unknown(str(cfg.objective), metrics, "the run's metrics", "The run returns NaN")
        objective = float("nan")
    warn_if_nothing_saved(trainer, unsaved_since)
    record.finish(trainer.status, EXIT_INTERRUPTED if trainer.status == "interrupted" else 0, metrics,
                  objective={"name": cfg.objective, "value": objective},
                  stop_reason=trainer.stop_reason if trainer.status != "completed" else None, iter=trainer.iter,
                  resumed_from=str(trainer.resumed_from) if trainer.resumed_from else None)
    return objective


def record_failure(record: RunRecord, trainer: Any, err: BaseException, unsaved_since: Optional[int]) -> None:
    """``run.json`` says how the run failed (aborted by Ctrl-C: exit 130; a config error: 2); one that trained
    nothing keeps a finished run's record."""
    status = trainer.status if trainer is not None and trainer.status not in ("created", "running") else "failed"
    if isinstance(err, KeyboardInterrupt):
        status = "aborted"
    elif not isinstance(err, (ConfigError, SystemExit)):
        log_to_files_only(err)
    code = 2 if isinstance(err, ConfigError) else 130 if isinstance(err, KeyboardInterrupt) else 1
    trained = trainer is not None and trainer.started_at is not None and trainer.iter != trainer.started_at
    if trained:
        warn_if_nothing_saved(trainer, unsaved_since)
    try:
        if trained or not record.keep_earlier():
            text = str(err) or ("stopped by Ctrl-C" if isinstance(err, KeyboardInterrupt) else "")
            record.finish(status, code, _metrics_of_a_failed_run(trainer),
                          error=f"{type(err).__name__}: {text}" if text else type(err).__name__)
    except OSError as unrecorded:  # a full disk refuses the record too: the error to report is the run's
        logger.warning("Could not record how the run ended in %s (%s: %s); its status there is stale",
                       record.path, type(unrecorded).__name__, unrecorded.strerror or unrecorded)


def hand_on_signal(stopper: GracefulStop, status: str, before_chain: Callable[[], None]) -> None:
    """A signal the run took goes on to the handler the run replaced: an interrupted run's (submitit's requeues
    the job, its checkpoint on disk now), and one that came as the run ended (recorded as it ended)."""
    if status == "interrupted":
        before_chain()
        stopper.chain()
    elif stopper.received is not None:
        pass_on_late(stopper.received, status)


def say_interrupted(trainer: Any, run_dir: Path, why: Optional[str]) -> None:
    """An interrupted run's last line (rank 0's, which wrote the checkpoint): its iteration, exit code and how to
    resume."""
    last = trainer.checkpoint_dir / "last"
    saved = last.is_file() and last.read_text().strip() == f"iter_{trainer.iter:07d}.pt"
    older = [] if saved else candidates(trainer.checkpoint_dir)  # one it resumed from, or a hook of one's own saved
    advice = (f"Run {same_command(run_dir)} to resume." if saved else
              f"No checkpoint of it was written (no checkpointer hook): {same_command(run_dir)} resumes from "
              f"{older[0].name}, an older one." if older else
              "No checkpoint was written (no checkpointer hook): a rerun starts over.")
    logger.warning("Interrupted at iteration %d (%s); exit code %d. %s", trainer.iter, why, EXIT_INTERRUPTED, advice)


def _raise_if_stopped_by_ctrl_c(result: RunResult) -> None:
    """From Python a Ctrl-C stops the run with a checkpoint, then raises, so that a notebook cell or a loop stops too."""
    if result.status != "interrupted" or result.stop_reason != "received SIGINT" or result.run_dir is None:
        return
    if (result.run_dir / "checkpoints" / "last").is_file():
        raise KeyboardInterrupt(f"the run stopped with a checkpoint in {result.run_dir}: launcher.run(cfg, "
                                f"{str(result.run_dir)!r}) resumes it")
    raise KeyboardInterrupt(f"the run in {result.run_dir} stopped without a checkpoint (no checkpointer hook): a "
                            f"rerun starts over")


def _measured_when(trainer: Any, key: str) -> str:
    """`` (validated after epoch 2/3, not at the end)`` for an objective last recorded before the run's last step,
    else ``""``."""
    if not trainer.storage.has(key):
        return ""
    step = trainer.storage.history(key).latest_iter()  # the 0-based step it was recorded at
    if step >= trainer.iter - 1:
        return ""
    what = "validated" if key.startswith("val/") else "recorded"
    epochs = trainer.epochs_in(step + 1) if trainer.LENGTH_KEY == "max_epochs" else None
    return f" ({what} after epoch {epochs}, not at the end)" if epochs else \
        f" ({what} after {step + 1} of {trainer.iter} steps, not at the end)"


def _metrics_of_a_failed_run(trainer: Any) -> Dict[str, Any]:
    """A failed run's last metrics for its record; none where reading them fails too (the record still says how
    the run ended)."""
    if trainer is None:
        return {}
    try:
        return trainer.final_metrics(sync=False)
    except Exception as err:  # noqa: BLE001 -- the run's own error is the one to report
        logger.error("The run's last metrics could not be read for run.json: %s: %s", type(err).__name__, err)
        return {}


def log_to_files_only(err: BaseException, message: Optional[str] = None) -> None:
    """``message`` (default: "Run failed: <err>") and ``err``'s traceback in the run's log files only: the console
    gets its one line elsewhere."""
    text = message if message is not None else f"Run failed: {type(err).__name__}: {err}"
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, text, (), (type(err), err, err.__traceback__))
    for handler in logging.getLogger().handlers + logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def warn_if_resumed_without_checkpointer(trainer: Any) -> Optional[int]:
    """A rerun that resumes from checkpoints without a checkpointer hook saves none, leaving them at the point it
    resumed from: said before training, or, where a hook of the user's own may save them, asked after training by
    :func:`warn_if_nothing_saved` from the time (ns) returned."""
    import time

    if not trainer.is_main or trainer.resume != "auto" or any(h.saves_checkpoints for h in trainer.hooks):
        return None
    if candidates(trainer.checkpoint_dir):
        if any(type(h).__module__.partition(".")[0] != "launcher" for h in trainer.hooks):
            return time.time_ns()
        logger.warning("This run resumes from its checkpoints in %s but has no checkpointer hook (hooks.checkpointer): "
                       "it saves none, so a stop loses what it trains; keep hooks.checkpointer", trainer.checkpoint_dir)
    return None


def warn_if_nothing_saved(trainer: Any, since: Optional[int]) -> None:
    """No hook wrote a checkpoint since ``since`` while the run trained on from its checkpoints."""
    if since is None or trainer.started_at is None or trainer.iter == trainer.started_at or trainer.status == "interrupted":
        return  # an interrupted run's last line says what a rerun resumes from
    newest = candidates(trainer.checkpoint_dir)
    if not newest or max(p.stat().st_mtime_ns for p in newest) < since:
        finished = trainer.status in ("completed", "stopped")
        logger.warning("This run resumed from its checkpoints in %s and trained on to iteration %d, but no hook saved a "
                       "checkpoint there: they hold iteration %d's model, and %s", trainer.checkpoint_dir, trainer.iter,
                       trainer.started_at, "a longer rerun trains on from there" if finished else "a rerun goes on from there")


@contextlib.contextmanager
def _log_to_run_dir(run_dir: Path) -> Iterator[None]:
    """The launcher's and hooks' log records (INFO and up) in ``<run_dir>/train.log`` while the block runs, as the
    CLI writes them; loggers are left as they were afterwards."""
    path = (run_dir / "train.log").resolve()
    for each in logging.getLogger().handlers + logger.handlers:
        if isinstance(each, logging.FileHandler) and Path(each.baseFilename) == path:
            yield  # written already (a Hydra app of the user's own whose job dir this is)
            return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s", "%H:%M:%S"))
    handlers: List[logging.Handler] = [handler]
    if not logging.getLogger().handlers:  # Python's last-resort stderr handler would fall silent beside the file's
        console = logging.StreamHandler()
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        handlers.append(console)
    level = logger.level
    for one in handlers:
        logger.addHandler(one)
    if level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for one in handlers:
            logger.removeHandler(one)
            one.close()
        logger.setLevel(level)
