"""Elementwise groups: a fused plan returns the same bytes as compile(fuse=False) for every pair of
groupable ops and every dtype they take, on broadcast, strided, negative-stride and offset views;
explain() names each group and why each other step runs alone; errors write nothing."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg
from fuel_kernel import ops
from fuel_kernel import params as P
from fuel_kernel.graph import planner
from support import random_values

BOOL, F32, F64, I32, I64 = fk.DType.BOOL, fk.DType.F32, fk.DType.F64, fk.DType.I32, fk.DType.I64
CPU = fk.Backend.CPU
UNARY_PARAMS = {fk.OpKind.AFFINE: lambda d: P.affine(1.5, -0.25) if d.is_float else P.affine(3, -2),
                fk.OpKind.CLAMP: lambda d: P.clamp(-1.5, 2) if d.is_float else P.clamp(-1, 2),
                fk.OpKind.POWI: lambda d: P.powi(3)}
BINARY_PARAMS = {fk.OpKind.POWI_BACKWARD: P.powi(3)}
VIEWS = ("broadcast", "strided", "negative", "offset", "contiguous", "row")
SHAPE = (3, 7, 5)


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 24 elements: SHAPE runs as 6 tiles [1, 4 or 3, 5], the last of each row short
    (whether or not every member calls its row function directly)."""
    for name in ("TILE_MIN_ELEMENTS", "TILE_MAX_ELEMENTS", "ROW_TILE_MIN_ELEMENTS", "ROW_TILE_MAX_ELEMENTS"):
        monkeypatch.setattr(planner, name, 24)


@pytest.fixture(params=["rows", "kernels"])
def member_calls(request, monkeypatch):
    """Both ways a member runs on the tiles after the first: its row function (where its kernel
    module publishes one), or its kernel on every tile (no row functions known)."""
    if request.param == "kernels":
        monkeypatch.setattr(planner, "_tile_rows", {})
    return request.param


def same_bytes(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class Inputs:
    """Graph inputs seen through a rotating view (the caller arrays are made to match)."""

    def __init__(self, g, rng):
        self.g, self.rng, self.arrays, self.count = g, rng, [], 0

    def value(self, dtype, shape=SHAPE, view=None):
        view = view or VIEWS[self.count % len(VIEWS)]
        self.count += 1
        g = self.g
        if view == "broadcast":           # stride 0 on the first axis
            x = g.input((1,) + shape[1:], dtype)
            v = g.broadcast_to(x, shape)
        elif view == "row":               # fewer dims: the kernel broadcasts it right-aligned
            x = g.input(shape[1:], dtype)
            v = x
        elif view == "strided":
            x = g.input(tuple(2 * s + 1 for s in shape), dtype)
            v = x[tuple(slice(1, 1 + 2 * s, 2) for s in shape)]
        elif view == "negative":
            x = g.input(shape, dtype)
            v = x[tuple(slice(None, None, -1) for _ in shape)]
        elif view == "offset":
            x = g.input((shape[0] + 1,) + shape[1:], dtype)
            v = x[1:]
        else:
            x = g.input(shape, dtype)
            v = x
        self.arrays.append(random_values(x.shape, dtype, self.rng))
        return v


def supported(op, dtypes):
    return fk.bindings().supports(op, dtypes, CPU)


CHECKS_DATA = (fk.OpKind.DIV, fk.OpKind.REM, fk.OpKind.POW, fk.OpKind.FMOD, fk.OpKind.TRUNC_DIV)


def pair_ops(dtype):
    """The groupable ops, less those whose `dtype` kernels check their data (integer DIV, REM and
    POW run alone; random data would divide by zero; they have their own test below)."""
    return [op for op in sorted(planner.GROUPABLE_OPS, key=int) if dtype.is_float or op not in CHECKS_DATA]


def consumers(g, x, inputs):
    """Every groupable op applied to x in every operand position its bindings accept; the other
    operands are graph inputs through rotating views."""
    d = x.dtype
    out = []
    for op in pair_ops(d):
        if op == fk.OpKind.CAST:
            for target in fk.DType:
                out.append(g.cast(x, target))
        elif op == fk.OpKind.WHERE:
            if supported(op, (BOOL, d, d, d)):
                c = inputs.value(BOOL)
                out.append(g.where(c, x, inputs.value(d)))
                out.append(g.where(c, inputs.value(d), x))
            if d == BOOL:
                out.append(g.where(x, inputs.value(F32), inputs.value(F32)))
        elif op == fk.OpKind.MASKED_FILL:
            if supported(op, (d, BOOL, d)):
                out.append(g.masked_fill(x, inputs.value(BOOL), params=P.masked_fill(1)))
            if d == BOOL:
                out.append(g.masked_fill(inputs.value(F32), x, params=P.masked_fill(1)))
        elif op in UNARY_PARAMS:
            if supported(op, (d, d)):
                out.append(g.op(op, x, params=UNARY_PARAMS[op](d)))
        elif ops.schema(op).n_inputs == 1:
            if supported(op, (d, d)):
                out.append(g.op(op, x))
        else:
            result = BOOL if op in (fk.OpKind.EQ, fk.OpKind.NE, fk.OpKind.LT, fk.OpKind.LE,
                                    fk.OpKind.GT, fk.OpKind.GE) else d
            if supported(op, (d, d, result)):
                out.append(g.op(op, x, inputs.value(d), params=BINARY_PARAMS.get(op)))
                out.append(g.op(op, inputs.value(d), x, params=BINARY_PARAMS.get(op)))
    return out


def producers(dtype):
    """(op, builder) for every groupable binding whose output has `dtype`."""
    found = []
    for op in pair_ops(dtype):
        if op == fk.OpKind.CAST:
            for source in fk.DType:
                found.append((f"cast({source.short_name})", lambda g, i, s=source: g.cast(i.value(s), dtype)))
        elif op == fk.OpKind.WHERE:
            if supported(op, (BOOL, dtype, dtype, dtype)):
                found.append(("where", lambda g, i: g.where(i.value(BOOL), i.value(dtype), i.value(dtype))))
        elif op == fk.OpKind.MASKED_FILL:
            if supported(op, (dtype, BOOL, dtype)):
                found.append(("masked_fill", lambda g, i: g.masked_fill(i.value(dtype), i.value(BOOL),
                                                                     params=P.masked_fill(1))))
        elif op in UNARY_PARAMS or ops.schema(op).n_inputs == 1:
            if supported(op, (dtype, dtype)):
                params = UNARY_PARAMS[op](dtype) if op in UNARY_PARAMS else None
                found.append((op.short_name, lambda g, i, op=op, p=params: g.op(op, i.value(dtype), params=p)))
        else:
            if dtype == BOOL and op in (fk.OpKind.EQ, fk.OpKind.NE, fk.OpKind.LT, fk.OpKind.LE,
                                        fk.OpKind.GT, fk.OpKind.GE):
                for source in fk.DType:
                    if supported(op, (source, source, BOOL)):
                        found.append((f"{op.short_name}({source.short_name})",
                                      lambda g, i, op=op, s=source: g.op(op, i.value(s), i.value(s))))
            elif supported(op, (dtype, dtype, dtype)):
                found.append((op.short_name, lambda g, i, op=op: g.op(op, i.value(dtype), i.value(dtype),
                                                                      params=BINARY_PARAMS.get(op))))
    return found


def fused_and_unfused(g, outputs, arrays):
    fused = g.compile(outputs)
    unfused = g.compile(outputs, fuse=False)
    return fused, fused.run(arrays), unfused.run(arrays)


@pytest.mark.parametrize("dtype", list(fk.DType), ids=lambda d: d.short_name)
def test_every_groupable_pair_gives_the_unfused_bytes(dtype, small_tiles, member_calls):
    """For each producer binding of `dtype`, one plan in which every groupable consumer reads it:
    the producer's value stays in the tile buffer and every consumer's result matches fuse=False."""
    rng = np.random.default_rng(int(dtype) + 11)
    checked = 0
    for name, produce in producers(dtype):
        g = fg.Graph()
        inputs = Inputs(g, rng)
        x = produce(g, inputs)
        outs = consumers(g, x, inputs)
        plan, got, expected = fused_and_unfused(g, outs, inputs.arrays)
        for k, (a, b) in enumerate(zip(got, expected)):
            assert same_bytes(a, b), f"{name} -> consumer {k} ({outs[k].producer.label}) on {dtype.short_name}"
        if planner.groupable(_step_of(plan, x)) is None:
            (group,) = plan.groups          # the producer and every groupable consumer
            members = {id(m) for m in group.members}
            for v in [x] + outs:
                step = _step_of(plan, v)
                assert (id(step) in members) == (planner.groupable(step) is None), (name, step.name)
            escapes = any(planner.groupable(_step_of(plan, v)) is not None for v in outs)
            assert (x.buffer.id in group.tile_values) == (not escapes), name
            checked += 1
    assert checked > 0


def _step_of(plan, value):
    for step in plan._steps:
        for s in getattr(step, "members", [step]):
            if s.output.buffer is value.buffer:
                return s
    raise AssertionError("no step writes the value")


def _gelu_affine(g, x, a, b):
    return g.gelu(g.add(g.mul(x, a), b))


@pytest.mark.parametrize("shape", [(), (0,), (4, 0, 3), (1,), (5, 37), (300, 1001), (70000,)],
                         ids=str)
def test_shapes_below_above_and_off_the_tile_size(shape, rng):
    """Default tiles: 0-d and empty run as one tile; long rows and row blocks that are not
    multiples of the tile give the unfused bytes."""
    g = fg.Graph()
    x = g.input(shape, F32)
    a = g.input(shape[-1:], F32)
    b = g.input((), F32)
    y = _gelu_affine(g, x, a, b)
    arrays = [random_values(v.shape, F32, rng) for v in (x, a, b)]
    plan, got, expected = fused_and_unfused(g, y, arrays)
    assert same_bytes(got, expected)
    assert len(plan.groups) == 1 and plan.n_steps == 1
    group = plan.groups[0]
    size = int(np.prod(shape))
    assert plan._direct_rows[0] == ((True,) * 3 if size else (False,) * 3)   # an empty tile: the kernels
    if size <= planner.ROW_TILE_MIN_ELEMENTS:
        assert group.n_tiles == 1 and group.tile_axis == -1
    else:
        assert group.n_tiles > 1 and group.tile_elements <= planner.ROW_TILE_MAX_ELEMENTS
    assert group.saved_bytes == 2 * size * 4      # x*a and +b never reach the arena
    assert plan.peak_bytes == plan.tile_buffer_bytes == group.tile_bytes   # the arena holds one tile buffer
    assert plan.unfused_peak_bytes >= size * 4


def test_values_used_outside_the_group_are_written(rng, small_tiles):
    g = fg.Graph()
    x = g.input(SHAPE, F32)
    t = g.mul(x, x)                     # a graph output and read by a member
    u = g.exp(t)                        # read by a reduction outside the group
    v = g.add(u, t)
    w = g.neg(v[::-1])                  # reads v through a view: runs after the group
    s = g.sum(u, dims=(1,))
    plan, got, expected = fused_and_unfused(g, [t, v, s, w], [random_values(SHAPE, F32, rng)])
    for a, b in zip(got, expected):
        assert same_bytes(a, b)
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.MUL, fk.OpKind.EXP, fk.OpKind.ADD]
    assert group.tile_values == {}      # every member's value escapes
    assert {id(v.buffer) for v in group.writes} == {id(t.buffer), id(u.buffer), id(v.buffer)}
    text = plan.explain()
    assert "not grouped: sum is not elementwise" in text
    assert "not grouped: it reads a group's value through a view" in text


