"""One `het-tf train` run: build, fit, flush, evaluate, save and report, the
same steps in every mode (modes.py holds what differs)."""
import json
import os
import sys
import time

import tensorflow as tf
import tf_keras

import het_tf
from het_tf.apps.train import arguments, figures, floor_inputs
from het_tf.apps.train.checkpoints import PeriodicCheckpoints, RunExports
from het_tf.apps.train.inputs import Inputs
from het_tf.apps.train.modes import MODES, own_command
from het_tf.apps.train.wire import WireBytes
from het_tf.data import parse_stats
from het_tf.distribute.server import SERVER_IMPORTS_ENV
from het_tf.keras_layers.evaluation import as_the_caches_stand
from het_tf.keras_layers.export_versions import check_folder
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.models import EmbeddingSpec, build_model, trace_steps_as_written

# Progress is reported (and the steady-state clock started) per chunk.
PROGRESS_CHUNKS = 10


def run(args, argv):
    """Entry point of `het-tf train`; argv is the command line after `train`."""
    arguments.check(args)
    args.run_dir = arguments.run_dir(args)
    # Before anything starts: a run folder that cannot be written would
    # otherwise be found at the first export, or at the end.
    check_folder(args.run_dir, "het-tf train", "run folder")
    if not args.no_save:
        check_folder(os.path.join(args.run_dir, "export"), "het-tf train")
    if args.embedding == "tfra":  # its ops run on the cluster's tasks too
        extra = os.environ.get(SERVER_IMPORTS_ENV, "")
        os.environ[SERVER_IMPORTS_ENV] = ",".join(filter(None, [extra,
                                                                "tensorflow_recommenders_addons"]))
    mode = MODES[args.mode]()
    code = mode.launch(args, own_command(argv, args.run_dir))
    return train(args, mode) if code is None else code


