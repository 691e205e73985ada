"""CPU indexing kernels (fuel_kernel/cpu/_index) against NumPy: every dtype, index dtype and layout;
out-of-range indices raise IndexError naming the index and its position and write nothing.  SCATTER
(reductions none / max / min / mul) against a plain loop with the documented duplicate rule
(oracles.scatter_reference), NONZERO (two outputs) against np.nonzero, each with its refusals."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
import oracles
from oracles import add_at
from support import ALL_DTYPES, ARITHMETIC_DTYPES, LAYOUTS, assert_same, make_operand, np_dtype, random_values

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
INDEX_DTYPES = (D.I32, D.I64)


def kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), CPU)


def indices(shape, extent, dtype, layout, rng):
    values = rng.integers(0, extent, shape)
    return make_operand(shape, dtype, layout, rng, values=values)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("itype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_index_select(dtype, itype, layout, rng):
    x = make_operand((5, 6, 3), dtype, layout, rng)
    for axis in (0, 1, 2, -1):
        idx = indices((7,), x.shape[axis], itype, layout, rng)
        out = kernel(OP.INDEX_SELECT, [dtype, itype, dtype])(x, idx, params=P.index_select(axis))
        assert_same(out, np.take(x, idx, axis=axis), dtype)
        strided = make_operand(out.shape, dtype, "transposed", rng)
        kernel(OP.INDEX_SELECT, [dtype, itype, dtype])(x, idx, out=strided, params=P.index_select(axis))
        assert_same(strided, np.take(x, idx, axis=axis), dtype)


@pytest.mark.parametrize("row", [1, 2, 3, 4, 8, 16, 24])
def test_index_select_contiguous_row_sizes(row, rng):
    x = rng.integers(0, 1000, (9, row)).astype(np.int32)
    idx = rng.integers(0, 9, 20)
    assert_same(fk.dispatch(OP.INDEX_SELECT, [x, idx], params=P.index_select(0)), np.take(x, idx, 0), D.I32)
    x8 = x.astype(np.uint8)
    assert_same(fk.dispatch(OP.INDEX_SELECT, [x8, idx], params=P.index_select(0)), np.take(x8, idx, 0), D.U8)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("itype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gather(dtype, itype, layout, rng):
    x = make_operand((5, 6, 4), dtype, layout, rng)
    for axis in (0, 1, 2):
        shape = [4, 5, 3]
        shape[axis] = 7
        idx = indices(tuple(shape), x.shape[axis], itype, layout, rng)
        out = kernel(OP.GATHER, [dtype, itype, dtype])(x, idx, params=P.gather(axis))
        sub = x[tuple(slice(0, s) if d != axis else slice(None) for d, s in enumerate(shape))]
        assert_same(out, np.take_along_axis(sub, idx.astype(np.int64), axis=axis), dtype)


def test_gather_1d_is_take(rng):
    x = rng.standard_normal(100).astype(np.float32)
    for itype in (np.int32, np.int64):
        idx = rng.integers(0, 100, 1000).astype(itype)
        assert_same(fk.dispatch(OP.GATHER, [x, idx], params=P.gather(0)), np.take(x, idx), D.F32)


@pytest.mark.parametrize("dtype", ARITHMETIC_DTYPES)
@pytest.mark.parametrize("itype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scatter_add(dtype, itype, layout, rng):
    x = make_operand((5, 6, 4), dtype, layout, rng, special=False)
    for axis in (0, 1, 2):
        shape = [4, 5, 3]
        shape[axis] = 9
        idx = indices(tuple(shape), x.shape[axis], itype, layout, rng)
        src = make_operand((9, 9, 9), dtype, "contiguous", rng, special=False)[tuple(slice(0, s) for s in shape)]
        out = kernel(OP.SCATTER_ADD, [dtype, itype, dtype, dtype])(x, idx, src, params=P.scatter(axis))
        grid = np.indices(shape)
        target = [grid[d] for d in range(3)]
        target[axis] = idx.astype(np.int64)
        expected = add_at(x, tuple(target), src)
        assert_same(out, expected, dtype)


@pytest.mark.parametrize("dtype", ARITHMETIC_DTYPES)
@pytest.mark.parametrize("itype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_index_add(dtype, itype, layout, rng):
    x = make_operand((5, 6, 4), dtype, layout, rng, special=False)
    for axis in (0, 1, 2):
        idx = indices((8,), x.shape[axis], itype, "contiguous", rng)
        shape = list(x.shape)
        shape[axis] = 8
        src = make_operand(tuple(shape), dtype, layout, rng, special=False)
        out = kernel(OP.INDEX_ADD, [dtype, itype, dtype, dtype])(x, idx, src, params=P.scatter(axis))
        expected = add_at(x, (slice(None),) * axis + (idx.astype(np.int64),), src)
        assert_same(out, expected, dtype)


def test_scatter_and_index_add_in_place(rng):
    x = rng.standard_normal((4, 3))
    idx = np.array([[0, 2, 2]])
    src = np.ones((1, 3))
    expected = add_at(x, (idx, np.indices((1, 3))[1]), src)
    kernel(OP.SCATTER_ADD, [D.F64, D.I64, D.F64, D.F64])(x, idx, src, out=x, params=P.scatter(0))
    assert_same(x, expected, D.F64)
    before = x.copy()
    kernel(OP.INDEX_ADD, [D.F64, D.I64, D.F64, D.F64])(x, np.array([1, 1]), np.ones((2, 3)), out=x, params=P.scatter(0))
    before[1] += 2
    assert_same(x, before, D.F64)


def test_scatter_add_output_may_not_alias_src(rng):
    x = np.zeros((4,), np.float64)
    src = np.ones((4,), np.float64)
    idx = np.array([0, 1, 2, 3])
    with pytest.raises(fk.AliasError):
        kernel(OP.SCATTER_ADD, [D.F64, D.I64, D.F64, D.F64])(x, idx, src, out=src, params=P.scatter(0))
    assert (src == 1).all()


# ---- out-of-range indices: IndexError naming the value and position, output untouched ----------------
@pytest.mark.parametrize("bad", [-1, 5, 2**31 - 1])
@pytest.mark.parametrize("itype", INDEX_DTYPES)
def test_out_of_range_index_select(bad, itype, rng):
    x = make_operand((5, 3), D.F32, "contiguous", rng)
    idx = np.array([0, 4, bad, 1], dtype=np_dtype(itype))
    out = np.full((4, 3), 7.0, np.float32)
    with pytest.raises(IndexError, match=rf"index {bad} at position \(2,\)"):
        kernel(OP.INDEX_SELECT, [D.F32, itype, D.F32])(x, idx, out=out, params=P.index_select(0))
    assert (out == 7.0).all()


@pytest.mark.parametrize("op", [OP.GATHER, OP.SCATTER_ADD])
def test_out_of_range_gather_and_scatter(op, rng):
    x = make_operand((5, 3), D.F32, "contiguous", rng)
    idx = np.zeros((2, 3), np.int64)
    idx[1, 2] = 5
    out = np.full((5, 3) if op == OP.SCATTER_ADD else (2, 3), 7.0, np.float32)
    if op == OP.GATHER:
        call = lambda: kernel(op, [D.F32, D.I64, D.F32])(x, idx, out=out, params=P.gather(0))
    else:
        src = np.ones((2, 3), np.float32)
        call = lambda: kernel(op, [D.F32, D.I64, D.F32, D.F32])(x, idx, src, out=out, params=P.scatter(0))
    with pytest.raises(fk.KernelIndexError, match=r"index 5 at position \(1, 2\)"):
        call()
    assert (out == 7.0).all()


def test_out_of_range_index_add_leaves_output(rng):
    x = np.zeros((3, 2), np.float32)
    out = np.full((3, 2), 7.0, np.float32)
    with pytest.raises(IndexError, match=r"index -3 at position \(1,\)"):
        kernel(OP.INDEX_ADD, [D.F32, D.I32, D.F32, D.F32])(
            x, np.array([0, -3], np.int32), np.ones((2, 2), np.float32), out=out, params=P.scatter(0))
    assert (out == 7.0).all()


def test_shape_dtype_and_count_errors(rng):
    x = make_operand((5, 3), D.F32, "contiguous", rng)
    k = kernel(OP.INDEX_SELECT, [D.F32, D.I64, D.F32])
    with pytest.raises(fk.ShapeError):
        k(x, np.zeros((2, 2), np.int64), out=np.empty((2, 3), np.float32), params=P.index_select(0))
    with pytest.raises(fk.ShapeError):
        k(x, np.zeros(2, np.int64), out=np.empty((3, 3), np.float32), params=P.index_select(0))
    with pytest.raises(fk.DTypeError):
        k(x, np.zeros(2, np.float64), params=P.index_select(0))
    with pytest.raises(fk.ParamsError):
        k(x, np.zeros(2, np.int64), out=np.empty((2, 3), np.float32), params=P.gather(0))
    with pytest.raises(fk.OperandCountError):
        k(x, params=P.index_select(0))
    g = kernel(OP.GATHER, [D.F32, D.I64, D.F32])
    with pytest.raises(fk.ShapeError):
        g(x, np.zeros((2, 4), np.int64), out=np.empty((2, 4), np.float32), params=P.gather(0))
    ro = np.empty((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        k(x, np.zeros(2, np.int64), out=ro, params=P.index_select(0))
    with pytest.raises(fk.AliasError):
        k(x, np.zeros(5, np.int64), out=x, params=P.index_select(0))


# the (op, dtypes) keys the tests in this module exercise; tests/test_spec.py checks the table
COVERED = (
    {(op, (d, i, d)) for op in (OP.INDEX_SELECT, OP.GATHER) for d in ALL_DTYPES for i in INDEX_DTYPES}
    | {(op, (d, i, d, d)) for op in (OP.SCATTER_ADD, OP.INDEX_ADD, OP.SCATTER) for d in ARITHMETIC_DTYPES
       for i in INDEX_DTYPES}
    | {(OP.NONZERO, (d, D.I64, D.I64)) for d in ARITHMETIC_DTYPES}
)


def test_empty_indices_and_empty_source(rng):
    x = make_operand((5, 3), D.F32, "contiguous", rng)
    out = fk.dispatch(OP.INDEX_SELECT, [x, np.zeros(0, np.int64)], params=P.index_select(0))
    assert out.shape == (0, 3)
    out = fk.dispatch(OP.GATHER, [x, np.zeros((0, 3), np.int32)], params=P.gather(0))
    assert out.shape == (0, 3)
    with pytest.raises(IndexError, match=r"index 0 at position \(0,\)"):
        fk.dispatch(OP.INDEX_SELECT, [np.zeros((0, 3), np.float32), np.zeros(1, np.int64)], params=P.index_select(0))


# ---- SCATTER: ONNX ScatterElements with reduction none / max / min / mul -----------------------------
REDUCTIONS = ("none", "max", "min", "mul")


@pytest.mark.parametrize("dtype", ARITHMETIC_DTYPES)
@pytest.mark.parametrize("itype", INDEX_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scatter(dtype, itype, layout, rng):
    """Every binding, reduction and axis on every layout of x, idx and src (a broadcast src repeats
    values), with duplicate indices (9 writes into 5 or 6 slots) and, for floats, NaN, inf and -0.0."""
    k = kernel(OP.SCATTER, [dtype, itype, dtype, dtype])
    assert k.has_cost and k.precision.bit_stable and k.caps & fk.KernelCaps.INPLACE
    x = make_operand((5, 6, 4), dtype, layout, rng)
    for axis in (0, 1, 2, -1):
        shape = [4, 5, 3]
        shape[axis] = 9
        idx = indices(tuple(shape), x.shape[axis], itype, layout, rng)
        src = make_operand((9, 9, 9), dtype, layout, rng)[tuple(slice(0, s) for s in shape)]
        for reduction in REDUCTIONS:
            out = k(x, idx, src, params=P.scatter_reduce(axis, reduction))
            want = oracles.scatter_reference(x, idx.astype(np.int64), src, axis % 3, reduction)
            assert_same(out, want, dtype)
            strided = make_operand(x.shape, dtype, "transposed", rng)
            k(x, idx, src, out=strided, params=P.scatter_reduce(axis, reduction))
            assert_same(strided, want, dtype)


def test_scatter_none_last_write_in_index_order_wins():
    x = np.zeros((3, 2), np.int32)
    idx = np.array([[0, 1], [2, 1], [0, 1]])
    src = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    out = fk.dispatch(OP.SCATTER, [x, idx, src], params=P.scatter_reduce(0))
    np.testing.assert_array_equal(out, [[5, 0], [0, 6], [3, 0]])        # rows 0 and 2 wrote (0, 0) and (0, 1)
    idx = np.array([[1, 1, 0]])                                          # along axis 1 within one row
    out = fk.dispatch(OP.SCATTER, [np.zeros((1, 2), np.int32), idx, np.array([[7, 8, 9]], np.int32)],
                      params=P.scatter_reduce(1))
    np.testing.assert_array_equal(out, [[9, 8]])


@pytest.mark.parametrize("dtype", [D.F16, D.BF16, D.F32, D.F64])
def test_scatter_max_min_nan_and_signed_zero(dtype):
    """NaN propagates (already there, or arriving); equal values keep what is there, so -0.0 stays
    against a later 0.0 and 0.0 against a later -0.0."""
    nan = float("nan")
    x = np.array([nan, -0.0, 0.0, 1.0, 2.0], dtype.numpy)
    idx = np.array([0, 1, 2, 3, 3, 4])
    src = np.array([5.0, 0.0, -0.0, nan, 7.0, 2.0], dtype.numpy)
    for reduction in ("max", "min"):
        out = fk.dispatch(OP.SCATTER, [x, idx, src], params=P.scatter_reduce(0, reduction)).astype(np.float64)
        assert np.isnan(out[0]) and np.isnan(out[3])
        assert out[1] == 0 and np.signbit(out[1]) and out[2] == 0 and not np.signbit(out[2])
        assert out[4] == 2.0
    out = fk.dispatch(OP.SCATTER, [x, idx, src], params=P.scatter_reduce(0, "mul")).astype(np.float64)
    np.testing.assert_array_equal(out, [nan, -0.0, -0.0, nan, 4.0])


def test_scatter_integer_mul_wraps_and_bool_folds():
    x = np.array([2 ** 62, 3], np.int64)
    out = fk.dispatch(OP.SCATTER, [x, np.array([0, 1]), np.array([4, -5], np.int64)], params=P.scatter_reduce(0, "mul"))
    np.testing.assert_array_equal(out, [0, -15])
    u = np.array([200], np.uint8)
    out = fk.dispatch(OP.SCATTER, [u, np.array([0]), np.array([3], np.uint8)], params=P.scatter_reduce(0, "mul"))
    assert out[0] == (200 * 3) % 256
    b = np.array([True, False, True, False])
    idx, src = np.array([0, 1, 2, 3]), np.array([False, True, True, False])
    want = {"max": [True, True, True, False], "min": [False, False, True, False],
            "mul": [False, False, True, False], "none": [False, True, True, False]}
    for reduction, expected in want.items():
        out = fk.dispatch(OP.SCATTER, [b, idx, src], params=P.scatter_reduce(0, reduction))
        np.testing.assert_array_equal(out, expected)


def test_scatter_in_place_and_graph(rng):
    x = rng.standard_normal((4, 3))
    idx = np.array([[0, 2, 2], [3, 3, 0]])
    src = rng.standard_normal((2, 3))
    want = oracles.scatter_reference(x, idx, src, 0, "max")
    k = kernel(OP.SCATTER, [D.F64, D.I64, D.F64, D.F64])
    k(x, idx, src, out=x, params=P.scatter_reduce(0, "max"))
    assert_same(x, want, D.F64)
    from fuel_kernel.graph import Graph
    x = rng.standard_normal((4, 3))
    g = Graph()
    gx, gi, gs = g.input((4, 3), "f64"), g.input((2, 3), "i64"), g.input((2, 3), "f64")
    y = g.scatter(gx, gi, gs, axis=0, reduction="mul")
    assert_same(g.compile([y]).run([x, idx, src])[0], oracles.scatter_reference(x, idx, src, 0, "mul"), D.F64)


def test_scatter_refusals_leave_the_output_untouched(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([[0, 1, 4], [2, 2, 3]])
    src = np.ones((2, 3), np.float32)
    k = kernel(OP.SCATTER, [D.F32, D.I64, D.F32, D.F32])
    good = P.scatter_reduce(0, "min")

    def refused(error, *inputs, out=None, params=good, match=None):
        out = np.full((5, 3), 7.0, np.float32) if out is None else out
        before = out.copy()
        with pytest.raises(error, match=match):
            k(*inputs, out=out, params=params)
        np.testing.assert_array_equal(out, before)

    bad = idx.copy()
    bad[1, 2] = 5
    refused(fk.KernelIndexError, x, bad, src, match=r"index 5 at position \(1, 2\)")
    bad[1, 2] = -1                                               # no negative wrap-around, as SCATTER_ADD
    refused(fk.KernelIndexError, x, bad, src, match=r"index -1 at position \(1, 2\)")
    refused(fk.ParamsError, x, idx, src, params=P.scatter(0))   # SCATTER_ADD's params
    refused(fk.ParamsError, x, idx, src, params=None)
    refused(fk.ParamsError, x, idx, src, params=P.scatter_reduce(2))
    refused(fk.ShapeError, x, idx, src[:1])                     # src smaller than idx
    refused(fk.ShapeError, x, idx[None], src[None])             # rank
    refused(fk.ShapeError, x, idx, src, out=np.full((4, 3), 7.0, np.float32))
    refused(fk.DTypeError, x, idx, src.astype(np.float64))
    refused(fk.DTypeError, x, idx.astype(np.float32), src)
    refused(fk.OperandCountError, x, idx)
    locked = np.full((5, 3), 7.0, np.float32)
    locked.flags.writeable = False
    refused(fk.ReadOnlyError, x, idx, src, out=locked)
    refused(fk.AliasError, x, idx, src, out=np.lib.stride_tricks.as_strided(src, (5, 3), (0, 4)))
    ki = kernel(OP.SCATTER, [D.I64, D.I64, D.I64, D.I64])
    shared = np.zeros(20, np.int64)
    xi, ii = shared[:15].reshape(5, 3), shared[14:20].reshape(2, 3)            # out = x overlaps idx
    before = shared.copy()
    with pytest.raises(fk.AliasError):
        ki(xi.copy(), ii, np.ones((2, 3), np.int64), out=xi, params=good)
    np.testing.assert_array_equal(shared, before)
    wide = np.zeros((6, 3), np.float32)                                         # out overlaps x, not exactly x
    before = wide.copy()
    with pytest.raises(fk.AliasError):
        k(wide[:5], idx, src, out=wide[1:], params=good)
    np.testing.assert_array_equal(wide, before)
    with pytest.raises(fk.ParamsError):
        P.scatter_reduce(0, "add")                              # SCATTER_ADD adds
    assert P.scatter_reduce(1, "max").fields() == {"axis": 1, "reduction": "max"}


# ---- NONZERO: indices (ndim, numel) of which the first count columns are np.nonzero, and the count ----
def nonzero_call(k, x, fill=-3):
    ind = np.full((x.ndim, x.size), fill, np.int64)
    count = np.full((), fill, np.int64)
    k(x, out=(ind, count))
    return ind, count


@pytest.mark.parametrize("dtype", ARITHMETIC_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nonzero(dtype, layout, rng):
    """Every binding on every layout and rank (0-d to 4-d, empty), mostly zeros; float data holds NaN,
    inf and -0.0 (support.random_values), so NaN counts and -0.0 does not; the columns past the count
    keep what was there."""
    k = kernel(OP.NONZERO, [dtype, D.I64, D.I64])
    assert k.n_outputs == 2 and k.has_cost and k.precision.bit_stable
    for shape in [(7,), (5, 6), (3, 4, 5), (2, 3, 2, 3), (4, 0), (1, 1), (300,)]:
        values = random_values(shape, dtype, rng) * (rng.integers(0, 3, shape) == 0)   # mostly zeros
        if dtype.is_float:
            values.reshape(-1)[1::5] = -0.0
        x = make_operand(shape, dtype, layout, rng, values=values.astype(dtype.numpy))
        want, count = oracles.nonzero_reference(x)
        ind, got = nonzero_call(k, x)
        assert got == count, (shape, layout)
        np.testing.assert_array_equal(ind[:, :count], want)
        assert (ind[:, count:] == -3).all()
        for a, b in zip(np.nonzero(x if dtype != D.BF16 else x.astype(np.float32)), ind[:, :count]):
            np.testing.assert_array_equal(a, b)          # np.nonzero itself
    for value, n in ((0, 0), (1, 1)):
        ind, got = nonzero_call(k, np.array(value).astype(dtype.numpy))
        assert ind.shape == (0, 1) and got == n


@pytest.mark.parametrize("dtype", [D.F16, D.BF16, D.F32, D.F64])
def test_nonzero_nan_counts_and_negative_zero_does_not(dtype):
    x = np.array([0.0, -0.0, float("nan"), float("-inf"), 1e-40 if dtype == D.F64 else 0.0, -0.0, 2.0],
                 dtype.numpy)
    ind, count = fk.dispatch(OP.NONZERO, [x])
    want = [2, 3, 4, 6] if dtype == D.F64 else [2, 3, 6]
    assert count == len(want)
    np.testing.assert_array_equal(ind[0, :count], want)


def test_nonzero_output_layouts_dispatch_and_graph(rng):
    x = (rng.integers(0, 3, (4, 5, 6)) * (rng.integers(0, 2, (4, 5, 6)))).astype(np.int16)
    want, n = oracles.nonzero_reference(x)
    ind, count = fk.dispatch(OP.NONZERO, [x])
    assert ind.shape == (3, 120) and ind.dtype == np.int64 and count.shape == () and count.dtype == np.int64
    np.testing.assert_array_equal(ind[:, :count], want)
    assert ops_shapes() == ((3, 120), ())
    # strided, reversed and offset outputs
    outs = (np.zeros((3, 240), np.int64)[::-1, ::2], np.zeros(5, np.int64)[3:4].reshape(()))
    fk.dispatch(OP.NONZERO, [x], outs)
    np.testing.assert_array_equal(outs[0][:, :n], want)
    assert outs[1] == n
    from fuel_kernel.graph import Graph
    g = Graph()
    gx = g.input((4, 5, 6), "i16")
    gi, gc = g.nonzero(gx)
    got_ind, got_count = g.compile([gi, gc]).run([x])
    assert got_count == n
    np.testing.assert_array_equal(got_ind[:, :n], want)


@pytest.mark.parametrize("layout", ["contiguous", "negative", "transposed"])
def test_nonzero_same_result_for_every_thread_count(layout, rng):
    """Past one block of 65536 elements (cpu/index_kernels.h.in, FK_NZ_BLOCK) the count and the
    writes run on the pool in blocks, rows cut mid-way included; the result is the serial pass's."""
    from fuel_kernel import _dispatch
    values = rng.standard_normal((37, 5003)).astype(np.float32) * (rng.integers(0, 4, (37, 5003)) == 0)
    x = make_operand(values.shape, D.F32, layout, rng, values=values)
    want, n = oracles.nonzero_reference(x)
    k = kernel(OP.NONZERO, [D.F32, D.I64, D.I64])
    for threads in (1, 2, 3, 4):
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            ind, count = nonzero_call(k, x)
        assert (_dispatch._parallel_calls() > calls) == (threads > 1)
        assert count == n
        np.testing.assert_array_equal(ind[:, :n], want)
        assert (ind[:, n:] == -3).all()


