"""The conformance matrix's cells: one model built twice, with tf_keras'
own Embedding (the oracle) and with HetEmbedding on one route, trained on
the same batches from the same rows; then every way a user reads it.

A cell is (route, cache, calls, optimizer). The routes are the ways a
layer's rows travel (the cache off, synchronous, by refresh, by check, the
lookahead, FAE's hot rows, and scheduler="herald", which in one process
takes the cache alone: Herald's plan needs Horovod ranks, and hybrid
mode's answers are checked apart); a cache either holds a step's
rows or is smaller than one; the layer is called once (on every id) or
twice (history, then target) a step. With one worker every route is exact,
so every read must equal the oracle's to 1e-6, but for the 16-bit wire's
(refresh, rows pulled and pushed in bfloat16 or float16): a row it pulls
is one rounding off, and what the layer computes on it follows, so its
reads are held to a tolerance of a few roundings (TOLERANCE), far below
what one lost update moves them. Cells a route refuses (the
lookahead with two calls a step) must raise, naming the
layer. tests/test_conformance.py runs them in one process and under
ParameterServerStrategy (tests/conformance_cluster.py)."""
import itertools
import os

import numpy as np
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding

VOCAB, DIM, BATCH, SAMPLES, EPOCHS = 24, 4, 8, 64, 2
ATOL = 1e-6
_DATA = np.random.default_rng(57)
MATRIX = _DATA.uniform(-0.1, 0.1, (VOCAB, DIM)).astype(np.float32)
INPUTS = {"history": _DATA.integers(0, VOCAB, (SAMPLES, 3)),
          "target": _DATA.integers(0, VOCAB, (SAMPLES, 1))}
LABELS = _DATA.normal(size=(SAMPLES, 1)).astype(np.float32)
VALIDATION = ({"history": _DATA.integers(0, VOCAB, (16, 3)),
               "target": _DATA.integers(0, VOCAB, (16, 1))},
              _DATA.normal(size=(16, 1)).astype(np.float32))
LABELS_OF_VALIDATION = VALIDATION[1]
HOT = np.arange(6)

ROUTES = {
    "off": dict(cache_capacity=0),
    "s0": dict(staleness=0),
    "refresh": dict(staleness=100),
    "check": dict(staleness=100, sync="check"),
    "lookahead": dict(staleness=100),
    "hot-rows": dict(staleness=100, hot_rows=len(HOT)),
    "herald": dict(scheduler="herald"),
    "bfloat16": dict(staleness=100, wire_dtype="bfloat16"),
    "float16": dict(staleness=100, wire_dtype="float16"),
}
# A pulled row is one rounding off (2**-9 of its value in bfloat16, 2**-12
# in float16, whose optimizer slots still travel in bfloat16), and what is
# trained on it drifts by a few roundings over the run: a 16-bit cell's read
# may differ from the oracle's by this share of the read's largest value.
# Measured, in one process the reads differ by at most 0.23% of it
# (bfloat16) and 0.06% (float16); in hybrid mode, where Adam's dense
# moments follow the rows, 2% (bfloat16). One step's update left out moves
# the rows by 12-48% of their largest value (Keras' Embedding, any cell).
TOLERANCE = {"bfloat16": 2**-5, "float16": 2**-8}
# A step reads up to 32 ids, about 17 of them distinct.
CACHES = {"holds": 20, "small": 5}
UNCACHED = ("off", "s0")
# The 16-bit wire's cells in a reduced matrix: a cache smaller than a step,
# where rows are evicted (their pushes go in float32) and pulled again.
WIRE16 = ("bfloat16", "float16")
OPTIMIZERS = {"sgd": lambda: tf_keras.optimizers.SGD(0.1),
              "adagrad": lambda: tf_keras.optimizers.Adagrad(0.1)}
