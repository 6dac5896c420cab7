"""``hydra/launcher=slurm`` (waits for the jobs) and ``slurm_detached`` (returns once they are submitted): the
plugin's SLURM launcher, submitting only the jobs that neither finished nor are queued already, each with the
config the sweep composed; each job dir gets ``submitted.json`` (SLURM id, overrides, logs) for the summary."""
from __future__ import annotations

import atexit
import contextlib
import copy
import io
import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import log as plugin_log
from omegaconf import open_dict

from launcher.engine.errors import ConfigError
from launcher.engine.files import atomic_write
from launcher.engine.signals import SignalLatch, handlers
from launcher.runs.rundir import same_sweep
from launcher.sweep.plugins import (SWEEP, as_plain, finished_jobs, launcher_errors_explained, number_ranges,
                                    record_cancelled, record_dead_job, say_going_on, take_composed)
from launcher.sweep.plugins import job_dir as plugin_job_dir
from launcher.runs.slurmstate import SLURM_ACTIVE, asked_of, has_accounting, never_starts, slurm_states, what_a_node_has
from launcher.sweep.summary import cancelled_before_its_run

log = logging.getLogger("launcher")


class SlurmJob(SlurmLauncher):
    """What each SLURM job runs: the plugin's ``SlurmLauncher``, with the config the sweep composed (``composed``) on
    every attempt, and exit status 1 for a failed run (SLURM then records it FAILED, not COMPLETED)."""

    composed: Any = None  # the job's config as the sweep (or its first attempt) composed it

    def __call__(self, sweep_overrides: List[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: Dict[type, Any], composed: Any = None) -> JobReturn:
        if self.composed is None and composed is not None:  # pickled apart: a sweep of many jobs holds bytes, not configs

            self.composed = pickle.loads(composed)
        with SignalLatch() as latch:  # over submitit's handlers: the run takes a held signal at its first step, then chains to them
            held = os.environ.pop(HELD_SIGNAL, None)
            if held:  # came before submitit's handlers were in place (see _HELD_START)
                os.kill(os.getpid(), int(held))
            ret = self._run_job(sweep_overrides, job_dir_key, job_num, singleton_state)
            if ret.status == JobStatus.COMPLETED:
                # its result is in: a later preemption or walltime signal would requeue or kill a finished job
                latch.ignore_from_now()
        if ret.status == JobStatus.FAILED and os.environ.get("SLURM_JOB_ID"):
            exit_failed_at_exit()
        return ret

    def _run_job(self, sweep_overrides: List[str], job_dir_key: str, job_num: int, singleton_state: Dict[type, Any]) -> JobReturn:
        """The plugin's ``BaseSubmititLauncher.__call__``, composing the job's config on its first attempt only."""
        import submitit

        Singleton.set_state(singleton_state)
        setup_globals()
        if self.composed is None:
            self.composed = self.hydra_context.config_loader.load_sweep_config(self.config, sweep_overrides)
        sweep_config = copy.deepcopy(self.composed)
        with open_dict(sweep_config.hydra.job) as job:
            job.id = submitit.JobEnvironment().job_id
            job.num = job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                       job_dir_key=job_dir_key, job_subdir_key="hydra.sweep.subdir")


HELD_SIGNAL = "LAUNCHER_HELD_SIGNAL"
# What srun runs instead of ``python -u -m submitit.core._submit <folder>``: the same, holding SIGUSR2 and SIGTERM
# from the first line (submitit's handlers come only once the job is unpickled); SlurmJob passes a held one on.
_HELD_START = ("import os, signal, sys\n"
               "sys.path[0] = os.getcwd()  # as python -m puts it: the submission dir, for the user's _target_s\n"
               "def hold(signum, frame):  # a preemption (SIGUSR2, requeue) wins over a SIGTERM\n"
               f"    if signum == signal.SIGUSR2 or {HELD_SIGNAL!r} not in os.environ:\n"
               f"        os.environ[{HELD_SIGNAL!r}] = str(signum)\n"
               "signal.signal(signal.SIGUSR2, hold)\n"
               "signal.signal(signal.SIGTERM, hold)\n"
               "from submitit.core.submission import submitit_main\n"
               "submitit_main()\n")


