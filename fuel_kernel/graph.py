"""Graph builder, planner and Plan: build a tensor program once, run it many times in C.

Graph        op-builder methods (g.add(x, y), g.matmul(a, b), g.cast(x, "f16"), ...) infer each
             node's shape and dtype from the op schema (fuel_kernel.ops) and consult the binding
             table with the node's backend as they build it: a missing kernel raises NoKernelError
             at the line that builds the node.  transpose / broadcast_to / slicing / reshape (of a
             contiguous value) are views: metadata only.
compile()    1. drops nodes the outputs do not need; 2. replaces subgraphs that match a runtime
             fused op's decomposition when the fused kernel is estimated faster; 3. picks one
             alternative per node (fuel_kernel.route); 4. the contiguize gate inserts a CONTIGUIZE
             step only for an operand that is not contiguous and whose chosen kernel lacks
             strided_input; 5. places intermediates in one arena, reusing memory by liveness
             (greedy by size over lifetime intervals); 6. emits one C step per kernel call.
Plan.run     validates the inputs, allocates the outputs and runs every step in one nogil loop
             (fuel_kernel._executor).  Each thread gets its own arena, so threads may share a plan.
"""
import itertools
import operator
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import _dispatch, ops, route
from ._executor import PlanProgram
from .errors import (BackendError, DTypeError, KernelIndexError, NoKernelError, OperandCountError,
                     OperandTypeError, ParamsError, RegistrationError, ShapeError, UnknownOpError)
from .records import BindingKey, PrecisionGuarantee
from .types import Backend, DType, KernelCaps, OpKind

ARENA_ALIGNMENT = 64
MAX_DIMS = 8
MAX_BYTES = 2 ** 63 - 1          # element counts and byte sizes must fit int64 (the C layouts)


# ---- argument checks: every refusal is a FuelKernelError ---------------------------------------
def _extent(value, what):
    """An integer argument (an extent, an axis, an index) as a Python int; never truncates 1.5."""
    if isinstance(value, bool):
        raise ShapeError(f"{what} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ShapeError(f"{what} must be an integer, not {type(value).__name__} {value!r}") from None


def _int_sequence(values, what):
    """A tuple of ints from an int or an iterable of ints (as NumPy accepts shape=5)."""
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = (values,)
    if isinstance(values, (str, bytes)):
        raise ShapeError(f"{what} must be a sequence of integers, not {type(values).__name__}")
    try:
        items = tuple(values)
    except TypeError:
        raise ShapeError(f"{what} must be a sequence of integers, not {type(values).__name__}") from None
    return tuple(_extent(v, f"{what} entry {i}") for i, v in enumerate(items))


def _check_size(shape, itemsize=1, what="shape"):
    """Refuse a shape whose element count or byte size does not fit int64 (the C layouts)."""
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"{what} {shape} has {len(shape)} dims; at most {MAX_DIMS} are supported")
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative extent in {what} {shape}")
    total = itemsize
    for s in shape:
        total *= s
    if total > MAX_BYTES:
        raise ShapeError(f"{what} {shape} is too large: {total} {'bytes' if itemsize > 1 else 'elements'} "
                         f"exceed 2**63-1")
    return shape


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


# ---- values and nodes -----------------------------------------------------------------------------
@dataclass
class Buffer:
    """A contiguous allocation: a caller input, a constant, or a node's result."""
    id: int
    kind: str                   # "input", "const", "node"
    shape: tuple
    dtype: DType
    array: Optional[np.ndarray] = None      # constants only
    name: str = ""

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class Value:
    """A symbolic tensor: a view (shape, strides and offset in elements) into one Buffer."""

    def __init__(self, graph, buffer, shape, strides, offset, dtype, producer=None):
        self.graph = graph
        self.buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.offset = int(offset)
        self.dtype = DType(dtype)
        self.producer = producer     # the Node whose result buffer this views, if any

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def is_contiguous(self):
        return self.strides == _contiguous_strides(self.shape)

    @property
    def is_whole_buffer(self):
        return self.offset == 0 and self.shape == self.buffer.shape and self.is_contiguous

    @property
    def has_broadcast(self):
        return any(s == 0 and n > 1 for s, n in zip(self.strides, self.shape))

    def __repr__(self):
        return f"<Value {self.dtype.short_name}{list(self.shape)} of buffer {self.buffer.id}>"

    # views
    @property
    def T(self):
        return self.graph.transpose(self)

    def __getitem__(self, index):
        return self.graph.slice_view(self, index)

    # arithmetic sugar for elementwise graphs
    def __add__(self, other):
        return self.graph.add(self, other)

    def __sub__(self, other):
        return self.graph.sub(self, other)

    def __mul__(self, other):
        return self.graph.mul(self, other)

    def __truediv__(self, other):
        return self.graph.div(self, other)

    def __neg__(self):
        return self.graph.neg(self)

    def __matmul__(self, other):
        return self.graph.matmul(self, other)


