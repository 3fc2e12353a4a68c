#!/usr/bin/env bash
# The GPU check: one prepared script for a machine with an NVIDIA GPU (the
# lent GPU machine: CUDA, a driver, python3 with torch, CMake and ninja, but
# perhaps none of the -dev libraries gpufeed links, and no network).
#
#   benchmarks/gpu_check.sh [--kit FILE.tar.gz] [--build-without-gpu]
#
#   --kit FILE            build against the device kit only (benchmarks/device_kit.sh
#                         makes it on Debian): unpacked under the build folder, used
#                         through CMAKE_PREFIX_PATH, its own pkg-config and
#                         LD_LIBRARY_PATH; /usr and /usr/local are ignored for
#                         packages; no apt-get. Without --kit: the system's packages
#                         (missing Debian packages installed with apt-get when root).
#   --build-without-gpu   when the GPU (or its driver) is all that is missing: build
#                         everything anyway, then stop with the "no GPU" line, exit 3.
#
# Steps, each logged into $OUT as it runs (a trap copies the rest, whatever fails,
# and leaves $OUT with summary.txt, build/ctest/pytest/crash/bench.log and
# logs.tar.gz holding every log and result: at most 8 files):
#   1. pre-flight: nvidia-smi -L, driver, free GPU memory, compute capability,
#      nvcc, cmake, ninja, the C++ compiler, python3 (and Python.h), torch and
#      torch.cuda.is_available(), pytest/numpy/PIL, pybind11, every dependency
#      (or the kit). Anything missing: ONE line "gpu_check: STOP: ..." and exit 2
#      (3 when only the GPU/driver is missing).
#   2. build, all cores: libgpufeed, every test, the benchmarks and gpufeed._core
#      for this machine's python3 (into a staging copy of python/gpufeed),
#      CUDA for CMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}, no CUDA stand-in.
#      With --kit: ldd and the compiler's header list prove the kit was used.
#   3. ctest -L gpu with GPUFEED_REQUIRE_GPU=1; any gtest/ctest skip is a failure.
#   4. python3 -m pytest tests/python/test_device.py with GPUFEED_REQUIRE_GPU=1
#      and PYTHONPATH at the staging copy; any skip is a failure.
#   5. gpufeed_gpu_bench on the demo dataset (made if absent): raw pinned H2D,
#      the device stage alone, the loader end to end with a consumer, and every
#      device byte of one epoch per dtype compared with the CPU's.
# The last lines are the table of targets, PASS/FAIL per row, and the verdict;
# exit 0 only if every row passes. About 3-5 minutes on 16 cores, build included.
#
# Environment: OUT (output folder, default build/gpu-check-out), CUDA_ARCH (90),
# PYTHON (default: python3 on PATH), GPU_CHECK_BUILD_DIR (build/gpu-check),
# GPU_CHECK_BATCHES (200), JOBS (nproc), CUDACXX (nvcc), GPU_CHECK_BUILD_SECONDS
# (the build's limit: 600 on 8 cores or more, 2400 below).
set -uo pipefail  # no -e: every step's status is checked, and reported
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=$(date +%s)

kit_archive=
build_without_gpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) kit_archive=${2:?--kit needs FILE.tar.gz}; shift 2 ;;
    --kit=*) kit_archive=${1#--kit=}; shift ;;
    --build-without-gpu) build_without_gpu=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: STOP: unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[ -n "$kit_archive" ] && kit_archive=$(absolute "$kit_archive")
BUILD=$(absolute "${GPU_CHECK_BUILD_DIR:-$ROOT/build/gpu-check}")
OUT=$(absolute "${OUT:-$ROOT/build/gpu-check-out}")
ARCH=${CUDA_ARCH:-90}
BATCHES=${GPU_CHECK_BATCHES:-200}
JOBS=${JOBS:-$(nproc)}
# The build takes 3-5 minutes on 16 cores, about 20 on 2 (CI's kit check).
BUILD_SECONDS=${GPU_CHECK_BUILD_SECONDS:-$((JOBS >= 8 ? 600 : 2400))}
PY=${PYTHON:-$(command -v python3 || true)}
CMAKE_DIR=$BUILD/cmake
STAGE=$BUILD/python        # the staging copy: $STAGE/gpufeed
# $OUT is bundled at the end (bundle_logs) only when this run made it or found
# it empty: nothing it did not write is ever packed or removed.
bundle=0
if [ ! -e "$OUT" ] || [ -z "$(ls -A "$OUT" 2>/dev/null)" ]; then bundle=1; fi
mkdir -p "$BUILD" "$OUT" || { echo "gpu_check: STOP: cannot create $BUILD and $OUT"; exit 2; }
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

# ------------------------------------------------------------------ reporting
# say: a line to the terminal and to $OUT/summary.txt.
say() { echo "$*" | tee -a "$SUMMARY"; }
step_pid=
stop_line=
table_ready=0
# Rows of the final table (filled as the steps run; a step never reached is FAIL).
declare -A row_value=() row_result=()
ROWS=(ctest pytest stage stall err_uint8 err_float32 err_float16 err_bfloat16 bytes)
declare -A row_name=(
  [ctest]="gpu tests (ctest -L gpu, skip = fail)"
  [pytest]="test_device.py (GPUFEED_REQUIRE_GPU=1)"
  [stage]="device stage vs raw pinned H2D"
  [stall]="consumer stall"
  [err_uint8]="max error uint8 (copy only)"
  [err_float32]="normalize max error float32"
  [err_float16]="normalize max error float16"
  [err_bfloat16]="normalize max error bfloat16"
  [bytes]="bytes checked (GPU vs CPU)")
