"""``hydra/launcher=local``: hydra-submitit-launcher's local launcher, one process per job, at most ``max_parallel``
at a time (default: one per usable CPU core), each forked from the sweep's fork server
(:mod:`launcher.sweep.forkserver`). A job that fails or dies without a result is one failed job."""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher
from omegaconf import OmegaConf, open_dict

from launcher.sweep import forkserver
from launcher.engine.distributed import CPUS_ENV, omp_threads, usable_cores
from launcher.engine.errors import ConfigError
from launcher.sweep.plugins import (BASIC_SWEEPERS, as_plain, finished_jobs, job_dir, launcher_errors_explained, mark_pending,
                              record_dead_job, stop_sweep, take_composed)
from launcher.engine.signals import EXIT_INTERRUPTED, handlers, process_stat, suspend_along
from launcher.sweep.summary import job_end_line

log = logging.getLogger("launcher")


_stat = process_stat  # the fields of /proc/<pid>/stat after the command name, or None


def child_pids() -> List[int]:
    """This process's children (Linux's /proc; elsewhere none are found)."""
    me = str(os.getpid())
    entries = os.listdir("/proc") if os.path.isdir("/proc") else []
    return [int(e) for e in entries if e.isdigit() and (_stat(e) or ["", ""])[1] == me]


def descendants() -> List[int]:
    """This process's children, theirs, and so on (Linux's /proc; elsewhere none are found)."""
    parents: Dict[str, List[int]] = {}
    for entry in (os.listdir("/proc") if os.path.isdir("/proc") else []):
        fields = _stat(entry) if entry.isdigit() else None
        if fields:
            parents.setdefault(fields[1], []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        children = parents.get(str(todo.pop()), [])
        found += children
        todo += children
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, already ended, does not)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


