"""Sweeps through hydra-submitit-launcher: the local parallel launcher, and the SLURM options' defaults."""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
import torch

from conftest import FAST, read_run, run_cli, run_dirs


@pytest.mark.smoke
def test_local_launcher_runs_each_job_in_its_own_process_and_dir_with_its_logs_findable(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=local", "optimizer.lr=0.05,0.2", "trainer.max_epochs=2", *FAST], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = run_dirs(tmp_path / "outputs" / "multirun")
    assert [d.name for d in dirs] == ["0", "1"]
    pids = set()
    for d in dirs:
        record = read_run(d)
        assert record["status"] == "completed"
        job = record["submitit"]
        assert Path(job["stdout"]).is_file() and Path(job["stderr"]).is_file()  # submitit's logs, from the run dir
        pids.add(record["pid"])
    assert len(pids) == 2  # one process per job
    assert (dirs[0].parent / "summary.csv").is_file()


def test_a_local_sweep_says_each_job_as_it_ends_with_its_status_objective_and_run_dir(tmp_path):
    """Between the job list and the sweep's last lines the console said nothing, however long the jobs ran."""
    proc = run_cli(["-m", "hydra/launcher=local", "optimizer.lr=-1,0.1", "trainer.max_epochs=1", *FAST], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    failed, done = run_dirs(tmp_path / "outputs" / "multirun")
    said = {n: next((i for i, line in enumerate(lines) if f"Job {n} [optimizer.lr=" in line), None) for n in (0, 1)}
    assert None not in said.values(), proc.stdout[-3000:]
    listed = max(i for i, line in enumerate(lines) if "\t#1 : " in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("Sweep of 2 job(s)"))
    assert listed < said[0] < end and listed < said[1] < end
    accuracy = read_run(done)["metrics"]["val/accuracy"]
    assert lines[said[1]].endswith(f"Job 1 [optimizer.lr=0.1] done: val/accuracy = {accuracy:.4g}; run dir: {done}")
    assert "Job 0 [optimizer.lr=-1] failed: ConfigError: optimizer (torch.optim.SGD): ValueError: Invalid learning " \
           "rate: -1" in lines[said[0]] and lines[said[0]].endswith(f"; run dir: {failed}")


COUNT_COMPOSITIONS = """
import atexit, os
from hydra._internal.config_loader_impl import ConfigLoaderImpl
composed = []
original = ConfigLoaderImpl.load_sweep_config
def counted(self, master_config, sweep_overrides):
    composed.append(list(sweep_overrides))
    return original(self, master_config, sweep_overrides)
ConfigLoaderImpl.load_sweep_config = counted
atexit.register(lambda: open(os.environ["COMPOSED_LOG"], "a").write(f"{len(composed)}\\n"))
"""


@pytest.mark.parametrize("sweeper, times", [("planned", 2), ("basic", 3)])
def test_a_sweep_composes_each_job_before_it_starts_once_not_every_job_up_front(tmp_path, sweeper, times):
    """Hydra's basic sweeper composes every job before the first one starts (0.1 s a job: 20 s for 200 seeds);
    ours (the default) leaves that to the check of each swept value and to each job as it starts."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(COUNT_COMPOSITIONS)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "COMPOSED_LOG": str(tmp_path / "composed.txt")}
    proc = run_cli(["-m", f"hydra/sweeper={sweeper}", "seed=0,1,2", "trainer.max_epochs=1", *FAST], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [d.name for d in run_dirs(tmp_path / "outputs" / "multirun")] == ["0", "1", "2"]
    assert (tmp_path / "composed.txt").read_text().split() == [str(3 * times)]  # one process: the basic launcher's


def test_a_sweep_lengthening_finished_jobs_with_no_checkpoint_is_refused_before_any_job_runs(tmp_path):
    """A job's run would refuse it (nothing to train on from): the sweep said it would train on, and each job failed."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=local", "seed=0,1", "hooks=none", f"hydra.sweep.dir={sweep}", *FAST]
    assert run_cli([*args, "trainer.max_epochs=1"], tmp_path).returncode == 0
    records = {d.name: (d / "run.json").read_text() for d in run_dirs(sweep)}
    proc = run_cli([*args, "trainer.max_epochs=2"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Config error: trainer.max_epochs: 1 -> 2: this run finished (completed at iteration 8), and saved no " \
        "checkpoint (it ran without a checkpointer hook) to train it on from" in proc.stderr, proc.stderr[-3000:]
    assert "(sweep job 0: " in proc.stderr and "train on from their checkpoints" not in proc.stdout + proc.stderr
    assert {d.name: (d / "run.json").read_text() for d in run_dirs(sweep)} == records


def test_a_local_sweep_rerun_runs_no_job_for_finished_runs_unless_it_lengthens_them(tmp_path):
    """Rerunning a sweep with a value added: the finished jobs start no process (their results are taken from their
    run.json, as their run would return them), and a change their runs cannot take is named; raising
    trainer.max_epochs trains every job on."""
    sweep = tmp_path / "sweep"
    first = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}", *FAST],
                    tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # refused reruns: before any job runs, in one line naming the job
    for bad, says in (("trainer.resume=false", "Config error: trainer.resume=false: run dir"),
                      ("model.hidden=[32]", "holds a run made with another config (model.hidden: [256] -> [32])"),
                      ("+hydra.launcher.foo=1", "Config error: hydra.launcher.foo: not an option of hydra/launcher=local"),
                      # a value no run takes, which their runs would only have listed as not applied (exit 0)
                      ("hooks.jsonl.period=0", "Config error: hooks.jsonl (launcher.hooks.writers.JSONWriter): ValueError")):
        refused = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=1", bad, f"hydra.sweep.dir={sweep}",
                           *FAST], tmp_path)
        assert refused.returncode == 2 and says in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        assert "(sweep job 0: " in refused.stderr or "launcher.foo" in bad
        assert "Sweep of" not in refused.stdout + refused.stderr
    basic = run_cli(["-m", "seed=0,1", "trainer.max_epochs=1", "trainer.resume=false", f"hydra.sweep.dir={sweep}", *FAST],
                    tmp_path)  # Hydra's basic launcher too (it ran each job, refused in turn: the summary said failed)
    assert basic.returncode == 2 and "(sweep job 0: " in basic.stderr and "| failed |" not in (sweep / "summary.md").read_text()
    from launcher.sweep.summary import record_failure

    record_failure(sweep / "0", "ConfigError: refused", ["seed=0"])  # a refused attempt's mark, as a job's run leaves it
    logs = {j: (sweep / str(j) / "train.log").read_text() for j in (0, 1)}
    records = {j: read_run(sweep / str(j)) for j in (0, 1)}

    more = run_cli(["-m", "hydra/launcher=local", "seed=0,1,2", "trainer.max_epochs=1", "hooks.jsonl.period=7",
                    "objective=val/loss", "objective_mode=min", f"hydra.sweep.dir={sweep}", *FAST], tmp_path)
    out = more.stdout + more.stderr
    assert more.returncode == 0, out[-3000:]
    assert "2 of 3 sweep jobs already finished, not run again (their results are in the summary): 0-1" in out
    # another objective is applied to their results: not listed as not applied
    assert "Not applied to 2 finished job(s), as their runs are over: hooks.jsonl.period: 20 -> 7 (jobs 0-1)" in out
    for j in (0, 1):  # no process of theirs ran: nothing logged, nothing recorded
        assert (sweep / str(j) / "train.log").read_text() == logs[j] and read_run(sweep / str(j)) == records[j]
    assert read_run(sweep / "2")["status"] == "completed"
    summary = (sweep / "summary.md").read_text()  # the refused attempt's failure.json is gone: the jobs are done
    assert "Sweep of 3 job(s): 3 done" in out and summary.count("| done |") == 3 and "failed" not in out
    assert not (sweep / "0" / "failure.json").exists()
    misspelt = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=1", "hooks.jsonl.period=7",
                        "objective=val/acc", f"hydra.sweep.dir={sweep}", *FAST], tmp_path)
    assert "objective 'val/acc' is not among the metrics of finished sweep job(s) 0-1" in misspelt.stdout + misspelt.stderr

    longer = run_cli(["-m", "hydra/launcher=local", "seed=0,1,2", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", *FAST],
                     tmp_path)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "already finished, not run again" not in longer.stdout + longer.stderr
    per_epoch = records[0]["iter"]
    for j in (0, 1, 2):
        record = read_run(sweep / str(j))
        assert record["status"] == "completed" and record["iter"] == 2 * per_epoch and record["attempt"] == 2, record


def stopped_after_epoch(run_dir: Path, epoch: int, of: int) -> None:
    """Make the finished run in ``run_dir`` (of ``of`` epochs) look stopped after ``epoch``: no final or later
    checkpoint, ``last`` naming that epoch's, ``run.json`` interrupted."""
    (run_dir / "checkpoints" / "final.pt").unlink()
    for later in range(epoch + 1, of + 1):
        (run_dir / "checkpoints" / f"epoch_{later:04d}.pt").unlink()
    (run_dir / "checkpoints" / "last").write_text(f"epoch_{epoch:04d}.pt\n")
    record = read_run(run_dir)
    record["status"] = "interrupted"
    (run_dir / "run.json").write_text(json.dumps(record))


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_a_rerun_an_unfinished_jobs_run_would_refuse_is_refused_before_any_job_runs(launcher, tmp_path):
    """A job stopped with a checkpoint (interrupted) whose rerun changes what defines its run: refused in one line
    before the sweep starts any job, as its run would refuse it (on SLURM: after waiting for an allocation). Hydra's
    basic launcher ran each job, each was refused in turn, and the summary listed the finished ones failed."""
    sweep = tmp_path / "sweep"
    args = ["-m", f"hydra/launcher={launcher}", "seed=0", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", *FAST,
            "hooks.checkpointer.min_interval_secs=0"]  # the epoch files stopped_after_epoch leaves
    assert run_cli(args, tmp_path).returncode == 0
    stopped = sweep / "0"
    stopped_after_epoch(stopped, 1, of=2)
    before = {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file()}

    proc = run_cli([*args, "optimizer.lr=0.5"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.startswith("Config error: run dir ") and "optimizer.lr: 0.1 -> 0.5" in proc.stderr
    assert "(sweep job 0: " in proc.stderr
    assert "Sweep of" not in proc.stdout + proc.stderr
    assert {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file() and p.name != "multirun.yaml"} == \
        {p: t for p, t in before.items() if p.name != "multirun.yaml"}  # nothing else touched

    proc = run_cli(args, tmp_path)  # the same sweep resumes the stopped job
    assert proc.returncode == 0 and read_run(stopped)["status"] == "completed", proc.stderr[-3000:]


def test_a_sweep_rerun_with_another_number_of_processes_is_refused_before_any_job_runs(tmp_path):
    """trainer.devices is no key the rerun check compares (under torchrun it is not the world size); each job's run
    refused another world size as it came, so the sweep ran, and failed, job after job."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=basic", "seed=0,1", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", *FAST,
            "hooks.checkpointer.min_interval_secs=0"]
    assert run_cli(args, tmp_path).returncode == 0
    stopped_after_epoch(sweep / "1", 1, of=2)
    before = {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file() and p.name != "multirun.yaml"}

    proc = run_cli([*args, "trainer.devices=2"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"Config error: run dir '{sweep / '1'}' holds a run of 1 process(es), and this run "
                                  f"would have 2") and "(sweep job 1: seed=1 " in proc.stderr, proc.stderr
    assert "Sweep of" not in proc.stdout + proc.stderr and "Starting 2 worker processes" not in proc.stdout + proc.stderr
    assert {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file() and p.name != "multirun.yaml"} == before


def test_a_local_job_composed_by_the_sweep_has_the_config_it_would_compose_itself(tmp_path):
    """The sweep's check composes jobs that between them use every swept value; a local job it composed gets that
    config rather than compose it again, and it is the config (and Hydra config) the job would compose."""
    import yaml
    from submitit.core.utils import DelayedSubmission

    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "optimizer.lr=0.1,0.2", "trainer.max_epochs=1",
                    f"hydra.sweep.dir={sweep}", *FAST], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kinds = {}
    for pickled in (sweep / ".submitit").rglob("*_submitted.pkl"):
        job = DelayedSubmission.load(pickled)
        kinds[job.args[2]] = type(job.function).__name__
    # jobs 0 and 3 use every value between them: the sweep composed those two to check them
    assert kinds == {0: "ComposedJob", 1: "LocalLauncher", 2: "LocalLauncher", 3: "ComposedJob"}

    def config_of(job: int) -> tuple:
        cfg = yaml.safe_load((sweep / str(job) / ".hydra" / "config.yaml").read_text())
        hydra = yaml.safe_load((sweep / str(job) / ".hydra" / "hydra.yaml").read_text())["hydra"]
        assert hydra["job"]["num"] == job and hydra["runtime"]["output_dir"] == str(sweep / str(job))
        for key in ("num", "id", "override_dirname"):
            hydra["job"].pop(key)
        hydra["runtime"].pop("output_dir")
        hydra["overrides"].pop("task")
        return cfg.pop("seed"), cfg["optimizer"].pop("lr"), cfg, hydra

    assert [config_of(job)[:2] for job in range(4)] == [(0, 0.1), (0, 0.2), (1, 0.1), (1, 0.2)]
    assert all(config_of(job)[2:] == config_of(1)[2:] for job in (0, 2, 3))


def test_slurm_launcher_defaults_requeue_on_timeout_and_are_overridable(tmp_path):
    proc = run_cli(["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.max_num_timeout=5", "--cfg", "hydra"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert "SlurmLauncher" in text and "partition: gpu" in text and "max_num_timeout: 5" in text
    defaults = run_cli(["hydra/launcher=slurm", "--cfg", "hydra"], tmp_path).stdout
    for line in ("signal_delay_s: 120", "max_num_timeout: 3", "array_parallelism: 64", "timeout_min: 240", "account: null", "qos: null"):
        assert line in defaults


def test_rerunning_a_sweep_skips_finished_jobs_and_resumes_unfinished_ones(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "optimizer.lr=0.05,0.2", "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}", *FAST, "hooks.checkpointer.min_interval_secs=0"]
    assert run_cli(args, tmp_path).returncode == 0
    done, unfinished = sweep / "0", sweep / "1"
    done_final = (done / "checkpoints" / "final.pt").stat().st_mtime_ns
    want = read_run(unfinished)["metrics"]["val/accuracy"]
    stopped_after_epoch(unfinished, 3, of=4)  # job 1 as if preempted after epoch 3

    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (done / "checkpoints" / "final.pt").stat().st_mtime_ns == done_final  # not trained again
    assert "already finished" in (done / "train.log").read_text()
    log = (unfinished / "train.log").read_text()
    assert "Resumed from" in log and "epoch_0003.pt" in log
    assert read_run(unfinished)["status"] == "completed"
    assert read_run(unfinished)["metrics"]["val/accuracy"] == want  # as if never interrupted


def test_a_sweep_with_other_values_is_refused_in_a_sweep_dir_holding_another_sweep(tmp_path):
    """Jobs are numbered by their place in the sweep: another value for job 0, or a value added in front
    (which shifts every later job), would give a job the dir of another sweep's job. Refused before any
    job runs, naming the job and both values; the sweep it holds is left as it was, and resumes."""
    sweep = tmp_path / "sweep"
    base = ["-m", f"hydra.sweep.dir={sweep}", "trainer.max_epochs=1", *FAST]
    assert run_cli([*base, "optimizer.lr=0.05,0.1"], tmp_path).returncode == 0
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}
    for values, was, now in (("optimizer.lr=0.07,0.1", "optimizer.lr=0.05", "optimizer.lr=0.07"),
                             ("optimizer.lr=0.05,0.1 seed=0,1", "optimizer.lr=0.05", "optimizer.lr=0.05 seed=0")):
        proc = run_cli([*base, *values.split()], tmp_path)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert f"holds another sweep: its job 0 ran [{was}], this sweep's job 0 is [{now}]" in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        assert {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()} == before

    again = run_cli([*base, "optimizer.lr=0.05,0.1"], tmp_path)  # the sweep it holds: nothing to train, all done
    assert again.returncode == 0 and "Sweep of 2 job(s): 2 done" in again.stdout
    assert "| failed |" not in (sweep / "summary.md").read_text()


def _summary_jobs(sweep: Path) -> list:
    rows = [line.split(" | ") for line in (sweep / "summary.md").read_text().splitlines() if line.startswith("| ") and "`" in line]
    return [(int(r[0].strip("| ")), r[1].split()[-1].strip("`")) for r in rows]


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_a_subdir_named_by_values_takes_a_value_added_in_front_and_the_summary_numbers_jobs_as_this_sweep(launcher, tmp_path):
    """With a ``hydra.sweep.subdir`` named by the swept values, a value added in front is a new dir, not another
    sweep's; the finished jobs, not run again, kept their old numbers in the summary (two job 0s)."""
    sweep = tmp_path / "sweep"
    base = ["-m", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=lr${optimizer.lr}", "trainer.max_epochs=1", *FAST]
    assert run_cli([*base, "hydra/launcher=local", "optimizer.lr=0.1,0.2"], tmp_path).returncode == 0
    proc = run_cli([*base, f"hydra/launcher={launcher}", "optimizer.lr=0.05,0.1,0.2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sweep of 3 job(s): 3 done" in proc.stdout
    want = [(0, "optimizer.lr=0.05"), (1, "optimizer.lr=0.1"), (2, "optimizer.lr=0.2")]
    assert _summary_jobs(sweep) == want
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and _summary_jobs(sweep) == want, proc.stderr[-2000:]


@pytest.mark.parametrize("subdir", [None, "lr${optimizer.lr}"])
def test_runs_an_earlier_sweep_left_in_the_sweep_dir_are_named_apart_not_counted_as_this_sweeps_jobs(subdir, tmp_path):
    """A value removed from a sweep left its run's dir: the summary listed it as one of the sweep's jobs (job 2 of a
    sweep of 2; with a subdir named by the values, a second job 0), counted it in the end line and could mark it best."""
    sweep = tmp_path / "sweep"
    base = ["-m", f"hydra.sweep.dir={sweep}", "trainer.max_epochs=1", *FAST] + ([f"hydra.sweep.subdir={subdir}"] if subdir else [])
    assert run_cli([*base, "optimizer.lr=0.001,0.01,0.1"] if subdir else [*base, "optimizer.lr=0.01,0.1,0.001"],
                   tmp_path).returncode == 0
    proc = run_cli([*base, "hydra/launcher=local", "optimizer.lr=0.01,0.1"], tmp_path)
    assert proc.returncode == 0 and "Sweep of 2 job(s): 2 done" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "optimizer.lr=0.001" not in proc.stdout.splitlines()[-1]  # never the best: not one of this sweep's jobs
    want = [(0, "optimizer.lr=0.01"), (1, "optimizer.lr=0.1")]
    left = "lr0.001" if subdir else "2"
    for _ in range(2):  # as the sweep wrote it, and as python -m launcher.sweep.summary writes it again
        assert _summary_jobs(sweep) == want
        assert f"Not in this sweep (runs an earlier sweep in this dir left, not counted above): {left}" in \
            (sweep / "summary.md").read_text()
        assert "optimizer.lr=0.001" not in (sweep / "summary.csv").read_text()
        assert subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], cwd=tmp_path).returncode == 0
    assert read_run(sweep / left)["status"] == "completed"  # left as it was


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_a_refused_sweep_does_not_take_the_jobs_of_the_sweep_it_was_refused_in(launcher, tmp_path):
    """A sweep refused before any job ran (another model for a finished run) must leave the dir's sweep as it was: had
    it marked the runs it looked at as its own, the summary would have hidden the other job as an earlier sweep's."""
    sweep = tmp_path / "sweep"
    base = ["-m", f"hydra.sweep.dir={sweep}", "trainer.max_epochs=1", *FAST]
    assert run_cli([*base, "optimizer.lr=0.1,0.01"], tmp_path).returncode == 0
    refused = run_cli([*base, f"hydra/launcher={launcher}", "optimizer.lr=0.1", "model.hidden=[32]"], tmp_path)
    assert refused.returncode == 2 and "another config" in refused.stderr, refused.stderr[-2000:]
    assert subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], cwd=tmp_path).returncode == 0
    assert _summary_jobs(sweep) == [(0, "optimizer.lr=0.1"), (1, "optimizer.lr=0.01")]
    assert "Not in this sweep" not in (sweep / "summary.md").read_text()


def test_a_swept_value_refused_at_the_first_validation_is_mended_in_the_same_sweep_dir(tmp_path):
    """A job that stopped with a checkpoint for its swept value (a monitor typo, found at the first validation) was
    told to mend it and rerun; the mended sweep was refused as another sweep, and the checkpoint never used. Only
    the refused value may change in place: another (a shorter length) would train the checkpoint on under the
    new value's name."""
    base = ["-m", "hydra/launcher=basic", "hooks=[default,early_stopping]", *FAST]
    sweep = tmp_path / "sweep"
    proc = run_cli([*base, f"hydra.sweep.dir={sweep}", "trainer.max_epochs=3,4", "hooks.early_stopping.monitor=val/los"],
                   tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "did you mean hooks.early_stopping.monitor=val/loss?" in out, out[-3000:]
    assert "it stopped with a checkpoint: mend the config and run the same command to train it on" in out
    assert out.count("it stopped with a checkpoint") == 2
    assert (sweep / "1" / "checkpoints" / "iter_0000008.pt").is_file()
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}
    proc = run_cli([*base, f"hydra.sweep.dir={sweep}", "trainer.max_epochs=3,2", "hooks.early_stopping.monitor=val/loss"],
                   tmp_path)
    assert proc.returncode == 2 and "holds another sweep: its job 1 ran [trainer.max_epochs=4" in proc.stderr, proc.stderr[-3000:]
    assert {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()} == before
    mended = ["trainer.max_epochs=3,4", "hooks.early_stopping.monitor=val/loss"]
    proc = run_cli([*base, f"hydra.sweep.dir={sweep}", *mended], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Sweep of 2 job(s): 2 done" in out, out[-3000:]
    assert "Resumed from" in (sweep / "1" / "train.log").read_text()
    ref = tmp_path / "ref"
    assert run_cli([*base, f"hydra.sweep.dir={ref}", *mended], tmp_path).returncode == 0
    got, want = (torch.load(d / "1" / "checkpoints" / "final.pt", weights_only=False) for d in (sweep, ref))
    assert all(torch.equal(got["model"][k], v) for k, v in want["model"].items())
    assert got["hooks"]["early_stopping"] == want["hooks"]["early_stopping"]


@contextlib.contextmanager
def tensorboard_server(logdir: Path, timeout: float = 60):
    """A real ``tensorboard --logdir`` on a port of the system's choosing; yields ``call(path, body=None)``, which
    returns the JSON of a GET (a POST with ``body``) once ``ready(answer)`` holds, polling until ``timeout``."""
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                             "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()  # its stderr, then "" once it ends
    threading.Thread(target=lambda: [*map(lines.put, proc.stderr), lines.put("")], daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        said, url = [], None
        while url is None:
            try:
                said.append(lines.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                said.append("")
            if not said[-1]:
                pytest.fail("tensorboard did not start: " + "".join(said)[-2000:])
            found = re.search(r"TensorBoard \S+ at (http://\S+?)/? ", said[-1])
            url = found and found.group(1)

        def call(path: str, body: Optional[dict] = None, ready=lambda answer: True):
            while True:
                data = None if body is None else json.dumps(body).encode()
                request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as response:
                    answer = json.loads(response.read())
                if ready(answer) or time.monotonic() > deadline:  # the server loads the event files after it starts
                    return answer
                time.sleep(0.2)

        yield call
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_tensorboard_lists_one_run_per_training_with_its_hparams_and_its_curves_first(tmp_path):
    """Read back by a real TensorBoard over HTTP. add_hparams made a second run per training (<run>/hparams), turned
    bools into numbers, and its single dots at step 0 (an hparam/ group) with data_time opened the Scalars tab,
    which opens the first two groups by name, while train/ and val/ sat collapsed below."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", "optimizer.lr=0.05,0.2", "trainer.max_epochs=2", "data.shuffle=false", f"hydra.sweep.dir={sweep}",
                    *FAST], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    metrics = {job: read_run(sweep / job)["metrics"] for job in ("0", "1")}
    for job, lr in (("0", 0.05), ("1", 0.2)):
        acc = EventAccumulator(str(sweep / job))  # the run's own dir: its scalars and its HParams entry
        acc.Reload()
        data = plugin_data_pb2.HParamsPluginData.FromString(acc.PluginTagToContent("hparams")["_hparams_/session_start_info"])
        hp = {k: (v.WhichOneof("kind"), getattr(v, v.WhichOneof("kind"))) for k, v in data.session_start_info.hparams.items()}
        assert hp["optimizer.lr"] == ("number_value", lr) and hp["trainer.max_epochs"] == ("number_value", 2)
        assert hp["data.shuffle"] == ("bool_value", False) and hp["data"] == ("string_value", "synthetic")
        assert abs(acc.Scalars("val/accuracy")[-1].value - metrics[job]["val/accuracy"]) < 1e-6
    assert not list(sweep.rglob("hparams"))

    with tensorboard_server(sweep) as call:
        groups = call("/data/plugin/hparams/session_groups", {
            "experimentName": "", "startIndex": 0, "sliceSize": 100,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]},
            ready=lambda answer: answer.get("totalSize") == 2 and all(g["metricValues"] for g in answer["sessionGroups"]))
        assert call("/data/runs") == ["0", "1"]  # one run per training
        tags = call("/data/plugin/scalars/tags")
        experiment = call("/data/plugin/hparams/experiment", {"experimentName": ""})

    for job in ("0", "1"):
        assert {"train/loss", "train/lr", "val/loss", "val/accuracy", "wallclock/iter_time", "wallclock/data_time"} <= set(tags[job])
        assert {tag.split("/")[0] for tag in tags[job]} == {"train", "val", "wallclock"}  # the groups, in this order
    types = {h["name"]: h["type"] for h in experiment["hparamInfos"]}
    assert types["data.batch_size"] == types["trainer.max_epochs"] == "DATA_TYPE_FLOAT64"  # TensorBoard's one number type
    assert types["data.shuffle"] == "DATA_TYPE_BOOL" and types["data"] == "DATA_TYPE_STRING"
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} == {"train/loss", "val/loss", "val/accuracy"}
    by_run = {g["name"]: g for g in groups["sessionGroups"]}
    assert sorted(by_run) == ["0", "1"]
    for job, lr in (("0", 0.05), ("1", 0.2)):
        hp = by_run[job]["hparams"]
        assert hp["data.batch_size"] == 32 and hp["trainer.max_epochs"] == 2 and hp["optimizer.lr"] == lr
        assert not isinstance(hp["data.batch_size"], (bool, str)) and hp["data.shuffle"] is False and hp["data"] == "synthetic"
        values = {m["name"]["tag"]: m["value"] for m in by_run[job]["metricValues"]}
        assert values["val/accuracy"] == pytest.approx(metrics[job]["val/accuracy"], abs=1e-6)


def test_a_run_trained_on_has_one_hparams_entry_with_its_new_config_and_metrics(tmp_path):
    """Lengthened (max_epochs 1 -> 2), the run kept its first attempt's hparams file beside the new one: TensorBoard's
    HParams tab showed trainer.max_epochs 1 beside the longer run's metrics. The ``hparams/`` dir earlier versions
    wrote goes too."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = tmp_path / "run"
    for epochs in (1, 2):
        proc = run_cli([f"trainer.max_epochs={epochs}", "hydra.run.dir=run", *FAST], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        if epochs == 1:  # as an earlier version left it: the entry in a dir of its own
            (first,) = run.glob("events.out.tfevents.*.hparams")
            (run / "hparams").mkdir()
            first.rename(run / "hparams" / first.name.removesuffix(".hparams"))
    assert len(list(run.glob("events.out.tfevents.*.hparams"))) == 1 and not (run / "hparams").exists()
    acc = EventAccumulator(str(run))
    acc.Reload()
    data = plugin_data_pb2.HParamsPluginData.FromString(acc.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    assert data.session_start_info.hparams["trainer.max_epochs"].number_value == 2
    assert abs(acc.Scalars("val/accuracy")[-1].value - read_run(run)["metrics"]["val/accuracy"]) < 1e-6


def test_local_launcher_runs_at_most_max_parallel_jobs_at_once(tmp_path):
    """3 jobs, max_parallel=2: the third starts only once one of the first two has ended. Each job trains
    for about 3 s (a paced hook), longer than a job process takes to start, so jobs started together
    would overlap."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.max_parallel=2", "seed=0,1,2", "trainer.max_epochs=1",
                    "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.3", *FAST], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [read_run(d) for d in run_dirs(tmp_path / "outputs" / "multirun")]
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs)
    # the sweep's command, which reruns it: not submitit's bootstrap that started the job's process
    assert runs[0]["command"][1:5] == ["-m", "launcher", "-m", "hydra/launcher=local"] and "seed=0,1,2" in runs[0]["command"]
    start = [datetime.datetime.fromisoformat(r["start_time"]) for r in runs]
    end = [datetime.datetime.fromisoformat(r["end_time"]) for r in runs]
    assert start[2] >= min(end[0], end[1])
    assert start[1] < end[0] and start[0] < end[1]  # the first two ran side by side
    out = proc.stdout + proc.stderr
    assert out.count("Submitit 'local' sweep output dir") == 1, out[-3000:]  # the plugin says it for each job it launches
    (sweep,) = {d.parent for d in run_dirs(tmp_path / "outputs" / "multirun")}
    assert sorted(p.name for p in (sweep / ".submitit").iterdir() if not any(p.iterdir())) == []  # no empty "%j"

    bad = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.max_parallel=0", "seed=0,1", *FAST], tmp_path)
    assert bad.returncode == 2 and "hydra.launcher.max_parallel=0: use a whole number >= 1" in bad.stderr
    assert bad.stderr.startswith("Config error: hydra.launcher.max_parallel=0") and "full_key" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "pending" not in bad.stdout  # no sweep report of jobs never run


def test_each_local_job_takes_its_share_of_the_cores_not_every_core(tmp_path, monkeypatch):
    """Jobs side by side that each took torch's default (every core) spin-waited for each other's cores: two
    short jobs on 2 cores trained 20-90x slower than one alone. Each job now takes cores // max_parallel
    threads (``hydra.launcher.cpus_per_task``), forked from the server or started afresh; OMP_NUM_THREADS,
    where the user sets it, wins. ``run.json`` records each run's thread count."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    cases = [(["hydra.launcher.max_parallel=2"], {}, max(1, cores // 2)),
             (["hydra.launcher.max_parallel=1", "hydra.launcher.fork_server=false"], {}, cores),
             (["hydra.launcher.max_parallel=1", "hydra.launcher.cpus_per_task=1"], {}, 1),
             (["hydra.launcher.max_parallel=1"], {"OMP_NUM_THREADS": "1"}, 1)]
    for n, (launcher, env, threads) in enumerate(cases):
        seeds = "seed=0,1" if n == 0 else "seed=0"  # two side by side; one at a time needs no second
        proc = run_cli(["-m", "hydra/launcher=local", *launcher, seeds, "trainer.max_epochs=1", *FAST,
                        f"hydra.sweep.dir={tmp_path / str(n)}"], tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert {read_run(d)["threads"] for d in run_dirs(tmp_path / str(n))} == {threads}, launcher

    for value in ("0", "true"):  # as typed: not Python's True
        bad = run_cli(["-m", "hydra/launcher=local", f"hydra.launcher.cpus_per_task={value}", "seed=0,1", *FAST], tmp_path)
        assert bad.returncode == 2 and bad.stderr.startswith(f"Config error: hydra.launcher.cpus_per_task={value}: use a "
                                                             f"whole number >= 1"), bad.stderr
    single = run_cli(["trainer.max_epochs=1", *FAST, f"hydra.run.dir={tmp_path / 'single'}"], tmp_path)
    assert single.returncode == 0 and read_run(tmp_path / "single")["threads"] == torch_default_threads()


def torch_default_threads() -> int:
    return int(subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                              capture_output=True, text=True, check=True).stdout)


def test_failed_jobs_of_a_parallel_sweep_are_each_named_at_the_end_and_lose_no_other_result(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=local", "optimizer.lr=-1,0.1,-2", "trainer.max_epochs=1", *FAST], tmp_path)
    assert proc.returncode != 0
    report = proc.stderr[proc.stderr.index("2 of 3 sweep job(s) failed"):]  # the last screen of the sweep
    for job, lr in ((0, "-1"), (2, "-2")):
        assert f"/{job}/train.log" in report
        # what tells the job from the others: the settings they share (trainer.max_epochs=1 ...) are in the summary
        assert f"job {job} [optimizer.lr={lr}]: ConfigError: optimizer (torch.optim.SGD): ValueError: Invalid learning " \
               f"rate: {lr}" in report
    assert "completed successfully" not in report  # submitit's words for the job process, not for the run
    assert "job 1 [" not in report
    # and the counts and the best job, as a sweep without failures ends (only in summary.md, it was)
    assert proc.stdout.strip().splitlines()[-1].startswith("Sweep of 3 job(s): 1 done, 2 failed; best: job 1 [optimizer.lr=0.1] "), \
        proc.stdout[-2000:]
    good = read_run(run_dirs(tmp_path / "outputs" / "multirun")[1])
    assert good["status"] == "completed" and "val/accuracy" in good["metrics"]
    # the report alone says it: not Hydra's re-raise of the first failure before it, nor its HYDRA_FULL_ERROR hint
    assert proc.returncode == 1 and proc.stderr.count("Invalid learning rate: -1") == 1, proc.stderr[-3000:]

    # the sweep dir moved (mv, rsync): the jobs' submitit logs, recorded by their absolute paths, are found in it
    import shutil

    from launcher.sweep.summary import jobs

    moved = tmp_path / "moved sweep"
    shutil.move(str(run_dirs(tmp_path / "outputs" / "multirun")[0].parent), moved)
    for row in jobs(moved):
        assert row["stderr"].startswith(str(moved / ".submitit")) and Path(row["stderr"]).is_file(), row
    assert "Error executing job" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c", "timeout"])
def test_a_stopped_local_sweep_stops_its_jobs_with_checkpoints_and_a_rerun_finishes_them(how, tmp_path):
    """``timeout``, a CI step or ``kill`` sends SIGTERM to the sweep process alone: its jobs must stop too.
    Ctrl-C sends SIGINT to the terminal's whole process group: the jobs must still get to write their checkpoints.
    GNU ``timeout -s TERM`` signals the sweep, then its own process group: the same stop twice at once, which
    was taken for a second one (stop waiting), leaving the summary "running" and no word on resuming."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=4",
            f"hydra.sweep.dir={sweep}", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, as a shell gives a command it runs
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all((sweep / str(j) / "checkpoints" / "last").is_file() for j in (0, 1)):
        time.sleep(0.1)  # both jobs are training: each has written its first checkpoint
    seen = ""
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    elif how == "timeout":  # the second copy as the first is being handled, as on a loaded machine
        proc.send_signal(signal.SIGTERM)
        while "stopping the sweep's" not in seen and proc.poll() is None:
            seen += proc.stdout.readline()
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=180)
    out = seen + out
    assert proc.returncode == 75, out[-3000:]
    assert "Traceback" not in out
    assert f"Run the same command with hydra.sweep.dir={sweep} to resume it" in out
    runs = {d.name: read_run(d) for d in run_dirs(sweep)}
    assert [r["status"] for r in runs.values()] == ["interrupted", "interrupted"]
    for job in runs:  # no job process left behind: each wrote where it stopped
        stopped = runs[job]["iter"]
        assert (sweep / job / "checkpoints" / f"iter_{stopped:07d}.pt").is_file()
    assert "| interrupted |" in (sweep / "summary.md").read_text() and "| running |" not in (sweep / "summary.md").read_text()

    rerun = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for d in run_dirs(sweep):
        record = read_run(d)
        assert record["status"] == "completed" and record["attempt"] == 2 and record["resumed_from"]
    # the sweep's console says which jobs go on (only their logs said it)
    assert f"2 sweep job(s) train on from their checkpoints: job 0 (iter_{runs['0']['iter']:07d}.pt), job 1 " \
        f"(iter_{runs['1']['iter']:07d}.pt)" in rerun.stdout + rerun.stderr, (rerun.stdout + rerun.stderr)[-3000:]


def _processes_of(root: Path) -> list:
    """The live processes (not zombies) other than this one whose command line, environment or working dir names
    ``root``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(entry) == os.getpid() or Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            said = Path(f"/proc/{entry}/cmdline").read_bytes() + Path(f"/proc/{entry}/environ").read_bytes()
            if str(root).encode() in said or os.readlink(f"/proc/{entry}/cwd").startswith(str(root)):
                found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


@pytest.mark.parametrize("fork_server", ["true", "false"])
def test_a_local_sweep_killed_with_its_process_group_stops_its_jobs_with_checkpoints_and_a_rerun_finishes_them(
        fork_server, tmp_path):
    """SIGKILL to the sweep's whole process group (a terminal closed by force, a CI job cancelled) left its jobs,
    its fork server and submitit's controllers running, in sessions of their own, training on for minutes. The
    jobs stop as for a SIGTERM to the sweep: a checkpoint, exit status 75; rerunning the sweep resumes them."""
    import signal
    import time

    env = {**_paced_env(), "SWEEP_UNDER_TEST": str(tmp_path)}  # inherited by each process of the sweep
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", f"hydra.launcher.fork_server={fork_server}",
            "seed=0,1", "trainer.max_epochs=12", f"hydra.sweep.dir={sweep}", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace",
            "+hooks.pace.seconds=0.1", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group, as a shell gives a command it runs
    _wait_for(lambda: all((sweep / str(j) / "checkpoints" / "last").is_file() for j in (0, 1)), proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 120
    while _processes_of(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in _processes_of(tmp_path)}
    assert not left, left
    runs = {d.name: read_run(d) for d in run_dirs(sweep)}
    assert [(r["status"], r["exit_code"]) for r in runs.values()] == [("interrupted", 75)] * 2, runs
    for job, record in runs.items():  # each wrote where it stopped, short of its end
        assert record["iter"] < 120 and (sweep / job / "checkpoints" / f"iter_{record['iter']:07d}.pt").is_file()

    rerun = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for job, record in runs.items():
        again = read_run(sweep / job)
        assert again["status"] == "completed" and again["resumed_from"].endswith(f"iter_{record['iter']:07d}.pt"), again


def test_run_time_sums_the_attempts_and_leaves_out_the_gaps_between_them(tmp_path, monkeypatch):
    """The summary's seconds: attempts of 10 s and 5 s an hour apart, a killed one between them, make 15 s."""
    from launcher.runs import rundir
    from launcher.sweep.summary import jobs

    clock = [datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.timezone.utc)]

    class FakeDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return clock[0]

    monkeypatch.setattr(rundir.datetime, "datetime", FakeDatetime)
    job = tmp_path / "0"
    job.mkdir()

    def attempt(seconds, ends=True):
        record = rundir.RunRecord(job, seed=0)
        record.start()
        clock[0] += datetime.timedelta(seconds=seconds)
        if ends:
            record.finish("interrupted", 75, {})
        clock[0] += datetime.timedelta(hours=1)  # nothing runs between attempts

    attempt(10)
    attempt(7, ends=False)  # killed -9: it never recorded its end
    assert jobs(tmp_path)[0]["seconds"] is None  # still "running" as far as run.json knows
    attempt(5)
    (row,) = jobs(tmp_path)
    assert row["seconds"] == 15.0 and read_run(job)["attempt"] == 3


def test_an_attempt_marked_failed_after_it_was_killed_keeps_its_run_time(tmp_path):
    """The local launcher marks a job killed outright (kill -9, the OOM killer) failed: its time up to its last
    sign of life stays in the run's total, as it does when the next attempt finds the record still running."""
    import time

    from launcher.runs import rundir
    job = tmp_path / "0"
    job.mkdir()
    start = datetime.datetime.now().astimezone() - datetime.timedelta(seconds=30)
    (job / "run.json").write_text(json.dumps({"status": "running", "seconds": 4.0, "start_time": start.isoformat()}))
    (job / "metrics.jsonl").write_text("{}\n")
    os.utime(job / "metrics.jsonl", (time.time() - 10, time.time() - 10))  # its last row, 20 s into the attempt
    rundir.mark_failed(job, "JobDied: killed by SIGKILL")
    record = read_run(job)
    assert record["status"] == "failed" and 23.5 < record["seconds"] < 24.5


def test_ctrl_z_stops_a_local_sweeps_jobs_with_it_and_fg_lets_them_finish(tmp_path):
    """The jobs run in sessions of their own (so that Ctrl-C reaches them once, through the sweep); the
    terminal's SIGTSTP reaches the sweep alone, which must stop them with it, and continue them with it."""
    import signal
    import time

    from launcher.sweep.local import _stat

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=3",
            f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", "hooks.jsonl.flush_secs=0",
            "hooks.jsonl.period=1", *FAST]
    # a process group of its own in this session, as a shell's job (a new session's group would be orphaned,
    # and the kernel discards a SIGTSTP's stop there)
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            process_group=0)
    metrics = [sweep / str(j) / "metrics.jsonl" for j in (0, 1)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(m.is_file() and m.stat().st_size for m in metrics):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.1)  # both jobs are training
    os.killpg(proc.pid, signal.SIGTSTP)

    def states():
        return {pid: (_stat(pid) or ["gone"])[0] for pid in [proc.pid, *_tree(proc.pid)]}

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and set(states().values()) - {"T"}:
        time.sleep(0.05)
    assert set(states().values()) == {"T"}, states()
    sizes = [m.stat().st_size for m in metrics]
    time.sleep(1.0)
    assert [m.stat().st_size for m in metrics] == sizes, "the jobs trained on while the sweep was stopped"
    os.killpg(proc.pid, signal.SIGCONT)  # fg
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert [read_run(d)["status"] for d in run_dirs(sweep)] == ["completed", "completed"]


def _tree(pid: int) -> list:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(c) for c in children] + [d for c in children for d in _tree(int(c))]


def test_the_summary_shows_the_objective_it_ranks_by_when_it_is_neither_a_train_nor_a_val_metric(tmp_path):
    from launcher.sweep.summary import write_summary

    for job, value in enumerate([0.25, 0.75]):
        (tmp_path / str(job)).mkdir()
        (tmp_path / str(job) / "run.json").write_text(json.dumps(
            {"status": "completed", "overrides": [f"seed={job}"], "seconds": 1.0,
             "metrics": {"test/acc": value, "val/loss": 1.0 - value, "custom/other": 3.0, "time": 0.1, "lr": 0.01}}))
    write_summary(tmp_path, "test/acc", "max")
    header, _, *lines = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("|")]
    # a hook's own metric is a final metric too; the last step's time and lr are not results
    assert header == "| job | overrides | status | seconds | test/acc | val/loss | custom/other | best |"
    assert lines[1] == "| 1 | `seed=1` | done | 1.0 | 0.75 | 0.25 | 3 | **best** |"
    assert (tmp_path / "summary.csv").read_text().splitlines()[0] == "job,overrides,status,seconds,test/acc,val/loss,custom/other,best"
    write_summary(tmp_path, "lr", "min")  # ranked by a metric the table leaves out: it is shown
    assert (tmp_path / "summary.csv").read_text().splitlines()[0] == "job,overrides,status,seconds,lr,val/loss,custom/other,test/acc,best"


def test_a_job_whose_objective_is_nan_is_never_the_best(tmp_path):
    """max() cannot compare a NaN: it returned the diverged job as best when it came first."""
    from launcher.sweep.summary import write_summary

    for job, value in enumerate([float("nan"), 0.5, 0.7, float("nan")]):
        (tmp_path / str(job)).mkdir()
        (tmp_path / str(job) / "run.json").write_text(json.dumps(
            {"status": "completed", "overrides": [f"seed={job}"], "seconds": 1.0, "metrics": {"val/accuracy": value}}))
    rows = write_summary(tmp_path, "val/accuracy", "max")
    assert [r["job"] for r in rows] == [0, 1, 2, 3]
    assert "best: job 2 (`seed=2`)" in (tmp_path / "summary.md").read_text()
    for job in (1, 2):
        (tmp_path / str(job) / "run.json").unlink()
    (tmp_path / "1").rmdir(), (tmp_path / "2").rmdir()
    write_summary(tmp_path, "val/accuracy", "max")
    assert "best: none (no finished job has a number for val/accuracy)" in (tmp_path / "summary.md").read_text()


def _paced_env() -> dict:
    """The environment for a sweep whose jobs use tests/pace.py's hook."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def _wait_for(condition, proc, seconds=120.0):
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_local_sweep_job_killed_without_a_result_is_one_failed_job_and_the_others_still_run(tmp_path):
    """SIGKILL (kill -9, the OOM killer) leaves no result: submitit raised for it, which ended the sweep
    there (job 2 never ran), lost the group's other results, and left job 0 "running" in the summary."""
    import signal

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "hydra.launcher.max_parallel=2", "seed=0,1,2",
            "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.1", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_paced_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def training():
        try:
            return read_run(sweep / "0")["status"] == "running"
        except (OSError, ValueError):
            return False

    _wait_for(training, proc)
    os.kill(read_run(sweep / "0")["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in out + err and "UncompletedJobError" not in out + err
    report = err[err.index("1 of 3 sweep job(s) failed"):]  # the last screen of the sweep
    assert "job 0 [seed=0]: " in report and "killed by SIGKILL (signal 9)" in report
    assert f"log: {sweep}/0/train.log" in report and "job 1 [" not in report
    assert [read_run(sweep / j)["status"] for j in ("0", "1", "2")] == ["failed", "completed", "completed"]
    assert "killed by SIGKILL (signal 9)" in read_run(sweep / "0")["error"]
    md = (sweep / "summary.md").read_text()
    rows = {line.split(" | ")[0]: line.split(" | ")[2] for line in md.splitlines() if line.startswith("| ") and "`" in line}
    assert rows == {"| 0": "failed", "| 1": "done", "| 2": "done"}


@pytest.mark.parametrize("kill_job_1", [False, True])
def test_a_local_sweep_whose_job_was_stopped_alone_exits_75_unless_another_failed(kill_job_1, tmp_path):
    """kill -TERM to one job: it checkpoints and stops (interrupted, resumable); the sweep exited 1 as for a
    failure. It exits 75, rerun to resume, unless a job failed too (SIGKILL to job 1: exit 1)."""
    import signal

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "hydra.launcher.max_parallel=2", "seed=0,1",
            "trainer.max_epochs=8", f"hydra.sweep.dir={sweep}", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.1", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_paced_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def training(job):
        try:
            return (sweep / job / "checkpoints" / "last").is_file() and read_run(sweep / job)["status"] == "running"
        except (OSError, ValueError):
            return False

    _wait_for(lambda: training("0") and (training("1") or not kill_job_1), proc)
    os.kill(read_run(sweep / "0")["pid"], signal.SIGTERM)
    if kill_job_1:
        os.kill(read_run(sweep / "1")["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == (1 if kill_job_1 else 75), err[-3000:]
    assert "Traceback" not in out + err and "was interrupted: stopped at iteration" in out + err, err[-3000:]
    assert [read_run(sweep / j)["status"] for j in ("0", "1")] == ["interrupted", "failed" if kill_job_1 else "completed"]


def test_jobs_of_a_stopped_local_sweep_that_never_started_show_as_pending_and_a_rerun_runs_them(tmp_path):
    """One job at a time, stopped during the first: the other two appeared nowhere (the summary said
    "Sweep of 1 job(s)"), though the rerun would run them."""
    import signal

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "hydra.launcher.max_parallel=1", "seed=0,1,2",
            "trainer.max_epochs=4", f"hydra.sweep.dir={sweep}", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_paced_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: (sweep / "0" / "checkpoints" / "last").is_file(), proc)  # job 0 is training
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 75, out[-3000:]
    assert "Sweep of 3 job(s): 1 interrupted, 2 pending" in out
    md = (sweep / "summary.md").read_text()
    for job in (1, 2):
        assert f"| {job} | `seed={job} trainer.max_epochs=4 " in md
        assert not (sweep / str(job) / "run.json").exists()
    assert md.count("| pending |") == 2

    rerun = subprocess.run(args, cwd=tmp_path, env=_paced_env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Sweep of 3 job(s): 3 done" in rerun.stdout
    assert [read_run(sweep / j)["status"] for j in ("0", "1", "2")] == ["completed"] * 3


def test_a_local_sweep_starts_the_next_job_as_soon_as_one_ends(tmp_path):
    """max_parallel=2, job 0 slow (~15 s of training), job 1 quick: job 2 takes job 1's place at once
    instead of waiting for job 0 (jobs went in fixed groups of max_parallel)."""
    proc = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.max_parallel=2", "trainer.max_epochs=1",
                    "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=1.5,0.01,0.01", *FAST], tmp_path, env=_paced_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [read_run(d) for d in run_dirs(tmp_path / "outputs" / "multirun")]
    start = [datetime.datetime.fromisoformat(r["start_time"]) for r in runs]
    end = [datetime.datetime.fromisoformat(r["end_time"]) for r in runs]
    assert end[1] <= start[2] < end[0]


def test_a_local_sweep_stopped_while_its_job_starts_up_still_stops_the_job(tmp_path):
    """A job ignores SIGTERM between submitit's start (whose handler passes it by) and its trainer's taking
    over; the sweep asks again until the job ends, so the job stops with a checkpoint rather than training on
    to its end (or on with no parent after a second Ctrl-C)."""
    import signal
    import time

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "hydra/launcher=local", "seed=0", "trainer.max_epochs=100",
            f"hydra.sweep.dir={sweep}", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_paced_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: (sweep / "0" / ".hydra" / "config.yaml").is_file(), proc)  # Hydra set the job up: it builds now
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 75, out[-3000:]
    assert time.monotonic() - started < 60, "the job trained on instead of stopping"
    record = read_run(sweep / "0")
    assert record["status"] == "interrupted" and record["iter"] < 1000, record


@pytest.mark.parametrize("launcher", ["basic", "local"])
def test_a_subdir_that_gives_two_jobs_one_run_dir_is_refused_before_any_job_runs(launcher, tmp_path):
    """Job 1 would have trained on from job 0's finished run (another length: "training it on") and its result
    replaced job 0's; run in parallel, one was refused and the summary named the wrong job."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", f"hydra/launcher={launcher}", *FAST, "trainer.max_epochs=1,2", f"hydra.sweep.dir={sweep}",
                    "hydra.sweep.subdir=lr${optimizer.lr}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert (f"Config error: hydra.sweep.subdir=lr${{optimizer.lr}}: jobs 0 [{' '.join(FAST)} trainer.max_epochs=1] and 1 "
            f"[{' '.join(FAST)} trainer.max_epochs=2] would share the run dir {sweep}/lr0.1") in proc.stderr
    assert not sweep.exists()


@pytest.mark.parametrize("launcher", ["basic", "local"])
def test_a_swept_value_that_does_not_compose_is_refused_before_any_job_runs(launcher, tmp_path):
    """``model=mlp,cnnn``: job 0 trained, then job 1 failed; ``optimizer.lrr=0.1,0.2`` left a sweep dir of jobs
    marked pending that could never run, and a last line saying "2 pending"."""
    sweep = tmp_path / "sweep"
    for bad, words in ((["model=mlp,cnnn"], ["model: there is no option 'cnnn'; did you mean 'cnn'?", "(sweep job 1: "]),
                       (["optimizer.lrr=0.1,0.2"], ["optimizer.lrr: no such key in optimizer; did you mean optimizer.lr?"]),
                       # the bad value's first job comes after more jobs than the check composes (32)
                       (["model=mlp,cnnn", "seed=range(0,40)"], ["there is no option 'cnnn'", "model=cnnn"])):
        proc = run_cli(["-m", f"hydra/launcher={launcher}", *FAST, *bad, f"hydra.sweep.dir={sweep}"], tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines()[-1].startswith("Config error: ") and all(w in proc.stderr for w in words)
        assert "pending" not in proc.stdout + proc.stderr and not sweep.exists()


def test_a_launcher_option_that_does_not_exist_is_one_line_naming_the_close_one(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=local", "+hydra.launcher.maxparallel=2", *FAST, "seed=0,1",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and "HYDRA_FULL_ERROR" not in out, out[-3000:]
    assert proc.stderr.startswith("Config error: hydra.launcher.maxparallel: not an option of hydra/launcher=local; did "
                                  "you mean hydra.launcher.max_parallel? Accepted: cpus_per_task, fork_server, gpus_per_node, ")
    assert "stderr_to_stdout, submitit_folder, tasks_per_node, timeout_min" in proc.stderr  # every key of local.yaml
    assert "pending" not in out  # no report of the jobs that never ran
    proc = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.timeout_min=0.5", *FAST, "seed=0,1"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert "Config error: hydra.launcher.timeout_min=0.5: submitit takes a whole number (int) for it with " \
           "hydra/launcher=local (minutes)" in proc.stderr
    proc = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.tasks_per_node=2", *FAST, "seed=0,1"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "Config error: hydra.launcher.tasks_per_node=2: the local launcher runs one task per job; for DDP on this "
        "machine use trainer.devices=2"), proc.stderr[-3000:]
    proc = run_cli(["-m", "hydra.launcher.max_parallel=2", *FAST, "seed=0,1"], tmp_path)
    assert proc.returncode == 2 and "hydra.launcher.max_parallel: the basic launcher (the default) takes no options; " \
                                   "max_parallel is one of another launcher's: -m hydra/launcher=local" in proc.stderr


def test_a_basic_sweep_stopped_midway_lists_the_jobs_it_never_reached_as_pending(tmp_path):
    import signal
    import time

    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "launcher", "-m", "seed=0,1,2", "trainer.max_epochs=3", f"hydra.sweep.dir={sweep}",
            "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.05", *FAST]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_paced_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def second_job_training():
        try:
            return read_run(sweep / "1")["status"] == "running"
        except (OSError, ValueError, KeyError):
            return False

    _wait_for(second_job_training, proc)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 75, out[-3000:]
    assert "Sweep of 3 job(s): 1 done, 1 interrupted, 1 pending" in out
    assert "| 2 | `seed=2 " in (sweep / "summary.md").read_text()


def test_a_basic_sweep_signalled_between_its_jobs_stops_with_its_summary_and_says_how_to_resume(tmp_path):
    """A SIGTERM that came as job 0 ended (after its last step: the run is recorded completed and passes the signal
    on) reached the sweep's default handler: the sweep ended at once, 143, with no summary and no word of what to
    do. It stops as for a SIGTERM during a job: 75, the summary, the jobs not reached pending."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "launcher", "-m", *FAST, "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}",
               "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0", "+hooks.pace.signal_after_train=true,false,false"]
    proc = subprocess.run(command, cwd=tmp_path, env=_paced_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 75, out[-3000:]
    assert "SIGTERM came as the run ended: it is recorded completed, and the signal is passed on" in out
    assert f"Sweep stopped by SIGTERM. Run the same command with hydra.sweep.dir={sweep} to resume it" in out, out[-3000:]
    assert "Sweep of 3 job(s): 1 done, 2 pending" in out and "| 2 | " in (sweep / "summary.md").read_text(), out[-3000:]
    assert read_run(sweep / "0")["status"] == "completed" and not (sweep / "1" / "run.json").exists()
    again = subprocess.run(command, cwd=tmp_path, env=_paced_env(), capture_output=True, text=True, timeout=300)
    out = again.stdout + again.stderr
    assert again.returncode == 0 and "Sweep of 3 job(s): 3 done" in out and "came as the run ended" not in out, out[-3000:]


def test_a_lone_run_signalled_as_it_ends_exits_as_it_finished(tmp_path):
    """With no handler of the process's own to pass it on to, a SIGTERM that came after the run's last step ended a
    lone single-process run by the signal (143) once run.json said completed, where a trainer.devices run exited 0."""
    command = [sys.executable, "-m", "launcher", *FAST, "trainer.max_epochs=1", "hydra.run.dir=run",
               "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0", "+hooks.pace.signal_after_train=true"]
    proc = subprocess.run(command, cwd=tmp_path, env=_paced_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "SIGTERM came as the run ended: it is recorded completed" in out and "passed on" not in out, out[-3000:]
    assert read_run(tmp_path / "run")["status"] == "completed"


def test_a_sweep_whose_finished_jobs_lack_the_objective_says_so_in_its_end_line(tmp_path):
    """"Sweep of 2 job(s): 2 done; summary: ..." left out why no job was best (said only in each job's log)."""
    from launcher.sweep.summary import done_report, jobs

    for job in ("0", "1"):
        (tmp_path / job).mkdir()
        (tmp_path / job / "run.json").write_text(json.dumps({
            "status": "completed", "overrides": [f"seed={job}"], "metrics": {"val/loss": 0.5, "train/loss": 0.4}}))
    line = done_report(jobs(tmp_path), tmp_path, "val/accuracy", "max")
    assert line == (f"Sweep of 2 job(s): 2 done; best: none (no finished job has a number for val/accuracy; they recorded "
                    f"train/loss, val/loss); summary: {tmp_path / 'summary.md'}"), line
    (tmp_path / "1" / "run.json").write_text(json.dumps({"status": "running", "overrides": ["seed=1"], "metrics": {}}))
    assert "best: job 0 [seed=0] val/loss = 0.5" in done_report(jobs(tmp_path), tmp_path, "val/loss", "min")


def test_the_summary_keeps_a_failed_runs_time_and_metrics_and_names_a_misspelled_objective(tmp_path):
    from launcher.sweep.summary import jobs, record_failure

    for job, status in (("0", "completed"), ("1", "failed")):
        (tmp_path / job).mkdir()
        (tmp_path / job / "run.json").write_text(json.dumps({
            "status": status, "overrides": [f"seed={job}"], "seconds": 12.5, "metrics": {"val/accuracy": 0.5}}))
    record_failure(tmp_path / "1", "FloatingPointError: Loss became infinite or NaN at iteration 7 (log: x)", ["seed=1"])
    rows = jobs(tmp_path)
    assert (rows[1]["status"], rows[1]["seconds"], rows[1]["metrics"]) == ("failed", 12.5, {"val/accuracy": 0.5})
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path), "--objective", "val/acc"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "--objective val/acc is no metric the jobs recorded; did you mean val/accuracy?" \
        in proc.stderr
    assert not (tmp_path / "summary.md").exists()
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path)], capture_output=True, text=True)
    assert "(log: x)" in proc.stdout and "(log: x) (log:" not in proc.stdout
    # another metric, no --mode: ranked by the sweep's own direction, it marked the highest loss the best
    (tmp_path / "0" / "run.json").write_text(json.dumps({
        "status": "completed", "overrides": ["seed=0"], "metrics": {"val/accuracy": 0.9, "train/loss": 0.1}}))
    (tmp_path / "1" / "run.json").write_text(json.dumps({
        "status": "completed", "overrides": ["seed=1"], "metrics": {"val/accuracy": 0.5, "train/loss": 2.0}}))
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path), "--objective", "train/loss"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "--objective train/loss is not the sweep's objective (val/accuracy, max), so its " \
        "direction is not known: add --mode min or --mode max" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path), "--objective", "train/loss", "--mode",
                           "min"], capture_output=True, text=True)
    assert proc.returncode == 0 and "best: job 0" in proc.stdout, proc.stdout


