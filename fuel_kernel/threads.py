"""How many threads fuel_kernel's kernels use: set_num_threads, get_num_threads, threads(n).

Large kernel calls are cut into blocks that run on one process-wide pool of worker threads
(fuel_kernel/_core/pool.c; the cutting rules are in fuel_kernel/cpu/parallel.h).  The setting is
process-wide, starts at FUEL_KERNEL_NUM_THREADS when that is set, else at the number of CPUs in
the process's affinity mask, and may change at any time.  Results do not depend on it: every
native kernel returns the same bits for any thread count.

The BLAS-backed MATMUL sibling runs inside SciPy's OpenBLAS, which has threads of its own; when
threadpoolctl is installed, setting fuel_kernel's count sets that library's too, so the two never
add up to more threads than asked.  fuel_kernel's pool is also visible to threadpoolctl (user_api
"fuel_kernel"), so `threadpoolctl.threadpool_limits(1)` limits it with everything else.
"""
import contextlib
import os
import warnings
from typing import Any, Iterator

from . import _dispatch

ENV_VAR = "FUEL_KERNEL_NUM_THREADS"
MAX_THREADS = _dispatch.MAX_THREADS

__all__ = ["get_num_threads", "set_num_threads", "threads"]


def get_num_threads() -> int:
    """The number of threads a large kernel call may use (the calling thread included)."""
    return _dispatch._get_num_threads()


def set_num_threads(n: int) -> None:
    """Use up to `n` threads per kernel call from now on (1 = the calling thread only).

    Raises TypeError for a non-integer and ValueError outside [1, MAX_THREADS]."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"set_num_threads takes an integer, got {type(n).__name__}")
    n = n.__index__()
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"the thread count must be in [1, {MAX_THREADS}], got {n}")
    _dispatch._set_num_threads(n)
    _set_blas_threads(n)


@contextlib.contextmanager
def threads(n: int) -> Iterator[int]:
    """Run the `with` body with `n` threads per kernel call, then restore the previous count."""
    previous = get_num_threads()
    set_num_threads(n)
    try:
        yield n
    finally:
        set_num_threads(previous)


def _scipy_blas_controllers() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries SciPy ships (the BLAS sibling's), or []."""
    try:
        # optional (the ImportError below), and without type information when it is installed
        import threadpoolctl  # type: ignore[import-not-found, import-untyped]
    except ImportError:
        return []
    controller = threadpoolctl.ThreadpoolController()
    return [lib for lib in controller.select(user_api="blas").lib_controllers
            if "scipy" in lib.filepath.lower()]


def _set_blas_threads(n: int) -> None:
    from .cpu import blas_sibling_loaded
    if blas_sibling_loaded():
        for lib in _scipy_blas_controllers():
            lib.set_num_threads(n)


def _register_with_threadpoolctl() -> None:
    """Make the pool one of the libraries threadpoolctl lists and limits (when it is installed)."""
    try:
        import threadpoolctl
    except ImportError:
        return
    if not hasattr(threadpoolctl, "register"):       # threadpoolctl < 3.2 has no custom libraries
        return

    class FuelKernelController(threadpoolctl.LibController):
        user_api = "fuel_kernel"
        internal_api = "fuel_kernel"
        filename_prefixes = ("_dispatch",)
        check_symbols = ("fk_get_num_threads", "fk_set_num_threads")

        def get_num_threads(self) -> int:
            return get_num_threads()

        def set_num_threads(self, num_threads: int) -> None:
            set_num_threads(max(1, int(num_threads)))

        def get_version(self) -> str:
            from . import __version__
            return __version__

    threadpoolctl.register(FuelKernelController)


def _initial_setting() -> None:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return
    try:
        set_num_threads(int(value))
    except (TypeError, ValueError):
        warnings.warn(f"{ENV_VAR}={value!r} is not an integer in [1, {MAX_THREADS}]; using "
                      f"{get_num_threads()} threads (the CPUs this process may run on)",
                      RuntimeWarning, stacklevel=3)
