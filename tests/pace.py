"""A hook for tests: sleeps after each step so a test can interrupt a run at chosen moments."""
import time

from hooks import HookBase


class Pace(HookBase):
    def __init__(self, seconds: float = 0.01, priority=None):
        super().__init__(priority)
        self.seconds = seconds

    def after_step(self):
        time.sleep(self.seconds)
