"""MATMUL (native and BLAS siblings) against NumPy: every binding, awkward shapes, strided and
broadcast operands, batch broadcasting, every MatmulM mode, precision claims and error paths."""
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import matmul_reference
from support import LAYOUTS, cpu_flags, gemm_k_blocks, make_operand

MM_DTYPES = (fk.DType.F32, fk.DType.F64, fk.DType.F16, fk.DType.BF16, fk.DType.U8, fk.DType.I8,
             fk.DType.I16, fk.DType.I32, fk.DType.U32, fk.DType.I64)
COUNT_DTYPES = (None, fk.DType.I32, fk.DType.I64)
CASES = [(dt, cd) for dt in MM_DTYPES for cd in COUNT_DTYPES]
SHAPES = [(1, 1, 1), (1, 9, 17), (7, 13, 5), (0, 5, 3), (4, 0, 3), (3, 5, 0), (3, 1100, 4),
          (41, 37, 67), (9, 300, 33)]


def key(dt, count_dt):
    return [dt, dt, dt] if count_dt is None else [dt, dt, count_dt, dt]


def all_kernels(dt, count_dt):
    kernels = fk.bindings().alternatives(fk.OpKind.MATMUL, key(dt, count_dt), fk.Backend.CPU)
    assert kernels
    return kernels


def values(shape, dt, rng):
    from support import random_values
    return random_values(shape, dt, rng, special=not dt.is_float)


def check(got, a, b, dt, claim, rows=None):
    exp = matmul_reference(a, b)
    if rows is not None:
        exp = exp.copy()
        exp[..., rows:, :] = 0
    if not dt.is_float:
        np.testing.assert_array_equal(got, exp.astype(dt.numpy))
        return
    bound = claim.max_rel * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    if rows is not None:
        bound[..., rows:, :] = 0
    # the claim covers accumulation; F16/BF16 outputs add one rounding, included in max_rel
    err = np.abs(got.astype(np.float64) - exp)
    assert (err <= bound + 1e-300).all(), (err.max(), (err - bound).max())


def run(kernel, dt, count_dt, a, b, m, n, k, batch=(), mm=None, count=None, out=None):
    if out is None:
        out = np.full(tuple(batch) + (m, n), 7, dtype=dt.numpy)
    if count_dt is not None:
        count = m if count is None else count
        mm = fk.MatmulM.deferred(2)
        cnt = np.array(count, dtype=count_dt.numpy)
        kernel(a, b, cnt, out=out, params=fk.params.matmul(m, n, k, batch=batch, m_compute=mm))
    else:
        kernel(a, b, out=out, params=fk.params.matmul(m, n, k, batch=batch, m_compute=mm))
    return out


@pytest.mark.parametrize("dt,count_dt", CASES,
                         ids=[f"{d.short_name}-{c.short_name if c else 'nocount'}" for d, c in CASES])
def test_matmul_binding(dt, count_dt, rng):
    for kernel in all_kernels(dt, count_dt):
        assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
        claim = kernel.precision
        for m, k, n in SHAPES:
            for la, lb in zip(LAYOUTS, LAYOUTS[2:] + LAYOUTS[:2]):
                a = make_operand((m, k), dt, la, rng, values=values((m, k), dt, rng))
                b = make_operand((k, n), dt, lb, rng, values=values((k, n), dt, rng))
                got = run(kernel, dt, count_dt, a, b, m, n, k)
                check(got, a, b, dt, claim)
        # every MatmulM mode on a batched, broadcast product
        a = values((2, 1, 10, 6), dt, rng)
        b = values((3, 6, 5), dt, rng)
        for rows in (0, 4, 10):
            mm = fk.MatmulM.rows(rows) if count_dt is None else None
            got = run(kernel, dt, count_dt, a, b, 10, 5, 6, batch=(2, 3), mm=mm, count=rows)
            check(got, a, b, dt, claim, rows=rows)
        if count_dt is None:
            out = np.full((2, 3, 10, 5), 7, dtype=dt.numpy)
            kernel(a, b, out=out)                                  # no params: shapes decide
            check(out, a, b, dt, claim)
            out_t = np.full((2, 3, 5, 10), 7, dtype=dt.numpy).transpose(0, 1, 3, 2)
            kernel(a, b, out=out_t)                                # strided output
            check(out_t, a, b, dt, claim)


