"""Shared fixtures: the real CLI in a subprocess, and tiny fakes for in-process trainer tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parent.parent

# The end-to-end modules: real subprocesses of the CLI, kills, DDP workers, sweeps, SLURM, benchmarks. Their tests
# are the slow tier (``pytest -m slow``) except those marked ``smoke``, which the fast tier (plain ``pytest``) runs:
# a handful of CLI runs through the main paths.
SLOW_MODULES = {"test_benchmarks", "test_cli", "test_ddp", "test_extend", "test_forkserver", "test_resume", "test_slurm",
                "test_sweeps"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rpartition(".")[2] in SLOW_MODULES and item.get_closest_marker("smoke") is None:
            item.add_marker(pytest.mark.slow)
FAST = ["data=synthetic", "data.train.size=320", "data.batch_size=32"]


def run_cli(args: List[str], cwd: Path, timeout: float = 300, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """``python -m launcher <args>`` in ``cwd``, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None) if not env or "HYDRA_FULL_ERROR" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def run_dirs(root: Path) -> List[Path]:
    """Every run dir (a dir holding run.json) under ``root``."""
    return sorted(p.parent for p in root.rglob("run.json"))


def read_run(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, **kw) -> subprocess.CompletedProcess:
        return run_cli(list(args), tmp_path, **kw)

    return _run


class ToyData:
    """``data`` for in-process trainers: ``n`` samples in batches of ``batch``, no shuffling."""

    def __init__(self, n: int = 16, batch: int = 4, features: int = 4, val: bool = True):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.batch, self.val = batch, val

    def train_loader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=self.batch)

    def val_loader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=self.batch) if self.val else None


class ToyModel(nn.Module):
    """Follows the model contract: a loss in train mode, metrics in eval mode."""

    def __init__(self, features: int = 4):
        super().__init__()
        self.lin = nn.Linear(features, 2)

    def forward(self, batch):
        x, y = batch
        loss = nn.functional.cross_entropy(self.lin(x), y)
        return loss if self.training else {"loss": loss, "accuracy": (self.lin(x).argmax(1) == y).float().mean()}


def make_trainer(kind: str = "epoch", hooks=None, model=None, data=None, work_dir=".", **kw):
    from launcher.engine.trainer import EpochTrainer, IterTrainer

    model = model or ToyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = data or ToyData()
    if kind == "epoch":
        return EpochTrainer(model, opt, data, hooks=hooks, device="cpu", work_dir=work_dir, max_epochs=kw.pop("max_epochs", 2), **kw)
    return IterTrainer(model, opt, data, hooks=hooks, device="cpu", work_dir=work_dir, max_iters=kw.pop("max_iters", 6), **kw)
