"""The op schema: for each OpKind, its inputs, params family and output shape/dtype inference.

Kernels validate shapes themselves (so C callers are protected too); this table is what Python
needs on top: allocating an output when the caller passes none, and letting the graph builder
infer a node's shape and dtype before it consults the binding table.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .errors import ParamsError, ShapeError
from .types import DType, OpKind


@dataclass(frozen=True)
class OpSchema:
    op: OpKind
    n_inputs: Optional[int]          # None: variadic (CONCAT)
    params: str                      # the params family the op takes ("none", "reduce", ...)
    infer_shape: Callable            # (input shapes, params) -> output shape
    infer_dtype: Callable            # (input dtypes, params) -> output dtype
    make_params: Optional[Callable] = None   # (input shapes) -> OpParams when the caller gives none


def broadcast_shape(shapes, params=None):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError as exc:
        raise ShapeError(f"shapes {', '.join(map(str, shapes))} do not broadcast: {exc}") from None


def same_as_first(dtypes, params=None):
    return dtypes[0]


def same_as_last(dtypes, params=None):
    return dtypes[-1]


def boolean(dtypes, params=None):
    return DType.BOOL


SCHEMAS = {}


def _add(op, n_inputs, params, infer_shape, infer_dtype, make_params=None):
    SCHEMAS[op] = OpSchema(op, n_inputs, params, infer_shape, infer_dtype, make_params)


# CAST's output dtype is the caller's choice, so dispatch() needs an explicit output for it.
_add(OpKind.CAST, 1, "none", broadcast_shape, None)
_add(OpKind.CONTIGUIZE, 1, "none", broadcast_shape, same_as_first)

# Elementwise ops (issue 3): inputs broadcast together (NumPy rules).
for _op in (OpKind.NEG, OpKind.ABS, OpKind.SQR, OpKind.SQRT, OpKind.RSQRT, OpKind.RECIP, OpKind.EXP,
            OpKind.LOG, OpKind.SIN, OpKind.COS, OpKind.TANH, OpKind.SIGMOID, OpKind.RELU,
            OpKind.SILU, OpKind.GELU, OpKind.GELU_ERF, OpKind.ERF, OpKind.STEP, OpKind.FLOOR,
            OpKind.CEIL, OpKind.ROUND, OpKind.SIGN):
    _add(_op, 1, "none", broadcast_shape, same_as_first)
for _op in (OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV, OpKind.MAXIMUM, OpKind.MINIMUM,
            OpKind.POW, OpKind.REM):
    _add(_op, 2, "none", broadcast_shape, same_as_first)
for _op in (OpKind.EQ, OpKind.NE, OpKind.LT, OpKind.LE, OpKind.GT, OpKind.GE):
    _add(_op, 2, "none", broadcast_shape, boolean)


def _where_dtype(dtypes, params=None):
    """WHERE(cond BOOL, a, b) has the dtype of a."""
    return dtypes[1]


_add(OpKind.WHERE, 3, "none", broadcast_shape, _where_dtype)
_add(OpKind.AFFINE, 1, "affine", broadcast_shape, same_as_first)
_add(OpKind.CLAMP, 1, "clamp", broadcast_shape, same_as_first)
_add(OpKind.POWI, 1, "powi", broadcast_shape, same_as_first)


# ---- data movement, indexing and attention (CPU kernels in fuel_kernel/cpu/_movement, _index,
# _attention; operand conventions at the top of their *_kernels.h) ----------------------------
def _fields(params, family):
    if params is None or params.kind != family:
        raise ParamsError(f"this op needs fuel_kernel.params.{family}(...)")
    return params.fields()


def _axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for {ndim} dims")
    return axis % ndim


def _same_as_first_shape(shapes, params=None):
    return shapes[0]


def _slice_shape(shapes, params):
    f = _fields(params, "slice")
    (x,) = shapes
    if len(f["start"]) != len(x):
        raise ShapeError(f"slice lists {len(f['start'])} dims but the input has {len(x)}")
    return tuple(len(range(*slice(a, b, s).indices(n))) for n, a, b, s in zip(x, f["start"], f["stop"], f["step"]))


def _concat_shape(shapes, params):
    axis = _axis(_fields(params, "concat")["axis"], len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0])) if d != axis):
            raise ShapeError(f"concat inputs {shapes} differ off axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _index_select_shape(shapes, params):
    x, idx = shapes
    axis = _axis(_fields(params, "index_select")["axis"], len(x))
    if len(idx) != 1:
        raise ShapeError(f"index_select indices must be 1-d, not {idx}")
    return x[:axis] + idx + x[axis + 1:]


def _pad_shape(shapes, params):
    f = _fields(params, "pad")
    (x,) = shapes
    first = len(x) - len(f["before"])
    if first < 0:
        raise ShapeError(f"pad lists {len(f['before'])} dims for an input of {len(x)}")
    return tuple(n + (f["before"][d - first] + f["after"][d - first] if d >= first else 0) for d, n in enumerate(x))


def _attention_shape(shapes, params=None):
    return shapes[0][:-1] + shapes[2][-1:]


_add(OpKind.SLICE, 1, "slice", _slice_shape, same_as_first)
_add(OpKind.CONCAT, None, "concat", _concat_shape, same_as_first)
_add(OpKind.INDEX_SELECT, 2, "index_select", _index_select_shape, same_as_first)
_add(OpKind.GATHER, 2, "gather", lambda shapes, params=None: shapes[1], same_as_first)
_add(OpKind.SCATTER_ADD, 3, "scatter", _same_as_first_shape, same_as_first)
_add(OpKind.INDEX_ADD, 3, "scatter", _same_as_first_shape, same_as_first)
for _op, _family in ((OpKind.FLIP, "flip"), (OpKind.ROLL, "roll"), (OpKind.CUMSUM, "cumsum"),
                     (OpKind.TRIU, "triangular"), (OpKind.TRIL, "triangular")):
    _add(_op, 1, _family, _same_as_first_shape, same_as_first)
_add(OpKind.PAD, 1, "pad", _pad_shape, same_as_first)
_add(OpKind.MASKED_FILL, 2, "masked_fill", broadcast_shape, same_as_first)
_add(OpKind.ROPE, 3, "rope", _same_as_first_shape, same_as_first)
_add(OpKind.FLASH_ATTN, 3, "flash_attn", _attention_shape, same_as_first)
_add(OpKind.PAGED_ATTN, 6, "paged_attn", _attention_shape, same_as_first)


def schema(op):
    try:
        return SCHEMAS[OpKind(op)]
    except (KeyError, ValueError):
        raise ShapeError(f"op {op!r} has no schema yet; pass its output explicitly") from None


def infer_output_shape(op, input_shapes, params=None):
    """The output shape of op on inputs of these shapes (a ShapeError if they do not fit)."""
    s = schema(op)
    if s.n_inputs is not None and len(input_shapes) != s.n_inputs:
        from .errors import OperandCountError
        raise OperandCountError(f"{OpKind(op).short_name} takes {s.n_inputs} inputs, got {len(input_shapes)}")
    return tuple(s.infer_shape([tuple(x) for x in input_shapes], params))


def infer_output_dtype(op, input_dtypes, params=None):
    s = schema(op)
    if s.infer_dtype is None:
        raise ParamsError(f"{OpKind(op).short_name} needs an explicit output to know its dtype")
    return DType(s.infer_dtype([DType(d) for d in input_dtypes], params))