def test_a_dead_job_is_interrupted_only_on_its_own_attempts_record(tmp_path):
    """A job whose run stopped itself (run.json interrupted, exit 75) stays interrupted; the same record left by an
    earlier attempt, under a job killed on its rerun before its run started, must not hide that kill."""
    import json
    import os
    import time

    from omegaconf import OmegaConf

    from launcher.sweep.plugins import JobDied, JobInterrupted, record_dead_job

    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"name": "launcher"}},
                               "objective": "val/accuracy", "objective_mode": "max"})
    job = tmp_path / "0"

    def dead(**kw):
        job.mkdir(exist_ok=True)
        (job / "run.json").write_text(json.dumps({"status": "interrupted", "iter": 10, "stop_reason": "received SIGTERM"}))
        os.utime(job / "run.json", (time.time() - 60, time.time() - 60))
        return record_dead_job(config, job, ["seed=0"], 0, "killed by SIGKILL (signal 9)", **kw)._return_value

    assert isinstance(dead(exit_code=75), JobInterrupted)
    assert isinstance(dead(since=time.time() - 120), JobInterrupted)
    assert isinstance(dead(exit_code=-9), JobDied)  # the local launcher knows the exit status: a kill
    assert json.loads((job / "run.json").read_text())["status"] == "failed"
    assert isinstance(dead(since=time.time()), JobDied)  # SLURM: the record predates this attempt's submission
    assert "killed by SIGKILL" in json.loads((job / "failure.json").read_text())["error"]


