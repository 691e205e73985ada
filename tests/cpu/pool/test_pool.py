"""MAX_POOL2D and AVG_POOL2D (NCHW, ONNX MaxPool / AveragePool): every binding over every layout
and a grid of kernels, strides, pads, dilations, ceil mode and count_include_pad against a plain
NumPy loop reference (tests/oracles.py, pool2d_reference), the output-size rule, special values,
the precision claims, every refusal leaving the output untouched, and torch where it is installed."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops
import oracles
from support import FLOAT_DTYPES, LAYOUTS, make_operand

OP = fk.OpKind
D = fk.DType
MAX_DTYPES = tuple(D[name] for name in fk.spec.NUMERIC)
COVERED = ({(OP.MAX_POOL2D, (dt, dt)) for dt in MAX_DTYPES}
           | {(OP.AVG_POOL2D, (dt, dt)) for dt in FLOAT_DTYPES})
P = fk.params.pool2d
SETTINGS = [
    P(2, stride=2), P(3), P((3, 2), stride=(2, 1), pads_begin=(1, 0), pads_end=(2, 1)),
    P(3, stride=2, pads_begin=1, pads_end=1, ceil_mode=True),
    P(3, stride=2, pads_begin=1, pads_end=1, ceil_mode=True, count_include_pad=True),
    P(2, stride=2, pads_begin=1, pads_end=0, ceil_mode=True, count_include_pad=True),
    P(3, stride=(1, 2), dilation=(2, 1), pads_begin=(2, 1), pads_end=(1, 2)),
    P((2, 3), stride=3, dilation=2, pads_begin=1, pads_end=1, ceil_mode=True, count_include_pad=True),
    P(1), P(4, stride=1, pads_begin=3, pads_end=3, count_include_pad=True),
]
SHAPES = [(2, 3, 7, 8), (1, 1, 5, 5), (1, 2, 9, 4), (0, 2, 6, 6), (2, 0, 6, 6)]


def output_shape(shape, params):
    return ops.infer_output_shape(OP.MAX_POOL2D, [shape], params)


def fits(shape, params):
    """Whether the call is valid: the kernel fits and no window covers padding only."""
    try:
        out = output_shape(shape, params)
    except fk.FuelKernelError:
        return False
    f = params.fields()
    probe = np.zeros((1, 1) + tuple(shape[2:]))
    return 0 in out or oracles.pool2d_reference(probe, f, average=False) is not None


def check_avg(got, dtype, x, params, claim, where):
    values, magnitude, _ = oracles.pool2d_reference(x, params.fields(), average=True)
    g = np.asarray(got).astype(np.float64)
    want = oracles.to(values, dtype).astype(np.float64)
    assert (np.isnan(g) == np.isnan(values)).all(), where
    special = ~np.isfinite(values)
    assert (g[special & ~np.isnan(values)] == values[special & ~np.isnan(values)]).all(), where
    fin = np.isfinite(values) & np.isfinite(want)
    err = np.abs(g[fin] - values[fin])
    bound = claim.max_rel * np.abs(values[fin]) + claim.max_abs * magnitude[fin] + 1e-300
    if got.dtype in (np.float16,):        # a result rounding into the subnormals: half a subnormal
        bound = bound + 2.0 ** -25
    assert (err <= bound).all(), (where, float(np.max(err - bound)))


def pooled_cases(kernel, dtype, rng):
    """(x, out, params, where) for every shape, setting that fits it and input layout: `kernel`
    has run on x into out (filled with 3 first)."""
    for shape in SHAPES:
        for params in SETTINGS:
            if not fits(shape, params):
                continue
            for layout in LAYOUTS:
                x = make_operand(shape, dtype, layout, rng)
                out = np.full(output_shape(shape, params), 3, dtype.numpy)
                kernel(x, out=out, params=params)
                yield x, out, params, (shape, layout, params.fields())


@pytest.mark.parametrize("dtype", MAX_DTYPES, ids=lambda d: d.short_name)
def test_max_pool2d_binding(dtype, rng):
    kernel = fk.bindings().lookup(OP.MAX_POOL2D, [dtype, dtype], fk.Backend.CPU)
    assert kernel.has_cost and kernel.precision.max_ulp == 0 and kernel.precision.max_rel == 0
    for x, out, params, where in pooled_cases(kernel, dtype, rng):
        want = oracles.to(oracles.pool2d_reference(x, params.fields(), average=False)[0], dtype)
        if dtype.is_float:              # NaN == NaN in the comparison, for BF16 too
            out, want = out.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(out, want, err_msg=str(where))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.short_name)
def test_avg_pool2d_binding(dtype, rng):
    kernel = fk.bindings().lookup(OP.AVG_POOL2D, [dtype, dtype], fk.Backend.CPU)
    assert kernel.has_cost and kernel.precision.notes
    for x, out, params, where in pooled_cases(kernel, dtype, rng):
        check_avg(out, dtype, x, params, kernel.precision, where)


def test_output_layouts_and_dispatch(rng):
    """A strided, negative-stride or offset output gets the same values; fk.dispatch allocates."""
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    params = P(3, stride=2, pads_begin=1, pads_end=1, ceil_mode=True)
    want = fk.dispatch(OP.MAX_POOL2D, [x], params=params)
    assert want.shape == (2, 3, 5, 5)
    for out in (np.zeros((2, 3, 5, 10), np.float32)[..., ::2], np.zeros((2, 3, 5, 5), np.float32)[:, :, ::-1],
                np.zeros(2 * 3 * 25 + 7, np.float32)[7:].reshape(2, 3, 5, 5)):
        fk.dispatch(OP.MAX_POOL2D, [x], out, params=params)
        np.testing.assert_array_equal(out, want)


def test_ceil_mode_drops_a_window_starting_in_the_padding():
    """L=5, K=2, S=2, pads 1 and 1: floor gives 3 windows and ceil 4, but the fourth starts at
    3 * 2 - 1 = 5 >= L, in the after padding, so it is dropped (PyTorch's and ONNX's rule) -> 3.
    L=6, K=3, S=2: ceil gives a third window starting at 4 < 6, which stays."""
    assert oracles.pool2d_output_size(5, 2, 2, 1, 1, 1, False) == 3
    assert oracles.pool2d_output_size(5, 2, 2, 1, 1, 1, True) == 3
    assert output_shape((1, 1, 5, 5), P(2, stride=2, pads_begin=1, pads_end=1, ceil_mode=True)) == (1, 1, 3, 3)
    assert output_shape((1, 1, 6, 6), P(3, stride=2, ceil_mode=True)) == (1, 1, 3, 3)
    assert output_shape((1, 1, 6, 6), P(3, stride=2)) == (1, 1, 2, 2)
    x = np.arange(36, dtype=np.float64).reshape(1, 1, 6, 6)
    got = fk.dispatch(OP.AVG_POOL2D, [x], params=P(3, stride=2, ceil_mode=True))
    # the last window holds rows 4..5 and columns 4..5 only: their mean
    assert got[0, 0, 2, 2] == np.mean(x[0, 0, 4:, 4:])


def test_count_include_pad():
    x = np.ones((1, 1, 3, 3), np.float32)
    with_pad = fk.dispatch(OP.AVG_POOL2D, [x], params=P(3, pads_begin=1, pads_end=1, count_include_pad=True))
    without = fk.dispatch(OP.AVG_POOL2D, [x], params=P(3, pads_begin=1, pads_end=1))
    assert with_pad[0, 0, 0, 0] == np.float32(4 / 9) and with_pad[0, 0, 1, 1] == 1
    np.testing.assert_array_equal(without, np.ones((1, 1, 3, 3), np.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.short_name)
def test_special_values(dtype):
    """NaN propagates through both; inf stays inf in MAX and in AVG unless it meets -inf; of -0.0
    and 0.0 MAX keeps the first tap."""
    nan, inf = float("nan"), float("inf")
    x = np.array([[[[nan, 1, 2, 3], [0, 1, -inf, 3], [inf, -inf, 5, 6], [-0.0, 0.0, 0.0, -0.0]]]], dtype.numpy)
    params = P(2, stride=2)
    mx = fk.dispatch(OP.MAX_POOL2D, [x], params=params).astype(np.float64)
    assert np.isnan(mx[0, 0, 0, 0]) and mx[0, 0, 0, 1] == 3 and mx[0, 0, 1, 0] == inf and mx[0, 0, 1, 1] == 6
    av = fk.dispatch(OP.AVG_POOL2D, [x], params=params).astype(np.float64)
    assert np.isnan(av[0, 0, 0, 0]) and av[0, 0, 0, 1] == -inf and np.isnan(av[0, 0, 1, 0])
    zeros = np.array([[[[-0.0, 0.0], [0.0, 0.0]]]], dtype.numpy)
    first = fk.dispatch(OP.MAX_POOL2D, [zeros], params=P(2)).astype(np.float64)
    assert first[0, 0, 0, 0] == 0 and np.signbit(first[0, 0, 0, 0])


def test_integer_extremes_are_exact():
    for dtype in (np.int64, np.uint32, np.int8, np.uint8):
        info = np.iinfo(dtype)
        x = np.array([[[[info.min, info.max], [info.max - 1, info.min + 1]]]], dtype)
        got = fk.dispatch(OP.MAX_POOL2D, [x], params=P(2))
        assert got.dtype == dtype and got[0, 0, 0, 0] == info.max


def test_refusals_leave_the_output_untouched():
    x = np.arange(2 * 2 * 6 * 6, dtype=np.float32).reshape(2, 2, 6, 6)
    kernel = fk.bindings().lookup(OP.MAX_POOL2D, ["f32", "f32"], fk.Backend.CPU)
    avg = fk.bindings().lookup(OP.AVG_POOL2D, ["f32", "f32"], fk.Backend.CPU)

    def refused(k, inputs, out, error, params, match=None):
        before = np.array(out, copy=True)
        with pytest.raises(error, match=match):
            k(*inputs, out=out, params=params)
        np.testing.assert_array_equal(out, before)

    out = np.full((2, 2, 3, 3), 9, np.float32)
    good = P(2, stride=2)
    for k in (kernel, avg):
        refused(k, [x], out, fk.ParamsError, None)
        refused(k, [x], out, fk.ParamsError, fk.params.conv2d(2))
        refused(k, [x, x], out, fk.OperandCountError, good)
        refused(k, [x.astype(np.float64)], out, fk.DTypeError, good)
        refused(k, [x[0]], out, fk.ShapeError, good)                  # 3-d x
        refused(k, [x], out[0], fk.ShapeError, good)                  # 3-d y
        refused(k, [x], np.full((2, 2, 3, 4), 9, np.float32), fk.ShapeError, good)
        refused(k, [x], out, fk.ShapeError, P(7))                     # kernel larger than the input
        # a 2-wide input, kernel 2, dilation 3, pads 1: one window, taps at -1 and 2, both outside
        refused(k, [x[:, :, :2, :2]], np.full((2, 2, 1, 1), 9, np.float32), fk.ShapeError,
                P(2, dilation=3, pads_begin=1, pads_end=1), match="padding only")
        locked = out.copy()
        locked.flags.writeable = False
        refused(k, [x], locked, fk.ReadOnlyError, good)
        refused(k, [x], x[:, :, :3, :3], fk.AliasError, good)
        refused(k, [x], np.broadcast_to(np.float32(0), (2, 2, 3, 3)), fk.FuelKernelError, good)
    for bad in (dict(kernel=0), dict(kernel=2, stride=0), dict(kernel=2, dilation=0), dict(kernel=2, pads_begin=-1),
                dict(kernel=1.5), dict(kernel=(2, 2, 2))):
        with pytest.raises(fk.ParamsError):
            P(**bad)
    for params in (P(2, pads_begin=2), P(2, pads_end=(0, 3)), P(3, pads_begin=3, pads_end=3)):
        refused(kernel, [x], out, fk.ParamsError, params, match="kernel")
        with pytest.raises(fk.ParamsError):
            ops.infer_output_shape(OP.MAX_POOL2D, [x.shape], params)
    with pytest.raises(fk.NoKernelError):
        fk.bindings().lookup(OP.AVG_POOL2D, ["i32", "i32"], fk.Backend.CPU)


def test_huge_extents_are_refused_before_any_write():
    """A stride-0 input of 2**63 - 1 rows: adding the pad overflows, a ShapeError."""
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (1, 1, 2 ** 63 - 1, 1), (0, 0, 0, 0))
    out = np.full((1, 1, 1, 1), 9, np.uint8)
    with pytest.raises(fk.ShapeError):
        fk.bindings().lookup(OP.MAX_POOL2D, ["u8", "u8"], fk.Backend.CPU)(
            x, out=out, params=P((2, 1), pads_begin=(1, 0), pads_end=(1, 0)))
    assert out[0, 0, 0, 0] == 9


def test_graph_builders():
    from fuel_kernel.graph import Graph
    g = Graph()
    x = g.input((1, 2, 6, 6), "f32")
    mx, av = g.max_pool2d(x, params=P(2, stride=2)), g.avg_pool2d(x, params=P(3, pads_begin=1, pads_end=1))
    data = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    got_max, got_avg = g.compile([mx, av]).run([data])
    np.testing.assert_array_equal(got_max, oracles.pool2d_reference(data, P(2, stride=2).fields(), False)[0])
    np.testing.assert_array_equal(got_avg, fk.dispatch(OP.AVG_POOL2D, [data], params=P(3, pads_begin=1, pads_end=1)))


def test_torch_agrees_where_installed(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    t = torch.from_numpy(x)
    for k, s, p, ceil, inc in ((3, 2, 1, True, True), (3, 2, 1, True, False), (2, 2, 0, False, True), (3, 1, 1, False, False)):
        params = P(k, stride=s, pads_begin=p, pads_end=p, ceil_mode=ceil, count_include_pad=inc)
        mx = fk.dispatch(OP.MAX_POOL2D, [x], params=params)
        av = fk.dispatch(OP.AVG_POOL2D, [x], params=params)
        np.testing.assert_array_equal(mx, torch.nn.functional.max_pool2d(t, k, s, p, ceil_mode=ceil).numpy())
        # torch sums a window in F32 (up to k*k roundings of the running sum), fuel_kernel in F64
        # with one rounding: they differ by torch's own error, k*k*2^-24 of the window's magnitude
        np.testing.assert_allclose(av, torch.nn.functional.avg_pool2d(t, k, s, p, ceil_mode=ceil,
                                                                      count_include_pad=inc).numpy(),
                                   rtol=1e-6, atol=k * k * 2.0 ** -24 * float(np.abs(x).max()))
