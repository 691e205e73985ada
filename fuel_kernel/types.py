"""The public enums of fuel_kernel: DType, OpKind, Backend and KernelCaps, numbered as in abi.h.

These are the Python names for the C ABI's enums (fuel_kernel/include/fuel_kernel/abi.h).  DType
and OpKind take their members from fuel_kernel/spec.py, the same table the build generates the C
and Cython enums from; Backend and KernelCaps are still written here and in abi.h, and a test
checks that the numbering matches the header.  Lower-case short names ("f32", "add", "cpu") are
what the coverage diagnostic prints and what the constructors below accept.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, TypeVar

import ml_dtypes
import numpy as np

from . import spec

_Member = TypeVar("_Member")


def _did_you_mean(name: str, choices: Any) -> str:
    """"; did you mean 'x'?" for the closest of choices to name (a choice it begins first), or ""
    when none is close."""
    import difflib
    choices = list(choices)
    prefixed = sorted((c for c in choices if c.startswith(name)), key=len)
    close = prefixed[:1] or difflib.get_close_matches(name, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _SuggestingEnumMeta(enum.EnumMeta):
    """An Enum class whose missing attribute (OpKind.AD) is an AttributeError naming the closest
    member (OpKind.ADD)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"{name!r} is not a member of {cls.__name__}"
                             f"{_did_you_mean(name, cls.__members__)}")


def _member_named_or_numbered(members: Any, value: Any) -> Any:
    """The member of enum `members` that `value` is, names (any case) or numbers (an int, not a
    bool); None if it is none of those."""
    if isinstance(value, members):
        return value
    if isinstance(value, str) and value.upper() in members.__members__:
        return members[value.upper()]
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= int(value) < len(members):
        return members(int(value))
    return None


def _member_repr(member: enum.Enum) -> str:
    """DType.F32, not <DType.F32: 9>: an expression that gives the member back, so signatures
    and the reprs of records that hold members read as code."""
    return f"{type(member).__name__}.{member.name}"


class _DTypeBase(enum.IntEnum, metaclass=_SuggestingEnumMeta):
    """The members (BOOL = 0, U8 = 1, ...) come from fuel_kernel/spec.py (DTYPES)."""

    __repr__ = _member_repr

    @property
    def short_name(self) -> str:
        return _DTYPE_SPEC[self].short

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that holds this dtype (ml_dtypes' bfloat16, float8_e4m3fn and float8_e5m2
        for BF16, F8E4M3 and F8E5M2)."""
        return _NUMPY_DTYPES[self]

    @property
    def itemsize(self) -> int:
        return _DTYPE_SPEC[self].itemsize

    @property
    def is_float(self) -> bool:
        return _DTYPE_SPEC[self].kind == "float"

    @property
    def is_float8(self) -> bool:
        """An 8-bit float storage format (F8E4M3, F8E5M2): moved and cast like any dtype, computed
        with only by MATMUL (docs/design.md); is_float is False for them."""
        return _DTYPE_SPEC[self].kind == "float8"

    @property
    def is_signed_int(self) -> bool:
        return _DTYPE_SPEC[self].kind == "int"

    @property
    def is_unsigned_int(self) -> bool:
        return _DTYPE_SPEC[self].kind == "uint"

    @classmethod
    def parse(cls, value: Any) -> DType:
        """A DType from a DType, its code, its short name ("f32") or a NumPy dtype-like."""
        member = _member_named_or_numbered(DType, value)
        if member is not None:
            return member
        try:
            return _FROM_NUMPY[np.dtype(value)]
        except (TypeError, KeyError):
            pass
        from .errors import DTypeError
        hint = _did_you_mean(value.lower(), [d.short_name for d in cls]) if isinstance(value, str) else ""
        raise DTypeError(f"{value!r} is not a fuel_kernel dtype{hint} (the dtypes: "
                         f"{', '.join(d.short_name for d in cls)})")


if TYPE_CHECKING:
    # DType's and OpKind's members are made at import from fuel_kernel/spec.py, which a type
    # checker cannot run: it sees each as a class whose upper-case attributes (DType.F32,
    # OpKind.ADD) are members, through this metaclass's __getattr__.
    class _SpecMembers(_SuggestingEnumMeta):
        def __getattr__(cls: type[_Member], name: str) -> _Member: ...

    class DType(_DTypeBase, metaclass=_SpecMembers):
        """A fuel_kernel dtype, numbered as fk_dtype in abi.h (members from fuel_kernel/spec.py)."""
else:
    DType = _DTypeBase("DType", [(d.name, d.code) for d in spec.DTYPES], module=__name__)
    DType.__doc__ = """A fuel_kernel dtype, numbered as fk_dtype in abi.h (members from fuel_kernel/spec.py)."""
_DTYPE_SPEC: dict[_DTypeBase, spec.DTypeSpec] = {DType(d.code): d for d in spec.DTYPES}


def _numpy_dtype(name: str) -> np.dtype:
    """np.dtype for a spec NumPy type name: "float32", or "module.name" for a type NumPy lacks."""
    if "." in name:
        module, attr = name.rsplit(".", 1)
        return np.dtype(getattr({"ml_dtypes": ml_dtypes}[module], attr))
    return np.dtype(name)


_NUMPY_DTYPES = {code: _numpy_dtype(d.numpy) for code, d in _DTYPE_SPEC.items()}
_FROM_NUMPY: dict[np.dtype, DType] = {dt: DType(code) for code, dt in _NUMPY_DTYPES.items()}


class _OpKindBase(enum.IntEnum, metaclass=_SuggestingEnumMeta):
    """The members (CAST = 0, CONTIGUIZE = 1, ...) come from fuel_kernel/spec.py (OPS)."""

    __repr__ = _member_repr

    @property
    def short_name(self) -> str:
        """The lower-case name the API accepts in place of the member ("add", "cpu")."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: Any) -> OpKind:
        """An OpKind from an OpKind, its number or its name ("add")."""
        member = _member_named_or_numbered(OpKind, value)
        if member is not None:
            return member
        from .errors import UnknownOpError
        if isinstance(value, str):
            hint = _did_you_mean(value.lower(), [o.short_name for o in cls])
            if hint:
                raise UnknownOpError(f"{value!r} is not an op{hint}")
        raise UnknownOpError(f"{value!r} is not an op; expected an OpKind or one of its names")

    @property
    def doc(self) -> str:
        """The op's one-line description from the spec."""
        return _OP_SPEC[self].doc


