"""One process: a user-written model's `fit` speed with HetEmbedding's
defaults (`het`; `het-cache` with a 10% cache) against the same model with
tf_keras' own Embedding (`keras`).

The model: 26 int64 fields with the synthetic Criteo cardinalities (ids
offset into one table), Zipf 1.1, 13 dense inputs, MLP 256-128, batch 512,
Adagrad for everything. Each run fits `--epochs` epochs of `--steps` steps
and reports the samples/s of the epochs after the first (the steady state).
Runs alternate between the two layers, `--repeats` times each, each in a
fresh process, and the median of each side's runs is compared.

    .venv/bin/python tools/layer_speed.py --repeats 3 [--layers keras het het-cache]
    .venv/bin/python tools/layer_speed.py --profile het   # each op type's time a step
    .venv/bin/python tools/layer_speed.py --ops het       # each op type's count in the step
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCH = 512
DENSE = 13
LAYERS = ("keras", "het", "het-cache")  # het: the defaults; het-cache: a 10% cache


def _data(steps, seed=0):
    import numpy as np

    from het_tf.data.synthetic import SyntheticCriteo
    rng = np.random.default_rng(seed)
    cards = np.array(SyntheticCriteo().cardinalities, dtype=np.int64)
    n = steps * BATCH
    ids = (rng.zipf(1.1, size=(n, len(cards))) - 1) % cards
    ids = ids + np.concatenate([[0], np.cumsum(cards)[:-1]])
    dense = rng.random((n, DENSE), dtype=np.float32)
    effect = np.sin(ids * 0.618).sum(axis=1) * 0.3 + dense.sum(axis=1) - DENSE / 2
    labels = (rng.random(n) < 1 / (1 + np.exp(-effect))).astype(np.float32)
    return int(cards.sum()), ids, dense, labels


def _model(layer, vocabulary, dim):
    import tf_keras
    ids = tf_keras.Input(shape=(26,), dtype="int64", name="ids")
    dense = tf_keras.Input(shape=(DENSE,), name="counts")
    if layer == "keras":
        table = tf_keras.layers.Embedding(vocabulary, dim, name="table")
    else:
        from het_tf.keras_layers import HetEmbedding
        settings = dict(cache_capacity=0.1) if layer == "het-cache" else {}
        table = HetEmbedding(vocabulary, dim, optimizer=tf_keras.optimizers.Adagrad(0.05),
                             name="table", **settings)
    x = tf_keras.layers.Concatenate()([tf_keras.layers.Flatten()(table(ids)), dense])
    for width in (256, 128):
        x = tf_keras.layers.Dense(width, activation="relu")(x)
    model = tf_keras.Model([ids, dense], tf_keras.layers.Dense(1, activation="sigmoid")(x))
    model.compile(tf_keras.optimizers.Adagrad(0.05), "binary_crossentropy")
    return model


class _EpochTimes:
    def __init__(self):
        import tf_keras

        class Callback(tf_keras.callbacks.Callback):
            def on_epoch_end(cb, epoch, logs=None):
                self.ends.append(time.perf_counter())
                self.losses.append(float(logs["loss"]))

        self.ends, self.losses = [], []
        self.callback = Callback()


def _op_ms(logdir, steps):
    """Each op type's kernel time and runs a step, from a profiler trace in logdir."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from profiler_trace import kernel_times
    return {op: (ps / steps / 1e9, runs / steps) for op, (ps, runs) in kernel_times(logdir).items()}


def run_one(layer, steps, epochs, dim, profile=False):
    """One fit in this process: {samples_per_second, losses}; with
    `profile`, one more epoch under TensorFlow's profiler too."""
    import tempfile

    import tensorflow as tf
    vocabulary, ids, dense, labels = _data(steps)
    tf.keras.utils.set_random_seed(0)
    model = _model(layer, vocabulary, dim)
    dataset = tf.data.Dataset.from_tensor_slices(((ids, dense), labels)).batch(BATCH)
    dataset = dataset.cache().repeat().prefetch(tf.data.AUTOTUNE)
    times = _EpochTimes()
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps, callbacks=[times.callback],
              verbose=0)
    seconds = times.ends[-1] - times.ends[0]
    result = dict(layer=layer, samples_per_second=(epochs - 1) * steps * BATCH / seconds,
                  losses=times.losses)
    if profile:
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
            tf.profiler.experimental.stop()
            result["op_ms"] = _op_ms(logdir, steps)
    return result


def traced_ops(layer, dim):
    """Each op type's count in the traced train step (its graph and the
    functions it calls), after one step of fit."""
    import collections

    import tensorflow as tf
    vocabulary, ids, dense, labels = _data(1)
    tf.keras.utils.set_random_seed(0)
    model = _model(layer, vocabulary, dim)
    model.fit((ids, dense), labels, batch_size=BATCH, epochs=1, verbose=0)
    # The last trace is the step fit runs (an earlier one may be a retrace).
    graph = model.train_function._list_all_concrete_functions()[-1].graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph.node)
    for function in graph.library.function:
        counts.update(node.op for node in function.node_def)
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--layers", nargs="+", default=["keras", "het"])
    parser.add_argument("--profile", choices=LAYERS,
                        help="one run of this layer, then each traced event's time a step")
    parser.add_argument("--ops", choices=LAYERS, help="each op type's count in the traced step")
    parser.add_argument("--one", choices=LAYERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.steps, args.epochs, args.dim)))
        return
    if args.ops:
        counts = traced_ops(args.ops, args.dim)
        print(f"{args.ops}: {sum(counts.values())} ops in the traced step")
        for op, count in counts.most_common():
            print(f"  {op:40s} {count:4d}")
        return
    if args.profile:
        result = run_one(args.profile, args.steps, args.epochs, args.dim, profile=True)
        print(f"{args.profile}: {result['samples_per_second']:.0f} samples/s")
        for op, (ms, count) in result["op_ms"].items():
            print(f"  {op:40s} {ms:7.3f} ms  {count:5.1f} a step")
        return
    speeds = {layer: [] for layer in args.layers}
    for repeat in range(args.repeats):
        for layer in args.layers:
            out = subprocess.run(
                [sys.executable, __file__, "--one", layer, "--steps", str(args.steps),
                 "--epochs", str(args.epochs), "--dim", str(args.dim)],
                check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            speeds[layer].append(result["samples_per_second"])
            print(f"run {repeat + 1} {layer:5s} {result['samples_per_second']:9.0f} samples/s "
                  f"losses {' '.join(f'{x:.4f}' for x in result['losses'])}", flush=True)
    medians = {layer: statistics.median(v) for layer, v in speeds.items()}
    for layer, median in medians.items():
        runs = [round(x) for x in speeds[layer]]
        print(f"{layer:5s} median {median:9.0f} samples/s  runs {runs}")
    if "keras" in medians and "het" in medians:
        print(f"het / keras: {medians['het'] / medians['keras']:.3f}x")


if __name__ == "__main__":
    main()
