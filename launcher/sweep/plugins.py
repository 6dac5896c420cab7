"""Our Hydra launcher plugins: ``hydra/launcher=local`` (:mod:`launcher.sweep.local`) and
``hydra/launcher=slurm_detached`` (:mod:`launcher.sweep.slurm`), subclasses of hydra-submitit-launcher's.

Hydra takes launchers only from the ``hydra_plugins`` namespace package, which an editable install of
this project cannot add to. So ``python -m launcher`` calls :func:`register` before a multirun: each
module is made importable as the ``hydra_plugins.<name>`` module its config's ``_target_`` names (the
class's ``__module__``), and the class is registered with Hydra's plugin registry. The jobs are pickled
as the plugin's plain classes (each class's ``__reduce__``; the SLURM jobs as
:class:`launcher.sweep.slurm.SlurmJob`, importable without registering), so a job process needs none of this.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from hydra.errors import CompactHydraException

from launcher.engine.signals import EXIT_INTERRUPTED


class JobDied(CompactHydraException):
    """A sweep job's process ended without a result: killed (SIGKILL, the OOM killer) or exited at once.

    Hydra prints a CompactHydraException as its message alone: the sweep's last screen says the rest."""


class JobInterrupted(CompactHydraException):
    """A sweep job's run stopped itself on a signal sent to it alone (``scancel --signal=TERM``, ``kill``), with a
    checkpoint: not a failure, and not done; a rerun of the sweep resumes it."""

    sweep_dir: Optional[Path] = None

    def exit_code(self) -> int:
        """The sweep's: 75 (rerun to resume) unless one of its jobs failed, which Hydra's sweeper, raising at
        the first job that did not succeed, may not have reached."""
        from launcher.sweep.summary import jobs

        try:
            failed = self.sweep_dir is None or any(row["status"] == "failed" for row in jobs(self.sweep_dir))
        except OSError:
            failed = True
        return 1 if failed else EXIT_INTERRUPTED


def stop_sweep(signal_name: str, sweep_dir: Any) -> None:
    """End a sweep stopped by a signal: say how to resume it, and exit 75 (the report at exit lists its jobs)."""
    import logging

    from launcher.runs.rundir import override_for_shell
    from launcher.engine.signals import EXIT_INTERRUPTED

    logging.getLogger("launcher").warning(
        "Sweep stopped by %s. Run the same command with %s to resume it: finished jobs are not run again, stopped ones "
        "resume from their checkpoints", signal_name, override_for_shell("hydra.sweep.dir", str(sweep_dir)))
    raise SystemExit(EXIT_INTERRUPTED)


def stop_basic_sweep_on_signal(sweep_dir: Any) -> Callable[[], None]:
    """A sweep whose jobs run in this process (the basic launcher): a SIGTERM or SIGUSR2 between its jobs, or one a
    job's run passes on (after its checkpoint, or after its last step), stops the sweep with its report, exit 75;
    with the default handler it ended the process at once, without a summary. A job's run handles those that come
    while it trains. Leaves a handler that is not the default (submitit's, the user's) as it is. Returns what the
    sweep's end and its report at exit call: the default handlers back (a signal no longer stops a sweep that is
    over), but ignored where one has stopped it (its report is not cut short)."""
    import signal
    import threading

    from launcher.engine.signals import SignalLatch

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    signals = [sig for sig in SignalLatch.SIGNALS if signal.getsignal(sig) == signal.SIG_DFL]

    def stop(signum: int, frame: Any) -> None:
        for sig in signals:  # once: the report written at exit is not cut short by another
            signal.signal(sig, signal.SIG_IGN)
        stop_sweep(signal.Signals(signum).name, sweep_dir)

    def over() -> None:
        for sig in signals:
            if signal.getsignal(sig) is stop:
                signal.signal(sig, signal.SIG_DFL)

    for sig in signals:
        signal.signal(sig, stop)
    return over


def as_plain(cls: type, state: dict) -> object:
    """Unpickles one of our launchers as the plugin's own ``cls`` with the same attributes."""
    plain = cls.__new__(cls)
    plain.__dict__.update(state)
    return plain


