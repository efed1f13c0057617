"""Hybrid mode's Keras half: the training step that averages dense
gradients over the Horovod ranks, and checkpoints taken by every rank
together (het_tf.hybrid documents the whole mode)."""
import os

import tensorflow as tf
import tf_keras

from het_tf.distribute.horovod import barrier, initialized, num_ps, on_rank_zero
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_gradients import is_anchor
from het_tf.keras_layers.table_weights import every_rank_flushed, model_variables
from het_tf.pipeline.allocation import Allocation


def _check_built_after_init(model):
    for layer in het_embedding_layers(model):
        if layer.built and not layer.table.devices[0]:
            raise ValueError(f"HetEmbedding '{layer.name}' was built before "
                             "het_tf.hybrid.init(): call init() first, before building the model")


def _hybrid_train_step(model, data, allocation=None):
    """Keras' train step with the dense gradients averaged over the ranks.
    The tables' gradients go to the optimizer as they are: each rank updates
    the tables through its own cache. With `allocation` the step first
    re-divides the samples over the ranks."""
    if isinstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        # Its skip decision would read each rank's own table gradients:
        # ranks could skip different steps and their dense weights part.
        raise ValueError("hybrid mode does not take a LossScaleOptimizer (mixed_float16): "
                         "train in float32 or mixed_bfloat16, which needs no loss scale")
    hvd = initialized()
    if allocation is not None:
        data = allocation(data)
    x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    tables = [(g, v) for g, v in zip(grads, variables) if g is not None and is_anchor(v)]
    dense = [(tf.convert_to_tensor(g), v) for g, v in zip(grads, variables)
             if g is not None and not is_anchor(v)]
    if dense:
        averaged = hvd.grouped_allreduce([g for g, _ in dense], op=hvd.Average)
        dense = list(zip(averaged, [v for _, v in dense]))
    if dense or tables:
        model.optimizer.apply_gradients(dense + tables)
    return model.compute_metrics(x, y, y_pred, sample_weight)


def distribute(model, allocate_every=0, summary_rows=65536, stay_bonus="auto"):
    """Makes a plain tf_keras model, built after init(), hybrid-ready; call
    it before compile. Broadcasts the weights from rank 0 and averages dense
    gradients over the ranks in every training step; the HetEmbedding tables
    are on the PS tasks, shared by every rank.

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
    allocation = None
    if allocate_every:
        allocation = Allocation(model, allocate_every, summary_rows, hvd.size(), hvd.rank(),
                                hvd.allgather, hvd.alltoall, stay_bonus)
    model._het_allocation = allocation
    model.train_step = lambda data: _hybrid_train_step(model, data, allocation)
    hvd.broadcast_variables(model_variables(model), root_rank=0)
    return model


def het_allocation(model):
    """The model's Allocation (distribute's allocate_every), or None."""
    return getattr(model, "_het_allocation", None)


def flush_and_clear(model):
    """Pushes this rank's pending updates and empties its caches."""
    for layer in het_embedding_layers(model):
        layer.flush()
        layer.clear_cache()


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
            with every_rank_flushed():
                save_file(path)
            return path
    for layer in het_embedding_layers(model):
        layer.flush()
    barrier()
    return on_rank_zero(write, "het_tf.hybrid.save")


def restore(model, path):
    """Every rank restores the checkpoint, so optimizer slots (restored when
    first created) match on all ranks. Restoring the shared tables on every
    rank is idempotent: each rank empties them before its own import, so the
    last import is always complete. Caches start empty; hot blocks take
    their rows from the restored tables."""
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    barrier()
    # Each rank took its hot rows when its own restore ended; another rank
    # may have been emptying the tables then. Now every import is done.
    for layer in het_embedding_layers(model):
        layer.reload_hot_rows()
    initialized().broadcast_variables(model_variables(model), root_rank=0)


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