def test_parallel_chains_merge_into_one_group(rng, small_tiles):
    g = fg.Graph()
    x, y = g.input(SHAPE, F32), g.input(SHAPE, F32)
    out = g.add(g.mul(x, x), g.sqr(y))  # two open groups joined by the add
    plan, got, expected = fused_and_unfused(g, out, [random_values(SHAPE, F32, rng) for _ in range(2)])
    assert same_bytes(got, expected)
    (group,) = plan.groups
    assert len(group.members) == 3 and len(group.tile_values) == 2
    assert plan.n_steps == 1


def test_readers_outside_a_group_run_after_it_and_the_group_still_grows(rng, small_tiles):
    """t = x*a is read by a sum outside the group; the add and gelu after it still join t's
    group, and the sum runs after the group."""
    g = fg.Graph()
    x, a = g.input(SHAPE, F32), g.input(SHAPE[-1:], F32)
    t = g.mul(x, a)
    s = g.sum(t, dims=(0,))
    y = g.gelu(g.add(t, a))
    plan, got, expected = fused_and_unfused(g, [y, s], [random_values(SHAPE, F32, rng),
                                                        random_values(SHAPE[-1:], F32, rng)])
    for u, w in zip(got, expected):
        assert same_bytes(u, w)
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.MUL, fk.OpKind.ADD, fk.OpKind.GELU]
    assert [v.buffer.id for v in group.writes] == [t.buffer.id, y.buffer.id]
    assert [getattr(step, "name", "") for step in plan._steps][1] == "sum"


def test_a_step_that_needs_a_reader_of_the_group_does_not_join_it(rng, small_tiles):
    """x -> neg -> sum (not elementwise) -> broadcast add with neg's result: the add cannot join
    the neg's group, which must finish before the sum reads it."""
    g = fg.Graph()
    x = g.input(SHAPE, F32)
    n = g.neg(x)
    s = g.sum(n, dims=(2,), keepdim=True)
    out = g.mul(g.add(n, s), n)
    plan, got, expected = fused_and_unfused(g, out, [random_values(SHAPE, F32, rng)])
    assert same_bytes(got, expected)
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.ADD, fk.OpKind.MUL]
    assert "not grouped: no elementwise neighbour of its shape to group with" in plan.explain()   # the neg


def test_shape_changes_and_lone_steps_are_explained(rng, small_tiles):
    g = fg.Graph()
    x = g.input((3, 1, 5), F32)
    y = g.input((3, 7, 5), F32)
    wide = g.add(g.neg(x), y)           # (3, 1, 5) -> (3, 7, 5): a new group starts at the add
    out = g.exp(wide)
    plan, got, expected = fused_and_unfused(g, out, [random_values((3, 1, 5), F32, rng),
                                                     random_values((3, 7, 5), F32, rng)])
    assert same_bytes(got, expected)
    text = plan.explain()
    assert "not grouped: no elementwise neighbour of its shape to group with" in text
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.ADD, fk.OpKind.EXP]


