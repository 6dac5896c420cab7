"""The built-in hooks, in process: what each one does to a run."""
from __future__ import annotations

import fractions
import functools
import logging
import json
import math

import pytest
import torch

from conftest import ToyData, make_trainer
from launcher.hooks import HookBase
from launcher.hooks.checkpoint import PeriodicCheckpointer
from launcher.hooks.evaluator import Evaluator
from launcher.hooks.lr_scheduler import LRScheduler
from launcher.hooks.timer import IterationTimer
from launcher.hooks.writers import ConsoleWriter, JSONWriter, TensorBoardWriter


def test_cosine_schedule_spans_the_run_when_t_max_is_left_out():
    sched = functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR)
    hook = LRScheduler(sched)
    trainer = make_trainer("iter", hooks=[hook], max_iters=10)
    trainer.train()
    assert hook.scheduler.T_max == 10
    lrs = [v for v, _ in trainer.storage.history("lr").values()]
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[5] == pytest.approx(0.1 * (1 + math.cos(math.pi * 5 / 10)) / 2)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_schedule_by_epoch_steps_once_per_epoch_and_keeps_given_horizon():
    hook = LRScheduler(functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5), by_epoch=True)
    trainer = make_trainer("epoch", hooks=[hook], max_epochs=3)
    trainer.train()
    lrs = [v for v, _ in trainer.storage.history("lr").values()]
    assert lrs == [0.1] * 4 + [0.05] * 4 + [0.025] * 4


def test_reduce_on_plateau_steps_on_the_monitored_metric():
    hook = LRScheduler(functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, patience=0, factor=0.5), monitor="val/accuracy")
    trainer = make_trainer("epoch", hooks=[hook, Evaluator()], max_epochs=3)
    trainer.train()
    assert hook.scheduler.last_epoch == 3  # one step per validation


def test_evaluator_validates_every_period_and_once_at_the_end():
    calls = []
    trainer = make_trainer("iter", hooks=[Evaluator(period=4, by_epoch=False)], max_iters=10)
    orig = trainer.validate
    trainer.validate = lambda: (calls.append(trainer.iter), orig())[1]
    trainer.train()
    assert calls == [3, 7, 10]  # after steps 4 and 8, then at the end (10 steps done)


def test_evaluator_does_not_repeat_a_current_validation_at_the_end():
    calls = []
    trainer = make_trainer("epoch", hooks=[Evaluator(period=1)], max_epochs=2)
    orig = trainer.validate
    trainer.validate = lambda: (calls.append(trainer.iter), orig())[1]
    trainer.train()
    assert calls == [4, 8]


@pytest.mark.parametrize("validates", ["evaluator", "workflow"])
def test_a_hook_sees_the_epochs_completed_in_before_val_whoever_validates(validates, tmp_path):
    """The evaluator's validation (in after_epoch) showed epoch one lower than a workflow's val phase after the
    same training: a hook naming its output by epoch wrote two names for the same weights."""
    seen = []

    class Record(HookBase):
        def before_val(self):
            seen.append(("before_val", self.trainer.epoch, self.trainer.inner_iter))

        def after_val(self):
            seen.append(("after_val", self.trainer.epoch, self.trainer.inner_iter))

        def after_epoch(self):  # what after_epoch sees is kept: the ending epoch's 0-based index
            seen.append(("after_epoch", self.trainer.epoch, self.trainer.inner_iter))

    if validates == "evaluator":
        trainer = make_trainer("epoch", hooks=[Evaluator(), Record(priority=90), JSONWriter(period=100)], max_epochs=2,
                               work_dir=tmp_path)
    else:
        trainer = make_trainer("epoch", hooks=[Record(priority=90), JSONWriter(period=100)], max_epochs=2,
                               workflow=[["train", 1], ["val", 1]], work_dir=tmp_path)
    trainer.train()
    vals = [event for event in seen if event[0] != "after_epoch"]
    assert vals == [("before_val", 1, 0), ("after_val", 1, 0), ("before_val", 2, 0), ("after_val", 2, 0)]
    assert [event for event in seen if event[0] == "after_epoch"] == [("after_epoch", 0, 4), ("after_epoch", 1, 4)]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iter"], r["epoch"]) for r in rows if "val/accuracy" in r] == [(3, 0), (7, 1)]  # keyed by the epoch's last step
    assert (trainer.epoch, trainer.inner_iter) == (2, 0)


def test_checkpointer_keeps_last_n_and_writes_a_loadable_final(tmp_path):
    trainer = make_trainer("iter", hooks=[PeriodicCheckpointer(period=2, by_epoch=False, keep_last=2, min_interval_secs=0)], max_iters=9, work_dir=tmp_path)
    trainer.train()
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert files == ["final.pt", "iter_0000006.pt", "iter_0000008.pt", "last"]
    assert (tmp_path / "checkpoints" / "last").read_text().strip() == "final.pt"
    state = torch.load(tmp_path / "checkpoints" / "final.pt")  # torch's default weights_only=True reads it
    assert state["iter"] == 9
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(state["model"][k], v)


