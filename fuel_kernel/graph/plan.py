"""Plan: a compiled graph; its arena layout, its C program, run() and explain()."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._executor import VECTOR_OPCODES, VECTOR_SLOTS, PlanProgram, aligned_empty
from ..errors import AliasError, DTypeError, OperandCountError, OperandTypeError, ReadOnlyError, ShapeError
from ..types import OpKind
from .values import _contiguous_strides

if TYPE_CHECKING:
    from .._dispatch import BindingTable
    from .builders import Graph
    from .values import Buffer, Value

ARENA_ALIGNMENT = 64
VECTOR_ROW = VECTOR_OPCODES["ROW"]
VECTOR_CHAIN = VECTOR_OPCODES["CHAIN"]
TILE_BASE = -1              # a group member's operand in the group's tile buffer (PlanProgram.add_group)


def _pack_arena(steps: list[Any], output_buffers: set[int]) -> tuple[dict[Any, int], int, int]:
    """Lifetime intervals of the buffers `steps` write (their `writes`) that are not outputs, and
    of each group's tile buffer (key ("tile", step index), live at its step only), packed greedily
    by size (largest first) into the lowest offset that does not overlap a live neighbour:
    (offsets by buffer id or tile key, peak bytes, the largest live set in bytes)."""
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    sizes: dict[Any, int] = {}
    for index, step in enumerate(steps):
        for v in step.reads:
            last[v.buffer.id] = index
        for v in step.writes:
            b = v.buffer
            first.setdefault(b.id, index)
            last[b.id] = max(last.get(b.id, index), index)
            sizes[b.id] = b.nbytes
        if hasattr(step, "members"):
            first[("tile", index)] = last[("tile", index)] = index
            sizes[("tile", index)] = step.tile_bytes
    blocks = [key for key in first if key not in output_buffers]
    offsets, peak = pack_by_lifetime({k: sizes[k] for k in blocks}, {k: (first[k], last[k]) for k in blocks})
    live = [0] * max(len(steps), 1)
    for key in blocks:
        for i in range(first[key], last[key] + 1):
            live[i] += _aligned(sizes[key])
    return offsets, peak, max(live)


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array (shape a tuple, dtype a numpy.dtype) whose data starts
    on an ARENA_ALIGNMENT (64-byte) boundary.  NumPy's own allocations start 16 bytes into a line,
    so every full-width AVX-512 store into a plan's output split two cache lines (and the
    executor's non-temporal drains ran 16 bytes at a time); the arena and the outputs both come
    from here."""
    return aligned_empty(shape, dtype, ARENA_ALIGNMENT)


def _aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


def pack_by_lifetime(sizes: dict[Any, int], intervals: dict[Any, tuple[int, int]]) -> tuple[dict[Any, int], int]:
    """Offsets for blocks of `sizes` bytes (each rounded up to ARENA_ALIGNMENT) live over the
    inclusive step `intervals`: largest first, each at the lowest offset clear of every block
    live at the same time.  Returns (offsets, peak bytes)."""
    placed: list[tuple[int, int, int, int]] = []          # (offset, size, first, last)
    offsets: dict[Any, int] = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], intervals[k][0])):
        size = _aligned(sizes[key])
        lo, hi = intervals[key]
        offset = 0
        for o, s in sorted((o, s) for o, s, f, l in placed if not (l < lo or hi < f)):
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        placed.append((offset, size, lo, hi))
        offsets[key] = offset
    return offsets, max((o + s for o, s, _, _ in placed), default=0)