def test_explain_lists_groups_tiles_and_savings(rng):
    g = fg.Graph()
    x = g.input((64, 1024), F32)
    a = g.input((1024,), F32)
    y = _gelu_affine(g, x, a, a)
    plan = g.compile(y)
    text = plan.explain()
    assert "group of 3 elementwise nodes over f32[64, 1024]" in text
    (group,) = plan.groups
    assert f"tile {'x'.join(map(str, group.tile_shape()))} ({group.tile_elements} elements, " \
           f"{group.n_tiles} tiles" in text
    assert f"{2 * 64 * 1024 * 4} arena bytes saved (2 values in tiles, 1 written out)" in text
    assert "[tile]" in text and "[written]" in text
    assert f"arena: {group.tile_bytes} bytes peak, with the groups' tile buffers (largest " \
           f"{group.tile_bytes} bytes) (minimal live set {group.tile_bytes} bytes; " \
           f"{plan.unfused_peak_bytes} without" in text
    off = g.compile(y, fuse=False)
    assert off.groups == [] and off.n_steps == 3
    assert "elementwise groups: off (compile(fuse=False))" in off.explain()


def test_ops_that_check_their_data_run_alone_and_fail_as_unfused(rng):
    g = fg.Graph()
    x = g.input((6, 5), I32)
    d = g.input((6, 5), I32)
    q = g.div(g.neg(x), d)
    out = g.abs(g.add(q, x))
    plan = g.compile(out)
    assert "not grouped: div(i32) checks its data before writing" in plan.explain()
    assert all(fk.OpKind.DIV not in [m.kernel.op for m in grp.members] for grp in plan.groups)
    xs = rng.integers(-50, 50, (6, 5)).astype(np.int32)
    ds = rng.integers(1, 9, (6, 5)).astype(np.int32)
    assert same_bytes(plan.run([xs, ds]), g.compile(out, fuse=False).run([xs, ds]))
    ds[5, 4] = 0
    with pytest.raises(fk.KernelZeroDivisionError) as fused_error:
        plan.run([xs, ds])
    with pytest.raises(fk.KernelZeroDivisionError) as unfused_error:
        g.compile(out, fuse=False).run([xs, ds])
    assert str(fused_error.value) == str(unfused_error.value)


def test_a_member_failing_on_the_first_tile_writes_nothing():
    """The first tile runs alone: a member refusing its operands stops the group before any other
    tile, and before the members after it, write."""
    from fuel_kernel._executor import PlanProgram
    table = fk.bindings()
    neg = table.lookup(fk.OpKind.NEG, [F32, F32], CPU)
    clamp = table.lookup(fk.OpKind.CLAMP, [F32, F32], CPU)
    shape = (8, 64)
    program = PlanProgram(table, 4)
    whole = (shape, (64, 1), 0)
    program.add_group(7, "bad group", shape, 0, 2, 2 * 64 * 4, 3, 0, [
        (neg, 5, "neg", [(0, 0, 2048, int(F32), *whole), (1, 0, 2048, int(F32), *whole)], None),
        (clamp, 6, "clamp", [(1, 0, 2048, int(F32), *whole), (2, 0, 2048, int(F32), *whole)],
         P.affine(1.0, 2.0)),         # the wrong params family: the kernel refuses it
    ])
    x = np.ones(shape, np.float32)
    mid = np.full(shape, 7.0, np.float32)
    out = np.full(shape, 9.0, np.float32)
    with pytest.raises(fk.ParamsError, match="node 6 \\(clamp\\) failed"):
        program.run([x, mid, out, np.empty(512, np.uint8)])
    assert (out == 9.0).all()                    # the failing member wrote nothing
    assert (mid[2:] == 7.0).all() and (mid[:2] == -1.0).all()   # no tile after the first ran


def test_runtime_fused_ops_keep_priority(rng):
    from test_graph import _double_cast
    t = fk.bindings()
    copy_kernel = t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU).capsule()
    fg.register_runtime_fused("double-cast", _double_cast, copy_kernel, [F32, F32],
                              caps=fk.KernelCaps.NONE)
    g = fg.Graph()
    x = g.input((3, 5), F32)
    out = g.exp(g.neg(_double_cast(g, g.sqr(x))))
    plan = g.compile(out)
    text = plan.explain()
    assert "-> fused" in text and "not grouped: a runtime fused op" in text
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.NEG, fk.OpKind.EXP]
    a = rng.standard_normal((3, 5)).astype(np.float32)
    assert same_bytes(plan.run([a]), g.compile(out, fuse=False).run([a]))


def test_thread_counts_give_the_same_bytes(rng, member_calls):
    shape = (257, 1001)                 # 17 tiles of 15 rows and a short one
    g = fg.Graph()
    x = g.input(shape, F32)
    a = g.input((1001,), F32)
    y = g.cast(g.tanh(g.sub(_gelu_affine(g, x, a, a), x)), fk.DType.BF16)
    arrays = [random_values(shape, F32, rng), random_values((1001,), F32, rng)]
    plan = g.compile(y)
    assert plan.groups[0].n_tiles > 8
    expected = g.compile(y, fuse=False).run(arrays)
    for n in (1, 2, 3):
        with fk.threads(n):
            assert same_bytes(plan.run(arrays), expected), n


ROW_DTYPES = (fk.DType.F16, fk.DType.BF16, F32, F64, I32)


