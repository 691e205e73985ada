"""The Graph builder: leaves, one method per op, views, and compile() into a Plan."""
from typing import List

import numpy as np

from .. import _dispatch, ops
from .. import params as fk_params
from ..errors import (BackendError, DTypeError, KernelIndexError, NoKernelError, OperandCountError,
                      OperandTypeError, ParamsError, ShapeError)
from ..records import BindingKey
from ..types import Backend, DType, OpKind
from .fused import fused_op
from .planner import _Planner
from .values import Buffer, Node, Value, _check_size, _contiguous_strides, _int_sequence


# ---- argument checks: every refusal is a FuelKernelError ---------------------------------------
def _check_params(params, op):
    if params is not None and not isinstance(params, _dispatch.OpParams):
        raise ParamsError(f"params for {op.short_name if isinstance(op, OpKind) else op} must come from "
                          f"fuel_kernel.params, not {type(params).__name__}")
    return params


def _backend_id(backend):
    """A backend id from a Backend, an int in [0, 255] or a backend name."""
    if isinstance(backend, str):
        return int(_dispatch.backend_from_name(backend))     # BackendError for an unknown name
    if isinstance(backend, bool) or not isinstance(backend, (int, np.integer)):
        raise BackendError(f"backend must be a Backend, an int or a name, not {type(backend).__name__}")
    if not 0 <= int(backend) <= int(Backend.EXTENSION_LAST):
        raise BackendError(f"backend id {int(backend)} is out of range [0, {int(Backend.EXTENSION_LAST)}]")
    return int(backend)


