"""CONV2D (im2col and direct siblings) against a float64 NumPy reference: every binding, stride,
padding, dilation, groups, bias, strided operands, 0-size and 1x1 shapes, precision claims, the
cost functions' choice by shape, and error paths that leave the output untouched."""
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import conv2d_reference as reference
from support import FLOAT_DTYPES, LAYOUTS, make_operand

CASES = [(dt, bias) for dt in FLOAT_DTYPES for bias in (False, True)]
# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups)
SHAPES = [(2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1), (1, 4, 8, 8, 6, 3, 2, 2, (1, 0), 1, 2),
          (1, 6, 11, 13, 6, 3, 3, (2, 1), 2, 2, 3), (1, 1, 5, 5, 1, 5, 5, 1, 0, 1, 1),
          (0, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1), (1, 2, 1, 1, 3, 1, 1, 1, 0, 1, 1),
          (2, 6, 6, 6, 6, 1, 1, 1, 0, 1, 6), (1, 3, 33, 40, 5, 3, 3, 1, 1, 1, 1),
          (1, 2, 4, 4, 3, 3, 3, 3, 2, 2, 1), (1, 0, 4, 4, 2, 3, 3, 1, 1, 1, 1)]


def run(kernel, x, w, b, out, stride, padding, dilation, groups):
    params = fk.params.conv2d(stride=stride, padding=padding, dilation=dilation, groups=groups)
    inputs = (x, w) if b is None else (x, w, b)
    return kernel(*inputs, out=out, params=params)


@pytest.mark.parametrize("dtype,bias", CASES, ids=[f"{d.short_name}-{'bias' if b else 'nobias'}" for d, b in CASES])
def test_conv2d_binding(dtype, bias, rng):
    dts = [dtype] * (4 if bias else 3)
    kernels = fk.bindings().alternatives(fk.OpKind.CONV2D, dts, fk.Backend.CPU)
    assert sorted(k.source for k in kernels) == ["direct", "im2col"]
    for kernel in kernels:
        claim = kernel.precision
        for i, (N, C, H, W, O, KH, KW, stride, padding, dilation, groups) in enumerate(SHAPES):
            for layout in (LAYOUTS if i < 3 else ("contiguous", LAYOUTS[i % len(LAYOUTS)])):
                x = make_operand((N, C, H, W), dtype, layout, rng, special=False)
                w = make_operand((O, C // groups, KH, KW), dtype, layout, rng, special=False)
                b = make_operand((O,), dtype, "negative", rng, special=False) if bias else None
                expected, scale = reference(x, w, b, stride, padding, dilation, groups)
                if layout == "transposed":          # a strided (channels-last) output view
                    out = np.full(expected.shape[:1] + expected.shape[2:] + expected.shape[1:2], 7,
                                  dtype=dtype.numpy).transpose(0, 3, 1, 2)
                else:
                    out = np.full(expected.shape, 7, dtype=dtype.numpy)
                run(kernel, x, w, b, out, stride, padding, dilation, groups)
                err = np.abs(out.astype(np.float64) - expected)
                assert (err <= claim.max_rel * scale + claim.max_abs).all(), (kernel.source, i, layout, err.max())


def test_nan_in_the_input_spreads_to_its_window(rng):
    x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    for kernel in fk.bindings().alternatives(fk.OpKind.CONV2D, [fk.DType.F32] * 3, fk.Backend.CPU):
        out = run(kernel, x, w, None, np.empty((1, 2, 4, 4), np.float32), 1, 0, 1, 1)
        assert np.isnan(out[:, :, 0, 0]).all() and not np.isnan(out[:, :, 1:, :]).any()


def test_dispatch_allocates_from_params(rng):
    x = rng.standard_normal((1, 2, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    out = fk.dispatch(fk.OpKind.CONV2D, [x, w], params=fk.params.conv2d(stride=2, padding=1))
    assert out.shape == (1, 4, 5, 5)
    expected, _ = reference(x, w, None, 2, 1, 1, 1)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_cost_picks_direct_for_tiny_and_im2col_for_large():
    """The route picker's time model (fuel_kernel.route.estimate_ns) on fixed machine constants."""
    from fuel_kernel.route import MachineConstants, estimate_ns
    machine = MachineConstants(peak_flops=1e11, bandwidth=2e10)

    def seconds(kernel, *shapes, params):
        return estimate_ns(kernel.cost(*shapes, params=params), machine)

    kernels = {k.source: k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, [fk.DType.F32] * 3, 0)}
    p = fk.params.conv2d(padding=1)
    tiny = ((1, 1, 4, 4), (1, 1, 3, 3), (1, 1, 4, 4))
    big = ((8, 32, 56, 56), (64, 32, 3, 3), (8, 64, 56, 56))
    assert seconds(kernels["direct"], *tiny, params=p) < seconds(kernels["im2col"], *tiny, params=p)
    assert seconds(kernels["im2col"], *big, params=p) < seconds(kernels["direct"], *big, params=p)


@pytest.mark.parametrize("problem", ["dtype", "out_shape", "groups", "too_big", "params", "bias",
                                     "rank", "readonly", "alias"])
def test_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    inputs = [x, w]
    out = np.full((1, 2, 4, 4), 7.0, np.float32)
    params = fk.params.conv2d()
    error = fk.ShapeError
    if problem == "dtype":
        out = np.full((1, 2, 4, 4), 7.0, np.float64)
        error = fk.DTypeError
    elif problem == "out_shape":
        out = np.full((1, 2, 5, 4), 7.0, np.float32)
    elif problem == "groups":
        params = fk.params.conv2d(groups=3)
    elif problem == "too_big":
        inputs[1] = rng.standard_normal((2, 4, 7, 3)).astype(np.float32)
    elif problem == "params":
        params = fk.params.reduce((0,))
        error = fk.ParamsError
    elif problem == "bias":
        inputs.append(np.ones(3, np.float32))
    elif problem == "rank":
        inputs[0] = x[0]
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":
        big = np.zeros(200, np.float32)
        out = big[:32].reshape(1, 2, 4, 4)
        inputs[0] = big[16:160].reshape(1, 4, 6, 6)
        error = fk.AliasError
    dts = [fk.DType.F32] * (len(inputs) + 1)
    for kernel in fk.bindings().alternatives(fk.OpKind.CONV2D, dts, fk.Backend.CPU):
        before = out.copy()
        with pytest.raises(error):
            kernel(*inputs, out=out, params=params)
        np.testing.assert_array_equal(out, before)