def test_the_summary_reads_a_job_whose_process_died_unrecorded_as_failed_not_running(tmp_path):
    """The OOM killer took a local sweep and one of its jobs: run.json said running for good, and so did the
    summary run later by hand. A job whose process is alive still reads running."""
    import datetime
    import socket

    from launcher.sweep.summary import jobs

    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        now = datetime.datetime.now().astimezone()
        for job, pid in (("0", dead.pid), ("1", alive.pid)):
            (tmp_path / job).mkdir()
            (tmp_path / job / "run.json").write_text(json.dumps({
                "status": "running", "overrides": [f"seed={job}"], "pid": pid, "host": socket.gethostname(),
                "start_time": (now - datetime.timedelta(seconds=30 if job == "0" else 0)).isoformat(), "seconds": 5.0, "attempt": 2,
                "metrics": {}}))
        last_sign = tmp_path / "0" / "metrics.jsonl"
        last_sign.touch()
        os.utime(last_sign, (now.timestamp() - 10,) * 2)  # its last sign of life, 20 s into the attempt
        rows = jobs(tmp_path)
        assert [r["status"] for r in rows] == ["failed", "running"]
        assert 24.5 < rows[0]["seconds"] < 25.5 and rows[1]["seconds"] is None  # 5 s earlier + 20 s of this attempt
        now = now.isoformat()
        assert f"its process (pid {dead.pid} on this host) ended without recording its end" in rows[0]["error"]
        (tmp_path / "0" / "run.json").write_text(json.dumps({"status": "running", "overrides": ["seed=0"], "pid": dead.pid,
                                                            "host": "another-host", "start_time": now}))
        assert jobs(tmp_path)[0]["status"] == "running"  # another host's process cannot be checked from here
    finally:
        alive.kill()
        alive.wait()