@pytest.mark.parametrize("dtype", ROW_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape", [(5, 37), (3, 1, 300), (1000,), (4, 2049)], ids=str)
def test_members_call_row_functions_with_the_unfused_bytes(dtype, shape, rng, member_calls):
    """Every view, ops with params among them, a member without a row function (a compare) and
    tiles that cut rows, whole rows and blocks of rows (with a short last one): the row
    functions give the kernels' bytes on 1, 2 and 3 threads, and explain() says who calls what."""
    g = fg.Graph()
    inputs = Inputs(g, rng)
    values = [inputs.value(dtype, shape, view) for view in VIEWS]
    t = g.mul(g.add(values[0], values[1]), values[2])
    low, high = (-1.5, 2.0) if dtype.is_float else (-40, 50)
    t = g.clamp(g.sub(t, values[3]), min=low, max=high)
    t = g.maximum(g.neg(t), values[4])
    t = g.abs(g.minimum(t, values[5]))
    if dtype.is_float:
        t = g.affine(g.tanh(t), mul=1.5, add=-0.25)
    u = g.where(g.lt(t, values[0]), t, values[1])
    plan, got, expected = fused_and_unfused(g, [t, u], inputs.arrays)
    assert all(same_bytes(a, b) for a, b in zip(got, expected))
    (group,) = plan.groups
    direct = plan._direct_rows[plan._steps.index(group)]
    calls = {m.kernel.op: d for m, d in zip(group.members, direct)}
    assert calls[fk.OpKind.LT] is False and calls[fk.OpKind.WHERE] is False
    assert calls[fk.OpKind.CLAMP] is calls[fk.OpKind.MUL] is (member_calls == "rows")
    text = plan.explain()
    assert f"{sum(direct)} of {len(direct)} members call their row function directly" in text
    assert ("] by row function" in text) == (member_calls == "rows") and "] by kernel call" in text
    for n in (2, 3):
        with fk.threads(n):
            assert all(same_bytes(a, b) for a, b in zip(plan.run(inputs.arrays), expected)), n


def test_a_ten_op_expression_runs_on_l1_tiles_by_row_functions(rng):
    """The benchmark's 10-op expression (bench/bench_graph.py): one group of 10 members, all
    calling their row functions on the first tile, on tiles whose operands fit the L1 budget, and
    a vector program of 8 instructions on the others; its output (streamed) has the unfused bytes
    on 1, 2 and 3 threads."""
    shape = (64, 1024)
    g = fg.Graph()
    x, a, b = g.input(shape, F32), g.input((1024,), F32), g.input((1024,), F32)
    t = g.add(g.mul(x, a), b)
    t = g.maximum(g.sub(g.mul(t, t), a), x)
    t = g.abs(g.add(g.mul(t, b), x))
    y = g.minimum(g.neg(t), a)
    arrays = [random_values(shape, F32, rng), random_values((1024,), F32, rng), random_values((1024,), F32, rng)]
    plan, got, expected = fused_and_unfused(g, y, arrays)
    assert same_bytes(got, expected)
    (group,) = plan.groups
    assert len(group.members) == 10 and plan._direct_rows[0] == (True,) * 10
    assert planner.ROW_TILE_MIN_ELEMENTS <= group.tile_elements <= planner.ROW_TILE_MAX_ELEMENTS
    assert group.tile_bytes <= planner.ROW_TILE_BUDGET_BYTES
    assert "10 of 10 members call their row function directly" in plan.explain()
    # the tiles after the first run as a vector program: one chain, every intermediate in registers
    assert vector_note(plan).startswith("vector program on the tiles after the first: 10 of 10 members inline, "
                                        "0 by row function, 1 instruction (12 chain steps on registers, 1 of them "
                                        "stores)")
    for n in (2, 3):                    # the streamed output stored by pool tasks, not drained
        with fk.threads(n):
            assert same_bytes(plan.run(arrays), expected), n


def test_add_group_checks_tile_rows():
    """A tile row must be a 'fuel_kernel.tile_row' capsule; one of another kernel is not used."""
    from fuel_kernel._executor import PlanProgram
    table = fk.bindings()
    neg = table.lookup(fk.OpKind.NEG, [F32, F32], CPU)
    absolute = table.lookup(fk.OpKind.ABS, [F32, F32], CPU)
    rows = planner.tile_rows()
    shape = (8, 64)
    whole = (shape, (64, 1), 0)
    operands = [(0, 0, 2048, int(F32), *whole), (1, 0, 2048, int(F32), *whole)]
    program = PlanProgram(table, 3)
    with pytest.raises(TypeError, match="tile_row"):
        program.add_group(7, "g", shape, 0, 2, 2 * 64 * 4, 2, 0, [(neg, 5, "neg", operands, None, object())])
    assert program.add_group(7, "g", shape, 0, 2, 2 * 64 * 4, 2, 0, [
        (neg, 5, "neg", operands, None, rows[absolute.kernel_address])]) == (False,)
    assert program.add_group(8, "g", shape, 0, 2, 2 * 64 * 4, 2, 0, [
        (neg, 6, "neg", operands, None, rows[neg.kernel_address])]) == (True,)
    x = random_values(shape, F32, np.random.default_rng(3))
    out = np.empty(shape, np.float32)
    program.run([x, out, np.empty(512, np.uint8)])
    assert same_bytes(out, -x)


def test_threads_share_one_fused_plan(rng):
    import threading
    g = fg.Graph()
    x = g.input((100, 1000), F32)
    plan = g.compile(g.exp(g.neg(x)))
    arrays = [[random_values((100, 1000), F32, np.random.default_rng(i))] for i in range(4)]
    expected = [g.compile(g.exp(g.neg(x)), fuse=False).run(a) for a in arrays]
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = plan.run(arrays[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        assert same_bytes(got, want)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_give_the_unfused_bytes(seed, small_tiles):
    """Random DAGs of elementwise nodes mixed with reductions, reversed views and casts: every
    grouping the planner makes keeps the dependencies (each output matches fuse=False)."""
    rng = np.random.default_rng(seed)
    g = fg.Graph()
    values = [g.input(SHAPE, F32), g.input(SHAPE, F32)]
    for _ in range(14):
        kind = rng.integers(0, 6)
        a = values[rng.integers(len(values))]
        b = values[rng.integers(len(values))]
        if kind == 0:
            v = g.op([fk.OpKind.NEG, fk.OpKind.TANH, fk.OpKind.SQR][rng.integers(3)], a)
        elif kind == 1:
            v = g.op([fk.OpKind.ADD, fk.OpKind.MUL, fk.OpKind.MAXIMUM][rng.integers(3)], a, b)
        elif kind == 2:
            v = g.add(a, g.sum(b, dims=(int(rng.integers(3)),), keepdim=True))
        elif kind == 3:
            v = g.mul(a[::-1], b)                # a through a view
        elif kind == 4:
            v = g.cast(g.cast(a, fk.DType.F16), F32)
        else:
            v = g.where(g.gt(a, b), a, b)
        values.append(v)
    outputs = [values[-1]] + [values[i] for i in rng.choice(range(2, len(values) - 1), 3, replace=False)]
    arrays = [random_values(SHAPE, F32, rng, special=False) for _ in range(2)]
    plan, got, expected = fused_and_unfused(g, outputs, arrays)
    for u, w in zip(got, expected):
        assert same_bytes(u, w)


def test_runtime_fused_ops_match_only_their_intermediate_dtypes(rng):
    """double-cast through f64 is the identity; the same structure through f16 rounds, so it
    must not be replaced by that kernel, and a kernel for it may not share the key."""
    from test_graph import _double_cast
    copy_kernel = fk.bindings().lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU).capsule()
    fg.register_runtime_fused("double-cast", _double_cast, copy_kernel, [F32, F32],
                              caps=fk.KernelCaps.NONE)
    g = fg.Graph()
    x = g.input((3, 50), F32)
    through_f16 = g.cast(g.cast(x, fk.DType.F16), F32)
    plan = g.compile(through_f16)
    assert "-> fused" not in plan.explain()
    a = (rng.standard_normal((3, 50)) * 3).astype(np.float32)
    assert same_bytes(plan.run([a]), a.astype(np.float16).astype(np.float32))
    with pytest.raises(fk.RegistrationError, match="intermediate dtypes \\['f64', 'f32'\\]"):
        fg.register_runtime_fused("through-f16", lambda g, y: g.cast(g.cast(y, fk.DType.F16), F32),
                                  fk.bindings().lookup(fk.OpKind.NEG, [F32, F32], CPU).capsule(), [F32, F32],
                                  precision=fk.PrecisionGuarantee(max_rel=3.0))


# ---- epilogues: the groupable steps after a MATMUL or CONV2D run on its output tiles -----------------
@pytest.fixture
def native_routes(monkeypatch):
    """The planner picks among the built-in kernels only: SciPy's BLAS MATMUL sibling runs whole,
    so on these small shapes the route picker's choice of it would leave no epilogue to test."""
    from fuel_kernel import route
    pick = route.pick
    monkeypatch.setattr(route, "pick", lambda alternatives, *args, **kwargs: pick(
        [k for k in alternatives if k.source != "blas"] or alternatives, *args, **kwargs))


@pytest.fixture
def narrow_columns(monkeypatch):
    """MATMUL epilogue tiles 2 columns wide: SHAPE's 5 columns run as tiles of 2, 2 and 1."""
    monkeypatch.setattr(planner, "MATMUL_TILE_COLUMNS", 2)


MATMUL_DTYPES = [d for d in fk.DType if supported(fk.OpKind.MATMUL, (d, d, d))]


def _epilogue_group(plan, head_value):
    (group,) = [grp for grp in plan.groups if grp.head is not None]
    assert group.head.output.buffer is head_value.buffer
    return group


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("views", [("contiguous", "negative"), ("strided", "contiguous"), ("broadcast", "offset"),
                                   ("negative", "strided")], ids="-".join)
def test_every_groupable_op_after_a_matmul_gives_the_unfused_bytes(dtype, views, native_routes, narrow_columns,
                                                                    small_tiles):
    """A batched MATMUL (A through a rotating view, B broadcast over the batch) read whole by
    every groupable consumer: they join its group as its epilogue, its value stays in the tile
    buffer, and 3 column tiles (the last short) give the unfused bytes."""
    rng = np.random.default_rng(int(dtype) * 7 + len(views[0]))
    g = fg.Graph()
    inputs = Inputs(g, rng)
    x = g.matmul(inputs.value(dtype, SHAPE[:2] + (4,), views[0]), inputs.value(dtype, (4, SHAPE[2]), views[1]))
    outs = consumers(g, x, inputs)
    plan, got, expected = fused_and_unfused(g, outs, inputs.arrays)
    for k, (a, b) in enumerate(zip(got, expected)):
        assert same_bytes(a, b), f"matmul -> consumer {k} ({outs[k].producer.label}) on {dtype.short_name}"
    group = _epilogue_group(plan, x)
    assert group.tile_shape() == (3, 7, 2) and group.n_tiles == 3 and group.serial
    members = {id(m) for m in group.members}
    for v in outs:
        step = _step_of(plan, v)
        assert (id(step) in members) == (planner.groupable(step) is None), step.name
    assert x.buffer.id in group.tile_values


def _bias_gelu_residual(g, x, dtype, inputs):
    b = inputs.value(dtype, x.shape[-1:], "contiguous")
    r = inputs.value(dtype, x.shape, "strided")
    act = g.gelu(g.add(x, b)) if dtype.is_float else g.op(fk.OpKind.CLAMP, g.add(x, b), params=P.clamp(-5, 5))
    return g.cast(g.add(act, r), F64 if dtype != F64 else F32)


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=lambda d: d.short_name)
def test_bias_activation_residual_and_cast_after_a_matmul_at_every_thread_count(dtype, native_routes):
    """The linear-layer epilogue at a width past MATMUL_TILE_COLUMNS (2 full tiles and a short
    one): one group, nothing of it in the arena but its cast output, the same bytes as unfused
    on 1, 2 and 3 threads."""
    rng = np.random.default_rng(int(dtype))
    g = fg.Graph()
    inputs = Inputs(g, rng)
    n = 2 * planner.MATMUL_TILE_COLUMNS + 37
    x = g.matmul(inputs.value(dtype, (9, 16), "contiguous"), inputs.value(dtype, (16, n), "contiguous"))
    y = _bias_gelu_residual(g, x, dtype, inputs)
    expected = g.compile(y, fuse=False).run(inputs.arrays)
    plan = g.compile(y)
    group = _epilogue_group(plan, x)
    assert len(group.members) == 5 and group.n_tiles == 3 and len(group.writes) == 1
    assert plan.peak_bytes < g.compile(y, fuse=False).peak_bytes
    for threads in (1, 2, 3):
        with fk.threads(threads):
            assert same_bytes(plan.run(inputs.arrays), expected), threads


def test_a_matmul_epilogue_is_explained_and_a_row_op_after_it_runs_apart(rng, native_routes):
    g = fg.Graph()
    x = g.input((8, 32), F32)
    w = g.input((32, 3000), F32)
    b = g.input((3000,), F32)
    h = g.add(g.matmul(x, w), b)
    out = g.layer_norm(h, b, b, eps=1e-5)
    arrays = [random_values(v.shape, F32, rng) for v in (x, w, b)]
    plan, got, expected = fused_and_unfused(g, out, arrays)
    assert same_bytes(got, expected)
    text = plan.explain()
    assert "group of matmul node 0 with an epilogue of 1 nodes over f32[8, 3000]: tile 8x1024 " \
           "(8192 elements, 3 tiles" in text
    assert "not grouped: its rows would be cut by the column tiles of a MATMUL's epilogue" in text


def test_a_matmul_alone_or_with_a_run_time_row_count_says_why(native_routes):
    g = fg.Graph()
    x = g.input((6, 8), F32)
    w = g.input((8, 5), F32)
    y = g.matmul(x, w)
    plan = g.compile([y, g.exp(y[::-1])])         # read only through a view
    assert "not grouped: no elementwise step reads its whole output" in plan.explain()
    counted = g.matmul(x, w, g.input((), fk.DType.I64), m=6, n=5, k=8, m_compute=P.MatmulM.deferred(2))
    assert "not grouped: its row count is read at run time" in g.compile(g.exp(counted)).explain()
    rows = g.matmul(x, w, m=6, n=5, k=8, m_compute=P.MatmulM.rows(3))
    assert "not grouped: its params name other extents than its operands" in g.compile(g.exp(rows)).explain()
    same = g.matmul(x, w, m=6, n=5, k=8)          # params equal to its operands' extents: it heads a group
    assert "group of matmul node" in g.compile(g.exp(same)).explain()


@pytest.mark.parametrize("dtype", [fk.DType.F16, fk.DType.BF16, F32, F64], ids=lambda d: d.short_name)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_conv2d_epilogues_run_on_batch_tiles_with_the_unfused_bytes(dtype, with_bias, monkeypatch):
    """CONV2D then a per-channel bias, RELU, a residual add and a cast: batch tiles of one image
    (a small tile budget), weight and bias read whole, the unfused bytes on 1 and 3 threads."""
    monkeypatch.setattr(planner, "TILE_BUDGET_BYTES", 64)
    rng = np.random.default_rng(int(dtype) + with_bias)
    g = fg.Graph()
    inputs = Inputs(g, rng)
    xs = inputs.value(dtype, (3, 4, 6, 5), "negative")
    ws = inputs.value(dtype, (6, 2, 3, 3), "strided")
    bias = (inputs.value(dtype, (6,), "contiguous"),) if with_bias else ()
    c = g.conv2d(xs, ws, *bias, padding=(1, 0), groups=2)
    y = g.cast(g.add(g.relu(g.add(c, inputs.value(dtype, (6, 1, 1), "contiguous"))),
                     inputs.value(dtype, c.shape, "offset")), F64 if dtype != F64 else F32)
    expected = g.compile(y, fuse=False).run(inputs.arrays)
    plan = g.compile(y)
    group = _epilogue_group(plan, c)
    assert group.tile_shape() == (1,) + c.shape[1:] and group.n_tiles == 3
    for threads in (1, 3):
        with fk.threads(threads):
            assert same_bytes(plan.run(inputs.arrays), expected), threads


@pytest.mark.parametrize("dtype", [fk.DType.F16, fk.DType.BF16, F32, F64], ids=lambda d: d.short_name)
@pytest.mark.parametrize("op", sorted(planner.ROW_OPS, key=int), ids=lambda o: o.short_name)
@pytest.mark.parametrize("width", [5, 40], ids=["rows_in_a_tile", "row_longer_than_a_tile"])
def test_a_residual_add_feeding_a_row_op_runs_in_its_row_pass(dtype, op, width, small_tiles):
    """x + residual -> norm or softmax -> scale: one group whose tiles hold whole rows (a row
    longer than the 24-element tile runs one row per tile), with the unfused bytes; the residual
    sum, also a graph output, is written once."""
    rng = np.random.default_rng(int(dtype) + int(op) + width)
    g = fg.Graph()
    inputs = Inputs(g, rng)
    shape = (3, 7, width)
    s = g.add(inputs.value(dtype, shape, "strided"), inputs.value(dtype, shape, "negative"))
    weights = [inputs.value(dtype, (width,), "contiguous") for _ in range(ops.schema(op).n_inputs - 1)]
    params = P.norm_last_dim(1e-5) if op in (fk.OpKind.RMS_NORM, fk.OpKind.LAYER_NORM) else None
    y = g.mul(g.op(op, s, *weights, params=params), inputs.value(dtype, (width,), "contiguous"))
    plan, got, expected = fused_and_unfused(g, [y, s], inputs.arrays)
    for a, b in zip(got, expected):
        assert same_bytes(a, b)
    (group,) = plan.groups
    assert [m.kernel.op for m in group.members] == [fk.OpKind.ADD, op, fk.OpKind.MUL]
    tile = group.tile_shape()
    assert tile[-1] == width and group.n_tiles > 1
    if width == 40:
        assert tile == (1, 1, 40) and group.n_tiles == 21


def test_a_transformer_sublayer_runs_as_projection_epilogues(rng, native_routes):
    """x + proj(a) feeding a LayerNorm, then out(h) + x: a projection no wider than one column
    tile keeps whole rows, so the residual add and the LayerNorm join its epilogue; the last add
    reads two epilogues and joins the one it can without a cycle."""
    g = fg.Graph()
    x, a = g.input((6, 40), F32), g.input((6, 24), F32)
    w1, w2, b = g.input((24, 40), F32), g.input((40, 40), F32), g.input((40,), F32)
    x2 = g.add(x, g.add(g.matmul(a, w1), b))
    h = g.layer_norm(x2, b, b, eps=1e-5)
    out = g.add(x2, g.add(g.matmul(h, w2), b))
    arrays = [random_values(v.shape, F32, rng) for v in (x, a, w1, w2, b)]
    plan, got, expected = fused_and_unfused(g, out, arrays)
    assert same_bytes(got, expected)
    first, second = plan.groups
    assert [m.kernel.op for m in first.members] == [fk.OpKind.MATMUL, fk.OpKind.ADD, fk.OpKind.ADD,
                                                    fk.OpKind.LAYER_NORM]
    assert [m.kernel.op for m in second.members] == [fk.OpKind.MATMUL, fk.OpKind.ADD, fk.OpKind.ADD]
    assert plan.n_steps == 2


# ---- vector programs (fuel_kernel/vector_program.h) ---------------------------------------------------
VECTOR_BINARY = (fk.OpKind.ADD, fk.OpKind.SUB, fk.OpKind.MUL, fk.OpKind.DIV, fk.OpKind.MAXIMUM, fk.OpKind.MINIMUM)
VECTOR_UNARY = (fk.OpKind.NEG, fk.OpKind.ABS, fk.OpKind.SQR, fk.OpKind.RELU)
# NaNs of both signs, quiet and signalling, with payloads; infinities, zeros, subnormals, extremes
SPECIAL_BITS = {F32: np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFA00001, 0x7F800001, 0x7F800000, 0xFF800000,
                               0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
                               0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000], np.uint32),
                F64: np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000012345, 0xFFF4000000000001,
                               0x7FF0000000000001, 0x7FF0000000000000, 0xFFF0000000000000, 0, 0x8000000000000000,
                               1, 0x8000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF,
                               0xFFEFFFFFFFFFFFFF, 0x3FF0000000000000, 0xBFF0000000000000], np.uint64)}


