"""Sweeps on a real SLURM cluster on this machine (launcher.localslurm), through submitit.

CI installs slurm-wlm and munge and starts the cluster; on a machine without them these tests are
skipped (never under CI=true, where they must run).
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import FAST, read_run, run_dirs
from launcher import localslurm
TESTS = Path(__file__).resolve().parent
SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]


@pytest.fixture(scope="module")
def cluster_env():
    if localslurm.missing_binaries() and os.environ.get("CI") != "true":
        pytest.skip("slurm-wlm and munge are not installed (apt-get install slurm-wlm munge)")
    localslurm.start()
    env = localslurm.env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    env["OMP_NUM_THREADS"] = "1"  # DDP references run here and on the cluster with the same thread count
    return env


def launch(args, cwd, env, **kw):
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)


def test_sweep_runs_as_a_slurm_job_array(tmp_path, cluster_env):
    proc = launch(["-m", *SLURM, "optimizer.lr=0.05,0.2", "trainer.max_epochs=2", *FAST], tmp_path, cluster_env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    dirs = run_dirs(tmp_path / "outputs" / "multirun")
    assert [d.name for d in dirs] == ["0", "1"]
    ids = [read_run(d)["submitit"]["job_id"] for d in dirs]
    assert f"Submitted 2 job(s) to SLURM: {ids[0]}, {ids[1]}; waiting for them" in proc.stdout + proc.stderr
    for d in dirs:
        record = read_run(d)
        assert record["status"] == "completed" and "_" in record["submitit"]["job_id"]  # an array task
        assert Path(record["submitit"]["stdout"]).is_file()
    assert (dirs[0].parent / "summary.md").is_file()

    # rerun with a value added: the finished jobs take no allocation, only the new one is submitted
    submitted = {d.name: json.loads((d / "submitted.json").read_text())["job_id"] for d in dirs}
    records = {d.name: read_run(d) for d in dirs}
    rerun = launch(["-m", *SLURM, "optimizer.lr=0.05,0.2,0.1", "trainer.max_epochs=2", *FAST,
                    f"hydra.sweep.dir={dirs[0].parent}"], tmp_path, cluster_env)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "2 of 3 sweep jobs already finished, not submitted again (their results are in the summary): 0-1" in out
    assert {d.name: json.loads((d / "submitted.json").read_text())["job_id"] for d in dirs} == submitted
    assert {d.name: read_run(d) for d in dirs} == records
    new = dirs[0].parent / "2"
    assert read_run(new)["status"] == "completed" and read_run(new)["submitit"]["job_id"] not in submitted.values()
    assert "Sweep of 3 job(s): 3 done" in out


def _job_state(job: str, env) -> tuple:
    out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env, timeout=60).stdout
    fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
    return fields.get("JobState"), fields.get("ExitCode")


def test_a_failed_run_is_a_failed_slurm_job_and_the_sweep_names_it(tmp_path, cluster_env):
    """sacct, --mail-type=FAIL and afterok dependencies go by the job's state: a run that failed
    must not be COMPLETED with exit code 0 there."""
    proc = launch(["-m", *SLURM, "optimizer.lr=0.05,-1", "trainer.max_epochs=1", *FAST], tmp_path, cluster_env)
    assert proc.returncode != 0
    assert "1 of 2 sweep job(s) failed" in proc.stderr and "Invalid learning rate: -1" in proc.stderr, proc.stderr[-3000:]
    good, bad = run_dirs(tmp_path / "outputs" / "multirun")
    assert read_run(good)["status"] == "completed" and read_run(bad)["status"] == "failed"
    states = {}
    deadline = time.monotonic() + 60  # scontrol shows the final state once slurmd reports the step's end
    while time.monotonic() < deadline:
        states = {d.name: _job_state(read_run(d)["submitit"]["job_id"], cluster_env) for d in (good, bad)}
        if all(state not in ("RUNNING", "COMPLETING") for state, _ in states.values()):
            break
        time.sleep(0.2)
    assert states == {good.name: ("COMPLETED", "0:0"), bad.name: ("FAILED", "1:0")}


def _node_state(env) -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env, timeout=60)
    return out.stdout.strip().split("\n")[0].rstrip("*~#")


def _wait_running(job_dir: Path, timeout: float, why_not, alive=lambda: True) -> dict:
    """The job's run record once it says running; fails with ``why_not()`` after ``timeout`` seconds, or once
    ``alive()`` is false (the sweep waiting for it ended)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            record = read_run(job_dir)
            if record["status"] == "running":
                return record
        except (OSError, ValueError, KeyError):
            pass
        assert alive() and time.monotonic() < deadline, why_not()
        time.sleep(0.1)


def _squeue(job: str, env) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job.split("_")[0], "-o", "%T %r"], capture_output=True, text=True, env=env)
    return out.stdout.strip()