@pytest.mark.parametrize("min_interval", [10, 0])
def test_checkpointer_skips_periodic_saves_within_min_interval_of_the_last_but_never_the_runs_last(
        tmp_path, monkeypatch, caplog, min_interval):
    import types

    import launcher.hooks.checkpoint

    now = [0.0]
    monkeypatch.setattr(launcher.hooks.checkpoint, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    class Clock(HookBase):  # every step takes a second: an epoch (4 steps) 4 s
        def after_step(self):
            now[0] += 1.0

    checkpointer = PeriodicCheckpointer(keep_last=0, min_interval_secs=min_interval)
    trainer = make_trainer("epoch", hooks={"clock": Clock(), "checkpointer": checkpointer}, max_epochs=7, work_dir=tmp_path)
    with caplog.at_level(logging.INFO, logger="launcher.hooks.checkpoint"):
        trainer.train()
    files = sorted(p.name for p in (tmp_path / "checkpoints").glob("epoch_*.pt"))
    if min_interval:  # 12 s after the start, 12 s after that, and the last epoch's whatever its age
        assert files == ["epoch_0003.pt", "epoch_0006.pt", "epoch_0007.pt"]
        said = [r.getMessage() for r in caplog.records if "Periodic checkpoints" in r.getMessage()]
        assert said == ["Periodic checkpoints: at most one every 10 s, and one at the end "
                        "(hooks.checkpointer.min_interval_secs=0 saves every epoch)"]
    else:
        assert files == [f"epoch_{e:04d}.pt" for e in range(1, 8)]
        assert "Periodic checkpoints" not in caplog.text
    assert (tmp_path / "checkpoints" / "final.pt").is_file()


@pytest.mark.parametrize("bad", [-1, float("inf"), True, "10"])
def test_checkpointer_refuses_a_min_interval_that_is_not_seconds(bad):
    with pytest.raises(ValueError, match=r"min_interval_secs should be a number of seconds >= 0 \(0 saves every period\), got "):
        PeriodicCheckpointer(min_interval_secs=bad)


def test_background_writer_writes_in_order_clears_stale_temporaries_and_reports_a_failed_write(tmp_path):
    from launcher.engine.checkpoint import BackgroundWriter, load_checkpoint

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    (ckpts / ".epoch_0001.pt.tmp4242").write_bytes(b"left by a process killed mid-write")
    writer = BackgroundWriter()
    for i in range(3):
        writer.write({"i": i}, ckpts / f"{i}.pt")
    writer.wait()
    assert [load_checkpoint(ckpts / f"{i}.pt")["i"] for i in range(3)] == [0, 1, 2]
    assert (ckpts / "last").read_text() == "2.pt\n"
    assert not list(ckpts.glob(".*.tmp*"))
    (ckpts / "a_dir").mkdir()
    writer.write({"i": 3}, ckpts / "3.pt", then_remove=[ckpts / "a_dir"])  # retention fails on the thread
    with pytest.raises(RuntimeError, match=r"removing the old checkpoint .*a_dir failed \(IsADirectoryError: Is a directory\)"):
        writer.wait()
    writer.write({"i": 4}, ckpts / "4.pt", then_remove=[ckpts / "0.pt"])
    writer.close()
    assert (ckpts / "last").read_text() == "4.pt\n" and not (ckpts / "0.pt").exists()


def test_background_writer_reuses_its_memory_and_each_file_holds_exactly_its_own_checkpoint(tmp_path):
    # Each checkpoint is serialized over the previous one's bytes: a smaller one after a larger
    # must not carry the larger one's tail, and a view of the old bytes still held elsewhere
    # must neither fail the save nor be written over.
    from launcher.engine.checkpoint import BackgroundWriter, load_checkpoint, serialize

    states = [{"w": torch.arange(50_000.0), "i": 0}, {"w": torch.arange(10.0), "i": 1},
              {"w": torch.ones(3, 3), "i": 2}, {"w": torch.arange(70_000.0), "i": 3}]
    writer = BackgroundWriter()
    writer.write(states[0], tmp_path / "0.pt")
    buffer = writer._buffer
    writer.wait()
    writer.write(states[1], tmp_path / "1.pt")
    assert writer._buffer is buffer  # the same memory, written over
    writer.write(states[2], tmp_path / "2.pt", background=False)
    assert writer._buffer is buffer
    held = writer._serialize({"w": torch.zeros(2), "i": -1})  # a view the writer did not give back
    writer.write(states[3], tmp_path / "3.pt")
    writer.close()
    assert bytes(held) == bytes(serialize({"w": torch.zeros(2), "i": -1}))
    for i, state in enumerate(states):
        assert (tmp_path / f"{i}.pt").read_bytes() == bytes(serialize(state))
        loaded = load_checkpoint(tmp_path / f"{i}.pt")
        assert loaded["i"] == i and torch.equal(loaded["w"], state["w"])


def test_no_final_checkpoint_when_training_failed(tmp_path):
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, batch):
            raise RuntimeError("bad batch")

    trainer = make_trainer("iter", model=Broken(), hooks=[PeriodicCheckpointer()], work_dir=tmp_path)
    with pytest.raises(RuntimeError):
        trainer.train()
    assert not (tmp_path / "checkpoints" / "final.pt").exists()


