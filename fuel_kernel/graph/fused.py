"""Runtime fused ops: register a fused kernel against its Graph decomposition, look one up by id."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from .. import _dispatch
from ..errors import RegistrationError, UnknownOpError
from ..records import BindingKey, PrecisionGuarantee
from ..types import Backend, DType, KernelCaps
from .values import Node, Value, _as_tuple

if TYPE_CHECKING:
    from .builders import Graph


# ---- runtime fused ops -------------------------------------------------------------------------------
@dataclass
class FusedOp:
    """A registered runtime fused op: its id, the decomposition pattern it replaces, its kernels."""
    id: int
    name: str
    n_inputs: int
    pattern: tuple              # ((op, params_key, input refs), ...); ref ("in", i) or ("node", j)
    kernels: List[tuple] = field(default_factory=list)   # (dtypes, backend)
    # (dtypes, backend) -> the output dtype of each pattern node in the decomposition the kernel
    # was verified against: the pattern alone does not fix them (cast(cast(x, f64), f32) and
    # cast(cast(x, f16), f32) share one), so a match must also have these
    interiors: Dict[tuple, tuple] = field(default_factory=dict)


_fused_lock = threading.Lock()
_fused_by_signature: Dict[tuple, FusedOp] = {}
_fused_by_id: Dict[int, FusedOp] = {}

VERIFY_SHAPE = (5, 37)


def _params_key(params: Optional[_dispatch.OpParams]) -> Optional[tuple[Any, ...]]:
    return None if params is None else (params.kind, tuple(sorted((k, repr(v)) for k, v in params.fields().items())))


def _pattern_of(graph: Graph, output: Value) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The structural signature of the nodes producing `output` from the graph's inputs, and the
    output dtype of each of its nodes."""
    index_of: dict[int, int] = {}
    pattern: list[tuple[Any, ...]] = []
    interior: list[Any] = []
    input_ids = {b.id: i for i, b in enumerate(graph.inputs)}

    def ref(value: Value) -> tuple[str, int]:
        if not value.is_whole_buffer:
            raise RegistrationError("a fused decomposition may not use views")
        if value.buffer.kind == "input":
            return ("in", input_ids[value.buffer.id])
        if value.buffer.kind != "node":
            raise RegistrationError("a fused decomposition may not use constants")
        return ("node", visit(value.producer))

    def visit(node: Optional[Node]) -> int:
        assert node is not None             # a "node" buffer has its producer
        if node.id in index_of:
            return index_of[node.id]
        refs = tuple(ref(v) for v in node.inputs)
        pattern.append((node.key, _params_key(node.params), refs))
        interior.append(node.dtypes[-1])
        index_of[node.id] = len(pattern) - 1
        return index_of[node.id]

    visit(output.producer)
    return tuple(pattern), tuple(interior)


