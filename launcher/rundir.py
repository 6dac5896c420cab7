"""Run-directory bookkeeping: ``run.json``, what is needed to reproduce a run and how it ended."""
from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from launcher.checkpoint import atomic_write


def git_state(cwd: Path) -> Dict[str, Any]:
    """Commit and dirty flag of the git repository holding ``cwd``, or nulls outside one."""
    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


def finished_result(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The recorded ``run.json`` of a run that already finished in ``run_dir``, else None."""
    path = Path(run_dir) / "run.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    done = data.get("status") in ("completed", "stopped") and (Path(run_dir) / "checkpoints" / "final.pt").is_file()
    return data if done else None


class RunRecord:
    """``run.json`` in the run dir: written when the run starts and rewritten when it ends."""

    def __init__(self, run_dir: Path, seed: int, overrides: Optional[list] = None, write: bool = True) -> None:
        import hydra
        import torch

        self.path = Path(run_dir) / "run.json"
        self.write = write  # false on DDP ranks other than 0
        try:
            previous = json.loads(self.path.read_text())
        except (OSError, ValueError):
            previous = {}
        self.data: Dict[str, Any] = {
            "status": "running",
            "seed": seed,
            "overrides": list(overrides or []),
            "cwd": os.getcwd(),
            "command": [sys.executable, *sys.argv],
            "git": git_state(Path(os.getcwd())),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "hydra": hydra.__version__,
            },
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "start_time": _now(),
            "first_start_time": previous.get("first_start_time") or previous.get("start_time"),
            "attempt": int(previous.get("attempt", 0)) + 1,
            "end_time": None,
            "exit_code": None,
            "metrics": {},
            "submitit": self.submitit_job(),
        }

    @staticmethod
    def submitit_job() -> Optional[Dict[str, Any]]:
        """Job id and log files when this process is a submitit job (local or SLURM), else None."""
        if "SUBMITIT_EXECUTOR" not in os.environ:
            return None
        import submitit

        try:
            env = submitit.JobEnvironment()
        except RuntimeError:
            return None
        return {"job_id": env.job_id, "stdout": str(env.paths.stdout), "stderr": str(env.paths.stderr)}

    def _write(self) -> None:
        if not self.write:
            return
        text = json.dumps(self.data, indent=2, default=str) + "\n"
        atomic_write(self.path, text.encode())

    def start(self) -> None:
        self._write()

    def finish(self, status: str, exit_code: int, metrics: Mapping[str, float], error: Optional[str] = None, **extra: Any) -> None:
        self.data.update(status=status, exit_code=exit_code, metrics=dict(metrics), end_time=_now(), **extra)
        if error:
            self.data["error"] = error
        self._write()


def mark_failed(run_dir: Path, error: str) -> None:
    """Record in ``run.json`` that the run failed with ``error`` (when its workers could not say so)."""
    path = Path(run_dir) / "run.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if data.get("status") in (None, "running", "interrupted", "failed"):
        data.update(status="failed", exit_code=1, end_time=_now(), error=error)
        text = json.dumps(data, indent=2, default=str) + "\n"
        atomic_write(path, text.encode())
