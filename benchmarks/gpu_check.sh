#!/usr/bin/env bash
# One prepared script for a machine with an NVIDIA GPU (about 3-6 minutes on
# 16 cores): builds gpufeed with CUDA for the GPU's architecture, runs the
# `gpu`-labelled tests, then measures
#   (a) raw pinned host-to-device bandwidth, plain cudaMemcpyAsync of one
#       batch (the ceiling),
#   (b) the device stage alone on pre-decoded pinned batches (ratio to a),
#   (c) the loader end to end on the demo dataset into GPU memory, with a
#       consumer that spends a fixed GPU time per batch (1.5x the pipeline's
#       own time per batch), reporting the consumer's stall,
# and prints a short table last. JSON: benchmarks/results/gpu.json (and
# $OUT/gpu.json when OUT is set, for the device runner).
#
#   benchmarks/gpu_check.sh                    CMAKE_CUDA_ARCHITECTURES=90 (H100/H200)
#   CUDA_ARCH=80 benchmarks/gpu_check.sh       another architecture
#   GPU_CHECK_BATCHES=100 benchmarks/gpu_check.sh   a shorter run
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build/gpu}
ARCH=${CUDA_ARCH:-90}
BATCHES=${GPU_CHECK_BATCHES:-200}
RESULTS=$ROOT/benchmarks/results
JOBS=$(nproc)
started=$(date +%s)

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU found (nvidia-smi -L failed); nothing to measure here" >&2
  exit 3
fi
nvidia-smi -L

# The C++ build dependencies only (no Python, no torch), installed when
# missing and apt-get can reach a mirror.
# shellcheck source=tests/deps.sh
source "$ROOT/tests/deps.sh"
GPUFEED_DEBIAN_PACKAGES=(cmake ninja-build g++ pkg-config liburing-dev liblmdb-dev
  libjpeg62-turbo-dev libpng-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev libgtest-dev)
if command -v dpkg-query >/dev/null; then
  gpufeed_install_packages || echo "gpu_check: could not install every package; trying the build anyway" >&2
fi
CUDA_NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

echo "== build (CUDA arch $ARCH, $JOBS jobs)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$CUDA_NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DGPUFEED_WITH_CUDA=ON -DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCHMARKS=ON \
  -DGPUFEED_BUILD_PYTHON=OFF -DGPUFEED_INSTALL=OFF >"$BUILD.configure.log" 2>&1 ||
  { tail -30 "$BUILD.configure.log"; exit 1; }
ninja -C "$BUILD" -j "$JOBS" device_test gpufeed_gpu_bench

echo "== gpu-labelled tests"
tests_status=0
(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 600) || tests_status=$?
"$BUILD/tests/device_test" --gtest_filter='*BytesLand*:*Memory*' 2>/dev/null |
  grep -E "max abs error|device memory" || true

echo "== demo dataset"
DEMO=$(ls -d "$ROOT"/benchmarks/data/demo-recordio-* 2>/dev/null | head -1 || true)
if [ -z "$DEMO" ]; then
  "$BUILD/benchmarks/gpufeed_gpu_bench" --make-demo "$BUILD/demo" --images 2000 >/dev/null
  DEMO=$BUILD/demo/recordio
fi
echo "$DEMO"

echo "== measurements"
mkdir -p "$RESULTS"
"$BUILD/benchmarks/gpufeed_gpu_bench" "$DEMO" --batches "$BATCHES" --threads "$JOBS" \
  --json "$RESULTS/gpu.json" >"$BUILD/gpu_bench.txt"
grep '^RESULT' "$BUILD/gpu_bench.txt"
if [ -n "${OUT:-}" ]; then
  cp "$RESULTS/gpu.json" "$BUILD/gpu_bench.txt" "$OUT/" 2>/dev/null || true
fi
echo
echo "gpu_check: gpu tests $([ "$tests_status" -eq 0 ] && echo passed || echo FAILED), $(( $(date +%s) - started )) s in all"
sed -n '/^$/,$p' "$BUILD/gpu_bench.txt"
exit "$tests_status"