@pytest.mark.parametrize("count_dt", [fk.DType.I32, fk.DType.I64])
@pytest.mark.parametrize("count", [-1, 11, 2**31 - 1])
def test_deferred_count_out_of_range_writes_nothing(count_dt, count, rng):
    a = rng.standard_normal((10, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    for kernel in all_kernels(fk.DType.F32, count_dt):
        out = np.full((10, 3), 7.0, dtype=np.float32)
        with pytest.raises(fk.KernelIndexError):
            run(kernel, fk.DType.F32, count_dt, a, b, 10, 3, 4, count=count, out=out)
        assert (out == 7.0).all()


def test_nan_propagates(rng):
    a = rng.standard_normal((5, 4)).astype(np.float32)
    a[2, 1] = np.nan
    b = rng.standard_normal((4, 6)).astype(np.float32)
    for kernel in all_kernels(fk.DType.F32, None):
        out = kernel(a, b, out=np.empty((5, 6), np.float32))
        assert np.isnan(out[2]).all() and not np.isnan(np.delete(out, 2, 0)).any()


def test_dispatch_allocates_from_params(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    out = fk.dispatch(fk.OpKind.MATMUL, [a, b])
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    cnt = np.array(2, dtype=np.int64)
    out = fk.dispatch(fk.OpKind.MATMUL, [a, b, cnt],
                      params=fk.params.matmul(3, 5, 4, batch=(2,), m_compute=fk.MatmulM.deferred(2)))
    assert (out[:, 2:] == 0).all()
    np.testing.assert_allclose(out[:, :2], (a @ b)[:, :2], rtol=1e-5, atol=1e-5)


def test_cost_lets_a_picker_choose_by_shape():
    """With the route picker's time model (fuel_kernel.route.estimate_ns) on fixed machine
    constants, the BLAS sibling wins large square F32 products on CPUs without AVX-512 (same speed
    per flop, lower call overhead), the native kernel wins them with AVX-512 (5% less per flop),
    and the native kernel wins one-row products (its few-rows path streams B once; ?gemm packs B
    and computes 4-row tiles)."""
    from fuel_kernel.route import MachineConstants, estimate_ns
    kernels = all_kernels(fk.DType.F32, None)
    if len(kernels) < 2:
        pytest.skip("SciPy BLAS sibling not registered")
    machine = MachineConstants(peak_flops=1e11, bandwidth=2e10)

    def seconds(kernel, *shapes):
        return estimate_ns(kernel.cost(*shapes), machine)

    by_source = {k.source: k for k in kernels}
    big = ((512, 512), (512, 512), (512, 512))
    one_row = ((1, 4096), (4096, 4096), (1, 4096))
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= cpu_flags()
    faster, slower = ("native", "blas") if avx512 else ("blas", "native")
    assert seconds(by_source[faster], *big) < seconds(by_source[slower], *big)
    assert seconds(by_source["native"], *one_row) < seconds(by_source["blas"], *one_row)
    big_params = fk.params.matmul(512, 512, 512)
    assert fk.bindings().pick(fk.OpKind.MATMUL, [fk.DType.F32] * 3, fk.Backend.CPU, big,
                              big_params).source in ("blas", "native")


def error_case(problem, rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    out = np.full((4, 5), 7.0, dtype=np.float32)
    inputs = [a, b]
    params = fk.params.matmul(4, 5, 3)
    dts = [fk.DType.F32] * 3
    error = fk.ShapeError
    if problem == "dtype":
        out = np.full((4, 5), 7.0, dtype=np.float64)
        error = fk.DTypeError
    elif problem == "inner":
        inputs[1] = rng.standard_normal((2, 5)).astype(np.float32)
        params = None
    elif problem == "out_shape":
        out = np.full((4, 6), 7.0, dtype=np.float32)
    elif problem == "params_shape":
        params = fk.params.matmul(4, 5, 2)
    elif problem == "params_kind":
        params = fk.params.reduce((0,))
        error = fk.ParamsError
    elif problem == "vector":
        inputs[1] = np.ones(3, np.float32)
        params = None
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":
        big = np.zeros((4, 5), np.float32)
        inputs[0] = big[:, :3]
        out = big
        error = fk.AliasError
    elif problem == "deferred_index":
        dts = [fk.DType.F32, fk.DType.F32, fk.DType.I64, fk.DType.F32]
        inputs.append(np.array(2, np.int64))
        params = fk.params.matmul(4, 5, 3, m_compute=fk.MatmulM.deferred(1))
        error = fk.ParamsError
    elif problem == "count_not_deferred":
        dts = [fk.DType.F32, fk.DType.F32, fk.DType.I64, fk.DType.F32]
        inputs.append(np.array(2, np.int64))
        error = fk.ParamsError
    elif problem == "count_not_scalar":
        dts = [fk.DType.F32, fk.DType.F32, fk.DType.I64, fk.DType.F32]
        inputs.append(np.array([2, 2], np.int64))
        params = fk.params.matmul(4, 5, 3, m_compute=fk.MatmulM.deferred(2))
    elif problem == "batch":
        inputs[0] = rng.standard_normal((2, 4, 3)).astype(np.float32)
        params = fk.params.matmul(4, 5, 3, batch=(3,))
        out = np.full((3, 4, 5), 7.0, dtype=np.float32)
    return dts, inputs, out, params, error


@pytest.mark.parametrize("problem", ["dtype", "inner", "out_shape", "params_shape", "params_kind",
                                     "vector", "readonly", "alias", "deferred_index",
                                     "count_not_deferred", "count_not_scalar", "batch"])
def test_errors_leave_the_output_untouched(problem, rng):
    dts, inputs, out, params, error = error_case(problem, rng)
    for kernel in fk.bindings().alternatives(fk.OpKind.MATMUL, dts, fk.Backend.CPU):
        before = out.copy()
        with pytest.raises(error):
            kernel(*inputs, out=out, params=params)
        np.testing.assert_array_equal(out, before)
    with pytest.raises(fk.ParamsError):
        fk.params.matmul(4, 5, 3, m_compute=fk.MatmulM.rows(5))


def test_without_scipy_only_the_native_kernels_register():
    """SciPy is optional: with it unimportable the BLAS module contributes zero rows."""
    import os
    import subprocess
    import sys
    code = ("import sys; sys.modules['scipy'] = None\n"
            "import numpy as np, fuel_kernel as fk\n"
            "alts = fk.bindings().alternatives(fk.OpKind.MATMUL, [fk.DType.F32] * 3, fk.Backend.CPU)\n"
            "assert [k.source for k in alts] == ['native'], alts\n"
            "a = np.ones((3, 4), np.float32)\n"
            "assert (alts[0](a, a.T, out=np.empty((3, 3), np.float32)) == 4).all()\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ---- FUSED_LINEAR [x (M, K), w (K, N), b (N), y (M, N)] --------------------------------------------
LINEAR_DTYPES = tuple(fk.DType[name] for name in fk.spec.FLOAT)
LINEAR_SHAPES = [(1, 1, 1), (1, 9, 17), (7, 13, 5), (0, 5, 3), (4, 0, 3), (3, 5, 0), (3, 1100, 4),
                 (41, 37, 67), (9, 300, 33), (130, 260, 1030)]
COVERED = {(fk.OpKind.FUSED_LINEAR, (dt,) * 4) for dt in LINEAR_DTYPES}


def linear_kernels(dt):
    kernels = fk.bindings().alternatives(fk.OpKind.FUSED_LINEAR, [dt] * 4, fk.Backend.CPU)
    assert kernels and kernels[0].source == "native"
    return kernels


def check_linear(got, x, w, b, claim):
    """|err| <= max_rel * (|x| @ |w| + |b|) against x @ w + b in F64."""
    xf, wf, bf = (v.astype(np.float64) for v in (x, w, b))
    exp = xf @ wf + bf
    bound = claim.max_rel * (np.abs(xf) @ np.abs(wf) + np.abs(bf))
    err = np.abs(got.astype(np.float64) - exp)
    assert (err <= bound + 1e-300).all(), (err.max(), (err - bound).max())


@pytest.mark.parametrize("dt", LINEAR_DTYPES)
def test_fused_linear_binding(dt, rng):
    """Every sibling, every layout of x, w, b and y, at its claim; the blas sibling only on F32/F64."""
    kernels = linear_kernels(dt)
    assert sorted(k.source for k in kernels) == (["blas", "native"] if dt in (fk.DType.F32, fk.DType.F64)
                                                 else ["native"])
    for kernel in kernels:
        assert kernel.caps & fk.KernelCaps.STRIDED_INPUT and kernel.has_cost
        for m, k, n in LINEAR_SHAPES:
            for i, layout in enumerate(LAYOUTS):
                x = make_operand((m, k), dt, layout, rng, values=values((m, k), dt, rng))
                w = make_operand((k, n), dt, LAYOUTS[(i + 2) % len(LAYOUTS)], rng, values=values((k, n), dt, rng))
                b = make_operand((n,), dt, LAYOUTS[(i + 3) % len(LAYOUTS)], rng, values=values((n,), dt, rng))
                if layout == "transposed":                          # y written through its strides
                    y = np.full((n, m), 7, dtype=dt.numpy).T
                elif layout == "negative":
                    y = np.full((m, n), 7, dtype=dt.numpy)[::-1]
                else:
                    y = np.full((m, n), 7, dtype=dt.numpy)
                kernel(x, w, b, out=y)
                check_linear(y, x, w, b, kernel.precision)


def test_fused_linear_special_values_and_dispatch(rng):
    x = np.array([[1.0, np.nan], [np.inf, 1.0], [0.0, 0.0]], np.float32)
    w = np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 1.0]], np.float32)
    b = np.array([0.5, -np.inf, 2.0], np.float32)
    for kernel in linear_kernels(fk.DType.F32):
        y = np.empty((3, 3), np.float32)
        kernel(x, w, b, out=y)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(y, x @ w + b)
    y = fk.dispatch(fk.OpKind.FUSED_LINEAR, [x[2:], w, b])
    assert y.shape == (1, 3) and y.dtype == np.float32 and (y == b).all()


@pytest.mark.parametrize("problem", ["dtype", "count", "inner", "bias", "out_shape", "rank", "params",
                                     "readonly", "alias", "self_overlap"])
def test_fused_linear_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    error = {"dtype": fk.DTypeError, "count": fk.OperandCountError, "inner": fk.ShapeError,
             "bias": fk.ShapeError, "out_shape": fk.ShapeError, "rank": fk.ShapeError,
             "params": fk.ParamsError, "readonly": fk.ReadOnlyError, "alias": fk.AliasError,
             "self_overlap": fk.AliasError}[problem]
    for kernel in linear_kernels(fk.DType.F32):
        y = np.full((4, 5), 7.0, np.float32)
        inputs, params = [x, w, b], None
        if problem == "dtype":
            y = y.astype(np.float64)
        elif problem == "count":
            inputs = [x, w]
        elif problem == "inner":
            inputs = [x, w[:2], b]
        elif problem == "bias":
            inputs = [x, w, b[:4]]
        elif problem == "out_shape":
            y = np.full((4, 4), 7.0, np.float32)
        elif problem == "rank":
            inputs = [x[None], w, b]
        elif problem == "params":
            params = fk.params.reduce((0,))
        elif problem == "readonly":
            y.setflags(write=False)
        elif problem == "alias":
            y = np.zeros((4, 5), np.float32)
            inputs = [y[:, :3], w, b]
        elif problem == "self_overlap":
            y = np.lib.stride_tricks.as_strided(np.full(5, 7.0, np.float32), (4, 5), (0, 4))
        before = y.copy()
        with pytest.raises(error):
            kernel(*inputs, out=y, params=params)
        np.testing.assert_array_equal(y, before)


@pytest.mark.parametrize("extent", [2 ** 31, 2 ** 52])
def test_fused_linear_blas_extents_past_the_blas_integer_range_are_refused(extent):
    """A stride-0 x of an impossible width K: a ShapeError before BLAS is called, y untouched."""
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (2, extent), (0, 0))
    w = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (extent, 3), (0, 0))
    blas = [k for k in linear_kernels(fk.DType.F32) if k.source == "blas"]
    if not blas:
        pytest.skip("SciPy is not importable: no BLAS sibling")
    y = np.full((2, 3), 7.0, np.float32)
    with pytest.raises(fk.ShapeError):
        blas[0](x, w, np.zeros(3, np.float32), out=y)
    assert (y == 7.0).all()


