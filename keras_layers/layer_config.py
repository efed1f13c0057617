"""HetEmbedding's config as Keras saves it (get_config) and rebuilds the
layer from it (from_config): its arguments, with the Keras objects among
them serialized."""
import copy

import tf_keras

# Arguments kept as given: numbers, names, None.
_PLAIN = ("input_dim", "output_dim", "combiner", "cache_capacity", "cache_policy", "staleness",
          "read_staleness", "write_staleness", "seed", "pin_threshold", "max_rows", "on_full",
          "eviction", "ttl", "admit_after", "full_checkpoint_every", "sync",
          "scheduler", "window", "route", "hot_rows", "mask_zero", "input_length", "sparse",
          "wire_dtype")

# Keras objects among the arguments: (argument, its serializer module).
_OBJECTS = (("embeddings_regularizer", tf_keras.regularizers),
            ("activity_regularizer", tf_keras.regularizers),
            ("embeddings_constraint", tf_keras.constraints))


def config(layer):
    """The layer's arguments for get_config."""
    out = {name: getattr(layer, name) for name in _PLAIN}
    initializer = layer.embeddings_initializer
    out["embeddings_initializer"] = (initializer if isinstance(initializer, str)
                                     else tf_keras.initializers.serialize(initializer))
    serialized = layer._settings.optimizer_serialized
    out["optimizer"] = {"class_name": serialized["class_name"],
                        "config": dict(serialized["config"])}
    for name, module in _OBJECTS:
        value = getattr(layer, name)
        out[name] = module.serialize(value) if value else None
    return out


def arguments(config):
    """The layer's arguments from a config get_config made."""
    config = copy.deepcopy(dict(config))  # Keras' deserializers edit what they are given
    if isinstance(config.get("optimizer"), dict):
        config["optimizer"] = tf_keras.optimizers.get(config["optimizer"])
    if isinstance(config.get("embeddings_initializer"), dict):
        config["embeddings_initializer"] = tf_keras.initializers.deserialize(
            config["embeddings_initializer"])
    for name, module in _OBJECTS:
        if isinstance(config.get(name), dict):
            config[name] = module.deserialize(config[name])
    return config
