"""Reductions against NumPy / exact oracles: every binding, every layout, awkward shapes, NaN rules,
the precision claims, and error paths that must leave the caller's output untouched."""
import math
import warnings

import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from support import ARITHMETIC_DTYPES, LAYOUTS, central_difference, make_operand, random_values

OPS = (fk.OpKind.SUM, fk.OpKind.PROD, fk.OpKind.MEAN, fk.OpKind.MAX, fk.OpKind.MIN,
       fk.OpKind.ARGMAX, fk.OpKind.ARGMIN)


def out_dtype(op, dtype):
    if op in (fk.OpKind.ARGMAX, fk.OpKind.ARGMIN):
        return fk.DType.I64
    if op in (fk.OpKind.SUM, fk.OpKind.PROD):
        return dtype if dtype.is_float else fk.DType.I64
    if op == fk.OpKind.MEAN:
        return dtype if dtype.is_float else fk.DType.F64
    return dtype


CASES = [(op, dt) for op in OPS for dt in ARITHMETIC_DTYPES]   # not the FP8 storage formats
# (shape, dims, keepdim); dims () = every dim
SHAPES = [((5, 7), (), False), ((5, 7), (1,), False), ((3, 4, 5), (0, 2), True),
          ((3, 4, 5), (-1,), False), ((3, 4, 5), (1, 0), False), ((6,), (0,), False),
          ((1, 13), (0,), True), ((2, 0, 3), (0,), False), ((0, 3), (1,), False), ((), (), False),
          ((2, 3, 2, 3), (1, 3), False),
          # column-style (outer) reductions and long contiguous rows (vector-lane paths)
          ((9, 11), (0,), False), ((4, 3, 10), (0, 1), True), ((3, 130), (1,), False)]


def normalize(shape, dims):
    return tuple(range(len(shape))) if not dims else tuple(sorted(d % len(shape) for d in dims))


def moved(x, dims):
    """x with the reduced dims flattened (in C order) onto one trailing axis."""
    keep = [d for d in range(x.ndim) if d not in dims]
    y = np.transpose(x, keep + list(dims))
    count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    return y.reshape(y.shape[:len(keep)] + (count,))


def expected_shape(shape, dims, keepdim):
    return tuple(1 if d in dims else s for d, s in enumerate(shape) if keepdim or d not in dims)


def exact_rows(x, dims, fn):
    flat = moved(np.asarray(x, dtype=np.float64), dims)
    rows = flat.reshape(int(np.prod(flat.shape[:-1], dtype=np.int64)), flat.shape[-1])
    return np.array([fn(r) for r in rows], dtype=np.float64).reshape(flat.shape[:-1])


def fsum_or_nan(row):
    if np.isfinite(row).all():
        return math.fsum(row)
    with np.errstate(invalid="ignore"):
        return float(np.sum(row))


def oracle(op, x, dtype, dims):
    """(expected values as float64 or ints, abs bound per element or None for exact)."""
    x = np.asarray(x)
    if op in (fk.OpKind.ARGMAX, fk.OpKind.ARGMIN):
        flat = moved(x.astype(np.float64) if dtype.is_float else x, dims)
        return (np.argmax if op == fk.OpKind.ARGMAX else np.argmin)(flat, axis=-1), None
    if op in (fk.OpKind.MAX, fk.OpKind.MIN):
        fn = np.max if op == fk.OpKind.MAX else np.min
        src = x.astype(np.float64) if dtype.is_float else x
        return fn(src, axis=dims).astype(x.dtype), None
    if not dtype.is_float and op in (fk.OpKind.SUM, fk.OpKind.PROD):
        fn = np.sum if op == fk.OpKind.SUM else np.prod
        return fn(x.astype(np.int64), axis=dims, dtype=np.int64), None
    return None, None


def run(kernel, x, shape_out, dtype_out, params):
    out = np.full(shape_out, 7, dtype=dtype_out.numpy)
    kernel(x, out=out, params=params)
    return out


