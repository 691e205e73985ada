"""The planner: dead-node pruning, fusion matching, route picking, the pre-packing of constant
MATMUL weights, the contiguize gate, steps, and the grouping of elementwise steps (with the
MATMUL or CONV2D they follow, and the norm rows they feed) that run tile by tile."""
import heapq
import importlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .. import _dispatch, ops, route, spec
from .._executor import VECTOR_FORMS, VECTOR_LIMITS, VECTOR_OPCODES, manifest_kernels, tile_row_entries
from ..errors import NoKernelError
from ..records import BindingKey
from ..types import Backend, DType, KernelCaps, OpKind
from .fused import _fused_by_id, _fused_lock, _params_key
from .plan import ARENA_ALIGNMENT, Plan, _aligned_empty, pack_by_lifetime
from .values import Buffer, Node, Value, _contiguous_strides


# ---- the planner -------------------------------------------------------------------------------------
# One view of a buffer: (buffer id, shape, strides, offset)
_ViewKey = Tuple[int, Tuple[int, ...], Tuple[int, ...], int]


@dataclass
class _Step:
    kernel: _dispatch.Kernel
    node_id: int
    name: str
    inputs: List[Value]
    outputs: List[Value]
    params: object
    explain: list
    alone: str = ""                  # why it is not in an elementwise group (compile(fuse=True))

    @property
    def output(self) -> Value:
        """The first (for most steps the only) output."""
        return self.outputs[0]

    @property
    def reads(self) -> List[Value]:
        return self.inputs

    @property
    def writes(self) -> List[Value]:
        return self.outputs


# ---- elementwise groups ------------------------------------------------------------------------------
# The ops whose kernels compute each output element from the same-index elements of their
# (broadcast) inputs alone, so running them on tiles of the output gives the same bits.
# CONTIGUIZE, a copy the contiguize gate and reshape insert, is left to run alone.
GROUPABLE_OPS = frozenset(OpKind[op.name] for op in spec.OPS
                          if op.shape == "broadcast" and op.name != "CONTIGUIZE")
# A tile holds about this many bytes of all the operands its members touch (inputs, intermediates
# and written outputs), so they stay in L2 between members; measured in bench/bench_graph.py.
TILE_BUDGET_BYTES = 256 * 1024
TILE_MIN_ELEMENTS = 4096         # below this, a kernel call's fixed cost (its checks) starts to show
TILE_MAX_ELEMENTS = 16384        # and below 2 * FK_SPLIT_GRAIN, so a member never splits again
# A group whose every member calls its kernel's row function directly (tile_rows(); ~20 ns a call
# instead of the kernel's ~0.2 us of checks and planning) takes tiles whose live bytes (inputs,
# written outputs and the tile values live at once) are about an L1 cache: on the 10-op
# expression of bench/bench_graph.py (24 live bytes per element) tiles of 2048 elements ran
# 5-10% faster than 1024 (the fixed cost of more calls) and than 4096 (L2 instead of L1), 512
# 25-40% slower (2-core AMD EPYC, AVX2).
ROW_TILE_BUDGET_BYTES = 48 * 1024
ROW_TILE_MIN_ELEMENTS = 512
ROW_TILE_MAX_ELEMENTS = 4096

# Ops whose kernels compute each last-axis row of their output from the same row of their first
# input (and whole small operands) alone: they join a group whose tiles hold whole rows, so a
# residual add feeding a norm is applied in the norm's row pass.
ROW_OPS = frozenset(OpKind[name] for name in ("SOFTMAX_LAST_DIM", "LOG_SOFTMAX_LAST_DIM", "RMS_NORM", "LAYER_NORM"))
# A MATMUL heading a group (its epilogue: bias, activation, residual, cast) runs on column tiles
# this wide.  The GEMM engine packs A once per NC columns of B (gemm_core.h.in: NC is 1024 for the
# F32 compute type, 512 for F64), so a tile a multiple of NC wide packs A and B exactly as the
# whole product does; with M up to 128 the tile's output stays in L2 for the epilogue.  Any
# column cut gives the same bits: each element's K sum does not depend on the blocks of C.
MATMUL_TILE_COLUMNS = 1024
# The ops that head a group on column tiles: MATMUL, and MATMUL_PREPACKED (a MATMUL whose constant B
# compile() packed once), whose packed B view is cut on columns as B is.
MATMUL_HEADS = frozenset((OpKind.MATMUL, OpKind.MATMUL_PREPACKED))

_builtin_kernels: Optional[frozenset] = None


def builtin_kernels() -> frozenset:
    """(kernel address, op) of every row the CPU kernel modules register (fuel_kernel/cpu)."""
    global _builtin_kernels
    if _builtin_kernels is None:
        from ..cpu import KERNEL_MODULES
        found = set()
        for name in KERNEL_MODULES:
            capsule, n_rows = importlib.import_module(name).manifest()
            found.update(manifest_kernels(capsule, n_rows))
        _builtin_kernels = frozenset(found)
    return _builtin_kernels


_tile_rows: Optional[Dict[int, Any]] = None


def tile_rows() -> Dict[int, Any]:
    """Kernel address -> its 'fuel_kernel.tile_row' capsule, for every kernel a CPU module
    publishes a row function of (its tile_rows(); modules written by hand may publish none)."""
    global _tile_rows
    if _tile_rows is None:
        from ..cpu import KERNEL_MODULES
        found: Dict[int, Any] = {}
        for name in KERNEL_MODULES:
            module = importlib.import_module(name)
            if hasattr(module, "tile_rows"):
                found.update(tile_row_entries(*module.tile_rows()))
        _tile_rows = found
    return _tile_rows


def groupable(step: _Step) -> Optional[str]:
    """Why `step` cannot join an elementwise group, or None when it can."""
    kernel = step.kernel
    op = kernel.op
    if not isinstance(op, OpKind):
        return "a runtime fused op"
    if op not in GROUPABLE_OPS and op not in ROW_OPS:
        return "inserted copy" if op == OpKind.CONTIGUIZE else f"{op.short_name} is not elementwise"
    return _builtin_and_split(step, op)


