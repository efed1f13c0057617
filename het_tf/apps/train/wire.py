"""Bytes on the wire of a cluster behind emulated links: the kernel's
counters of every task's interface, read when training starts and ends.
They count every frame (Ethernet, IP and TCP headers, gRPC and Gloo
framing, dense variables, allreduce traffic, heartbeats), where the tables'
counters count only the embedding tensors."""
import os
import time

from het_tf.apps import link


class WireBytes:
    """Reads every task's counters now; figures() reads them again. With
    `counted` (a function giving the bytes the table shards have counted so
    far, from every client), the shards' own count over the same interval
    is reported beside the wire's."""

    def __init__(self, counted=None):
        # Only behind links is there a wire to set the shards' count beside.
        self._counted = counted if os.environ.get(link.INTERFACES_ENV) else None
        self._counted_start = self._counted() if self._counted else None
        # The clock brackets the counters' readings: wire_seconds is never
        # shorter than the interval their difference covers.
        self._started = time.monotonic()
        self._start = link.read_counters()

    def figures(self, samples):
        """Per task, bytes sent and received in between and per sample; in
        total, what all tasks sent, split into traffic to and from the PS
        tasks and traffic between the other tasks (hybrid mode's allreduce,
        or ps mode's coordination of the workers). {} without links."""
        if not self._start:
            return {}
        end = link.read_counters()
        seconds = time.monotonic() - self._started  # after the reading
        tasks = {}
        for task, (sent0, received0) in self._start.items():
            sent1, received1 = end[task]
            tasks[task] = {"sent": sent1 - sent0, "received": received1 - received0}
        samples = max(samples, 1)
        sent = sum(t["sent"] for t in tasks.values())
        # The PS tasks talk only to the others: all they send and receive
        # is PS traffic, counted once.
        ps = sum(t["sent"] + t["received"] for name, t in tasks.items()
                 if name.startswith("ps:"))
        figures = {}
        if self._counted_start is not None:
            figures["shard_bytes_per_sample"] = (self._counted() - self._counted_start) / samples
        return {**figures, "wire_tasks": tasks, "wire_seconds": seconds,
                "wire_bytes_per_sample": sent / samples,
                "wire_ps_bytes_per_sample": ps / samples,
                "wire_between_workers_bytes_per_sample": (sent - ps) / samples,
                "wire_task_bytes_per_sample": {name: (t["sent"] + t["received"]) / samples
                                               for name, t in tasks.items()}}
