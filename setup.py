"""Builds the gpufeed Python package: setuptools drives CMake for gpufeed._core.

    pip install --no-build-isolation .

Environment:
    GPUFEED_CMAKE_ARGS   extra arguments for the CMake configure step
    GPUFEED_BUILD_DIR    CMake build directory (default: build/python)
    GPUFEED_BUILD_JOBS   parallel compile jobs (default: all cores)
"""

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        output_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.environ.get("GPUFEED_BUILD_DIR", os.path.join(ROOT, "build", "python"))
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGPUFEED_BUILD_PYTHON=ON",
            "-DGPUFEED_BUILD_TESTS=OFF",
            "-DGPUFEED_BUILD_BENCHMARKS=OFF",
            "-DGPUFEED_INSTALL=OFF",
            f"-DGPUFEED_PYTHON_OUTPUT_DIR={output_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
        ] + shlex.split(os.environ.get("GPUFEED_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        jobs = os.environ.get("GPUFEED_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_core", "-j", jobs])


def read_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as cmake:
        for line in cmake:
            if line.startswith("project(gpufeed VERSION"):
                return line.split()[2]
    raise RuntimeError("version not found in CMakeLists.txt")


setup(
    name="gpufeed",
    version=read_version(),
    description="Keeps GPUs fed during training: packed shards, io_uring reads, "
                "a C++ decode pool and overlapped host-to-device copies.",
    long_description=open(os.path.join(ROOT, "README.md")).read()
    if os.path.exists(os.path.join(ROOT, "README.md")) else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.8",
    packages=["gpufeed", "gpufeed.bench", "gpufeed.diagnose"],
    package_dir={"": "python"},
    package_data={"gpufeed": ["py.typed", "*.pyi"]},
    ext_modules=[CMakeExtension("gpufeed._core")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[],
    extras_require={"torch": ["torch"], "progress": ["tqdm"]},
    entry_points={"console_scripts": ["gpufeed = gpufeed.cli:main"]},
    zip_safe=False,
)