@pytest.mark.parametrize("kind", ["iter", "epoch"])
def test_the_run_time_line_comes_under_the_last_progress_line(kind, caplog, tmp_path):
    """The iteration trainer's last progress line (with the end's validation) is written in after_train, after the
    timer's, whose priority is the highest: "Trained N steps" came above it."""
    hooks = [IterationTimer(warmup=0), Evaluator(period=4, by_epoch=False) if kind == "iter" else Evaluator(),
             ConsoleWriter(period=4)]
    trainer = make_trainer(kind, hooks=hooks, work_dir=tmp_path, **({"max_iters": 10} if kind == "iter" else {}))
    with caplog.at_level(logging.INFO):
        trainer.train()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("epoch ", "Trained "))]
    assert lines[-1].startswith(f"Trained {trainer.iter} steps in ") and "val/loss" in lines[-2], lines
    assert kind == "epoch" or f"iter {trainer.iter}/{trainer.iter}" in lines[-2]


def test_timer_records_step_time_and_the_part_spent_waiting_for_data(tmp_path):
    import time

    class SlowLoader:  # each batch takes 30 ms to arrive
        def __init__(self, loader):
            self.loader = loader

        def __iter__(self):
            for batch in self.loader:
                time.sleep(0.03)
                yield batch

        def __len__(self):
            return len(self.loader)

    data = ToyData()
    fast = data.train_loader
    data.train_loader = lambda: SlowLoader(fast())
    trainer = make_trainer("iter", hooks=[IterationTimer()], data=data, work_dir=tmp_path, max_iters=4)
    trainer.train()
    waits = [v for v, _ in trainer.storage.history("data_time").values()]
    steps = [v for v, _ in trainer.storage.history("time").values()]
    assert len(waits) == len(steps) == 4
    assert all(0.03 <= w <= s for w, s in zip(waits, steps))


def test_a_writers_file_in_a_subdir_of_the_run_dir_is_made_there(tmp_path):
    """hooks.jsonl.filename=logs/metrics.jsonl ended in a FileNotFoundError once the run had started."""
    trainer = make_trainer("iter", hooks=[JSONWriter(filename="logs/metrics.jsonl", period=2)], max_iters=4, work_dir=tmp_path)
    trainer.train()
    assert [json.loads(line)["iter"] for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()] == [1, 3]


def test_writers_write_every_period_after_validation_and_at_the_end(tmp_path):
    hooks = [IterationTimer(), Evaluator(), JSONWriter(period=3), TensorBoardWriter(period=3), ConsoleWriter(period=3)]
    trainer = make_trainer("epoch", hooks=hooks, max_epochs=2, work_dir=tmp_path)
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r["iter"] for r in rows if "train/loss" in r]
    val_rows = [(r["iter"], r["epoch"]) for r in rows if "val/accuracy" in r]
    assert train_rows == [2, 3, 5, 7]  # every 3 steps, plus the rest flushed with each validation
    assert val_rows == [(3, 0), (7, 1)]  # keyed by the epoch's last step
    logged = [(r["iter"], k) for r in rows for k in r if k not in ("iter", "epoch")]
    assert len(logged) == len(set(logged))  # each scalar of each iteration once
    assert all("time" in r and "data_time" in r for r in rows if "train/loss" in r)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/accuracy")] == [3, 7]
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 3, 5, 7]
    # the timer's scalars last in TensorBoard, under one group: its groups sorted by name open the first two
    assert {tag.split("/")[0] for tag in acc.Tags()["scalars"]} == {"train", "val", "wallclock"}
    assert [e.step for e in acc.Scalars("wallclock/data_time")] == [e.step for e in acc.Scalars("wallclock/iter_time")] == [2, 3, 5, 7]