def _diagnose(job: str, job_dir: Path, env, out: str) -> str:
    """What a failed cluster test needs to be understood from CI's log alone."""
    parts = [f"launcher output:\n{out[-3000:]}", f"squeue: {_squeue(job, env)!r}, node: {_node_state(env)!r}"]
    logs = sorted(job_dir.glob("*.log")) + sorted((job_dir.parent / ".submitit").glob("**/*.out"))
    logs += sorted((job_dir.parent / ".submitit").glob("**/*.err")) + [localslurm.directory() / "slurmctld.log", localslurm.directory() / "slurmd.log"]
    for path in logs:
        try:
            parts.append(f"--- {path} (tail)\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        except OSError as err:
            parts.append(f"--- {path}: {err}")
    return "\n".join(parts)


def _release_when_requeued(job: str, cluster_env: dict, deadline: float, sweep: subprocess.Popen) -> None:
    """Wait for the preempted ``job`` to be requeued, then make it eligible at once (not in ~2 minutes);
    return at once if the ``sweep`` ends instead (the job was not requeued)."""
    while "PENDING" not in _squeue(job, cluster_env) and time.monotonic() < deadline:  # requeued, held ~2 min
        if sweep.poll() is not None:
            return
        time.sleep(0.2)
    requeued = time.time()
    # Release it only once the node is done with the first attempt: started while the node is still
    # "completing" (a 2-task job's srun step takes a moment), SLURM kills it ("Job credential revoked").
    while _node_state(cluster_env) not in ("idle", "") and time.monotonic() < deadline:
        time.sleep(0.2)
    # slurmd compares the new attempt's credential with the first attempt's revocation to the second:
    # a release within the second of the requeue is killed the same way ("Job 8 already killed").
    time.sleep(max(0.0, math.floor(requeued) + 1.1 - time.time()))
    subprocess.run(["scontrol", "update", f"JobId={job.split('_')[0]}", "StartTime=now"], env=cluster_env, check=True)


@pytest.mark.parametrize("sig", ["USR2", "TERM"])
def test_a_job_signalled_as_its_python_starts_is_requeued_or_stopped_not_killed(sig, tmp_path, cluster_env):
    """A signal while the job's Python still imports torch to unpickle the job, before submitit has installed
    its handlers: its default action killed the job (FAILED, never requeued). The job's command now holds it
    from its first line; the run takes it at its first step, with a checkpoint, then submitit's handler:
    SIGUSR2 (preemption) requeues the job, which ends completed; SIGTERM (scancel) leaves it interrupted."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "-m", *SLURM, "seed=0", f"hydra.sweep.dir={sweep}", *FAST],
                            cwd=tmp_path, env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240

    def job_python():  # the job's Python (not srun, whose command line names it too)
        found = subprocess.run(["pgrep", "-f", f"submitit.*{sweep}"], capture_output=True, text=True).stdout.split()
        return next((pid for pid in found if Path(f"/proc/{pid}/comm").read_text().startswith("python")), None)

    def catches_usr2(pid) -> bool:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        return bool(caught >> (signal.SIGUSR2 - 1) & 1)

    while (pid := job_python()) is None:
        assert proc.poll() is None and time.monotonic() < deadline, "the job did not start"
        time.sleep(0.02)
    # Signal once its Python has a handler, or after 0.5 s: either way long before submitit has unpickled the job
    # (importing torch, 1 s and more), whose handler used to be the first.
    started = time.monotonic()
    while not catches_usr2(pid) and time.monotonic() - started < 0.5:
        time.sleep(0.01)
    job = next(p.name for p in (sweep / ".submitit").iterdir() if p.name[0].isdigit())  # submitit's folder for it
    subprocess.run(["scancel", f"--signal={sig}", job], env=cluster_env, check=True)
    if sig == "USR2":
        _release_when_requeued(job, cluster_env, deadline, proc)
    out, _ = proc.communicate(timeout=300)
    log = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))
    assert "User defined signal 2" not in log, log[-3000:]  # (srun's "Terminated" follows any requeue: not checked)
    record = read_run(sweep / "0")
    if sig == "USR2":
        assert proc.returncode == 0, out[-4000:] + _diagnose(job, sweep / "0", cluster_env, out)
        assert record["status"] == "completed"
        assert "received SIGUSR2" in (sweep / "0" / "train.log").read_text()
    else:
        assert record["status"] == "interrupted" and record["iter"] == 0, out[-4000:]
        assert "was interrupted: stopped at iteration 0 (received SIGTERM)" in out


@pytest.mark.parametrize("tasks", [1, 2])
def test_preempted_job_checkpoints_requeues_and_ends_as_if_never_stopped(tmp_path, cluster_env, tasks):
    """Also with a config file of the run edited while the job waits in the queue (for the next experiment): the
    requeued job composed its config again from the files and was refused as another run (its run dir "holds a run
    made with another config (seed: 3 -> 4)"); it goes on with the config it was submitted with."""
    experiment = tmp_path / "conf" / "experiment" / "pinned.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\nseed: 3\n")
    common = ["trainer=iter", "trainer.max_iters=120", "hooks.checkpointer.by_epoch=false", "hooks.checkpointer.period=50",
              "hooks.jsonl.period=1", "hooks.jsonl.flush_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.02",
              f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+experiment=pinned", *FAST]
    # With 2 tasks the job trains DDP over them; its reference is the same 2-rank training started here.
    ref = launch(["hydra.run.dir=ref", f"trainer.devices={tasks}", *common], tmp_path, cluster_env)
    assert ref.returncode == 0, ref.stderr[-3000:]

    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "-m", *SLURM, f"hydra.launcher.tasks_per_node={tasks}",
                             f"hydra.sweep.dir={sweep}", *common],
                            cwd=tmp_path, env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_dir = sweep / "0"
    deadline = time.monotonic() + 240

    def progress() -> int:
        try:
            return max(json.loads(line)["iter"] for line in (job_dir / "metrics.jsonl").read_text().splitlines() if line.strip())
        except (OSError, ValueError):
            return -1

    while progress() < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    job = read_run(job_dir)["submitit"]["job_id"]
    subprocess.run(["scancel", "--signal=USR2", job], env=cluster_env, check=True)
    while not ("PENDING" in _squeue(job, cluster_env) and read_run(job_dir)["status"] == "interrupted") \
            and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    # waiting in the queue to start again: "requeued", not "interrupted" (which asks for a rerun of the sweep)
    summary = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], env=cluster_env, capture_output=True,
                             text=True, timeout=120)
    assert "| requeued |" in summary.stdout, summary.stdout + summary.stderr[-2000:]
    experiment.write_text("# @package _global_\nseed: 4\n")
    _release_when_requeued(job, cluster_env, deadline, proc)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("the requeued job did not finish in 5 minutes\n" + _diagnose(job, job_dir, cluster_env, out))
    assert proc.returncode == 0, out[-4000:] + _diagnose(job, job_dir, cluster_env, out)

    log = (job_dir / "train.log").read_text()
    assert "received SIGUSR2" in log and "Resumed from" in log
    record = read_run(job_dir)
    assert record["status"] == "completed" and record["attempt"] == 2 and record["config"]["seed"] == 3
    assert "1 requeued by SLURM (preempted or timed out) and went on: job 0 (2 attempts)" in out
    got = torch.load(job_dir / "checkpoints" / "final.pt", weights_only=False)
    want = torch.load(tmp_path / "ref" / "checkpoints" / "final.pt", weights_only=False)
    for key, tensor in want["model"].items():
        assert torch.equal(got["model"][key], tensor), key
    for pid, state in want["optimizer"]["state"].items():
        for name, tensor in state.items():
            assert torch.equal(got["optimizer"]["state"][pid][name], tensor)


