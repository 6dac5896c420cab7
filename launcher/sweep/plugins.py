"""What our launcher plugins (:mod:`launcher.sweep.local`, :mod:`launcher.sweep.slurm`) share: planning a sweep's
jobs before any runs, marking them pending, skipping finished ones, and recording jobs that died without a result."""
from __future__ import annotations

import contextlib
import copy
import difflib
import json
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from omegaconf import OmegaConf, open_dict, read_write

from launcher.engine.errors import ClusterUnreachable, ConfigError, mark_reported
from launcher.engine.files import atomic_write, candidates
from launcher.engine.signals import EXIT_INTERRUPTED, SignalLatch
from launcher.runs.build import composition_message
from launcher.runs.objective import warn_if_objective_unknown
from launcher.runs.checks import check_trainer_config, check_values_not_applied
from launcher.runs.rerun import nothing_to_train_on
from launcher.runs.rundir import (REPORTED, check_rerun, check_world_size, describe_changes, finished_result, lengthens,
                                  mark_failed, override_for_shell, refused_key, same_sweep, split_additions)
from launcher.runs.slurmstate import asked_of, what_a_node_has
from launcher.sweep.summary import FAILURE, ReportedFailure, _job_dirs, record_failure, recorded_overrides, write_summary
from launcher.sweep.summary import jobs as summary_rows

log = logging.getLogger("launcher")


class JobDied(CompactHydraException):
    """A sweep job's process ended without a result (SIGKILL, the OOM killer); Hydra prints it as its message alone."""


class JobInterrupted(CompactHydraException):
    """A sweep job's run stopped itself on a signal sent to it alone, with a checkpoint: a rerun resumes it."""

    sweep_dir: Optional[Path] = None

    def exit_code(self) -> int:
        """The sweep's: 75 (rerun to resume) unless one of its jobs failed."""
        try:
            failed = self.sweep_dir is None or any(row["status"] == "failed" for row in summary_rows(self.sweep_dir))
        except OSError:
            failed = True
        return 1 if failed else EXIT_INTERRUPTED


def stop_sweep(signal_name: str, sweep_dir: Any) -> None:
    """End a sweep stopped by a signal: say how to resume it, and exit 75 (the report at exit lists its jobs)."""
    log.warning(
        "Sweep stopped by %s. Run the same command with %s to resume it: finished jobs are not run again, stopped ones "
        "resume from their checkpoints", signal_name, override_for_shell("hydra.sweep.dir", str(sweep_dir)))
    raise SystemExit(EXIT_INTERRUPTED)


def stop_basic_sweep_on_signal(sweep_dir: Any) -> Callable[[], None]:
    """For the basic launcher (jobs in this process): SIGTERM or SIGUSR2 between jobs stops the sweep with its report,
    exit 75; a handler that is not the default stays. Returns what puts the default handlers back once it is over."""


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
    """One of our launchers as the plugin's own ``cls`` with the same attributes (what a job process unpickles)."""
    plain = cls.__new__(cls)
    plain.__dict__.update(state)
    return plain


def job_dir(config: Any, overrides: Sequence[str], idx: int, config_loader: Any) -> Path:
    """Sweep job ``idx``'s run dir, as its process will resolve it (``hydra.sweep.dir`` / ``hydra.sweep.subdir``)."""
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
    """:func:`launcher.sweep.callback.plan_sweep` for the basic sweeper's jobs: refused, or marked pending. ``keep``:
    the configs composed to check them stay for the jobs (:func:`take_composed`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


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
    """Raise, before any job runs, the :class:`ConfigError` a job's run would raise in its dir (``(number, overrides,
    dir)``) that holds a finished run or checkpoints. Returns ``(number, overrides, dir, record or None, outcome)``."""
    runs = [(idx, overrides, path, finished_result(path)) for idx, overrides, path in jobs]
    runs = [run for run in runs if run[3] is not None or candidates(run[2] / "checkpoints")]
    if len(runs) > 8:  # about 0.1 s each: say what the wait is
        log.info("Checking the %d runs of this sweep dir against this sweep's config", len(runs))
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
    """Raise :class:`ConfigError` when a job dir holds another sweep's job (other values of the swept keys): jobs are
    numbered by their place, so a value added in front would give a job another's dir."""
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
    """Whether :func:`launcher.sweep.callback.plan_sweep` has checked the jobs of the sweep of ``config``."""
    return id(config) in SWEEP.composed


def take_composed(config: Any, overrides: Sequence[str]) -> Any:
    """The config composed for the job with ``overrides`` before the sweep started (forgotten here), or None."""
    return SWEEP.composed.get(id(config), {}).pop(tuple(overrides), None)


def check_each_value_composes(config: Any, jobs: Sequence[Sequence[str]], loader: Any, keep: bool = False) -> None:
    """Compose jobs that between them use every swept value (each the job with the most values not composed yet, at most
    ``COMPOSE_AHEAD``) and raise :class:`ConfigError` naming the first that does not compose. ``keep``: the configs
    are kept for :func:`take_composed`."""
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


