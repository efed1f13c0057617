"""The one check of hybrid mode's allreduce type (no TensorFlow here, so
that `het-tf train` checks its options before it starts any)."""

ALLREDUCE_DTYPES = ("float32", "float16")


def check_allreduce_dtype(dtype, owner="allreduce_dtype"):
    """Returns `dtype`, or raises ValueError naming `owner`."""
    if dtype == "bfloat16":
        raise ValueError(f"{owner} 'bfloat16' is not offered: Horovod 0.28.1's Gloo allreduce "
                         "cannot sum bfloat16 tensors; use 'float16' (half the bytes, with a "
                         "loss scale) or 'float32'")
    if dtype not in ALLREDUCE_DTYPES:
        raise ValueError(f"{owner} must be one of {', '.join(ALLREDUCE_DTYPES)}, got {dtype!r}")
    return dtype
