"""A hook for tests: sleeps after each step so a test can interrupt a run at chosen moments, or
signals its own process after a given iteration, so the stop lands exactly there."""
import os
import signal
import time
from typing import Optional

from launcher.hooks import HookBase


class Pace(HookBase):
    def __init__(self, seconds: float = 0.01, signal_after: Optional[int] = None, signal_when_built: bool = False,
                 ctrl_c_when_built: bool = False, signal_at_exit: bool = False, signal_after_train=False,
                 priority=None):
        super().__init__(priority)
        if signal_at_exit:  # SIGTERM and Ctrl-C this process again as Python shuts down (after the run has ended)
            import atexit

            atexit.register(lambda: [os.kill(os.getpid(), sig) for sig in (signal.SIGTERM, signal.SIGINT)])
        if signal_when_built:  # SIGTERM this process while the trainer is being built, before training starts
            os.kill(os.getpid(), signal.SIGTERM)
        if ctrl_c_when_built:  # SIGINT there: an abort
            os.kill(os.getpid(), signal.SIGINT)
        self.seconds = seconds
        self.signal_after = signal_after  # SIGTERM this process after this iteration (once: a resumed run is past it)
        self.signal_after_train = signal_after_train  # SIGTERM this process once training is over (the last step taken)

    def after_train(self):
        if self.signal_after_train == "parent":  # a trainer.devices worker's: the launcher process that spawned it
            if self.trainer.is_main:
                os.kill(os.getppid(), signal.SIGTERM)
                time.sleep(1.0)  # the launcher passes it on to the workers, still in their runs' ends
        elif self.signal_after_train:
            os.kill(os.getpid(), signal.SIGTERM)

    def after_step(self):
        if self.signal_after is not None and self.trainer.iter == self.signal_after:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(self.seconds)


class PreemptAfterTheEnd(HookBase):
    """SIGUSR2 (SLURM's preemption or walltime signal) to this process ``seconds`` after its run completed,
    from another process: it lands while the job returns its result or Python shuts down."""

    def __init__(self, seconds: float = 0.3, priority=None):
        super().__init__(priority)
        self.seconds = seconds

    def after_train(self):
        if self.trainer.status == "completed":
            import subprocess

            subprocess.Popen(["sh", "-c", f"sleep {self.seconds}; kill -USR2 {os.getpid()}"], start_new_session=True)


class EpochTally(HookBase):
    """Puts the number of epochs ended at each epoch's end, after the epoch's validation (a lower priority):
    the value reaches the files at the next periodic write, after that iteration's row. Resumes its count."""

    def __init__(self, priority=70):
        super().__init__(priority)
        self.epochs = 0

    def after_epoch(self):
        self.epochs += 1
        self.trainer.storage.put_scalar("tally/epochs", self.epochs, smoothing_hint=False)

    def state_dict(self):
        return {"epochs": self.epochs}

    def load_state_dict(self, state):
        self.epochs = state["epochs"]


class SaveAtEnd(HookBase):
    """A checkpointer of the user's own (not a PeriodicCheckpointer): ``final.pt`` at the end, through torch.save."""

    def after_train(self):
        if self.trainer.status == "completed" and self.trainer.is_main:
            import torch

            torch.save(self.trainer.state_dict(), self.trainer.checkpoint_dir / "final.pt")


class BreaksAt(HookBase):
    """Raises after step ``at`` (a bug in a hook of one's own): the run fails there."""

    def __init__(self, at: int = 2, priority=None):
        super().__init__(priority)
        self.at = at

    def after_step(self):
        if self.trainer.iter == self.at:
            raise RuntimeError(f"this hook broke at iteration {self.at}")


class CtrlCTwice(HookBase):
    """Ctrl-C twice: SIGINT to this process after iteration ``after``, and again ``gap`` seconds after it (or after
    the run's end, ``from_end``), from a thread: wherever the main thread is by then (the run's checkpoint, its
    record, Python shutting down)."""

    def __init__(self, after: int = 3, gap: float = 0.03, from_end: bool = False, priority=None):
        super().__init__(priority)
        self.after, self.gap, self.from_end = after, gap, from_end

    def _again(self):
        import threading

        threading.Timer(self.gap, os.kill, (os.getpid(), signal.SIGINT)).start()

    def after_step(self):
        if self.trainer.iter == self.after:
            os.kill(os.getpid(), signal.SIGINT)
            if not self.from_end:
                self._again()

    def after_train(self):
        if self.from_end:
            self._again()
class WaitFor(HookBase):
    """Holds the run before its first step until the file ``path`` exists: the test does something meanwhile."""

    def __init__(self, path: str, priority=None):
        super().__init__(priority)
        self.path = path

    def before_train(self):
        while not os.path.exists(self.path):
            time.sleep(0.05)