declare -A row_target=([ctest]="all pass, 0 skipped" [pytest]="all pass, 0 skipped"
  [stage]=">= 0.9" [stall]="< 2%" [err_uint8]="0" [err_float32]="0" [err_float16]="0"
  [err_bfloat16]="0" [bytes]="> 0, 0 differ")
# set_row KEY VALUE RESULT: a row of the final table, also printed at once
# (a run cut short still shows every row it reached in its last lines).
set_row() {
  row_value[$1]=$2
  row_result[$1]=$3
  say "gpu_check: $3: ${row_name[$1]}: $2 (goal ${row_target[$1]})"
}

print_table() {
  local key failed=0 result
  say ""
  say "| target | value | goal | result |"
  say "|---|---|---|---|"
  for key in "${ROWS[@]}"; do
    result=${row_result[$key]:-FAIL}
    [ "$result" = PASS ] || failed=$((failed + 1))
    say "| ${row_name[$key]} | ${row_value[$key]:-not run} | ${row_target[$key]} | $result |"
  done
  if [ "$failed" -eq 0 ]; then
    say "gpu_check: PASS, all ${#ROWS[@]} rows, $(($(date +%s) - started)) s (logs: $OUT)"
  else
    say "gpu_check: FAIL, $failed of ${#ROWS[@]} rows, $(($(date +%s) - started)) s (logs: $OUT)"
  fi
  return "$failed"
}

# The trap: whatever happened, every log and result ends up in $OUT, and the
# last lines are the stop line or the table.
finish() {
  local status=$?
  trap - EXIT INT TERM
  [ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null && wait "$step_pid" 2>/dev/null
  {
    cp -f "$CMAKE_DIR/CMakeCache.txt" "$OUT/CMakeCache.txt"
    cp -f "$CMAKE_DIR/CMakeFiles/CMakeConfigureLog.yaml" "$CMAKE_DIR/CMakeFiles/CMakeError.log" "$OUT/"
    cp -f "$CMAKE_DIR/.ninja_log" "$OUT/ninja_log.txt"
    cp -f "$CMAKE_DIR/Testing/Temporary/LastTest.log" "$OUT/ctest_LastTest.log"
    cp -f "$BUILD/gpu.json" "$BUILD/bench.txt" "$OUT/"
    cp -f "$BUILD/kit/gpufeed-kit/KIT.txt" "$OUT/KIT.txt"
  } 2>/dev/null
  if [ -n "$stop_line" ]; then
    say "$stop_line"
  elif [ "$table_ready" = 1 ]; then
    print_table || status=1
  elif [ "$status" -ne 0 ]; then
    say "gpu_check: STOP: interrupted or failed (exit $status) before the tests; logs in $OUT"
  fi
  bundle_logs
  exit "$status"
}

# $OUT ends with at most 8 files (what a lent GPU machine sends back): every
# log and result in logs.tar.gz, and beside it the summary, the logs a
# failure is read from first and the log a stop line names. Only when this
# run made $OUT or found it empty (bundle=1).
bundle_logs() {
  [ "$bundle" = 1 ] || return 0
  local named
  named=$(echo "$stop_line" | grep -oE '\([a-z_]+\.log\)$' | tr -d '()')
  (
    cd "$OUT" 2>/dev/null || exit 0
    tar --exclude=./logs.tar.gz --exclude=./logs.tar.gz.tmp -czf logs.tar.gz.tmp . 2>/dev/null
    # 1: a file changed while it was read (the folder itself): still complete.
    [ $? -le 1 ] || { rm -f logs.tar.gz.tmp; exit 0; }
    mv -f logs.tar.gz.tmp logs.tar.gz
    for f in * .[!.]*; do
      case "$f" in
        summary.txt | logs.tar.gz | build.log | ctest.log | pytest.log | crash.log | bench.log) ;;
        "$named") ;;
        *) rm -rf -- "$f" ;;
      esac
    done
  )
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# stop CODE MESSAGE: the one-line reason, last.
stop() {
  stop_line="gpu_check: STOP: $2"
  exit "$1"
}

# run_step NAME SECONDS COMMAND...: runs COMMAND with its output in
# $OUT/NAME.log, in the background so that a TERM reaches the trap at once.
run_step() {
  local name=$1 seconds=$2 status
  shift 2
  local log=$OUT/$name.log
  echo "== $name: $*" >"$log"
  local t0
  t0=$(date +%s)
  timeout --kill-after=10 "$seconds" "$@" >>"$log" 2>&1 &
  step_pid=$!
  wait "$step_pid"
  status=$?
  step_pid=
  echo "== $name: exit $status after $(($(date +%s) - t0)) s" >>"$log"
  [ "$status" -eq 124 ] && echo "== $name: TIMED OUT after $seconds s" >>"$log"
  say "gpu_check: $name: exit $status, $(($(date +%s) - t0)) s (log: $name.log)"
  if [ "$status" -ne 0 ]; then
    # The reason, where the caller of a remote run sees it: the log's tail.
    tail -n 15 "$log" | sed "s/^/gpu_check: $name.log| /"
  fi
  return "$status"
}

