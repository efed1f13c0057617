"""`het-tf train`: trains WDL, DeepFM or DCN on Criteo-shaped data, locally,
on a ParameterServerStrategy cluster or in hybrid mode, then reports AUC,
logloss, throughput, cache hit rate and embedding traffic, and writes a
checkpoint, an exported SavedModel and metrics.json to a run folder.

In ps and hybrid mode without a TF_CONFIG (or HET_TF_PS), it starts a local
cluster on 127.0.0.1 and runs itself as that cluster's chief (or ranks).
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

MODES = ("local", "ps", "hybrid")
# Progress is reported (and the steady-state clock started) per chunk.
PROGRESS_CHUNKS = 10
# Without --eval-data, the last batch of lines in every this many is held out.
HOLD_OUT_EVERY = 20
DEFAULT_DIM = 16
# What argparse and the het-tf command add to the parsed options.
_COMMAND_FIELDS = ("run", "command_name", "train_argv")


def options(args, leave_out=()):
    """The parsed options of a het-tf command, for the record."""
    return {k: v for k, v in vars(args).items() if k not in _COMMAND_FIELDS + tuple(leave_out)}


def default_run_dir(name):
    """runs/NAME-TIME under the current folder."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.abspath(os.path.join("runs", f"{name}-{stamp}"))


def _cache_capacity(text):
    value = float(text)
    if value < 0 or (value >= 1 and not value.is_integer()):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a fraction in (0, 1) of the vocabulary, a row count, or 0 for no "
            "cache")
    return value if 0 < value < 1 else int(value)


def _staleness(text):
    """'auto', None (unbounded) or an int, checked by the layer's own rule."""
    from het_tf.runtime.config import AUTO, UNBOUNDED, parse_staleness

    if text.strip().lower() == AUTO:
        return AUTO
    try:
        bound = parse_staleness(text, "--staleness")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if bound == UNBOUNDED else bound


def _positive(text):
    value = int(float(text))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number")
    return value


def add_arguments(p):
    p.add_argument("--model", choices=("wdl", "deepfm", "dcn"), default="wdl")
    p.add_argument("--data", default="synthetic",
                   help="'synthetic', or Criteo TSV / Parquet (*.parquet) files: a path or glob")
    p.add_argument("--eval-data", help="held-out files; by default 1 batch in 20 of --data is "
                   "held out (synthetic data has its own held-out stream)")
    p.add_argument("--mode", choices=MODES, default="local")
    p.add_argument("--ps", type=_positive, default=1, help="PS tasks of a local cluster")
    p.add_argument("--workers", type=_positive, default=2,
                   help="workers (ps mode) or Horovod ranks (hybrid mode) of a local cluster")
    p.add_argument("--link", metavar="RATE",
                   help="ps mode's local cluster only: each task in a network namespace of its "
                   "own behind a tc-shaped link of RATE, such as 100mbit (needs root; "
                   "otherwise loopback, with a message)")
    p.add_argument("--embedding", choices=("het", "keras", "tfra"), default="het",
                   help="'keras' trains tf_keras.layers.Embedding instead, 'tfra' "
                   "TensorFlow Recommenders-Addons' dynamic embedding (baselines)")
    p.add_argument("--cache-capacity", type=_cache_capacity, default=0.1,
                   help="rows cached per worker: a fraction of the vocabulary, a row count, "
                   "or 0 for no cache (default 0.1)")
    p.add_argument("--cache-policy", choices=("lfu", "lru", "lfu_opt"), default="lfu")
    p.add_argument("--staleness", type=_staleness, default="auto",
                   help="bound on cached rows' staleness in updates, 'inf', or 'auto' (the "
                   "default: up to 100, and at most a tenth of each worker's steps so far)")
    p.add_argument("--samples", type=_positive, default=1_000_000,
                   help="training samples, all workers together")
    p.add_argument("--eval-samples", type=int, default=100_000,
                   help="held-out samples to evaluate on (0: skip)")
    p.add_argument("--eval-before-flush", action="store_true",
                   help="also evaluate before the caches' pending updates are pushed, as the "
                   "workers' own copies stand (metrics.json 'before_flush')")
    p.add_argument("--batch-size", type=_positive, default=1024, help="per worker")
    p.add_argument("--dim", type=_positive, default=DEFAULT_DIM, help="embedding size")
    p.add_argument("--optimizer", choices=("adagrad", "adam", "sgd", "ftrl"), default="adagrad",
                   help="for the dense weights and the tables")
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--scale", type=float, default=0.01,
                   help="synthetic data: scale of Criteo's large fields (1 = 33.76M ids)")
    p.add_argument("--zipf", type=float, default=1.1, help="synthetic data: Zipf exponent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--on-malformed", choices=("skip", "fail"), default="skip")
    p.add_argument("--steps-per-execution", type=_positive, default=8)
    p.add_argument("--run-dir", help="where to write the run (default runs/MODEL-MODE-TIME)")
    p.add_argument("--no-save", action="store_true",
                   help="write metrics.json only: no checkpoint, no export")