@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in CASES])
def test_reduce_binding(op, dtype, rng):
    table = fk.bindings()
    dts = [dtype, out_dtype(op, dtype)]
    kernels = table.alternatives(op, dts, fk.Backend.CPU)
    assert kernels, f"no kernel for {op.short_name} {dts}"
    for kernel in kernels:
        assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
        claim = kernel.precision
        for shape, dims, keepdim in SHAPES:
            nd = normalize(shape, dims)
            params = fk.params.reduce(dims, keepdim)
            oshape = expected_shape(shape, nd, keepdim)
            for layout in LAYOUTS if shape else ("contiguous",):   # support.make_operand: no 0-d views
                x = make_operand(shape, dtype, layout, rng)
                count = int(np.prod([shape[d] for d in nd], dtype=np.int64))
                if count == 0 and int(np.prod(oshape, dtype=np.int64)) > 0 and op in (
                        fk.OpKind.MAX, fk.OpKind.MIN, fk.OpKind.ARGMAX, fk.OpKind.ARGMIN):
                    out = np.full(oshape, 7, dtype=dts[1].numpy)
                    with pytest.raises(fk.ShapeError):
                        kernel(x, out=out, params=params)
                    assert (out == 7).all()
                    continue
                got = run(kernel, x, oshape, dts[1], params)
                with np.errstate(all="ignore"):
                    check(op, dtype, dts[1], x, nd, keepdim, got, claim, (shape, dims, layout))


def check(op, dtype, odt, x, nd, keepdim, got, claim, where):
    oshape = got.shape
    exact, _ = oracle(op, x, dtype, nd)
    if exact is not None:
        exact = np.asarray(exact).reshape(oshape)
        if odt.is_float:
            g = got.astype(np.float64)
            e = exact.astype(np.float64)
            assert (np.isnan(g) == np.isnan(e)).all(), where
            assert (g[~np.isnan(e)] == e[~np.isnan(e)]).all(), where
        else:
            np.testing.assert_array_equal(got, exact, err_msg=str(where))
        assert claim.exact
        return
    # float SUM / MEAN / PROD and int MEAN: the stated bound against an exact oracle
    count = int(np.prod([x.shape[d] for d in nd], dtype=np.int64))
    g = got.astype(np.float64).reshape(-1)
    if op == fk.OpKind.PROD:
        e = exact_rows(x, nd, lambda r: float(np.prod(r.astype(np.longdouble)))).reshape(-1)
        scale = np.abs(e)
    else:
        e = exact_rows(x, nd, fsum_or_nan).reshape(-1)
        scale = exact_rows(x, nd, lambda r: math.fsum(np.abs(r)) if np.isfinite(r).all() else 0.0).reshape(-1)
        if op == fk.OpKind.MEAN:
            e = e / count if count else np.full_like(e, np.nan)
            scale = scale / max(count, 1)
    e_cast = e.astype(odt.numpy).astype(np.float64)
    nonfinite = ~np.isfinite(e_cast)
    assert (np.isnan(g) == np.isnan(e_cast)).all(), where
    assert (g[nonfinite & ~np.isnan(e_cast)] == e_cast[nonfinite & ~np.isnan(e_cast)]).all(), where
    fin = np.isfinite(e_cast)
    bound = claim.max_rel * scale[fin] + claim.max_abs
    err = np.abs(g[fin] - e[fin])
    assert (err <= bound).all(), (where, err.max(), bound.min())


@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.F64, fk.DType.F16, fk.DType.BF16])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "negative"])
def test_long_float_sum_and_mean_meet_the_claim(dtype, layout, rng):
    n = 100_003                                        # prime: ragged leaves and lanes
    scale = 1.0 if dtype == fk.DType.F16 else 100.0        # keep the F16 sum below 65504
    values = (rng.standard_normal(n) * scale + 0.3 * scale).astype(dtype.numpy)
    x = make_operand((n,), dtype, layout, rng, values=values)
    exact = math.fsum(values.astype(np.float64))
    scale = math.fsum(np.abs(values.astype(np.float64)))
    for op in (fk.OpKind.SUM, fk.OpKind.MEAN):
        k = fk.bindings().lookup(op, [dtype, dtype], fk.Backend.CPU)
        got = float(run(k, x, (), dtype, fk.params.reduce(())))
        div = n if op == fk.OpKind.MEAN else 1
        assert abs(got - exact / div) <= k.precision.max_rel * scale / div + k.precision.max_abs


def test_sum_over_strided_dims_of_a_big_tensor_is_pairwise_accurate(rng):
    x = rng.standard_normal((257, 3, 129)).astype(np.float32)[:, ::2, ::-1]
    k = fk.bindings().lookup(fk.OpKind.SUM, [fk.DType.F32] * 2, fk.Backend.CPU)
    got = run(k, x, (2,), fk.DType.F32, fk.params.reduce((0, 2)))
    for j in range(2):
        col = x[:, j, :].astype(np.float64).ravel()
        assert abs(got[j] - math.fsum(col)) <= k.precision.max_rel * math.fsum(np.abs(col))