if TYPE_CHECKING:
    class OpKind(_OpKindBase, metaclass=_SpecMembers):
        """An op, numbered as fk_op in abi.h (append-only; members from fuel_kernel/spec.py)."""
else:
    OpKind = _OpKindBase("OpKind", [(o.name, o.number) for o in spec.OPS], module=__name__)
    OpKind.__doc__ = """An op, numbered as fk_op in abi.h (append-only; members from fuel_kernel/spec.py)."""
_OP_SPEC: dict[_OpKindBase, spec.OpSpec] = {OpKind(o.number): o for o in spec.OPS}


class Backend(enum.IntEnum):
    """Built-in backends.  Extensions claim ids in [EXTENSION_FIRST, EXTENSION_LAST] at run time
    with fuel_kernel.claim_backend(name); those ids are plain ints."""
    CPU = 0
    CUDA = 1
    VULKAN = 2
    METAL = 3

    EXTENSION_FIRST = 64
    EXTENSION_LAST = 255

    __repr__ = _member_repr

    @property
    def short_name(self) -> str:
        """The lower-case name the API accepts in place of the member ("add", "cpu")."""
        return self.name.lower()


class KernelCaps(enum.IntFlag):
    """What a kernel can do beyond contiguous same-shape operands, numbered as FK_CAP_* in abi.h.
    str() names the flags ("STRIDED_INPUT|INPLACE", "NONE"); repr() is an expression that
    rebuilds the value."""
    NONE = 0
    STRIDED_INPUT = 1
    REQUIRES_BROADCAST = 2
    INPLACE = 4
    STRIDED_OUTPUT = 8

    def _flag_names(self) -> list[str]:
        """The names of the set flags, in bit order, then any bits no flag names as a number."""
        value = int(self)
        names = [flag.name for flag in type(self) if flag.value and value & flag.value == flag.value
                 and flag.name is not None]
        unnamed = value & ~sum(flag.value for flag in type(self))
        return names + ([hex(unnamed)] if unnamed else [])

    def __str__(self) -> str:
        return "|".join(self._flag_names()) or "NONE"

    def __repr__(self) -> str:
        names = self._flag_names()
        if not names:
            return "KernelCaps.NONE"
        return "|".join(f"KernelCaps.{name}" if not name.startswith("0x") else name for name in names)
