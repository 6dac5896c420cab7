"""A real single-node SLURM cluster on this machine, for trying cluster mode and for the tests.

    python -m launcher.localslurm start     # idempotent; prints the SLURM_CONF to export
    python -m launcher.localslurm status
    python -m launcher.localslurm stop

Needs Debian's ``slurm-wlm`` and ``munge`` packages (``apt-get install slurm-wlm munge``) and root.
munged runs as user munge; slurmctld and slurmd run as root from a ``slurm.conf`` in
``$LAUNCHER_SLURM_DIR`` (default ``/tmp/launcher-slurm``), with this host as the only node.
Commands such as ``sbatch``, ``squeue`` and submitit find it through ``SLURM_CONF``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")


def directory() -> Path:
    return Path(os.environ.get("LAUNCHER_SLURM_DIR", "/tmp/launcher-slurm"))


def conf_path() -> Path:
    return directory() / "slurm.conf"


def env() -> Dict[str, str]:
    """The environment a SLURM command (or a test's subprocess) needs to reach this cluster."""
    return {**os.environ, "SLURM_CONF": str(conf_path())}


def missing_binaries() -> list:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _run(*cmd: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env(), check=check, timeout=60, **kw)


def _munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        dec = subprocess.run(["unmunge"], input=enc.stdout, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return enc.returncode == 0 and dec.returncode == 0


def _node_state() -> str:
    try:
        out = _run("sinfo", "-h", "-o", "%t")
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _daemon_pid(name: str) -> int:
    """The pid in ``<dir>/<name>.pid`` if that process is still ``name`` (a recycled pid is not), else 0."""
    try:
        pid = int((directory() / f"{name}.pid").read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return 0
    return pid if comm == name else 0


def _daemon_alive(name: str) -> bool:
    return _daemon_pid(name) != 0


def status() -> str:
    # sinfo waits a minute on a controller that is not there: ask only when the daemons run
    if not (_daemon_alive("slurmctld") and _daemon_alive("slurmd")):
        return "down"
    return _node_state() or "down"


def _write_conf() -> None:
    d, host = directory(), socket.gethostname().split(".")[0]
    for sub in ("state", "spool"):  # a fresh cluster: no jobs recovered from an earlier one
        shutil.rmtree(d / sub, ignore_errors=True)
        (d / sub).mkdir(parents=True, exist_ok=True)
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    conf_path().write_text("\n".join([
        "ClusterName=launcher",
        f"SlurmctldHost={host}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory={max(mem_mb - 1024, 1024)} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))


def start(timeout: float = 60.0) -> None:
    """Start munged, slurmctld and slurmd unless the cluster already answers; wait for an idle node."""
    missing = missing_binaries()
    if missing:
        raise RuntimeError(f"localslurm: {', '.join(missing)} not found; install them with: apt-get install slurm-wlm munge")
    if status() in ("idle", "mix", "alloc"):
        return
    stop()  # half-started daemons from an earlier attempt
    if not _munge_ok():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True, capture_output=True)
    _write_conf()
    time.sleep(0.5)
    subprocess.run(["/usr/sbin/slurmctld"], env=env(), check=True, capture_output=True)
    subprocess.run(["/usr/sbin/slurmd"], env=env(), check=True, capture_output=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _node_state()
        if state in ("idle", "mix", "alloc"):
            return
        if state in ("down", "drain", "down*", "drain*"):
            _run("scontrol", "update", f"NodeName={socket.gethostname().split('.')[0]}", "State=RESUME")
        time.sleep(0.5)
    raise RuntimeError(f"localslurm: the node did not become idle within {timeout:.0f} s; see {directory()}/slurmctld.log and slurmd.log")


def stop() -> None:
    """Stop slurmd and slurmctld (munged keeps running; it is harmless)."""
    for name in ("slurmd", "slurmctld"):
        pid = _daemon_pid(name)
        if pid:
            os.kill(pid, 15)
            for _ in range(50):
                if not _daemon_alive(name):
                    break
                time.sleep(0.1)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "status"
    if command == "start":
        start()
        print(f"SLURM is up: export SLURM_CONF={conf_path()}")
    elif command == "stop":
        stop()
    elif command == "status":
        print(status())
    else:
        raise SystemExit(f"localslurm: unknown command {command!r}; use start, stop or status")


if __name__ == "__main__":
    main()
