"""Sweep summary: ``summary.csv`` and ``summary.md`` in a sweep dir, one row per job, the best marked.

    python -m launcher.sweep.summary outputs/multirun/<date>/<time> [--objective val/accuracy] [--mode max]

Also written by a Hydra callback (``hydra.callbacks.sweep_summary`` in ``conf/config.yaml``) after
every job of a multirun, so it is current while the sweep runs and after a job fails.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import difflib
import io
import json
import logging
import math
import os
import socket
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from launcher.engine.files import atomic_write, candidates
from launcher.runs.slurmstate import SLURM_ACTIVE, never_starts, slurm_states
from launcher.runs.rundir import RunRecord, _attempt_seconds, refused_key, same_command, training_here_now

logger = logging.getLogger("launcher")
FAILURE = "failure.json"  # in a job dir: its last attempt in a sweep failed (error, overrides); gone once one succeeds
STATUS = {"completed": "done", "stopped": "done", "failed": "failed", "aborted": "failed",
          "running": "running", "interrupted": "interrupted"}


def _seconds(record: Dict[str, Any]) -> Optional[float]:
    """Run time over the job's attempts (``run.json``'s ``seconds``; older records: first start to end)."""
    if record.get("status") == "running":
        return None  # its total comes when it ends
    if isinstance(record.get("seconds"), (int, float)):
        return float(record["seconds"])
    try:
        start = datetime.datetime.fromisoformat(record.get("first_start_time") or record["start_time"])
        end = datetime.datetime.fromisoformat(record["end_time"])
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


_JOB_MARKS = ("run.json", ".hydra", "submitted.json", FAILURE)


def _job_dirs(root: Path, depth: int = 3) -> List[Tuple[int, Path]]:
    """(job number, dir) of the sweep's job dirs: Hydra's numbered ones (``hydra.sweep.subdir``'s
    default), or dirs named otherwise (``subdir=${hydra.job.override_dirname}``...) that hold a job's
    files, their number then read from ``.hydra/hydra.yaml``."""
    found = []
    for p in sorted(root.iterdir()):
        if not p.is_dir() or p.name.startswith(".") or p.name == "checkpoints":
            continue
        if p.name.isdigit():
            found.append((int(p.name), p))
        elif any((p / mark).exists() for mark in _JOB_MARKS):
            num = job_number(p)
            found.append((10**9 + len(found) if num is None else num, p))  # not Hydra's: after the numbered ones
        elif depth > 1:
            found += _job_dirs(p, depth - 1)
    return found


def job_number(job_dir: Path) -> Optional[int]:
    """The number the latest sweep to take ``job_dir`` gave its job: from ``submitted.json`` or ``.hydra/hydra.yaml``,
    whichever is newer."""
    number: Optional[int] = None
    since = -1
    try:
        path = job_dir / "submitted.json"
        mark = json.loads(path.read_text())
        number, since = int(mark["job"]), int(mark.get("numbered_ns") or path.stat().st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        path = job_dir / ".hydra" / "hydra.yaml"
        if path.stat().st_mtime_ns > since:  # read only where it is the newer (loading it takes milliseconds)
            number = int(OmegaConf.load(path).hydra.job.num)
    except Exception:  # noqa: BLE001 -- none, or not Hydra's
        pass
    return number


def jobs(sweep_dir: Path, earlier: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """One entry per job dir (see :func:`_job_dirs`) of the sweep dir's latest sweep, in job order. The dirs of runs
    an earlier sweep left there, which the latest did not take (a value since removed, another subdir), are left
    out (their names appended to ``earlier``): the latest sweep marked its jobs (``submitted.json``'s ``sweep``)."""
    found = sorted(_job_dirs(Path(sweep_dir)), key=lambda item: item[0])
    marks = {d: _read_json(d / "submitted.json") for _, d in found}  # what the sweep recorded (SLURM id, logs)
    sweeps = {d: mark.get("sweep") for d, mark in marks.items()}
    latest = max((v for v in sweeps.values() if isinstance(v, int)), default=None)
    old = [d for d, v in sweeps.items() if isinstance(v, int) and v != latest]
    if earlier is not None:
        earlier.extend(str(d.relative_to(sweep_dir)) for d in old)
    rows = []
    for num, d in [(num, d) for num, d in found if d not in old]:
        stamp = _modified(d / "run.json")  # before reading: a change after it shows (see write_summary)
        record = _read_json(d / "run.json")
        submitted = marks[d]
        overrides = recorded_overrides(d, record, submitted) or []
        submitit = record.get("submitit") or {}
        row = {
            "job": num, "dir": str(d), "overrides": " ".join(overrides), "override_list": list(overrides),
            "stderr": _here(submitit.get("stderr") or submitted.get("stderr"), sweep_dir),
            "stdout": _here(submitit.get("stdout") or submitted.get("stdout"), sweep_dir),
            "status": STATUS.get(record.get("status", ""), "pending"), "seconds": _seconds(record),
            "metrics": record.get("metrics", {}), "error": record.get("error", ""), "read_at": stamp,
            "attempts": record.get("attempt") if isinstance(record.get("attempt"), int) else None,
        }
        try:  # the job's last attempt failed where run.json could not say so (e.g. refused: another config's run dir)
            if (d / "run.json").is_file() and (d / "run.json").stat().st_mtime_ns > (d / FAILURE).stat().st_mtime_ns:
                raise ValueError("run.json is newer: it tells the last attempt")
            failure = json.loads((d / FAILURE).read_text())
            # the run's own record stays for its time and last metrics when it is this job's (not another config's)
            own = record.get("status") == "failed" and record.get("overrides") == failure["overrides"]
            row.update(status="failed", error=failure["error"], overrides=" ".join(failure["overrides"]),
                       override_list=list(failure["overrides"]),
                       metrics=row["metrics"] if own else {}, seconds=row["seconds"] if own else None)
            logs = failure.get("submitit") or {}
            if logs.get("stderr"):  # the failed attempt's, not those of the earlier one run.json may still name
                row.update(stderr=_here(logs["stderr"], sweep_dir), stdout=_here(logs.get("stdout"), sweep_dir))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        row["as_read"] = STATUS.get(record.get("status", ""), "pending")  # run.json's word, as _status_now reads it later
        if _submitted_since(d, record, submitted):  # submitted again (a rerun): its run has not started yet
            row.update(status="pending", error="", metrics={}, seconds=None, attempts=None,
                       stderr=_here(submitted.get("stderr"), sweep_dir), stdout=_here(submitted.get("stdout"), sweep_dir))
        row["slurm_job"] = _slurm_job(record, submitted, row["status"])
        if row["status"] == "running" and not row["slurm_job"] and _died_here(d, record):
            # its time runs to its last sign of life (metrics.jsonl, checkpoints/last), as a rerun would count it
            row.update(status="failed", seconds=round(_attempt_seconds(record, d), 3) if "seconds" in record else None,
                       error=f"its process (pid {record.get('pid')} on this host) ended without recording its end: "
                             f"killed (SIGKILL, the OOM killer?)")
        rows.append(row)
    _settle_with_slurm(rows)
    return rows


def _here(log: Optional[str], sweep_dir: Path) -> Optional[str]:
    """A submitit log recorded with its absolute path, in this sweep dir where the dir was moved (mv, rsync) since:
    ``<old sweep dir>/.submitit/<id>/<file>`` as ``<sweep dir>/.submitit/<id>/<file>`` where that is a file."""
    if not log or Path(log).is_file():
        return log
    parts = Path(log).parts
    if ".submitit" not in parts:
        return log
    moved = Path(sweep_dir).joinpath(*parts[parts.index(".submitit"):])
    return str(moved) if moved.is_file() else log


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def recorded_overrides(job_dir: Path, record: Optional[Dict[str, Any]] = None,
                       submitted: Optional[Dict[str, Any]] = None) -> Optional[List[str]]:
    """The overrides a job dir's job ran (or was submitted) with: ``run.json``'s, else ``submitted.json``'s,
    else Hydra's ``.hydra/overrides.yaml``; None when the dir tells none. ``record`` and ``submitted`` are
    those two files' contents when the caller has read them already."""
    job_dir = Path(job_dir)
    for name, known in (("run.json", record), ("submitted.json", submitted)):
        overrides = (_read_json(job_dir / name) if known is None else known).get("overrides")
        if isinstance(overrides, list):
            return overrides

    try:
        listed = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(o) for o in listed] if isinstance(listed, list) else None