def test_sweep_of_two_task_ddp_jobs(tmp_path, cluster_env):
    """Each job of the array is a 1-node x 2-task DDP job: one run dir, identical weights on both ranks,
    equal to the same 2-rank training started with trainer.devices=2."""
    common = [*FAST, "trainer.max_epochs=2", "+hooks.dump._target_=ddp_probe.DumpWeights"]
    ref = launch(["hydra.run.dir=ref", "trainer.devices=2", "seed=1", *common], tmp_path, cluster_env)
    assert ref.returncode == 0, ref.stderr[-3000:]
    proc = launch(["-m", *SLURM, "hydra.launcher.tasks_per_node=2", "seed=0,1", *common], tmp_path, cluster_env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    dirs = run_dirs(tmp_path / "outputs" / "multirun")
    assert [d.name for d in dirs] == ["0", "1"]
    ids = [read_run(d)["submitit"]["job_id"] for d in dirs]
    assert f"Submitted 2 job(s) to SLURM: {ids[0]}, {ids[1]}; waiting for them" in proc.stdout + proc.stderr
    for d in dirs:
        assert read_run(d)["status"] == "completed"
        assert "Joining the process group: rank 0 of 2" in (d / "train.log").read_text()
        assert "rank 1 of 2" in (d / "train_rank1.log").read_text()
        r0, r1 = torch.load(d / "weights_rank0.pt"), torch.load(d / "weights_rank1.pt")
        assert all(torch.equal(r0[k], r1[k]) for k in r0)
    want = torch.load(tmp_path / "ref" / "weights_rank0.pt")
    got = torch.load(dirs[1] / "weights_rank0.pt")  # seed=1
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_detached_submission_returns_at_once_with_job_ids_and_sweep_dir(tmp_path, cluster_env):
    start = time.monotonic()
    proc = launch(["-m", "hydra/launcher=slurm_detached", *SLURM[1:], "seed=0,1", "trainer.max_epochs=2", *FAST,
                   "hydra.sweep.subdir=seed_${seed}"], tmp_path, cluster_env)
    returned_after = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    ids = re.search(r"Submitted 2 job\(s\) to SLURM: (\S+), (\S+)", out)
    sweep = re.search(r"Sweep dir: (\S+)", out)
    assert ids and sweep, out[-3000:]
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=cluster_env).stdout.split()
    array = ids.group(1).split("_")[0] + "_"
    assert any(q.startswith(array) for q in queued), (queued, returned_after)  # 25_0, or 25_[0-1%2] while pending
    sweep_dir = tmp_path / sweep.group(1)
    summary = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep_dir)], capture_output=True, text=True,
                             env=cluster_env)
    assert "seed=0" in summary.stdout and "seed=1" in summary.stdout  # listed before they finish
    # each job writes its run.json, then (its Hydra callback, a moment later) the sweep's summary: wait for both
    deadline, rows = time.monotonic() + 240, ""
    while time.monotonic() < deadline:
        records = [read_run(d) for d in run_dirs(sweep_dir)]
        rows = (sweep_dir / "summary.csv").read_text() if (sweep_dir / "summary.csv").exists() else ""
        if len(records) == 2 and all(r["status"] == "completed" for r in records) and rows.count("done") == 2:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the detached jobs did not finish: {[read_run(d) for d in run_dirs(sweep_dir)]}; summary: {rows}")
    assert sorted(r["submitit"]["job_id"] for r in records) == sorted([ids.group(1), ids.group(2)])
    assert "pending" not in rows and "running" not in rows, rows
    # each job marked pending in its own dir (the subdir's), not in a numbered one left pending for good
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["seed_0", "seed_1"]