# ---- grouped (GQA) batch broadcasting: A's batch extent a multiple of B's ------------------------------
from fuel_kernel import graph as fg, ops  # noqa: E402
from oracles import grouped_batch  # noqa: E402

GROUPED = [  # (A, B): on an axis where A's extent is g x B's, index i of C reads B's i / g
    ((2, 8, 5, 6), (2, 2, 6, 7)),          # [batch, Hq, M, K] @ [batch, Hkv, K, N], group 4
    ((8, 3, 4), (4, 4, 3)),                # group 2, one batch axis
    ((6, 1, 4, 5), (3, 4, 5, 2)),          # grouped axis beside a broadcast one
    ((4, 3, 8, 5, 6), (3, 2, 6, 7)),       # a missing leading axis, group 4 on the last batch axis
    ((2, 6, 1, 9), (2, 3, 9, 5)),          # group 2 with m = 1 (decode)
]


def check_grouped(got, a, b, dt, claim):
    bg = grouped_batch(a, b)
    exp = matmul_reference(a, b)
    assert got.shape == exp.shape
    if not dt.is_float:
        np.testing.assert_array_equal(got, exp.astype(dt.numpy))
        return
    bound = claim.max_rel * np.matmul(np.abs(a.astype(np.float64)), np.abs(bg.astype(np.float64)))
    assert (np.abs(got.astype(np.float64) - exp) <= bound + 1e-300).all()


