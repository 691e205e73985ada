"""Reverse-mode gradients through a Graph: Graph.grad adds, to the same graph, the nodes computing
the gradient of a loss with respect to chosen values, from the registered backward kernels (and
forward ops where a backward is a forward op on other operands), so one compile() gives a plan
returning the loss and every gradient.

Each forward op with a gradient has a rule in RULES: (graph, node, output grads, which inputs
need one) -> one gradient Value (or None) per input.  Gradients are kept per buffer: the gradient
of a view (a transpose, a broadcast, a reshape of a contiguous value) is mapped back to its
buffer's shape (summed over broadcast axes, permuted back); the gradient of any other view (a
slice) is held until the buffer's gradient is read: slices that tile the buffer exactly along one
axis (q, k and v cut from one projection) are joined by one CONCAT, any others are scattered into
the buffer's gradient by flat index (SCATTER_ADD); the gradients of a buffer read by several nodes
add up, in the order the reverse pass reaches them.  An op without a rule, or whose backward op has no kernel for the node's
dtypes, fails at grad() time with a NoKernelError naming what is missing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _dispatch, ops
from .. import params as fk_params
from ..errors import DTypeError, NoKernelError, OperandTypeError, ShapeError
from ..types import OpKind
from .values import Node, Value, _contiguous_strides

if TYPE_CHECKING:
    from .builders import Graph

Grads = List[Optional[Value]]
Rule = Callable[["Graph", Node, Grads, List[bool]], Grads]


# ---- shape helpers ----------------------------------------------------------------------------
def sum_to(graph: Graph, grad: Value, shape: Sequence[int]) -> Value:
    """`grad` summed down to `shape`, which broadcasts to grad's shape (the backward of
    broadcasting): leading dims and dims where `shape` has 1 are summed."""
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1]
    if dims:
        grad = graph.sum(grad, dims=dims, keepdim=True)
    return grad if grad.shape == shape else graph.reshape(grad, shape)


def view_grad(graph: Graph, value: Value, grad: Value) -> Optional[Value]:
    """The gradient of value's buffer given the gradient of the view `value`, when the view maps
    back without moving data: the whole buffer, a reshape of it, or a view whose non-zero strides
    are a permutation of its buffer's axes (with broadcast, stride-0, and size-1 axes).  None for
    any other view (a slice): accumulate() scatters those."""
    buffer = value.buffer
    if value.is_whole_buffer:
        return grad
    size = int(np.prod(buffer.shape, dtype=np.int64))
    if value.offset == 0 and value.is_contiguous and int(np.prod(value.shape, dtype=np.int64)) == size:
        return graph.reshape(grad, buffer.shape)
    strides = _contiguous_strides(buffer.shape)
    summed, kept, order = [], [], []
    for axis, (extent, stride) in enumerate(zip(value.shape, value.strides)):
        if extent == 1:
            continue
        if stride == 0:
            summed.append(axis)
            continue
        match = [b for b in range(len(buffer.shape)) if strides[b] == stride and buffer.shape[b] == extent]
        if not match:
            return None
        kept.append(axis)
        order.append(match[0])
    wanted = [b for b in range(len(buffer.shape)) if buffer.shape[b] > 1]
    if value.offset != 0 or sorted(order) != wanted:
        return None
    if summed:
        grad = graph.sum(grad, dims=summed, keepdim=True)
    grad = graph.reshape(grad, [value.shape[a] for a in kept])
    permutation = sorted(range(len(order)), key=lambda i: order[i])
    if permutation != list(range(len(order))):
        grad = graph.transpose(grad, permutation)
    return graph.reshape(grad, buffer.shape)


def view_indices(value: Value) -> np.ndarray:
    """The flat buffer index of every element of the view `value` (its shape; C order)."""
    index = np.full(value.shape, value.offset, dtype=np.int64)
    for axis, (extent, stride) in enumerate(zip(value.shape, value.strides)):
        shape = [1] * value.ndim
        shape[axis] = extent
        index = index + (np.arange(extent, dtype=np.int64) * stride).reshape(shape)
    return index


def _last_two_swapped(graph: Graph, x: Value) -> Value:
    axes = list(range(x.ndim))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return graph.transpose(x, axes)


def _zeros(graph: Graph, like: Value) -> Value:
    return graph.broadcast_to(graph.constant(np.zeros((), like.dtype.numpy)), like.shape)


def _output_grad(grads: Grads) -> Value:
    """The gradient of a node's first output, which every rule has: grad() calls a rule only when
    some output of its node has a gradient, and the rules of the ops with a second output
    (flash_attn, fused_softmax_cross_entropy) refuse a gradient on that one before asking."""
    dy = grads[0]
    assert dy is not None
    return dy


# ---- rules ---------------------------------------------------------------------------------------
def _backward_op(name: str, with_params: bool = True) -> Rule:
    """(x, dy) -> dx through the backward op `name` (GELU_BACKWARD, ...), with the node's params."""
    def rule(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
        op = _op(name, node)
        return [g.op(op, node.inputs[0], _output_grad(grads), params=node.params if with_params else None)]
    return rule


def _from_output(name: str) -> Rule:
    """(y, dy) -> dx through the backward op `name` (SOFTMAX_LAST_DIM_BACKWARD, ...)."""
    def rule(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
        return [g.op(_op(name, node), node.output, _output_grad(grads), params=node.params)]
    return rule


def _op(name: str, node: Node) -> OpKind:
    if name not in OpKind.__members__:
        raise NoKernelError(f"grad: node {node.id} ({node.label}) needs {name}, which this build does not have")
    return OpKind[name]


def _elementwise(fn: Callable[[Graph, Value, Value, Node], Grads]) -> Rule:
    """A rule computing from the forward values; each gradient is summed back to its input's shape."""
    def rule(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
        out = fn(g, _output_grad(grads), node.output, node)
        return [sum_to(g, d, v.shape) if d is not None and need else None
                for d, v, need in zip(out, node.inputs, needs)]
    return rule


def _matmul(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    if node.params is not None or len(node.inputs) != 2:
        raise NoKernelError(f"grad: node {node.id} (matmul) has params or a run-time row count; only a plain "
                            f"a @ b has a gradient")
    a, b = node.inputs
    dy = _output_grad(grads)
    da = sum_to(g, g.matmul(dy, _last_two_swapped(g, b)), a.shape) if needs[0] else None
    db = sum_to(g, _sum_groups(g, g.matmul(_last_two_swapped(g, a), dy), b.shape), b.shape) if needs[1] else None
    return [da, db]


def _sum_groups(g: Graph, grad: Value, shape: Sequence[int]) -> Value:
    """MATMUL's grouped (GQA) batch axes undone: where B's batch extent t divides the product's e > t
    (index i read B's i / (e / t)), grad's axis is split into (t, e / t) and summed over the second;
    the other batch axes are left to sum_to."""
    lead = grad.ndim - len(shape)
    for axis in range(len(shape) - 2):
        extent, target = grad.shape[lead + axis], shape[axis]
        if target > 1 and extent != target and extent % target == 0:
            at = lead + axis
            split = grad.shape[:at] + (target, extent // target) + grad.shape[at + 1:]
            grad = g.sum(g.reshape(grad, split), dims=[at + 1])
    return grad


def _reduction(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    x = node.inputs[0]
    dims, _ = ops._reduced_dims(x.ndim, node.params)
    grad = _output_grad(grads)
    if node.key == OpKind.MEAN:
        count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
        grad = g.affine(grad, mul=1.0 / max(count, 1), add=0.0)
    grad = g.reshape(grad, [1 if d in dims else n for d, n in enumerate(x.shape)])
    return [g.broadcast_to(grad, x.shape)]


def _norm(name: str) -> Rule:
    def rule(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
        outs = g.op(_op(name, node), *node.inputs, _output_grad(grads), params=node.params)
        return list(outs)
    return rule


def _cross_entropy(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    if grads[1] is not None:
        raise NoKernelError(f"grad: node {node.id} (fused_softmax_cross_entropy): the log-sum-exp output "
                            f"has no gradient rule; differentiate the loss output only")
    logits, targets = node.inputs
    dlogits = g.op(OpKind.FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD, logits, targets, node.outputs[1],
                   _output_grad(grads), params=node.params)
    return [dlogits, None]


def _flash_attn(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    """FLASH_ATTN_BACKWARD from the forward's log-sum-exp: a forward node built without its lse is
    given one (the same call then writes both).  The backward takes [q, k, v, lse, do] (the output
    o would be a ninth operand) and recomputes rowsum(do * o) from the tiles."""
    if len(node.outputs) == 1:
        _add_optional_output(g, node)
    elif grads[1] is not None:
        raise NoKernelError(f"grad: node {node.id} (flash_attn): the log-sum-exp output has no gradient rule")
    q, k, v = node.inputs
    return list(g.op(_op("FLASH_ATTN_BACKWARD", node), q, k, v, node.outputs[1], _output_grad(grads),
                     params=node.params))


def _add_optional_output(g: Graph, node: Node) -> None:
    """Give `node` the next optional output its op has (checked against the table as a new node)."""
    assert isinstance(node.key, OpKind)
    n_out = len(node.outputs) + 1
    inputs = [v.shape for v in node.inputs]
    shape = ops.infer_output_shapes(node.key, inputs, node.params)[n_out - 1]
    dtype = ops.infer_output_dtypes(node.key, [v.dtype for v in node.inputs], node.params)[n_out - 1]
    dtypes = node.dtypes + (dtype,)
    table = _dispatch.bindings()
    if not table.supports(node.key, dtypes, node.backend):
        table.lookup(node.key, dtypes, node.backend)          # NoKernelError naming the key
    buffer = g._buffer("node", shape, dtype)
    node.outputs.append(Value(g, buffer, shape, _contiguous_strides(shape), 0, dtype, producer=node))
    node.dtypes = dtypes


def _fused_linear(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    x, w, b = node.inputs
    dy = _output_grad(grads)
    return [g.matmul(dy, w.T) if needs[0] else None,
            g.matmul(x.T, dy) if needs[1] else None,
            g.sum(dy, dims=[0]) if needs[2] else None]


def _conv2d(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    """CONV2D_BACKWARD_INPUT and _WEIGHT with the forward's stride, padding, dilation and groups;
    the bias's gradient sums dy over images and positions."""
    x, w = node.inputs[0], node.inputs[1]
    fields = node.params.fields() if node.params is not None and node.params.kind == "conv2d" else {}
    params = fk_params.conv2d_backward(input_size=x.shape[2:], kernel_size=w.shape[2:], **fields)
    dy = _output_grad(grads)
    result: Grads = [g.op(_op("CONV2D_BACKWARD_INPUT", node), dy, w, params=params) if needs[0] else None,
                     g.op(_op("CONV2D_BACKWARD_WEIGHT", node), x, dy, params=params) if needs[1] else None]
    if len(node.inputs) == 3:
        result.append(g.sum(dy, dims=[0, 2, 3]) if needs[2] else None)
    return result


def _conv1d(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    """CONV2D's gradient ops on the height-1 views CONV1D runs on (x (N, C, 1, L), w (O, C/g, 1, K),
    dy (N, O, 1, OL)), reshaped back; the bias's gradient sums dy over images and positions.  CONV2D's
    padding is symmetric, so pads (begin, end) run as padding begin on x with max(end - begin, 0)
    zeros appended (length L2; dx drops their rows) and dy with zeros appended up to that call's
    output length (rows no output depends on)."""
    x, w = node.inputs[0], node.inputs[1]
    f: Dict[str, Any] = {"stride": 1, "padding": (0, 0), "dilation": 1, "groups": 1}
    if node.params is not None and node.params.kind == "conv1d":
        f = node.params.fields()
    begin, end = f["padding"]
    grow = max(end - begin, 0)
    length = x.shape[2] + grow
    out_length = (length + 2 * begin - f["dilation"] * (w.shape[2] - 1) - 1) // f["stride"] + 1
    params = fk_params.conv2d_backward(input_size=(1, length), kernel_size=(1, w.shape[2]),
                                       stride=(1, f["stride"]), padding=(0, begin),
                                       dilation=(1, f["dilation"]), groups=f["groups"])
    dy = _output_grad(grads)
    if out_length > dy.shape[2]:
        dy = g.pad(dy, before=[0], after=[out_length - dy.shape[2]])
    height_1 = lambda v: g.reshape(v, (v.shape[0], v.shape[1], 1, v.shape[2]))
    result: Grads = [None, None]
    if needs[0]:
        dx = g.op(_op("CONV2D_BACKWARD_INPUT", node), height_1(dy), height_1(w), params=params)
        dx = g.reshape(dx, (x.shape[0], x.shape[1], length))
        result[0] = dx[:, :, :x.shape[2]] if grow else dx
    if needs[1]:
        xs = g.pad(x, before=[0], after=[grow]) if grow else x
        result[1] = g.reshape(g.op(_op("CONV2D_BACKWARD_WEIGHT", node), height_1(xs), height_1(dy), params=params),
                              w.shape)
    if len(node.inputs) == 3:
        result.append(g.sum(dy, dims=[0, 2]) if needs[2] else None)
    return result


def _conv_transpose2d(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    """y = CONV_TRANSPOSE2D(x, w) is the input gradient of a CONV2D with padding pads_begin, so
    dx = CONV2D(dy, w) and dw = CONV2D_BACKWARD_WEIGHT(dy, x), each on the forward call whose output
    rows are x's.  Per axis r = pads_begin - pads_end + output_padding says how far that call's
    output extent (H - 1) + floor(r / stride) + 1 is from x's H: r < 0 pads dy with -r zeros at the
    end (they add nothing), r >= stride computes extra rows (dx's are sliced off, and x is padded
    with zeros for them in dw's call); the bias's gradient sums dy over images and positions."""
    x, w = node.inputs[0], node.inputs[1]
    f: Dict[str, Any] = {"stride": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0), "dilation": (1, 1),
                         "output_padding": (0, 0), "groups": 1}
    if node.params is not None and node.params.kind == "conv_transpose2d":
        f = node.params.fields()
    dy = _output_grad(grads)
    r = [f["pads_begin"][i] - f["pads_end"][i] + f["output_padding"][i] for i in range(2)]
    tail = [max(0, -r[i]) for i in range(2)]
    extra = [(r[i] + tail[i]) // f["stride"][i] for i in range(2)]
    if any(tail):
        dy = g.pad(dy, before=[0, 0], after=tail)
    conv: Dict[str, Any] = dict(stride=f["stride"], padding=f["pads_begin"], dilation=f["dilation"], groups=f["groups"])
    result: Grads = [None, None]
    if needs[0]:
        dx = g.conv2d(dy, w, **conv)
        result[0] = dx[:, :, :x.shape[2], :x.shape[3]] if any(extra) else dx
    if needs[1]:
        xs = g.pad(x, before=[0, 0], after=extra) if any(extra) else x
        params = fk_params.conv2d_backward(input_size=dy.shape[2:], kernel_size=w.shape[2:], **conv)
        result[1] = g.op(_op("CONV2D_BACKWARD_WEIGHT", node), dy, xs, params=params)
    if len(node.inputs) == 3:
        result.append(g.sum(_output_grad(grads), dims=[0, 2, 3]) if needs[2] else None)
    return result


def _max(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    """MAX over dims: REDUCE_MAX_TO_BACKWARD onto the keepdim shape (ties share the gradient)."""
    x = node.inputs[0]
    dims, _ = ops._reduced_dims(x.ndim, node.params)
    kept = [1 if d in dims else n for d, n in enumerate(x.shape)]
    return [g.op(_op("REDUCE_MAX_TO_BACKWARD", node), x, g.reshape(_output_grad(grads), kept),
                 params=fk_params.reduce_to(kept))]


def _where(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    cond, a, b = node.inputs
    dy = _output_grad(grads)
    zeros = _zeros(g, dy)
    return [None,
            sum_to(g, g.where(cond, dy, zeros), a.shape) if needs[1] else None,
            sum_to(g, g.where(cond, zeros, dy), b.shape) if needs[2] else None]


def _rope(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    x, cos, sin = node.inputs
    return [g.op(OpKind.ROPE, _output_grad(grads), cos, g.neg(sin), params=node.params), None, None]


def _cast(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
    return [g.cast(_output_grad(grads), node.inputs[0].dtype)]


def _index_backward(add_op: OpKind) -> Rule:
    """INDEX_SELECT / GATHER: the gradient is INDEX_ADD / SCATTER_ADD of dy into zeros of x's shape."""
    def rule(g: Graph, node: Node, grads: Grads, needs: List[bool]) -> Grads:
        x, index = node.inputs
        zeros = g.constant(np.zeros(x.shape, x.dtype.numpy))
        axis = node.params.fields()["axis"] if node.params is not None else 0
        return [g.op(add_op, zeros, index, _output_grad(grads), params=fk_params.scatter(axis)), None]
    return rule


E = _elementwise
RULES: Dict[OpKind, Rule] = {
    OpKind.NEG: E(lambda g, d, y, n: [g.neg(d)]),
    OpKind.ADD: E(lambda g, d, y, n: [d, d]),
    OpKind.SUB: E(lambda g, d, y, n: [d, g.neg(d)]),
    OpKind.MUL: E(lambda g, d, y, n: [g.mul(d, n.inputs[1]), g.mul(d, n.inputs[0])]),
    OpKind.DIV: E(lambda g, d, y, n: [g.div(d, n.inputs[1]), g.neg(g.div(g.mul(d, y), n.inputs[1]))]),
    OpKind.SQR: E(lambda g, d, y, n: [g.mul(d, g.affine(n.inputs[0], mul=2.0, add=0.0))]),
    OpKind.SQRT: E(lambda g, d, y, n: [g.affine(g.div(d, y), mul=0.5, add=0.0)]),
    OpKind.RSQRT: E(lambda g, d, y, n: [g.mul(d, g.affine(g.mul(g.sqr(y), y), mul=-0.5, add=0.0))]),
    OpKind.RECIP: E(lambda g, d, y, n: [g.neg(g.mul(d, g.sqr(y)))]),
    OpKind.EXP: E(lambda g, d, y, n: [g.mul(d, y)]),
    OpKind.LOG: E(lambda g, d, y, n: [g.div(d, n.inputs[0])]),
    OpKind.SIN: E(lambda g, d, y, n: [g.mul(d, g.cos(n.inputs[0]))]),
    OpKind.COS: E(lambda g, d, y, n: [g.neg(g.mul(d, g.sin(n.inputs[0])))]),
    OpKind.ABS: E(lambda g, d, y, n: [g.mul(d, g.sign(n.inputs[0]))]),
    OpKind.AFFINE: E(lambda g, d, y, n: [g.affine(d, mul=n.params.fields()["mul"] if n.params else 1.0, add=0.0)]),
    OpKind.TANH: _backward_op("TANH_BACKWARD", with_params=False),
    OpKind.SIGMOID: _backward_op("SIGMOID_BACKWARD", with_params=False),
    OpKind.RELU: _backward_op("RELU_BACKWARD", with_params=False),
    OpKind.SILU: _backward_op("SILU_BACKWARD", with_params=False),
    OpKind.GELU: _backward_op("GELU_BACKWARD", with_params=False),
    OpKind.GELU_ERF: _backward_op("GELU_ERF_BACKWARD", with_params=False),
    OpKind.POWI: _backward_op("POWI_BACKWARD"),
    OpKind.SOFTMAX_LAST_DIM: _from_output("SOFTMAX_LAST_DIM_BACKWARD"),
    OpKind.LOG_SOFTMAX_LAST_DIM: _from_output("LOG_SOFTMAX_LAST_DIM_BACKWARD"),
    OpKind.RMS_NORM: _norm("RMS_NORM_BACKWARD"),
    OpKind.LAYER_NORM: _norm("LAYER_NORM_BACKWARD"),
    OpKind.MATMUL: _matmul,
    OpKind.FUSED_LINEAR: _fused_linear,
    OpKind.CONV2D: _conv2d,
    OpKind.CONV1D: _conv1d,
    OpKind.CONV_TRANSPOSE2D: _conv_transpose2d,
    OpKind.MAX: _max,
    OpKind.REDUCE_MAX_TO: lambda g, node, grads, needs: [
        g.op(OpKind.REDUCE_MAX_TO_BACKWARD, node.inputs[0], _output_grad(grads), params=node.params)],
    OpKind.REDUCE_SUM_TO: lambda g, node, grads, needs: [
        g.broadcast_to(_output_grad(grads), node.inputs[0].shape)],
    OpKind.PAD: lambda g, node, grads, needs: [
        g.op(OpKind.PAD_BACKWARD, _output_grad(grads), params=node.params)],
    OpKind.FLASH_ATTN: _flash_attn,
    OpKind.SUM: _reduction,
    OpKind.MEAN: _reduction,
    OpKind.FUSED_SOFTMAX_CROSS_ENTROPY: _cross_entropy,
    OpKind.WHERE: _where,
    OpKind.ROPE: _rope,
    OpKind.CAST: _cast,
    OpKind.CONTIGUIZE: lambda g, node, grads, needs: [grads[0]],
    OpKind.INDEX_SELECT: _index_backward(OpKind.INDEX_ADD),
    OpKind.GATHER: _index_backward(OpKind.SCATTER_ADD),
}


# ---- the reverse pass -------------------------------------------------------------------------------
def grad(graph: Graph, loss: Value, wrt: Union[Value, Iterable[Value]],
         seed: Optional[Value] = None) -> List[Value]:
    """Add the reverse-mode nodes computing d(sum(seed * loss))/d(each of wrt); seed defaults to
    ones (so a scalar loss gives its plain gradient).  Returns one gradient Value per `wrt`, of its
    shape and dtype (zeros where the loss does not depend on it)."""
    loss = graph._own(loss)
    wanted = [graph._own(w) for w in _as_list(wrt)]
    for w in wanted + [loss]:
        if not w.dtype.is_float:
            raise DTypeError(f"grad: {w} is not a float value, so it has no gradient")
    for w in wanted:
        if not w.is_whole_buffer:
            raise ShapeError(f"grad: ask for the gradient of a whole value (an input, a constant or a "
                             f"node's output), not of the view {w}")
    if seed is None:
        seed = graph.broadcast_to(graph.constant(np.ones((), loss.dtype.numpy)), loss.shape)
    else:
        seed = graph._own(seed)
        if seed.shape != loss.shape or seed.dtype != loss.dtype:
            raise ShapeError(f"grad: the seed must match the loss ({loss.dtype.short_name}{list(loss.shape)}), "
                             f"got {seed.dtype.short_name}{list(seed.shape)}")
    nodes = _path(graph, loss, {w.buffer.id for w in wanted})
    needs_grad = {w.buffer.id for w in wanted} | {o.buffer.id for n in nodes for o in n.outputs}
    grads: Dict[int, Value] = {}
    held: Dict[int, List[Tuple[Value, Value]]] = {}     # buffer id -> its slices' (view, gradient)
    _accumulate(graph, grads, held, loss, seed)
    for node in reversed(nodes):
        for o in node.outputs:
            _settle(graph, grads, held, o.buffer.id)
        out_grads = [grads.get(o.buffer.id) for o in node.outputs]
        if all(d is None for d in out_grads):
            continue
        rule = RULES.get(node.key) if isinstance(node.key, OpKind) else None
        if rule is None:
            raise NoKernelError(f"grad: node {node.id} ({node.label}) has no backward: "
                                f"{node.label.upper()} has no gradient rule")
        needs = [v.buffer.id in needs_grad and v.dtype.is_float for v in node.inputs]
        for value, d, need in zip(node.inputs, rule(graph, node, out_grads, needs), needs):
            if need and d is not None:
                _accumulate(graph, grads, held, value, d)
    result = []
    for w in wanted:
        _settle(graph, grads, held, w.buffer.id)
        d = grads.get(w.buffer.id)
        result.append(d if d is not None else _zeros(graph, w))
    return result


def _as_list(values: Union[Value, Iterable[Value]]) -> List[Value]:
    if isinstance(values, Value):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise OperandTypeError(f"grad: wrt is a Value or a list of Values, not {type(values).__name__}") from None


def _path(graph: Graph, loss: Value, sources: set) -> List[Node]:
    """The nodes, in graph order, that read (through other nodes) a source buffer and lead to loss."""
    ancestors: set = set()
    stack = [loss.producer] if loss.producer is not None else []
    while stack:
        node = stack.pop()
        if node.id in ancestors:
            continue
        ancestors.add(node.id)
        stack.extend(v.producer for v in node.inputs if v.producer is not None)
    reached = set(sources)
    path = []
    for node in graph.nodes:
        if node.id in ancestors and any(v.buffer.id in reached for v in node.inputs):
            reached.update(o.buffer.id for o in node.outputs)
            path.append(node)
    return path


def _accumulate(graph: Graph, grads: Dict[int, Value], held: Dict[int, List[Tuple[Value, Value]]],
                value: Value, d: Value) -> None:
    """Add the gradient `d` of the view `value` into its buffer's gradient: at once for a view that
    maps back without moving data, else held until the buffer's gradient is read (_settle)."""
    if d.dtype != value.dtype:
        d = graph.cast(d, value.dtype)
    if d.shape != value.shape:
        d = sum_to(graph, d, value.shape)
    key = value.buffer.id
    mapped = view_grad(graph, value, d)
    if mapped is None:
        held.setdefault(key, []).append((value, d))
        return
    _settle(graph, grads, held, key)        # the held slices came first: they are added first
    grads[key] = mapped if key not in grads else graph.add(grads[key], mapped)


def _settle(graph: Graph, grads: Dict[int, Value], held: Dict[int, List[Tuple[Value, Value]]], key: int) -> None:
    """Add the held slice gradients of buffer `key` into its gradient: one CONCAT when the slices
    tile the buffer exactly along one axis (each element is then its slice's gradient, added to the
    gradient so far as SCATTER_ADD would add it), else SCATTER_ADD of each slice by flat buffer index,
    in the order they came, into the gradient so far (zeros for the first)."""
    pieces = held.pop(key, None)
    if not pieces:
        return
    joined = _join_slices(graph, pieces)
    if joined is not None:
        grads[key] = joined if key not in grads else graph.add(grads[key], joined)
        return
    shape = pieces[0][0].buffer.shape
    size = int(np.prod(shape, dtype=np.int64))
    base = grads[key] if key in grads else graph.constant(np.zeros(shape, pieces[0][0].dtype.numpy))
    for value, d in pieces:
        index = view_indices(value).reshape(-1)
        flat = graph.scatter_add(graph.reshape(base, (size,)), graph.constant(index),
                                 graph.reshape(d, (index.size,)), axis=0)
        base = graph.reshape(flat, shape)
    grads[key] = base


def _join_slices(graph: Graph, pieces: List[Tuple[Value, Value]]) -> Optional[Value]:
    """The buffer's gradient as one CONCAT of the slices' gradients (views of them: no copy before
    it), when the slices are disjoint and together cover the buffer exactly along one axis of a
    C-order view of it, either an axis they share (x[:, :768], x[:, 768:]) or one each takes a single
    index of (q, k, v = x.reshape(S, 3, H, D)[:, i]); None otherwise (2 .. 7 slices: CONCAT's limit)."""
    if not 2 <= len(pieces) <= 7:
        return None
    buffer = pieces[0][0].buffer
    # each slice in C order of the buffer: its axes longer than 1, by decreasing stride
    canonical = []
    for value, d in pieces:
        axes = [a for a in range(value.ndim) if value.shape[a] > 1]
        if any(value.strides[a] <= 0 for a in axes):
            return None
        axes.sort(key=lambda a: -value.strides[a])
        canonical.append((value.offset, [value.shape[a] for a in axes], [value.strides[a] for a in axes], axes, d))
    canonical.sort(key=lambda c: c[0])
    ndim, strides = len(canonical[0][1]), canonical[0][2]
    if any(len(c[1]) != ndim or c[2] != strides for c in canonical) or canonical[0][0] != 0:
        return None
    size = int(np.prod(buffer.shape, dtype=np.int64))
    for axis in range(ndim + 1):
        # along a new axis `axis` (the slices share every extent; offsets step by its stride) ...
        step = canonical[1][0]
        parent = canonical[0][1][:axis] + [len(canonical)] + canonical[0][1][axis:]
        parent_strides = strides[:axis] + [step] + strides[axis:]
        if (all(c[1] == canonical[0][1] and c[0] == i * step for i, c in enumerate(canonical))
                and _c_order(parent, parent_strides, size)):
            return _concat(graph, canonical, axis, True, buffer)
        # ... or along the existing axis `axis` (the other extents shared; offsets follow on)
        if axis == ndim:
            break
        offset, extents = 0, []
        for c in canonical:
            if c[0] != offset or c[1][:axis] + c[1][axis + 1:] != canonical[0][1][:axis] + canonical[0][1][axis + 1:]:
                break
            extents.append(c[1][axis])
            offset += c[1][axis] * strides[axis]
        else:
            parent = canonical[0][1][:axis] + [sum(extents)] + canonical[0][1][axis + 1:]
            if _c_order(parent, strides, size):
                return _concat(graph, canonical, axis, False, buffer)
    return None


def _c_order(shape: List[int], strides: List[int], size: int) -> bool:
    """Whether (shape, strides) lays out `size` elements densely in C order."""
    return int(np.prod(shape, dtype=np.int64)) == size and list(strides) == list(_contiguous_strides(tuple(shape)))


def _concat(graph: Graph, canonical: list, axis: int, new_axis: bool, buffer: Any) -> Value:
    """CONCAT of the slices' gradients, each viewed in the buffer's C order (plus a unit axis at
    `axis` when they stack along a new one), reshaped to the buffer's shape."""
    views = []
    for _, extents, strides, axes, d in canonical:
        d_strides = [d.strides[a] for a in axes]
        if new_axis:
            extents, d_strides = extents[:axis] + [1] + extents[axis:], d_strides[:axis] + [0] + d_strides[axis:]
        views.append(Value(graph, d.buffer, extents, d_strides, d.offset, d.dtype, d.producer))
    return graph.reshape(graph.concat(*views, axis=axis), buffer.shape)