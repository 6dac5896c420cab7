"""A hook for the start-up benchmark: writes the wall-clock time of the first finished step to a file."""
import time

from launcher.hooks import HookBase


class FirstStepMark(HookBase):
    def __init__(self, path: str, priority=None):
        super().__init__(priority)
        self.path = path
        self.done = False

    def after_step(self) -> None:
        if not self.done:
            with open(self.path, "w") as f:
                f.write(repr(time.time()))
            self.done = True
