"""Graph builder, route picker, contiguize gate, memory planner, Plan.run and runtime fused ops."""
import threading

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg

F32, F64, F16 = fk.DType.F32, fk.DType.F64, fk.DType.F16


def test_missing_kernel_fails_where_the_node_is_built():
    backend = fk.claim_backend("test-graph-empty")
    g = fg.Graph(target_backend=backend)
    x = g.input((3,), F32)
    with pytest.raises(fk.NoKernelError, match="cast\\(f32, f16\\) on test-graph-empty"):
        g.cast(x, F16)
    g_cpu = fg.Graph()
    y = g_cpu.input((3,), F32)
    with pytest.raises(fk.NoKernelError):
        g_cpu.cast(y, F16, backend=backend)          # per-node backend override


def test_views_are_metadata_only_and_compute_correctly(rng):
    g = fg.Graph()
    x = g.input((4, 6), F32)
    t = g.transpose(x)                               # no node
    s = x[1:4, ::-2]
    b = g.broadcast_to(g.reshape(x[0], (1, 6)), (3, 6))
    assert len(g.nodes) == 0
    outs = [g.cast(t, F64), g.cast(s, F64), g.cast(b, F64), g.cast(g.reshape(t, (24,)), F64)]
    plan = g.compile(outs)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    r = plan.run([a])
    np.testing.assert_array_equal(r[0], a.T.astype(np.float64))
    np.testing.assert_array_equal(r[1], a[1:4, ::-2].astype(np.float64))
    np.testing.assert_array_equal(r[2], np.broadcast_to(a[0], (3, 6)).astype(np.float64))
    np.testing.assert_array_equal(r[3], a.T.reshape(24).astype(np.float64))


def test_outputs_that_are_views_or_inputs_are_fresh_arrays(rng):
    g = fg.Graph()
    x = g.input((2, 3), F32)
    plan = g.compile([x, x.T])
    a = rng.standard_normal((2, 3)).astype(np.float32)
    same, transposed = plan.run([a])
    assert same is not a and not np.shares_memory(same, a)
    np.testing.assert_array_equal(same, a)
    np.testing.assert_array_equal(transposed, a.T)


def test_outputs_start_on_64_byte_boundaries_and_own_their_memory(rng):
    """Every output of every run (several outputs, odd sizes, a 0-d one; an empty one has no
    data) starts on a 64-byte boundary, so full-width vector stores never split a cache line, and
    no two runs share an output buffer."""
    g = fg.Graph()
    x = g.input((3, 5), fk.DType.F32)
    outs = [g.add(x, x), g.sum(x), g.cast(x, fk.DType.F64), g.slice(x, start=(0, 0), stop=(3, 0), step=(1, 1))]
    plan = g.compile(outs)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    first = plan.run([a])
    second = plan.run([a])
    for got, again, want in zip(first, second, [a + a, a.sum(dtype=np.float32), a.astype(np.float64), a[:, :0]]):
        assert (got.size == 0 or got.ctypes.data % 64 == 0) and got.flags.c_contiguous and got.flags.writeable
        assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.size == 0 or not np.shares_memory(got, again)


def test_aligned_empty_builds_aligned_arrays_that_keep_their_memory_and_refuses_bad_sizes():
    """The executor's aligned_empty (every plan output and arena): the shape, dtype and alignment
    asked for, C-contiguous, writable, its memory held by its base; a negative or overflowing
    extent or a non-power-of-two alignment is a typed error before anything is allocated."""
    from fuel_kernel._executor import aligned_empty
    for shape, dtype, alignment in (((3, 5), np.float32, 64), ((), np.float64, 64), ((0, 7), np.int8, 64),
                                    ((2, 3, 4), np.complex128, 4096), ((1,), np.uint16, 1)):
        arrays = [aligned_empty(shape, np.dtype(dtype), alignment) for _ in range(8)]
        for a in arrays:
            assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
            assert a.size == 0 or a.ctypes.data % alignment == 0
            assert a.base is not None and a.base.nbytes >= a.nbytes
            a[...] = 1
        del arrays[:-1]
        assert (arrays[-1] == 1).all()
    with pytest.raises(fk.ShapeError):
        aligned_empty((-1, 4), np.dtype(np.float32), 64)
    with pytest.raises(fk.ShapeError):
        aligned_empty((1 << 40, 1 << 40), np.dtype(np.float32), 64)
    with pytest.raises(fk.ShapeError):
        aligned_empty((1,) * 33, np.dtype(np.float32), 64)
    with pytest.raises(ValueError):
        aligned_empty((4,), np.dtype(np.float32), 48)