@pytest.mark.parametrize("dt", MM_DTYPES)
def test_grouped_batch_broadcast(dt, rng):
    for kernel in all_kernels(dt, None):
        claim = kernel.precision
        for (sa, sb), (la, lb) in zip(GROUPED, zip(LAYOUTS, LAYOUTS[3:] + LAYOUTS[:3])):
            a = make_operand(sa, dt, la, rng, values=values(sa, dt, rng))
            b = make_operand(sb, dt, lb, rng, values=values(sb, dt, rng))
            batch = ops.infer_output_shape(fk.OpKind.MATMUL, [sa, sb])[:-2]
            got = kernel(a, b)                                                 # no params: shapes decide
            check_grouped(got, a, b, dt, claim)
            m, k, n = sa[-2], sa[-1], sb[-1]
            got = run(kernel, dt, None, a, b, m, n, k, batch=batch)           # params.matmul(batch=...)
            check_grouped(got, a, b, dt, claim)


@pytest.mark.parametrize("count_dt", [fk.DType.I32, fk.DType.I64])
def test_grouped_batch_with_a_deferred_row_count(count_dt, rng):
    a, b = values((2, 6, 5, 4), fk.DType.F32, rng), values((2, 3, 4, 3), fk.DType.F32, rng)
    for kernel in all_kernels(fk.DType.F32, count_dt):
        got = run(kernel, fk.DType.F32, count_dt, a, b, 5, 3, 4, batch=(2, 6), count=2)
        exp = matmul_reference(a, b)
        exp[..., 2:, :] = 0
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sa,sb", [((2, 6, 5, 4), (2, 4, 4, 3)),       # 6 is not a multiple of 4
                                   ((2, 2, 5, 4), (2, 8, 4, 3))])      # B's extent a multiple of A's