def _contiguous_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


@dataclass
class Node:
    id: int
    key: object                 # OpKind, or BindingKey for a runtime fused op
    inputs: List[Value]
    params: object
    dtypes: Tuple[DType, ...]
    backend: int
    output: Value = None
    name: str = ""

    @property
    def label(self):
        return self.key.short_name if isinstance(self.key, OpKind) else self.key.name


# ---- runtime fused ops -------------------------------------------------------------------------------
@dataclass
class FusedOp:
    id: int
    name: str
    n_inputs: int
    pattern: tuple              # ((op, params_key, input refs), ...); ref ("in", i) or ("node", j)
    kernels: List[tuple] = field(default_factory=list)   # (dtypes, backend)


_fused_lock = threading.Lock()
_fused_by_signature: Dict[tuple, FusedOp] = {}
_fused_by_id: Dict[int, FusedOp] = {}

VERIFY_SHAPE = (5, 37)


def _params_key(params):
    return None if params is None else (params.kind, tuple(sorted((k, repr(v)) for k, v in params.fields().items())))


def _pattern_of(graph, output):
    """The structural signature of the nodes producing `output` from the graph's inputs."""
    index_of = {}
    pattern = []
    input_ids = {b.id: i for i, b in enumerate(graph.inputs)}

    def ref(value):
        if not value.is_whole_buffer:
            raise RegistrationError("a fused decomposition may not use views")
        if value.buffer.kind == "input":
            return ("in", input_ids[value.buffer.id])
        if value.buffer.kind != "node":
            raise RegistrationError("a fused decomposition may not use constants")
        return ("node", visit(value.producer))

    def visit(node):
        if node.id in index_of:
            return index_of[node.id]
        refs = tuple(ref(v) for v in node.inputs)
        pattern.append((node.key, _params_key(node.params), refs))
        index_of[node.id] = len(pattern) - 1
        return index_of[node.id]

    visit(output.producer)
    return tuple(pattern)


def register_runtime_fused(name, decomposition, kernel, dtypes, backend=Backend.CPU, *,
                           precision=None, caps=KernelCaps.STRIDED_INPUT | KernelCaps.STRIDED_OUTPUT,
                           source="fused", params=None):
    """Register `kernel` (a 'fuel_kernel.kernel' capsule) as a fused op whose math is
    `decomposition(g, *inputs) -> Value`, built with Graph builder calls.  `dtypes` are the fused
    key's operand dtypes (inputs, then the output).  The kernel is first checked against the
    decomposition on generated inputs, within `precision` (default: exact); only then is it
    registered under BindingKey.runtime_fused(id).  Structurally identical decompositions share
    one id.  Returns the FusedOpId (an int)."""
    if isinstance(dtypes, (str, bytes)):
        raise RegistrationError(f"dtypes is a sequence of dtypes (inputs, then the output), not {dtypes!r}")
    try:
        dtypes = tuple(dtypes)
    except TypeError:
        raise RegistrationError(f"dtypes is a sequence of dtypes, not {type(dtypes).__name__}") from None
    dtypes = tuple(DType.parse(d) for d in dtypes)
    if len(dtypes) < 2:
        raise RegistrationError(f"a fused key needs at least one input dtype and the output's, got {len(dtypes)}")
    precision = precision or PrecisionGuarantee(True, 0, notes="fused: exact vs decomposition")
    if not isinstance(precision, PrecisionGuarantee):
        raise RegistrationError(f"precision must be a PrecisionGuarantee, not {type(precision).__name__}")
    scratch = Graph(backend)
    inputs = [scratch.input(VERIFY_SHAPE, d) for d in dtypes[:-1]]
    out = decomposition(scratch, *inputs)
    if not isinstance(out, Value) or out.producer is None:
        raise RegistrationError("a fused decomposition must return the Value of a node it built")
    if out.dtype != dtypes[-1]:
        raise RegistrationError(f"decomposition yields {out.dtype.short_name}, key says {dtypes[-1].short_name}")
    pattern = _pattern_of(scratch, out)
    if len(pattern) < 2:
        raise RegistrationError("a fused op decomposes into at least two nodes")

    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal(VERIFY_SHAPE) * 3).astype(d.numpy) if d.is_float
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
        address = _dispatch.kernel_address(kernel)
        if any(k.kernel_address == address for k in _dispatch.bindings().alternatives(key, dtypes, backend)):
            return fused.id                      # already registered: registration is idempotent
        with _dispatch.edit_bindings() as tx:
            tx.register(key, dtypes, backend, kernel, caps=caps,
                        precision=precision, cost=_dispatch.DEFAULT_COST, source=source)
        fused.kernels.append((dtypes, int(backend)))
    return fused.id


