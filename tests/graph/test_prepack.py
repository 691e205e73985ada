"""compile(prepack=True): a MATMUL whose B is a 2-d float constant gets B packed once at compile time
(MATMUL_PACK_B into a plan-owned buffer) and runs as MATMUL_PREPACKED, alone or heading its
epilogue group; the plan's bytes are the unpacked plan's (both on the native engine)."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg
from fuel_kernel import ops, spec
from fuel_kernel.graph import planner
from support import gemm_k_blocks, random_values

D = fk.DType
OP = fk.OpKind
FLOATS = tuple(D[name] for name in spec.FLOAT)
# K, N not multiples of KC (768 for F32, 256 for F64), NC (1024; 512 for F64) or NR: N = 1100 is
# two column tiles, the second short; K = 800 two K blocks of 400 in F32 (four of 200 in F64)
K, N = 800, 1100


def test_the_shapes_span_several_k_blocks():
    assert all(gemm_k_blocks(dtype, K) >= 2 for dtype in FLOATS)


@pytest.fixture
def native_routes(monkeypatch):
    """Only the built-in kernels: BLAS's bits are not the native engine's, and it runs whole."""
    from fuel_kernel import route
    pick = route.pick
    monkeypatch.setattr(route, "pick", lambda alternatives, *args, **kwargs: pick(
        [k for k in alternatives if k.source != "blas"] or alternatives, *args, **kwargs))


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def linear_graph(dtype, m, rng, epilogue, batch=()):
    """x (*batch, m, K) @ w (const K x N) [+ b, gelu, + residual] [@ w2 (const N x 7)]."""
    g = fg.Graph()
    x = g.input(batch + (m, K), dtype)
    w = g.constant(random_values((K, N), dtype, rng, special=False))
    y = g.matmul(x, w)
    inputs = [random_values(batch + (m, K), dtype, rng, special=False)]
    if epilogue:
        r = g.input(batch + (m, N), dtype)
        inputs.append(random_values(batch + (m, N), dtype, rng, special=False))
        y = g.add(g.gelu(g.add(y, g.constant(random_values((N,), dtype, rng, special=False)))), r)
        y = g.matmul(y, g.transpose(g.constant(random_values((7, N), dtype, rng, special=False))))
    return g, y, inputs


def prepacked_steps(plan):
    steps = [m for s in plan._steps for m in getattr(s, "members", [s])]
    return [s for s in steps if s.kernel.op == OP.MATMUL_PREPACKED]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
@pytest.mark.parametrize("m", (1, 5, 32, 128))
@pytest.mark.parametrize("fuse", (True, False), ids=("fused", "unfused"))
def test_prepacked_plans_give_the_unpacked_bytes(dtype, m, fuse, native_routes):
    """Bias + GELU + residual epilogue heads and a transposed-constant projection after them, fused
    and unfused, M in 1, 5, 32, 128: the bytes of prepack=False; both weights pre-packed (the
    M <= 4 products stream the panels with their sums in registers)."""
    rng = np.random.default_rng(int(dtype) * 10 + m)
    g, y, inputs = linear_graph(dtype, m, rng, epilogue=True)
    plan = g.compile(y, fuse=fuse)
    expected = g.compile(y, fuse=fuse, prepack=False).run(inputs)
    assert same_bytes(plan.run(inputs), expected)
    assert len(prepacked_steps(plan)) == 2
    if fuse:
        (head,) = [grp for grp in plan.groups if grp.head is not None and grp.head.kernel.op == OP.MATMUL_PREPACKED
                   and grp.head.output.shape[-1] == N]
        assert head.n_tiles == 2 and len(head.members) == 4
    for threads in (1, 2, 3):
        with fk.threads(threads):
            assert same_bytes(plan.run(inputs), expected), threads


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
def test_batched_activations_share_the_packed_weight(dtype, native_routes, rng):
    g, y, inputs = linear_graph(dtype, 6, rng, epilogue=False, batch=(2, 3))
    plan = g.compile(y)
    assert len(prepacked_steps(plan)) == 1
    assert same_bytes(plan.run(inputs), g.compile(y, prepack=False).run(inputs))


def test_explain_names_the_prepacked_steps_and_bytes_and_prepack_false_turns_it_off(native_routes, rng):
    g, y, inputs = linear_graph(D.F32, 32, rng, epilogue=True)
    plan = g.compile(y)
    w_bytes = ops.matmul_packed_nbytes(D.F32, K, N)
    w2_bytes = ops.matmul_packed_nbytes(D.F32, N, 7)
    assert plan.prepacked_bytes == w_bytes + w2_bytes
    text = plan.explain()
    assert f"prepack node 0 (matmul): B ({K}, {N}) f32 pre-packed once: {w_bytes} bytes owned by the plan" in text
    assert f"pre-packed weights: B [{K}, {N}] read from {w_bytes} bytes of panels packed at compile time" in text
    assert f"pre-packed weights: 2 MATMUL B, {w_bytes + w2_bytes} bytes owned by the plan" in text
    assert "group of matmul node 0 with an epilogue of 3 nodes" in text
    off = g.compile(y, prepack=False)
    assert off.prepacked_bytes == 0 and not prepacked_steps(off)
    assert "not pre-packed: compile(prepack=False)" in off.explain()
    assert same_bytes(plan.run(inputs), off.run(inputs))
    with pytest.raises(fk.ParamsError):
        g.compile(y, prepack="yes")


def test_what_is_not_prepacked_says_why(native_routes, rng):
    g = fg.Graph()
    x = g.input((8, 16), D.F32)
    w_in = g.input((16, 40), D.F32)                                          # not a constant: nothing said
    w3 = g.constant(random_values((2, 16, 40), D.F32, rng))                  # batched B
    wi = g.constant(random_values((16, 40), D.I32, rng))                     # integers
    xi = g.input((8, 16), D.I32)
    small = g.input((3, 16), D.F32)                                          # few rows: pre-packed too
    w = g.constant(random_values((16, 40), D.F32, rng))
    outs = [g.matmul(x, w_in), g.matmul(x, w3), g.matmul(xi, wi), g.matmul(small, w)]
    plan = g.compile(outs)
    text = plan.explain()
    assert "prepack node 0" not in text
    assert "not pre-packed: B is 3-d (batched B is not pre-packed)" in text
    assert "not pre-packed: dtypes ['i32', 'i32', 'i32'] are not one float dtype" in text
    assert plan.prepacked_bytes == ops.matmul_packed_nbytes(D.F32, 16, 40)


def test_the_plan_owns_the_packed_buffers_not_the_graph(native_routes, rng):
    g, y, inputs = linear_graph(D.F32, 16, rng, epilogue=False)
    before = len(g.buffers)
    plan = g.compile(y)
    assert len(g.buffers) == before
    (buffer,) = plan.prepacked_buffers
    assert buffer.array.ctypes.data % 64 == 0 and not buffer.array.flags.writeable
    expected = plan.run(inputs)
    del g
    assert same_bytes(plan.run(inputs), expected)


def test_graph_builders_pack_and_multiply(native_routes, rng):
    """Graph.matmul_pack_b and matmul_prepacked as nodes (run every call, from an input B), and a
    constant holding packed bytes: MATMUL's bits."""
    for dtype in FLOATS:
        g = fg.Graph()
        a = g.input((9, K), dtype)
        b = g.input((K, N), dtype)
        packed = g.matmul_pack_b(b)
        assert packed.shape == (ops.matmul_packed_nbytes(dtype, K, N),) and packed.dtype == D.U8
        y = g.matmul_prepacked(a, packed, N)
        arrays = [random_values((9, K), dtype, rng, special=False), random_values((K, N), dtype, rng, special=False)]
        got = g.compile(y).run(arrays)
        h = fg.Graph()
        expected = h.compile(h.matmul(h.input((9, K), dtype), h.input((K, N), dtype)), prepack=False).run(arrays)
        assert same_bytes(got, expected), dtype
        with pytest.raises(fk.ShapeError):
            g.matmul_prepacked(a, packed, N + 40)         # another size of buffer
        wrong = g.matmul_prepacked(a, packed, N + 1)      # the same size: the kernel reads the header
        with pytest.raises(fk.ShapeError, match="names columns"):
            g.compile(wrong).run(arrays)
        with pytest.raises(fk.ShapeError):
            g.matmul_pack_b(g.input((2, K, N), dtype))