def special_values(shape, dtype, rng):
    """Random values of `shape` with a third of them special (SPECIAL_BITS), so every pair of
    special values meets somewhere in a binary op."""
    values = random_values(shape, dtype, rng, special=False).reshape(-1).copy()
    bits = SPECIAL_BITS[dtype]
    picks = rng.random(values.size) < 1 / 3
    values[picks] = bits[rng.integers(0, len(bits), int(picks.sum()))].view(dtype.numpy)
    return values.reshape(shape)


def vector_notes(plan):
    """The explain() lines that say how each group runs its tiles after the first."""
    return [s.strip() for s in plan.explain().splitlines() if "vector program" in s]


def vector_note(plan):
    (line,) = vector_notes(plan)
    return line


def check_every_thread_count(plan, arrays, expected):
    for n in (1, 2, 3):
        with fk.threads(n):
            got = plan.run(arrays)
            got = got if isinstance(got, list) else [got]
            assert all(same_bytes(a, b) for a, b in zip(got, expected)), n


@pytest.mark.parametrize("dtype", (F32, F64), ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape, tiles", [((3, 7, 5), "small"), ((9, 700), "default"), ((2, 3, 1000), "default")],
                         ids=str)
def test_vector_program_ops_give_the_unfused_bytes(dtype, shape, tiles, rng, monkeypatch):
    """Every op with an inline form, on both operand orders against a whole operand, a last-axis
    row, a scalar and itself, over special values (NaNs of both signs with payloads, infinities,
    zeros, subnormals): a vector program (explain() says so) with the unfused bytes on 1, 2 and
    3 threads.  Tiles of 24 elements (every block partial; rows of 5 are too short to read as
    rows), default tiles rows of 700 and 1000 (whole blocks and a partial one)."""
    if tiles == "small":
        for name in ("TILE_MIN_ELEMENTS", "TILE_MAX_ELEMENTS", "ROW_TILE_MIN_ELEMENTS", "ROW_TILE_MAX_ELEMENTS"):
            monkeypatch.setattr(planner, name, 24)
    g = fg.Graph()
    x, y = g.input(shape, dtype), g.input(shape, dtype)
    row, scalar = g.input(shape[-1:], dtype), g.input((), dtype)
    outs = []
    others = (y, row, scalar, x) if shape[-1] >= planner.VECTOR_MIN_ROW else (y, scalar, x)
    for op in VECTOR_BINARY:
        for other in others:
            t = g.op(op, x, other)
            outs += [t, g.op(op, other, t)]     # t written out and read by a member
    for op in VECTOR_UNARY:
        outs += [g.op(op, x), g.op(op, g.op(op, y)), g.op(op, g.mul(x, others[1]))]
    arrays = [special_values(v.shape, dtype, rng) for v in (x, y, row, scalar)]
    plan, got, expected = fused_and_unfused(g, outs, arrays)
    for k, (a, b) in enumerate(zip(got, expected)):
        assert same_bytes(a, b), (k, outs[k].producer.label)
    notes = vector_notes(plan)
    assert len(notes) == len(plan.groups) > 1
    for group, note in zip(plan.groups, notes):
        assert group.n_tiles > 1 and group.vector is not None
        assert note.startswith(f"vector program on the tiles after the first: {len(group.members)} of "
                               f"{len(group.members)} members inline, 0 by row function")
    check_every_thread_count(plan, arrays, expected)


