"""The trainers and HookBase, in process: ordering, dispatch, weakrefs, workflow, NaN detection."""
from __future__ import annotations

import gc
import logging
import math
import weakref

import pytest
import torch

from conftest import ToyData, ToyModel, make_trainer
from launcher.hooks import HookBase, Priority
from launcher.hooks.checkpoint import PeriodicCheckpointer


class Recorder(HookBase):
    """Appends (name, event, iter, epoch) for every event to a shared log."""

    def __init__(self, name, log, priority=None):
        super().__init__(priority)
        self.tag, self.log = name, log

    def _rec(self, event):
        self.log.append((self.tag, event, self.trainer.iter, self.trainer.epoch))

    def before_train(self): self._rec("before_train")
    def after_train(self): self._rec("after_train")
    def before_epoch(self): self._rec("before_epoch")
    def after_epoch(self): self._rec("after_epoch")
    def before_step(self): self._rec("before_step")
    def after_step(self): self._rec("after_step")
    def before_val(self): self._rec("before_val")
    def after_val(self): self._rec("after_val")


def test_hooks_run_by_priority_and_keep_registration_order_on_ties():
    log = []
    hooks = {
        "late": Recorder("late", log, priority=Priority.LOW),
        "a": Recorder("a", log),
        "early": Recorder("early", log, priority=Priority.HIGHEST),
        "b": Recorder("b", log),
    }
    trainer = make_trainer("iter", hooks=hooks, max_iters=1)
    assert [h.name for h in trainer.hooks] == ["early", "a", "b", "late"]
    trainer.train()
    assert [tag for tag, event, *_ in log if event == "after_step"] == ["early", "a", "b", "late"]


def test_hook_is_called_only_for_events_it_overrides():
    class OnlyAfterStep(HookBase):
        def after_step(self):
            pass

    trainer = make_trainer("iter", hooks=[OnlyAfterStep()])
    assert len(trainer._handlers["after_step"]) == 1
    assert all(not trainer._handlers[e] for e in trainer._handlers if e != "after_step")


def test_an_event_a_hook_sets_to_none_is_never_called():
    class EitherOr(HookBase):
        def __init__(self, by_epoch):
            super().__init__()
            self.calls = []
            if by_epoch:
                self.after_step = None
            else:
                self.after_epoch = None

        def after_step(self):
            self.calls.append("step")

        def after_epoch(self):
            self.calls.append("epoch")

    by_epoch, by_step = EitherOr(True), EitherOr(False)
    trainer = make_trainer("epoch", hooks={"e": by_epoch, "s": by_step}, max_epochs=2)
    trainer.train()
    assert by_epoch.calls == ["epoch"] * 2
    assert by_step.calls == ["step"] * trainer.iter


def test_non_hook_is_rejected_with_its_type():
    with pytest.raises(TypeError, match="collections.OrderedDict.*not a hooks.HookBase"):
        make_trainer(hooks={"x": __import__("collections").OrderedDict()})


def test_hooks_hold_the_trainer_weakly_so_no_cycle_keeps_it_alive():
    hook = Recorder("r", [])
    trainer = make_trainer("iter", hooks=[hook], max_iters=2)
    trainer.train()
    ref = weakref.ref(trainer)
    gc.disable()
    try:
        del trainer
        assert ref() is None, "something other than the caller keeps the trainer alive (a reference cycle)"
    finally:
        gc.enable()
    with pytest.raises(ReferenceError):
        hook.trainer.iter  # noqa: B018 -- the access raises


def test_iter_trainer_counts_steps_and_fires_epoch_events_at_full_passes():
    log = []
    trainer = make_trainer("iter", hooks=[Recorder("r", log)], max_iters=10)  # 4 batches per epoch
    trainer.train()
    steps = [it for _, e, it, _ in log if e == "after_step"]
    assert steps == list(range(10))
    assert [(it, ep) for _, e, it, ep in log if e == "after_epoch"] == [(4, 0), (8, 1)]
    assert trainer.iter == 10 and trainer.epoch == 2 and trainer.inner_iter == 2
    assert log[0][1] == "before_train" and log[-1][1] == "after_train"


def test_iter_trainer_train_takes_start_and_max_iter_like_detectron2():
    log = []
    trainer = make_trainer("iter", hooks=[Recorder("r", log)], max_iters=100)
    trainer.train(start_iter=5, max_iter=9)
    assert [it for _, e, it, _ in log if e == "after_step"] == [5, 6, 7, 8]
    assert [(it, ep) for _, e, it, ep in log if e == "after_epoch"] == [(8, 1)]


def test_epoch_workflow_validates_between_training_epochs_in_eval_mode():
    modes = []

    class Watch(HookBase):
        def before_val(self):
            modes.append(("val", self.trainer.epoch, self.trainer.model.training))

        def after_val(self):
            modes.append(("after", self.trainer.epoch, self.trainer.model.training))

    model = ToyModel()
    seen_eval = []
    orig = model.forward
    model.forward = lambda batch: (seen_eval.append((model.training, torch.is_grad_enabled())), orig(batch))[1]
    trainer = make_trainer("epoch", hooks=[Watch()], model=model, max_epochs=4, workflow=[["train", 2], ["val", 1]])
    trainer.train()
    assert [m for m in modes if m[0] == "val"] == [("val", 2, True), ("val", 4, True)]
    assert [m for m in modes if m[0] == "after"] == [("after", 2, True), ("after", 4, True)]  # train mode restored
    assert (False, False) in seen_eval  # validation forward ran in eval mode without grad
    assert trainer.epoch == 4 and trainer.iter == 16
    assert set(trainer.last_val) == {"val/loss", "val/accuracy"}