def _died_here(job_dir: Path, record: Dict[str, Any]) -> bool:
    """Whether a run recorded running on this host has no live process (killed outright, along with the
    sweep that would have recorded it: the OOM killer, a reboot). A SLURM job's is SLURM's to say."""


    if record.get("host") != socket.gethostname() or record.get("pid") in (os.getpid(), os.getppid()) or \
            (record.get("submitit") or {}).get("cluster") == "slurm":
        return False
    return training_here_now(job_dir) is None and _status_now(job_dir) == "running"


def _status_now(job_dir: Path) -> str:
    """The job's status as its ``run.json`` says now (``pending`` without one): it may have started, or
    ended and recorded it, since the summary read it."""
    try:
        return STATUS.get(json.loads((job_dir / "run.json").read_text()).get("status", ""), "pending")
    except (OSError, ValueError, AttributeError):
        return "pending"


def _submitted_since(job_dir: Path, record: Dict[str, Any], submitted: Dict[str, Any]) -> bool:
    """Whether the job was submitted to SLURM after its run last recorded itself (a rerun of the sweep resubmitted an
    interrupted, failed or lengthened job), as another SLURM job than the one that run was in: its row tells the
    new submission (pending, then what SLURM says of it) until the run starts and records itself."""
    new_id = submitted.get("job_id")
    ran_in = (record.get("submitit") or {}).get("job_id")
    if not new_id or not ran_in or str(new_id) == str(ran_in):
        return False
    marked = _modified(job_dir / "submitted.json")
    recorded = [t for t in (_modified(job_dir / "run.json"), _modified(job_dir / FAILURE)) if t is not None]
    return marked is not None and bool(recorded) and marked > max(recorded)


