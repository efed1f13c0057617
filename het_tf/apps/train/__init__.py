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
from het_tf.apps.train.figures import roc_auc, versions
from het_tf.apps.train.session import run

__all__ = ["DEFAULT_DIM", "add_arguments", "default_run_dir", "options", "roc_auc", "run",
           "versions"]
