"""The conformance matrix's hybrid cells, run as every rank of `het-tf
launch --hybrid --ps 1 --workers 2`: each route's model trains on both
ranks, Adam on the dense weights, and is then read as the docs say a
hybrid user reads it. Rank r trains the ids of its own parity, so that
each row has one writer and every route is exact: every read must equal
the cache-off model's, the 16-bit wire's to its tolerance
(tests/test_conformance.py compares them, and loads the files in one
process). After the cells, the faults: reads refused on
one rank, a restore of a full table, a restore that waits for every rank,
one that fails on one rank, and validation that differs between ranks."""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import het_tf  # noqa: E402
from het_tf.distribute.horovod import broadcast_object  # noqa: E402
from het_tf.keras_layers import HetEmbedding  # noqa: E402
from tests import conformance as c  # noqa: E402

# (route, cache) cells; "off" is every cell's oracle.
CELLS = (("off", "holds"), ("refresh", "holds"), ("refresh", "small"), ("check", "small"),
         ("lookahead", "holds"), ("hot-rows", "small"), ("herald", "holds"),
         ("bfloat16", "small"))
VOCAB = 2 * c.VOCAB
_DATA = np.random.default_rng(58)
# The same held-out ids on every rank, of both parities.
VALIDATION = ({"history": _DATA.integers(0, VOCAB, (16, 3)),
               "target": _DATA.integers(0, VOCAB, (16, 1))},
              _DATA.normal(size=(16, 1)).astype(np.float32))
MATRIX = _DATA.uniform(-0.1, 0.1, (VOCAB, c.DIM)).astype(np.float32)


def cell_id(cell):
    return "-".join(cell)


def inputs(rank):
    """Rank `rank`'s training data: the matrix's ids of its parity."""
    return {k: 2 * v + rank for k, v in c.INPUTS.items()}, c.LABELS


def build(cell, name, hybrid=None):
    """The cell's model (Adam on the dense weights, Adagrad on the table):
    made hybrid-ready with `hybrid` (het_tf.hybrid), else for one process."""
    route, cache = cell
    settings = dict(c.ROUTES[route])
    settings.setdefault("cache_capacity", c.CACHES[cache])
    layer = HetEmbedding(VOCAB, c.DIM, weights=[MATRIX], optimizer=tf_keras.optimizers.Adagrad(0.1),
                         name=name, **settings)
    history = tf_keras.Input((3,), dtype="int64", name="history")
    target = tf_keras.Input((1,), dtype="int64", name="target")
    flat = tf_keras.layers.Flatten()(layer(tf_keras.layers.Concatenate()([history, target])))
    hidden = tf_keras.layers.Dense(3, kernel_initializer="ones", name="hidden")(flat)
    score = tf_keras.layers.Dense(1, kernel_initializer="ones", name="score")(hidden)
    model = tf_keras.Model({"history": history, "target": target}, score, name="hybrid_cell")
    if hybrid is not None:
        hybrid.distribute(model)
    model.compile(tf_keras.optimizers.Adam(0.01), "mse")
    if route == "hot-rows":
        layer.set_hot_keys(c.HOT)
    return model, layer


def slots(model):
    """The dense optimizer's moments, by the index of their variable in
    model.trainable_variables: {"m": [...], "v": [...]}."""
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    index = [optimizer._index_dict[optimizer._var_key(v)] for v in model.trainable_variables]
    return {"m": [optimizer._momentums[i].numpy() for i in index],
            "v": [optimizer._velocities[i].numpy() for i in index]}