def test_nan_rules_match_numpy():
    x = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 3.0, 3.0, -1.0], [np.inf, 0.0, np.inf, -np.inf]],
                 dtype=np.float32)
    t = fk.bindings()
    F, I = fk.DType.F32, fk.DType.I64
    p = fk.params.reduce((1,))
    got = run(t.lookup(fk.OpKind.MAX, [F, F], 0), x, (3,), F, p)
    np.testing.assert_array_equal(got, np.max(x, axis=1))
    got = run(t.lookup(fk.OpKind.MIN, [F, F], 0), x, (3,), F, p)
    np.testing.assert_array_equal(got, np.min(x, axis=1))
    got = run(t.lookup(fk.OpKind.ARGMAX, [F, I], 0), x, (3,), I, p)
    np.testing.assert_array_equal(got, np.argmax(x, axis=1))
    got = run(t.lookup(fk.OpKind.ARGMIN, [F, I], 0), x, (3,), I, p)
    np.testing.assert_array_equal(got, np.argmin(x, axis=1))
    got = run(t.lookup(fk.OpKind.SUM, [F, F], 0), x, (3,), F, p)
    with np.errstate(invalid="ignore"):                       # inf + -inf in the last row
        np.testing.assert_array_equal(got, np.sum(x, axis=1))


ARG_CASES = [(op, dt) for op in (fk.OpKind.ARGMAX, fk.OpKind.ARGMIN) for dt in ARITHMETIC_DTYPES]


@pytest.mark.parametrize("op,dtype", ARG_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in ARG_CASES])
def test_arg_select_last_index(op, dtype, rng):
    """select_last_index (ONNX's): the last extremum, or the last NaN, as n - 1 - np.argmax of the
    reversed flat row (oracles.arg_extremum), on every layout; few distinct values so ties are common,
    and the "one" (row), "outer" (column) and vector-lane paths all run."""
    kernel = fk.bindings().lookup(op, [dtype, fk.DType.I64], fk.Backend.CPU)
    name = op.name.lower()
    for shape, dims, keepdim in SHAPES:
        nd = normalize(shape, dims)
        count = int(np.prod([shape[d] for d in nd], dtype=np.int64))
        oshape = expected_shape(shape, nd, keepdim)
        if count == 0 and int(np.prod(oshape, dtype=np.int64)) > 0:
            continue
        for n, layout in enumerate(LAYOUTS if shape else ("contiguous",)):
            values = rng.integers(0, 3, shape) if n % 2 == 0 else None
            x = make_operand(shape, dtype, layout, rng, values=values)
            for last in (False, True):
                got = run(kernel, x, oshape, fk.DType.I64, fk.params.reduce(dims, keepdim, select_last_index=last))
                src = moved(x.astype(np.float64) if dtype.is_float else
                            (x.astype(np.uint8) if dtype == fk.DType.BOOL else x), nd)
                want = oracles.arg_extremum(src, name, last).reshape(oshape)
                np.testing.assert_array_equal(got, want, err_msg=str((shape, dims, layout, last)))


@pytest.mark.parametrize("dtype", [fk.DType.F16, fk.DType.BF16, fk.DType.F32, fk.DType.F64])
def test_arg_select_last_index_nan_and_signed_zero(dtype):
    """The last NaN wins over any number (today's first-NaN rule, mirrored); -0.0 ties with 0.0."""
    nan, inf = float("nan"), float("inf")
    x = np.array([[1.0, nan, 5.0, nan, 2.0], [0.0, -0.0, -inf, -0.0, -inf], [inf, 3.0, inf, -1.0, 0.0]],
                 dtype.numpy)
    t = fk.bindings()
    last = fk.params.reduce((1,), select_last_index=True)
    got = run(t.lookup(fk.OpKind.ARGMAX, [dtype, fk.DType.I64], 0), x, (3,), fk.DType.I64, last)
    np.testing.assert_array_equal(got, [3, 3, 2])
    got = run(t.lookup(fk.OpKind.ARGMIN, [dtype, fk.DType.I64], 0), x, (3,), fk.DType.I64, last)
    np.testing.assert_array_equal(got, [3, 4, 3])
    first = fk.params.reduce((1,))
    got = run(t.lookup(fk.OpKind.ARGMAX, [dtype, fk.DType.I64], 0), x, (3,), fk.DType.I64, first)
    np.testing.assert_array_equal(got, [1, 0, 0])


