"""The hook library: each hook's behaviour, asserted against what it promises."""
from __future__ import annotations

import copy
import functools
import io
import logging
import math
import re
import sys

import pytest
import torch
from torch import nn

from conftest import ToyData, ToyModel, make_trainer
from launcher.hooks import HookBase
from launcher.hooks.early_stopping import EarlyStopping
from launcher.hooks.checkpoint import PeriodicCheckpointer
from launcher.hooks.ema import EMA
from launcher.hooks.evaluator import Evaluator
from launcher.hooks.lr_scheduler import LRScheduler
from launcher.hooks.optim import OptimizerStep
from launcher.hooks.precise_bn import PreciseBN


def test_accumulating_4_micro_batches_of_16_equals_one_batch_of_64():
    torch.manual_seed(0)
    model = ToyModel()
    twin = copy.deepcopy(model)
    small = make_trainer("iter", model=model, data=ToyData(n=64, batch=16, val=False), max_iters=4,
                         hooks=[OptimizerStep(accumulate=4)])
    small.train()
    big = make_trainer("iter", model=twin, data=ToyData(n=64, batch=64, val=False), max_iters=1)
    big.train()
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.equal(model.lin.weight, ToyModel().lin.weight)


def test_a_monitor_given_to_a_schedule_that_steps_on_no_metric_is_said_to_be_unused(caplog):
    """hooks.lr_scheduler.monitor=val/accuracy beside CosineAnnealingLR was ignored without a word."""
    caplog.set_level(logging.WARNING, logger="launcher.hooks.lr_scheduler")
    cosine = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR), monitor="val/accuracy")
    make_trainer("iter", data=ToyData(n=64, batch=16, val=False), max_iters=4, hooks=[cosine]).train()
    assert [r.getMessage() for r in caplog.records] == [
        f"hooks.{cosine.name}.monitor=val/accuracy is not used: only ReduceLROnPlateau steps on a metric, and "
        "CosineAnnealingLR follows its own schedule"]
    caplog.clear()
    plain = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR))  # the default monitor: no word
    make_trainer("iter", data=ToyData(n=64, batch=16, val=False), max_iters=4, hooks=[plain]).train()
    assert not caplog.records


def test_with_accumulation_the_lr_schedule_moves_with_the_optimizer_steps():
    """2 micro-batches of 16 under a cosine schedule with 4 iterations of warmup train as batches of 32 do
    with 2 (warmup counts iterations, as the run's length does), and torch
    never warns that the schedule stepped before the optimizer (its first value would be lost)."""
    import functools
    import warnings

    def schedule(warmup_iters):
        return LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR), warmup_iters=warmup_iters)

    torch.manual_seed(0)
    model = ToyModel()
    twin = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Detected call of `lr_scheduler.step()` before `optimizer.step()`"
        small = make_trainer("iter", model=model, data=ToyData(n=64, batch=16, val=False), max_iters=16,
                             hooks=[OptimizerStep(accumulate=2), schedule(4)])
        small.train()
    big = make_trainer("iter", model=twin, data=ToyData(n=64, batch=32, val=False), max_iters=8, hooks=[schedule(2)])
    big.train()
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-6), (name, (a - b).abs().max().item())
    lrs_small = [v for v, _ in small.storage.history("lr").values()]
    lrs_big = [v for v, _ in big.storage.history("lr").values()]
    assert lrs_small[1::2] == lrs_big and lrs_small[0::2] == lrs_big  # each micro-batch of a step logs its step's lr


@pytest.mark.parametrize("saved, now", [(1, 2), (2, 1), ("absent", 2), (2, 2), ("absent", 1)])
def test_a_schedule_resumed_at_another_rate_of_steps_is_warned_of(tmp_path, caplog, saved, now):
    """A checkpoint of a launcher before 2026-12-04 (its schedule stepped every micro-batch, no 'every' in its state),
    or one resumed with another hooks.optimizer_step.accumulate, restored a schedule whose length counts other steps:
    it ended far from its end (lr 0.03 of 0.1) with no word."""
    import functools

    def run(accumulate, max_iters):
        schedule = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR))
        return make_trainer("iter", data=ToyData(n=64, batch=16, val=False), max_iters=max_iters, work_dir=tmp_path,
                            hooks={"lr_scheduler": schedule, **({"optimizer_step": OptimizerStep(accumulate=accumulate)}
                                                                if accumulate > 1 else {})})

    first = run(1 if saved == "absent" else saved, 8)
    first.train()
    state = first.state_dict()
    if saved == "absent":
        del state["hooks"]["lr_scheduler"]["every"]
    again = run(now, 16)
    with caplog.at_level(logging.WARNING):
        again.load_state_dict(state)
    said = [r.getMessage() for r in caplog.records if "the checkpoint's schedule was stepped" in r.getMessage()]
    if (1 if saved == "absent" else saved) == now:
        assert said == []
    else:
        every = 1 if saved == "absent" else saved
        assert len(said) == 1 and said[0].startswith(
            f"hooks.lr_scheduler: the checkpoint's schedule was stepped once every {every} iteration(s)"), said
        assert f"this run steps it once every {now} (hooks.optimizer_step.accumulate={now})" in said[0]
        assert ("a checkpoint of a launcher before 2026-12-04" in said[0]) == (saved == "absent")


