"""What differs between `het-tf train`'s modes, one object each: where the
process runs, how the model is placed and compiled, where the data comes
from, and how pending updates, sums and checkpoints reach every worker."""
import contextlib
import os
import sys

import tensorflow as tf
import tf_keras

from het_tf import hybrid
from het_tf.apps import launch
from het_tf.distribute import horovod, server
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.pipeline.hot_rows import hot_and_cold_batches
from het_tf.pipeline.lookahead import lookahead


class LocalMode:
    """One process: the model, its tables and its cache all here."""

    rank, size = 0, 1

    def launch(self, args, argv):
        """The exit code when this process only starts (or serves) a
        cluster; None when it trains."""
        return None

    def prepare(self, args):
        """Runs before the model is built."""

    @property
    def num_workers(self):
        return self.size

    @property
    def batches_per_step(self):
        return self.size

    def scope(self):
        return contextlib.nullcontext()

    def compile_options(self):
        return {}

    def learning_rate_factor(self):
        return 1

    def distribute(self, model):
        """Runs after the model is built, before it is compiled."""

    def pipelines(self, inputs, steps, lookahead_model=None, hot_model=None):
        """(training input, held-out input, timeline input) of this worker,
        which trains `steps` batches; with lookahead_model, training batches
        stage their ids ahead in its caches (het_tf.lookahead); with
        hot_model, they are its hot and cold batches
        (het_tf.hot_and_cold_batches)."""
        train = inputs.train(self.rank, self.size)
        if hot_model is None:
            # The reader stops at the last batch trained: the lookahead reads
            # up to --lookahead-batches ahead, which would otherwise parse
            # (and count in records_read) lines no step trains on. Hot and
            # cold batches regroup samples: how many are read is not known.
            train = train.take(steps)
        if lookahead_model is not None:
            train = lookahead(train, lookahead_model, inputs.args.lookahead_batches)
        if hot_model is not None:
            train = hot_and_cold_batches(train, hot_model, inputs.args.batch_size).prefetch(
                tf.data.AUTOTUNE)
        return train, inputs.held_out(), inputs.timeline()

    def worker_devices(self):
        """Where the data readers ran, for their counters."""
        return (None,)

    def flush(self, model):
        """Pushes every pending cache update to the tables."""
        for layer in het_embedding_layers(model):
            layer.flush()

    def sum(self, value):
        """A number summed over the ranks."""
        return value

    def save(self, model, manager):
        return manager.save()

    def barrier(self):
        pass

    def figures(self, model):
        """The mode's own figures for metrics.json."""
        return {}


class PsMode(LocalMode):
    """ParameterServerStrategy: this process is the chief, the tables are on
    the PS tasks and every worker has a cache."""

    def __init__(self):
        self.strategy = None

    def launch(self, args, argv):
        if not os.environ.get("TF_CONFIG"):
            return launch.launch(args.ps, args.workers, argv, link=args.link,
                                 latency=args.latency)
        task = server.tf_config()["task"]["type"]
        if task in server.SERVER_JOBS:
            return server.serve()
        if task != "chief":
            raise ValueError(f"het-tf train runs as the chief, ps or worker task, not {task!r}")
        return None

    def prepare(self, args):
        partitioner = None
        if args.embedding == "keras":
            # TensorFlow's own PS path: the Keras embedding split over the PS tasks.
            partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
                min_shard_bytes=256 << 10, max_shards=len(server.tf_config()["cluster"]["ps"]))
        self.strategy = server.parameter_server_strategy(partitioner)

    @property
    def num_workers(self):
        return server.num_tasks(self.strategy, "worker")

    @property
    def batches_per_step(self):
        return 1  # a step is one worker's batch

    def scope(self):
        return self.strategy.scope()

    def compile_options(self):
        return {"pss_evaluation_shards": 0}

    def pipelines(self, inputs, steps, lookahead_model=None, hot_model=None):
        # A worker trains the steps the coordinator gives it, not a known
        # share of `steps`: its reader runs on, ahead of the steps.
        num_workers, batches = self.num_workers, inputs.args.lookahead_batches

        def per_worker(pipeline, model=None):
            def make(_):
                # The input context says pipeline 0 of 1 on every worker
                # (ParameterServerStrategy syncs nothing across workers), and
                # the function is traced once for all of them: each worker's
                # own index is a value TensorFlow supplies when it runs there.
                # Without it every worker read the same data.
                index = tf.distribute.coordinator.experimental_get_current_worker_index()
                data = pipeline(tf.cast(index, tf.int64), num_workers)
                # Made on each worker: the ids go to that worker's caches.
                return data if model is None else lookahead(data, model, batches)

            return tf_keras.utils.experimental.DatasetCreator(make)

        return (per_worker(inputs.train, lookahead_model), per_worker(inputs.held_out),
                per_worker(inputs.timeline))

    def worker_devices(self):
        return [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(self.num_workers)]


class HybridMode(LocalMode):
    """Horovod ranks, each a client of the PS tasks, with dense gradients
    averaged by allreduce."""

    def launch(self, args, argv):
        if not os.environ.get(horovod.PS_ENV) and not os.environ.get("TF_CONFIG"):
            return launch.launch(args.ps, args.workers, argv, hybrid=True, link=args.link,
                                 latency=args.latency)
        return None

    def prepare(self, args):
        hybrid.init()  # before the model is built
        self.rank, self.size = hybrid.rank(), hybrid.size()
        self.distribute_options = dict(allocate_every=args.allocate_every,
                                       summary_rows=args.summary_rows,
                                       stay_bonus=args.stay_bonus,
                                       allreduce_dtype=args.allreduce_dtype)

    def learning_rate_factor(self):
        return self.size  # Horovod's convention: the dense rate scales with the ranks

    def distribute(self, model):
        hybrid.distribute(model, **self.distribute_options)

    def flush(self, model):
        hybrid.flush_and_clear(model)
        hybrid.barrier()

    def sum(self, value):
        return hybrid.allreduce_sum(value)

    def save(self, model, manager):
        return hybrid.save(model, manager)

    def barrier(self):
        hybrid.barrier()

    def figures(self, model):
        return {"allreduce_skipped_steps": hybrid.allreduce_skipped_steps(model)}


MODES = {"local": LocalMode, "ps": PsMode, "hybrid": HybridMode}


def own_command(argv, run_dir):
    """This `het-tf train` again, for the tasks or ranks of a local cluster."""
    return [sys.executable, "-m", "het_tf.apps.cli", "train", *argv, "--run-dir", run_dir]
