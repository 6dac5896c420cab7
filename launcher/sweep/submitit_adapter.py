"""What the sweep layer relies on of hydra-submitit-launcher's and submitit's internals, in one place (both pinned in
pyproject.toml); tests/test_submitit_adapter.py fails when a release changes any of it. Imported as a sweep launches."""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence

import submitit
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf
from submitit.local.local import LocalJob
from submitit.slurm.slurm import SlurmJob as SubmititSlurmJob

INIT_KEYS = ("max_num_timeout",)  # the plugin passes these to the executor's constructor, the rest as parameters


def executor(launcher: Any, cluster_executor: type, **attributes: Any) -> Any:
    """The AutoExecutor that the plugin's ``launch`` builds for ``launcher.params`` (its checks name a bad option),
    submitting through ``cluster_executor`` (a subclass of the cluster's executor, given ``attributes``)."""
    params, cluster = launcher.params, launcher._EXECUTOR
    init = {f"{cluster}_{k}": v for k, v in params.items() if k in INIT_KEYS}
    auto = submitit.AutoExecutor(cluster=cluster, folder=params["submitit_folder"], **init)
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    auto.update_parameters(**{k if k in shared else f"{cluster}_{k}": v for k, v in params.items()
                              if k not in (*INIT_KEYS, "submitit_folder")})
    inner = auto._executor  # AutoExecutor submits through the cluster's executor it holds
    assert isinstance(inner, cluster_executor.__mro__[1]), (type(inner), cluster_executor)
    inner.__class__ = cluster_executor  # adds methods, no state: its folder and parameters stay
    inner.__dict__.update(attributes)
    return auto


def job_params(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[tuple]:
    """The arguments of the plugin's ``BaseSubmititLauncher.__call__`` for each job, as its ``launch`` passes them."""
    from hydra.core.singleton import Singleton

    return [(list(overrides), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
             Singleton.get_state()) for i, overrides in enumerate(job_overrides)]


def controller(parameters: Dict[str, Any], folder: Any, command: str) -> tuple:
    """``(args, env)`` of submitit's ``start_controller`` for a local job running ``command`` (a shell command where
    ``setup``)."""
    gpus, visible = parameters.get("gpus_per_node", 0), parameters.get("visible_gpus", ())
    setup = parameters.get("setup", ())
    env = {**os.environ, "SUBMITIT_LOCAL_NTASKS": str(parameters.get("tasks_per_node", 1)),
           "SUBMITIT_LOCAL_COMMAND": command,
           "SUBMITIT_LOCAL_TIMEOUT_S": str(int(60 * parameters.get("timeout_min", 2.0))),
           "SUBMITIT_LOCAL_SIGNAL_DELAY_S": str(int(parameters.get("signal_delay_s", 30))),
           "SUBMITIT_LOCAL_NODEID": "0", "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
           "SUBMITIT_STDERR_TO_STDOUT": "1" if parameters.get("stderr_to_stdout", False) else "",
           "SUBMITIT_EXECUTOR": "local",
           "CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in (range(gpus) if visible == () else visible[:gpus])),
           "SUBMITIT_LOCAL_WITH_SHELL": "1" if setup else ""}
    args: Any = [sys.executable, "-m", "submitit.local._local", str(folder)]
    return (" && ".join([*setup, shlex.join(args)]) if setup else args), env


class SweepLocalJob(LocalJob):
    """A local job whose result is read as its controller ends: no file system to wait for."""

    _results_timeout_s = 1

    def wait(self) -> None:  # submitit's looks once a second
        if self._process is not None:
            self._process.wait()
        while not self.done():
            time.sleep(0.05)


class SweepLocalExecutor(submitit.LocalExecutor):
    """submitit's local executor, each job's controller started by ``start(command, env)`` (a ``Popen``)."""

    start: Callable[[Any, Dict[str, str]], Any]

    def _submit_command(self, command: str) -> SweepLocalJob:
        process = self.start(*controller(self.parameters, self.folder, command))
        return SweepLocalJob(folder=self.folder, job_id=str(process.pid), process=process,
                             tasks=list(range(self.parameters.get("tasks_per_node", 1))))


class SweepSlurmExecutor(submitit.SlurmExecutor):
    """submitit's SLURM executor, its jobs running ``python -u -c <code> <folder>`` (``code`` runs submitit's main)."""

    code: str

    @property
    def _submitit_command_str(self) -> str:
        return " ".join([self.python, "-u", "-c", shlex.quote(self.code), shlex.quote(str(self.folder))])


def slurm_job(folder: Any, job_id: str, tasks: int) -> Any:
    """submitit's handle on a SLURM job submitted earlier (to wait for it)."""
    return SubmititSlurmJob(folder=folder, job_id=job_id, tasks=tuple(range(tasks)))


def tasks_of(job: Any) -> List[Any]:
    """A job's tasks (a DDP job's, one per rank), or the job itself."""
    return list(getattr(job, "_sub_jobs", ())) or [job]


def no_wait_for_result(job: Any) -> None:
    """``results()`` raises at once for a job without a result file (submitit waits 15 s for a slow file system)."""
    for each in {job, *tasks_of(job)}:
        each._results_timeout_s = 0


@contextlib.contextmanager
def slurm_states_from(update: Callable[[Any, Callable[[], None]], None]) -> Iterator[None]:
    """While the sweep waits: submitit's SLURM watcher refreshes the jobs' states with ``update(watcher, sacct)``."""
    watcher = SubmititSlurmJob.watcher
    sacct = watcher.update
    watcher.update = lambda: update(watcher, sacct)  # the one watcher every SlurmJob shares
    try:
        yield
    finally:
        del watcher.update


def waiting_ids(watcher: Any) -> set:
    """The ids of the jobs the watcher waits for."""
    return watcher._registered - watcher._finished


def state_of(watcher: Any, job_id: str) -> str:
    return (watcher._info_dict.get(job_id) or {}).get("State", "UNKNOWN")


def set_state(watcher: Any, job_id: str, state: str) -> None:
    watcher._info_dict[job_id] = {**(watcher._info_dict.get(job_id) or {}), "State": state}


def mark_finished(watcher: Any) -> None:
    """After the states were set without sacct: the ended jobs are finished for the watcher, checked now."""
    watcher._last_status_check = time.time()
    for job_id in waiting_ids(watcher):
        if watcher.is_done(job_id, mode="cache"):
            watcher._finished.add(job_id)
