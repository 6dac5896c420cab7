"""A user hook: how many tokens per second the run trains on."""
import time

from launcher.hooks import HookBase, Priority


class TokenThroughput(HookBase):
    priority = Priority.LOW  # after the trainer's own timing, before the writers (80) write it

    def __init__(self, pad_id: int = 0, priority=None):
        super().__init__(priority)
        self.pad_id = pad_id
        self.total_tokens = 0  # checkpointed: survives a resume

    def before_step(self):
        self._start = time.perf_counter()

    def after_step(self):
        tokens = int((self.trainer.batch["tokens"] != self.pad_id).sum())  # the batch this step trained on
        self.total_tokens += tokens
        self.trainer.storage.put_scalar("tokens_per_sec", tokens / (time.perf_counter() - self._start))

    def state_dict(self):
        return {"total_tokens": self.total_tokens}

    def load_state_dict(self, state):
        self.total_tokens = state["total_tokens"]