def test_arg_select_last_index_same_bits_for_every_thread_count(rng):
    """A call large enough for the REDUCE split (kept-axis blocks): same indices at 1..4 threads."""
    x = rng.integers(0, 4, (3000, 64)).astype(np.float32)
    k = fk.bindings().lookup(fk.OpKind.ARGMAX, ["f32", "i64"], fk.Backend.CPU)
    params = fk.params.reduce((1,), select_last_index=True)
    want = oracles.arg_extremum(x, "argmax", True)
    for threads in (1, 2, 3, 4):
        with fk.threads(threads):
            np.testing.assert_array_equal(run(k, x, (3000,), fk.DType.I64, params), want)


@pytest.mark.parametrize("op", [fk.OpKind.SUM, fk.OpKind.MAX, fk.OpKind.MIN, fk.OpKind.MEAN, fk.OpKind.PROD])
def test_select_last_index_is_refused_by_the_other_reductions(op, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    k = fk.bindings().lookup(op, [fk.DType.F32, fk.DType.F32], fk.Backend.CPU)
    out = np.full((3,), 7.0, dtype=np.float32)
    with pytest.raises(fk.ParamsError, match="select_last_index"):
        k(x, out=out, params=fk.params.reduce((1,), select_last_index=True))
    assert (out == 7.0).all()
    assert fk.params.reduce((1,)).fields()["select_last_index"] is False


def test_select_last_index_through_dispatch_and_graph(rng):
    x = rng.integers(0, 3, (4, 9)).astype(np.int32)
    want = oracles.arg_extremum(x, "argmin", True)
    got = fk.dispatch(fk.OpKind.ARGMIN, [x], params=fk.params.reduce((1,), select_last_index=True))
    np.testing.assert_array_equal(got, want)
    from fuel_kernel.graph import Graph
    g = Graph()
    gx = g.input((4, 9), "i32")
    out = g.argmin(gx, dims=(1,), select_last_index=True)
    np.testing.assert_array_equal(g.compile([out]).run([x])[0], want)


def test_dispatch_allocates_with_the_schema(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    out = fk.dispatch(fk.OpKind.SUM, [x], params=fk.params.reduce((-1,), keepdim=True))
    assert out.shape == (4, 1) and out.dtype == np.float32
    out = fk.dispatch(fk.OpKind.ARGMAX, [x], params=fk.params.reduce((0,)))
    assert out.dtype == np.int64 and (out == x.argmax(0)).all()
    out = fk.dispatch(fk.OpKind.MEAN, [np.arange(10, dtype=np.int16)])
    assert out.dtype == np.float64 and out == 4.5


def test_integer_sum_wraps_like_numpy():
    x = np.full(4, np.iinfo(np.int64).max, dtype=np.int64)
    k = fk.bindings().lookup(fk.OpKind.SUM, [fk.DType.I64] * 2, 0)
    with np.errstate(over="ignore"):
        assert run(k, x, (), fk.DType.I64, None) == x.sum()


@pytest.mark.parametrize("problem", ["dtype", "shape", "rank", "dim", "dup", "params", "readonly", "alias"])
def test_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    k = fk.bindings().lookup(fk.OpKind.SUM, [fk.DType.F32] * 2, fk.Backend.CPU)
    out = np.full((3,), 7.0, dtype=np.float32)
    params = fk.params.reduce((1,))
    error = {"dtype": fk.DTypeError, "shape": fk.ShapeError, "rank": fk.ShapeError,
             "dim": fk.ParamsError, "dup": fk.ParamsError, "params": fk.ParamsError,
             "readonly": fk.ReadOnlyError, "alias": fk.AliasError}[problem]
    if problem == "dtype":
        out = np.full((3,), 7.0, dtype=np.float64)
    elif problem == "shape":
        out = np.full((4,), 7.0, dtype=np.float32)
    elif problem == "rank":
        out = np.full((3, 1), 7.0, dtype=np.float32)
    elif problem == "dim":
        params = fk.params.reduce((2,))
    elif problem == "dup":
        params = fk.params.reduce((1, -1))          # the same dim twice, spelled two ways
    elif problem == "params":
        params = fk.params.norm_last_dim(1e-5)
    elif problem == "readonly":
        out.setflags(write=False)
    elif problem == "alias":
        out = x[:, 0]
    before = out.copy()
    with pytest.raises(error):
        k(x, out=out, params=params)
    np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.F64, fk.DType.BF16])
def test_long_column_sums_meet_the_claim(dtype, rng):
    """Reducing the slow axis walks rows once into per-column accumulators, merged pairwise."""
    values = (rng.standard_normal((3001, 19)) * 10 + 1).astype(dtype.numpy)
    for layout in ("contiguous", "negative"):
        x = make_operand(values.shape, dtype, layout, rng, values=values)
        for op in (fk.OpKind.SUM, fk.OpKind.MEAN):
            k = fk.bindings().lookup(op, [dtype, dtype], fk.Backend.CPU)
            got = run(k, x, (19,), dtype, fk.params.reduce((0,)))
            for j in range(19):
                col = values[:, j].astype(np.float64)
                div = len(col) if op == fk.OpKind.MEAN else 1
                bound = k.precision.max_rel * math.fsum(np.abs(col)) / div + k.precision.max_abs
                assert abs(float(got[j]) - math.fsum(col) / div) <= bound


