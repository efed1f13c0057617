"""Hybrid mode's dense gradients averaged over the Horovod ranks, in float32
or in float16 (half the allreduce's bytes).

In float16 each rank scales its gradients by a loss scale before the cast,
as Keras' dynamic loss scale does: float16 keeps 11 significant bits and
nothing below 6e-8, so small gradients would otherwise round to zero. The
cast is made on the sending rank, so float16 crosses the wire. Every rank
reads the same reduced values, so every rank makes the same decision: a
step whose reduced gradients overflowed is skipped on every rank (tables
included, as Keras' LossScaleOptimizer skips a whole step) and the scale
halves; after GROWTH_STEPS steps in a row without one, it doubles.
"""
import tensorflow as tf

from het_tf.distribute.allreduce_dtype import check_allreduce_dtype

# Keras' dynamic loss scale's start and growth period.
INITIAL_SCALE = 2.0 ** 15
GROWTH_STEPS = 2000


class DenseAllreduce:
    """Averages a step's dense gradients over the ranks of `hvd` in `dtype`;
    in float16 it keeps the loss scale and counts the steps skipped."""

    def __init__(self, hvd, dtype="float32"):
        self.hvd, self.dtype = hvd, check_allreduce_dtype(dtype)
        if self.dtype == "float32":
            return  # no scale, and no step ever skipped
        # Alike on every rank: they start alike and change by reduced values.
        self.scale = tf.Variable(INITIAL_SCALE, trainable=False, dtype=tf.float32,
                                 name="het_allreduce_scale")
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64,
                                      name="het_allreduce_good_steps")
        self.skipped_steps = tf.Variable(0, trainable=False, dtype=tf.int64,
                                         name="het_allreduce_skipped_steps")

    def skipped(self):
        """The steps skipped so far (0 in float32)."""
        return 0 if self.dtype == "float32" else int(self.skipped_steps.numpy())

    def __call__(self, grads):
        """The ranks' average of `grads` (dense tensors) and whether the step
        is to be applied: a Python True in float32, which never skips."""
        if self.dtype == "float32":
            return self.hvd.grouped_allreduce(grads, op=self.hvd.Average), True
        # Each rank's share of the average, scaled, so that the sum of the
        # float16 shares is the scaled average.
        factor = self.scale / self.hvd.size()
        sent = [tf.cast(tf.cast(g, tf.float32) * factor, tf.float16) for g in grads]
        summed = self.hvd.grouped_allreduce(sent, op=self.hvd.Sum)
        averaged = [tf.cast(tf.cast(s, tf.float32) / self.scale, g.dtype)
                    for s, g in zip(summed, grads)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(s)) for s in summed])
        self._update_scale(finite)
        return averaged, finite

    def _update_scale(self, finite):
        grow = finite & (self.good_steps + 1 >= GROWTH_STEPS)
        self.scale.assign(tf.where(grow, self.scale * 2.0,
                                   tf.where(finite, self.scale,
                                            tf.maximum(self.scale / 2.0, 1.0))))
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1,
                                        tf.constant(0, tf.int64)))
        self.skipped_steps.assign_add(tf.cast(~finite, tf.int64))