def exit_failed_at_exit() -> None:
    """Exit with status 1 once this process ends normally (after submitit wrote the result), logs flushed."""
    def end() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(1)

    atexit.register(end)


def compose_jobs(launcher: Any, job_overrides: Sequence[Sequence[str]]) -> List[Any]:
    """Each job's config, composed now (the config files as they are at submission) and pickled; None for one that does
    not compose (its job fails as a run would)."""
    if len(job_overrides) > 20:  # about 0.08 s each
        log.info("Composing the configs of %d jobs to submit them with (about %.0f s)", len(job_overrides),
                 0.08 * len(job_overrides))
    configs: List[Optional[bytes]] = []
    for overrides in job_overrides:
        config = take_composed(launcher.config, overrides)  # composed already to check the sweep
        if config is None:
            try:
                config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
            except Exception:  # noqa: BLE001 -- said by the job, as a run says it
                config = None
        configs.append(pickle.dumps(config) if config is not None else None)
    return configs


def queued_jobs(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, done: Dict[int, Any],
                waits: bool = False) -> Dict[int, Tuple[str, int]]:
    """``{job number: (SLURM job id, tasks)}`` of this sweep's jobs SLURM holds already (an earlier submission), not
    submitted again; one queued for good is cancelled and submitted anew. Raises :class:`ConfigError` for one queued
    with other overrides, or where ``squeue`` cannot say. ``waits``: the sweep waits for them."""
    known: Dict[int, Tuple[str, List[str], int]] = {}
    settings: Dict[int, Dict[str, Any]] = {}  # the hydra.launcher settings each was submitted with
    for offset, overrides in enumerate(job_overrides):
        idx = initial_job_idx + offset
        if idx in done:
            continue
        try:
            path = plugin_job_dir(launcher.config, overrides, idx, launcher.hydra_context.config_loader)
            mark = json.loads((path / "submitted.json").read_text())
        except Exception:  # noqa: BLE001 -- no submission recorded (or a job that does not compose: it fails as it runs)
            continue
        if isinstance(mark, dict) and mark.get("job_id"):
            tasks = mark.get("tasks") if isinstance(mark.get("tasks"), int) else None
            known[idx] = (str(mark["job_id"]), list(mark.get("overrides") or []), tasks or 0)
            if isinstance(mark.get("launcher"), dict):  # submissions before 2026-12-07 lack it
                settings[idx] = mark["launcher"]
    if not known:
        return {}
    reasons: Dict[str, str] = {}
    states = slurm_states(sorted({job for job, _, _ in known.values()}), reasons)
    if not states:
        ids = sorted(known)
        raise ConfigError(f"cannot ask SLURM whether sweep job(s) {number_ranges(ids)}, submitted earlier as SLURM "
                          f"job(s) {', '.join(known[i][0] for i in ids[:5])}{', ...' if len(ids) > 5 else ''}, are still "
                          f"queued (squeue failed): rerun once squeue answers")
    queued: Dict[int, Tuple[str, int]] = {}
    stuck: List[str] = []
    for idx, (job, overrides, tasks) in known.items():
        state = states.get(job)
        if state not in SLURM_ACTIVE:
            continue
        if state == "PENDING" and never_starts(reasons.get(job, "")):
            stuck.append(job)
            continue
        wanted = list(job_overrides[idx - initial_job_idx])
        if overrides and sorted(overrides) != sorted(wanted):
            before = dict(o.partition("=")[::2] for o in overrides)
            after = dict(o.partition("=")[::2] for o in wanted)
            changed = ", ".join(f"{k}: {before.get(k, '<absent>')} -> {after.get(k, '<absent>')}"
                                for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k))
            raise ConfigError(f"sweep job {idx} is {state.lower()} in SLURM already (job {job}) with other overrides "
                              f"than this sweep's ({changed}); wait for it to end, or stop it (scancel --signal=TERM "
                              f"{job}) to rerun it so")
        queued[idx] = (job, tasks)
    if stuck:
        subprocess.run(["scancel", *stuck], capture_output=True, timeout=60)
        log.warning("Cancelled SLURM job(s) %s, queued for good (%s): this sweep submits them anew", ", ".join(stuck),
                    ", ".join(sorted({reasons[j] for j in stuck})))
    if queued:
        log.info("%s %s queued or running in SLURM already (%s): not submitted again%s",
                 "Sweep jobs" if len(queued) > 1 else "Sweep job", number_ranges(sorted(queued)) +
                 (" are" if len(queued) > 1 else " is"), ", ".join(queued[i][0] for i in sorted(queued)),
                 "; waiting for them (Ctrl-C stops waiting, not the jobs)" if waits else "")
        _warn_settings_not_applied(queued, settings, submitted_settings(launcher.params))
    return queued