def test_grouped_batch_refusals_write_nothing(sa, sb, rng):
    a, b = values(sa, fk.DType.F32, rng), values(sb, fk.DType.F32, rng)
    with pytest.raises(fk.ShapeError):
        ops.infer_output_shape(fk.OpKind.MATMUL, [sa, sb])
    out = np.full((2, max(sa[1], sb[1]), 5, 3), 7, np.float32)
    for kernel in all_kernels(fk.DType.F32, None):
        with pytest.raises(fk.ShapeError):
            kernel(a, b, out=out)
        with pytest.raises(fk.ShapeError):
            kernel(a, b, out=out, params=fk.params.matmul(5, 3, 4, batch=out.shape[:2]))
        assert (out == 7).all()


@pytest.mark.parametrize("dt", [fk.DType.F32, fk.DType.BF16, fk.DType.I32])
def test_grouped_batch_same_bits_for_any_thread_count(dt, rng):
    a, b = values((2, 8, 200, 96), dt, rng), values((2, 2, 96, 160), dt, rng)
    kernel = fk.bindings().lookup(fk.OpKind.MATMUL, key(dt, None), fk.Backend.CPU)
    with fk.threads(1):
        first = kernel(a, b)
    check_grouped(first, a, b, dt, kernel.precision)
    for threads in (2, 3, 7):
        with fk.threads(threads):
            assert kernel(a, b).tobytes() == first.tobytes()


def test_graph_grouped_matmul_and_its_gradients(rng):
    """A GQA product in a Graph: planned and run, and its gradients (dB summed over each group)
    against central differences of the float64 reference."""
    a, b = rng.standard_normal((1, 4, 3, 5)), rng.standard_normal((1, 2, 5, 2))
    g = fg.Graph()
    av, bv = g.input(a.shape, "f64"), g.input(b.shape, "f64")
    out = g.matmul(av, bv)
    loss = g.sum(out)
    da, db = g.grad(loss, [av, bv])
    got, ga, gb = g.compile([out, da, db]).run([a, b])
    np.testing.assert_allclose(got, matmul_reference(a, b), rtol=1e-12)
    ones = np.ones(got.shape)
    np.testing.assert_allclose(ga, ones @ np.swapaxes(grouped_batch(a, b), -1, -2), rtol=1e-12)
    full = np.swapaxes(a, -1, -2) @ ones                                 # [1, 4, 5, 2] per query head
    np.testing.assert_allclose(gb, full.reshape(1, 2, 2, 5, 2).sum(2), rtol=1e-12)