# What each refused cell raises, naming the layer 'items'.
# (Herald's plan runs only with several Horovod ranks: in one process the
# layer takes the cache alone, and a second call is no refusal.)
REFUSED = {("lookahead", 2): r"HetEmbedding 'items\w*' is called 2 times"}
# The routes ParameterServerStrategy's workers take (hot rows are pinned
# in each worker's cache there; Herald's plan needs Horovod ranks).
CLUSTER_ROUTES = ("off", "s0", "refresh", "check", "lookahead", "hot-rows", "bfloat16", "float16")


def cells(routes=tuple(ROUTES), reduced=False):
    """(route, cache, calls, optimizer) of every cell; `reduced` takes one
    optimizer a cell, alternating, so that each appears with each route."""
    out = []
    for r, route in enumerate(routes):
        caches = (["holds"] if route in UNCACHED else ["small"] if reduced and route in WIRE16
                  else list(CACHES))
        for n, (cache, calls) in enumerate(itertools.product(caches, (1, 2))):
            # Alternating within a route, and starting on the other
            # optimizer on the next route: each (cache, calls) meets both.
            optimizers = [sorted(OPTIMIZERS)[(n + r) % 2]] if reduced else sorted(OPTIMIZERS)
            out += [(route, cache, calls, optimizer) for optimizer in optimizers]
    return out


def cell_id(cell):
    return "-".join(map(str, cell))


def refusal(cell):
    """The pattern a refused cell's error matches, or None."""
    route, _, calls, _ = cell
    return REFUSED.get((route, calls))


def build(cell, kind, strategy=None, name="items"):
    """The cell's model (inputs 'history' and 'target', output 'score') and
    its embedding layer `name`: Keras' own (kind 'keras') or HetEmbedding;
    made within `strategy`'s scope when given (where a table's name is the
    cluster's: each model needs its own)."""
    if strategy is not None:
        with strategy.scope():
            return build(cell, kind, name=name)
    route, cache, calls, optimizer = cell
    if kind == "keras":
        layer = tf_keras.layers.Embedding(VOCAB, DIM, weights=[MATRIX], name=name)
    else:
        settings = dict(ROUTES[route])
        settings.setdefault("cache_capacity", CACHES[cache])
        layer = HetEmbedding(VOCAB, DIM, weights=[MATRIX], optimizer=OPTIMIZERS[optimizer](),
                             name=name, **settings)
    history = tf_keras.Input((3,), dtype="int64", name="history")
    target = tf_keras.Input((1,), dtype="int64", name="target")
    if calls == 1:
        vectors = [layer(tf_keras.layers.Concatenate()([history, target]))]
    else:
        vectors = [layer(history), layer(target)]
    flat = [tf_keras.layers.Flatten()(v) for v in vectors]
    flat = tf_keras.layers.Concatenate()(flat) if calls == 2 else flat[0]
    score = tf_keras.layers.Dense(1, kernel_initializer="ones", use_bias=False, name="score")(flat)
    model = tf_keras.Model({"history": history, "target": target}, score,
                           name="twice" if calls == 2 else "once")
    # Under ParameterServerStrategy, inline evaluation of the given steps.
    strategic = tf.distribute.has_strategy()
    model.compile(OPTIMIZERS[optimizer](), "mse",
                  **(dict(pss_evaluation_shards=0) if strategic else {}))
    if kind != "keras" and route == "hot-rows":
        layer.set_hot_keys(HOT)
    return model, layer


def dataset(inputs=INPUTS, labels=LABELS, strategy=None, model=None):
    """The batches in order; under `strategy`, repeated for its workers (as
    a DatasetCreator), and staged by the lookahead for `model` when given."""
    def make(context=None):
        data = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(BATCH)
        data = data if strategy is None else data.repeat()
        return data if model is None else het_tf.lookahead(data, model)

    if strategy is None:
        return make()
    return tf_keras.utils.experimental.DatasetCreator(make)