def job_dir(config: Any, overrides: Sequence[str], idx: int, config_loader: Any) -> Path:
    """Sweep job ``idx``'s run dir, as its process will resolve it (``hydra.sweep.dir`` / ``hydra.sweep.subdir``)."""
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir") == "${hydra.job.num}":
        return Path(str(config.hydra.sweep.dir)) / str(idx)  # the default, without composing the job's config
    known = SWEEP.dirs.setdefault(id(config), {})  # a sweep asks for a job's dir several times (check, submit, record)
    key = (tuple(overrides), idx)
    if key not in known:
        job_config = config_loader.load_sweep_config(config, list(overrides))
        with open_dict(job_config.hydra.job):
            job_config.hydra.job.num = idx
        with as_job(job_config):  # a subdir of ${hydra:job.num}
            known[key] = Path(str(job_config.hydra.sweep.dir)) / str(job_config.hydra.sweep.subdir)
    return known[key]


BASIC_SWEEPERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "hydra_plugins.launcher_sweeper.PlannedSweeper")


def check_jobs(config: Any, keep: bool = False) -> None:
    """:func:`plan_sweep` for the basic sweeper's jobs: refused, or marked pending. ``keep``: the configs
    composed to check them are kept for the jobs (:func:`take_composed`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from launcher.engine.errors import ConfigError

    if config.hydra.sweeper.get("_target_") not in BASIC_SWEEPERS:
        return
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    loader = GlobalHydra.instance().config_loader()
    # as typed, as Hydra's sweeper reads them: a swept "${...}" is the job's to resolve, not this check's
    sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=False)
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    parsed = OverridesParser.create(config_loader=loader).parse_overrides([*params, *task])
    (jobs,) = BasicSweeper.split_arguments(parsed, None)
    check_each_value_composes(config, jobs, loader, keep)
    SWEEP.composed.setdefault(id(config), {})
    seen: dict = {}
    for idx, overrides in enumerate(jobs):
        path = job_dir(config, overrides, idx, loader)
        if path in seen:
            first = seen[path]
            raise ConfigError(
                f"hydra.sweep.subdir={subdir}: jobs {first} [{' '.join(jobs[first])}] and {idx} [{' '.join(overrides)}] "
                f"would share the run dir {path}; add the swept keys or ${{hydra.job.num}} to the subdir")
        seen[path] = idx
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    check_sweep_dir_holds_this_sweep(config, seen, jobs, swept)
    mark_pending(list(seen), jobs, 0)
    if str(config.hydra.launcher.get("_target_", "")).endswith(".BasicLauncher"):  # ours check (and mark) as they launch
        numbered = [(idx, overrides, path) for (path, idx), overrides in zip(seen.items(), jobs)]
        checked = refuse_what_runs_would_refuse(config, loader, numbered)
        mark_taken(numbered)
        say_going_on([(idx, path) for idx, _, path, record, outcome in checked if outcome is None or record is None])


def refuse_what_runs_would_refuse(config: Any, loader: Any, jobs: Sequence[Tuple[int, Sequence[str], Path]]) -> list:
    """Raise, before any job runs, the :class:`ConfigError` that the run of a job (``(number, overrides, dir)``)
    would raise in a dir holding a finished run, or one with checkpoints (another model, ``trainer.resume=false``):
    run in turn by Hydra's basic launcher, each such job was refused as it came, and the summary then listed every
    finished run failed, its metrics hidden, under the refused overrides. Returns those jobs as
    ``(number, overrides, dir, finished record or None, (objective, changes not applied) or None)``."""
    import logging

    from launcher.engine.errors import ConfigError
    from launcher.engine.files import candidates as saved_checkpoints
    from launcher.runs.rundir import finished_result

    runs = [(idx, overrides, path, finished_result(path)) for idx, overrides, path in jobs]
    runs = [run for run in runs if run[3] is not None or saved_checkpoints(run[2] / "checkpoints")]
    if len(runs) > 8:  # about 0.1 s each: say what the wait is
        logging.getLogger("launcher").info("Checking the %d runs of this sweep dir against this sweep's config", len(runs))
    checked = []
    for idx, overrides, path, record in runs:
        try:
            outcome = _unapplied_changes(config, loader, overrides, idx, path, record or {})
        except ConfigError as err:  # refused by its run: refused here, before any job runs or is queued
            forget_pending(Path(str(config.hydra.sweep.dir)))
            raise ConfigError(f"{err} (sweep job {idx}: {' '.join(overrides)})") from None
        checked.append((idx, overrides, path, record, outcome))
    return checked


def _swept_values(overrides: Sequence[str], swept: set) -> dict:
    """``{key: value}`` of the swept keys (``+``/``++`` prefixes dropped; numbers compared as numbers: 0.1 is 1e-1)."""
    def value(text: str) -> Any:
        try:
            number = float(text)
        except ValueError:
            return text.strip()
        return number if number == number else "nan"  # NaN equals no number, itself included

    keys = {k.lstrip("+") for k in swept}
    return {key.lstrip("+"): value(v) for key, _, v in (str(o).partition("=") for o in overrides) if key.lstrip("+") in keys}


def check_sweep_dir_holds_this_sweep(config: Any, job_dirs: dict, jobs: Sequence[Sequence[str]], swept: set) -> None:
    """Raise :class:`ConfigError` when a job dir of this sweep holds a job of another sweep: one that ran
    (or was to run) other values of the swept keys. Jobs are numbered by their place in the sweep, so a
    rerun with a value added or changed would give job 2 the dir of another job 2, be refused there and
    train the shifted ones again; rerunning the same sweep (to resume it) always fits."""
    from launcher.engine.errors import ConfigError
    from launcher.runs.rundir import refused_key
    from launcher.sweep.summary import recorded_overrides

    for path, idx in job_dirs.items():
        recorded = recorded_overrides(path)
        if recorded is None:
            continue
        was, now = _swept_values(recorded, swept), _swept_values(jobs[idx], swept)
        refused = refused_key(path)
        if refused and all(k == refused or k.startswith(refused + ".") or refused.startswith(k + ".")
                           for k in set(was) | set(now) if was.get(k) != now.get(k)):
            continue  # the job's value that was refused (a config error), mended: its run goes on from its checkpoint
        if was != now:
            keys = {k.lstrip("+") for k in swept}
            was = " ".join(o for o in recorded if o.partition("=")[0].lstrip("+") in keys) or "no swept value"
            now = " ".join(o for o in jobs[idx] if o.partition("=")[0].lstrip("+") in keys)
            raise ConfigError(
                f"hydra.sweep.dir={config.hydra.sweep.dir} holds another sweep: its job {idx} ran [{was}], this "
                f"sweep's job {idx} is [{now}]; give this sweep a new hydra.sweep.dir")


COMPOSE_AHEAD = 32  # jobs composed before a sweep starts, at most

class SweepState:
    """What this process knows of the sweep it runs, from :func:`launcher.sweep.callback.plan_sweep` (a Hydra callback,
    run before Hydra makes the sweeper and launcher) to them: Hydra hands them only the sweep's config, hence a
    module-level object, its entries keyed by that config's id."""

    def __init__(self) -> None:
        self.started_ns: Optional[int] = None  # the sweep's mark in its jobs' submitted.json
        self.composed: Dict[int, Dict[Tuple[str, ...], Any]] = {}  # the job configs its check composed, by overrides
        self.dirs: Dict[int, Dict[Tuple[Tuple[str, ...], int], Path]] = {}  # job_dir's answers, by (overrides, number)

    def begin(self) -> None:
        """Forget an earlier sweep's jobs (in this process) and mark when this one started."""
        self.__init__()  # type: ignore[misc]
        self.started_ns = time.time_ns()

    def mark(self) -> int:
        if self.started_ns is None:
            self.started_ns = time.time_ns()
        return self.started_ns


