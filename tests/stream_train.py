"""A stream of ids that never come back, trained by a table with a row
limit that evicts, run as the chief of a ParameterServerStrategy cluster
(tests/test_eviction.py).

    stream_train.py RESULT_JSON

Batch b holds ids b * SPAN + [0, DISTINCT): each id is trained in one step
only, so after a flush a row the table still holds is what its one batch
says: from zeros, -LR/BATCH per occurrence in each dimension (exact in
float32), or twice that where both workers trained it (each reads the
stream from its start, and the steps fall on either).
After every epoch the chief records the rows each shard holds; at the end,
after a flush, the table's rows and clocks and its counters.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

IDS, DISTINCT, SPAN = 4, 40, 1000
BATCH, LR, DIM = 32, 0.25, 2
CACHE, MAX_ROWS = 48, 301  # shards of 151 and 150 rows
EPOCHS, STEPS = 6, 10  # up to 60 batches, about 2,000 distinct ids


def batch(index):
    rng = np.random.default_rng(index)
    return index * SPAN + rng.integers(0, DISTINCT, size=(BATCH, IDS)).astype(np.int64)


def expected_rows(batches):
    """{id: its row's value in each dimension, its clock} over `batches`."""
    rows = {}
    for ids in batches:
        keys, counts = np.unique(ids, return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            rows[key] = (-LR / BATCH * count, 1)
    return rows


def main(result_path):
    import tensorflow as tf
    import tf_keras

    from het_tf import cluster
    from het_tf.keras_layers import HetEmbedding
    from het_tf.models import trace_steps_as_written

    with cluster.parameter_server_strategy().scope():
        layer = HetEmbedding(None, DIM, embeddings_initializer="zeros",
                             optimizer=tf_keras.optimizers.SGD(LR), cache_capacity=CACHE,
                             staleness=2, max_rows=MAX_ROWS, on_full="evict", name="stream")
        ids = tf_keras.Input((IDS,), dtype="int64")
        total = tf.reduce_sum(layer(ids), axis=[1, 2])
        model = tf_keras.Model(ids, total[:, None])
        model.compile(tf_keras.optimizers.SGD(LR), loss=lambda _y, pred: pred)
        trace_steps_as_written(model)  # seconds, not half a minute, to trace

    stream = np.stack([batch(b) for b in range(EPOCHS * STEPS)])

    def dataset_fn(_context):
        return tf.data.Dataset.from_tensor_slices(
            (stream, np.zeros((len(stream), BATCH, 1), np.float32)))

    held = []

    class Rows(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            held.append([layer.table.shard_rows(s) for s in range(layer.table.num_shards)])

    model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=EPOCHS,
              steps_per_epoch=STEPS, verbose=0, callbacks=[Rows()])
    layer.flush()
    held.append([layer.table.shard_rows(s) for s in range(layer.table.num_shards)])
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    stats = layer.het_stats()
    with open(result_path, "w") as f:
        json.dump({"held": held, "keys": keys.tolist(), "values": values.tolist(),
                   "clocks": clocks.tolist(), "shards": layer.table.num_shards,
                   "rows_evicted": stats["table_rows_evicted"],
                   "rows_created": stats["table_rows_created"]}, f)


if __name__ == "__main__":
    main(sys.argv[1])
