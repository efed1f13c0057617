"""`het-tf train`: trains WDL, DeepFM or DCN on Criteo-shaped data, locally,
on a ParameterServerStrategy cluster or in hybrid mode, then reports AUC,
logloss, throughput, cache hit rate and embedding traffic, and writes a
checkpoint, an exported SavedModel and metrics.json to a run folder.

In ps and hybrid mode without a TF_CONFIG (or HET_TF_PS), it starts a local
cluster on 127.0.0.1 and runs itself as that cluster's chief (or ranks).

arguments.py: the command line; inputs.py: the data; modes.py: what differs
between the modes; session.py: the run; figures.py: what it measures.
"""
from het_tf.apps.train.arguments import DEFAULT_DIM, add_arguments, default_run_dir, options


def run(args, argv):
    """Runs `het-tf train` (session.run). TensorFlow is imported here, not
    with the package: the command line parses and answers --help first."""
    from het_tf.apps.train import session

    return session.run(args, argv)


__all__ = ["DEFAULT_DIM", "add_arguments", "default_run_dir", "options", "run"]