@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.F64, fk.DType.I32, fk.DType.U8])
def test_vector_lane_extrema_match_numpy(dtype, rng):
    x = make_operand((37, 301), dtype, "contiguous", rng, special=False)
    t = fk.bindings()
    for op, fn in ((fk.OpKind.MAX, np.max), (fk.OpKind.MIN, np.min), (fk.OpKind.ARGMAX, np.argmax),
                   (fk.OpKind.ARGMIN, np.argmin)):
        odt = fk.DType.I64 if op in (fk.OpKind.ARGMAX, fk.OpKind.ARGMIN) else dtype
        k = t.lookup(op, [dtype, odt], fk.Backend.CPU)
        for axis in (0, 1):
            got = run(k, x, (x.shape[1 - axis],), odt, fk.params.reduce((axis,)))
            np.testing.assert_array_equal(got, fn(x, axis=axis))


# ---- REDUCE_SUM_TO, REDUCE_MAX_TO, REDUCE_MAX_TO_BACKWARD ------------------------------------------
TO_DTYPES = tuple(fk.DType[name] for name in fk.spec.REDUCE_TO_DTYPES)
FLOATS = tuple(fk.DType[name] for name in fk.spec.FLOAT)
TO_CASES = [(op, dt) for op in (fk.OpKind.REDUCE_SUM_TO, fk.OpKind.REDUCE_MAX_TO) for dt in TO_DTYPES]
# (x shape, target shape): leading dims dropped, extents of 1 kept, column- and row-style groups
TO_SHAPES = [((5, 7), (7,)), ((5, 7), (1, 7)), ((5, 7), (5, 1)), ((3, 4, 5), (4, 1)), ((3, 4, 5), ()),
             ((2, 3, 4), (2, 1, 4)), ((9, 11), (11,)), ((3, 130), (3, 1)), ((1, 13), (1, 13)),
             ((4, 1, 6), (1, 1, 6)), ((2, 0, 3), (3,)), ((0, 3), (1, 3)), ((6,), (6,)), ((40, 3, 17), (3, 1))]
COVERED = ({(op, (dt, fk.DType.I64 if op == fk.OpKind.REDUCE_SUM_TO and not dt.is_float else dt))
            for op, dt in TO_CASES} |
           {(fk.OpKind.REDUCE_MAX_TO_BACKWARD, (dt,) * 3) for dt in FLOATS})


def to_axes(shape, target):
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(lead + d for d, t in enumerate(target) if t == 1 and shape[lead + d] != 1)


def to_kernel(op, dtype):
    odt = fk.DType.I64 if op == fk.OpKind.REDUCE_SUM_TO and not dtype.is_float else dtype
    return fk.bindings().lookup(op, [dtype, odt], fk.Backend.CPU), odt


@pytest.mark.parametrize("op,dtype", TO_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in TO_CASES])
def test_reduce_to_binding(op, dtype, rng):
    """Every layout: SUM_TO within the SUM claim of an fsum per group (ints exact, wrapping),
    MAX_TO exactly np.max (NaN propagating)."""
    kernel, odt = to_kernel(op, dtype)
    for shape, target in TO_SHAPES:
        axes = to_axes(shape, target)
        for layout in LAYOUTS:
            x = make_operand(shape, dtype, layout, rng)
            groups = int(np.prod([shape[a] for a in axes], dtype=np.int64))
            out = np.full(target, 7, dtype=odt.numpy)
            where = (shape, target, layout)
            if op == fk.OpKind.REDUCE_MAX_TO and groups == 0 and out.size:
                with pytest.raises(fk.ShapeError):
                    kernel(x, out=out, params=fk.params.reduce_to(target))
                assert (out == 7).all()
                continue
            kernel(x, out=out, params=fk.params.reduce_to(target))
            if op == fk.OpKind.REDUCE_MAX_TO or not dtype.is_float:
                src = x.astype(np.float64) if dtype.is_float else x.astype(np.int64)
                with np.errstate(all="ignore"):
                    fn = np.max if op == fk.OpKind.REDUCE_MAX_TO else np.sum
                    want = fn(src, axis=axes, keepdims=True).reshape(target) if x.size else np.zeros(target)
                got = out.astype(np.float64) if dtype.is_float else out
                if dtype.is_float:
                    assert (np.isnan(got) == np.isnan(want)).all(), where
                    assert (got[~np.isnan(want)] == want[~np.isnan(want)]).all(), where
                else:
                    np.testing.assert_array_equal(got, want.astype(np.int64), err_msg=str(where))
                continue
            with np.errstate(all="ignore"):
                check(fk.OpKind.SUM, dtype, odt, x, axes, True, out.reshape(
                    tuple(1 if d in axes else s for d, s in enumerate(shape))), kernel.precision, where)