SWEEP = SweepState()


def checked(config: Any) -> bool:
    """Whether :func:`plan_sweep` has checked the jobs of the sweep of ``config``."""
    return id(config) in SWEEP.composed


def take_composed(config: Any, overrides: Sequence[str]) -> Any:
    """The config composed for the job with ``overrides`` before the sweep started (and forgotten here), or None."""
    return SWEEP.composed.get(id(config), {}).pop(tuple(overrides), None)


def check_each_value_composes(config: Any, jobs: Sequence[Sequence[str]], loader: Any, keep: bool = False) -> None:
    """Compose jobs that between them use every swept value (a few for most sweeps, not every job) and raise
    a :class:`ConfigError` naming the first job that does not compose: a misspelled key or option in a sweep
    is one line before any job runs, not a failure at job 57 after the first 56 trained, nor a sweep dir
    of jobs marked pending that can never run. Each job picked is one that uses the most values not composed
    yet, so ``model=mlp,cnnn seed=range(100)`` composes a job with ``cnnn`` among the first two, whatever
    the order of the jobs; at most ``COMPOSE_AHEAD`` jobs (each takes ~0.08 s), so of a key with more values
    than that (seeds, say) the rest are checked as their jobs start. ``keep``: the configs are kept for
    :func:`take_composed`."""
    from launcher.runs.build import composition_message
    from launcher.engine.errors import ConfigError

    todo = {idx: set(overrides) for idx, overrides in enumerate(jobs)}
    for _ in range(COMPOSE_AHEAD):
        idx = max(todo, key=lambda i: (len(todo[i]), -i), default=None)  # the most new values; the first such job
        if idx is None or not todo[idx]:
            return
        overrides = jobs[idx]
        for values in todo.values():
            values.difference_update(overrides)
        try:
            job_config = loader.load_sweep_config(config, list(overrides))
        except Exception as err:  # noqa: BLE001 -- composition's errors, explained as a single run's are
            try:
                message = composition_message(err, [*config.hydra.overrides.get("hydra", ()), *overrides])
            except Exception:  # noqa: BLE001
                message = f"{type(err).__name__}: {err}"
            raise ConfigError(f"{message} (sweep job {idx}: {' '.join(overrides)})") from None
        if keep:
            SWEEP.composed.setdefault(id(config), {})[tuple(overrides)] = job_config


