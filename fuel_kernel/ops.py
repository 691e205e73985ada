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


def _add(op, n_inputs, params, infer_shape, infer_dtype):
    SCHEMAS[op] = OpSchema(op, n_inputs, params, infer_shape, infer_dtype)


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