def fused_op(fused_id):
    if isinstance(fused_id, bool) or not isinstance(fused_id, (int, np.integer)):
        raise UnknownOpError(f"a runtime fused op id is an int, not {type(fused_id).__name__} {fused_id!r}")
    return _fused_by_id.get(int(fused_id))


def _within_claim(actual, expected, dtype, precision):
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    if not dtype.is_float:
        return np.array_equal(a, e)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return False
    finite = ~np.isnan(e)
    a, e = a[finite], e[finite]
    if precision.exact:
        return np.array_equal(a, e)
    bound = np.full(e.shape, precision.max_abs)
    bound = np.maximum(bound, precision.max_rel * np.abs(e))
    if precision.max_ulp:
        bound = np.maximum(bound, precision.max_ulp * np.abs(np.spacing(e.astype(dtype.numpy)).astype(np.float64))
                           if dtype in (DType.F32, DType.F64) else precision.max_ulp * np.abs(e) * 2.0 ** -7)
    return bool(np.all((a == e) | (np.abs(a - e) <= bound)))


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
        if params is None and schema.make_params is not None:
            params = schema.make_params([v.shape for v in inputs])
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
        return self.op(OpKind.CAST, x, out_dtype=DType.parse(dtype), backend=backend)

    def fused(self, fused_id, *inputs, backend=None):
        """A node calling runtime fused op `fused_id` directly."""
        fused = fused_op(fused_id)
        if fused is None:
            raise NoKernelError(f"no runtime fused op with id {fused_id}")
        inputs = [self._own(v) for v in inputs]
        if len(inputs) != fused.n_inputs:
            raise OperandCountError(f"fused op {fused.name} takes {fused.n_inputs} inputs")
        scratch = Graph(self.target_backend)
        shape = ops.broadcast_shape([v.shape for v in inputs])
        dtypes = tuple(v.dtype for v in inputs)
        candidates = [d for d, _ in fused.kernels if d[:-1] == dtypes]
        if not candidates:
            raise NoKernelError(f"fused op {fused.name} has no kernel for inputs {[d.short_name for d in dtypes]}")
        return self._add_node(BindingKey.runtime_fused(fused.id), inputs, None, candidates[0], shape, backend)

    def __getattr__(self, name):
        """g.add(x, y), g.relu(x), g.matmul(a, b), ...: a builder for every op with a schema."""
        upper = name.upper()
        if upper in OpKind.__members__ and OpKind[upper] in ops.SCHEMAS:
            op = OpKind[upper]

            def build(*inputs, params=None, out_dtype=None, backend=None):
                return self.op(op, *inputs, params=params, out_dtype=out_dtype, backend=backend)
            build.__name__ = name
            build.__doc__ = f"Add a {name} node."
            return build
        raise AttributeError(f"Graph has no op builder {name!r}")

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


# ---- the planner -------------------------------------------------------------------------------------
@dataclass
class _Step:
    kernel: object
    node_id: int
    name: str
    inputs: List[Value]
    output: Value
    params: object
    explain: list