class Finished:
    """Stands in for the submitit job of a sweep job whose run had finished before the sweep started: nothing is
    submitted for it, and its result is the one its ``run.json`` records."""

    def __init__(self, job_return: Any) -> None:
        self.job_return = job_return

    def results(self) -> List[Any]:
        return [self.job_return]


def finished_jobs(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, verb: str,
                  going_on: Optional[List[Tuple[int, Path]]] = None) -> Dict[int, Any]:
    """``{job number: JobReturn}`` of the jobs whose run finished before this sweep started and would not train
    again (a rerun of a sweep, to run its failed, interrupted or new jobs): their process would only compose its
    config to say "already finished". On SLURM that is an allocation per job (a rerun of a sweep of 200 seeds
    queued 200 jobs, each its CPUs and memory, to read ``run.json``). A job is left out exactly where its run
    would return its recorded result (:func:`launcher.run`): ``trainer.resume`` auto, the run dir's config fits,
    and no longer ``trainer.max_epochs`` or ``max_iters``; any other job runs, and says what it has to say.
    A job left out is done, as its run would have made it: an earlier attempt's ``failure.json`` goes (a rerun
    refused for its config). A rerun that the run of a finished job, or of one with checkpoints, would refuse
    (another model, ``trainer.resume=false``) raises its :class:`ConfigError` here, before any job runs or is
    queued. Logged in one line (``verb``: what is not done to them), with the changes not
    applied, as a run's rerun does. The jobs that train on from a checkpoint are said in one line too; with
    ``going_on``, they are appended there instead, ``(job, dir)``, for the caller to say (:func:`say_going_on`), less
    those SLURM holds already."""
    import logging

    from hydra.core.utils import JobReturn, JobStatus

    from launcher.runs.rundir import describe_changes
    from launcher.sweep.summary import FAILURE

    config, loader = launcher.config, launcher.hydra_context.config_loader
    log = logging.getLogger("launcher")
    jobs = []
    for offset, overrides in enumerate(job_overrides):
        try:
            jobs.append((initial_job_idx + offset, overrides, job_dir(config, overrides, initial_job_idx + offset, loader)))
        except Exception:  # noqa: BLE001 -- a job that does not compose: its run says why
            continue
    done: Dict[int, Any] = {}
    unapplied: Dict[int, Any] = {}
    unknown: Dict[int, Any] = {}  # finished jobs that never recorded the objective asked for: (objective, their metrics)
    going: List[Tuple[int, Path]] = []  # (job, dir) of the jobs that train on from a checkpoint
    for idx, overrides, path, record, outcome in refuse_what_runs_would_refuse(config, loader, jobs):
        if outcome is None or record is None:
            going.append((idx, path))
            continue
        objective, changes = outcome
        ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, working_dir=str(path),
                        task_name=str(config.hydra.job.name))
        metrics = record.get("metrics", {})
        ret.return_value = float(metrics.get(objective, float("nan")))
        if objective not in metrics:
            unknown[idx] = (objective, metrics)
        done[idx] = ret
        (path / FAILURE).unlink(missing_ok=True)
        if changes:
            unapplied[idx] = changes
    mark_taken(jobs)
    if going_on is None:
        say_going_on(going)
    else:
        going_on.extend(going)
    if unknown:  # as a finished run's rerun says it
        from launcher.runs.objective import warn_if_objective_unknown
        objective, metrics = unknown[min(unknown)]
        warn_if_objective_unknown(objective, metrics, f"the metrics of finished sweep job(s) {number_ranges(sorted(unknown))}",
                                  "They return NaN")
    if done:
        log.info("%d of %d sweep jobs already finished, not %s again (their results are in the summary): %s",
                 len(done), len(job_overrides), verb, number_ranges(sorted(done)))
        if unapplied:
            first = min(unapplied)
            said = {describe_changes(changes) for changes in unapplied.values()}
            which = f"job {first}" if len(unapplied) == 1 else f"jobs {number_ranges(sorted(unapplied))}" if len(said) == 1 \
                else f"job {first}'s; the others' differ"
            log.warning("Not applied to %d finished job(s), as their runs are over: %s (%s). Raise trainer.max_epochs "
                        "(or max_iters) to train them on, or choose a new hydra.sweep.dir", len(unapplied),
                        describe_changes(unapplied[first]), which)
    return done


