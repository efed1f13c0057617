#!/usr/bin/env bash
# Debian packages the build needs beyond Python: Bazel for the Bazel build of
# the op library (bazel-bootstrap works offline; bazelisk would download), and
# clang with its sanitizer runtimes for the core's ASan/UBSan/TSan builds;
# iproute2 (ip, tc) for the benchmark's rate-limited links (--link);
# procps (pgrep) for the link tests' check that no rank outlives its job;
# clang-format for `make lint`; ccache, which keeps compiled files by
# content between clean clones (the Makefile's CCACHE).
set -euo pipefail
needed=()
command -v bazel >/dev/null 2>&1 || needed+=(bazel-bootstrap)
[ -d /usr/share/bazel/rules/java ] || needed+=(bazel-rules-java)
command -v g++ >/dev/null 2>&1 || needed+=(g++)
command -v clang++ >/dev/null 2>&1 || needed+=(clang)
ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.tsan-x86_64.a >/dev/null 2>&1 \
  || needed+=(libclang-rt-14-dev)
{ command -v ip && command -v tc; } >/dev/null 2>&1 || needed+=(iproute2)
command -v pgrep >/dev/null 2>&1 || needed+=(procps)
command -v clang-format-14 >/dev/null 2>&1 || needed+=(clang-format-14)
# ccache is optional: without root, compiles are just not cached.
if ! command -v ccache >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    needed+=(ccache)
  else
    echo "het_tf setup: no ccache; compiles will not be cached" >&2
  fi
fi
[ ${#needed[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "het_tf setup: please install these Debian packages as root: ${needed[*]}" >&2
  exit 1
fi
echo "het_tf setup: installing ${needed[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${needed[@]}" >/dev/null
