"""TextTrainer: the launcher's EpochTrainer, with only the building of its loaders changed."""
from functools import partial

from launcher.engine.trainer import EpochTrainer
from text_project.data import pad_batch


class TextTrainer(EpochTrainer):
    def __init__(self, *args, pad_id: int = 0, **kwargs):
        self.pad_id = pad_id  # set before super().__init__, which builds the loaders
        super().__init__(*args, **kwargs)

    def build_train_loader(self):
        return self.data.train_loader(collate_fn=partial(pad_batch, pad_id=self.pad_id), **self.data_shard())

    def build_val_loader(self):
        return self.data.val_loader(collate_fn=partial(pad_batch, pad_id=self.pad_id), **self.data_shard())