def test_with_accumulation_ema_and_momentum_schedule_move_with_the_optimizer_steps_too(caplog):
    """The EMA was updated after every micro-batch (decay**N a step, the first weights averaged in N-1 more times) and
    the momentum schedule counted micro-batches: neither was the run on N-times larger batches. A length that is no
    multiple of N dropped its last micro-batches in silence, and the cosine schedule was made one step too long."""
    from launcher.hooks.param_schedule import ParamSchedule

    def hooks(accumulate):
        return [*([OptimizerStep(accumulate=accumulate)] if accumulate > 1 else []), EMA(decay=0.5),
                ParamSchedule(key="momentum", start=0.5, end=0.9)]

    torch.manual_seed(0)
    model = ToyModel()
    twin = copy.deepcopy(model)
    small = make_trainer("iter", model=model, data=ToyData(n=64, batch=16, val=False), max_iters=16, hooks=hooks(2))
    small.train()
    big = make_trainer("iter", model=twin, data=ToyData(n=64, batch=32, val=False), max_iters=8, hooks=hooks(1))
    big.train()
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):  # the EMA's weights, put in at the end
        assert torch.allclose(a, b, atol=1e-6), (name, (a - b).abs().max().item())
    ema_small, ema_big = (next(h for h in t.hooks if isinstance(h, EMA)).ema.n_averaged.item() for t in (small, big))
    assert ema_small == ema_big == 8
    momentum = [[v for v, _ in t.storage.history("momentum").values()] for t in (small, big)]
    assert momentum[0][0::2] == momentum[0][1::2] == momentum[1]
    assert not [r for r in caplog.records if "accumulate" in r.getMessage()]

    caplog.set_level(logging.WARNING)
    cosine = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR))
    odd = make_trainer("iter", data=ToyData(n=64, batch=16, val=False), max_iters=15, hooks=[OptimizerStep(accumulate=2), cosine])
    odd.train()
    said = [r.getMessage() for r in caplog.records if "accumulate=2" in r.getMessage()]
    assert said and said[0].endswith("accumulate=2: the run's 15 iterations are not a multiple of it, so its last 1 "
                                     "micro-batch(es) are not stepped; give the run a length that is a multiple of 2"), said
    assert cosine.scheduler.T_max == 7 and cosine.scheduler.last_epoch == 7  # the 7 optimizer steps the run takes


def test_clipping_bounds_the_gradient_norm_and_records_it_unclipped():
    seen = []

    hook = OptimizerStep(clip_grad_norm=0.01)
    trainer = make_trainer("iter", hooks=[hook], max_iters=3)
    orig = trainer.optimizer.step

    def step(*a, **k):
        seen.append(torch.nn.utils.get_total_norm([p.grad for p in trainer.model.parameters()]).item())
        return orig(*a, **k)

    trainer.optimizer.step = step
    trainer.train()
    assert seen and all(n <= 0.01 * (1 + 1e-4) for n in seen)
    recorded = [v for v, _ in trainer.storage.history("grad_norm").values()]
    assert all(r > 0.01 for r in recorded)  # the norm before clipping


def test_linear_warmup_gives_the_expected_lr_then_the_schedule():
    hook = LRScheduler(functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR), warmup_iters=4, warmup_factor=0.1)
    trainer = make_trainer("iter", hooks=[hook], max_iters=12)
    trainer.train()
    lrs = [v for v, _ in trainer.storage.history("lr").values()]
    assert lrs[0] == pytest.approx(0.01)  # 0.1 * base lr 0.1
    assert lrs[2] == pytest.approx(0.1 * (0.1 + 0.9 * 2 / 4))
    assert lrs[4] == pytest.approx(0.1)  # warmup over: the cosine starts at the base lr
    assert lrs[8] == pytest.approx(0.1 * (1 + math.cos(math.pi * 4 / 8)) / 2)  # T_max = 12 - 4