def test_a_ctrl_c_that_aborts_a_basic_sweep_still_leaves_its_summary(tmp_path):
    """The abort's one line replaced the traceback; ending by the signal then must not skip the exit handlers,
    which write the sweep's summary and last screen."""
    import signal

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "launcher", "-m", *FAST, "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}",
                           "+hooks.pace._target_=pace.Pace", "+hooks.pace.ctrl_c_when_built=true"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGINT, proc.stderr[-3000:]
    assert "Aborted by Ctrl-C (SIGINT)." in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (sweep / "summary.md").is_file() and "summary.md" in proc.stdout + proc.stderr
    record = json.loads((sweep / "0" / "run.json").read_text())
    assert (record["status"], record["exit_code"]) == ("aborted", 130)  # as the process ended: by SIGINT
    assert record["error"] == "KeyboardInterrupt: stopped by Ctrl-C", record["error"]  # it said "KeyboardInterrupt: "


def test_the_summary_of_a_dir_holding_several_sweeps_names_them_instead_of_merging_their_jobs(tmp_path):
    """``launcher.sweep.summary outputs/multirun/<date>`` listed each sweep's job 0, 1, ... together as one sweep's,
    marked one best among them, and wrote summary files into the date dir."""
    day = tmp_path / "multirun" / "2026-12-05"
    for sweep in ("10-00-00", "11-00-00"):
        for job in ("0", "1"):
            (day / sweep / job).mkdir(parents=True)
            (day / sweep / job / "run.json").write_text(json.dumps({"status": "completed", "overrides": [f"seed={job}"],
                                                                    "metrics": {"val/accuracy": 0.5}}))
        (day / sweep / "multirun.yaml").write_text("objective: val/accuracy\nobjective_mode: max\n")
    for given in (day, tmp_path / "multirun"):
        proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(given)], capture_output=True, text=True)
        assert proc.returncode == 1 and f"{given} holds 2 sweeps, not one; give one of them: {day / '10-00-00'}, " \
            f"{day / '11-00-00'}" in proc.stderr, proc.stderr
        assert not (given / "summary.md").exists()
    shutil.rmtree(day / "11-00-00")
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(day)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith(f"# Sweep {day / '10-00-00'}"), proc.stderr


