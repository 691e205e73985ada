"""CPU data-movement kernels (fuel_kernel/cpu/_movement) against NumPy, on every dtype and layout."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from support import ALL_DTYPES, LAYOUTS, assert_same, central_difference, make_operand, np_dtype
from test_write_slice import COVERED as WRITE_SLICE_COVERED

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
PAD_BACKWARD_DTYPES = tuple(D[name] for name in fk.spec.FLOAT)
CUMSUM_DTYPES = (D.U8, D.I8, D.I16, D.I32, D.I64, D.U32, D.F16, D.BF16, D.F32, D.F64)  # not bool


def kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), CPU)


def out_like(shape, dtype, layout="contiguous", rng=None):
    """An output buffer: contiguous, or the strided/negative/transposed view of `layout`."""
    rng = rng or np.random.default_rng(0)
    if layout in ("broadcast",):
        layout = "contiguous"
    return make_operand(shape, dtype, layout, rng)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_slice(dtype, layout, rng):
    x = make_operand((5, 7, 3), dtype, layout, rng)
    for start, stop, step in (((1, 0, 0), (4, 7, 3), (1, 2, 1)), ((-1, 6, 2), (-6, -8, -3), (-2, -3, -1)),
                              ((0, 9, 0), (5, 12, 0), (3, 1, 1))):
        p = P.slice(start, stop, step)
        expected = x[tuple(slice(a, b, s) for a, b, s in zip(start, stop, step))]
        out = kernel(OP.SLICE, [dtype, dtype])(x, params=p)
        assert_same(out, expected, dtype)
        strided_out = out_like(expected.shape, dtype, "strided")
        kernel(OP.SLICE, [dtype, dtype])(x, out=strided_out, params=p)
        assert_same(strided_out, expected, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n_inputs", range(2, 8))
def test_concat_counts(dtype, n_inputs, rng):
    xs = [make_operand((3, 1 + k, 2), dtype, LAYOUTS[k % len(LAYOUTS)], rng) for k in range(n_inputs)]
    out = kernel(OP.CONCAT, [dtype] * (n_inputs + 1))(*xs, params=P.concat(1))
    assert_same(out, np.concatenate(xs, axis=1), dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_concat_layouts(layout, axis, rng):
    xs = [make_operand((4, 5, 3), D.F32, layout, rng), make_operand((4, 5, 3), D.F32, "contiguous", rng)]
    out = fk.dispatch(OP.CONCAT, xs, params=P.concat(axis))
    assert_same(out, np.concatenate(xs, axis=axis), D.F32)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flip(dtype, layout, rng):
    x = make_operand((4, 3, 5), dtype, layout, rng)
    for dims in ((0,), (2,), (0, -1), (0, 1, 2), ()):
        out = kernel(OP.FLIP, [dtype, dtype])(x, params=P.flip(dims))
        assert_same(out, np.flip(x, dims) if dims else x, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_roll(dtype, layout, rng):
    x = make_operand((4, 3, 5), dtype, layout, rng)
    for shifts, dims in (((1,), (0,)), ((-7,), (2,)), ((2, 13), (0, -1)), ((1, -1, 3), (0, 1, 2)), ((0,), (1,))):
        out = kernel(OP.ROLL, [dtype, dtype])(x, params=P.roll(shifts, dims))
        assert_same(out, np.roll(x, shifts, dims), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", [OP.TRIU, OP.TRIL])
def test_triangular(dtype, layout, op, rng):
    x = make_operand((2, 5, 7), dtype, layout, rng)
    reference = np.triu if op == OP.TRIU else np.tril
    for diagonal in (-6, -1, 0, 2, 9):
        out = kernel(op, [dtype, dtype])(x, params=P.triangular(diagonal))
        assert_same(out, reference(x, diagonal), dtype)
    assert_same(kernel(op, [dtype, dtype])(x), reference(x, 0), dtype)


def test_triangular_in_place(rng):
    x = make_operand((6, 6), D.F32, "contiguous", rng)
    expected = np.triu(x, 1)
    kernel(OP.TRIU, [D.F32, D.F32])(x, out=x, params=P.triangular(1))
    assert_same(x, expected, D.F32)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad(dtype, layout, mode, rng):
    x = make_operand((3, 4, 5), dtype, layout, rng)
    for before, after in (((1, 2), (3, 0)), ((2, 1, 3), (0, 2, 4)), ((0,), (0,))):
        value = 7.0 if mode == "constant" else 0.0
        p = P.pad(before, after, mode=mode, value=value)
        widths = [(0, 0)] * (3 - len(before)) + list(zip(before, after))
        np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[mode]
        kwargs = {"constant_values": np.asarray(value).astype(np_dtype(dtype))} if mode == "constant" else {}
        expected = np.pad(x, widths, mode=np_mode, **kwargs)
        out = kernel(OP.PAD, [dtype, dtype])(x, params=p)
        assert_same(out, expected, dtype)


def test_pad_reflect_too_wide_is_a_params_error(rng):
    x = make_operand((3, 4), D.F32, "contiguous", rng)
    out = np.full((3, 12), 5.0, np.float32)
    with pytest.raises(fk.ParamsError):
        kernel(OP.PAD, [D.F32, D.F32])(x, out=out, params=P.pad((4,), (4,), mode="reflect"))
    assert (out == 5.0).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_masked_fill(dtype, layout, rng):
    x = make_operand((4, 6), dtype, layout, rng)
    mask = make_operand((4, 6), D.BOOL, layout, rng)
    value = -3.0 if dtype != D.U8 and dtype != D.U32 else 3.0
    out = kernel(OP.MASKED_FILL, [dtype, D.BOOL, dtype])(x, mask, params=P.masked_fill(value))
    assert_same(out, np.where(mask, np.asarray(value).astype(np_dtype(dtype)), x), dtype)
    row_mask = np.array([True, False, True, False, False, True])          # broadcasts over rows
    out = kernel(OP.MASKED_FILL, [dtype, D.BOOL, dtype])(x, row_mask, params=P.masked_fill(value))
    assert_same(out, np.where(row_mask, np.asarray(value).astype(np_dtype(dtype)), x), dtype)


def test_masked_fill_saturates_like_cast(rng):
    x = np.zeros(3, np.int8)
    out = fk.dispatch(OP.MASKED_FILL, [x, np.array([True, False, True])], params=P.masked_fill(-1e9))
    assert out.tolist() == [-128, 0, -128]
    out = fk.dispatch(OP.MASKED_FILL, [np.zeros(2, np.float32), np.ones(2, bool)], params=P.masked_fill(float("-inf")))
    assert np.isneginf(out).all()


@pytest.mark.parametrize("dtype", CUMSUM_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cumsum(dtype, layout, rng):
    x = make_operand((3, 5, 7), dtype, layout, rng, special=False)
    nd = np_dtype(dtype)
    for axis in (0, 1, -1):
        for exclusive in (False, True):
            for reverse in (False, True):
                out = kernel(OP.CUMSUM, [dtype, dtype])(x, params=P.cumsum(axis, exclusive, reverse))
                src = np.flip(x, axis) if reverse else x
                if exclusive:                      # sum of the elements before: shift in a zero
                    src = np.moveaxis(src, axis, 0)
                    src = np.moveaxis(np.concatenate([np.zeros_like(src[:1]), src[:-1]]), 0, axis)
                if dtype in (D.F16, D.BF16):
                    ref = np.cumsum(src.astype(np.float32), axis=axis, dtype=np.float32)
                else:
                    ref = np.cumsum(src, axis=axis, dtype=nd)
                if reverse:
                    ref = np.flip(ref, axis)
                assert_same(out, ref.astype(nd), dtype)


def test_cumsum_exclusive_floats_exact(rng):
    x = rng.standard_normal(50)
    out = fk.dispatch(OP.CUMSUM, [x], params=P.cumsum(0, exclusive=True))
    assert out[0] == 0.0
    assert_same(out[1:], np.cumsum(x)[:-1], D.F64)


# ---- errors: nothing is written on failure ---------------------------------------------------------
def test_wrong_output_shape_leaves_output(rng):
    x = make_operand((4, 5), D.F32, "contiguous", rng)
    out = np.full((4, 4), 9.0, np.float32)
    with pytest.raises(fk.ShapeError):
        kernel(OP.FLIP, [D.F32, D.F32])(x, out=out, params=P.flip((0,)))
    with pytest.raises(fk.ShapeError):
        kernel(OP.SLICE, [D.F32, D.F32])(x, out=out, params=P.slice((0, 0), (4, 5)))
    with pytest.raises(fk.ShapeError):
        kernel(OP.CONCAT, [D.F32] * 3)(x, x, out=out, params=P.concat(0))
    assert (out == 9.0).all()


def test_wrong_dtype_and_count(rng):
    x = make_operand((4, 5), D.F32, "contiguous", rng)
    with pytest.raises(fk.DTypeError):
        kernel(OP.FLIP, [D.F32, D.F32])(x.astype(np.float64), params=P.flip((0,)))
    with pytest.raises(fk.DTypeError):
        kernel(OP.MASKED_FILL, [D.F32, D.BOOL, D.F32])(x, x, params=P.masked_fill(0))
    with pytest.raises(fk.OperandCountError):
        kernel(OP.CONCAT, [D.F32] * 3)(x, params=P.concat(0))


def test_wrong_params(rng):
    x = make_operand((4, 5), D.F32, "contiguous", rng)
    with pytest.raises(fk.ParamsError):
        kernel(OP.ROLL, [D.F32, D.F32])(x, out=np.empty_like(x), params=P.flip((0,)))
    with pytest.raises(fk.ParamsError):
        kernel(OP.CUMSUM, [D.F32, D.F32])(x, out=np.empty_like(x), params=P.cumsum(2))
    with pytest.raises(fk.ParamsError):
        kernel(OP.CONCAT, [D.F32] * 3)(x, x, out=np.empty((8, 5), np.float32), params=P.concat(-3))


def test_read_only_and_aliasing(rng):
    x = make_operand((4, 5), D.F32, "contiguous", rng)
    out = np.empty_like(x)
    out.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        kernel(OP.FLIP, [D.F32, D.F32])(x, out=out, params=P.flip((0,)))
    with pytest.raises(fk.AliasError):
        kernel(OP.FLIP, [D.F32, D.F32])(x, out=x, params=P.flip((0,)))
    with pytest.raises(fk.AliasError):
        kernel(OP.ROLL, [D.F32, D.F32])(x, out=x, params=P.roll((1,), (0,)))


def test_in_place_masked_fill_and_cumsum(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    mask = x > 0
    expected = np.where(mask, np.float32(0), x)
    kernel(OP.MASKED_FILL, [D.F32, D.BOOL, D.F32])(x, mask, out=x, params=P.masked_fill(0))
    assert_same(x, expected, D.F32)
    expected = np.cumsum(x, axis=1)
    kernel(OP.CUMSUM, [D.F32, D.F32])(x, out=x, params=P.cumsum(1))
    assert_same(x, expected, D.F32)


def test_empty_operands(rng):
    x = np.zeros((0, 3), np.float32)
    assert fk.dispatch(OP.FLIP, [x], params=P.flip((0,))).shape == (0, 3)
    assert fk.dispatch(OP.PAD, [x], params=P.pad((1,), (1,))).shape == (0, 5)
    assert fk.dispatch(OP.CUMSUM, [x], params=P.cumsum(0)).shape == (0, 3)


# the (op, dtypes) keys the tests above exercise; tests/test_spec.py checks the table
COVERED = (
    {(op, (d, d)) for op in (OP.SLICE, OP.FLIP, OP.ROLL, OP.TRIU, OP.TRIL, OP.PAD) for d in ALL_DTYPES}
    | {(OP.MASKED_FILL, (d, D.BOOL, d)) for d in ALL_DTYPES}
    | {(OP.CONCAT, (d,) * (k + 1)) for d in ALL_DTYPES for k in range(2, 8)}
    | {(OP.CUMSUM, (d, d)) for d in CUMSUM_DTYPES}
    | {(OP.PAD_BACKWARD, (d, d)) for d in PAD_BACKWARD_DTYPES}
    | WRITE_SLICE_COVERED
)


@pytest.mark.parametrize("out_layout", ["strided", "negative", "transposed", "offset"])
def test_strided_outputs(out_layout, rng):
    """Every movement kernel declares strided_output: write through non-contiguous output views."""
    x = make_operand((4, 6), D.I16, "contiguous", rng)
    mask = make_operand((4, 6), D.BOOL, "contiguous", rng)
    cases = [
        (OP.FLIP, [x], P.flip((1,)), np.flip(x, 1)),
        (OP.ROLL, [x], P.roll((2,), (1,)), np.roll(x, 2, 1)),
        (OP.TRIU, [x], P.triangular(1), np.triu(x, 1)),
        (OP.TRIL, [x], P.triangular(-1), np.tril(x, -1)),
        (OP.PAD, [x], P.pad((1, 2), (0, 1), mode="reflect"), np.pad(x, [(1, 0), (2, 1)], mode="reflect")),
        (OP.PAD, [x], P.pad((1,), (2,), value=5), np.pad(x, [(0, 0), (1, 2)], constant_values=5)),
        (OP.MASKED_FILL, [x, mask], P.masked_fill(-1), np.where(mask, np.int16(-1), x)),
        (OP.CONCAT, [x, x[:1]], P.concat(0), np.concatenate([x, x[:1]])),
        (OP.CUMSUM, [x], P.cumsum(0), np.cumsum(x, 0, dtype=np.int16)),
        (OP.SLICE, [x], P.slice((3, 0), (0, 6), (-1, 2)), x[3:0:-1, 0:6:2]),
    ]
    for op, inputs, params, expected in cases:
        out = make_operand(expected.shape, D.I16, out_layout, rng)
        fk.dispatch(op, inputs, [out], params=params)
        assert_same(out, expected, D.I16)


def test_random_shapes_against_numpy(rng):
    """Seeded fuzz over ranks 1-4, odd extents, every layout and random params."""
    for trial in range(150):
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(s) for s in rng.integers(1, 6, ndim))
        dtype = ALL_DTYPES[trial % len(ALL_DTYPES)]
        x = make_operand(shape, dtype, LAYOUTS[trial % len(LAYOUTS)], rng)
        start = tuple(int(v) for v in rng.integers(-7, 7, ndim))
        stop = tuple(int(v) for v in rng.integers(-7, 7, ndim))
        step = tuple(int(v) * int(rng.choice([-1, 1])) for v in rng.integers(1, 4, ndim))
        assert_same(fk.dispatch(OP.SLICE, [x], params=P.slice(start, stop, step)),
                    x[tuple(slice(a, b, s) for a, b, s in zip(start, stop, step))], dtype)
        dims = tuple(int(d) for d in rng.permutation(ndim)[: int(rng.integers(1, ndim + 1))])
        shifts = tuple(int(v) for v in rng.integers(-9, 9, len(dims)))
        assert_same(fk.dispatch(OP.ROLL, [x], params=P.roll(shifts, dims)), np.roll(x, shifts, dims), dtype)
        assert_same(fk.dispatch(OP.FLIP, [x], params=P.flip(dims)), np.flip(x, dims), dtype)
        k = int(rng.integers(1, ndim + 1))
        before = tuple(int(v) for v in rng.integers(0, 3, k))
        after = tuple(int(v) for v in rng.integers(0, 3, k))
        widths = [(0, 0)] * (ndim - k) + list(zip(before, after))
        if all(b < n and a < n for (b, a), n in zip(widths, shape)):
            assert_same(fk.dispatch(OP.PAD, [x], params=P.pad(before, after, mode="reflect")),
                        np.pad(x, widths, mode="reflect"), dtype)
        assert_same(fk.dispatch(OP.PAD, [x], params=P.pad(before, after, mode="replicate")),
                    np.pad(x, widths, mode="edge"), dtype)


# ---- PAD_BACKWARD [dy, dx] ---------------------------------------------------------------------------
def pad_backward_reference(dy, before, after, mode):
    """dx in F64: constant mode dy's interior; else each dy cell added (np.add.at) onto the cell of
    the unpadded input it was copied from (np.pad's reflect and edge rules)."""
    dy = dy.astype(np.float64)
    widths = [(0, 0)] * (dy.ndim - len(before)) + list(zip(before, after))
    shape = tuple(n - b - a for n, (b, a) in zip(dy.shape, widths))
    # the source of every padded position: pad an index vector with np.pad's own rule
    np_mode = {"reflect": "reflect", "replicate": "edge"}.get(mode)
    maps = [np.pad(np.arange(n), w, mode=np_mode) if np_mode else
            np.pad(np.arange(n), w, mode="constant", constant_values=-1) for n, w in zip(shape, widths)]
    keep = [m >= 0 for m in maps]
    dx = np.zeros(shape)
    np.add.at(dx, np.ix_(*[m[k] for m, k in zip(maps, keep)]), dy[np.ix_(*keep)])
    return dx


@pytest.mark.parametrize("dtype", PAD_BACKWARD_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad_backward(dtype, layout, mode, rng):
    """Every layout of dy and dx: constant is dy's interior bit for bit, reflect and replicate the
    F64 sums of the copied cells rounded once (the claim's max_rel of the summed magnitudes)."""
    k = kernel(OP.PAD_BACKWARD, [dtype, dtype])
    claim = k.precision
    for x_shape, before, after in (((3, 4, 5), (1, 2), (3, 0)), ((3, 4, 5), (2, 1, 3), (0, 2, 4)),
                                   ((3, 4, 5), (0,), (0,)), ((2, 1, 6), (0, 4), (0, 5)), ((7,), (6,), (6,))):
        widths = [(0, 0)] * (len(x_shape) - len(before)) + list(zip(before, after))
        if mode == "reflect" and any((b or a) and max(b, a) >= n for n, (b, a) in zip(x_shape, widths)):
            continue
        dy_shape = tuple(n + b + a for n, (b, a) in zip(x_shape, widths))
        dy = make_operand(dy_shape, dtype, layout, rng)
        dx = out_like(x_shape, dtype, layout, rng)
        k(dy, out=dx, params=P.pad(before, after, mode=mode))
        want = pad_backward_reference(np.asarray(dy).astype(np.float64), before, after, mode)
        got = np.asarray(dx).astype(np.float64)
        if mode == "constant":
            interior = np.asarray(dy)[tuple(slice(b, b + n) for n, (b, a) in zip(x_shape, widths))]
            assert_same(dx, interior, dtype)
            continue
        mags = pad_backward_reference(np.abs(np.asarray(dy).astype(np.float64)), before, after, mode)
        finite = np.isfinite(want)
        assert (np.isnan(got) == np.isnan(want)).all()
        assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
        err = np.abs(got[finite] - want[finite])
        assert (err <= claim.max_rel * mags[finite] + claim.max_abs).all(), (err.max(), x_shape, before, after)


def test_pad_backward_is_the_gradient_of_pad(rng):
    """Central finite differences of L(x) = sum(dy * np.pad(x)) in F64, each mode."""
    x = rng.standard_normal((3, 5))
    for mode, np_mode in (("constant", "constant"), ("reflect", "reflect"), ("replicate", "edge")):
        widths = [(1, 2), (4, 3)]
        dy = rng.standard_normal(tuple(n + b + a for n, (b, a) in zip(x.shape, widths)))
        got = np.empty_like(x)
        kernel(OP.PAD_BACKWARD, [D.F64, D.F64])(dy, out=got, params=P.pad((1, 4), (2, 3), mode=mode))
        loss = lambda v: float(np.sum(dy * np.pad(v, widths, mode=np_mode)))
        numeric = central_difference(loss, x)
        np.testing.assert_allclose(got, numeric, rtol=1e-7, atol=1e-8)


def test_pad_backward_shape_rule_and_dispatch(rng):
    dy = rng.standard_normal((4, 9)).astype(np.float32)
    dx = fk.dispatch(OP.PAD_BACKWARD, [dy], params=P.pad((1,), (2,), mode="replicate"))
    assert dx.shape == (4, 6) and dx.dtype == np.float32
    np.testing.assert_allclose(dx[:, 1:5], dy[:, 2:6])
    np.testing.assert_allclose(dx[:, 0], dy[:, 0] + dy[:, 1], rtol=1e-6)
    with pytest.raises(fk.ShapeError):
        fk.dispatch(OP.PAD_BACKWARD, [dy], params=P.pad((5,), (5,)))


@pytest.mark.parametrize("problem", ["dtype", "count", "shape", "rank", "reflect_wide", "replicate_empty",
                                     "params", "readonly", "alias", "self_overlap", "pad_dims"])
def test_pad_backward_errors_leave_the_output_untouched(problem, rng):
    dy = rng.standard_normal((3, 8)).astype(np.float32)
    dx = np.full((3, 5), 7.0, np.float32)
    inputs, params = [dy], P.pad((1,), (2,), mode="reflect")
    error = {"dtype": fk.DTypeError, "count": fk.OperandCountError, "shape": fk.ShapeError,
             "rank": fk.ShapeError, "reflect_wide": fk.ParamsError, "replicate_empty": fk.ParamsError,
             "params": fk.ParamsError, "readonly": fk.ReadOnlyError, "alias": fk.AliasError,
             "self_overlap": fk.AliasError, "pad_dims": fk.ParamsError}[problem]
    if problem == "dtype":
        dx = dx.astype(np.float64)
    elif problem == "count":
        inputs = [dy, dy]
    elif problem == "shape":
        dx = np.full((3, 4), 7.0, np.float32)
    elif problem == "rank":
        dx = np.full((1, 3, 5), 7.0, np.float32)
    elif problem == "reflect_wide":
        dy = rng.standard_normal((3, 6)).astype(np.float32)
        dx = np.full((3, 2), 7.0, np.float32)
        params = P.pad((2,), (2,), mode="reflect")
    elif problem == "replicate_empty":
        dy = rng.standard_normal((3, 3)).astype(np.float32)
        dx = np.full((3, 0), 7.0, np.float32)
        params = P.pad((1,), (2,), mode="replicate")
    elif problem == "params":
        params = P.flip((0,))
    elif problem == "readonly":
        dx.setflags(write=False)
    elif problem == "alias":
        buf = np.zeros((3, 8), np.float32)
        inputs, dx = [buf], buf[:, :5]
    elif problem == "self_overlap":
        dx = np.lib.stride_tricks.as_strided(np.full(5, 7.0, np.float32), (3, 5), (0, 4))
    elif problem == "pad_dims":
        params = P.pad((0, 0, 1), (0, 0, 2), mode="reflect")
    before = dx.copy()
    with pytest.raises(error):
        kernel(OP.PAD_BACKWARD, [D.F32, D.F32])(*inputs, out=dx, params=params)
    np.testing.assert_array_equal(dx, before)


@pytest.mark.parametrize("extent", [2 ** 60 + 2, 2 ** 61 - 1])
def test_pad_backward_impossible_sizes_are_refused(extent):
    """dy of a stride-0 view whose F64 scratch size (8 bytes per element) overflows: a ShapeError,
    dx untouched."""
    dy = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (extent,), (0,))
    dx = np.full((1,), 7.0, np.float32)
    with pytest.raises(fk.ShapeError):
        kernel(OP.PAD_BACKWARD, [D.F32, D.F32])(dy, out=dx, params=P.pad((extent - 1,), (0,), mode="replicate"))
    assert dx[0] == 7.0
