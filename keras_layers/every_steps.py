"""A Keras callback that acts every N training steps, counted as the steps
end (with steps_per_execution, at the end of the execution that reaches
N), also under ParameterServerStrategy: versions exported while training
(export_versions.py) and `het-tf train`'s checkpoints."""
import tf_keras


class EveryStepsCallback(tf_keras.callbacks.Callback):
    """Calls `self.act()` each time `every_steps` steps (None: never) have
    ended since the last time it acted."""

    def __init__(self, every_steps):
        super().__init__()
        # Its batch hook takes ParameterServerStrategy's remote logs: it reads none.
        self._supports_tf_logs = True
        self.every_steps = None if every_steps is None else int(every_steps)
        self._steps = self._epoch_start = self._last = 0

    @property
    def up_to_date(self):
        """True when the last step trained was acted on."""
        return self._steps == self._last

    def on_train_begin(self, logs=None):
        self._steps = self._epoch_start = self._last = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self._steps

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution a call ends several steps: `batch` is
        # the last one's index in the epoch.
        self._steps = self._epoch_start + batch + 1
        if self.every_steps and self._steps - self._last >= self.every_steps:
            self.act()

    def acted(self):
        """Records that the steps so far were acted on."""
        self._last = self._steps

    def act(self):
        raise NotImplementedError