@pytest.mark.parametrize("dtype", TO_DTYPES)
def test_reduce_sum_to_is_sum_over_the_dropped_and_unit_dims(dtype, rng):
    """The same code as SUM: bit-equal to SUM with the dims listed and keepdim where the target keeps 1s."""
    x = make_operand((6, 300, 5), dtype, "strided", rng)
    kernel, odt = to_kernel(fk.OpKind.REDUCE_SUM_TO, dtype)
    got = np.empty((300, 1), odt.numpy)
    kernel(x, out=got, params=fk.params.reduce_to((300, 1)))
    want = fk.dispatch(fk.OpKind.SUM, [x], params=fk.params.reduce((0, 2), keepdim=True))
    np.testing.assert_array_equal(got.view(np.uint8), want.reshape(300, 1).view(np.uint8))


def test_reduce_sum_to_is_the_gradient_of_broadcasting(rng):
    """Central finite differences of L(a) = sum(w * broadcast(a)) give REDUCE_SUM_TO(w)."""
    a = rng.standard_normal((3, 1, 4))
    w = rng.standard_normal((2, 3, 5, 4))
    kernel, _ = to_kernel(fk.OpKind.REDUCE_SUM_TO, fk.DType.F64)
    got = np.empty(a.shape)
    kernel(w, out=got, params=fk.params.reduce_to(a.shape))
    numeric = np.empty(a.shape)
    h = 1e-6
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += h
        down[i] -= h
        numeric[i] = (np.sum(w * np.broadcast_to(up, w.shape)) - np.sum(w * np.broadcast_to(down, w.shape))) / (2 * h)
    np.testing.assert_allclose(got, numeric, rtol=1e-7, atol=1e-8)


def test_reduce_to_special_values():
    x = np.array([[1.0, np.nan, 5.0], [np.inf, -np.inf, 2.0], [-0.0, 0.0, -1.0]], dtype=np.float32)
    for op, fn in ((fk.OpKind.REDUCE_MAX_TO, np.max), (fk.OpKind.REDUCE_SUM_TO, np.sum)):
        kernel, _ = to_kernel(op, fk.DType.F32)
        for target, axis in (((3, 1), 1), ((3,), 0)):
            out = np.empty(target, np.float32)
            kernel(x, out=out, params=fk.params.reduce_to(target))
            with np.errstate(invalid="ignore"):
                np.testing.assert_array_equal(out, fn(x, axis=axis).reshape(target))