def test_jobs_waiting_in_the_queue_run_the_config_their_sweep_was_submitted_with(tmp_path, cluster_env):
    """A config file edited once the sweep is submitted (for the next experiment) reached the jobs still waiting
    in the queue: the plugin composed each job's config in the job, as it started. The sweep composes them."""
    experiment = tmp_path / "conf" / "experiment" / "pinned.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\noptimizer:\n  lr: 0.05\n")
    sweep = tmp_path / "sweep"
    # four jobs: the sweep's check composes two that use every value (jobs 0 and 3), the submission the others
    proc = launch(["-m", "hydra/launcher=slurm_detached", *SLURM[1:], "hydra.launcher.array_parallelism=1", "seed=0,1",
                   "model.dropout=0.0,0.1", f"hydra.sweep.dir={sweep}", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                   "+experiment=pinned", "trainer.max_epochs=2", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.1",
                   *FAST], tmp_path, cluster_env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    experiment.write_text("# @package _global_\noptimizer:\n  lr: 0.2\n")  # jobs 1-3 wait behind job 0 (seconds)
    assert not (sweep / "1" / "run.json").exists()
    names = ("0", "1", "2", "3")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        records = [read_run(sweep / n) if (sweep / n / "run.json").exists() else {} for n in names]
        if all(r.get("status") in ("completed", "failed") for r in records):
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the jobs did not finish: {records}")
    assert [r["status"] for r in records] == ["completed"] * 4, records
    assert [r["config"]["optimizer"]["lr"] for r in records] == [0.05] * 4


def test_the_summary_of_a_detached_sweep_asks_slurm_about_jobs_that_ended_without_a_record(tmp_path, cluster_env):
    """A detached sweep's job cancelled while queued never writes run.json, and one killed outright leaves
    run.json "running": the summary read them pending and running for good. It now asks SLURM."""
    sweep = tmp_path / "sweep"
    proc = launch(["-m", "hydra/launcher=slurm_detached", *SLURM[1:], "hydra.launcher.array_parallelism=1", "seed=0,1",
                   "trainer.max_epochs=40", f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace",
                   "+hooks.pace.seconds=0.05", *FAST], tmp_path, cluster_env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    ids = [json.loads((sweep / str(n) / "submitted.json").read_text())["job_id"] for n in (0, 1)]
    # job 0 trains; job 1 waits behind it (one task at a time)
    record = _wait_running(sweep / "0", 240, lambda: f"job 0 did not start: {_squeue(ids[0], cluster_env)!r}")
    assert not (sweep / "1" / "run.json").exists()
    subprocess.run(["scancel", ids[1]], env=cluster_env, check=True)
    os.kill(record["pid"], signal.SIGKILL)  # as the OOM killer: no handler runs, run.json stays "running"

    summary = ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], capture_output=True, text=True,
                              env=cluster_env, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = done.stdout
        if "| running |" not in summary and "| pending |" not in summary:
            break
        time.sleep(1)
    assert read_run(sweep / "0")["status"] == "running" and not (sweep / "1" / "run.json").exists()
    import csv

    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "failed"), ("1", "cancelled")], summary
    assert f"SLURM job {ids[0]} ended" in summary and "while its run was running: the process was killed" in summary
    assert f"(log: {record['submitit']['stderr']})" in summary

    # the controller out of reach: the jobs read as their files have them (job 0 running, job 1 pending), said to be
    # so, and the files keep what SLURM said (they were overwritten with running and pending, without a word)
    unreachable = tmp_path / "unreachable.conf"
    unreachable.write_text(Path(cluster_env["SLURM_CONF"]).read_text() + "SlurmctldPort=1\n")
    blind = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], capture_output=True, text=True,
                           env={**cluster_env, "SLURM_CONF": str(unreachable)}, timeout=120)
    assert blind.returncode == 0 and "| running |" in blind.stdout and "| pending |" in blind.stdout, blind.stdout
    assert "launcher.sweep.summary: SLURM could not be asked (" in blind.stderr and "the 2 job(s) submitted to it show what " \
        "their own files last recorded" in blind.stderr and "summary.md and summary.csv are left as they were" in blind.stderr
    assert [(r["job"], r["status"]) for r in csv.DictReader((sweep / "summary.csv").open())] == [("0", "failed"), ("1", "cancelled")]


def test_an_attached_sweeps_job_cancelled_while_queued_is_cancelled_not_failed(tmp_path, cluster_env):
    """``scancel`` of a queued task of a ``slurm`` sweep that waits for its jobs: it was reported failed ("ended
    ENDED without a result", naming log files that never existed) and stayed failed in the summary."""
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", *SLURM, "hydra.launcher.array_parallelism=1", "seed=0,1",
            "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace",
            "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_running(sweep / "0", 240, lambda: "job 0 did not start", alive=lambda: proc.poll() is None)
        queued = json.loads((sweep / "1" / "submitted.json").read_text())["job_id"]  # job 1 waits behind job 0
        assert not (sweep / "1" / "run.json").exists()
        subprocess.run(["scancel", queued], env=cluster_env, check=True)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 75, out[-3000:]  # as for a job stopped alone: rerun the sweep to finish it
    assert f"SLURM job {queued} was cancelled before its run started: rerun the sweep to run it" in out
    assert "failed" not in out.lower().split("sweep of")[-1], out[-3000:]
    import csv

    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "done"), ("1", "cancelled")], rows
    assert not (sweep / "1" / "failure.json").exists()
    assert read_run(sweep / "0")["command"][1:5] == ["-m", "launcher", "-m", "hydra/launcher=slurm"]  # the sweep's


def _preempted_before_the_rerun(args, sweep: Path, tmp_path, cluster_env) -> tuple:
    """A detached sweep of ``args`` whose job 0 trained, checkpointed and was preempted (requeued, held by SLURM),
    then the attached rerun, once it says it waits for that job: its process, the lines so far, the SLURM job id."""
    detached = launch([*args, "hydra/launcher=slurm_detached"], tmp_path, cluster_env)
    assert detached.returncode == 0, detached.stderr[-3000:]
    _wait_running(sweep / "0", 240, lambda: "job 0 did not start")
    job = json.loads((sweep / "0" / "submitted.json").read_text())["job_id"]
    deadline = time.monotonic() + 120
    while not (sweep / "0" / "checkpoints" / "last").is_file():
        assert time.monotonic() < deadline, "the job did not checkpoint"
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR2", job], env=cluster_env, check=True)  # preempted: requeued, held 2 min
    while read_run(sweep / "0")["status"] != "interrupted":
        assert time.monotonic() < deadline, "the job did not stop"
        time.sleep(0.2)
    time.sleep(1)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=tmp_path, env=cluster_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # until the rerun says it waits for the queued job
        seen.append(line)
        if "not submitted again; waiting for them" in line:
            break
    return proc, seen, job


def test_a_reattached_job_preempted_before_and_cancelled_while_queued_again_is_interrupted_with_its_checkpoint(
        tmp_path, cluster_env):
    """A job whose run trained and was requeued before a rerun of the sweep re-attached to it, then cancelled while it
    waited to go on: "cancelled before its run started" (its run.json predated the rerun), though it stopped with
    a checkpoint. Its attempt counts from its own submission, as for a job the rerun submitted."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM, "hydra.launcher.timeout_min=20", "seed=0", "trainer.max_epochs=40", f"hydra.sweep.dir={sweep}",
            "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc, seen, job = _preempted_before_the_rerun(args, sweep, tmp_path, cluster_env)
    try:
        subprocess.run(["scancel", job], env=cluster_env, check=True)
        out = "".join(seen) + proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 75, out[-3000:]
    assert "Sweep job 0 (seed=0 " in out and "was interrupted: stopped at iteration" in out and "(received SIGUSR2)" in out
    assert "cancelled before its run started" not in out and "failed" not in out.lower(), out[-3000:]
    assert read_run(sweep / "0")["status"] == "interrupted" and not (sweep / "0" / "failure.json").exists()


def test_a_requeue_before_the_rerun_reattached_is_in_its_end_line(tmp_path, cluster_env):
    """The end line names the jobs SLURM requeued that went on; it counted attempts from the rerun's start, so a job
    preempted before the rerun re-attached to it finished as if it never had been."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM, "hydra.launcher.timeout_min=20", "seed=0", "trainer.max_epochs=3", f"hydra.sweep.dir={sweep}",
            "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.1", *FAST]
    proc, seen, job = _preempted_before_the_rerun(args, sweep, tmp_path, cluster_env)
    try:
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=cluster_env, check=True)
        out = "".join(seen) + proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0 and read_run(sweep / "0")["status"] == "completed", out[-3000:]
    assert "Sweep of 1 job(s): 1 done" in out and "1 requeued by SLURM (preempted or timed out) and went on: job 0 " \
        "(2 attempts)" in out, out[-3000:]


