"""Runs a script on a file system of its own: a tmpfs of a few MB, mounted
in a mount namespace that only the script's process sees, so a full disk
can be met without filling the machine's."""
import json
import os
import subprocess
import sys


def run_on_small_disk(tmp_path, script, size, *args):
    """Writes `script` to tmp_path and runs it with the tmpfs's mount point
    (`tmp_path/small`, `size` as mount takes it: "4m") and `args` as its
    arguments; returns the JSON its last line prints. The mount point is
    empty again afterwards: the tmpfs was the namespace's alone."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    (tmp_path / "small_disk_script.py").write_text(script)
    command = (f"mount -t tmpfs -o size={size} tmpfs {mount_point} && exec {sys.executable} "
               f"{tmp_path / 'small_disk_script.py'} {mount_point} {' '.join(map(str, args))}")
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert os.listdir(mount_point) == []
    return json.loads(run.stdout.strip().splitlines()[-1])