@pytest.mark.parametrize("dtype", (F32, F64), ids=lambda d: d.short_name)
def test_vector_program_chains_sign_ops_and_calls_row_functions(dtype, rng, member_calls):
    """A run of inline members is one CHAIN instruction whose sign ops work on the accumulator (no
    store between them); a value a later member reads from its block is stored (t, read by the
    MAXIMUM; u * row, read by EXP's row function), an output always.  Members without an inline
    form (EXP, GELU, AFFINE, CLAMP, POWI) call their row functions on the blocks (19 members, 8
    instructions); without row functions the group keeps the tile path.  The unfused bytes
    everywhere."""
    shape = (6, 1000)
    g = fg.Graph()
    x, row = g.input(shape, dtype), g.input(shape[-1:], dtype)
    t = g.neg(g.abs(g.neg(g.add(x, row))))           # three sign ops on the accumulator
    u = g.abs(g.abs(g.neg(g.neg(g.sub(t, x)))))      # four more
    v = g.clamp(g.affine(g.gelu(g.exp(g.mul(u, row))), mul=1.5, add=-0.25), min=-2.0, max=3.0)
    w = g.neg(g.powi(g.maximum(v, t), exp=3))        # a chain after a row function loads its value
    z = g.abs(g.relu(w))
    arrays = [special_values(shape, dtype, rng), special_values(shape[-1:], dtype, rng)]
    plan, got, expected = fused_and_unfused(g, [u, z], arrays)
    assert all(same_bytes(a, b) for a, b in zip(got, expected))
    (group,) = plan.groups
    note = vector_note(plan)
    if member_calls == "rows":
        assert note == ("vector program on the tiles after the first: 14 of 19 members inline, 5 by row "
                        "function, 8 instructions (22 chain steps on registers, 5 of them stores) over blocks "
                        "that stay in L1 (4 arrays)")
        op = planner.VECTOR_OPCODES
        acc_src = planner.VECTOR_FORMS["acc, src"]
        code = group.vector[3]
        assert [c[0] for c in code] == [op["CHAIN"]] + [op["ROW"]] * 4 + [op["CHAIN"], op["ROW"], op["CHAIN"]]
        # slots: x 0, row 1, u 2, z 3; registers from 4 (t in 4, u * row in 5)
        assert code[0][2] == ((op["LOAD"], 0, 0), (op["ADD"], acc_src, 1), (op["NEG"], 0, 0), (op["ABS"], 0, 0),
                              (op["NEG"], 0, 0), (op["STORE"], 0, 4), (op["SUB"], acc_src, 0), (op["NEG"], 0, 0),
                              (op["NEG"], 0, 0), (op["ABS"], 0, 0), (op["ABS"], 0, 0), (op["STORE"], 0, 2),
                              (op["MUL"], acc_src, 1), (op["STORE"], 0, 5))
        assert code[5][2] == ((op["LOAD"], 0, 5), (op["MAXIMUM"], acc_src, 4), (op["STORE"], 0, 5))
    else:
        assert note == "not a vector program: exp has no inline form and no row function"
    check_every_thread_count(plan, arrays, expected)


