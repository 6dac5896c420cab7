"""Kill a run at any moment, rerun the same command, and end bitwise where an uninterrupted run ends.

Every run here is the real CLI in a subprocess with a fixed run dir (``hydra.run.dir``), so
"the same command" resumes in place. A test hook (tests/pace.py) slows each step so the
kills land where the test wants: mid-epoch, at an epoch boundary, inside a checkpoint write.
"""
from __future__ import annotations

import json
import shutil
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import torch

from conftest import read_run

TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
ENV.pop("HYDRA_FULL_ERROR", None)
WRITE_DELAY = "LAUNCHER_TEST_CHECKPOINT_WRITE_DELAY"


def command(run_dir: Path, trainer: str, workers: int) -> List[str]:
    length = ["trainer.max_epochs=6"] if trainer == "epoch" else ["trainer.max_iters=100"]
    return [
        sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", f"trainer={trainer}", *length,
        "data=synthetic", "data.train.size=640", "data.batch_size=32", "data.shuffle=true", f"data.num_workers={workers}",
        "model.dropout=0.1",  # draws from the torch RNG every step
        "hooks.checkpointer.by_epoch=false", "hooks.checkpointer.period=7", "hooks.checkpointer.keep_last=2",
        "hooks.checkpointer.min_interval_secs=0",  # a checkpoint every period, however short the steps
        "hooks.jsonl.period=1", "hooks.jsonl.flush_secs=0", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.01",
    ]


