"""TOPK (two outputs: values and I64 indices along the last dim): every binding over every layout,
every selection path (the sorted buffer for k <= 4, or <= 16 for I64/F64 keys; above that 64-bit rank
words selected and merge-sorted, or for I64/F64 a quickselect of the k-th key and a stable merge sort of
the k chosen), largest and smallest, against NumPy's stable argsort (tests/oracles.py, topk_reference); ties to the lower
index, NaN above every number, -0.0 tied with 0.0; the same bits for every thread count; every
refusal leaving both outputs untouched."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops
import oracles
from support import LAYOUTS, make_operand

OP = fk.OpKind
D = fk.DType
DTYPES = tuple(D[name] for name in fk.spec.NUMERIC)
COVERED = {(OP.TOPK, (dt, dt, D.I64)) for dt in DTYPES}
SHAPES = [(5, 7), (3, 40), (2, 3, 100), (1,), (4, 1), (0, 5), (3, 0), (300,), (2, 700)]


def ks(n):
    return sorted({0, min(1, n), min(3, n), min(4, n), min(5, n), min(16, n), min(17, n), min(256, n), n // 2, n - 1,
                   n} - {-1})


def call(kernel, x, k, largest, sorted_=True, outs=None):
    shape = x.shape[:-1] + (k,)
    values = np.full(shape, 5, x.dtype) if outs is None else outs[0]
    indices = np.full(shape, -7, np.int64) if outs is None else outs[1]
    kernel(x, out=(values, indices), params=fk.params.topk(k, largest=largest, sorted=sorted_))
    return values, indices


def same(got, want):
    """Bitwise equal (NaN payloads aside) and the same signs of zero."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        g, w = got.astype(np.float64), want.astype(np.float64)
        return (np.isnan(g) == np.isnan(w)).all() and (g[~np.isnan(g)] == w[~np.isnan(w)]).all() and \
            (np.signbit(g) == np.signbit(w))[~np.isnan(g)].all()
    return np.array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short_name)
def test_binding(dtype, rng):
    kernel = fk.bindings().lookup(OP.TOPK, [dtype, dtype, D.I64], fk.Backend.CPU)
    assert kernel.n_outputs == 2 and kernel.has_cost and kernel.precision.max_rel == 0
    for shape in SHAPES:
        for n, layout in enumerate(LAYOUTS):
            # every other layout takes few distinct values, so that ties are common
            values = rng.integers(0, 4, shape) if n % 2 else None
            x = make_operand(shape, dtype, layout, rng, values=values)
            for k in ks(shape[-1]):
                for largest in (True, False):
                    values, indices = call(kernel, x, k, largest)
                    want_values, want_indices = oracles.topk_reference(x, k, largest)
                    where = (shape, layout, k, largest)
                    np.testing.assert_array_equal(indices, want_indices, err_msg=str(where))
                    assert same(values, want_values), where


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short_name)
def test_ties_pick_the_lower_index(dtype, rng):
    kernel = fk.bindings().lookup(OP.TOPK, [dtype, dtype, D.I64], fk.Backend.CPU)
    x = rng.integers(0, 3, (4, 400)).astype(dtype.numpy)
    for k in (5, 16, 17, 50, 300):
        for largest in (True, False):
            _, indices = call(kernel, x, k, largest)
            np.testing.assert_array_equal(indices, oracles.topk_reference(x, k, largest)[1])
            got = x[np.arange(4)[:, None], indices].astype(np.float64)
            for r in range(4):       # equal values appear in increasing index order
                for v in np.unique(got[r]):
                    assert (np.diff(indices[r][got[r] == v]) > 0).all()


@pytest.mark.parametrize("dtype", [D.F16, D.BF16, D.F32, D.F64], ids=lambda d: d.short_name)
def test_nan_ranks_above_every_number(dtype):
    kernel = fk.bindings().lookup(OP.TOPK, [dtype, dtype, D.I64], fk.Backend.CPU)
    nan, inf = float("nan"), float("inf")
    x = np.array([1.0, nan, inf, -0.0, nan, 0.0, -inf, 2.0], dtype.numpy)
    for k in (3, 8):
        values, indices = call(kernel, x, k, True)
        np.testing.assert_array_equal(indices, [1, 4, 2, 7, 0, 3, 5, 6][:k])
        values, indices = call(kernel, x, k, False)
        np.testing.assert_array_equal(indices, [6, 3, 5, 0, 7, 2, 1, 4][:k])
    # the selection path (k > 16) on a row with NaNs and signed zeros: k-th keys that are NaN, a
    # zero of either sign, an infinity, and a number
    row = np.tile(x, 40)
    for k in (17, 50, 79, 81, 121, 160, 200, 300, 319, 320):
        for largest in (True, False):
            values, indices = call(kernel, row, k, largest)
            want_values, want_indices = oracles.topk_reference(row, k, largest)
            np.testing.assert_array_equal(indices, want_indices, err_msg=f"k={k} largest={largest}")
            assert same(values, want_values)


