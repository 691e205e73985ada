"""Small immutable records that the binding table hands to Python callers.

BindingKey, PrecisionGuarantee, CostEstimate, CoverageBinding, MatmulM and the three
RuntimeFusedLookup outcomes.  They are plain data; the C structs they mirror live in abi.h.
"""
from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Optional, Union

from .errors import KeyRangeError, ParamsError, UnknownOpError
from .types import Backend, DType, OpKind

KEY_STATIC = 0
KEY_RUNTIME_FUSED = 1
FUSED_ID_LIMIT = 2 ** 32            # fk_key.id is a uint32_t; runtime fused ids are [1, 2**32)


def as_integer(value: object, what: str, error: type[Exception] = ParamsError) -> int:
    """`value` as a Python int: an int, anything with __index__, or an integral float.  A
    non-integral number (1.5) is refused rather than truncated; so is anything else."""
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        pass
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        try:
            f = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            f = math.nan
        if math.isfinite(f) and f.is_integer():
            return int(f)
        raise error(f"{what} must be an integer, not {value!r}")
    raise error(f"{what} must be an integer, not {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class BindingKey:
    """The op half of a binding-table key: a static op or a runtime-registered fused op."""
    kind: int
    id: int

    def __post_init__(self) -> None:
        # The C key holds the kind in 16 bits and the id in 32: validate here, so an out-of-range
        # value is refused instead of truncated into some other op's key.
        kind = as_integer(self.kind, "a BindingKey kind", UnknownOpError)
        op_id = as_integer(self.id, "a BindingKey id", UnknownOpError)
        if kind == KEY_STATIC:
            if not 0 <= op_id < len(OpKind):
                raise KeyRangeError(f"static op id {op_id} is out of range [0, {len(OpKind)})")
        elif kind == KEY_RUNTIME_FUSED:
            if not 0 < op_id < FUSED_ID_LIMIT:
                raise KeyRangeError(f"runtime fused op ids are in [1, 2**32), not {op_id}")
        else:
            raise KeyRangeError(f"BindingKey kind is {KEY_STATIC} (static) or {KEY_RUNTIME_FUSED} "
                                f"(runtime fused), not {kind}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "id", op_id)

    @classmethod
    def static(cls, op: OpKind | int | str) -> BindingKey:
        """The key of static op `op` (an OpKind, its name or its number)."""
        return cls(KEY_STATIC, int(OpKind.parse(op)))

    @classmethod
    def runtime_fused(cls, fused_id: int) -> BindingKey:
        """The key of runtime fused op `fused_id` (from new_runtime_fused_id())."""
        return cls(KEY_RUNTIME_FUSED, as_integer(fused_id, "a runtime fused op id", UnknownOpError))

    @property
    def is_static(self) -> bool:
        """Whether the key names a static op (an OpKind) rather than a runtime fused one."""
        return self.kind == KEY_STATIC

    @property
    def name(self) -> str:
        """The op's short name ("add"), or "fused#<id>" for a runtime fused op."""
        return OpKind(self.id).short_name if self.is_static else f"fused#{self.id}"

    def __repr__(self) -> str:
        if self.is_static:
            return f"BindingKey.static(OpKind.{OpKind(self.id).name})"
        return f"BindingKey.runtime_fused({self.id})"


@dataclass(frozen=True)
class PrecisionGuarantee:
    """A claim about a kernel's results that the test suite verifies against an oracle.

    bit_stable: the same inputs give the same bits on every run and thread count.
    max_ulp: worst error in units in the last place of the output dtype (0 = correctly rounded).
    max_rel / max_abs: alternative bounds for results where ULPs are not meaningful (sums).
    """
    bit_stable: bool = True
    max_ulp: int = 0
    max_rel: float = 0.0
    max_abs: float = 0.0
    notes: str = ""

    @property
    def exact(self) -> bool:
        """Whether the claim is exact: no ulp, relative or absolute error allowed."""
        return self.max_ulp == 0 and self.max_rel == 0.0 and self.max_abs == 0.0

    def as_dict(self) -> dict[str, Any]:
        """The claim's fields as a dict (what the route cache stores)."""
        return {"bit_stable": self.bit_stable, "max_ulp": self.max_ulp, "max_rel": self.max_rel,
                "max_abs": self.max_abs, "notes": self.notes}


class CostEstimate(NamedTuple):
    """A kernel's cost claim for given operand shapes, turned into a time by fuel_kernel.route."""
    flops: float
    bytes_moved: float
    overhead_ns: float


class CoverageBinding(NamedTuple):
    """One key of the coverage diagnostic: (backend, op, operand dtypes)."""
    backend: int
    op: Union[OpKind, BindingKey]       # BindingKey for a runtime fused op
    dtypes: tuple[DType, ...]

    def __repr__(self) -> str:
        return (f"CoverageBinding(backend={backend_repr(self.backend)}, op={enum_repr(self.op)}, "
                f"dtypes={dtypes_repr(self.dtypes)})")


def _non_negative(value: object, where: str, noun: str, wanted: str) -> int:
    """`value` (the `noun` of `where`) as an int >= 0; a ParamsError saying `where` needs `wanted`."""
    value = as_integer(value, f"{where} {noun}")
    if value < 0:
        raise ParamsError(f"{where} needs {wanted}, not {value}")
    return value


@dataclass(frozen=True)
class MatmulM:
    """How many of a matmul's m capacity rows to compute; rows past the count are zeroed."""
    kind: int
    value: int = 0

    ALL_KIND: ClassVar[int] = 0
    ROWS_KIND: ClassVar[int] = 1
    DEFERRED_KIND: ClassVar[int] = 2

    @classmethod
    def all(cls) -> MatmulM:
        """Compute every row (m of the params)."""
        return cls(cls.ALL_KIND, 0)

    @classmethod
    def rows(cls, n: int) -> MatmulM:
        """Compute the first `n` rows; the rest of the output is zeroed."""
        return cls(cls.ROWS_KIND, _non_negative(n, "MatmulM.rows", "count", "a non-negative count"))

    @classmethod
    def deferred(cls, operand: int) -> MatmulM:
        """The row count is read at run time from scalar input operand number `operand`."""
        return cls(cls.DEFERRED_KIND, _non_negative(operand, "MatmulM.deferred", "operand", "an operand index"))

    def __repr__(self) -> str:
        """The constructor call that makes this value: MatmulM.all(), MatmulM.rows(5), ..."""
        if self.kind == self.ALL_KIND and self.value == 0:
            return "MatmulM.all()"
        if self.kind == self.ROWS_KIND:
            return f"MatmulM.rows({self.value!r})"
        if self.kind == self.DEFERRED_KIND:
            return f"MatmulM.deferred({self.value!r})"
        return f"MatmulM(kind={self.kind!r}, value={self.value!r})"


class RuntimeFusedLookup:
    """Outcome of BindingTable.unique_runtime_fused: NotFound, Unique or Ambiguous."""
    __slots__ = ()


@dataclass(frozen=True)
class NotFound(RuntimeFusedLookup):
    """No kernel is registered for the runtime fused op on the backend."""
    fused_id: int
    backend: int

    def __repr__(self) -> str:
        return f"NotFound(fused_id={self.fused_id!r}, backend={backend_repr(self.backend)})"


@dataclass(frozen=True)
class Unique(RuntimeFusedLookup):
    """Exactly one dtype signature has kernels: its dtypes and the first kernel."""
    dtypes: tuple[DType, ...]
    kernel: Any                      # the Kernel handle

    def __repr__(self) -> str:
        return f"Unique(dtypes={dtypes_repr(self.dtypes)}, kernel={self.kernel!r})"


@dataclass(frozen=True)
class Ambiguous(RuntimeFusedLookup):
    """Several dtype signatures have kernels: (dtypes, first kernel) for each."""
    candidates: tuple[tuple[tuple[DType, ...], Any], ...]   # ((dtypes, Kernel), ...)

    def __repr__(self) -> str:
        inner = ", ".join(f"({dtypes_repr(d)}, {k!r})" for d, k in self.candidates)
        return f"Ambiguous(candidates=({inner}{',' if len(self.candidates) == 1 else ''}))"


def enum_repr(value: object) -> str:
    """An enum member as Class.NAME (DType.F32); anything else as its repr."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def dtypes_repr(dtypes: tuple[Any, ...]) -> str:
    """A dtype tuple with member names: (DType.F32, DType.F64)."""
    items = [enum_repr(DType(d)) if isinstance(d, int) and 0 <= d < len(DType) else repr(d) for d in dtypes]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def backend_repr(backend: int) -> str:
    """A built-in backend as Backend.CPU; an extension backend id as its number."""
    try:
        return enum_repr(Backend(backend))
    except ValueError:
        return repr(backend)


def backend_display(backend: int, claimed_name: Optional[str] = None) -> str:
    try:
        return Backend(backend).short_name
    except ValueError:
        return claimed_name or f"backend#{backend}"


def dtypes_display(dtypes: tuple[Any, ...]) -> str:
    return ", ".join(DType(d).short_name for d in dtypes)
