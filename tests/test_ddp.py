"""DistributedDataParallel on the CPU (gloo): torchrun, trainer.devices=N, failures and exact resume.

Every run is the real CLI in subprocesses. Test hooks (tests/ddp_probe.py) write each rank's final
weights, or kill one rank mid-training.
"""
from __future__ import annotations

import json
import re
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import read_run, run_dirs

TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
ENV.pop("HYDRA_FULL_ERROR", None)
# 640 train samples: 10 global batches of 64 per epoch, i.e. 32 per rank on 2 ranks; 160 val samples.
DATA = ["data=synthetic", "data.train.size=800", "+hooks.dump._target_=ddp_probe.DumpWeights"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "launcher"]


def launch(cmd, cwd, timeout=300, **kw):
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout, **kw)


def cli(*args):
    return [sys.executable, "-m", "launcher", *args]


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu")


def assert_bitwise(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs by {(a[k] - b[k]).abs().max().item()}"


def rows(run_dir: Path, keys=("train/loss", "val/loss", "val/accuracy")) -> list:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.append({k: row[k] for k in ("iter", *keys) if k in row})
    return out


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """The same training three ways: one process at batch 64; torchrun and trainer.devices=2 at 32 per rank."""
    root = tmp_path_factory.mktemp("ddp")
    common = [*DATA, "trainer.max_epochs=3", "hooks.jsonl.period=5"]
    single = launch(cli(*common, "data.batch_size=64", "hydra.run.dir=single"), root)
    spawn = launch(cli(*common, "data.batch_size=32", "trainer.devices=2", "hydra.run.dir=spawn"), root)
    (root / "tr").mkdir()
    torchrun = launch([*TORCHRUN, *common, "data.batch_size=32"], root / "tr")
    for name, proc in (("single", single), ("spawn", spawn), ("torchrun", torchrun)):
        assert proc.returncode == 0, f"{name}: " + proc.stdout[-2000:] + proc.stderr[-4000:]
    return root, torchrun


def test_torchrun_ranks_share_one_run_dir_with_rank0_files(ddp_runs):
    root, proc = ddp_runs
    dirs = run_dirs(root / "tr")
    assert len(dirs) == 1, dirs  # not one time-stamped dir per rank
    run = dirs[0]
    assert read_run(run)["status"] == "completed"
    assert (run / "train.log").is_file() and (run / "train_rank1.log").is_file()
    assert (run / ".hydra" / "config.yaml").is_file()
    # rank 0 alone writes TensorBoard: one file of scalars, one of the HParams entry
    assert sorted(p.suffix == ".hparams" for p in run.glob("events.out.tfevents.*")) == [False, True]
    assert (run / "checkpoints" / "final.pt").is_file()
    # epochs of a fraction of a second, 10 s between periodic checkpoints: the ranks skipped the first two together
    # (a rank that saved alone would wait in the save's gather until the timeout) and saved the last
    for d in (run, root / "spawn"):
        assert sorted(p.name for p in (d / "checkpoints").glob("epoch_*.pt")) == ["epoch_0003.pt"]


def test_every_rank_ends_with_identical_weights_equal_to_one_process(ddp_runs):
    root, _ = ddp_runs
    run = run_dirs(root / "tr")[0]
    spawn0, spawn1 = weights(root / "spawn" / "weights_rank0.pt"), weights(root / "spawn" / "weights_rank1.pt")
    assert_bitwise(spawn0, spawn1)
    assert_bitwise(weights(run / "weights_rank0.pt"), weights(run / "weights_rank1.pt"))
    assert_bitwise(spawn0, weights(run / "weights_rank0.pt"))  # two ways to start, one code path, one result
    final = torch.load(root / "spawn" / "checkpoints" / "final.pt", map_location="cpu")  # weights_only=True reads it
    assert_bitwise(final["model"], spawn0)  # checkpoints hold the plain model, loadable without DDP
    assert len(final["rng_ranks"]) == 2
    # The same global batches; only the order of float additions differs (docs/ddp.md).
    single = weights(root / "single" / "weights_rank0.pt")
    for k in single:
        torch.testing.assert_close(spawn0[k], single[k], rtol=0, atol=1e-6)


def test_logged_metrics_are_averaged_over_the_ranks(ddp_runs):
    root, _ = ddp_runs
    ddp, single = rows(root / "spawn"), rows(root / "single")
    assert [r["iter"] for r in ddp] == [r["iter"] for r in single]
    for a, b in zip(ddp, single):
        assert a.keys() == b.keys()
        for k in a:  # a rank's own loss is off by far more than this: each sees half the batch
            assert a[k] == pytest.approx(b[k], abs=1e-5), (a, b)
    assert read_run(root / "spawn")["metrics"]["val/accuracy"] == pytest.approx(
        read_run(root / "single")["metrics"]["val/accuracy"], abs=1e-9)


@pytest.mark.parametrize("how", ["spawn", "torchrun"])
def test_a_killed_rank_ends_the_job_fast_and_is_named(tmp_path, how):
    args = [*DATA, "data.batch_size=32", "trainer=iter", "trainer.max_iters=100000", "+hooks.kill._target_=ddp_probe.KillRank",
            "+hooks.kill.rank=1", "+hooks.kill.at=5"]
    start = time.monotonic()
    if how == "spawn":
        proc = launch(cli(*args, "trainer.devices=2", "hydra.run.dir=run"), tmp_path, timeout=120)
    else:
        proc = launch([*TORCHRUN, *args, "hydra.run.dir=run"], tmp_path, timeout=120)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert took < 60, f"took {took:.0f} s"
    if how == "spawn":
        assert "Run failed: rank 1 failed" in out and "SIGKILL" in out, out[-3000:]
        assert f"(log: {tmp_path / 'run' / 'train_rank1.log'})" in out and "in run_spawned" not in out  # no launcher traceback
        record = read_run(tmp_path / "run")
        assert record["status"] == "failed" and "rank 1" in record["error"]
    else:  # torchrun's own failure report
        assert "rank      : 1" in out or "rank: 1" in out, out[-3000:]


def test_a_config_error_found_in_the_workers_is_one_line_and_exit_status_2(tmp_path):
    proc = launch(cli(*DATA, "trainer.max_epochs=1", "trainer.devices=2", "optimizer.lr=-1", "hydra.run.dir=run"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Config error: optimizer (torch.optim.SGD): ValueError: Invalid learning rate: -1" in out and "in run_spawned" not in out
    record = read_run(tmp_path / "run")
    assert record["status"] == "failed" and record["exit_code"] == 2 and record["error"].startswith("ConfigError: optimizer")


def test_under_torchrun_the_other_ranks_console_lines_say_their_rank(tmp_path):
    """Rank 1's console shows its warnings and errors, as rank 0's does: each line came twice, untagged."""
    proc = launch([*TORCHRUN, "data=synthetic", "data.train.size=320", "optimizer.lr=-1", "hydra.run.dir=run"], tmp_path,
                  timeout=120)
    out = proc.stdout + proc.stderr
    says = "Config error: optimizer (torch.optim.SGD): ValueError: Invalid learning rate: -1"
    assert proc.returncode != 0 and f"[ERROR] {says}" in out and f"[ERROR][rank 1] {says}" in out, out[-3000:]
    assert f"[rank 1] {says}" not in (tmp_path / "run" / "train_rank1.log").read_text()  # the file is that rank's alone


def test_a_validation_error_on_one_rank_fails_the_run_at_once_naming_it(tmp_path):
    """Stopping at the boundary for an error in one rank's validation (here its model's eval output) left that
    rank at the boundary's all-reduce while the others waited in the validation's: a hang until gloo's timeout
    (5 minutes), with the error never shown. The rank's error file (torch's, in the temp dir) goes with it."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "rank1eval.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self, **unused):\n        super().__init__()\n        self.lin = torch.nn.Linear(64, 10)\n\n"
        "    def forward(self, batch):\n        x, y = batch\n        logits = self.lin(x.flatten(1))\n"
        "        loss = torch.nn.functional.cross_entropy(logits, y)\n"
        "        if self.training or dist.get_rank() == 0:\n            return loss if self.training else {'loss': loss}\n"
        "        return logits\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]]), "TMPDIR": str(tmp_path / "tmp")}
    started = time.monotonic()
    proc = subprocess.run(cli(*DATA, "trainer.max_epochs=2", "trainer.devices=2", "model._target_=rank1eval.Net",
                              "objective=val/loss", "objective_mode=min", "hydra.run.dir=run"),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "rank 1 failed: " in out and "ModelOutputError" in out, out[-3000:]
    assert time.monotonic() - started < 60, out[-3000:]
    assert read_run(tmp_path / "run")["status"] == "failed"
    # the run's log says what went wrong on rank 1 too (it was in train_rank1.log alone)
    assert re.search(r"\]\[ERROR\]\[rank 1\] Run failed: ModelOutputError", (tmp_path / "run" / "train.log").read_text())
    assert not list((tmp_path / "tmp").glob("pytorch-errorfile-*")), out[-3000:]


def test_an_objective_no_rank_records_is_warned_of_once_by_rank_0(tmp_path):
    """Rank 0 said so before training; rank 1, which does not, said it again in its own words at the end."""
    proc = launch(cli("data=synthetic", "data.train.size=320", "trainer.max_epochs=1", "hooks=minimal", "trainer.devices=2",
                      "hydra.run.dir=run"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("objective 'val/accuracy'") == 1 and "[rank 0] objective 'val/accuracy' will not be recorded" in out, out
    assert "not among" not in (tmp_path / "run" / "train_rank1.log").read_text()


def test_a_warning_about_the_config_is_said_once_not_by_each_rank(tmp_path):
    """optimizer.lr=0 was warned of by every rank, on the console and (with the ranks' warnings there) in train.log."""
    proc = launch(cli("data=synthetic", "data.train.size=320", "trainer.max_epochs=1", "hooks=minimal", "trainer.devices=2",
                      "objective=train/loss", "objective_mode=min", "optimizer.lr=0", "hydra.run.dir=run"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("optimizer.lr=0: the weights will not change") == 1, out[-3000:]
    assert (tmp_path / "run" / "train.log").read_text().count("optimizer.lr=0: the weights will not change") == 1


# 704 train samples: 11 steps per epoch. The writers' period (7) divides neither that nor the checkpoints'
# period (20), so a checkpoint holds values recorded since the last write (a read averages them over the ranks).
RESUMABLE = ["data=synthetic", "data.train.size=880", "+hooks.dump._target_=ddp_probe.DumpWeights", "data.batch_size=32",
             "trainer=iter", "trainer.max_iters=60", "trainer.devices=2", "hooks.checkpointer.by_epoch=false",
             "hooks.checkpointer.period=20", "hooks.checkpointer.min_interval_secs=0", "hooks.jsonl.period=7", "hooks.console.period=7", "hooks.tensorboard.period=7",
             "hooks.jsonl.flush_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.03",
             "+hooks.rank_value._target_=ddp_probe.RankValue"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp_ref")
    proc = launch(cli(*RESUMABLE, "hydra.run.dir=ref"), root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "ref"


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _assert_same_run(resumed: Path, ref: Path) -> None:
    a = torch.load(resumed / "checkpoints" / "final.pt", map_location="cpu", weights_only=False)
    b = torch.load(ref / "checkpoints" / "final.pt", map_location="cpu", weights_only=False)
    assert_bitwise(a["model"], b["model"])
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert_bitwise(sa, sb)
    assert_bitwise(weights(resumed / "weights_rank1.pt"), weights(ref / "weights_rank1.pt"))
    keys = ("train/loss", "val/loss", "val/accuracy", "probe/rank")
    assert rows(resumed, keys) == rows(ref, keys)  # the logged, rank-averaged metrics too: no gap, no duplicate


def test_sigterm_under_ddp_checkpoints_on_rank0_and_resumes_bitwise(tmp_path, uninterrupted):
    proc = subprocess.Popen(cli(*RESUMABLE, "hydra.run.dir=run"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(tmp_path / "run" / "checkpoints" / "iter_0000020.pt", proc)
    proc.send_signal(signal.SIGTERM)  # to the launcher process only: it passes the signal on to its workers
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "interrupted" and 20 < record["iter"] < 60
    assert record["command"][1:3] == ["-m", "launcher"], record["command"]  # as typed, not rank 0's __main__.py path
    assert record["iter"] % 10 == 0 or record["iter"] % 11 == 0  # the ranks agree on a stop every 10 steps and at epoch starts
    # a rerun refused in the workers as they build (it trains nothing) leaves the interrupted run's record and
    # config as they were: the parent marked it failed, and .hydra/ held the refused config
    kept = {p: p.read_bytes() for p in [tmp_path / "run" / "run.json", *(tmp_path / "run" / ".hydra").iterdir()]}
    bad = launch(cli(*RESUMABLE, "hydra.run.dir=run", "hooks.console.period=0"), tmp_path)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2 and "hooks.console" in out and "Traceback" not in out, out[-3000:]
    assert {p: p.read_bytes() for p in kept} == kept
    # another world size trained on with half the global batch and ended "completed" short of its steps: refused
    fewer = launch(cli(*RESUMABLE, "hydra.run.dir=run", "trainer.devices=1"), tmp_path)
    out = fewer.stdout + fewer.stderr
    assert fewer.returncode == 2 and "holds a run of 2 process(es), and this run would have 1" in out, out[-3000:]
    assert "resume it with trainer.devices=2," in out and "another config" not in out, out[-3000:]
    assert {p: p.read_bytes() for p in kept} == kept
    again = launch(cli(*RESUMABLE, "hydra.run.dir=run"), tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_run(tmp_path / "run")["resumed_from"].endswith(f"iter_{record['iter']:07d}.pt")
    _assert_same_run(tmp_path / "run", uninterrupted)


def test_a_run_started_by_torchrun_trains_on_with_trainer_devices_of_the_same_world_size(tmp_path):
    """Refused in a circle: the checkpoint's check said "resume it with trainer.devices=2", and with it the run dir's
    config check said "another config (trainer.devices: 1 -> 2)": under torchrun trainer.devices is not the world size."""
    common = ["data=synthetic", "data.train.size=320", "data.batch_size=32", "hydra.run.dir=run"]
    first = launch([*TORCHRUN, *common, "trainer.max_epochs=1"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    longer = launch(cli(*common, "trainer.max_epochs=2", "trainer.devices=2"), tmp_path)
    out = longer.stdout + longer.stderr
    assert longer.returncode == 0 and "another config" not in out, out[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "completed" and record["resumed_from"].endswith("final.pt") and record["iter"] == 8, record


def test_a_sigterm_sent_again_while_rank0_writes_its_checkpoint_leaves_the_run_interrupted(tmp_path):
    """A local sweep asks its jobs again every 2 s until they end. The launcher passes SIGTERM on once: a second
    one killed rank 1, waiting for rank 0's interrupt checkpoint, and the run was recorded failed."""
    import time

    env = {**ENV, "LAUNCHER_TEST_CHECKPOINT_WRITE_DELAY": "3"}  # rank 0's checkpoint write takes 3 s
    proc = subprocess.Popen(cli(*RESUMABLE, "hydra.run.dir=run", "hooks.checkpointer.period=1000"), cwd=tmp_path,
                            env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / "metrics.jsonl").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    while not list((tmp_path / "run" / "checkpoints").glob(".iter_*.tmp*")):  # rank 0 is writing it
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]
    assert read_run(tmp_path / "run")["status"] == "interrupted"


def _workers_starting(proc: subprocess.Popen) -> None:
    """Wait until ``proc`` has spawned its two workers (they are importing torch, long before training)."""
    spawned = lambda: subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "spawn_main"], capture_output=True,  # noqa: E731
                                     text=True).stdout.split()
    assert _until(lambda: len(spawned()) == 2 or proc.poll() is not None, timeout=120), "no workers started"
    assert proc.poll() is None, proc.communicate()[1][-3000:]


def test_a_sigterm_while_the_workers_start_stops_the_run_at_its_first_step(tmp_path, uninterrupted):
    """A preemption or a sweep's stop can come while the workers still import torch and build the
    trainer. It used to kill the worker that had no handler yet, and the run was recorded failed: now
    the launcher holds the signal until each worker can take it, and the run stops at its first step."""
    proc = subprocess.Popen(cli(*RESUMABLE, "hydra.run.dir=run"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _workers_starting(proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, (out + err)[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "interrupted" and record["iter"] == 0, record
    assert "Interrupted at iteration 0 (SIGTERM)" in err
    assert err.count("received while the run starts") <= 1, err[-3000:]  # said by rank 0 alone, not once a worker
    again = launch(cli(*RESUMABLE, "hydra.run.dir=run"), tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_same_run(tmp_path / "run", uninterrupted)


def test_a_sigterm_to_the_launcher_while_it_starts_its_workers_reaches_each_of_them(tmp_path, monkeypatch):
    """The parent blocks the stop signals while it starts the workers, and they start with them ignored: a
    SIGTERM in that window waits, and each worker gets it once it can hold it. Starting multiprocessing's
    resource tracker there unblocked SIGTERM, and the signal was lost: the run trained on to its end."""
    import torch.multiprocessing as mp

    from launcher.engine import distributed
    from ddp_probe import latch_worker

    start = mp.start_processes
    other = threading.Event()  # a thread of this process that does not block the signal: the kernel hands it that one
    threading.Thread(target=other.wait, daemon=True).start()

    def start_then_signal(*args, **kwargs):
        context = start(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # inside the window
        time.sleep(0.3)  # for the other thread to take it: it was lost while this process ignored the signal
        return context

    monkeypatch.setattr(mp, "start_processes", start_then_signal)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)}
    try:
        received, _ = distributed.spawn(latch_worker, (str(tmp_path),), 2)
    finally:
        other.set()
    assert received == signal.SIGTERM
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == [str(int(signal.SIGTERM))] * 2
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_ctrl_c_to_the_launcher_while_it_starts_its_workers_aborts_them(tmp_path, monkeypatch):
    """Taken by another thread while the workers started, the launcher's handler ran before it knew them: a SIGTERM
    was held for them, a Ctrl-C dropped, and the workers trained on while the launcher reported SIGINT."""
    import torch.multiprocessing as mp

    from launcher.engine import distributed
    from ddp_probe import latch_worker

    start = mp.start_processes
    other = threading.Event()
    threading.Thread(target=other.wait, daemon=True).start()

    def start_then_interrupt(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # before the workers are known
        time.sleep(0.3)
        return start(*args, **kwargs)

    monkeypatch.setattr(mp, "start_processes", start_then_interrupt)
    try:
        received, _ = distributed.spawn(latch_worker, (str(tmp_path),), 2)  # (torch's worker exits 0 on the Ctrl-C)
    finally:
        other.set()
    assert received == signal.SIGINT
    assert not list(tmp_path.glob("rank*"))  # each worker was aborted as it started: none got as far as its end


def test_a_sigterm_to_the_workers_themselves_while_they_start_waits_until_each_holds_it(tmp_path, monkeypatch):
    """A SLURM step's signal reaches every process of it: a worker still importing torch keeps it pending
    (the stop signals are blocked from its start) until it can hold it, instead of dying of it."""
    import torch.multiprocessing as mp

    from launcher.engine import distributed
    from ddp_probe import latch_worker

    start = mp.start_processes

    def start_then_signal_workers(*args, **kwargs):
        context = start(*args, **kwargs)
        for process in context.processes:
            os.kill(process.pid, signal.SIGTERM)
        return context

    monkeypatch.setattr(mp, "start_processes", start_then_signal_workers)
    received, _ = distributed.spawn(latch_worker, (str(tmp_path),), 2)
    assert received is None  # none was sent to the launcher
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == [str(int(signal.SIGTERM))] * 2


def test_workers_that_fail_to_start_leave_the_signal_handlers_as_they_were(monkeypatch):
    import torch.multiprocessing as mp

    from launcher.engine import distributed
    from ddp_probe import latch_worker

    def fail(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(mp, "start_processes", fail)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT, signal.SIGTSTP)}
    with pytest.raises(OSError, match="no more processes"):
        distributed.spawn(latch_worker, ("unused",), 2)
    assert {s: signal.getsignal(s) for s in before} == before
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_sigint_while_the_workers_start_aborts_at_once(tmp_path):
    """kill -INT (an IDE's stop button) while the workers start: an abort within seconds. A worker that took
    the KeyboardInterrupt used to exit 0, and the parent waited on its peer, stuck joining the process group."""
    proc = subprocess.Popen(cli(*RESUMABLE, "hydra.run.dir=run"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = tmp_path / "run" / "train.log"
    assert _until(lambda: log.is_file() and "Joining the process group" in log.read_text() or proc.poll() is not None,
                  timeout=120)  # rank 0 meets its peers (where it waited), long before training: building comes first
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGINT and time.monotonic() - start < 20, (proc.returncode, (out + err)[-3000:])
    assert read_run(tmp_path / "run")["status"] == "aborted"
    assert err.rstrip().endswith("Aborted by Ctrl-C (SIGINT).") and "Traceback" not in err, err[-3000:]


def test_a_stream_with_more_batches_on_one_rank_ends_each_pass_with_the_shortest_and_says_so(tmp_path):
    """A stream shared out by rank with 2 more batches on rank 0 (10 a pass on rank 1, 12 on rank 0) used to
    end in gloo's collective mismatch: rank 1 left the pass while rank 0 waited in the gradients' all-reduce."""
    proc = launch(cli(*DATA, "data.train._target_=noisy_data.RankShardedStream", "+data.train.extra=64",
                      "data.batch_size=32", "trainer=iter", "trainer.max_iters=25", "trainer.devices=2",
                      "hooks.evaluator.by_epoch=false", "hooks.evaluator.period=15", "hydra.run.dir=run"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("the train stream's pass ended on another rank after 10 batches") == 1, out[-3000:]
    final = torch.load(tmp_path / "run" / "checkpoints" / "final.pt", map_location="cpu", weights_only=False)
    assert (final["iter"], final["epoch"], final["inner_iter"]) == (25, 2, 5)  # passes of 10, 10, then 5 steps
    ranks = [weights(tmp_path / "run" / f"weights_rank{r}.pt") for r in (0, 1)]
    assert_bitwise(*ranks)


def test_ctrl_c_reaches_each_worker_once_whoever_it_is_sent_to(tmp_path, uninterrupted):
    """kill -INT to the launcher alone (as an IDE's stop button does) and Ctrl-C in the terminal (the
    whole foreground process group) both stop the workers at one boundary with a checkpoint, exit 75."""
    for group in (False, True):
        run_dir = tmp_path / f"run_{'group' if group else 'parent'}"
        proc = subprocess.Popen(cli(*RESUMABLE, f"hydra.run.dir={run_dir}"), cwd=tmp_path, env=ENV, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        _wait_for(run_dir / "checkpoints" / "iter_0000020.pt", proc)
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 75, err[-3000:]
        record = read_run(run_dir)
        assert record["status"] == "interrupted" and 20 < record["iter"] < 60, record
        assert "Interrupted at iteration" in err and "(SIGINT)" in err and "Traceback" not in err
    again = launch(cli(*RESUMABLE, f"hydra.run.dir={run_dir}"), tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_same_run(run_dir, uninterrupted)


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped, Z: zombie), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (OSError, IndexError):
        return ""


def _until(condition, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_ctrl_z_stops_the_workers_with_the_launcher_and_fg_goes_on(tmp_path, uninterrupted):
    """The workers have process groups of their own: the terminal's SIGTSTP reaches the launcher alone,
    which stops them with it; the SIGCONT of `fg` reaches it alone too, and the run goes on unchanged."""
    run_dir = tmp_path / "run"
    # A process group of its own in this session, as a shell's job: in a new session the group would be
    # orphaned, and the kernel discards a SIGTSTP's stop there (nothing could ever continue it).
    proc = subprocess.Popen(cli(*RESUMABLE, f"hydra.run.dir={run_dir}"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
    _wait_for(run_dir / "checkpoints" / "iter_0000020.pt", proc)
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
    workers = [w for w in workers if os.getpgid(w) != proc.pid]  # the two ranks (not torch's helper processes)
    assert len(workers) == 2
    os.killpg(proc.pid, signal.SIGTSTP)  # Ctrl-Z: the terminal signals its foreground process group
    assert _until(lambda: _state(proc.pid) == "T" and all(_state(w) == "T" for w in workers)), \
        [_state(p) for p in (proc.pid, *workers)]
    metrics = (run_dir / "metrics.jsonl").read_text()
    time.sleep(1.0)
    assert (run_dir / "metrics.jsonl").read_text() == metrics, "training went on while stopped"
    os.killpg(proc.pid, signal.SIGCONT)  # fg
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert read_run(run_dir)["status"] == "completed"
    _assert_same_run(run_dir, uninterrupted)


def test_ctrl_c_at_start_up_aborts_and_a_killed_launcher_takes_its_workers_along(tmp_path):
    args = [*DATA, "data.batch_size=32", "trainer=iter", "trainer.max_iters=100000", "trainer.devices=2"]
    proc = subprocess.Popen(cli(*args, "hydra.run.dir=early"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(tmp_path / "early" / "run.json", proc)  # the workers are starting; none trains yet
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    proc.communicate(timeout=60)
    assert proc.returncode != 0 and time.monotonic() - start < 20  # it was ignored: the run trained on to its end
    assert read_run(tmp_path / "early")["status"] == "aborted"

    proc = subprocess.Popen(cli(*args, "hydra.run.dir=killed"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(tmp_path / "killed" / "metrics.jsonl", proc)
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
    assert len(workers) >= 2
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20

    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"  # a zombie waits for a reaper only
        except (OSError, IndexError):
            return False

    while any(running(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(w) for w in workers), "the workers outlived the launcher killed with SIGKILL"


@pytest.mark.parametrize("sig, seconds", [("SIGTERM", 1.0), ("SIGINT", 0.5)])
def test_a_sigterm_as_the_workers_leave_a_finished_run_leaves_it_finished(tmp_path, sig, seconds):
    """A Ctrl-C there ended the launcher 'Aborted by Ctrl-C' with exit status 130, while run.json said completed
    (and a worker waiting for its threads to end printed a KeyboardInterrupt's traceback)."""
    proc = launch(cli(*DATA, "trainer.max_epochs=1", "trainer.devices=2", "+hooks.late._target_=ddp_probe.SigtermAfterTheEnd",
                      f"+hooks.late.sig={sig}", f"+hooks.late.seconds={seconds}", "hydra.run.dir=run"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # the workers hold a signal that comes after training; none dies of it
    assert "failed" not in out and "Aborted" not in out and "Traceback" not in out, out[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "completed" and (tmp_path / "run" / "checkpoints" / "final.pt").is_file()


def test_killed_ddp_job_resumes_from_its_last_checkpoint_bitwise(tmp_path, uninterrupted):
    proc = subprocess.Popen(cli(*RESUMABLE, "hydra.run.dir=run"), cwd=tmp_path, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    _wait_for(tmp_path / "run" / "checkpoints" / "iter_0000040.pt", proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both workers, without warning
    proc.communicate(timeout=60)
    again = launch(cli(*RESUMABLE, "hydra.run.dir=run"), tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "iter_00000" in read_run(tmp_path / "run")["resumed_from"]
    _assert_same_run(tmp_path / "run", uninterrupted)


def test_unreachable_master_fails_with_a_clear_message(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**ENV, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "LAUNCHER_DIST_TIMEOUT_S": "3"}
    start = time.monotonic()
    proc = subprocess.run(cli("data=synthetic"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert time.monotonic() - start < 60
    out = proc.stdout + proc.stderr
    assert f"rank 1 of 2 could not join the process group at master 127.0.0.1:{port}" in out, out[-2000:]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "abc"])
def test_a_dist_timeout_that_is_no_wait_is_named_before_any_rank_tries_to_join(tmp_path, value):
    """0 and below timed out at once, blaming the master's address and port (after 43 lines of torch's C++
    errors); nan and inf failed in each rank on torch's timedelta."""
    for torchrun in (False, True):
        env = {**ENV, "LAUNCHER_DIST_TIMEOUT_S": value}
        if torchrun:
            env.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
        args = cli("data=synthetic", "data.train.size=320", "trainer.max_epochs=1", *([] if torchrun else ["trainer.devices=2"]))
        proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
        assert f"LAUNCHER_DIST_TIMEOUT_S={value!r} is not a number of seconds above 0" in out and "master" not in out, out


def test_torchrun_refuses_a_sweep_with_advice(tmp_path):
    proc = launch([*TORCHRUN, "-m", "data=synthetic", "seed=0,1", "hydra.sweep.dir=sweep"], tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "trainer.devices=N" in proc.stdout + proc.stderr
    # refused before the sweep marked its jobs pending: it left a summary of 2 pending jobs, and said so
    assert not (tmp_path / "sweep").exists() and "Sweep of" not in proc.stdout + proc.stderr


def test_nodes_started_with_different_overrides_are_refused_on_every_rank(tmp_path):
    """Two torchrun nodes (here one process each, on localhost) given another optimizer.lr trained two models in
    silence, each rank stepping with its own rate, and exited 0; another batch size hung in backward()."""
    from launcher.engine.distributed import free_port

    port = free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={rank}",
                               "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "launcher",
                               "data=synthetic", "data.train.size=320", "trainer.max_epochs=1", "hydra.run.dir=run",
                               f"optimizer.lr={lr}", *extra],
                              cwd=tmp_path, env={**ENV, "LAUNCHER_DIST_TIMEOUT_S": "60"}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank, lr, extra in ((0, 0.1, []), (1, 0.9, ["data.batch_size=16"]))]
    outs = [node.communicate(timeout=120)[0] for node in nodes]
    says = ("rank 1 was started with another config than rank 0: data.batch_size=16 (rank 0: 64), optimizer.lr=0.9 "
            "(rank 0: 0.1); start every rank (each node's torchrun) with the same overrides")
    for node, out in zip(nodes, outs):
        assert node.returncode != 0 and says in out, out[-3000:]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_signal_as_a_spawned_run_ends_stops_its_basic_sweep_once_the_run_is_recorded(tmp_path):
    """A SIGTERM to the launcher while trainer.devices=2 workers ended their run was forwarded to them, the run was
    recorded completed, and the signal went no further: the sweep ran its next job (a single process passes it on)."""
    proc = launch(cli("-m", "data=synthetic", "data.train.size=320", "trainer.max_epochs=1", "trainer.devices=2",
                      "hydra.sweep.dir=sweep", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0",
                      "+hooks.pace.signal_after_train=parent,false"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 75 and "Sweep of 2 job(s): 1 done, 1 pending" in out, out[-3000:]
    assert "SIGTERM came as the run ended: it is recorded completed, and the signal is passed on" in out
    assert read_run(tmp_path / "sweep" / "0")["status"] == "completed" and not (tmp_path / "sweep" / "1" / "run.json").exists()


def test_a_failed_ddp_run_rerun_with_another_world_size_is_refused_before_its_dir_changes(tmp_path):
    """trainer.devices is not compared with the recorded config (under torchrun it is not the world size): the world
    size recorded in run.json is, before anything is written. Refused only as it resumed, a failed run's rerun had
    rewritten .hydra/ and run.json with the refused config."""
    common = ["data=synthetic", "data.train.size=320", "data.batch_size=16", "hydra.run.dir=run",
              "hooks.checkpointer.by_epoch=false", "hooks.checkpointer.period=2", "trainer.max_epochs=2",
              "hooks.checkpointer.min_interval_secs=0"]
    failed = launch(cli(*common, "trainer.devices=2", "+hooks.breaks._target_=pace.BreaksAt", "+hooks.breaks.at=5"), tmp_path)
    assert failed.returncode != 0 and read_run(tmp_path / "run")["status"] == "failed", failed.stderr[-3000:]
    assert read_run(tmp_path / "run")["world_size"] == 2
    kept = {p: p.read_bytes() for p in [tmp_path / "run" / "run.json", *(tmp_path / "run" / ".hydra").iterdir()]}
    fewer = launch(cli(*common, "trainer.devices=1"), tmp_path)
    out = fewer.stdout + fewer.stderr
    assert fewer.returncode == 2 and f"run dir '{tmp_path / 'run'}' holds a run of 2 process(es), and this run would " \
        "have 1" in out and "resume it with trainer.devices=2" in out, out[-3000:]
    assert {p: p.read_bytes() for p in kept} == kept


def test_a_nan_on_one_rank_is_skipped_by_every_rank_together(tmp_path):
    """hooks.optimizer_step.nonfinite=skip under DDP: the ranks agree, so none waits in an all-reduce alone."""
    proc = launch(cli(*DATA, "data.batch_size=32", "trainer.max_epochs=1", "trainer.devices=2", "hydra.run.dir=run",
                      "model._target_=ddp_probe.NanOnRank", "+model.at=3", "hooks=[default,optimizer_step]",
                      "hooks.optimizer_step.nonfinite=skip"), tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_run(tmp_path / "run")["metrics"]["skipped_batches"] == 1
    assert_bitwise(weights(tmp_path / "run" / "weights_rank0.pt"), weights(tmp_path / "run" / "weights_rank1.pt"))


def test_a_metric_some_ranks_do_not_return_is_averaged_over_the_ranks_that_did(tmp_path):
    proc = launch(cli(*DATA, "data.batch_size=32", "trainer.max_epochs=1", "trainer.devices=2", "hydra.run.dir=run",
                      "model._target_=ddp_probe.MetricOnRank0"), tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = read_run(tmp_path / "run")["metrics"]
    assert metrics["val/only_rank0"] == 7.0 and 0 <= metrics["val/accuracy"] <= 1


@pytest.mark.parametrize("start", ["devices", "torchrun"])
def test_raising_max_epochs_of_a_finished_ddp_run_trains_it_on_on_every_rank(tmp_path, start):
    """The run dir's record is checked by every rank before any rank rewrites it, and spawned workers follow
    their parent's decision: a finished 1-epoch run asked for 2 trains its second epoch on both ranks."""
    run_dir = tmp_path / "run"
    base = ["data=synthetic", "data.train.size=320", "data.batch_size=32", f"hydra.run.dir={run_dir}",
            "hooks.tensorboard.log_dir=${hydra:runtime.output_dir}/tb"]  # resolvable only inside Hydra's job
    cmd = cli(*base, "trainer.devices=2") if start == "devices" else [*TORCHRUN, *base]
    proc = launch([*cmd, "trainer.max_epochs=1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = read_run(run_dir)["iter"]
    proc = launch([*cmd, "trainer.max_epochs=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_run(run_dir)
    assert record["status"] == "completed" and record["iter"] == 2 * first and record["attempt"] == 2
    assert "not training again" not in proc.stdout + proc.stderr + "".join(p.read_text() for p in run_dir.glob("*.log"))


def test_precise_bn_averages_the_ranks_statistics_so_every_rank_validates_one_model(tmp_path):
    """Each rank recomputes BatchNorm statistics on its own shard; averaged over the ranks, they are the
    same on every rank (which validate one model) and in the checkpoint: rank 0's."""
    proc = launch(cli("model=cnn", "model.channels=[4]", "data=synthetic", "data.train.size=400",
                      "+hooks.dump._target_=ddp_probe.DumpWeights", "hooks=[default,precise_bn]", "hooks.precise_bn.num_batches=2",
                      "trainer.max_epochs=1", "trainer.devices=2", "hydra.run.dir=run"), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [weights(tmp_path / "run" / f"weights_rank{r}.pt") for r in (0, 1)]
    stats = [k for k in ranks[0] if k.endswith(("running_mean", "running_var"))]
    assert stats and all(torch.equal(ranks[0][k], ranks[1][k]) for k in stats)


@pytest.mark.parametrize("env, dist, threads", [
    ({}, None, None),  # a single process outside any job: torch's own choice
    ({"OMP_NUM_THREADS": "3", "SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8"}, None, 3),  # the user's word wins
    ({"OMP_NUM_THREADS": "4,2"}, None, 4),  # nested levels: the first one's
    ({"OMP_NUM_THREADS": "", "LAUNCHER_CPUS_PER_TASK": "1"}, None, 1),  # empty, 0 or not a number: as if unset
    ({"OMP_NUM_THREADS": "0", "LAUNCHER_CPUS_PER_TASK": "1"}, None, 1),
    ({"OMP_NUM_THREADS": "abc"}, None, None),
    ({"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8"}, None, 8),  # a SLURM job of one task
    ({"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8"}, ("slurm", 4), 8),  # each SLURM task has its own CPUs
    ({"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8"}, ("spawn", 4), 2),  # trainer.devices=4 inside that task
    ({"SLURM_CPUS_PER_TASK": "8"}, None, None),  # left over outside a job: not this process's
    ({"LAUNCHER_CPUS_PER_TASK": "1"}, None, 1),  # a local sweep's job
    ({"LAUNCHER_CPUS_PER_TASK": "6"}, ("torchrun", 8), 1),
    ({"LAUNCHER_CPUS_PER_TASK": "6", "LOCAL_WORLD_SIZE": "2"}, ("torchrun", 4), 3),  # 2 of the 4 ranks on this machine
])
def test_each_process_takes_the_threads_its_job_was_given_shared_among_its_ranks(env, dist, threads, monkeypatch):
    from launcher.engine import distributed
    for key in ("OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "LAUNCHER_CPUS_PER_TASK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    dist_env = None if dist is None else distributed.DistEnv(0, 0, dist[1], "127.0.0.1", 29500, dist[0])
    assert distributed.threads_for(dist_env) == threads


@pytest.mark.parametrize("omp, cpus_per_task, max_parallel, jobs, says, ranks", [
    (None, None, 2, 8, None, 1),
    (None, None, 3, 8, "hydra.launcher.max_parallel=3: 3 jobs at once on 2 usable CPU cores", 1),
    (None, None, 3, 2, None, 1),  # only 2 jobs to run
    (None, 2, 2, 8, "hydra.launcher.cpus_per_task=2 with 2 jobs at once: 4 threads on 2 usable CPU cores", 1),
    (None, 2, 1, 8, None, 1),
    ("2", None, 2, 8, "OMP_NUM_THREADS=2 with 2 jobs at once: 4 threads on 2 usable CPU cores", 1),
    ("1", 2, 2, 8, None, 1),  # OMP_NUM_THREADS wins: 1 thread a job
    # trainer.devices=2: each job's 1 CPU shared by 2 processes, one thread each at least
    (None, None, 2, 8, "trainer.devices=2 with 2 jobs at once: 4 training processes on 2 usable CPU cores (1 a job); "
                       "hydra.launcher.max_parallel=1 gives each job 2", 2),
    (None, None, 1, 8, None, 2),  # one job at a time: its 2 CPUs, one per process
])
def test_a_local_sweep_says_when_its_jobs_would_take_more_threads_than_there_are_cores(
        omp, cpus_per_task, max_parallel, jobs, says, ranks, monkeypatch, caplog):
    from launcher.engine import distributed
    from launcher.sweep import local
    monkeypatch.setattr(distributed, "usable_cores", lambda: 2)
    monkeypatch.setattr(local, "usable_cores", lambda: 2)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    with caplog.at_level("WARNING", logger="launcher"):
        local.warn_if_oversubscribed(cpus_per_task, max_parallel, min(max_parallel, jobs), ranks)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ([] if says is None else [warnings[0]]) and (says is None or warnings[0].startswith(says)), warnings


def test_an_omp_num_threads_below_the_jobs_cpus_is_obeyed_and_named(monkeypatch, caplog):
    """A login shell's OMP_NUM_THREADS=1 travels into a SLURM job given 2 CPUs: it wins, and the run says so."""
    from launcher.engine import distributed
    before = torch.get_num_threads()
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        with caplog.at_level("WARNING", logger="launcher"):
            distributed.share_cores(None)
        assert torch.get_num_threads() == 1
        assert [r.getMessage() for r in caplog.records] == [
            "OMP_NUM_THREADS=1 gives this process 1 torch thread(s), where its share of the job's CPUs is 2 (unset "
            "OMP_NUM_THREADS for that)"]
        caplog.clear()
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
        with caplog.at_level("WARNING", logger="launcher"):
            distributed.share_cores(None)
        assert not caplog.records
    finally:
        torch.set_num_threads(before)


def test_a_sigterm_while_a_rank_joins_the_process_group_interrupts_no_system_call_and_still_arrives(tmp_path):
    """A SIGTERM (a sweep stopping its jobs, SLURM's preemption) while a rank waited in the rendezvous interrupted the
    retry's sleep, and torch printed the C++ stack of an "Interrupted system call" on the console. Held blocked until
    the join ends (the run only latches it until training), it reaches the handler after."""
    child = ("import signal, sys\nfrom launcher.engine.distributed import DistEnv, init\ngot = []\n"
             "signal.signal(signal.SIGTERM, lambda s, f: got.append(s))\nprint('ready', flush=True)\n"
             "try:\n    init(DistEnv(1, 1, 2, '127.0.0.1', int(sys.argv[1]), 'spawn'), device='cpu')\n"
             "except Exception as err:\n    print('failed:', type(err).__name__, flush=True)\n"
             "print('handled' if got else 'not handled', flush=True)\n")
    with socket.socket() as s:  # a port no master listens on: rank 1 retries until the timeout
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", child, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**ENV, "LAUNCHER_DIST_TIMEOUT_S": "3"}, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    for _ in range(5):
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.3)
    out, err = proc.communicate(timeout=60)
    assert "failed: DistributedError" in out and "handled" in out.splitlines()[-1], out + err[-2000:]
    assert out.splitlines()[-1] == "handled"
    assert "Interrupted system call" not in err, err[-2000:]


def _process_tree(root: int) -> list:
    """``root`` and its descendants, from /proc."""
    parents: dict = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [root], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _listening_addresses(pids: list) -> list:
    """The local addresses (ip, port) of the TCP sockets that ``pids`` hold open and listen on."""
    import ipaddress

    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with_link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if with_link.startswith("socket:["):
                    inodes.add(with_link[8:-1])
        except OSError:
            continue
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # each 32-bit word in the host's (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((ipaddress.ip_address(packed), int(port, 16)))
    return found


def test_a_spawned_ddp_run_listens_on_no_port_another_host_could_reach(tmp_path):
    """trainer.devices=2 had torch's TCPStore, which ranks exchange pickled objects through, listening on every
    interface (*:<port>), unauthenticated. The ranks meet through a file in a directory of the user's own, gone
    once the run ends; what the ranks listen on for each other is the loopback interface."""
    env = {**ENV, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    args = [*DATA, "data.batch_size=32", "trainer=iter", "trainer.max_iters=100", "trainer.devices=2", "hydra.run.dir=run",
            "hooks.jsonl.period=1", "hooks.jsonl.flush_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.1"]
    proc = subprocess.Popen(cli(*args), cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(tmp_path / "run" / "metrics.jsonl", proc)  # the process group is up: the ranks train
        pids = _process_tree(proc.pid)
        assert len(pids) >= 3, pids  # the launcher and its two workers
        listening = _listening_addresses(pids)
        assert all(ip.is_loopback or getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback
                   for ip, _ in listening), listening
        assert not [ip for ip, _ in listening if ip.is_unspecified], listening  # 0.0.0.0 or ::
    finally:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]
    assert not list((tmp_path / "tmp").glob("launcher-rendezvous-*"))  # the rendezvous is gone with the workers
    again = subprocess.run(cli(*args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # a rerun in the same run dir meets afresh, and resumes
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_run(tmp_path / "run")["resumed_from"] and not list((tmp_path / "tmp").glob("launcher-rendezvous-*"))