def test_plan_validates_inputs_and_never_writes_them(rng):
    g = fg.Graph()
    x = g.input((3, 4), F32)
    plan = g.compile(g.cast(g.cast(x, F64), F32))
    a = rng.standard_normal((3, 4)).astype(np.float32)
    keep = a.copy()
    np.testing.assert_array_equal(plan.run([a]), a)
    np.testing.assert_array_equal(a, keep)
    with pytest.raises(fk.DTypeError):
        plan.run([a.astype(np.float64)])
    with pytest.raises(fk.ShapeError):
        plan.run([a[:2]])
    with pytest.raises(fk.OperandCountError):
        plan.run([a, a])
    with pytest.raises(fk.OperandTypeError):
        plan.run([object()])


def test_memory_planner_reuses_the_arena(rng):
    g = fg.Graph()
    x = g.input((1000,), F32)
    v = x
    for i in range(20):
        v = g.cast(v, F64 if i % 2 == 0 else F32)
    plan = g.compile(v)
    total = sum(b.nbytes for b in g.buffers if b.kind == "node")
    assert plan.peak_bytes < total / 4
    assert plan.peak_bytes <= 1.1 * plan.min_live_bytes
    a = rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(plan.run([a]), a)


def test_two_threads_run_one_plan(rng):
    g = fg.Graph()
    x = g.input((256,), F32)
    plan = g.compile(g.cast(g.cast(g.transpose(x), F64), F32))
    errors = []

    def worker(seed):
        local = np.random.default_rng(seed)
        for _ in range(300):
            a = local.standard_normal(256).astype(np.float32)
            if not np.array_equal(plan.run([a]), a):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_explain_lists_candidates_and_the_winner():
    g = fg.Graph()
    x = g.input((8,), F32)
    text = g.compile(g.cast(x, F64)).explain()
    assert "cast(f32, f64) -> native" in text and "chosen" in text and "arena:" in text


def test_pick_matches_the_planner_and_breaks_ties_by_identity():
    t = fk.bindings()
    k = t.pick(fk.OpKind.CAST, [F32, F64], fk.Backend.CPU, [(10,), (10,)])
    assert k is t.lookup(fk.OpKind.CAST, [F32, F64], fk.Backend.CPU)
    fused = fk.new_runtime_fused_id()
    key = fk.BindingKey.runtime_fused(fused)
    cap = t.lookup(fk.OpKind.CAST, [F32, F64], fk.Backend.CPU).capsule()
    cap2 = t.lookup(fk.OpKind.CAST, [F16, F64], fk.Backend.CPU).capsule()
    with fk.edit_bindings() as tx:             # registered in the opposite order of identity
        tx.register(key, [F32, F64], fk.Backend.CPU, cap, source="zeta", revision=1)
        tx.register(key, [F32, F64], fk.Backend.CPU, cap2, source="alpha", revision=2)
    chosen = fk.bindings().pick(key, [F32, F64], fk.Backend.CPU, [(4,), (4,)])
    assert chosen.source == "alpha"            # equal estimates: the stable identity decides


def _double_cast(g, x):
    return g.cast(g.cast(x, F64), x.dtype)


def test_runtime_fused_op_is_verified_shared_and_picked(rng):
    t = fk.bindings()
    copy_kernel = t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], fk.Backend.CPU).capsule()
    fused_id = fg.register_runtime_fused("double-cast", _double_cast, copy_kernel, [F32, F32],
                                         caps=fk.KernelCaps.NONE)
    again = fg.register_runtime_fused("same-structure", lambda g, y: g.cast(g.cast(y, F64), F16),
                                      t.lookup(fk.OpKind.CONTIGUIZE, [F16, F16], fk.Backend.CPU).capsule(),
                                      [F16, F16], caps=fk.KernelCaps.NONE)
    assert again == fused_id                   # structurally identical decompositions share an id
    assert isinstance(fk.bindings().unique_runtime_fused(fused_id), fk.Ambiguous)

    g = fg.Graph()
    x = g.input((3, 5), F32)
    out = _double_cast(g, g.transpose(x))
    plan = g.compile(out)
    text = plan.explain()
    assert "fusion double-cast" in text and "-> fused" in text
    assert "contiguize for input 0" in text    # the fused kernel lacks strided_input: gate inserted
    assert plan.n_steps == 2
    a = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(plan.run([a]), a.T)


