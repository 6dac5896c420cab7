"""The ``SweepSummary`` Hydra callback (conf/config.yaml): plans a sweep before any job runs, and keeps
``summary.csv``/``summary.md`` current after each job. Single runs load it too: the launchers are imported only
when a sweep starts."""
from __future__ import annotations

import atexit
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import OmegaConf

from launcher.engine.errors import ConfigError, RunError, mark_reported, output_dir_refused
from launcher.sweep.plugins import SWEEP, check_jobs, stop_basic_sweep_on_signal
from launcher.sweep.summary import (FAILURE, ReportedFailure, attempts_so_far, done_report, failure_report, record_failure,
                                    write_summary)

logger = logging.getLogger("launcher")


def plan_sweep(config: Any) -> None:
    """Before a basic sweeper's sweep starts: check the launcher's options, refuse jobs that would share a run dir
    (:class:`ConfigError`), and mark each job not started yet pending (``submitted.json``)."""
    SWEEP.begin()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    launcher = config.hydra.launcher
    target = str(launcher.get("_target_", ""))
    local, slurm = target.endswith(".CappedLocalLauncher"), target.endswith((".AttachedSlurmLauncher", ".DetachedSlurmLauncher"))
    forks = local and launcher.get("fork_server", True)
    if local:
        from launcher.sweep.local import check_cpus_per_task, check_fork_server, check_max_parallel, check_one_task, fork_server

        check_max_parallel(launcher.get("max_parallel"))  # before any job dir or summary is written
        check_cpus_per_task(launcher.get("cpus_per_task"))
        check_fork_server(launcher.get("fork_server", True))
        check_one_task(launcher)
        if forks:  # importing torch while the jobs are composed (started already, where the command line said so)
            fork_server(sweep_dir / ".submitit" / "fork_server.log")
    if slurm:
        from launcher.sweep.slurm import check_requests

        check_requests(launcher, "slurm" if target.endswith(".AttachedSlurmLauncher") else "slurm_detached")
    if not forks and "launcher.sweep.local" in sys.modules:  # started as the command line was read, and not wanted
        sys.modules["launcher.sweep.local"].stop_fork_server()
    check_jobs(config, keep=local or slurm)  # the jobs take the configs composed to check them


class SweepSummary(Callback):  # type: ignore[misc]
    """Hydra callback: refresh the sweep summary after each job of a multirun and at its end."""

    def _write(self, config: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        write_summary(Path(config.hydra.sweep.dir), config.get("objective", "val/accuracy"), config.get("objective_mode", "max"))

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            self._record_failure(config, job_return)
        self._write(config)
        if config.hydra.mode == RunMode.MULTIRUN and job_return.status == JobStatus.FAILED:
            err = job_return._return_value
            last = str(err).strip().splitlines()[-1] if str(err).strip() else ""
            # a ConfigError's message is the whole story (key, value, what is accepted), and a RunError's (a NaN
            # loss: the launcher's own frames); other errors get their last frames
            trace = "" if isinstance(err, (ConfigError, RunError)) else \
                "\n" + "".join(traceback.format_exception(type(err), err, err.__traceback__)[-6:]).rstrip()
            logger.error("Sweep job %s failed (%s): %s: %s; log: %s%s", config.hydra.job.num,
                         " ".join(OmegaConf.to_container(config.hydra.overrides.task, resolve=False)), type(err).__name__, last,
                         Path(config.hydra.runtime.output_dir) / "train.log", trace)
            mark_reported(err, config.hydra.job.num)
            job_return.__class__ = ReportedFailure  # the sweeper raises it without Hydra's own line about it

    @staticmethod
    def _record_failure(config: Any, job_return: Any) -> None:
        """``failure.json`` in the job dir after a failed job, removed after one that succeeds."""
        path = Path(config.hydra.runtime.output_dir) / FAILURE
        if job_return.status != JobStatus.FAILED:
            path.unlink(missing_ok=True)
            return
        err = job_return._return_value
        record_failure(path.parent, f"{type(err).__name__}: {err}", OmegaConf.to_container(config.hydra.overrides.task, resolve=False))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        # Hydra's sweeper raises at the first failed job, so on_multirun_end never runs then: the
        # end-of-sweep report runs at exit, after the sweep in every case.
        sweep_dir = Path(str(config.hydra.sweep.dir))
        over = None
        if str(config.hydra.launcher.get("_target_", "")).endswith(".BasicLauncher"):  # its jobs run in this process
            over = stop_basic_sweep_on_signal(sweep_dir)
        self._over = over
        report = atexit.register(self._report, sweep_dir, config.get("objective", "val/accuracy"),
                                 config.get("objective_mode", "max"), attempts_so_far(sweep_dir), time.time_ns(), over)
        try:
            plan_sweep(config)  # before any job runs
        except ConfigError as err:  # Hydra turns a callback's exception into a warning: exit here, as for a config error
            atexit.unregister(report)  # a sweep refused: its dir (if an earlier run left one) is not this sweep's report
            print(f"Config error: {err}", file=sys.stderr)
            sys.exit(2)
        except OSError:  # its jobs' dirs could not be marked: where the sweep dir cannot be made, say that in one line
            try:
                sweep_dir.mkdir(parents=True, exist_ok=True)  # as Hydra's sweeper would next
            except OSError as refused:
                atexit.unregister(report)
                print(f"Config error: {output_dir_refused(refused)}", file=sys.stderr)
                sys.exit(2)
            raise

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if getattr(self, "_over", None) is not None:
            self._over()
        self._write(config)

    @staticmethod
    def _report(sweep_dir: Path, objective: str, mode: str, attempts_before: Optional[Dict[str, int]] = None,
                started_ns: Optional[int] = None, over: Optional[Callable[[], None]] = None) -> None:
        if over is not None:  # a basic sweep's: it is over (a signal that stopped it cannot cut this short)
            over()
        if not sweep_dir.is_dir():
            return
        rows = write_summary(sweep_dir, objective, mode)
        report = failure_report(rows, sweep_dir)
        if rows:  # the counts and the best job, also of a sweep with failures (then the failures' screen below it)
            sys.stdout.write(done_report(rows, sweep_dir, objective, mode, attempts_before, started_ns) + "\n")
            sys.stdout.flush()
        if report:
            sys.stderr.write(report + "\n")
            sys.stderr.flush()
