"""``hydra/launcher=slurm_detached``: submit a sweep to SLURM and return at once (hydra #2479).

The submission is hydra-submitit-launcher's own; only the wait for the results is left out.

Registered with Hydra by :func:`launcher.plugins.register` (see there); the jobs receive a
:class:`SlurmJob` (the plugin's ``SlurmLauncher`` but for its exit status), which runs them exactly
as the ``slurm`` option does. Each job
dir gets ``submitted.json`` (its SLURM job id, overrides and log files) so that
``python -m launcher.summary <sweep dir>`` lists the jobs as pending before they start.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, List, Sequence
from unittest import mock

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from launcher.checkpoint import atomic_write
from launcher.plugins import as_plain
from launcher.plugins import job_dir as plugin_job_dir

log = logging.getLogger("launcher")


class SlurmJob(SlurmLauncher):
    """What each SLURM job runs (both our slurm launchers pickle themselves as one): the plugin's
    ``SlurmLauncher``, except that a job whose run failed ends with exit status 1.

    Hydra catches a job's error into its result, and submitit pickles that result and exits 0, so
    SLURM recorded every failed run as COMPLETED: ``sacct``, ``--mail-type=FAIL`` and ``afterok``
    dependencies all took it for a success. The result is still pickled as before (the waiting
    sweep reads it); only the process's exit status changes, once submitit is done with it.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        ret = super().__call__(*args, **kwargs)
        if ret.status == JobStatus.FAILED and os.environ.get("SLURM_JOB_ID"):
            exit_failed_at_exit()
        return ret


def exit_failed_at_exit() -> None:
    """Make this process exit with status 1 once it ends normally (after submitit has written the
    result): logs and output are flushed first; exit handlers registered before this one do not run."""
    def end() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(1)

    atexit.register(end)


class DetachedSlurmLauncher(SlurmLauncher):
    """The ``slurm`` launcher, returning once the job array is submitted; prints the job ids and sweep dir."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit  # here, not at import: every -m registers this plugin, most never use it

        submitted: List[Any] = []

        def no_wait(job: "submitit.Job") -> List[JobReturn]:  # stands in for Job.results(), which blocks
            submitted.append(job)
            ret = JobReturn(overrides=list(job_overrides[len(submitted) - 1]), status=JobStatus.COMPLETED)
            ret.return_value = f"submitted as SLURM job {job.job_id}"
            return [ret]

        with mock.patch.object(submitit.Job, "results", no_wait):
            returns = super().launch(job_overrides, initial_job_idx)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        for offset, (job, overrides) in enumerate(zip(submitted, job_overrides)):
            job_dir = plugin_job_dir(self.config, overrides, initial_job_idx + offset, self.hydra_context.config_loader)
            job_dir.mkdir(parents=True, exist_ok=True)
            info = {"job_id": job.job_id, "overrides": list(overrides), "stdout": str(job.paths.stdout),
                    "stderr": str(job.paths.stderr)}
            text = json.dumps(info, indent=2) + "\n"
            atomic_write(job_dir / "submitted.json", text.encode())
        ids = ", ".join(str(j.job_id) for j in submitted)
        log.info("Submitted %d job(s) to SLURM: %s", len(submitted), ids)
        log.info("Sweep dir: %s (python -m launcher.summary %s shows their progress)", sweep_dir, sweep_dir)
        return returns

    def __reduce__(self) -> Any:
        """Pickled for the jobs as a :class:`SlurmJob`: the jobs need nothing else of this class."""
        return (as_plain, (SlurmJob, dict(self.__dict__)))


class _Stop(Exception):
    pass


class AttachedSlurmLauncher(SlurmLauncher):
    """The plugin's ``slurm`` launcher, which waits for the jobs; stopped while it waits (Ctrl-C,
    SIGTERM), it says that the jobs go on, with their ids and how to follow or cancel them."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import signal

        from submitit.core.core import Executor

        from launcher.signals import handlers

        jobs: List[Any] = []
        submit = Executor.map_array

        def recording(executor: Any, fn: Any, *iterable: Any) -> Any:
            submitted = submit(executor, fn, *iterable)
            jobs.extend(submitted)
            return submitted

        def stop(signum: int, frame: Any) -> None:
            raise _Stop(signal.Signals(signum).name)

        try:
            with handlers(stop, (signal.SIGINT, signal.SIGTERM)), mock.patch.object(Executor, "map_array", recording):
                return super().launch(job_overrides, initial_job_idx)
        except (_Stop, KeyboardInterrupt) as err:
            name = str(err) or "SIGINT"
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            running = [str(j.job_id) for j in jobs]
            arrays = sorted({i.split("_")[0] for i in running})
            log.warning("%s: stopped waiting; the %d SLURM job(s) go on (%s). Follow them: python -m launcher.summary %s; "
                        "stop them: scancel %s (each then writes a checkpoint, as on preemption)", name, len(running),
                        ", ".join(running) or "none submitted yet", sweep_dir, " ".join(arrays) or "<job id>")
            raise SystemExit(130 if name == "SIGINT" else 143) from None

    def __reduce__(self) -> Any:
        return (as_plain, (SlurmJob, dict(self.__dict__)))


# the names conf/hydra/launcher/slurm.yaml and slurm_detached.yaml give
AttachedSlurmLauncher.__module__ = DetachedSlurmLauncher.__module__ = "hydra_plugins.launcher_slurm"
PLUGINS = (AttachedSlurmLauncher, DetachedSlurmLauncher)