def test_graph_grouped_matmul_heads_an_epilogue(rng):
    """A grouped product followed by a bias add and GELU: the fused plan (the add and GELU as the
    product's epilogue) returns the bytes of the unfused one and the reference's values."""
    a = rng.standard_normal((2, 8, 16, 32)).astype(np.float32)
    b = rng.standard_normal((2, 2, 32, 1100)).astype(np.float32)             # wider than one column tile
    bias = rng.standard_normal(1100).astype(np.float32)
    g = fg.Graph()
    av, bv = g.input(a.shape, "f32"), g.input(b.shape, "f32")
    out = g.gelu(g.add(g.matmul(av, bv), g.constant(bias)))
    fused = g.compile([out]).run([a, b])[0]
    plain = g.compile([out], fuse=False).run([a, b])[0]
    assert fused.tobytes() == plain.tobytes()
    ref = matmul_reference(a, b) + bias
    np.testing.assert_allclose(plain, 0.5 * ref * (1 + np.tanh(np.sqrt(2 / np.pi) * (ref + 0.044715 * ref ** 3))),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k, n", [(5, 7, 9), (3, 8, 8), (17, 300, 72), (8, 259, 131), (1, 2304, 64), (33, 513, 7)])
def test_native_transposed_b_packs_the_same_values(m, k, n, rng):
    """B as a weight's transposed view (w.T, a gradient's dY W^T) is packed by 8 x 8 register
    transposes: the product has the bits of the same B copied contiguous, and is right."""
    native = {kern.source: kern for kern in fk.bindings().alternatives(fk.OpKind.MATMUL, [fk.DType.F32] * 3,
                                                                          fk.Backend.CPU)}["native"]
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    from_view, from_copy = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    native(a, w.T, out=from_view)
    native(a, np.ascontiguousarray(w.T), out=from_copy)
    np.testing.assert_array_equal(from_view.view(np.uint32), from_copy.view(np.uint32))
    want = a.astype(np.float64) @ w.T.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(w.T).astype(np.float64)
    assert (np.abs(from_view - want) <= 2.0 ** -24 * (k + 2) * scale).all()


@pytest.mark.parametrize("dt", [fk.DType.F32, fk.DType.F64])
@pytest.mark.parametrize("m, k, n", [(8, 5, 33), (13, 300, 70), (131, 513, 97), (40, 1030, 1100)])
def test_a_read_in_place_has_the_packed_strips_bits(dt, m, k, n, rng):
    """The serial engine reads an A of unit column stride in place (whole 8-row tiles; a last
    shorter tile is packed) and packs any other A: both give the same bits, for an A with a longer
    row stride, reversed rows, at an offset, and with its tail tile, over several K blocks and
    column panels, and the product is right."""
    (native,) = [kern for kern in all_kernels(dt, None) if kern.source == "native"]
    a = rng.standard_normal((m, k)).astype(dt.numpy)
    b = rng.standard_normal((k, n)).astype(dt.numpy)
    with fk.threads(1):
        packed = native(np.asfortranarray(a), b, out=np.empty((m, n), dt.numpy))
        wide = np.zeros((m + 3, k + 9), dt.numpy)
        wide[3:, 5:k + 5] = a
        for view, rows in ((a, slice(None)), (wide[3:, 5:k + 5], slice(None)), (a[::-1], slice(None, None, -1)),
                           (np.ascontiguousarray(a[::-1])[::-1], slice(None))):
            got = native(view, b, out=np.empty((m, n), dt.numpy))
            np.testing.assert_array_equal(got.view(np.uint8), packed[rows].view(np.uint8))
    check(packed, a, b, dt, native.precision)


@pytest.mark.parametrize("dt", [fk.DType.F32, fk.DType.F64])
@pytest.mark.parametrize("k", [1, 7, 300, 2100])
def test_few_row_products_have_the_engines_bits(dt, k, rng):
    """Products of 1-4 rows take the few-rows path (B streamed once in panels, the sums in
    registers, column strips then single columns): each row has the bits the GEMM engine gives
    the same row within an 8-row product, for column counts around every strip width, several K
    blocks and panels, a transposed A and a B view with a longer row stride."""
    (native,) = [kern for kern in all_kernels(dt, None) if kern.source == "native"]
    for n in (1, 3, 15, 16, 17, 100, 129, 513, 1061):
        a = rng.standard_normal((8, k)).astype(dt.numpy)
        b = rng.standard_normal((k, n)).astype(dt.numpy)
        engine = native(a, b, out=np.empty((8, n), dt.numpy))
        wide = np.zeros((k, n + 5), dt.numpy)
        wide[:, :n] = b
        for rows in (1, 2, 3, 4):
            few = native(a[:rows], b, out=np.empty((rows, n), dt.numpy))
            np.testing.assert_array_equal(few.view(np.uint8), engine[:rows].view(np.uint8))
            strided = native(np.asfortranarray(a)[:rows], wide[:, :n], out=np.empty((rows, n), dt.numpy))
            np.testing.assert_array_equal(strided.view(np.uint8), engine[:rows].view(np.uint8))
        check(engine, a, b, dt, native.precision)


def test_the_picker_gives_few_row_products_of_a_large_b_to_the_native_engine(rng):
    """sgemm packs its operand B on every call, a pass the arithmetic does not hide: at 8 rows of
    a 2048 x 2048 B it ran 2.6x the native engine's time.  The cost model prices that pass, so the
    picker (any CPU) and a plan with B a constant choose the native engine, and the plan pre-packs
    B (MATMUL_PREPACKED).  (Without SciPy the native engine is the only kernel: the same answers.)"""
    from fuel_kernel.graph import Graph
    kernels = {kern.source: kern for kern in all_kernels(fk.DType.F32, None)}
    for m in (1, 4, 8, 16):
        shapes = ((m, 2048), (2048, 2048), (m, 2048))
        picked = fk.bindings().pick(fk.OpKind.MATMUL, [fk.DType.F32] * 3, fk.Backend.CPU, shapes,
                                    fk.params.matmul(m, 2048, 2048))
        assert picked.source == "native", m
    g = Graph()
    x = g.input((8, 2048), fk.DType.F32)
    b = rng.standard_normal((2048, 2048)).astype(np.float32)
    plan = g.compile(g.matmul(x, g.constant(b)))
    assert "pre-packed once" in plan.explain()
    a = rng.standard_normal((8, 2048)).astype(np.float32)
    check(np.asarray(plan.run([a])), a, b, fk.DType.F32, kernels["native"].precision)


def bf16_values(shape, rng):
    """BF16 values of many magnitudes, zeros, and runs whose sum shows its order: 2^25 + 1 - 2^25 + 1
    is 1 added in order and 0 with each pair's two products swapped."""
    import ml_dtypes
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 8, shape)
    x[rng.random(shape) < 0.1] = 0.0
    if shape[-1] >= 4:
        row = rng.integers(0, shape[0])
        start = int(rng.integers(0, shape[-1] - 3))
        x[row, start:start + 4] = (2.0 ** 25, 1.0, -2.0 ** 25, 1.0)
    return x.astype(ml_dtypes.bfloat16)


