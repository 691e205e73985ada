"""Build fuel_kernel's extensions: the dispatch core and every kernel module under fuel_kernel/cpu.

Every Cython directive and compiler flag lives here.  Environment switches:
  FUEL_KERNEL_DEBUG=1                  bounds checks, C asserts, -O1 -g
  FUEL_KERNEL_SANITIZE=address,undefined  build with those sanitizers (run under CPython with the
                                       gcc runtimes preloaded: tools/sanitize.sh does both)
Kernel C code selects AVX2 / AVX-512 at run time itself (target_clones), so the build never
assumes the build machine's CPU.
"""
import glob
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# Everything generated from fuel_kernel/spec.py (the ABI enums, the graph builders, the params
# constructors and their Cython fill, the kernel modules cpu/_<family>.pyx) is written before
# anything is cythonized or compiled, so the .pyx discovery below finds the kernel modules; they are
# build outputs, not checked in (tools/generate_abi.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import generate_abi  # noqa: E402

generate_abi.write()
sys.path.pop(0)

DEBUG = os.environ.get("FUEL_KERNEL_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("FUEL_KERNEL_SANITIZE", "").strip()

# Python-level code in .pyx keeps Python semantics (negative indices, floor division): the hot
# loops live in C headers, so these cost nothing that matters.  Debug builds add bounds checks.
directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "initializedcheck": DEBUG,
    "wraparound": True,
    "cdivision": False,
    "embedsignature": True,
}

# No kernel reads or traps on floating-point exception flags (-fno-math-errno, -fno-trapping-math),
# so GCC may if-convert selects around float arithmetic and vectorize those loops; values and
# rounding are unchanged (no -ffast-math).
compile_args = ["-std=gnu11", "-fno-math-errno", "-fno-trapping-math", "-Wno-unused-function",
                "-Werror=implicit-function-declaration"]
link_args = []
macros = [("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")]
if DEBUG:
    compile_args += ["-O1", "-g", "-UNDEBUG"]
else:
    compile_args += ["-O3"]
if SANITIZE:
    # every finding stops the process (UBSan would otherwise print and carry on)
    compile_args += [f"-fsanitize={SANITIZE}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
    link_args += [f"-fsanitize={SANITIZE}"]

include_dirs = ["fuel_kernel/include", numpy.get_include()]
# Kernel modules include these headers transitively; list them so editing one rebuilds its users.
headers = sorted(glob.glob("fuel_kernel/include/fuel_kernel/*.h") + glob.glob("fuel_kernel/cpu/*.h")
                 + glob.glob("fuel_kernel/_core/*.h"))


def extension(name, sources, extra_macros=(), extra_includes=()):
    return Extension(name, sources, include_dirs=list(extra_includes) + include_dirs,
                     define_macros=macros + list(extra_macros), depends=headers,
                     extra_compile_args=compile_args, extra_link_args=link_args)


extensions = [
    extension("fuel_kernel._dispatch", ["fuel_kernel/_dispatch.pyx", "fuel_kernel/_core/table.c"],
              extra_macros=[("FK_BUILDING_CORE", "1")], extra_includes=["fuel_kernel/_core"]),
]
for path in sorted(glob.glob("fuel_kernel/**/*.pyx", recursive=True)):
    name = path[:-len(".pyx")].replace("/", ".")
    if name != "fuel_kernel._dispatch":
        extensions.append(extension(name, [path], extra_includes=[os.path.dirname(path)]))

setup(
    ext_modules=cythonize(extensions, compiler_directives=directives,
                          nthreads=os.cpu_count() or 1, quiet=True),
)
