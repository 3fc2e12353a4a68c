# Sourced by tests/run.sh for --sanitize=address|thread: builds the C++
# tests with GCC's sanitizers in their own build directory and runs ctest
# there. C++ tests only: the Python extension would need a sanitized
# interpreter. Findings abort the test that hit them (halt_on_error).

# gpufeed_sanitizer_tests ROOT address|thread
gpufeed_sanitizer_tests() {
  local root=$1 kind=$2 build_dir flags
  case "$kind" in
    address)
      build_dir=${GPUFEED_TEST_BUILD_DIR:-$root/build/asan}
      flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
      export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
      export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}
      ;;
    thread)
      build_dir=${GPUFEED_TEST_BUILD_DIR:-$root/build/tsan}
      flags="-fsanitize=thread -fno-omit-frame-pointer"
      # die_after_fork=0: read_engine_test's PermissionDenied forks a child
      # that drops root and starts an engine (threads): fine with glibc, but
      # TSan refuses threads after a multi-threaded fork by default.
      export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$root/tests/tsan.supp}
      ;;
    *) echo "unknown sanitizer: $kind (address or thread)" >&2; return 2 ;;
  esac
  echo "== C++ tests under the $kind sanitizer ($build_dir)"
  # RelWithDebInfo: optimized like the release (the races and overflows of
  # the real code paths), with line numbers in the reports.
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCHMARKS=OFF -DGPUFEED_BUILD_PYTHON=OFF \
    -DGPUFEED_INSTALL=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null || return 1
  cmake --build "$build_dir" -j "$(nproc)" || return 1
  # install_consumer links an outside project against the installed library,
  # which a sanitized library cannot serve (the runtime must come first).
  (cd "$build_dir" && ctest --output-on-failure -j "$(nproc)" -E '^install_consumer$')
}
