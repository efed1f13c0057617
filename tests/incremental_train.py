"""A model whose rows follow from the ids it trained, for incremental
checkpoints (tests/test_incremental_checkpoints.py, in one process and as a
ParameterServerStrategy chief):

    incremental_train.py RESULT_JSON CHECKPOINT_DIR

As the chief it trains segment after segment of batches() on its cluster's
one worker and saves a checkpoint after each (full every FULL_EVERY), and
writes each checkpoint's path, the steps trained before it and what it
wrote to RESULT_JSON.

The loss is the mean over the batch of the sum of the sample's rows: each
id's row moves by -LR/BATCH per occurrence, from zeros, and its clock by
one per step that looked it up, whichever way the updates travel.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

VOCAB, DIM, BATCH, LR = 4000, 2, 32, 0.25


def sum_of_rows_model(full_every, name="items"):
    import tensorflow as tf
    import tf_keras

    from het_tf.keras_layers import HetEmbedding
    from het_tf.models import trace_steps_as_written

    """Its loss is the mean over the batch of the sum of the sample's rows:
    each id's row moves by -LR/BATCH per occurrence, from zeros, and its
    clock by one per step that looked it up."""
    layer = HetEmbedding(VOCAB, DIM, embeddings_initializer="zeros",
                         optimizer=tf_keras.optimizers.SGD(LR), cache_capacity=300,
                         staleness=3, full_checkpoint_every=full_every, name=name)
    ids = tf_keras.Input((3,), dtype="int64")
    model = tf_keras.Model(ids, tf.reduce_sum(layer(ids), axis=[1, 2])[:, None])
    model.compile(tf_keras.optimizers.SGD(LR), loss=lambda _y, pred: pred)
    return trace_steps_as_written(model), layer  # seconds, not half a minute, to trace


def batches():
    """Twelve wide steps, each over ids no step before read, then narrow
    ones over a window that moves slowly: each checkpoint after the first
    changes few of the table's rows."""
    rng = np.random.default_rng(4)
    for step in range(12):
        yield np.arange(step * BATCH * 3, (step + 1) * BATCH * 3, dtype=np.int64).reshape(BATCH, 3)
    for step in range(12, 48):
        yield rng.integers(step * 10, step * 10 + 40, size=(BATCH, 3)).astype(np.int64)


def data_rows(trained):
    """(keys, values, clocks) the data makes of `trained` batches."""
    occurrences, steps = np.zeros(VOCAB, np.int64), np.zeros(VOCAB, np.int64)
    for ids in trained:
        np.add.at(occurrences, ids.ravel(), 1)
        steps[np.unique(ids)] += 1
    keys = np.flatnonzero(steps)
    values = np.repeat((-LR / BATCH * occurrences[keys])[:, None], DIM, axis=1)
    return keys, values.astype(np.float32), steps[keys]


FULL_EVERY = 4
# The steps after which a checkpoint is saved: the first after the wide
# steps, then every 4.
SAVES = list(range(11, 48, 4))


def run_chief(result_path, checkpoint_dir):
    import tensorflow as tf
    import tf_keras

    from het_tf import cluster

    with cluster.parameter_server_strategy().scope():
        model, layer = sum_of_rows_model(FULL_EVERY)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), checkpoint_dir,
                                         max_to_keep=None)
    everything = list(batches())
    saves, done = [], 0
    for last in SAVES:
        segment = np.concatenate(everything[done:last + 1])

        def dataset_fn(_context, segment=segment):
            return tf.data.Dataset.from_tensor_slices(
                (segment, np.zeros((len(segment), 1), np.float32))).batch(BATCH)

        model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=1, steps_per_epoch=last + 1 - done, verbose=0)
        done = last + 1
        path = manager.save()
        saves.append({"path": path, "steps": done,
                      "save": dict(layer._table_checkpoint.last_save)})
    with open(result_path, "w") as f:
        json.dump({"saves": saves, "num_ps": len(layer.table.devices)}, f)


if __name__ == "__main__":
    run_chief(sys.argv[1], sys.argv[2])
