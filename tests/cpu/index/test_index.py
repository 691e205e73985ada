"""CPU indexing kernels (fuel_kernel/cpu/_index) against NumPy: every dtype, index dtype and layout;
out-of-range indices raise IndexError naming the index and its position and write nothing."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from oracles import add_at
from support import ALL_DTYPES, ARITHMETIC_DTYPES, LAYOUTS, assert_same, make_operand, np_dtype

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


# the (op, dtypes) keys the tests above exercise; tests/test_spec.py checks the table
COVERED = (
    {(op, (d, i, d)) for op in (OP.INDEX_SELECT, OP.GATHER) for d in ALL_DTYPES for i in INDEX_DTYPES}
    | {(op, (d, i, d, d)) for op in (OP.SCATTER_ADD, OP.INDEX_ADD) for d in ARITHMETIC_DTYPES for i in INDEX_DTYPES}
)


def test_empty_indices_and_empty_source(rng):
    x = make_operand((5, 3), D.F32, "contiguous", rng)
    out = fk.dispatch(OP.INDEX_SELECT, [x, np.zeros(0, np.int64)], params=P.index_select(0))
    assert out.shape == (0, 3)
    out = fk.dispatch(OP.GATHER, [x, np.zeros((0, 3), np.int32)], params=P.gather(0))
    assert out.shape == (0, 3)
    with pytest.raises(IndexError, match=r"index 0 at position \(0,\)"):
        fk.dispatch(OP.INDEX_SELECT, [np.zeros((0, 3), np.float32), np.zeros(1, np.int64)], params=P.index_select(0))
