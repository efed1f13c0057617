"""Hybrid mode's Keras half: the training step that averages dense
gradients over the Horovod ranks, and checkpoints taken by every rank
together (het_tf.hybrid documents the whole mode)."""
import os

import tensorflow as tf
import tf_keras

from het_tf.distribute.dense_allreduce import DenseAllreduce
from het_tf.distribute.horovod import (
    barrier,
    initialized,
    num_ps,
    on_every_rank,
    on_rank_zero,
    rank,
)
from het_tf.keras_layers import every_rank
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_gradients import is_anchor
from het_tf.keras_layers.table_weights import model_variables
from het_tf.pipeline.allocation import Allocation

# Still importable from here, as het_tf.keras_layers.hybrid_training's old name offers it.
from het_tf.training.hybrid_reads import (
    flush_and_clear,  # noqa: F401
    flush_every_rank,
    validate_together,
)


def _check_built_after_init(model):
    for layer in het_embedding_layers(model):
        if layer.built and not layer.table.devices[0]:
            raise ValueError(f"HetEmbedding '{layer.name}' was built before "
                             "het_tf.hybrid.init(): call init() first, before building the model")


def _hybrid_train_step(model, data, allreduce, allocation=None):
    """Keras' train step with the dense gradients averaged over the ranks
    (`allreduce`, a DenseAllreduce). The tables' gradients go to the
    optimizer as they are: each rank updates the tables through its own
    cache. A step the allreduce says to skip (a float16 overflow, alike on
    every rank) changes nothing but the optimizer's step count. With
    `allocation` the step first re-divides the samples over the ranks."""
    if isinstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        # Its skip decision would read each rank's own table gradients:
        # ranks could skip different steps and their dense weights part.
        raise ValueError("hybrid mode does not take a LossScaleOptimizer (mixed_float16): "
                         "train in float32 or mixed_bfloat16, which needs no loss scale (to "
                         "send the dense gradients in float16, distribute's allreduce_dtype "
                         "scales around the allreduce)")
    if allocation is not None:
        data = allocation(data)
    x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    dense = [i for i, (g, v) in enumerate(zip(grads, variables))
             if g is not None and not is_anchor(v)]
    applied = True  # a step with no dense gradient is never skipped
    if dense:
        averaged, applied = allreduce([tf.convert_to_tensor(grads[i]) for i in dense])
        grads = list(grads)
        for i, g in zip(dense, averaged):
            grads[i] = g
    # In the model's order, as Keras' own step: the optimizer makes its
    # slots in this order and files hold them by position (slot_order.py).
    if applied is True:  # nothing to skip on: float32, or no dense gradient
        model.optimizer.apply_gradients(zip(grads, variables))
    else:
        _apply_unless_skipped(model.optimizer, grads, variables, applied)
    return model.compute_metrics(x, y, y_pred, sample_weight)


def _apply_unless_skipped(optimizer, grads, variables, applied):
    """apply_gradients where `applied`, as Keras' LossScaleOptimizer does:
    the slots are made first, outside the condition, for every variable
    (as apply_gradients would: files hold them by position)."""
    with tf.init_scope():
        if hasattr(optimizer, "build"):
            optimizer.build(variables)
        else:  # the legacy optimizers
            optimizer._create_all_weights(variables)

    def skip():
        optimizer.iterations.assign_add(1)
        return tf.constant(False)

    def apply():
        optimizer.apply_gradients(zip(grads, variables))
        return tf.constant(True)

    tf.cond(applied, apply, skip)


def distribute(model, allocate_every=0, summary_rows=65536, stay_bonus="auto",
               allreduce_dtype="float32"):
    """Makes a plain tf_keras model, built after init(), hybrid-ready; call
    it before compile. Broadcasts the weights from rank 0 and averages dense
    gradients over the ranks in every training step; the HetEmbedding tables
    are on the PS tasks, shared by every rank.

    allreduce_dtype "float16" sends the dense gradients in float16, half
    the allreduce's bytes, with a dynamic loss scale; a step whose reduced
    gradients overflow is skipped on every rank (allreduce_skipped_steps).
    bfloat16 is refused: Horovod's Gloo allreduce cannot sum it.

    allocate_every > 0 turns on Herald's location-aware allocation
    (docs/herald.md): each step's samples train on the rank whose cache
    holds most of their rows, each rank sharing a Bloom filter of its
    caches' `summary_rows` most used keys every `allocate_every` steps
    (1.25 bytes a key); a sample leaves the rank that read it only to gain
    more than `stay_bonus` cached rows ("auto": the rows its own bytes are
    worth). Returns the model; its
    allocation, if any, is `het_allocation(model)`."""
    if num_ps() is None:
        raise ValueError("call het_tf.hybrid.init() first, before building the model")
    hvd = initialized()
    if getattr(model, "_is_compiled", False):
        raise ValueError("call het_tf.hybrid.distribute(model) before model.compile")
    _check_built_after_init(model)
    allreduce = DenseAllreduce(hvd, allreduce_dtype)
    allocation = None
    if allocate_every:
        allocation = Allocation(model, allocate_every, summary_rows, hvd.size(), hvd.rank(),
                                hvd.allgather, hvd.alltoall, stay_bonus)
    model._het_allocation = allocation
    model._het_allreduce = allreduce
    model.train_step = lambda data: _hybrid_train_step(model, data, allreduce, allocation)
    validate_together(model)
    hvd.broadcast_variables(model_variables(model), root_rank=0)
    return model


