"""A line per tenth for long work on a table (an export's reads, a save):
quiet while the work is short, so that small tables print nothing."""
import sys
import time

# Work that has not taken this long by a tenth's end prints nothing.
QUIET_SECONDS = 3.0


class Progress:
    """Counts `total` units (rows) of `what`; from the first tenth reached
    after QUIET_SECONDS, prints a line at each tenth, and one at the end."""

    def __init__(self, what, total, unit="rows", quiet_seconds=None, out=None, verbose=True):
        """With verbose=False it counts and says nothing."""
        self.what, self.total, self.unit = what, max(int(total), 0), unit
        self.verbose = verbose
        self.quiet_seconds = QUIET_SECONDS if quiet_seconds is None else quiet_seconds
        self.out = out or sys.stdout
        self.done = self._tenth = 0
        self.started = time.perf_counter()
        self.spoke = False

    def elapsed(self):
        return time.perf_counter() - self.started

    def advance(self, units):
        self.done += int(units)
        tenth = 10 * self.done // self.total if self.total else 10
        if tenth > self._tenth:
            self._tenth = tenth
            if tenth < 10 and (self.spoke or self.elapsed() >= self.quiet_seconds):
                self._say(f"{self.done:,} of {self.total:,} {self.unit} ({tenth}0%)")

    def phase(self, text):
        """A step with no count of its own (writing the files), said only
        once the work has been long enough to speak."""
        if self.spoke or self.elapsed() >= self.quiet_seconds:
            self._say(text)

    def finish(self):
        if self.spoke or self.elapsed() >= self.quiet_seconds:
            self._say(f"done: {self.total:,} {self.unit}")

    def _say(self, text):
        self.spoke = True
        if self.verbose:
            print(f"het_tf: {self.what}: {text}, {self.elapsed():.1f} s", file=self.out,
                  flush=True)
