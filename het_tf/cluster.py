"""The cluster a training script runs in, from TF_CONFIG (public API):

    strategy = het_tf.cluster.parameter_server_strategy()

`het-tf launch` starts the tasks (docs/cluster.md).
"""
from het_tf.distribute.server import parameter_server_strategy, tf_config

__all__ = ["parameter_server_strategy", "tf_config"]