def max_to_backward_reference(x, dy, axes):
    xf = x.astype(np.float64)
    m = np.max(xf, axis=axes, keepdims=True)
    hit = (xf == m) | (np.isnan(xf) & np.isnan(m))
    count = np.sum(hit, axis=axes, keepdims=True)
    return np.where(hit, np.broadcast_to(dy.astype(np.float64).reshape(m.shape), x.shape) / np.maximum(count, 1), 0.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reduce_max_to_backward_binding(dtype, rng):
    """Every layout of x, dy and dx; ties (repeated small integers) split dy evenly; NaN groups send
    dy to their NaNs; one rounding of the F64 reference (1 ulp, exact for F32/F64 quotients)."""
    kernel = fk.bindings().lookup(fk.OpKind.REDUCE_MAX_TO_BACKWARD, [dtype] * 3, fk.Backend.CPU)
    assert kernel.precision.max_ulp == 1
    for shape, target in TO_SHAPES:
        axes = to_axes(shape, target)
        for layout in LAYOUTS:
            values = rng.integers(-3, 4, shape).astype(np.float64)
            if values.size >= 8:
                values.flat[rng.choice(values.size, 2, replace=False)] = [np.nan, np.inf]
            x = make_operand(shape, dtype, layout, rng, values=values)
            dy = make_operand(target, dtype, layout, rng, special=False) if target else \
                np.asarray(random_values((), dtype, rng, special=False), dtype=dtype.numpy)
            dx_full = np.full(tuple(2 * s + 1 for s in shape), 7, dtype.numpy)
            dx = dx_full[tuple(slice(1, 1 + 2 * s, 2) for s in shape)] if layout == "strided" else \
                np.full(shape, 7, dtype.numpy)
            kernel(x, dy, out=dx, params=fk.params.reduce_to(target))
            want = max_to_backward_reference(x, dy, axes).astype(dtype.numpy) if x.size else np.zeros(shape)
            np.testing.assert_array_equal(dx.astype(np.float64), want.astype(np.float64),
                                          err_msg=str((shape, target, layout)))


def test_reduce_max_to_backward_ties_and_nan():
    x = np.array([[3.0, 1.0, 3.0, 3.0], [np.nan, 2.0, np.nan, 5.0], [-0.0, 0.0, -1.0, -2.0]])
    dy = np.array([[6.0], [4.0], [1.0]])
    kernel = fk.bindings().lookup(fk.OpKind.REDUCE_MAX_TO_BACKWARD, [fk.DType.F64] * 3, fk.Backend.CPU)
    dx = np.empty_like(x)
    kernel(x, dy, out=dx, params=fk.params.reduce_to((3, 1)))
    np.testing.assert_array_equal(dx, [[2.0, 0.0, 2.0, 2.0], [2.0, 0.0, 2.0, 0.0], [0.5, 0.5, 0.0, 0.0]])


def test_reduce_max_to_backward_is_the_gradient_of_reduce_max_to(rng):
    """Distinct values (no ties): central differences of L(x) = sum(dy * REDUCE_MAX_TO(x))."""
    x = rng.permutation(60).reshape(3, 4, 5).astype(np.float64) / 7
    dy = rng.standard_normal((4, 1))
    kernel = fk.bindings().lookup(fk.OpKind.REDUCE_MAX_TO_BACKWARD, [fk.DType.F64] * 3, fk.Backend.CPU)
    got = np.empty_like(x)
    kernel(x, dy, out=got, params=fk.params.reduce_to((4, 1)))
    loss = lambda v: float(np.sum(dy * np.max(v, axis=(0, 2)).reshape(4, 1)))
    numeric = central_difference(loss, x)
    np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("op", [fk.OpKind.REDUCE_SUM_TO, fk.OpKind.REDUCE_MAX_TO, fk.OpKind.REDUCE_MAX_TO_BACKWARD])
@pytest.mark.parametrize("problem", ["dtype", "count", "shape", "target", "params", "readonly", "alias", "dims"])
def test_reduce_to_errors_leave_the_output_untouched(op, problem, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    backward = op == fk.OpKind.REDUCE_MAX_TO_BACKWARD
    F = fk.DType.F32
    kernel = fk.bindings().lookup(op, [F] * (3 if backward else 2), fk.Backend.CPU)
    dy = np.ones((4,), np.float32)
    out = np.full((3, 4) if backward else (4,), 7.0, np.float32)
    inputs = [x, dy] if backward else [x]
    params = fk.params.reduce_to((4,))
    error = {"dtype": fk.DTypeError, "count": fk.OperandCountError, "shape": fk.ShapeError,
             "target": fk.ParamsError, "params": fk.ParamsError, "readonly": fk.ReadOnlyError,
             "alias": fk.AliasError, "dims": fk.ParamsError}[problem]
    if problem == "dtype":
        out = out.astype(np.float64)
    elif problem == "count":
        inputs = inputs + [x]
    elif problem == "shape":
        out = np.full((3, 5) if backward else (3,), 7.0, np.float32)
    elif problem == "target":
        params = fk.params.reduce_to((2,))
    elif problem == "params":
        params = fk.params.reduce((0,))
    elif problem == "readonly":
        out.setflags(write=False)
    elif problem == "alias":
        out = x if backward else x[0]
    elif problem == "dims":
        params = fk.params.reduce_to((1, 1, 3, 4))      # more dims than x has
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)


def test_reduce_to_params_refuse_too_many_dims_and_negative_extents():
    with pytest.raises(fk.ParamsError):
        fk.params.reduce_to((1,) * 9)
    with pytest.raises(fk.ParamsError):
        fk.params.reduce_to((-1,))


@pytest.mark.parametrize("op", [fk.OpKind.REDUCE_SUM_TO, fk.OpKind.REDUCE_MAX_TO])
@pytest.mark.parametrize("target", [(1, 1), (1,), ()])
def test_reduce_to_impossible_sizes_are_refused(op, target):
    """A C caller's stride-0 x of 2**62 x 2**62 elements (NumPy refuses such a view): the reduced
    count overflows int64, FK_ERR_SHAPE, the output untouched."""
    import ctypes
    from capi import KERNEL_FN, Layout, Storage
    kernel, _ = to_kernel(op, fk.DType.F32)
    fn = KERNEL_FN(ctypes.pythonapi.PyCapsule_GetPointer(kernel.capsule(), b"fuel_kernel.kernel"))
    x, out = np.zeros(1, np.float32), np.full(1, 7.0, np.float32)
    storages = (Storage * 2)(Storage(x.ctypes.data, 4, 0, int(fk.DType.F32), 0, 0),
                             Storage(out.ctypes.data, 4, 0, int(fk.DType.F32), 0, 0))
    layouts = (Layout * 2)()
    layouts[0].ndim = 2
    layouts[0].shape[0] = layouts[0].shape[1] = 2 ** 62
    layouts[1].ndim = len(target)
    for d, n in enumerate(target):
        layouts[1].shape[d] = n
    kind = next(p.kind for p in fk.spec.PARAMS if p.name == "reduce_to")
    raw = np.zeros(128, np.uint8)
    raw[:4] = np.frombuffer(np.int32(kind).tobytes(), np.uint8)
    raw[8:12] = np.frombuffer(np.int32(len(target)).tobytes(), np.uint8)
    raw[16:16 + 8 * len(target)] = np.frombuffer(np.array(target, np.int64).tobytes(), np.uint8)
    params = ctypes.create_string_buffer(raw.tobytes(), 1024)
    outputs = ctypes.cast(ctypes.byref(storages, ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
    status = fn(ctypes.cast(storages, ctypes.POINTER(Storage)), 1, outputs, 1, layouts, params)
    assert status == 2 and out[0] == 7.0          # FK_ERR_SHAPE


def test_reduce_to_dispatch_and_schema(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    out = fk.dispatch(fk.OpKind.REDUCE_SUM_TO, [x], params=fk.params.reduce_to((3, 1)))
    assert out.shape == (3, 1) and out.dtype == np.float32
    out = fk.dispatch(fk.OpKind.REDUCE_SUM_TO, [np.arange(6, dtype=np.int32).reshape(2, 3)],
                      params=fk.params.reduce_to((3,)))
    assert out.dtype == np.int64 and out.tolist() == [3, 5, 7]
    with pytest.raises(fk.ShapeError):
        fk.dispatch(fk.OpKind.REDUCE_MAX_TO, [x], params=fk.params.reduce_to((2, 4)))


def column_sum_steps(x):
    """The F32 column sums' documented steps (reduce_kernels.h.in, fk_dsum_outer): rows in groups of
    8 added in F32 in row order, two groups to a 16-row F64 leaf (from +0), leaves merged by a binary
    counter, the stack summed from its top, rounded once to F32."""
    stack, k = [], 0
    for s in range(0, x.shape[0], 16):
        leaf = np.zeros(x.shape[1])
        for g in range(s, min(s + 16, x.shape[0]), 8):
            a = x[g].copy()
            for r in range(g + 1, min(g + 8, s + 16, x.shape[0])):
                a = a + x[r]
            leaf = leaf + a.astype(np.float64)
        t = k + 1
        while t % 2 == 0:
            leaf = stack.pop() + leaf
            t //= 2
        stack.append(leaf)
        k += 1
    total = np.zeros(x.shape[1])
    for level in reversed(stack):
        total = level + total
    return total.astype(np.float32)


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100, 257, 1000])
def test_f32_column_sums_are_the_documented_steps(rows, rng):
    """REDUCE_SUM_TO of F32 columns, and SUM over axis 0 below its parallel chunks' size (dense rows:
    whole 16-row leaves in one pass; strided rows: the group-at-a-time path) give exactly the bits
    of their documented steps."""
    x = (rng.standard_normal((rows, 70)) * 10.0 ** rng.uniform(-4, 4, (1, 70))).astype(np.float32)
    reduce_to = fk.bindings().lookup(fk.OpKind.REDUCE_SUM_TO, [fk.DType.F32] * 2)
    total = fk.bindings().lookup(fk.OpKind.SUM, [fk.DType.F32] * 2)
    for view in (x, x[:, ::2], x[::3]):
        want = column_sum_steps(view.astype(np.float32))
        got = reduce_to(view, out=np.empty(view.shape[1], np.float32), params=fk.params.reduce_to((view.shape[1],)))
        assert got.tobytes() == want.tobytes(), view.strides
        if rows <= 257:
            got = total(view, out=np.empty(view.shape[1], np.float32), params=fk.params.reduce((0,)))
            assert got.tobytes() == want.tobytes(), view.strides