@pytest.mark.parametrize("kind", ["epoch", "iter", "epoch, validated within epochs"])
def test_early_stopping_stops_at_the_right_validation_on_a_scripted_metric(tmp_path, kind):
    """The iteration trainer validates inside a step's after_step: the best was named one step early there
    ("validated after 7 steps: iter 6" for the validation after 8 steps, the row iter 7 of metrics.jsonl)."""
    scripted = iter([1.0, 0.8, 0.79, 0.81, 0.80, 0.9, 0.5])  # best 0.8 (validation 2); 0.79 is within min_delta

    class Scripted(HookBase):
        priority = 55  # after validation recorded val/*, before EarlyStopping (60)

        def after_val(self):
            self.trainer.last_val["val/loss"] = next(scripted)

    stopper = EarlyStopping(monitor="val/loss", mode="min", patience=3, min_delta=0.05)
    if kind == "epoch":
        trainer = make_trainer("epoch", hooks=[Evaluator(), Scripted(), stopper], max_epochs=20, work_dir=tmp_path)
        trainer.train()
        assert trainer.epoch == 5  # validations 3, 4, 5 did not beat 0.8 by more than 0.05
        steps = 2 * trainer.steps_per_epoch  # the best is epoch 2's: named as the files number its row, and the count is 3
        where = "epoch 2/20, "  # what an epoch run counts in, from 1 as the console shows it
    elif kind == "iter":
        trainer = make_trainer("iter", hooks=[Evaluator(period=4, by_epoch=False), Scripted(), stopper], max_iters=80,
                               work_dir=tmp_path)
        trainer.train()
        assert trainer.iter == 20
        steps, where = 8, ""
    else:  # every 3 steps of 4-step epochs: the best, after 6 steps, is inside epoch 2, not after an epoch
        trainer = make_trainer("epoch", hooks=[Evaluator(period=3, by_epoch=False), Scripted(), stopper], max_epochs=20,
                               work_dir=tmp_path)
        trainer.train()
        assert trainer.iter == 15
        steps, where = 6, ""
    assert trainer.status == "stopped" and trainer.stop_reason == (
        f"early stopping: val/loss did not improve on 0.8 (validated after {where}{steps} steps: iter {steps - 1} in "
        f"metrics.jsonl) by more than 0.05 for 3 validations")


def test_a_run_resumed_after_early_stopping_decided_to_stop_stops_again_at_once(tmp_path):
    """Killed between the decision and final.pt (or a signal at that very step): the checkpoint holds the
    stopper's count, and the resumed run stops where the uninterrupted one did instead of training on."""
    from launcher.hooks.checkpoint import PeriodicCheckpointer

    stopper = EarlyStopping(monitor="val/loss", patience=2)
    trainer = make_trainer("epoch", hooks={"early_stopping": stopper, "ckpt": PeriodicCheckpointer(save_final=False)},
                           max_epochs=20, work_dir=tmp_path)
    trainer.storage.put_scalar("val/loss", 1.0)
    stopper.load_state_dict({"best": 0.5, "best_iter": 3, "bad": 2})  # as the checkpoint after the decision holds
    trainer.train()
    assert trainer.iter == 0 and trainer.status == "stopped" and trainer.stop_reason.startswith("early stopping")


def test_ema_equals_its_formula():
    decay = 0.9
    hook = EMA(decay=decay, final_weights_ema=False)
    trainer = make_trainer("iter", hooks=[hook], max_iters=5)
    snapshots = []

    class Snap(HookBase):
        priority = 0

        def after_step(self):
            snapshots.append(self.trainer.model.lin.weight.detach().clone())

    trainer.register_hooks([Snap()])
    trainer.train()
    expected = snapshots[0]  # AveragedModel starts from the weights after the first step
    for w in snapshots[1:]:
        expected = decay * expected + (1 - decay) * w
    assert torch.allclose(hook.ema.module.lin.weight, expected, atol=1e-6)


def test_ema_weights_are_used_for_validation_and_the_end_and_the_model_keeps_its_own_in_between():
    hook = EMA(decay=0.5, eval_with_ema=True, final_weights_ema=True)
    seen = {}

    class Watch(HookBase):
        priority = 50

        def before_val(self):
            seen["val"] = self.trainer.model.lin.weight.detach().clone()

    trainer = make_trainer("epoch", hooks=[hook, Watch(), Evaluator()], max_epochs=1)
    trainer.train()
    assert torch.equal(seen["val"], hook.ema.module.lin.weight)
    assert torch.equal(trainer.model.lin.weight, hook.ema.module.lin.weight)  # final_weights_ema


class BNToyModel(ToyModel):
    """ToyModel behind a BatchNorm, whose statistics EMA averages and PreciseBN recomputes."""

    def __init__(self, features: int = 4):
        super().__init__(features)
        self.bn = nn.BatchNorm1d(features, momentum=0.5)

    def forward(self, batch):
        x, y = batch
        return super().forward((self.bn(x), y))


def validate_final_pt(tmp_path, data):
    """The val/* metrics of checkpoints/final.pt's weights, validated as the trainer does."""
    model = BNToyModel()
    model.load_state_dict(torch.load(tmp_path / "checkpoints" / "final.pt", weights_only=True)["model"])
    return make_trainer("epoch", model=model, data=data, hooks=[]).validate()