def register_runtime_fused(name: str, decomposition: Callable[..., Value], kernel: Any,
                           dtypes: Sequence[Any], backend: Union[Backend, int, str] = Backend.CPU, *,
                           precision: Optional[PrecisionGuarantee] = None,
                           caps: Union[KernelCaps, int] = KernelCaps.STRIDED_INPUT | KernelCaps.STRIDED_OUTPUT,
                           source: str = "fused", params: Optional[_dispatch.OpParams] = None) -> int:
    """Register `kernel` (a 'fuel_kernel.kernel' capsule) as a fused op whose math is
    `decomposition(g, *inputs) -> Value`, built with Graph builder calls.  `dtypes` are the fused
    key's operand dtypes (inputs, then the output).  The kernel is first checked against the
    decomposition on generated inputs, within `precision` (default: exact); only then is it
    registered under BindingKey.runtime_fused(id).  Structurally identical decompositions share
    one id.  Returns the FusedOpId (an int)."""
    given = _as_tuple(dtypes, "dtypes", RegistrationError, of="dtypes (inputs, then the output)")
    dtypes = tuple(DType.parse(d) for d in given)
    if len(dtypes) < 2:
        raise RegistrationError(f"a fused key needs at least one input dtype and the output's, got {len(dtypes)}")
    precision = precision or PrecisionGuarantee(True, 0, notes="fused: exact vs decomposition")
    if not isinstance(precision, PrecisionGuarantee):
        raise RegistrationError(f"precision must be a PrecisionGuarantee, not {type(precision).__name__}")
    from .builders import Graph, _backend_id    # the builder module imports this one
    backend = _backend_id(backend)              # a name ("cpu") as well as a Backend or an id
    scratch = Graph(backend)
    inputs = [scratch.input(VERIFY_SHAPE, d) for d in dtypes[:-1]]
    out = decomposition(scratch, *inputs)
    if not isinstance(out, Value) or out.producer is None:
        raise RegistrationError("a fused decomposition must return the Value of a node it built")
    if out.dtype != dtypes[-1]:
        raise RegistrationError(f"decomposition yields {out.dtype.short_name}, key says {dtypes[-1].short_name}")
    pattern, interior = _pattern_of(scratch, out)
    if len(pattern) < 2:
        raise RegistrationError("a fused op decomposes into at least two nodes")

    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal(VERIFY_SHAPE) * 3).astype(d.numpy) if d.is_float or d.is_float8
              else rng.integers(-50, 50, VERIFY_SHAPE).astype(d.numpy) for d in dtypes[:-1]]
    expected = scratch.compile([out], fuse=False).run(arrays)[0]
    actual = np.empty(out.shape, dtype=dtypes[-1].numpy)
    _dispatch.call_kernel_capsule(kernel, dtypes, arrays, [actual], params)
    if not _within_claim(actual, expected, dtypes[-1], precision):
        raise RegistrationError(f"fused kernel {name!r} disagrees with its decomposition beyond its "
                                f"precision claim ({precision})")

    with _fused_lock:
        signature = (len(inputs), pattern)
        fused = _fused_by_signature.get(signature)
        if fused is None:
            fused = FusedOp(_dispatch.new_runtime_fused_id(), name, len(inputs), pattern)
            _fused_by_signature[signature] = fused
            _fused_by_id[fused.id] = fused
        key = BindingKey.runtime_fused(fused.id)
        known = fused.interiors.get((dtypes, int(backend)))
        if known is not None and known != interior:
            raise RegistrationError(
                f"fused op {fused.name!r} has a kernel for {[d.short_name for d in dtypes]} verified against "
                f"a decomposition with intermediate dtypes {[d.short_name for d in known]}; {name!r} has "
                f"{[d.short_name for d in interior]}")
        address = _dispatch.kernel_address(kernel)
        if any(k.kernel_address == address for k in _dispatch.bindings().alternatives(key, dtypes, backend)):
            return fused.id                      # already registered: registration is idempotent
        with _dispatch.edit_bindings() as tx:
            tx.register(key, dtypes, backend, kernel, caps=caps,
                        precision=precision, cost=_dispatch.DEFAULT_COST, source=source)
        fused.kernels.append((dtypes, int(backend)))
        fused.interiors[(dtypes, int(backend))] = interior
    return fused.id


def fused_op(fused_id: int) -> Optional[FusedOp]:
    """The runtime fused op registered under `fused_id`, or None."""
    if isinstance(fused_id, bool) or not isinstance(fused_id, (int, np.integer)):
        raise UnknownOpError(f"a runtime fused op id is an int, not {type(fused_id).__name__} {fused_id!r}")
    return _fused_by_id.get(int(fused_id))


def _within_claim(actual: Any, expected: Any, dtype: DType, precision: PrecisionGuarantee) -> bool:
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    if not dtype.is_float and not dtype.is_float8:
        return bool(np.array_equal(a, e))
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return False
    finite = ~np.isnan(e)
    a, e = a[finite], e[finite]
    if precision.exact:
        return bool(np.array_equal(a, e))
    bound = np.full(e.shape, precision.max_abs)
    bound = np.maximum(bound, precision.max_rel * np.abs(e))
    if precision.max_ulp:
        bound = np.maximum(bound, precision.max_ulp * np.abs(np.spacing(e.astype(dtype.numpy)).astype(np.float64))
                           if dtype in (DType.F32, DType.F64) else precision.max_ulp * np.abs(e) * 2.0 ** -7)
    return bool(np.all((a == e) | (np.abs(a - e) <= bound)))

