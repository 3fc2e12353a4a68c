#!/usr/bin/env bash
# Packs every third-party library gpufeed builds against into one archive, for
# a CUDA machine that has a compiler, CMake, ninja, Python and torch but none
# of the Debian -dev packages and no network (the lent GPU machine):
#
#   benchmarks/device_kit.sh build/gpufeed-kit.tar.gz      (run on Debian 12, as root
#                                                            if packages must be installed)
#   benchmarks/gpu_check.sh --kit build/gpufeed-kit.tar.gz  (there; see docs/tuning.md)
#
# The archive holds one folder, gpufeed-kit/, laid out like Debian's /usr so
# that every package config file keeps its own relative paths:
#   usr/include/...                    headers (multiarch ones such as jconfig.h also
#                                      copied up into usr/include, which a foreign
#                                      compiler does not search by default)
#   usr/lib/x86_64-linux-gnu/*.so*     shared libraries, with their SONAME and -dev
#                                      symlinks, and the libraries they need that a bare
#                                      machine lacks (libfmt for spdlog); gtest/gmock as
#                                      Debian ships them: static libraries
#   .../pkgconfig/*.pc                 prefix rewritten to ${pcfiledir}/../..(/..)
#   .../cmake/<package>/               CMake package configs (relocatable: the absolute
#                                      paths libjpeg-turbo's export carries are rewritten)
#   usr/bin/pkg-config                 pkgconf and its library behind a wrapper that
#                                      searches only the kit's .pc folders
#   usr/lib/cmake/pybind11, usr/include/pybind11
#                                      Debian's pybind11 2.10, a fallback only:
#                                      gpu_check.sh prefers the machine's own (pip)
#                                      pybind11, which knows its Python (2.10 predates 3.12)
#   KIT.txt                            the Debian packages and versions, the newest
#                                      glibc and libstdc++ symbol versions the libraries
#                                      need (gpu_check.sh compares them with the machine's)
# Not included: CUDA, Python, torch, glibc, libstdc++, libgcc, zlib's library
# (every Linux machine has those; zlib's header and .pc are included because
# libpng's .pc names it).
#
# Prints the archive's size last and fails if it is over 30 MiB (the tree
# carried to the GPU machine, kit included, must stay under 64 MiB).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/script_errors.sh
source "$ROOT/tests/script_errors.sh"
gpufeed_trap_errors device_kit
# shellcheck source=tests/deps.sh
source "$ROOT/tests/deps.sh"
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT.tar.gz" >&2
  exit 2