def test_a_checkpoint_sends_the_rows_it_covers_to_the_files_before_the_batch_is_due(tmp_path):
    seen = {}

    class Peek(HookBase):  # after the boundary where epoch 1's checkpoint was taken
        def before_epoch(self):
            if self.trainer.epoch == 1:
                seen["rows"] = [json.loads(row)["iter"] for row in (self.trainer.work_dir / "metrics.jsonl").read_text().splitlines()]
                seen["iter"] = self.trainer.iter

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def run(work_dir, hooks):
        # flush_secs: the batch is never due during the run; the first row goes out at once
        writers = [JSONWriter(period=1, flush_secs=3600), TensorBoardWriter(period=1, flush_secs=3600)]
        make_trainer("epoch", hooks=[*writers, *hooks, Peek()], max_epochs=2, work_dir=work_dir).train()

    run(tmp_path, [PeriodicCheckpointer(min_interval_secs=0)])
    assert seen["rows"] == list(range(seen["iter"])) and seen["iter"] == 4  # every step the checkpoint covers
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(8))  # and all of them at the end

    run(tmp_path / "no_checkpoints", [])
    assert seen["rows"] == [0]  # without a checkpoint the rows wait for their batch


def test_a_validation_at_the_iteration_of_a_periodic_write_joins_its_row(tmp_path):
    """Epochs of 4 steps, a write every 2: each validation falls on an iteration already written.
    ``flush_secs=0`` sends every batch at once, the case where the row has left the buffer soonest."""
    hooks = [Evaluator(), JSONWriter(period=2, flush_secs=0), PeriodicCheckpointer()]
    make_trainer("epoch", hooks=hooks, max_epochs=3, work_dir=tmp_path).train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == [1, 3, 5, 7, 9, 11]  # one row per iteration
    assert [(r["iter"], r["epoch"]) for r in rows if "val/accuracy" in r] == [(3, 0), (7, 1), (11, 2)]
    assert all("train/loss" in r for r in rows)


def test_resume_path_false_and_load_from(tmp_path):
    first = make_trainer("iter", hooks={"ckpt": PeriodicCheckpointer(period=3, by_epoch=False, keep_last=0, min_interval_secs=0)}, max_iters=6, work_dir=tmp_path)
    first.train()
    ckpt = tmp_path / "checkpoints" / "iter_0000003.pt"

    resumed = make_trainer("iter", hooks={"ckpt": PeriodicCheckpointer()}, max_iters=6, work_dir=tmp_path / "other", resume=str(ckpt))
    resumed.train()
    assert resumed.resumed_from == ckpt
    for k, v in first.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[k], v)

    fresh = make_trainer("iter", max_iters=2, work_dir=tmp_path, resume=False)
    fresh.train()
    assert fresh.resumed_from is None and fresh.iter == 2

    tuned = make_trainer("iter", max_iters=1, work_dir=tmp_path / "tune", load_from=str(ckpt), resume=False)
    tuned.resume_or_load()
    assert torch.equal(tuned.model.lin.weight, torch.load(ckpt, weights_only=False)["model"]["lin.weight"])
    assert tuned.iter == 0  # weights only: counters and optimizer start fresh


def test_load_from_takes_a_checkpoint_holding_numpy_arrays_and_refuses_other_objects(tmp_path):
    """This launcher's checkpoints before 2026-12-03 held NumPy's RNG state as an array: load_from (weights_only)
    refused them as "Python objects" although an array is data; an object that runs code as it loads still is."""
    import collections
    import fractions

    import numpy as np

    from launcher.engine.errors import ConfigError

    from conftest import ToyModel

    weights = ToyModel().state_dict()
    torch.save({"model": weights, "rng": {"numpy": ("MT19937", np.arange(624, dtype=np.uint32), 3, 0, 0.0)},
                "counts": np.zeros(3), "scale": np.float64(2.0)}, tmp_path / "old.pt")
    tuned = make_trainer("iter", max_iters=1, work_dir=tmp_path / "tune", load_from=str(tmp_path / "old.pt"), resume=False)
    tuned.resume_or_load()
    assert torch.equal(tuned.model.lin.weight, weights["lin.weight"])

    torch.save({"model": weights, "other": collections.Counter(a=fractions.Fraction(1, 3)), "counts": np.zeros(3)},
               tmp_path / "objects.pt")
    with pytest.raises(ConfigError, match=r"holds Python objects \(.*fractions.Fraction") as refused:
        make_trainer("iter", work_dir=tmp_path / "t2", load_from=str(tmp_path / "objects.pt"), resume=False).resume_or_load()
    assert "numpy" not in str(refused.value).partition("besides")[0]  # only what is refused is named

    # NumPy 1 pickled its arrays through numpy.core.*, NumPy 2 through numpy._core.*: a file of either is read
    import zipfile

    with zipfile.ZipFile(tmp_path / "old.pt") as now, zipfile.ZipFile(tmp_path / "numpy1.pt", "w") as before:
        for item in now.infolist():
            data = now.read(item.filename)
            before.writestr(item, data.replace(b"numpy._core.", b"numpy.core.") if item.filename.endswith("data.pkl") else data)
    assert "numpy.core.multiarray._reconstruct" in torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "numpy1.pt")
    tuned = make_trainer("iter", max_iters=1, work_dir=tmp_path / "t3", load_from=str(tmp_path / "numpy1.pt"), resume=False)
    tuned.resume_or_load()
    assert torch.equal(tuned.model.lin.weight, weights["lin.weight"])
    # an array of strings: refused for its dtype, named as such (it was said to be a truncated or corrupt file)
    torch.save({"model": weights, "names": np.array(["a", "b"])}, tmp_path / "strings.pt")
    with pytest.raises(ConfigError, match=r"holds Python objects \(numpy.dtypes.StrDType\)"):
        make_trainer("iter", work_dir=tmp_path / "t4", load_from=str(tmp_path / "strings.pt"), resume=False).resume_or_load()