# ------------------------------------------------------------------ 1. pre-flight
say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, gpufeed" \
  "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), CUDA arch $ARCH, out $OUT"
missing=()      # anything but the GPU
no_gpu=()       # the GPU or its driver

# The GPU and its driver.
gpu_cc=
if ! command -v nvidia-smi >/dev/null; then
  no_gpu+=("nvidia-smi not found (no NVIDIA driver)")
elif ! gpus=$(nvidia-smi -L 2>&1) || [ -z "$gpus" ]; then
  no_gpu+=("nvidia-smi -L failed: $(echo "$gpus" | sed -n 1p)")
else
  echo "$gpus" | sed -n 1,8p | sed 's/^/gpu_check: preflight gpu: /' | tee -a "$SUMMARY"
  query=$(nvidia-smi -i 0 --query-gpu=driver_version,memory.free,memory.total \
    --format=csv,noheader,nounits 2>/dev/null | sed -n 1p)
  IFS=', ' read -r driver free_mib total_mib <<<"$query"
  # compute_cap needs driver 510 or newer.
  gpu_cc=$(nvidia-smi -i 0 --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p | tr -d ' ')
  say "gpu_check: preflight driver $driver, GPU 0 free ${free_mib} of ${total_mib} MiB, compute capability ${gpu_cc:-?}"
  if [ -n "${free_mib:-}" ] && [ "$free_mib" -eq "$free_mib" ] 2>/dev/null && [ "$free_mib" -lt 4096 ]; then
    no_gpu+=("GPU 0 has only $free_mib MiB free (>= 4096 needed)")
  fi
fi

# The CUDA compiler.
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda_major=
if [ -x "$NVCC" ]; then
  nvcc_release=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  cuda_major=${nvcc_release%%.*}
  say "gpu_check: preflight nvcc $NVCC, CUDA $nvcc_release"
else
  missing+=("nvcc (CUDA toolkit; set CUDACXX)")
fi
# The driver must be new enough for the toolkit (CUDA 13: 580, CUDA 12: 525).
if [ -n "${driver:-}" ] && [ -n "$cuda_major" ]; then
  need=0
  [ "$cuda_major" -ge 13 ] && need=580
  [ "$cuda_major" -eq 12 ] && need=525
  if [ "${driver%%.*}" -lt "$need" ] 2>/dev/null; then
    no_gpu+=("driver $driver is too old for CUDA $nvcc_release (needs >= $need)")
  fi
fi
# The architecture built must run on GPU 0 (arch 90 builds sm_90 and PTX for newer GPUs).
if [ -n "$gpu_cc" ] && [[ "$gpu_cc" =~ ^[0-9]+\.[0-9]+$ ]] && [[ "$ARCH" =~ ^[0-9]+ ]]; then
  gpu_arch=${gpu_cc/./}
  arch_number=${ARCH%%[!0-9]*}
  if [ "$gpu_arch" -lt "$arch_number" ]; then
    missing+=("CUDA_ARCH=$ARCH cannot run on GPU 0 (compute capability $gpu_cc): run with CUDA_ARCH=$gpu_arch")
  fi
fi

# Build tools.
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
CXX_COMPILER=${CXX:-$(command -v g++ || command -v c++ || true)}
[ -n "$CXX_COMPILER" ] || missing+=("a C++ compiler (g++)")
if command -v cmake >/dev/null; then
  say "gpu_check: preflight $(cmake --version | sed -n 1p), ninja $(ninja --version 2>/dev/null)," \
    "$("$CXX_COMPILER" --version 2>/dev/null | sed -n 1p)"
fi

# Python, torch, pytest, numpy, PIL, Python.h, pybind11.
torch_cuda_note=
pybind11_dir=
test_stack=()   # what only the test steps need (torch, pytest, numpy, PIL)
if [ -z "$PY" ] || ! "$PY" -c 'import sys' 2>/dev/null; then
  missing+=("python3")
else
  py_report=$("$PY" - <<'EOF' 2>&1
import importlib, os, sys, sysconfig
print("python", sys.version.split()[0], sys.executable)
header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
if not os.path.exists(header):
    print("MISSING Python.h (" + header + ")")
for name in ("pytest", "numpy", "PIL"):
    try:
        importlib.import_module(name)
    except Exception as error:
        print("MISSING python module " + name)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda,
          "is_available", torch.cuda.is_available())
    if torch.version.cuda is None:
        print("NOCUDA torch " + torch.__version__ + " is a CPU-only build")
    elif not torch.cuda.is_available():
        print("NOCUDA torch.cuda.is_available() is False")
except Exception as error:
    print("MISSING torch (" + type(error).__name__ + ": " + str(error).splitlines()[0] + ")")
try:
    import pybind11
    print("PYBIND11", pybind11.get_cmake_dir(), pybind11.__version__)
except Exception:
    pass
EOF
)
  while IFS= read -r line; do
    case "$line" in
      "MISSING python module "* | "MISSING torch "*) test_stack+=("${line#MISSING }") ;;
      "MISSING "*) missing+=("${line#MISSING }") ;;
      "NOCUDA "*) torch_cuda_note=${line#NOCUDA } ;;
      "PYBIND11 "*) read -r _ pybind11_dir pybind11_version <<<"$line" ;;
      *) say "gpu_check: preflight $line" ;;
    esac
  done <<<"$py_report"