def test_ctrl_c_while_waiting_leaves_the_jobs_running_and_says_how_to_follow_and_cancel_them(tmp_path, cluster_env):
    import signal

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", *SLURM, "trainer.max_epochs=50", f"hydra.sweep.dir={sweep}",
            "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (sweep / "0" / "checkpoints" / "last").is_file():
        time.sleep(0.2)  # the job trains on the cluster
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    job = read_run(sweep / "0")["submitit"]["job_id"]
    assert f"SIGINT: stopped waiting; the 1 SLURM job(s) go on ({job})" in out
    assert f"python -m launcher.sweep.summary {sweep}" in out and f"scancel {job.split('_')[0]}" in out
    assert "Traceback" not in out
    assert _squeue(job, cluster_env).startswith("RUNNING")  # the job goes on without the terminal
    subprocess.run(["scancel", job.split("_")[0]], env=cluster_env, check=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and read_run(sweep / "0")["status"] == "running":
        time.sleep(0.5)
    assert read_run(sweep / "0")["status"] == "interrupted"  # scancel's SIGTERM: a checkpoint, then the end


def test_a_job_killed_outright_is_one_failed_job_and_the_sweep_ends(tmp_path, cluster_env):
    """kill -9 (the OOM killer) leaves no result; without accounting (sacct) submitit read the job UNKNOWN and the
    attached sweep waited for ever. Now the state comes from scontrol: one failed job, named, and the other done."""
    import signal

    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM, "seed=0,1", "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace",
            "+hooks.pace.seconds=0.1", *FAST]
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=tmp_path, env=cluster_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = _wait_running(sweep / "0", 120, lambda: "job 0 did not start", alive=lambda: proc.poll() is None)
    os.kill(record["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out + err)[-3000:]
    assert "Traceback" not in out + err and "UncompletedJobError" not in out + err
    assert "Sweep job 0 failed (seed=0 " in out + err and "ended FAILED without a result (killed, out of memory" in err
    assert read_run(sweep / "0")["status"] == "failed" and read_run(sweep / "1")["status"] == "completed"
    rows = (sweep / "summary.csv").read_text()
    assert rows.count(",failed,") == 1 and rows.count(",done,") == 1, rows


def _sweep_with_a_checkpoint(args, job_dir: Path, cwd: Path, env) -> tuple:
    """The sweep of ``args`` started, once its job ``job_dir`` has written a checkpoint: its process and SLURM job id."""
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (job_dir / "checkpoints" / "last").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "the job did not checkpoint"
        time.sleep(0.2)
    return proc, read_run(job_dir)["submitit"]["job_id"]


def test_a_job_stopped_by_scancel_term_stays_interrupted_and_a_one_job_sweep_sees_it_end(tmp_path, cluster_env):
    """scancel --signal=TERM: the run checkpoints and ends (exit 75) without a result for submitit. The sweep
    recorded it failed (run.json rewritten, failure.json, summary); and a one-job sweep, whose job is a plain
    job rather than an array's task, never read its state from scontrol and waited for ever."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM, "seed=0", "trainer.max_epochs=40", f"hydra.sweep.dir={sweep}", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace",
            "+hooks.pace.seconds=0.05", *FAST]
    proc, job = _sweep_with_a_checkpoint(args, sweep / "0", tmp_path, cluster_env)
    assert "_" not in job  # a plain job
    subprocess.run(["scancel", "--signal=TERM", job], env=cluster_env, check=True)
    stopped = time.monotonic()
    out, _ = proc.communicate(timeout=300)
    # not after submitit's 15-s wait for a result file, which a run that stopped itself never writes
    assert time.monotonic() - stopped < 12, out[-3000:]
    record = read_run(sweep / "0")
    assert record["status"] == "interrupted" and record["stop_reason"] == "received SIGTERM", out[-3000:]
    assert "Sweep job 0 (seed=0 " in out and "was interrupted: stopped at iteration" in out, out[-3000:]
    assert "rerun the sweep to resume it" in out and "Traceback" not in out
    assert proc.returncode == 75  # resumable, not failed
    assert not (sweep / "0" / "failure.json").exists()
    assert ",interrupted," in (sweep / "summary.csv").read_text()

    # submitted again (detached): its row is the new submission's, not the interrupted attempt's (it said interrupted)
    detached = ["-m", "hydra/launcher=slurm_detached", *args[2:], "hydra.launcher.setup=[sleep 8]"]
    resubmit = launch(detached, tmp_path, cluster_env)
    out = resubmit.stdout + resubmit.stderr
    assert resubmit.returncode == 0 and "1 sweep job(s) train on from their checkpoints: job 0 (iter_" in out, out[-3000:]
    assert re.match(r"Sweep of 1 job\(s\): 1 (pending|running); ", resubmit.stdout.strip().splitlines()[-1]), out[-3000:]
    new_job = json.loads((sweep / "0" / "submitted.json").read_text())["job_id"]
    # once more while SLURM holds it: not submitted, nor said to train on from its checkpoint
    held = launch(detached, tmp_path, cluster_env)
    out = held.stdout + held.stderr
    assert held.returncode == 0 and f"Sweep job 0 is queued or running in SLURM already ({new_job})" in out, out[-3000:]
    assert "train on from their checkpoints" not in out and "hydra.launcher changed" not in out
    subprocess.run(["scancel", new_job], env=cluster_env, check=True)
    # cancelled before its run started: what SLURM says of the new submission, not pending for good
    deadline, status = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        summary = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], capture_output=True, text=True,
                                 env=cluster_env, timeout=120)
        status = summary.stdout.split("\n| 0 |")[1].split(" | ")[1] if "\n| 0 |" in summary.stdout else summary.stdout
        if status not in ("pending", "running"):
            break
        time.sleep(1)
    assert status == "cancelled", summary.stdout


def test_a_job_out_of_requeues_is_interrupted_with_its_checkpoint_not_failed(tmp_path, cluster_env):
    """Preempted once more than ``max_num_timeout`` allows (with timeout_min=10 submitit counts every preemption
    as a timeout), submitit declines to requeue by raising from its signal handler, after the run's checkpoint
    was written: the job was reported failed, with a traceback fragment, though a rerun resumes it."""
    sweep = tmp_path / "sweep"
    args = ["-m", *SLURM, "hydra.launcher.max_num_timeout=0", "seed=0", "trainer.max_epochs=40", f"hydra.sweep.dir={sweep}",
            "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc, job = _sweep_with_a_checkpoint(args, sweep / "0", tmp_path, cluster_env)
    subprocess.run(["scancel", "--signal=USR2", job], env=cluster_env, check=True)
    out, _ = proc.communicate(timeout=300)
    record = read_run(sweep / "0")
    assert record["status"] == "interrupted" and record["stop_reason"] == "received SIGUSR2", out[-3000:]
    assert proc.returncode == 75 and "was interrupted: stopped at iteration" in out, out[-3000:]
    assert "UncompletedJobError" not in out and "Traceback" not in out and not (sweep / "0" / "failure.json").exists()
    assert "SLURM job not requeued (submitit: timed-out too many times)" in (sweep / "0" / "train.log").read_text()
    again = launch(args, tmp_path, cluster_env)
    assert again.returncode == 0 and read_run(sweep / "0")["status"] == "completed", (again.stdout + again.stderr)[-3000:]
    assert "Resumed from" in (sweep / "0" / "train.log").read_text()


@pytest.mark.parametrize("seconds", [0.2, 0.6])
def test_a_preemption_signal_after_the_run_completed_leaves_the_job_completed(seconds, tmp_path, cluster_env):
    """SIGUSR2 while the job returned its result or Python shut down ended the process by the signal (Python's
    shutdown puts the default action back): SLURM recorded a completed run FAILED, 140:0 (afterok, --mail-type)."""
    sweep = tmp_path / "sweep"
    proc = launch(["-m", *SLURM, "seed=0", "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}",
                   "+hooks.late._target_=pace.PreemptAfterTheEnd", f"+hooks.late.seconds={seconds}", *FAST], tmp_path, cluster_env)
    assert proc.returncode == 0 and read_run(sweep / "0")["status"] == "completed", (proc.stdout + proc.stderr)[-3000:]
    job = read_run(sweep / "0")["submitit"]["job_id"]
    state = ("RUNNING", None)
    deadline = time.monotonic() + 60
    while state[0] in ("RUNNING", "COMPLETING", "PENDING") and time.monotonic() < deadline:
        time.sleep(0.5)  # the signal lands after the sweep has its result: let it, then ask SLURM
        state = _job_state(job, cluster_env)
    assert state == ("COMPLETED", "0:0"), state
    assert read_run(sweep / "0")["attempt"] == 1  # not requeued either


@pytest.mark.parametrize("launcher", ["slurm", "slurm_detached"])
def test_a_sweep_sbatch_refuses_is_one_line_naming_what_it_said(launcher, tmp_path, cluster_env):
    proc = launch(["-m", f"hydra/launcher={launcher}", *SLURM[1:], "hydra.launcher.partition=nope", "seed=0,1", *FAST],
                  tmp_path, cluster_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and "HYDRA_FULL_ERROR" not in out, out[-3000:]
    # one line: what sbatch said, what the jobs asked, what there is; no report of jobs that were never submitted
    (line,) = [line for line in proc.stderr.splitlines() if "sbatch" in line]
    assert line.startswith(f"Config error: hydra/launcher={launcher}: sbatch refused the sweep's jobs: invalid partition "
                           f"specified: nope") and "partition=nope" in line and line.endswith("partitions here: debug")
    assert "pending" not in out

    # a request below what it can be: refused before any job dir is made (sbatch takes --time=-5 as 8000 years)
    sweep = tmp_path / "negative"
    proc = launch(["-m", f"hydra/launcher={launcher}", *SLURM[1:], "hydra.launcher.timeout_min=-5", "seed=0,1",
                   f"hydra.sweep.dir={sweep}", *FAST], tmp_path, cluster_env)
    assert proc.returncode == 2 and proc.stderr.strip() == (f"Config error: hydra.launcher.timeout_min=-5: hydra/launcher="
                                                            f"{launcher} takes 1 or more (minutes of walltime)"), proc.stderr
    assert not sweep.exists()


@pytest.mark.parametrize("launcher", ["slurm", "slurm_detached"])
def test_a_sweep_without_slurm_conf_exported_is_told_to_export_it_and_leaves_no_sweep_dir(launcher, tmp_path):
    """No cluster needed: with SLURM_CONF unset (and no /etc/slurm/slurm.conf), SLURM's commands look for their config
    in DNS, and sbatch's "DNS SRV lookup failed" came as a Config error with the launcher's settings listed."""
    import shutil

    from launcher.sweep.slurm import DEFAULT_CONFS

    if shutil.which("sinfo") is None or any(Path(conf).is_file() for conf in DEFAULT_CONFS):
        pytest.skip("needs SLURM's commands installed and no slurm.conf where they look without SLURM_CONF")
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "HYDRA_FULL_ERROR")}
    sweep = tmp_path / "sweep"
    proc = launch(["-m", f"hydra/launcher={launcher}", *SLURM[1:], "seed=0,1", f"hydra.sweep.dir={sweep}", *FAST], tmp_path, env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"Config error: hydra/launcher={launcher}: ") and \
        "export SLURM_CONF=" in lines[0] and "python -m launcher.localslurm start" in lines[0], proc.stderr
    assert "DNS SRV" not in proc.stdout + proc.stderr and not sweep.exists() and not (tmp_path / "outputs").exists()


def test_a_sweep_whose_slurm_controller_does_not_answer_is_told_so_not_that_its_config_is_wrong(tmp_path, cluster_env):
    """sbatch failing to reach slurmctld was "Config error: ... sbatch refused the sweep's jobs" with the launcher's
    settings listed, exit 2: the user went looking for a wrong setting."""
    unreachable = tmp_path / "unreachable.conf"  # the controller out of reach: a port nothing listens on
    unreachable.write_text(Path(cluster_env["SLURM_CONF"]).read_text() + "SlurmctldPort=1\n")
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=slurm_detached", *SLURM[1:], "seed=0,1", "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}", *FAST]
    proc = launch(args, tmp_path, {**cluster_env, "SLURM_CONF": str(unreachable)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out and "Config error" not in out and "pending" not in out, out[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if "sbatch" in line]
    assert line.startswith("Error: hydra/launcher=slurm_detached: SLURM's controller did not answer sbatch (") and \
        "Unable to contact slurm controller" in line and line.endswith("no job was submitted. Once `sinfo` answers, the "
                                                                       "same command submits the sweep"), line
    again = launch(args, tmp_path, cluster_env)  # as it said
    ids = re.search(r"Submitted 2 job\(s\) to SLURM: (\S+)_", again.stdout + again.stderr)
    assert again.returncode == 0 and ids, (again.stdout + again.stderr)[-3000:]
    subprocess.run(["scancel", ids.group(1)], env=cluster_env, check=True)


def test_jobs_slurm_queues_but_will_never_start_are_cancelled_and_named_not_waited_for(tmp_path, cluster_env):
    """A cluster without EnforcePartLimits queues a job asking more CPUs than any node has (PENDING, reason
    PartitionConfig) for ever: the attached sweep cancels it and says what was asked and what a node has."""
    sweep = tmp_path / "sweep"
    start = time.monotonic()
    proc = launch(["-m", *SLURM, "hydra.launcher.cpus_per_task=99", "seed=0,1", f"hydra.sweep.dir={sweep}", *FAST], tmp_path,
                  cluster_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and time.monotonic() - start < 60, out[-3000:]
    assert "Traceback" not in out
    assert "SLURM will not start it as submitted (PartitionConfig: the job asks for more than a node of its partition" in out
    assert "cpus_per_task=99" in out and f"a node of partition debug has {os.cpu_count()} CPUs" in out
    assert "2 of 2 sweep job(s) failed" in out
    ids = [json.loads((sweep / j / "submitted.json").read_text())["job_id"] for j in ("0", "1")]
    assert _squeue(ids[0].split("_")[0], cluster_env).strip() == ""  # nothing left in the queue
    assert "| failed |" in (sweep / "summary.md").read_text()

    # detached, nothing waits for them: the summary says they are stuck and how to end them
    detached = tmp_path / "detached"
    proc = launch(["-m", "hydra/launcher=slurm_detached", *SLURM[1:], "hydra.launcher.cpus_per_task=99", "seed=0",
                   f"hydra.sweep.dir={detached}", *FAST], tmp_path, cluster_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads((detached / "0" / "submitted.json").read_text())["job_id"]
    try:
        deadline, text = time.monotonic() + 30, ""
        while "| stuck |" not in text and time.monotonic() < deadline:  # once the scheduler has looked at it
            text = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(detached)], env=cluster_env,
                                  capture_output=True, text=True, timeout=60).stdout
        assert "| stuck |" in text, text
        assert f"SLURM will not start job {job} as submitted (PartitionConfig" in text and f"scancel {job}" in text
    finally:
        subprocess.run(["scancel", job], env=cluster_env, timeout=60)


def test_scontrol_states_end_only_ended_jobs_and_a_purged_task_has_ended(monkeypatch):
    """Without accounting the watcher reads scontrol. A task booting its node (CONFIGURING) is not done, a
    FAILED one is, and one the controller no longer lists while its siblings run (MinJobAge past) has ended."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    from launcher.sweep import slurm
    lines = ("JobId=8 ArrayJobId=7 ArrayTaskId=0 JobState=CONFIGURING Reason=None\n"
             "JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode\n"
             "JobId=7 ArrayJobId=7 ArrayTaskId=4-5%2 JobState=PENDING Reason=JobArrayTaskLimit\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=lines, stderr=""))
    watcher = SlurmInfoWatcher(delay_s=1)
    for task in range(6):
        watcher.register_job(f"7_{task}")
    slurm.fill_states_from_scontrol(watcher, every_waiting_job=True)
    states = {task: watcher._info_dict[f"7_{task}"]["State"] for task in range(6)}
    assert states == {0: "RUNNING", 1: "FAILED", 2: "ENDED", 3: "ENDED", 4: "PENDING", 5: "PENDING"}
    assert [watcher.is_done(f"7_{t}", mode="cache") for t in range(6)] == [False, True, True, True, False, False]


def test_a_one_job_sweeps_plain_job_takes_its_state_from_scontrol_and_has_ended_once_purged(monkeypatch):
    from submitit.slurm.slurm import SlurmInfoWatcher

    from launcher.sweep import slurm
    def scontrol(args, **kwargs):
        if args[-1] == "12":
            return subprocess.CompletedProcess(args, 0, stdout="JobId=12 JobName=x JobState=CANCELLED Reason=None\n", stderr="")
        return subprocess.CompletedProcess(args, 1, stdout="", stderr="slurm_load_jobs error: Invalid job id specified")

    monkeypatch.setattr(subprocess, "run", scontrol)
    watcher = SlurmInfoWatcher(delay_s=1)
    for job in ("12", "13"):
        watcher.register_job(job)
    slurm.fill_states_from_scontrol(watcher, every_waiting_job=True)
    assert {j: watcher._info_dict[j]["State"] for j in ("12", "13")} == {"12": "CANCELLED", "13": "ENDED"}
    assert watcher.is_done("12", mode="cache") and watcher.is_done("13", mode="cache")


def test_the_job_command_holds_signals_and_puts_the_submission_dir_on_sys_path_as_python_m_did(tmp_path):
    from launcher.sweep import slurm
    code = slurm._HELD_START.replace("from submitit.core.submission import submitit_main\nsubmitit_main()\n",
                                     "os.kill(os.getpid(), signal.SIGTERM)\nos.kill(os.getpid(), signal.SIGUSR2)\n"
                                     f"print(sys.path[0], os.environ[{slurm.HELD_SIGNAL!r}])\n")
    assert code != slurm._HELD_START
    out = subprocess.run([sys.executable, "-u", "-c", code, "folder"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == [str(tmp_path), str(int(signal.SIGUSR2))], out.stderr


def test_a_run_training_in_a_slurm_job_on_another_node_is_not_trained_over(tmp_path, cluster_env):
    """A run dir whose run.json says running on another host, in a SLURM job that squeue says runs: a second
    run there (a sweep rerun on the login node while the job trains on a compute node) is refused, naming the
    job and how to stop it; once the job has ended, the run goes ahead."""
    run_dir = tmp_path / "run"
    args = ["trainer.max_epochs=1", f"hydra.run.dir={run_dir}", *FAST]
    assert launch(args, tmp_path, cluster_env).returncode == 0
    sleeper = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 300", "--output", str(tmp_path / "sleep.out")],
                             env=cluster_env, capture_output=True, text=True, timeout=60)
    job = sleeper.stdout.strip().split(";")[0]
    assert job, sleeper.stderr
    try:
        deadline = time.monotonic() + 60
        while "RUNNING" not in _squeue(job, cluster_env) and time.monotonic() < deadline:
            time.sleep(0.2)
        record = read_run(run_dir)
        record.update(status="running", host="node-elsewhere", submitit={"cluster": "slurm", "job_id": job})
        (run_dir / "run.json").write_text(json.dumps(record))
        proc = launch([*args, "trainer.max_epochs=2"], tmp_path, cluster_env)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        out = proc.stdout + proc.stderr
        assert f"a run is training in this dir now (SLURM job {job} on node-elsewhere, RUNNING says squeue" in out
        assert f"scancel --signal=TERM {job}:" in out
        assert read_run(run_dir) == record  # nothing touched
    finally:
        subprocess.run(["scancel", job], env=cluster_env, timeout=60)
    deadline = time.monotonic() + 60
    while _squeue(job, cluster_env) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc = launch([*args, "trainer.max_epochs=2"], tmp_path, cluster_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_run(run_dir)["status"] == "completed"


def test_a_rerun_submits_no_job_slurm_holds_already_and_an_attached_one_waits_for_it(tmp_path, cluster_env):
    """Submitting a sweep again while its jobs are queued or running (a second slurm_detached, or the attached
    command rerun after Ctrl-C to wait again) queues no duplicate: detached leaves them be, attached waits for them."""
    sweep = tmp_path / "sweep"
    args = [*SLURM[1:], "hydra.launcher.setup=[sleep 8]", "seed=0,1", f"hydra.sweep.dir={sweep}", *FAST]
    first = launch(["-m", "hydra/launcher=slurm_detached", *args], tmp_path, cluster_env)
    assert first.returncode == 0, first.stderr[-3000:]
    ids = [json.loads((sweep / j / "submitted.json").read_text())["job_id"] for j in ("0", "1")]
    # with more memory asked: the jobs SLURM holds keep what they were submitted with, and the rerun says so
    again = launch(["-m", "hydra/launcher=slurm_detached", *args, "hydra.launcher.mem_gb=2"], tmp_path, cluster_env)
    out = again.stdout + again.stderr
    assert again.returncode == 0 and f"Sweep jobs 0-1 are queued or running in SLURM already ({ids[0]}, {ids[1]}): " \
                                     "not submitted again" in out, out[-3000:]
    assert "hydra.launcher changed since sweep job(s) 0-1 were submitted (mem_gb: 1 -> 2): SLURM keeps their old " \
           f"settings; to apply it, scancel {ids[0]} {ids[1]} (a running one checkpoints) and rerun" in out, out[-3000:]
    assert "Nothing submitted to SLURM" in out
    assert [json.loads((sweep / j / "submitted.json").read_text())["job_id"] for j in ("0", "1")] == ids
    arrays = {p.name.split("_")[0] for p in (sweep / ".submitit").iterdir() if p.name[0].isdigit()}
    assert arrays == {ids[0].split("_")[0]}, arrays  # one submission: the first
    # squeue failing (a busy controller) must not read as "not queued": refused, rather than queued twice
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out on send/recv operation' >&2\n"
                                 "exit 1\n")
    (fake / "squeue").chmod(0o755)
    blind = launch(["-m", "hydra/launcher=slurm_detached", *args], tmp_path,
                   {**cluster_env, "PATH": f"{fake}{os.pathsep}{cluster_env['PATH']}"})
    assert blind.returncode == 2 and blind.stderr.strip().startswith("Config error: cannot ask SLURM whether sweep "
                                                                     f"job(s) 0-1, submitted earlier as SLURM job(s) "
                                                                     f"{ids[0]}, {ids[1]}, are still queued"), blind.stderr

    reordered = [*FAST, *args[: -len(FAST)]]  # the same overrides in another order: the same jobs
    attached = launch(["-m", "hydra/launcher=slurm", *reordered], tmp_path, cluster_env)
    out = attached.stdout + attached.stderr
    assert attached.returncode == 0, out[-3000:]
    assert "not submitted again; waiting for them" in out and "Sweep of 2 job(s): 2 done" in out
    assert "hydra.launcher changed" not in out  # the settings they were submitted with
    assert [read_run(sweep / j)["submitit"]["job_id"] for j in ("0", "1")] == ids
