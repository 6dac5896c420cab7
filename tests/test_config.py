"""Config groups: every option composes and builds; schemas reject typos and wrong types."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import launcher
from launcher.hooks import HookBase
from launcher.runs.build import ConfigError, build, call

CONF = Path(launcher.runs.config.CONFIG_DIR)


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
    cfg = launcher.compose(["~hooks.tensorboard", "+hooks.extra._target_=launcher.hooks.timer.IterationTimer", "+hooks.extra.warmup=0"])
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
        ("trainer.max_epoch=3", ["max_epoch", "did you mean trainer.max_epochs?"]),
        ("trainer.max_epochs=ten", ["trainer.max_epochs=ten", "takes a whole number"]),
        ("trainer=iter", None),
        ("hooks.console.perod=5", ["perod", "did you mean hooks.console.period?"]),
        ("hooks.checkpointer.keep_last=all", ["all", "hooks.checkpointer.keep_last"]),
        ("seed=abc", ["abc", "seed"]),
        ("trainer=epok", ["trainer/epok", "epoch", "iter"]),
    ],
)
def test_schema_rejects_typos_and_wrong_types_while_composing(override, words):
    if words is None:  # a valid override for contrast
        launcher.compose([override])
        return
    with pytest.raises(launcher.ConfigError) as info:  # the CLI's one line, from the API too
        launcher.compose([override])
    assert "\n" not in str(info.value) and str(info.value).startswith(override.split("=")[0].split(".")[0])
    text = str(info.value) + str(info.value.__cause__ or "")
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    "node, message",
    [
        ({"_target_": "launcher.models.MLPP"}, "model._target_: cannot import 'launcher.models.MLPP': 'launcher.models' has no attribute 'MLPP'; did you mean 'launcher.models.MLP'?"),
        ({"_target_": "nopkg.Net"}, "no module named 'nopkg'"),
        ({"_target_": "launcher.models.MLP", "widht": 3}, "launcher.models.MLP rejected the config: MLP.__init__() got an unexpected keyword argument 'widht' (leave it out: ~model.widht); launcher.models.MLP accepts: in_features, hidden, num_classes, dropout"),
        ({"_target_": "launcher.models.MLP", "widht": 3, "depht": 2}, "it takes none of the config's keys widht, depht (leave "
                                                                      "them out: ~model.widht, ~model.depht)"),
        ({"in_features": 3}, "model: no _target_ given; set model._target_"),
        ({"_taget_": "launcher.models.MLP"}, "model: no _target_ given (model._taget_ is there: a misspelt _target_?)"),
        ({"_target_": "launcher.engine.trainer.EpochTrainer", "max_epochs": 3, "max_epoch": 3}, "got an unexpected keyword argument 'max_epoch' (leave it out: ~model.max_epoch); launcher.engine.trainer.EpochTrainer accepts: max_epochs, workflow, model, optimizer, data, hooks, device, work_dir"),
    ],
)
def test_build_errors_are_one_line_and_name_the_key(node, message):
    with pytest.raises(ConfigError) as info:
        build("model", OmegaConf.create(node))
    assert message in str(info.value) and "\n" not in str(info.value)


class UntypedBlobs(torch.utils.data.Dataset):
    """A user's dataset that hands its size straight to torch (no annotation: judged by the default)."""

    def __init__(self, size=100):
        self.y = torch.randint(0, 10, (size,))


class TypedNet(torch.nn.Module):
    def __init__(self, aux_weight: float = 0.1, layers: int = 2):
        super().__init__()
        self.aux_weight = aux_weight


def make_plain_loader(**options):
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 2)))


@pytest.mark.parametrize(
    "key, node, message",
    [
        # torch's multi-line TypeError for randint is no reason to skip naming the value
        ("data.train", {"_target_": "test_config.UntypedBlobs", "size": "abc"}, "data.train.size: 'abc' is not a number"),
        ("model", {"_target_": "test_config.TypedNet", "aux_weight": "abc"}, "model.aux_weight: 'abc' is not a number"),
        ("model", {"_target_": "test_config.TypedNet", "layers": 2.5}, "model.layers: 2.5 is not an integer"),
        ("optimizer", {"_target_": "torch.optim.SGD", "lr": 0.1},
         "missing 1 required positional argument: 'params'; set optimizer._partial_: true"),
    ],
)
def test_a_value_of_the_wrong_kind_or_a_missing_partial_is_named_in_one_line(key, node, message):
    with pytest.raises(ConfigError) as info:
        build(key, OmegaConf.create(node))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_target_that_does_not_import_is_reported_once_without_hydras_error_log(caplog):
    with pytest.raises(ConfigError, match="did you mean 'launcher.models.MLP'"):
        build("model", OmegaConf.create({"_target_": "launcher.models.MLPP"}))
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_data_that_builds_no_loaders_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^~data.prefetch_factor: data.prefetch_factor is null \(unset already\): leave "
                                          r"the override out"):
        launcher.compose(["~data.prefetch_factor"])
    cfg = launcher.compose(["data._target_=test_config.make_plain_loader"])
    with pytest.raises(ConfigError, match=r"^data._target_: test_config.make_plain_loader built a DataLoader, which has no "
                                          r"train_loader\(\); data must build an object with train_loader\(\)"):
        launcher.build_trainer(cfg, tmp_path / "run")


def test_a_misspelled_key_in_a_config_file_is_named_with_its_file(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "mine.yaml").write_text("defaults:\n  - epoch\nmax_epoch: 3\n")
    with pytest.raises(ConfigError) as info:
        launcher.compose(["trainer=mine"], config_dir=str(tmp_path))
    assert str(info.value).startswith("trainer.max_epoch: no such key in trainer (set in config file trainer/mine.yaml); "
                                      "did you mean trainer.max_epochs?")
    with pytest.raises(ConfigError, match="config_dir: 'nowhere' is not a directory"):
        launcher.compose([], config_dir="nowhere")