fi

# The dependencies: the kit, or the system's.
PKG_MODULES="spdlog fmt nlohmann_json lmdb libxxhash libjpeg libpng gtest"
cmake_args=()
KIT_USR=
KIT_LIBDIR=
if [ -n "$kit_archive" ]; then
  if [ ! -f "$kit_archive" ]; then
    missing+=("the kit $kit_archive (make it with benchmarks/device_kit.sh)")
  else
    # Unpacked again only when the archive changed (a second run rebuilds nothing).
    kit_stamp="$kit_archive $(stat -c '%s %Y' "$kit_archive")"
    if [ "$(cat "$BUILD/kit/.archive" 2>/dev/null)" != "$kit_stamp" ]; then
      rm -rf "$BUILD/kit" && mkdir -p "$BUILD/kit" &&
        tar -C "$BUILD/kit" -xzf "$kit_archive" 2>"$OUT/kit_unpack.log" &&
        echo "$kit_stamp" >"$BUILD/kit/.archive"
    fi
    if [ ! -f "$BUILD/kit/.archive" ]; then
      missing+=("a readable kit ($kit_archive: $(head -1 "$OUT/kit_unpack.log"))")
    else
      KIT_USR=$BUILD/kit/gpufeed-kit/usr
      multiarch=$(sed -n 's/^multiarch //p' "$BUILD/kit/gpufeed-kit/KIT.txt")
      KIT_LIBDIR=$KIT_USR/lib/$multiarch
      PKG_CONFIG=$KIT_USR/bin/pkg-config  # searches only the kit's .pc folders
      export PKG_CONFIG_LIBDIR="$KIT_LIBDIR/pkgconfig:$KIT_USR/lib/pkgconfig:$KIT_USR/share/pkgconfig"
      export PKG_CONFIG_PATH=
      export LD_LIBRARY_PATH="$KIT_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      # The kit's libraries need this glibc (and libstdc++).
      need_glibc=$(sed -n 's/^needs glibc //p' "$BUILD/kit/gpufeed-kit/KIT.txt")
      have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
      if [ -n "$need_glibc" ] && [ -n "$have_glibc" ] &&
        [ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | sed -n 1p)" != "$need_glibc" ]; then
        missing+=("glibc >= $need_glibc for the kit (this machine has $have_glibc)")
      fi
      say "gpu_check: preflight kit $(basename "$kit_archive") ($(head -1 "$BUILD/kit/gpufeed-kit/KIT.txt" | sed 's/^gpufeed device kit, //')), glibc $have_glibc"
      cmake_args+=("-DCMAKE_PREFIX_PATH=$KIT_USR" "-DPKG_CONFIG_EXECUTABLE=$PKG_CONFIG"
        "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local;/")
      # With /usr ignored, FindCUDAToolkit would miss the C library's librt.
      for name in librt.so librt.a; do
        rt=$("${CXX_COMPILER:-c++}" -print-file-name="$name" 2>/dev/null)
        if [ "$rt" != "$name" ] && [ -f "$rt" ]; then
          cmake_args+=("-DCUDAToolkit_rt_LIBRARY=$rt")
          break
        fi
      done
      # The machine's own pybind11 knows its Python; the kit's (Debian 2.10) is the fallback.
      [ -n "$pybind11_dir" ] || pybind11_dir=$KIT_USR/lib/cmake/pybind11
    fi
  fi
else
  PKG_CONFIG=$(command -v pkg-config || command -v pkgconf || true)
  deps_missing() {
    local module
    if [ -z "$PKG_CONFIG" ]; then echo "pkg-config"; return; fi
    for module in $PKG_MODULES; do "$PKG_CONFIG" --exists "$module" || echo "$module"; done
    [ -f /usr/include/dlpack/dlpack.h ] || [ -f /usr/local/include/dlpack/dlpack.h ] || echo dlpack
  }
  absent=$(deps_missing | xargs)
  if [ -n "$absent" ] && command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
    say "gpu_check: preflight installing the Debian packages for: $absent"
    DEBIAN_FRONTEND=noninteractive run_step apt-get 300 bash -c 'apt-get update -qq; apt-get install -y -qq --no-install-recommends pkg-config liburing-dev liblmdb-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libspdlog-dev libfmt-dev libxxhash-dev nlohmann-json3-dev libdlpack-dev libgtest-dev libgmock-dev pybind11-dev libzstd-dev libwebp-dev libtiff-dev' || true
    PKG_CONFIG=$(command -v pkg-config || command -v pkgconf || true)
    absent=$(deps_missing | xargs)
  fi
  [ -n "$PKG_CONFIG" ] && cmake_args+=("-DPKG_CONFIG_EXECUTABLE=$PKG_CONFIG")
  [ -n "$absent" ] && missing+=("dependencies $absent (or use --kit)")
fi
if [ -n "$KIT_USR" ]; then
  absent_modules=
  for module in $PKG_MODULES; do "$PKG_CONFIG" --exists "$module" 2>/dev/null || absent_modules+=" $module"; done
  [ -z "$absent_modules" ] || missing+=("the kit lacks$absent_modules")
  [ -f "$KIT_USR/include/dlpack/dlpack.h" ] || missing+=("the kit lacks dlpack")