def test_narrow_column_tiles_leave_a_prepacked_head_alone(native_routes, monkeypatch, rng):
    """Column tiles that are not a multiple of the packed panels' NR cannot cut a packed B: the
    head runs alone (and still gives the unpacked bytes)."""
    monkeypatch.setattr(planner, "MATMUL_TILE_COLUMNS", 40)
    g, y, inputs = linear_graph(D.F32, 32, rng, epilogue=True)
    plan = g.compile(y)
    assert "its packed B is cut at multiples of 32 columns only" in plan.explain()
    assert same_bytes(plan.run(inputs), g.compile(y, prepack=False).run(inputs))


def has_blas():
    return any(k.source == "blas" for k in fk.bindings().alternatives(OP.MATMUL, [D.F32] * 3, fk.Backend.CPU))


def prepack_line(plan):
    (line,) = [text for text in plan.explain().splitlines() if text.startswith("prepack node 0")]
    return line


def test_few_row_products_go_to_the_native_engine_on_a_core_fast_against_its_memory(monkeypatch, rng):
    """On a core whose flop rate is high against its bandwidth (a 16-core Xeon's: 165 GFLOP/s and
    25 GB/s copied; 230 and 15 here too) both engines that pack B per call are memory-bound for
    8-row products, moving the same bytes; the BLAS sibling's fifth of the core's rate there shows
    through the model's overlap slack, so the picker keeps the native engine (with max() alone BLAS
    took the tie on its call overhead, and the plans ran those products 2.2-2.7x ONNX Runtime's
    MatMul).  Where the picker does choose BLAS, a plain compile still pre-packs the constant B when
    the estimates put the pre-packed engine ahead."""
    from fuel_kernel import route
    if not has_blas():
        pytest.skip("no BLAS sibling (SciPy is absent)")
    alternatives = fk.bindings().alternatives(OP.MATMUL, [D.F32] * 3, fk.Backend.CPU)
    for constants in ((165e9, 24.8e9), (230e9, 15e9)):
        monkeypatch.setattr(route, "_machine", route.MachineConstants(*constants))
        for k, n in ((512, 512), (2048, 2048)):
            assert route.pick(alternatives, [(8, k), (k, n), (8, n)]).kernel.source == "native", (constants, k)
    pick = route.pick
    monkeypatch.setattr(route, "pick", lambda alternatives, *args, **kwargs: pick(
        [k for k in alternatives if k.source == "blas"] or alternatives, *args, **kwargs))
    g = fg.Graph()
    y = g.matmul(g.input((8, 512), D.F32), g.constant(random_values((512, 512), D.F32, rng, special=False)))
    plan = g.compile(y)
    assert "pre-packed once" in prepack_line(plan) and "packing per run (blas)" in prepack_line(plan)
    assert len(prepacked_steps(plan)) == 1