def test_strided_offset_and_partly_broadcast_operands_keep_the_tile_path(rng, small_tiles):
    """Each view a vector program does not address (strided, negative, offset, broadcast over the
    first axis only, a 2-d row over a 3-d group, an F16 member) runs the tile path, with the unfused
    bytes; explain() says why."""
    whys = {"strided": "it reads a strided, offset or partly broadcast view of shape [3, 7, 5]",
            "negative": "it reads a strided, offset or partly broadcast view of shape [3, 7, 5]",
            "offset": "it reads a strided, offset or partly broadcast view of shape [3, 7, 5]",
            "broadcast": "it reads a strided, offset or partly broadcast view of shape [3, 7, 5]",
            "row": "it reads a strided, offset or partly broadcast view of shape [7, 5]",
            "last-axis row": f"it reads rows of 5 elements (fewer than {planner.VECTOR_MIN_ROW})"}
    for view, why in whys.items():
        g = fg.Graph()
        inputs = Inputs(g, rng)
        x = inputs.value(F32, view="contiguous")
        other = g.input(SHAPE[-1:], F32) if view == "last-axis row" else inputs.value(F32, view=view)
        if view == "last-axis row":
            inputs.arrays.append(random_values(SHAPE[-1:], F32, rng))
        y = g.maximum(g.mul(x, other), x)
        plan, got, expected = fused_and_unfused(g, y, inputs.arrays)
        assert same_bytes(got, expected), view
        assert vector_note(plan) == f"not a vector program: {why}", view
        check_every_thread_count(plan, inputs.arrays, [expected])
    g = fg.Graph()
    x = g.input(SHAPE, fk.DType.F16)
    y = g.add(g.mul(x, x), x)
    plan, got, expected = fused_and_unfused(g, y, [random_values(SHAPE, fk.DType.F16, rng)])
    assert same_bytes(got, expected)
    assert vector_note(plan) == "not a vector program: its operands are not all F32 or all F64"


def test_vector_program_bad_input_writes_nothing(rng):
    """A vector-program plan refuses a wrong dtype, shape or operand count before anything runs."""
    g = fg.Graph()
    x, a = g.input((8, 1000), F32), g.input((1000,), F32)
    plan = g.compile(g.neg(g.add(g.mul(x, a), x)))
    assert vector_note(plan).startswith("vector program")
    good = [random_values((8, 1000), F32, rng), random_values((1000,), F32, rng)]
    with pytest.raises(fk.errors.DTypeError):
        plan.run([good[0].astype(np.float64), good[1]])
    with pytest.raises(fk.errors.ShapeError):
        plan.run([good[0], good[1][:999]])
    with pytest.raises(fk.errors.OperandCountError):
        plan.run(good[:1])
    assert same_bytes(plan.run(good), -(good[0] * good[1] + good[0]))


def test_add_group_checks_vector_programs():
    """A program whose slot lies outside its base, whose instruction names a bad op, member or
    argument count, or whose chain step has a bad op, operand form or source (a STORE into an input,
    a chain not starting with a LOAD, too many steps) is refused; a ROW instruction of a member
    without a row function leaves the group on the tile path."""
    from fuel_kernel._executor import VECTOR_FORMS, VECTOR_LIMITS, VECTOR_OPCODES, VECTOR_SLOTS, PlanProgram
    table = fk.bindings()
    neg = table.lookup(fk.OpKind.NEG, [F32, F32], CPU)
    rows = planner.tile_rows()
    shape = (8, 64)
    whole = (shape, (64, 1), 0)
    operands = [(0, 0, 2048, int(F32), *whole), (1, 0, 2048, int(F32), *whole)]
    slots = [(VECTOR_SLOTS["full"], 0, 0), (VECTOR_SLOTS["out"], 1, 0)]
    member = (neg, 5, "neg", operands, None, rows[neg.kernel_address])
    op = VECTOR_OPCODES

    def add(program, capsule=True):
        p = PlanProgram(table, 3)
        p.add_group(7, "g", shape, 0, 2, 2 * 64 * 4, 2, 0, [member if capsule else member[:5]], program=program)
        return p

    def chain(*steps):
        return (int(F32), 64, slots, [(op["CHAIN"], 0, steps)])

    good = chain((op["LOAD"], 0, 0), (op["NEG"], 0, 0), (op["STORE"], 0, 1))
    assert add(good).vector_program(0)
    bad = [(int(F32), 64, [(VECTOR_SLOTS["full"], 0, 64)] + slots[1:], good[3]),   # past base 0's 2048 bytes
           (int(F32), 32, slots, good[3]),                                         # another row length
           (int(fk.DType.F16), 64, slots, good[3]),
           (int(F32), 64, slots, [(99, 0, good[3][0][2])]),                        # not ROW or CHAIN
           (int(F32), 64, slots, [(op["NEG"], 0, (0, 1))]),                        # an op is a step
           (int(F32), 64, slots, [(op["CHAIN"], 1, good[3][0][2])]),               # no member 1
           (int(F32), 64, slots, [(op["ROW"], 0, (0,))]),                          # NEG has two operands
           (int(F32), 64, slots, [(op["ROW"], 0, (0, 99))]),
           chain(),
           chain((op["NEG"], 0, 0), (op["STORE"], 0, 1)),                          # no LOAD first
           chain((op["LOAD"], 0, 0), (op["NEG"], 1, 0), (op["STORE"], 0, 1)),      # a unary op's form
           chain((op["LOAD"], 0, 0), (op["ADD"], 3, 0), (op["STORE"], 0, 1)),
           chain((op["LOAD"], 0, 0), (op["ROW"], 0, 0), (op["STORE"], 0, 1)),
           chain((op["LOAD"], 0, 0), (op["STORE"], 0, 0)),                         # into an input slot
           chain((op["LOAD"], 0, 99), (op["STORE"], 0, 1)),
           chain((op["LOAD"], 0, 0), *[(op["NEG"], 0, 0)] * VECTOR_LIMITS["steps"], (op["STORE"], 0, 1))]
    for program in bad:
        with pytest.raises(ValueError, match="vector program"):
            add(program)
    row_program = (int(F32), 64, slots, [(op["ROW"], 0, (0, 1))])
    assert add(row_program).vector_program(0)
    assert not add(row_program, capsule=False).vector_program(0)
    x = random_values(shape, F32, np.random.default_rng(3))
    for program, expected in ((row_program, -x), (good, -x),
                              (chain((op["LOAD"], 0, 0), (op["MUL"], VECTOR_FORMS["acc, acc"], 0),
                                     (op["SUB"], VECTOR_FORMS["src, acc"], 0), (op["STORE"], 0, 1)), x - x * x)):
        out = np.empty(shape, np.float32)
        add(program).run([x, out, np.empty(512, np.uint8)])
        # tile 0 (rows 0 and 1) runs the member's kernel, the other tiles the program
        assert same_bytes(out[:2], -x[:2]) and same_bytes(out[2:], expected[2:])


