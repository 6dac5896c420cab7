"""Graceful stop: SIGTERM, SIGINT and SIGUSR2 end a run at the next step boundary, with a checkpoint.

The handler only sets the trainer's stop flag; once the hooks have written the checkpoint, the handler installed
before ours (submitit's, which requeues the job) is called. A second Ctrl-C aborts at once while the run trains.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

logger = logging.getLogger("launcher")

EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: stopped on a signal with a checkpoint; rerun the same command to resume

SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGUSR2", None)) if s is not None)


@contextlib.contextmanager
def handlers(handler: Callable[[int, Optional[FrameType]], Any], signals: Iterable[int]) -> Iterator[Dict[int, Any]]:
    """``handler`` for ``signals`` while the block runs (main thread only); yields the previous handlers."""
    previous: Dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield previous
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def process_stat(pid: Union[int, str]) -> Optional[List[str]]:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None (no such process, or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def suspend_along(processes: Callable[[], Iterable[int]]) -> Callable[[int, Optional[FrameType]], None]:
    """A Ctrl-Z handler for a process whose children have process groups of their own: it stops ``processes()``
    and this process, and continues them when this process is continued."""
    def suspend(signum: int, frame: Optional[FrameType]) -> None:
        stopped = []
        for pid in processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
        finally:
            signal.signal(signal.SIGTSTP, suspend)
            for pid in stopped:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)

    return suspend


class SignalLatch:
    """Holds a SIGTERM or SIGUSR2 received before training starts, for :class:`GracefulStop` to act on: the run
    stops at its first step, with a checkpoint. A Ctrl-C still aborts at once.

    On exit it puts back the handlers it replaced and passes on to them a signal that no GracefulStop took.
    A latch installed over another takes what that one holds.
    """

    SIGNALS = tuple(s for s in SIGNALS if s != signal.SIGINT)

    def __init__(self, say: bool = True) -> None:
        self.received: Optional[int] = None  # held, not yet taken by a GracefulStop
        self.previous: Dict[int, Any] = {}
        self.before_training = True  # says so when it holds a signal (GracefulStop clears it: training began)
        self.say = say  # False in the DDP workers but rank 0: the run says it once

    def install(self) -> "SignalLatch":
        """Hold the signals from now on (main thread only); the handlers it replaces are kept for chaining."""
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self) for sig in self.SIGNALS}
            for old in self.previous.values():
                if isinstance(old, SignalLatch) and self.received is None:
                    self.received, old.received = old.received, None
        return self

    def __call__(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.received is None:
            self.received = signum
            if self.before_training and self.say:  # a slow start-up would seem to ignore it
                os.write(2, f"{signal.Signals(signum).name} received while the run starts: it stops at its first step, "
                            f"with a checkpoint (Ctrl-C or SIGKILL ends it at once)\n".encode())

    def __enter__(self) -> "SignalLatch":
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self.previous.items():
            signal.signal(sig, old)
        held, self.received = self.received, None
        if held is not None and self.previous:
            os.kill(os.getpid(), held)  # to the handler it would have reached without this latch

    def ignore_from_now(self) -> None:
        """Drop a signal held, and leave the signals ignored when the latch exits (a job whose result is in)."""
        self.received = None
        self.previous = {sig: signal.SIG_IGN for sig in self.previous}

    def take(self, sig: int) -> bool:
        """Whether this latch (or one under it) holds ``sig``; it no longer does, and training has begun."""
        latch: Any = self
        taken = False
        while isinstance(latch, SignalLatch):
            latch.before_training = False
            if latch.received == sig:
                latch.received, taken = None, True
            latch = latch.previous.get(sig)
        return taken

    @staticmethod
    def unlatched(handler: Any, sig: int) -> Any:
        """``handler``, or the first handler under the latches it is made of, for ``sig``."""
        while isinstance(handler, SignalLatch):
            handler = handler.previous.get(sig)
        return handler


class GracefulStop:
    """The handlers around ``trainer.train()``; a signal a replaced :class:`SignalLatch` held stops the run at once."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.received: Optional[int] = None
        self.trained = False  # train() has returned: a second Ctrl-C no longer aborts
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "GracefulStop":
        self._installed = handlers(self._handle, SIGNALS)
        self._previous = dict(self._installed.__enter__())
        for sig, previous in list(self._previous.items()):
            if isinstance(previous, SignalLatch):
                self._previous[sig] = SignalLatch.unlatched(previous, sig)  # chain to what the latch replaced
                if previous.take(sig):
                    self._handle(sig, None)
        return self

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.received is not None and signum == signal.SIGINT and not self.trained:
            raise KeyboardInterrupt  # second Ctrl-C: stop now, without a checkpoint
        if self.received is None:
            self.received = signum
        self.trainer.request_stop(f"received {signal.Signals(signum).name}", interrupt=True)

    def __exit__(self, *exc: Any) -> None:
        self._installed.__exit__(*exc)

    @property
    def name(self) -> Optional[str]:
        return signal.Signals(self.received).name if self.received is not None else None

    def chain(self) -> None:
        """Call the handler that was installed before ours for the signal received, if it was a function."""
        previous = self._previous.get(self.received) if self.received is not None else None
        if callable(previous) and previous is not signal.default_int_handler:
            chain_to(previous, self.received)


def chain_to(previous: Callable[[int, Any], Any], signum: int) -> None:
    """Hand a stop signal on to the handler installed before ours (submitit's requeues the SLURM job). Where submitit
    declines (``UncompletedJobError``) the run stays interrupted with its checkpoint: say so and return."""
    try:
        previous(signum, None)
    except Exception as err:
        if type(err).__name__ != "UncompletedJobError":
            raise
        logger.warning(
            "SLURM job not requeued (submitit: %s); the run stopped interrupted, with its checkpoint: rerun the sweep to "
            "resume it (hydra.launcher.max_num_timeout: docs/sweeps.md)",
            str(err).replace("Job not requeued because: ", "").rstrip("."))


def pass_on_late(signum: int, status: str) -> None:
    """A signal that came as the run ended, once its end is recorded (``status``): passed on to this process's own
    handler if it has one; otherwise the run ends as it finished."""
    passed = callable(SignalLatch.unlatched(signal.getsignal(signum), signum))  # a latch passes it on to what is under it
    logger.warning("%s came as the run ended: it is recorded %s%s", signal.Signals(signum).name, status,
                   ", and the signal is passed on" if passed else "")
    if passed:
        os.kill(os.getpid(), signum)
