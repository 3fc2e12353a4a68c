#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the C++ tests
# (ctest) and the Python tests (pytest against the pip-installed package).
#
#   ./tests/run.sh            everything
#   ./tests/run.sh --cpp      C++ tests only
#   ./tests/run.sh --python   Python tests only
#   extra arguments after -- go to pytest, e.g. ./tests/run.sh --python -- -k caffe
#   ./tests/run.sh --sanitize=address   C++ tests under ASan + UBSan (build/asan)
#   ./tests/run.sh --sanitize=thread    C++ tests under TSan (build/tsan)
#
# The Python tests mount FUSE fault filesystems (tests/python/faultfs.py);
# where /dev/fuse exists and this runs as root they must run (a skip fails),
# and an EXIT trap unmounts whatever they left (tests/faultfs.sh).
#
# The sanitizer runs cover the C++ suite only (the Python extension would
# need a sanitized interpreter); see docs/reliability.md.
#
# Exits non-zero on any failure.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/script_errors.sh
source "$ROOT/tests/script_errors.sh"
gpufeed_trap_errors tests/run.sh
BUILD_DIR=${GPUFEED_TEST_BUILD_DIR:-$ROOT/build/release}
VENV=$BUILD_DIR/venv
run_cpp=1
run_python=1
sanitize=
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpp) run_python=0 ;;
    --python) run_cpp=0 ;;
    --sanitize=address|--sanitize=thread) sanitize=${1#--sanitize=} ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=tests/deps.sh
source "$ROOT/tests/deps.sh"
started=$(date +%s)
gpufeed_install_packages
if [ -n "$sanitize" ]; then
  # shellcheck source=tests/sanitize.sh
  source "$ROOT/tests/sanitize.sh"
  status=0
  gpufeed_sanitizer_tests "$ROOT" "$sanitize" || status=1
  echo "== tests/run.sh --sanitize=$sanitize finished in $(( $(date +%s) - started )) s: $([ $status = 0 ] && echo PASS || echo FAIL)"
  exit $status
fi
echo "== build ($BUILD_DIR)"
gpufeed_build_and_install "$ROOT" "$BUILD_DIR" "$VENV"

status=0
if [ "$run_python" = 1 ]; then
  # The FUSE fault layer of the Python tests: a required FUSE where this
  # machine has it, and no mount or daemon left behind even when a test fails
  # or the run is interrupted.
  # shellcheck source=tests/faultfs.sh
  source "$ROOT/tests/faultfs.sh"
  gpufeed_faultfs_setup
  trap gpufeed_faultfs_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi
if [ "$run_cpp" = 1 ]; then
  echo "== C++ tests (ctest)"
  (cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)") || status=1
fi
if [ "$run_python" = 1 ]; then
  echo "== Python tests (pytest, installed package in $VENV)"
  # Run from outside the source tree so that the installed package is imported.
  (cd "$BUILD_DIR" && GPUFEED_REPO_ROOT="$ROOT" GPUFEED_BUILD_DIR="$BUILD_DIR" \
     "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python" "${pytest_args[@]}") || status=1
  standin_library=$BUILD_DIR/tests/libgpufeed_cuda_standin.so
  if [ -f "$standin_library" ] && [ "${#pytest_args[@]}" -eq 0 ]; then
    # The device tests once more against gpufeed._core built on the CUDA
    # stand-in (tests/cuda_standin): DLPack device batches, streams and
    # pin_memory run here although this machine has no GPU.
    echo "== Python device tests on the CUDA stand-in ($BUILD_DIR/standin_python)"
    (cd "$BUILD_DIR" && GPUFEED_CUDA_STANDIN_LIBRARY="$standin_library" \
       PYTHONPATH="$BUILD_DIR/standin_python" GPUFEED_REPO_ROOT="$ROOT" GPUFEED_BUILD_DIR="$BUILD_DIR" \
       "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python/test_device.py" \
       "$ROOT/tests/python/test_device_standin.py") || status=1
  fi
fi
echo "== tests/run.sh finished in $(( $(date +%s) - started )) s: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
