"""Between a lookup's ids and its distinct rows: the distinct ids, each
id's row from theirs, and each id's gradient slices summed back into one
row, as a table's update takes them. Each answers as TensorFlow's op does
(tf.unique, tf.gather, tf.math.unsorted_segment_sum, the sums to the bit)
in a fraction of its time. `label` names the table in errors."""
from het_tf import _op_library


def unique(ids, label):
    """(the distinct int64 `ids` in order of first appearance, each id's
    int32 place among them in the ids' shape)."""
    return _op_library.load().het_unique(ids, label=label)


def expand_rows(rows, at, label):
    """Each place's row of `rows`, in the places' shape plus the rows' width."""
    return _op_library.load().het_expand_rows(rows, at, label=label)


def sum_slices(values, at, count, label):
    """(row j: the sum of the float32 `values` slices whose place `at` is j,
    for `count` rows, added in order from zero; whether every sum is finite)."""
    return _op_library.load().het_sum_slices(values, at, count, label=label)