def test_the_sweep_dir_check_compares_numbers_as_numbers_and_keys_without_their_plus():
    from launcher.sweep.plugins import _swept_values

    old = _swept_values(["+optimizer.lr=0.1", "seed=0", "trainer.max_epochs=3"], {"+optimizer.lr", "seed"})
    assert old == _swept_values(["++optimizer.lr=1e-1", "seed=0"], {"++optimizer.lr", "seed"}) == {"optimizer.lr": 0.1, "seed": 0}
    assert old != _swept_values(["optimizer.lr=0.2", "seed=0"], {"optimizer.lr", "seed"})
    # NaN equals no number, itself included: the same sweep with a nan value read as another sweep
    assert _swept_values(["optimizer.lr=nan"], {"optimizer.lr"}) == _swept_values(["optimizer.lr=NaN"], {"optimizer.lr"})
    assert _swept_values(["optimizer.lr=nan"], {"optimizer.lr"}) != _swept_values(["optimizer.lr=inf"], {"optimizer.lr"})


def test_a_summary_written_while_a_job_ends_is_written_again_not_left_stale(tmp_path, monkeypatch):
    """`launcher.sweep.summary` run while the last job ends: that job writes its summary between this one's read of
    the records and its write, which would leave the sweep's summary saying running for good."""
    import launcher.sweep.summary as summary

    (tmp_path / "0").mkdir()
    record = {"status": "running", "overrides": ["seed=0"], "host": "another-host", "start_time": "2026-12-05T05:00:00+00:00"}
    (tmp_path / "0" / "run.json").write_text(json.dumps(record))
    write_files = summary._write_files
    calls = []

    def job_ends_meanwhile(*args):
        if not calls:  # the job records its end after this writer read the records
            time.sleep(0.01)
            (tmp_path / "0" / "run.json").write_text(json.dumps({**record, "status": "completed", "seconds": 2.0,
                                                                 "metrics": {"val/accuracy": 0.5}}))
        calls.append(args)
        write_files(*args)

    monkeypatch.setattr(summary, "_write_files", job_ends_meanwhile)
    summary.write_summary(tmp_path, "val/accuracy", "max")
    assert len(calls) == 2 and "| 0 | `seed=0` | done | 2.0 | 0.5 | **best** |" in (tmp_path / "summary.md").read_text()