def submitted_settings(params: Dict[str, Any]) -> Dict[str, Any]:
    """A SLURM launcher's ``hydra.launcher`` settings as ``submitted.json`` keeps them (JSON's types)."""
    return json.loads(json.dumps({k: v for k, v in params.items() if k != "submitit_folder"}, default=str))


def _warn_settings_not_applied(queued: Dict[int, Tuple[str, int]], settings: Dict[int, Dict[str, Any]],
                               now: Dict[str, Any]) -> None:
    """Warn where the ``hydra.launcher`` settings differ from those the queued jobs were submitted with."""
    was: Dict[str, List[str]] = {}  # each setting that changed: the values the jobs were submitted with
    jobs = []
    for idx in sorted(queued):
        then = settings.get(idx)
        if then is None:
            continue
        diff = [k for k in set(then) | set(now) if then.get(k, "<unset>") != now.get(k, "<unset>")]
        if diff:
            jobs.append(idx)
        for k in diff:
            if str(then.get(k, "<unset>")) not in was.setdefault(k, []):
                was[k].append(str(then.get(k, "<unset>")))
    if not jobs:
        return

    ids = [queued[i][0] for i in jobs]
    log.warning("hydra.launcher changed since sweep job(s) %s were submitted (%s): SLURM keeps their old settings; "
                "to apply it, scancel %s%s (a running one checkpoints) and rerun", number_ranges(jobs),
                ", ".join(f"{k}: {' or '.join(v)} -> {now.get(k, '<unset>')}" for k, v in sorted(was.items())),
                " ".join(ids[:10]), " ..." if len(ids) > 10 else "")