def _builtin_and_split(step: _Step, op: OpKind) -> Optional[str]:
    """Why `step`'s kernel (of static op `op`) may not run on tiles: not a built-in CPU kernel, or
    one that checks its data (or splits nowhere) so it runs whole; None when it may."""
    kernel = step.kernel
    if kernel.backend != Backend.CPU or (kernel.kernel_address, int(op)) not in builtin_kernels():
        return f"its kernel (source {kernel.source!r}) is not a built-in CPU kernel"
    if spec.split_rule(op.name, [d.name for d in kernel.dtypes], kernel.source) is None:
        if op in MATMUL_HEADS or op == OpKind.CONV2D:
            return f"its kernel (source {kernel.source!r}) runs whole"
        return (f"{op.short_name}({kernel.dtypes[0].short_name}) checks its data before writing; "
                f"it runs whole so that an error writes nothing")
    return None


def epilogue_head(step: _Step) -> Tuple[Optional[str], str]:
    """("matmul" or "conv2d", "") when `step` may head a group whose members are its epilogue,
    else (None, why not).  Its tiles: MATMUL cuts the columns of C (A is read whole on that axis);
    CONV2D cuts the batch (its weight and bias are read whole)."""
    op = step.kernel.op
    if not isinstance(op, OpKind) or (op not in MATMUL_HEADS and op != OpKind.CONV2D) or len(step.outputs) != 1:
        return None, ""
    if op in MATMUL_HEADS and len(step.inputs) != 2:
        return None, "its row count is read at run time"
    why = _builtin_and_split(step, op)
    if why is not None:
        return None, why
    if op == OpKind.CONV2D:
        return "conv2d", ""
    if op == OpKind.MATMUL_PREPACKED and MATMUL_TILE_COLUMNS % _packed_nr(step.kernel.dtypes[0]):
        return None, (f"its packed B is cut at multiples of {_packed_nr(step.kernel.dtypes[0])} columns only, "
                      f"not of MATMUL_TILE_COLUMNS = {MATMUL_TILE_COLUMNS}")
    if isinstance(step.params, _dispatch.OpParams) and step.params.kind == "matmul":
        fields = step.params.fields()
        c = step.output.shape
        a, b = step.inputs[0].shape, step.inputs[1].shape
        if (fields["m_compute"].kind != fields["m_compute"].ALL_KIND or
                (fields["m"], fields["n"], fields["k"]) != (c[-2], c[-1], a[-1]) or b[-2] != a[-1] or
                tuple(fields["batch"]) != tuple(c[:-2])):
            return None, "its params name other extents than its operands, so a column tile cannot follow them"
    return "matmul", ""


def _packed_nr(dtype: DType) -> int:
    """The NR of the GEMM engine that packs B of `dtype` (spec.GEMM_BLOCKING): a packed B's views
    start at multiples of it."""
    return spec.gemm_blocking(dtype.name)[3]


@dataclass
class _Group:
    """Elementwise steps of one output shape run tile by tile; values used only inside the group
    live in a per-thread tile buffer."""
    shape: tuple
    members: List[_Step] = field(default_factory=list)
    reads: List = field(default_factory=list)        # values from outside the group
    writes: List = field(default_factory=list)       # member outputs used outside it
    tile_values: Dict[int, int] = field(default_factory=dict)   # buffer id -> byte offset in the tile buffer
    head: Optional[_Step] = None                     # the MATMUL or CONV2D whose epilogue the others are
    tile_axis: int = -1
    tile_outer: int = -1                             # axes before it take one index per tile (-1: tile_axis)
    tile_len: int = 0
    tile_elements: int = 0
    n_tiles: int = 1
    tile_bytes: int = ARENA_ALIGNMENT
    saved_bytes: int = 0                             # intermediates' bytes kept out of the arena
    # its vector program (vector_program): (dtype, row_len, slots (kind, Value), code), or None
    # with the reason in vector_note
    vector: Optional[tuple] = None
    vector_note: str = ""

    @property
    def node_id(self) -> int:
        return self.members[-1].node_id

    @property
    def name(self) -> str:
        return "group(" + ", ".join(m.name for m in self.members) + ")"

    @property
    def serial(self) -> bool:
        """The tiles run in order on the calling thread: each is a whole GEMM or convolution
        block that splits over the threads itself."""
        return self.head is not None

    def tile_shape(self) -> tuple:
        if self.tile_axis < 0:
            return self.shape
        outer = self.tile_axis if self.tile_outer < 0 else self.tile_outer
        return ((1,) * outer + self.shape[outer:self.tile_axis] + (self.tile_len,) +
                self.shape[self.tile_axis + 1:])

    def tile_axes(self, step: _Step) -> List[int]:
        """Per operand of `step` (inputs then outputs), the mask of group axes it follows: all,
        except the head's operands whose axes mean something else there (MATMUL's A on the
        column axis, where it has k; CONV2D's weight and bias everywhere, its input past the batch)."""
        everything = (1 << len(self.shape)) - 1
        masks = [everything] * (len(step.inputs) + len(step.outputs))
        if step is self.head and step.kernel.op in MATMUL_HEADS:
            masks[0] = everything & ~(1 << (len(self.shape) - 1))
        elif step is self.head:
            masks[0] = 1
            for i in range(1, len(step.inputs)):
                masks[i] = 0
        return masks


def _cuts_rows(head: _Step) -> bool:
    """Whether `head`'s epilogue tiles cut last-axis rows: a MATMUL wider than one column tile."""
    return head.kernel.op in MATMUL_HEADS and head.output.shape[-1] > MATMUL_TILE_COLUMNS