def _steps(strategy, samples):
    """evaluate's steps under a strategy, whose input repeats."""
    return {} if strategy is None else dict(steps=samples // BATCH)


def train(cell, kind, strategy=None, name="items"):
    """Fits the cell's model for EPOCHS epochs of SAMPLES / BATCH steps;
    returns the model, its layer and the history."""
    tf_keras.utils.set_random_seed(0)
    model, layer = build(cell, kind, strategy, name)
    ahead = model if kind != "keras" and cell[0] == "lookahead" else None
    history = model.fit(
        dataset(strategy=strategy, model=ahead), epochs=EPOCHS,
        # Validated after the first epoch only: the reads after fit then
        # meet the last epoch's updates as they stand, with no evaluation
        # (which pushes the workers' updates under a strategy) between.
        validation_data=dataset(*VALIDATION, strategy=strategy), validation_freq=[1], verbose=0,
        **({} if strategy is None else dict(steps_per_epoch=SAMPLES // BATCH,
                                             validation_steps=len(LABELS_OF_VALIDATION) // BATCH)))
    return model, layer, history.history


def reads(model, layer, history, kind, folder=None, strategy=None):
    """Every read of a trained model, in an order where each read that
    pushes pending updates (get_weights, the saves) comes after those that
    must not need to: fit's validation, a direct layer call, evaluate,
    predict. With `folder`, HetEmbedding's model is also saved to a .keras
    file and loaded, checkpointed and restored into a fresh model, and
    exported (the export's path is returned, to serve without het_tf)."""
    ids = np.arange(VOCAB).reshape(-1, 1)
    out = {"val_loss": np.array(history["val_loss"]),
           "layer(ids)": layer(ids).numpy().reshape(VOCAB, DIM),
           "evaluate": np.array(model.evaluate(dataset(*VALIDATION, strategy=strategy), verbose=0,
                                               **_steps(strategy, len(LABELS_OF_VALIDATION)))),
           "predict": model.predict(VALIDATION[0], verbose=0).ravel(),
           "get_weights": layer.get_weights()[0]}
    if kind == "keras" or folder is None:
        return out
    path = os.path.join(folder, "m.keras")
    model.save(path)
    loaded = tf_keras.models.load_model(path)
    out[".keras rows"] = loaded.get_layer(layer.name).get_weights()[0]
    out[".keras predict"] = loaded.predict(VALIDATION[0], verbose=0).ravel()
    checkpoint = tf.train.Checkpoint(model=model).write(os.path.join(folder, "ckpt"))
    return out, checkpoint, het_tf.export_saved_model(model, os.path.join(folder, "export"))


def restored_rows(cell, checkpoint, strategy=None, name="restored"):
    """The rows a fresh model of the cell, its table `name`, holds once
    `checkpoint` is restored."""
    model, layer = build(cell, "het", strategy, name)
    tf.train.Checkpoint(model=model).read(checkpoint).assert_existing_objects_matched()
    return layer.get_weights()[0]


def expected(oracle, name):
    """What read `name` of HetEmbedding's model must equal, from the
    oracle's reads."""
    return oracle[{".keras rows": "get_weights", "restored rows": "get_weights",
                   ".keras predict": "predict", "served": "predict"}.get(name, name)]


def differ(got, expected, route):
    """{name: largest difference} of the reads in `got` that differ from
    `expected`'s by more than `route`'s tolerance (ATOL, plus the 16-bit
    wire's share of the read's largest value)."""
    out = {}
    for name, value in got.items():
        want = np.asarray(expected[name])
        # allclose, not a comparison of the gap: a NaN read is a mismatch.
        atol = ATOL + TOLERANCE.get(route, 0.0) * float(np.max(np.abs(want)))
        if not np.allclose(value, want, rtol=0, atol=atol):
            out[name] = float(np.max(np.abs(np.subtract(value, want))))
    return out


def mismatches(got, oracle, route):
    """The reads in `got` that differ from the oracle's by more than the
    route's tolerance."""
    return differ(got, {name: expected(oracle, name) for name in got}, route)