# ----- launching -----

def _run_dir(args):
    if args.run_dir:
        return os.path.abspath(args.run_dir)
    return default_run_dir(f"{args.model}-{args.mode}")


def run(args, argv):
    """Entry point of `het-tf train`; argv is the command line after `train`."""
    _check(args)
    # TensorFlow's C++ info logs (server configs, CPU features) drown the
    # progress; HET's own figures are printed. TF_CPP_MIN_LOG_LEVEL=0 shows them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args.run_dir = _run_dir(args)
    if args.embedding == "tfra":  # its ops run on the cluster's tasks too
        from het_tf.distribute.server import SERVER_IMPORTS_ENV

        extra = os.environ.get(SERVER_IMPORTS_ENV, "")
        os.environ[SERVER_IMPORTS_ENV] = ",".join(filter(None, [extra,
                                                                "tensorflow_recommenders_addons"]))
    own_argv = [sys.executable, "-m", "het_tf.apps.cli", "train", *argv, "--run-dir", args.run_dir]
    if args.mode == "ps":
        from het_tf.apps import launch
        from het_tf.distribute import server

        if not os.environ.get("TF_CONFIG"):
            return launch.launch(args.ps, args.workers, own_argv, link=args.link)
        task = server.tf_config()["task"]["type"]
        if task in server.SERVER_JOBS:
            return server.serve()
        if task != "chief":
            raise ValueError(f"het-tf train runs as the chief, ps or worker task, not {task!r}")
    if args.mode == "hybrid":
        from het_tf.apps import launch
        from het_tf.distribute import horovod

        if not os.environ.get(horovod.PS_ENV) and not os.environ.get("TF_CONFIG"):
            return launch.launch(args.ps, args.workers, own_argv, hybrid=True)
    return _train(args)