class _Planner:
    def __init__(self, graph, outputs, fuse, measure, max_ulp):
        self.graph = graph
        self.outputs = outputs
        self.fuse = fuse
        self.measure = measure
        self.max_ulp = max_ulp
        self.table = _dispatch.bindings()
        self.explain_lines = []

    def live_nodes(self):
        needed, stack = set(), [v.producer for v in self.outputs if v.producer is not None]
        while stack:
            node = stack.pop()
            if node.id in needed:
                continue
            needed.add(node.id)
            stack.extend(v.producer for v in node.inputs if v.producer is not None)
        return [n for n in self.graph.nodes if n.id in needed]

    def choose(self, key, inputs, output_shape, params, dtypes, backend, label):
        alternatives = self.table.alternatives(key, dtypes, backend)
        operands = [v.shape for v in inputs] + [tuple(output_shape)]
        broadcast = any(v.has_broadcast or v.shape != tuple(output_shape) for v in inputs)
        return route.pick(alternatives, operands, params, broadcast_inputs=broadcast,
                          max_ulp=self.max_ulp, measure=self.measure, describe=label)

    # -- fusion
    def fuse_nodes(self, nodes):
        consumers: Dict[int, int] = {}
        for node in nodes:
            for v in node.inputs:
                if v.producer is not None:
                    consumers[v.producer.id] = consumers.get(v.producer.id, 0) + 1
        outputs_of_graph = {v.producer.id for v in self.outputs if v.producer is not None}
        replaced: Dict[int, Node] = {}       # root node id -> fused node
        absorbed = set()
        with _fused_lock:
            fused_ops = list(_fused_by_id.values())
        for node in reversed(nodes):
            if node.id in absorbed or node.id in replaced:
                continue
            for fused in fused_ops:
                match = self._match(fused, node, consumers, outputs_of_graph, absorbed)
                if match is None:
                    continue
                bound, covered = match
                dtypes = tuple(v.dtype for v in bound) + (node.dtypes[-1],)
                key = BindingKey.runtime_fused(fused.id)
                if not self.table.supports(key, dtypes, node.backend):
                    continue
                shape = node.output.shape
                fused_choice = self.choose(key, bound, shape, None, dtypes, node.backend, fused.name)
                fused_ns = min(v.estimate_ns for v in fused_choice.verdicts if v.estimate_ns is not None)
                unfused_ns = 0.0
                for n in covered:
                    c = self.choose(n.key, n.inputs, n.output.shape, n.params, n.dtypes, n.backend, n.label)
                    unfused_ns += min(v.estimate_ns for v in c.verdicts if v.estimate_ns is not None)
                verdict = "fused" if fused_ns < unfused_ns else "kept unfused"
                self.explain_lines.append(
                    f"fusion {fused.name} at node {node.id}: {fused_ns:.0f} ns fused vs {unfused_ns:.0f} ns "
                    f"for nodes {[n.id for n in covered]} -> {verdict}")
                if fused_ns < unfused_ns:
                    fused_node = Node(node.id, key, bound, None, dtypes, node.backend, node.output,
                                      name=fused.name)
                    replaced[node.id] = fused_node
                    absorbed.update(n.id for n in covered if n.id != node.id)
                    break
        return [replaced.get(n.id, n) for n in nodes if n.id not in absorbed]

    def _match(self, fused, root, consumers, graph_outputs, absorbed):
        bound: Dict[int, Value] = {}
        covered = []

        def match(pattern_index, node):
            op, params_key, refs = fused.pattern[pattern_index]
            if node.key != op or _params_key(node.params) != params_key or len(refs) != len(node.inputs):
                return False
            if node.id in absorbed:
                return False
            for (kind, i), value in zip(refs, node.inputs):
                if kind == "in":
                    if i in bound and bound[i] is not value:
                        return False
                    bound[i] = value
                else:
                    producer = value.producer
                    if producer is None or not value.is_whole_buffer:
                        return False
                    if consumers.get(producer.id, 0) != 1 or producer.id in graph_outputs:
                        return False
                    if not match(i, producer):
                        return False
            covered.append(node)
            return True

        if not match(len(fused.pattern) - 1, root) or len(bound) != fused.n_inputs:
            return None
        return [bound[i] for i in range(fused.n_inputs)], covered

    # -- build
    def build(self, single):
        nodes = self.live_nodes()
        if self.fuse:
            nodes = self.fuse_nodes(nodes)
        steps: List[_Step] = []
        contiguize = {}
        for node in nodes:
            choice = self.choose(node.key, node.inputs, node.output.shape, node.params, node.dtypes,
                                 node.backend, node.label)
            kernel = choice.kernel
            inputs = []
            for position, value in enumerate(node.inputs):
                if KernelCaps.STRIDED_INPUT not in kernel.caps and not value.is_contiguous:
                    value = self._materialize(value, node.backend, steps, contiguize,
                                              reason=f"input {position} of node {node.id} ({node.label})")
                inputs.append(value)
            steps.append(_Step(kernel, node.id, node.name or node.label, inputs, node.output,
                               node.params, choice.verdicts))
        # outputs the caller gets must be fresh arrays: views, inputs and constants are copied
        output_values = []
        for value in self.outputs:
            producer_step = next((s for s in steps if s.output.buffer is value.buffer), None)
            if value.buffer.kind == "node" and value.is_whole_buffer and producer_step is not None \
                    and value.buffer not in [v.buffer for v in output_values]:
                output_values.append(value)
            else:
                output_values.append(self._materialize(value, self.graph.target_backend, steps, {},
                                                       reason="graph output", force=True))
        return Plan(self.graph, steps, output_values, self.table, self.explain_lines, single)

    def _materialize(self, value, backend, steps, cache, reason, force=False):
        key = (value.buffer.id, value.shape, value.strides, value.offset)
        if key in cache and not force:
            return cache[key]
        dtypes = (value.dtype, value.dtype)
        try:
            kernel = self.table.lookup(OpKind.CONTIGUIZE, dtypes, backend)
        except NoKernelError:
            raise NoKernelError(f"{reason} needs a CONTIGUIZE({value.dtype.short_name}) kernel on "
                                f"{_dispatch.backend_name(backend)}") from None
        buffer = self.graph._buffer("node", value.shape, value.dtype)
        out = Value(self.graph, buffer, value.shape, _contiguous_strides(value.shape), 0, value.dtype)
        steps.append(_Step(kernel, -1, f"contiguize for {reason}", [value], out, None,
                           [route.Verdict(kernel.source, kernel.identity, None, f"inserted: {reason}")]))
        cache[key] = out
        return out


