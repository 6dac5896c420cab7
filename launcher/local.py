"""``hydra/launcher=local``: hydra-submitit-launcher's local launcher, one process per job, at most
``max_parallel`` jobs at a time (default: one per usable CPU core).

More jobs at once than cores only contend for them: 8 jobs of ~11 s on 2 cores took 0.92x of the
sequential launcher's time all at once and 0.69x two at a time. Jobs go in groups of
``max_parallel``; every group runs, whatever failed before it, so one failing job loses no other's
result. Registered with Hydra by :func:`launcher.plugins.register`.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import time
from unittest import mock
from typing import Any, Dict, List, Optional, Sequence, Union

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher

from launcher.plugins import as_plain
from launcher.signals import EXIT_INTERRUPTED, handlers, suspend_along

log = logging.getLogger("launcher")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _stat(pid: Union[int, str]) -> Optional[List[str]]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent pid, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


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
    """While the sweep runs: SIGTERM, SIGINT or SIGHUP to this process stops its jobs too, then the sweep.

    Each job's submitit process hands SIGTERM to the job, which checkpoints at its next step
    boundary and exits; the sweep waits for them (``wait_s`` at most), says how to resume, and
    exits 75. A second signal ends the wait at once (the jobs still finish their checkpoints).
    Without this, a SIGTERM (``timeout``, a CI step, ``kill``) ended the sweep and left its jobs
    training with no parent. A SIGTSTP (Ctrl-Z) stops the jobs with the sweep until it is continued.
    """

    def __init__(self, sweep_dir: str, wait_s: float = 120.0) -> None:
        self.sweep_dir, self.wait_s = sweep_dir, wait_s
        self.stopping = False
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

    def _stop(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stopping:
            log.warning("%s again: not waiting for the jobs; each still writes its checkpoint and ends", name)
            raise SystemExit(EXIT_INTERRUPTED)
        self.stopping = True
        jobs = child_pids()
        log.warning("%s: stopping the sweep's %d running job(s); each saves a checkpoint first", name, len(jobs))
        for pid in jobs:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline and any(_alive(p) for p in jobs):
            time.sleep(0.2)
        log.warning("Sweep stopped by %s. Run the same command with hydra.sweep.dir=%s to resume it: finished jobs "
                    "are not run again, stopped ones resume from their checkpoints", name, self.sweep_dir)
        raise SystemExit(EXIT_INTERRUPTED)


class CappedLocalLauncher(LocalLauncher):
    def __init__(self, max_parallel: Optional[int] = None, **params: Any) -> None:
        if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1):
            raise ValueError(f"hydra.launcher.max_parallel={max_parallel!r}: use a whole number >= 1, "
                             f"or null for one job per usable CPU core ({usable_cores()} here)")
        super().__init__(**params)
        self.max_parallel = max_parallel or usable_cores()

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.local import local as submitit_local

        returns: List[JobReturn] = []
        start_controller = submitit_local.start_controller

        def start_in_own_session(*args: Any, **kwargs: Any) -> Any:
            # Ctrl-C in the terminal then reaches this process alone, which stops each job with
            # SIGTERM and waits for its checkpoint: submitit's controller, reached too, would send
            # its job a second SIGINT and a SIGKILL a second later, cutting the checkpoint short.
            with mock.patch.object(subprocess, "Popen", functools.partial(subprocess.Popen, start_new_session=True)):
                return start_controller(*args, **kwargs)

        with StopJobsOnSignal(str(self.config.hydra.sweep.dir)), \
                mock.patch.object(submitit_local, "start_controller", start_in_own_session):
            for start in range(0, len(job_overrides), self.max_parallel):
                group = job_overrides[start:start + self.max_parallel]
                returns += super().launch(group, initial_job_idx + start)
        return returns

    def __reduce__(self) -> Any:
        """Pickled for the jobs as the plugin's LocalLauncher: the jobs need nothing of this class."""
        return (as_plain, (LocalLauncher, dict(self.__dict__)))


CappedLocalLauncher.__module__ = "hydra_plugins.launcher_local"  # the name conf/hydra/launcher/local.yaml gives
PLUGINS = (CappedLocalLauncher,)
