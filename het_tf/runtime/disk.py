"""What a write that met a full disk raised, whichever writer it was."""
import errno

import tensorflow as tf


def out_of_space(error):
    """Whether `error` says the device, or the user's quota, is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    # TensorFlow's writers raise their own errors, with the system's message.
    return isinstance(error, tf.errors.OpError) and any(
        text in str(error) for text in ("No space left on device", "Disk quota exceeded"))
