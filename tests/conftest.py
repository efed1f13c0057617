import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest  # noqa: E402

_names = itertools.count()


@pytest.fixture
def unique_name():
    """Table names unique within the test process: shards are found by name,
    and every test wants fresh rows."""
    return lambda prefix="t": f"{prefix}_{os.getpid()}_{next(_names)}"