@pytest.mark.parametrize("eval_with_ema, precise_bn", [(True, True), (False, False)])
def test_with_ema_the_final_metrics_are_those_of_the_weights_in_final_pt(eval_with_ema, precise_bn, tmp_path):
    """final.pt holds the EMA weights: the reported val/* must describe them, also when PreciseBN
    recomputed their BatchNorm statistics, and when the validations during training used the model's own."""
    torch.manual_seed(0)
    data = ToyData(n=32, batch=8)
    # PreciseBN listed first: whatever the config's order, it recomputes for the weights EMA puts in
    hooks = [PreciseBN(num_batches=2) if precise_bn else None, EMA(decay=0.5, eval_with_ema=eval_with_ema),
             Evaluator(), PeriodicCheckpointer()]
    trainer = make_trainer("epoch", model=BNToyModel(), data=data, hooks=hooks, max_epochs=2, work_dir=tmp_path)
    names = [type(h).__name__ for h in trainer.hooks]
    assert not precise_bn or names.index("EMA") < names.index("PreciseBN")  # its statistics are for the EMA weights
    reported = trainer.train()
    saved = validate_final_pt(tmp_path, data)
    assert saved["val/loss"] == pytest.approx(reported["val/loss"], abs=1e-7)
    assert saved["val/accuracy"] == pytest.approx(reported["val/accuracy"], abs=1e-7)


def test_an_ema_run_trained_on_from_final_pt_goes_on_from_its_own_weights(tmp_path):
    """final.pt's model is the EMA; raising the length trains on from the weights the optimizer
    state belongs to, so 2 epochs then 1 more end as 3 epochs in one go do."""
    def run(epochs, work_dir, model):
        kept = {}

        class Keep(HookBase):
            priority = 0

            def before_train(self):  # the model as training (re)starts, after any resume
                kept["start"] = copy.deepcopy(self.trainer.model.state_dict())

            def after_epoch(self):  # the model's own weights at the end, before EMA puts its own in
                kept["end"] = copy.deepcopy(self.trainer.model.state_dict())

        hooks = [EMA(decay=0.5), Evaluator(), PreciseBN(num_batches=2), PeriodicCheckpointer(), Keep()]
        make_trainer("epoch", model=model, data=ToyData(n=32, batch=8), hooks=hooks, max_epochs=epochs,
                     work_dir=work_dir).train()
        return kept, torch.load(work_dir / "checkpoints" / "final.pt", weights_only=True)

    torch.manual_seed(0)
    model = BNToyModel()
    twin = copy.deepcopy(model)
    first, final = run(2, tmp_path / "run", model)
    assert "raw" not in torch.load(tmp_path / "run" / "checkpoints" / "epoch_0002.pt", weights_only=True)["hooks"]["EMA"]
    assert not torch.equal(final["model"]["lin.weight"], first["end"]["lin.weight"])  # final.pt: the EMA weights
    second, final = run(3, tmp_path / "run", BNToyModel())
    for name, tensor in first["end"].items():
        assert torch.equal(second["start"][name], tensor), name
    _, straight = run(3, tmp_path / "straight", twin)
    for part in ("model", "ema", "raw"):  # the EMA weights, the EMA's state, the model's own weights
        want = straight["model"] if part == "model" else straight["hooks"]["EMA"][part]
        got = final["model"] if part == "model" else final["hooks"]["EMA"][part]
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor), (part, name)


def test_precise_bn_sets_running_stats_to_the_average_over_training_batches():
    class BNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4, momentum=0.5)
            self.lin = nn.Linear(4, 2)

        def forward(self, batch):
            x, y = batch
            loss = nn.functional.cross_entropy(self.lin(self.bn(x)), y)
            return loss if self.training else {"loss": loss}

    data = ToyData(n=32, batch=8)
    model = BNModel()
    trainer = make_trainer("epoch", model=model, data=data, hooks=[PreciseBN(num_batches=4)], max_epochs=1)
    trainer.train()
    trainer.validate()
    # the 4 batches are the whole training set here: their mean of per-batch means is the data mean
    assert torch.allclose(model.bn.running_mean, data.x.mean(0), atol=1e-5)
    batch_vars = torch.stack([data.x[i:i + 8].var(0, unbiased=True) for i in range(0, 32, 8)])
    assert torch.allclose(model.bn.running_var, batch_vars.mean(0), atol=1e-5)