def test_rows_written_between_epochs_carry_the_epoch_just_trained(tmp_path):
    """A workflow's val phase and the end of the run come after ``epoch`` moved on: their rows, in
    metrics.jsonl and on the console, are labelled with the epoch they follow (0-based in the file),
    as the Evaluator's validations after an epoch are."""
    import json

    from launcher.hooks.writers import JSONWriter

    trainer = make_trainer("epoch", hooks={"jsonl": JSONWriter(period=1, flush_secs=0)}, work_dir=tmp_path, max_epochs=4,
                           workflow=[["train", 2], ["val", 1]])
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["iter"], r["epoch"]) for r in rows if "val/loss" in r] == [(7, 1), (15, 3)]
    assert [(r["iter"], r["epoch"]) for r in rows if "train/loss" in r] == [(i, i // 4) for i in range(16)]


def test_a_hook_failing_in_after_train_fails_the_run_and_the_other_hooks_still_end(tmp_path, caplog):
    calls = []

    class Raises(HookBase):
        priority = Priority.LOW

        def after_train(self):
            raise ValueError("report upload failed")

    class Later(HookBase):
        priority = Priority.LOWEST

        def after_train(self):
            calls.append(self.trainer.status)

    trainer = make_trainer("epoch", hooks={"raises": Raises(), "later": Later(), "checkpointer": PeriodicCheckpointer()},
                           work_dir=tmp_path)
    with pytest.raises(ValueError, match="report upload failed"):
        trainer.train()
    assert trainer.status == "failed" and calls == ["completed"]  # the later hook ran, and saw how training ended
    assert (tmp_path / "checkpoints" / "final.pt").is_file()  # so a rerun retries only the end
    # and says so, naming the hook to mend (the traceback alone read as a lost run)
    assert any("Trained to iteration 8, its final checkpoint saved; what the run does at its end failed for the error "
               "below: mend hooks.raises (" in r.getMessage() for r in caplog.records), caplog.text

    class Diverges(ToyModel):
        def forward(self, batch):
            return super().forward(batch) * float("nan")

    calls.clear()
    trainer = make_trainer("epoch", hooks={"raises": Raises(), "later": Later()}, model=Diverges(), work_dir=tmp_path / "nan")
    with pytest.raises(FloatingPointError):  # the training's own error stands; the hook's is logged
        trainer.train()
    assert trainer.status == "failed" and calls == ["failed"]


def test_a_checkpoint_written_by_another_number_of_processes_is_refused_naming_load_from(tmp_path):
    """Resumed under another world size (trainer.devices 2 -> 1, torchrun's or SLURM's task count changed), the run
    went on with half the global batch and another epoch length, and ended "completed" short of its steps."""
    from launcher.engine.errors import ConfigError

    first = make_trainer("epoch", hooks={"checkpointer": PeriodicCheckpointer()}, work_dir=tmp_path / "run")
    first.train()
    state = torch.load(tmp_path / "run" / "checkpoints" / "final.pt", weights_only=False)
    state["rng_ranks"] = [state["rng"], state["rng"]]  # as a run of two processes writes it
    torch.save(state, tmp_path / "two.pt")
    again = make_trainer("epoch", work_dir=tmp_path / "again", resume=str(tmp_path / "two.pt"))
    with pytest.raises(ConfigError, match=r"written by a run of 2 process\(es\), and this run has 1: .* resume it with "
                                          r"trainer.devices=2\b.* trainer.load_from="):
        again.train()


@pytest.mark.parametrize(
    "workflow, message",
    [([["train", 0]], "greater than zero"), ([["test", 1]], "phase in"), ([["val", 1]], "no 'train' phase"), (["train"], "bad entry")],
)
def test_bad_workflow_names_the_entry_and_what_is_accepted(workflow, message):
    with pytest.raises(ValueError, match=message):
        make_trainer("epoch", workflow=workflow)


def test_after_train_runs_when_a_step_raises_and_status_says_failed():
    log = []

    class Boom(HookBase):
        def after_step(self):
            if self.trainer.iter == 2:
                raise RuntimeError("boom")

    trainer = make_trainer("iter", hooks=[Boom(), Recorder("r", log)])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    assert log[-1][1] == "after_train"
    assert trainer.status == "failed"


def test_non_finite_loss_raises_naming_iteration_and_every_loss():
    class NaNAt3(ToyModel):
        calls = 0

        def forward(self, batch):
            self.calls += 1
            loss = super().forward(batch)
            return {"ce": loss, "aux": loss * (float("nan") if self.calls == 4 else 1.0)}

    trainer = make_trainer("iter", model=NaNAt3())
    with pytest.raises(FloatingPointError, match=r"in step 4 of .*iter 3, as metrics.jsonl numbers steps.*ce=[0-9.]+, aux=nan"):
        trainer.train()


def test_non_finite_loss_on_an_accelerator_is_found_in_batches_naming_the_first_bad_iteration():
    class NaNFrom5(ToyModel):
        calls = 0

        def forward(self, batch):
            self.calls += 1
            loss = super().forward(batch)
            return loss * float("nan") if self.calls >= 6 else loss

    model = NaNFrom5()
    trainer = make_trainer("iter", model=model, max_iters=100, data=ToyData(n=400, batch=4))
    trainer.SYNC_FREE_DEVICES = ()  # take the accelerator path: no per-step sync
    with pytest.raises(FloatingPointError, match=r"in step 6 of .*iter 5, as metrics.jsonl numbers steps.*loss=nan"):
        trainer.train()
    assert model.calls == 20  # checked once, after FINITE_CHECK_PERIOD steps


def test_model_returning_something_else_is_named_in_the_error():
    class Logits(ToyModel):
        def forward(self, batch):
            return [self.lin(batch[0])]

    with pytest.raises(TypeError, match=r"Logits.forward returned a list of 1 \(a tensor of shape \[\d+, 2\]\) in train mode; the trainer accepts a scalar loss"):
        make_trainer("iter", model=Logits()).train()

    class RawLogits(ToyModel):
        def forward(self, batch):
            return self.lin(batch[0])

    with pytest.raises(TypeError, match=r"RawLogits.forward returned a tensor of shape \[4, 2\] in train mode; the trainer "
                                        r"accepts .* \(outputs such as logits\? in train mode forward computes the loss "
                                        r"from the batch; docs/contracts.md\)"):
        make_trainer("iter", model=RawLogits(), data=ToyData(n=40, batch=4)).train()

    class PerSample(ToyModel):
        def forward(self, batch):
            loss = super().forward(batch)
            return {"cls": loss, "per_sample": self.lin(batch[0]).sum(1), "note": "x"}

    with pytest.raises(TypeError, match=r"returned a dict whose values are not all scalar tensors \('per_sample': a tensor "
                                        r"of shape \[4\], 'note': a str\) in train mode"):
        make_trainer("iter", model=PerSample(), data=ToyData(n=40, batch=4)).train()


@pytest.mark.parametrize("batch, given", [
    ({"x": torch.randn(4, 64), "y": torch.zeros(4, dtype=torch.long)}, r"a dict with keys \['x', 'y'\]"),
    # a dataset whose items have no label: a ValueError from the unpacking, as a traceback
    (torch.randn(4, 64), r"a tensor of shape \[4, 64\] alone \(no labels\)"),
    (torch.randn(2, 64), r"a tensor of shape \[2, 64\] alone \(no labels\)"),  # would unpack into two rows
    ([torch.randn(4, 64), torch.zeros(4, dtype=torch.long), torch.arange(4)],
     r"a list of 3 \(a tensor of shape \[4, 64\], a tensor of shape \[4\], a tensor of shape \[4\]\)"),
])
def test_a_built_in_model_given_batches_that_are_no_pair_says_what_it_takes(batch, given):
    from launcher.engine.errors import ModelInputError, RunError
    from launcher.models import MLP

    with pytest.raises(ModelInputError, match=r"MLP takes batches of \(inputs, labels\); the data loader gave "
                                              + given + r": use a dataset whose items are \(x, y\) pairs") as err:
        MLP()(batch)
    assert isinstance(err.value, (RunError, TypeError))  # the CLI's one line; still a TypeError, as it was


def test_loss_dict_is_summed_and_each_loss_recorded():
    class TwoLosses(ToyModel):
        def forward(self, batch):
            loss = super().forward(batch)
            return {"a": loss, "b": 2 * loss} if self.training else loss

    trainer = make_trainer("iter", model=TwoLosses(), max_iters=1)
    trainer.train()
    s = trainer.storage
    a, b, total = (s.history(k).latest() for k in ("train/a", "train/b", "train/total_loss"))
    assert math.isclose(total, a + b, rel_tol=1e-6) and math.isclose(b, 2 * a, rel_tol=1e-6)


def test_request_stop_ends_at_the_next_step_boundary():
    class StopAt(HookBase):
        def after_step(self):
            if self.trainer.iter == 2:
                self.trainer.request_stop("enough")

    trainer = make_trainer("epoch", hooks=[StopAt()], max_epochs=5)
    trainer.train()
    assert trainer.iter == 3 and trainer.status == "stopped" and trainer.stop_reason == "enough"


def test_random_states_round_trip_in_plain_types_and_as_checkpoints_before_2026_12_03_held_them(tmp_path):
    import io
    import random

    import numpy as np

    from launcher.engine.trainer import get_rng_state, set_rng_state

    def draws():
        return random.random(), float(np.random.rand()), torch.rand(()).item()

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = get_rng_state()
    want = draws()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    set_rng_state(torch.load(io.BytesIO(buffer.getvalue())))  # weights_only=True: bytes, ints, floats only
    assert draws() == want

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    version, words, gauss = random.getstate()  # the layout written until 2026-12-03: tensors and an ndarray
    older = {"python": (version, torch.tensor(words), gauss), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state(), "cuda": []}
    draws()
    set_rng_state(older)
    assert draws() == want
    draws()
    set_rng_state({**older, "python": (version, words, gauss)})  # earlier still: the words as a tuple
    assert draws() == want


def test_classifier_subclasses_with_a_network_module_or_a_network_method_follow_the_contract():
    from launcher.models import MLP, Classifier

    class MethodNet(Classifier):  # ``net`` is a method here, not a submodule
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def net(self, x):
            return self.lin(x)

    batch = (torch.randn(6, 4), torch.tensor([0, 1, 0, 1, 1, 0]))
    for model in (MLP(in_features=4, hidden=[8], num_classes=2), MethodNet()):
        loss = model(batch)
        assert loss.dim() == 0 and torch.isfinite(loss)
        metrics = model.eval()(batch)
        assert set(metrics) == {"loss", "accuracy"} and torch.allclose(metrics["loss"], loss)


class SometimesMetric(ToyModel):
    """In eval mode: ``rare`` (a tensor) only in the first batch, ``seen`` as a Python float in every batch."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def forward(self, batch):
        out = super().forward(batch)
        if self.training:
            return out
        self.batches += 1
        out["seen"] = float(self.batches)  # 1, 2, 3, 4 over the four val batches of 4 samples
        if self.batches == 1:
            out["rare"] = torch.tensor(5.0)
        return out


def test_validation_averages_each_metric_over_the_batches_that_returned_it_and_takes_plain_numbers():
    model = SometimesMetric()
    trainer = make_trainer("epoch", model=model, max_epochs=1)
    metrics = trainer.validate()
    assert metrics["val/rare"] == 5.0  # not 5 / 4: three batches did not return it
    assert metrics["val/seen"] == 2.5
    assert set(metrics) == {"val/loss", "val/accuracy", "val/seen", "val/rare"}


def test_a_train_loss_given_as_a_python_number_is_refused_naming_it():
    class FloatLoss(ToyModel):
        def forward(self, batch):
            out = super().forward(batch)
            return {"ce": out.item(), "other": out} if self.training else out

    with pytest.raises(TypeError, match=r"'ce': a float.*in train mode"):
        make_trainer("epoch", model=FloatLoss(), max_epochs=1).train()


def test_a_method_named_like_another_engines_event_is_warned_about(caplog):
    class MmcvStyle(HookBase):
        def after_train_iter(self):
            raise AssertionError("never called")

        def after_step(self):
            pass

    make_trainer("epoch", hooks={"mm": MmcvStyle()}, max_epochs=1).train()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "after_train_iter" in r.getMessage()]
    assert "hook mm: MmcvStyle.after_train_iter is not an event of this trainer and is never called (did you mean after_step?)" in warning


def test_a_forward_that_takes_inputs_and_labels_apart_is_refused_before_training(tmp_path, monkeypatch):
    from launcher.engine.trainer import EpochTrainer

    monkeypatch.chdir(tmp_path)
    class TwoArgs(ToyModel):
        def forward(self, x, y):
            return super().forward((x, y))

    from launcher.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^model._target_: .*TwoArgs.forward\(x, y\) cannot take what the trainer "
                                          r"passes: model\(batch\)"):
        make_trainer("epoch", model=TwoArgs())

    class OwnStep(EpochTrainer):  # a trainer whose own run_step and validate call the model their way
        def run_step(self):
            x, y = next(self._data_iter)
            loss = self.train_model(x, y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

        def validate(self):
            return {}

    model = TwoArgs()
    OwnStep(model, torch.optim.SGD(model.parameters(), lr=0.1), ToyData(), device="cpu", max_epochs=1).train()


def test_a_hook_whose_state_does_not_load_is_named_with_the_checkpoint(tmp_path):
    class Counter(HookBase):
        def __init__(self, key):
            super().__init__()
            self.key = key

        def state_dict(self):
            return {self.key: 1}

        def load_state_dict(self, state):
            self.n = state["count"]

    from launcher.engine.trainer import HookStateError

    make_trainer("epoch", hooks={"counter": Counter("total"), "ckpt": PeriodicCheckpointer()}, work_dir=tmp_path, max_epochs=1).train()
    trainer = make_trainer("epoch", hooks={"counter": Counter("count"), "ckpt": PeriodicCheckpointer()}, work_dir=tmp_path, max_epochs=2)
    with pytest.raises(HookStateError, match=r"resuming from '.*final.pt': hook counter \(.*Counter\) could not load its "
                                             r"saved state: KeyError: 'count'"):
        trainer.train()


def stream_trainer(kind, promise=None, **kw):
    from launcher.data import DataLoaders
    from noisy_data import NoisyStream, SizedNoisyStream

    options = {"size": 80, "shape": [4], "num_classes": 2, "val_fraction": 0.2}  # 64 train samples
    stream = NoisyStream(**options) if promise is None else SizedNoisyStream(promise=promise, **options)
    from launcher.data import synthetic
    return make_trainer(kind, data=DataLoaders(stream, synthetic(split="val", **options), batch_size=8), **kw)


def test_an_iter_trainer_takes_a_stream_of_unknown_length_and_ends_an_epoch_where_it_does():
    log = []
    trainer = stream_trainer("iter", hooks=[Recorder("r", log)], max_iters=20)  # 8 batches a pass
    assert trainer.steps_per_epoch is None and trainer.max_epochs is None and trainer.epoch_text(1) == "2"
    trainer.train()
    assert [(it, ep) for _, e, it, ep in log if e == "after_epoch"] == [(8, 0), (16, 1)]
    assert [it for _, e, it, _ in log if e == "after_step"] == list(range(20))
    assert (trainer.iter, trainer.epoch, trainer.inner_iter) == (20, 2, 4)


def test_an_epoch_trainer_refuses_a_stream_of_unknown_length_naming_what_to_do():
    from launcher.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^data.train: NoisyStream is an IterableDataset without __len__, and "
                                          r"trainer=epoch needs an epoch's length .*give it a __len__.*or use trainer=iter"):
        stream_trainer("epoch")


def test_a_stream_shorter_than_its_length_ends_its_epochs_early_and_says_so_once(caplog):
    trainer = stream_trainer("epoch", promise=16, max_epochs=3)  # promises 10 batches, yields 8
    assert trainer.steps_per_epoch == 10
    trainer.train()
    assert (trainer.iter, trainer.epoch) == (24, 3)
    said = [r.getMessage() for r in caplog.records if "stream ended" in r.getMessage()]
    assert said == ["The train stream ended after 8 batches, short of the 10 its length promises: epoch 1 ends there "
                    "(so does every epoch that falls short)"]


def test_a_stream_longer_than_its_length_says_so_once_and_one_of_the_right_length_says_nothing(caplog):
    """A pass past its __len__ (each worker's partial batch, a stream not shared out) was cut at the length in
    silence: the rest of every pass never trained on."""
    trainer = stream_trainer("epoch", promise=-16, max_epochs=3)  # promises 6 batches, yields 8
    assert trainer.steps_per_epoch == 6
    trainer.train()
    assert (trainer.iter, trainer.epoch) == (18, 3)
    said = [r.getMessage() for r in caplog.records if "its length promises" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("The train stream had more batches after the 6 its length promises: "
                                                 "epoch 1 ends there, and the rest of each pass that runs over is not "
                                                 "trained on. Make __len__ count what a pass yields"), said
    caplog.clear()
    trainer = stream_trainer("epoch", promise=0, max_epochs=3)
    trainer.train()
    assert (trainer.iter, trainer.epoch) == (24, 3) and "its length promises" not in caplog.text


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_whose_samples_do_not_stack_is_one_error_naming_the_batch_and_the_data(tmp_path, workers):
    """Torch's collate error came as a 60-line traceback naming neither data.train nor the batch; with workers its
    words were "Trying to resize storage that is not resizable"."""
    from launcher.data import DataLoaders
    from launcher.engine.errors import BatchCollateError, RunError
    from noisy_data import RaggedAt

    options = {"size": 80, "shape": [4], "num_classes": 2, "val_fraction": 0.2}
    data = DataLoaders(RaggedAt(at=10, split="train", **options), batch_size=8, num_workers=workers, shuffle=False)
    trainer = make_trainer("epoch", data=data, work_dir=tmp_path, model=ToyModel())
    with pytest.raises(BatchCollateError) as caught:
        trainer.train()
    assert isinstance(caught.value, RunError) and str(caught.value).startswith(
        "data.train: batch 2 of epoch 1 could not be made of its samples (torch's collate: RuntimeError: ")
    assert ("stack expects each tensor to be equal size" if workers == 0 else "resize") in str(caught.value)
    # the way to see the shapes is named only where torch's words leave them out (a worker's)
    assert ("with data.num_workers=0 torch names the shapes" in str(caught.value)) == (workers > 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_val_batch_whose_samples_do_not_stack_names_data_val_and_the_batch(tmp_path, workers):
    """The val loader's collate error came as torch's long traceback, naming neither data.val nor the batch."""
    from launcher.data import DataLoaders
    from launcher.engine.errors import BatchCollateError
    from noisy_data import NoisySynthetic, RaggedAt

    options = {"size": 80, "shape": [4], "num_classes": 2, "val_fraction": 0.5}
    data = DataLoaders(NoisySynthetic(split="train", **options), RaggedAt(at=20, split="val", **options), batch_size=8,
                       num_workers=workers, shuffle=False)
    trainer = make_trainer("epoch", data=data, work_dir=tmp_path, model=ToyModel(), max_epochs=2)
    with pytest.raises(BatchCollateError) as caught:
        trainer.validate()
    assert str(caught.value).startswith("data.val: batch 3 of the validation after 0 steps could not be made of its "
                                        "samples (torch's collate: ")
    assert trainer.model.training  # the model went back to training mode


def test_a_train_batch_that_cannot_be_loaded_at_a_runs_first_step_fails_it_without_a_checkpoint(tmp_path):
    """Later in a run such a batch stops it with a checkpoint of the training so far (see test_cli); before any step
    there is nothing to keep, and a large model's checkpoint of its initial weights would only cost its write."""
    from launcher.hooks.checkpoint import PeriodicCheckpointer
    from launcher.data import DataLoaders
    from launcher.engine.errors import DataError
    from noisy_data import MissingAt, NoisySynthetic

    options = {"size": 80, "shape": [4], "num_classes": 2, "val_fraction": 0.5}
    data = DataLoaders(MissingAt(at=3, split="train", **options), NoisySynthetic(split="val", **options), batch_size=8,
                       shuffle=False)
    trainer = make_trainer("epoch", data=data, hooks={"checkpointer": PeriodicCheckpointer(min_interval_secs=0)},
                           work_dir=tmp_path, model=ToyModel(), max_epochs=2)
    with pytest.raises(DataError, match=r"^data\.train: loading batch 1 of epoch 1 raised FileNotFoundError: .* \(at "
                                        r".*noisy_data\.py:\d+, in __getitem__\)$") as caught:
        trainer.train()
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    assert trainer.status == "failed" and trainer.stop_reason is None
    assert not list((tmp_path / "checkpoints").glob("*.pt"))


def test_a_val_worker_that_dies_is_named_as_data_val_without_a_line_of_the_users_code(tmp_path):
    """A worker killed while loading (the OOM killer) is a DataError of data.val too, which stops a training run
    with a checkpoint; there is no line of the user's to name, and none of the launcher's is named instead. (It dies at
    its first sample: one that dies while the main process takes a batch from it may surface as ConnectionResetError.)"""
    from launcher.data import DataLoaders
    from launcher.engine.errors import DataError
    from noisy_data import DiesAt, NoisySynthetic

    options = {"size": 80, "shape": [4], "num_classes": 2, "val_fraction": 0.5}
    data = DataLoaders(NoisySynthetic(split="train", **options), DiesAt(at=0, split="val", **options), batch_size=8,
                       num_workers=1, shuffle=False)
    trainer = make_trainer("epoch", data=data, work_dir=tmp_path, model=ToyModel(), max_epochs=2)
    with pytest.raises(DataError, match=r"^data\.val: loading batch \d of the validation after 0 steps raised RuntimeError: "
                                        r"DataLoader worker \(pid(\(s\))? \d+\) exited unexpectedly[^()]*$"):  # torch says it two ways
        trainer.validate()


@pytest.mark.parametrize("val", ["ragged", "empty stream"])
def test_val_data_that_yields_no_usable_batch_stops_the_run_with_a_checkpoint_and_the_mended_rerun_trains_on(tmp_path, val):
    """Found only at the first validation, after an epoch's training: a val batch that does not stack raised torch's
    collate error, and a val stream that yielded nothing finished the run with val metrics of NaN; either way now the
    run stops at that boundary with a checkpoint, as for val data that does not fit the model."""
    from torch.utils.data import DataLoader, IterableDataset

    from launcher.hooks.checkpoint import PeriodicCheckpointer
    from launcher.hooks.ema import EMA
    from launcher.hooks.evaluator import Evaluator
    from launcher.engine.errors import BatchCollateError, ConfigError
    from noisy_data import RaggedAt

    class Empty(IterableDataset):
        def __iter__(self):
            return iter(())

    class Bad(ToyData):
        def val_loader(self):
            if val == "ragged":
                return DataLoader(RaggedAt(at=2, size=16, shape=[4], num_classes=2, val_fraction=0.5, split="val"), batch_size=4)
            return DataLoader(Empty(), batch_size=4)

    def hooks():
        return {"evaluator": Evaluator(), "checkpointer": PeriodicCheckpointer(), "ema": EMA(decay=0.5)}

    trainer = make_trainer("epoch", data=Bad(), hooks=hooks(), work_dir=tmp_path, max_epochs=2)
    with pytest.raises(BatchCollateError if val == "ragged" else ConfigError) as caught:
        trainer.train()
    # the checkpoint holds the model's own weights, not the EMA's that validation swapped in
    own = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    saved = torch.load(tmp_path / "checkpoints" / "iter_0000004.pt", weights_only=True)
    assert all(torch.equal(saved["model"][k], v) for k, v in own.items())
    averaged = saved["hooks"]["ema"]["ema"]
    assert not torch.equal(averaged["module.lin.weight"], own["lin.weight"])
    assert str(caught.value).startswith("data.val: batch 1 of the validation after 4 steps could not be made" if val == "ragged"
                                        else "data.val: its loader yielded no batches (Empty), so validation has no metrics")
    assert (tmp_path / "checkpoints" / "last").read_text().strip() == "iter_0000004.pt"
    mended = make_trainer("epoch", hooks=hooks(), work_dir=tmp_path, max_epochs=2)
    mended.resume_or_load()
    assert mended.iter == 4
    mended.train()
    assert mended.iter == 8 and "val/accuracy" in mended.last_val


def test_a_workflow_val_phase_after_the_evaluator_validated_the_same_weights_is_skipped(tmp_path):
    """With trainer.workflow=[[train,1],[val,1]] and the evaluator hook, every epoch's weights were validated twice,
    and early stopping and ReduceLROnPlateau counted each twice. A resumed run skips as the uninterrupted one does."""
    from launcher.hooks.evaluator import Evaluator

    class Count(HookBase):
        def __init__(self):
            super().__init__()
            self.at = []

        def after_val(self):
            self.at.append(self.trainer.steps_done)

    from launcher.hooks.checkpoint import PeriodicCheckpointer

    count = Count()
    trainer = make_trainer("epoch", hooks={"evaluator": Evaluator(period=2), "count": count,
                                           "checkpointer": PeriodicCheckpointer(keep_last=0, min_interval_secs=0)},
                           work_dir=tmp_path / "a", max_epochs=4, workflow=[("train", 1), ("val", 1)])
    trainer.train()
    assert count.at == [4, 8, 12, 16]  # epochs 2 and 4 by the evaluator, 1 and 3 by the workflow's val phase
    # epoch 2's checkpoint: saved after the evaluator's validation, before the val phase, which its resume skips too
    again = Count()
    resumed = make_trainer("epoch", hooks={"evaluator": Evaluator(period=2), "count": again}, work_dir=tmp_path / "b",
                           max_epochs=4, workflow=[("train", 1), ("val", 1)],
                           resume=str(tmp_path / "a" / "checkpoints" / "epoch_0002.pt"))
    resumed.resume_or_load()
    resumed.train()
    assert again.at == [12, 16]
    # a workflow's own val phases all run: [val, 2] validates twice, as it asks
    twice = Count()
    make_trainer("epoch", hooks={"count": twice}, work_dir=tmp_path / "c", max_epochs=2,
                 workflow=[("train", 1), ("val", 2)]).train()
    assert twice.at == [4, 4, 8, 8]


def test_a_stream_refuses_persistent_workers_which_would_repeat_its_first_pass():
    from launcher.data import DataLoaders
    from noisy_data import NoisyStream

    data = DataLoaders(NoisyStream(size=80, shape=[4]), batch_size=8, num_workers=2, persistent_workers=True)
    with pytest.raises(ValueError, match=r"^data.persistent_workers: true keeps each worker's copy of the stream "
                                         r"NoisyStream from pass to pass"):
        data.train_loader()


def test_precise_bn_leaves_a_streams_epoch_and_every_random_state_as_training_had_them():
    import random

    import numpy as np

    from launcher.hooks.evaluator import Evaluator
    from launcher.hooks.precise_bn import PreciseBN

    class BNModel(ToyModel):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, batch):
            x, y = batch
            return super().forward((self.bn(x), y))

    class Check(HookBase):
        priority = 0  # before PreciseBN, after it (in after_val) the states must be the same

        def before_val(self):
            self.states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
            self.epoch = self.trainer.train_loader.dataset.epoch

        def after_val(self):
            r, n, t = self.states
            assert random.getstate() == r and (np.random.get_state()[1] == n).all() and torch.equal(torch.get_rng_state(), t)
            assert self.trainer.train_loader.dataset.epoch == self.epoch == self.trainer.epoch
            self.checked = getattr(self, "checked", 0) + 1

    check = Check()
    trainer = stream_trainer("iter", model=BNModel(), max_iters=12,
                             hooks=[Evaluator(by_epoch=False, period=5), PreciseBN(num_batches=2), check])
    trainer.train()
    assert check.checked >= 2


def test_a_stopiteration_raised_inside_a_step_is_not_taken_for_the_streams_end():
    class Raises(ToyModel):
        calls = 0

        def forward(self, batch):
            Raises.calls += 1
            if Raises.calls == 3:
                raise StopIteration("from the model")
            return super().forward(batch)

    with pytest.raises(StopIteration, match="from the model"):
        stream_trainer("iter", model=Raises(), max_iters=20).train()


def test_a_schedule_by_epoch_over_a_stream_of_unknown_length_needs_no_count_unless_it_takes_one():
    import functools

    from launcher.hooks.lr_scheduler import LRScheduler
    from launcher.engine.errors import ConfigError

    step = LRScheduler(functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5), by_epoch=True)
    trainer = stream_trainer("iter", hooks={"lr_scheduler": step}, max_iters=20)  # 8 batches a pass: 2 passes end
    trainer.train()
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.25)
    cosine = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR), by_epoch=True)
    with pytest.raises(ConfigError, match=r"^hooks.lr_scheduler.by_epoch: a train stream without __len__ has no count "
                                          r"of epochs for the schedule's T_max; set hooks.lr_scheduler.scheduler.T_max"):
        stream_trainer("iter", hooks={"lr_scheduler": cosine}, max_iters=20).train()


