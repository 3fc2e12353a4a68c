# Sourced by tests/run.sh and benchmarks/run.sh: installs the Debian packages
# gpufeed needs, only those that are missing (a fresh Debian 12 machine, as
# root). Without root, missing packages are listed and the script stops.

GPUFEED_DEBIAN_PACKAGES=(
  cmake ninja-build g++ pkg-config
  liburing-dev liblmdb-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libspdlog-dev libxxhash-dev
  libzstd-dev zstd libwebp-dev libtiff-dev libtiff-tools
  nlohmann-json3-dev libdlpack-dev pybind11-dev libgtest-dev libbenchmark-dev
  python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  python3-numpy python3-pil python3-pytest python3-tqdm python3-lmdb python3-protobuf
  python3-torch python3-torchvision python3-matplotlib
  protobuf-compiler
  python3-fusepy fuse3
)
# python3-fusepy (the FUSE fault layer of the Python tests) loads libfuse2 by
# ctypes; as root libfuse2 mounts with mount(2) itself and unmounts with
# "fusermount", which Debian 12's fuse3 provides (a link to fusermount3;
# fuse3 Provides and Breaks the old "fuse" package, so fuse3 is the one).

# gpufeed_package_installed PACKAGE: dpkg has PACKAGE installed. (dpkg's
# answer is compared whole: no pipe into a reader that may stop early.)
gpufeed_package_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# gpufeed_install_packages [extra packages...]
gpufeed_install_packages() {
  local wanted=("${GPUFEED_DEBIAN_PACKAGES[@]}" "$@")
  local missing=()
  local package
  for package in "${wanted[@]}"; do
    if ! gpufeed_package_installed "$package"; then
      missing+=("$package")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  echo "gpufeed: installing missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "gpufeed: not root; install them with: sudo apt-get install ${missing[*]}" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || echo "gpufeed: apt-get update failed; trying the cached package lists" >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The interpreter Debian's python3-* packages belong to.
GPUFEED_PYTHON=/usr/bin/python3

# gpufeed_build_and_install ROOT BUILD_DIR VENV: configures and builds the C++
# tree (library, tests, benchmarks, extension) in BUILD_DIR, then pip-installs
# the package into a fresh venv made from /usr/bin/python3 reusing that build.
gpufeed_build_and_install() {
  local root=$1 build_dir=$2 venv=$3
  local jobs
  jobs=$(nproc)
  rm -rf "$venv"
  "$GPUFEED_PYTHON" -m venv --system-site-packages "$venv"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCHMARKS=ON -DGPUFEED_BUILD_PYTHON=ON \
    -DGPUFEED_INSTALL=ON -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
  cmake --build "$build_dir" -j "$jobs"
  # The same CMake tree: pip only relinks the extension into the venv.
  GPUFEED_BUILD_DIR="$build_dir" \
  GPUFEED_CMAKE_ARGS="-DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCHMARKS=ON -DGPUFEED_INSTALL=ON -DPython_EXECUTABLE=$venv/bin/python" \
    "$venv/bin/pip" install --no-build-isolation --no-deps --no-index -q "$root"
}