def test_fused_kernel_that_disagrees_is_refused():
    t = fk.bindings()
    wrong = t.lookup(fk.OpKind.CAST, [F32, F32], fk.Backend.CPU).capsule()
    before = t.generation
    with pytest.raises(fk.RegistrationError, match="disagrees"):
        fg.register_runtime_fused("wrong", lambda g, x: g.cast(g.cast(x, F16), F32), wrong, [F32, F32])
    assert fk.bindings().generation == before


def test_intermediate_with_two_consumers_is_not_fused(rng):
    t = fk.bindings()
    fg.register_runtime_fused("double-cast", _double_cast,
                              t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], fk.Backend.CPU).capsule(), [F32, F32])
    g = fg.Graph()
    x = g.input((4,), F32)
    mid = g.cast(x, F64)
    plan = g.compile([g.cast(mid, F32), mid])
    assert "-> fused" not in plan.explain()
    a = rng.standard_normal(4).astype(np.float32)
    r = plan.run([a])
    np.testing.assert_array_equal(r[0], a)


def test_run_error_names_the_failing_node_and_leaves_inputs_alone():
    g = fg.Graph()
    a = g.input((4,), fk.DType.I32)
    b = g.input((4,), fk.DType.I32)
    q = g.div(g.add(a, b), b)
    plan = g.compile(q)
    x = np.array([1, 2, 3, 4], dtype=np.int32)
    y = np.array([1, 0, 1, 1], dtype=np.int32)
    keep = (x.copy(), y.copy())
    with pytest.raises(fk.KernelZeroDivisionError, match=r"node 1 \(div\) failed"):
        plan.run([x, y])
    np.testing.assert_array_equal(x, keep[0])
    np.testing.assert_array_equal(y, keep[1])
    np.testing.assert_array_equal(plan.run([x, np.ones(4, np.int32)]), x + 1)


def test_elementwise_graph_with_broadcast_and_matmul_matches_numpy(rng):
    g = fg.Graph()
    x = g.input((8, 16), F32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    h = g.relu(g.add(g.matmul(x, g.constant(w)), g.constant(b)))
    out = g.mul(h, g.transpose(g.input((4, 8), F32)))
    plan = g.compile(out)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    s = rng.standard_normal((4, 8)).astype(np.float32)
    expected = np.maximum(a @ w + b, 0) * s.T
    np.testing.assert_allclose(plan.run([a, s]), expected, rtol=1e-5, atol=1e-5)


def test_profile_times_every_step_in_plan_order_and_the_next_run_is_exact(rng):
    g = fg.Graph()
    x = g.input((64, 32), F32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    y = g.softmax_last_dim(g.matmul(g.exp(g.neg(x)), g.constant(w)))
    plan = g.compile(y, fuse=False)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    expected = plan.run([a])
    profile = plan.profile([a], repeats=3)
    assert [name.split()[0] for name, _ in profile] == ["neg", "exp", "matmul", "softmax_last_dim"]
    assert all(seconds > 0 and np.isfinite(seconds) for _, seconds in profile)
    np.testing.assert_array_equal(plan.run([a]), expected)
    fused = g.compile(y)                       # a fused group is one step, named by its members
    assert len(fused.profile([a], repeats=1)) == fused.n_steps < plan.n_steps


def test_profile_checks_its_inputs_as_run_does_and_reports_a_failing_node(rng):
    g = fg.Graph()
    a = g.input((4,), fk.DType.I32)
    b = g.input((4,), fk.DType.I32)
    plan = g.compile(g.div(a, b))
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(fk.ShapeError):
        plan.profile([x[:2], x])
    with pytest.raises(fk.OperandCountError):
        plan.profile([x])
    with pytest.raises(ValueError, match="repeats"):
        plan.profile([x, x + 1], repeats=0)
    with pytest.raises(fk.KernelZeroDivisionError, match=r"node 0 \(div\) failed"):
        plan.profile([x, np.array([1, 0, 1, 1], np.int32)])
    np.testing.assert_array_equal(plan.run([x, np.ones(4, np.int32)]), x)