def test_measure_times_the_prepacked_engine_against_blas_once(monkeypatch, rng):
    """Where the route picker chose the BLAS sibling and estimates it ahead of the pre-packed engine
    too, a plain compile keeps BLAS and says so, and compile(measure=True) times the pre-packed
    native engine against it and keeps the faster; the timings are cached with the measured routes,
    so a second compile decides alike."""
    from fuel_kernel import route
    if not has_blas():
        pytest.skip("no BLAS sibling (SciPy is absent)")
    pick, priced = route.pick, route._priced_estimate
    monkeypatch.setattr(route, "pick", lambda alternatives, *args, **kwargs: pick(
        [k for k in alternatives if k.source == "blas"] or alternatives, *args, **kwargs))

    def prepacked_estimated_slow(kernel, *args):
        cost, ns, is_priced = priced(kernel, *args)
        return cost, ns * 100 if kernel.op == OP.MATMUL_PREPACKED else ns, is_priced
    monkeypatch.setattr(route, "_priced_estimate", prepacked_estimated_slow)
    g, y, inputs = linear_graph(D.F32, 32, rng, epilogue=False)
    assert "not pre-packed: the route picker chose blas (" in prepack_line(g.compile(y))
    assert "compile(measure=True) times" in prepack_line(g.compile(y))
    plan = g.compile(y, measure=True)
    line = prepack_line(plan)
    assert "pre-packed (native) vs" in line and "for blas" in line
    assert prepack_line(g.compile(y, measure=True)) == line
    packed = "pre-packed once" in line
    assert len(prepacked_steps(plan)) == int(packed) and plan.prepacked_bytes == (
        ops.matmul_packed_nbytes(D.F32, K, N) if packed else 0)
    monkeypatch.setattr(route, "pick", lambda alternatives, *args, **kwargs: pick(
        [k for k in alternatives if k.source != "blas"] or alternatives, *args, **kwargs))
    if packed:                             # the native engine's bytes
        assert same_bytes(plan.run(inputs), g.compile(y, prepack=False).run(inputs))


def test_measure_times_it_against_the_native_engine_too(native_routes, rng):
    """Reading the panels from memory inside the product can cost what packing them did, so a
    measured compile times the pre-packed engine against the native one as well, and keeps the
    faster: the native engine's bytes either way."""
    g, y, inputs = linear_graph(D.F32, 32, rng, epilogue=False)
    plan = g.compile(y, measure=True)
    (line,) = [text for text in plan.explain().splitlines() if text.startswith("prepack node 0")]
    assert "pre-packed (native) vs" in line and "for native" in line
    assert len(prepacked_steps(plan)) == int("pre-packed once" in line)
    assert same_bytes(plan.run(inputs), g.compile(y, prepack=False).run(inputs))