def finished_jobs(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, verb: str,
                  going_on: Optional[List[Tuple[int, Path]]] = None) -> Dict[int, Any]:
    """``{job number: JobReturn}`` of the jobs whose run finished and would not train again (the run would return its
    recorded result): not run again, logged in one line (``verb``), with changes not applied. Raises the
    :class:`ConfigError` a job's run would raise. Jobs that train on from a checkpoint are said, or with
    ``going_on`` appended there as ``(job, dir)``."""


    config, loader = launcher.config, launcher.hydra_context.config_loader
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
    """One line naming the jobs (``(job, dir)``) that train on from a checkpoint, each with its newest checkpoint."""
    going = [(idx, found[0].name) for idx, path in jobs for found in [candidates(path / "checkpoints")] if found]
    if going:
        log.info("%d sweep job(s) train on from their checkpoints: %s%s", len(going),
                 ", ".join(f"job {idx} ({name})" for idx, name in going[:6]), ", ..." if len(going) > 6 else "")


@contextlib.contextmanager
def as_job(job_config: Any) -> Iterator[None]:
    """Hydra's config (``${hydra:...}``) set to a sweep job's while it is looked at in the sweep's process."""
    hydra = HydraConfig.instance()
    saved = hydra.cfg
    hydra.set_config(job_config)
    try:
        yield
    finally:
        hydra.cfg = saved


def _unapplied_changes(config: Any, loader: Any, overrides: Sequence[str], idx: int, path: Path,
                       record: Dict[str, Any]) -> Optional[Tuple[str, list]]:
    """For the finished run in ``path``: ``(objective, changes its rerun would leave unapplied)``, or None where the job
    would run. Raises the :class:`ConfigError` its run would raise for a config that does not fit the run dir."""


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
        log.warning("Could not check sweep job %d's earlier run in %s (%s: %s): the job runs, "
                                              "and its run decides", idx, path, type(err).__name__, err)
        return None
    return None if lengthens(changes) else (objective, [c for c in changes if c[0] not in REPORTED])


def _job_world_size(job_config: Any) -> Optional[int]:
    """The processes a sweep job trains in (SLURM's ``nodes`` x ``tasks_per_node``, else ``trainer.devices``), or None."""
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
    """``submitted.json`` (job number, overrides, sweep mark) in each job dir with no run record yet: the summary lists
    the job pending until it starts. A dir with a record is marked by :func:`mark_taken`."""
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
    """Mark the job dirs (``(number, overrides, dir)``) that hold a run or an earlier SLURM submission as this sweep's,
    in ``submitted.json`` (its number and sweep mark), keeping what it held and its time. Best effort."""
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
    """A launcher's own failure as one line: an option submitit does not know or takes in another type, or ``sbatch``
    refusing the jobs (with ``params``: what they asked and what a node has). Anything else is returned as it is."""


    text = str(err)
    unknown = re.match(r"Unknown argument '(\w+)' for executor '\w+' in parameter '\w+'\. Valid arguments: ([^\n]*)", text)
    if isinstance(err, NameError) and unknown:
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
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line[len("sbatch: error:"):].strip() for line in lines if line.startswith("sbatch: error:")]
        said = "; ".join(errors or [line.partition("sbatch: ")[2] or line for line in lines])
        if re.search(r"Unable to contact slurm controller|Socket timed out|Connection refused", said):
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
    """Raise a launcher's failure as :func:`explain_launcher_error` words it; where it does, the jobs of ``sweep_dir``
    are no longer marked pending."""
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
    """Unmark the never-started jobs of ``sweep_dir`` (a sweep that could launch none); a job submitted to SLURM stays."""
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
    """The failed JobReturn of a job that ended without a result, recorded as a failed job's (``run.json``,
    ``failure.json``, summary, log line); one whose run of this attempt (since ``since``) stopped itself on a
    signal stays interrupted."""


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
        log.warning("%s; log: %s", stopped, job_dir / "train.log")
        _write_summary(config)
        return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=stopped)
    died = JobDied(how)
    error = f"{type(died).__name__}: {died}"
    if (job_dir / "run.json").is_file():
        mark_failed(job_dir, error, exit_code=exit_code or 1)
    record_failure(job_dir, error, overrides)
    train_log = job_dir / "train.log"
    log.error("Sweep job %d failed (%s): %s%s", idx, " ".join(overrides), error,
              f"; log: {train_log}" if train_log.is_file() else " (its run never started: no log)")
    _write_summary(config)
    mark_reported(died, idx)
    return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=died)


def record_cancelled(config: Any, job_dir: Path, overrides: Sequence[str], idx: int, slurm_job: Any) -> Any:
    """The JobReturn of a SLURM job cancelled before its run started: listed ``cancelled``, and a rerun runs it."""


    stopped = JobInterrupted(f"Sweep job {idx} ({' '.join(overrides)}): SLURM job {slurm_job} was cancelled before its "
                             f"run started: rerun {same_sweep(config)} to run it")
    stopped.sweep_dir = Path(str(config.hydra.sweep.dir))
    log.warning("%s", stopped)
    _write_summary(config)
    return ReportedFailure(overrides=list(overrides), status=JobStatus.FAILED, _return_value=stopped)


def _write_summary(config: Any) -> None:
    try:
        write_summary(Path(str(config.hydra.sweep.dir)), config.get("objective", "val/accuracy"),
                      config.get("objective_mode", "max"))
    except (OSError, ValueError):
        pass  # the sweep's end writes it again
