"""Turns a tf_keras optimizer (or its name) into the table's server-side
sparse optimizer plus a learning rate that may follow a schedule."""
import tf_keras

from het_tf.runtime.config import OptimizerConfig

# tf_keras class name -> (core name, {core field: keras attribute})
_SUPPORTED = {
    "SGD": ("sgd", {}),
    "Adagrad": ("adagrad", {"initial_accumulator_value": "initial_accumulator_value",
                            "epsilon": "epsilon"}),
    "Adam": ("adam", {"beta_1": "beta_1", "beta_2": "beta_2", "epsilon": "epsilon"}),
    "Ftrl": ("ftrl", {"initial_accumulator_value": "initial_accumulator_value",
                      "l1": "l1_regularization_strength", "l2": "l2_regularization_strength",
                      "learning_rate_power": "learning_rate_power", "ftrl_beta": "beta"}),
}


def resolve(optimizer, owner):
    """Returns (OptimizerConfig, learning_rate, keras optimizer config)."""
    if isinstance(optimizer, str):
        try:
            optimizer = tf_keras.optimizers.get(optimizer)
        except ValueError:
            optimizer = None
    if optimizer is None or not isinstance(optimizer, (tf_keras.optimizers.Optimizer,
                                                       tf_keras.optimizers.legacy.Optimizer)):
        raise ValueError(
            f"{owner}: optimizer must be a tf_keras optimizer or one of the names "
            f"{', '.join(sorted(n.lower() for n in _SUPPORTED))}; got {optimizer!r}. "
            "(Keras 3 optimizers are not supported: use tf_keras.)")
    kind = type(optimizer).__name__
    if kind not in _SUPPORTED:
        raise ValueError(f"{owner}: the table's server-side optimizer can be "
                         f"{', '.join(_SUPPORTED)}; {kind} is not supported")
    if getattr(optimizer, "amsgrad", False):
        raise ValueError(f"{owner}: Adam with amsgrad is not supported by the table")
    if (getattr(optimizer, "l2_shrinkage_regularization_strength", 0.0) or 0.0) != 0.0:
        raise ValueError(f"{owner}: Ftrl's l2_shrinkage_regularization_strength is not supported")
    name, fields = _SUPPORTED[kind]
    config = optimizer.get_config()
    values = {field: float(config[attr]) for field, attr in fields.items() if attr in config}
    learning_rate = config["learning_rate"]
    if isinstance(learning_rate, dict):  # a serialized schedule
        learning_rate = tf_keras.optimizers.schedules.deserialize(learning_rate)
    # A plain, stable form for get_config: serialize() names classes
    # differently once an optimizer has been through deserialize().
    serialized = {"class_name": kind, "config": {k: v for k, v in config.items()}}
    return OptimizerConfig(name, **values), learning_rate, serialized