def say_going_on(jobs: Sequence[Tuple[int, Path]]) -> None:
    """One line for the jobs of a rerun sweep that train on from their checkpoints (``(job, dir)``): their
    runs stopped before their end (interrupted, failed, killed), or finished and are lengthened; each named with the
    newest checkpoint in its dir, which its run resumes from (each job's log says it too; the sweep's console did
    not). A job without one is left out: its run starts over, or says why it cannot train on."""
    from launcher.engine.files import candidates

    import logging

    going = [(idx, found[0].name) for idx, path in jobs for found in [candidates(path / "checkpoints")] if found]
    if going:
        logging.getLogger("launcher").info("%d sweep job(s) train on from their checkpoints: %s%s", len(going),
                 ", ".join(f"job {idx} ({name})" for idx, name in going[:6]), ", ..." if len(going) > 6 else "")


@contextlib.contextmanager
def as_job(job_config: Any) -> Iterator[None]:
    """Hydra's config (``${hydra:...}``) set to a sweep job's while it is looked at in the sweep's process."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.instance()
    saved = hydra.cfg
    hydra.set_config(job_config)
    try:
        yield
    finally:
        hydra.cfg = saved


def _unapplied_changes(config: Any, loader: Any, overrides: Sequence[str], idx: int, path: Path,
                       record: Dict[str, Any]) -> Optional[Tuple[str, list]]:
    """For the finished run in ``path`` (its ``record``): ``(objective, the config changes its rerun would leave
    unapplied)``, or None where the job would run (it trains on to a new length, resumes from a checkpoint
    named, or does not compose: the job then says why). Raises the :class:`ConfigError` its run would raise
    for a config that does not fit the run dir (another model, ``trainer.resume=false``)."""
    import copy
    import os

    from omegaconf import open_dict, read_write

    from launcher.runs.run import check_trainer_config, check_values_not_applied, nothing_to_train_on
    from launcher.engine.errors import ConfigError
    from launcher.engine.files import candidates
    from launcher.runs.rundir import REPORTED, check_rerun, check_world_size, lengthens, split_additions

    composed = SWEEP.composed.get(id(config), {}).get(tuple(overrides))  # the sweep's check composed it already
    try:
        job_config = copy.deepcopy(composed) if composed is not None else loader.load_sweep_config(config, list(overrides))
    except Exception:  # noqa: BLE001 -- not composing: the job's run says so, as in any sweep
        return None
    try:
        with open_dict(job_config.hydra):  # as the job's process sees it: its ${hydra:...} resolve to its own
            job_config.hydra.job.num = idx
            last_id = (record.get("submitit") or {}).get("job_id")
            if last_id is not None:  # per attempt: the last one's (a run outside submitit has none)
                job_config.hydra.job.id = str(last_id)
            job_config.hydra.runtime.output_dir = os.path.abspath(path)
        world_size = _job_world_size(job_config)
        with as_job(job_config):  # Hydra's config holds a copy of the job's hydra node from here: the job's task is the rest
            task = job_config
            with read_write(task), open_dict(task):
                del task["hydra"]
            check_trainer_config(task)
            changes = split_additions(path, check_rerun(path, task), overrides)[0]  # first, as the run does: it refuses trainer.resume=false here
            if task.trainer.get("resume", "auto") not in ("auto", True):
                return None
            objective = str(task.get("objective", "val/accuracy"))
            if world_size is not None and (not record or lengthens(changes)):  # it trains on, as the run would
                check_world_size(path, world_size)
            if not lengthens(changes):
                check_values_not_applied(task, changes)  # a value no run takes is refused, as the run refuses it
            elif record and not candidates(path / "checkpoints"):  # lengthened, with nothing to train on from
                raise ConfigError(nothing_to_train_on(path, record, changes))
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 -- never the sweep's end: the job runs, and its run decides
        import logging

        logging.getLogger("launcher").warning("Could not check sweep job %d's earlier run in %s (%s: %s): the job runs, "
                                              "and its run decides", idx, path, type(err).__name__, err)
        return None
    return None if lengthens(changes) else (objective, [c for c in changes if c[0] not in REPORTED])


def _job_world_size(job_config: Any) -> Optional[int]:
    """The processes a sweep job would train in: the SLURM launcher's tasks (``nodes`` x ``tasks_per_node``) where
    more than one, else ``trainer.devices``; None where the config does not say (the job's run checks it)."""
    launcher = job_config.hydra.get("launcher") or {}
    if "slurm" in str(launcher.get("_target_", "")).lower():
        tasks = launcher.get("tasks_per_node", 1), launcher.get("nodes", 1)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in tasks) and tasks[0] * tasks[1] > 1:
            return tasks[0] * tasks[1]
    devices = (job_config.get("trainer") or {}).get("devices", 1)
    return devices if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1 else None


