"""``python -m launcher`` through the real CLI, in subprocesses, writing under tmp_path."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from conftest import FAST, REPO, read_run, run_cli, run_dirs


@pytest.mark.smoke
def test_default_run_trains_digits_and_leaves_a_complete_run_dir(cli, tmp_path):
    proc = cli("trainer=epoch", "hooks=default")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert run_dir.parent.parent == tmp_path / "outputs"  # outputs/<date>/<time>/

    record = read_run(run_dir)
    assert record["status"] == "completed" and record["exit_code"] == 0
    assert record["objective"]["name"] == "val/accuracy" and record["objective"]["value"] >= 0.95
    assert record["metrics"]["val/accuracy"] == record["objective"]["value"]
    assert record["seed"] == 0 and record["versions"]["torch"] == torch.__version__
    assert record["command"][1:] == ["-m", "launcher", "trainer=epoch", "hooks=default"]  # as typed, to run again
    for key in ("git", "host", "start_time", "end_time", "versions"):
        assert record[key]
    assert {"python", "hydra"} <= set(record["versions"])

    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / ".hydra" / "overrides.yaml").is_file()
    log = (run_dir / "train.log").read_text()
    assert "val/accuracy" in log and "eta" in log and "lr" in log
    assert "val/accuracy" in proc.stdout + proc.stderr  # progress shows on the console too

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all({"iter", "epoch"} <= set(r) for r in rows)
    train = [r for r in rows if "train/loss" in r]
    val = [r for r in rows if "val/accuracy" in r]
    assert train and val and all("lr" in r and "time" in r for r in train)
    assert [r["iter"] for r in train] == sorted({r["iter"] for r in train})  # no duplicate steps
    assert val[-1]["val/accuracy"] == pytest.approx(record["objective"]["value"])

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    assert {"train/loss", "val/accuracy", "train/lr", "wallclock/iter_time"} <= set(acc.Tags()["scalars"])
    assert acc.Scalars("val/accuracy")[-1].value == pytest.approx(record["objective"]["value"], rel=1e-5)

    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    from launcher.models import MLP

    net = MLP(hidden=[256])
    net.load_state_dict(final["model"])
    assert {"optimizer", "iter", "epoch", "hooks", "storage"} <= set(final)
    assert (run_dir / "checkpoints" / "last").read_text().strip() == "final.pt"
    # epochs here take a fraction of a second: a periodic checkpoint at most every 10 s, and the last epoch's
    periodic = sorted(p.name for p in (run_dir / "checkpoints").glob("epoch_*.pt"))
    assert periodic[-1] == "epoch_0020.pt" and len(periodic) <= 3, periodic  # keep_last
    assert "at most one every 10 s, and one at the end (hooks.checkpointer.min_interval_secs=0 saves every epoch)" in log


def test_iter_trainer_runs_its_steps_with_periodic_validation(cli, tmp_path):
    proc = cli("trainer=iter", "trainer.max_iters=25", "hooks.evaluator.by_epoch=false", "hooks.evaluator.period=10",
               "hooks.jsonl.period=5", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "outputs")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows if "val/accuracy" in r] == [9, 19, 24]
    assert max(r["iter"] for r in rows if "train/loss" in r) == 24
    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    assert final["iter"] == 25
    assert read_run(run_dir)["status"] == "completed"


def test_workflow_with_val_phase_and_no_evaluator(cli, tmp_path):
    proc = cli("trainer.max_epochs=4", "trainer.workflow=[[train,2],[val,1]]", "~hooks.evaluator", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "outputs")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows if "val/accuracy" in r] == [15, 31]  # 256 train samples / 32 = 8 steps per epoch


@pytest.mark.smoke
def test_two_job_sweep_makes_two_run_dirs_with_their_objective(cli, tmp_path):
    proc = cli("-m", "optimizer.lr=0.05,0.2", "trainer.max_epochs=2", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = run_dirs(tmp_path / "outputs" / "multirun")
    assert [d.name for d in dirs] == ["0", "1"]
    assert dirs[0].parent.parent.parent == tmp_path / "outputs" / "multirun"  # multirun/<date>/<time>/<n>
    assert (dirs[0].parent / "multirun.yaml").is_file()
    for d, lr in zip(dirs, ("0.05", "0.2")):
        record = read_run(d)
        assert record["status"] == "completed" and f"optimizer.lr={lr}" in record["overrides"]
        assert 0.0 <= record["objective"]["value"] <= 1.0
    assert not (tmp_path / "multirun").exists()
    best = max(dirs, key=lambda d: read_run(d)["objective"]["value"])
    value = read_run(best)["objective"]["value"]
    lr = {"0": "0.05", "1": "0.2"}[best.name]  # the best job by what tells it from the other: the rest is in the summary
    assert f"Sweep of 2 job(s): 2 done; best: job {best.name} [optimizer.lr={lr}] " in proc.stdout
    assert f"val/accuracy = {value:.4g}; summary: {dirs[0].parent.relative_to(tmp_path) / 'summary.md'}" in proc.stdout


@pytest.mark.smoke
def test_main_returns_the_objective_as_a_float(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    import launcher
    from launcher.__main__ import main

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=launcher.runs.config.CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[*FAST, "trainer.max_epochs=1"], return_hydra_config=True)
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    result = main.__wrapped__(cfg)  # the function @hydra.main wraps, as Hydra's launchers call it
    assert isinstance(result, float) and result == read_run(tmp_path)["objective"]["value"]


BAD_INPUTS = [
    (["trainer.max_epoch=3"], ["trainer.max_epoch: no such key in trainer; did you mean trainer.max_epochs?",
                               "Accepted there: device, resume"]),
    (["hooks.consol.period=5"], ["hooks.consol: no such key in hooks; did you mean hooks.console?", "checkpointer"]),
    (["+trainer.max_epoch=3"], ["max_epoch", "accepts: max_epochs"]),
    (["trainer.max_epochs=ten"], ["trainer.max_epochs=ten: this key takes a whole number, e.g. trainer.max_epochs=20"]),
    (["trainer.devices=abc"], ["trainer.devices=abc: this key takes a whole number, e.g. trainer.devices=1"]),
    (["trainer.max_epochs=ten", "trainer.max_epochs=2"], ["trainer.max_epochs=ten: this key takes a whole number"]),  # not =2
    (["hooks.lr_scheduler.warmup_factor=x"], ["hooks.lr_scheduler.warmup_factor=x: this key takes a number, e.g. "
                                              "hooks.lr_scheduler.warmup_factor=0.001"]),
    # an environment variable gives a string: how to read the bool it spells
    (["hooks.checkpointer.save_final=${oc.env:SAVE_FINAL,true}"],
     ["hooks.checkpointer.save_final: 'True' is not true or false", "${oc.env:SAVE_FINAL,true} gives a string: "
      "${oc.decode:${oc.env:SAVE_FINAL,true}} reads the value it spells (on the command line: "
      "'hooks.checkpointer.save_final=\"${oc.decode:${oc.env:SAVE_FINAL,true}}\"')"]),
    (["optimizer.lr=${oc.env:LR,0.1}"], ["optimizer.lr: '0.1' is not a number; ${oc.env:LR,0.1} gives a string"]),
    (["trainer=epok"], ["trainer: there is no option 'epok'; did you mean 'epoch'? Available: epoch, iter"]),
    (["hooks=[default,earlystopping]"], ["hooks: there is no option 'earlystopping'; did you mean 'early_stopping'?"]),
    # named after the module of the hook it means: the close name was 'lr_scheduler'
    (["hooks=[default,param_schedule]"], ["hooks: there is no option 'param_schedule'; did you mean 'momentum_schedule' (its "
                                          "_target_ is launcher.hooks.param_schedule.ParamSchedule)?"]),
    (["model._target_=launcher.models.MLPP"], ["model._target_", "MLPP", "did you mean 'launcher.models.MLP'"]),
    (["model._target_=nopkg.Net"], ["model._target_", "no module named 'nopkg'"]),
    (["+model.widht=3"], ["model", "widht", "accepts: in_features"]),
    (["optimizer.lr=-1"], ["optimizer", "torch.optim.SGD", "Invalid learning rate: -1"]),
    (["data.batch_size=0"], ["data.batch_size", "got 0", "greater than zero"]),
    (["hooks=[default,profiler]", "hooks.profiler.active=0"], ["hooks.profiler", "active should be an integer of at least 1", "got 0"]),
    (["trainer.load_from=."], ["trainer.load_from: '.' is a directory; give a checkpoint or state_dict file"]),
    (["data.prefetch_factor=0"], ["data.prefetch_factor should be an integer greater than zero", "got 0"]),
    (["data.train._target_=launcher.data.arrays", "+data.train.path=/no/such/file.npz", "~data.train.split",
      "~data.train.val_fraction", "data.val=null"], ["data.train", "/no/such/file.npz", "does not exist"]),
    (["trainer.workflow=[[train,1],[test,1]]"], ["trainer.workflow", "test", "phase in ['train', 'val']"]),
    (["+hooks.bad._target_=collections.OrderedDict"], ["hooks.bad", "OrderedDict", "HookBase"]),
    (["data.shuffle=no"], ["data.shuffle: 'no' is not true or false"]),
    (["optimizer.lr=abc"], ["optimizer.lr: 'abc' is not a number (torch.optim.SGD raised TypeError"]),
    (["+trainer.foo=1"], ["unexpected keyword argument 'foo'", "accepts: max_epochs, workflow, device, resume, load_from, devices"]),
    (["optimizer.nesterov=maybe"], ["optimizer.nesterov: 'maybe' is not true or false (torch.optim.SGD takes a bool there)"]),
    (["~hooks.consol"], ["~hooks.consol: nothing to delete", "did you mean hooks.console?", "hooks has: timer"]),
    (["+trainer.max_epochs=3"], ["trainer.max_epochs is in the config already; set it with trainer.max_epochs=3"]),
    (["model.hidden=[1,"], ["model.hidden=[1,: no viable alternative"]),
    (["trainer.max_epochs=${nope}"], ["trainer", "Interpolation key 'nope' not found", "max_epochs=${nope}"]),
    (["model.hidden=256"], ["model.hidden should be a list of positive integers", "got 256"]),
    (["trainer.device=mps"], ["trainer.device: 'mps' is not usable here", "use auto, cpu, cuda or cuda:N"]),
    (["trainer.device=meta"], ["trainer.device: 'meta' holds no data and cannot train; use auto, cpu, cuda or cuda:N"]),
    (["objective_mode=maximum"], ["objective_mode", "maximum", "[max, min]"]),
    (["data=arrays"], ["data.train.path: no value given"]),
    (["model=null"], ["model=null: model is a config group; give one of its options: cnn, mlp"]),
    (["optimizer=3"], ["optimizer=3: optimizer is a config group; give one of its options: adamw, sgd"]),
    (["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR"],
     ["hooks.lr_scheduler.scheduler (torch.optim.lr_scheduler.StepLR)", "missing 1 required positional argument: 'step_size'",
      "add +hooks.lr_scheduler.scheduler.step_size=<value>"]),
    (["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR", "+hooks.lr_scheduler.scheduler.step_size=0"],
     ["Config error: hooks.lr_scheduler.scheduler.step_size=0: step_size should be an integer >= 1"]),  # before training
    (["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau", "hooks.lr_scheduler.warmup_iters=10"],
     ["hooks.lr_scheduler.warmup_iters=10: a warmup cannot go in front of ReduceLROnPlateau", "set warmup_iters=0"]),
    (["+hooks._target_=launcher.hooks.timer.IterationTimer"], ["hooks._target_: launcher.hooks.timer.IterationTimer is not under a hook's name",
                                                       "a file conf/hooks/<option>.yaml nests its hook"]),
    (["+hooks.mine=3"], ["hooks.mine: 3 is not a hook; each entry of hooks is one hook"]),
    (["trainer.devices=0", "data=arrays", "data.train.path=no.npz", "data.val.path=no.npz"], ["trainer.devices should be an integer of at least 1", "got 0"]),  # before the data
    (["seed=${oc.env:LAUNCHER_NO_SUCH_VAR}"], ["seed=${oc.env:LAUNCHER_NO_SUCH_VAR}: Environment variable 'LAUNCHER_NO_SUCH_VAR' not found"]),
    (["model.in_features=???"], ["model.in_features: no value given (??? in the config)"]),
    (["data=synthetic", "~data.train.val_fraction", "~data.val.val_fraction"],
     ["~data.val.val_fraction: data.val.val_fraction reads another key that an earlier ~ override deleted (Interpolation "
      "key 'train.val_fraction' not found); put ~data.val.val_fraction before that deletion"]),
    (["~model"], ["model: no option chosen for this config group (removed with ~model?); choose one: model=cnn or model=mlp"]),
    (["trainer.max_epochs=null"], ["trainer.max_epochs=null: this key needs a value; give one"]),
    # OmegaConf's words ("str is not a ListConfig", "Cannot convert 'list' to string", "Cannot merge DictConfig with ListConfig")
    (["trainer.workflow=train"], ["Config error: trainer.workflow=train: this key takes a list, e.g. trainer.workflow=[[train,2],[val,1]]\n"]),
    (["data.train=abc"], ["Config error: data.val.size=${..train.size}: data.train is 'abc', which holds no size: data.train "
                          "takes a group of settings\n"]),  # OmegaConf's "node `train` is not a container"
    (["optimizer=adamw", "+optimizer.capturable=true"], ["Config error: optimizer.capturable=true: AdamW captures its steps on "
                                                         "cuda", "this run trains on cpu"]),  # torch's AssertionError
    (["trainer.workflow={a:1}"], ["Config error: trainer.workflow={a:1}: this key takes a list, e.g. trainer.workflow="]),
    (["trainer.load_from=[a]"], ["Config error: trainer.load_from=[a]: this key takes one string (a path, a name), not a list\n"]),
    (["data.val=[]"], ["Config error: data.val=[]: data.val is a group of settings, not a single value or a list; "
                       "set its keys (data.val.<key>=...), or drop it with null\n"]),
    (["hooks.lr_scheduler.scheduler._target_=torch.nn.Linear"],
     ["hooks.lr_scheduler.scheduler._target_: torch.nn.modules.linear.Linear is not a learning-rate schedule"]),
    (["--config-dir", "no/such/dir"], ["no/such/dir' not found; --config-dir takes a directory"]),
    (["hooks.lr_scheduler.scheduler.Tmax=0"], ["did you mean hooks.lr_scheduler.scheduler.T_max?",
                                               "Accepted there: (added with +) T_max, eta_min, last_epoch"]),
    (["+hooks.lr_scheduler.scheduler.Tmax=5"], ["unexpected keyword argument 'Tmax'", "did you mean hooks.lr_scheduler.scheduler.T_max?"]),
    (["optimizer.lr=nan"], ["optimizer.lr=nan: not a finite number"]),
    (["seed=99999999999999999999"], ["seed=99999999999999999999: use a whole number from 0 to 2**32-1"]),
    (["seed=4294967296"], ["seed=4294967296: use a whole number from 0 to 2**32-1 (4294967295)"]),
    (["trainer.max_epochs=1", "-m", "seed=1,2"], ["Config error: -m comes after the override data=synthetic",
                                                  "before the overrides: python -m launcher -m data=synthetic"]),
    # the trainer's own checks, before the data is built (a large dataset made them minutes late)
    (["trainer.max_epochs=0", "data=arrays", "data.train.path=no.npz", "data.val.path=no.npz"],
     ["trainer.max_epochs should be an integer greater than zero, got 0"]),
    (["trainer.workflow=[[trian,1]]", "data=arrays", "data.train.path=no.npz", "data.val.path=no.npz"],
     ["trainer.workflow: bad entry ['trian', 1]"]),
    (["trainer=iter", "trainer.max_iters=-1", "data=arrays", "data.train.path=no.npz", "data.val.path=no.npz"],
     ["trainer.max_iters should be an integer greater than zero, got -1"]),
    # 500 workers importing torch took a 2-core, 24 GB machine down (out of memory, load 330)
    (["trainer.devices=500", "trainer.device=cpu", "data=arrays", "data.train.path=no.npz", "data.val.path=no.npz"],
     ["trainer.devices=500: training on the CPU takes one process per core", "use trainer.devices="]),
    # each ran (exit 0, "= nan"), or named the wrong thing
    (["objective="], ["objective='': name the metric the run returns", "objective=val/accuracy"]),
    (["trainer.load_from=true"], ["trainer.load_from: true is not a file path"]),
    (["sed=1"], ["sed: no such key in the config; did you mean seed?", "(a key of your own is added with +sed=...)"]),
    (["foo.bar=3"], ["foo: no such key in the config.", "(a key of your own is added with +foo.bar=...)"]),
    # three lines each, the first naming "[1]" or a "full_key" line below it
    (["optimizer=adamw", "optimizer.betas=[0.9]"], ["Config error: optimizer.betas: [0.9] has 1 value(s); torch.optim.AdamW "
                                                    "takes 2 there, e.g. [0.9, 0.999]\n"]),
    (["model._target_=launcher.models"], ["Config error: model._target_: launcher.models is a module, not a class or function "
                                          "to build; launcher.models has: CNN, Classifier, MLP\n"]),
    # each trained (a negative bound flips the gradients: accuracy 0.14), or ended in torch's traceback naming no key
    (["hooks=[default,optimizer_step]", "hooks.optimizer_step.clip_grad_norm=-1"],
     ["hooks.optimizer_step", "clip_grad_norm should be a number greater than zero (null: no clipping), got -1.0"]),
    (["hooks=[default,optimizer_step]", "hooks.optimizer_step.clip_grad_value=0"], ["clip_grad_value should be a number greater than zero"]),
    (["hooks.lr_scheduler.warmup_iters=-5"], ["hooks.lr_scheduler", "warmup_iters should be an integer >= 0 (0: no warmup), got -5"]),
    (["hooks.lr_scheduler.warmup_iters=5", "hooks.lr_scheduler.warmup_factor=0"], ["warmup_factor should be a number in (0, 1]"]),
    (["+data.val_batch_size=0"], ["data.val_batch_size should be an integer greater than zero (or null: batch_size), got 0"]),
    (["+data.val_batch_size=-1"], ["Config error: data.val_batch_size should be an integer greater than zero"]),
    # ignored without a word (--config-dir no/such/dir is refused)
    (["hydra.searchpath=[file://no/such/conf]"], ["Config error: hydra.searchpath: file://no/such/conf: ", "no/such/conf is not a directory"]),
    (["hydra.searchpath=[pkg://no_such_package]"], ["hydra.searchpath: pkg://no_such_package: no package 'no_such_package'"]),
    # argparse's usage screen, each
    (["-hooks.console"], ["Config error: -hooks.console: not an option, and an override takes no leading '-'",
                          "~hooks.console to delete it"]),
    (["--config_dir", "conf"], ["Config error: --config_dir: not an option of python -m launcher; did you mean --config-dir?"]),
    # a traceback each, or (null) trained without Nesterov
    (["hooks=[default,momentum_schedule]", "hooks.momentum_schedule.key=momentom"],
     ["Config error: hooks.momentum_schedule.key=momentom: the optimizer (SGD) has no 'momentom'; did you mean "
      "hooks.momentum_schedule.key=momentum? the optimizer's settings it can schedule: momentum, dampening, weight_decay"]),
    (["optimizer=adamw", "hooks=[default,momentum_schedule]", "hooks.momentum_schedule.key=momentm"],  # momentum: betas.0 there
     ["did you mean hooks.momentum_schedule.key=momentum? the optimizer's settings it can schedule: momentum, eps, "
      "weight_decay, betas.0, betas.1"]),
    (["optimizer=adamw", "optimizer.betas=0.9"], ["Config error: optimizer.betas: 0.9 is one value; torch.optim.AdamW takes a "
                                                  "list of 2 there, e.g. [0.9, 0.999]"]),
    # each trained: weights that never moved (no optimizer step; the lr never past the warmup's first), a diverging
    # momentum, a loss ranked highest-best without a word; a ZeroDivisionError traceback
    (["trainer=iter", "trainer.max_iters=8", "hooks=[default,optimizer_step]", "hooks.optimizer_step.accumulate=9"],
     ["Config error: hooks.optimizer_step.accumulate=9: more micro-batches than the run's 8 iterations"]),
    (["hooks.lr_scheduler.warmup_iters=1000000"], ["warmup_iters=1000000: the warmup would last the whole run"]),
    (["optimizer.momentum=2"], ["Config error: optimizer.momentum=2: should be in [0, 1]"]),
    (["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.OneCycleLR", "+hooks.lr_scheduler.scheduler.max_lr=0.1",
      "+hooks.lr_scheduler.scheduler.div_factor=0"], ["scheduler.div_factor=0: div_factor should be a number greater than zero"]),
    (["optimizer=adamw", "optimizer.betas=[0.9,0.999,0.5]"],
     ["Config error: optimizer.betas: [0.9, 0.999, 0.5] has 3 value(s); torch.optim.AdamW takes 2 there, e.g. [0.9, 0.999]"]),
    (["optimizer.nesterov=null"], ["Config error: optimizer.nesterov: null is not true or false"]),
    # OmegaConf's bool took them as true: the lr held for the epoch
    (["hooks.lr_scheduler.by_epoch=2"], ["Config error: hooks.lr_scheduler.by_epoch: 2 is not true or false "
                                         "(launcher.hooks.lr_scheduler.LRScheduler takes a bool there)"]),
    (["hooks.checkpointer.save_final=yes"], ["Config error: hooks.checkpointer.save_final: 'yes' is not true or false"]),
    # wrote to the dir all the day's runs share (each resume cutting it); a traceback after the build (IsADirectoryError)
    (["hooks.jsonl.filename=../x.jsonl"], ["Config error: hooks.jsonl.filename=../x.jsonl: ", "is outside the run dir",
                                           "give a path inside it, e.g. metrics.jsonl"]),
    (["hooks.jsonl.filename="], ["filename should name a file in the run dir (e.g. metrics.jsonl), got ''"]),
    (["hooks.jsonl.filename=run.json"], ["filename='run.json' is a file the launcher keeps in the run dir"]),
    # each trained: a negative lr, an lr jumping between its base and 0, a momentum of -1, AdamW's beta1 at 2
    (["+hooks.lr_scheduler.scheduler.eta_min=-1"], ["Config error: hooks.lr_scheduler.scheduler.eta_min=-1: eta_min should "
                                                    "be a number >= 0"]),
    (["+hooks.lr_scheduler.scheduler.T_max=-1"], ["scheduler.T_max=-1: T_max should be an integer >= 1"]),
    (["hooks=[default,momentum_schedule]", "hooks.momentum_schedule.start=-1"],
     ["Config error: hooks.momentum_schedule.start=-1.0: momentum should be in [0, 1]"]),
    (["optimizer=adamw", "hooks=[default,momentum_schedule]", "hooks.momentum_schedule.key=betas.0",
      "hooks.momentum_schedule.end=2"], ["hooks.momentum_schedule.end=2.0: betas.0 should be in [0, 1)"]),
    # validated on 77 of 128 training samples, or on inputs labelled anew, with a good-looking accuracy
    (["data.val.val_fraction=0.5"], ["Config error: data.val.val_fraction=0.5 differs from data.train.val_fraction=0.2: "
                                     "both splits are cut from one draw"]),
    (["data.val.size=512"], ["data.val.size=512 differs from data.train.size="]),
    (["data.val.split=train"], ["data.val.split=train: data.train takes the train split too"]),
    # the trainer blamed (no len()), or validation on the letters of 'abc', or "set model.in_features=0"
    (["data.val=3"], ["Config error: data.val should be a dataset (a config with a _target_ that builds one) or null for "
                      "none, got 3"]),
    (["data.val=abc"], ["data.val should be a dataset", "got 'abc'"]),
    (["data.train.shape=[0]"], ["data.train.shape should be a list of positive integers, one sample's shape"]),
    (["data.train.num_classes=0"], ["data.train.num_classes should be an integer of at least 2, got 0"]),
    # "Loss became infinite or NaN", naming no key
    (["hooks=[default,momentum_schedule]", "hooks.momentum_schedule.end=nan"], ["end should be a finite number, got nan"]),
    (["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.StepLR", "+hooks.lr_scheduler.scheduler.step_size=null"],
     ["Config error: hooks.lr_scheduler.scheduler.step_size: null is not an integer"]),  # a required one: at its first step
    # Hydra's internal option names (_dummy_empty_config_), or "Could not override ''"
    (["=3"], ["Config error: =3: no key before '='; an override is key=value (e.g. optimizer.lr=3)"]),
    (["+=adamw"], ["Config error: +=adamw: no key before '='"]),
    # advice that did not fit the key
    (["hooks.ema.decay=0.99"], ["hooks.ema: no such key in hooks", "ema is an option of the hooks group: add it to the run's "
                                "hooks, e.g. 'hooks=[default,ema]', then set hooks.ema.decay)"]),
    (["hooks.mine._target_=x.Y"], ["(a hook of your own is added with +hooks.mine._target_=<module.Class>)"]),
    (["hydra.run.dri=x"], ["hydra.run.dri: no such key in hydra.run; did you mean hydra.run.dir? Accepted there: dir\n"]),
    (["~trainer.max_epochs"], ["~trainer.max_epochs: trainer.max_epochs is a setting of the built-in schema and cannot be "
                               "deleted; give it a value instead"]),
]


def test_hydras_own_option_forms_are_taken_not_refused_as_unknown(tmp_path):
    """The one-line refusal of an unknown dash option must leave every form Hydra's parser takes: -cn=config, -cjob
    (an option and its value together), abbreviations (--config-d), values that start with a dash."""
    for args in (["-cn=config", "--cfg", "job", "-p", "trainer"], ["-cjob", "-p", "trainer"],
                 ["--config-d", str(REPO / "conf"), "--cfg", "job", "-p", "trainer"],
                 ["optimizer.lr=-1", "--cfg", "job", "-p", "optimizer"]):
        proc = run_cli(args, tmp_path, timeout=120)
        assert proc.returncode == 0 and "Config error" not in proc.stderr, (args, proc.stderr[-2000:])


def test_a_workflow_whose_last_epochs_are_never_validated_says_so(tmp_path):
    """[[train, 2], [val, 1]] for 3 epochs: the objective was epoch 2's, reported as the run's, without a word."""
    args = [*FAST, "trainer.workflow=[[train,2],[val,1]]", "~hooks.evaluator"]
    proc = run_cli([*args, "trainer.max_epochs=3"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert ("the last val phase comes after epoch 2, so the last 1 epoch(s) are not validated" in out
            and "set trainer.max_epochs=4, or add hooks.evaluator" in out), out[-3000:]
    assert re.search(r"Finished \(completed\): val/accuracy = [0-9.]+ \(validated after epoch 2/3, not at the end\)", out)
    proc = run_cli([*args, "trainer.max_epochs=4", "hydra.run.dir=four"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "not validated" not in out and "not at the end" not in out, proc.stderr[-3000:]
    assert re.search(r"Finished \(completed\): val/accuracy = [0-9.]+\n", out)


MISFITS = [
    (["data.train.shape=[1,4,4]"], ["model.in_features=64, but each sample of the data has 16 features", "set model.in_features=16"]),
    (["data.train.num_classes=20"], ["model.num_classes=10, but this batch has labels from 0 to", "set model.num_classes="]),
    (["model=cnn", "data.train.shape=[64]"], ["model=cnn takes images", "use model=mlp"]),
    (["model=cnn", "data.train.shape=[3,8,8]"], ["model.in_channels=1, but the data's images have 3 channels",
                                                 "set model.in_channels=3"]),
    (["data=arrays", "data.train.path=labels.npz", "data.val.path=labels.npz", "model.in_features=4"],
     ["'y' holds non-integer values (0.5)", "store them as integers"]),
    (["data=arrays", "data.train.path=.", "data.val.path=."], ["is a directory (expected a .npz or .pt file, relative to the current directory"]),
    # torch's "mat1 and mat2 must have the same dtype" traceback
    (["data=arrays", "data.train.path=onehot.npz", "data.val=null", "model.in_features=4", "data.train.dtype=int64",
      "data.train.targets=z"], ["the inputs are int64: MLP takes floating-point inputs; load them as floats"]),
    # a traceback from the first step, each
    (["data=arrays", "data.train.path=onehot.npz", "data.val=null", "model.in_features=4"],
     ["'y' has shape (8, 2); targets are one class number per sample, shape (8,) (one-hot rows? store y.argmax(1))"]),
    (["data=arrays", "data.train.path=flat.npz", "data.val=null", "model.in_features=4"],
     ["'x' has shape (8,), one number per sample", "store x[:, None] for a single feature"]),
    (["data=arrays", "data.train.path=empty.npz", "data.val=null", "model.in_features=4"],
     ["data.train: the training set is empty (0 samples)"]),
    (["trainer.resume=arrays.pt"], ["trainer.resume: 'arrays.pt' is not a training checkpoint (it holds x, y;",
                                     "use trainer.load_from"]),
    # numpy's advice to load it with allow_pickle
    (["data=arrays", "data.train.path=notes.npz", "data.val=null"],
     ["data file 'notes.npz' is not a .npz or a torch.save'd dict of arrays: it starts 'x,y' (a text file?"]),
]


@pytest.mark.parametrize("overrides, words", MISFITS, ids=[" ".join(o) for o, _ in MISFITS])
def test_data_that_does_not_fit_the_model_is_one_line_naming_the_key_to_change(overrides, words, tmp_path):
    """Each was a torch traceback from the first step (mat1 and mat2 shapes cannot be multiplied, Target 18 is
    out of bounds), naming no key; float labels were cut to integers without a word."""
    import numpy as np

    np.savez(tmp_path / "labels.npz", x=np.zeros((8, 4), dtype=np.float32), y=np.array([0, 1, 0.5, 1, 0, 1, 0, 1]))
    np.savez(tmp_path / "onehot.npz", x=np.zeros((8, 4), dtype=np.float32), y=np.zeros((8, 2), dtype=np.int64),
             z=np.zeros(8, dtype=np.int64))
    np.savez(tmp_path / "flat.npz", x=np.zeros(8, dtype=np.float32), y=np.zeros(8, dtype=np.int64))
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 4), dtype=np.float32), y=np.zeros(0, dtype=np.int64))
    torch.save({"x": torch.zeros(8, 4), "y": torch.zeros(8)}, tmp_path / "arrays.pt")
    (tmp_path / "notes.npz").write_text("x,y\n0.5,1\n")
    data = [] if "data=arrays" in overrides else ["data=synthetic", "data.train.size=256"]
    proc = run_cli([*data, "trainer.max_epochs=1", *overrides], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    assert all(word in out for word in words), out[-3000:]
    for d in run_dirs(tmp_path):
        assert read_run(d)["status"] == "failed" and read_run(d)["exit_code"] == 2


def test_a_data_file_with_nan_inputs_is_named_before_the_nan_loss_stops_the_run(tmp_path):
    """It said "Loss became infinite or NaN at iteration 0", naming no file."""
    import numpy as np

    x = np.zeros((8, 4), dtype=np.float32)
    x[3, 1] = np.nan
    np.savez(tmp_path / "nan.npz", x=x, y=np.zeros(8, dtype=np.int64))
    proc = run_cli(["data=arrays", "data.train.path=nan.npz", "data.val=null", "model.in_features=4", "trainer.max_epochs=1"],
                   tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "data file 'nan.npz': 1 of 8 samples of 'x' hold nan or infinite values" in out, out[-3000:]


def test_a_config_file_that_is_not_yaml_and_a_run_dir_that_is_a_file_are_one_line_each(tmp_path):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "broken.yaml").write_text("_target_: launcher.models.MLP\nin_features: [64\n")
    (tmp_path / "taken").write_text("a file, not a dir\n")
    for args, words in [
        (["--config-dir", str(tmp_path / "conf"), "model=broken"], [f"{tmp_path / 'conf' / 'model' / 'broken.yaml'}, line 3",
                                                                    "expected ',' or ']'", "(not valid YAML)"]),
        (["hydra.run.dir=taken"], ["cannot make the output dir taken: File exists", "must name a directory"]),
        (["-m", "hydra.sweep.dir=taken", "seed=0,1"], ["cannot make the output dir taken: File exists"]),
    ]:
        proc = run_cli([*args, *FAST], tmp_path, timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
        assert out.strip().splitlines()[-1].startswith("Config error: ") and all(w in out for w in words), out[-3000:]
    assert (tmp_path / "taken").read_text() == "a file, not a dir\n"


@pytest.mark.parametrize("overrides, words", BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_input_gives_one_clear_message_and_no_successful_looking_run(overrides, words, tmp_path):
    fast = [] if any(o.startswith(("data.train._target_", "data=")) for o in overrides) else FAST
    proc = run_cli([*overrides, *fast] if overrides[0].startswith("--") else [*fast, *overrides], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in out
    for word in words:
        assert word in out, out
    for d in run_dirs(tmp_path):
        record = read_run(d)
        assert record["status"] == "failed" and record["exit_code"] == proc.returncode
        assert not (d / "checkpoints" / "final.pt").exists()


@pytest.mark.parametrize("shadow", ["hooks.py", "hooks/__init__.py"])
def test_a_hooks_module_of_the_users_own_trains_beside_the_built_in_hooks(shadow, tmp_path):
    """python -m puts the current directory first on sys.path: a project's own hooks.py (or hooks/) is its own;
    the built-in hooks are launcher.hooks, so the two never collide. A config still naming the old top-level
    package (hooks.checkpoint.PeriodicCheckpointer) is told the new name."""
    path = tmp_path / shadow
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("from launcher.hooks import HookBase\n\nclass Mine(HookBase):\n    def after_train(self):\n"
                    "        print('mine ran')\n")
    proc = run_cli([*FAST, "+hooks.mine._target_=hooks.Mine"], tmp_path, timeout=120)
    assert proc.returncode == 0 and "mine ran" in proc.stdout, proc.stderr[-2000:]
    (tmp_path / "elsewhere").mkdir()
    proc = run_cli([*FAST, "+hooks.old._target_=hooks.checkpoint.PeriodicCheckpointer"], tmp_path / "elsewhere", timeout=120)
    assert proc.returncode == 2 and "launcher.hooks" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]


def test_a_bug_in_the_users_model_code_is_shown_with_its_traceback_not_as_a_config_error(tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self, **kwargs):\n        super().__init__()\n"
        "        self.scale = undefined_scale\n")
    proc = run_cli([*FAST, "model._target_=mymodel.Net"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "Config error" not in proc.stdout + proc.stderr
    assert "mymodel.py\", line 7, in __init__" in proc.stderr and "NameError: name 'undefined_scale' is not defined" in proc.stderr


def test_a_misspelt_objective_stops_the_run_at_the_first_validation_with_a_checkpoint_and_the_mended_one_resumes(tmp_path):
    """It was a warning, and the run went on to its end, returned NaN and exited 0: a sweeper optimised nothing."""
    args = [*FAST, "trainer.max_epochs=3", "hydra.run.dir=run"]
    proc = run_cli([*args, "objective=val/acuracy"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    said = [line for line in out.splitlines() if "val/acuracy" in line]
    assert len(said) == 1 and said[0].endswith(
        "Config error: objective: 'val/acuracy' is not a validation metric (validation records: val/accuracy, "
        "val/loss); did you mean objective=val/accuracy?"), out[-3000:]
    assert "Stopped at iteration 8 for the config error below, with a checkpoint" in out  # 256 samples, 32 a batch
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "last").read_text().strip() == "iter_0000008.pt" and read_run(tmp_path / "run")["status"] == "failed"
    proc = run_cli([*args, "objective=val/acuracy"], tmp_path, timeout=120)  # still misspelt: stops at once, trains nothing
    assert proc.returncode == 2 and "did you mean objective=val/accuracy?" in proc.stdout + proc.stderr
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_0000008.pt", "last"]
    proc = run_cli([*args, "objective=val/accuracy"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Resumed from" in out and "iter_0000008.pt at iteration 8" in out, out[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "completed" and record["objective"]["value"] == record["metrics"]["val/accuracy"]
    assert run_cli([*FAST, "trainer.max_epochs=3", "hydra.run.dir=ref"], tmp_path, timeout=120).returncode == 0
    _same_final_weights(tmp_path / "run", tmp_path / "ref")


def test_a_run_that_fails_mid_training_says_why_in_its_train_log(tmp_path):
    """The console has Hydra's report; the run dir's log, read later (a SLURM job's), must too."""
    (tmp_path / "boom.py").write_text(
        "from launcher.hooks import HookBase\n\n\nclass Boom(HookBase):\n    def after_step(self):\n"
        "        if self.trainer.iter == 3:\n            raise RuntimeError('boom at step 3')\n")
    proc = run_cli([*FAST, "+hooks.boom._target_=boom.Boom"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "RuntimeError: boom at step 3" in proc.stderr
    (run_dir,) = run_dirs(tmp_path / "outputs")
    log = (run_dir / "train.log").read_text()
    assert "[ERROR] Run failed: RuntimeError: boom at step 3" in log
    assert "Traceback" in log and "boom.py\", line 7, in after_step" in log
    assert proc.stderr.count("boom at step 3") == log.count("boom at step 3") - 1  # the console's report, unchanged
    record = read_run(run_dir)
    assert (record["status"], record["exit_code"], record["error"]) == ("failed", 1, "RuntimeError: boom at step 3")


class _RunsCodeWhenUnpickled:
    """Unpickling this creates ``marker``: what a hostile weights file could do with any code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_load_from_never_unpickles_code_and_says_how_to_load_a_trusted_file(tmp_path):
    from launcher.models import MLP

    weights, marker = tmp_path / "downloaded.pt", tmp_path / "code_ran"
    torch.save({"model": MLP().state_dict(), "extra": _RunsCodeWhenUnpickled(marker)}, weights)
    proc = run_cli([*FAST, "trainer.max_epochs=1", f"trainer.load_from={weights}"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert not marker.exists()  # the file's code never ran
    line = next(ln for ln in out.splitlines() if "Config error" in ln)
    assert "trainer.load_from" in line and str(weights) in line and "io.open" in line and "weights_only=False" in line
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert read_run(run_dir)["status"] == "failed"

    truncated = tmp_path / "truncated.pt"
    good = tmp_path / "good.pt"
    torch.save({"model": MLP().state_dict()}, good)
    truncated.write_bytes(good.read_bytes()[:1000])
    proc = run_cli([*FAST, "trainer.max_epochs=1", f"trainer.load_from={truncated}"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert f"trainer.load_from: checkpoint '{truncated}' is unreadable (truncated or corrupt)" in out


@pytest.mark.parametrize("override", ["trainer.max_epoch=3", "trainer.max_epochs=ten", "trainer=epok", "~hooks.consol",
                                      "+trainer.max_epochs=3", "model.hidden=[1,", "model=null"])
@pytest.mark.smoke
def test_a_config_that_does_not_compose_gets_one_line_and_exit_status_2(override, tmp_path):
    proc = run_cli([override], tmp_path, timeout=120)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("Config error: "), proc.stdout + proc.stderr
    assert not (tmp_path / "outputs").exists()  # nothing ran


def one_config_error(proc: subprocess.CompletedProcess) -> str:
    """The one line a refused command prints, as composition's errors print it: on stderr, no log time stamp,
    exit 2, no traceback; nothing on stdout."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("Config error: ") and not proc.stdout.strip(), proc.stdout + proc.stderr
    return lines[0]


def _read_only_cwd(tmp_path: Path) -> Optional[List[str]]:
    """A command prefix that runs in ``tmp_path`` bind-mounted read-only, in a mount namespace of its own (root
    writes anywhere else); None where mounts are not allowed."""
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -o bind,ro "$0" "$0" && cd "$0" && exec "$@"',
              str(tmp_path)]
    try:
        probe = subprocess.run([*prefix, "sh", "-c", "touch x"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return prefix if probe.returncode != 0 and "Read-only" in probe.stderr else None


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_current_directory_that_refuses_the_outputs_dir_is_one_line_naming_hydra_run_dir(sweep, tmp_path):
    prefix = _read_only_cwd(tmp_path)
    if prefix is None:
        pytest.skip("needs a private mount namespace (unshare -m) to make a read-only current directory")
    args = (["-m", *FAST, "seed=0,1"] if sweep else FAST)
    proc = subprocess.run([*prefix, sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"})
    line = one_config_error(proc)
    assert "cannot make the output dir outputs" in line and "Read-only file system" in line, line
    assert "hydra.run.dir" in line and "hydra.sweep.dir" in line and "this user can write to" in line, line


def test_a_config_group_given_a_list_of_numbers_is_one_line_naming_its_options(tmp_path):
    line = one_config_error(run_cli([*FAST, "hooks=[1,2]"], tmp_path, timeout=120))
    assert line.startswith("Config error: hooks=[1,2]: 1 is not an option of the config group hooks") and "console" in line
    assert not (tmp_path / "outputs").exists()


def test_a_batch_size_too_large_for_any_loader_is_named_with_the_range_not_blamed_on_the_data(tmp_path):
    line = one_config_error(run_cli([*FAST, "data.batch_size=99999999999999999999999"], tmp_path, timeout=120))
    assert "data.batch_size should be an integer from 1 to 2**31-1 (2147483647), got 99999999999999999999999" in line


@pytest.mark.parametrize("override", ["trainer.max_epochs=99999999999999999999999", "trainer.max_epochs=1e23",
                                      "trainer.max_epochs=2.5"])
def test_a_run_length_that_is_no_whole_number_or_absurd_is_refused_naming_the_key(override, tmp_path):
    line = one_config_error(run_cli([*FAST, override], tmp_path, timeout=120))
    assert "trainer.max_epochs" in line, line


def test_a_run_json_that_is_a_directory_is_one_line_and_is_left_as_it_is(tmp_path):
    (tmp_path / "run" / "run.json").mkdir(parents=True)
    (tmp_path / "run" / "run.json" / "mine.txt").write_text("kept\n")
    line = one_config_error(run_cli([*FAST, "hydra.run.dir=run"], tmp_path, timeout=120))
    assert f"{tmp_path / 'run' / 'run.json'}: a directory where the run's record (a file) goes" in line, line
    assert (tmp_path / "run" / "run.json" / "mine.txt").read_text() == "kept\n"


@pytest.mark.parametrize("override, words", [
    ("optimizer.lr=-1", "optimizer (torch.optim.SGD): ValueError: Invalid learning rate: -1"),
    ("optimizer.lr=abc", "optimizer.lr: 'abc' is not a number"),
    ("model._target_=launcher.models.MLPP", "model._target_: cannot import 'launcher.models.MLPP'"),
    ("data.train._target_=launcher.data.synthetix", "data.train._target_: cannot import 'launcher.data.synthetix'"),
    ("hooks.console._target_=hooks.Console", "hooks.console._target_: cannot import 'hooks.Console'"),
], ids=["negative lr", "lr not a number", "model target", "dataset target", "hook target"])
def test_a_value_found_wrong_while_building_is_told_as_a_composition_error_before_model_and_data_are_built(
        override, words, tmp_path):
    """Config errors found while building went to stdout as a log record ("[12:00:00][ERROR] Config error: ...") after
    the model and data were built; those found while composing, to stderr in one line."""
    line = one_config_error(run_cli([*FAST, override, "hydra.run.dir=run"], tmp_path, timeout=120))
    assert words in line, line
    assert "Instantiating" not in (tmp_path / "run" / "train.log").read_text()  # nothing was built
    assert read_run(tmp_path / "run")["status"] == "failed" and read_run(tmp_path / "run")["exit_code"] == 2


def test_full_error_env_still_shows_the_traceback(tmp_path):
    proc = run_cli([*FAST, "model._target_=launcher.models.MLPP"], tmp_path, env={"HYDRA_FULL_ERROR": "1"}, timeout=120)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_wheel_installs_and_runs_from_another_directory(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    import zipfile

    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("launcher/conf/")}
    expected = {f"launcher/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    assert expected <= shipped, f"conf files missing from the wheel (list their folder in pyproject.toml): {expected - shipped}"
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PYTHONPATH": str(site)}
    names = zipfile.ZipFile(wheel).namelist()
    assert "launcher/hooks/checkpoint.py" in names and not any(n.startswith("hooks/") for n in names)  # no top-level name taken
    where = subprocess.run([sys.executable, "-c", "import launcher.hooks, launcher.runs.config as c; print(c.CONFIG_DIR); "
                            "print(launcher.hooks.__file__); import importlib.util; print(importlib.util.find_spec('hooks'))"],
                           cwd=work, env={**os.environ, **env}, capture_output=True, text=True)
    assert where.stdout.splitlines() == [str(site / "launcher" / "conf"), str(site / "launcher" / "hooks" / "__init__.py"),
                                         "None"], where.stderr[-2000:]
    proc = run_cli(["trainer.max_epochs=1", *FAST], work, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(work / "outputs")
    assert read_run(run_dir)["status"] == "completed"
    assert "*" in (work / "outputs" / ".gitignore").read_text().splitlines()  # a user's project keeps a clean git status


def test_runs_started_together_get_their_own_run_dirs(tmp_path):
    """Two runs launched in the same second must not share (and resume from) one run dir."""
    args = [sys.executable, "-m", "launcher", "trainer.max_epochs=1", *FAST]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0
    dirs = run_dirs(tmp_path / "outputs")
    assert len(dirs) == 2 and all(read_run(d)["attempt"] == 1 for d in dirs)


def test_a_nan_loss_ends_a_run_in_one_line_and_a_sweep_with_its_report_not_a_traceback(tmp_path):
    """A NaN loss's traceback is the trainer's own frames: the console gets its one line (train.log the
    traceback). A sweep whose jobs fail in training ends with its report of the jobs, not Hydra's traceback
    of the sweeper re-raising the first failure; a failure in the user's code still shows its frames."""
    (tmp_path / "single").mkdir()
    proc = run_cli([*FAST, "optimizer.lr=1e12", "trainer.max_epochs=1"], tmp_path / "single", timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "single" / "outputs")
    last = proc.stderr.strip().splitlines()[-1]
    # numbered as the progress line numbers it (it said "at iteration 2 (epoch 0)" under "epoch 1/1  iter 3/8")
    assert last.startswith("Run failed: NonFiniteLoss: Loss became infinite or NaN in step ") and " of 8 (epoch 1/1; iter " \
        in last and \
        last.endswith(f"(traceback in {run_dir / 'train.log'})"), last
    assert re.search(r"; the lr was [0-9.]+e\+1[12]: a lower optimizer\.lr, or the optimizer_step hook", last), last  # named no key
    log = (run_dir / "train.log").read_text()
    assert "Traceback" in log and "in _raise_non_finite" in log
    assert read_run(run_dir)["status"] == "failed"

    (tmp_path / "boom.py").write_text(
        "from launcher.hooks import HookBase\n\n\nclass Boom(HookBase):\n    def after_step(self):\n"
        "        if self.trainer.iter == 3:\n            raise RuntimeError('boom at step 3')\n")
    sweep = run_cli(["-m", "optimizer.lr=0.05,1e12", "trainer.max_epochs=1", *FAST], tmp_path, timeout=300)
    out = sweep.stdout + sweep.stderr
    assert sweep.returncode == 1 and "Traceback" not in out, out[-3000:]
    report = sweep.stderr[sweep.stderr.index("1 of 2 sweep job(s) failed"):]
    assert "job 1 [optimizer.lr=1000000000000.0]: " in report and "NonFiniteLoss: Loss became infinite or NaN" in report

    user = run_cli(["-m", "seed=0,1", "+hooks.boom._target_=boom.Boom", "trainer.max_epochs=1", *FAST], tmp_path, timeout=300)
    out = user.stdout + user.stderr
    assert user.returncode == 1 and "basic_sweeper.py" not in out, out[-3000:]
    report = user.stderr[user.stderr.index("2 of 2 sweep job(s) failed"):]
    assert report.count("RuntimeError: boom at step 3") >= 2 and 'boom.py", line 7, in after_step' in report


# Models of one's own that break the model contract, each in a file of the test's dir.
CONTRACT_MODELS = {
    "logits.py": "import torch\n\n\nclass Logits(torch.nn.Module):\n    def __init__(self, in_features, num_classes, **unused):\n"
                 "        super().__init__()\n        self.lin = torch.nn.LazyLinear(num_classes)\n\n"
                 "    def forward(self, batch):\n        return self.lin(batch[0])\n",
    "plain.py": "import torch\n\n\nclass Plain(torch.nn.Module):\n    def __init__(self, in_features, num_classes, **unused):\n"
                "        super().__init__()\n        self.lin = torch.nn.Linear(in_features, num_classes)\n\n"
                "    def forward(self, x):\n        return self.lin(x.flatten(1))\n",
}
BATCH = "here a list of 2 (a tensor of shape [32, 1, 8, 8], a tensor of shape [32]): forward takes the whole batch, unpacks it (x, y = batch) and returns the loss"


@pytest.mark.parametrize("model, words", [
    # returns logits, not a loss
    (["model._target_=logits.Logits"], ["Run failed: ModelOutputError: Logits.forward returned a tensor of shape [32, 1, 8, 10] "
                                        "in train mode; the trainer accepts a scalar loss tensor"]),
    # torch's own module: its forward takes one tensor, and the batch is [x, y]
    (["model._target_=torch.nn.Linear", "~model.hidden", "~model.dropout", "~model.num_classes", "~model.in_features",
      "+model.in_features=64", "+model.out_features=10"],
     ["Run failed: ModelInputError: Linear.forward failed on the first batch: TypeError: linear(): argument 'input' "
      "(position 1) must be Tensor, not list.", BATCH]),
    # a user's forward(self, x), as a plain PyTorch model is written
    (["model._target_=plain.Plain"], ["Run failed: ModelInputError: Plain.forward failed on the first batch: ", BATCH]),
], ids=["returns logits", "nn.Linear", "forward(x)"])
def test_a_model_that_breaks_the_contract_gets_one_line_naming_it(model, words, tmp_path):
    for name, source in CONTRACT_MODELS.items():
        (tmp_path / name).write_text(source)
    proc = run_cli([*FAST, *model, "trainer.max_epochs=1"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(words[0]) and all(w in last for w in words) and "train.log" in last, last
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert "Traceback" in (run_dir / "train.log").read_text()


def test_a_models_own_type_error_at_the_first_step_is_not_blamed_on_the_batch(tmp_path):
    """Only torch refusing the batch itself ("must be Tensor, not list") means a forward that does not take it."""
    (tmp_path / "own.py").write_text(
        "import torch\n\n\nclass Own(torch.nn.Module):\n    def __init__(self, **unused):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(64, 10)\n\n    def forward(self, batch):\n        x, y = batch\n"
        "        return torch.add(self.lin(x.flatten(1)).sum(), [y])\n")
    proc = run_cli([*FAST, "model._target_=own.Own", "trainer.max_epochs=1"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "ModelInputError" not in proc.stderr, proc.stderr[-3000:]
    assert 'own.py", line 11, in forward' in proc.stderr and "must be Tensor, not list" in proc.stderr, proc.stderr[-3000:]


def test_a_checkpoint_dir_that_refuses_files_stops_the_run_before_it_trains(tmp_path):
    """Not after an epoch of training that then cannot be saved: one line naming the dir, exit 1."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("a file where the checkpoints dir goes")
    proc = run_cli([*FAST, "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Run failed: CheckpointWriteError: writing checkpoints in {run_dir / 'checkpoints'} failed "
                           f"(FileExistsError"), last
    jsonl = run_dir / "metrics.jsonl"
    assert "epoch 1/1" not in proc.stderr and not (jsonl.exists() and jsonl.read_text().strip())  # nothing trained
    assert read_run(run_dir)["status"] == "failed"


def test_sweep_summary_marks_the_best_job_and_keeps_going_past_a_failed_one(tmp_path):
    proc = run_cli(["-m", "optimizer.lr=0.05,0.2,-1", "trainer.max_epochs=2", *FAST], tmp_path)
    assert proc.returncode != 0  # a job failed: the sweep says so
    out = proc.stdout + proc.stderr
    assert "Sweep job 2 failed (optimizer.lr=-1" in out and "Invalid learning rate: -1" in out and "2/train.log" in out
    assert "Traceback" not in out  # a config error is its one line, in a sweep too
    (sweep,) = {d.parent for d in run_dirs(tmp_path / "outputs" / "multirun")}
    import csv

    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "done"), ("1", "done"), ("2", "failed")]
    done = [r for r in rows if r["status"] == "done"]
    best = max(done, key=lambda r: float(r["val/accuracy"]))
    assert [r["best"] for r in rows] == ["*" if r is best else "" for r in rows]
    assert all(float(r["seconds"]) > 0 for r in done)
    md = (sweep / "summary.md").read_text()
    assert "**best**" in md and "optimizer.lr=-1" in md and "Invalid learning rate: -1" in md and "2/train.log" in md
    for d in run_dirs(sweep)[:2]:  # the failure lost nothing of the other jobs
        assert read_run(d)["status"] == "completed" and (d / "checkpoints" / "final.pt").is_file()

    (sweep / "summary.csv").unlink()
    again = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(sweep)], capture_output=True, text=True)
    assert again.returncode == 0 and "**best**" in again.stdout and (sweep / "summary.csv").is_file()
    bad = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode != 0 and "is not a directory" in bad.stderr
    single = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(run_dirs(sweep)[0])], capture_output=True, text=True)
    assert single.returncode != 0 and "is a single run's dir (its record is run.json there); give a sweep dir" in single.stderr
    assert not (run_dirs(sweep)[0] / "summary.md").exists()


def test_a_run_dir_is_checked_against_the_config_its_checkpoints_were_made_with(tmp_path):
    run_dir = tmp_path / "run"
    base = [*FAST, "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"]
    assert run_cli([*base, "optimizer.lr=abc"], tmp_path, timeout=120).returncode == 2
    fixed = run_cli(base, tmp_path, timeout=120)  # the failed attempt trained nothing: nothing to protect
    assert fixed.returncode == 0 and read_run(run_dir)["status"] == "completed", fixed.stderr[-2000:]

    # a value from the environment is checked as written (a data path set otherwise on another machine is the same
    # run); the keys that read it define the run as they are written
    env_dir = tmp_path / "env_run"
    args = [*FAST, f"hydra.run.dir={env_dir}", "model.dropout='${oc.decode:${oc.env:LAUNCHER_TEST_DROPOUT,0.1}}'"]
    assert run_cli([*args, "trainer.max_epochs=1"], tmp_path, timeout=120).returncode == 0
    proc = run_cli([*args, "trainer.max_epochs=2"], tmp_path, env={"LAUNCHER_TEST_DROPOUT": "0.5"}, timeout=120)
    assert proc.returncode == 0 and "model.dropout" not in proc.stdout + proc.stderr
    proc = run_cli([*args[:-1], "model.dropout='${oc.decode:${oc.env:ANOTHER,0.1}}'", "trainer.max_epochs=2"], tmp_path,
                   timeout=120)
    assert proc.returncode == 2 and "model.dropout: '${oc.decode:${oc.env:LAUNCHER_TEST_DROPOUT,0.1}}' -> " \
        "'${oc.decode:${oc.env:ANOTHER,0.1}}'" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


def test_a_fixed_length_schedule_that_cannot_train_on_past_its_end_says_so(tmp_path):
    """A finished run trains on when max_epochs is raised; OneCycleLR, restored with its old length, cannot:
    the message names the cause (the longer run), not the schedule's arguments."""
    args = [*FAST, "hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.OneCycleLR",
            "+hooks.lr_scheduler.scheduler.max_lr=0.1", "hydra.run.dir=run"]
    assert run_cli([*args, "trainer.max_epochs=1"], tmp_path).returncode == 0
    proc = run_cli([*args, "trainer.max_epochs=2"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert "OneCycleLR" in out and "was made for the earlier length" in out
    assert "start a new run dir for the longer run" in out and "check its arguments" not in out


def test_a_hook_set_to_null_is_left_out(tmp_path):
    proc = run_cli([*FAST, "trainer.max_epochs=1", "hooks.console=null", "hooks.tensorboard=null", "hydra.run.dir=run"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Hooks: timer, lr_scheduler, evaluator, checkpointer, jsonl\n" in (tmp_path / "run" / "train.log").read_text()
    assert not list((tmp_path / "run").glob("events.out.tfevents*"))


def test_a_second_run_in_a_dir_where_one_is_training_is_refused(tmp_path):
    """Two processes in one run dir would overwrite each other's checkpoints and logs (an orphaned sweep
    job and its rerun, the same command in two terminals): the second is refused, the first goes on."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "launcher", *FAST, "trainer.max_epochs=50", "hooks.checkpointer.min_interval_secs=0", "+hooks.pace._target_=pace.Pace",
            "+hooks.pace.seconds=0.05", "hydra.run.dir=run"]
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "run" / "checkpoints" / "last").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        second = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        out = second.stdout + second.stderr
        assert second.returncode == 2 and "Traceback" not in out, out[-3000:]
        assert f"a run is training in this dir now (pid {first.pid} on this host" in out and "give this run a new hydra.run.dir (hydra.sweep.dir for a sweep)" in out
        assert first.poll() is None and read_run(tmp_path / "run")["pid"] == first.pid  # the first one goes on
        # a copy of the dir made while it trains (cp -a) is not where it writes: free; the dir by another path is not
        import shutil

        from launcher.runs.rundir import training_here_now

        shutil.copytree(tmp_path / "run", tmp_path / "copy", symlinks=True)
        (tmp_path / "link").symlink_to(tmp_path / "run")
        assert training_here_now(tmp_path / "copy") is None and read_run(tmp_path / "copy")["pid"] == first.pid
        assert training_here_now(tmp_path / "link").startswith(f"pid {first.pid} on this host")
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert read_run(tmp_path / "run")["status"] == "interrupted"

    # a record whose process is gone, or whose number a later process reuses, does not hold the dir
    import datetime

    record = json.loads((tmp_path / "run" / "run.json").read_text())
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        started = datetime.datetime.now().astimezone() - datetime.timedelta(seconds=60)
        record.update(status="running", pid=stranger.pid, start_time=started.isoformat())
        (tmp_path / "run" / "run.json").write_text(json.dumps(record))
        assert training_here_now(tmp_path / "run") is None
        record["start_time"] = datetime.datetime.now().astimezone().isoformat()
        (tmp_path / "run" / "run.json").write_text(json.dumps(record))
        assert training_here_now(tmp_path / "run").startswith(f"pid {stranger.pid} on this host")
    finally:
        stranger.kill()
        stranger.wait()
    assert training_here_now(tmp_path / "run") is None


def test_two_runs_started_together_in_one_run_dir_one_trains_and_the_other_is_refused_in_one_line(tmp_path):
    """Started at the same instant into one hydra.run.dir, both trained there, or one died with a traceback (its
    .hydra/ temporaries removed by the other's clean-up). The run dir is locked: the second is refused on stderr in
    one line naming the run that holds it, and the first trains on, its files whole (its train.log too)."""
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    for attempt in range(4):
        run_dir, go = tmp_path / f"run{attempt}", tmp_path / f"go{attempt}"
        args = [sys.executable, "-m", "launcher", *FAST, "trainer.max_epochs=1", "+hooks.wait._target_=pace.WaitFor",
                f"+hooks.wait.path={go}", f"hydra.run.dir={run_dir}"]
        procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        try:
            deadline = time.monotonic() + 120  # the one that holds the dir waits for `go` before its first step
            while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.1)
            ended = [p for p in procs if p.poll() is not None]
            assert len(ended) == 1, "neither run was refused while the other held the dir"
            refused, survivor = ended[0], next(p for p in procs if p is not ended[0])
            out, err = refused.communicate()
            assert refused.returncode == 2 and "Traceback" not in out + err, (out + err)[-3000:]
            assert err.count("\n") == 1 and err.startswith(f"Config error: {run_dir}: a run is training in this dir now "
                                                            f"(pid {survivor.pid} on this host)"), (out + err)[-3000:]
            go.touch()
            out, err = survivor.communicate(timeout=300)
            assert survivor.returncode == 0, (out + err)[-3000:]
        finally:
            go.touch()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()
        record = read_run(run_dir)
        assert record["status"] == "completed" and record["attempt"] == 1 and record["pid"] == survivor.pid
        assert (run_dir / "checkpoints" / "final.pt").is_file() and (run_dir / "metrics.jsonl").is_file()
        assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
        assert "Config error" not in (run_dir / "train.log").read_text() and not (run_dir / ".run.lock").exists()


def test_launcher_summary_rebuilds_a_sweeps_summary_by_the_sweeps_own_objective(tmp_path):
    """Run by hand, the summary goes by the objective the sweep ran with (it took val/accuracy, max)."""
    for job, (loss, accuracy) in enumerate([(0.9, 0.8), (0.5, 0.6)]):
        (tmp_path / str(job)).mkdir()
        (tmp_path / str(job) / "run.json").write_text(json.dumps({
            "status": "completed", "overrides": [f"seed={job}"], "seconds": 1.0,
            "metrics": {"val/loss": loss, "val/accuracy": accuracy},
            "config": {"objective": "val/loss", "objective_mode": "min"}}))
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Objective: `val/loss` (min); best: job 1 (`seed=1`)" in proc.stdout
    (tmp_path / "multirun.yaml").write_text("objective: val/accuracy\nobjective_mode: max\n")  # the sweep's own config first
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path)], capture_output=True, text=True)
    assert "Objective: `val/accuracy` (max); best: job 0 (`seed=0`)" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "launcher.sweep.summary", str(tmp_path), "--objective", "val/loss", "--mode", "min"],
                          capture_output=True, text=True)
    assert "Objective: `val/loss` (min); best: job 1" in proc.stdout  # given on the command line: that one
    # shown, not written: the sweep's own summary keeps its objective (a one-off ranking replaced it)
    assert "Objective: `val/accuracy` (max); best: job 0" in (tmp_path / "summary.md").read_text()


def test_lengthening_an_interrupted_run_warns_that_its_schedule_keeps_the_old_length(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    args = [*FAST, "hydra.run.dir=run", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0"]
    stopped = run_cli([*args, "trainer.max_epochs=2", "+hooks.pace.signal_after=5"], tmp_path, env=env)
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    longer = run_cli([*args, "trainer.max_epochs=4"], tmp_path, env=env)
    out = longer.stdout + longer.stderr
    assert longer.returncode == 0, out[-3000:]
    assert "trainer.max_epochs: 2 -> 4" in out and "the LR schedule goes on from its checkpointed state, made for the old length" in out


def test_signals_after_an_interrupted_run_has_saved_its_checkpoint_keep_the_exit_status_that_says_resume(tmp_path):
    """A second SIGTERM (a scheduler's, a user's kill) or Ctrl-C while Python shut down after "Interrupted ...
    exit code 75" ended the process by that signal: a wrapper that requeues on 75 saw 143 or 130."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli([*FAST, "hydra.run.dir=run", "trainer.max_epochs=2", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0",
                    "+hooks.pace.signal_after=5", "+hooks.pace.signal_at_exit=true"], tmp_path, env=env)
    assert proc.returncode == 75 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Run the same command to resume" in proc.stdout + proc.stderr and read_run(tmp_path / "run")["exit_code"] == 75


def test_ctrl_c_twice_ends_the_process_as_its_run_json_says_whichever_ctrl_c_wins(tmp_path):
    """A second Ctrl-C 10-50 ms after the first: before the run's end it aborts (aborted, 130, by SIGINT), after it
    the recorded "interrupted, exit code 75" stands; it exited by SIGINT ("Aborted") while run.json said 75."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    seen = []
    for i, (gap, from_end) in enumerate([(0.01, False), (0.02, False), (0.03, False), (0.05, False),
                                         (0.0, True), (0.005, True), (0.01, True), (0.02, True)]):
        proc = run_cli([*FAST, f"hydra.run.dir=run{i}", "+hooks.cc._target_=pace.CtrlCTwice", f"+hooks.cc.gap={gap}",
                        f"+hooks.cc.from_end={str(from_end).lower()}"], tmp_path, env=env)
        record = read_run(tmp_path / f"run{i}")
        code = 130 if proc.returncode == -2 else proc.returncode  # ended by SIGINT: a shell's 130
        seen.append((gap, from_end, proc.returncode, record["status"], record["exit_code"]))
        assert (record["status"], record["exit_code"], code) in [("interrupted", 75, 75), ("aborted", 130, 130)], seen
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        if record["status"] == "interrupted":
            assert "Aborted" not in proc.stderr and "Run the same command to resume" in proc.stdout + proc.stderr, seen


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "basic sweep"])
def test_the_advice_to_resume_a_run_in_a_dated_dir_names_the_dir(sweep, tmp_path):
    """In the default outputs/<date>/<time> dir, "run the same command again" started over in a new dir."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    args = [*FAST, "trainer.max_epochs=2", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0", "+hooks.pace.signal_after=5"]
    args = ["-m", "hydra/launcher=basic", *args] if sweep else args
    cwd = tmp_path / "copy (2), it's"  # Hydra's override grammar takes such a path only quoted, and the shell's quotes go first
    cwd.mkdir()
    proc = run_cli(args, cwd, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 75, out[-3000:]
    (found,) = run_dirs(cwd / "outputs")
    where = found.parent if sweep else found
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    advice = re.search(r"Run the same command with (.*) to resume\.", out)
    assert advice, out[-3000:]
    (typed,) = shlex.split(advice.group(1))  # as a shell reads it
    assert typed == f"{key}='{where}'".replace("it's", "it\\'s"), typed
    proc = run_cli([*args, typed], cwd, env=env)
    assert proc.returncode == 0 and "Resumed from" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert run_dirs(cwd / "outputs") == [found] and read_run(found)["status"] == "completed"


def test_a_lengthened_run_stopped_and_rerun_at_its_old_length_is_refused_and_keeps_its_final_checkpoint(tmp_path):
    """A finished 2-epoch run, lengthened to 6 and stopped at the end of epoch 3, then rerun at 2 epochs: it "ended
    there", replacing the 2-epoch final.pt and its record with the epoch-3 model under the 2-epoch config (and the
    resume line said "(the end of epoch 2/2)")."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    args = [*FAST, "hydra.run.dir=run", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0"]
    assert run_cli([*args, "trainer.max_epochs=2"], tmp_path, env=env).returncode == 0
    final = (tmp_path / "run" / "checkpoints" / "final.pt").read_bytes()
    assert run_cli([*args, "trainer.max_epochs=6", "+hooks.pace.signal_after=23"], tmp_path, env=env).returncode == 75
    record = (tmp_path / "run" / "run.json").read_text()
    proc = run_cli([*args, "trainer.max_epochs=2"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Resumed from" not in out, out[-3000:]  # it said "(the end of epoch 3/2)" first
    assert "Config error: trainer.max_epochs=2: this run's checkpoint iter_0000024.pt (made by an attempt of 6 epochs) is " \
           "at iteration 24, past this run's length, and a run cannot train back. Set trainer.max_epochs=3 " \
           "to end it there (more trains it on), or use another run dir" in out, out[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "final.pt").read_bytes() == final
    assert (tmp_path / "run" / "run.json").read_text() == record
    again = run_cli([*args, "trainer.max_epochs=3"], tmp_path, env=env)
    assert again.returncode == 0 and read_run(tmp_path / "run")["iter"] == 24, (again.stdout + again.stderr)[-3000:]
    # a run cut shorter than its own length once interrupted: it said "an attempt before lengthened it", which none had
    args = [*FAST, "hydra.run.dir=cut", "+hooks.pace._target_=pace.Pace", "+hooks.pace.seconds=0"]
    assert run_cli([*args, "trainer.max_epochs=6", "+hooks.pace.signal_after=23"], tmp_path, env=env).returncode == 75
    proc = run_cli([*args, "trainer.max_epochs=2"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "lengthened it" not in out and "Resumed from" not in out, out[-3000:]
    assert "this run's checkpoint iter_0000024.pt (made by an attempt of 6 epochs) is at iteration 24, past" in out, out[-3000:]


PLATEAU = ["hooks.lr_scheduler.scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau",
           "+hooks.lr_scheduler.scheduler.patience=0", "+hooks.lr_scheduler.scheduler.threshold_mode=abs",
           "+hooks.lr_scheduler.scheduler.threshold=10"]  # the first validation is the best: each later one halves the lr


@pytest.mark.parametrize("trainer, hook, key", [
    (["trainer.max_epochs=3"], "early_stopping", "val/accuracy"),
    (["trainer=iter", "trainer.max_iters=30", "hooks.evaluator.by_epoch=false", "hooks.evaluator.period=10",
      "hooks.checkpointer.by_epoch=false", "hooks.checkpointer.period=25"], "early_stopping", "val/accuracy"),
    (["trainer.max_epochs=3", *PLATEAU], "lr_scheduler", "val/loss"),
], ids=["by epoch", "by iteration", "ReduceLROnPlateau"])
def test_a_monitor_typo_found_at_the_first_validation_stops_with_a_checkpoint_to_resume_from(trainer, hook, key, tmp_path):
    """The monitored metric is known only once validation has run: the typo ended the run there, and the
    epoch (or the iterations since the last checkpoint) trained before it was lost. The mended rerun then
    judges the validation the hook could not, and ends as a run that had the key from the start."""
    # early stopping: no validation improves on the first by 1, so each counts as bad (patience 5: none stops)
    args = [*FAST, *trainer, "hooks=[default,early_stopping]", "hooks.early_stopping.mode=max",
            "hooks.early_stopping.min_delta=1", "hooks.early_stopping.monitor=val/accuracy"]
    typo = key[:-2]
    proc = run_cli([*args, "hydra.run.dir=run", f"hooks.{hook}.monitor={typo}"], tmp_path)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert last.endswith(f"Config error: hooks.{hook}.monitor: '{typo}' is not a validation metric (validation "
                         f"records: val/accuracy, val/loss); did you mean hooks.{hook}.monitor={key}?"), last
    stopped_at = 10 if "trainer=iter" in trainer else 8  # 256 training samples in batches of 32: an epoch is 8 steps
    assert f"Stopped at iteration {stopped_at} for the config error below, with a checkpoint" in proc.stdout + proc.stderr
    assert read_run(tmp_path / "run")["status"] == "failed"
    proc = run_cli([*args, "hydra.run.dir=run", f"hooks.{hook}.monitor={key}"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"at iteration {stopped_at} " in out and "Resumed from" in out, out[-3000:]
    assert read_run(tmp_path / "run")["status"] == "completed"
    assert run_cli([*args, "hydra.run.dir=ref", f"hooks.{hook}.monitor={key}"], tmp_path).returncode == 0
    got, want = (torch.load(tmp_path / d / "checkpoints" / "final.pt", weights_only=False) for d in ("run", "ref"))
    assert got["hooks"][hook] == want["hooks"][hook] and got["optimizer"]["param_groups"] == want["optimizer"]["param_groups"]
    for name, tensor in want["model"].items():
        assert torch.equal(got["model"][name], tensor), name


def test_a_val_metric_early_stopping_monitors_that_becomes_nan_stops_the_run_at_that_validation(tmp_path):
    """It counted as a validation without improvement: the diverged model trained on for patience more epochs
    (here to the run's end, which the record then called completed)."""
    (tmp_path / "diverges.py").write_text(
        "import torch\n\n\nclass Diverges(torch.nn.Module):\n    def __init__(self, **unused):\n"
        "        super().__init__()\n        self.lin = torch.nn.Linear(64, 10)\n        self.steps = 0\n\n"
        "    def forward(self, batch):\n        x, y = batch\n        logits = self.lin(x.flatten(1))\n"
        "        loss = torch.nn.functional.cross_entropy(logits, y)\n        if self.training:\n"
        "            self.steps += 1\n            return loss\n"
        "        accuracy = (logits.argmax(1) == y).float().mean()\n"
        "        return {'loss': loss * float('nan') if self.steps >= 16 else loss, 'accuracy': accuracy}\n")
    args = [*FAST, "trainer.max_epochs=5", "model._target_=diverges.Diverges", "hooks=[default,early_stopping]",
            "hydra.run.dir=run"]
    proc = run_cli(args, tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    record = read_run(tmp_path / "run")  # the second validation, after 16 steps (256 samples, 32 a batch), is NaN
    reason = ("early stopping: val/loss is nan in the validation after epoch 2/5, 16 steps (not finite; "
              "hooks.early_stopping.check_finite=false counts it towards patience instead)")
    assert record["status"] == "stopped" and record["iter"] == 16 and record["stop_reason"] == reason, record
    assert f"Stopped at iteration 16: {reason}" in out
    assert (tmp_path / "run" / "checkpoints" / "final.pt").is_file()


def _same_final_weights(run: Path, ref: Path) -> None:
    """The same final weights, and each train/ and val/ metric logged at the same iterations with the same values."""
    got, want = (torch.load(d / "checkpoints" / "final.pt", weights_only=False)["model"] for d in (run, ref))
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
    logged = [[{k: v for k, v in json.loads(line).items() if k == "iter" or k.startswith(("train/", "val/"))}
               for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (run, ref)]
    assert logged[0] == logged[1]


# early stopping judges the validation the stop skipped: val/loss "improves" only upward, so the second one stops the run
STOPS_AT_THE_SECOND = ["hooks.early_stopping.mode=max", "hooks.early_stopping.patience=1"]


@pytest.mark.parametrize("phase", [["hooks=[default,ema,early_stopping]", *STOPS_AT_THE_SECOND],
                                   ["trainer.workflow=[[train,1],[val,1]]", "~hooks.evaluator"]],
                         ids=["evaluator, EMA weights, early stopping", "workflow val phase"])
def test_val_data_that_does_not_fit_the_model_stops_with_a_checkpoint_and_the_mended_val_data_trains_on(phase, tmp_path):
    """The error told to resize the model to the val data (which the train data then no longer fits), the rerun
    with data.val mended was refused as another experiment, and the checkpoint saved at the stop held the EMA
    weights swapped in for the failed validation as the model's own; the mended run then skipped the validation
    (its early stopping and metrics rows were not the uninterrupted run's)."""
    args = [*FAST, "trainer.max_epochs=4", *phase]
    proc = run_cli([*args, "hydra.run.dir=run", "data.val.shape=[1,4,4]"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
    assert "Config error: data.val does not fit the model: model.in_features=64, but each sample of the data has 16 " \
           "features (shape [1, 4, 4]); make data.val's samples like data.train's" in out and "set model" not in out, out[-3000:]
    assert "Stopped at iteration 8 for the config error below, with a checkpoint" in out  # an epoch: 256 samples, 32 a batch
    saved = torch.load(tmp_path / "run" / "checkpoints" / "iter_0000008.pt", weights_only=False)
    if "ema" in saved["hooks"]:  # the model's own weights, not the EMA's that the validation had swapped in
        assert not torch.equal(saved["model"]["net.1.weight"], saved["hooks"]["ema"]["ema"]["module.net.1.weight"])
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Resumed from" in out and "data.val.shape: [1, 4, 4] -> [1, 8, 8]" in out, out[-3000:]
    assert run_cli([*args, "hydra.run.dir=ref"], tmp_path).returncode == 0
    _same_final_weights(tmp_path / "run", tmp_path / "ref")


def test_val_data_that_fails_only_the_validation_at_the_end_keeps_the_training_and_the_mended_run_finishes_it(tmp_path):
    """It ended with the config error alone, no word of final.pt, which a failed run otherwise never writes."""
    args = [*FAST, "trainer.max_epochs=3", "hooks.evaluator.period=10", "hydra.run.dir=run"]
    proc = run_cli([*args, "data.val.shape=[1,4,4]"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Config error: data.val does not fit the model" in out, out[-3000:]
    assert "Trained to iteration 24, its final checkpoint saved; what the run does at its end failed for the error below: " \
           "mend the config and run the same command to finish it from there" in out
    assert read_run(tmp_path / "run")["status"] == "failed"
    proc = run_cli(args, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Resumed from" in out and "final.pt at iteration 24" in out, out[-3000:]
    record = read_run(tmp_path / "run")
    assert record["status"] == "completed" and "val/accuracy" in record["metrics"]


def test_a_model_whose_eval_output_the_trainer_cannot_take_stops_with_a_checkpoint_and_the_mended_model_trains_on(tmp_path):
    """A forward that returns predictions in eval mode is found at the first validation: the epoch trained was lost."""
    (tmp_path / "evalout.py").write_text(
        "import os\n\nimport torch\n\n\nclass EvalOut(torch.nn.Module):\n    def __init__(self, **unused):\n"
        "        super().__init__()\n        self.lin = torch.nn.Linear(64, 10)\n\n    def forward(self, batch):\n"
        "        x, y = batch\n        logits = self.lin(x.flatten(1))\n"
        "        loss = torch.nn.functional.cross_entropy(logits, y)\n        if self.training:\n            return loss\n"
        "        return {'loss': loss} if os.environ.get('MENDED') else logits.argmax(1)\n")
    args = [*FAST, "trainer.max_epochs=4", "model._target_=evalout.EvalOut", "objective=val/loss", "objective_mode=min",
            "hooks=[default,early_stopping]", *STOPS_AT_THE_SECOND]
    env = {"PYTHONPATH": str(tmp_path)}
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Run failed: ModelOutputError: EvalOut.forward returned a tensor of shape [32] in eval " \
           "mode" in out, out[-3000:]
    assert "Stopped at iteration 8 for the error below, with a checkpoint: mend the model and run the same command" in out
    mended = {**env, "MENDED": "1"}
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=mended)
    assert proc.returncode == 0 and "Resumed from" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert run_cli([*args, "hydra.run.dir=ref"], tmp_path, env=mended).returncode == 0
    _same_final_weights(tmp_path / "run", tmp_path / "ref")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_val_dataset_that_raises_stops_with_a_checkpoint_naming_its_line_and_the_mended_data_trains_on(workers, tmp_path):
    """A missing file in the val set, found by the first validation after an epoch's training, ended the run with the
    dataset's traceback and no checkpoint of that epoch: hours of training lost to one file."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    helper = Path(__file__).resolve().parent / "noisy_data.py"
    args = [*FAST, "trainer.max_epochs=3", f"data.num_workers={workers}", "data.val._target_=noisy_data.MissingAt",
            "+data.val.at=40", "hooks=[default,early_stopping]", *STOPS_AT_THE_SECOND]
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    line = next(n for n, text in enumerate(helper.read_text().splitlines(), 1) if "raise FileNotFoundError" in text)
    assert f"Run failed: DataError: data.val: loading batch 2 of the validation after 8 steps raised FileNotFoundError: " \
           f"[Errno 2] No such file or directory: 'val/00040.png' (at {helper}:{line}, in __getitem__) (traceback in " in out
    assert "Stopped at iteration 8 for the error below, with a checkpoint: mend the val data (data.val) and run the same " \
           "command to train on from there" in out
    log = (tmp_path / "run" / "train.log").read_text()
    assert "raise FileNotFoundError" in log and "direct cause" in log  # the dataset's own traceback, for the user to read
    assert (tmp_path / "run" / "checkpoints" / "last").read_text().strip() == "iter_0000008.pt"
    mended = {**env, "MENDED": "1"}
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=mended)
    assert proc.returncode == 0 and "Resumed from" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert run_cli([*args, "hydra.run.dir=ref"], tmp_path, env=mended).returncode == 0
    _same_final_weights(tmp_path / "run", tmp_path / "ref")  # the first validation, the one that failed, among them


@pytest.mark.parametrize("workers", [0, 2])
def test_a_train_dataset_that_raises_stops_before_that_step_with_a_checkpoint_and_the_mended_data_trains_on(workers, tmp_path):
    """A missing file in the train set ended the run with the dataset's traceback: everything since the last
    checkpoint (up to an epoch) was lost, and the rerun met the same file again. Now the run stops at the boundary
    before the step whose batch could not be loaded; with workers (their own generators) the mended run ends as one
    that never met the file, and with data.num_workers=0 the log says that random augmentation may differ."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    args = [*FAST, "trainer.max_epochs=3", f"data.num_workers={workers}", "data.train._target_=noisy_data.MissingAt",
            "+data.train.at=100", "hooks.checkpointer.min_interval_secs=0"]
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    found = re.search(r"Run failed: DataError: data\.train: loading batch (\d) of epoch 1 raised FileNotFoundError: "
                      r"\[Errno 2\] No such file or directory: 'train/00100\.png' \(at .*noisy_data\.py:\d+, in __getitem__\)", out)
    assert found, out[-3000:]
    stopped = int(found.group(1)) - 1  # the steps taken before it
    assert f"Stopped at iteration {stopped} for the error below, with a checkpoint: mend the train data (data.train) " \
           f"and run the same command to train on from there" in out
    assert ("random augmentation from there may differ from a run that never met it" in out) == (workers == 0)
    assert (tmp_path / "run" / "checkpoints" / "last").read_text().strip() == f"iter_{stopped:07d}.pt"
    assert read_run(tmp_path / "run")["status"] == "failed"
    mended = {**env, "MENDED": "1"}
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=mended)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"at iteration {stopped} " in out, out[-3000:]
    assert read_run(tmp_path / "run")["status"] == "completed"
    if workers:
        assert run_cli([*args, "hydra.run.dir=ref"], tmp_path, env=mended).returncode == 0
        _same_final_weights(tmp_path / "run", tmp_path / "ref")


@pytest.mark.parametrize("sig", ["KILL", "SEGV"])
def test_a_train_worker_that_dies_mid_step_stops_the_run_at_the_next_boundary_and_the_rerun_trains_on(sig, tmp_path):
    """A DataLoader worker killed (the OOM killer's SIGKILL, a crash's SIGSEGV) while the training process was inside
    a step raised torch's RuntimeError there (in forward, backward, a hook), with a traceback and no checkpoint. Now the
    step ends whole, the run stops at the boundary after it with a checkpoint, and the rerun ends as an uninterrupted
    run does."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    flag = tmp_path / "killed"
    # unshuffled, sample 200 is in batch 7, which a worker begins loading while step 3 runs: step 3's forward waits for
    # the worker's death
    args = [*FAST, "trainer.max_epochs=2", "data.num_workers=2", "data.shuffle=false",
            "data.train._target_=noisy_data.KilledAt", "+data.train.at=200", f"+data.train.signal={sig}",
            f"+data.train.flag={flag}", "model._target_=noisy_data.BusyWhenAWorkerDies", f"+model.flag={flag}",
            "+model.step=3", "hooks.checkpointer.min_interval_secs=0"]
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    assert (tmp_path / "killed.waited").exists()  # the worker died while step 3 ran
    name = {"KILL": "Killed", "SEGV": "Segmentation fault"}[sig]
    # (torch's own handler in a worker that crashes writes "ERROR: Unexpected segmentation fault ..." first)
    assert re.search(rf"Run failed: DataError: data\.train: loading the batches of epoch 1 raised RuntimeError: "
                     rf"DataLoader worker \(pid \d+\) is killed by signal: {name}\. \(traceback in .*train\.log\)$",
                     proc.stderr, re.M), out[-3000:]
    assert "Stopped at iteration 3 for the error below, with a checkpoint" in out
    assert (tmp_path / "run" / "checkpoints" / "last").read_text().strip() == "iter_0000003.pt"
    assert read_run(tmp_path / "run")["status"] == "failed"
    proc = run_cli([*args, "hydra.run.dir=run"], tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "at iteration 3 " in out, out[-3000:]
    assert read_run(tmp_path / "run")["status"] == "completed"
    assert run_cli([*args, "hydra.run.dir=ref"], tmp_path, env=env).returncode == 0
    _same_final_weights(tmp_path / "run", tmp_path / "ref")


def test_a_rerun_removes_the_half_written_record_files_a_killed_run_left(tmp_path):
    """A SIGKILL inside the atomic write of run.json (or .hydra/) left its temporary file in the run dir for good."""
    assert run_cli([*FAST, "hydra.run.dir=run", "trainer.max_epochs=1"], tmp_path).returncode == 0
    stale = [tmp_path / "run" / ".run.json.tmp4242", tmp_path / "run" / ".hydra" / ".config.yaml.tmp4242"]
    for path in stale:
        path.write_text("half")
    proc = run_cli([*FAST, "hydra.run.dir=run", "trainer.max_epochs=1"], tmp_path)
    assert proc.returncode == 0 and "already finished" in proc.stdout + proc.stderr
    assert not any(path.exists() for path in stale) and read_run(tmp_path / "run")["status"] == "completed"


def test_load_from_in_a_run_dir_with_checkpoints_is_named_as_unused(tmp_path):
    args = [*FAST, "hydra.run.dir=run"]
    assert run_cli([*args, "trainer.max_epochs=1"], tmp_path).returncode == 0
    proc = run_cli([*args, "trainer.max_epochs=2", "trainer.load_from=run/checkpoints/epoch_0001.pt"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Resumed from" in out and "(the end of epoch 1/2)" in out
    assert "trainer.load_from=run/checkpoints/epoch_0001.pt is not used: this run resumes from its own checkpoint" in out


def test_a_sweep_with_its_own_subdir_names_is_summarized(tmp_path):
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", "seed=0,1", "hydra.sweep.dir=sweep",
                    "hydra.sweep.subdir=seed_${seed}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sweep of 2 job(s): 2 done; best: job " in proc.stdout
    import csv

    rows = list(csv.DictReader((tmp_path / "sweep" / "summary.csv").open()))
    assert [(r["job"], r["overrides"], r["status"]) for r in rows] == \
        [("0", f"{' '.join(FAST)} trainer.max_epochs=1 seed=0", "done"), ("1", f"{' '.join(FAST)} trainer.max_epochs=1 seed=1", "done")]


def test_an_attempt_killed_outright_counts_in_the_run_time_up_to_its_last_sign_of_life(tmp_path):
    import datetime

    from launcher.runs.rundir import RunRecord

    killed = RunRecord(tmp_path, seed=0)
    killed.start()  # then SIGKILL: its record stays "running", with no end or time of its own
    start = datetime.datetime.fromisoformat(killed.data["start_time"]).timestamp()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last").write_text("epoch_0004.pt\n")
    os.utime(tmp_path / "checkpoints" / "last", (start + 40, start + 40))  # its last checkpoint, 40 s in
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    os.utime(tmp_path / "metrics.jsonl", (start + 42, start + 42))  # its last metrics, 2 s later
    resumed = RunRecord(tmp_path, seed=0)
    assert 41.9 < resumed.data["seconds"] < 42.1 and resumed.data["attempt"] == 2


def test_resuming_another_runs_checkpoint_under_a_config_defining_another_run_is_refused(tmp_path):
    """``trainer.resume=<checkpoint of another run dir>`` with other data or seed went on silently with this
    config's batches and length (the schedule, sized for the old run, ran past its horizon); a longer run
    goes on, as a rerun in the run's own dir does."""
    assert run_cli([*FAST, "trainer.max_epochs=2", f"hydra.run.dir={tmp_path / 'base'}", "hooks.checkpointer.min_interval_secs=0"],
                   tmp_path, timeout=120).returncode == 0
    ckpt = tmp_path / "base" / "checkpoints" / "epoch_0001.pt"
    bad = run_cli([*FAST, "trainer.max_epochs=2", f"trainer.resume={ckpt}", "data.batch_size=16",
                   f"hydra.run.dir={tmp_path / 'other'}"], tmp_path, timeout=120)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2 and "Traceback" not in out, out[-3000:]
    assert f"trainer.resume={ckpt}: that checkpoint's run ({tmp_path / 'base'}) was made with another config " \
           f"(data.batch_size: 32 -> 16)" in out and f"trainer.load_from={ckpt}" in out
    longer = run_cli([*FAST, "trainer.max_epochs=3", f"trainer.resume={ckpt}", f"hydra.run.dir={tmp_path / 'longer'}"],
                     tmp_path, timeout=120)
    out = longer.stdout + longer.stderr
    assert longer.returncode == 0 and "continuing with: trainer.max_epochs: 2 -> 3" in out, out[-3000:]
    assert read_run(tmp_path / "longer")["resumed_from"] == str(ckpt)


def test_a_rerun_that_turns_data_workers_on_says_the_run_is_no_longer_bitwise_the_uninterrupted_one(cli, tmp_path):
    """"continuing with: data.num_workers: 0 -> 1" read as still exact; with workers a dataset's random augmentation
    draws from the workers' seeds, not the run's stream (docs/contracts.md)."""
    assert cli(*FAST, "trainer.max_epochs=1", "hydra.run.dir=run").returncode == 0
    proc = cli(*FAST, "trainer.max_epochs=2", "data.num_workers=1", "hydra.run.dir=run")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "continuing with: trainer.max_epochs: 1 -> 2, data.num_workers: 0 -> 1; " in out, out[-3000:]
    assert "data.num_workers 0 -> 1: augmentation draws differently with workers and without, so " \
        "the run goes on but is no longer bitwise the uninterrupted one" in out, out[-3000:]
    proc = cli(*FAST, "trainer.max_epochs=3", "data.num_workers=2", "hydra.run.dir=run")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "num_workers: 1 -> 2" in out and "no longer bitwise" not in out, out[-3000:]


def test_a_run_dir_whose_log_file_cannot_be_opened_is_one_config_error(tmp_path):
    """Hydra opens ``train.log`` before any of the run's code: its failure was two chained tracebacks ending
    "Unable to configure handler 'file'", naming no file."""
    (tmp_path / "run" / "train.log").mkdir(parents=True)
    proc = run_cli([*FAST, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().startswith(f"Config error: cannot write the run's log file {tmp_path / 'run' / 'train.log'}: "
                                          f"Is a directory; hydra.run.dir") and proc.stderr.strip().count("\n") == 0


def test_a_loss_ranked_highest_best_and_an_lr_of_zero_are_told(tmp_path):
    """Each ran without a word: a sweep of objective=val/loss (objective_mode max, the default) marked the worst job
    best; optimizer.lr=0 trained nothing."""
    proc = run_cli([*FAST, "trainer.max_epochs=1", "objective=val/loss", "optimizer.lr=0"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.count("objective=val/loss with objective_mode=max: a sweep ranks the highest "
                                              "val/loss best; set objective_mode=min") == 1, out[-3000:]
    assert "optimizer.lr=0: the weights will not change" in out


def test_the_advice_for_a_value_an_environment_variable_gives_runs_as_typed_in_a_shell(tmp_path):
    """The hint for ${oc.env:...}'s string where a bool is taken: typed as it said, Hydra's parser refused it."""
    proc = run_cli(["hooks.checkpointer.save_final=${oc.env:SAVE_FINAL,true}", "trainer.max_epochs=1", *FAST], tmp_path)
    advice = re.search(r"\(on the command line: (.*)\)$", (proc.stdout + proc.stderr).strip().splitlines()[-1])
    assert proc.returncode == 2 and advice, (proc.stdout + proc.stderr)[-2000:]
    (typed,) = shlex.split(advice.group(1))  # as a shell reads it
    proc = run_cli([typed, "hydra.run.dir=run", "trainer.max_epochs=1", *FAST], tmp_path,
                   env={**os.environ, "SAVE_FINAL": "false"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert not (tmp_path / "run" / "checkpoints" / "final.pt").exists()  # the variable's false, read as a bool


def test_the_run_log_is_train_log_whatever_the_job_is_named(cli, tmp_path):
    """``hydra.job.name=exp1`` (a name for the sweep's SLURM jobs) made the log ``exp1.log``, while the sweep's error
    lines, DDP workers and the other ranks' errors name and write ``train.log``; a logging config of one's own
    (``hydra/job_logging=stdout``) still replaces the launcher's."""
    proc = cli("hydra.job.name=exp1", "hydra.run.dir=run", "trainer.max_epochs=1", *FAST)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Finished (completed)" in (tmp_path / "run" / "train.log").read_text() and not (tmp_path / "run" / "exp1.log").exists()
    proc = cli("hydra/job_logging=stdout", "hydra.run.dir=other", "trainer.max_epochs=1", *FAST)
    assert proc.returncode == 0 and "Finished (completed)" in proc.stdout, proc.stderr[-2000:]
    assert not (tmp_path / "other" / "train.log").exists()


def test_a_time_stamp_in_the_config_is_not_a_change_on_a_rerun(cli, tmp_path):
    """+tag=${now:...} resolves anew in each command: a rerun of the same command was warned "Not applied, as the
    run is over: tag: '22-05-25' -> '22-05-33'" (and in a key that defines the run, refused as another config); a key
    that reads it (+name=run-${tag}) is as new."""
    args = ["hydra.run.dir=run", "trainer.max_epochs=1", "+tag=${now:%H-%M-%S-%f}", "+name=run-${tag}", *FAST]
    first = cli(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    again = cli(*args)
    out = again.stdout + again.stderr
    assert again.returncode == 0 and "This run already finished (completed)" in out and "Not applied" not in out, out[-2000:]


def _files_holding(root: Path, secret: str) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes())


def test_a_value_read_from_the_environment_is_written_nowhere(cli, tmp_path):
    """+api_key=${oc.env:MY_TOKEN} was recorded resolved in run.json (0644): every record keeps it as written, in one
    process, in trainer.devices=2's workers and in a sweep's jobs; a rerun under another value of the variable is the
    same config."""
    secret = "some-unique-secret-4f9c2e"
    token = ["+api_key=${oc.env:MY_TOKEN}", "trainer.max_epochs=1", *FAST]
    for args in (["hydra.run.dir=run"], ["hydra.run.dir=ddp", "trainer.devices=2"],
                 ["-m", "hydra/launcher=local", "hydra.sweep.dir=sweep", "seed=0,1"]):
        proc = cli(*args, *token, env={"MY_TOKEN": secret})
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
        assert secret not in proc.stdout + proc.stderr
    assert read_run(tmp_path / "run")["config"]["api_key"] == "${oc.env:MY_TOKEN}"
    assert _files_holding(tmp_path, secret) == []
    again = cli("hydra.run.dir=run", *token, "trainer.max_epochs=2", env={"MY_TOKEN": "another-" + secret})
    out = again.stdout + again.stderr
    assert again.returncode == 0 and "continuing with: trainer.max_epochs: 1 -> 2\n" in out, out[-2000:]
    assert _files_holding(tmp_path, secret) == []


def test_a_nan_in_the_config_is_the_same_value_on_a_rerun(cli, tmp_path):
    """NaN is not equal to itself: the same command again, with a NaN in a key that defines the run (a model's option)
    or in a hook's, was refused as "another config (model.scale: nan -> nan)" or warned as a change."""
    (tmp_path / "nanmodel.py").write_text(
        "from launcher.hooks import HookBase\nfrom launcher.models import MLP\n\n\n"
        "class Net(MLP):\n    def __init__(self, scale=1.0, **kwargs):\n        super().__init__(**kwargs)\n\n\n"
        "class Keep(HookBase):\n    def __init__(self, value=0.0, priority=None):\n        super().__init__(priority)\n")
    args = ["hydra.run.dir=run", "model._target_=nanmodel.Net", "+model.scale=nan", "+hooks.keep._target_=nanmodel.Keep",
            "+hooks.keep.value=[1.0,nan]", *FAST]
    first = cli(*args, "trainer.max_epochs=1")
    assert first.returncode == 0, (first.stdout + first.stderr)[-2000:]
    for more, said in (("trainer.max_epochs=1", "This run already finished (completed)"),  # its rerun
                       ("trainer.max_epochs=2", "continuing with: trainer.max_epochs: 1 -> 2\n")):  # trained on
        again = cli(*args, more)
        out = again.stdout + again.stderr
        assert again.returncode == 0 and said in out, out[-2000:]
        assert "model.scale" not in out and "hooks.keep" not in out and "nan ->" not in out, out[-2000:]


def test_a_run_refused_for_a_config_file_edited_since_is_told_the_values_that_resume_it(cli, tmp_path):
    """It said "Rerun with that run's overrides (.hydra/overrides.yaml there)", which were this command's own: the
    value had changed in a config file, and following the advice was refused again."""
    experiment = tmp_path / "conf" / "experiment" / "pinned.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\nseed: 3\noptimizer:\n  lr: 0.05\n  dampening: 0.0\n"
                          "data:\n  train:\n    num_classes: 10\nmodel:\n  num_classes: ${..data.train.num_classes}\n")
    args = ["--config-dir", str(tmp_path / "conf"), "hydra.run.dir=run", "+experiment=pinned", "trainer.max_epochs=1", *FAST]
    assert cli(*args).returncode == 0
    experiment.write_text("# @package _global_\nseed: 4\noptimizer:\n  lr: 0.1\ndata:\n  train:\n    num_classes: 5\n"
                          "model:\n  num_classes: ${..data.train.num_classes}\n")
    proc = cli(*args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "(data.seed: 3 -> 4, data.train.num_classes: 10 -> 5, model.num_classes: 10 -> 5, " \
        "optimizer.dampening: 0.0 -> (absent), optimizer.lr: 0.05 -> 0.1, seed: 3 -> 4)" in out, out[-2000:]
    # data.seed follows seed (${seed}), model.num_classes data.train's (${..data.train.num_classes}); the key the
    # file no longer sets is added back with +
    assert "To resume it, give that run's values back (data.train.num_classes=10 +optimizer.dampening=0.0 " \
           "optimizer.lr=0.05 seed=3 on the command line, or the config file that set them as it was; its overrides " \
           "are in run.json's \"overrides\" there)" in out, out[-2000:]  # (.hydra/, which a copy may leave out, had them too)
    proc = cli(*args, "data.train.num_classes=10", "+optimizer.dampening=0.0", "optimizer.lr=0.05", "seed=3")
    assert proc.returncode == 0 and "This run already finished (completed)" in proc.stdout, proc.stderr[-2000:]
