"""A user's own project (examples/text_project, copied outside the repo) runs on the launcher unedited."""
from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from pathlib import Path

import pytest

from launcher.engine.hook import HookBase
from conftest import FAST, REPO, read_run, run_cli, run_dirs

EXAMPLE = REPO / "examples" / "text_project"
SHORT = ["trainer.max_epochs=2", "data.train.size=400", "data.val.size=100"]


@pytest.fixture
def project(tmp_path):
    dest = tmp_path / "text_project"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    return dest


def test_user_configs_models_data_hooks_and_trainer_subclass_from_their_own_directory(project):
    proc = run_cli(["--config-dir", "conf", "model=bag_of_tokens", "data=parity", "trainer=text", "hooks=[default,tokens]",
                    "optimizer=adamw", *SHORT], project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(project / "outputs")
    cfg = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "text_project.trainer.TextTrainer" in cfg and "text_project.hooks.TokenThroughput" in cfg
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("tokens_per_sec" in r for r in rows)  # their hook's metric, written by our writers
    assert any("train/loss_cls" in r and "train/loss_l2" in r and "train/total_loss" in r for r in rows)  # loss dict
    assert read_run(run_dir)["status"] == "completed"
    import torch

    final = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    assert final["hooks"]["tokens"]["total_tokens"] > 0  # their hook's state is checkpointed


def test_experiment_bundle_and_searchpath_from_the_users_project(project):
    proc = run_cli([f"hydra.searchpath=[file://{project / 'conf'}]", "+experiment=parity", *SHORT], project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(project / "outputs")
    assert read_run(run_dir)["metrics"]["val/accuracy"] > 0.5


def test_a_misspelt_option_of_the_users_own_group_names_their_options_by_searchpath_too(project):
    """Options from a config dir added with hydra.searchpath (or compose's config_dir) were left out of the list:
    "model: there is no option 'bag_of_tokenz'. Available: cnn, mlp", as if the dir had not been found."""
    import launcher
    from launcher.engine.errors import ConfigError

    want = "there is no option 'bag_of_tokenz'; did you mean 'bag_of_tokens'? Available: bag_of_tokens, cnn, mlp"
    for flags, model in (([], "model=bag_of_tokenz"), (["-m"], "model=bag_of_tokenz,mlp")):
        proc = run_cli([*flags, f"hydra.searchpath=[file://{project / 'conf'}]", model], project)
        assert proc.returncode == 2 and want in proc.stderr, proc.stderr[-3000:]
    with pytest.raises(ConfigError, match=re.escape(f"model: {want}")):
        launcher.compose(["model=bag_of_tokenz"], config_dir=str(project / "conf"))
    with pytest.raises(ConfigError, match=re.escape("experiment: there is no option 'parityy'; did you mean 'parity'?")):
        launcher.compose(["+experiment=parityy"], config_dir=str(project / "conf"))


def test_a_misspelt_option_in_an_experiment_files_defaults_list_names_the_file(project):
    """Hydra's error for an experiment's ``override /model: bag_of_tokenz`` names only the primary config: the
    message named the option and not where it was set, though the command line never mentions it."""
    import launcher
    from launcher.engine.errors import ConfigError

    experiment = project / "conf" / "experiment" / "parity.yaml"
    experiment.write_text(experiment.read_text().replace("override /model: bag_of_tokens", "override /model: bag_of_tokenz"))
    want = (f"model: there is no option 'bag_of_tokenz' (in {experiment}'s defaults list); did you mean 'bag_of_tokens'? "
            f"Available: bag_of_tokens, cnn, mlp")
    proc = run_cli([f"hydra.searchpath=[file://{project / 'conf'}]", "+experiment=parity", *SHORT], project)
    assert proc.returncode == 2 and want in proc.stderr, proc.stderr[-3000:]
    with pytest.raises(ConfigError, match=re.escape(want)):
        launcher.compose(["+experiment=parity"], config_dir=str(project / "conf"))
    proc = run_cli([f"hydra.searchpath=[file://{project / 'conf'}]", "+experiment=parity", "model=bag_of_tokenz"], project)
    assert proc.returncode == 2 and "there is no option 'bag_of_tokenz'; did you mean" in proc.stderr, proc.stderr[-3000:]


def test_built_in_experiment_bundle(tmp_path):
    proc = run_cli(["+experiment=digits_cnn", "trainer.max_epochs=1", "hooks=minimal"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path / "outputs")
    cfg = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "launcher.models.CNN" in cfg and "torch.optim.AdamW" in cfg


def test_python_api_compose_and_run_without_argv(project, monkeypatch):
    import launcher

    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    cfg = launcher.compose(["+experiment=parity", *SHORT, "hooks=minimal"], config_dir=str(project / "conf"))
    assert cfg.trainer._target_ == "text_project.trainer.TextTrainer"
    result = launcher.run(cfg, project / "api_run")
    assert result.status == "completed" and result.run_dir == project / "api_run"
    assert result.metrics["train/loss_cls"] > 0 and isinstance(result.objective, float)


def test_compose_refuses_hydras_own_settings_which_would_have_no_effect():
    import launcher
    from launcher.engine.errors import ConfigError

    for override in ("hydra.run.dir=/tmp/elsewhere", "hydra/launcher=local", "+hydra.job.chdir=true"):
        with pytest.raises(ConfigError, match=r"compose\(\) returns the run's config without Hydra's own settings.*"
                                              r"launcher.run\(cfg, run_dir=\.\.\.\)") as err:
            launcher.compose([override, "data=synthetic"])
        assert str(err.value).startswith(override)
    assert launcher.compose(["hydra.searchpath=[]", "data=synthetic"]).data.train._target_.endswith("synthetic")


class Gate(HookBase):
    """Holds its run before training until released (test_a_second_python_api_run_...)."""
    started, release = threading.Event(), threading.Event()

    def before_train(self):
        Gate.started.set()
        Gate.release.wait(120)


def test_a_second_python_api_run_while_one_trains_in_another_thread_is_refused(tmp_path):
    """Two runs side by side in threads drew from torch's one random state (a seeded run did not repeat) and logged
    into each other's train.log: the second is refused, naming why, before it makes its dir; one at a time run."""
    import launcher

    quick = ["hooks=minimal", "data=synthetic", "data.train.size=256", "trainer.max_epochs=1"]
    results = []
    first = threading.Thread(target=lambda: results.append(launcher.run(launcher.compose(
        [*quick, "+hooks.gate._target_=test_extend.Gate"]), tmp_path / "a")))
    first.start()
    try:
        assert Gate.started.wait(120)
        with pytest.raises(RuntimeError, match=r"^launcher.run: another run is training in this process now \(in another "
                                               r"thread\); torch's random state"):
            launcher.run(launcher.compose(quick), tmp_path / "b")
        assert not (tmp_path / "b").exists()
    finally:
        Gate.release.set()
        first.join(120)
    assert results[0].status == "completed"
    assert launcher.run(launcher.compose(quick), tmp_path / "b").status == "completed"


def test_a_ctrl_c_to_a_python_api_run_stops_it_with_a_checkpoint_then_raises_and_its_dir_resumes(tmp_path, monkeypatch):
    """A Ctrl-C stopped the run and run() returned 'interrupted': a notebook cell or a loop of runs went on to the
    next. Now it raises KeyboardInterrupt once the checkpoint is on disk, naming the absolute dir that resumes it."""
    import launcher
    from launcher.engine.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    cfg = launcher.compose(["hooks=default", "data=synthetic", "data.train.size=320", "data.batch_size=32", "trainer=iter",
                            "trainer.max_iters=30", "+hooks.sig._target_=test_hooks.SignalAt", "+hooks.sig.at=9",
                            "+hooks.sig.sig=SIGINT"])
    with pytest.raises(ConfigError, match=r"seed=\$\{nope\}"):  # refused before a run dir is made for it
        launcher.run(launcher.compose(["data=synthetic", "seed=${nope}"]))
    assert not (tmp_path / "outputs").exists()
    with pytest.raises(KeyboardInterrupt) as stopped:
        launcher.run(cfg)
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert str(stopped.value) == f"the run stopped with a checkpoint in {run_dir}: launcher.run(cfg, '{run_dir}') resumes it"
    record = read_run(run_dir)
    assert record["status"] == "interrupted" and record["iter"] == 10 and record["stop_reason"] == "received SIGINT"
    again = launcher.run(cfg, run_dir)
    assert again.status == "completed" and again.stop_reason is None and read_run(run_dir)["iter"] == 30
    bare = launcher.compose(["hooks=none", "data=synthetic", "data.train.size=320", "trainer=iter", "trainer.max_iters=30",
                             "+hooks.sig._target_=test_hooks.SignalAt", "+hooks.sig.at=9", "+hooks.sig.sig=SIGINT"])
    with pytest.raises(KeyboardInterrupt, match=r"stopped without a checkpoint \(no checkpointer hook\): a rerun starts over"):
        launcher.run(bare, tmp_path / "bare")
    assert read_run(tmp_path / "bare")["status"] == "interrupted"


def test_python_api_runs_started_at_once_get_their_own_default_run_dirs(tmp_path, monkeypatch):
    import threading

    import launcher

    monkeypatch.chdir(tmp_path)
    made = []
    threads = [threading.Thread(target=lambda: made.append(launcher.runs.run.new_run_dir())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 8 and all(p.is_dir() and not any(p.iterdir()) for p in made)
    cfg = launcher.compose(["hooks=minimal", "data=synthetic", "data.train.size=256", "trainer.max_epochs=1"])
    handlers = list(logging.getLogger("launcher").handlers)
    first, second = launcher.run(cfg), launcher.run(cfg, overrides=["hooks=minimal"])
    assert first.run_dir != second.run_dir and first.run_dir.parent.parent == (tmp_path / "outputs").resolve()  # absolute
    assert read_run(second.run_dir)["attempt"] == 1 and second.status == "completed"
    # the run dir as the CLI leaves it: train.log and .hydra/, and the process's logging as it was
    log = (second.run_dir / "train.log").read_text()
    assert "Training EpochTrainer" in log and "Finished (completed)" in log
    assert str(second.run_dir) not in (first.run_dir / "train.log").read_text()  # each run's log holds its own run
    assert "max_epochs: 1" in (second.run_dir / ".hydra" / "config.yaml").read_text()
    assert (second.run_dir / ".hydra" / "overrides.yaml").read_text() == "- hooks=minimal\n"
    assert logging.getLogger("launcher").handlers == handlers and logging.getLogger("launcher").level == logging.NOTSET


@pytest.mark.parametrize("devices", [1, 2])
def test_python_api_warnings_reach_stderr_when_logging_is_left_unconfigured(tmp_path, devices):
    """Python prints warnings of an unconfigured program on stderr; the run's train.log must not swallow them.
    Under DDP the workers' consoles printed every INFO line, where one process prints none."""
    import subprocess
    import sys

    script = ("import launcher; launcher.run(launcher.compose(['hooks=minimal', 'data=synthetic', 'data.train.size=256', "
              f"'trainer.max_epochs=1', 'trainer.devices={devices}']), 'run')")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "objective 'val/accuracy' will not be recorded" in proc.stderr  # a warning
    assert proc.stderr.count("objective 'val/accuracy'") == 1, proc.stderr  # once: not again, in other words, at the end
    assert "Training EpochTrainer" not in proc.stderr  # INFO stays in train.log, as logging's defaults have it
    assert "objective 'val/accuracy' will not be recorded" in (tmp_path / "run" / "train.log").read_text()


def test_help_lists_groups_options_and_examples(tmp_path):
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0
    for text in ("model: cnn, mlp", "trainer: epoch, iter", "experiment: digits_cnn", "== Examples ==", "--config-dir",
                 "'hooks=[default,ema]' adds ema to the default\nhooks, while hooks=ema runs ema alone"):
        assert text in proc.stdout


def test_user_errors_name_module_class_and_keys(project):
    cases = [
        (["model._target_=text_project.model.BagOfTokenz"], "did you mean 'text_project.model.BagOfTokens'"),
        (["+model.widht=3"], "text_project.model.BagOfTokens rejected the config: BagOfTokens.__init__() got an unexpected keyword argument 'widht' (leave it out: drop +model.widht=3); text_project.model.BagOfTokens accepts: vocab, hidden, pad_id"),
        (["+hooks.bad._target_=text_project.data.ParitySentences"], "hooks.bad._target_: text_project.data.ParitySentences built a ParitySentences, which is not a launcher.hooks.HookBase"),
    ]
    for overrides, message in cases:
        proc = run_cli(["--config-dir", "conf", "+experiment=parity", *SHORT, *overrides], project)
        assert proc.returncode == 2 and message in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_model_that_is_no_module_or_has_nothing_to_train_is_named_and_a_model_without_the_objective_is_told_how(tmp_path):
    """A model class that is not an nn.Module failed with a traceback (AttributeError: no 'parameters'), and one
    without parameters as the optimizer's error ("optimizer got an empty parameter list"); a model that returns
    no val/accuracy left the user to find out from the docs what eval mode's forward returns."""
    (tmp_path / "mymodel.py").write_text(
        "import torch\n"
        "class NotModule:\n    def __init__(self, **kw):\n        pass\n"
        "class NoParams(torch.nn.Module):\n    def __init__(self, **kw):\n        super().__init__()\n"
        "class LossOnly(torch.nn.Module):\n"
        "    def __init__(self, in_features, num_classes, **kw):\n"
        "        super().__init__()\n        self.net = torch.nn.Linear(in_features, num_classes)\n"
        "    def forward(self, batch):\n        x, y = batch\n"
        "        return torch.nn.functional.cross_entropy(self.net(x.flatten(1)), y)\n")
    for target, says in (("NotModule", "model._target_: mymodel.NotModule built a NotModule, which is not a torch.nn.Module"),
                         ("NoParams", "model._target_: mymodel.NoParams built a NoParams with no parameters: nothing to train")):
        proc = run_cli([f"model._target_=mymodel.{target}", *FAST, "trainer.max_epochs=1"], tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and says in out and "Traceback" not in out and "optimizer" not in out, out[-2000:]
    proc = run_cli(["model._target_=mymodel.LossOnly", *FAST, "trainer.max_epochs=1"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Config error: objective: 'val/accuracy' is not a validation metric (validation " \
        "records: val/loss); in eval mode the model's forward returns the metrics, recorded as val/<name> (a dict such " \
        "as {'loss': ..., 'accuracy': ...}), or name one recorded, e.g. objective=val/loss objective_mode=min" in out, out[-2000:]


def test_a_bug_in_a_users_constructor_is_shown_where_it_is_not_blamed_on_the_config(project):
    # A wrong keyword to a call inside the user's __init__ is their code's TypeError, not arguments the config
    # gave that the class rejects; a KeyError there names the line too; the traceback goes to train.log.
    (project / "text_project" / "buggy.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self, vocab: int = 8, hidden: int = 4, pad_id: int = 0):\n"
        "        super().__init__()\n        self.lin = torch.nn.Linear(vocab, hidden, bias_init=0.0)\n\n\n"
        "class Keyed(torch.nn.Module):\n    def __init__(self, vocab: int = 8, hidden: int = 4, pad_id: int = 0):\n"
        "        super().__init__()\n        self.sizes = {}[\"oops\"]\n")
    for target, error, line in (("Net", "TypeError: Linear.__init__() got an unexpected keyword argument 'bias_init'", 7),
                                ("Keyed", "KeyError: 'oops'", 13)):
        run_dir = project / "runs" / target
        proc = run_cli(["--config-dir", "conf", "+experiment=parity", *SHORT, f"model._target_=text_project.buggy.{target}",
                        f"hydra.run.dir={run_dir}"], project)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and f"model (text_project.buggy.{target}): {error}" in out, out[-2000:]
        assert f"raised at {Path('text_project', 'buggy.py')}:{line} in __init__" in out and "rejected the config" not in out
        assert f'buggy.py", line {line}, in __init__' in (run_dir / "train.log").read_text()
    # behind a decorator the TypeError comes from its wrapper's call, but a missing argument is still the config's
    (project / "text_project" / "decorated.py").write_text(
        "import functools\n\nimport torch\n\n\ndef logged(fn):\n    @functools.wraps(fn)\n"
        "    def wrapper(*args, **kwargs):\n        return fn(*args, **kwargs)\n    return wrapper\n\n\n@logged\n"
        "def make(vocab: int, width: int, hidden: int = 4, pad_id: int = 0):\n    return torch.nn.Linear(vocab, width)\n")
    proc = run_cli(["--config-dir", "conf", "+experiment=parity", *SHORT, "model._target_=text_project.decorated.make"], project)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "text_project.decorated.make rejected the config: make() missing 1 required " \
        "positional argument: 'width'" in out and "raised at" not in out, out[-2000:]


def test_a_list_of_the_wrong_length_is_refused_where_the_annotation_is_text(tmp_path):
    """A fixed-length tuple parameter of a model whose module says ``from __future__ import annotations`` (its
    annotations kept as text) took a list of any length: refused only where the annotation was a real type."""
    (tmp_path / "textnotes.py").write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nimport torch\n"
        "if TYPE_CHECKING:\n    from collections.abc import Sequence\n\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self, sizes: tuple[int, int] = (64, 10), flag: bool = True, **unused):\n"
        "        super().__init__()\n        self.lin = torch.nn.Linear(*sizes)\n\n\n"
        "class Later(Net):\n    def __init__(self, names: Sequence[str] = (), sizes: tuple[int, int] = (64, 10), flag: bool = True, "
        "**unused):\n        super().__init__(sizes)\n")
    for target, words in [("Net", "Config error: model.sizes: [64, 10, 3] has 3 value(s); textnotes.Net takes 2 there, e.g. [64, 10]"),
                          ("Later", "Config error: model.flag: 'maybe' is not true or false")]:  # a name it cannot read: as before
        proc = run_cli([f"model._target_=textnotes.{target}", "+model.sizes=[64,10,3]", "+model.flag=maybe",
                        "data=synthetic", "data.train.size=256", "trainer.max_epochs=1"], tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and words in out and "Traceback" not in out, out[-3000:]


def test_trainer_subclass_selected_with_one_override(project):
    proc = run_cli(["--config-dir", "conf", "model=bag_of_tokens", "data=parity", "hooks=minimal",
                    "trainer._target_=text_project.trainer.TextTrainer", *SHORT], project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(project / "outputs")
    assert read_run(run_dir)["status"] == "completed"
    assert "Training TextTrainer" in (run_dir / "train.log").read_text()