@pytest.mark.parametrize("dtype", [D.I32, D.F32], ids=lambda d: d.short_name)
def test_selection_on_ordered_and_constant_rows(dtype):
    """Rows sorted either way, constant rows and organ-pipe rows: the quickselect's pivots see their
    worst layouts, and the result is still the oracle's."""
    kernel = fk.bindings().lookup(OP.TOPK, [dtype, dtype, D.I64], fk.Backend.CPU)
    n = 1000
    ramp = np.arange(n)
    rows = np.stack([ramp, ramp[::-1], np.zeros(n, np.int64), np.minimum(ramp, n - 1 - ramp),
                     np.abs(ramp - n // 2), ramp % 7]).astype(dtype.numpy)
    for k in (17, 100, 499, 500, 999, 1000):
        for largest in (True, False):
            values, indices = call(kernel, rows, k, largest)
            want_values, want_indices = oracles.topk_reference(rows, k, largest)
            np.testing.assert_array_equal(indices, want_indices, err_msg=f"k={k} largest={largest}")
            assert same(values, want_values)


def test_sorted_false_gives_the_sorted_result(rng):
    kernel = fk.bindings().lookup(OP.TOPK, ["f32", "f32", "i64"], fk.Backend.CPU)
    x = rng.standard_normal((3, 400)).astype(np.float32)
    for k in (4, 20, 300):
        a = call(kernel, x, k, True, sorted_=False)
        b = call(kernel, x, k, True, sorted_=True)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_output_layouts_dispatch_and_graph(rng):
    x = rng.standard_normal((4, 33)).astype(np.float64)
    params = fk.params.topk(5, largest=False)
    values, indices = fk.dispatch(OP.TOPK, [x], params=params)
    assert values.dtype == np.float64 and indices.dtype == np.int64 and values.shape == (4, 5)
    want_values, want_indices = oracles.topk_reference(x, 5, False)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    outs = (np.zeros((4, 10))[:, ::-2], np.zeros((4 * 5 + 3,), np.int64)[3:].reshape(4, 5))
    fk.dispatch(OP.TOPK, [x], outs, params=params)
    np.testing.assert_array_equal(outs[0], want_values)
    np.testing.assert_array_equal(outs[1], want_indices)
    from fuel_kernel.graph import Graph
    g = Graph()
    gx = g.input((4, 33), "f64")
    gv, gi = g.topk(gx, params=params)
    got_values, got_indices = g.compile([gv, gi]).run([x])
    np.testing.assert_array_equal(got_values, want_values)
    np.testing.assert_array_equal(got_indices, want_indices)


def test_same_bits_for_every_thread_count(rng):
    """A call large enough to be cut into row blocks (spec.SPLIT_RULES ROWS_1)."""
    from fuel_kernel import _dispatch
    x = rng.integers(-50, 50, (2000, 100)).astype(np.float32)
    kernel = fk.bindings().lookup(OP.TOPK, ["f32", "f32", "i64"], fk.Backend.CPU)
    with fk.threads(1):
        want = call(kernel, x, 40, True)
    for threads in (2, 3, 4):
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            got = call(kernel, x, 40, True)
        assert _dispatch._parallel_calls() > calls
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_refusals_leave_outputs_untouched():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    kernel = fk.bindings().lookup(OP.TOPK, ["f32", "f32", "i64"], fk.Backend.CPU)

    def refused(inputs, outs, error, params, match=None):
        before = [np.array(o, copy=True) for o in outs]
        with pytest.raises(error, match=match):
            kernel(*inputs, out=tuple(outs), params=params)
        for o, b in zip(outs, before):
            np.testing.assert_array_equal(o, b)

    v, i = np.full((3, 2), 9, np.float32), np.full((3, 2), 9, np.int64)
    good = fk.params.topk(2)
    refused([x], [v, i], fk.ShapeError, fk.params.topk(5), match="exceeds")        # k > n
    refused([x], [v, i], fk.ParamsError, None)
    refused([x], [v, i], fk.ParamsError, fk.params.reduce((0,)))
    refused([x], [v], fk.OperandCountError, good)
    refused([x, x], [v, i], fk.OperandCountError, good)
    refused([x], [v, i.astype(np.int32)], fk.DTypeError, good)
    refused([x], [v.astype(np.float64), i], fk.DTypeError, good)
    refused([x.astype(np.float64)], [v, i], fk.DTypeError, good)
    refused([x], [v[:2], i[:2]], fk.ShapeError, good)
    refused([x], [v, i[:, :1]], fk.ShapeError, good)
    refused([np.array(3, np.float32)], [v, i], fk.ShapeError, good)                            # 0-d x
    locked = i.copy()
    locked.flags.writeable = False
    refused([x], [v, locked], fk.ReadOnlyError, good)
    refused([x], [x[:, :2], i], fk.AliasError, good)
    shared = np.zeros(12, np.int64)
    refused([x], [v, np.broadcast_to(shared[:1], (3, 2))], fk.FuelKernelError, good)
    with pytest.raises(fk.ParamsError):
        fk.params.topk(-1)
    with pytest.raises(fk.ParamsError):
        fk.params.topk(1.5)
    with pytest.raises(fk.ShapeError):
        ops.infer_output_shapes(OP.TOPK, [(3, 4)], fk.params.topk(5))
    with pytest.raises(fk.NoKernelError):
        fk.bindings().lookup(OP.TOPK, ["bool", "bool", "i64"], fk.Backend.CPU)


def test_huge_stride_zero_row_is_refused_before_any_write():
    """A row of 2**62 broadcast elements: its scratch (17 bytes an element) overflows, a ShapeError."""
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (1, 2 ** 62), (0, 0))
    v, i = np.full((1, 1), 9, np.int8), np.full((1, 1), 9, np.int64)
    with pytest.raises(fk.ShapeError):
        fk.dispatch(OP.TOPK, [x], (v, i), params=fk.params.topk(1))
    assert v[0, 0] == 9 and i[0, 0] == 9
