"""The planner: dead-node pruning, fusion matching, route picking, the contiguize gate, steps."""
from dataclasses import dataclass
from typing import Dict, List

from .. import _dispatch, route
from ..errors import NoKernelError
from ..records import BindingKey
from ..types import KernelCaps, OpKind
from .fused import _fused_by_id, _fused_lock, _params_key
from .plan import Plan
from .values import Node, Value, _contiguous_strides


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

