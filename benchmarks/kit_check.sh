#!/usr/bin/env bash
# CI's check of the only road to a lent GPU machine (run on every commit by
# .ci/run): the device kit is made, its contents are checked, and gpufeed is
# configured and built against the kit alone, exactly as the GPU machine
# builds it (benchmarks/gpu_check.sh --kit), with this machine's -dev
# packages out of the way.
#
#   benchmarks/kit_check.sh            (root: mount namespace, overlays)
#
# Steps (each prints "kit_check: <step>: PASS|FAIL ..." as it ends):
#   1. make: benchmarks/device_kit.sh with a dynamic-linker cache over 64 KiB.
#      A machine with few libraries has a shorter `ldconfig -p` than a pipe's
#      buffer, which hides the class of bug where a reader stops early behind
#      it under pipefail; up to twice 64 KiB the cache is padded (an `ldconfig`
#      first on PATH prints the real cache, then entries of libraries that
#      do not exist) so that the kit is made as on a machine with many more.
#   2. contents: the archive is under 30 MiB and holds every header, library,
#      pkg-config file and CMake package the build asks for (the list below,
#      which follows CMakeLists.txt), and every link in it is relative and
#      leads to a file of the kit.
#   3. build: in a private mount namespace, every file of the Debian packages
#      the kit was made from (KIT.txt) is hidden by overlay whiteouts, then
#      benchmarks/gpu_check.sh --kit ARCHIVE --build-without-gpu configures
#      and builds everything (library, tests, benchmarks, CUDA, gpufeed._core
#      with the kit's pybind11) and proves with ldd and ninja's header list
#      that the kit was used; it must stop at the missing GPU (exit 3) after
#      its "kit proof" line. On a GPU machine it would go on to the tests,
#      so this check insists on the build-only stop only where there is none.
#
# Environment: KIT_CHECK_DIR (default build/kit-check: the archive, gpu_check's
# build and its logs), GPU_CHECK_BUILD_SECONDS (passed on).
# About 15-20 minutes on 2 cores, almost all of it the build.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/script_errors.sh
source "$ROOT/tests/script_errors.sh"
gpufeed_trap_errors kit_check
# shellcheck source=tests/deps.sh
source "$ROOT/tests/deps.sh"
DIR=${KIT_CHECK_DIR:-$ROOT/build/kit-check}
ARCHIVE=$DIR/gpufeed-kit.tar.gz
LIMIT_BYTES=$((30 * 1024 * 1024))
PIPE_BUFFER_BYTES=65536
started=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
  echo "kit_check: needs root (device_kit installs packages; the build step mounts overlays)" >&2
  exit 2
fi
# report STEP RESULT TEXT: one line per finished step.
report() { echo "kit_check: $1: $2 ${*:3}"; }
# What the build step needs of this machine, said before anything is made.
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  report preflight FAIL "no CUDA compiler ($nvcc; install the CUDA toolkit at /usr/local/cuda or" \
    "set CUDACXX): the kit's build compiles gpufeed's CUDA sources"
  exit 1
fi
if ! unshare --mount --propagation private true 2>/dev/null; then
  report preflight FAIL "unshare --mount is refused here (needs CAP_SYS_ADMIN): the build step" \
    "hides the system's -dev files in a private mount namespace"
  exit 1
fi
rm -rf "$DIR"
mkdir -p "$DIR"

# ------------------------------------------------------------------ 1. make
real_ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
linker_cache=$("$real_ldconfig" -p)
cache_bytes=${#linker_cache}
path_prefix=
if [ "$cache_bytes" -le $((2 * PIPE_BUFFER_BYTES)) ]; then
  mkdir -p "$DIR/padded-ldconfig"
  cat >"$DIR/padded-ldconfig/ldconfig" <<EOF
#!/bin/sh
# ldconfig -p as printed on a machine with 3,000 more libraries (kit_check.sh).
if [ "\$1" = "-p" ]; then
  "$real_ldconfig" -p || exit
  exec awk 'BEGIN { for (i = 0; i < 3000; i++)
    printf "\tlibgpufeed-kit-check-padding%04d.so.1 (libc6,x86-64) => /nonexistent/libgpufeed-kit-check-padding%04d.so.1\n", i, i }'