# ---- plans -------------------------------------------------------------------------------------------
class Plan:
    """A compiled graph.  run(inputs) -> outputs; explain() says which kernel each node got."""

    def __init__(self, graph, steps, outputs, table, fusion_notes, single):
        self.graph = graph
        self._steps = steps
        self._single = single
        self._table = table                       # keeps the snapshot of every chosen entry alive
        self._fusion_notes = fusion_notes
        self.input_buffers = list(graph.inputs)
        self.output_values = outputs
        self._local = threading.local()
        self._assign_memory()
        self._emit()

    # -- memory
    def _assign_memory(self):
        """Lifetime intervals of intermediate buffers, packed greedily by size (largest first) into
        the lowest offset that does not overlap a live neighbour."""
        output_buffers = {v.buffer.id for v in self.output_values}
        first, last = {}, {}
        for index, step in enumerate(self._steps):
            for v in step.inputs:
                last[v.buffer.id] = index
            b = step.output.buffer
            first.setdefault(b.id, index)
            last[b.id] = max(last.get(b.id, index), index)
        intermediates = [self.graph.buffers[b] for b in first if b not in output_buffers]
        placed = []                                   # (offset, size, first, last)
        self.arena_offsets = {}
        for buffer in sorted(intermediates, key=lambda b: (-b.nbytes, first[b.id])):
            size = -(-max(buffer.nbytes, 1) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
            lo, hi = first[buffer.id], last[buffer.id]
            clashes = sorted((o, s) for o, s, f, l in placed if not (l < lo or hi < f))
            offset = 0
            for o, s in clashes:
                if offset + size <= o:
                    break
                offset = max(offset, o + s)
            placed.append((offset, size, lo, hi))
            self.arena_offsets[buffer.id] = offset
        self.peak_bytes = max((o + s for o, s, _, _ in placed), default=0)
        live = [0] * max(len(self._steps), 1)
        for o, s, f, l in placed:
            for i in range(f, l + 1):
                live[i] += s
        self.min_live_bytes = max(live)

    # -- steps
    def _emit(self):
        n_inputs = len(self.input_buffers)
        self._constants = [b for b in self.graph.buffers if b.kind == "const"]
        base_of = {b.id: i for i, b in enumerate(self.input_buffers)}
        base_of.update({b.id: n_inputs + i for i, b in enumerate(self._constants)})
        self._arena_base = n_inputs + len(self._constants)
        self._output_base = self._arena_base + 1
        for i, v in enumerate(self.output_values):
            base_of[v.buffer.id] = self._output_base + i
        self._program = PlanProgram(self._table, self._output_base + len(self.output_values))

        def operand(value):
            b = value.buffer
            if b.id in base_of:
                base, byte_offset = base_of[b.id], 0
            else:
                base, byte_offset = self._arena_base, self.arena_offsets[b.id]
            return (base, byte_offset, b.nbytes, int(value.dtype), value.shape, value.strides, value.offset)

        for step in self._steps:
            self._program.add_step(step.kernel, step.node_id, step.name,
                                   [operand(v) for v in step.inputs] + [operand(step.output)], step.params)

    # -- running
    def run(self, inputs):
        """Run on `inputs` (arrays in the order the graph's inputs were declared); returns the list
        of outputs (fresh arrays), or the single output when compile() was given one Value."""
        try:
            inputs = list(inputs)
        except TypeError:
            raise OperandTypeError(f"Plan.run takes a list of arrays, not {type(inputs).__name__}") from None
        if len(inputs) != len(self.input_buffers):
            raise OperandCountError(f"the plan takes {len(self.input_buffers)} inputs, got {len(inputs)}")
        bases = [self._input_base(i, array, buffer)
                 for i, (array, buffer) in enumerate(zip(inputs, self.input_buffers))]
        bases.extend(b.array for b in self._constants)
        arena = getattr(self._local, "arena", None)
        if arena is None:
            arena = np.empty(self.peak_bytes + ARENA_ALIGNMENT, dtype=np.uint8)
            shift = (-arena.ctypes.data) % ARENA_ALIGNMENT
            arena = arena[shift:shift + self.peak_bytes] if self.peak_bytes else arena[:1]
            self._local.arena = arena
        bases.append(arena)
        outputs = [np.empty(v.shape, dtype=v.dtype.numpy) for v in self.output_values]
        bases.extend(outputs)
        self._program.run(bases)
        return outputs[0] if self._single else outputs

    def __call__(self, *inputs):
        return self.run(inputs)

    @staticmethod
    def _input_base(i, array, buffer):
        """Plan input i as the base array the executor reads: C-contiguous, aligned for its dtype
        and in native byte order.  Anything else is copied first (kernels assume aligned, native
        loads); a byte-swapped array of the right dtype is converted, not refused."""
        if not isinstance(array, np.ndarray):
            try:
                array = np.from_dlpack(array) if hasattr(array, "__dlpack__") else np.asarray(memoryview(array))
            except (TypeError, ValueError, BufferError, RuntimeError) as exc:
                raise OperandTypeError(f"plan input {i} ({buffer.name}) is a {type(array).__name__} "
                                       f"that is not a usable array: {exc}") from None
        expected = buffer.dtype.numpy
        if array.dtype != expected and not array.dtype.isnative \
                and array.dtype.newbyteorder("=") == expected:
            array = array.astype(expected)
        if array.dtype != expected:
            raise DTypeError(f"plan input {i} ({buffer.name}) has dtype {array.dtype}, expected "
                             f"{buffer.dtype.short_name}")
        if array.shape != buffer.shape:
            raise ShapeError(f"plan input {i} ({buffer.name}) has shape {array.shape}, expected {buffer.shape}")
        if type(array) is not np.ndarray:
            array = np.asarray(array)                 # a subclass: its plain ndarray view
        if not (array.flags.c_contiguous and array.flags.aligned):
            array = np.array(array, dtype=expected, order="C", copy=True)
        return array

    @property
    def n_steps(self):
        return len(self._steps)

    def explain(self):
        """Each step's candidates, their estimates and verdicts, and the winner; fusion decisions."""
        lines = list(self._fusion_notes)
        for index, step in enumerate(self._steps):
            dtypes = ", ".join(d.short_name for d in step.kernel.dtypes)
            lines.append(f"step {index}: node {step.node_id} {step.name}({dtypes}) -> {step.kernel.source}")
            for v in step.explain:
                est = f"{v.estimate_ns:10.0f} ns" if v.estimate_ns is not None else " " * 13
                lines.append(f"    {v.source:10} {est}  {v.verdict}")
        lines.append(f"arena: {self.peak_bytes} bytes peak (minimal live set {self.min_live_bytes} bytes)")
        return "\n".join(lines)