def _tiling(shape: Sequence[int], bytes_per_element: int, rows: bool = False) -> Tuple[int, int, int]:
    """(tile_axis, tile_len, elements per tile): the outermost axis k whose inner axes fit the
    budget is cut into tile_len-long pieces; (-1, 0, all) when the whole shape fits one tile.
    `rows`: every member calls its row function directly (the L1 budget)."""
    total = 1
    for extent in shape:
        total *= extent
    if rows:
        budget = ROW_TILE_BUDGET_BYTES // max(bytes_per_element, 1)
        budget = max(ROW_TILE_MIN_ELEMENTS, min(ROW_TILE_MAX_ELEMENTS, budget))
    else:
        budget = TILE_BUDGET_BYTES // max(bytes_per_element, 1)
        budget = max(TILE_MIN_ELEMENTS, min(TILE_MAX_ELEMENTS, budget))
    if total <= budget:
        return -1, 0, total
    inner = 1
    for k in reversed(range(len(shape))):
        if inner * shape[k] <= budget:
            inner *= shape[k]
            continue
        tile_len = max(1, budget // inner)
        return k, tile_len, tile_len * inner
    raise AssertionError("a shape larger than the budget has an axis that does not fit")


def order_constraints(steps: List[_Step]) -> List[Set[int]]:
    """Per step, the earlier steps it must follow: the producers of the values it reads, and for a
    state (Graph.state, written in place) the order the nodes were built in: a read follows the last
    write built before it, a write follows every earlier read and write of that state."""
    producer = {o.buffer.id: i for i, s in enumerate(steps) for o in s.outputs if o.buffer.kind != "state"}
    last_write: Dict[int, int] = {}
    reads_since: Dict[int, List[int]] = {}
    before: List[Set[int]] = []
    for i, step in enumerate(steps):
        deps: Set[int] = set()
        for v in step.inputs:
            b = v.buffer.id
            if v.buffer.kind == "state":
                if b in last_write:
                    deps.add(last_write[b])
                reads_since.setdefault(b, []).append(i)
            elif b in producer:
                deps.add(producer[b])
        for o in step.outputs:
            if o.buffer.kind == "state":
                b = o.buffer.id
                if b in last_write:
                    deps.add(last_write[b])
                deps.update(reads_since.pop(b, []))
                last_write[b] = i
        deps.discard(i)
        before.append(deps)
    return before


def group_steps(steps: List[_Step], output_values: List[Value]) -> List[Any]:
    """Steps (in order) -> steps and _Groups, in an order that keeps every dependency; each step
    left alone gets the reason in its `alone`.

    A groupable step joins the groups it reads when their shape is its output shape and it reads
    their values whole (the same element index in the tile), merging them if it reads several;
    it starts a group otherwise.  A group's value may also be read by steps outside it (they then
    run after the group), so a step may not join a group it depends on through such a step: that
    would be a cycle.  `needs` holds, per group, the groups its members depend on through steps
    outside it, and `after`, per step outside every group, the groups it depends on; a join is
    refused for every group in the transitive closure of what the joined group would need."""
    producer = {o.buffer.id: i for i, s in enumerate(steps) for o in s.outputs}
    before = order_constraints(steps)
    parent: Dict[int, int] = {}                  # union-find over group ids (a group: its first step)
    group_of: Dict[int, int] = {}                # step index -> group id (find() gives the group)
    members: Dict[int, List[int]] = {}
    needs: Dict[int, set] = {}
    after: Dict[int, set] = {}
    reasons: Dict[int, str] = {}
    head_of: Dict[int, int] = {}                 # group id -> its MATMUL or CONV2D head's step index
    with_rows: Set[int] = set()                  # group ids with a row op among their members

    def find(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    def direct_needs(i: int, joined: Set[int]) -> Set[int]:
        """The groups step i depends on (order_constraints) from outside the `joined` groups."""
        found = set()
        for p in before[i]:
            if p in group_of:
                if find(group_of[p]) not in joined:
                    found.add(find(group_of[p]))
            else:
                found.update(after[p])
        return found

    def closure(groups: Iterable[int]) -> Set[int]:
        seen, stack = set(), [find(g) for g in groups]
        while stack:
            g = stack.pop()
            if g not in seen:
                seen.add(g)
                stack.extend(find(h) for h in needs[g])
        return seen

    for i, step in enumerate(steps):
        why = groupable(step)
        head, why_not_head = epilogue_head(step)
        if why is not None and head is None:
            reasons[i] = why_not_head or why
            after[i] = closure(direct_needs(i, set()))
            continue
        reads: Dict[int, List] = {}
        for v in step.inputs:
            p = producer.get(v.buffer.id)
            if p is not None and p in group_of and head is None:     # a head starts its own group
                reads.setdefault(find(group_of[p]), []).append(v)
        candidates = []
        is_row_op = step.kernel.op in ROW_OPS
        for g, values in reads.items():
            shape = steps[members[g][0]].output.shape
            if shape != step.output.shape:
                reasons[i] = f"its output shape {step.output.shape} differs from its input's group's {shape}"
            elif not all(v.is_whole_buffer for v in values):
                reasons[i] = "it reads a group's value through a view"
            else:
                candidates.append(g)
        plain = [g for g in candidates if g not in head_of]
        headed = []
        for g in candidates:
            if g not in head_of:
                continue
            if is_row_op and _cuts_rows(steps[head_of[g]]):
                reasons[i] = "its rows would be cut by the column tiles of a MATMUL's epilogue"
            else:
                headed.append(g)
        if headed and len(candidates) > 1:
            # an epilogue group takes no other group in: their values could be its head's inputs,
            # which its tiles read whole on some axes
            reasons[i] = "it reads a MATMUL's or CONV2D's epilogue and another group; it joins one epilogue"
        # the epilogues it could join, one at a time, then the plain groups it reads
        for join in [[g] for g in headed] + [plain]:
            while True:
                joined = set(join)
                wanted = direct_needs(i, joined)
                for g in join:
                    wanted |= needs[g]
                cycle = joined & closure(wanted)
                if not cycle:
                    break
                reasons[i] = "joining would need a step that reads the group"
                join = [g for g in join if g not in cycle]
            if join:
                break
        if join:
            group = join[0]
            for other in join[1:]:
                parent[other] = group
                members[group].extend(members.pop(other))
                needs[group] |= needs.pop(other)
                if other in with_rows:
                    with_rows.add(group)
        else:
            group = i
            parent[group], members[group], needs[group] = group, [], set()
            if head is not None:
                head_of[group] = i
        if is_row_op:
            with_rows.add(group)
        needs[group] |= {find(g) for g in wanted}
        members[group].append(i)
        group_of[i] = group

    # items: a group of two or more steps ("group", group id), or one step ("step", step index);
    # emitted in dependency order, each at its last step's place when it is free to run there
    # (Kahn's algorithm, least place first)
    item_of: Dict[int, Tuple[str, int]] = {}
    for i in range(len(steps)):
        if i in group_of and len(members[find(group_of[i])]) > 1:
            item_of[i] = ("group", find(group_of[i]))
        else:
            item_of[i] = ("step", i)
            if i in group_of and i not in reasons:
                reasons[i] = ("no elementwise step reads its whole output" if i in head_of
                              else "no elementwise neighbour of its shape to group with")
    place: Dict[Tuple[str, int], int] = {}
    for i, item in item_of.items():
        place[item] = max(place.get(item, i), i)
    waiting: Dict[Tuple[str, int], Set[Tuple[str, int]]] = {item: set() for item in place}
    users: Dict[Tuple[str, int], Set[Tuple[str, int]]] = {item: set() for item in place}
    for i in range(len(steps)):
        for p in before[i]:
            if item_of[p] != item_of[i]:
                waiting[item_of[i]].add(item_of[p])
                users[item_of[p]].add(item_of[i])
    ready = [(place[item], item) for item, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    output_buffers = {v.buffer.id for v in output_values}
    ordered: List[Union[_Step, _Group]] = []
    while ready:
        _, item = heapq.heappop(ready)
        kind, key = item
        if kind == "step":
            ordered.append(steps[key])
        else:
            indices = sorted(members[key])
            tiled_group = _Group(steps[indices[-1]].output.shape, [steps[m] for m in indices],
                                 head=steps[head_of[key]] if key in head_of else None)
            _lay_out(tiled_group, set(indices), steps, output_buffers, key in with_rows)
            ordered.append(tiled_group)
        for user in users[item]:
            waiting[user].discard(item)
            if not waiting[user]:
                heapq.heappush(ready, (place[user], user))
    if len(ordered) != len(place):
        raise AssertionError("elementwise grouping made a cycle")
    for i, reason in reasons.items():
        steps[i].alone = reason
    return ordered


def _lay_out(group: "_Group", member_indices: Set[int], steps: List[Any], output_buffers: Set[int],
            whole_rows: bool) -> None:
    """Which member outputs stay in tiles, the tile size and each tile value's place; with
    `whole_rows` (a row op is a member) every tile holds whole last-axis rows."""
    made = {m.output.buffer.id: k for k, m in enumerate(group.members)}
    used_outside = set(output_buffers)
    for j, step in enumerate(steps):
        if j not in member_indices:
            used_outside.update(v.buffer.id for v in step.inputs)
    last_use = {}
    seen_reads: Dict[_ViewKey, Value] = {}
    for k, m in enumerate(group.members):
        for v in m.inputs:
            if v.buffer.id in made:
                last_use[v.buffer.id] = k
            else:
                seen_reads.setdefault((v.buffer.id, v.shape, v.strides, v.offset), v)
    tile_ids = [b for b in made if b not in used_outside]
    group.reads = list(seen_reads.values())
    group.writes = [m.output for m in group.members if m.output.buffer.id not in tile_ids]
    per_element = sum(v.dtype.itemsize for v in group.reads + group.writes)
    per_element += sum(group.members[made[b]].output.dtype.itemsize for b in tile_ids)
    shape, head = group.shape, group.head
    if head is not None and head.kernel.op in MATMUL_HEADS:
        group.tile_outer, group.tile_axis = 0, len(shape) - 1      # column tiles
        group.tile_len = min(shape[-1], MATMUL_TILE_COLUMNS)
        if group.tile_len == shape[-1]:
            group.tile_axis, group.tile_len = -1, 0
    elif head is not None:                                         # CONV2D: batch tiles
        image = 1
        for extent in shape[1:]:
            image *= extent
        group.tile_axis, group.tile_len = 0, max(1, min(shape[0], TILE_BUDGET_BYTES // max(per_element * image, 1)))
        if group.tile_len == shape[0]:
            group.tile_axis, group.tile_len = -1, 0
    elif all(m.kernel.kernel_address in tile_rows() for m in group.members):
        # the tile values live at once, not all of them: the L1 budget counts what is touched
        live = max((sum(group.members[made[b]].output.dtype.itemsize for b in tile_ids
                        if made[b] <= k <= last_use.get(b, made[b]))
                    for k in range(len(group.members))), default=0)
        live_per_element = per_element - sum(group.members[made[b]].output.dtype.itemsize for b in tile_ids) + live
        group.tile_axis, group.tile_len, _ = _tiling(shape, live_per_element, rows=True)
    else:
        group.tile_axis, group.tile_len, _ = _tiling(shape, per_element)
        if whole_rows and group.tile_axis == len(shape) - 1:      # a row longer than the budget
            group.tile_axis, group.tile_len = (len(shape) - 2, 1) if len(shape) > 1 else (-1, 0)
    group.tile_elements = 1
    for extent in group.tile_shape():
        group.tile_elements *= extent
    group.n_tiles = 1
    if group.tile_axis >= 0:
        group.n_tiles = -(-shape[group.tile_axis] // group.tile_len)
        for extent in shape[:group.tile_axis if group.tile_outer < 0 else group.tile_outer]:
            group.n_tiles *= extent
    sizes, intervals = {}, {}
    for b in tile_ids:
        item = group.members[made[b]].output.dtype.itemsize
        sizes[b] = group.tile_elements * item
        intervals[b] = (made[b], last_use.get(b, made[b]))
        group.saved_bytes += group.members[made[b]].output.buffer.nbytes
    group.tile_values, packed = pack_by_lifetime(sizes, intervals)
    group.tile_bytes = max(packed, ARENA_ALIGNMENT)
    group.vector, group.vector_note = vector_program(group)


# ---- vector programs -----------------------------------------------------------------------------
# The ops a vector program computes inline (fuel_kernel/cpu/vector_program.h: the kernels' scalar
# definitions on vectors); any other elementwise member calls its kernel's row function there.
VECTOR_INLINE = {OpKind[name]: code for name, code in VECTOR_OPCODES.items()
                 if name not in ("ROW", "CHAIN", "LOAD", "STORE")}
# A program that reads a last-axis row runs each row as its own segment, its last block partial
# (computed whole): rows shorter than this would spend most of each block on nothing.
VECTOR_MIN_ROW = 64


def _vector_slot_kind(value: Value, shape: tuple) -> Optional[str]:
    """How a vector program addresses `value`, read or written at every element of `shape`:
    "full" (the whole shape, C-contiguous), "row" (a contiguous last-axis row, broadcast over the
    other axes) or "scalar" (one element broadcast), all from offset 0; None for anything else
    (strided, offset, partly broadcast views run the tile path)."""
    pad = len(shape) - len(value.shape)
    if value.offset != 0 or pad < 0:
        return None
    seen = []                                  # element strides over the group's axes of extent > 1
    contiguous = _contiguous_strides(shape)
    for d, extent in enumerate(shape):
        a = d - pad
        if extent == 1:
            continue
        if a < 0 or value.shape[a] == 1:
            seen.append((d, 0))
        elif value.shape[a] == extent:
            seen.append((d, value.strides[a]))
        else:
            return None
    if all(s == 0 for _, s in seen):
        return "scalar"
    if all(s == contiguous[d] for d, s in seen):
        return "full"
    last = len(shape) - 1
    if all(s == (1 if d == last else 0) for d, s in seen):
        return "row"
    return None


def _vector_chains(code: list, n_slots: int) -> list:
    """The program's instructions from one per member, (opcode, member index, args): each run of
    inline members becomes one CHAIN instruction whose steps keep the value each computes in the
    accumulator (vector_program.h: FK_VM_STRIP vectors in registers), so a member reading the
    value the member before it computed takes it from there.  A value is stored (STORE) only where
    it is an output slot or some member reads it from its block (a member after the next one, or a
    ROW member); a member that does not read the accumulator's value starts from a LOAD of its first
    operand.  A binary member's operands keep their order (VECTOR_FORMS), so every step gives the
    kernel's bits: SUB, DIV, MAXIMUM and MINIMUM are not symmetric, nor in their NaNs ADD and MUL."""
    def reads(instruction):
        op, _, args = instruction
        return args[:-1]

    def stored(i):
        """Whether instruction i's destination must reach its block."""
        d = code[i][2][-1]
        if d < n_slots:
            return True
        for j in range(i + 1, len(code)):
            if d in reads(code[j]) and (j != i + 1 or code[j][0] == VECTOR_OPCODES["ROW"]):
                return True
            if code[j][2][-1] == d:
                return False
        return False

    out: list = []
    steps: list = []
    held = None                                # the source whose value the accumulator holds
    first = 0
    for i, (op, member, args) in enumerate(code):
        if op == VECTOR_OPCODES["ROW"]:
            if steps:
                out.append((VECTOR_OPCODES["CHAIN"], first, tuple(steps)))
                steps, held = [], None
            out.append((op, member, args))
            continue
        if not steps:
            first = member
        a, b = args[0], args[-2]               # b is a for a unary op
        if len(args) == 3 and held is not None and b == held and a != held:
            steps.append((op, VECTOR_FORMS["src, acc"], a))
        else:
            if a != held:
                steps.append((VECTOR_OPCODES["LOAD"], 0, a))
            if len(args) == 2:
                steps.append((op, 0, 0))
            elif b == a:
                steps.append((op, VECTOR_FORMS["acc, acc"], 0))
            else:
                steps.append((op, VECTOR_FORMS["acc, src"], b))
        held = args[-1]
        if stored(i):
            steps.append((VECTOR_OPCODES["STORE"], 0, held))
    if steps:
        out.append((VECTOR_OPCODES["CHAIN"], first, tuple(steps)))
    return out


def vector_program(group: "_Group") -> Tuple[Optional[tuple], str]:
    """The group's vector program, run on its tiles after the first instead of its members, or
    None and why not.  It qualifies when it is elementwise and tiled (no MATMUL or CONV2D head, no
    row op, several tiles), every member's operands are one dtype, F32 or F64, every value it
    reads or writes is addressed by _vector_slot_kind, and every member has an inline form
    (VECTOR_INLINE) or a row function (tile_rows()).  Program: (dtype, row_len, slots, code):
    slots (kind, Value) for the values read from outside and the written outputs; code
    (opcode, member index, args), args the member's operands (inputs, then its output) as
    slot indices or registers (len(slots) + r) holding the tile values, reused once dead; each run
    of inline members is then one CHAIN instruction (_vector_chains), a ROW member its own."""
    if group.head is not None:
        return None, f"it is the epilogue of {group.head.name}"
    if any(m.kernel.op in ROW_OPS for m in group.members):
        return None, "a member computes whole rows"
    if group.tile_axis < 0 or group.n_tiles < 2:
        return None, "it runs as one tile"
    dtypes = {d for m in group.members for d in m.kernel.dtypes}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (DType.F32, DType.F64):
        return None, "its operands are not all F32 or all F64"
    if any(v.buffer.kind == "state" for v in group.reads + group.writes):
        return None, "it reads or writes a state"
    rows = tile_rows()
    made = {m.output.buffer.id: k for k, m in enumerate(group.members)}
    last_use: Dict[int, int] = {}
    for k, m in enumerate(group.members):
        for v in m.inputs:
            if v.buffer.id in made:
                last_use[v.buffer.id] = k
    slots: List[Tuple[str, Value]] = []
    slot_of: Dict[Any, int] = {}
    for v in group.reads:
        kind = _vector_slot_kind(v, group.shape)
        if kind is None:
            return None, f"it reads a strided, offset or partly broadcast view of shape {list(v.shape)}"
        slot_of[(v.buffer.id, v.shape, v.strides, v.offset)] = len(slots)
        slots.append((kind, v))
    for v in group.writes:
        if _vector_slot_kind(v, group.shape) != "full":
            return None, "it writes a view"
        slot_of[v.buffer.id] = len(slots)
        slots.append(("out", v))
    if any(kind == "row" for kind, _ in slots) and group.shape[-1] < VECTOR_MIN_ROW:
        return None, f"it reads rows of {group.shape[-1]} elements (fewer than {VECTOR_MIN_ROW})"
    if len(slots) > VECTOR_LIMITS["slots"]:
        return None, f"it reads and writes {len(slots)} arrays (at most {VECTOR_LIMITS['slots']})"
    if len(group.members) > VECTOR_LIMITS["code"]:
        return None, f"it has more than {VECTOR_LIMITS['code']} members"
    register_of: Dict[int, int] = {}
    free: List[int] = []
    n_registers = 0
    code: List[tuple] = []
    for k, m in enumerate(group.members):
        op = m.kernel.op
        if not isinstance(op, OpKind):         # members are built-in ops (groupable)
            return None, "a member is a runtime fused op"
        inline = op in VECTOR_INLINE and m.params is None
        if not inline and m.kernel.kernel_address not in rows:
            return None, f"{op.short_name} has no inline form and no row function"
        args = []
        for v in m.inputs:
            if v.buffer.id not in made:
                args.append(slot_of[(v.buffer.id, v.shape, v.strides, v.offset)])
            elif _vector_slot_kind(v, group.shape) != "full":
                return None, "a member reads a view of another's output"
            elif v.buffer.id in register_of:
                args.append(len(slots) + register_of[v.buffer.id])
            else:
                args.append(slot_of[v.buffer.id])
        dying = sorted({register_of[v.buffer.id] for v in m.inputs
                        if v.buffer.id in register_of and last_use.get(v.buffer.id) == k})
        if inline:                             # an inline op may write over a register it reads
            free.extend(dying)
        out = m.output.buffer.id
        if out in slot_of:
            args.append(slot_of[out])
        else:
            if not free:
                free.append(n_registers)
                n_registers += 1
            register_of[out] = free.pop()
            args.append(len(slots) + register_of[out])
            if last_use.get(out, k) == k:      # never read: its register is free again
                free.append(register_of[out])
        if not inline:
            free.extend(dying)
        code.append((VECTOR_OPCODES[op.name] if inline else VECTOR_OPCODES["ROW"], k, tuple(args)))
    code = _vector_chains(code, len(slots))
    if sum(len(c[2]) for c in code if c[0] == VECTOR_OPCODES["CHAIN"]) > VECTOR_LIMITS["steps"]:
        return None, f"it needs more than {VECTOR_LIMITS['steps']} chain steps"
    if n_registers > VECTOR_LIMITS["registers"]:
        return None, f"it needs {n_registers} registers (at most {VECTOR_LIMITS['registers']})"
    return (int(next(iter(dtypes))), group.shape[-1], slots, code), ""


# ---- pre-packed constant weights ---------------------------------------------------------------------
def _prepack_refusal(node: Node, kernel: Any) -> Optional[str]:
    """Why MATMUL `node` (its chosen kernel `kernel`) does not get its B packed at compile time,
    or None when it does: B a 2-d float constant, A and C of B's dtype, all rows computed, no
    params other than the operands' own extents."""
    if len(node.inputs) != 2:
        return "its row count is read at run time"
    a, b = node.inputs
    c = node.output
    if b.buffer.kind != "const":
        return ""                                        # not a constant weight: nothing to say
    if len(b.shape) != 2:
        return f"B is {len(b.shape)}-d (batched B is not pre-packed)"
    if len(set(node.dtypes)) != 1 or node.dtypes[0].name not in spec.FLOAT:
        return f"dtypes {[d.short_name for d in node.dtypes]} are not one float dtype (F16, BF16, F32, F64)"
    if isinstance(node.params, _dispatch.OpParams) and node.params.kind == "matmul":
        fields = node.params.fields()
        if (fields["m_compute"].kind != fields["m_compute"].ALL_KIND or
                (fields["m"], fields["n"], fields["k"]) != (c.shape[-2], c.shape[-1], a.shape[-1]) or
                tuple(fields["batch"]) != tuple(c.shape[:-2]) or fields["scale_a"] != 1.0 or fields["scale_b"] != 1.0):
            return "its params name other extents, a row count or scales"
    if tuple(a.shape[:-2]) != tuple(c.shape[:-2]):
        return "A's batch dims broadcast"
    if kernel.source not in ("native", "blas"):
        return f"its kernel (source {kernel.source!r}) is neither the native engine nor BLAS"
    return None


def _constant_view(value: Value) -> np.ndarray:
    """A constant Value's elements as a C-contiguous array (a copy of its view of the buffer)."""
    array = value.buffer.array
    assert array is not None, "a constant buffer holds its array"
    flat = array.reshape(-1)
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(flat[value.offset:], shape=value.shape,
                                           strides=tuple(s * item for s in value.strides), writeable=False)
    return np.ascontiguousarray(view)


def _aligned_bytes(nbytes: int) -> np.ndarray:
    """A zeroed U8 array of nbytes starting on a 64-byte boundary."""
    array = _aligned_empty((nbytes,), np.dtype(np.uint8))
    array.fill(0)
    return array


def _time_prepacked(prepacked: Any, chosen: Any, a: Value, b: np.ndarray, packed: np.ndarray,
                    c: Value) -> Tuple[float, float]:
    """(ns of MATMUL_PREPACKED on `packed`, ns of the `chosen` MATMUL kernel on `b`) on random A of
    `a`'s shape, cached with the route picker's measurements (route.measured_routes.json), so every
    compile of these shapes decides alike.  The pre-packed kernel runs as a one-step plan: its
    packed operand's storage is the whole buffer, which only a plan or a C caller passes."""
    import json
    from .builders import Graph
    from ..threads import get_num_threads
    key = json.dumps(["prepack", a.dtype.short_name, int(chosen.backend), list(a.shape), list(b.shape),
                      str(chosen.identity), str(prepacked.identity), get_num_threads()])
    cache = route._load_measure_cache()
    timings: Any = cache.get(key)
    if not route._valid_timings(timings, {"prepacked", "chosen"}):
        x = np.random.default_rng(0).standard_normal(a.shape).astype(a.dtype.numpy)
        g = Graph()
        plan = g.compile(g.matmul_prepacked(g.input(a.shape, a.dtype), g.constant(packed), b.shape[1]),
                         fuse=False, prepack=False)
        c_out = np.empty(c.shape, dtype=c.dtype.numpy)
        timings = route._measure_interleaved({"prepacked": lambda: plan.run([x]),
                                              "chosen": lambda: chosen(x, b, out=c_out)})
        cache[key] = timings
        route._store_measure_cache(cache)
    return float(timings["prepacked"]), float(timings["chosen"])


class _Planner:
    def __init__(self, graph: Any, outputs: List[Value], fuse: bool, measure: bool,
                 max_ulp: Optional[float], prepack: bool = True) -> None:
        self.graph = graph
        self.outputs = outputs
        self.fuse = fuse
        self.measure = measure
        self.max_ulp = max_ulp
        self.prepack = prepack
        self.table = _dispatch.bindings()
        self.explain_lines: List[str] = []
        self.prepacked: List[Buffer] = []        # plan-owned constants: the packed B buffers

    def live_nodes(self) -> List[Node]:
        """The nodes the outputs need, and every write into a state (a side effect) with what it needs."""
        needed, stack = set(), [v.producer for v in self.outputs if v.producer is not None]
        stack += [n for n in self.graph.nodes if any(o.buffer.kind == "state" for o in n.outputs)]
        while stack:
            node = stack.pop()
            if node.id in needed:
                continue
            needed.add(node.id)
            stack.extend(v.producer for v in node.inputs if v.producer is not None)
        return [n for n in self.graph.nodes if n.id in needed]

    def choose(self, key: Any, inputs: Sequence[Value], outputs: Sequence[Value], params: Any,
               dtypes: Sequence[Any], backend: Any, label: str) -> Any:
        alternatives = self.table.alternatives(key, dtypes, backend)
        operands = [v.shape for v in inputs] + [v.shape for v in outputs]
        broadcast = any(v.has_broadcast or v.shape != outputs[0].shape for v in inputs)
        return route.pick(alternatives, operands, params, broadcast_inputs=broadcast,
                          max_ulp=self.max_ulp, measure=self.measure, describe=label)

    # -- fusion
    def fuse_nodes(self, nodes: List[Node]) -> List[Node]:
        consumers: Dict[int, int] = {}
        for node in nodes:
            for v in node.inputs:
                if v.producer is not None:
                    consumers[v.producer.id] = consumers.get(v.producer.id, 0) + 1
        outputs_of_graph = {v.producer.id for v in self.outputs if v.producer is not None}
        replaced: Dict[int, Node] = {}       # root node id -> fused node
        absorbed: Set[int] = set()
        with _fused_lock:
            fused_ops = list(_fused_by_id.values())
        for node in reversed(nodes):
            if node.id in absorbed or node.id in replaced:
                continue
            for fused in fused_ops:
                match = self._match(fused, node, consumers, outputs_of_graph, absorbed)
                if match is None:
                    continue
                bound, covered, interior = match
                dtypes = tuple(v.dtype for v in bound) + (node.dtypes[-1],)
                key = BindingKey.runtime_fused(fused.id)
                if not self.table.supports(key, dtypes, node.backend):
                    continue
                if fused.interiors.get((dtypes, int(node.backend))) != interior:
                    continue                     # same structure, other intermediate dtypes
                fused_choice = self.choose(key, bound, node.outputs, None, dtypes, node.backend, fused.name)
                fused_ns = min(v.estimate_ns for v in fused_choice.verdicts if v.estimate_ns is not None)
                unfused_ns = 0.0
                for n in covered:
                    c = self.choose(n.key, n.inputs, n.outputs, n.params, n.dtypes, n.backend, n.label)
                    unfused_ns += min(v.estimate_ns for v in c.verdicts if v.estimate_ns is not None)
                verdict = "fused" if fused_ns < unfused_ns else "kept unfused"
                self.explain_lines.append(
                    f"fusion {fused.name} at node {node.id}: {fused_ns:.0f} ns fused vs {unfused_ns:.0f} ns "
                    f"for nodes {[n.id for n in covered]} -> {verdict}")
                if fused_ns < unfused_ns:
                    fused_node = Node(node.id, key, bound, None, dtypes, node.backend, [node.output],
                                      name=fused.name)
                    replaced[node.id] = fused_node
                    absorbed.update(n.id for n in covered if n.id != node.id)
                    break
        return [replaced.get(n.id, n) for n in nodes if n.id not in absorbed]

    def _match(self, fused: Any, root: Node, consumers: Dict[int, int], graph_outputs: Set[int],
               absorbed: Set[int]) -> Optional[Tuple[List[Value], List[Node], tuple]]:
        bound: Dict[int, Value] = {}
        covered = []
        nodes_at: Dict[int, Node] = {}

        def match(pattern_index: int, node: Node) -> bool:
            op, params_key, refs = fused.pattern[pattern_index]
            if node.key != op or _params_key(node.params) != params_key or len(refs) != len(node.inputs) \
                    or len(node.outputs) != 1:
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
            nodes_at[pattern_index] = node
            return True

        if not match(len(fused.pattern) - 1, root) or len(bound) != fused.n_inputs:
            return None
        interior = tuple(nodes_at[j].dtypes[-1] for j in range(len(fused.pattern)))
        return [bound[i] for i in range(fused.n_inputs)], covered, interior

    # -- build
    def build(self, single: bool) -> Plan:
        steps, output_values = self.steps()
        if self.fuse:
            steps = group_steps(steps, output_values)
        return Plan(self.graph, steps, output_values, self.table, self.explain_lines, single, self.fuse,
                    self.prepacked)

    def steps(self) -> Tuple[List[_Step], List[Value]]:
        """One step per kernel call, in order, and the values the caller gets."""
        nodes = self.live_nodes()
        if self.fuse:
            nodes = self.fuse_nodes(nodes)
        steps: List[_Step] = []
        contiguize: Dict[_ViewKey, Value] = {}
        for node in nodes:
            choice = self.choose(node.key, node.inputs, node.outputs, node.params, node.dtypes,
                                 node.backend, node.label)
            kernel = choice.kernel
            if node.key == OpKind.MATMUL:
                packed_step = self._prepacked(node, choice)
                if packed_step is not None:
                    steps.append(packed_step)
                    continue
            inputs = []
            for position, value in enumerate(node.inputs):
                if KernelCaps.STRIDED_INPUT not in kernel.caps and not value.is_contiguous:
                    value = self._materialize(value, node.backend, steps, contiguize,
                                              reason=f"input {position} of node {node.id} ({node.label})")
                inputs.append(value)
            steps.append(_Step(kernel, node.id, node.name or node.label, inputs, node.outputs,
                               node.params, choice.verdicts))
        # outputs the caller gets must be fresh arrays: views, inputs and constants are copied
        output_values: List[Value] = []
        for value in self.outputs:
            producer_step = next((s for s in steps if any(o.buffer is value.buffer for o in s.outputs)), None)
            if value.buffer.kind == "node" and value.is_whole_buffer and producer_step is not None \
                    and value.buffer not in [v.buffer for v in output_values]:
                output_values.append(value)
            else:
                output_values.append(self._materialize(value, self.graph.target_backend, steps, {},
                                                       reason="graph output", force=True))
        return steps, output_values

    def _prepacked(self, node: Node, choice: Any) -> Optional[_Step]:
        """A MATMUL_PREPACKED step for MATMUL `node` whose B is a 2-d float constant, with B packed
        now by MATMUL_PACK_B into a plan-owned buffer; None (and a note why) when it does not apply,
        when prepack is off, when the route picker chose another kernel than the native engine and
        estimates it faster than the pre-packed one too (without compile(measure=True)), or when that
        measurement does not find the pre-packed engine faster than the chosen kernel (native or
        not).  The pre-packed engine reads B once, so where both engines that pack B per call are
        memory-bound its estimate is the lower."""
        why = _prepack_refusal(node, choice.kernel)
        label = f"prepack node {node.id} ({node.name or node.label})"
        if why == "":
            return None
        if why is not None:
            self.explain_lines.append(f"{label}: not pre-packed: {why}")
            return None
        if not self.prepack:
            self.explain_lines.append(f"{label}: not pre-packed: compile(prepack=False)")
            return None
        a, b = node.inputs
        dtype = node.dtypes[0]
        k, n = b.shape
        key_dtypes = (dtype, DType.U8, dtype)
        if not (self.table.supports(OpKind.MATMUL_PREPACKED, key_dtypes, node.backend) and
                self.table.supports(OpKind.MATMUL_PACK_B, (dtype, DType.U8), node.backend)):
            self.explain_lines.append(f"{label}: not pre-packed: no MATMUL_PREPACKED/MATMUL_PACK_B kernel "
                                      f"for {dtype.short_name}")
            return None
        nbytes = ops.matmul_packed_nbytes(dtype, k, n)
        buffer = Buffer(-1 - len(self.prepacked), "const", (nbytes,), DType.U8, None,
                        f"packed B of node {node.id}")
        view = Value(self.graph, buffer, (k, n), (0, 1), spec.MATMUL_PACKED_HEADER_BYTES, DType.U8)
        packed_choice = self.choose(OpKind.MATMUL_PREPACKED, [a, view], node.outputs, None, key_dtypes,
                                    node.backend, "MATMUL_PREPACKED")
        if KernelCaps.STRIDED_INPUT not in packed_choice.kernel.caps:     # its packed view is not contiguous
            self.explain_lines.append(f"{label}: not pre-packed: the MATMUL_PREPACKED kernel "
                                      f"({packed_choice.kernel.source}) takes no strided input")
            return None
        packed_ns = min(v.estimate_ns for v in packed_choice.verdicts if v.estimate_ns is not None)
        chosen_ns = min(v.estimate_ns for v in choice.verdicts if v.estimate_ns is not None)
        source = choice.kernel.source
        if source != "native" and not self.measure and packed_ns >= chosen_ns:
            # BLAS chosen and ahead of the pre-packed engine too (many rows, where its arithmetic
            # leads); the model hides most of BLAS's packing pass under its arithmetic, so it can
            # only err towards BLAS: a measurement tells
            self.explain_lines.append(f"{label}: not pre-packed: the route picker chose {source} "
                                      f"({chosen_ns:.0f} ns estimated against {packed_ns:.0f} ns pre-packed; "
                                      f"compile(measure=True) times the pre-packed native engine against it)")
            return None
        packer = self.table.lookup(OpKind.MATMUL_PACK_B, (dtype, DType.U8), node.backend)
        buffer.array = _aligned_bytes(nbytes)
        b_dense = _constant_view(b)
        packer(b_dense, out=buffer.array)
        buffer.array.flags.writeable = False
        how = f"{packed_ns:.0f} ns estimated pre-packed vs {chosen_ns:.0f} ns packing per run ({source})"
        if self.measure:
            # even against the native engine: reading the panels from memory inside the product can
            # cost what packing them did (2-core AVX2 EPYC, M = 128, K = 768, N = 3072: 8.0 ms
            # pre-packed against 7.3 ms packing per call; M = 32, K = N = 2048: 4.3-4.6 against 4.5-4.7)
            packed_ns, chosen_ns = _time_prepacked(packed_choice.kernel, choice.kernel, a, b_dense, buffer.array,
                                                   node.output)
            how = f"measured {packed_ns:.0f} ns pre-packed (native) vs {chosen_ns:.0f} ns for {source}"
            if packed_ns >= chosen_ns:
                self.explain_lines.append(f"{label}: not pre-packed: {how}")
                return None
        self.prepacked.append(buffer)
        self.explain_lines.append(f"{label}: B ({k}, {n}) {dtype.short_name} pre-packed once: {nbytes} bytes "
                                  f"owned by the plan; {how}")
        return _Step(packed_choice.kernel, node.id, node.name or node.label, [a, view], node.outputs, None,
                     packed_choice.verdicts)

    def _materialize(self, value: Value, backend: Any, steps: List[_Step], cache: Dict[_ViewKey, Value],
                     reason: str, force: bool = False) -> Value:
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
        steps.append(_Step(kernel, -1, f"contiguize for {reason}", [value], [out], None,
                           [route.Verdict(kernel.source, kernel.identity, None, f"inserted: {reason}")]))
        cache[key] = out
        return out