fi
exec "$real_ldconfig" "\$@"
EOF
  chmod +x "$DIR/padded-ldconfig/ldconfig"
  path_prefix=$DIR/padded-ldconfig:
  padded=$(PATH=$path_prefix$PATH ldconfig -p)
  echo "kit_check: this machine's ldconfig -p is $cache_bytes bytes; padded to ${#padded} for the kit"
  cache_bytes=${#padded}
fi
if ! PATH=$path_prefix$PATH "$ROOT/benchmarks/device_kit.sh" "$ARCHIVE" >"$DIR/device_kit.log" 2>&1; then
  tail -n 20 "$DIR/device_kit.log" | sed 's/^/kit_check: device_kit.log| /'
  report make FAIL "(benchmarks/device_kit.sh with an ldconfig -p of $cache_bytes bytes; log $DIR/device_kit.log)"
  exit 1
fi
report make PASS "$(tail -n 1 "$DIR/device_kit.log") (ldconfig -p of $cache_bytes bytes)"

# ------------------------------------------------------------------ 2. contents
size=$(stat -c %s "$ARCHIVE")
[ "$size" -le "$LIMIT_BYTES" ] || { report contents FAIL "$size bytes, over 30 MiB"; exit 1; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
members=$(tar -tzf "$ARCHIVE")
# What CMakeLists.txt asks for: find_package(spdlog, nlohmann_json), pkg-config
# modules lmdb, libxxhash, libjpeg, libpng, liburing; turbojpeg, dlpack,
# GoogleTest/GoogleMock and pybind11 for the tests and the extension.
wanted_headers=(spdlog/spdlog.h fmt/format.h nlohmann/json.hpp lmdb.h xxhash.h jpeglib.h jconfig.h
  turbojpeg.h png.h zlib.h liburing.h dlpack/dlpack.h gtest/gtest.h gmock/gmock.h pybind11/pybind11.h)
wanted_libraries=(libspdlog.so libfmt.so liblmdb.so libxxhash.so libjpeg.so libturbojpeg.so libpng16.so
  liburing.so libgtest.a libgtest_main.a libgmock.a libgmock_main.a)
wanted_pc=(spdlog fmt lmdb libxxhash libjpeg libturbojpeg libpng liburing zlib gtest gmock)
wanted_cmake=(spdlog/spdlogConfig.cmake fmt/fmt-config.cmake pybind11/pybind11Config.cmake)
absent=()
member() { grep -qxF "gpufeed-kit/$1" <<<"$members"; }
for header in "${wanted_headers[@]}"; do member "usr/include/$header" || absent+=("usr/include/$header"); done
for library in "${wanted_libraries[@]}"; do member "usr/lib/$multiarch/$library" || absent+=("usr/lib/$multiarch/$library"); done
for module in "${wanted_pc[@]}"; do
  member "usr/lib/$multiarch/pkgconfig/$module.pc" || member "usr/share/pkgconfig/$module.pc" ||
    absent+=("$module.pc")
done
for config in "${wanted_cmake[@]}"; do
  member "usr/lib/$multiarch/cmake/$config" || member "usr/lib/cmake/$config" ||
    member "usr/share/cmake/$config" || absent+=("cmake/$config")
done
grep -q 'json.*[Cc]onfig\.cmake$' <<<"$members" || absent+=("nlohmann_json's CMake config")
for tool in usr/bin/pkg-config usr/bin/pkgconf.bin; do member "$tool" || absent+=("$tool"); done
member KIT.txt || absent+=(KIT.txt)
if [ ${#absent[@]} -gt 0 ]; then
  report contents FAIL "the kit lacks: ${absent[*]}"
  exit 1
fi
mkdir -p "$DIR/unpacked"
tar -C "$DIR/unpacked" -xzf "$ARCHIVE"
# An absolute link would lead to this machine's /usr here and to nothing on
# the GPU machine: every link must be relative, and lead into the kit.
absolute_links=$(find "$DIR/unpacked" -type l -lname '/*' -printf '%P ')
[ -z "$absolute_links" ] || { report contents FAIL "absolute links: $absolute_links"; exit 1; }
dangling=$(find "$DIR/unpacked" -xtype l -printf '%P ')
[ -z "$dangling" ] || { report contents FAIL "links that point nowhere: $dangling"; exit 1; }
report contents PASS "$(awk -v b="$size" 'BEGIN {printf "%.1f MiB", b / 1048576}'), $(wc -l <<<"$members") members;" \
  "${#wanted_headers[@]} headers, ${#wanted_libraries[@]} libraries, ${#wanted_pc[@]} .pc, $(( ${#wanted_cmake[@]} + 1 )) CMake packages present"

# ------------------------------------------------------------------ 3. build
# The packages to hide: those the kit was made from, and pkg-config's own.
mapfile -t packages < <(sed -n '/^packages:/,$p' "$DIR/unpacked/gpufeed-kit/KIT.txt" | awk 'NR > 1 {print $1}')
packages+=(pkg-config)
hidden_list=$DIR/hidden-files.txt
for package in "${packages[@]}"; do
  gpufeed_package_installed "$package" || continue
  dpkg -L "$package"
done | while IFS= read -r path; do
  # Files and links, not folders (a folder such as /usr/include is shared);
  # with a merged /usr, /lib/... is named by its /usr/lib/... path.
  if [ -L "$path" ] || [ -f "$path" ]; then
    top=${path#/}
    top=/${top%%/*}
    if [ "$top" != /usr ] && [ -L "$top" ]; then path=/usr$path; fi
    echo "$path"
  fi
done | { grep -v '^/usr/share/\(doc\|man\|lintian\)/' || true; } | sort -u >"$hidden_list"
hidden_count=$(wc -l <"$hidden_list")
[ "$hidden_count" -gt 0 ] || { report build FAIL "no installed file of ${packages[*]} to hide"; exit 1; }
echo "kit_check: hiding $hidden_count files of ${#packages[@]} Debian packages; building against the kit alone"

build_log=$DIR/gpu_check.log
set +e
unshare --mount --propagation private /bin/bash -s -- "$hidden_list" "$DIR" "$ROOT" "$ARCHIVE" \
  >"$build_log" 2>&1 <<'NAMESPACE'
set -euo pipefail
hidden_list=$1 dir=$2 root=$3 archive=$4
source "$root/tests/script_errors.sh"
gpufeed_trap_errors "kit_check (mount namespace)"
echo "kit_check: namespace: hiding the system's -dev files"
layers=$dir/overlay
mkdir -p "$layers"
mount -t tmpfs tmpfs "$layers"
# One overlay per folder holding hidden files (/usr/include, /usr/lib/<x>,
# /usr/share/<x>, /usr/bin), its upper layer a whiteout for each of them.
declare -A roots=()
while IFS= read -r path; do
  IFS=/ read -r -a parts <<<"${path#/}"
  if [ ${#parts[@]} -le 2 ]; then
    mount_root=/${parts[0]}  # a file right under a top folder (/usr/foo)
  elif [ "${parts[1]}" = include ] || [ ${#parts[@]} -le 3 ]; then
    mount_root=/${parts[0]}/${parts[1]}
  else
    mount_root=/${parts[0]}/${parts[1]}/${parts[2]}
  fi
  name=${mount_root//\//_}
  roots[$mount_root]=$name
  mkdir -p "$layers/$name/upper$(dirname "${path#"$mount_root"}")" "$layers/$name/work"
  mknod "$layers/$name/upper${path#"$mount_root"}" c 0 0
done <"$hidden_list"
# Outer folders first: an overlay mounted later on an outer folder would
# cover an inner one's whiteouts.
mapfile -t ordered < <(printf '%s\n' "${!roots[@]}" | awk '{print length($0), $0}' | sort -n | cut -d' ' -f2-)
for mount_root in "${ordered[@]}"; do
  name=${roots[$mount_root]}
  mount -t overlay overlay -o "lowerdir=$mount_root,upperdir=$layers/$name/upper,workdir=$layers/$name/work" "$mount_root"
done
echo "kit_check: overlays on ${!roots[*]}"
# The proof that they work: a header and a .pc of the hidden packages are gone.
for probe in /usr/include/spdlog/spdlog.h /usr/include/lmdb.h /usr/include/gtest/gtest.h; do
  if [ -e "$probe" ]; then echo "kit_check: $probe is still visible"; exit 1; fi
done
if pkgconf --exists lmdb 2>/dev/null; then echo "kit_check: the system's pkgconf still finds lmdb"; exit 1; fi
cd "$root"
exec env PYTHON=/usr/bin/python3 GPU_CHECK_BUILD_DIR="$dir/gpu-check" OUT="$dir/gpu-check-out" \
  benchmarks/gpu_check.sh --kit "$archive" --build-without-gpu
NAMESPACE
code=$?
set -e
tail -n 25 "$build_log" | sed 's/^/kit_check: gpu_check| /'
elapsed=$(( $(date +%s) - started ))
if ! grep -q '^gpu_check: ' "$build_log"; then
  report build FAIL "the mount namespace that hides the system's -dev files could not be set up" \
    "(exit $code, before gpu_check.sh ran; log $build_log)"
  exit 1
fi
if grep -q '^gpu_check: kit proof:' "$build_log" && grep -q '^gpu_check: build complete' "$build_log"; then
  if [ "$code" -eq 3 ] && grep -q '^gpu_check: STOP: no GPU' "$build_log"; then
    report build PASS "against the kit alone ($hidden_count system files hidden), stopped at the missing GPU; ${elapsed} s in all"
    exit 0
  fi
  if [ "$code" -eq 0 ]; then
    report build PASS "against the kit alone, and a GPU here passed every row; ${elapsed} s in all"
    exit 0
  fi
fi
report build FAIL "gpu_check.sh --kit exited $code (expected 3 after its kit proof); log $build_log"
exit 1
