"""The exception hierarchy: every error fuel_kernel raises is a FuelKernelError.

Each class also derives from the built-in exception a Python caller would expect, so
`except TypeError` still catches a dtype mismatch.  Kernels report failures as an fk_status code
plus a thread-local message; _dispatch maps the code to one of these classes (STATUS_ERRORS, built
from the `error` names of fuel_kernel/spec.py's STATUSES).
"""
from . import spec


class FuelKernelError(Exception):
    """Base class of every fuel_kernel error."""

    # Written out so that inspect.signature can read how every subclass is constructed (the
    # built-in exceptions' constructors are C and carry no signature): a message, as any exception.
    def __init__(self, *args: object) -> None:
        super().__init__(*args)


class NoKernelError(FuelKernelError, LookupError):
    """No kernel is registered for (op, dtypes, backend)."""


class UnknownOpError(NoKernelError, ValueError):
    """The op is not an OpKind, an op name or code, or a BindingKey (also a ValueError)."""


class KeyRangeError(UnknownOpError, OverflowError):
    """An op id or key kind that does not fit the key (a static op past the last OpKind, a runtime
    fused id outside [1, 2**32), a kind other than static / runtime fused).  Refused instead of
    truncated, which would resolve to some other op.  Also a ValueError and an OverflowError."""


class ArgumentError(FuelKernelError, ValueError):
    """An argument of a table call is of the wrong kind or out of range (caps, a cost shape)."""


class DTypeError(FuelKernelError, TypeError):
    """An operand's dtype does not match the kernel's key, or is not supported at all."""


class OperandTypeError(FuelKernelError, TypeError):
    """An operand is not an array: neither a NumPy array, a buffer nor a DLPack producer."""


class OperandCountError(FuelKernelError, TypeError):
    """The call passed the wrong number of inputs or outputs for the op."""


class ShapeError(FuelKernelError, ValueError):
    """Shapes or ranks do not fit the op's schema (including more than 8 dims)."""


class ParamsError(FuelKernelError, ValueError):
    """Op parameters are missing, of the wrong family, or out of range."""


class ReadOnlyError(FuelKernelError, ValueError):
    """An output operand is read-only."""


class AliasError(FuelKernelError, ValueError):
    """An output overlaps an input in a way the kernel cannot handle."""


class BackendError(FuelKernelError, ValueError):
    """An operand lives on a different backend than the kernel."""


class KernelIndexError(FuelKernelError, IndexError):
    """An index operand is out of range."""


class KernelZeroDivisionError(FuelKernelError, ZeroDivisionError):
    """Integer division or remainder by zero."""


class KernelMemoryError(FuelKernelError, MemoryError):
    """A kernel could not allocate scratch memory."""


class RegistrationError(FuelKernelError, ValueError):
    """A registration or transaction is invalid; nothing was published."""


class KernelError(FuelKernelError, RuntimeError):
    """A kernel failed for a reason of its own."""


# fk_status code -> exception class: the class each status's row in fuel_kernel/spec.py (STATUSES)
# names; the one map from status codes to exceptions (_dispatch's raise_status reads it).
STATUS_ERRORS = {status.value: globals()[status.error] for status in spec.STATUSES if status.error}