def _slurm_job(record: Dict[str, Any], submitted: Dict[str, Any], status: str) -> Optional[str]:
    """The SLURM job id of a job the summary cannot finish on its own: one submitted but not started
    (``submitted.json`` of the detached launcher), or one recorded running in a SLURM job."""
    if status == "pending":
        return str(submitted["job_id"]) if submitted.get("job_id") else None
    job = record.get("submitit") or {}
    if status in ("running", "interrupted") and job.get("cluster") == "slurm" and job.get("job_id"):
        return str(job["job_id"])  # interrupted: SLURM may start it again (preempted, timed out)
    return None


def _settle_with_slurm(rows: List[Dict[str, Any]]) -> None:
    """Ask SLURM about jobs that ended without their run recording the end (cancelled while queued, killed, failed
    before starting) or were requeued after an interruption: else their rows read pending or running for good."""
    asked = [r for r in rows if r["slurm_job"]]
    if not asked:
        return
    reasons: Dict[str, str] = {}
    unasked: List[str] = []
    states = slurm_states(sorted({r["slurm_job"] for r in asked}), reasons, unasked)
    for r in asked:
        if unasked:  # as its files last recorded it: a pending job may have run since, a running one ended
            r["unasked"] = unasked[0]
        state = states.get(r["slurm_job"])
        why = never_starts(reasons.get(r["slurm_job"], "")) if state == "PENDING" else None
        if why and r["status"] == "pending":  # queued for ever: say so, rather than pending
            r["status"] = "stuck"
            r["error"] = (f"SLURM will not start job {r['slurm_job']} as submitted ({reasons[r['slurm_job']]}: the job {why}); "
                          f"scancel {r['slurm_job']}, then rerun the sweep with hydra.launcher options the cluster can give")
            continue
        if r["status"] == "interrupted":
            if state in SLURM_ACTIVE and _status_now(Path(r["dir"])) == "interrupted":
                r["status"] = "requeued" if SLURM_ACTIVE[state] == "pending" else "running"  # SLURM starts it again
            continue  # otherwise it waits for a rerun of the sweep
        if state is None or state in SLURM_ACTIVE:
            if state is not None and r["status"] == "pending":
                r["status"] = SLURM_ACTIVE[state]  # running: its Python is starting
            continue
        if _status_now(Path(r["dir"])) != r["as_read"]:
            continue  # the run recorded itself since it was read: the next refresh reads it
        ended = "left the queue" if state == "GONE" else f"ended {state}"
        log = r["stderr"]
        started = bool(log) and Path(log).is_file()  # submitit's log: the job's Python started
        where = f" (log: {log})" if started else ""
        if r["status"] == "pending":
            r["status"] = "cancelled" if cancelled_before_its_run(state, [log, r.get("stdout")]) else "failed"
            r["error"] = f"SLURM job {r['slurm_job']} {ended} before its run started{where}"
        else:
            r["status"] = "failed"
            r["error"] = f"SLURM job {r['slurm_job']} {ended} while its run was running: the process was killed{where}"