class FractionState(HookBase):
    """A hook of one's own whose state holds a Python object (not a tensor or plain value)."""

    def __init__(self):
        super().__init__()
        self.share = fractions.Fraction(1, 3)

    def state_dict(self):
        return {"share": self.share}

    def load_state_dict(self, state):
        self.share = state["share"]


def test_a_hook_state_holding_objects_is_said_at_save_and_resumes_only_with_trust_checkpoint(tmp_path, caplog):
    """Resuming read checkpoints in full (weights_only=False): unpickling a file can run any code in it."""
    from launcher.engine.errors import ConfigError

    caplog.set_level(logging.WARNING)
    def hooks():
        return {"share": FractionState(), "ckpt": PeriodicCheckpointer(period=2, by_epoch=False, min_interval_secs=0)}

    make_trainer("iter", hooks=hooks(), max_iters=6, work_dir=tmp_path).train()
    said = [r.getMessage() for r in caplog.records if "holds Python objects" in r.getMessage()]
    assert len(said) == 1 and "hook share (test_hooks.FractionState)" in said[0] and "fractions.Fraction" in said[0] \
        and "trainer.trust_checkpoint=true" in said[0]  # once, for four saves
    final = tmp_path / "checkpoints" / "final.pt"
    with pytest.raises(ConfigError, match=rf"trainer.resume: '{final}' holds Python objects \(fractions.Fraction\).*"
                                          r"run any code.*trainer.trust_checkpoint=true"):
        make_trainer("iter", hooks=hooks(), max_iters=8, work_dir=tmp_path).train()
    caplog.clear()
    trusted = make_trainer("iter", hooks=hooks(), max_iters=8, work_dir=tmp_path, trust_checkpoint=True)
    trusted.train()
    assert trusted.resumed_from == final and trusted.iter == 8
    assert f"Loading {final} in full with its Python objects (fractions.Fraction)" in caplog.text
    with pytest.raises(ConfigError, match=r"trainer.trust_checkpoint: 'yes' is not accepted; use true or false"):
        make_trainer(trust_checkpoint="yes")


def test_a_checkpoint_taken_before_the_first_step_resumes_under_weights_only(tmp_path):
    """Its empty metrics storage holds b"", which torch's pickle protocol writes as a call of ``bytes``."""
    from launcher.engine.checkpoint import load_checkpoint, objects_beyond_weights, save_checkpoint

    state = make_trainer("iter", work_dir=tmp_path).state_dict()
    assert objects_beyond_weights(state) == []
    save_checkpoint(state, tmp_path / "iter_0000000.pt")
    assert load_checkpoint(tmp_path / "iter_0000000.pt")["storage"]["values"] == b""


def test_only_the_checkpoints_the_launcher_wrote_in_the_run_dir_are_resumed_from(tmp_path):
    """Any *.pt in checkpoints/ was a candidate, a link to a file anywhere too; ``last`` may name a path."""
    from launcher.engine.files import candidates

    ckpts, outside = tmp_path / "run" / "checkpoints", tmp_path / "elsewhere.pt"
    ckpts.mkdir(parents=True)
    for name in ("iter_0000004.pt", "epoch_0002.pt", "final.pt", "best.pt", "iter_12.pt"):
        (ckpts / name).write_bytes(b"x")
    outside.write_bytes(b"x")
    (ckpts / "iter_9999999.pt").symlink_to(outside)  # a link out of the run dir
    (ckpts / "epoch_0009.pt").symlink_to(ckpts / "final.pt")  # one within it
    (ckpts / "last").write_text("best.pt\n")  # the pointer itself may name a hook's own file
    assert candidates(ckpts)[0] == ckpts / "best.pt"
    assert sorted(p.name for p in candidates(ckpts)) == ["best.pt", "epoch_0002.pt", "epoch_0009.pt", "final.pt",
                                                         "iter_0000004.pt"]
    for pointer in ("../../elsewhere.pt", str(outside), "iter_9999999.pt", "..", ".final.pt.tmp1"):
        (ckpts / "last").write_text(pointer)
        assert "elsewhere" not in str(candidates(ckpts)) and "best.pt" not in str(candidates(ckpts)), pointer
    (ckpts / "last").unlink()
    (ckpts / "last").symlink_to(tmp_path / "pointer")
    (tmp_path / "pointer").write_text("best.pt")
    assert "best.pt" not in str(candidates(ckpts))