def ops_shapes():
    from fuel_kernel import ops
    return ops.infer_output_shapes(OP.NONZERO, [(4, 5, 6)])


def test_nonzero_refusals_leave_outputs_untouched():
    x = np.array([[0, 1, 2], [3, 0, 0]], np.float32)
    k = kernel(OP.NONZERO, [D.F32, D.I64, D.I64])

    def refused(error, inputs, outs, params=None, match=None):
        before = [np.array(o, copy=True) for o in outs]
        with pytest.raises(error, match=match):
            k(*inputs, out=tuple(outs), params=params)
        for o, b in zip(outs, before):
            np.testing.assert_array_equal(o, b)

    ind, count = np.full((2, 6), 9, np.int64), np.full((), 9, np.int64)
    refused(fk.ShapeError, [x], [np.full((2, 5), 9, np.int64), count], match=r"\(2, 6\)")   # no room for all
    refused(fk.ShapeError, [x], [np.full((3, 6), 9, np.int64), count])
    refused(fk.ShapeError, [x], [np.full((12,), 9, np.int64), count])
    refused(fk.ShapeError, [x], [ind, np.full((1,), 9, np.int64)])                 # count is 0-d
    refused(fk.DTypeError, [x], [ind.astype(np.int32), count])
    refused(fk.DTypeError, [x], [ind, count.astype(np.float64)])
    refused(fk.DTypeError, [x.astype(np.float64)], [ind, count])
    refused(fk.OperandCountError, [x], [ind])
    refused(fk.OperandCountError, [x, x], [ind, count])
    refused(fk.ParamsError, [x], [ind, count], params=P.reduce((0,)))
    locked = ind.copy()
    locked.flags.writeable = False
    refused(fk.ReadOnlyError, [x], [locked, count])
    shared = np.full(13, 9, np.int64)
    refused(fk.AliasError, [x], [shared[:12].reshape(2, 6), shared[11:12].reshape(())])  # outputs overlap
    xi = np.zeros((2, 6), np.int64)
    ki = kernel(OP.NONZERO, [D.I64, D.I64, D.I64])
    before = xi.copy()
    with pytest.raises(fk.AliasError):
        ki(xi[:, :3], out=(xi, np.full((), 9, np.int64)))                       # indices over x
    np.testing.assert_array_equal(xi, before)
    with pytest.raises(fk.ShapeError):              # 2**62 broadcast elements: no indices output can hold them
        kernel(OP.NONZERO, [D.I8, D.I64, D.I64])(np.lib.stride_tricks.as_strided(np.ones(1, np.int8), (2 ** 62,), (0,)),
                                                  out=(np.full((1, 1), 9, np.int64), count))
    assert count == 9
