"""What `het-tf train` measures and reports: throughput, the embedding
layers' traffic and hit rate, held-out AUC and logloss, metrics.json."""
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.apps.launch import LOCAL_TASKS_ENV
from het_tf.data.synthetic import HELD_OUT_STREAM
from het_tf.keras_layers.evaluation import as_the_caches_stand
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.cache import hit_rate
from het_tf.training.hybrid_training import het_allocation

# Keras's clipping of probabilities in binary cross-entropy.
LOGLOSS_EPSILON = 1e-7


class Throughput:
    """Training time at the end of each progress chunk, without the time
    spent evaluating the timeline's held-out slice there; and that slice's
    AUC at each. Epoch-level, as ParameterServerStrategy allows no
    batch-level callbacks."""

    def __init__(self, samples_per_epoch):
        self.samples_per_epoch = samples_per_epoch
        self.times = []  # training seconds at each chunk's end
        self.timeline = []  # (training seconds, held-out AUC)
        outer = self
        clock = {"start": None, "evaluating": 0.0, "since": None}

        def now():
            return time.perf_counter() - clock["start"] - clock["evaluating"]

        class Callback(tf_keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                clock["start"] = time.perf_counter()

            def on_test_begin(self, logs=None):
                clock["since"] = time.perf_counter()

            def on_test_end(self, logs=None):
                clock["evaluating"] += time.perf_counter() - clock["since"]

            def on_epoch_end(self, epoch, logs=None):
                outer.times.append(now())
                if logs and "val_auc" in logs:
                    outer.timeline.append((outer.times[-1], float(logs["val_auc"])))

        self.callback = Callback()

    def samples_per_second(self):
        """Steady state: from the end of the first chunk (past tracing and
        cache warm-up) to the end of training."""
        if len(self.times) < 2:
            return float("nan")
        return (len(self.times) - 1) * self.samples_per_epoch / (self.times[-1] - self.times[0])

    def train_seconds(self):
        return self.times[-1] if self.times else float("nan")


def table_counts(stats):
    """The rows the tables hold, and those evicted, expired and not admitted
    so far, over the het_stats() of every layer."""
    counts = {"table_rows": sum(int(s["table_rows"]) for s in stats)}
    for name in ("rows_evicted", "rows_expired", "ids_not_admitted"):
        counts[name] = sum(int(s.get(f"table_{name}", 0)) for s in stats)
    return counts


def embedding_figures(model, ranks=1):
    """Hit rate, embedding bytes per sample and table rows of a model's
    HetEmbedding layers, from their counters. A layer's samples are this
    process's; a cache counts this process's traffic, but a table's shards
    count every client's, so with `ranks` Horovod ranks a table's bytes
    are per `ranks` times as many samples."""
    layers = het_embedding_layers(model)
    if not layers:
        return {}
    totals = {"hits": 0, "unique_keys": 0, "prefetch_hits": 0}
    traffic, per_sample = 0, 0.0
    # Per sample, where a layer has them: FAE's exchange between the ranks
    # and Herald's ids shared between them (both in embedding_bytes), and
    # the rows Herald's plan read directly or cached for its window.
    shares = {"hot_bytes_exchanged": "hot_bytes_per_sample", "plan_bytes": "plan_bytes_per_sample",
              "plan_direct_keys": "plan_direct_keys_per_sample",
              "plan_ahead_keys": "plan_ahead_keys_per_sample"}
    figures = {}
    # Rows the caches fetched per sample: unlike the hit rate, comparable
    # when the ids a step looks up change, as the allocation changes them.
    misses = 0.0
    every_stats = [layer.het_stats() for layer in layers]
    for stats in every_stats:
        for counter in ("hits", "unique_keys", "prefetch_hits"):
            totals[counter] += stats.get(f"cache_{counter}", 0)
        samples = max(stats["samples"], 1) * (1 if "cache_hits" in stats else ranks)
        if "cache_hits" in stats:
            misses += (stats["cache_unique_keys"] - stats["cache_hits"]) / samples
        traffic += stats["embedding_bytes"]
        per_sample += stats["embedding_bytes"] / samples
        for stat, figure in shares.items():
            if stat in stats:
                figures[figure] = figures.get(figure, 0) + stats[stat] / samples
    figures.update({"embedding_bytes": int(traffic), **table_counts(every_stats),
                    "table_rows_per_task": rows_per_task(layers),
                    "embedding_bytes_per_sample": per_sample})
    allocation = het_allocation(model)
    if allocation is not None:  # Herald's: summaries, scores and the samples moved
        stats = allocation.stats()
        samples = max(stats["allocation_samples"], 1)
        figures["allocation_bytes_per_sample"] = stats["allocation_bytes"] / samples
        figures["allocation_moved_share"] = stats["allocation_moved"] / samples
        figures["embedding_bytes"] += stats["allocation_bytes"]
        figures["embedding_bytes_per_sample"] += stats["allocation_bytes"] / samples
    if totals["unique_keys"]:
        figures["cache_hit_rate"] = hit_rate(totals)
        figures["cache_misses_per_sample"] = misses
        # Misses the lookahead fetched before their step (het_tf.lookahead).
        figures["prefetch_hit_rate"] = totals["prefetch_hits"] / totals["unique_keys"]
    return figures


def rows_per_task(layers):
    """Rows each task holds, over every table: {"ps:0": rows, ...}, named
    as peak_memory names processes ("local" for shards of this process)."""
    rows = {}
    for layer in layers:
        table = layer.table
        with tf.init_scope():
            for shard, device in enumerate(table.devices):
                spec = tf.DeviceSpec.from_string(device or "")
                task = f"{spec.job}:{spec.task or 0}" if spec.job else "local"
                rows[task] = rows.get(task, 0) + table.shard_rows(shard)
    return dict(sorted(rows.items()))


def shard_bytes(model):
    """Bytes the table shards of a model's HetEmbedding layers have received
    and sent so far, from every client."""
    return sum(stats["table_bytes_sent"] + stats["table_bytes_received"]
               for stats in (layer.het_stats() for layer in het_embedding_layers(model)))


def versions():
    return {"het_tf": het_tf.__version__, "tensorflow": tf.__version__,
            "tf_keras": tf_keras.__version__, "python": sys.version.split()[0]}


def evaluate_steps(model, eval_input, args):
    """Keras's evaluation of --eval-samples rows of endless held-out input,
    run where the model trains (on the workers in ps mode, so through their
    caches); the AUC is Keras's (2,000 thresholds)."""
    steps = max(1, args.eval_samples // args.batch_size)
    with as_the_caches_stand():
        evaluation = model.evaluate(eval_input, steps=steps, return_dict=True, verbose=0)
    return dict(auc=float(evaluation["auc"]), logloss=float(evaluation["logloss"]),
                eval_samples=steps * args.batch_size)


def evaluate_once(model, batches):
    """Exact AUC and logloss of the model on finite held-out batches, each
    row scored once in this process; eval_samples is how many rows."""
    score = tf.function(lambda features: model(features, training=False), reduce_retracing=True)
    labels, scores = [], []
    for features, batch_labels in batches:
        scores.append(score(features).numpy().ravel())
        labels.append(batch_labels.numpy().ravel())
    if not labels:
        raise ValueError("the held-out data has no rows to evaluate")
    labels, scores = np.concatenate(labels), np.concatenate(scores).astype(np.float64)
    p = np.clip(scores, LOGLOSS_EPSILON, 1 - LOGLOSS_EPSILON)
    logloss = -np.mean(labels * np.log(p) + (1 - labels) * np.log1p(-p))
    return dict(auc=float(roc_auc(labels, scores)), logloss=float(logloss),
                eval_samples=int(len(labels)))


def best_auc(inputs, num_rows):
    """AUC of the hidden model's own logits on the held-out rows: the most
    any model can reach on this data."""
    _, labels, logits = inputs.synthetic.rows(HELD_OUT_STREAM, 0, num_rows, with_logits=True,
                                              position=inputs.held_out_position)
    return float(roc_auc(labels.numpy(), logits.numpy()))


def roc_auc(labels, scores):
    """Exact AUC by ranks, ties averaged."""
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


def peak_memory(own_name):
    """Peak resident bytes (VmHWM) of this process and of the local
    cluster's server tasks that het-tf launch started, by task name."""
    return task_memory(own_name, "VmHWM")


def task_memory(own_name, field="VmRSS"):
    """A /proc/PID/status memory field, in bytes, of this process and of the
    local cluster's server tasks, by task name."""
    tasks = dict(json.loads(os.environ.get(LOCAL_TASKS_ENV, "{}")), **{own_name: "self"})
    found = {}
    for name, pid in sorted(tasks.items()):
        try:
            with open(f"/proc/{pid}/status") as f:
                found[name] = next(int(line.split()[1]) * 1024 for line in f
                                   if line.startswith(field + ":"))
        except (OSError, StopIteration):
            pass  # gone, or another kernel's /proc
    return found


class Progress:
    """How a long run's tables and memory move: at each progress chunk's end
    the rows the tables hold and the rows evicted, expired and not admitted
    so far; every `interval` seconds each local task's resident memory
    (VmRSS), sampled by a thread, so that a run's memory can be seen to
    level off (docs/scale.md)."""

    def __init__(self, model, own_name, interval=2.0):
        self.chunks = []  # {"seconds", "table_rows", "rows_evicted", ...}
        self.memory = []  # {"seconds", "rss_bytes": {task: bytes}}
        layers = het_embedding_layers(model)
        outer = self
        clock = {"start": None}
        stop = threading.Event()

        def sample():
            while not stop.wait(interval):
                outer.memory.append({"seconds": time.perf_counter() - clock["start"],
                                     "rss_bytes": task_memory(own_name)})

        thread = threading.Thread(target=sample, daemon=True)

        class Callback(tf_keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                clock["start"] = time.perf_counter()
                thread.start()

            def on_epoch_end(self, epoch, logs=None):
                outer.chunks.append({"seconds": time.perf_counter() - clock["start"],
                                     **table_counts([layer.het_stats() for layer in layers])})

            def on_train_end(self, logs=None):
                stop.set()
                thread.join()

        self.callback = Callback()

    def figures(self):
        return {"progress": self.chunks, "memory_timeline": self.memory}


def report(result, run_dir):
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)

    def fmt(key, spec):
        value = result.get(key)
        return "n/a" if value is None else format(value, spec)

    print(f"het-tf train: AUC {fmt('auc', '.4f')} (best reachable {fmt('best_auc', '.4f')}), "
          f"logloss {fmt('logloss', '.4f')}, {fmt('samples_per_second', ',.0f')} samples/s, "
          f"cache hit rate {fmt('cache_hit_rate', '.3f')}, "
          f"{fmt('embedding_bytes_per_sample', ',.0f')} embedding bytes/sample", flush=True)
    if "wire_bytes_per_sample" in result:
        print(f"het-tf train: on the links' wire {fmt('wire_bytes_per_sample', ',.0f')} "
              f"bytes/sample, of which {fmt('wire_ps_bytes_per_sample', ',.0f')} to and from "
              f"the PS tasks", flush=True)
    saved = ("" if result.get("export") is None
             else ", checkpoint/ and export/" if result.get("exports") else ", checkpoint/")
    print(f"het-tf train: wrote {run_dir}/metrics.json{saved}", flush=True)
