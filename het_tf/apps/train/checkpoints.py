"""`het-tf train --checkpoint-every STEPS`: a checkpoint into
RUN_DIR/checkpoint every STEPS steps while training, and the one after it,
through the mode's save (ps mode: the chief's; hybrid mode: every rank
pushes its updates, rank 0 writes). With --full-every N the tables write
only their changes between full checkpoints (HetEmbedding's
full_checkpoint_every)."""
import time

from het_tf.keras_layers.every_steps import EveryStepsCallback
from het_tf.keras_layers.het_embedding import het_embedding_layers


class PeriodicCheckpoints(EveryStepsCallback):
    def __init__(self, model, manager, mode, every_steps=None):
        super().__init__(every_steps)
        self._model, self.manager, self.mode = model, manager, mode
        # Each save's path (None on hybrid ranks but 0), step, seconds and
        # what each table wrote (het_tf.runtime.checkpoint's last_save).
        self.saved = []

    def act(self):
        self.save()

    def save(self):
        """A checkpoint now; returns its record."""
        started = time.perf_counter()
        path = self.mode.save(self._model, self.manager)
        self.acted()
        self.saved.append({
            "path": path, "step": self._steps, "seconds": time.perf_counter() - started,
            "tables": {layer.name: layer._table_checkpoint.last_save
                       for layer in het_embedding_layers(self._model)
                       if path is not None}})
        return self.saved[-1]
