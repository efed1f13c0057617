"""`het-tf train --checkpoint-every STEPS`: a checkpoint into
RUN_DIR/checkpoint every STEPS steps while training, and the one after it,
through the mode's save (ps mode: the chief's; hybrid mode: every rank
pushes its updates, rank 0 writes). With --full-every N the tables write
only their changes between full checkpoints (HetEmbedding's
full_checkpoint_every)."""
import time

import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers


class PeriodicCheckpoints(tf_keras.callbacks.Callback):
    def __init__(self, model, manager, mode, every_steps=None):
        super().__init__()
        self._supports_tf_logs = True  # batch hooks under ParameterServerStrategy
        self._model, self.manager, self.mode = model, manager, mode
        self.every_steps = every_steps
        self._steps = self._last = self._epoch_start = 0
        # Each save's path (None on hybrid ranks but 0), step, seconds and
        # what each table wrote (het_tf.runtime.checkpoint's last_save).
        self.saved = []

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self._steps

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution a call ends several steps: `batch` is
        # the last one's index in the epoch.
        self._steps = self._epoch_start + batch + 1
        if self.every_steps and self._steps - self._last >= self.every_steps:
            self.save()

    def save(self):
        """A checkpoint now; returns its record."""
        started = time.perf_counter()
        path = self.mode.save(self._model, self.manager)
        self._last = self._steps
        self.saved.append({
            "path": path, "step": self._steps, "seconds": time.perf_counter() - started,
            "tables": {layer.name: layer._table_checkpoint.last_save
                       for layer in het_embedding_layers(self._model)
                       if path is not None}})
        return self.saved[-1]