class StopJobsOnSignal:
    """While the sweep runs: SIGTERM, SIGINT or SIGHUP stops its jobs (each checkpoints), waits ``wait_s`` at most,
    says how to resume and exits 75; a second signal ends the wait. SIGTSTP stops the jobs with the sweep."""

    RESEND_S = 2.0  # seconds between the SIGTERMs to a job that has not ended yet
    REPEAT_S = 1.0  # the same signal again within this: one request sent twice (GNU timeout signals us, then our group)

    def __init__(self, sweep_dir: str, wait_s: float = 120.0) -> None:
        self.sweep_dir, self.wait_s = sweep_dir, wait_s
        self.starting = threading.Lock()  # held while a job starts: none starts once stopping
        self.stopping = False
        self.spare: set = set()  # children that are not jobs (the fork server: it ends with the jobs)
        self._first: Optional[Tuple[int, float]] = None  # the signal that stopped the sweep, and when
        sigs = [s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)) if s is not None]
        self._installed = handlers(self._stop, sigs)
        # Ctrl-Z: the jobs (in sessions of their own, which the terminal does not reach) stop with the sweep
        self._suspend = handlers(suspend_along(descendants), [signal.SIGTSTP] if hasattr(signal, "SIGTSTP") else [])

    def __enter__(self) -> "StopJobsOnSignal":
        self._installed.__enter__()
        self._suspend.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._suspend.__exit__(*exc)
        self._installed.__exit__(*exc)

    def _job_pids(self) -> List[int]:
        return [pid for pid in child_pids() if pid not in self.spare]

    def _stop(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self._first is not None and self._first[0] == signum and now - self._first[1] < self.REPEAT_S:
            return  # the same stop sent twice at once (timeout -s TERM): the first one is being carried out
        if self._first is None:
            self._first = (signum, now)
        if self.stopping:
            log.warning("%s again: not waiting for the jobs; each still writes its checkpoint and ends", name)
            for pid in self._job_pids():  # once more, for a job that was still starting up at the first signal
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            raise SystemExit(EXIT_INTERRUPTED)
        with self.starting:
            self.stopping = True
            jobs = self._job_pids()
        log.warning("%s: stopping the sweep's %d running job(s); each saves a checkpoint first", name, len(jobs))
        for pid in jobs:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.wait_s
        resend = time.monotonic() + self.RESEND_S
        while time.monotonic() < deadline and any(_alive(p) for p in jobs):
            time.sleep(0.2)
            if time.monotonic() >= resend:  # a job still starting up passes SIGTERM by (submitit's handler)
                resend += self.RESEND_S     # until its trainer's handler takes over: ask again until it ends
                for pid in jobs:
                    with contextlib.suppress(OSError):
                        if _alive(pid):
                            os.kill(pid, signal.SIGTERM)
        stop_sweep(name, self.sweep_dir)


def how_it_died(exit_code: Optional[int]) -> str:
    """What a job's controller exit status (:func:`launcher.sweep.forkserver.run_controller`) says of a job without result."""
    if exit_code is not None and exit_code > 128:
        number = exit_code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "a signal"
        hint = ": out of memory (the OOM killer), or kill -9?" if number == signal.SIGKILL else ""
        return f"killed by {name} (signal {number}) before it returned a result{hint}"
    if exit_code is not None and exit_code < 0:
        return f"its submitit controller was killed by {signal.Signals(-exit_code).name} before the job returned a result"
    if exit_code:
        return f"its process exited with status {exit_code} without returning a result"
    return "its process ended without returning a result"


def _last_line(err: Exception) -> str:
    """The error line of the traceback a submitit FailedJobError quotes between dashed lines."""
    parts = str(err).split("-" * 22)
    lines = parts[1].strip().splitlines() if len(parts) > 2 else []
    return lines[-1] if lines else str(err).splitlines()[0]


def _as_typed(value: Any) -> str:
    """A config value as it is written on the command line: true, null, abc (not Python's True, None, 'abc')."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


def check_max_parallel(max_parallel: Any) -> None:
    """Raise :class:`ConfigError` for a ``hydra.launcher.max_parallel`` that is not null or a whole number >= 1."""
    if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1):
        raise ConfigError(f"hydra.launcher.max_parallel={_as_typed(max_parallel)}: use a whole number >= 1, "
                          f"or null for one job per usable CPU core ({usable_cores()} here)")


def check_cpus_per_task(cpus_per_task: Any) -> None:
    """Raise :class:`ConfigError` for a ``hydra.launcher.cpus_per_task`` that is not null or a whole number >= 1."""
    if cpus_per_task is not None and (isinstance(cpus_per_task, bool) or not isinstance(cpus_per_task, int)
                                      or cpus_per_task < 1):
        raise ConfigError(f"hydra.launcher.cpus_per_task={_as_typed(cpus_per_task)}: use a whole number >= 1 (each job's "
                          f"threads), or null for each job's share of the {usable_cores()} usable CPU cores here")


def job_threads(cpus_per_task: Optional[int], max_parallel: int) -> int:
    """The CPUs, so threads, that each local job takes: ``cpus_per_task``, or null for its share of the machine."""
    if cpus_per_task is not None:
        return cpus_per_task
    return max(1, usable_cores() // max_parallel)


def warn_if_oversubscribed(cpus_per_task: Optional[int], max_parallel: int, side_by_side: int, ranks: int = 1) -> None:
    """Warn where ``side_by_side`` jobs of ``ranks`` processes each would run more threads than there are usable cores,
    naming the setting that asks for it."""
    omp = omp_threads()
    threads = omp or job_threads(cpus_per_task, max_parallel)
    cores = usable_cores()
    per_job = omp * ranks if omp else max(threads, ranks)
    if per_job * side_by_side <= cores:
        return
    if ranks > 1 and threads * side_by_side <= cores:  # the job's CPUs would do, but not for this many processes
        fits = max(1, cores // ranks)
        log.warning("trainer.devices=%d with %d jobs at once: %d training processes on %d usable CPU cores (%d a job); "
                    "hydra.launcher.max_parallel=%d gives each job %d", ranks, side_by_side, ranks * side_by_side,
                    cores, threads, fits, cores // fits)
        return
    if omp is None and cpus_per_task is None:  # one thread a job: more jobs than cores
        log.warning("hydra.launcher.max_parallel=%d: %d jobs at once on %d usable CPU cores; they will wait for each "
                    "other's cores (null: one job per core)", max_parallel, side_by_side, cores)
        return
    setting, advice = (f"OMP_NUM_THREADS={omp}", "unset it for each job's share") if omp is not None else \
        (f"hydra.launcher.cpus_per_task={cpus_per_task}", "null takes each job's share")
    log.warning("%s with %d jobs at once: %d threads on %d usable CPU cores; the jobs will wait for each other's "
                "cores (%s)", setting, side_by_side, threads * side_by_side, cores, advice)


def check_one_task(launcher: Any) -> None:
    """Raise :class:`ConfigError` for ``tasks_per_node`` or ``nodes`` above 1: local copies of a run are no DDP job."""
    for key, devices in (("tasks_per_node", "trainer.devices={n}"), ("nodes", "trainer.devices=N")):
        n = launcher.get(key, 1)
        if n not in (None, 1):
            raise ConfigError(f"hydra.launcher.{key}={n}: the local launcher runs one task per job; for DDP on this "
                              f"machine use {devices.format(n=n)} (hydra/launcher=slurm takes {key} for SLURM tasks)")


def check_fork_server(fork_server: Any) -> None:
    """Raise :class:`ConfigError` for a ``hydra.launcher.fork_server`` that is not true or false."""
    if not isinstance(fork_server, bool):
        raise ConfigError(f"hydra.launcher.fork_server={_as_typed(fork_server)}: use true (fork each job from a process that "
                          "has imported torch once, the default) or false (start each job afresh)")


_server: List[Optional[forkserver.ForkServer]] = []  # this sweep process's fork server (None: it could not start)


def fork_server(log_file: Optional[Path] = None) -> Optional[forkserver.ForkServer]:
    """This sweep process's fork server, started by the first to ask (as the command line is read, or as the sweep is
    planned) so it imports torch while Hydra composes the jobs; its imports' output goes to ``log_file``. None
    where it cannot run."""
    if not _server and forkserver.supported():
        try:
            _server.append(forkserver.ForkServer())
            atexit.register(_end_unused_fork_server)
        except OSError as err:
            _server.append(None)
            log.warning("Could not start the fork server (%s): each job starts a fresh process", err)
    server = _server[0] if _server else None
    if server is not None and log_file is not None and server.log is None:
        server.log = str(log_file)
    return server


def _end_unused_fork_server() -> None:
    """At exit: a fork server that forked no job ends now, not once it has finished importing torch."""
    server = _server[0] if _server else None
    if server is not None and not server.connected:
        server.process.kill()
        server.process.wait()


def start_fork_server_early(overrides: Sequence[str]) -> None:
    """Start the fork server before Hydra composes the config where the command line picks ``hydra/launcher=local``
    (its imports then overlap the composing); a config that turns out otherwise stops it."""
    launcher, fork = None, True
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "hydra/launcher":
            launcher = value
        elif key == "hydra.launcher.fork_server":
            fork = value.strip().lower() == "true"
    if launcher == "local" and fork:
        fork_server()


def stop_fork_server() -> None:
    """Close the fork server, if one was started: for a sweep that turned out not to use it."""
    if _server and _server[0] is not None:
        _server[0].close()


class ComposedJob(LocalLauncher):
    """A local job as its process receives it: the plugin's launcher with the job's config as the sweep composed it,
    used once (a requeued job composes its config again)."""

    composed: Any = None  # the job's config
    composed_for: Sequence[str] = ()  # its overrides

    def __call__(self, sweep_overrides: List[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: Dict[Any, Any]) -> Any:
        if self.composed is None or list(sweep_overrides) != list(self.composed_for):
            return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        import submitit

        # the plugin's __call__, less composing the config
        Singleton.set_state(singleton_state)
        setup_globals()
        config, self.composed = self.composed, None
        with open_dict(config.hydra.job) as job:
            job.id = submitit.JobEnvironment().job_id
            job.num = job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                       job_dir_key=job_dir_key, job_subdir_key="hydra.sweep.subdir")


def _as_composed_job(state: Dict[str, Any], composed: Any, overrides: Sequence[str]) -> ComposedJob:
    job = as_plain(ComposedJob, state)
    job.composed, job.composed_for = composed, list(overrides)
    return job


class _NotStarted(Exception):
    """The sweep is stopping: no more jobs start."""


class CappedLocalLauncher(LocalLauncher):
    """The plugin's LocalLauncher, at most ``max_parallel`` jobs at once, each started as a slot frees."""

    def __init__(self, max_parallel: Optional[int] = None, fork_server: bool = True, cpus_per_task: Optional[int] = None,
                 **params: Any) -> None:
        check_max_parallel(max_parallel)
        check_fork_server(fork_server)
        check_cpus_per_task(cpus_per_task)
        self.max_parallel = max_parallel or usable_cores()
        self.cpus_per_task = cpus_per_task
        self.threads = job_threads(cpus_per_task, self.max_parallel)
        super().__init__(cpus_per_task=self.threads, **params)
        self.fork_server = fork_server

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.core.utils import FailedJobError, UncompletedJobError

        from launcher.sweep import submitit_adapter as adapter

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        with launcher_errors_explained("local", sweep_dir=sweep_dir):  # an option submitit refuses, before any job
            adapter.executor(self, adapter.SweepLocalExecutor)
        server = fork_server() if self.fork_server else None
        server_gone: List[bool] = []  # said so once
        if self.config.hydra.sweeper.get("_target_") not in BASIC_SWEEPERS:  # the basic one's were marked at its start
            dirs = [self._job_dir(overrides, initial_job_idx + i) for i, overrides in enumerate(job_overrides)]
            mark_pending(dirs, job_overrides, initial_job_idx)
        done = finished_jobs(self, job_overrides, initial_job_idx, "run")
        returns: List[Optional[JobReturn]] = [done.get(initial_job_idx + i) for i in range(len(job_overrides))]
        to_run = [i for i, ret in enumerate(returns) if ret is None]
        if not to_run and server is not None:  # every job had finished: nothing to fork
            stop_fork_server()
            server = None
        warn_if_oversubscribed(self.cpus_per_task, self.max_parallel, min(self.max_parallel, len(to_run)),
                               max((self._devices(job_overrides[i]) for i in to_run), default=1))
        todo = iter(to_run)
        errors: List[BaseException] = []
        started = threading.local()  # each thread's job: its controller process
        composing = threading.Lock()
        stopper = StopJobsOnSignal(str(sweep_dir))
        params = adapter.job_params(self, job_overrides, initial_job_idx)
        if server is not None:
            stopper.spare.add(server.pid)

        def start_controller(args: Any, env: Dict[str, str]) -> Any:
            # In a session of its own: Ctrl-C reaches this process alone, which stops each job with SIGTERM and
            # waits for its checkpoint. Each job gets its share of the cores (CPUS_ENV: torch's default, every
            # core for each job, had jobs spin-waiting for each other's cores). forkserver.run_controller stands in
            # for submitit's controller, to say how the job ended and fork its task from the fork server.
            with stopper.starting:
                if stopper.stopping or errors:
                    raise _NotStarted()
                env = {**env, CPUS_ENV: str(self.threads)}
                forks = isinstance(args, list)  # not a shell's (hydra.launcher.setup): submitit's own controller
                if forks:
                    args = forkserver.controller_command(args[0], *args[3:])
                    env[forkserver.SWEEP_PID_ENV] = str(os.getpid())  # it stops its job if the sweep dies
                connection = server.connect() if forks and server is not None else None
                if connection is None:
                    if forks and server is not None and not server_gone:
                        server_gone.append(True)
                        log.warning("The fork server no longer forks jobs (%s): each job starts a fresh process",
                                    server.why_gone())
                    started.process = subprocess.Popen(args, shell=not forks, start_new_session=True, env=env)
                    return started.process
                env[forkserver.FD_ENV] = str(connection.fileno())
                try:
                    started.process = subprocess.Popen(args, start_new_session=True, env=env,
                                                       pass_fds=(connection.fileno(),))
                finally:
                    connection.close()
            return started.process

        shared = set.intersection(*map(set, job_overrides)) if len(job_overrides) > 1 else set()  # shown once, above

        def say_job_ended(ret: JobReturn, idx: int, overrides: Sequence[str]) -> None:
            # a job that died or stopped without a result said so as the sweep recorded it (record_dead_job)
            failed = ret.status == JobStatus.FAILED
            run_dir = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir") if ret.hydra_cfg is not None else None
            if run_dir is None:
                with composing:
                    run_dir = self._job_dir(overrides, idx)
            own = [o for o in filter_overrides(overrides) if o not in shared] or filter_overrides(overrides)
            line = job_end_line(idx, own, Path(str(run_dir)), str(self.config.get("objective")),
                                ret._return_value if failed else None)
            log.log(logging.ERROR if failed else logging.INFO, "%s", line)

        def run_job(i: int) -> JobReturn:
            composed = take_composed(self.config, job_overrides[i])
            state = dict(self.__dict__)
            task = as_plain(LocalLauncher, state) if composed is None else _as_composed_job(state, composed, job_overrides[i])
            executor = adapter.executor(self, adapter.SweepLocalExecutor, start=start_controller)
            return executor.submit(task, *params[i]).results()[0]

        def run_jobs() -> None:  # one slot: the next job as each ends
            while True:
                with stopper.starting:
                    i = None if stopper.stopping or errors else next(todo, None)
                if i is None:
                    return
                started.process = None
                try:
                    returns[i] = run_job(i)
                    with contextlib.suppress(Exception):  # a line on the console: never the sweep's failure
                        say_job_ended(returns[i], initial_job_idx + i, job_overrides[i])
                except _NotStarted:
                    return
                except (UncompletedJobError, FailedJobError) as err:
                    if stopper.stopping:  # stopped by the sweep's own SIGTERM before it could say so: the rerun runs it
                        return
                    code = started.process.poll() if started.process is not None else None
                    how = how_it_died(code) if isinstance(err, UncompletedJobError) else f"failed outside the run: {_last_line(err)}"
                    with composing:  # the job's dir, from its config: composed one thread at a time
                        path = self._job_dir(job_overrides[i], initial_job_idx + i)
                    returns[i] = record_dead_job(self.config, path, job_overrides[i], initial_job_idx + i, how, code)
                except BaseException as err:  # noqa: B036 -- raised in the sweep's thread, below
                    errors.append(err)
                    return

        plugin_log = logging.getLogger(LocalLauncher.__module__)
        plugin_log.info(f"Submitit 'local' sweep output dir : {sweep_dir}")
        for i in to_run:
            plugin_log.info(f"\t#{initial_job_idx + i} : {' '.join(filter_overrides(job_overrides[i]))}")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        with stopper:
            slots = [threading.Thread(target=run_jobs, name=f"sweep-slot-{n}", daemon=True)
                     for n in range(min(self.max_parallel, len(to_run)))]
            for slot in slots:
                slot.start()
            try:
                for slot in slots:
                    slot.join()  # a signal's handler (StopJobsOnSignal) still runs here, in the main thread
            finally:
                if server is not None:  # kept if its imports said something; also when a signal stops the sweep
                    server.save_log()
        with contextlib.suppress(OSError):  # submitit makes the folder as named, %j and all; each job's has its id
            Path(str(self.params["submitit_folder"])).rmdir()
        if errors:
            with launcher_errors_explained("local", sweep_dir=sweep_dir):
                raise errors[0]
        return [r for r in returns if r is not None]

    def _devices(self, overrides: Sequence[str]) -> int:
        """The processes the job with ``overrides`` trains in (``trainer.devices``; 1 where it is not a number)."""
        value: Any = self.config.get("trainer", {}).get("devices", 1) if self.config is not None else 1
        for override in overrides:
            key, _, text = str(override).partition("=")
            if key.lstrip("+~") == "trainer.devices":
                value = text
        try:
            return max(1, int(value))
        except (TypeError, ValueError):
            return 1

    def _job_dir(self, overrides: Sequence[str], idx: int) -> Path:
        """The job's run dir, as its process will resolve it (``hydra.sweep.dir`` / ``hydra.sweep.subdir``)."""
        assert self.config is not None and self.hydra_context is not None
        return job_dir(self.config, overrides, idx, self.hydra_context.config_loader)


CappedLocalLauncher.__module__ = "hydra_plugins.launcher_local"  # the name conf/hydra/launcher/local.yaml gives
PLUGINS = (CappedLocalLauncher,)
