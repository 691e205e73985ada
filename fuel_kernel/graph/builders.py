"""The Graph builder: leaves, one method per op, views, and compile() into a Plan.

The builders of ops with a fixed input count come from GeneratedBuilders (_generated_builders.py,
written at build time from fuel_kernel/spec.py); the ones whose signature is special (cast, matmul,
conv2d, conv1d, conv_transpose2d, qmatmul, nf4_matmul, flash_attn (its optional mask inputs route to
FLASH_ATTN_MASKED), concat, and write_slice / write_slice_rotating, which write into a state) are written here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Sequence, Union

import numpy as np

from .. import _dispatch, ops, spec
from .. import params as fk_params
from ..errors import (BackendError, DTypeError, KernelIndexError, NoKernelError, OperandCountError,
                      OperandTypeError, ParamsError, ShapeError)
from ..records import BindingKey
from ..types import Backend, DType, OpKind
from ._generated_builders import GeneratedBuilders
from .fused import fused_op
from .planner import _Planner
from .values import Buffer, Node, Value, _check_size, _contiguous_strides, _int_sequence

if TYPE_CHECKING:
    from .plan import Plan

# what the builders accept where the C API takes an enum: a member, its name or its number
OpLike = Union[OpKind, str, int]
DTypeLike = Union[DType, str, np.dtype, type]
BackendLike = Union[Backend, int, str]
ShapeLike = Union[int, Sequence[int]]


# ---- argument checks: every refusal is a FuelKernelError ---------------------------------------
def _check_params(params: Any, op: Union[OpKind, BindingKey]) -> Optional[_dispatch.OpParams]:
    if params is not None and not isinstance(params, _dispatch.OpParams):
        raise ParamsError(f"params for {op.short_name if isinstance(op, OpKind) else op} must come from "
                          f"fuel_kernel.params, not {type(params).__name__}")
    return params


def _backend_id(backend: BackendLike) -> int:
    """A backend id from a Backend, an int in [0, 255] or a backend name."""
    if isinstance(backend, str):
        return int(_dispatch.backend_from_name(backend))     # BackendError for an unknown name
    if isinstance(backend, bool) or not isinstance(backend, (int, np.integer)):
        raise BackendError(f"backend must be a Backend, an int or a name, not {type(backend).__name__}")
    if not 0 <= int(backend) <= int(Backend.EXTENSION_LAST):
        raise BackendError(f"backend id {int(backend)} is out of range [0, {int(Backend.EXTENSION_LAST)}]")
    return int(backend)


def _native(array: np.ndarray) -> np.ndarray:
    """`array` with native byte order (a copy when it is byte-swapped)."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