def test_nonfinite_skip_policy_skips_exactly_the_poisoned_batch():
    class Poisoned(ToyModel):
        calls = 0

        def forward(self, batch):
            self.calls += 1
            loss = super().forward(batch)
            return loss * float("nan") if self.calls == 3 else loss

    torch.manual_seed(0)
    model = Poisoned()
    twin = copy.deepcopy(model)
    trainer = make_trainer("iter", model=model, hooks=[OptimizerStep(nonfinite="skip")], max_iters=4)
    trainer.train()
    assert trainer.storage.history("skipped_batches").latest() == 1
    # the same run without batch 3 (index 2): steps on batches 0, 1 and 3
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    batches = list(ToyData().train_loader())
    for i in (0, 1, 3):
        loss = ToyModel.forward(twin, batches[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_nonfinite_raise_policy_names_the_iteration():
    class NaN(ToyModel):
        def forward(self, batch):
            return super().forward(batch) * float("nan")

    with pytest.raises(FloatingPointError, match="in step 1 of .*iter 0, as metrics.jsonl numbers steps"):
        make_trainer("iter", model=NaN(), hooks=[OptimizerStep()]).train()


def test_bf16_autocast_on_the_cpu():
    dtypes = []

    class Probe(ToyModel):
        def forward(self, batch):
            dtypes.append(self.lin(batch[0]).dtype)
            return super().forward(batch)

    trainer = make_trainer("iter", model=Probe(), hooks=[OptimizerStep(amp="bf16")], max_iters=2)
    trainer.train()
    assert dtypes[0] == torch.bfloat16 and trainer.model.lin.weight.dtype == torch.float32


def test_only_one_hook_may_take_over_the_optimizer_step():
    with pytest.raises(TypeError, match="each take over the optimizer step"):
        make_trainer(hooks={"a": OptimizerStep(), "b": OptimizerStep()})


def test_bad_hook_settings_name_the_setting():
    with pytest.raises(ValueError, match="accumulate should be an integer >= 1, got 0"):
        OptimizerStep(accumulate=0)
    with pytest.raises(ValueError, match="amp should be null, fp16 or bf16, got 'fp8'"):
        OptimizerStep(amp="fp8")
    with pytest.raises(ValueError, match="warmup_iters counts iterations; it needs by_epoch=false"):
        LRScheduler(torch.optim.lr_scheduler.StepLR, by_epoch=True, warmup_iters=5)


def test_momentum_schedule_sets_every_group_each_step():
    from launcher.hooks.param_schedule import ParamSchedule

    hook = ParamSchedule(key="momentum", start=0.5, end=0.9, schedule="linear")
    model = ToyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    from launcher.engine.trainer import IterTrainer

    trainer = IterTrainer(model, opt, ToyData(), hooks=[hook], device="cpu", max_iters=5)
    trainer.train()
    values = [v for v, _ in trainer.storage.history("momentum").values()]
    assert values == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9])
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.9)
    from launcher.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"key=betas.0: the optimizer \(SGD\) has no 'betas'; the optimizer's settings it "
                                          r"can schedule: momentum, dampening, weight_decay"):
        IterTrainer(ToyModel(), torch.optim.SGD(ToyModel().parameters(), lr=0.1), ToyData(),
                    hooks=[ParamSchedule(key="betas.0")], device="cpu", max_iters=1).train()


def test_fp16_step_with_non_finite_gradients_is_skipped_and_counted():
    class InfGrad(ToyModel):
        calls = 0

        def forward(self, batch):
            self.calls += 1
            loss = super().forward(batch)
            return loss * 1e30 if self.calls == 2 else loss  # finite in fp32, overflows the fp16 gradients

    hook = OptimizerStep(amp="fp16")
    trainer = make_trainer("iter", model=InfGrad(), hooks=[hook], max_iters=3)
    trainer.train()
    assert hook.skipped_steps >= 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_progress_bar_is_off_without_a_terminal_and_draws_when_forced(capsys):
    from launcher.hooks.progress import ProgressBar

    quiet = ProgressBar()
    make_trainer("iter", hooks=[quiet], max_iters=3).train()
    assert quiet.bar is None and "it/s" not in capsys.readouterr().out

    loud = ProgressBar(force=True)
    make_trainer("iter", hooks=[loud], max_iters=3).train()
    out = capsys.readouterr().out
    assert "3/3" in out and "loss=" in out