def run_to_end(cmd: List[str], cwd: Path, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def rows(run_dir: Path) -> List[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def last_iter(run_dir: Path) -> int:
    return max((r["iter"] for r in rows(run_dir)), default=-1)


def run_until(cmd: List[str], cwd: Path, condition: Callable[[int], bool], env: Optional[dict] = None, sig=signal.SIGKILL) -> int:
    """Start ``cmd``, send ``sig`` as soon as ``condition(pid)`` holds; return the exit code."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if condition(proc.pid):
                proc.send_signal(sig)
                break
            time.sleep(0.002)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


def assert_same_final_state(run_dir: Path, reference: Path) -> None:
    got = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    want = torch.load(reference / "checkpoints" / "final.pt", weights_only=False)
    assert got["iter"] == want["iter"]
    for key, tensor in want["model"].items():
        assert torch.equal(got["model"][key], tensor), f"model.{key} differs"
    assert got["optimizer"]["param_groups"] == want["optimizer"]["param_groups"]
    for pid, state in want["optimizer"]["state"].items():
        for name, tensor in state.items():
            assert torch.equal(got["optimizer"]["state"][pid][name], tensor), f"optimizer state {pid}.{name} differs"


def assert_same_metrics(run_dir: Path, reference: Path) -> None:
    """Each scalar of each iteration logged once, with the value the uninterrupted run logged."""
    def scalars(d: Path) -> Dict[tuple, float]:
        logged: Dict[tuple, float] = {}
        for r in rows(d):
            for k, v in r.items():
                if k.startswith(("train/", "val/")) or k == "lr":
                    assert (r["iter"], k) not in logged, f"{k} at iter {r['iter']} logged twice in {d}"
                    logged[(r["iter"], k)] = v
        return logged

    assert scalars(run_dir) == scalars(reference)


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> Dict[tuple, Path]:
    """Uninterrupted runs, one per (trainer, workers), made once for the module."""
    return {}


def reference_for(references, tmp_path_factory, trainer: str, workers: int) -> Path:
    key = (trainer, workers)
    if key not in references:
        base = tmp_path_factory.mktemp(f"ref-{trainer}-{workers}")
        run_to_end(command(base / "run", trainer, workers), base)
        references[key] = base / "run"
    return references[key]


@pytest.mark.parametrize("trainer", ["epoch", "iter"])
@pytest.mark.parametrize("workers", [0, 2])
def test_killed_five_times_anywhere_then_resumed_ends_bitwise_equal(trainer, workers, tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, trainer, workers)
    run_dir = tmp_path / "run"
    cmd = command(run_dir, trainer, workers)
    rng = random.Random(f"{trainer}-{workers}")
    ckpts = run_dir / "checkpoints"
    slow_writes = {**ENV, WRITE_DELAY: "0.4"}

    def val_rows() -> int:
        return sum("val/accuracy" in r for r in rows(run_dir))

    # 1. mid-epoch, before any checkpoint exists
    first = rng.randint(2, 5)
    run_until(cmd, tmp_path, lambda pid: last_iter(run_dir) >= first)
    # 2. inside a checkpoint write
    run_until(cmd, tmp_path, lambda pid: any(ckpts.glob(f".*.tmp{pid}")), env=slow_writes)
    # 3. at an epoch boundary: as soon as the epoch's validation is logged
    seen = val_rows()
    run_until(cmd, tmp_path, lambda pid: val_rows() > seen)
    # 4. mid-epoch, at a random later step
    target = last_iter(run_dir) + rng.randint(3, 12)
    run_until(cmd, tmp_path, lambda pid: last_iter(run_dir) >= target)
    # 5. inside a checkpoint write again
    run_until(cmd, tmp_path, lambda pid: any(ckpts.glob(f".*.tmp{pid}")), env=slow_writes)

    assert not (ckpts / "final.pt").exists(), "a kill should have landed before the end"
    proc = run_to_end(cmd, tmp_path)
    assert "Resumed from" in proc.stdout + proc.stderr
    assert read_run(run_dir)["status"] == "completed" and read_run(run_dir)["attempt"] == 6
    assert_same_final_state(run_dir, reference)
    assert_same_metrics(run_dir, reference)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def tb_steps(d: Path) -> List[int]:
        acc = EventAccumulator(str(d))
        acc.Reload()
        return [e.step for e in acc.Scalars("train/loss")]

    steps = tb_steps(run_dir)
    assert steps == tb_steps(reference) and len(steps) == len(set(steps))


@pytest.mark.smoke
def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint_and_resumes_exactly(tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    cmd = command(run_dir, "iter", 0)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while last_iter(run_dir) < 30 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 75, out[-3000:]
    record = read_run(run_dir)
    assert record["status"] == "interrupted" and record["exit_code"] == 75
    stopped_at = record["iter"]
    assert f"Stopped at iteration {stopped_at}: received SIGTERM" in out
    assert f"Interrupted at iteration {stopped_at} (SIGTERM); exit code 75" in out
    assert (run_dir / "checkpoints" / f"iter_{stopped_at:07d}.pt").is_file()
    assert (run_dir / "checkpoints" / "last").read_text().strip() == f"iter_{stopped_at:07d}.pt"
    assert torch.load(run_dir / "checkpoints" / f"iter_{stopped_at:07d}.pt", weights_only=False)["iter"] == stopped_at

    proc = run_to_end(cmd, tmp_path)
    assert f"at iteration {stopped_at}" in proc.stdout + proc.stderr
    assert_same_final_state(run_dir, reference)
    assert_same_metrics(run_dir, reference)
    # the interrupt checkpoint stays out of the keep_last rotation and goes once a newer one is written
    assert not (run_dir / "checkpoints" / f"iter_{stopped_at:07d}.pt").exists()
    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
    assert final["hooks"] == torch.load(reference / "checkpoints" / "final.pt", weights_only=True)["hooks"]


def test_a_sigterm_while_the_trainer_is_built_stops_the_run_at_its_first_step(tmp_path, references, tmp_path_factory):
    """A preemption can come while the data and model are still being built: the run used to die of the signal,
    leaving run.json "running"; now it stops at its first step with a checkpoint, exit 75, and resumes."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    stopped = subprocess.run([*command(run_dir, "iter", 0), "+hooks.pace.signal_when_built=true"], cwd=tmp_path, env=ENV,
                             capture_output=True, text=True)
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert read_run(run_dir)["status"] == "interrupted" and read_run(run_dir)["iter"] == 0
    assert "Interrupted at iteration 0 (SIGTERM)" in stopped.stdout + stopped.stderr
    assert "objective" not in stopped.stdout + stopped.stderr  # not validated yet: no NaN objective to warn of
    run_to_end(command(run_dir, "iter", 0), tmp_path)
    assert_same_final_state(run_dir, reference)


def test_a_stop_between_writes_adds_no_row_an_uninterrupted_run_lacks(tmp_path):
    """Writers write every 5 steps; a SIGTERM in between leaves the rows since the last write to the resumed run."""
    def cmd(run_dir):
        return [*command(run_dir, "iter", 0), "hooks.jsonl.period=5", "hooks.tensorboard.period=5"]

    reference = tmp_path / "ref"
    run_to_end(cmd(reference), tmp_path)
    run_dir = tmp_path / "run"
    stopped = subprocess.run([*cmd(run_dir), "+hooks.pace.signal_after=21"], cwd=tmp_path, env=ENV, capture_output=True)
    assert stopped.returncode == 75
    assert read_run(run_dir)["iter"] == 22  # 22 steps done; the writes came after steps 4, 9, 14 and 19
    run_to_end([*cmd(run_dir), "+hooks.pace.signal_after=21"], tmp_path)
    assert_same_metrics(run_dir, reference)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def steps(d):
        acc = EventAccumulator(str(d))
        acc.Reload()
        return [e.step for e in acc.Scalars("train/loss")]

    assert steps(run_dir) == steps(reference)


def test_a_value_put_at_an_epochs_end_is_logged_once_in_its_own_epoch_when_the_run_stops_before_the_next_write(tmp_path):
    """A hook puts a value at each epoch's end, after the epoch's validation row is written: the next periodic
    write carries it, joined to that row. A run stopped in between, and resumed, logs the rows a run never
    stopped logs (no second row for that iteration), each with the epoch its iteration belongs to."""
    def cmd(run_dir):  # 8 steps an epoch, ending at iterations 7, 15, 23, 31; periodic writes after 4, 9, 14, 19...
        return [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", "trainer=epoch", "trainer.max_epochs=4",
                "data=synthetic", "data.train.size=320", "data.batch_size=32", "hooks.jsonl.period=5",
                "hooks.jsonl.flush_secs=0", "+hooks.tally._target_=pace.EpochTally", "+hooks.pace._target_=pace.Pace",
                "+hooks.pace.seconds=0.002", "+hooks.pace.signal_after=17"]

    def layout(d):
        return [(r["iter"], r["epoch"], sorted(k for k in r if k not in ("time", "data_time"))) for r in rows(d)]

    reference = tmp_path / "ref"
    stopped = subprocess.run(cmd(reference), cwd=tmp_path, env=ENV, capture_output=True)
    assert stopped.returncode == 75 and read_run(reference)["iter"] == 18  # tally/epochs at 15 not written yet
    run_to_end(cmd(reference), tmp_path)
    never_stopped = tmp_path / "never"
    run_to_end(cmd(never_stopped)[:-1], tmp_path)
    assert layout(reference) == layout(never_stopped)
    iters = [r["iter"] for r in rows(reference)]
    assert len(iters) == len(set(iters))
    assert all(r["epoch"] == r["iter"] // 8 for r in rows(reference))
    assert [r.get("tally/epochs") for r in rows(reference) if r["iter"] in (7, 15, 23, 31)] == [1, 2, 3, 4]


def test_killed_while_writing_final_pt_after_a_closing_validation_the_rerun_logs_that_validation_once(tmp_path):
    """evaluator.period=3 with 4 epochs: a validation closes the run after its last checkpoint. Killed inside
    the final.pt write, the rerun resumes from that checkpoint and validates again: its row replaces the kept one."""
    def cmd(run_dir):
        return [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", "trainer=epoch", "trainer.max_epochs=4",
                "data=synthetic", "data.train.size=640", "data.batch_size=32", "hooks.evaluator.period=3",
                "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.002"]

    def layout(d):
        return [(r["iter"], r["epoch"], sorted(k for k in r if k not in ("time", "data_time", "max_rss"))) for r in rows(d)]

    reference, run_dir = tmp_path / "ref", tmp_path / "run"
    run_to_end(cmd(reference), tmp_path)
    writing_final = lambda pid: any((run_dir / "checkpoints").glob(".final.pt.tmp*"))  # noqa: E731
    assert run_until(cmd(run_dir), tmp_path, writing_final, env={**ENV, WRITE_DELAY: "0.5"}) == -signal.SIGKILL
    assert not (run_dir / "checkpoints" / "final.pt").exists()
    run_to_end(cmd(run_dir), tmp_path)
    assert [r["iter"] for r in rows(run_dir)] == [19, 39, 47, 59, 63]
    assert layout(run_dir) == layout(reference)
    assert_same_metrics(run_dir, reference)


def test_a_periodic_checkpoint_a_kill_left_out_of_the_rotation_goes_with_the_next_one(tmp_path):
    """Killed after a periodic checkpoint was written and before the one it expired was removed, a run left that
    one on disk, and the state it wrote no longer listed it: no rotation removed it (keep_last=3 kept four, one
    more for each such kill)."""
    run_dir = tmp_path / "run"
    ckpts = run_dir / "checkpoints"
    base = [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", "data=synthetic", "data.train.size=320",
            "data.batch_size=32", "~hooks.tensorboard", "hooks.checkpointer.min_interval_secs=0"]
    run_to_end([*base, "trainer.max_epochs=5"], tmp_path)
    assert sorted(p.name for p in ckpts.glob("epoch_*.pt")) == ["epoch_0003.pt", "epoch_0004.pt", "epoch_0005.pt"]
    shutil.copy(ckpts / "epoch_0003.pt", ckpts / "epoch_0002.pt")  # what a kill in that window leaves
    (ckpts / "best.pt").write_bytes(b"a file of one's own")
    run_to_end([*base, "trainer.max_epochs=7"], tmp_path)  # trained on from final.pt
    assert sorted(p.name for p in ckpts.glob("epoch_*.pt")) == ["epoch_0005.pt", "epoch_0006.pt", "epoch_0007.pt"]
    assert (ckpts / "best.pt").read_bytes() == b"a file of one's own" and (ckpts / "final.pt").is_file()


def test_a_run_killed_outright_resumes_at_once_while_its_data_workers_live_on(tmp_path):
    """The run dir's lock goes with the killed process, not with the DataLoader workers it forked, which outlive it
    (for seconds; here stopped, for good): the resume is not refused as "a run is training in this dir"."""
    run_dir = tmp_path / "run"
    cmd = command(run_dir, "epoch", 2)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: List[int] = []
    try:
        deadline = time.monotonic() + 240
        while not list((run_dir / "checkpoints").glob("iter_*.pt")) and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = [int(pid) for task in Path(f"/proc/{proc.pid}/task").iterdir()
                   for pid in (task / "children").read_text().split()]
        assert workers, "the run has no DataLoader worker processes"
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        proc.kill()
        proc.wait(timeout=60)
        assert all(Path(f"/proc/{pid}").exists() for pid in workers)
        resumed = run_to_end(cmd, tmp_path)
        assert "Resumed from" in resumed.stdout + resumed.stderr
        assert read_run(run_dir)["status"] == "completed" and read_run(run_dir)["attempt"] == 2
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_truncated_newest_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    cmd = command(run_dir, "iter", 0)
    ckpts = run_dir / "checkpoints"
    run_until(cmd, tmp_path, lambda pid: len(list(ckpts.glob("iter_*.pt"))) >= 2 and last_iter(run_dir) >= 16)
    newest = ckpts / (ckpts / "last").read_text().strip()
    older = [p for p in ckpts.glob("iter_*.pt") if p != newest]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])

    proc = run_to_end(cmd, tmp_path)
    out = proc.stdout + proc.stderr
    assert f"Checkpoint {newest} is unreadable" in out
    assert f"resuming from {older[0]} instead" in out
    assert_same_final_state(run_dir, reference)


