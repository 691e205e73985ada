"""The op schema: for each OpKind, its inputs, params family and output shape/dtype inference.

Kernels validate shapes themselves (so C callers are protected too); this table is what Python
needs on top: allocating an output when the caller passes none, and letting the graph builder
infer a node's shape and dtype before it consults the binding table.

SCHEMAS is built from fuel_kernel/spec.py: each spec op names its shape rule and its output-dtype
rule, and the rule "foo" is the function foo_shape / foo_dtype below.  A new op whose rules exist
already (a plain unary op: "broadcast", "same_as_first") needs no edit here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from . import spec
from .errors import DTypeError, OperandCountError, ParamsError, ShapeError
from .types import DType, OpKind

if TYPE_CHECKING:
    from ._dispatch import OpParams

Shape = tuple[int, ...]
# A rule of an op with one output returns its shape (dtype); a rule of an op with several returns
# a tuple of them, one per output in order.
ShapeRule = Callable[[Sequence[Shape], Optional["OpParams"]], Any]
DTypeRule = Callable[[Sequence[DType], Optional["OpParams"]], Any]


@dataclass(frozen=True)
class OpSchema:
    op: OpKind
    n_inputs: Optional[int]          # None: variadic (CONCAT)
    params: str                      # the params family the op takes ("none", "reduce", ...)
    infer_shape: ShapeRule              # (input shapes, params) -> output shape(s)
    infer_dtype: Optional[DTypeRule]    # (input dtypes, params) -> output dtype(s); None: the caller's
    n_outputs: int = 1               # a key's dtypes are the inputs', then up to this many outputs'
    min_outputs: int = 1             # fewer than n_outputs: the op has optional trailing outputs


# ---- output-shape rules: (input shapes, params) -> the output shape --------------------------------
def broadcast_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"shapes {', '.join(map(str, shapes))} do not broadcast: {exc}") from None


def same_as_first_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    return tuple(shapes[0])


# ---- output-dtype rules: (input dtypes, params) -> the output dtype -------------------------------
def same_as_first_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    return dtypes[0]


def same_as_second_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """WHERE(cond BOOL, a, b) has the dtype of a."""
    return dtypes[1]


def boolean_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    return DType.BOOL


def accumulate_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """SUM and PROD: floats keep their dtype, integers and BOOL accumulate in I64 (as
    reduce_kernels.h's rows)."""
    return dtypes[0] if dtypes[0].is_float else DType.I64


def mean_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """MEAN: floats keep their dtype, integers and BOOL give F64."""
    return dtypes[0] if dtypes[0].is_float else DType.F64


def index_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """ARGMAX, ARGMIN: an I64 index."""
    return DType.I64


# ---- data movement, indexing and attention (CPU kernels in fuel_kernel/cpu/_movement, _index,
# _attention; operand conventions at the top of their *_kernels.h) ----------------------------
def _fields(params: Optional[OpParams], family: str) -> dict[str, Any]:
    if params is None or params.kind != family:
        raise ParamsError(f"this op needs fuel_kernel.params.{family}(...)")
    return params.fields()


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for {ndim} dims")
    return axis % ndim


def slice_shape(shapes: Sequence[Shape], params: Optional[OpParams]) -> Shape:
    f = _fields(params, "slice")
    (x,) = shapes
    if len(f["start"]) != len(x):
        raise ShapeError(f"slice lists {len(f['start'])} dims but the input has {len(x)}")
    return tuple(len(range(*slice(a, b, s).indices(n))) for n, a, b, s in zip(x, f["start"], f["stop"], f["step"]))


def concat_shape(shapes: Sequence[Shape], params: Optional[OpParams]) -> Shape:
    if not shapes:
        raise OperandCountError("concat takes at least one input")
    axis = _axis(_fields(params, "concat")["axis"], len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0])) if d != axis):
            raise ShapeError(f"concat inputs {shapes} differ off axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def index_select_shape(shapes: Sequence[Shape], params: Optional[OpParams]) -> Shape:
    x, idx = shapes
    axis = _axis(_fields(params, "index_select")["axis"], len(x))
    if len(idx) != 1:
        raise ShapeError(f"index_select indices must be 1-d, not {idx}")
    return x[:axis] + idx + x[axis + 1:]


def pad_shape(shapes: Sequence[Shape], params: Optional[OpParams]) -> Shape:
    f = _fields(params, "pad")
    (x,) = shapes
    first = len(x) - len(f["before"])
    if first < 0:
        raise ShapeError(f"pad lists {len(f['before'])} dims for an input of {len(x)}")
    return tuple(n + (f["before"][d - first] + f["after"][d - first] if d >= first else 0) for d, n in enumerate(x))


def attention_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    return shapes[0][:-1] + shapes[2][-1:]


def flash_attn_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[q (B, Hq, Sq, D), k, v (B, Hkv, Sk, Dv)] -> (out (B, Hq, Sq, Dv), lse (B, Hq, Sq))."""
    out = attention_shape(shapes, params)
    return out, out[:-1]


def flash_attn_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """The output in q's dtype; the log-sum-exp in F32."""
    return dtypes[0], DType.F32


def flash_attn_backward_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """FLASH_ATTN_BACKWARD's gradients (dq, dk, dv) have the shapes of q, k and v."""
    return tuple(shapes[0]), tuple(shapes[1]), tuple(shapes[2])


def flash_attn_backward_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """(dq, dk, dv) take the dtypes of (q, k, v)."""
    return dtypes[0], dtypes[1], dtypes[2]


def gather_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """GATHER's output has the index tensor's shape."""
    return tuple(shapes[1])


def schema(op: Union[OpKind, int]) -> OpSchema:
    try:
        return SCHEMAS[OpKind(op)]
    except (KeyError, ValueError, TypeError):
        raise ShapeError(f"op {op!r} has no schema yet; pass its output explicitly") from None


MAX_BYTES = 2 ** 63 - 1


def check_params(op: Union[OpKind, int], params: Any, family: str) -> None:
    """params must be None or an OpParams of `family` (or of the "none" family)."""
    if params is None:
        return
    from ._dispatch import OpParams
    if not isinstance(params, OpParams):
        raise ParamsError(f"params for {OpKind(op).short_name} must come from fuel_kernel.params, "
                          f"not {type(params).__name__}")
    if params.kind not in ("none", family):
        raise ParamsError(f"{OpKind(op).short_name} takes "
                          + ("no params" if family == "none" else f"params.{family}(...)")
                          + f", not params.{params.kind}(...)")


def check_output_shape(shape: Iterable[Any], itemsize: int = 1,
                       what: str = "the output shape") -> Shape:
    """A ShapeError for a shape no array can have: a negative extent, or an element count or byte
    size past int64 (the C layouts)."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ShapeError(f"{what} {shape} has a negative extent")
    total = itemsize
    for s in shape:
        total *= s
    if total > MAX_BYTES:
        raise ShapeError(f"{what} {shape} is too large: {total} {'bytes' if itemsize > 1 else 'elements'} "
                         f"exceed 2**63-1")
    return shape


def n_outputs(op: Union[OpKind, int]) -> int:
    """The most outputs op writes (its key lists their dtypes after the inputs'); an op with
    optional outputs (min_outputs) writes as many as its key lists."""
    return schema(op).n_outputs


def min_outputs(op: Union[OpKind, int]) -> int:
    """The outputs op always writes: n_outputs(op) unless some are optional (FLASH_ATTN's lse)."""
    return schema(op).min_outputs


def infer_output_shapes(op: Union[OpKind, int], input_shapes: Sequence[Sequence[int]],
                        params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """The shape of each output of op on inputs of these shapes (a ShapeError if they do not fit),
    optional outputs included."""
    s = schema(op)
    if s.n_inputs is not None and len(input_shapes) != s.n_inputs:
        raise OperandCountError(f"{OpKind(op).short_name} takes {s.n_inputs} inputs, got {len(input_shapes)}")
    check_params(op, params, s.params)
    shapes = s.infer_shape([tuple(x) for x in input_shapes], params)
    shapes = (shapes,) if s.n_outputs == 1 else tuple(shapes)
    return tuple(check_output_shape(shape, what=f"output {i}'s shape" if s.n_outputs > 1 else "the output shape")
                 for i, shape in enumerate(shapes))


def infer_output_dtypes(op: Union[OpKind, int], input_dtypes: Sequence[Union[DType, int]],
                        params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """The dtype of each output of op on inputs of these dtypes, optional outputs included."""
    s = schema(op)
    if s.infer_dtype is None:
        raise ParamsError(f"{OpKind(op).short_name} needs an explicit output to know its dtype")
    dtypes = s.infer_dtype([DType(d) for d in input_dtypes], params)
    return (DType(dtypes),) if s.n_outputs == 1 else tuple(DType(d) for d in dtypes)


def _single(op: Union[OpKind, int], what: str) -> None:
    count = schema(op).min_outputs
    if count != 1:
        raise OperandCountError(f"{OpKind(op).short_name} writes {count} outputs: ask infer_output_{what}s "
                                f"for all of them")


def infer_output_shape(op: Union[OpKind, int], input_shapes: Sequence[Sequence[int]],
                       params: Optional[OpParams] = None) -> Shape:
    """The (first) output shape of an op writing one output by default (infer_output_shapes for
    any op)."""
    _single(op, "shape")
    return infer_output_shapes(op, input_shapes, params)[0]


def infer_output_dtype(op: Union[OpKind, int], input_dtypes: Sequence[Union[DType, int]],
                       params: Optional[OpParams] = None) -> DType:
    """The (first) output dtype of an op writing one output by default (infer_output_dtypes for
    any op)."""
    _single(op, "dtype")
    return infer_output_dtypes(op, input_dtypes, params)[0]


# ---- compute ops: reductions, matmul, softmax/norms, conv2d and its gradients ---------------
# The conventions these encode are documented in the kernel headers under fuel_kernel/cpu/.

def _reduced_dims(ndim: int, params: Optional[OpParams]) -> tuple[set[int], bool]:
    """The set of reduced dims: params.reduce dims (negative from the end), empty or None = all."""
    fields = params.fields() if params is not None else {}
    dims = fields.get("dims", ())
    if params is not None and params.kind not in ("reduce", "none"):
        raise ParamsError(f"reductions take params.reduce(dims, keepdim), not {params.kind}")
    if not dims:
        return set(range(ndim)), bool(fields.get("keepdim", False))
    out = set()
    for d in dims:
        n = d + ndim if d < 0 else d
        if not 0 <= n < ndim:
            raise ParamsError(f"reduce dim {d} is out of range for a {ndim}-d input")
        out.add(n)
    return out, bool(fields.get("keepdim", False))


def reduce_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    shape = shapes[0]
    dims, keepdim = _reduced_dims(len(shape), params)
    return tuple(1 if d in dims else s for d, s in enumerate(shape) if keepdim or d not in dims)


def matmul_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[A, B] or [A, B, count] -> (*batch, m, n): batch and m, n from params.matmul, else from the
    shapes (A (..., m, k) @ B (..., k, n), batch dims broadcast: matmul_batch_shape)."""
    if len(shapes) not in (2, 3):
        raise OperandCountError(f"matmul takes [A, B] or [A, B, count], got {len(shapes)} inputs")
    a, b = shapes[0], shapes[1]
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs A and B with at least 2 dims, got {a} and {b}")
    if params is not None and params.kind == "matmul":
        f = params.fields()
        return tuple(f["batch"]) + (f["m"], f["n"])
    if params is not None and params.kind != "none":
        raise ParamsError(f"matmul takes params.matmul(...), not {params.kind}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul inner extents differ: {a} @ {b}")
    return matmul_batch_shape(a[:-2], b[:-2]) + (a[-2], b[-1])


def matmul_packed_nbytes(dtype: Union[DType, int, str], k: int, n: int) -> int:
    """The bytes MATMUL_PACK_B writes for a (k, n) B of `dtype` (F16, BF16, F32, F64): the header,
    then k * (n rounded up to the engine's NR) values of B's compute type (spec.GEMM_BLOCKING), or
    of BF16 itself for a BF16 B (its panels keep its own values: half the bytes to stream)."""
    dtype = DType.parse(dtype)
    row = next((d for d in spec.DTYPES if d.name == dtype.name), None)
    if row is None or row.kind != "float":
        raise DTypeError(f"matmul_pack_b packs F16, BF16, F32 or F64 B, not {dtype.short_name}")
    k, n = int(k), int(n)
    if k < 0 or n < 0:
        raise ShapeError(f"a packed matmul B of extents ({k}, {n})")
    nr = spec.gemm_blocking(row.name)[3]
    elem_size = 2 if row.name == "BF16" else 4 if row.compute == "float" else 8
    total = spec.MATMUL_PACKED_HEADER_BYTES + k * (-(-n // nr) * nr) * elem_size
    if total > MAX_BYTES:
        raise ShapeError(f"a packed ({k}, {n}) {dtype.short_name} matmul B would take {total} bytes, past 2**63-1")
    return total


def matmul_pack_b_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[B (k, n)]: the size depends on B's dtype, which a shape rule does not see: pass an output of
    matmul_packed_nbytes(dtype, k, n) bytes (Graph.matmul_pack_b does)."""
    if len(shapes) != 1 or len(shapes[0]) != 2:
        raise ShapeError(f"matmul_pack_b takes one B (k, n), got shapes {list(shapes)}")
    raise ShapeError("matmul_pack_b's output size depends on B's dtype: pass an output of "
                     "fuel_kernel.ops.matmul_packed_nbytes(dtype, k, n) bytes (U8)")


def matmul_pack_b_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """The packed buffer is bytes (U8)."""
    return DType.U8


def matmul_prepacked_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[A (..., m, k), packed B view (k, n)] -> (..., m, n)."""
    if len(shapes) != 2:
        raise OperandCountError(f"matmul_prepacked takes [A, packed B view], got {len(shapes)} inputs")
    a, b = shapes
    if len(a) < 2 or len(b) != 2 or a[-1] != b[0]:
        raise ShapeError(f"matmul_prepacked takes A (..., m, k) and the packed B's (k, n) view, got {a} and {b}")
    return tuple(a[:-1]) + (b[1],)


def matmul_batch_shape(a: Shape, b: Shape) -> Shape:
    """MATMUL's batch: A's and B's batch dims right-aligned, each pair equal, one of them 1 (or
    missing), or A's a multiple of B's (grouped, GQA: index i reads B's i / (A's / B's))."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for ea, eb in zip(a, b):
        if ea == eb or eb == 1 or (eb > 1 and ea % eb == 0):
            out.append(ea)
        elif ea == 1:
            out.append(eb)
        else:
            raise ShapeError(f"matmul batch dims {a} and {b} do not broadcast (each pair equal, one of them 1, "
                             f"or A's a multiple of B's)")
    return tuple(out)


def matmul_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """A's dtype, but F32 for FP8 inputs (the FP8 kernels write F32 or BF16: pass a BF16 output
    to get BF16)."""
    if dtypes[0].is_float8 or (len(dtypes) > 1 and dtypes[1].is_float8):
        return DType.F32
    return dtypes[0]


def conv2d_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (N, C, H, W), w (O, C/groups, KH, KW)] or with a bias (O,) -> (N, O, OH, OW)."""
    if len(shapes) not in (2, 3):
        raise OperandCountError(f"conv2d takes [x, w] or [x, w, bias], got {len(shapes)} inputs")
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(f"conv2d takes NCHW x and (O, C/groups, KH, KW) w, got {x} and {w}")
    f: dict[str, Any] = params.fields() if params is not None and params.kind == "conv2d" else {
        "stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    out = [x[0], w[0]]
    for i in range(2):
        num = x[2 + i] + 2 * f["padding"][i] - f["dilation"][i] * (w[2 + i] - 1) - 1
        if num < 0:
            raise ShapeError(f"conv2d kernel {w[2:]} does not fit the padded input {x[2:]}")
        out.append(num // f["stride"][i] + 1)
    return tuple(out)


def conv1d_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (N, C, L), w (O, C/groups, K)] or with a bias (O,) -> (N, O, OL), as conv2d_shape on one axis
    with the padding (begin, end): OL = floor((L + begin + end - dilation (K - 1) - 1) / stride) + 1."""
    if len(shapes) not in (2, 3):
        raise OperandCountError(f"conv1d takes [x, w] or [x, w, bias], got {len(shapes)} inputs")
    x, w = shapes[0], shapes[1]
    if len(x) != 3 or len(w) != 3:
        raise ShapeError(f"conv1d takes x (N, C, L) and w (O, C/groups, K), got {x} and {w}")
    f: dict[str, Any] = params.fields() if params is not None and params.kind == "conv1d" else {
        "stride": 1, "padding": (0, 0), "dilation": 1, "groups": 1}
    num = x[2] + f["padding"][0] + f["padding"][1] - f["dilation"] * (w[2] - 1) - 1
    if num < 0 or w[2] == 0:
        raise ShapeError(f"conv1d kernel {w[2]} does not fit the padded input {x[2]}")
    return (x[0], w[0], num // f["stride"] + 1)


def conv_transpose2d_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (N, C, H, W), w (C, O/groups, KH, KW)] or with a bias (O,) -> (N, O, OH, OW), per axis
    (H - 1) stride - pads_begin - pads_end + dilation (KH - 1) + output_padding + 1 (at least 1)."""
    if len(shapes) not in (2, 3):
        raise OperandCountError(f"conv_transpose2d takes [x, w] or [x, w, bias], got {len(shapes)} inputs")
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(f"conv_transpose2d takes NCHW x and (C, O/groups, KH, KW) w, got {x} and {w}")
    f: dict[str, Any] = params.fields() if params is not None and params.kind == "conv_transpose2d" else {
        "stride": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0), "dilation": (1, 1), "output_padding": (0, 0),
        "groups": 1}
    out = [x[0], w[1] * f["groups"]]
    for i in range(2):
        if f["output_padding"][i] >= f["stride"][i] and f["output_padding"][i] >= f["dilation"][i]:
            raise ParamsError(f"conv_transpose2d output_padding {f['output_padding']} must be smaller than the "
                              f"stride {f['stride']} or the dilation {f['dilation']} on each axis")
        size = ((x[2 + i] - 1) * f["stride"][i] - f["pads_begin"][i] - f["pads_end"][i]
                + f["dilation"][i] * (w[2 + i] - 1) + f["output_padding"][i] + 1)
        if x[2 + i] < 1 or w[2 + i] < 1 or size < 1:
            raise ShapeError(f"conv_transpose2d of a {x[2:]} input with a {w[2:]} kernel and {params} has an "
                             f"empty or negative output")
        out.append(size)
    return tuple(out)


def pool2d_output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                       ceil_mode: bool) -> int:
    """One axis of ONNX pooling: floor (or ceil) of (size + pads - dilated kernel) / stride, plus 1;
    in ceil mode a last window that would start past the input and its begin padding is dropped
    (the rule PyTorch and ONNX share).  -1 when the dilated kernel does not fit the padded axis."""
    span = size + pad_begin + pad_end - (dilation * (kernel - 1) + 1)
    if span < 0:
        return -1
    out = (span + stride - 1) // stride + 1 if ceil_mode else span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def pool2d_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (N, C, H, W)] -> (N, C, OH, OW) by params.pool2d (required: it holds the kernel size)."""
    if params is None or params.kind != "pool2d":
        raise ParamsError(f"pooling takes params.pool2d(kernel, ...), not {'none' if params is None else params.kind}")
    x = shapes[0]
    if len(x) != 4:
        raise ShapeError(f"pooling takes NCHW x (4 dims), got {x}")
    f = params.fields()
    out = [x[0], x[1]]
    for i in range(2):
        if f["pads_begin"][i] >= f["kernel"][i] or f["pads_end"][i] >= f["kernel"][i]:
            raise ParamsError(f"pooling pads {f['pads_begin']}, {f['pads_end']} must be smaller than the "
                              f"kernel {f['kernel']}")
        o = pool2d_output_size(x[2 + i], f["kernel"][i], f["stride"][i], f["pads_begin"][i], f["pads_end"][i],
                               f["dilation"][i], f["ceil_mode"])
        if o < 0:
            raise ShapeError(f"pooling kernel {f['kernel']} (dilation {f['dilation']}) does not fit the "
                             f"padded input {x[2:]}")
        out.append(o)
    return tuple(out)


def topk_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[x (..., n)] -> (values (..., k), indices (..., k)) by params.topk (required: it holds k)."""
    if params is None or params.kind != "topk":
        raise ParamsError(f"topk takes params.topk(k, ...), not {'none' if params is None else params.kind}")
    x = shapes[0]
    k = params.fields()["k"]
    if len(x) < 1:
        raise ShapeError("topk needs x with at least 1 dim")
    if k > x[-1]:
        raise ShapeError(f"topk k={k} exceeds the last dim's extent {x[-1]}")
    out = tuple(x[:-1]) + (k,)
    return out, out


def topk_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """The values in x's dtype; the indices I64."""
    return dtypes[0], DType.I64


def nonzero_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[x] -> (indices (ndim, numel), count ()): NONZERO's count is data-dependent, so indices has
    room for every element of x (ONNX's layout: one row per dim of x); the kernel fills the first
    count columns, tuple(indices[:, :count]) == np.nonzero(x), and leaves the rest as it was."""
    x = tuple(shapes[0])
    numel = 1
    for s in x:
        numel *= s
    return (len(x), numel), ()


def nonzero_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """The indices and the count, both I64."""
    return DType.I64, DType.I64


def _norm_backward_shapes(name: str, shapes: Sequence[Shape], n_vectors: int) -> tuple[Shape, ...]:
    """[x (..., D), D-vectors..., dy like x] -> (dx like x, then one (D,) per parameter gradient)."""
    x, dy = shapes[0], shapes[-1]
    if len(x) < 1:
        raise ShapeError(f"{name} needs x with at least 1 dim, got {x}")
    if tuple(dy) != tuple(x):
        raise ShapeError(f"{name} needs dy shaped like x {x}, got {dy}")
    for i, v in enumerate(shapes[1:1 + n_vectors]):
        if tuple(v) != (x[-1],):
            raise ShapeError(f"{name} input {i + 1} must be 1-d of extent {x[-1]} (x's last dim), got {v}")
    return (tuple(x),) + ((x[-1],),) * (len(shapes) - 2)


def rms_norm_backward_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[x, weight, dy] -> (dx, dweight)."""
    return _norm_backward_shapes("rms_norm_backward", shapes, 1)


def layer_norm_backward_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[x, weight, bias, dy] -> (dx, dweight, dbias)."""
    return _norm_backward_shapes("layer_norm_backward", shapes, 2)


def rms_norm_backward_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    return (dtypes[0],) * 2


def layer_norm_backward_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    return (dtypes[0],) * 3


def cross_entropy_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[logits (N, C), targets (N,)] -> (loss (N,), lse (N,))."""
    logits, targets = shapes[0], shapes[1]
    if len(logits) != 2 or tuple(targets) != (logits[0],):
        raise ShapeError(f"fused_softmax_cross_entropy takes logits (N, C) and targets (N,), got {logits} "
                         f"and {targets}")
    return (logits[0],), (logits[0],)


def cross_entropy_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """The loss in the logits' dtype; the log-sum-exp F32 (F64 for F64 logits: spec.LOSS_LSE)."""
    return dtypes[0], DType[spec.LOSS_LSE.get(dtypes[0].name, "F32")]
def _conv2d_backward_fields(name: str, shapes: Sequence[Shape], params: Optional[OpParams]) -> dict[str, Any]:
    """params.conv2d_backward's fields, after checking the two 4-d operands a gradient op takes."""
    if len(shapes) != 2:
        raise OperandCountError(f"{name} takes 2 inputs, got {len(shapes)}")
    if params is None or params.kind != "conv2d_backward":
        raise ParamsError(f"{name} takes params.conv2d_backward(input_size, kernel_size, ...), not "
                          f"{'none' if params is None else params.kind}")
    if len(shapes[0]) != 4 or len(shapes[1]) != 4:
        raise ShapeError(f"{name} takes two 4-d inputs, got {shapes[0]} and {shapes[1]}")
    return params.fields()


def _conv2d_output_size(f: dict[str, Any]) -> tuple[int, int]:
    """CONV2D's (OH, OW) for the input_size and kernel_size of params.conv2d_backward."""
    out = []
    for i in range(2):
        num = f["input_size"][i] + 2 * f["padding"][i] - f["dilation"][i] * (f["kernel_size"][i] - 1) - 1
        if num < 0:
            raise ShapeError(f"conv2d kernel {f['kernel_size']} does not fit the padded input {f['input_size']}")
        out.append(num // f["stride"][i] + 1)
    return out[0], out[1]


def conv2d_backward_input_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[dy (N, O, OH, OW), w (O, C/groups, KH, KW)] -> dx (N, C, H, W), (H, W) = params input_size."""
    f = _conv2d_backward_fields("conv2d_backward_input", shapes, params)
    dy, w = shapes
    if dy[1] != w[0] or w[0] % f["groups"] or tuple(w[2:]) != tuple(f["kernel_size"]) or \
            tuple(dy[2:]) != _conv2d_output_size(f):
        raise ShapeError(f"conv2d_backward_input: dy {dy} and w {w} are not the gradient and weight of a "
                         f"conv2d of a {f['input_size']} input with {params}")
    return (dy[0], w[1] * f["groups"]) + tuple(f["input_size"])


def conv2d_backward_weight_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (N, C, H, W), dy (N, O, OH, OW)] -> dw (O, C/groups, KH, KW), (KH, KW) = params kernel_size."""
    f = _conv2d_backward_fields("conv2d_backward_weight", shapes, params)
    x, dy = shapes
    groups = f["groups"]
    if x[0] != dy[0] or x[1] % groups or dy[1] % groups or tuple(x[2:]) != tuple(f["input_size"]) or \
            tuple(dy[2:]) != _conv2d_output_size(f):
        raise ShapeError(f"conv2d_backward_weight: x {x} and dy {dy} are not the input and gradient of a "
                         f"conv2d with {params}")
    return (dy[1], x[1] // groups) + tuple(f["kernel_size"])
# ---- training: reductions to a shape, PAD's backward, the fused linear layer ---------------------
def reduce_to_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """x -> the params.reduce_to shape, which must broadcast to x's shape: right-aligned, each of
    its extents equals x's or is 1 (reduced, kept as 1); x's extra leading dims are reduced away."""
    target = tuple(_fields(params, "reduce_to")["shape"])
    x = shapes[0]
    lead = len(x) - len(target)
    if lead < 0 or any(t not in (1, n) for t, n in zip(target, x[lead:])):
        raise ShapeError(f"the shape {target} does not broadcast to the input's {x}")
    return target


def pad_backward_shape(shapes: Sequence[Shape], params: Optional[OpParams]) -> Shape:
    """dy -> dy's shape less before + after on each padded (last) dim: the shape PAD was given."""
    f = _fields(params, "pad")
    (dy,) = shapes
    first = len(dy) - len(f["before"])
    if first < 0:
        raise ShapeError(f"pad lists {len(f['before'])} dims for a gradient of {len(dy)}")
    out = tuple(n - (f["before"][d - first] + f["after"][d - first] if d >= first else 0)
                for d, n in enumerate(dy))
    if any(n < 0 for n in out):
        raise ShapeError(f"the pad widths exceed the gradient's extents {dy}")
    return out


def linear_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (M, K), w (K, N), b (N,)] -> (M, N)."""
    if len(shapes) != 3:
        raise OperandCountError(f"fused_linear takes [x, w, b], got {len(shapes)} inputs")
    x, w, b = shapes
    if len(x) != 2 or len(w) != 2 or len(b) != 1:
        raise ShapeError(f"fused_linear takes x (M, K), w (K, N), b (N,), got {x}, {w}, {b}")
    if x[1] != w[0] or b[0] != w[1]:
        raise ShapeError(f"fused_linear extents disagree: x {x}, w {w}, b {b}")
    return (x[0], w[1])


# ---- KV-cache writes: the output is the destination the caller gives -----------------------------
def destination_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """WRITE_SLICE and WRITE_SLICE_ROTATING update their destination in place: it is the output the
    caller passes (fk.dispatch(op, [src], dst), k(src, out=dst); in a graph, Graph.write_slice into
    a Graph.state), so the inputs alone give no output shape and nothing is allocated."""
    raise ShapeError("write_slice and write_slice_rotating update their destination in place and have no "
                     "output of their own: pass the destination as the output (fk.dispatch(op, [src], dst), "
                     "k(src, out=dst); in a graph, Graph.write_slice(src, state, ...))")


QUANT_TYPES = {q.code: q for q in spec.QUANT_TYPES}


def _check_gguf_table(op: str, quant: Any, w: Shape, n: int, k: int) -> None:
    """W of n rows of k GGML-quantized values: k a whole number of blocks, W exactly its bytes."""
    if k % quant.block_size:
        raise ShapeError(f"{op}: k={k} is not a multiple of {quant.name}'s block size {quant.block_size}")
    if w[0] != n * (k // quant.block_size) * quant.block_bytes:
        raise ShapeError(f"{op}: w has {w[0]} bytes, {quant.name} rows of n={n}, k={k} take "
                         f"{n * (k // quant.block_size) * quant.block_bytes}")


def qmatmul_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[A (m, k), W (bytes,)] or [A, W, count ()] -> (m, n): params.qmatmul names the quant type and
    m, n, k (m = 0: A's row count); k must be a whole number of blocks and W hold exactly
    n * k / block_size blocks; the run-time row count operand holds one element."""
    f = _fields(params, "qmatmul")
    if len(shapes) not in (2, 3):
        raise OperandCountError(f"qmatmul takes [a, w] or [a, w, count], got {len(shapes)} inputs")
    quant = QUANT_TYPES.get(f["quant_type"])
    if quant is None:
        raise ParamsError(f"qmatmul: unknown quant type {f['quant_type']} (known: "
                          f"{', '.join(f'{q.name}={q.code}' for q in spec.QUANT_TYPES)})")
    a, w = shapes[:2]
    m, n, k = f["m"], f["n"], f["k"]
    if len(a) != 2 or len(w) != 1:
        raise ShapeError(f"qmatmul takes a (m, k) and w (bytes,), got {a} and {w}")
    if m == 0:
        m = a[0]
    if tuple(a) != (m, k):
        raise ShapeError(f"qmatmul: a has shape {a}, params say ({m}, {k})")
    _check_gguf_table("qmatmul", quant, w, n, k)
    if len(shapes) == 3 and int(np.prod(shapes[2], dtype=np.int64)) != 1:
        raise ShapeError(f"qmatmul: the row count operand must hold one element, got shape {shapes[2]}")
    return (m, n)


def qmatmul_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """A F32 or BF16 and W U8 (and an I32 or I64 row count) give F32."""
    if len(dtypes) not in (2, 3) or dtypes[0] not in (DType.F32, DType.BF16) or dtypes[1] != DType.U8 or \
            (len(dtypes) == 3 and dtypes[2].name not in spec.MATMUL_COUNT_DTYPES):
        raise DTypeError(f"qmatmul takes a F32 or BF16, w U8 and an optional I32 or I64 row count, got "
                         f"{[d.name for d in dtypes]}")
    return DType.F32


def nf4_matmul_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[A (m, k), codes (n * k / 2,), absmax (n * k / 64,)] and an optional one-element run-time row
    count -> (m, n), extents from params.nf4_matmul (m = 0: A's row count)."""
    f = _fields(params, "nf4_matmul")
    if len(shapes) not in (3, 4):
        raise OperandCountError(f"nf4_matmul takes [a, codes, absmax] or [a, codes, absmax, count], got "
                                f"{len(shapes)} inputs")
    if len(shapes) == 4 and int(np.prod(shapes[3], dtype=np.int64)) != 1:
        raise ShapeError(f"nf4_matmul: the row count operand must hold one element, got shape {shapes[3]}")
    a, codes, absmax = shapes[:3]
    m, n, k = f["m"], f["n"], f["k"]
    if len(a) != 2 or len(codes) != 1 or len(absmax) != 1:
        raise ShapeError(f"nf4_matmul takes a (m, k), codes (bytes,), absmax (blocks,), got {a}, {codes}, {absmax}")
    if m == 0:
        m = a[0]
    if tuple(a) != (m, k):
        raise ShapeError(f"nf4_matmul: a has shape {a}, params say ({m}, {k})")
    if k % spec.NF4_BLOCK:
        raise ShapeError(f"nf4_matmul: k={k} is not a multiple of the block size {spec.NF4_BLOCK}")
    if codes[0] != n * k // 2 or absmax[0] != n * k // spec.NF4_BLOCK:
        raise ShapeError(f"nf4_matmul: n={n} rows of k={k} take {n * k // 2} code bytes and "
                         f"{n * k // spec.NF4_BLOCK} absmax values, got {codes[0]} and {absmax[0]}")
    return (m, n)


def nf4_matmul_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """A F32 or BF16, codes U8 and absmax F32 (and an I32 or I64 row count) give F32."""
    if len(dtypes) not in (3, 4) or dtypes[0] not in (DType.F32, DType.BF16) or dtypes[1] != DType.U8 \
            or dtypes[2] != DType.F32 or (len(dtypes) == 4 and dtypes[3].name not in spec.MATMUL_COUNT_DTYPES):
        raise DTypeError(f"nf4_matmul takes a F32 or BF16, codes U8, absmax F32 and an optional I32 or I64 row "
                         f"count, got {[d.name for d in dtypes]}")
    return DType.F32


def qembedding_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[W (bytes,), ids (...)] -> (*ids, k): params.qembedding names the quant type and the table's
    n rows of k values; k a whole number of blocks, W exactly n * k / block_size blocks."""
    f = _fields(params, "qembedding")
    if len(shapes) != 2:
        raise OperandCountError(f"qembedding takes [w, ids], got {len(shapes)} inputs")
    quant = QUANT_TYPES.get(f["quant_type"])
    if quant is None:
        raise ParamsError(f"qembedding: unknown quant type {f['quant_type']} (known: "
                          f"{', '.join(f'{q.name}={q.code}' for q in spec.QUANT_TYPES)})")
    w, ids = shapes
    n, k = f["n"], f["k"]
    if len(w) != 1 or len(ids) + 1 > 8:                     # out has one dim more than ids, at most FK_MAX_DIMS
        raise ShapeError(f"qembedding takes w (bytes,) and ids of at most 7 dims, got {w} and {ids}")
    _check_gguf_table("qembedding", quant, w, n, k)
    return tuple(ids) + (k,)


def qembedding_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> DType:
    """W U8 and ids I32 or I64 give F32 (a BF16 output is taken when given)."""
    if len(dtypes) != 2 or dtypes[0] != DType.U8 or dtypes[1].name not in spec.QEMBEDDING_ID_DTYPES:
        raise DTypeError(f"qembedding takes w U8 and ids I32 or I64, got {[d.name for d in dtypes]}")
    return DType.F32


# ---- state-space models (cpu/ssm_kernels.h.in) -------------------------------------------------------
def _expect_shapes(name: str, shapes: Sequence[Shape], want: Sequence[tuple[str, Shape]]) -> None:
    """Raise ShapeError naming the first input whose shape differs from its expected one."""
    for shape, (arg, expected) in zip(shapes, want):
        if tuple(shape) != tuple(expected):
            raise ShapeError(f"{name}: {arg} must have shape {tuple(expected)}, got {tuple(shape)}")


def causal_conv1d_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> Shape:
    """[x (B, D, L), weight (D, W), bias (D,)] -> y (B, D, L); W >= 1."""
    x, w = shapes[0], shapes[1]
    if len(x) != 3 or len(w) != 2 or w[1] < 1:
        raise ShapeError(f"causal_conv1d takes x (B, D, L) and weight (D, W >= 1), got {x} and {w}")
    _expect_shapes("causal_conv1d", shapes[1:], (("weight", (x[1], w[1])), ("bias", (x[1],))))
    return tuple(x)


def selective_scan_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[u (B, D, L), delta (B, D, L), A (D, N), B (B, N, L), C (B, N, L), D (D,)] -> (y (B, D, L),
    last state (B, D, N))."""
    u, a = shapes[0], shapes[2]
    if len(u) != 3 or len(a) != 2:
        raise ShapeError(f"selective_scan takes u (B, D, L) and A (D, N), got {u} and {a}")
    b, d, length = u
    n = a[1]
    _expect_shapes("selective_scan", shapes[1:], (("delta", u), ("A", (d, n)), ("B", (b, n, length)),
                                                 ("C", (b, n, length)), ("D", (d,))))
    return tuple(u), (b, d, n)


def ssd_chunk_scan_shape(shapes: Sequence[Shape], params: Optional[OpParams] = None) -> tuple[Shape, ...]:
    """[X (B, L, H, P), A (B, L, H), B (B, L, H, N), C (B, L, H, N)] -> (Y (B, L, H, P), last state
    (B, H, P, N))."""
    x, bm = shapes[0], shapes[2]
    if len(x) != 4 or len(bm) != 4:
        raise ShapeError(f"ssd_chunk_scan takes X (B, L, H, P) and B (B, L, H, N), got {x} and {bm}")
    b, length, h, p = x
    n = bm[3]
    _expect_shapes("ssd_chunk_scan", shapes[1:], (("A", (b, length, h)), ("B", (b, length, h, n)),
                                                 ("C", (b, length, h, n))))
    return tuple(x), (b, h, p, n)


def two_same_as_first_dtype(dtypes: Sequence[DType], params: Optional[OpParams] = None) -> tuple[DType, ...]:
    """Two outputs in the first input's dtype (the scans' output and last state)."""
    return (dtypes[0],) * 2


# ---- the schemas, one per spec op ----------------------------------------------------------------
def _rule(name: Optional[str], kind: str) -> Any:
    """The function of a spec rule name: "broadcast", "shape" -> broadcast_shape (None: None)."""
    return None if name is None else globals()[f"{name}_{kind}"]


def _schema(op_spec: Any) -> OpSchema:
    fixed = op_spec.inputs if isinstance(op_spec.inputs, int) else None
    fewest, most = spec.output_range(op_spec)
    return OpSchema(OpKind[op_spec.name], fixed, op_spec.params, _rule(op_spec.shape, "shape"),
                    _rule(op_spec.dtype, "dtype"), most, fewest)


SCHEMAS = {OpKind[o.name]: _schema(o) for o in spec.OPS}