def het_allocation(model):
    """The model's Allocation (distribute's allocate_every), or None."""
    return getattr(model, "_het_allocation", None)


def allreduce_skipped_steps(model):
    """The training steps every rank skipped because the dense gradients
    overflowed float16 (distribute's allreduce_dtype; 0 in float32)."""
    allreduce = getattr(model, "_het_allreduce", None)
    return 0 if allreduce is None else allreduce.skipped()


def save(model, target):
    """Saves the model from every rank together: all ranks push their
    pending updates, rank 0 saves, and no rank trains on until it has (if
    rank 0's save fails, every rank raises). The caches keep their copies.
    `target` is a tf.train.CheckpointManager (the tables and rank 0's dense
    weights) or a Keras file: a path ending in `.keras` (model.save) or
    `.weights.h5` (save_weights), on a file system every rank that loads it
    sees. Returns the checkpoint's path or the file's on rank 0, None on the
    others."""
    if isinstance(target, tf.train.CheckpointManager):
        write = target.save
    else:
        path = os.fspath(target)
        save_file = (model.save_weights if path.endswith(".weights.h5")
                     else model.save if path.endswith(".keras") else None)
        if save_file is None:
            raise ValueError("het_tf.hybrid.save takes a tf.train.CheckpointManager or a path "
                             f"ending in .keras or .weights.h5, got {target!r}")

        def write():
            save_file(path)
            return path
    flush_every_rank(model)
    return on_rank_zero(write, "het_tf.hybrid.save")


def restore(model, path):
    """Collective: restores the checkpoint on every rank, once every rank
    has stopped reading and training. Every rank restores its own
    variables and optimizer slots (made alike on every rank); rank 0 alone
    writes the shared tables, so that a table restores once, however many
    ranks there are, and one that fills its max_rows fits. If it fails on
    one rank, every rank raises naming it. Caches start empty; hot blocks
    take their rows from the restored tables."""
    layers = het_embedding_layers(model)
    unbuilt = [layer.name for layer in layers if not layer.built]
    if unbuilt:
        raise ValueError(f"het_tf.hybrid.restore: HetEmbedding {unbuilt} not built yet; build "
                         "the model (call it on a batch, or build it) on every rank first")
    barrier()  # no rank reads the tables while they change

    def read():
        for layer in layers:
            layer._table_checkpoint.reads_rows = rank() == 0
        try:
            tf.train.Checkpoint(model=model).restore(path).expect_partial()
        finally:
            for layer in layers:
                layer._table_checkpoint.reads_rows = True
        if rank() == 0:  # eager ops run in order on a PS task: once this returns, the rows are in
            for layer in layers:
                layer.table.stats()

    on_every_rank(read, f"het_tf.hybrid.restore of {path}")
    on_every_rank(lambda: [layer.reload_hot_rows() for layer in layers],
                  "het_tf.hybrid.restore's hot rows")
    initialized().broadcast_variables(model_variables(model), root_rank=0)
    every_rank.flushed(layers, cleared=True)


class Checkpoint(tf_keras.callbacks.Callback):
    """Saves a checkpoint every epoch in hybrid mode (on every rank)."""

    def __init__(self, directory, max_to_keep=3):
        super().__init__()
        self.directory, self.max_to_keep = directory, max_to_keep
        self.manager = None

    def on_epoch_end(self, epoch, logs=None):
        if self.manager is None:
            checkpoint = tf.train.Checkpoint(model=self.model)
            self.manager = tf.train.CheckpointManager(checkpoint, self.directory,
                                                      max_to_keep=self.max_to_keep)
        save(self.model, self.manager)
