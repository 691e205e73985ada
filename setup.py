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

# Everything derived from fuel_kernel/spec.py is generated before anything is cythonized or
# compiled, and is a build output, never checked in: by tools/generate_abi.py the ABI enums
# (abi_enums.h, abi_enums.pxi), the graph builders, the params constructors and their Cython fill,
# and the kernel modules cpu/_<family>.pyx (so the .pyx discovery below finds them); by
# tools/generate_kernels.py the CPU kernel headers rendered from fuel_kernel/cpu/*.h.in into
# build/generated/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import generate_abi  # noqa: E402
import generate_kernels  # noqa: E402

generate_abi.write()
generate_kernels.write()
sys.path.pop(0)
GENERATED_CPU = os.path.relpath(str(generate_kernels.GENERATED / "fuel_kernel" / "cpu"))

DEBUG = os.environ.get("FUEL_KERNEL_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("FUEL_KERNEL_SANITIZE", "").strip()
# FUEL_KERNEL_MAX_ISA=x86-64-v3 caps the forms the kernels may choose at run time at AVX2 (no AVX-512
# or AMX form), so an AVX-512 machine runs, tests and times what an AVX2-only CPU runs.  Unset (or
# x86-64-v4): every form, chosen per CPU.
MAX_ISA = os.environ.get("FUEL_KERNEL_MAX_ISA", "").strip()
if MAX_ISA not in ("", "x86-64-v4", "x86-64-v3"):
    raise SystemExit(f"FUEL_KERNEL_MAX_ISA={MAX_ISA!r}: expected x86-64-v4 or x86-64-v3")

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
# rounding are unchanged (no -ffast-math).  -ffp-contract=fast is GCC's own default for gnu11,
# stated because the GEMM and few-row MATMUL paths' vector sums rely on it (a * b + c fused in the
# FMA clones, where their scalar tails call fma) and an interpreter's CFLAGS come first: GCC has
# documented contracting only under fast, so an inherited -ffp-contract=on or off would split
# those sums from their tails.  Families that promise the same bits on every machine turn
# contraction off themselves (#pragma GCC optimize).  -fwrapv too is stated, not inherited: without
# it GCC 12 left the GEMM's and convolution's packing loops scalar in their AVX2 and AVX-512 clones
# (test_every_isa_clone_uses_its_vector_width), and an interpreter built without it passes none.
compile_args = ["-std=gnu11", "-fwrapv", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast",
                "-Wno-unused-function", "-Werror=implicit-function-declaration"]
link_args = []
macros = [("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")]
if MAX_ISA == "x86-64-v3":
    macros.append(("FK_ISA_MAX_V3", "1"))
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
                 + glob.glob("fuel_kernel/cpu/*.h.in") + glob.glob(os.path.join(GENERATED_CPU, "*.h"))
                 + glob.glob("fuel_kernel/_core/*.h"))


def family_depends(name):
    """The headers a module depends on: all of them, less the other kernel families' own
    `<family>_kernels.h` (and its template), which no other family includes."""
    own = name.rsplit(".", 1)[-1].lstrip("_") + "_kernels.h"
    shared = ("elementwise_kernels.h", own)
    return [h for h in headers
            if not (os.path.basename(h).replace(".h.in", ".h").endswith("_kernels.h")
                    and os.path.basename(h).replace(".h.in", ".h") not in shared)]


# Headers one module alone includes (not a dependency of every kernel module).
OWN_HEADERS = {"fuel_kernel._executor": ["fuel_kernel/vector_program.h"]}


def extension(name, sources, extra_macros=(), extra_includes=()):
    return Extension(name, sources, include_dirs=list(extra_includes) + include_dirs,
                     define_macros=macros + list(extra_macros),
                     depends=family_depends(name) + OWN_HEADERS.get(name, []),
                     extra_compile_args=compile_args, extra_link_args=link_args)


extensions = [
    extension("fuel_kernel._dispatch", ["fuel_kernel/_dispatch.pyx", "fuel_kernel/_core/table.c",
                                           "fuel_kernel/_core/pool.c", "fuel_kernel/_core/scratch.c"],
              extra_macros=[("FK_BUILDING_CORE", "1")], extra_includes=["fuel_kernel/_core"]),
]
for path in sorted(glob.glob("fuel_kernel/**/*.pyx", recursive=True)):
    name = path[:-len(".pyx")].replace("/", ".")
    if name != "fuel_kernel._dispatch":
        # a kernel module finds its family's header among the hand-written ones beside it or
        # among those rendered from templates
        extensions.append(extension(name, [path], extra_includes=[os.path.dirname(path), GENERATED_CPU]))

setup(
    ext_modules=cythonize(extensions, compiler_directives=directives,
                          nthreads=os.cpu_count() or 1, quiet=True),
    # compile the extensions in parallel by default (pip install runs build_ext without -j)
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
)
