"""The dense optimizer's slots in the order files hold them.

tf_keras' optimizers make their slots in the order of the first
apply_gradients call's variables, and Keras files and checkpoints hold them
by position (`optimizer/vars/N`, `optimizer/_variables/N`). Keras' train
step and hybrid mode's both apply gradients in `model.trainable_variables`
order, so a file loads onto any model built the same way. Hybrid mode
before this release applied the dense variables first and the tables'
anchors last: its files would put one variable's slots on another, or
leave them at zero. Such a file is recognised by its slots' shapes (the
anchors' scalar slots where the model has dense ones), and read in the
order it was written, so each slot lands on its own variable. A file whose
shapes fit both orders is read in the model's: the two orders then differ
only between variables of the same shapes, which no file can tell apart."""
import contextlib

import tensorflow as tf
import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_gradients import is_anchor


def _shapes(variables, order, k):
    return [tuple(variables[i].shape) for i in order for _ in range(k)]


def file_order(model, shapes):
    """Given the shapes of a file's optimizer slots by position (every
    variable but the first, the step count), the order of the model's
    trainable variables the file holds them in: the earlier hybrid order
    where the file holds that and not the model's, else None."""
    trainable = model.trainable_variables
    optimizer = getattr(model, "optimizer", None)
    if (not trainable or not shapes or len(shapes) % len(trainable)
            or not isinstance(optimizer, tf_keras.optimizers.Optimizer)
            or not het_embedding_layers(model)):
        return None
    k = len(shapes) // len(trainable)
    earlier = ([i for i, v in enumerate(trainable) if not is_anchor(v)]
               + [i for i, v in enumerate(trainable) if is_anchor(v)])
    shapes = [tuple(s) for s in shapes]
    if (earlier == sorted(earlier) or shapes == _shapes(trainable, sorted(earlier), k)
            or shapes != _shapes(trainable, earlier, k)):
        return None
    return earlier


@contextlib.contextmanager
def read_in_order(model, order):
    """Within the block the model's optimizer lists its variables in the
    file's `order` (file_order's), so that a Keras file or a checkpoint,
    read by position, puts each value on its own variable; then the
    optimizer's own list is back. The optimizer is built first, as Keras'
    train step would build it."""
    if order is None:
        yield
        return
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    variables = list(optimizer.variables)
    k = (len(variables) - 1) // len(order)
    if variables[0] is not optimizer.iterations or len(variables) != 1 + k * len(order):
        raise ValueError(f"{optimizer.name}: this file holds its slots in the order hybrid mode "
                         "wrote before (dense variables first, the tables' anchors last), and "
                         "this optimizer's variables are not one block a variable, so they "
                         "cannot be placed; load it with compile=False and compile again (a "
                         "fresh optimizer), or save it again from the run that wrote it")
    own = optimizer._variables
    tf.get_logger().warning(
        f"{optimizer.name}: this file holds its slots in the order hybrid mode wrote before "
        "(dense variables first, the tables' anchors last); they are read in that order, "
        "each onto its own variable. Saving again writes the model's order.")
    optimizer._variables = [variables[0]] + [variables[1 + i * k + j]
                                             for i in order for j in range(k)]
    try:
        yield
    finally:
        optimizer._variables = own