def record_submitted(launcher: Any, submitted: Sequence[Tuple[Any, int, List[str]]]) -> List[Path]:
    """``submitted.json`` in each job's dir (``(job, number, overrides)``): its SLURM id and logs, for the summary to ask
    SLURM about. Returns the job dirs, in that order."""
    dirs = []
    settings = submitted_settings(launcher.params)
    for job, idx, overrides in submitted:
        job_dir = plugin_job_dir(launcher.config, overrides, idx, launcher.hydra_context.config_loader)
        dirs.append(job_dir)
        try:  # the run's attempts before this submission: the sweep's end line counts requeues from there
            attempt = int(json.loads((job_dir / "run.json").read_text()).get("attempt") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            attempt = 0
        info = {"job": idx, "job_id": job.job_id, "overrides": list(overrides), "tasks": job.num_tasks,
                "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr), "attempt": attempt,
                "launcher": settings}
        if SWEEP.started_ns is not None:  # the sweep it is a job of (see launcher.sweep.plugins.mark_pending)
            info["sweep"] = SWEEP.started_ns
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(job_dir / "submitted.json", (json.dumps(info, indent=2) + "\n").encode())
        except OSError as err:  # the jobs are submitted: the summary then knows less of them, nothing more
            log.warning("Could not record SLURM job %s in %s: %s", job.job_id, job_dir, err)
    return dirs


def done_and_queued(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                    waits: bool = False) -> Tuple[Dict[int, Any], Dict[int, Tuple[str, int]]]:
    """The jobs that finished (:func:`launcher.sweep.plugins.finished_jobs`) and those SLURM holds (:func:`queued_jobs`);
    says which others train on from a checkpoint."""
    going_on: List[Tuple[int, Path]] = []
    done = finished_jobs(launcher, job_overrides, initial_job_idx, "submitted", going_on)
    queued = queued_jobs(launcher, job_overrides, initial_job_idx, done, waits=waits)
    say_going_on([(idx, path) for idx, path in going_on if idx not in queued])
    return done, queued


class _SubmittingLauncher(SlurmLauncher):
    """The plugin's ``SlurmLauncher``, submitting only the jobs that neither finished nor are queued in SLURM already."""

    NAME = "slurm"

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, waits: bool,
                submitted: List[tuple], attached: List[tuple]) -> List[Any]:
        """Each job's JobReturn (finished, or queued already and not waited for) or submitit job. Appends
        ``(job, number, overrides, dir)`` to ``submitted`` for each job submitted, and with ``waits`` to ``attached``
        for each queued by an earlier submission."""
        from launcher.sweep import submitit_adapter as adapter

        check_requests(self.params, self.NAME)
        done, queued = done_and_queued(self, job_overrides, initial_job_idx, waits=waits)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        rows = adapter.job_params(self, job_overrides, initial_job_idx)
        todo = [row for row in rows if row[2] not in done and row[2] not in queued]
        with launcher_errors_explained(self.NAME, self.params, sweep_dir):
            executor = adapter.executor(self, adapter.SweepSlurmExecutor, code=_HELD_START)
            plugin_log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
            for row in rows:
                plugin_log.info(f"\t#{row[2]} : {' '.join(filter_overrides(row[0]))}")
            sweep_dir.mkdir(parents=True, exist_ok=True)
            if "mode" in self.config.hydra.sweep:
                os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
            jobs = []
            if todo:
                configs = compose_jobs(self, [row[0] for row in todo])
                with contextlib.redirect_stderr(io.StringIO()):  # submitit prints a refusing sbatch's words: the error quotes them
                    jobs = executor.map_array(as_plain(SlurmJob, dict(self.__dict__)),
                                              *zip(*[(*row, config) for row, config in zip(todo, configs)]))
        fresh = [(job, row[2], list(row[0])) for job, row in zip(jobs, todo)]
        submitted.extend((*each, path) for each, path in zip(fresh, record_submitted(self, fresh)))
        tasks = int(self.params.get("tasks_per_node") or 1) * int(self.params.get("nodes") or 1)
        new = iter(jobs)
        out: List[Any] = []
        for overrides, _, idx, _, _ in rows:
            if idx in done:
                out.append(done[idx])
            elif idx in queued and waits:  # waited for as if this sweep had submitted it
                job_id, its_tasks = queued[idx]
                job = adapter.slurm_job(executor.folder, job_id, its_tasks or tasks)
                attached.append((job, idx, list(overrides), plugin_job_dir(self.config, overrides, idx,
                                                                             self.hydra_context.config_loader)))
                out.append(job)
            elif idx in queued:
                out.append(_returned(overrides, f"queued already as SLURM job {queued[idx][0]}"))
            else:
                out.append(next(new))
        return out


def _returned(overrides: Sequence[str], what: str) -> JobReturn:
    ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
    ret.return_value = what
    return ret