def _native(array):
    """`array` with native byte order (a copy when it is byte-swapped)."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


# ---- the graph ---------------------------------------------------------------------------------------
class Graph:
    """A tensor program under construction.  Nodes are checked against the binding table as they
    are built; compile() turns the graph into a Plan."""

    def __init__(self, target_backend=Backend.CPU):
        self.target_backend = _backend_id(target_backend)
        self.buffers: List[Buffer] = []
        self.inputs: List[Buffer] = []
        self.nodes: List[Node] = []

    # ---- leaves
    def input(self, shape, dtype, name=None):
        buffer = self._buffer("input", shape, DType.parse(dtype), name=name or f"input{len(self.inputs)}")
        self.inputs.append(buffer)
        return Value(self, buffer, buffer.shape, _contiguous_strides(buffer.shape), 0, buffer.dtype)

    def constant(self, array, dtype=None):
        """A constant operand: the graph keeps its own C-contiguous, aligned, native-byte-order
        copy, so later changes to `array` do not reach the plan; a 0-d array stays 0-d."""
        target = DType.parse(dtype).numpy if dtype is not None else None
        try:
            array = np.array(array, dtype=target, copy=True, order="C")
        except ValueError as exc:              # a ragged nesting, or a value the dtype cannot parse
            raise ShapeError(f"graph constant cannot be made a rectangular array: {exc}") from None
        except (TypeError, OverflowError) as exc:
            raise DTypeError(f"graph constant cannot be converted to an array: {exc}") from None
        array = _native(array)
        code = DType.parse(array.dtype)
        if not (array.flags.c_contiguous and array.flags.aligned):
            array = np.array(array, order="C", copy=True)
        array.flags.writeable = False          # the plan's private copy
        buffer = self._buffer("const", array.shape, code, array=array)
        return Value(self, buffer, array.shape, _contiguous_strides(array.shape), 0, code)

    def _buffer(self, kind, shape, dtype, array=None, name=""):
        shape = _check_size(_int_sequence(shape, "shape"), DType(dtype).itemsize)
        buffer = Buffer(len(self.buffers), kind, shape, dtype, array, name)
        self.buffers.append(buffer)
        return buffer

    def _own(self, value):
        if not isinstance(value, Value):
            raise OperandTypeError(f"graph operands are Values built by this graph, not {type(value).__name__}")
        if value.graph is not self:
            raise OperandTypeError("a Value from another graph")
        return value

    # ---- ops
    def op(self, op, *inputs, params=None, out_dtype=None, backend=None):
        """Add a node running `op` (an OpKind or a name) on `inputs`; returns its output Value."""
        op = OpKind.parse(op)
        inputs = [self._own(v) for v in inputs]
        _check_params(params, op)
        schema = ops.schema(op)
        if schema.n_inputs is not None and len(inputs) != schema.n_inputs:
            raise OperandCountError(f"{op.short_name} takes {schema.n_inputs} inputs, got {len(inputs)}")
        shape = ops.infer_output_shape(op, [v.shape for v in inputs], params)
        if out_dtype is None:
            out_dtype = ops.infer_output_dtype(op, [v.dtype for v in inputs], params)
        dtypes = tuple(v.dtype for v in inputs) + (DType.parse(out_dtype),)
        return self._add_node(op, inputs, params, dtypes, shape, backend)

    def _add_node(self, key, inputs, params, dtypes, shape, backend):
        backend = self.target_backend if backend is None else _backend_id(backend)
        table = _dispatch.bindings()
        if not table.supports(key, dtypes, backend):
            table.lookup(key, dtypes, backend)          # raises NoKernelError with the nearest keys
        node = Node(len(self.nodes), key, list(inputs), params, dtypes, backend)
        buffer = self._buffer("node", shape, dtypes[-1])
        node.output = Value(self, buffer, shape, _contiguous_strides(shape), 0, dtypes[-1], producer=node)
        self.nodes.append(node)
        return node.output

    def cast(self, x, dtype, backend=None):
        """x converted to `dtype` (ints wrap, floats to ints truncate and saturate, NaN -> 0)."""
        return self.op(OpKind.CAST, x, out_dtype=DType.parse(dtype), backend=backend)

    def fused(self, fused_id, *inputs, backend=None):
        """A node calling runtime fused op `fused_id` directly."""
        fused = fused_op(fused_id)
        if fused is None:
            raise NoKernelError(f"no runtime fused op with id {fused_id}")
        inputs = [self._own(v) for v in inputs]
        if len(inputs) != fused.n_inputs:
            raise OperandCountError(f"fused op {fused.name} takes {fused.n_inputs} inputs")
        shape = ops.broadcast_shape([v.shape for v in inputs])
        dtypes = tuple(v.dtype for v in inputs)
        candidates = [d for d, _ in fused.kernels if d[:-1] == dtypes]
        if not candidates:
            raise NoKernelError(f"fused op {fused.name} has no kernel for inputs {[d.short_name for d in dtypes]}")
        return self._add_node(BindingKey.runtime_fused(fused.id), inputs, None, candidates[0], shape, backend)

    def _node(self, op, inputs, params=None, *, backend=None, **fields):
        """The node every op builder makes: `op` on `inputs` with `params`, or with the params that
        `fields` (keywords of the op's fuel_kernel.params constructor; None: not given) build."""
        given = {name: value for name, value in fields.items() if value is not None}
        if given:
            if params is not None:
                raise ParamsError(f"{op.short_name} takes params= or its keywords {sorted(given)}, not both")
            family = ops.schema(op).params
            try:
                params = getattr(fk_params, family)(**given)
            except TypeError as exc:           # a required keyword of the family is missing
                raise ParamsError(f"{op.short_name} keywords {sorted(given)} do not make "
                                  f"fuel_kernel.params.{family}(...): {exc}") from None
        return self.op(op, *inputs, params=params, backend=backend)

    # ---- ops: data movement between dtypes and layouts
    def contiguize(self, x, *, params=None, backend=None):
        """A C-contiguous copy of x (bit-exact)."""
        return self._node(OpKind.CONTIGUIZE, (x,), params, backend=backend)

    # ---- ops: unary elementwise (floats; NEG ABS SQR SIGN RELU also signed ints)
    def neg(self, x, *, params=None, backend=None):
        """-x, elementwise."""
        return self._node(OpKind.NEG, (x,), params, backend=backend)

    def abs(self, x, *, params=None, backend=None):
        """|x|, elementwise."""
        return self._node(OpKind.ABS, (x,), params, backend=backend)

    def sqr(self, x, *, params=None, backend=None):
        """x * x, elementwise."""
        return self._node(OpKind.SQR, (x,), params, backend=backend)

    def sqrt(self, x, *, params=None, backend=None):
        """sqrt(x), elementwise."""
        return self._node(OpKind.SQRT, (x,), params, backend=backend)

    def rsqrt(self, x, *, params=None, backend=None):
        """1 / sqrt(x), elementwise."""
        return self._node(OpKind.RSQRT, (x,), params, backend=backend)

    def recip(self, x, *, params=None, backend=None):
        """1 / x, elementwise."""
        return self._node(OpKind.RECIP, (x,), params, backend=backend)

    def exp(self, x, *, params=None, backend=None):
        """e ** x, elementwise."""
        return self._node(OpKind.EXP, (x,), params, backend=backend)

    def log(self, x, *, params=None, backend=None):
        """The natural log of x, elementwise."""
        return self._node(OpKind.LOG, (x,), params, backend=backend)

    def sin(self, x, *, params=None, backend=None):
        """sin(x), elementwise."""
        return self._node(OpKind.SIN, (x,), params, backend=backend)

    def cos(self, x, *, params=None, backend=None):
        """cos(x), elementwise."""
        return self._node(OpKind.COS, (x,), params, backend=backend)

    def tanh(self, x, *, params=None, backend=None):
        """tanh(x), elementwise."""
        return self._node(OpKind.TANH, (x,), params, backend=backend)

    def sigmoid(self, x, *, params=None, backend=None):
        """1 / (1 + exp(-x)), elementwise."""
        return self._node(OpKind.SIGMOID, (x,), params, backend=backend)

    def relu(self, x, *, params=None, backend=None):
        """max(x, 0), NaN kept, elementwise."""
        return self._node(OpKind.RELU, (x,), params, backend=backend)

    def silu(self, x, *, params=None, backend=None):
        """x * sigmoid(x), elementwise."""
        return self._node(OpKind.SILU, (x,), params, backend=backend)

    def gelu(self, x, *, params=None, backend=None):
        """GELU, tanh approximation: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), elementwise."""
        return self._node(OpKind.GELU, (x,), params, backend=backend)

    def gelu_erf(self, x, *, params=None, backend=None):
        """GELU, exact: 0.5x(1 + erf(x / sqrt 2)), elementwise."""
        return self._node(OpKind.GELU_ERF, (x,), params, backend=backend)

    def erf(self, x, *, params=None, backend=None):
        """erf(x), elementwise."""
        return self._node(OpKind.ERF, (x,), params, backend=backend)

    def step(self, x, *, params=None, backend=None):
        """np.heaviside(x, 0): 0 for x <= 0, 1 for x > 0, NaN kept, elementwise."""
        return self._node(OpKind.STEP, (x,), params, backend=backend)

    def floor(self, x, *, params=None, backend=None):
        """floor(x), elementwise."""
        return self._node(OpKind.FLOOR, (x,), params, backend=backend)

    def ceil(self, x, *, params=None, backend=None):
        """ceil(x), elementwise."""
        return self._node(OpKind.CEIL, (x,), params, backend=backend)

    def round(self, x, *, params=None, backend=None):
        """x rounded half to even (np.round), elementwise."""
        return self._node(OpKind.ROUND, (x,), params, backend=backend)

    def sign(self, x, *, params=None, backend=None):
        """np.sign(x), NaN and +-0 kept, elementwise."""
        return self._node(OpKind.SIGN, (x,), params, backend=backend)

    # ---- ops: unary ops with params
    def affine(self, x, *, mul=None, add=None, params=None, backend=None):
        """x * mul + add, elementwise (floats; each operation rounded, never fused)."""
        return self._node(OpKind.AFFINE, (x,), params, backend=backend, mul=mul, add=add)

    def clamp(self, x, *, min=None, max=None, params=None, backend=None):
        """min(max(x, min), max), elementwise; NaN kept."""
        return self._node(OpKind.CLAMP, (x,), params, backend=backend, min=min, max=max)

    def powi(self, x, *, exp=None, params=None, backend=None):
        """x ** exp for an integer exp, elementwise (integers wrap)."""
        return self._node(OpKind.POWI, (x,), params, backend=backend, exp=exp)

    # ---- ops: binary elementwise (inputs broadcast, NumPy rules)
    def add(self, x, y, *, params=None, backend=None):
        """x + y, elementwise."""
        return self._node(OpKind.ADD, (x, y), params, backend=backend)

    def sub(self, x, y, *, params=None, backend=None):
        """x - y, elementwise."""
        return self._node(OpKind.SUB, (x, y), params, backend=backend)

    def mul(self, x, y, *, params=None, backend=None):
        """x * y, elementwise."""
        return self._node(OpKind.MUL, (x, y), params, backend=backend)

    def div(self, x, y, *, params=None, backend=None):
        """x / y (floor division for integers), elementwise."""
        return self._node(OpKind.DIV, (x, y), params, backend=backend)

    def maximum(self, x, y, *, params=None, backend=None):
        """np.maximum(x, y): NaN propagates, elementwise."""
        return self._node(OpKind.MAXIMUM, (x, y), params, backend=backend)

    def minimum(self, x, y, *, params=None, backend=None):
        """np.minimum(x, y): NaN propagates, elementwise."""
        return self._node(OpKind.MINIMUM, (x, y), params, backend=backend)

    def pow(self, x, y, *, params=None, backend=None):
        """x ** y (C pow; integers wrap), elementwise."""
        return self._node(OpKind.POW, (x, y), params, backend=backend)

    def rem(self, x, y, *, params=None, backend=None):
        """np.remainder(x, y): the sign of y, elementwise."""
        return self._node(OpKind.REM, (x, y), params, backend=backend)

    def eq(self, x, y, *, params=None, backend=None):
        """x == y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.EQ, (x, y), params, backend=backend)

    def ne(self, x, y, *, params=None, backend=None):
        """x != y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.NE, (x, y), params, backend=backend)

    def lt(self, x, y, *, params=None, backend=None):
        """x < y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.LT, (x, y), params, backend=backend)

    def le(self, x, y, *, params=None, backend=None):
        """x <= y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.LE, (x, y), params, backend=backend)

    def gt(self, x, y, *, params=None, backend=None):
        """x > y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.GT, (x, y), params, backend=backend)

    def ge(self, x, y, *, params=None, backend=None):
        """x >= y as BOOL, elementwise (IEEE: NaN compares unequal)."""
        return self._node(OpKind.GE, (x, y), params, backend=backend)

    def where(self, cond, a, b, *, params=None, backend=None):
        """a where the BOOL cond is true, else b, elementwise (inputs broadcast)."""
        return self._node(OpKind.WHERE, (cond, a, b), params, backend=backend)

    # ---- ops: reductions: dims (negative from the end; none or empty = all), keepdim
    def sum(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The sum over dims (ints and bool accumulate to I64)."""
        return self._node(OpKind.SUM, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def max(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The maximum over dims (NaN propagates)."""
        return self._node(OpKind.MAX, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def min(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The minimum over dims (NaN propagates)."""
        return self._node(OpKind.MIN, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def mean(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The mean over dims (ints and bool give F64)."""
        return self._node(OpKind.MEAN, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def prod(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The product over dims (ints and bool accumulate to I64)."""
        return self._node(OpKind.PROD, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def argmax(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The I64 flat index of the first maximum over dims."""
        return self._node(OpKind.ARGMAX, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    def argmin(self, x, *, dims=None, keepdim=None, params=None, backend=None):
        """The I64 flat index of the first minimum over dims."""
        return self._node(OpKind.ARGMIN, (x,), params, backend=backend, dims=dims, keepdim=keepdim)

    # ---- ops: matmul, conv2d, last-dim softmax and norms
    def matmul(self, a, b, count=None, *, m=None, n=None, k=None, batch=None, m_compute=None, params=None,
               backend=None):
        """a (..., m, k) @ b (..., k, n), batch dims broadcast; count: rows to compute at run time."""
        return self._node(OpKind.MATMUL, (a, b) if count is None else (a, b, count), params, backend=backend,
                          m=m, n=n, k=k, batch=batch, m_compute=m_compute)

    def conv2d(self, x, w, bias=None, *, stride=None, padding=None, dilation=None, groups=None, params=None,
               backend=None):
        """2-d convolution: x (N, C, H, W), w (O, C/groups, KH, KW), optional bias (O,) -> NCHW."""
        return self._node(OpKind.CONV2D, (x, w) if bias is None else (x, w, bias), params, backend=backend,
                          stride=stride, padding=padding, dilation=dilation, groups=groups)

    def softmax_last_dim(self, x, *, params=None, backend=None):
        """Softmax over the last dim (stable: the row max is subtracted first)."""
        return self._node(OpKind.SOFTMAX_LAST_DIM, (x,), params, backend=backend)

    def log_softmax_last_dim(self, x, *, params=None, backend=None):
        """Log-softmax over the last dim (stable)."""
        return self._node(OpKind.LOG_SOFTMAX_LAST_DIM, (x,), params, backend=backend)

    def rms_norm(self, x, weight, *, eps=None, params=None, backend=None):
        """x / sqrt(mean(x^2) + eps) * weight over the last dim (eps default 1e-5)."""
        return self._node(OpKind.RMS_NORM, (x, weight), params, backend=backend, eps=eps)

    def layer_norm(self, x, weight, bias, *, eps=None, params=None, backend=None):
        """(x - mean) / sqrt(var + eps) * weight + bias over the last dim."""
        return self._node(OpKind.LAYER_NORM, (x, weight, bias), params, backend=backend, eps=eps)

    # ---- ops: data movement and indexing
    def slice(self, x, *, start=None, stop=None, step=None, params=None, backend=None):
        """A copy of x[start:stop:step] per dim (Python slice rules); slice_view makes a view."""
        return self._node(OpKind.SLICE, (x,), params, backend=backend, start=start, stop=stop, step=step)

    def concat(self, *xs, axis=None, params=None, backend=None):
        """The inputs joined along axis (2 to 7 inputs)."""
        return self._node(OpKind.CONCAT, xs, params, backend=backend, axis=axis)

    def index_select(self, x, idx, *, axis=None, params=None, backend=None):
        """np.take(x, idx, axis) for a 1-d I32/I64 idx (indices checked)."""
        return self._node(OpKind.INDEX_SELECT, (x, idx), params, backend=backend, axis=axis)

    def gather(self, x, idx, *, axis=None, params=None, backend=None):
        """torch.gather(x, axis, idx): out has idx's shape (indices checked)."""
        return self._node(OpKind.GATHER, (x, idx), params, backend=backend, axis=axis)

    def scatter_add(self, x, idx, src, *, axis=None, params=None, backend=None):
        """x, then out[i with i[axis] = idx[i]] += src[i] (torch.scatter_add)."""
        return self._node(OpKind.SCATTER_ADD, (x, idx, src), params, backend=backend, axis=axis)

    def index_add(self, x, idx, src, *, axis=None, params=None, backend=None):
        """x, then out[.., idx[j], ..] += src[.., j, ..] along axis (1-d idx)."""
        return self._node(OpKind.INDEX_ADD, (x, idx, src), params, backend=backend, axis=axis)

    def flip(self, x, *, dims=None, params=None, backend=None):
        """x reversed along dims."""
        return self._node(OpKind.FLIP, (x,), params, backend=backend, dims=dims)

    def roll(self, x, *, shifts=None, dims=None, params=None, backend=None):
        """x rolled by shifts along dims: out[(i + shift) mod n] = x[i]."""
        return self._node(OpKind.ROLL, (x,), params, backend=backend, shifts=shifts, dims=dims)

    def cumsum(self, x, *, axis=None, exclusive=None, reverse=None, params=None, backend=None):
        """The cumulative sum along axis (exclusive and/or reverse if asked)."""
        return self._node(OpKind.CUMSUM, (x,), params, backend=backend, axis=axis, exclusive=exclusive,
                          reverse=reverse)

    def triu(self, x, *, diagonal=None, params=None, backend=None):
        """The upper triangle of the last two dims: keeps j - i >= diagonal (default 0)."""
        return self._node(OpKind.TRIU, (x,), params, backend=backend, diagonal=diagonal)

    def tril(self, x, *, diagonal=None, params=None, backend=None):
        """The lower triangle of the last two dims: keeps j - i <= diagonal (default 0)."""
        return self._node(OpKind.TRIL, (x,), params, backend=backend, diagonal=diagonal)

    def pad(self, x, *, before=None, after=None, mode=None, value=None, params=None, backend=None):
        """x padded by before/after on its last dims: constant (value), reflect or replicate."""
        return self._node(OpKind.PAD, (x,), params, backend=backend, before=before, after=after, mode=mode,
                          value=value)

    def masked_fill(self, x, mask, *, value=None, params=None, backend=None):
        """value where the BOOL mask is true, else x (x and mask broadcast)."""
        return self._node(OpKind.MASKED_FILL, (x, mask), params, backend=backend, value=value)

    # ---- ops: attention
    def rope(self, x, cos, sin, *, interleaved=None, params=None, backend=None):
        """Rotary embedding of x [..., S, D] by cos, sin [S, D/2] (half-split or interleaved)."""
        return self._node(OpKind.ROPE, (x, cos, sin), params, backend=backend, interleaved=interleaved)

    def flash_attn(self, q, k, v, *, scale=None, causal=None, softcap=None, window_left=None,
                   window_right=None, params=None, backend=None):
        """softmax(scale * q.k) v without the score matrix; causal, windows, softcap, GQA."""
        return self._node(OpKind.FLASH_ATTN, (q, k, v), params, backend=backend, scale=scale, causal=causal,
                          softcap=softcap, window_left=window_left, window_right=window_right)

    def paged_attn(self, q, k_cache, v_cache, block_table, context_lens, alibi_slopes, *, scale=None,
                   block_size=None, softcap=None, window_left=None, params=None, backend=None):
        """One decode query per sequence over a paged KV cache (I32 block table, lengths; ALiBi)."""
        return self._node(OpKind.PAGED_ATTN, (q, k_cache, v_cache, block_table, context_lens, alibi_slopes),
                          params, backend=backend, scale=scale, block_size=block_size, softcap=softcap,
                          window_left=window_left)

    # ---- views (metadata only)
    def transpose(self, x, axes=None):
        """A permuted view.  `axes` is a permutation of range(ndim); a negative axis counts from
        the end ([-ndim, ndim)).  Out-of-range or repeated axes are a ShapeError, never wrapped."""
        x = self._own(x)
        if axes is None:
            axes = tuple(reversed(range(x.ndim)))
        else:
            given = _int_sequence(axes, "transpose axes")
            if len(given) != x.ndim:
                raise ShapeError(f"transpose axes {given} do not list {x.ndim} dims")
            for a in given:
                if not -x.ndim <= a < x.ndim:
                    raise ShapeError(f"transpose axis {a} is out of range for {x.ndim} dims")
            axes = tuple(a + x.ndim if a < 0 else a for a in given)
            if len(set(axes)) != x.ndim:
                raise ShapeError(f"transpose axes {given} repeat an axis; they must be a permutation "
                                 f"of {x.ndim} dims")
        return Value(self, x.buffer, [x.shape[a] for a in axes], [x.strides[a] for a in axes], x.offset,
                     x.dtype, x.producer)

    def broadcast_to(self, x, shape):
        x = self._own(x)
        shape = _check_size(_int_sequence(shape, "broadcast shape"), x.dtype.itemsize, "broadcast shape")
        lead = len(shape) - x.ndim
        if lead < 0:
            raise ShapeError(f"cannot broadcast {x.shape} to fewer dims {shape}")
        strides = [0] * lead
        for extent, (own, stride) in zip(shape[lead:], zip(x.shape, x.strides)):
            if own == extent:
                strides.append(stride)
            elif own == 1:
                strides.append(0)
            else:
                raise ShapeError(f"cannot broadcast {x.shape} to {shape}")
        return Value(self, x.buffer, shape, strides, x.offset, x.dtype, x.producer)

    def slice_view(self, x, index):
        """x[index] for ints and slices (NumPy basic indexing without ... or None).  An integer out
        of range is a KernelIndexError (an IndexError); a bad index type or a zero step is a
        ShapeError."""
        x = self._own(x)
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) > x.ndim:
            raise KernelIndexError(f"{len(index)} indices for {x.ndim} dims")
        shape, strides, offset = [], [], x.offset
        for axis, extent in enumerate(x.shape):
            item = index[axis] if axis < len(index) else slice(None)
            if isinstance(item, slice):
                try:
                    start, stop, step = item.indices(extent)
                except TypeError:
                    raise ShapeError(f"slice {item} on axis {axis}: bounds and step must be integers "
                                     f"or None") from None
                except ValueError as exc:
                    raise ShapeError(f"slice {item} on axis {axis}: {exc}") from None
                count = len(range(start, stop, step))
                offset += start * x.strides[axis] if count else 0
                shape.append(count)
                strides.append(x.strides[axis] * step)
            elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
                i = int(item) + (extent if item < 0 else 0)
                if not 0 <= i < extent:
                    raise KernelIndexError(f"index {item} out of range for axis {axis} of extent {extent}")
                offset += i * x.strides[axis]
            else:
                raise ShapeError(f"graph slicing takes ints and slices, not {type(item).__name__}")
        return Value(self, x.buffer, shape, strides, offset, x.dtype, x.producer)

    def reshape(self, x, shape):
        """A view when x is contiguous; otherwise a CONTIGUIZE node, then a view of its result.
        One extent may be -1 (inferred); any other negative extent is a ShapeError."""
        x = self._own(x)
        given = _int_sequence(shape, "reshape shape")
        size = int(np.prod(x.shape, dtype=object))
        if any(s < -1 for s in given) or given.count(-1) > 1:
            raise ShapeError(f"cannot reshape {x.shape} to {given}: only one extent may be -1 and "
                             f"no other may be negative")
        shape = list(given)
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            if known == 0 or size % known:
                raise ShapeError(f"cannot reshape {x.shape} ({size} elements) to {given}")
            shape[shape.index(-1)] = size // known
        shape = _check_size(tuple(shape), x.dtype.itemsize, "reshape shape")
        total = 1
        for s in shape:
            total *= s
        if total != size:
            raise ShapeError(f"cannot reshape {x.shape} ({size} elements) to {given}")
        if not x.is_contiguous:
            x = self.op(OpKind.CONTIGUIZE, x)
        return Value(self, x.buffer, shape, _contiguous_strides(shape), x.offset, x.dtype, x.producer)

    # ---- compile
    def compile(self, outputs, *, fuse=True, measure=False, max_ulp=None):
        """A Plan computing `outputs` (a Value or a list of Values) from the graph's inputs."""
        single = isinstance(outputs, Value)
        if single:
            outputs = [self._own(outputs)]
        else:
            try:
                outputs = list(outputs)
            except TypeError:
                raise OperandTypeError(f"compile() takes a Value or a list of Values, not "
                                       f"{type(outputs).__name__}") from None
            outputs = [self._own(v) for v in outputs]
        return _Planner(self, outputs, fuse=fuse, measure=measure, max_ulp=max_ulp).build(single)