def test_a_streams_workers_draw_their_own_seeds_on_each_rank_and_epoch():
    from launcher.engine.loaders import StreamLoader
    from noisy_data import NoisyStream

    def seed(rank, epoch):
        loader = StreamLoader(NoisyStream(size=40, shape=[4]), 8, False, 0, rank)
        loader.set_epoch(epoch)
        return loader.generator.initial_seed()

    assert len({seed(0, 0), seed(1, 0), seed(0, 1), seed(1, 1)}) == 4


def test_worker_options_without_workers_are_named_as_having_no_effect(caplog):
    """data.persistent_workers=true with num_workers=0 was accepted without a word, as if it kept workers."""
    from launcher.data import DataLoaders, synthetic
    with caplog.at_level("WARNING", logger="launcher.data"):
        DataLoaders(synthetic(split="train", size=16, shape=[4]), persistent_workers=True, prefetch_factor=4)
        DataLoaders(synthetic(split="train", size=16, shape=[4]), num_workers=1, persistent_workers=True)
    said = [r.getMessage() for r in caplog.records]
    assert said == ["data.persistent_workers=true and data.prefetch_factor=4 have no effect with data.num_workers=0 (batches "
                    "are loaded in the training process); set data.num_workers=N for loader processes"], said


class _Unsaveable(HookBase):
    """A state that pickle refuses: from the start, or from iteration ``after`` on."""

    def __init__(self, after=None):
        super().__init__()
        self.after = after

    def state_dict(self):
        late = self.after is not None and self.trainer.iter < self.after
        return {"n": 1} if late else {"n": 1, "f": lambda x: x}