class DetachedSlurmLauncher(_SubmittingLauncher):
    """The ``slurm`` launcher, returning once the job array is submitted; prints the job ids and sweep dir."""

    NAME = "slurm_detached"

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        submitted: List[tuple] = []
        out = self._submit(job_overrides, initial_job_idx, False, submitted, [])
        ids = {id(job): job.job_id for job, _, _, _ in submitted}
        returns = [each if isinstance(each, JobReturn) else _returned(o, f"submitted as SLURM job {ids[id(each)]}")
                   for each, o in zip(out, job_overrides)]
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        if submitted:
            log.info("Submitted %d job(s) to SLURM: %s", len(submitted), ", ".join(str(j.job_id) for j, *_ in submitted))
        else:
            log.info("Nothing submitted to SLURM: every job of the sweep had finished or is queued already")
        log.info("Sweep dir: %s (python -m launcher.sweep.summary %s shows their progress)", sweep_dir, sweep_dir)
        return returns


class _Stop(Exception):
    pass


class AttachedSlurmLauncher(_SubmittingLauncher):
    """The plugin's ``slurm`` launcher, which waits for the jobs; stopped while it waits (Ctrl-C,
    SIGTERM), it says that the jobs go on, with their ids and how to follow or cancel them."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.core.utils import UncompletedJobError

        from launcher.sweep import submitit_adapter as adapter

        jobs: List[tuple] = []  # (job, job number, overrides, dir) of each job submitted
        attached: List[tuple] = []  # ... of each queued already by an earlier submission, waited for
        where: Dict[int, tuple] = {}  # by id(job): its number, overrides and dir
        since: Dict[int, float] = {}  # by id(job), of a job queued by an earlier submission: when it was submitted
        never: Dict[str, str] = {}  # by SLURM job id: why SLURM will not start it (the job is cancelled)
        accounting = has_accounting()
        sweep_start = time.time()  # a run.json older than a job's submission is an earlier attempt's

        def results_or_died(job: Any) -> Any:  # a job that ended without a result is one failed job, not the sweep's end
            idx, overrides, path = where[id(job)]
            submitted = since.get(id(job), sweep_start)
            job.wait()
            if not any(t.paths.result_pickle.exists() for t in adapter.tasks_of(job)) and \
                    no_result_coming(job, path, submitted):
                adapter.no_wait_for_result(job)
            try:
                return job.results()
            except UncompletedJobError:
                state = str(job.state)
                try:  # its run never recorded a start in this attempt
                    unstarted = (path / "run.json").stat().st_mtime < submitted
                except OSError:
                    unstarted = True
                if unstarted and str(job.job_id) in never:
                    return [record_dead_job(self.config, path, overrides, idx, f"SLURM job {job.job_id}, cancelled by "
                                            f"the sweep: {never[str(job.job_id)]}", since=submitted)]
                if unstarted and cancelled_before_its_run(state, [str(job.paths.stderr), str(job.paths.stdout)]):
                    return [record_cancelled(self.config, path, overrides, idx, job.job_id)]
                how = (f"SLURM job {job.job_id} ended {state} without a result (killed, out of memory, cancelled or "
                       f"its node lost?); its log: {job.paths.stderr}")
                return [record_dead_job(self.config, path, overrides, idx, how, since=submitted)]

        def cancel_jobs_that_never_start(watcher: Any) -> None:
            """Cancel the waiting jobs SLURM keeps pending for a reason that waiting does not clear (more CPUs
            than a node has, say): the sweep would wait for them for ever. Each is one failed job."""
            waiting = [j for j in adapter.waiting_ids(watcher) if j not in never]
            reasons: Dict[str, str] = {}
            states = slurm_states(sorted(waiting), reasons) if waiting else {}
            stuck = {j: (reasons[j], never_starts(reasons[j])) for j in waiting
                     if states.get(j) == "PENDING" and never_starts(reasons.get(j, ""))}
            if not stuck:
                return
            asked = asked_of(self.params)
            node = what_a_node_has(self.params.get("partition"))
            for reason in sorted({r for r, _ in stuck.values()}):
                ids = sorted(j for j, (r, _) in stuck.items() if r == reason)
                why = (f"SLURM will not start it as submitted ({reason}: the job {stuck[ids[0]][1]}); hydra.launcher: "
                       f"{asked}{'; ' + node if node else ''}")
                for j in ids:
                    never[j] = why
                log.error("SLURM will not start job(s) %s as submitted (%s): cancelled them rather than wait for ever",
                          ", ".join(ids), reason)
                subprocess.run(["scancel", *ids], capture_output=True, timeout=60)

        def no_result_coming(job: Any, path: Path, submitted: float) -> bool:
            """Whether an ended job will write no result: cancelled, or its run stopped itself on a signal (exit 75,
            its checkpoint on disk; this attempt's ``run.json``, written since it was ``submitted``, says so)."""
            if str(job.state).startswith("CANCELLED") or str(job.job_id) in never:
                return True
            try:
                record = path / "run.json"
                return record.stat().st_mtime >= submitted and json.loads(record.read_text()).get("status") == "interrupted"
            except (OSError, ValueError):
                return False

        def update(watcher: Any, sacct: Any) -> None:
            cancel_jobs_that_never_start(watcher)
            if accounting:
                sacct()
                fill_states_from_scontrol(watcher)  # only jobs sacct does not list (yet)
                return
            # No accounting (a laptop's cluster): sacct fails and submitit reads every job UNKNOWN; scontrol knows them
            fill_states_from_scontrol(watcher, every_waiting_job=True)
            adapter.mark_finished(watcher)

        def stop(signum: int, frame: Any) -> None:
            raise _Stop(signal.Signals(signum).name)

        try:
            with handlers(stop, (signal.SIGINT, signal.SIGTERM)), \
                    launcher_errors_explained("slurm", self.params, Path(str(self.config.hydra.sweep.dir))):
                out = self._submit(job_overrides, initial_job_idx, True, jobs, attached)
                for job, idx, overrides, path in jobs + attached:
                    where[id(job)] = (idx, overrides, path)
                for job, _, _, path in attached:
                    with contextlib.suppress(OSError):  # its run may have started (and been requeued) before this sweep
                        since[id(job)] = (path / "submitted.json").stat().st_mtime
                if jobs:
                    log.info("Submitted %d job(s) to SLURM: %s; waiting for them (Ctrl-C stops waiting, not the jobs)",
                             len(jobs), ", ".join(str(j.job_id) for j, *_ in jobs))
                with adapter.slurm_states_from(update):
                    return [each if isinstance(each, JobReturn) else results_or_died(each)[0] for each in out]
        except (_Stop, KeyboardInterrupt) as err:
            name = str(err) or "SIGINT"
            running = [str(j.job_id) for j, *_ in jobs + attached]
            arrays = sorted({i.split("_")[0] for i in running})
            log.warning("%s: stopped waiting; the %d SLURM job(s) go on (%s). Follow: python -m launcher.sweep.summary %s; "
                        "wait again: rerun %s; stop: scancel %s", name, len(running), ", ".join(running) or "none submitted",
                        self.config.hydra.sweep.dir, same_sweep(self.config), " ".join(arrays) or "<job id>")
            raise SystemExit(130 if name == "SIGINT" else 143) from None


_AT_LEAST = {"timeout_min": 1, "cpus_per_task": 1, "tasks_per_node": 1, "nodes": 1, "mem_gb": 1, "gpus_per_node": 0,
             "array_parallelism": 1, "signal_delay_s": 0, "max_num_timeout": 0}
_WHAT = {"timeout_min": "minutes of walltime", "mem_gb": "GB of memory per node", "signal_delay_s": "seconds",
         "array_parallelism": "jobs of the array at once", "max_num_timeout": "requeues after a timeout"}


def check_requests(params: Dict[str, Any], launcher: str) -> None:
    """Raise :class:`ConfigError` for a SLURM request below its least (``timeout_min=-5``): submitit checks only types."""
    for key, least in _AT_LEAST.items():
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value >= least:
            continue
        raise ConfigError(f"hydra.launcher.{key}={value}: hydra/launcher={launcher} takes {least} or more"
                          f"{' (' + _WHAT[key] + ')' if key in _WHAT else ''}")
    check_slurm_config(launcher)


# Where SLURM's commands look for their config when SLURM_CONF is not set (Debian's slurm-wlm, older packages)
DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")


def check_slurm_config(launcher: str) -> None:
    """Raise :class:`ConfigError` where SLURM's commands find no config (no ``SLURM_CONF``, no default file, ``sinfo``
    cannot configure): before the sweep dir is made."""
    if os.environ.get("SLURM_CONF") or any(os.path.isfile(path) for path in DEFAULT_CONFS):
        return
    try:
        probe = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):  # no sinfo, or no answer: sbatch's own error says it
        return
    if probe.returncode != 0 and "configuration source" in probe.stderr + probe.stdout:
        raise ConfigError(f"hydra/launcher={launcher}: SLURM finds no config ({DEFAULT_CONFS[0]} is missing): export "
                          f"SLURM_CONF=<the cluster's slurm.conf> (python -m launcher.localslurm start prints the local one)")


