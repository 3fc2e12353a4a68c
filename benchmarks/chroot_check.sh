#!/usr/bin/env bash
# Proof, on this Debian machine, that benchmarks/gpu_check.sh --kit builds
# gpufeed on a bare CUDA machine: a minimal Debian 12 chroot (debootstrap)
# with only a compiler, CMake, ninja and Python (headers included, as the
# GPU image's Python has them) and none of the -dev libraries gpufeed links,
# the CUDA toolkit of this machine mounted read-only at /usr/local/cuda, a
# clean copy of the tracked source tree and the device kit. Inside, it runs
#   benchmarks/gpu_check.sh --kit /work/gpufeed-kit.tar.gz --build-without-gpu
# which must build everything from the kit and stop at the missing GPU with
# its one-line reason (exit 3). This script exits 0 only then.
#
#   benchmarks/chroot_check.sh          (root; first run about 5 min for
#                                        debootstrap, then the build)
#
# The chroot is cached in build/chroot (delete it to start over; nothing is
# ever mounted there outside this script's own mount namespace, so a plain
# rm -rf is safe). CI does not run this; see docs/tuning.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/script_errors.sh
source "$ROOT/tests/script_errors.sh"
gpufeed_trap_errors chroot_check
CHROOT=${GPUFEED_CHROOT_DIR:-$ROOT/build/chroot}
KIT=${GPUFEED_KIT:-$ROOT/build/gpufeed-kit.tar.gz}
MIRROR=${GPUFEED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CUDA_HOME=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
LOG=$ROOT/build/chroot_check.log
started=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
  echo "chroot_check: needs root (debootstrap, chroot, mounts)" >&2
  exit 2
fi
if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "chroot_check: no CUDA toolkit at $CUDA_HOME (set CUDA_HOME)" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  echo "== installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# 1. The bare machine: compiler, CMake, ninja, Python; no -dev library.
if [ ! -f "$CHROOT/.gpufeed-chroot-ready" ]; then
  echo "== debootstrap bookworm into $CHROOT"
  rm -rf "$CHROOT"
  mkdir -p "$CHROOT"
  debootstrap --variant=minbase \
    --include=g++,make,cmake,ninja-build,python3,python3-dev,ca-certificates \
    bookworm "$CHROOT" "$MIRROR" >"$ROOT/build/debootstrap.log" 2>&1 ||
    { tail -20 "$ROOT/build/debootstrap.log"; exit 1; }
  touch "$CHROOT/.gpufeed-chroot-ready"
fi
# What the bare machine must NOT have: any library gpufeed links.
for header in spdlog/spdlog.h lmdb.h liburing.h jpeglib.h png.h xxhash.h nlohmann/json.hpp \
              dlpack/dlpack.h gtest/gtest.h pybind11/pybind11.h; do
  if [ -e "$CHROOT/usr/include/$header" ]; then
    echo "chroot_check: the chroot is not bare: it has /usr/include/$header" >&2
    exit 1
  fi
done

# 2. The kit, made here from Debian's packages.
if [ ! -f "$KIT" ] || [ "$ROOT/benchmarks/device_kit.sh" -nt "$KIT" ]; then
  echo "== device kit"
  "$ROOT/benchmarks/device_kit.sh" "$KIT"
fi

# 3. A clean copy of the tracked tree (what a fresh clone carries).
echo "== source tree and kit into the chroot"
rm -rf "$CHROOT/work"
mkdir -p "$CHROOT/work/src" "$CHROOT/usr/local/cuda"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
   xargs -0 tar -cf - --no-recursion 2>/dev/null) | tar -xf - -C "$CHROOT/work/src"
cp "$KIT" "$CHROOT/work/gpufeed-kit.tar.gz"

# 4. gpu_check inside: mounts live only in this private mount namespace.
echo "== gpu_check.sh --kit --build-without-gpu inside the chroot (log: $LOG)"
set +e
unshare --mount --propagation private /bin/bash -c '
  set -e
  chroot_dir=$1 cuda=$2
  mount --bind "$cuda" "$chroot_dir/usr/local/cuda"
  mount -o remount,bind,ro "$chroot_dir/usr/local/cuda"
  mount -t proc proc "$chroot_dir/proc"
  mount -t tmpfs tmpfs "$chroot_dir/tmp"
  exec chroot "$chroot_dir" /usr/bin/env -i HOME=/root PATH=/usr/local/cuda/bin:/usr/bin:/bin \
    LANG=C.UTF-8 OUT=/work/out /bin/bash -c \
    "cd /work/src && benchmarks/gpu_check.sh --kit /work/gpufeed-kit.tar.gz --build-without-gpu"
' chroot-check "$CHROOT" "$CUDA_HOME" >"$LOG" 2>&1
code=$?
set -e
tail -5 "$LOG"
elapsed=$(( $(date +%s) - started ))
if [ "$code" -eq 3 ] && grep -q "no GPU" "$LOG"; then
  echo "chroot_check: PASS: built from the kit alone on a bare Debian 12 and stopped at the missing GPU (${elapsed} s)"
  exit 0
fi
echo "chroot_check: FAIL: gpu_check.sh exited $code (expected 3, the no-GPU stop); see $LOG" >&2
exit 1