# ---- the graph ---------------------------------------------------------------------------------------
class Graph(GeneratedBuilders):
    """A tensor program under construction.  Nodes are checked against the binding table as they
    are built; compile() turns the graph into a Plan.  One builder method per op (neg, add, sum,
    ...: see GeneratedBuilders) adds a node."""

    def __init__(self, target_backend: BackendLike = Backend.CPU) -> None:
        self.target_backend = _backend_id(target_backend)
        self.buffers: List[Buffer] = []
        self.inputs: List[Buffer] = []
        self.nodes: List[Node] = []

    def __repr__(self) -> str:
        inputs = ", ".join(f"{b.name} {b.dtype.short_name}{list(b.shape)}" for b in self.inputs)
        ops = ", ".join(node.label for node in self.nodes[:8]) + (", ..." if len(self.nodes) > 8 else "")
        return (f"<Graph on {_dispatch.backend_name(self.target_backend)}: inputs ({inputs}), "
                f"{len(self.nodes)} nodes ({ops})>")

    # ---- leaves
    def input(self, shape: ShapeLike, dtype: DTypeLike, name: Optional[str] = None) -> Value:
        """A plan input of `shape` and `dtype`; `name` labels it (default "input<n>")."""
        buffer = self._buffer("input", shape, DType.parse(dtype), name=name or f"input{len(self.inputs)}")
        self.inputs.append(buffer)
        return Value(self, buffer, buffer.shape, _contiguous_strides(buffer.shape), 0, buffer.dtype)

    def state(self, shape: ShapeLike, dtype: DTypeLike, name: Optional[str] = None) -> Value:
        """A persistent array the caller binds at every run, in place: a plan input (in declaration
        order with the inputs) that write_slice and write_slice_rotating update where it lies, so a
        decode loop appends to its KV cache without copies.  Plan.run takes it as it is (a writable,
        C-contiguous, aligned NumPy array of exactly this shape and dtype; never copied, never part of
        the arena); a node reading the state sees every write to it built before that node."""
        buffer = self._buffer("state", shape, DType.parse(dtype), name=name or f"state{len(self.inputs)}")
        self.inputs.append(buffer)
        return Value(self, buffer, buffer.shape, _contiguous_strides(buffer.shape), 0, buffer.dtype)

    def constant(self, array: Any, dtype: Optional[DTypeLike] = None) -> Value:
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

    def _buffer(self, kind: str, shape: ShapeLike, dtype: DType, array: Optional[np.ndarray] = None,
                name: str = "") -> Buffer:
        extents = _check_size(_int_sequence(shape, "shape"), DType(dtype).itemsize)
        buffer = Buffer(len(self.buffers), kind, extents, dtype, array, name)
        self.buffers.append(buffer)
        return buffer

    def _own(self, value: Any) -> Value:
        if not isinstance(value, Value):
            raise OperandTypeError(f"graph operands are Values built by this graph, not {type(value).__name__}")
        if value.graph is not self:
            raise OperandTypeError("a Value from another graph")
        return value

    # ---- ops
    def op(self, op: OpLike, *inputs: Value, params: Optional[_dispatch.OpParams] = None,
           out_dtype: Optional[DTypeLike] = None, backend: Optional[BackendLike] = None,
           outputs: Optional[int] = None) -> Any:
        """Add a node running `op` (an OpKind or a name) on `inputs`; returns its output Value, or
        the tuple of output Values of an op with several.  `out_dtype` names the output dtype of a
        one-output op whose schema does not infer it (CAST); `outputs` asks an op with optional
        outputs for them too (FLASH_ATTN's log-sum-exp: outputs=2)."""
        op = OpKind.parse(op)
        operands = [self._own(v) for v in inputs]
        _check_params(params, op)
        schema = ops.schema(op)
        if schema.n_inputs is not None and len(operands) != schema.n_inputs:
            raise OperandCountError(f"{op.short_name} takes {schema.n_inputs} inputs, got {len(operands)}")
        n_out = schema.min_outputs if outputs is None else outputs
        if isinstance(n_out, bool) or not isinstance(n_out, int) or not schema.min_outputs <= n_out <= schema.n_outputs:
            raise OperandCountError(f"{op.short_name} writes {schema.min_outputs} to {schema.n_outputs} outputs, "
                                    f"not {outputs!r}")
        shapes = ops.infer_output_shapes(op, [v.shape for v in operands], params)[:n_out]
        if out_dtype is not None and n_out != 1:
            raise ParamsError(f"{op.short_name} writes {n_out} outputs whose dtypes its schema "
                              f"infers; out_dtype names the dtype of a one-output op")
        out_dtypes = (DType.parse(out_dtype),) if out_dtype is not None else \
            ops.infer_output_dtypes(op, [v.dtype for v in operands], params)[:n_out]
        dtypes = tuple(v.dtype for v in operands) + tuple(out_dtypes)
        values = self._add_node(op, operands, params, dtypes, shapes, backend)
        return values[0] if n_out == 1 else tuple(values)

    def _add_node(self, key: Union[OpKind, BindingKey], inputs: List[Value], params: Optional[_dispatch.OpParams],
                  dtypes: tuple[DType, ...], shapes: Sequence[tuple[int, ...]],
                  backend: Optional[BackendLike]) -> List[Value]:
        """A node of `key` on `inputs`, checked against the table; its output Values, one per
        shape in `shapes` (their dtypes are the last of `dtypes`)."""
        backend = self.target_backend if backend is None else _backend_id(backend)
        table = _dispatch.bindings()
        if not table.supports(key, dtypes, backend):
            table.lookup(key, dtypes, backend)          # raises NoKernelError with the nearest keys
        node = Node(len(self.nodes), key, list(inputs), params, dtypes, backend)
        for shape, dtype in zip(shapes, dtypes[len(dtypes) - len(shapes):]):
            buffer = self._buffer("node", shape, dtype)
            node.outputs.append(Value(self, buffer, shape, _contiguous_strides(shape), 0, dtype, producer=node))
        self.nodes.append(node)
        return node.outputs

    def cast(self, x: Value, dtype: DTypeLike, backend: Optional[BackendLike] = None) -> Value:
        """x converted to `dtype` (ints wrap, floats to ints truncate and saturate, NaN -> 0)."""
        return self.op(OpKind.CAST, x, out_dtype=DType.parse(dtype), backend=backend)

    def fused(self, fused_id: int, *inputs: Value, backend: Optional[BackendLike] = None) -> Value:
        """A node calling runtime fused op `fused_id` directly."""
        fused = fused_op(fused_id)
        if fused is None:
            raise NoKernelError(f"no runtime fused op with id {fused_id}")
        operands = [self._own(v) for v in inputs]
        if len(operands) != fused.n_inputs:
            raise OperandCountError(f"fused op {fused.name} takes {fused.n_inputs} inputs")
        shape = ops.broadcast_shape([v.shape for v in operands])
        dtypes = tuple(v.dtype for v in operands)
        candidates = [d for d, _ in fused.kernels if d[:-1] == dtypes]
        if not candidates:
            raise NoKernelError(f"fused op {fused.name} has no kernel for inputs {[d.short_name for d in dtypes]}")
        return self._add_node(BindingKey.runtime_fused(fused.id), operands, None, candidates[0], [shape],
                              backend)[0]

    def _node(self, op: OpKind, inputs: Sequence[Value], params: Optional[_dispatch.OpParams] = None, *,
              backend: Optional[BackendLike] = None, out_dtype: Optional[DTypeLike] = None, **fields: Any) -> Any:
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
        return self.op(op, *inputs, params=params, out_dtype=out_dtype, backend=backend)

    # ---- ops whose builder signature is special (every other op's builder is generated from
    # fuel_kernel/spec.py into GeneratedBuilders): optional or variadic inputs
    def matmul(self, a: Value, b: Value, count: Optional[Value] = None, *, m: Optional[int] = None,
               n: Optional[int] = None, k: Optional[int] = None, batch: Optional[Sequence[int]] = None,
               m_compute: Any = None, scale_a: Optional[float] = None, scale_b: Optional[float] = None,
               out_dtype: Optional[DTypeLike] = None, params: Optional[_dispatch.OpParams] = None,
               backend: Optional[BackendLike] = None) -> Value:
        """a (..., m, k) @ b (..., k, n), batch dims broadcast; count: rows to compute at run time.
        FP8 a and b give F32 (out_dtype=BF16 for BF16), scaled by scale_a * scale_b; given scales
        without m, n, k take those from the shapes."""
        a, b = self._own(a), self._own(b)
        if (scale_a is not None or scale_b is not None) and params is None and (m, n, k) == (None, None, None) \
                and len(a.shape) >= 2 and len(b.shape) >= 2:
            m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
            if batch is None:
                batch = ops.broadcast_shape([a.shape[:-2], b.shape[:-2]])
        return self._node(OpKind.MATMUL, (a, b) if count is None else (a, b, count), params, backend=backend,
                          out_dtype=out_dtype, m=m, n=n, k=k, batch=batch, m_compute=m_compute,
                          scale_a=scale_a, scale_b=scale_b)

    def conv2d(self, x: Value, w: Value, bias: Optional[Value] = None, *, stride: Optional[ShapeLike] = None,
               padding: Optional[ShapeLike] = None, dilation: Optional[ShapeLike] = None,
               groups: Optional[int] = None, params: Optional[_dispatch.OpParams] = None,
               backend: Optional[BackendLike] = None) -> Value:
        """2-d convolution: x (N, C, H, W), w (O, C/groups, KH, KW), optional bias (O,) -> NCHW."""
        return self._node(OpKind.CONV2D, (x, w) if bias is None else (x, w, bias), params, backend=backend,
                          stride=stride, padding=padding, dilation=dilation, groups=groups)

    def conv1d(self, x: Value, w: Value, bias: Optional[Value] = None, *, stride: Optional[int] = None,
               padding: Optional[ShapeLike] = None, dilation: Optional[int] = None, groups: Optional[int] = None,
               params: Optional[_dispatch.OpParams] = None, backend: Optional[BackendLike] = None) -> Value:
        """1-d convolution: x (N, C, L), w (O, C/groups, K), optional bias (O,) -> (N, O, OL); padding
        is (begin, end), ONNX Conv's pads, or one int for both ends."""
        return self._node(OpKind.CONV1D, (x, w) if bias is None else (x, w, bias), params, backend=backend,
                          stride=stride, padding=padding, dilation=dilation, groups=groups)

    def conv_transpose2d(self, x: Value, w: Value, bias: Optional[Value] = None, *,
                         stride: Optional[ShapeLike] = None, pads_begin: Optional[ShapeLike] = None,
                         pads_end: Optional[ShapeLike] = None, dilation: Optional[ShapeLike] = None,
                         output_padding: Optional[ShapeLike] = None, groups: Optional[int] = None,
                         params: Optional[_dispatch.OpParams] = None, backend: Optional[BackendLike] = None) -> Value:
        """Transposed 2-d convolution: x (N, C, H, W), w (C, O/groups, KH, KW), optional bias (O,) -> NCHW."""
        return self._node(OpKind.CONV_TRANSPOSE2D, (x, w) if bias is None else (x, w, bias), params,
                          backend=backend, stride=stride, pads_begin=pads_begin, pads_end=pads_end,
                          dilation=dilation, output_padding=output_padding, groups=groups)

    def matmul_pack_b(self, b: Value, *, params: Optional[_dispatch.OpParams] = None,
                      backend: Optional[BackendLike] = None) -> Value:
        """b (k, n) of F16, BF16, F32 or F64 packed into the GEMM engine's panels: a U8 Value of
        ops.matmul_packed_nbytes(dtype, k, n) bytes for matmul_prepacked (compile() packs a
        constant MATMUL B this way by itself, once, when the plan is compiled)."""
        b = self._own(b)
        ops.check_params(OpKind.MATMUL_PACK_B, _check_params(params, OpKind.MATMUL_PACK_B), "none")
        if len(b.shape) != 2:
            raise ShapeError(f"matmul_pack_b takes B (k, n), got shape {b.shape}")
        shape = (ops.matmul_packed_nbytes(b.dtype, *b.shape),)
        return self._add_node(OpKind.MATMUL_PACK_B, [b], params, (b.dtype, DType.U8), [shape], backend)[0]

    def matmul_prepacked(self, a: Value, b_packed: Value, n: int, *, params: Optional[_dispatch.OpParams] = None,
                         backend: Optional[BackendLike] = None) -> Value:
        """a (..., m, k) @ B, B (k, n) given packed (b_packed: matmul_pack_b's whole U8 Value, or a
        constant holding its bytes): the op's operand is the (k, n) view of the packed columns
        (strides (0, 1) at byte 64)."""
        a, packed = self._own(a), self._own(b_packed)
        if len(a.shape) < 2 or len(packed.shape) != 1 or packed.dtype != DType.U8 or not packed.is_whole_buffer:
            raise ShapeError(f"matmul_prepacked takes A (..., m, k) and a whole U8 buffer from matmul_pack_b, "
                             f"got {a.shape} and {packed.dtype.short_name}{list(packed.shape)}")
        k = a.shape[-1]
        if packed.shape[0] != ops.matmul_packed_nbytes(a.dtype, k, n):
            raise ShapeError(f"the packed buffer has {packed.shape[0]} bytes, not the "
                             f"{ops.matmul_packed_nbytes(a.dtype, k, n)} of a ({k}, {n}) {a.dtype.short_name} B")
        view = Value(self, packed.buffer, (k, n), (0, 1), spec.MATMUL_PACKED_HEADER_BYTES, DType.U8,
                     producer=packed.producer)
        return self.op(OpKind.MATMUL_PREPACKED, a, view, params=params, backend=backend)

    def flash_attn(self, q: Value, k: Value, v: Value, *, mask: Optional[Value] = None,
                   alibi_slopes: Optional[Value] = None, key_lens: Optional[Value] = None,
                   scale: Optional[float] = None, causal: Optional[bool] = None, softcap: Optional[float] = None,
                   window_left: Optional[int] = None, window_right: Optional[int] = None,
                   top_left: Optional[bool] = None, params: Optional[_dispatch.OpParams] = None,
                   backend: Optional[BackendLike] = None) -> Value:
        """softmax(q k^T * scale) v per query head, q (B, Hq, Sq, D), k, v (B, Hkv, Sk, D or Dv), causal /
        windowed / softcap (params.flash_attn's keywords).  FLASH_ATTN; with any of the optional inputs
        FLASH_ATTN_MASKED, the ones not given passed as its empty [0] operands: mask [B|1, Hq|1, Sq|1, Sk]
        (additive in q's dtype, or BOOL: False excludes the key), alibi_slopes [Hq] (F32), key_lens [B]
        (I32 or I64).  The log-sum-exp output: Graph.op(..., outputs=2)."""
        fields: dict[str, Any] = dict(scale=scale, causal=causal, softcap=softcap, window_left=window_left,
                                      window_right=window_right, top_left=top_left)
        if mask is None and alibi_slopes is None and key_lens is None:
            return self._node(OpKind.FLASH_ATTN, (q, k, v), params, backend=backend, **fields)
        for name, given in (("q", q), ("mask", mask), ("alibi_slopes", alibi_slopes), ("key_lens", key_lens)):
            if given is not None and not isinstance(given, Value):
                raise OperandTypeError(f"flash_attn {name} must be a Value of this graph, not {type(given).__name__}")
        absent = lambda dtype: self.constant(np.zeros(0, dtype.numpy))
        inputs = (q, k, v, mask if mask is not None else absent(q.dtype),
                  alibi_slopes if alibi_slopes is not None else absent(DType.F32),
                  key_lens if key_lens is not None else absent(DType.I32))
        return self._node(OpKind.FLASH_ATTN_MASKED, inputs, params, backend=backend, **fields)

    def qmatmul(self, a: Value, w: Value, count: Optional[Value] = None, *, quant_type: Optional[int] = None,
                m: Optional[int] = None, n: Optional[int] = None, k: Optional[int] = None,
                params: Optional[_dispatch.OpParams] = None, backend: Optional[BackendLike] = None) -> Value:
        """A (m, k) @ dequant(W).T for W holding n rows of k GGML-quantized values (spec.QUANT_TYPES);
        m = 0 takes A's rows.  count, a one-element I32/I64 Value: rows to compute at run time (rows
        from it to m are zeroed), so one plan serves any number of rows up to A's.  Keywords without
        m take m = 0."""
        if m is None and params is None and (quant_type, n, k) != (None, None, None):
            m = 0
        return self._node(OpKind.QMATMUL, (a, w) if count is None else (a, w, count), params, backend=backend,
                          quant_type=quant_type, m=m, n=n, k=k)

    def nf4_matmul(self, a: Value, codes: Value, absmax: Value, count: Optional[Value] = None, *,
                   m: Optional[int] = None, n: Optional[int] = None, k: Optional[int] = None,
                   params: Optional[_dispatch.OpParams] = None, backend: Optional[BackendLike] = None) -> Value:
        """A (m, k) @ dequant(W).T for W (n, k) in bitsandbytes NF4 (codes, absmax); m = 0 takes A's
        rows; count, a one-element I32/I64 Value: rows to compute at run time (the rest zeroed).
        Keywords without m take m = 0."""
        if m is None and params is None and (n, k) != (None, None):
            m = 0
        return self._node(OpKind.NF4_MATMUL, (a, codes, absmax) if count is None else (a, codes, absmax, count),
                          params, backend=backend, m=m, n=n, k=k)

    def concat(self, *xs: Value, axis: Optional[int] = None, params: Optional[_dispatch.OpParams] = None,
               backend: Optional[BackendLike] = None) -> Value:
        """The inputs joined along axis (2 to 7 inputs)."""
        return self._node(OpKind.CONCAT, xs, params, backend=backend, axis=axis)

    def write_slice(self, src: Value, dst: Value, position: Optional[Value] = None, *,
                    start: Optional[Sequence[int]] = None, axis: Optional[int] = None,
                    params: Optional[_dispatch.OpParams] = None, backend: Optional[BackendLike] = None) -> Value:
        """Write src into `dst` (a state, or a view of one) at `start`, in place; `position`, a
        one-element I64 Value, adds to start on `axis` at run time.  Returns the updated state."""
        return self._write(OpKind.WRITE_SLICE, src, dst, position, params, backend, start=start, axis=axis)

    def write_slice_rotating(self, src: Value, dst: Value, position: Optional[Value] = None, *,
                             start: Optional[Sequence[int]] = None, axis: Optional[int] = None,
                             params: Optional[_dispatch.OpParams] = None,
                             backend: Optional[BackendLike] = None) -> Value:
        """Write src into the ring `dst` (a state, or a view of one): on `axis` its rows land at
        (start + position + i) mod dst's extent, in place.  Returns the updated state."""
        return self._write(OpKind.WRITE_SLICE_ROTATING, src, dst, position, params, backend, start=start, axis=axis)

    def _write(self, op: OpKind, src: Value, dst: Value, position: Optional[Value],
               params: Optional[_dispatch.OpParams], backend: Optional[BackendLike], **fields: Any) -> Value:
        """The node of an in-place write into a state: its output is `dst`'s own view, so it writes
        the state's memory; compile() keeps every such node (a side effect), whatever it returns."""
        dst = self._own(dst)
        if dst.buffer.kind != "state":
            raise OperandTypeError(f"{op.short_name} writes in place into a Graph.state (or a view of one), "
                                   f"not a {dst.buffer.kind} value")
        given = {name: value for name, value in fields.items() if value is not None}
        if given and params is not None:
            raise ParamsError(f"{op.short_name} takes params= or its keywords {sorted(given)}, not both")
        if given:
            try:
                params = fk_params.write_slice(**given)
            except TypeError as exc:
                raise ParamsError(f"{op.short_name} keywords {sorted(given)} do not make "
                                  f"fuel_kernel.params.write_slice(...): {exc}") from None
        _check_params(params, op)
        if params is None:
            raise ParamsError(f"{op.short_name} needs its start (start=..., or params=fuel_kernel.params.write_slice)")
        inputs = [self._own(src)] + ([] if position is None else [self._own(position)])
        if inputs[0].ndim != dst.ndim:
            raise ShapeError(f"{op.short_name}: src has {inputs[0].ndim} dims but the state view has {dst.ndim}")
        if inputs[0].dtype != dst.dtype:
            raise DTypeError(f"{op.short_name}: src is {inputs[0].dtype.short_name} but the state is "
                             f"{dst.dtype.short_name}")
        dtypes = tuple(v.dtype for v in inputs) + (dst.dtype,)
        backend_id = self.target_backend if backend is None else _backend_id(backend)
        table = _dispatch.bindings()
        if not table.supports(op, dtypes, backend_id):
            table.lookup(op, dtypes, backend_id)       # raises NoKernelError with the nearest keys
        node = Node(len(self.nodes), op, inputs, params, dtypes, backend_id)
        node.outputs.append(Value(self, dst.buffer, dst.shape, dst.strides, dst.offset, dst.dtype, producer=node))
        self.nodes.append(node)
        return node.output

    # ---- views (metadata only)
    def transpose(self, x: Value, axes: Optional[Sequence[int]] = None) -> Value:
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

    def broadcast_to(self, x: Value, shape: ShapeLike) -> Value:
        """A view of x broadcast to `shape` (stride 0 on the axes it repeats), as NumPy's."""
        x = self._own(x)
        target = _check_size(_int_sequence(shape, "broadcast shape"), x.dtype.itemsize, "broadcast shape")
        lead = len(target) - x.ndim
        if lead < 0:
            raise ShapeError(f"cannot broadcast {x.shape} to fewer dims {target}")
        strides = [0] * lead
        for extent, (own, stride) in zip(target[lead:], zip(x.shape, x.strides)):
            if own == extent:
                strides.append(stride)
            elif own == 1:
                strides.append(0)
            else:
                raise ShapeError(f"cannot broadcast {x.shape} to {target}")
        return Value(self, x.buffer, target, strides, x.offset, x.dtype, x.producer)

    def slice_view(self, x: Value, index: Any) -> Value:
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

    def reshape(self, x: Value, shape: ShapeLike) -> Value:
        """A view when x is contiguous; otherwise a CONTIGUIZE node, then a view of its result.
        One extent may be -1 (inferred); any other negative extent is a ShapeError."""
        x = self._own(x)
        given = _int_sequence(shape, "reshape shape")
        size = int(np.prod(x.shape, dtype=object))
        if any(s < -1 for s in given) or given.count(-1) > 1:
            raise ShapeError(f"cannot reshape {x.shape} to {given}: only one extent may be -1 and "
                             f"no other may be negative")
        extents = list(given)
        if -1 in extents:
            known = 1
            for s in extents:
                if s != -1:
                    known *= s
            if known == 0 or size % known:
                raise ShapeError(f"cannot reshape {x.shape} ({size} elements) to {given}")
            extents[extents.index(-1)] = size // known
        checked = _check_size(tuple(extents), x.dtype.itemsize, "reshape shape")
        total = 1
        for s in checked:
            total *= s
        if total != size:
            raise ShapeError(f"cannot reshape {x.shape} ({size} elements) to {given}")
        if not x.is_contiguous:
            x = self.op(OpKind.CONTIGUIZE, x)
        return Value(self, x.buffer, checked, _contiguous_strides(checked), x.offset, x.dtype, x.producer)

    # ---- gradients
    def grad(self, loss: Value, wrt: Union[Value, Iterable[Value]], seed: Optional[Value] = None) -> List[Value]:
        """Add the reverse-mode nodes computing the gradient of `loss` with respect to each of
        `wrt` (inputs, constants or node outputs), from the registered backward kernels; returns
        one gradient Value per `wrt` (zeros where the loss does not depend on it).  A loss that is
        not a scalar is weighted by `seed` (default ones).  compile([loss, *grads]) then runs the
        forward and backward passes as one plan.  A node whose op has no gradient rule, or whose
        backward has no kernel for its dtypes, raises NoKernelError here (see graph/autodiff.py)."""
        from .autodiff import grad
        return grad(self, loss, wrt, seed)

    # ---- compile
    def compile(self, outputs: Union[Value, Iterable[Value]], *, fuse: bool = True, measure: bool = False,
                max_ulp: Optional[int] = None, prepack: bool = True) -> Plan:
        """A Plan computing `outputs` (a Value or a list of Values) from the graph's inputs.
        prepack: a MATMUL whose B is a 2-d float constant gets B packed into the GEMM engine's
        panels once, here, into a buffer the plan owns (plan.prepacked_bytes; about B's size in
        F32, twice it for F16/BF16), instead of on every run; False keeps the per-run packing."""
        single = isinstance(outputs, Value)
        if isinstance(outputs, Value):
            values = [self._own(outputs)]
        else:
            try:
                values = list(outputs)
            except TypeError:
                raise OperandTypeError(f"compile() takes a Value or a list of Values, not "
                                       f"{type(outputs).__name__}") from None
            values = [self._own(v) for v in values]
        if not isinstance(prepack, bool):
            raise ParamsError(f"compile(prepack=...) takes True or False, not {prepack!r}")
        return _Planner(self, values, fuse=fuse, measure=measure, max_ulp=max_ulp,
                        prepack=prepack).build(single)

