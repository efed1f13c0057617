"""Train a HetEmbedding model on a ParameterServerStrategy cluster.

Run it as the chief of a cluster: locally with
    het-tf launch --ps 2 --workers 2 -- python examples/cluster_train.py --epochs 3
or on real hosts with each host's TF_CONFIG (see the README). The tables are
sharded over the PS tasks; every worker caches hot rows.

With --checkpoint-dir it resumes from the latest checkpoint there and saves
one per epoch; with --export-dir it exports a SavedModel; with --result-json
it writes losses and table figures (the tests read them).
"""
import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import het_tf  # noqa: E402
from het_tf import cluster  # noqa: E402
from het_tf.keras_layers import HetEmbedding, HetMetricsCallback  # noqa: E402

FIELDS = 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--cache-capacity", type=int, default=400)
    p.add_argument("--staleness", type=int, default=10)
    p.add_argument("--evaluate-steps", type=int, default=0,
                   help="evaluate on this many batches after training")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--export-dir")
    p.add_argument("--result-json")
    p.add_argument("--probe-ids", type=int, default=64,
                   help="rows 0..N-1 are reported in --result-json")
    return p.parse_args()


def dataset_fn(args):
    def make(context):
        # Each worker reads its own part of the data, as Horovod's ranks would.
        seed = context.input_pipeline_id if context else 0
        rng = np.random.default_rng(seed)
        ids = (rng.zipf(1.3, size=(8192, FIELDS)) % args.vocab).astype(np.int64)
        labels = ((ids[:, 0] + ids[:, 1]) % 2).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((ids, labels)).repeat().batch(args.batch_size)
    return make


def build_model(args):
    inputs = tf_keras.Input(shape=(FIELDS,), dtype="int64", name="ids")
    layer = HetEmbedding(args.vocab, args.dim, cache_capacity=args.cache_capacity,
                         staleness=args.staleness, name="items",
                         optimizer=tf_keras.optimizers.Adagrad(0.3))
    x = tf_keras.layers.Flatten()(layer(inputs))
    x = tf_keras.layers.Dense(16, activation="relu")(x)
    outputs = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    model = tf_keras.Model(inputs, outputs)
    # Inline evaluation through the coordinator; pss_evaluation_shards="auto"
    # (exact visitation) hangs with DatasetCreator inputs here.
    model.compile(tf_keras.optimizers.Adam(0.01), "binary_crossentropy",
                  metrics=[tf_keras.metrics.AUC(name="auc")], steps_per_execution=4,
                  pss_evaluation_shards=0)
    return model, layer


def main():
    args = parse_args()
    strategy = cluster.parameter_server_strategy()
    with strategy.scope():
        model, layer = build_model(args)
    result = {"num_ps": len(layer.table.devices)}
    manager = None
    if args.checkpoint_dir:
        checkpoint = tf.train.Checkpoint(model=model)
        manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
            print(f"resumed from {manager.latest_checkpoint}", flush=True)
            result["resumed_from"] = manager.latest_checkpoint
            result["restored_rows"] = int(layer.table.stats()["rows"])
    save_each_epoch = [tf_keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: manager.save())] if manager else []
    history = {}
    if args.epochs > 0:
        history = model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn(args)),
                            epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2,
                            callbacks=[HetMetricsCallback()] + save_each_epoch).history
    if args.evaluate_steps:
        pushed = layer.het_stats()["table_updates_applied"]
        result["evaluation"] = model.evaluate(
            tf_keras.utils.experimental.DatasetCreator(dataset_fn(args)),
            steps=args.evaluate_steps, return_dict=True, verbose=2)
        result["pushed_during_evaluation"] = layer.het_stats()["table_updates_applied"] - pushed
    layer.flush()
    stats = layer.het_stats()
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    result.update(
        losses=history.get("loss", []),
        hit_rates=history.get("items/hit_rate", []),
        stats=stats,
        table=[keys[order].tolist(), values[order].tolist(), clocks[order].tolist()],
        shard_rows=[int(dict(zip((n.decode() for n in names.numpy()), values.numpy()))["rows"])
                    for names, values in (layer.table.shard_stats(s)
                                          for s in range(layer.table.num_shards))],
        clock_sum=int(clocks.sum()),
        probe_rows=layer.table.gather(tf.range(args.probe_ids, dtype=tf.int64)).numpy().tolist(),
    )
    if args.export_dir:
        het_tf.export_saved_model(model, args.export_dir)
        probe = np.arange(3 * 8, dtype=np.int64).reshape(8, 3) % args.vocab
        result["export_probe"] = probe.tolist()
        result["export_scores"] = model.predict(probe, verbose=0).ravel().tolist()
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f)
    print(f"losses {[round(x, 4) for x in result['losses']]}, hit rate "
          f"{stats.get('hit_rate', 0):.3f}, rows per PS shard {result['shard_rows']}", flush=True)


if __name__ == "__main__":
    main()