def f32_engine_rounded(kernel_f32, *operands):
    """The F32 engine's product of the same (BF16) values, rounded to BF16 as the BF16 kernels store"""
    import ml_dtypes
    got = kernel_f32(*[x.astype(np.float32) for x in operands])
    return got.astype(ml_dtypes.bfloat16)


def cpu_has_amx_bf16():
    """Whether this CPU has AMX-BF16 (Linux's cpu flags): its BF16 products of 16 rows and more run
    on the tile unit, whose sums are not the F32 engine's (gemm_core.h.in, AMX)"""
    return "amx_bf16" in cpu_flags()


def assert_bf16_product(got, want, a, b, bias=None):
    """The F32 engine's bits (want), or on an AMX CPU the BF16 claim against the exact product
    with the F32 engine's NaN and infinities"""
    if not cpu_has_amx_bf16():
        assert_same_bf16(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    special = ~np.isfinite(w)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[special & ~np.isnan(w)], w[special & ~np.isnan(w)])
    af, bf = a.astype(np.float64), b.astype(np.float64)
    exact = af @ bf + (0.0 if bias is None else bias.astype(np.float64))
    scale = np.abs(af) @ np.abs(bf) + (0.0 if bias is None else np.abs(bias.astype(np.float64)))
    claim = fk.bindings().alternatives(fk.OpKind.MATMUL, [fk.DType.BF16] * 3, fk.Backend.CPU)[0].precision
    ok = np.isfinite(w)
    # plus the BF16 output's least step (2^-133): sums below it round to BF16 subnormals or zero
    assert (np.abs(g - exact)[ok] <= claim.max_rel * scale[ok] + 2.0 ** -133).all()