@pytest.mark.parametrize("dtype", (F32, F64), ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape, tiles", [((9, 1000), "default"), ((3, 7, 5), "small")], ids=str)
def test_vector_program_chain_forms_give_the_unfused_bytes(dtype, shape, tiles, rng, monkeypatch):
    """Every binary op as a chain step in each operand form: the accumulator and a register block
    (a value stored because a member after the next one reads it), that block and the accumulator,
    the accumulator twice; and against a whole, row and scalar operand in both orders, then a unary
    op: the unfused bytes over special values on 1, 2 and 3 threads.  Rows of 1000 (whole blocks
    and a partial one: 1000 is no multiple of a block or of a strip of vectors) and tiles of 24
    (every block partial)."""
    if tiles == "small":
        for name in ("TILE_MIN_ELEMENTS", "TILE_MAX_ELEMENTS", "ROW_TILE_MIN_ELEMENTS", "ROW_TILE_MAX_ELEMENTS"):
            monkeypatch.setattr(planner, name, 24)
    g = fg.Graph()
    x, y = g.input(shape, dtype), g.input(shape, dtype)
    row, scalar = g.input(shape[-1:], dtype), g.input((), dtype)
    others = (y, row, scalar) if shape[-1] >= planner.VECTOR_MIN_ROW else (y, scalar)
    outs = []
    for op in VECTOR_BINARY:
        t = g.mul(x, others[-1])                 # stored: the member after the next reads it
        u = g.add(t, y)
        v = g.op(op, u, t)                       # acc, register
        w = g.op(op, t, v)                       # register, acc
        z = g.op(op, w, w)                       # acc, acc
        for other in others:
            z = g.op(op, g.op(op, z, other), other)
            z = g.op(op, other, z)
        outs.append(g.relu(z))
    arrays = [special_values(v.shape, dtype, rng) for v in (x, y, row, scalar)]
    plan, got, expected = fused_and_unfused(g, outs, arrays)
    for k, (a, b) in enumerate(zip(got, expected)):
        assert same_bytes(a, b), VECTOR_BINARY[k]
    assert len(plan.groups) == len(VECTOR_BINARY)
    forms = planner.VECTOR_FORMS
    for group, op in zip(plan.groups, VECTOR_BINARY):
        (chain,) = group.vector[3]
        n_slots = len(group.vector[2])
        code = planner.VECTOR_OPCODES[op.name]
        steps = set((s[0], s[1], s[2] >= n_slots) for s in chain[2])
        assert {(code, forms["acc, src"], True), (code, forms["src, acc"], True),
                (code, forms["acc, acc"], False)} <= steps, op
        assert sum(s[0] == planner.VECTOR_OPCODES["STORE"] for s in chain[2]) == 2    # t and the output
    check_every_thread_count(plan, arrays, expected)


@pytest.mark.parametrize("dtype", (F32, F64), ids=lambda d: d.short_name)
def test_vector_program_outputs_read_back_give_the_unfused_bytes(dtype, rng):
    """A chain STORE into an output goes straight to the caller's array (non-temporal) only when
    nothing reads that output back; an output a later chain step or a row function reads from its
    block (o: read by the member after the next and by EXP) is staged as before.  Both kinds, and
    outputs read only through the accumulator (n), give the unfused bytes on 1, 2 and 3 threads."""
    shape = (5, 1000)
    g = fg.Graph()
    x, y, row = g.input(shape, dtype), g.input(shape, dtype), g.input(shape[-1:], dtype)
    o = g.mul(x, row)
    q = g.mul(g.add(o, y), o)                    # o read from its block by a chain step
    r = g.add(g.exp(o), q)                       # and by a row function
    n = g.neg(x)
    m = g.abs(g.sub(n, y))                       # n read only through the accumulator
    arrays = [special_values(v.shape, dtype, rng) for v in (x, y, row)]
    plan, got, expected = fused_and_unfused(g, [o, q, r, n, m], arrays)
    assert all(same_bytes(a, b) for a, b in zip(got, expected))
    notes = vector_notes(plan)
    assert notes and all(note.startswith("vector program") for note in notes)
    check_every_thread_count(plan, arrays, expected)


def test_ten_op_expression_is_one_chain_with_one_store(rng):
    """bench_graph's 10-op expression (x in, rows a and b, y out) keeps every intermediate in
    registers: one CHAIN of a LOAD, ten ops and the output's STORE; the unfused bytes over special
    values."""
    shape = (8, 1024)
    g = fg.Graph()
    x, a, b = g.input(shape, F32), g.input(shape[-1:], F32), g.input(shape[-1:], F32)
    t = g.add(g.mul(x, a), b)
    t = g.maximum(g.sub(g.mul(t, t), a), x)
    t = g.abs(g.add(g.mul(t, b), x))
    y = g.minimum(g.neg(t), a)
    arrays = [special_values(v.shape, F32, rng) for v in (x, a, b)]
    plan, got, expected = fused_and_unfused(g, y, arrays)
    assert same_bytes(got, expected)
    ((chain_op, _, steps),) = plan.groups[0].vector[3]
    op, forms = planner.VECTOR_OPCODES, planner.VECTOR_FORMS
    assert chain_op == op["CHAIN"]
    assert steps == ((op["LOAD"], 0, 0), (op["MUL"], forms["acc, src"], 1), (op["ADD"], forms["acc, src"], 2),
                     (op["MUL"], forms["acc, acc"], 0), (op["SUB"], forms["acc, src"], 1),
                     (op["MAXIMUM"], forms["acc, src"], 0), (op["MUL"], forms["acc, src"], 2),
                     (op["ADD"], forms["acc, src"], 0), (op["ABS"], 0, 0), (op["NEG"], 0, 0),
                     (op["MINIMUM"], forms["acc, src"], 1), (op["STORE"], 0, 3))
    check_every_thread_count(plan, arrays, [expected])