def test_bad_resume_and_load_from_name_the_key_and_the_shapes(tmp_path):
    from conftest import ToyModel

    with pytest.raises(ValueError, match=r"trainer.resume: checkpoint '/nope.pt' does not exist; use auto, false or a checkpoint path"):
        make_trainer(resume="/nope.pt")
    with pytest.raises(ValueError, match=r"trainer.load_from: '/nope.pt' does not exist"):
        make_trainer(load_from="/nope.pt")
    torch.save({"model": ToyModel(features=5).state_dict()}, tmp_path / "w.pt")
    trainer = make_trainer(load_from=str(tmp_path / "w.pt"), resume=False)
    with pytest.raises(ValueError, match=r"parameter 'lin.weight' has shape \(2, 5\) in .*w.pt but \(2, 4\) in the model"):
        trainer.train()

    other = make_trainer("iter", model=ToyModel(features=5), max_iters=2, work_dir=tmp_path / "other",
                         hooks={"ckpt": PeriodicCheckpointer()}, data=ToyData(n=40, batch=4, features=5))
    other.train()
    final = tmp_path / "other" / "checkpoints" / "final.pt"
    trainer = make_trainer(resume=str(final))
    with pytest.raises(ValueError, match=rf"trainer.resume: checkpoint '{final}' does not fit this run: parameter "
                                         r"'lin.weight' has shape \(2, 5\) there but \(2, 4\) in the model; resume it with "
                                         r"the config it was made with") as refused:
        trainer.train()
    assert "trainer.load_from" not in str(refused.value)  # its weights do not fit the model either


def test_resuming_a_checkpoint_of_another_optimizer_is_refused_before_training(tmp_path):
    from conftest import ToyModel as Toy

    model = Toy()
    adam = make_trainer("iter", model=model, max_iters=2, work_dir=tmp_path / "adam", hooks={"ckpt": PeriodicCheckpointer()})
    adam.optimizer = torch.optim.AdamW(model.parameters())
    adam.train()
    final = tmp_path / "adam" / "checkpoints" / "final.pt"
    trainer = make_trainer(resume=str(final))  # SGD
    with pytest.raises(ValueError, match=rf"trainer.resume: checkpoint '{final}' does not fit this run: it was made with "
                                         r"optimizer torch.optim.adamw.AdamW, and this run's is torch.optim.sgd.SGD") as refused:
        trainer.train()
    assert str(refused.value).endswith(f"or start a new run from its weights: trainer.load_from='{final}' with another run dir")


@pytest.fixture
def requeue_handler(tmp_path):
    """A SIGUSR2 handler installed before the run, standing in for submitit's requeueing one: it records each
    call with the checkpoint then on disk. Yields (calls, handler); the handler that was there is put back."""
    import signal

    calls = []

    def previous(signum, frame):
        last = tmp_path / "checkpoints" / "last"
        calls.append((signum, last.read_text().strip() if last.exists() else None))

    old = signal.signal(signal.SIGUSR2, previous)
    try:
        yield calls, previous
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_signal_stops_at_a_boundary_then_chains_the_previous_handler_after_the_checkpoint(tmp_path, requeue_handler):
    import signal

    import launcher

    calls, previous = requeue_handler
    cfg = launcher.compose(["data=synthetic", "data.train.size=320", "data.batch_size=32", "trainer=iter",
                            "trainer.max_iters=50", "+hooks.kill._target_=test_hooks.SignalAt", "+hooks.kill.at=5"])
    result = launcher.run(cfg, tmp_path)
    assert result.status == "interrupted"
    assert calls == [(signal.SIGUSR2, "iter_0000006.pt")]  # called once, with the checkpoint on disk
    assert signal.getsignal(signal.SIGUSR2) is previous  # ours are gone after the run


class SignalAt(HookBase):
    def __init__(self, at: int, sig: str = "SIGUSR2"):
        super().__init__()
        self.at, self.sig = at, sig

    def after_step(self):
        if self.trainer.iter == self.at:
            import os
            import signal

            os.kill(os.getpid(), getattr(signal, self.sig))


class SignalWhenBuilt(HookBase):
    """SIGUSR2s this process as it is built: while the trainer is being built, before training."""

    def __init__(self):
        super().__init__()
        import os
        import signal

        os.kill(os.getpid(), signal.SIGUSR2)


