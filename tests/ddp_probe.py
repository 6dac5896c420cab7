"""Test hooks for DDP runs: every rank's final weights on disk, and a rank that dies mid-training."""
import os
import signal

import torch

from launcher.hooks import HookBase


class DumpWeights(HookBase):
    """Writes ``weights_rank<N>.pt`` (this rank's model state) into the run dir when training ends."""

    def after_train(self):
        t = self.trainer
        torch.save({k: v.detach().cpu() for k, v in t.model.state_dict().items()}, t.work_dir / f"weights_rank{t.rank}.pt")


class RankValue(HookBase):
    """Puts ``probe/rank`` = rank x (iter + 1) each step, smoothed like a loss: logged rows hold the
    median of its rank averages, and any value one rank kept for its own shows in them."""

    def after_step(self):
        t = self.trainer
        t.storage.put_scalar("probe/rank", float(t.rank * (t.iter + 1)))


class SigtermAfterTheEnd(HookBase):
    """Rank 0 sends SIGTERM (or ``sig``) to the launcher a second after training ended: the launcher passes it on
    to workers that have recorded the run's end and are leaving (as a scheduler's signal at time-out may, or a
    Ctrl-C pressed as the run ends)."""

    priority = 100  # after every other hook, the checkpointer's final save included

    def __init__(self, sig: str = "SIGTERM", seconds: float = 1.0, priority=None):
        super().__init__(priority)
        self.sig, self.seconds = getattr(signal, sig), seconds

    def after_train(self):
        if self.trainer.rank == 0:
            import threading

            threading.Timer(self.seconds, os.kill, (os.getppid(), self.sig)).start()


class KillRank(HookBase):
    """SIGKILLs rank ``rank`` itself after step ``at`` (no Python cleanup runs, as when the OOM killer strikes)."""

    def __init__(self, rank: int = 1, at: int = 5, priority=None):
        super().__init__(priority)
        self.rank, self.at = rank, at

    def after_step(self):
        if self.trainer.rank == self.rank and self.trainer.iter == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


from launcher.models import MLP  # noqa: E402


class NanOnRank(MLP):
    """The built-in MLP, whose training loss is NaN once, at its ``at``-th step, on rank ``bad_rank`` only."""

    def __init__(self, bad_rank: int = 1, at: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.bad_rank, self.at, self.calls = bad_rank, at, 0

    def forward(self, batch):
        out = super().forward(batch)
        if self.training:
            self.calls += 1
            if self.calls == self.at and int(os.environ.get("RANK", 0)) == self.bad_rank:
                return out * float("nan")
        return out


class MetricOnRank0(MLP):
    """The built-in MLP whose eval output adds ``only_rank0`` (7.0, a Python float) on rank 0 only."""

    def forward(self, batch):
        out = super().forward(batch)
        if not self.training and int(os.environ.get("RANK", 0)) == 0:
            out["only_rank0"] = 7.0
        return out


def latch_worker(rank, nprocs, port, parent, ready, out_dir):
    """A worker of launcher.engine.distributed.spawn that only starts, then writes the stop signal it holds (or 0)."""
    import time

    from launcher.engine import distributed
    distributed.worker_started(rank, parent, ready)
    time.sleep(2.0)  # the parent passes on what it held for this worker
    held = signal.getsignal(signal.SIGTERM).received
    with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
        f.write(str(held or 0))
