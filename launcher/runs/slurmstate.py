"""What SLURM says of jobs and nodes (``squeue``, ``sinfo``, ``sacct``): for the run dir's lock, which asks whether a
SLURM job still trains there, and for the sweep's summary and launchers."""
from __future__ import annotations

from typing import Any, Dict, List, Optional


# SLURM states of a job that is still queued or running (or about to be again); any other is an end
SLURM_ACTIVE = {"PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_FED": "pending",
                 "REQUEUE_HOLD": "pending", "RESV_DEL_HOLD": "pending", "SUSPENDED": "pending", "STOPPED": "pending",
                 "RESIZING": "running", "RUNNING": "running", "COMPLETING": "running", "SIGNALING": "running",
                 "STAGE_OUT": "running"}


# Why a pending job waits, where waiting does not end it: what the job asks its partition, account or QOS never
# gives (SLURM's job reason codes; any reason with "PerJob" is a per-job limit too). A cluster with
# EnforcePartLimits refuses such a job at sbatch; one without queues it for ever.
NEVER_STARTS = {
    "PartitionConfig": "asks for more than a node of its partition has, or than the partition allows",
    "PartitionNodeLimit": "asks for more nodes than its partition allows",
    "PartitionTimeLimit": "asks for more time than its partition allows",
    "BadConstraints": "has constraints no node satisfies",
    "InvalidAccount": "names an account that is not valid",
    "InvalidQOS": "names a QOS that is not valid",
    "AccountNotAllowed": "names an account that may not use the partition",
    "QOSNotAllowed": "names a QOS that may not use the partition",
    "DependencyNeverSatisfied": "depends on a job that cannot end as required",
}


def never_starts(reason: str) -> Optional[str]:
    """What a pending job's SLURM ``reason`` means where waiting will not start it, else None."""
    if reason in NEVER_STARTS:
        return NEVER_STARTS[reason]
    if "PerJob" in reason or reason.startswith("QOSMin"):
        return "asks for more than a per-job limit of its account or QOS allows"
    return None


def slurm_states(job_ids: List[str], reasons: Optional[Dict[str, str]] = None,
                 unasked: Optional[List[str]] = None) -> Dict[str, str]:
    """SLURM's state of each job (``123``, or ``123_4`` for an array task): ``GONE`` for one the controller
    no longer knows (it forgets ended jobs after ``MinJobAge``, 5 minutes by default); ``{}`` where SLURM
    cannot be asked (no ``squeue`` here, the controller down), with why appended to ``unasked``. ``reasons``:
    filled with each listed job's reason (why it is pending, say)."""
    import subprocess

    try:
        proc = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--jobs", ",".join(job_ids),
                               "--format=%i|%T|%r"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        if unasked is not None:
            unasked.append(f"squeue: {err}")
        return {}
    if proc.returncode != 0:  # every job forgotten; anything else tells nothing
        if "Invalid job id" in proc.stderr:
            return {j: "GONE" for j in job_ids}
        if unasked is not None:
            said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            unasked.append(said[-1] if said else f"squeue exited {proc.returncode}")
        return {}
    known = {}
    for line in proc.stdout.splitlines():
        job, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if job and state:
            known[job] = state
            if reasons is not None:
                reasons[job] = reason
    return {j: known.get(j, "GONE") for j in job_ids}


def asked_of(params: Dict[str, Any]) -> str:
    """What a SLURM launcher's jobs ask of the cluster: ``nodes=1, tasks_per_node=1, cpus_per_task=4, ...``."""
    keys = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node", "gres", "mem_gb", "timeout_min",
            "constraint", "account", "qos")
    return ", ".join(f"{k}={params[k]}" for k in keys if params.get(k) is not None)


def what_a_node_has(partition: Optional[str]) -> str:
    """``a node of partition debug has 2 CPUs, 22.5 GB of memory and no time limit`` (the default partition's
    where ``partition`` is None; the partitions there are where it is not one), from ``sinfo``; '' where
    ``sinfo`` does not answer."""
    import subprocess

    try:
        out = subprocess.run(["sinfo", "--noheader", "--format=%P|%c|%m|%l|%G"], capture_output=True, text=True,
                             timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ""
    rows = [line.split("|") for line in out if line.count("|") == 4]
    if not rows:
        return ""
    if partition:
        row = next((r for r in rows if r[0].rstrip("*") == partition), None)
        if row is None:
            return f"partitions here: {', '.join(dict.fromkeys(r[0].rstrip('*') for r in rows))}"
    else:
        row = next((r for r in rows if r[0].endswith("*")), rows[0])
    name, cpus, mem, limit, gres = row
    try:
        memory = f"{int(mem.rstrip('+')) / 1024:.1f} GB"
    except ValueError:
        memory = f"{mem} MB"
    time_limit = "no time limit" if limit in ("infinite", "UNLIMITED") else f"a time limit of {limit}"
    gpus = "" if gres in ("(null)", "") else f", GRES {gres}"
    return f"a node of partition {name.rstrip('*')} has {cpus} CPUs, {memory} of memory{gpus} and {time_limit}"


def has_accounting() -> bool:
    """Whether ``sacct`` answers here (it fails where the cluster keeps no accounting)."""
    import subprocess

    try:
        return subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