def number_ranges(numbers: Sequence[int]) -> str:
    """``0-3, 5, 7-8`` for ``[0, 1, 2, 3, 5, 7, 8]`` (sorted)."""
    runs: List[List[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def mark_pending(job_dirs: Sequence[Path], job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> None:
    """``submitted.json`` (job number, overrides, the sweep: when it started) in each job dir without a run record
    yet: the summary lists the job as pending until it starts, also after the sweep is stopped before reaching it.
    A dir that has a record (a run, an earlier submission to SLURM) is marked by :func:`mark_taken` once the
    sweep is known to run."""
    from launcher.engine.files import atomic_write

    sweep = SWEEP.mark()
    for offset, (path, overrides) in enumerate(zip(job_dirs, job_overrides)):
        if (path / "run.json").is_file():
            continue
        try:  # an earlier submission to SLURM: its id stays (a rerun of the sweep asks SLURM about it)
            if json.loads((path / "submitted.json").read_text()).get("job_id"):
                continue
        except (OSError, ValueError, AttributeError):
            pass
        path.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"job": initial_job_idx + offset, "overrides": list(overrides), "sweep": sweep}, indent=2) + "\n"
        atomic_write(path / "submitted.json", text.encode(), sync_dir=False)


def mark_taken(jobs: Sequence[Tuple[int, Sequence[str], Path]]) -> None:
    """Mark the job dirs that hold a record (a run, an earlier submission to SLURM) of this sweep's jobs
    (``(number, overrides, dir)``) as this sweep's, in ``submitted.json``: its number there (a ``hydra.sweep.subdir``
    of one's own with a value added in front numbers a finished run's job anew without running it) and the sweep
    (``sweep``), so the summary tells its jobs from the runs an earlier sweep left (a value since removed). Called
    once nothing can refuse the sweep. The file keeps what it held and its time (that of a SLURM submission, which
    a rerun waiting for the job reads; ``numbered_ns`` says when it was numbered); not fsynced, and a dir that
    refuses the write (another user's) keeps its old mark."""
    from launcher.engine.files import atomic_write

    sweep = SWEEP.mark()
    for idx, overrides, path in jobs:
        mark = path / "submitted.json"
        try:
            earlier = json.loads(mark.read_text())
        except (OSError, ValueError):
            earlier = {}
        if not isinstance(earlier, dict) or not (path / "run.json").is_file() and not earlier.get("job_id"):
            continue  # pending: mark_pending's
        if earlier.get("job") == idx and earlier.get("sweep") == sweep:
            continue
        text = json.dumps({"overrides": list(overrides), **earlier, "job": idx, "numbered_ns": time.time_ns(),
                           "sweep": sweep}, indent=2) + "\n"
        try:
            stat = mark.stat() if earlier else None
            atomic_write(mark, text.encode(), sync_dir=False, sync=False)
            if stat is not None:
                os.utime(mark, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        except OSError:
            continue


def explain_launcher_error(err: BaseException, launcher: str, params: Optional[Dict[str, Any]] = None) -> BaseException:
    """A launcher's own failure in one line: an option submitit does not know (``+hydra.launcher.maxparallel=2``,
    a NameError listing the executor's arguments), one of a type it does not take (``timeout_min=0.5``, its
    AssertionError), or ``sbatch`` refusing the jobs (a FailedJobError quoting it; with the launcher's
    ``params``, what the jobs asked and what a node has). Anything else is returned as it is."""
    import re

    from launcher.engine.errors import ConfigError

    text = str(err)
    unknown = re.match(r"Unknown argument '(\w+)' for executor '\w+' in parameter '\w+'\. Valid arguments: ([^\n]*)", text)
    if isinstance(err, NameError) and unknown:
        import difflib

        shared = re.search(r"parameters are: \{(.*)\}", text)
        accepted = [n.strip() for n in unknown.group(2).split(",") if n.strip()]
        accepted += re.findall(r"'(\w+)':", shared.group(1)) if shared else []
        accepted += ["max_parallel", "fork_server"] if launcher == "local" else []
        accepted += ["submitit_folder"]  # the plugin's own, not passed to the executor
        accepted = sorted(set(accepted))
        close = difflib.get_close_matches(unknown.group(1), accepted, n=1)
        return ConfigError(f"hydra.launcher.{unknown.group(1)}: not an option of hydra/launcher={launcher}"
                           + (f"; did you mean hydra.launcher.{close[0]}? Accepted" if close else "; accepted")
                           + f": {', '.join(accepted)}")
    wrong_type = re.match(r'Parameter "(\w+)" expected type <class \'(\w+)\'> \(but value: "(.*)"\)', text)
    if isinstance(err, AssertionError) and wrong_type:
        name, expected, value = wrong_type.groups()
        kind = {"int": "a whole number", "float": "a number", "str": "a string", "bool": "true or false",
                "list": "a list", "dict": "a mapping"}.get(expected, expected)
        return ConfigError(f"hydra.launcher.{name}={value}: submitit takes {kind} ({expected}) for it with "
                           f"hydra/launcher={launcher}" + (" (minutes)" if name.endswith("_min") else ""))
    if type(err).__name__ == "FailedJobError" and "sbatch" in text:
        from launcher.runs.slurmstate import asked_of, what_a_node_has

        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line[len("sbatch: error:"):].strip() for line in lines if line.startswith("sbatch: error:")]
        said = "; ".join(errors or [line.partition("sbatch: ")[2] or line for line in lines])
        if re.search(r"Unable to contact slurm controller|Socket timed out|Connection refused", said):
            from launcher.engine.errors import ClusterUnreachable

            return ClusterUnreachable(f"hydra/launcher={launcher}: SLURM's controller did not answer sbatch ({said}): "
                                      f"no job was submitted. Once `sinfo` answers, the same command submits the sweep")
        if params is None:
            return ConfigError(f"hydra/launcher={launcher}: sbatch refused the sweep's jobs: {said} (the hydra.launcher "
                               f"options partition, account, qos, gres... are passed to it)")
        node = what_a_node_has(params.get("partition"))
        return ConfigError(f"hydra/launcher={launcher}: sbatch refused the sweep's jobs: {said}; hydra.launcher: "
                           f"{asked_of(params)}{'; ' + node if node else ''}")
    return err


@contextlib.contextmanager
def launcher_errors_explained(launcher: str, params: Optional[Dict[str, Any]] = None,
                              sweep_dir: Optional[Path] = None) -> Iterator[None]:
    """Raise a launcher's failure as :func:`explain_launcher_error` words it, where it has words for it; where
    that is a config error (no job could be launched), the jobs of ``sweep_dir`` are no longer marked pending."""
    try:
        yield
    except Exception as err:
        explained = explain_launcher_error(err, launcher, params)
        if explained is err:
            raise
        if sweep_dir is not None:
            forget_pending(sweep_dir)
        raise explained from None


def forget_pending(sweep_dir: Path) -> None:
    """Unmark the jobs of ``sweep_dir`` marked pending (:func:`mark_pending`) that never started, where the sweep
    could launch none (an option submitit refuses, sbatch refusing the jobs): else the summary lists them
    pending for good. A job submitted to SLURM (its id recorded) stays."""
    from launcher.sweep.summary import _job_dirs

    if not Path(sweep_dir).is_dir():
        return
    for _, path in _job_dirs(Path(sweep_dir)):
        mark = path / "submitted.json"
        try:
            if (path / "run.json").exists() or json.loads(mark.read_text()).get("job_id"):
                continue
            mark.unlink()
            path.rmdir()  # where nothing else is there
        except (OSError, ValueError, AttributeError):
            continue


def record_dead_job(config: Any, job_dir: Path, overrides: Sequence[str], idx: int, how: str,
                    exit_code: Optional[int] = None, since: Optional[float] = None) -> Any:
    """The failed JobReturn of a sweep job that ended without a result (killed, out of memory...), recorded as
    any failed job's is: ``run.json`` (it said running), ``failure.json``, the summary and one line in the log.
    A job whose run stopped itself on a signal (``run.json`` says interrupted: a checkpoint is on disk) is not
    failed: it stays interrupted, and the log says to rerun the sweep to resume it; but only when that record
    is this attempt's (exit status 75 where known, ``run.json`` written ``since`` the job was submitted)."""
    import logging

    from hydra.core.utils import JobStatus

    from launcher.engine.errors import mark_reported
    from launcher.runs.rundir import mark_failed, same_sweep
    from launcher.sweep.summary import ReportedFailure, record_failure

    from launcher.engine.signals import EXIT_INTERRUPTED

    try:
        record = json.loads((job_dir / "run.json").read_text())
        # this attempt's record: not one an earlier attempt left (a rerun killed before its run started)
        current = since is None or (job_dir / "run.json").stat().st_mtime >= since
    except (OSError, ValueError):
        record, current = {}, False
    if record.get("status") == "interrupted" and current and exit_code in (None, EXIT_INTERRUPTED):
        # stopped itself on a signal (scancel, kill -TERM), its checkpoint on disk
        # its words are also the sweep's last line (Hydra's sweeper raises the first job that did not succeed)
        stopped = JobInterrupted(f"Sweep job {idx} ({' '.join(overrides)}) was interrupted: stopped at iteration "
                                 f"{record.get('iter')} ({record.get('stop_reason')}), with a checkpoint: rerun "
                                 f"{same_sweep(config)} to resume it")
        stopped.sweep_dir = Path(str(config.hydra.sweep.dir))
        logging.getLogger("launcher").warning("%s; log: %s", stopped, job_dir / "train.log")
        _write_summary(config)
        return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=stopped)
    died = JobDied(how)
    error = f"{type(died).__name__}: {died}"
    if (job_dir / "run.json").is_file():
        mark_failed(job_dir, error, exit_code=exit_code or 1)
    record_failure(job_dir, error, overrides)
    log = job_dir / "train.log"
    logging.getLogger("launcher").error("Sweep job %d failed (%s): %s%s", idx, " ".join(overrides), error,
                                        f"; log: {log}" if log.is_file() else " (its run never started: no log)")
    _write_summary(config)
    mark_reported(died, idx)
    return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=died)