def _schedule(args, batches_per_step):
    """(epochs, steps per epoch): samples split into progress chunks."""
    steps = max(1, args.samples // (args.batch_size * batches_per_step))
    epochs = min(PROGRESS_CHUNKS, steps)
    return epochs, max(1, steps // epochs)


def _build_and_compile(args, inputs, mode):
    with mode.scope():
        spec = EmbeddingSpec(args.embedding, inputs.cardinalities, args.cache_capacity,
                             args.cache_policy, args.staleness, args.optimizer,
                             args.learning_rate, args.seed, args.sync, hot_rows=args.hot_rows,
                             hot_bytes=args.hot_bytes, window=args.window,
                             scheduler=args.scheduler, max_rows=args.max_rows,
                             on_full=args.on_full, eviction=args.eviction, ttl=args.ttl,
                             admit_after=args.admit_after,
                             full_checkpoint_every=args.full_every,
                             wire_dtype=args.wire_dtype)
        model = build_model(args.model, spec, dim=args.dim)
        mode.distribute(model)
        optimizer = tf_keras.optimizers.get({
            "class_name": args.optimizer,
            "config": {"learning_rate": args.learning_rate * mode.learning_rate_factor()}})
        model.compile(spec.wrap_optimizer(optimizer), "binary_crossentropy",
                      metrics=[tf_keras.metrics.AUC(num_thresholds=2000, name="auc"),
                               tf_keras.metrics.BinaryCrossentropy(name="logloss")],
                      steps_per_execution=args.steps_per_execution, **mode.compile_options())
    trace_steps_as_written(model)  # its models branch on no tensor
    return model


def train(args, mode):
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    mode.prepare(args)  # first: it sets up TensorFlow's runtime
    epochs, steps_per_epoch = _schedule(args, mode.batches_per_step)
    steps = epochs * steps_per_epoch  # fit's: each rank's, or all ps-mode workers' together
    # Each worker reads its own stream from row 0 (in ps mode the workers
    # take steps as they come: this many on average).
    trained_per_worker = steps * mode.batches_per_step * args.batch_size // mode.num_workers
    inputs = Inputs(args, pipelines=mode.num_workers, trained_per_worker=trained_per_worker)
    os.makedirs(args.run_dir, exist_ok=True)
    model = _build_and_compile(args, inputs, mode)
    throughput = figures.Throughput(args.batch_size * steps_per_epoch)
    evaluations = floor_inputs.EvaluationTraffic(model)
    own = {"ps": "chief:0", "hybrid": "rank:0"}.get(args.mode, "local")
    progress = figures.Progress(model, own)
    hot = _use_hot_rows(model, inputs, mode, args, steps) if args.hot else {}
    train_input, eval_input, timeline_input = mode.pipelines(
        inputs, steps, model if args.lookahead else None, model if args.hot else None)
    num_workers, rank = mode.num_workers, mode.rank
    if rank == 0:
        print(f"het-tf train: {args.model} on {args.data} in {args.mode} mode "
              f"({num_workers} worker{'s' * (num_workers > 1)}), {steps} "
              f"steps of {args.batch_size}, run folder {args.run_dir}", flush=True)
    timeline = {}
    if args.timeline_samples:
        timeline = dict(validation_data=timeline_input, validation_freq=1,
                        validation_steps=max(1, args.timeline_samples // args.batch_size))
    mode.barrier()  # the wire is read while every rank trains
    # Without HetEmbedding (TF's PS path) there are no shards to count.
    counted = (lambda: figures.shard_bytes(model)) if het_embedding_layers(model) else None
    wire = WireBytes(counted) if rank == 0 else None
    # Versions while training (--export-every); the last is written after
    # the evaluation, unless the last step is already in one.
    exporter = RunExports(os.path.join(args.run_dir, "export"), args.export_every,
                          keep_versions=args.keep_versions, at_end=False, verbose=rank == 0)
    exports = [exporter] * (not args.no_save)
    # Checkpoints while training (--checkpoint-every), with the one after it.
    manager = None if args.no_save else tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model), os.path.join(args.run_dir, "checkpoint"),
        max_to_keep=1)
    saver = PeriodicCheckpoints(model, manager, mode, args.checkpoint_every)
    exports += [saver] * bool(args.checkpoint_every)
    # The timeline reads the model as the caches hold it: pushing their
    # pending updates first would change the training it measures.
    with as_the_caches_stand():
        history = model.fit(train_input, epochs=epochs, steps_per_epoch=steps_per_epoch,
                            callbacks=[throughput.callback, evaluations.callback]
                            + [progress.callback] * (rank == 0) + exports,
                            **timeline,
                            verbose=(1 if sys.stdout.isatty() else 2) if rank == 0 else 0).history
    mode.barrier()
    train_samples = steps * args.batch_size * mode.size
    result = {"config": arguments.options(args, leave_out=("run_dir",)),
              "versions": figures.versions(), "workers": num_workers,
              "train_samples": train_samples, "train_seconds": throughput.train_seconds(),
              "samples_per_second": float(mode.sum(throughput.samples_per_second())),
              "loss": history.get("loss", []), **hot, **mode.figures(model)}
    if args.drift:  # where the held-out rows were drawn
        result["held_out_position"] = inputs.held_out_position
    if wire is not None:
        result.update(wire.figures(train_samples))
    if rank == 0:
        result.update(progress.figures())
    if throughput.timeline:
        result["timeline"] = [{"seconds": t, "auc": auc} for t, auc in throughput.timeline]
    if args.eval_before_flush and args.eval_samples and rank == 0:
        # The model as the workers' caches see it, before their pending
        # updates reach the shards: the gap to the evaluation after the flush
        # is what the flush moved (docs/consistency.md).
        result["before_flush"] = figures.evaluate_steps(model, eval_input, args)
    mode.flush(model)
    result.update(figures.embedding_figures(model, ranks=mode.size))
    # For the benchmark's floor: what each cache trained, what evaluating moved.
    result.update(cached_tables=floor_inputs.cached_tables(model, evaluations),
                  evaluation_embedding_bytes=evaluations.bytes)
    if inputs.synthetic is None:
        read = {k: int(mode.sum(v)) for k, v in parse_stats(devices=mode.worker_devices()).items()}
        result.update(records_read=read["records"], malformed_records=read["malformed"])
    if args.eval_samples and rank == 0:
        result.update(figures.evaluate_once(model, inputs.evaluation()))
        if inputs.synthetic is not None:
            result["best_auc"] = figures.best_auc(inputs, result["eval_samples"])
    if not args.no_save:
        _save_and_export(model, args, result, inputs, mode, exporter, saver)
    mode.barrier()
    if rank == 0:
        result["peak_rss_bytes"] = figures.peak_memory(own)
        figures.report(result, args.run_dir)
    if not args.no_save and exporter.failed:
        first = exporter.failed[0]
        print(f"het-tf train: {len(exporter.failed)} export(s) to {exporter.folder} failed, "
              f"the first at step {first['step']}: {first['error']}; the checkpoint and "
              "metrics.json (export_failures) are written", file=sys.stderr, flush=True)
        return 1
    return 0


def _use_hot_rows(model, inputs, mode, args, steps):
    """FAE's profile of a --hot-share of this run's training batches, and
    its hot rows installed (rank 0's on every rank); returns its figures."""
    started = time.perf_counter()
    profile = het_tf.profile_hot_rows(model, inputs.train(mode.rank, mode.size),
                                      share=args.hot_share, seed=args.seed, batches=steps)
    het_tf.use_hot_rows(model, profile)
    seconds = time.perf_counter() - started
    if mode.rank == 0:
        for name, hot in profile.items():
            print(f"het-tf train: {len(hot.keys)} hot rows of '{name}' take "
                  f"{hot.coverage:.1%} of the sample's lookups; {profile.hot_sample_share:.1%} "
                  f"of its samples are hot ({seconds:.1f} s)", flush=True)
    return {"hot_profile": {"seconds": seconds, "sampled_batches": max(
        (hot.sampled_batches for hot in profile.values()), default=0),
        "hot_sample_share": profile.hot_sample_share,
        "tables": {name: {"hot_rows": len(hot.keys), "coverage": hot.coverage,
                          "distinct_ids": hot.distinct_ids}
                   for name, hot in profile.items()}}}


def _save_and_export(model, args, result, inputs, mode, exporter, saver):
    # The last step's checkpoint, unless one was saved at it already.
    last = saver.saved[-1] if saver.saved and saver.up_to_date else saver.save()
    result["checkpoint"], result["checkpoint_seconds"] = last["path"], last["seconds"]
    if args.checkpoint_every:
        result["checkpoints"] = saver.saved
    if not exporter.up_to_date:
        exporter.export()  # every rank in hybrid mode: each pushes, rank 0 writes
    if mode.rank != 0:
        return
    if exporter.exported:
        result["export_seconds"] = exporter.exported[-1]["seconds"]
    result["export"] = exporter.folder
    result["exports"] = exporter.exported
    if exporter.failed:
        result["export_failures"] = exporter.failed
    # A few held-out rows with this model's scores, for checking the newest
    # version in a process without het_tf (examples/serve_export.py).
    features, labels = next(iter(inputs.held_out().take(1)))
    rows = {k: v.numpy()[:8] for k, v in features.items()}
    scores = model.predict(rows, verbose=0).ravel()
    with open(os.path.join(args.run_dir, "examples.json"), "w") as f:
        json.dump({"features": {k: v.tolist() for k, v in rows.items()},
                   "labels": labels.numpy()[:8].tolist(), "scores": scores.tolist()}, f)