# States in which a job has ended, and those submitit waits in; any other (CONFIGURING, SUSPENDED, STOPPED,
# REQUEUE_HOLD...) is read as RUNNING: submitit takes every state it does not list as the job's end.
_ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}
_WAITING_STATES = {"READY", "PENDING", "RUNNING", "REQUEUED", "COMPLETING", "PREEMPTED"}


def fill_states_from_scontrol(watcher: Any, every_waiting_job: bool = False) -> None:
    """Set the states ``sacct`` did not give (a cluster without accounting) from ``scontrol``; a job the controller no
    longer knows (``MinJobAge`` past) has ended. Else submitit waits for ever for a job that ended without a result."""
    from launcher.sweep import submitit_adapter as adapter

    waiting = [j for j in adapter.waiting_ids(watcher) if every_waiting_job or adapter.state_of(watcher, j) == "UNKNOWN"]
    if not waiting:
        return
    known: dict = {}
    for array in sorted({j.split("_")[0] for j in waiting}):
        try:
            out = subprocess.run(["scontrol", "show", "job", "-o", array], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return  # no scontrol: leave the states to submitit
        for line in out.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            state, tasks = fields.get("JobState"), fields.get("ArrayTaskId")
            if not state:
                continue
            if tasks is None:
                known[fields.get("JobId", "")] = state
                continue
            for part in tasks.split("%")[0].split(","):
                first, _, last = part.partition("-")
                if first.isdigit():
                    for task in range(int(first), int(last or first) + 1):
                        known[f"{fields.get('ArrayJobId', array)}_{task}"] = state
        if out.returncode != 0 and "Invalid job id" not in out.stderr:
            continue  # scontrol failed otherwise: this round tells nothing
        for job_id in waiting:
            if job_id.split("_")[0] != array:  # (a one-job sweep's job is a plain job: its id is the "array"'s)
                continue
            # a task the controller no longer lists (purged after MinJobAge, or the whole array gone) has ended
            state = known.get(job_id, "ENDED")
            if state not in _ENDED_STATES and state != "ENDED":
                state = state if state in _WAITING_STATES else "RUNNING"  # CONFIGURING, SUSPENDED...: not done
            adapter.set_state(watcher, job_id, state)


# the names conf/hydra/launcher/slurm.yaml and slurm_detached.yaml give
AttachedSlurmLauncher.__module__ = DetachedSlurmLauncher.__module__ = "hydra_plugins.launcher_slurm"
PLUGINS = (AttachedSlurmLauncher, DetachedSlurmLauncher)