fi
case "$1" in /*) archive=$1 ;; *) archive=$PWD/$1 ;; esac
LIMIT_BYTES=$((30 * 1024 * 1024))
ARCH_DIR=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# The -dev packages (headers, .so links, .pc, CMake configs) and pkgconf.
KIT_PACKAGES=(libspdlog-dev libfmt-dev liblmdb-dev libxxhash-dev libjpeg62-turbo-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev liburing-dev nlohmann-json3-dev libdlpack-dev
  libgtest-dev libgmock-dev pybind11-dev pkgconf libzstd-dev libwebp-dev libtiff-dev liblzma-dev libdeflate-dev)
# Static archives are left out except these (Debian ships gtest only static;
# libjpeg-turbo's CMake export names its static libraries too.
STATIC_WANTED='^lib(gtest|gtest_main|gmock|gmock_main|jpeg|turbojpeg)\.a$'
# Libraries every machine that runs a C++ compiler has; never copied.
BASE_LIBRARIES='^(linux-vdso|ld-linux[^.]*|libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|libz)\.so'

missing=()
for package in "${KIT_PACKAGES[@]}"; do
  gpufeed_package_installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "device_kit: missing Debian packages (not root): sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "device_kit: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
KIT=$work/gpufeed-kit
mkdir -p "$KIT"

# copy_path SOURCE: copies one file or symlink (as a link) to the same place under the kit.
# A link to an absolute path (liblzma-dev's liblzma.so names /lib/...) is
# made relative: to the same name beside it, where copy_library puts the file.
copy_path() {
  mkdir -p "$KIT$(dirname "$1")"
  cp -P --preserve=mode,links "$1" "$KIT$1"
  if [ -L "$1" ] && [[ "$(readlink "$1")" == /* ]]; then
    ln -sfn "$(basename "$(readlink "$1")")" "$KIT$1"
  fi
}

# The dynamic linker's cache, read whole once (name -> path of the first
# x86-64 entry): `ldconfig -p` runs past a pipe's buffer on a machine with many
# libraries, so no reader may stop early behind it.
declare -A linker_cache=()
ldconfig_output=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p)
while read -r library_name library_path; do
  [ -n "${linker_cache[$library_name]:-}" ] || linker_cache[$library_name]=$library_path
done < <(awk '/x86-64/ {print $1, $NF}' <<<"$ldconfig_output")

# copy_library FILE: the real file behind FILE, the SONAME link to it, and
# (recursively) what it needs beyond the base libraries.
declare -A copied_libraries=()
copy_library() {
  local real soname dependency
  real=$(readlink -f "$1")
  [ -n "${copied_libraries[$real]:-}" ] && return 0
  copied_libraries[$real]=1
  copy_path "$real"
  soname=$(objdump -p "$real" | awk '$1 == "SONAME" {print $2}')
  if [ -n "$soname" ] && [ "$soname" != "$(basename "$real")" ]; then
    ln -sf "$(basename "$real")" "$KIT$(dirname "$real")/$soname"
  fi
  for dependency in $(objdump -p "$real" | awk '$1 == "NEEDED" {print $2}'); do
    [[ "$dependency" =~ $BASE_LIBRARIES ]] && continue
    local found=${linker_cache[$dependency]:-}
    if [ -z "$found" ]; then
      echo "device_kit: $real needs $dependency, which is not installed" >&2
      exit 1
    fi
    # A library in /lib is the same file as in /usr/lib (merged /usr).
    copy_library "/usr/lib/$ARCH_DIR/$(basename "$found")"
  done
}

manifest_packages=()
for package in "${KIT_PACKAGES[@]}"; do
  manifest_packages+=("$package $(dpkg-query -W -f='${Version}' "$package")")
  while IFS= read -r path; do
    [ -f "$path" ] || [ -L "$path" ] || continue
    name=$(basename "$path")
    case "$path" in
      /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/src/*) continue ;;
      /usr/bin/libpng*-config) continue ;;  # shell scripts with /usr baked in; .pc covers them
      /usr/include/* | */cmake/* | */pkgconfig/*.pc) copy_path "$path" ;;
      */libz.so | */libz.a) continue ;;  # the machine's own zlib
      *.a) [[ "$name" =~ $STATIC_WANTED ]] && copy_path "$path" ;;
      *.so | *.so.*) copy_path "$path"; [ -L "$path" ] && copy_library "$path" ;;
      /usr/bin/pkgconf) copy_path "$path" ;;
    esac
  done < <(dpkg -L "$package")
done
# pkgconf's own library (libpkgconf3, a dependency of the pkgconf package).
copy_library /usr/bin/pkgconf

# Multiarch headers (jconfig.h) where any compiler finds them.
if [ -d "$KIT/usr/include/$ARCH_DIR" ]; then
  cp -rn "$KIT/usr/include/$ARCH_DIR/." "$KIT/usr/include/"
fi

# .pc files: every /usr becomes the kit's usr folder seen from the .pc file.
while IFS= read -r pc; do
  pcdir=$(dirname "${pc#"$KIT"}")  # /usr/lib/x86_64-linux-gnu/pkgconfig, /usr/share/pkgconfig, ...
  up=$(realpath -m --relative-to="$pcdir" /usr)
  sed -E -i "s#(=|-I|-L)/usr(/|\$| )#\1\${pcfiledir}/$up\2#g" "$pc"
done < <(find "$KIT" -name '*.pc')