def test_profiler_writes_a_trace_for_tensorboard(tmp_path):
    from launcher.hooks.profiler import Profiler

    make_trainer("iter", hooks=[Profiler(wait=1, warmup=1, active=2)], max_iters=6, work_dir=tmp_path).train()
    traces = list((tmp_path / "profiler").glob("*.pt.trace.json"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0


class FakeTerminal(io.StringIO):
    """What a terminal receives: tqdm and the log handlers write here as they would to a tty."""

    def isatty(self) -> bool:
        return True


class LogEachStep(HookBase):
    """Logs a line after every step, after the progress bar has drawn it."""

    priority = 95

    def after_step(self) -> None:
        logging.getLogger("test_progress").info("LOG epoch %d", self.trainer.epoch + 1)


@pytest.fixture
def terminal(monkeypatch):
    """A console log handler on a fake terminal, removed after; a test puts sys.stdout there too
    (in its body: pytest sets sys.stdout for the test after the fixtures)."""
    term = FakeTerminal()
    log = logging.getLogger("test_progress")
    handler = logging.StreamHandler(term)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    monkeypatch.setattr(log, "propagate", False)
    yield term, handler
    log.removeHandler(handler)
    log.setLevel(logging.NOTSET)


def test_progress_bar_keeps_log_lines_off_the_bar_and_shows_the_current_epoch(terminal, monkeypatch):
    from launcher.hooks.progress import ProgressBar

    term, handler = terminal
    monkeypatch.setattr(sys, "stdout", term)
    bar = ProgressBar(refresh_per_second=1e9)  # a redraw at every step
    make_trainer("iter", hooks=[bar, LogEachStep()], data=ToyData(n=16, batch=4, val=False), max_iters=12).train()
    out = term.getvalue()
    lines = out.split("\n")
    logged = [line for line in lines if "LOG" in line]
    assert len(logged) == 12
    for line in logged:  # what a terminal shows of it: the text after its last carriage return
        assert line.split("\r")[-1].startswith("LOG epoch"), repr(line)
    draws = re.findall(r"epoch (\d+)/3: +\d+%\|[^|]*\| (\d+)/12", out)
    assert len(draws) >= 24  # one each step, one after each log line
    for epoch, n in draws:  # 4 steps an epoch: step n is in epoch (n - 1) // 4 + 1
        assert int(epoch) == (int(n) - 1) // 4 + 1, (epoch, n)
    for line, after in zip(lines, lines[1:]):
        if "LOG" in line:  # the bar drawn again under a log line names that line's epoch
            assert re.search(r"epoch (\d+)/", after).group(1) == line.split()[-1], (line, after)
    assert handler.stream is term


def test_the_bar_under_a_console_line_counts_the_step_that_line_reports(terminal, monkeypatch):
    from launcher.hooks.progress import ProgressBar
    from launcher.hooks.writers import ConsoleWriter

    term, handler = terminal
    monkeypatch.setattr(sys, "stdout", term)
    launcher_log = logging.getLogger("launcher")
    monkeypatch.setattr(launcher_log, "handlers", [handler])
    monkeypatch.setattr(launcher_log, "level", logging.INFO)
    monkeypatch.setattr(launcher_log, "propagate", False)
    hooks = {"console": ConsoleWriter(period=2), "progress": ProgressBar(refresh_per_second=1e9)}  # the config's order
    make_trainer("iter", hooks=hooks, data=ToyData(n=16, batch=4, val=False), max_iters=12).train()
    lines = term.getvalue().split("\n")
    pairs = [(re.search(r"iter (\d+)/12", line).group(1), re.search(r"\| (\d+)/12", after).group(1))
             for line, after in zip(lines, lines[1:]) if "iter " in line.split("\r")[-1] and "/12" in after]
    assert len(pairs) == 6 and all(logged == drawn for logged, drawn in pairs), pairs


def test_progress_bar_gives_the_log_handlers_their_stream_back_when_training_fails(terminal, monkeypatch):
    from launcher.hooks.progress import ProgressBar

    class Fail(HookBase):
        def after_step(self) -> None:
            if self.trainer.iter == 2:
                raise RuntimeError("boom")

    term, handler = terminal
    monkeypatch.setattr(sys, "stdout", term)
    bar = ProgressBar()
    with pytest.raises(RuntimeError, match="boom"):
        make_trainer("iter", hooks=[bar, Fail()], max_iters=6).train()
    assert handler.stream is term and bar.bar is None
    logging.getLogger("test_progress").info("after")
    assert term.getvalue().endswith("\nafter\n")


@pytest.mark.parametrize("steps", [2, 3])
def test_a_run_too_short_for_the_profiled_window_says_so_once_and_writes_no_trace(steps, tmp_path, caplog):
    """wait + warmup = 3: with 3 steps torch would record only the time after the last one."""
    from launcher.hooks.profiler import Profiler

    caplog.set_level(logging.INFO, logger="launcher.hooks.profiler")
    make_trainer("iter", hooks=[Profiler(wait=2, warmup=1, active=2)], max_iters=steps, work_dir=tmp_path).train()
    assert not (tmp_path / "profiler").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"wait=2 + warmup=1 + active=2 need 5 steps and the run has {steps}" in warnings[0]
    assert "no trace will be written" in warnings[0]


def test_a_run_shorter_than_the_window_traces_the_steps_it_has_and_says_where(tmp_path, caplog):
    from launcher.hooks.profiler import Profiler

    caplog.set_level(logging.INFO, logger="launcher.hooks.profiler")
    make_trainer("iter", hooks=[Profiler(wait=1, warmup=1, active=3)], max_iters=4, work_dir=tmp_path).train()
    [trace] = (tmp_path / "profiler").glob("*.pt.trace.json")
    steps = set(re.findall(r'"ProfilerStep#(\d+)"', trace.read_text()))
    assert steps == {"2", "3"}
    messages = [r.getMessage() for r in caplog.records]
    assert any("the run has 4" in m and "2 of the 3 active steps" in m for m in messages), messages
    assert any(str(trace) in m and "https://ui.perfetto.dev" in m for m in messages), messages


def never_improving(work_dir, kind: str = "epoch", patience: int = 2, evaluator=None, **length):
    """A trainer with early stopping on a val/loss that never improves, checkpointing to ``work_dir``."""
    from launcher.hooks.checkpoint import PeriodicCheckpointer

    class Flat(HookBase):
        priority = 55

        def after_val(self):
            self.trainer.last_val["val/loss"] = 1.0

    return make_trainer(kind, work_dir=work_dir, **length, hooks={
        "evaluator": evaluator or Evaluator(), "flat": Flat(), "early_stopping": EarlyStopping(patience=patience),
        "checkpointer": PeriodicCheckpointer()})


def test_a_run_stopped_early_and_then_lengthened_trains_on_to_its_next_validation(tmp_path):
    """Raising max_epochs of a finished run asks for more training: the stop decision in final.pt is not
    taken again at once (it is after a kill, when the run resumes from an earlier checkpoint)."""
    first = never_improving(tmp_path, max_epochs=20)
    first.train()
    assert first.status == "stopped" and first.epoch == 3
    second = never_improving(tmp_path, max_epochs=30)
    second.train()
    assert second.resumed_from.name == "final.pt" and second.status == "stopped" and second.epoch == 4
    # the validations since its best (epoch 1) count 3 now (the reason said "for 2", the patience, however many)
    assert first.stop_reason.endswith("for 2 validations") and second.stop_reason.endswith("for 3 validations")


@pytest.mark.parametrize("kind", ["epoch", "iter", "at_end"])
def test_a_run_whose_last_validation_decided_to_stop_ends_the_same_when_rerun_from_its_final_checkpoint(kind, tmp_path):
    """The decision at the run's last step: killed after final.pt was written but before its record said how the run
    ended, the rerun (same length) took the decision again; an iteration-based run that had completed ended "stopped"."""
    def trainer():
        length = {"max_epochs": 3} if kind != "iter" else {"max_iters": 12}
        # at_end: validations after epoch 2 and at the end (after training: the decision there stops nothing)
        evaluator = Evaluator(period=4, by_epoch=False) if kind == "iter" else Evaluator(period=2 if kind == "at_end" else 1)
        return never_improving(tmp_path, "iter" if kind == "iter" else "epoch", 1 if kind == "at_end" else 2, evaluator,
                               **length)

    first = trainer()
    first.train()
    assert first.status == ("completed" if kind == "at_end" else "stopped")
    weights = {k: v.clone() for k, v in first.model.state_dict().items()}
    again = trainer()
    again.train()
    assert again.resumed_from.name == "final.pt" and (again.status, again.iter) == (first.status, first.iter)
    assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in weights.items())


def test_clip_bounds_take_any_positive_real_inf_included_and_refuse_the_rest():
    import numpy as np

    for ok in (1, 0.5, float("inf"), np.float32(2.0)):
        OptimizerStep(clip_grad_norm=ok)
        OptimizerStep(clip_grad_value=ok)
    OptimizerStep(clip_grad_norm=1.0, norm_type=float("inf"))
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="should be a number greater than zero"):
            OptimizerStep(clip_grad_norm=bad)


