"""Table gradients are applied where Keras applies every gradient.

A HetEmbedding's lookup gives its anchor (a scalar weight that stands for
the table) the rows' gradient as IndexedSlices, as tf_keras' Embedding
gives its matrix. The optimizer treats it as it treats any variable's:
LossScaleOptimizer unscales it and skips a step that overflowed, clipvalue,
clipnorm and global_clipnorm clip it, and the slices of a layer called
several times arrive as one. Where the optimizer would then update the
variables, the anchors' gradients go to their layers instead, which update
the tables; the rest of the step is the optimizer's own. This module wraps
that place in tf_keras' optimizers, once, on import, and their summing of
each id's slices, whose work the table then does itself.
"""
import tensorflow as tf
from tf_keras.src.optimizers import optimizer as _optimizer
from tf_keras.src.optimizers.legacy import optimizer_v2 as _legacy

_OWNER = "_het_table_owner"
# The attribute of an optimizer's summed IndexedSlices that keeps them as
# they were before the sum.
UNSUMMED = "_het_unsummed"


def mark_anchor(anchor, layer):
    """Makes `anchor` stand for `layer`'s table in every optimizer."""
    setattr(anchor, _OWNER, layer)


def is_anchor(variable):
    """Whether `variable` stands for a HetEmbedding's table."""
    return getattr(variable, _OWNER, None) is not None


def _apply_tables(grads_and_vars):
    """Updates the tables of the anchors among `grads_and_vars`; returns
    the other pairs and the tables' update ops. A gradient the optimizer
    summed keeps its slices from before the sum (UNSUMMED), which the table
    sums itself; any other is summed as it comes, which is right whether
    or not an optimizer of one's own summed it."""
    rest, updates = [], []
    for grad, var in grads_and_vars:
        layer = getattr(var, _OWNER, None)
        if layer is None:
            rest.append((grad, var))
        elif grad is not None:
            _check_one_replica(layer)
            updates.append(layer.apply_gradient(grad))
    return rest, updates


def _check_one_replica(layer):
    """Each replica would apply the summed gradient to the table again."""
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        raise ValueError(f"HetEmbedding '{layer.name}': the optimizer runs on {replicas} "
                         "replicas in sync, and each would update the table; use one replica "
                         "a worker (ParameterServerStrategy over CPU workers, or hybrid mode)")


def _wrap_apply(original):
    """For tf_keras' optimizers: `_internal_apply_gradients(grads_and_vars)`,
    after clipping and summing, before the variables' updates."""
    def apply(self, grads_and_vars):
        rest, updates = _apply_tables(list(grads_and_vars))
        if updates and not rest and getattr(self, "use_ema", False):
            return self.iterations.assign_add(1)  # no variable to average
        return original(self, rest)

    apply.__wrapped__ = original
    return apply


def _wrap_deduplicate(original):
    """For tf_keras' optimizers: `_deduplicate_sparse_grad(grads)` keeps
    each summed IndexedSlices' slices before the sum. A table whose lookup
    made them sums them by that lookup's deduplication (apply_gradient);
    the optimizer's own sum is then unused, and TensorFlow prunes it from
    the step."""
    def deduplicate(self, grads):
        grads = list(grads)
        summed = original(self, grads)
        for before, after in zip(grads, summed):
            if isinstance(after, tf.IndexedSlices) and after is not before:
                setattr(after, UNSUMMED, before)
        return summed

    deduplicate.__wrapped__ = original
    return deduplicate


def _wrap_legacy_apply(original):
    """For the legacy optimizers: `_distributed_apply`, after clipping."""
    def apply(self, distribution, grads_and_vars, apply_state, name=None):
        rest, _ = _apply_tables(list(grads_and_vars))
        return original(self, distribution, rest, apply_state, name)

    apply.__wrapped__ = original
    return apply



def _install():
    for cls, name, wrap in ((_optimizer._BaseOptimizer, "_internal_apply_gradients", _wrap_apply),
                            (_optimizer.Optimizer, "_internal_apply_gradients", _wrap_apply),
                            (_legacy.OptimizerV2, "_distributed_apply", _wrap_legacy_apply),
                            (_optimizer._BaseOptimizer, "_deduplicate_sparse_grad",
                             _wrap_deduplicate)):
        method = cls.__dict__[name]
        if not hasattr(method, "__wrapped__"):
            setattr(cls, name, wrap(method))


_install()
