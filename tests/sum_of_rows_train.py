"""A model whose rows' training follows from the data alone, run as the
chief of a ParameterServerStrategy cluster or as every Horovod rank in
hybrid mode, for tests/test_exactly_once.py.

    sum_of_rows_train.py ps|ps-saving|hybrid RESULT_JSON [DIM] [fresh|repeated]

The model sums the rows of a batch's ids, looked up through one layer
called twice (all of a sample's ids, then its first again, as a history
and a target), and the loss is that sum's mean: each id's row moves by
-LR/BATCH per occurrence in each dimension, from zeros, whatever the
staleness and whichever worker trains the batch. So after a flush, row k
is -LR/BATCH times the number of times k was trained, and its clock the
number of steps that looked it up (one update a step, however many calls).
Both are exact in float32 (LR/BATCH is a power of two).

Under ParameterServerStrategy every step trains the same batch
(`batch(0)`), so the sum does not depend on how the steps fall on the
workers, and each epoch's validation and `evaluate` right after `fit` score
that batch (its loss); the chief saves the model to RESULT_JSON.keras right
after `fit`, and at the end loads it into the cluster again. In hybrid mode
rank r trains `batch(r * STEPS + i)` at its step i (or `batch(r * STEPS)`
at every step, `repeated`); every rank saves the model to RESULT_JSON.keras,
then where rank 0 cannot write, with het_tf.hybrid.save, then sets the table's weights
and reads them back, then loads the file and reads again, and each writes
RESULT_JSON.rank<r>.
DIM (default 2) is the rows' size.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

VOCABULARY, IDS, DIM = 48, 4, 2
BATCH, LR, STEPS = 32, 0.25, 24
CACHE, STALENESS = 24, 3
SAVE_EVERY = 2
EXPORT_EVERY = 8  # steps between SavedModel versions (het_tf.ExportVersions)


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
        np.add.at(occurrences, ids[:, 0], 1)  # the second call's
        steps[np.unique(ids)] += 1
    return occurrences, steps


def build_model(dim=DIM):
    import tensorflow as tf
    import tf_keras

    from het_tf.keras_layers import HetEmbedding

    layer = HetEmbedding(VOCABULARY, dim, embeddings_initializer="zeros",
                         optimizer=tf_keras.optimizers.SGD(LR), cache_capacity=CACHE,
                         staleness=STALENESS, name="items")
    ids = tf_keras.Input((IDS,), dtype="int64", name="ids")
    # TensorFlow ops on Keras tensors: layers Keras saves and loads as its own.
    total = (tf.reduce_sum(layer(ids), axis=[1, 2])
             + tf.reduce_sum(layer(ids[:, :1]), axis=[1, 2]))
    return tf_keras.Model(ids, total[:, None]), layer


def compile_model(model):
    import tf_keras

    from het_tf.models import trace_steps_as_written

    model.compile(tf_keras.optimizers.SGD(LR), loss=lambda _y, pred: pred)
    trace_steps_as_written(model)  # seconds, not half a minute, to trace


def rows_and_clocks(layer):
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    return {"keys": keys.tolist(), "values": values.tolist(), "clocks": clocks.tolist()}


def ps_model(dim):
    """(model, layer, input) under ParameterServerStrategy, the input
    `batch(0)` at every step."""
    import tensorflow as tf
    import tf_keras

    from het_tf import cluster

    with cluster.parameter_server_strategy().scope():
        model, layer = build_model(dim)
        compile_model(model)
    ids = batch(0)

    def dataset_fn(_context):
        return tf.data.Dataset.from_tensors((ids, np.zeros((BATCH, 1), np.float32))).repeat()

    return model, layer, tf_keras.utils.experimental.DatasetCreator(dataset_fn)


def run_ps(result_path, dim, _order):
    import tf_keras

    from het_tf import cluster

    model, layer, data = ps_model(dim)
    # Each epoch's validation, evaluate right after fit and the save run
    # with updates still pending in the workers' caches.
    history = model.fit(data, epochs=2, steps_per_epoch=STEPS, validation_data=data,
                        validation_steps=2, verbose=0).history
    model.save(f"{result_path}.keras")
    evaluated = model.evaluate(data, steps=2, verbose=0)
    layer.flush()
    result = dict(rows_and_clocks(layer), batches=[0] * (STEPS * 2), evaluated_loss=evaluated,
                  validation_losses=history["val_loss"])
    # The chief loads the file into the cluster: the table it names takes
    # the file's rows, whatever the shards held since.
    layer.set_weights([np.ones((VOCABULARY, dim), np.float32)])
    with cluster.parameter_server_strategy().scope():
        # Uncompiled: the loss is a Python lambda, which Keras loads only when told.
        loaded = tf_keras.models.load_model(f"{result_path}.keras", compile=False)
    (loaded_layer,) = [x for x in loaded.layers if x.name == layer.name]
    result["loaded"] = rows_and_clocks(loaded_layer)
    with open(result_path, "w") as f:
        json.dump(result, f)


def run_ps_saving(result_path, dim, _order):
    """As run_ps, with a checkpoint and a .keras file every SAVE_EVERY steps the chief
    schedules (Keras waits for the last step's logs before it saves, not for
    the one before, which may still be training on the other worker), and
    get_weights() after every step the chief schedules, without waiting for
    it, and a SavedModel version every EXPORT_EVERY steps. Each save's and read's record holds the steps the optimizer had
    finished just before it began and just after it ended."""
    import tf_keras

    model, layer, data = ps_model(dim)
    saves = []

    class Finished(tf_keras.callbacks.Callback):
        def __init__(self, field):
            super().__init__()
            self.field = field
            self._supports_tf_logs = True  # as ModelCheckpoint: batch hooks under PSS

        def on_train_batch_end(self, step, logs=None):
            if (step + 1) % SAVE_EVERY:
                return
            if self.field == "before":
                saves.append({"path": f"{result_path}.ckpt-{step + 1}"})  # as Keras names it
            saves[-1][self.field] = finished()

    def finished():
        return int(model.optimizer.iterations.numpy())

    class ReadWeights(tf_keras.callbacks.Callback):
        """get_weights() right after each step is scheduled, while it trains."""

        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True

        def on_train_batch_end(self, step, logs=None):
            before = finished()
            for _ in range(4):  # flushes beside the running steps (unless they wait)
                layer.flush()
            (table,) = [w for w in model.get_weights() if w.shape == (VOCABULARY, dim)]
            reads.append({"rows": table[:, 0].tolist(), "before": before, "after": finished()})

    reads = []
    model.fit(data, epochs=1, steps_per_epoch=STEPS * 2, verbose=0,
              callbacks=[Finished("before"), versions(result_path),
                         tf_keras.callbacks.ModelCheckpoint(
                  f"{result_path}.ckpt-{{batch}}.keras", save_freq=SAVE_EVERY),
                  tf_keras.callbacks.ModelCheckpoint(
                  f"{result_path}.ckpt-{{batch}}", save_weights_only=True,
                  save_freq=SAVE_EVERY), Finished("after"), ReadWeights()])
    layer.flush()
    result = dict(rows_and_clocks(layer), batches=[0] * (STEPS * 2), saves=saves, reads=reads)
    with open(result_path, "w") as f:
        json.dump(result, f)


def versions(result_path):
    """A SavedModel version every EXPORT_EVERY steps, in RESULT_JSON.versions."""
    import het_tf

    return het_tf.ExportVersions(f"{result_path}.versions", every_steps=EXPORT_EVERY,
                                 verbose=0)


def run_hybrid(result_path, dim, order):
    import tensorflow as tf

    from het_tf import hybrid

    hybrid.init()  # first: before any model is built
    model, layer = build_model(dim)
    hybrid.distribute(model)  # before compile
    compile_model(model)
    rank = hybrid.rank()
    indexes = [rank * STEPS + (0 if order == "repeated" else i) for i in range(STEPS)]
    ids = np.concatenate([batch(i) for i in indexes])
    model.fit(ids, np.zeros((len(ids), 1), np.float32), batch_size=BATCH, shuffle=False,
              epochs=1, verbose=0, callbacks=[versions(result_path)])
    refused = None
    try:  # one rank alone cannot save what the other's cache holds
        model.save(f"{result_path}.rank{rank}.keras")
    except ValueError as e:
        refused = str(e)
    hybrid.save(model, f"{result_path}.keras")  # every rank, with updates pending
    if rank == 0:  # a file where the next save's folder would be
        open(f"{result_path}.blocked", "w").close()
    hybrid.barrier()
    failed_save = None
    try:
        hybrid.save(model, f"{result_path}.blocked/model.keras")
    except Exception as e:  # rank 0's own error, a RuntimeError on the others
        failed_save = type(e).__name__
    hybrid.flush_and_clear(model)
    hybrid.barrier()  # every rank's updates are on the shards now
    result = dict(rows_and_clocks(layer), batches=indexes)
    hybrid.barrier()  # every rank has read them
    result["read_after_set"] = read_after_set_weights(layer, rank)
    model.load_weights(f"{result_path}.keras")  # every rank, after set_weights
    loaded_rows = layer(tf.range(CACHE, dtype=tf.int64), training=True).numpy()
    result.update(read_after_load=loaded_rows.tolist(), refused=refused, failed_save=failed_save)
    with open(f"{result_path}.rank{rank}", "w") as f:
        json.dump(result, f)


def read_after_set_weights(layer, rank):
    """Every rank caches rows, then sets the table (rank 1 last, and with a
    matrix of its own), then reads the rows again through its cache: what
    it reads, for the test to hold against rank 0's matrix, `set_matrix(0)`."""
    import tensorflow as tf

    ids = tf.range(CACHE, dtype=tf.int64)
    layer(ids, training=True)  # cached copies of the trained rows
    if rank == 1:
        time.sleep(1)
    layer.set_weights([set_matrix(rank, layer.output_dim)])
    return layer(ids, training=True).numpy().tolist()


def set_matrix(rank, dim):
    return np.arange(VOCABULARY * dim, dtype=np.float32).reshape(VOCABULARY, dim) + 1000 * rank


if __name__ == "__main__":
    mode, path, *options = sys.argv[1:]
    dim, order = (int(options[0]) if options else DIM), (options[1] if options[1:] else "fresh")
    {"ps": run_ps, "ps-saving": run_ps_saving, "hybrid": run_hybrid}[mode](path, dim, order)
