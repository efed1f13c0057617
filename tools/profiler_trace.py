"""Kernel times from a TensorFlow profiler trace, for the tools that
profile a step (profile_cache_kernels.py, layer_speed.py)."""
import collections
import glob

from tensorflow.tsl.profiler.protobuf import xplane_pb2


def kernel_times(logdir):
    """{op type: (picoseconds, kernel runs)} over the trace written to
    `logdir`, the most time first."""
    space = xplane_pb2.XSpace()
    with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    total, runs = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                # Kernel events are named "node:OpType".
                op = plane.event_metadata[event.metadata_id].name.rpartition(":")[2]
                total[op] += event.duration_ps
                runs[op] += 1
    return {op: (ps, runs[op]) for op, ps in total.most_common()}