def assert_same_bf16(got, want):
    nan = np.isnan(got.astype(np.float32))
    np.testing.assert_array_equal(nan, np.isnan(want.astype(np.float32)))
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize("m, k, n", [(16, 1, 33), (17, 7, 40), (32, 300, 64), (40, 1601, 100), (130, 1101, 70)])
def test_bf16_products_have_the_f32_engines_bits(m, k, n, rng):
    """BF16 products of 16 rows and more run on BF16 pairs on AMD cores with AVX512_BF16 (vdpbf16ps
    adds a pair's two exact products one after the other, as the F32 micro-kernel's fma chain does):
    MATMUL and FUSED_LINEAR give the bits of the F32 engine's product of the same values, rounded
    to BF16, on any CPU without AMX, on one thread (the serial engine) and on two (the shared one for
    the two largest); with AMX (the tile unit's own sums) the claim, and the same bits on one
    thread and two.  Sums whose order shows, odd K blocks (7; 1101 = 551 + 550, 1601 = 534 + 534 + 533),
    partial tiles, several column panels; and the blocks the pairs would get wrong, which take the
    F32 micro-kernel: subnormal products and sums (the instruction flushes them), subnormal inputs,
    a product near overflow, inf and NaN, a bias below 2^-92."""
    import ml_dtypes
    bf, f32 = fk.DType.BF16, fk.DType.F32
    (native,) = [kern for kern in all_kernels(bf, None) if kern.source == "native"]
    (native32,) = [kern for kern in all_kernels(f32, None) if kern.source == "native"]
    linear = {kern.source: kern for kern in linear_kernels(bf)}["native"]
    linear32 = {kern.source: kern for kern in linear_kernels(f32)}["native"]
    tiny = np.float32(2.0 ** -70)
    for case in ("random", "subnormal products", "subnormal inputs", "near overflow", "inf and nan"):
        a, b = bf16_values((m, k), rng), bf16_values((k, n), rng)
        if case == "subnormal products":          # 2^-140 products: F32 sums of subnormals
            a[: m // 2] = (np.abs(a[: m // 2].astype(np.float32)) * tiny).astype(ml_dtypes.bfloat16)
            b[:] = (np.abs(b.astype(np.float32)) * tiny).astype(ml_dtypes.bfloat16)
        elif case == "subnormal inputs":
            a[0, 0] = ml_dtypes.bfloat16(2.0 ** -130)
            b[0] = ml_dtypes.bfloat16(2.0 ** 100)
        elif case == "near overflow":
            a[1, :] = ml_dtypes.bfloat16(2.0 ** 60)
            b[:, 0] = ml_dtypes.bfloat16(2.0 ** 62)
        elif case == "inf and nan":
            a[2, 0], b[0, 1] = np.inf, np.nan
        with fk.threads(1):                       # the serial engine (the pairs); 2: the shared one
            got = native(a, b, out=np.empty((m, n), ml_dtypes.bfloat16))
        assert_bf16_product(got, f32_engine_rounded(lambda x, y: native32(x, y, out=np.empty((m, n), np.float32)), a, b), a, b)
        with fk.threads(2):
            assert_same_bf16(native(a, b, out=np.empty((m, n), ml_dtypes.bfloat16)), got)
        for bias_scale in (1.0, 2.0 ** -100):
            bias = (bf16_values((1, n), rng)[0].astype(np.float32) * bias_scale).astype(ml_dtypes.bfloat16)
            with fk.threads(1):
                got = linear(a, b, bias, out=np.empty((m, n), ml_dtypes.bfloat16))
            want = f32_engine_rounded(lambda x, y, z: linear32(x, y, z, out=np.empty((m, n), np.float32)), a, b, bias)
            assert_bf16_product(got, want, a, b, bias)
            with fk.threads(2):
                assert_same_bf16(linear(a, b, bias, out=np.empty((m, n), ml_dtypes.bfloat16)), want)


@pytest.mark.parametrize("m", (1, 2, 3, 4))
def test_bf16_few_rows_stream_bs_own_rows(m, rng):
    """BF16 products of at most 4 rows read B's own BF16 rows, widened as they are read (half the
    bytes of F32 panels): the bits of the F32 product of the same values, rounded to BF16, over two
    K blocks (K = 1000), columns past the vector strips (N = 77), B's rows strided, reversed, offset."""
    import ml_dtypes
    (native,) = [kern for kern in all_kernels(fk.DType.BF16, None) if kern.source == "native"]
    (native32,) = [kern for kern in all_kernels(fk.DType.F32, None) if kern.source == "native"]
    a, big = bf16_values((m, 1000), rng), bf16_values((2000, 90), rng)
    assert gemm_k_blocks(fk.DType.BF16, 1000) == 2
    for b in (big[:1000, :77], big[::2, 3:80], big[::-2, 13:]):
        got = native(a, b, out=np.empty((m, 77), ml_dtypes.bfloat16))
        assert_same_bf16(got, f32_engine_rounded(lambda x, y: native32(x, y, out=np.empty((m, 77), np.float32)), a, b))


def test_bf16_subnormal_sums_are_kept(rng):
    """A product whose every sum is an F32 subnormal (AVX512_BF16's dot product would flush it to
    zero) keeps its value: 300 products of 2^-70 x 2^-70 are 300 x 2^-140."""
    import ml_dtypes
    (native,) = [kern for kern in all_kernels(fk.DType.BF16, None) if kern.source == "native"]
    a = np.full((32, 300), 2.0 ** -70, ml_dtypes.bfloat16)
    b = np.full((300, 40), 2.0 ** -70, ml_dtypes.bfloat16)
    with fk.threads(1):
        got = native(a, b, out=np.empty((32, 40), ml_dtypes.bfloat16)).astype(np.float64)
    np.testing.assert_array_equal(got, np.float64(ml_dtypes.bfloat16(300 * 2.0 ** -140)))
