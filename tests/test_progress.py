"""Progress lines for long work on a table: none while it is short, a line
per tenth once it is long, and the export's own."""
import io
import time

from het_tf.runtime.progress import Progress


def test_short_work_prints_nothing():
    out = io.StringIO()
    progress = Progress("save", 1000, quiet_seconds=60, out=out)
    for _ in range(10):
        progress.advance(100)
    progress.phase("writing")
    progress.finish()
    assert out.getvalue() == ""


def test_long_work_prints_each_tenth_once_and_the_end():
    out = io.StringIO()
    progress = Progress("export of version 7", 1000, quiet_seconds=0.05, out=out)
    progress.advance(50)   # no tenth yet
    progress.advance(60)   # the first tenth, but still quiet
    time.sleep(0.06)
    for _ in range(3):
        progress.advance(300)  # 410, 710, 1010: tenths 4, 7 and the end
    progress.phase("writing the files")
    progress.finish()
    lines = [line.rsplit(", ", 1)[0] for line in out.getvalue().splitlines()]  # less the time
    assert lines == ["het_tf: export of version 7: 410 of 1,000 rows (40%)",
                     "het_tf: export of version 7: 710 of 1,000 rows (70%)",
                     "het_tf: export of version 7: writing the files",
                     "het_tf: export of version 7: done: 1,000 rows"]