def dataset(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(c.BATCH)


def refusals(model, layer):
    """What each read on one rank raises right after fit (None: it answered)."""
    out = {}
    reads = {"evaluate": lambda: model.evaluate(dataset(*VALIDATION), verbose=0),
             "predict": lambda: model.predict(VALIDATION[0], verbose=0),
             "layer(ids)": lambda: layer(np.arange(4).reshape(-1, 1)),
             "get_weights": layer.get_weights,
             "export": lambda: het_tf.export_saved_model(model, "/nonexistent/never-written")}
    for name, read in reads.items():
        try:
            read()
            out[name] = None
        except ValueError as e:
            out[name] = str(e)
    return out


def run_cell(cell, n, hybrid, folder):
    tf_keras.utils.set_random_seed(0)
    model, layer = build(cell, f"items{n}", hybrid)
    ahead = model if cell[0] == "lookahead" else None
    train = dataset(*inputs(hybrid.rank()))
    history = model.fit(train if ahead is None else het_tf.lookahead(train, ahead), epochs=c.EPOCHS,
                        validation_data=dataset(*VALIDATION), validation_freq=[1], verbose=0)
    got = {"refusals": refusals(model, layer), "val_loss": np.array(history.history["val_loss"]),
           "evaluate": np.array(hybrid.evaluate(model, dataset(*VALIDATION), verbose=0)),
           "predict": hybrid.predict(model, VALIDATION[0], verbose=0).ravel()}
    got["layer(ids)"] = layer(np.arange(VOCAB).reshape(-1, 1)).numpy().reshape(VOCAB, c.DIM)
    got["get_weights"] = layer.get_weights()[0]
    got["slots"] = slots(model)
    got["keras"] = hybrid.save(model, os.path.join(folder, "m.keras"))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), folder, max_to_keep=1)
    got["checkpoint"] = hybrid.save(model, manager)
    got["export"] = hybrid.export_saved_model(model, os.path.join(folder, "export"))
    return got


def table_rows(layer):
    keys, values = (t.numpy() for t in layer.table.export_all()[:2])
    return values[np.argsort(keys)], np.sort(keys)


def faults(hybrid, folder):
    """A table at its max_rows saved, trained on, and restored on both
    ranks at once; trained on again and restored with rank 1 reading the
    table a while before it restores; then a restore that fails on rank 1,
    and fits that validate on rank 0 only."""
    rank, out = hybrid.rank(), {}
    tf_keras.utils.set_random_seed(0)
    layer = HetEmbedding(None, c.DIM, max_rows=16, on_full="evict", cache_capacity=4,
                         staleness=100, name="full")
    ids = tf_keras.Input((4,), dtype="int64")
    model = tf_keras.Model(ids, tf_keras.layers.Dense(1, name="score")(
        tf_keras.layers.Flatten()(layer(ids))))
    hybrid.distribute(model)
    model.compile(tf_keras.optimizers.Adam(0.01), "mse")
    data = np.random.default_rng(rank).integers(0, 8, (64, 4)) * 2 + rank  # 16 ids in all
    labels = np.ones((64, 1), np.float32)
    model.fit(data, labels, batch_size=8, verbose=0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), folder, max_to_keep=1)
    checkpoint = broadcast_object(hybrid.save(model, manager))
    out["saved"] = table_rows(layer)
    model.fit(data[::-1], labels, batch_size=8, verbose=0)
    try:  # both ranks at once, each importing the rows would count them twice
        hybrid.restore(model, checkpoint)
        out["restored"] = table_rows(layer)
    except Exception as e:  # noqa: BLE001 - what every rank raised is the finding
        out["restore_error"] = f"{type(e).__name__}: {e}"
    model.fit(data[::-1], labels, batch_size=8, verbose=0)
    hybrid.flush_and_clear(model)
    out["before"] = table_rows(layer)
    if rank == 1:  # rank 0 is in restore meanwhile
        time.sleep(3)
        out["read_while_rank0_restores"] = table_rows(layer)
    hybrid.restore(model, checkpoint)
    out["restored_again"] = table_rows(layer)
    try:
        hybrid.restore(model, checkpoint if rank == 0 else os.path.join(folder, "missing-1"))
    except Exception as e:  # noqa: BLE001
        out["failed_restore"] = f"{type(e).__name__}: {e}"
    validation = dict(validation_data=(data, labels)) if rank == 0 else {}
    try:
        model.fit(data, labels, batch_size=8, verbose=0, **validation)
    except ValueError as e:
        out["validation_differs"] = str(e)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--folder", required=True)
    args = p.parse_args()
    from het_tf import hybrid
    hybrid.init()
    rank, results = hybrid.rank(), {}
    for n, cell in enumerate(CELLS):
        folder = os.path.join(args.folder, cell_id(cell))
        results[cell_id(cell)] = run_cell(cell, n, hybrid, folder)
        print(f"rank {rank}: {cell_id(cell)} read", flush=True)
    results["faults"] = faults(hybrid, os.path.join(args.folder, "faults"))
    np.savez(os.path.join(args.folder, f"rank{rank}.npz"),
             results=np.array(results, dtype=object))


if __name__ == "__main__":
    main()
