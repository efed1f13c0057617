"""Train a HetEmbedding model on a ParameterServerStrategy cluster.

Run it as the chief of a cluster: locally with
    het-tf launch --ps 2 --workers 2 -- python examples/cluster_train.py --epochs 3
or on real hosts with each host's TF_CONFIG (see the README). The tables are
sharded over the PS tasks; every worker caches hot rows.

With --checkpoint-dir it resumes from the latest checkpoint there and saves
one per epoch; with --export-dir it exports a SavedModel (with
--export-every, numbered versions while it trains); with --result-json
it writes losses and table figures (the tests read them). Run as an
`evaluator` task (`het-tf launch --evaluator`), it evaluates each checkpoint
the chief writes, with tf_keras' SidecarEvaluator and in-process tables.
"""
import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from toy_model import (  # noqa: E402
    add_arguments,
    build_model,
    export_probe,
    serving_inputs,
    skewed_data,
    version_exports,
)

import het_tf  # noqa: E402
from het_tf import cluster  # noqa: E402
from het_tf.keras_layers import HetMetricsCallback  # noqa: E402
from het_tf.models import trace_steps_as_written  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--steps-per-epoch", type=int, default=40)
    p.add_argument("--evaluate-steps", type=int, default=0,
                   help="evaluate on this many batches after training")
    p.add_argument("--result-json")
    p.add_argument("--probe-ids", type=int, default=64,
                   help="rows 0..N-1 are reported in --result-json")
    p.add_argument("--lookahead", action="store_true",
                   help="each worker's pipeline stages the next batch's ids, and each step "
                   "prefetches its rows while it computes (het_tf.lookahead)")
    return p.parse_args()


def dataset_fn(args, lookahead_model=None):
    workers = len(cluster.tf_config()["cluster"].get("worker", [])) or 1

    def make(context):
        # Each worker reads its own part of the data, as Horovod's ranks
        # would. Not by context.input_pipeline_id: ParameterServerStrategy
        # says pipeline 0 of 1 on every worker, and traces this function
        # once for all of them, so the worker's index is a value TensorFlow
        # supplies where the dataset is made.
        ids, labels = skewed_data(0, 8192 * workers, args)
        data = tf.data.Dataset.from_tensor_slices((ids, labels))
        if context is not None and workers > 1:
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            data = data.shard(workers, tf.cast(index, tf.int64))
        data = data.repeat().batch(args.batch_size)
        return data if lookahead_model is None else het_tf.lookahead(data, lookahead_model)
    return make


def compiled_model(args):
    model, layer = build_model(args)
    # Inline evaluation through the coordinator; pss_evaluation_shards="auto"
    # (exact visitation) hangs with DatasetCreator inputs here.
    model.compile(tf_keras.optimizers.Adam(0.01), "binary_crossentropy",
                  metrics=[tf_keras.metrics.AUC(name="auc")], steps_per_execution=4,
                  pss_evaluation_shards=0)
    trace_steps_as_written(model)  # a first step in seconds: nothing branches on a tensor
    return model, layer


def run_evaluator(args):
    """Evaluates each checkpoint of the chief as it appears, up to the last
    epoch's. The checkpoint holds whole tables, so no cluster is needed."""
    model, _ = compiled_model(args)
    ids, labels = skewed_data(99, 1024, args)
    evaluations = []
    record = tf_keras.callbacks.LambdaCallback(
        on_test_end=lambda logs: evaluations.append(dict(logs or {})))
    tf_keras.utils.SidecarEvaluator(
        model, tf.data.Dataset.from_tensor_slices((ids, labels)).batch(args.batch_size),
        checkpoint_dir=args.checkpoint_dir, steps=8, max_evaluations=args.epochs,
        callbacks=[record]).start()
    if args.result_json:
        with open(args.result_json + ".evaluator", "w") as f:
            json.dump({"evaluations": evaluations}, f)


def main():
    args = parse_args()
    if cluster.tf_config()["task"]["type"] == "evaluator":
        return run_evaluator(args)
    strategy = cluster.parameter_server_strategy()
    with strategy.scope():
        model, layer = compiled_model(args)
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
    if args.hot_rows:
        # FAE under ParameterServerStrategy: the profile's rows pinned in
        # every worker's cache (docs/fae.md).
        ids, _ = skewed_data(0, 8192, args)
        profile = het_tf.profile_hot_rows(
            model, tf.data.Dataset.from_tensor_slices(ids).batch(args.batch_size), share=0.5)
        het_tf.use_hot_rows(model, profile)
        result["hot_keys"] = layer.hot_keys.tolist()
    history, version_scores = {}, {}
    if args.export_every:
        save_each_epoch += version_exports(args, model, version_scores)
    if args.epochs > 0:
        training = dataset_fn(args, model if args.lookahead else None)
        history = model.fit(tf_keras.utils.experimental.DatasetCreator(training),
                            epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2,
                            callbacks=[HetMetricsCallback()] + save_each_epoch).history
    if args.evaluate_steps:
        layer.flush()  # as evaluate does first: what it pushes after is its lookups'
        pushed = layer.het_stats()["table_updates_applied"]
        result["evaluation"] = model.evaluate(
            tf_keras.utils.experimental.DatasetCreator(dataset_fn(args)),
            steps=args.evaluate_steps, return_dict=True, verbose=2)
        result["pushed_during_evaluation"] = layer.het_stats()["table_updates_applied"] - pushed
    if args.hot_rows:
        # Every worker's cache still holds every pinned row: an evaluation
        # lookup of them (which changes nothing) finds each cached, up to
        # date (a hit) or behind the shard (refreshed), on every worker.
        before = layer.het_stats()
        for device in layer.cache.worker_devices:
            with tf.device(device):
                layer.cache.lookup(tf.constant(layer.hot_keys), training=False)
        after = layer.het_stats()
        result["pinned_found"] = sum(after[f"cache_{k}"] - before[f"cache_{k}"]
                                     for k in ("hits", "stale_refreshes"))
    layer.flush()
    stats = layer.het_stats()
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    result.update(
        losses=history.get("loss", []),
        hit_rates=history.get("items/hit_rate", []),
        stats=stats,
        table=[keys[order].tolist(), values[order].tolist(), clocks[order].tolist()],
        shard_rows=[layer.table.shard_rows(s) for s in range(layer.table.num_shards)],
        clock_sum=int(clocks.sum()),
        probe_rows=layer.table.gather(tf.range(args.probe_ids, dtype=tf.int64)).numpy().tolist(),
    )
    if args.export_every:
        result.update(export_inputs=serving_inputs(export_probe(args)),
                      version_scores=version_scores)
    elif args.export_dir:
        het_tf.export_saved_model(model, args.export_dir)
        probe = export_probe(args)
        result["export_inputs"] = serving_inputs(probe)
        result["export_scores"] = model.predict(probe, verbose=0).ravel().tolist()
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f)
    print(f"losses {[round(x, 4) for x in result['losses']]}, hit rate "
          f"{stats.get('hit_rate', 0):.3f}, rows per PS shard {result['shard_rows']}", flush=True)


if __name__ == "__main__":
    main()
