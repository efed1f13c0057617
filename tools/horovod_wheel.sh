#!/usr/bin/env bash
# Builds Horovod 0.28.1 (Gloo, TensorFlow) against the TensorFlow installed in
# the given Python, once: the wheel is cached outside the repo, keyed by the
# TensorFlow version, because the build takes about 10 minutes on 2 cores.
# For TensorFlow after 2.16 the sdist is patched first (see below).
set -euo pipefail
PY=${1:?usage: horovod_wheel.sh PYTHON}
HOROVOD_VERSION=0.28.1
TF_VERSION=$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
CACHE=${HET_TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/het_tf}/horovod-$HOROVOD_VERSION-tf-$TF_VERSION
if "$PY" -c 'import horovod.tensorflow' 2>/dev/null; then
  exit 0
fi
wheel=$(ls "$CACHE"/horovod-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "het_tf setup: building Horovod $HOROVOD_VERSION for TensorFlow $TF_VERSION (about 10 minutes, cached in $CACHE)"
  rm -rf "$CACHE.tmp" && mkdir -p "$CACHE.tmp"
  source="horovod==$HOROVOD_VERSION"
  case "$TF_VERSION" in
    2.16.*) ;;
    *)
      # Newer TensorFlow lacks the XLA headers Horovod's xla_mpi_ops.cc
      # includes; it is an MPI-only op (this build is Gloo), so the sdist is
      # built without it.
      "$PY" -m pip download -q --no-binary :all: --no-deps -d "$CACHE.tmp/sdist" "$source"
      tar -xzf "$CACHE.tmp"/sdist/horovod-*.tar.gz -C "$CACHE.tmp/sdist"
      source=$(ls -d "$CACHE.tmp"/sdist/horovod-*/)
      sed -i '/xla_mpi_ops\.cc/d' "$source/horovod/tensorflow/CMakeLists.txt"
      ;;
  esac
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GPU=1 \
  MAKEFLAGS=-j2 \
    "$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir \
      -w "$CACHE.tmp" "$source"
  rm -rf "$CACHE.tmp/sdist" "$CACHE" && mv "$CACHE.tmp" "$CACHE"
  wheel=$(ls "$CACHE"/horovod-*.whl | head -n1)
fi
"$PY" -m pip install --no-deps "$wheel"
# horovod's own runtime dependencies, without letting pip touch TensorFlow
"$PY" -m pip install cloudpickle psutil pyyaml packaging cffi
