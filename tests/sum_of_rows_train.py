"""A model whose rows' training follows from the data alone, run as the
chief of a ParameterServerStrategy cluster or as every Horovod rank in
hybrid mode, for tests/test_exactly_once.py.

    sum_of_rows_train.py ps|hybrid RESULT_JSON

The model sums the rows of a batch's ids, and the loss is that sum's mean:
each id's row moves by -LR/BATCH per occurrence in each dimension, from
zeros, whatever the staleness and whichever worker trains the batch. So
after a flush, row k is -LR/BATCH times the number of times k was trained,
and its clock the number of steps that looked it up. Both are exact in
float32 (LR/BATCH is a power of two).

Under ParameterServerStrategy every step trains the same batch
(`batch(0)`), so the sum does not depend on how the steps fall on the
workers; in hybrid mode rank r trains `batch(r * STEPS + i)` at its step i
and writes RESULT_JSON.rank<r>.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

VOCABULARY, IDS, DIM = 48, 4, 2
BATCH, LR, STEPS = 32, 0.25, 24
CACHE, STALENESS = 24, 3


def batch(index):
    """Ids of batch `index`: ids repeat within it, and 48 ids over a 24-row
    cache keep rows coming and going."""
    rng = np.random.default_rng(index)
    return rng.integers(0, VOCABULARY, size=(BATCH, IDS)).astype(np.int64)


def trained_counts(batches):
    """(occurrences, steps that looked it up) of each id over `batches`."""
    occurrences, steps = np.zeros(VOCABULARY, np.int64), np.zeros(VOCABULARY, np.int64)
    for ids in batches:
        np.add.at(occurrences, ids.ravel(), 1)
        steps[np.unique(ids)] += 1
    return occurrences, steps


def build_model():
    import tensorflow as tf
    import tf_keras

    from het_tf.keras_layers import HetEmbedding

    layer = HetEmbedding(VOCABULARY, DIM, embeddings_initializer="zeros",
                         optimizer=tf_keras.optimizers.SGD(LR), cache_capacity=CACHE,
                         staleness=STALENESS, name="items")
    ids = tf_keras.Input((IDS,), dtype="int64", name="ids")
    total = tf_keras.layers.Lambda(lambda rows: tf.reduce_sum(rows, axis=[1, 2])[:, None])(
        layer(ids))
    return tf_keras.Model(ids, total), layer


def compile_model(model):
    import tf_keras

    model.compile(tf_keras.optimizers.SGD(LR), loss=lambda _y, pred: pred)


def rows_and_clocks(layer):
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    return {"keys": keys.tolist(), "values": values.tolist(), "clocks": clocks.tolist()}


def run_ps(result_path):
    import tensorflow as tf
    import tf_keras

    from het_tf import cluster

    strategy = cluster.parameter_server_strategy()
    with strategy.scope():
        model, layer = build_model()
        compile_model(model)
    ids = batch(0)

    def dataset_fn(_context):
        return tf.data.Dataset.from_tensors((ids, np.zeros((BATCH, 1), np.float32))).repeat()

    data = tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    model.fit(data, epochs=1, steps_per_epoch=STEPS * 2, verbose=0)
    layer.flush()
    result = dict(rows_and_clocks(layer), batches=[0] * (STEPS * 2))
    with open(result_path, "w") as f:
        json.dump(result, f)


def run_hybrid(result_path):
    from het_tf import hybrid

    hybrid.init()  # first: before any model is built
    model, layer = build_model()
    hybrid.distribute(model)  # before compile
    compile_model(model)
    rank = hybrid.rank()
    indexes = [rank * STEPS + i for i in range(STEPS)]
    ids = np.concatenate([batch(i) for i in indexes])
    model.fit(ids, np.zeros((len(ids), 1), np.float32), batch_size=BATCH, shuffle=False,
              epochs=1, verbose=0)
    hybrid.flush_and_clear(model)
    hybrid.barrier()  # every rank's updates are on the shards now
    with open(f"{result_path}.rank{rank}", "w") as f:
        json.dump(dict(rows_and_clocks(layer), batches=indexes), f)


if __name__ == "__main__":
    (run_ps if sys.argv[1] == "ps" else run_hybrid)(sys.argv[2])
