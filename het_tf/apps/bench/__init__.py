"""`het-tf bench`: the same model, data and cluster size under TensorFlow's own
PS path, TensorFlow Recommenders-Addons and HetEmbedding, one configuration
after the other in one run, with throughput ratios, embedding traffic, cache
hit rates and held-out AUC, written as JSON and PNG plots to an output folder.

Every training run is a `het-tf train` process with its own run folder under
OUT/runs; a configuration that fails is recorded with its error and the
benchmark goes on.

plan.py: the options and configurations; runs.py: one training run;
experiments.py: the measurements without a cluster; report.py: the
figures, plots and report; session.py: the run; accuracy_sweep.py: --sweep.
"""
from het_tf.apps.bench.plan import add_arguments


def run(args):
    """Runs `het-tf bench` (session.run), importing TensorFlow only now."""
    from het_tf.apps.bench import session

    return session.run(args)


__all__ = ["add_arguments", "run"]