@pytest.mark.parametrize("after", [None, 5])
def test_a_hook_state_a_checkpoint_cannot_hold_is_named_before_training_or_at_the_save(after, tmp_path):
    """torch.save's AttributeError, raised an epoch into the run, named no hook (pickling happens on the checkpointer's
    side, not in the hook's state_dict); a state that pickle refuses from the start is now refused before training."""
    from launcher.engine.errors import HookStateError, RunError

    trainer = make_trainer("epoch", hooks={"mine": _Unsaveable(after), "ckpt": PeriodicCheckpointer(min_interval_secs=0)},
                           work_dir=tmp_path,
                           max_epochs=3)
    with pytest.raises(HookStateError, match=r"^hook mine \(test_trainer\._Unsaveable\): its state_dict\(\) holds what a "
                                             r"checkpoint cannot save \(AttributeError: Can't pickle local object") as err:
        trainer.train()
    assert isinstance(err.value, RunError)  # the CLI's one line
    assert trainer.iter == (0 if after is None else 8)  # 4 steps an epoch: epoch 1's checkpoint was whole, epoch 2's not


class _Counter(HookBase):
    def __init__(self):
        super().__init__()
        self.count = 0

    def after_step(self):
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class _StateGainedSince(HookBase):
    """Held no state when the checkpoint was taken; reads one now."""

    def load_state_dict(self, state):
        self.count = state["count"]


