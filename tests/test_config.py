"""Config groups: every option composes and builds; schemas reject typos and wrong types."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

import launcher
from hooks import HookBase
from launcher.build import ConfigError, build, call

CONF = Path(launcher.CONFIG_DIR)


def options(group: str):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_required_options_exist():
    assert {"mlp", "cnn"} <= set(options("model"))
    assert {"sgd", "adamw"} <= set(options("optimizer"))
    assert {"digits", "synthetic"} <= set(options("data"))
    assert {"epoch", "iter"} <= set(options("trainer"))
    assert {"default", "minimal", "none"} <= set(options("hooks"))


@pytest.mark.parametrize("model", options("model"))
@pytest.mark.parametrize("optimizer", options("optimizer"))
def test_every_model_and_optimizer_builds_and_steps(model, optimizer):
    cfg = launcher.compose([f"model={model}", f"optimizer={optimizer}", "data=synthetic"])
    net = build("model", cfg.model)
    opt = call("optimizer", cfg.optimizer, build("optimizer", cfg.optimizer), net.parameters())
    data = build("data", cfg.data)
    batch = next(iter(data.train_loader()))
    net.train()
    loss = net(batch)
    loss.backward()
    opt.step()
    net.eval()
    assert set(net(batch)) == {"loss", "accuracy"}


@pytest.mark.parametrize("data", options("data"))
def test_every_data_option_builds_loaders(data, tmp_path):
    overrides = [f"data={data}"]
    if data == "arrays":  # the user's own files: one per split
        import numpy as np

        for split, n in (("train", 100), ("val", 30)):
            np.savez(tmp_path / f"{split}.npz", x=np.random.rand(n, 1, 8, 8), y=np.random.randint(0, 10, n))
            overrides.append(f"data.{split}.path={tmp_path / f'{split}.npz'}")
    cfg = launcher.compose(overrides)
    d = build("data", cfg.data)
    x, y = next(iter(d.train_loader()))
    assert x.shape[1:] == (1, 8, 8) and x.shape[0] == cfg.data.batch_size and y.dtype == torch.long
    assert len(d.val_loader().dataset) > 0


@pytest.mark.parametrize("hooks", options("hooks"))
@pytest.mark.parametrize("trainer", options("trainer"))
def test_every_trainer_and_hooks_option_builds(trainer, hooks, tmp_path):
    cfg = launcher.compose([f"trainer={trainer}", f"hooks={hooks}", "data=synthetic"])
    built = {name: build(f"hooks.{name}", node) for name, node in cfg.hooks.items()}
    assert all(isinstance(h, HookBase) for h in built.values())
    net = build("model", cfg.model)
    t = build("trainer", cfg.trainer, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
              data=build("data", cfg.data), hooks=built, work_dir=tmp_path)
    assert type(t).__name__ == {"epoch": "EpochTrainer", "iter": "IterTrainer"}[trainer]
    assert [h.name for h in t.hooks] == sorted(built, key=lambda n: built[n].priority) or not built


def test_default_hooks_hold_what_a_run_needs():
    cfg = launcher.compose([])
    assert set(cfg.hooks) == {"timer", "lr_scheduler", "evaluator", "checkpointer", "console", "jsonl", "tensorboard"}
    assert set(launcher.compose(["hooks=minimal"]).hooks) == {"lr_scheduler", "checkpointer"}
    assert len(launcher.compose(["hooks=none"]).hooks) == 0


def test_remove_and_add_a_hook_from_overrides():
    cfg = launcher.compose(["~hooks.tensorboard", "+hooks.extra._target_=hooks.timer.IterationTimer", "+hooks.extra.warmup=0"])
    assert "tensorboard" not in cfg.hooks
    assert build("hooks.extra", cfg.hooks.extra).warmup == 0


def test_keys_users_rely_on():
    cfg = launcher.compose(["trainer.max_epochs=3", "trainer.workflow=[[train,2],[val,1]]", "data.batch_size=16",
                            "data.num_workers=2", "seed=7"])
    assert cfg.trainer.max_epochs == 3 and OmegaConf.to_container(cfg.trainer.workflow) == [["train", 2], ["val", 1]]
    assert cfg.data.batch_size == 16 and cfg.data.num_workers == 2 and cfg.seed == 7 and cfg.data.seed == 7
    assert launcher.compose(["trainer=iter", "trainer.max_iters=5"]).trainer.max_iters == 5
    assert cfg.objective == "val/accuracy"


@pytest.mark.parametrize(
    "override, words",
    [
        ("trainer.max_epoch=3", ["max_epoch", "EpochTrainerConf"]),
        ("trainer.max_epochs=ten", ["ten", "trainer.max_epochs", "Integer"]),
        ("trainer=iter", None),
        ("hooks.console.perod=5", ["perod", "ConsoleWriterConf"]),
        ("hooks.checkpointer.keep_last=all", ["all", "hooks.checkpointer.keep_last"]),
        ("seed=abc", ["abc", "seed"]),
        ("trainer=epok", ["trainer/epok", "epoch", "iter"]),
    ],
)
def test_schema_rejects_typos_and_wrong_types_while_composing(override, words):
    if words is None:  # a valid override for contrast
        launcher.compose([override])
        return
    with pytest.raises((ConfigCompositionException, ConfigKeyError, ValidationError)) as info:
        launcher.compose([override])
    text = str(info.value) + str(info.value.__cause__ or "")
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    "node, message",
    [
        ({"_target_": "launcher.models.MLPP"}, "model._target_: cannot import 'launcher.models.MLPP': 'launcher.models' has no attribute 'MLPP'; did you mean 'launcher.models.MLP'?"),
        ({"_target_": "nopkg.Net"}, "no module named 'nopkg'"),
        ({"_target_": "launcher.models.MLP", "widht": 3}, "launcher.models.MLP rejected the config: MLP.__init__() got an unexpected keyword argument 'widht'; launcher.models.MLP accepts: in_features, hidden, num_classes, dropout"),
        ({"in_features": 3}, "model: no _target_ given"),
        ({"_target_": "launcher.trainer.EpochTrainer", "max_epochs": 3, "max_epoch": 3}, "got an unexpected keyword argument 'max_epoch'; launcher.trainer.EpochTrainer accepts: max_epochs, workflow, model, optimizer, data, hooks, device, work_dir"),
    ],
)
def test_build_errors_are_one_line_and_name_the_key(node, message):
    with pytest.raises(ConfigError) as info:
        build("model", OmegaConf.create(node))
    assert message in str(info.value) and "\n" not in str(info.value)
