"""ProgressBar: a tqdm bar with epoch, iteration, ETA and the latest loss, for people at a terminal."""
from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, Callable, List, Optional, TextIO, Tuple

from launcher.engine.hook import HookBase, Priority, is_number


class ProgressBar(HookBase):
    """Redrawn at most ``refresh_per_second`` times a second; off when stdout is no terminal (unless ``force``) and
    on ranks but 0. Log records to the same terminal print above the bar, which is redrawn below them."""

    priority = Priority.LOWER - 1  # counts the step before the console writer logs it: the bar under a line agrees

    def __init__(self, refresh_per_second: float = 4.0, force: bool = False, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if not is_number(refresh_per_second) or not 0 < refresh_per_second < math.inf:
            raise ValueError(f"ProgressBar: refresh_per_second should be a number greater than zero, got "
                             f"{refresh_per_second!r}")
        self.refresh_per_second = refresh_per_second
        self.force = force
        self.bar: Any = None
        self._next_draw = 0.0  # time.monotonic() of the next redraw
        self._rerouted: List[Tuple[logging.StreamHandler, TextIO]] = []  # (handler, its own stream)

    def before_train(self) -> None:
        t = self.trainer
        if getattr(t, "rank", 0) != 0 or not (self.force or sys.stdout.isatty()):
            return
        from tqdm import tqdm  # imported here: only a terminal run needs it

        # drawn when after_step says (tqdm's own throttle would draw before the text is set)
        self.bar = tqdm(total=t.max_iters, initial=t.iter, unit="it", dynamic_ncols=True, mininterval=0, miniters=0,
                        file=sys.stdout)
        self._next_draw = 0.0
        self._rerouted = _route_around(self.bar, sys.stdout, self._describe)

    def after_step(self) -> None:
        bar = self.bar
        if bar is None:
            return
        bar.n += 1  # counted each step, drawn at most refresh_per_second times a second
        now = time.monotonic()
        if now >= self._next_draw or bar.n == bar.total:
            self._next_draw = now + 1.0 / self.refresh_per_second
            self._describe()
            bar.update(0)  # draws, with the rate and ETA over the steps since the last draw

    def after_train(self) -> None:
        if self.bar is None:
            return
        try:
            for handler, stream in self._rerouted:
                if isinstance(handler.stream, _AroundBar):
                    handler.setStream(stream)
        finally:
            self._rerouted = []
            self.bar.close()
            self.bar = None

    def _describe(self) -> None:
        t = self.trainer
        loss = t.storage.history("train/loss").latest() if t.storage.has("train/loss") else float("nan")
        self.bar.set_description(f"epoch {t.epoch_text(t.last_epoch)}", refresh=False)
        self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)


class _AroundBar:
    """A log handler's stream that clears the bar before each record and redraws it after."""

    def __init__(self, stream: TextIO, bar: Any, describe: Callable[[], None]) -> None:
        self.stream, self.bar, self.describe = stream, bar, describe

    def write(self, text: str) -> int:
        with self.bar.get_lock():
            self.bar.clear(nolock=True)
            written = self.stream.write(text)
            self.stream.flush()  # the record on screen before the bar comes back
            self.describe()  # the bar's text may be from its last redraw, steps ago
            self.bar.refresh(nolock=True)
        return written

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _route_around(bar: Any, file: TextIO, describe: Callable[[], None]) -> List[Tuple[logging.StreamHandler, TextIO]]:
    """Give every console log handler writing to the bar's terminal a stream that keeps its records off the bar;
    returns the (handler, stream) pairs to give back."""
    loggers = [logging.getLogger()] + [each for each in logging.Logger.manager.loggerDict.values()
                                       if isinstance(each, logging.Logger)]
    on_terminal = _isatty(file)
    rerouted = []
    for logger in loggers:
        for handler in logger.handlers:
            if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
                continue
            stream = handler.stream
            if isinstance(stream, _AroundBar) or not (stream is file or (on_terminal and _isatty(stream))):
                continue
            handler.setStream(_AroundBar(stream, bar, describe))
            rerouted.append((handler, stream))
    return rerouted


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