def test_a_hook_renamed_since_the_checkpoint_is_named_and_one_that_held_no_state_starts_afresh(caplog):
    """A renamed hook's state was dropped without a word (a count restarted at 0); a hook that had no state when
    checkpointed and reads one now failed with KeyError, where a hook added since starts afresh."""
    import logging

    first = make_trainer("iter", hooks={"cnt": _Counter(), "late": HookBase()}, max_iters=4)
    first.train()
    state = first.state_dict()
    caplog.set_level(logging.WARNING, logger="launcher.engine.trainer")
    renamed = make_trainer("iter", hooks={"cnt2": _Counter(), "late": _StateGainedSince()}, max_iters=4)
    renamed.load_state_dict(state)
    hooks = {h.name: h for h in renamed._hooks}
    assert hooks["cnt2"].count == 0 and not hasattr(hooks["late"], "count")
    assert [r.getMessage() for r in caplog.records] == [
        "The checkpoint holds the state of hook(s) cnt, which this run lacks, and this run's hook(s) cnt2 have "
        "none there: a renamed hook starts afresh (its old name resumes it)"]
    caplog.clear()
    same = make_trainer("iter", hooks={"cnt": _Counter()}, max_iters=4)  # one removed: said by the config's changes
    same.load_state_dict(state)
    assert {h.name: h for h in same._hooks}["cnt"].count == 4 and not caplog.records


