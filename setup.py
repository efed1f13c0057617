"""Builds het_tf: the Python packages plus the op library compiled from
cc_ops/ with the installed TensorFlow's own compile and link flags."""
import concurrent.futures
import glob
import os
import shlex
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "het_tf._het_ops"


def _sources():
    """The shared kernel glue, then each area's core, ops and kernels."""
    found = sorted(glob.glob(os.path.join("cc_ops", "common", "*.cc")))
    for area in ("embedding", "data", "schedule"):
        for sub in ("core", "ops", "kernels"):
            found += sorted(glob.glob(os.path.join("cc_ops", area, sub, "*.cc")))
    return found


class BuildOpLibrary(build_ext):
    """Compiles with g++ and TensorFlow's flags rather than distutils', which
    know nothing of TensorFlow's headers, ABI flag and framework library."""

    def build_extension(self, ext):
        try:
            import tensorflow as tf
        except ImportError:
            sys.exit("het_tf needs TensorFlow installed to build its ops: "
                     "pip install tensorflow==2.16.2, then pip install --no-build-isolation .")
        # The version the loader checks (cc_ops/common/build_tag.cc).
        compile_flags = [*tf.sysconfig.get_compile_flags(), f'-DHET_TF_VERSION="{tf.__version__}"']
        link_flags = tf.sysconfig.get_link_flags()
        # CXX may be a launcher and a compiler ("ccache g++", as make sets it).
        cxx = shlex.split(os.environ.get("CXX") or "g++")
        out = self.get_ext_fullpath(ext.name)
        obj_dir = os.path.join(self.build_temp, "het_ops")
        # A second TensorFlow's build (make test-tf2.21) goes where the loader
        # will look for it, beside its own objects, leaving the tree's alone.
        other = os.environ.get("HET_TF_OPS_LIBRARY")
        if other:
            out = os.path.abspath(other)
            obj_dir = os.path.join(os.path.dirname(out), "objects")
        os.makedirs(obj_dir, exist_ok=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)

        def compile_one(src):
            obj = os.path.join(obj_dir, src.replace(os.sep, "_") + ".o")
            # -O3 and no errno from sqrt: the per-row optimizer loops vectorize.
            # TensorFlow 2.21's own headers use what it deprecates.
            cmd = [*cxx, "-c", "-fPIC", "-O3", "-fno-math-errno", "-Wall",
                   "-Wno-deprecated-declarations", "-I", ROOT,
                   *compile_flags, os.path.join(ROOT, src), "-o", obj]
            subprocess.run(cmd, check=True)
            return obj

        jobs = int(os.environ.get("HET_TF_BUILD_JOBS", os.cpu_count() or 1))
        print(f"het_tf: compiling {len(ext.sources)} files with {jobs} jobs", flush=True)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            objects = list(pool.map(compile_one, ext.sources))
        subprocess.run([*cxx, "-shared", *objects, "-o", out, *link_flags], check=True)

    def copy_extensions_to_source(self):
        # An editable install copies the library into the tree, unless it
        # was built for a second TensorFlow elsewhere (HET_TF_OPS_LIBRARY).
        if not os.environ.get("HET_TF_OPS_LIBRARY"):
            super().copy_extensions_to_source()

    def get_ext_filename(self, fullname):
        # A TensorFlow op library, not a Python extension: no ABI suffix.
        return os.path.join(*fullname.split(".")) + ".so"


setup(
    name="het_tf",
    version="0.1.0",
    description="HET-style cached embedding training for TensorFlow and Keras",
    python_requires=">=3.9",
    # Every package under het_tf/ (found, so a new one is never left out of
    # a wheel), and keras_layers/ installed as het_tf.keras_layers.
    packages=sorted({"het_tf.keras_layers"} | set(
        find_packages(include=["het_tf", "het_tf.*"], exclude=["het_tf.keras_layers*"]))),
    package_dir={"het_tf": "het_tf", "het_tf.keras_layers": "keras_layers"},
    ext_modules=[Extension(LIBRARY, sources=_sources())],
    cmdclass={"build_ext": BuildOpLibrary},
    # Tested on 2.16.2 (the default stack) and 2.21.0 (requirements-tf2.21.txt).
    install_requires=["tensorflow>=2.16.2,<2.22", "tf-keras>=2.16,<2.22"],
    entry_points={"console_scripts": ["het-tf=het_tf.apps.cli:main"]},
    zip_safe=False,
)