# CMake configs: relative already (CMake's exports compute the prefix from
# their own location), except libjpeg-turbo's hand-written absolute ones.
while IFS= read -r config; do
  up=$(realpath -m --relative-to="$(dirname "${config#"$KIT"}")" /usr)
  sed -i -e "s#^set(_IMPORT_PREFIX \"/usr\")#get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_DIR}/$up\" ABSOLUTE)#" \
    -e 's#"/usr/#"${_IMPORT_PREFIX}/#g' "$config"
done < <(grep -rl '_IMPORT_PREFIX "/usr")\|IMPORTED_LOCATION_[A-Z]* "/usr/' "$KIT" --include='*.cmake' || true)
# What is left of /usr is the "installed in its original place" shortcut
# CMake writes into every config (unused once relocated) and comments.
leftover=$(grep -rn '/usr' "$KIT" --include='*.cmake' --include='*.pc' |
  grep -v '_realOrig\|PACKAGE_PREFIX_DIR "/usr")\|_IMPORT_PREFIX "/usr/lib/[^"]*/cmake/[^"]*")\|:[0-9]*:[[:space:]]*#' || true)
if [ -n "$leftover" ]; then
  echo "device_kit: absolute /usr paths left in package files:" >&2
  echo "$leftover" >&2
  exit 1
fi

# pkg-config for the kit alone, wherever it is unpacked.
mv "$KIT/usr/bin/pkgconf" "$KIT/usr/bin/pkgconf.bin"
cat >"$KIT/usr/bin/pkg-config" <<EOF
#!/bin/sh
# Debian's pkgconf, searching only this kit's .pc folders (gpufeed device kit).
usr=\$(cd "\$(dirname "\$0")/.." && pwd)
PKG_CONFIG_LIBDIR="\$usr/lib/$ARCH_DIR/pkgconfig:\$usr/lib/pkgconfig:\$usr/share/pkgconfig" \\
LD_LIBRARY_PATH="\$usr/lib/$ARCH_DIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "\$usr/bin/pkgconf.bin" "\$@"
EOF
chmod +x "$KIT/usr/bin/pkg-config"

# The kit must answer for itself before it leaves.
modules="spdlog fmt lmdb libxxhash libjpeg libpng liburing nlohmann_json gtest libzstd libwebp libwebpdemux libtiff-4 liblzma libdeflate"
"$KIT/usr/bin/pkg-config" --exists $modules || {
  echo "device_kit: the kit's pkg-config does not find: $modules" >&2
  exit 1
}
flags=$("$KIT/usr/bin/pkg-config" --cflags --libs $modules)
for flag in $flags; do
  case "$flag" in
    -I/* | -L/*) case "$flag" in -?"$KIT"/*) ;; *) echo "device_kit: $flag is outside the kit" >&2; exit 1 ;; esac ;;
  esac
done

newest_version() {  # newest_version PREFIX: the newest PREFIX_x.y symbol version the kit's libraries need
  find "$KIT" -name '*.so*' -type f -exec objdump -T {} + 2>/dev/null |
    grep -o "$1_[0-9][0-9.]*" | sed "s/^$1_//" | sort -V | tail -1
}
{
  echo "gpufeed device kit, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") ($ARCH_DIR)"
  echo "from gpufeed $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "multiarch $ARCH_DIR"
  echo "needs glibc $(newest_version GLIBC)"
  echo "needs libstdc++ GLIBCXX $(newest_version GLIBCXX)"
  echo "packages:"
  printf '  %s\n' "${manifest_packages[@]}"
} >"$KIT/KIT.txt"

mkdir -p "$(dirname "$archive")"
tar -C "$work" -czf "$archive" gpufeed-kit
size=$(stat -c %s "$archive")
unpacked=$(du -sb "$KIT" | cut -f1)
echo "device_kit: $archive: $(awk -v b="$size" 'BEGIN {printf "%.1f MiB", b / 1048576}')" \
  "($(awk -v b="$unpacked" 'BEGIN {printf "%.1f MiB", b / 1048576}') unpacked, $(find "$KIT" -type f | wc -l) files;" \
  "needs glibc >= $(sed -n 's/^needs glibc //p' "$KIT/KIT.txt"))"
if [ "$size" -gt "$LIMIT_BYTES" ]; then
  echo "device_kit: FAIL: over the 30 MiB limit" >&2
  exit 1
fi