class _TwoLayers(torch.nn.Module):
    def __init__(self, swapped=False):
        super().__init__()
        if swapped:  # the same layers, defined in the other order: model.parameters() lists b first
            self.b, self.a = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        else:
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(torch.relu(self.b(torch.relu(self.a(x))))), y)


@pytest.mark.parametrize("named", [False, True])
def test_a_model_whose_layers_are_defined_in_another_order_resumes_each_ones_optimizer_state(tmp_path, named):
    """The optimizer's state (SGD's momentum) loaded by position: after swapping two same-shaped layers' lines the
    resume gave a's momentum to b, silently, and the run ended elsewhere than an uninterrupted one. An optimizer
    given named parameters keeps torch's own param_names in step."""
    from launcher.engine.trainer import IterTrainer

    def trainer(swapped):
        torch.manual_seed(0)
        model = _TwoLayers(swapped)
        opt = torch.optim.SGD(model.named_parameters() if named else model.parameters(), lr=0.1, momentum=0.9)
        return IterTrainer(model, opt, ToyData(features=8), device="cpu", work_dir=tmp_path, max_iters=3)

    first = trainer(False)
    first.train()
    state = first.state_dict()
    swapped = trainer(True)
    swapped.load_state_dict(state)
    momentum = {n: swapped.optimizer.state[p]["momentum_buffer"] for n, p in swapped.model.named_parameters()}
    for n, p in first.model.named_parameters():
        assert torch.equal(momentum[n], first.optimizer.state[p]["momentum_buffer"]), n
    if named:
        assert swapped.optimizer.param_groups[0]["param_names"] == [n for n, _ in swapped.model.named_parameters()]