@pytest.mark.parametrize("build_fails", [False, True])
def test_a_signal_while_the_run_is_built_reaches_the_previous_handler_once(build_fails, tmp_path, requeue_handler):
    """submitit's SIGUSR2 (preemption) while the data and model are built: the run stops at its first step and
    submitit's handler requeues it with the checkpoint on disk. Where the build then fails, the signal is not
    swallowed: it goes on to that handler (or ends the process, or stops a sweep run in it)."""
    import signal

    import launcher
    from launcher.engine.errors import ConfigError

    calls, previous = requeue_handler
    cfg = launcher.compose(["data=synthetic", "data.train.size=320", "data.batch_size=32", "trainer=iter",
                            "trainer.max_iters=50", "+hooks.early._target_=test_hooks.SignalWhenBuilt",
                            *(["+hooks.late._target_=test_hooks.SignalAt", "+hooks.late.at=oops"] if build_fails else [])])
    if build_fails:
        with pytest.raises(ConfigError, match="hooks.late"):
            launcher.run(cfg, tmp_path)
    else:
        assert launcher.run(cfg, tmp_path).status == "interrupted"
    assert calls == [(signal.SIGUSR2, None if build_fails else "iter_0000000.pt")]
    assert signal.getsignal(signal.SIGUSR2) is previous


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_as_the_run_ends_leaves_it_recorded_as_it_ended_and_goes_on(sig, tmp_path, monkeypatch, caplog):
    """A Ctrl-C after the last step and before run.json said how the run ended raised KeyboardInterrupt out of a
    trained run and left its record 'running'. Now the run is recorded completed, and then the signal goes on to
    the handler before the run's (a sweep in this process stops; a SLURM job's latch drops it)."""
    import os
    import signal

    import launcher
    from conftest import read_run

    told = launcher.runs.run.warn_if_nothing_saved

    def signalled(trainer, since):  # in the window between trainer.train() returning and the record
        os.kill(os.getpid(), getattr(signal, sig))
        return told(trainer, since)

    monkeypatch.setattr(launcher.runs.run, "warn_if_nothing_saved", signalled)
    cfg = launcher.compose(["data=synthetic", "data.train.size=64", "data.batch_size=32", "trainer=iter",
                            "trainer.max_iters=4", "hooks=minimal"])
    seen = []  # the handler before the run's, with what run.json said when the signal reached it

    def before_the_run(signum, frame):
        seen.append((signum, read_run(tmp_path)["status"]))

    before = signal.signal(signal.SIGTERM, before_the_run)
    ended = None
    try:
        with caplog.at_level(logging.WARNING, logger="launcher"):
            launcher.run(cfg, tmp_path)
    except KeyboardInterrupt:  # SIGINT's handler before the run's: Python's
        ended = "KeyboardInterrupt"
    finally:
        previous = signal.signal(signal.SIGTERM, before)
    assert read_run(tmp_path)["status"] == "completed"
    assert f"{sig} came as the run ended: it is recorded completed, and the signal is passed on" in caplog.text
    if sig == "SIGINT":
        assert ended == "KeyboardInterrupt" and seen == []
    else:
        assert ended is None and seen == [(signal.SIGTERM, "completed")]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and previous is before_the_run  # the run's are gone


def test_the_console_eta_counts_the_time_validation_takes_between_steps(caplog, tmp_path):
    import re
    import time

    class SlowValidation(HookBase):
        def after_val(self):
            if self.trainer.iter < 12:
                time.sleep(0.5)  # two validations of half a second; steps of a millisecond

        def after_step(self):
            if self.trainer.iter == 15:
                self.trainer.request_stop("seen enough")

    caplog.set_level(logging.INFO)
    trainer = make_trainer("iter", work_dir=tmp_path, max_iters=1000, data=ToyData(n=4000, batch=4),
                           hooks=[IterationTimer(), Evaluator(by_epoch=False, period=5), SlowValidation(), ConsoleWriter(period=5)])
    trainer.train()
    line = next(r.getMessage() for r in caplog.records if "iter 15/1000" in r.getMessage())
    h, m, s = map(int, re.search(r"eta (\d+):(\d\d):(\d\d)", line).groups())
    assert h * 3600 + m * 60 + s >= 20  # ~0.05 s a step with the validations in (the median step time alone: ~1 s)


class BreaksAtStep(HookBase):
    def after_step(self):
        if self.trainer.iter == 2:
            raise RuntimeError("this hook broke")


def test_a_failed_runs_record_says_failed_even_where_its_last_metrics_cannot_be_read(tmp_path, monkeypatch):
    """A metric a hook had put wrong made reading the last metrics fail as the failure was recorded: run.json said
    ``running`` for good, and the error raised was that read's, not the run's."""
    import json

    import launcher
    from launcher.engine.trainer import TrainerBase

    def unreadable(self, sync=True):
        raise IndexError("array index out of range")

    monkeypatch.setattr(TrainerBase, "final_metrics", unreadable)
    cfg = launcher.compose(["data=synthetic", "data.train.size=320", "data.batch_size=32", "hooks=minimal",
                            "+hooks.broken._target_=test_hooks.BreaksAtStep"])
    with pytest.raises(RuntimeError, match="this hook broke"):
        launcher.run(cfg, tmp_path)
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["status"] == "failed" and record["error"] == "RuntimeError: this hook broke", record


