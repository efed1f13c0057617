"""The `het-tf` command line is quiet: --help answers without importing
TensorFlow, and commands print no TensorFlow start-up log unless asked."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HET_TF = [sys.executable, "-m", "het_tf.apps.cli"]
# A line of TensorFlow's C++ log names its source file and line.
TF_LOG_LINE = re.compile(r"\.(cc|h):\d+\]")


def run(args, **env):
    """As a user would run it: no log level of the test session's own."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_CPP_MIN_LOG_LEVEL", "HET_TF_QUIET")}
    environment.update(env)
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=environment)


@pytest.mark.parametrize("command", [[], ["train"], ["bench"], ["launch"], ["info"],
                                     ["server"]])
def test_help_answers_without_importing_tensorflow(command):
    probe = ("import sys\nfrom het_tf.apps import cli\n"
             "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print('tensorflow' in sys.modules)")
    result = run([sys.executable, "-c", probe, *command, "--help"])
    assert result.returncode == 0, result.stderr
    assert "usage: " in result.stdout
    assert result.stdout.strip().endswith("False")  # never imported
    assert not TF_LOG_LINE.search(result.stdout + result.stderr)


def test_importing_het_tf_is_light_until_a_name_is_used():
    probe = ("import sys, het_tf\nprint('tensorflow' in sys.modules)\n"
             "het_tf.HetEmbedding\nprint('tensorflow' in sys.modules, het_tf.ops is not None)")
    result = run([sys.executable, "-c", probe])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True"]


def test_commands_print_no_tensorflow_log_unless_asked():
    quiet = run(HET_TF + ["info"])
    assert quiet.returncode == 0, quiet.stderr
    assert '"op_library_built_for"' in quiet.stdout
    assert not TF_LOG_LINE.search(quiet.stderr), quiet.stderr
    for verbose in (HET_TF + ["--verbose", "info"], HET_TF + ["info", "--verbose"]):
        loud = run(verbose)
        assert loud.returncode == 0, loud.stderr
        assert TF_LOG_LINE.search(loud.stderr), loud.stderr
    # A level the user chose is theirs: nothing is filtered.
    own = run(HET_TF + ["info"], TF_CPP_MIN_LOG_LEVEL="0")
    assert TF_LOG_LINE.search(own.stderr), own.stderr


def test_launch_prints_no_tensorflow_log_of_its_own():
    """The launcher imports TensorFlow too (its cluster's job names come from
    modules that do): through the same filter as every command."""
    done = run(HET_TF + ["launch", "--ps", "1", "--workers", "1", "--", sys.executable, "-c",
                         "print('chief ran')"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[chief:0] chief ran" in done.stdout
    own = [line for line in done.stderr.splitlines() if not line.startswith("[")]
    assert not [line for line in own if TF_LOG_LINE.search(line)], own