def test_rerunning_a_finished_run_does_not_train_again(tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    final = reference / "checkpoints" / "final.pt"
    before = (final.stat().st_mtime_ns, (reference / "metrics.jsonl").read_bytes())
    proc = run_to_end(command(reference, "iter", 0), reference.parent)
    assert "already finished" in proc.stdout + proc.stderr
    assert (final.stat().st_mtime_ns, (reference / "metrics.jsonl").read_bytes()) == before
    objective = json.loads((reference / "run.json").read_text())["metrics"]["val/accuracy"]
    assert f"val/accuracy = {objective:.4f}; not training again" in proc.stdout + proc.stderr  # as the end line rounds


def test_a_finished_run_whose_final_checkpoint_is_damaged_trains_on_to_a_readable_one(tmp_path, references, tmp_path_factory):
    """A damaged final.pt (cut short, overwritten) was reported as a finished run, exit 0: the user believed
    the final weights were there. The run now trains on from its newest readable checkpoint and writes them."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    final = run_dir / "checkpoints" / "final.pt"
    data = final.read_bytes()
    final.write_bytes(data[: len(data) - 100])  # its zip directory, at the end, is lost
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    out = proc.stdout + proc.stderr
    assert "already finished" not in out and f"Checkpoint {final} is unreadable" in out
    assert_same_final_state(run_dir, reference)

def test_a_finished_run_whose_checkpoints_are_gone_keeps_its_results_and_trains_again_only_when_asked(
        tmp_path, references, tmp_path_factory):
    """Its checkpoints deleted (to free the disk), the rerun trained it again from the start: it cut metrics.jsonl and
    rewrote run.json before saving anything, so a rerun that then failed (the disk full again) lost the results."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "checkpoints").write_text("")  # a file in its place: no checkpoint either
    kept = {name: (run_dir / name).read_bytes() for name in ("run.json", "metrics.jsonl")}
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "already finished" in out and (
        f"(its checkpoints are gone from {run_dir / 'checkpoints'}: trainer.resume=false trains it again from the start)") in out
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept
    proc = subprocess.run([*command(run_dir, "iter", 0), "trainer.max_iters=110"], cwd=tmp_path, env=ENV, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "holds no checkpoint to train it on from (its results stay in run.json); train it " \
        "again from the start with trainer.resume=false" in out and "Traceback" not in out, out[-3000:]
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept
    (run_dir / "checkpoints").unlink()
    proc = run_to_end([*command(run_dir, "iter", 0), "trainer.resume=false"], tmp_path)
    assert_same_final_state(run_dir, reference)
    # a run that never had a checkpointer (hooks=none): its checkpoints were said to be "gone" from a dir never made
    bare = [*(a for a in command(tmp_path / "bare", "iter", 0) if not a.lstrip("+").startswith("hooks.")), "hooks=none",
            "trainer.max_iters=20"]
    run_to_end(bare, tmp_path)
    out = "".join(run_to_end(bare, tmp_path).stdout)
    assert "already finished" in out and "(it saved no checkpoint, having no checkpointer hook: trainer.resume=false " \
        "trains it again from the start)" in out and "gone" not in out, out[-3000:]
    proc = subprocess.run([*bare, "trainer.max_iters=30"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "and saved no checkpoint (it ran without a checkpointer hook) to train it on from" in \
        proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_explicit_resume_path_trains_on_even_when_the_run_finished(tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    final = run_dir / "checkpoints" / "final.pt"
    cmd = [*command(run_dir, "iter", 0), "trainer.max_iters=110", f"trainer.resume={final}"]
    proc = run_to_end(cmd, tmp_path)
    assert "already finished" not in proc.stdout + proc.stderr
    assert torch.load(final, weights_only=False)["iter"] == 110


class RunsCodeWhenUnpickled:
    """Unpickling this creates ``marker``: what a hostile file could do with any code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_raw_pickle_as_final_pt_of_a_finished_run_is_skipped_never_unpickled(tmp_path, references, tmp_path_factory):
    """The zip check called it damaged, then the resume unpickled it, running its code."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir, marker = tmp_path / "run", tmp_path / "code_ran"
    shutil.copytree(reference, run_dir)
    final = run_dir / "checkpoints" / "final.pt"
    final.write_bytes(pickle.dumps({"model": {}, "iter": 0, "x": RunsCodeWhenUnpickled(marker)}))
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    out = proc.stdout + proc.stderr
    assert not marker.exists()
    assert f"Checkpoint {final} is unreadable (not a torch.save archive, and it holds Python objects (io.open)" in out
    assert f"resuming from {run_dir / 'checkpoints' / 'iter_0000098.pt'} instead" in out
    assert_same_final_state(run_dir, reference)


def test_files_planted_in_checkpoints_are_not_resumed_from(tmp_path, references, tmp_path_factory):
    """Any *.pt there was resumed from, a link to a file anywhere too, newest first when ``last`` names none."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir, marker = tmp_path / "run", tmp_path / "code_ran"
    shutil.copytree(reference, run_dir)
    ckpts = run_dir / "checkpoints"
    payload = {"model": {}, "iter": 0, "x": RunsCodeWhenUnpickled(marker)}
    torch.save(payload, tmp_path / "outside.pt")
    torch.save(payload, ckpts / "evil.pt")  # no name the checkpointer writes
    (ckpts / "iter_9999999.pt").symlink_to(tmp_path / "outside.pt")  # a link out of the run dir
    (ckpts / "last").write_text("../../outside.pt\n")  # no name of this dir: loading goes by modification time
    proc = run_to_end([*command(run_dir, "iter", 0), "trainer.max_iters=110"], tmp_path)
    assert not marker.exists()
    assert f"Resumed from {ckpts / 'final.pt'} at iteration 100" in proc.stdout + proc.stderr
    assert torch.load(ckpts / "final.pt")["iter"] == 110


def test_a_payload_in_one_hooks_state_is_refused_unless_trainer_trust_checkpoint(tmp_path, references, tmp_path_factory):
    """A checkpoint of the launcher's own naming, valid but for one hook's state: resuming ran its code."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir, marker = tmp_path / "run", tmp_path / "code_ran"
    shutil.copytree(reference, run_dir)
    final = run_dir / "checkpoints" / "final.pt"
    state = torch.load(final)
    state["hooks"]["checkpointer"]["note"] = RunsCodeWhenUnpickled(marker)
    torch.save(state, final)
    record = (run_dir / "run.json").read_bytes()
    cmd = [*command(run_dir, "iter", 0), "trainer.max_iters=110"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and not marker.exists(), out[-3000:]
    (line,) = [ln for ln in out.splitlines() if "Config error" in ln]
    assert f"trainer.resume: '{final}' holds Python objects (io.open)" in line and "run any code" in line \
        and "trainer.trust_checkpoint=true" in line
    assert (run_dir / "run.json").read_bytes() == record  # the finished run's record stands
    proc = run_to_end([*cmd, "trainer.trust_checkpoint=true"], tmp_path)  # the opt-in: loaded in full
    assert marker.exists() and f"Loading {final} in full with its Python objects (io.open)" in proc.stdout + proc.stderr
    changes = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "started with other settings" in ln]
    assert changes and "trust_checkpoint" not in changes[0]  # how this command reads files: no change of the run


def test_a_downloaded_checkpoint_given_as_trainer_resume_never_runs_its_code(tmp_path):
    from launcher.models import MLP

    downloaded, marker = tmp_path / "downloaded.pt", tmp_path / "code_ran"
    torch.save({"model": MLP().state_dict(), "iter": 0, "x": RunsCodeWhenUnpickled(marker)}, downloaded)
    proc = subprocess.run([*command(tmp_path / "run", "iter", 0), f"trainer.resume={downloaded}"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and not marker.exists(), out[-3000:]
    (line,) = [ln for ln in out.splitlines() if "Config error" in ln]
    assert f"trainer.resume: '{downloaded}' holds Python objects (io.open)" in line and "trainer.trust_checkpoint=true" in line


REFUSED = [
    ("model.hidden=[32]", ["model.hidden: [256] -> [32]"]),
    # a fresh start would overwrite the dir's checkpoints and mix its metrics with the new run's
    ("trainer.resume=false", ["trainer.resume=false: run dir {run_dir!r} holds checkpoints of an earlier run (final.pt"]),
]


@pytest.mark.parametrize("override, words", REFUSED, ids=[o for o, _ in REFUSED])
def test_a_rerun_that_does_not_fit_the_run_dir_is_refused_and_leaves_it_as_it_was(override, words, tmp_path, references,
                                                                                  tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    files = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"}
    proc = subprocess.run([*command(run_dir, "iter", 0), override], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert "choose a new hydra.run.dir" in out
    for word in words:
        assert word.format(run_dir=str(run_dir)) in out, out[-2000:]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"} == files


FAILS_AS_IT_STARTS = [
    # refused while the hooks are built, before the trainer exists
    ("hooks.console.period=0", "ConsoleWriter: period should be an integer greater than zero, got 0"),
    # refused once the run resumed from final.pt, when the schedule is built (StepLR wants its step_size)
    ("hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR", "+hooks.lr_scheduler.scheduler.step_size="),
]


@pytest.mark.parametrize("override, words", FAILS_AS_IT_STARTS, ids=["while building", "after resuming"])
def test_a_longer_rerun_with_a_bad_value_keeps_the_finished_runs_record(override, words, tmp_path, references,
                                                                        tmp_path_factory):
    """Raising max_iters passes the rerun check (it trains on); a bad value found only as the run starts then
    rewrote run.json as failed (metrics and objective gone) and .hydra/ with the refused config."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    files = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"}
    proc = subprocess.run([*command(run_dir, "iter", 0), "trainer.max_iters=110", override], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and words in out, out[-2000:]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"} == files
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    assert "already finished" in proc.stdout + proc.stderr


def test_raising_max_iters_trains_a_finished_run_on_from_its_final_checkpoint(tmp_path, references, tmp_path_factory):
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    proc = run_to_end([*command(run_dir, "iter", 0), "trainer.max_iters=110"], tmp_path)
    assert "training it on to the new length" in proc.stdout + proc.stderr
    assert "the LR schedule goes on from its checkpointed state, made for the old length" in proc.stdout + proc.stderr
    record = read_run(run_dir)
    assert record["status"] == "completed" and record["iter"] == 110 and record["attempt"] == 2
    assert record["resumed_from"] == str(run_dir / "checkpoints" / "final.pt")
    assert torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)["iter"] == 110
    assert "max_iters: 110" in (run_dir / ".hydra" / "config.yaml").read_text()
    logged = [r["iter"] for r in rows(run_dir) if "train/loss" in r]
    assert logged == list(range(110)), "each step logged once, the first 100 as the first attempt logged them"

    proc = run_to_end([*command(run_dir, "iter", 0), "trainer.max_iters=110", "hooks.jsonl.period=5"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "already finished" in out and "Not applied, as the run is over: hooks.jsonl.period: 1 -> 5" in out


def test_settings_a_later_launcher_added_are_no_change_of_the_users(tmp_path, references, tmp_path_factory):
    """A run dir of an earlier launcher, whose record lacks settings added since (data.persistent_workers), was
    warned "started with other settings" or "Not applied, as the run is over: data.persistent_workers: (absent) ->
    False" on every rerun of the very same command; a value this command sets for such a key still is."""
    import json

    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    del record["config"]["data"]["persistent_workers"], record["config"]["hooks"]["jsonl"]["flush_secs"]
    (run_dir / "run.json").write_text(json.dumps(record))
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    out = proc.stdout + proc.stderr
    assert "already finished" in out and "Not applied" not in out and "other settings" not in out, out[-3000:]
    assert "Settings the run's record lacks (added to the config files since it started), at their values now: " \
        "data.persistent_workers: (absent) -> False, hooks.jsonl.flush_secs: (absent) -> 0.0" in out, out[-3000:]
    proc = run_to_end([*command(run_dir, "iter", 0), "data.persistent_workers=true"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "Not applied, as the run is over: data.persistent_workers: (absent) -> True" in out, out[-3000:]
    # a hook the run was started without (~hooks.tensorboard) that this command has: the user's change, not the launcher's
    record = json.loads((run_dir / "run.json").read_text())
    record["overrides"].append("~hooks.tensorboard")
    del record["config"]["hooks"]["tensorboard"]
    (run_dir / "run.json").write_text(json.dumps(record))
    proc = run_to_end(command(run_dir, "iter", 0), tmp_path)
    out = proc.stdout + proc.stderr
    assert "Not applied, as the run is over: hooks.tensorboard: (absent) -> " in out, out[-3000:]


def test_a_run_trained_on_without_its_checkpointer_says_what_it_leaves_unsaved(tmp_path, references, tmp_path_factory):
    """``~hooks.checkpointer`` on a rerun that trains on: it was listed as each of the hook's five keys changed to
    '<absent>', and nothing said the run would save nothing, leaving final.pt at the old length's model while
    run.json recorded the new end (a rerun with the checkpointer back then returned that record)."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    # the test's own pace hook is no checkpointer, but may be one: the built-in hooks alone are warned before training
    builtin = [a for a in command(run_dir, "iter", 0) if "hooks.pace" not in a]
    proc = run_to_end([*builtin, "trainer.max_iters=110", "~hooks.checkpointer"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "continuing with: trainer.max_iters: 100 -> 110, hooks.checkpointer: <launcher.hooks.checkpoint.PeriodicCheckpointer> " \
        "-> (absent)" in out, out[-3000:]
    assert f"This run resumes from its checkpoints in {run_dir / 'checkpoints'} but has no checkpointer hook " \
        "(hooks.checkpointer): it saves none, so a stop loses what it trains" in out
    assert torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)["iter"] == 100 and read_run(run_dir)["iter"] == 110

    # a hook of the user's own that saves checkpoints: no warning (it was warned as if nothing would be saved)
    saving = tmp_path / "saving"
    shutil.copytree(reference, saving)
    proc = run_to_end([*command(saving, "iter", 0), "trainer.max_iters=110", "~hooks.checkpointer",
                       "+hooks.save._target_=pace.SaveAtEnd"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "checkpointer hook" not in out, out[-3000:]
    assert torch.load(saving / "checkpoints" / "final.pt", weights_only=True)["iter"] == 110
    # one that saves none: said after training, with where a rerun resumes
    quiet = tmp_path / "quiet"
    shutil.copytree(reference, quiet)
    proc = run_to_end([*command(quiet, "iter", 0), "trainer.max_iters=110", "~hooks.checkpointer"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "resumes from its checkpoints" not in out, out[-3000:]
    assert f"This run resumed from its checkpoints in {quiet / 'checkpoints'} and trained on to iteration 110, but no " \
        "hook saved a checkpoint there: they hold iteration 100's model, and a longer rerun trains on from there" in out, \
        out[-3000:]
    # stopped by a signal there: a rerun goes back to the checkpoint it resumed from ("starts over", it said)
    shutil.rmtree(quiet)
    shutil.copytree(reference, quiet)
    proc = subprocess.run([*command(quiet, "iter", 0), "trainer.max_iters=110", "~hooks.checkpointer",
                           "+hooks.pace.signal_after=104"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 75 and "Interrupted at iteration 105 (SIGTERM); exit code 75. No checkpoint of it " \
        "was written (no checkpointer hook): the same command resumes from final.pt, an older one." in out, out[-3000:]
    assert "no hook saved" not in out  # said once
    # failed there: said too (only a run that ended said it), with what its rerun does
    shutil.rmtree(quiet)
    shutil.copytree(reference, quiet)
    proc = subprocess.run([*command(quiet, "iter", 0), "trainer.max_iters=110", "~hooks.checkpointer",
                           "+hooks.boom._target_=pace.BreaksAt", "+hooks.boom.at=104"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "this hook broke at iteration 104" in out, out[-3000:]
    assert "they hold iteration 100's model, and a rerun goes on from there" in out, out[-3000:]


def test_a_finished_run_asked_for_another_objective_reports_it_without_calling_it_not_applied(tmp_path, references, tmp_path_factory):
    """It reported val/loss and then warned "Not applied, as the run is over: objective ..."; a misspelt one printed
    "val/acc = None" with no word of the names it has."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    loss = read_run(run_dir)["metrics"]["val/loss"]
    out = "".join(run_to_end([*command(run_dir, "iter", 0), "objective=val/loss", "objective_mode=min"], tmp_path).stdout)
    assert f"This run already finished (completed): val/loss = {loss:.4f}; not training again" in out and "Not applied" not in out
    proc = run_to_end([*command(run_dir, "iter", 0), "objective=val/acc"], tmp_path)
    out = proc.stdout + proc.stderr
    assert "objective 'val/acc' is not among the finished run's metrics" in out and "objective=val/accuracy" in out
    assert "val/acc = nan" in out and "Not applied" not in out



def test_a_value_no_run_takes_is_refused_at_a_finished_run_not_warned_as_not_applied(tmp_path, references, tmp_path_factory):
    """A rerun of a finished run returns its result and lists the changes it does not apply: a value no run would take
    (``trainer.max_iters=0``, ``hooks.jsonl.period=0``) ended in that warning and exit 0, or, in a dir with checkpoints,
    as "another config" without saying what was wrong with the value; nothing in the run dir changes."""
    reference = reference_for(references, tmp_path_factory, "iter", 0)
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"}  # the log says why
    for bad, said in ((["trainer.max_iters=0"], "trainer.max_iters should be an integer greater than zero, got 0"),
                      (["hooks.jsonl.period=0"], "hooks.jsonl ("),
                      (["hooks.checkpointer.keep_last=-1"], "hooks.checkpointer ("),
                      (["data.num_workers=-1"], "data.num_workers should be an integer zero or more, got -1")):
        proc = subprocess.run([*command(run_dir, "iter", 0), *bad], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                              timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and f"Config error: {said}" in out and "already finished" not in out, out[-3000:]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "train.log"} == before


FULL = ["hooks=full", "model=cnn", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0.01",
        "hooks.optimizer_step.accumulate=2", "hooks.checkpointer.by_epoch=false", "hooks.checkpointer.period=7",
        "hooks.checkpointer.min_interval_secs=0", "hooks.jsonl.period=1", "hooks.jsonl.flush_secs=0",
        "hooks.early_stopping.patience=2"]


def full_command(run_dir: Path) -> List[str]:
    base = [a for a in command(run_dir, "iter", 0) if not a.startswith(("hooks.", "+hooks.", "model."))]
    return [*base, *FULL]


def test_every_hook_state_survives_kills_with_hooks_full(tmp_path):
    ref = tmp_path / "ref"
    made = run_to_end(full_command(ref), tmp_path)
    assert "holds Python objects" not in made.stdout + made.stderr  # every built-in hook's state resumes as it is
    run_dir = tmp_path / "run"
    cmd = full_command(run_dir)
    ckpts = run_dir / "checkpoints"
    slow_writes = {**ENV, WRITE_DELAY: "0.4"}
    run_until(cmd, tmp_path, lambda pid: last_iter(run_dir) >= 10)
    run_until(cmd, tmp_path, lambda pid: any(ckpts.glob(f".*.tmp{pid}")), env=slow_writes)
    seen = sum("val/accuracy" in r for r in rows(run_dir))
    run_until(cmd, tmp_path, lambda pid: sum("val/accuracy" in r for r in rows(run_dir)) > seen)
    assert not (ckpts / "final.pt").exists()
    resumed = run_to_end(cmd, tmp_path)  # each checkpoint read with weights_only=True
    assert "Resumed from" in resumed.stdout + resumed.stderr
    assert_same_final_state(run_dir, ref)
    assert_same_metrics(run_dir, ref)
    # plain types only: torch.load's default weights_only=True reads a checkpoint with every hook's state
    got = torch.load(ckpts / "final.pt")["hooks"]
    want = torch.load(ref / "checkpoints" / "final.pt")["hooks"]
    for key, tensor in want["ema"]["ema"].items():
        assert torch.equal(got["ema"]["ema"][key], tensor), f"ema {key} differs"
    assert got["early_stopping"] == want["early_stopping"]
    assert got["lr_scheduler"] == want["lr_scheduler"]


@pytest.mark.parametrize("hooks", [
    ["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau",
     "+hooks.lr_scheduler.scheduler.patience=0", "+hooks.lr_scheduler.scheduler.factor=0.5"],
    ["hooks=[default,ema]", "hooks.ema.eval_with_ema=false"],
], ids=["plateau", "ema"])
def test_a_run_stopped_after_its_last_step_resumes_to_the_end_an_uninterrupted_run_has(hooks, tmp_path):
    """SIGTERM after the last step (its validation done, final.pt not yet written): the resumed run used to
    validate once more, not knowing of the last validation, and ReduceLROnPlateau stepped once more."""
    def cmd(run_dir):
        return [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", "data=synthetic", "data.train.size=640",
                "data.batch_size=32", "trainer.max_epochs=3", *hooks]

    reference = tmp_path / "ref"
    run_to_end(cmd(reference), tmp_path)
    run_dir = tmp_path / "run"
    stopped = subprocess.run([*cmd(run_dir), "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0",
                              "+hooks.pace.signal_after=47"], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert stopped.returncode == 75 and read_run(run_dir)["iter"] == 48, stopped.stderr[-3000:]
    run_to_end(cmd(run_dir), tmp_path)
    assert_same_final_state(run_dir, reference)
    got = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    want = torch.load(reference / "checkpoints" / "final.pt", weights_only=False)
    assert got["hooks"]["lr_scheduler"] == want["hooks"]["lr_scheduler"]
    assert got["last_val"] == want["last_val"]
    assert got["storage"]["keys"] == want["storage"]["keys"]
    assert got["storage"]["lengths"] == want["storage"]["lengths"]  # validated three times, not four


def noisy_command(run_dir: Path) -> List[str]:
    """Two epochs of 16 batches from a dataset drawing random augmentation in ``__getitem__``, in 2 workers."""
    replaced = ("trainer.max_iters=", "hooks.checkpointer.period=", "+hooks.pace.seconds=")
    base = [a for a in command(run_dir, "iter", 2) if not a.startswith(replaced)]
    return [*base, "trainer.max_iters=32", "hooks.checkpointer.period=5", "+hooks.pace.seconds=0.02",
            "data.train._target_=noisy_data.NoisySynthetic"]


@pytest.mark.parametrize("persistent", [False, True])
def test_random_augmentation_in_workers_resumes_mid_epoch_bitwise_equal(persistent, tmp_path):
    """Each batch's draws follow (seed, epoch, batch), not which worker loads it after a resume's skip, nor
    whether the workers persist from epoch to epoch (the reference run's do not)."""
    reference = tmp_path / "ref"
    run_to_end(noisy_command(reference), tmp_path)
    run_dir = tmp_path / "run"
    cmd = [*noisy_command(run_dir), "+hooks.pace.signal_after=7", f"data.persistent_workers={str(persistent).lower()}"]
    stopped = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True)
    assert stopped.returncode == 75 and read_run(run_dir)["iter"] == 8  # mid-epoch 0, an interrupt checkpoint
    # kill -9 mid-epoch 1, past the periodic checkpoint after iteration 19
    run_until(cmd, tmp_path, lambda pid: last_iter(run_dir) >= 21)
    assert not (run_dir / "checkpoints" / "final.pt").exists(), "the kill should have landed before the end"
    proc = run_to_end(cmd, tmp_path)
    assert "Resumed from" in proc.stdout + proc.stderr
    assert_same_final_state(run_dir, reference)
    assert_same_metrics(run_dir, reference)


def test_a_loader_skipping_batches_loads_the_rest_as_a_whole_epoch_does_with_workers_shards_and_getitems():
    """A dataset's own ``__getitems__`` still loads the batches, sharded as under DDP, with the same draws."""
    from launcher.data import DataLoaders
    from noisy_data import NoisyBatches

    loader = DataLoaders(NoisyBatches(size=400), batch_size=16, num_workers=2, seed=3).train_loader(rank=1, world_size=2)
    loader.set_epoch(2)
    full = list(loader)
    loader.set_epoch(2, skip_batches=5)
    resumed = list(loader)
    assert len(full) == 10 and len(resumed) == 5 and all(marked.all() for _, _, marked in full)
    for (x, y, _), (x2, y2, _) in zip(full[5:], resumed):
        assert torch.equal(x, x2) and torch.equal(y, y2)


def test_persistent_workers_stay_from_epoch_to_epoch_and_draw_what_fresh_ones_draw():
    """data.persistent_workers=true keeps the workers (no start-up each epoch); the draws still follow
    (seed, epoch, batch), so they equal fresh workers', also for an epoch resumed past its first batches."""
    from launcher.data import DataLoaders
    from noisy_data import NoisyWithPid

    def epochs(persistent):
        loader = DataLoaders(NoisyWithPid(size=200), batch_size=16, num_workers=2, seed=3,
                             persistent_workers=persistent, prefetch_factor=1).train_loader()
        out = []
        for epoch, skip in ((0, 0), (1, 0), (1, 3)):
            loader.set_epoch(epoch, skip)
            out.append(list(loader))
        return out

    kept, fresh = epochs(True), epochs(False)
    for a, b in zip(kept, fresh):
        assert len(a) == len(b) and all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y, _), (x2, y2, _) in zip(a, b))
    pids = [{int(p) for _, _, batch_pids in epoch for p in batch_pids} for epoch in kept]
    assert len(pids[0]) == 2 and pids[0] == pids[1] == pids[2]
    fresh_pids = [{int(p) for _, _, batch_pids in epoch for p in batch_pids} for epoch in fresh]
    assert not fresh_pids[0] & fresh_pids[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_without_length_resumes_mid_pass_bitwise_equal(workers, tmp_path):
    """An IterableDataset under trainer=iter: epochs end where the stream does; a resume reads the pass again up
    to where it stopped (in the workers, or in the main process with the run's random state put back after)."""
    def cmd(run_dir):
        base = [a for a in noisy_command(run_dir) if not a.startswith(("data.train._target_=", "data.num_workers="))]
        return [*base, "data.train._target_=noisy_data.NoisyStream", f"data.num_workers={workers}",
                "hooks.evaluator.by_epoch=false", "hooks.evaluator.period=10"]

    reference = tmp_path / "ref"
    run_to_end(cmd(reference), tmp_path)
    want = torch.load(reference / "checkpoints" / "final.pt", weights_only=False)
    # 16 batches a pass (512 samples / 32): the second pass's end is found only by asking for a 33rd batch
    assert (want["iter"], want["epoch"], want["inner_iter"]) == (32, 1, 16)
    run_dir = tmp_path / "run"
    stopped = subprocess.run([*cmd(run_dir), "+hooks.pace.signal_after=24"], cwd=tmp_path, env=ENV, capture_output=True)
    assert stopped.returncode == 75 and read_run(run_dir)["iter"] == 25  # mid-pass 2
    proc = run_to_end(cmd(run_dir), tmp_path)
    assert "Resumed from" in proc.stdout + proc.stderr
    assert_same_final_state(run_dir, reference)
    assert_same_metrics(run_dir, reference)


@pytest.mark.parametrize("generator", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_users_own_shuffling_loader_resumes_mid_epoch_bitwise_equal(generator, workers, tmp_path):
    """torch's DataLoader(shuffle=True) of the user's own, drawing its order and its workers' seeds from the global
    generator or its own: a run resumed mid-epoch read the epoch's first batches again but drew the epoch's order
    anew (from the random state at the checkpoint, or a generator seeded afresh), and trained on other batches."""
    def cmd(run_dir):
        base = [a for a in noisy_command(run_dir) if not a.startswith(("data.num_workers=", "hooks.checkpointer.period="))]
        return [*base, "data._target_=noisy_data.UserLoaders", f"data.num_workers={workers}", f"+data.generator={generator}",
                "hooks.checkpointer.period=50"]

    reference = tmp_path / "ref"
    run_to_end(cmd(reference), tmp_path)
    run_dir = tmp_path / "run"
    stopped = subprocess.run([*cmd(run_dir), "+hooks.pace.signal_after=20"], cwd=tmp_path, env=ENV, capture_output=True)
    assert stopped.returncode == 75 and read_run(run_dir)["iter"] == 21  # mid-epoch 2 (16 batches an epoch)
    proc = run_to_end(cmd(run_dir), tmp_path)
    assert "Resumed from" in proc.stdout + proc.stderr
    assert_same_final_state(run_dir, reference)
    assert_same_metrics(run_dir, reference)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_validation_more_or_less_changes_nothing_in_the_training_that_follows(persistent, tmp_path):
    """A run of 20 iterations validates at its end (mid-epoch), which one of 40 does not; lengthened to 40, it
    must still train on as the 40-iteration run did, dropout draws included. With persistent val workers the
    resumed process's first validation is one the uninterrupted process never started its workers for."""
    def cmd(run_dir, iters):
        replaced = ("trainer.max_iters=", "+hooks.pace.seconds=", "data.num_workers=")
        return [*[a for a in command(run_dir, "iter", 2) if not a.startswith(replaced)], f"trainer.max_iters={iters}",
                "+hooks.pace.seconds=0", "data.num_workers=2", f"data.persistent_workers={str(persistent).lower()}",
                "hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR",  # the same for any length
                "+hooks.lr_scheduler.scheduler.step_size=5"]

    reference = tmp_path / "ref"
    run_to_end(cmd(reference, 40), tmp_path)
    run_dir = tmp_path / "run"
    run_to_end(cmd(run_dir, 20), tmp_path)
    assert [r["iter"] for r in rows(run_dir) if "val/loss" in r] == [15, 19]  # its end's validation, mid-epoch
    proc = run_to_end(cmd(run_dir, 40), tmp_path)
    assert "training it on to the new length" in proc.stdout + proc.stderr
    assert_same_final_state(run_dir, reference)


def test_a_run_resumed_with_another_thread_count_says_it_is_no_longer_bitwise(tmp_path):
    """The thread count changes the order of the math, so its last bits: ``run.json`` records it, and an attempt
    that trains on with another count says so (and how to keep the earlier one)."""
    from conftest import FAST, run_cli

    run_dir = tmp_path / "run"
    first = run_cli([*FAST, "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"], tmp_path, env={"OMP_NUM_THREADS": "2"})
    assert first.returncode == 0 and read_run(run_dir)["threads"] == 2, first.stderr[-2000:]
    again = run_cli([*FAST, "trainer.max_epochs=2", f"hydra.run.dir={run_dir}"], tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert again.returncode == 0 and read_run(run_dir)["threads"] == 1, again.stderr[-2000:]
    assert ("This run's earlier attempt trained with 2 torch thread(s), this one with 1: it goes on, but its math is "
            "no longer bitwise that of one uninterrupted run (OMP_NUM_THREADS=2 keeps the earlier count)") in again.stdout
    same = run_cli([*FAST, "trainer.max_epochs=3", f"hydra.run.dir={run_dir}"], tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert same.returncode == 0 and "earlier attempt trained with" not in same.stdout + same.stderr