def _evaluate(model, eval_input, args):
    steps = max(1, args.eval_samples // args.batch_size)
    evaluation = model.evaluate(eval_input, steps=steps, return_dict=True, verbose=0)
    return dict(auc=float(evaluation["auc"]), logloss=float(evaluation["logloss"]),
                eval_samples=steps * args.batch_size)


def _check(args):
    if args.data != "synthetic" and not _matches(args.data):
        raise ValueError(f"--data {args.data!r}: no such file (give 'synthetic' or Criteo "
                         "TSV / Parquet files)")
    if args.eval_data and not _matches(args.eval_data):
        raise ValueError(f"--eval-data {args.eval_data!r}: no such file")
    if args.eval_samples < 0:
        raise ValueError(f"--eval-samples must be >= 0, got {args.eval_samples}")
    if not (args.learning_rate > 0 and math.isfinite(args.learning_rate)):
        raise ValueError(f"--learning-rate must be > 0, got {args.learning_rate}")
    if args.link:
        from het_tf.apps.link import parse_rate

        if args.mode != "ps":
            raise ValueError("--link shapes the local cluster that ps mode starts by itself; "
                             f"it does not apply to {args.mode} mode")
        parse_rate(args.link)
    if args.samples < args.batch_size:
        raise ValueError(f"--samples ({args.samples}) is less than one batch "
                         f"({args.batch_size})")


def _matches(pattern):
    import glob

    return bool(glob.glob(pattern))


# ----- data -----

class Inputs:
    """The training and held-out pipelines for every mode."""

    def __init__(self, args):
        from het_tf.data import KAGGLE_CARDINALITIES, SyntheticCriteo

        self.args = args
        self.synthetic = None
        if args.data == "synthetic":
            self.synthetic = SyntheticCriteo(args.seed, args.scale, args.zipf)
            self.cardinalities = self.synthetic.cardinalities
        else:
            self.cardinalities = KAGGLE_CARDINALITIES

    def _files(self, pattern, num_shards, shard_index):
        from het_tf.data import criteo_parquet_dataset, criteo_tsv_dataset

        read = criteo_parquet_dataset if pattern.endswith(".parquet") else criteo_tsv_dataset
        return read(pattern, self.args.batch_size, on_malformed=self.args.on_malformed,
                    num_shards=num_shards, shard_index=shard_index)

    def _split(self, num_shards, shard_index, held_out):
        """--data's batches without (or only) the held-out ones."""
        data = self._files(self.args.data, num_shards, shard_index).enumerate()
        last = HOLD_OUT_EVERY - 1
        return (data.filter(lambda i, _: (i % HOLD_OUT_EVERY == last) == held_out)
                .map(lambda _, batch: batch))

    def train(self, shard_index=0, num_shards=1):
        """Endless training batches of one worker (or rank)."""
        if self.synthetic is not None:
            return self.synthetic.dataset(self.args.batch_size, stream=shard_index)
        if self.args.eval_data:
            return self._files(self.args.data, num_shards, shard_index).repeat()
        return self._split(num_shards, shard_index, held_out=False).repeat()

    def held_out(self, shard_index=0, num_shards=1):
        from het_tf.data.synthetic import HELD_OUT_STREAM

        if self.synthetic is not None:
            return self.synthetic.dataset(self.args.batch_size,
                                          stream=HELD_OUT_STREAM + shard_index)
        if self.args.eval_data:
            return self._files(self.args.eval_data, num_shards, shard_index).repeat()
        return self._split(num_shards, shard_index, held_out=True).repeat()


# ----- figures -----

class Throughput:
    """Steady-state samples/s: from the end of the first progress chunk (past
    tracing and cache warm-up) to the end of training. Epoch-level, as
    ParameterServerStrategy allows no batch-level callbacks."""

    def __init__(self, samples_per_epoch):
        import tf_keras

        self.samples_per_epoch = samples_per_epoch
        self.times = []
        outer = self

        class Callback(tf_keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                outer.times.append(time.perf_counter())

        self.callback = Callback()

    def samples_per_second(self):
        if len(self.times) < 2:
            return float("nan")
        return (len(self.times) - 1) * self.samples_per_epoch / (self.times[-1] - self.times[0])


def _embedding_figures(model):
    """Hit rate, embedding bytes per sample and table rows of a model's
    HetEmbedding layers, from their counters."""
    from het_tf.keras_layers.het_embedding import het_embedding_layers

    layers = het_embedding_layers(model)
    if not layers:
        return {}
    from het_tf.runtime.cache import hit_rate

    totals = {"hits": 0, "unique_keys": 0, "embedding_bytes": 0, "table_rows": 0}
    samples = 0
    for layer in layers:
        stats = layer.het_stats()
        totals["hits"] += stats.get("cache_hits", 0)
        totals["unique_keys"] += stats.get("cache_unique_keys", 0)
        totals["embedding_bytes"] += stats["embedding_bytes"]
        totals["table_rows"] += stats["table_rows"]
        samples = max(samples, stats["samples"])
    traffic = totals["embedding_bytes"]
    figures = {"embedding_bytes": int(traffic), "table_rows": int(totals["table_rows"]),
               "embedding_bytes_per_sample": traffic / max(samples, 1)}
    if totals["unique_keys"]:
        figures["cache_hit_rate"] = hit_rate(totals)
    return figures


def _versions():
    import tensorflow as tf
    import tf_keras

    import het_tf

    return {"het_tf": het_tf.__version__, "tensorflow": tf.__version__,
            "tf_keras": tf_keras.__version__, "python": sys.version.split()[0]}


# ----- training -----

def _build(args, inputs):
    import tf_keras

    from het_tf.models import EmbeddingSpec, build_model

    spec = EmbeddingSpec(args.embedding, inputs.cardinalities, args.cache_capacity,
                         args.cache_policy, args.staleness, args.optimizer, args.learning_rate,
                         args.seed)
    model = build_model(args.model, spec, dim=args.dim)
    model.embedding_spec = spec
    return model, tf_keras


def _compile(model, args, tf_keras, lr_factor=1.0, **kwargs):
    optimizer = tf_keras.optimizers.get({"class_name": args.optimizer,
                                         "config": {"learning_rate": args.learning_rate *
                                                    lr_factor}})
    model.compile(model.embedding_spec.wrap_optimizer(optimizer), "binary_crossentropy",
                  metrics=[tf_keras.metrics.AUC(num_thresholds=2000, name="auc"),
                           tf_keras.metrics.BinaryCrossentropy(name="logloss")],
                  steps_per_execution=args.steps_per_execution, **kwargs)


def _schedule(args, workers):
    """(epochs, steps per epoch): samples split into progress chunks."""
    steps = max(1, args.samples // (args.batch_size * workers))
    epochs = min(PROGRESS_CHUNKS, steps)
    return epochs, max(1, steps // epochs)


def _train(args):
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    strategy = None
    if args.mode == "ps":  # first: it sets up TensorFlow's runtime
        from het_tf.distribute import server

        strategy = server.parameter_server_strategy(_partitioner(args))
    inputs = Inputs(args)
    os.makedirs(args.run_dir, exist_ok=True)
    hybrid = None
    rank, size = 0, 1
    if args.mode == "hybrid":
        from het_tf import hybrid

        hybrid.init()  # before the model is built
        rank, size = hybrid.rank(), hybrid.size()
    # Under the strategy a step is one worker's batch; a hybrid step is one
    # batch on every rank.
    epochs, steps_per_epoch = _schedule(args, 1 if strategy is not None else size)
    if strategy is not None:
        num_workers = strategy.extended._num_workers
        with strategy.scope():
            model, tf_keras = _build(args, inputs)
            _compile(model, args, tf_keras, pss_evaluation_shards=0)
    else:
        num_workers = size
        model, tf_keras = _build(args, inputs)
        if hybrid:
            hybrid.distribute(model)
        # Horovod's convention: the dense learning rate scales with the ranks.
        _compile(model, args, tf_keras, lr_factor=size)

    throughput = Throughput(args.batch_size * steps_per_epoch)
    callbacks = [throughput.callback]
    if strategy is not None:
        train_input = tf_keras.utils.experimental.DatasetCreator(
            lambda ctx: inputs.train(ctx.input_pipeline_id, ctx.num_input_pipelines))
        eval_input = tf_keras.utils.experimental.DatasetCreator(
            lambda ctx: inputs.held_out(ctx.input_pipeline_id, ctx.num_input_pipelines))
    else:
        train_input = inputs.train(rank, size)
        eval_input = inputs.held_out()
    if rank == 0:
        print(f"het-tf train: {args.model} on {args.data} in {args.mode} mode "
              f"({num_workers} worker{'s' * (num_workers > 1)}), {epochs * steps_per_epoch} "
              f"steps of {args.batch_size}, run folder {args.run_dir}", flush=True)
    started = time.perf_counter()
    history = model.fit(train_input, epochs=epochs, steps_per_epoch=steps_per_epoch,
                        callbacks=callbacks, verbose=(1 if sys.stdout.isatty() else 2)
                        if rank == 0 else 0).history
    train_seconds = time.perf_counter() - started
    samples_per_second = throughput.samples_per_second()
    if hybrid:
        samples_per_second = float(hybrid.allreduce_sum(samples_per_second))
    result = {"config": options(args, leave_out=("run_dir",)),
              "versions": _versions(), "workers": num_workers,
              "train_samples": epochs * steps_per_epoch * args.batch_size * size,
              "train_seconds": train_seconds, "samples_per_second": samples_per_second,
              "loss": history.get("loss", [])}
    if args.eval_before_flush and args.eval_samples and rank == 0:
        # The model as the workers' caches see it, before their pending
        # updates reach the shards: the gap to the evaluation after the flush
        # is what the flush moved (docs/consistency.md).
        result["before_flush"] = _evaluate(model, eval_input, args)
    if hybrid:
        hybrid.flush_and_clear(model)
        hybrid.barrier()
    else:
        from het_tf.keras_layers.het_embedding import het_embedding_layers

        for layer in het_embedding_layers(model):
            layer.flush()
    result.update(_embedding_figures(model))
    if inputs.synthetic is None:
        from het_tf.data import parse_stats

        devices = ([f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(num_workers)]
                   if strategy is not None else (None,))
        read = parse_stats(devices=devices)
        if hybrid:
            read = {k: int(hybrid.allreduce_sum(v)) for k, v in read.items()}
        result.update(records_read=read["records"], malformed_records=read["malformed"])
    if args.eval_samples and rank == 0:
        result.update(_evaluate(model, eval_input, args))
        if inputs.synthetic is not None:
            result["best_auc"] = _best_auc(inputs, result["eval_samples"])
    if not args.no_save:
        _save_and_export(model, args, result, inputs, hybrid, rank)
    if hybrid:
        hybrid.barrier()
    if rank == 0:
        _report(result, args.run_dir)
    return 0


def _partitioner(args):
    if args.embedding != "keras":
        return None
    import tensorflow as tf

    from het_tf.distribute import server

    # TensorFlow's own PS path: the Keras embedding split over the PS tasks.
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256 << 10, max_shards=len(server.tf_config()["cluster"]["ps"]))


def _best_auc(inputs, num_rows):
    """AUC of the hidden model's own logits on the held-out rows: the most
    any model can reach on this data."""
    from het_tf.data.synthetic import HELD_OUT_STREAM

    _, labels, logits = inputs.synthetic.rows(HELD_OUT_STREAM, 0, num_rows, with_logits=True)
    return float(roc_auc(labels.numpy(), logits.numpy()))


def roc_auc(labels, scores):
    """Exact AUC by ranks, ties averaged."""
    import numpy as np

    labels = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = np.asarray(scores)[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(average, counts)
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    return (ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def _save_and_export(model, args, result, inputs, hybrid, rank):
    import tensorflow as tf

    import het_tf

    checkpoint_dir = os.path.join(args.run_dir, "checkpoint")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), checkpoint_dir,
                                         max_to_keep=1)
    result["checkpoint"] = hybrid.save(model, manager) if hybrid else manager.save()
    if rank != 0:
        return
    export_dir = os.path.join(args.run_dir, "export")
    het_tf.export_saved_model(model, export_dir)
    result["export"] = export_dir
    # A few held-out rows with this model's scores, for checking the export
    # in a process without het_tf (examples/serve_export.py).
    features, labels = next(iter(inputs.held_out().take(1)))
    rows = {k: v.numpy()[:8] for k, v in features.items()}
    scores = model.predict(rows, verbose=0).ravel()
    with open(os.path.join(args.run_dir, "examples.json"), "w") as f:
        json.dump({"features": {k: v.tolist() for k, v in rows.items()},
                   "labels": labels.numpy()[:8].tolist(), "scores": scores.tolist()}, f)


def _report(result, run_dir):
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)

    def fmt(key, spec):
        value = result.get(key)
        return "n/a" if value is None else format(value, spec)

    print(f"het-tf train: AUC {fmt('auc', '.4f')} (best reachable {fmt('best_auc', '.4f')}), "
          f"logloss {fmt('logloss', '.4f')}, {fmt('samples_per_second', ',.0f')} samples/s, "
          f"cache hit rate {fmt('cache_hit_rate', '.3f')}, "
          f"{fmt('embedding_bytes_per_sample', ',.0f')} embedding bytes/sample", flush=True)
    saved = "" if result.get("export") is None else ", checkpoint/ and export/"
    print(f"het-tf train: wrote {run_dir}/metrics.json{saved}", flush=True)