def cancelled_before_its_run(state: str, logs: List[Optional[str]]) -> bool:
    """Whether a SLURM job whose run never recorded its start was cancelled while queued: it ended CANCELLED,
    or SLURM no longer knows it (it forgets an array task cancelled while queued at once) and it wrote none
    of its ``logs`` (submitit's, written as the job's Python starts)."""
    gone = state in ("GONE", "ENDED")  # ours and the attached launcher's word for a job SLURM no longer lists
    return state.startswith("CANCELLED") or (gone and not any(log and Path(log).is_file() for log in logs))


def record_failure(job_dir: Path, error: str, overrides: Any) -> None:
    """``failure.json`` in ``job_dir``: its last attempt failed with ``error`` (see :func:`jobs`)."""
    try:
        Path(job_dir).mkdir(parents=True, exist_ok=True)

        # this attempt's submitit logs: run.json may keep an earlier attempt's (a rerun that trained nothing keeps it)
        failure = {"error": error, "overrides": list(overrides), "submitit": RunRecord.submitit_job()}
        atomic_write(Path(job_dir) / FAILURE, json.dumps(failure, indent=2).encode())
    except OSError:
        pass


def best_row(rows: List[Dict[str, Any]], objective: str, mode: Any) -> Optional[Dict[str, Any]]:
    """The finished job with the best ``objective`` (``mode``: max or min); None if none. A NaN is never best."""
    mode = getattr(mode, "value", mode)
    scored = [r for r in rows if r["status"] == "done" and isinstance(r["metrics"].get(objective), (int, float))
              and not math.isnan(r["metrics"][objective])]
    return (max if mode == "max" else min)(scored, key=lambda r: r["metrics"][objective]) if scored else None


def _modified(path: Path) -> Optional[int]:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def write_summary(sweep_dir: Path, objective: str = "val/accuracy", mode: str = "max",
                  keep_if_unasked: bool = False) -> List[Dict[str, Any]]:
    """Write ``summary.csv`` and ``summary.md`` into ``sweep_dir``; returns the rows. ``keep_if_unasked``: keep the
    files where SLURM could not be asked. Records that changed while read are read again, so the files are never
    older than the newest record."""
    mode = getattr(mode, "value", mode)  # the config's ObjectiveMode enum, or a string
    if mode not in ("min", "max"):
        raise ValueError(f"mode should be min or max, got {mode!r}")
    sweep_dir = Path(sweep_dir)
    for _ in range(3):
        earlier: List[str] = []
        rows = jobs(sweep_dir, earlier)
        if keep_if_unasked and any(r.get("unasked") for r in rows):
            return rows
        _write_files(sweep_dir, rows, objective, mode, earlier)
        if all(_modified(Path(r["dir"]) / "run.json") == r["read_at"] for r in rows):
            break
    return rows