fi
if [ -n "${PKG_CONFIG:-}" ] && "$PKG_CONFIG" --exists $PKG_MODULES 2>/dev/null; then
  say "gpu_check: preflight dependencies ($PKG_CONFIG):" \
    "$(for m in $PKG_MODULES; do printf '%s %s, ' "$m" "$("$PKG_CONFIG" --modversion "$m")"; done | sed 's/, $//')"
fi
if [ -n "$pybind11_dir" ]; then
  say "gpu_check: preflight pybind11 ${pybind11_version:-(kit)} at $pybind11_dir"
  cmake_args+=("-Dpybind11_DIR=$pybind11_dir")
fi

# The verdict of the pre-flight: one line.
join() { local IFS=';'; echo "$*" | sed 's/;/; /g'; }
if [ ${#no_gpu[@]} -gt 0 ] && [ -n "$torch_cuda_note" ]; then no_gpu+=("$torch_cuda_note"); fi
if [ ${#no_gpu[@]} -eq 0 ] && [ -n "$torch_cuda_note" ]; then missing+=("$torch_cuda_note"); fi
if [ ${#test_stack[@]} -gt 0 ]; then
  if [ "$build_without_gpu" = 1 ] && [ ${#no_gpu[@]} -gt 0 ]; then
    # No test will run anyway (a bare build machine, the chroot proof):
    # the build goes on and the final no-GPU line names them too.
    no_gpu+=("the test stack: $(join "${test_stack[@]}")")
  else
    missing+=("${test_stack[@]}")
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  stop 2 "missing: $(join "${missing[@]}")$([ ${#no_gpu[@]} -gt 0 ] && echo "; no GPU: $(join "${no_gpu[@]}")")"
fi
if [ ${#no_gpu[@]} -gt 0 ] && [ "$build_without_gpu" = 0 ]; then
  stop 3 "no GPU: $(join "${no_gpu[@]}") (--build-without-gpu builds anyway)"
fi

# ------------------------------------------------------------------ 2. build
rm -rf "$STAGE"
mkdir -p "$STAGE/gpufeed"
# The package's Python files, subpackages (bench/, diagnose/) included; the
# build writes gpufeed/_core*.so beside them.
(cd "$ROOT/python/gpufeed" &&
  find . -type f \( -name '*.py' -o -name '*.pyi' -o -name 'py.typed' \) -not -path '*/__pycache__/*' \
    -exec cp --parents {} "$STAGE/gpufeed/" \;)
run_step configure 300 cmake -S "$ROOT" -B "$CMAKE_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DGPUFEED_PYTHON_KEEP_SYMBOLS=ON \
  -DCMAKE_MAKE_PROGRAM="$(command -v ninja)" \
  -DCMAKE_CXX_COMPILER="$CXX_COMPILER" \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DGPUFEED_WITH_CUDA=ON -DGPUFEED_BUILD_CUDA_STANDIN=OFF \
  -DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCHMARKS=ON \
  -DGPUFEED_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -DGPUFEED_PYTHON_OUTPUT_DIR="$STAGE/gpufeed" \
  -DGPUFEED_INSTALL=OFF "${cmake_args[@]}" ||
  stop 2 "configure failed: $(grep -m1 -E 'CMake Error|Could not|not found' "$OUT/configure.log" | cut -c1-200) (configure.log)"
run_step build "$BUILD_SECONDS" cmake --build "$CMAKE_DIR" -j "$JOBS" ||
  stop 2 "build failed: $(grep -m1 -E 'error|FAILED' "$OUT/build.log" | cut -c1-200) (build.log)"
core_module=$(ls "$STAGE"/gpufeed/_core*.so 2>/dev/null | sed -n 1p)
for built in "$CMAKE_DIR/tests/device_test" "$CMAKE_DIR/benchmarks/gpufeed_gpu_bench" "$core_module"; do
  [ -n "$built" ] && [ -f "$built" ] || stop 2 "the build made no ${built:-gpufeed._core in $STAGE/gpufeed}"
done

# With the kit, prove that it was used: every third-party library the
# binaries load resolves into the kit, and no third-party header came from /usr.
if [ -n "$KIT_USR" ]; then
  {
    for binary in "$CMAKE_DIR/tests/device_test" "$CMAKE_DIR/tests/format_test" \
      "$CMAKE_DIR/benchmarks/gpufeed_gpu_bench" "$CMAKE_DIR/libgpufeed.so" "$core_module"; do
      echo "== ldd $binary"
      ldd "$binary"
    done
    echo "== third-party headers the compiler read (ninja -t deps), outside the kit"
    ninja -C "$CMAKE_DIR" -t deps | grep -E '^ +/' | sed 's/^ *//' | sort -u |
      grep -E '/(spdlog|fmt|nlohmann|gtest|gmock|dlpack|pybind11)/|/(lmdb|xxhash|xxh3|png|pngconf|pnglibconf|jpeglib|jconfig|jmorecfg|turbojpeg|liburing|zlib|zconf)\.h$' |
      grep -v "^$KIT_USR/" | grep -v "/site-packages/pybind11/\|/dist-packages/pybind11/" || echo "(none)"
  } >"$OUT/kit_proof.log" 2>&1
  outside=$({
    grep -E '(spdlog|fmt|lmdb|xxhash|jpeg|png16|uring|turbojpeg)\.so' "$OUT/kit_proof.log" | grep -v "=> $KIT_LIBDIR/"
    grep 'not found' "$OUT/kit_proof.log"
  } | sed 's/^[[:space:]]*//; s/ (0x[0-9a-f]*)$//' | sort -u | sed -n 1,3p | xargs)
  headers=$(sed -n '/outside the kit/,$p' "$OUT/kit_proof.log" | sed 1d | grep -v '^(none)$' | sed -n 1,3p | xargs)
  [ -z "$outside" ] || stop 2 "kit not used: libraries from outside the kit: $outside (kit_proof.log)"
  [ -z "$headers" ] || stop 2 "kit not used: headers from outside the kit: $headers (kit_proof.log)"
  say "gpu_check: kit proof: every dependency library from $KIT_LIBDIR, no third-party header from outside the kit (kit_proof.log)"
fi
say "gpu_check: build complete, $(($(date +%s) - started)) s so far"

if [ ${#no_gpu[@]} -gt 0 ]; then
  stop 3 "no GPU: $(join "${no_gpu[@]}") (full build done in $(($(date +%s) - started)) s; tests not run)"
fi

# ------------------------------------------------------------------ 3. C++ gpu tests
table_ready=1
export GPUFEED_REQUIRE_GPU=1
# Counts from the log: ctest's summary and gtest's own lines; a skip is a failure.
ctest_status=0
run_step ctest 300 bash -c "cd '$CMAKE_DIR' && ctest -L gpu -V --timeout 240" || ctest_status=$?
log=$OUT/ctest.log
# "90% tests passed, 1 tests failed out of 10"; CMake 4 prints "100% tests
# passed out of 10" when none failed (CMake 3: "..., 0 tests failed out of 10").
total=$(sed -n 's/.*tests passed.* out of \([0-9]*\).*/\1/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$log" | tail -1)
if [ -z "$failed" ] && grep -q '100% tests passed' "$log"; then failed=0; fi
# Skipped or not run by ctest, or skipped by gtest inside a test that ctest passed.
skipped=$(grep -cE '\*\*\*(Skipped|Not Run)' "$log")
gtest_skipped=$(grep -oE '^\[  SKIPPED \] [A-Za-z0-9_/.]+ \(' "$log" | sort -u | wc -l)
[ "$gtest_skipped" -gt "$skipped" ] && skipped=$gtest_skipped
gtest_passed=$(grep -c '\[       OK \]' "$log")
if [ "${total:-0}" -gt 0 ] && [ "${failed:-1}" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$ctest_status" -eq 0 ]; then
  set_row ctest "$total tests, $gtest_passed gtest OK, 0 skipped" PASS
else
  set_row ctest "${total:-0} tests, ${failed:-?} failed, $skipped skipped, exit $ctest_status" FAIL
fi

# ------------------------------------------------------------------ 4. test_device.py
pytest_status=0
# From the build folder: nothing but the staging copy can be imported as gpufeed.
in_build=(bash -c 'cd "$0" && exec "$@"' "$BUILD")
run_step pytest 300 "${in_build[@]}" env PYTHONPATH="$STAGE" GPUFEED_REQUIRE_GPU=1 \
  "$PY" -m pytest -q -rsxX -p no:cacheprovider "$ROOT/tests/python/test_device.py" || pytest_status=$?
log=$OUT/pytest.log
loaded=$("${in_build[@]}" env PYTHONPATH="$STAGE" "$PY" -c 'import gpufeed._core as c; print(c.__file__)' 2>&1 | tail -1)
summary=$(grep -E '(passed|failed|skipped|errors?|no tests ran).* in [0-9.]+s' "$log" | tail -1 |
  tr -d '=' | sed 's/^ *//; s/ in [0-9.]*s.*//')
count() {  # count WORD: the number before WORD in pytest's summary, 0 if absent
  local n
  n=$(echo "$summary" | grep -oE "[0-9]+ $1" | awk '{print $1}' | sed -n 1p)
  echo "${n:-0}"
}
py_passed=$(count passed)
py_bad=$(( $(count failed) + $(count "errors?") + $(count skipped) + $(count xfailed) + $(count xpassed) + $(count deselected) ))
if [ "$pytest_status" -eq 0 ] && [ "$py_passed" -gt 0 ] && [ "$py_bad" -eq 0 ] &&
  [[ "$loaded" == "$STAGE/"* ]]; then
  set_row pytest "$summary" PASS
else
  [[ "$loaded" == "$STAGE/"* ]] || summary="$summary; gpufeed._core from $loaded, not the staging copy"
  set_row pytest "${summary:-no summary}, exit $pytest_status" FAIL
fi

# A crash of the Python side (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV; not
# a test that failed or hung): how the extension and torch load together in
# each order, and the native frames where it stops, into crash.log: gdb where
# the machine has it, else (or when gdb gave no frames) a SIGSEGV/SIGABRT
# handler preloaded into python that prints backtrace_symbols; frames in
# _core (built with its symbols here) are resolved with addr2line, and the
# module itself goes into logs.tar.gz. Under a minute when the imports
# load; at most about 7.5 minutes when every step runs into its timeout
# (2 x 45 + 2 x 30 + 45 + 30 + 150 + 60 s).
case "$pytest_status" in
  132 | 134 | 135 | 136 | 139)
    crash_log=$OUT/crash.log
    : >"$crash_log"
    trace_dir=$(mktemp -d)  # a path without spaces: LD_PRELOAD splits on them
    trace_so=$trace_dir/crash_trace.so
    printf '%s\n' '#include <execinfo.h>' '#include <signal.h>' '#include <unistd.h>' \
      'static void on_signal(int s) { void* f[64]; int n = backtrace(f, 64);' \
      '  backtrace_symbols_fd(f, n, 2); signal(s, SIG_DFL); raise(s); }' \
      '__attribute__((constructor)) static void install(void) {' \
      '  signal(SIGSEGV, on_signal); signal(SIGABRT, on_signal); }' >"$trace_dir/crash_trace.c"
    "$CXX_COMPILER" -x c -shared -fPIC -o "$trace_so" "$trace_dir/crash_trace.c" \
      2>>"$crash_log" || trace_so=
    preload=()
    [ -n "$trace_so" ] && preload=("LD_PRELOAD=$trace_so")
    # import_pairs LABEL SECONDS ENV...: both import orders under `env ENV...`.
    import_pairs() {
      local label=$1 seconds=$2 pair
      shift 2
      for pair in "import gpufeed._core; import torch" "import torch; import gpufeed._core"; do
        echo "== ${label}python -c '$pair'" >>"$crash_log"
        "${in_build[@]}" env PYTHONPATH="$STAGE" "$@" timeout "$seconds" \
          "$PY" -c "$pair; print('both loaded')" >>"$crash_log" 2>&1
        say "gpu_check: crash: ${label}python -c '$pair': exit $?"
      done
    }
    import_pairs "" 45 "${preload[@]}"
    # The same without LD_PRELOAD's handler and without the kit in
    # LD_LIBRARY_PATH (the kit's libraries then reach the process only
    # through _core's RUNPATH, never in place of a library torch loads);
    # which objects torch loads define libstdc++'s locale and stream
    # internals (more than libstdc++.so.6: two C++ runtimes in one process);
    # where _core's references bind once torch is loaded (LD_DEBUG=bindings,
    # _core loaded RTLD_NOW so that every reference binds then: any file but
    # libstdc++, libc, libm, libgcc_s, python and the kit interposes on it).
    no_kit=${LD_LIBRARY_PATH:-}
    [ -n "$KIT_LIBDIR" ] && no_kit=${no_kit#"$KIT_LIBDIR"} && no_kit=${no_kit#:}
    import_pairs "without the kit in LD_LIBRARY_PATH: " 30 LD_LIBRARY_PATH="$no_kit"
    echo "== objects defining libstdc++'s locale and ostream internals (after import torch)" >>"$crash_log"
    "${in_build[@]}" env PYTHONPATH="$STAGE" timeout 45 "$PY" -u -c '
import shutil, subprocess, torch
names = ("_ZNSt6locale5_Impl16_M_install_facetEPKNS_2idEPKNS_5facetE",
         "_ZNSt7num_putIcSt19ostreambuf_iteratorIcSt11char_traitsIcEEE2idE",
         "_ZNSo9_M_insertIdEERSoT_")
if shutil.which("nm") is None:
    raise SystemExit("no nm on this machine")
for path in sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    found = [n for n in names if n in out]
    if found:
        print(path, len(found), "of", len(names), flush=True)
' >>"$crash_log" 2>&1
    bindings=$trace_dir/bindings
    "${in_build[@]}" env PYTHONPATH="$STAGE" LD_DEBUG=bindings LD_DEBUG_OUTPUT="$bindings" timeout 30 \
      "$PY" -c "import os, sys, torch; sys.setdlopenflags(os.RTLD_NOW); import gpufeed._core" \
      >/dev/null 2>&1
    echo "== where _core's references bind outside libstdc++, libc, libm, libgcc_s, python and the kit" \
      >>"$crash_log"
    # Field 7 of "PID: binding file FROM [0] to TO [0]: normal symbol ...";
    # the 20 files most bound to.
    cat "$bindings".* 2>/dev/null | grep -E "binding file [^ ]*/_core[.][^ ]*so " | awk '{print $7}' |
      grep -vE "/(libstdc\+\+|libc|libm|libgcc_s|ld-linux-x86-64)\.so|/python[0-9.]*$|/libpython" |
      grep -v "^${KIT_LIBDIR:-/nonexistent}/" | sort | uniq -c | sort -rn | sed -n 1,20p >>"$crash_log"
    # -s: the handler writes to fd 2, which pytest would otherwise capture and lose.
    pytest_args=(-m pytest -x -q -s -p no:faulthandler -p no:cacheprovider
      "$ROOT/tests/python/test_device.py")
    if command -v gdb >/dev/null; then
      echo "== pytest test_device.py under gdb" >>"$crash_log"
      "${in_build[@]}" env PYTHONPATH="$STAGE" GPUFEED_REQUIRE_GPU=1 timeout 150 gdb -q -batch \
        -iex 'set debuginfod enabled off' -ex run -ex bt -ex 'info sharedlibrary' \
        --args "$PY" "${pytest_args[@]}" >>"$crash_log" 2>&1
    fi
    if ! grep -q '^#0' "$crash_log"; then
      echo "== pytest test_device.py under the preloaded handler" >>"$crash_log"
      "${in_build[@]}" env PYTHONPATH="$STAGE" GPUFEED_REQUIRE_GPU=1 "${preload[@]}" timeout 60 \
        "$PY" "${pytest_args[@]}" >>"$crash_log" 2>&1
    fi
    # core_module: the module the build step checked it made.
    if command -v addr2line >/dev/null; then
      echo "== frames in $(basename "$core_module"), resolved" >>"$crash_log"
      grep -oE '_core[^ (]*\.so\(\+0x[0-9a-f]+\)' "$crash_log" | grep -oE '0x[0-9a-f]+' | sort -u |
        sed -n 1,40p | while read -r offset; do
          echo "$offset $(addr2line -f -C -e "$core_module" "$offset" | sed -n 1p)"
        done >>"$crash_log"
    fi
    cp -f "$core_module" "$OUT/"
    rm -rf "$trace_dir"
    # sed, not head: every reader takes its whole input (no SIGPIPE under pipefail).
    { sed -n "/^== objects defining libstdc++'s/,/^== pytest/p" "$crash_log" | grep -v '^== pytest' |
        sed -n 1,16p
      grep -E '^0x[0-9a-f]+ ' "$crash_log" | sed -n 1,15p
      grep -E '^#[0-9]|\(\+0x|\[0x' "$crash_log" | sed -n 1,30p; } |
      sed 's/^/gpu_check: crash.log| /' | tee -a "$SUMMARY"
    ;;
esac

# ------------------------------------------------------------------ 5. benchmark
DEMO=$(ls -d "$ROOT"/benchmarks/data/demo-recordio-* 2>/dev/null | sed -n 1p)
if [ -z "$DEMO" ]; then
  DEMO=$BUILD/demo/recordio
  [ -e "$DEMO" ] || run_step demo 180 "$CMAKE_DIR/benchmarks/gpufeed_gpu_bench" --make-demo "$BUILD/demo" --images 2000
fi
run_step bench 300 "$CMAKE_DIR/benchmarks/gpufeed_gpu_bench" "$DEMO" --batches "$BATCHES" \
  --threads "$JOBS" --json "$BUILD/gpu.json"
cp -f "$OUT/bench.log" "$BUILD/bench.txt" 2>/dev/null
log=$OUT/bench.log
field() {  # field MODE KEY [DTYPE]: a value from the bench's last RESULT line of MODE (and DTYPE)
  grep "^RESULT mode=$1 ${3:+dtype=$3 }" "$log" | tail -1 |
    grep -oE "(^| )$2=[^ ]*" | sed -n 1p | cut -d= -f2 | tr -d '"'
}
ratio=$(field stage ratio)
raw=$(field raw uint8_gbps)
stage_gbps=$(field stage uint8_gbps)
if [ -n "$ratio" ]; then
  set_row stage "$ratio ($stage_gbps of $raw GB/s)" \
    "$(awk -v r="$ratio" 'BEGIN {print (r >= 0.9) ? "PASS" : "FAIL"}')"
fi
stall=$(field end_to_end stall_percent)
if [ -n "$stall" ]; then
  set_row stall "$stall% ($(field end_to_end images_per_s) images/s, consumer $(field end_to_end consumer_ms) ms/batch)" \
    "$(awk -v s="$stall" 'BEGIN {print (s < 2) ? "PASS" : "FAIL"}')"
fi
total_bytes=0
differ=0
checked_dtypes=0
for dtype in uint8 float32 float16 bfloat16; do
  error=$(field check max_abs_error "$dtype")
  [ -n "$error" ] || continue
  bytes=$(field check bytes "$dtype")
  mismatched=$(field check mismatched_bytes "$dtype")
  problem=$(grep "^RESULT mode=check dtype=$dtype " "$log" | tail -1 | sed -n 's/.*problem="\([^"]*\)".*/\1/p')
  total_bytes=$((total_bytes + bytes))
  differ=$((differ + mismatched))
  checked_dtypes=$((checked_dtypes + 1))
  result=$(awk -v e="$error" 'BEGIN {print (e == 0) ? "PASS" : "FAIL"}')
  [ -z "$problem" ] || result=FAIL
  set_row "err_$dtype" "$error ($(field check samples "$dtype") samples${problem:+; $problem})" "$result"
done
if [ "$checked_dtypes" -gt 0 ]; then
  set_row bytes "$total_bytes bytes, $differ differ ($checked_dtypes dtypes)" \
    "$([ "$total_bytes" -gt 0 ] && [ "$differ" -eq 0 ] && [ "$checked_dtypes" -eq 4 ] && echo PASS || echo FAIL)"
fi
mkdir -p "$ROOT/benchmarks/results" 2>/dev/null && cp -f "$BUILD/gpu.json" "$ROOT/benchmarks/results/gpu.json" 2>/dev/null
# Informational lines, then the table (printed by the trap, last).
grep -E '^RESULT|^\|' "$log" | grep -v '^|---' >>"$SUMMARY"
grep -E '^RESULT mode=(raw|stage|end_to_end)' "$log" | cut -c1-200
exit 0