# ---- plans -------------------------------------------------------------------------------------------
class Plan:
    """A compiled graph.  run(inputs) -> outputs; explain() says which kernel each node got."""

    def __init__(self, graph: Graph, steps: list[Any], outputs: list[Value], table: BindingTable,
                 fusion_notes: list[str], single: bool, grouped: bool = False,
                 prepacked: Sequence[Buffer] = ()) -> None:
        self.graph = graph
        # constants the plan owns: each pre-packed MATMUL B (compile(prepack=True)), kept alive here
        self.prepacked_buffers: list[Buffer] = list(prepacked)
        self._steps = steps
        self._single = single
        self._table = table                       # keeps the snapshot of every chosen entry alive
        self._fusion_notes = fusion_notes
        self._grouped = grouped                   # elementwise grouping ran (compile(fuse=True))
        self.input_buffers: list[Buffer] = list(graph.inputs)
        self.output_values = outputs
        self._local = threading.local()
        self._assign_memory()
        self._emit()
        # what every run needs, worked out once: the state inputs' places, each output's layout
        self._state_places = [i for i, b in enumerate(self.input_buffers) if b.kind == "state"]
        self._output_layouts = [(tuple(v.shape), np.dtype(v.dtype.numpy)) for v in self.output_values]

    # -- memory
    def _assign_memory(self) -> None:
        """Arena offsets for the buffers the steps write that the caller does not get (a fused
        group's tile values are not among them) and for each group's tile buffer (so each
        thread's arena holds its own), and what the arena would be without groups."""
        output_buffers = {v.buffer.id for v in self.output_values}
        output_buffers |= {b.id for b in self.input_buffers if b.kind == "state"}    # the caller's arrays
        self.arena_offsets, self.peak_bytes, self.min_live_bytes = _pack_arena(self._steps, output_buffers)
        self.tile_buffer_bytes = max((g.tile_bytes for g in self.groups), default=0)
        flat = [m for s in self._steps for m in getattr(s, "members", [s])]
        self.unfused_peak_bytes = (self.peak_bytes if len(flat) == len(self._steps)
                                   else _pack_arena(flat, output_buffers)[1])

    # -- steps
    def _emit(self) -> None:
        from .planner import tile_rows       # the planner imports this module
        n_inputs = len(self.input_buffers)
        self._direct_rows: dict[int, tuple[bool, ...]] = {}    # group step index -> per member
        self._vector: dict[int, bool] = {}                     # group step index -> runs its vector program
        self._constants = [b for b in self.graph.buffers if b.kind == "const"] + self.prepacked_buffers
        base_of = {b.id: i for i, b in enumerate(self.input_buffers)}
        base_of.update({b.id: n_inputs + i for i, b in enumerate(self._constants)})
        self._arena_base = n_inputs + len(self._constants)
        self._output_base = self._arena_base + 1
        for i, v in enumerate(self.output_values):
            base_of[v.buffer.id] = self._output_base + i
        self._program = PlanProgram(self._table, self._output_base + len(self.output_values))

        def operand(value: Value) -> tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], int]:
            b = value.buffer
            if b.id in base_of:
                base, byte_offset, nbytes = base_of[b.id], 0, b.nbytes
            else:
                base, byte_offset, nbytes = self._arena_base, self.arena_offsets[b.id], b.nbytes
            return (base, byte_offset, nbytes, int(value.dtype), value.shape, value.strides, value.offset)

        def member_operands(group: Any, member: Any) -> list[tuple]:
            """A group member's operands, each with the mask of group axes it follows; a value in
            the tile buffer has the C-contiguous strides of the largest tile."""
            tile_strides = _contiguous_strides(group.tile_shape())
            found = []
            for value, mask in zip(member.inputs + [member.output], group.tile_axes(member)):
                if value.buffer.id in group.tile_values:
                    start = group.tile_values[value.buffer.id]
                    found.append((TILE_BASE, start, group.tile_bytes - start, int(value.dtype), value.shape,
                                  tile_strides, 0, mask))
                else:
                    found.append(operand(value) + (mask,))
            return found

        for index, step in enumerate(self._steps):
            members = getattr(step, "members", None)
            if members is None:
                self._program.add_step(step.kernel, step.node_id, step.name,
                                       [operand(v) for v in step.inputs + step.outputs], step.params)
                continue
            # a MATMUL head's extents come from each tile's layouts (its params, checked equal to
            # its operands' extents by planner.epilogue_head, would name the whole product)
            rows = tile_rows()
            program = None
            if step.vector is not None:
                dtype, row_len, slots, code = step.vector
                program = (dtype, row_len, [(VECTOR_SLOTS[kind],) + operand(value)[:2] for kind, value in slots], code)
            self._direct_rows[index] = self._program.add_group(
                step.node_id, step.name, step.shape, step.tile_axis, step.tile_len, step.tile_bytes,
                self._arena_base, self.arena_offsets[("tile", index)],
                [(m.kernel, m.node_id, m.name, member_operands(step, m),
                  None if m is step.head and m.kernel.op in (OpKind.MATMUL, OpKind.MATMUL_PREPACKED) else m.params,
                  rows.get(m.kernel.kernel_address))
                 for m in members],
                step.tile_outer, step.serial, program)
            self._vector[index] = self._program.vector_program(len(self._vector))

    # -- running
    def run(self, inputs: Sequence[Any]) -> Any:
        """Run on `inputs` (arrays in the order the graph's inputs were declared); returns the list
        of outputs (fresh arrays), or the single output when compile() was given one Value."""
        bases, outputs = self._bases(inputs)
        self._program.run(bases)
        return outputs[0] if self._single else outputs

    def profile(self, inputs: Sequence[Any], repeats: int = 5) -> list[tuple[str, float]]:
        """Each step of a run on `inputs` timed alone: (what the step is, its best seconds over
        `repeats` back-to-back runs), in plan order; a fused group is one step.  Their sum against
        a whole run's time is the cost of running the steps together (cache traffic between them,
        the executor's own work).  Each step reads what the steps before it wrote, as in a run; a
        step that overwrites its own input computes on its last result when repeated, so plan
        state (g.state) is left holding garbage: run the plan again before relying on it."""
        bases, _ = self._bases(inputs)
        seconds = self._program.time_steps(bases, repeats)
        return [(f"{step.name} node {step.node_id}", t) for step, t in zip(self._steps, seconds)]

    def _bases(self, inputs: Sequence[Any]) -> tuple[list[Any], list[np.ndarray]]:
        """The executor's base arrays for a run on `inputs` (checked and made C-contiguous), and the
        fresh output arrays among them."""
        if isinstance(inputs, np.ndarray):
            raise OperandTypeError(f"Plan.run takes a list of arrays, one per graph input, not an array: "
                                   f"plan.run([x]), not plan.run(x) (this plan has {len(self.input_buffers)} "
                                   f"input{'s' if len(self.input_buffers) != 1 else ''})")
        try:
            inputs = list(inputs)
        except TypeError:
            raise OperandTypeError(f"Plan.run takes a list of arrays, not {type(inputs).__name__}") from None
        if len(inputs) != len(self.input_buffers):
            raise OperandCountError(f"the plan takes {len(self.input_buffers)} inputs, got {len(inputs)}")
        bases: list[Any] = [self._state_base(i, array, buffer) if buffer.kind == "state" else
                            self._input_base(i, array, buffer)
                            for i, (array, buffer) in enumerate(zip(inputs, self.input_buffers))]
        for i in self._state_places:
            if any(j != i and np.may_share_memory(bases[i], other) for j, other in enumerate(bases)):
                raise AliasError(f"plan state {i} ({self.input_buffers[i].name}) shares memory with another "
                                 f"plan input; it is written in place, so it needs its own")
        bases.extend(b.array for b in self._constants)
        arena = getattr(self._local, "arena", None)
        if arena is None:
            arena = _aligned_empty((max(self.peak_bytes, 1),), np.dtype(np.uint8))
            self._local.arena = arena
        bases.append(arena)
        outputs = [_aligned_empty(shape, dtype) for shape, dtype in self._output_layouts]
        bases.extend(outputs)
        return bases, outputs

    def __call__(self, *inputs: Any) -> Any:
        return self.run(inputs)

    def __repr__(self) -> str:
        names = ", ".join(b.name or f"buffer {b.id}" for b in self.input_buffers)
        outputs = ", ".join(f"{v.dtype.short_name}{list(v.shape)}" for v in self.output_values)
        return (f"<Plan ({names}) -> ({outputs}): {self.n_steps} steps, "
                f"arena {self.peak_bytes} bytes>")

    @staticmethod
    def _state_base(i: int, array: Any, buffer: Buffer) -> np.ndarray:
        """Plan state i: the caller's own array, written in place, so it is never copied: a writable,
        C-contiguous, aligned NumPy array of exactly the state's dtype (native byte order) and shape."""
        if not isinstance(array, np.ndarray):
            raise OperandTypeError(f"plan state {i} ({buffer.name}) is a {type(array).__name__}; a state is "
                                   f"written in place and must be a NumPy array")
        if array.dtype != buffer.dtype.numpy:
            raise DTypeError(f"plan state {i} ({buffer.name}) has dtype {array.dtype}, expected "
                             f"{buffer.dtype.short_name} (a state is written in place, never converted)")
        if array.shape != buffer.shape:
            raise ShapeError(f"plan state {i} ({buffer.name}) has shape {array.shape}, expected {buffer.shape}")
        if not (array.flags.c_contiguous and array.flags.aligned):
            raise ShapeError(f"plan state {i} ({buffer.name}) must be C-contiguous and aligned: it is written "
                             f"in place, so it cannot be copied")
        if not array.flags.writeable:
            raise ReadOnlyError(f"plan state {i} ({buffer.name}) is read-only; it is written in place")
        return np.asarray(array)

    @staticmethod
    def _input_base(i: int, array: Any, buffer: Buffer) -> np.ndarray:
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
        flags = array.flags
        if not (flags.c_contiguous and flags.aligned):
            array = np.array(array, dtype=expected, order="C", copy=True)
        return array

    @property
    def n_steps(self) -> int:
        """How many steps run: kernel calls and fused groups (a group counts once)."""
        return len(self._steps)

    @property
    def prepacked_bytes(self) -> int:
        """The bytes of the MATMUL B panels packed when the plan was compiled (0 with prepack=False)."""
        return sum(b.nbytes for b in self.prepacked_buffers)

    @property
    def groups(self) -> list[Any]:
        """The fused elementwise groups, in run order."""
        return [s for s in self._steps if hasattr(s, "members")]

    def explain(self) -> str:
        """Each step's candidates, their estimates and verdicts, and the winner; fusion decisions;
        each fused group (its members, the MATMUL or CONV2D it is the epilogue of, its tile and the
        arena bytes it saves) and why each other step runs alone."""
        lines = list(self._fusion_notes)
        if not self._grouped:
            lines.append("elementwise groups: off (compile(fuse=False))")
        for index, step in enumerate(self._steps):
            members = getattr(step, "members", None)
            if members is not None:
                direct = self._direct_rows[index]
                tile = "x".join(str(e) for e in step.tile_shape()) or "scalar"
                what = (f"{step.head.name} node {step.head.node_id} with an epilogue of {len(members) - 1} nodes"
                        if step.head is not None else f"{len(members)} elementwise nodes")
                lines.append(f"step {index}: group of {what} over "
                             f"{step.members[-1].output.dtype.short_name}{list(step.shape)}: "
                             f"tile {tile} ({step.tile_elements} elements, {step.n_tiles} tiles, "
                             f"{step.tile_bytes} bytes of tile buffer per thread); "
                             f"{step.saved_bytes} arena bytes saved ({len(step.tile_values)} values in tiles, "
                             f"{len(step.writes)} written out); {sum(direct)} of {len(members)} members "
                             f"call their row function directly on the tiles after the first")
                if self._vector[index]:
                    code = step.vector[3]
                    by_row = sum(1 for instruction in code if instruction[0] == VECTOR_ROW)
                    steps = [s for instruction in code if instruction[0] == VECTOR_CHAIN for s in instruction[2]]
                    stores = sum(1 for s in steps if s[0] == VECTOR_OPCODES["STORE"])
                    lines.append(f"    vector program on the tiles after the first: {len(members) - by_row} of "
                                 f"{len(members)} members inline, {by_row} by row function, {len(code)} "
                                 f"instruction{'' if len(code) == 1 else 's'} ({len(steps)} chain steps on registers, {stores} of them "
                                 f"stores) over blocks that stay in L1 ({len(step.vector[2])} arrays)")
                else:
                    why = step.vector_note or "a member has no row function"
                    lines.append(f"    not a vector program: {why}")
                for m, by_row in zip(members, direct):
                    where = "tile" if m.output.buffer.id in step.tile_values else "written"
                    how = "row function" if by_row else "kernel call"
                    lines.extend(self._describe(f"    node {m.node_id}", m, f" [{where}] by {how}", "        "))
                continue
            lines.extend(self._describe(f"step {index}: node {step.node_id}", step, "", "    "))
            if self._grouped and step.alone:
                lines.append(f"    not grouped: {step.alone}")
        if self.prepacked_buffers:
            lines.append(f"pre-packed weights: {len(self.prepacked_buffers)} MATMUL B, {self.prepacked_bytes} bytes "
                         f"owned by the plan (compile(prepack=False) packs per run instead)")
        tiles = (f", with the groups' tile buffers (largest {self.tile_buffer_bytes} bytes)"
                 if self.tile_buffer_bytes else "")
        lines.append(f"arena: {self.peak_bytes} bytes peak{tiles} (minimal live set {self.min_live_bytes} "
                     f"bytes; {self.unfused_peak_bytes} without elementwise groups)")
        return "\n".join(lines)

    @staticmethod
    def _describe(head: str, step: Any, tail: str, indent: str) -> list[str]:
        dtypes = ", ".join(d.short_name for d in step.kernel.dtypes)
        lines = [f"{head} {step.name}({dtypes}) -> {step.kernel.source}{tail}"]
        if step.kernel.op == OpKind.MATMUL_PREPACKED and step.inputs[1].buffer.kind == "const":
            packed = step.inputs[1].buffer
            lines.append(f"{indent}pre-packed weights: B {list(step.inputs[1].shape)} read from {packed.nbytes} "
                         f"bytes of panels packed at compile time ({packed.name or 'a constant'})")
        for v in step.explain:
            est = f"{v.estimate_ns:10.0f} ns" if v.estimate_ns is not None else " " * 13
            lines.append(f"{indent}{v.source:10} {est}  {v.verdict}")
        return lines