def _write_files(sweep_dir: Path, rows: List[Dict[str, Any]], objective: str, mode: str, earlier: Sequence[str] = ()) -> None:
    csv_text, md_text = render(sweep_dir, rows, objective, mode, earlier)
    atomic_write(sweep_dir / "summary.csv", csv_text.encode())
    atomic_write(sweep_dir / "summary.md", md_text.encode())


def render(sweep_dir: Path, rows: List[Dict[str, Any]], objective: str, mode: str, earlier: Sequence[str] = ()) -> Tuple[str, str]:
    """``summary.csv`` and ``summary.md``'s text for ``rows`` (:func:`jobs`), ranked by ``objective``; ``earlier``: the
    dirs of runs of an earlier sweep that the latest did not take, named below the table."""
    best = best_row(rows, objective, mode)
    # every final metric (your hooks' too) but the last step's timing and learning rate; val/ and train/ first,
    # the objective in front when it is another metric (a test/ one a hook records): the table ranks by it
    keys = sorted({k for r in rows for k in r["metrics"] if k not in ("time", "data_time", "lr") and not k.startswith("lr/")},
                  key=lambda k: (not k.startswith("val/"), not k.startswith("train/"), k))
    if objective in keys and not objective.startswith(("val/", "train/")):
        keys.insert(0, keys.pop(keys.index(objective)))
    elif objective not in keys and any(objective in r["metrics"] for r in rows):  # ranked by lr, say: shown too
        keys.insert(0, objective)
    header = ["job", "overrides", "status", "seconds", *keys, "best"]

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for r in rows:
        writer.writerow([r["job"], r["overrides"], r["status"], "" if r["seconds"] is None else f"{r['seconds']:.3f}",
                         *[r["metrics"].get(k, "") for k in keys], "*" if r is best else ""])

    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = [f"# Sweep {sweep_dir}", "", f"Objective: `{objective}` ({mode}); best: "
             + (f"job {best['job']} (`{best['overrides']}`), {objective} = {cell(best['metrics'][objective])}" if best
                else "none yet" if any(r["status"] in ("pending", "running") for r in rows)
                else f"none (no finished job has a number for {objective})"),
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        values = [r["job"], f"`{r['overrides']}`", r["status"], "" if r["seconds"] is None else f"{r['seconds']:.1f}",
                  *[cell(r["metrics"].get(k, "")) for k in keys], "**best**" if r is best else ""]
        lines.append("| " + " | ".join(str(v) for v in values) + " |")
    stuck = [r for r in rows if r["status"] == "stuck"]
    if stuck:
        lines += ["", "Stuck jobs (queued, but SLURM will not start them):"] + [
            f"- job {r['job']} (`{r['overrides']}`): {r['error']}" for r in stuck]
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        lines += ["", "Failed jobs:"] + [f"- job {r['job']} (`{r['overrides']}`): {r['error']}"
                                         + ("" if "(log: " in r["error"] or not (Path(r["dir"]) / "train.log").is_file()
                                            else f" (log: {r['dir']}/train.log)") for r in failed]
    if earlier:
        lines += ["", f"Not in this sweep (runs an earlier sweep in this dir left, not counted above): "
                      f"{', '.join(sorted(earlier)[:20])}{', ...' if len(earlier) > 20 else ''}"]
    return buf.getvalue(), "\n".join(lines) + "\n"


def _error_lines(path: str, job: int, n: int) -> List[str]:
    """The last ``n`` lines of the traceback logged with "Sweep job <job> failed", else of the log file."""
    try:
        lines = [line.rstrip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []
    marks = [i for i, line in enumerate(lines) if f"Sweep job {job} failed" in line]
    if marks:
        block = []
        for line in lines[marks[-1] + 1:]:
            if line.startswith("[") and "][" in line[:30]:  # the next log record: the traceback is over
                break
            block.append(line)
        return block[-n:]  # none for a ConfigError: its message, in the job's line, is all there is
    return lines[-n:]


def failure_report(rows: List[Dict[str, Any]], sweep_dir: Path, lines: int = 4) -> str:
    """One screen at the end of a sweep: each failed job, its overrides, its log and its error's last lines."""
    failed = [r for r in rows if r["status"] == "failed"]
    if not failed:
        return ""
    out = [f"{len(failed)} of {len(rows)} sweep job(s) failed:"]  # the summary's path: in the line above (done_report)
    own = distinct_overrides(rows)
    for r in failed:
        log = f"{r['dir']}/train.log"
        out.append(f"  job {r['job']} [{own[r['job']]}]: {r['error'] or 'no error recorded'}")
        submitit = f"{r['stderr']}" if r.get("stderr") and Path(r["stderr"]).is_file() else ""
        if Path(log).is_file():
            out.append(f"    log: {log}" + (f"  (submitit: {submitit})" if submitit else ""))
        elif submitit:
            out.append(f"    log: {submitit} (submitit's; the run wrote none)")
        out += [f"    | {line}" for line in _error_lines(log, r["job"], lines)]
        resumable = _stopped_with_a_checkpoint(Path(r["dir"]))
        if resumable:
            out.append(f"    it stopped with a checkpoint: mend {resumable} and run {same_command(Path(r['dir']))} to train it on")
    return "\n".join(out)


def _stopped_with_a_checkpoint(job_dir: Path) -> Optional[str]:
    """What to mend ("the config", "the model") of a job that stopped for an error found at a boundary (a value or a
    model output that only validation shows) with a checkpoint to train on from; None for any other failure."""
    model = str(_read_json(job_dir / "run.json").get("error") or "").startswith("ModelOutputError")
    what = "the config" if refused_key(job_dir) else "the model" if model else None
    return what if what and candidates(job_dir / "checkpoints") else None


def attempts_so_far(sweep_dir: Path) -> Dict[str, int]:
    """``{job dir: attempts recorded}`` (``run.json``'s ``attempt``) of the sweep dir's jobs, as a sweep starts."""
    if not Path(sweep_dir).is_dir():
        return {}
    found = {}
    for _, d in _job_dirs(Path(sweep_dir)):
        attempt = _read_json(d / "run.json").get("attempt")
        if isinstance(attempt, int):
            found[str(d)] = attempt
    return found


def _attempts_before(row: Dict[str, Any], before: Dict[str, int], started_ns: Optional[int]) -> int:
    """The attempts of ``row``'s job before this sweep ran it: ``before``, or for a SLURM job queued by an earlier
    submission the sweep waited for, those before that submission."""
    submitted = _read_json(Path(row["dir"]) / "submitted.json")
    ran = ((_read_json(Path(row["dir"]) / "run.json").get("submitit") or {}).get("job_id"))
    if started_ns is not None and isinstance(row.get("read_at"), int) and row["read_at"] >= started_ns and \
            isinstance(submitted.get("attempt"), int) and ran is not None and str(ran) == str(submitted.get("job_id")):
        return submitted["attempt"]
    return before.get(row["dir"], 0)


def distinct_overrides(rows: List[Dict[str, Any]]) -> Dict[int, str]:
    """``{job: its overrides}`` without those every job of the sweep shares (its fixed settings, said once in the
    summary): what tells the jobs apart, in the end lines. A sweep of one job keeps them all."""
    lists = [r.get("override_list") or [] for r in rows]
    shared = set.intersection(*map(set, lists)) if len(lists) > 1 else set()
    return {r["job"]: " ".join(o for o in own if o not in shared) or r["overrides"] for r, own in zip(rows, lists)}


def done_report(rows: List[Dict[str, Any]], sweep_dir: Path, objective: str, mode: Any,
                attempts_before: Optional[Dict[str, int]] = None, started_ns: Optional[int] = None) -> str:
    """One line at the end of a sweep (before the failures' screen, where there are any): how many jobs, the best, the jobs that went on after a
    stop within the sweep (more than one attempt since ``attempts_before``, or since their SLURM submission for
    jobs the sweep, ``started_ns``, re-attached to: requeued by SLURM), where the summary is."""
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    best = best_row(rows, objective, mode)
    order = ["done", "failed", "interrupted", "requeued", "running", "cancelled", "stuck", "pending"]
    state = ", ".join(f"{n} {status}" for status, n in
                      sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    top = f"; best: job {best['job']} [{distinct_overrides(rows)[best['job']]}] {objective} = {best['metrics'][objective]:.4g}" if best else ""
    done = [r for r in rows if r["status"] == "done"]
    if not best and done:  # finished jobs, none ranked: the objective is no metric of theirs (each job's log said so)
        recorded = sorted({k for r in done for k in r["metrics"]})
        top = f"; best: none (no finished job has a number for {objective}" + \
            (f"; they recorded {', '.join(recorded[:8])}{', ...' if len(recorded) > 8 else ''})" if recorded else ")")
    before = {r["dir"]: _attempts_before(r, attempts_before or {}, started_ns) for r in rows}
    requeued = [r for r in rows if (r.get("attempts") or 0) - before[r["dir"]] > 1]
    again = (f"; {len(requeued)} requeued by SLURM (preempted or timed out) and went on: "
             + ", ".join(f"job {r['job']} ({r['attempts'] - before[r['dir']]} attempts)" for r in requeued[:5])
             + (", ..." if len(requeued) > 5 else "")) if requeued else ""
    return f"Sweep of {len(rows)} job(s): {state}{top}{again}; summary: {Path(sweep_dir) / 'summary.md'}"


def job_end_line(num: int, overrides: Sequence[str], job_dir: Path, objective: str,
                 error: Optional[BaseException] = None) -> str:
    """The console's line as a sweep job ends: its number and overrides, its status (as the summary words it) with
    its ``objective`` (or the ``error`` it failed with), and its run dir."""
    record = _read_json(Path(job_dir) / "run.json")
    status = "failed" if error is not None else STATUS.get(str(record.get("status", "")), "ended")
    value = (record.get("metrics") or {}).get(objective)
    if error is not None:
        said = str(error).strip()
        outcome = f"{type(error).__name__}: {said.splitlines()[-1] if said else ''}"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        outcome = f"{objective} = {value:.4g}"
    else:
        outcome = f"no {objective} recorded"
    return f"Job {num} [{' '.join(overrides)}] {status}: {outcome}; run dir: {job_dir}"



class ReportedFailure(JobReturn):  # type: ignore[misc]
    """A failed sweep job's return once the job has logged its error (and the sweep's report lists it): the
    sweeper still raises the error to end the sweep, without Hydra's "Error executing job with overrides"
    line, and the CLI ends with the report alone (:func:`launcher.__main__.explain_config_errors`)."""

    @property
    def return_value(self) -> Any:
        if self.status == JobStatus.FAILED:
            raise self._return_value
        return self._return_value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        self._return_value = value


def main() -> None:
    parser = argparse.ArgumentParser(description="Write summary.csv and summary.md for a sweep dir.")
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--objective", default=None, help="default: the sweep's own (its multirun.yaml or jobs' run.json)")
    parser.add_argument("--mode", choices=("min", "max"), default=None, help="default: the sweep's objective_mode (given with --objective of another metric)")
    args = parser.parse_args()
    if not args.sweep_dir.is_dir():
        raise SystemExit(f"launcher.sweep.summary: {args.sweep_dir} is not a directory (expected outputs/multirun/<date>/<time>)")
    if not (args.sweep_dir / "multirun.yaml").is_file():  # a date dir, or outputs/multirun: several sweeps below
        sweeps = sorted(p.parent for p in args.sweep_dir.glob("*/multirun.yaml")) or \
            sorted(p.parent for p in args.sweep_dir.glob("*/*/multirun.yaml"))
        if len(sweeps) > 1:  # their jobs 0, 1, ... would be listed together, as one sweep's
            shown = ", ".join(str(p) for p in sweeps[-5:])
            raise SystemExit(f"launcher.sweep.summary: {args.sweep_dir} holds {len(sweeps)} sweeps, not one; give one of them: "
                             f"{'..., ' if len(sweeps) > 5 else ''}{shown}")
        if sweeps:
            args.sweep_dir = sweeps[0]
    if not jobs(args.sweep_dir):
        what = "a single run's dir (its record is run.json there)" if (args.sweep_dir / "run.json").is_file() else \
            "not a sweep dir: it holds no job dirs (0/, 1/, ...)"
        raise SystemExit(f"launcher.sweep.summary: {args.sweep_dir} is {what}; give a sweep dir, e.g. outputs/multirun/<date>/<time>")
    objective, mode = sweep_objective(args.sweep_dir)
    if args.objective:
        recorded = sorted({k for row in jobs(args.sweep_dir) for k in row["metrics"]})
        if recorded and args.objective not in recorded:
            close = difflib.get_close_matches(args.objective, recorded, n=1)
            raise SystemExit(f"launcher.sweep.summary: --objective {args.objective} is no metric the jobs recorded"
                             + (f"; did you mean {close[0]}?" if close else "") + f" They recorded: {', '.join(recorded)}")
        if args.mode is None and args.objective != objective:  # the sweep's mode is its objective's: it could rank the worst best
            raise SystemExit(f"launcher.sweep.summary: --objective {args.objective} is not the sweep's objective ({objective}, "
                             f"{mode}), so its direction is not known: add --mode min or --mode max")
    if (args.objective or objective, args.mode or mode) != (objective, mode):  # ranked another way: shown, not kept
        earlier: List[str] = []
        rows = jobs(args.sweep_dir, earlier)
        print(render(args.sweep_dir, rows, args.objective or objective, args.mode or mode, earlier)[1], end="")
        return
    rows = write_summary(args.sweep_dir, objective, mode, keep_if_unasked=True)
    unasked = [r for r in rows if r.get("unasked")]
    if unasked:  # shown as the jobs' files have it, and the files left with what SLURM said last time
        print(render(args.sweep_dir, rows, objective, mode)[1], end="")
        print(f"launcher.sweep.summary: SLURM could not be asked ({unasked[0]['unasked']}): the {len(unasked)} job(s) submitted "
              f"to it show what their own files last recorded; summary.md and summary.csv are left as they were",
              file=sys.stderr)
        return
    print((args.sweep_dir / "summary.md").read_text(), end="")


def sweep_objective(sweep_dir: Path) -> Tuple[str, str]:
    """The ``objective`` and ``objective_mode`` the sweep ran with: from its ``multirun.yaml``, else a
    job's recorded config, else the defaults (val/accuracy, max)."""
    configs: List[Any] = []
    try:
        configs.append(OmegaConf.load(Path(sweep_dir) / "multirun.yaml"))
    except Exception:  # noqa: BLE001 -- missing or unreadable: the jobs' records are next
        pass
    for row in jobs(Path(sweep_dir)):
        try:
            configs.append(json.loads((Path(row["dir"]) / "run.json").read_text()).get("config") or {})
        except (OSError, ValueError):
            continue
    for config in configs:
        objective, mode = config.get("objective"), config.get("objective_mode")
        if isinstance(objective, str) and str(getattr(mode, "value", mode)) in ("min", "max"):
            return objective, str(getattr(mode, "value", mode))
    return "val/accuracy", "max"


if __name__ == "__main__":
    main()