def record_cancelled(config: Any, job_dir: Path, overrides: Sequence[str], idx: int, slurm_job: Any) -> Any:
    """The JobReturn of a SLURM job cancelled before its run started (``scancel`` while it was queued): not a
    failure, and not done; the summary lists it ``cancelled`` (from ``submitted.json``'s SLURM id), and a rerun
    of the sweep runs it. Exit status 75, as for an interrupted job, unless another job failed."""
    import logging

    from hydra.core.utils import JobStatus

    from launcher.runs.rundir import same_sweep
    from launcher.sweep.summary import ReportedFailure

    stopped = JobInterrupted(f"Sweep job {idx} ({' '.join(overrides)}): SLURM job {slurm_job} was cancelled before its "
                             f"run started: rerun {same_sweep(config)} to run it")
    stopped.sweep_dir = Path(str(config.hydra.sweep.dir))
    logging.getLogger("launcher").warning("%s", stopped)
    _write_summary(config)
    return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=stopped)


def _write_summary(config: Any) -> None:
    from launcher.sweep.summary import write_summary

    try:
        write_summary(Path(str(config.hydra.sweep.dir)), config.get("objective", "val/accuracy"),
                      config.get("objective_mode", "max"))
    except (OSError, ValueError):
        pass  # the sweep's end writes it again