def test_a_record_the_full_disk_refuses_leaves_the_runs_own_error_to_say_what_happened(tmp_path, monkeypatch, caplog):
    """The disk full, the failed run's record could not be written either: its OSError replaced the run's error (a
    chained traceback, the real error mid-way through it)."""
    import errno

    import launcher
    from launcher.runs.rundir import RunRecord

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunRecord, "finish", full)
    cfg = launcher.compose(["data=synthetic", "data.train.size=320", "data.batch_size=32", "hooks=minimal",
                            "+hooks.broken._target_=test_hooks.BreaksAtStep"])
    with pytest.raises(RuntimeError, match="this hook broke"):
        launcher.run(cfg, tmp_path)
    assert f"Could not record how the run ended in {tmp_path / 'run.json'} (OSError: No space left on device)" in caplog.text


def test_a_metrics_file_with_bytes_that_are_no_text_and_a_checkpoint_that_is_a_directory_do_not_stop_a_resume(tmp_path):
    """A UnicodeDecodeError traceback for the first; "checkpoint .../final.pt does not exist" for the second."""
    from launcher.engine.files import candidates

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"iter": 1, "a": 1}\n\x00\xff\xfe garbage\n{"iter": 3, "a": 2}\n{"iter": 9, "a": 3}\n')
    kept = JSONWriter._drop_rows_after(path, 5)
    assert path.read_bytes() == b'{"iter": 1, "a": 1}\n{"iter": 3, "a": 2}\n' and kept == (20, {"iter": 3, "a": 2})
    (tmp_path / "checkpoints" / "final.pt").mkdir(parents=True)
    (tmp_path / "checkpoints" / "epoch_0001.pt").write_bytes(b"x")
    assert candidates(tmp_path / "checkpoints") == [tmp_path / "checkpoints" / "epoch_0001.pt"]


def test_a_checkpoint_write_failure_names_the_file_in_the_way(tmp_path):
    """checkpoints/last made a directory: the error named the checkpoint just written, which was fine."""
    from launcher.engine.checkpoint import _write_failed, write_checkpoint

    (tmp_path / "checkpoints" / "last").mkdir(parents=True)
    path = tmp_path / "checkpoints" / "epoch_0001.pt"
    with pytest.raises(OSError) as info:
        write_checkpoint(b"x", path)
    message = str(_write_failed(f"writing checkpoint {path}", path.parent, info.value))
    assert f"(IsADirectoryError: Is a directory: {tmp_path / 'checkpoints' / 'last'})" in message, message


def test_resuming_another_runs_checkpoint_past_this_runs_length_is_refused_naming_the_file(tmp_path):
    """It said "this run's checkpoint final.pt ... an attempt before lengthened it ... or use another run dir", which
    named neither the file given nor anything true of a new run dir."""
    longer = make_trainer("iter", max_iters=6, work_dir=tmp_path / "longer", hooks={"ckpt": PeriodicCheckpointer()})
    longer.train()
    final = tmp_path / "longer" / "checkpoints" / "final.pt"
    shorter = make_trainer("iter", max_iters=4, work_dir=tmp_path / "shorter", resume=str(final))
    with pytest.raises(ValueError) as refused:
        shorter.train()
    assert str(refused.value) == (f"trainer.max_iters=4: trainer.resume='{final}' is at iteration 6, past this run's length: "
                                  f"a run cannot train back. Set trainer.max_iters=6 to end it there (more trains it on)")
    assert not (tmp_path / "shorter" / "checkpoints").exists()


class Events(HookBase):
    def __init__(self):
        super().__init__()
        self.seen = []

    def before_train(self):
        self.seen.append("before_train")

    def after_train(self):
        self.seen.append("after_train")


def test_a_run_whose_checkpoint_is_refused_runs_no_hook(tmp_path):
    """Every hook's after_train ran though none had begun: the writers wrote a row of the refused checkpoint's
    values (the console showed them as this run's), and a hook of the user's read state its before_train sets."""
    make_trainer("iter", max_iters=6, work_dir=tmp_path, hooks={"ckpt": PeriodicCheckpointer(),
                                                                "jsonl": JSONWriter(period=1)}).train()
    rows = (tmp_path / "metrics.jsonl").read_bytes()
    events = Events()
    shorter = make_trainer("iter", max_iters=4, work_dir=tmp_path, hooks={"ckpt": PeriodicCheckpointer(), "events": events,
                                                                          "jsonl": JSONWriter(period=1)})
    with pytest.raises(ValueError, match="past this run's length"):
        shorter.train()
    assert events.seen == [] and shorter.status == "failed"
    assert (tmp_path / "metrics.jsonl").read_bytes() == rows