def test_a_checkpoint_of_a_model_with_other_parameters_names_each_side_once():
    """It said "the model has [] that it lacks, and it has ['extra.weight'] that the model lacks"."""
    trainer = make_trainer("iter")
    own = trainer.model.state_dict()
    added = {**own, "extra.weight": torch.zeros(1)}
    assert trainer._weights_mismatch(added, "there") == "the weights there have extra.weight, which the model lacks"
    both = {**{k: v for k, v in own.items() if k != "lin.bias"}, **{f"x{i}": torch.zeros(1) for i in range(7)}}
    assert trainer._weights_mismatch(both, "there") == ("the model has lin.bias, which the weights there lack; the weights "
                                                        "there have x0, x1, x2, x3, x4 and 2 more, which the model lacks")


def test_a_non_finite_val_metric_is_warned_of_once(tmp_path, caplog):
    """val/loss nan went by in silence: the run finished, completed, with its objective NaN."""
    from launcher.hooks.evaluator import Evaluator

    class NaNInEval(ToyModel):
        def forward(self, batch):
            out = super().forward(batch)
            return out if self.training else {**out, "loss": out["loss"] * float("nan")}

    trainer = make_trainer("epoch", model=NaNInEval(), hooks={"evaluator": Evaluator()}, work_dir=tmp_path, max_epochs=3)
    with caplog.at_level(logging.WARNING, logger="launcher"):
        trainer.train()
    said = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert said == ["Validation after 4 steps: val/loss = nan: the model's forward in eval mode returned a non-finite "
                    "value for some batch; recorded as such"]
    assert math.isnan(trainer.last_val["val/loss"]) and trainer.status == "completed"