def test_a_sweeps_own_process_and_the_summary_command_do_not_import_torch(tmp_path):
    """The process that dispatches a sweep (local or SLURM) and ``python -m launcher.sweep.summary`` never train:
    importing torch there cost each sweep and each summary over a second. The summary reads a sweep whose jobs
    ran, failed, run now and died, and records a dead job, as a live sweep's process does."""
    import socket

    now = "2026-12-05T10:00:00.000+00:00"
    records = {"0": {"status": "completed", "overrides": ["seed=0"], "start_time": now, "end_time": now, "metrics": {"val/accuracy": 0.5}},
               "1": {"status": "running", "overrides": ["seed=1"], "start_time": now, "pid": os.getpid(), "host": socket.gethostname()},
               "2": {"status": "running", "overrides": ["seed=2"], "start_time": now, "pid": 2**22 + 7, "host": socket.gethostname(),
                     "seconds": 1.0},
               "3": {"status": "failed", "overrides": ["seed=3"], "start_time": now, "end_time": now, "error": "x"}}
    for job, record in records.items():
        (tmp_path / job).mkdir()
        (tmp_path / job / "run.json").write_text(json.dumps(record))
    code = ("import sys; from pathlib import Path; import launcher.__main__, launcher.sweep.plugins, launcher.sweep.local, launcher.sweep.slurm; "
            "from launcher.sweep import summary; from launcher.runs.rundir import mark_failed; "
            f"rows = summary.write_summary(Path({str(tmp_path)!r}), 'val/accuracy', 'max'); "
            f"mark_failed(Path({str(tmp_path / '2')!r}), 'JobDied: killed', exit_code=137); "
            "print([r['status'] for r in rows]); sys.exit('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "['done', 'running', 'failed', 'failed']" in done.stdout, done.stdout + done.stderr[-3000:]


def test_a_composed_local_job_takes_its_config_once_and_a_requeued_one_composes_it_again(monkeypatch):
    """Run by its process, a ComposedJob uses the config the sweep composed; pickled again (submitit's requeue, after
    Hydra made that config's hydra node read-only), it composes the config afresh as the plugin's launcher does."""
    import types

    import cloudpickle
    import hydra.core.utils
    import submitit
    from hydra.core.singleton import Singleton
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
    from omegaconf import OmegaConf

    from launcher.sweep import local
    class Loader:
        def __init__(self):
            self.calls = []  # an attribute: the loader is pickled with the job

        def load_sweep_config(self, master_config, overrides):
            self.calls.append(list(overrides))
            return OmegaConf.create({"hydra": {"job": {"num": None, "id": None}}, "seed": 1})

    ran = []

    def run_job(hydra_context, task_function, config, job_dir_key, job_subdir_key):
        OmegaConf.set_readonly(config.hydra, True)  # as Hydra's run_job does (HydraConfig.set_config)
        ran.append(config)
        return config.seed

    for module in (hydra.core.utils, submitit_launcher, local):
        monkeypatch.setattr(module, "run_job", run_job)
        monkeypatch.setattr(module, "setup_globals", lambda: None)
    monkeypatch.setattr(submitit, "JobEnvironment", lambda: types.SimpleNamespace(job_id="7"))
    monkeypatch.setattr(Singleton, "set_state", staticmethod(lambda state: None))
    state = {"params": {}, "config": OmegaConf.create({}), "task_function": print,
             "hydra_context": types.SimpleNamespace(config_loader=Loader()), "sweep_configs": None}
    composed = OmegaConf.create({"hydra": {"job": {"num": None, "id": None}}, "seed": 1})
    job = local._as_composed_job(state, composed, ["seed=1"])
    assert job(["seed=1"], "hydra.sweep.dir", 3, "job_id_for_3", {}) == 1
    assert ran[-1] is composed and composed.hydra.job.num == 3 and composed.hydra.job.id == "7"
    assert job.hydra_context.config_loader.calls == []
    requeued = cloudpickle.loads(cloudpickle.dumps(job))  # what the plugin's checkpoint() hands submitit
    assert requeued(["seed=1"], "hydra.sweep.dir", 3, "job_id_for_3", {}) == 1
    assert requeued.hydra_context.config_loader.calls == [["seed=1"]] and ran[-1].hydra.job.num == 3


def test_a_sweep_that_a_config_file_makes_a_multirun_runs_with_the_default_sweeper(tmp_path):
    """``hydra.mode: MULTIRUN`` in a config file (no -m on the command line) gets the default sweeper too."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "multi.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n")
    proc = run_cli(["--config-dir", str(tmp_path / "conf"), "+experiment=multi", "seed=0,1", "trainer.max_epochs=1",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", *FAST], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [d.name for d in run_dirs(tmp_path / "sweep")] == ["0", "1"]


def test_a_swept_value_that_interpolates_is_the_jobs_to_resolve(tmp_path):
    """``trainer.max_epochs=1,${model.in_channels}``: the sweep's check read the swept "${...}" as an interpolation
    of its own config and failed (a warning), and the sweep ended without its report; each value composes, so the
    sweep runs and the one job whose model has no in_channels fails as it starts, named in the report."""
    proc = run_cli(["-m", "model=mlp,cnn", "trainer.max_epochs=1,${model.in_channels}", f"hydra.sweep.dir={tmp_path / 's'}",
                    *FAST], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Callback" not in proc.stderr and "1 of 4 sweep job(s) failed" in proc.stderr, proc.stderr[-3000:]
    assert "Interpolation key 'model.in_channels' not found" in proc.stderr


def test_a_longer_sweep_rerun_refused_as_it_starts_keeps_the_results_and_names_the_failed_attempts_logs(tmp_path):
    """Each job of a rerun (trainer.max_epochs raised, a schedule lacking its step_size) failed before its first
    step: run.json was rewritten as failed, results gone; kept now, the report named the earlier attempt's log."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=local", "seed=0,1", f"hydra.sweep.dir={sweep}", *FAST]
    assert run_cli([*args, "trainer.max_epochs=1"], tmp_path).returncode == 0
    records = {j: (sweep / str(j) / "run.json").read_bytes() for j in (0, 1)}
    refused = run_cli([*args, "trainer.max_epochs=2", "hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR"],
                      tmp_path)
    assert refused.returncode == 1 and "2 of 2 sweep job(s) failed" in refused.stderr, refused.stderr[-3000:]
    assert {j: (sweep / str(j) / "run.json").read_bytes() for j in (0, 1)} == records
    for j in (0, 1):
        failed = json.loads((sweep / str(j) / "failure.json").read_text())["submitit"]
        assert f"(submitit: {failed['stderr']})" in refused.stderr and failed["stderr"] != read_run(sweep / str(j))["submitit"]["stderr"]
    again = run_cli([*args, "trainer.max_epochs=1"], tmp_path)
    assert again.returncode == 0 and "2 of 2 sweep jobs already finished" in again.stdout + again.stderr
