"""The one check of the type rows travel in between workers' caches and
the parameter servers (no TensorFlow here, so that `het-tf train` checks
its options before it starts any). docs/consistency.md says what travels
in which type and why no update is lost to the rounding."""

WIRE_DTYPES = ("float32", "bfloat16", "float16")


def check_wire_dtype(dtype, owner="wire_dtype"):
    """Returns `dtype`, or raises ValueError naming `owner`."""
    if not isinstance(dtype, str) or dtype not in WIRE_DTYPES:
        raise ValueError(f"{owner}: wire_dtype must be one of {', '.join(WIRE_DTYPES)}, "
                         f"got {dtype!r}")
    return dtype