@pytest.mark.parametrize("by_epoch, period, said", [(False, 100, "hooks.evaluator.period=100 (iterations) is longer than "
                                                                 "the run (8 iterations) and hooks.evaluator.at_end=false"),
                                                    (True, 3, "hooks.evaluator.period=3 (epochs) is longer than the run "
                                                              "(2 epochs) and hooks.evaluator.at_end=false"),
                                                    (True, 2, None)])
def test_an_evaluator_whose_period_the_run_never_reaches_is_named_before_training(tmp_path, caplog, by_epoch, period, said):
    """It was found at the end, as "objective 'val/accuracy' is not among the run's metrics", with advice on what the
    model's forward returns in eval mode: the model was blamed for the evaluator's settings."""
    import launcher
    from launcher.hooks.evaluator import Evaluator

    trainer = make_trainer("epoch", hooks={"evaluator": Evaluator(period=period, by_epoch=by_epoch, at_end=False)},
                           work_dir=tmp_path, max_epochs=2)
    with caplog.at_level(logging.WARNING, logger="launcher"):
        warned = launcher.runs.objective.warn_if_objective_never_recorded(trainer, "val/accuracy")
    assert warned == (said is not None)
    if said:
        assert f"objective 'val/accuracy' will not be recorded: this run never validates, as {said}" in caplog.text


def test_no_val_set_names_the_data_object_that_returned_none_rather_than_data_val(tmp_path, caplog):
    """A data object of the user's own whose val_loader() returned None was said to have data.val null."""
    from launcher.hooks.evaluator import Evaluator
    from launcher.data import DataLoaders
    from noisy_data import NoisySynthetic

    config = make_trainer("epoch", data=DataLoaders(NoisySynthetic(size=32, shape=[4], num_classes=2, val_fraction=0.5,
                                                                   split="train"), None, batch_size=8), work_dir=tmp_path)
    assert config.no_val_set == "the data config has no val set (data.val is null)"
    own = make_trainer("epoch", data=ToyData(val=False), hooks={"evaluator": Evaluator()}, work_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        own.train()
    assert "hooks.evaluator: the data object's val_loader() (ToyData) returned None; no validation will run" in caplog.text