def test_a_run_stopped_early_and_killed_just_after_its_final_checkpoint_stops_again_at_once(tmp_path):
    """Killed after final.pt was written but before run.json said stopped, the rerun (same command) resumed from
    final.pt, took it for a lengthened run and trained on to its next validation: another end than the run's."""
    first = never_improving(tmp_path, max_epochs=20)
    first.train()
    assert first.status == "stopped" and first.epoch == 3
    weights = {k: v.clone() for k, v in first.model.state_dict().items()}
    again = never_improving(tmp_path, max_epochs=20)  # the same length: the rerun of the same command
    again.train()
    assert again.resumed_from.name == "final.pt" and not again.lengthened
    assert again.status == "stopped" and again.epoch == 3 and again.iter == first.iter
    assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in weights.items())


def test_settings_that_mean_nothing_are_refused_as_the_hook_is_made():
    """Each was taken: window=0 failed at the first write (IndexError), min_delta=-1 ran as 1, nan and 0 rates ran."""
    from launcher.hooks.progress import ProgressBar
    from launcher.hooks.timer import IterationTimer
    from launcher.hooks.writers import ConsoleWriter, JSONWriter, TensorBoardWriter

    for make, words in [
        (lambda: ConsoleWriter(window=0), "window should be an integer greater than zero"),
        (lambda: TensorBoardWriter(window=-1), "window should be an integer greater than zero"),
        (lambda: JSONWriter(flush_secs=float("nan")), "flush_secs should be a number of seconds >= 0, got nan"),
        (lambda: IterationTimer(warmup=-1), "warmup should be an integer >= 0"),
        (lambda: ProgressBar(refresh_per_second=0), "refresh_per_second should be a number greater than zero, got 0"),
        (lambda: ProgressBar(refresh_per_second=float("nan")), "refresh_per_second should be a number greater than zero"),
        (lambda: EarlyStopping(min_delta=-1), "min_delta should be a number >= 0"),
        (lambda: EarlyStopping(min_delta=float("nan")), "min_delta should be a number >= 0"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            make()
    ConsoleWriter(window=1), JSONWriter(flush_secs=0), IterationTimer(warmup=0), EarlyStopping(min_delta=0.5)


def test_a_schedule_that_sets_a_negative_or_nan_lr_is_stopped_before_a_step_takes_it():
    from launcher.engine.errors import ConfigError

    for factor, shown in ((-1.0, "lr=-0.1"), (float("nan"), "lr=nan")):
        schedule = functools.partial(torch.optim.lr_scheduler.MultiplicativeLR, lr_lambda=lambda epoch, f=factor: f)
        trainer = make_trainer("iter", hooks=[LRScheduler(schedule)], max_iters=5)
        with pytest.raises(ConfigError, match=re.escape(f"stepping the schedule failed with ValueError: it set {shown} for "
                                                        f"the next step; an lr is a finite number >= 0")):
            trainer.train()
        assert trainer.iter == 1  # the step that would have taken it never ran


def test_schedule_arguments_torch_takes_but_that_make_no_schedule_are_refused_naming_the_key():
    from launcher.engine.errors import ConfigError

    for kwargs, words in (({"T_max": -1}, "scheduler.T_max=-1: T_max should be an integer >= 1"),
                          ({"eta_min": -1.0}, "scheduler.eta_min=-1.0: eta_min should be a number >= 0")):
        schedule = functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR, **kwargs)
        with pytest.raises(ConfigError, match=re.escape(words)):
            make_trainer("iter", hooks={"lr_scheduler": LRScheduler(schedule)}, max_iters=5).train()


def test_a_schedule_may_go_below_zero_after_the_runs_last_step():
    """A linear decay to 0 at the last step steps once more, past it: the run failed, finished, with no final.pt."""
    schedule = functools.partial(torch.optim.lr_scheduler.LambdaLR, lr_lambda=lambda step: 1 - step / 9)
    trainer = make_trainer("iter", hooks=[LRScheduler(schedule)], max_iters=10)
    trainer.train()
    assert trainer.iter == 10 and trainer.status == "completed"


def test_early_stopping_on_a_metric_that_is_nan_each_time_says_so(tmp_path):
    """It said "did not improve on inf (validated after -1 steps: iter -2 in metrics.jsonl)"."""

    class Nan(HookBase):
        priority = 55

        def after_val(self):
            self.trainer.last_val["val/loss"] = float("nan")

    trainer = make_trainer("epoch", hooks=[Evaluator(), Nan(), EarlyStopping(monitor="val/loss", patience=2,
                                                                             check_finite=False)],
                           max_epochs=5, work_dir=tmp_path)
    trainer.train()
    assert trainer.epoch == 2 and trainer.stop_reason == \
        "early stopping: no validation gave val/loss a value to improve on (NaN or infinite each time) in 2 validations"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_early_stopping_stops_at_once_at_a_validation_whose_monitor_is_not_finite(tmp_path, caplog, bad):
    """A NaN counted as one validation without improvement: the run trained on for patience more epochs of a model
    that had diverged (mmengine's and Lightning's check_finite stop there)."""
    scripted = iter([1.0, 0.9, bad, 0.5])

    class Scripted(HookBase):
        priority = 55

        def after_val(self):
            self.trainer.last_val["val/loss"] = next(scripted)

    trainer = make_trainer("epoch", hooks={"evaluator": Evaluator(), "scripted": Scripted(),
                                           "stopper": EarlyStopping(monitor="val/loss", patience=5)},
                           max_epochs=10, work_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    steps = 3 * trainer.steps_per_epoch
    reason = (f"early stopping: val/loss is {bad} in the validation after epoch 3/10, {steps} steps (not finite; "
              f"hooks.stopper.check_finite=false counts it towards patience instead)")
    assert trainer.status == "stopped" and trainer.epoch == 3 and trainer.stop_reason == reason
    assert sum(reason in r.getMessage() for r in caplog.records) == 1  # one line, naming the metric and the value
    state = trainer.hooks[-1].state_dict()
    assert state["not_finite"] == [bad, steps] and state["bad"] == 0 and state["best"] == 0.9


def test_a_run_resumed_after_a_non_finite_monitor_stopped_it_stops_again_at_once_for_the_same_reason(tmp_path):
    from launcher.hooks.checkpoint import PeriodicCheckpointer

    stopper = EarlyStopping(monitor="val/loss", patience=2)
    trainer = make_trainer("epoch", hooks={"early_stopping": stopper, "ckpt": PeriodicCheckpointer(save_final=False)},
                           max_epochs=20, work_dir=tmp_path)
    stopper.load_state_dict({"best": 0.5, "best_iter": 4, "bad": 0, "stopped": True, "not_finite": [float("nan"), 8]})
    trainer.train()
    assert trainer.iter == 0 and trainer.status == "stopped"
    assert trainer.stop_reason.startswith("early stopping: val/loss is nan in the validation after epoch 2/20, 8 steps (not finite")
