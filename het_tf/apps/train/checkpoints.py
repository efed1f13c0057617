"""What `het-tf train` saves while it trains. `--checkpoint-every STEPS`: a
checkpoint into RUN_DIR/checkpoint every STEPS steps while training, and
the one after it, through the mode's save (ps mode: the chief's; hybrid
mode: every rank pushes its updates, rank 0 writes). With --full-every N
the tables write only their changes between full checkpoints
(HetEmbedding's full_checkpoint_every). `--export-every STEPS`: versions
into RUN_DIR/export, whose failures do not stop the run."""
import sys
import time

from het_tf.keras_layers.every_steps import EveryStepsCallback
from het_tf.keras_layers.export_versions import ExportVersions
from het_tf.keras_layers.het_embedding import het_embedding_layers


class RunExports(ExportVersions):
    """Versions into the run folder. A version that fails to export is
    said and kept in `failed` ({"step", "error"}), and training goes on: the
    checkpoint and metrics.json, written after it, are worth more than one
    version, and the command then exits 1. The folder itself is checked
    before training starts (session.run)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.failed = []

    def export(self):
        try:
            super().export()
        except Exception as e:  # every rank raises in hybrid mode: all record it
            self.acted()  # tried at this step: the next one is due every_steps on
            self.failed.append({"step": self._steps, "error": f"{type(e).__name__}: {e}"})
            if self.verbose:
                print(f"het-tf train: the export at step {self._steps} to {self.folder} "
                      f"failed ({type(e).__name__}: {e}); training goes on, and the "
                      "checkpoint and metrics.json are written", file=sys.stderr, flush=True)


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
