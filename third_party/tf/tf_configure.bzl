"""Finds the installed TensorFlow and exposes its headers and framework
library as @<name>//:tf_header_lib and @<name>//:libtensorflow_framework."""

_BUILD = """
cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    visibility = ["//visibility:public"],
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["libtensorflow_framework.so.2"],
    visibility = ["//visibility:public"],
)
"""

def _tf_configure_impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH", "python3")
    result = ctx.execute([
        python,
        "-c",
        "import tensorflow as tf; print(tf.sysconfig.get_include()); print(tf.sysconfig.get_lib())",
    ])
    if result.return_code != 0:
        fail("TensorFlow not found by %s (set PYTHON_BIN_PATH): %s" % (python, result.stderr))
    lines = result.stdout.strip().splitlines()
    include, lib = lines[-2], lines[-1]
    ctx.symlink(include, "include")
    ctx.symlink(lib + "/libtensorflow_framework.so.2", "libtensorflow_framework.so.2")
    ctx.file("BUILD", _BUILD)

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH"],
    local = True,
)
