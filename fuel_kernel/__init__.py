"""fuel_kernel: a kernel dispatch core for tensor programs.

Importing the package publishes the CPU backend's kernels into the binding table.  The public
names: bindings(), edit_bindings(), dispatch(), the enums (DType, OpKind, Backend, KernelCaps),
params, MatmulM, the records (PrecisionGuarantee, CostEstimate, ...) and the errors.
"""
import os
from importlib.machinery import EXTENSION_SUFFIXES as _EXTENSION_SUFFIXES


def _require_compiled_core() -> None:
    """Refuse, with what to do, an import of a source tree whose extensions are not built: the
    plain ImportError of a missing `_dispatch` would not say why."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not any(os.path.exists(os.path.join(here, "_dispatch" + suffix))
               for suffix in _EXTENSION_SUFFIXES):
        raise ImportError(
            f"fuel_kernel is imported from {here}, a source tree whose compiled modules are not "
            f"built for this Python. Build it in place (`python -m pip install -e .` or `python "
            f"setup.py build_ext --inplace`), or leave the source tree (cd elsewhere) to import an "
            f"installed fuel_kernel.")


_require_compiled_core()

from . import params  # noqa: E402  (every import below needs the compiled core)
from ._dispatch import (BindingTable, Kernel, OpParams, Transaction, bindings, claim_backend,
                        dispatch, edit_bindings, new_runtime_fused_id)
from .errors import (AliasError, ArgumentError, BackendError, DTypeError, FuelKernelError,
                     KernelError, KernelIndexError, KernelMemoryError, KernelZeroDivisionError,
                     KeyRangeError, NoKernelError, OperandCountError, OperandTypeError, ParamsError,
                     ReadOnlyError, RegistrationError, ShapeError, UnknownOpError)
from .records import (Ambiguous, BindingKey, CostEstimate, CoverageBinding, MatmulM, NotFound,
                      PrecisionGuarantee, RuntimeFusedLookup, Unique)
from . import threads as _threads
from .threads import get_num_threads, set_num_threads, threads
from .types import Backend, DType, KernelCaps, OpKind
from .cpu import register_cpu_kernels as _register_cpu_kernels

__version__ = "0.1.0"

__all__ = [
    "AliasError", "Ambiguous", "ArgumentError", "Backend", "BackendError", "BindingKey", "BindingTable",
    "CostEstimate", "CoverageBinding", "DType", "DTypeError", "FuelKernelError", "Kernel", "KernelCaps",
    "KernelError", "KernelIndexError", "KernelMemoryError", "KernelZeroDivisionError", "KeyRangeError",
    "MatmulM", "NoKernelError", "NotFound", "OpKind", "OpParams", "OperandCountError",
    "OperandTypeError", "ParamsError", "PrecisionGuarantee", "ReadOnlyError", "RegistrationError",
    "RuntimeFusedLookup", "ShapeError", "Transaction", "Unique", "UnknownOpError", "bindings",
    "claim_backend", "dispatch", "edit_bindings", "get_include", "get_num_threads",
    "new_runtime_fused_id", "params", "set_num_threads", "threads",
]


def get_include() -> str:
    """The folder to add to include_dirs to build against fuel_kernel/abi.h."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


_register_cpu_kernels()
_threads._initial_setting()
_threads._register_with_threadpoolctl()
