"""CONV2D (im2col and direct siblings), its gradients CONV2D_BACKWARD_INPUT and
CONV2D_BACKWARD_WEIGHT, CONV1D (CONV2D's siblings on a height-1 view) and CONV_TRANSPOSE2D (the
input gradient's run plus a bias) against float64 NumPy references: every binding, stride, padding, dilation, groups, bias, strided operands, 0-size and
1x1 shapes, precision claims, the cost functions' choice by shape, the same bits on 1, 2 and 3
threads (1, 2, 3 and 7 for the tasks the gradients and CONV_TRANSPOSE2D cut themselves), and error
paths that leave the output untouched (also on those tasks' path).  The gradient references are checked
against central finite differences of the forward reference."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch
from fuel_kernel.graph import Graph
from oracles import conv1d_reference, conv2d_backward_input_reference, conv2d_backward_weight_reference
from oracles import conv_transpose2d_output_size, conv_transpose2d_reference
from oracles import conv2d_output_size
from oracles import conv2d_reference as reference
from support import FLOAT_DTYPES, LAYOUTS, gemm_k_blocks, make_operand

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


# (x shape, w shape, stride, padding, groups): one image of 900 pixels (6 chunks, the last 100 pixels:
# a partial strip), and two images of two groups at stride (1, 2) (P = 360: 4 tasks of 2 chunks)
IM2COL_TASK_SHAPES = [((1, 16, 30, 30), (48, 16, 3, 3), 1, 1, 1), ((2, 32, 20, 36), (64, 16, 3, 3), (1, 2), 1, 2)]


@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.F64, fk.DType.F16])
@pytest.mark.parametrize("shape", IM2COL_TASK_SHAPES, ids=["1-image", "groups-2"])
def test_conv2d_im2col_pixel_chunk_tasks_same_bits_for_every_thread_count(dtype, shape, rng):
    """The im2col sibling cuts its own (image, group, chunk of output pixels) tasks: 1, 2 and 3 threads
    give the bits of the one-thread run, dense and strided outputs (F16 and the strided view go through
    a result block), with and without bias, within the claim of the reference."""
    xs, ws, stride, padding, groups = shape
    x = rng.standard_normal(xs).astype(dtype.numpy)
    w = (rng.standard_normal(ws) * 0.2).astype(dtype.numpy)
    b = rng.standard_normal(ws[0]).astype(dtype.numpy)
    for bias in (None, b):
        dts = [dtype] * (3 if bias is None else 4)
        kernel, = [k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, dts) if k.source == "im2col"]
        expected, scale = reference(x, w, bias, stride, padding, 1, groups)
        for strided in (False, True):
            results = []
            for threads in (1, 2, 3):
                if strided:
                    out = np.full(expected.shape[:3] + (2 * expected.shape[3],), 7, dtype.numpy)[..., ::2]
                else:
                    out = np.full(expected.shape, 7, dtype.numpy)
                calls = _dispatch._parallel_calls()
                with fk.threads(threads):
                    run(kernel, x, w, bias, out, stride, padding, 1, groups)
                assert (_dispatch._parallel_calls() > calls) == (threads > 1), threads
                results.append(out.copy())
            assert all(r.tobytes() == results[0].tobytes() for r in results[1:]), (bias is None, strided)
            err = np.abs(results[0].astype(np.float64) - expected)
            assert (err <= kernel.precision.max_rel * scale + kernel.precision.max_abs).all(), err.max()


# Shapes whose extra plane columns (Wq - OW, Wq at most OW + (KW-1)*dw/sw) are at most 1/8 of Wq,
# so the im2col sibling packs its B panels from padded, stride-phase planes (conv_kernels.h.in).
# Where a row's reads past its end meet only zeros (its right padding, then the next row's left),
# the rows share them and Wq is smaller (fk_conv_plane_pitch):
# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups)
PLANE_SHAPES = [(2, 5, 12, 30, 6, 3, 3, 1, 1, 1, 1),              # Wq 31 for OW 30 (32 unshared)
                (1, 3, 10, 34, 4, 3, 3, 1, 0, 1, 1),              # no padding to share: Wq 34 for OW 32
                (2, 3, 9, 30, 5, 3, 3, 1, 2, 1, 1),               # padding 2: Wq 32 = OW, no dropped column
                (1, 4, 15, 40, 6, 3, 3, 2, 1, 1, 1),              # stride 2: two phases per axis
                (1, 4, 13, 60, 4, 5, 3, (3, 2), 2, (1, 3), 2),    # phases of stride 3 x 2, dilation 3
                (2, 6, 9, 24, 4, 1, 1, 1, 0, 1, 2),               # 1x1: dense F32/F64 x is read in place
                (1, 4, 10, 40, 6, 2, 2, 2, 0, 1, 1),              # 2x2 patches: four phases, one tap each
                (1, 3, 20, 64, 4, 7, 7, 2, 3, 1, 1),              # a ResNet stem: Wq 34 for OW 32 (35)
                (1, 2, 2, 600, 3, 1, 3, 1, 0, (1, 32), 1)]        # Wq 600 for OW 536: a strip of dropped columns only


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_conv2d_im2col_from_padded_planes(dtype, rng):
    """Shapes that take the padded-plane packing (the masked planes' on AVX-512 CPUs where their
    geometry allows)."""
    check_plane_shapes(PLANE_SHAPES, dtype, rng)


# Shapes of the masked planes (AVX-512 CPUs: no padding stored, Wq = OW; the padded planes elsewhere):
# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups)
MASKED_SHAPES = [(2, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1),                # OW 7: a 32-pixel strip spans 5 rows
                 (2, 3, 11, 13, 5, 3, 3, 2, 1, 1, 1),              # stride 2, odd extents: phases of 6 and 5 rows
                 (1, 4, 9, 20, 3, 3, 3, 1, 2, 2, 1),               # dilation 2, padding 2: OW == W, x in place
                 (1, 4, 12, 16, 4, 5, 5, 1, 2, 1, 2),              # 5x5, two groups
                 (1, 2, 6, 9, 3, 1, 3, 1, (0, 1), 1, 1),           # a 1x3 kernel: masked columns only
                 (1, 3, 6, 6, 2, 3, 3, 1, 3, 1, 1),                # padding 3: OW > W, zeros stored past W
                 (1, 3, 40, 40, 9, 3, 3, (2, 1), (1, 2), 1, 1)]    # strides 2 x 1, more than one chunk of rows


def check_plane_shapes(shapes, dtype, rng):
    """Each shape, every layout of x and w, strided outputs, bias, against the reference within the
    claim, and the same bits on 1 and 3 threads."""
    for i, (N, C, H, W, O, KH, KW, stride, padding, dilation, groups) in enumerate(shapes):
        for bias in (False, True):
            dts = [dtype] * (4 if bias else 3)
            kernel, = [k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, dts) if k.source == "im2col"]
            claim = kernel.precision
            for layout in LAYOUTS:
                x = make_operand((N, C, H, W), dtype, layout, rng, special=False)
                w = make_operand((O, C // groups, KH, KW), dtype, "contiguous" if i % 2 else layout, rng, special=False)
                b = make_operand((O,), dtype, "offset", rng, special=False) if bias else None
                expected, scale = reference(x, w, b, stride, padding, dilation, groups)
                results = []
                for threads in (1, 3):
                    if layout == "transposed":
                        out = np.full(expected.shape[:1] + expected.shape[2:] + expected.shape[1:2], 7,
                                      dtype=dtype.numpy).transpose(0, 3, 1, 2)
                    else:
                        out = np.full(expected.shape, 7, dtype=dtype.numpy)
                    with fk.threads(threads):
                        run(kernel, x, w, b, out, stride, padding, dilation, groups)
                    results.append(out.copy())
                err = np.abs(results[0].astype(np.float64) - expected)
                assert (err <= claim.max_rel * scale + claim.max_abs).all(), (i, bias, layout, err.max())
                assert results[1].tobytes() == results[0].tobytes(), (i, bias, layout)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_conv2d_im2col_from_masked_planes(dtype, rng):
    """Shapes whose padding the masked planes leave out (on AVX-512 CPUs; the padded planes or the
    image's packing elsewhere)."""
    check_plane_shapes(MASKED_SHAPES, dtype, rng)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_masked_lanes_never_reach_the_sum(stride, rng):
    """x in place inside a buffer of NaN: each channel's rows framed by NaN rows, NaN before and after
    them in the storage.  The masked planes read whole vectors around x's rows (or mask the loads near
    the storage's ends); a NaN that reached a sum would show in the output."""
    N, C, H, W, O = 2, 5, 9, 40, 6
    buf = np.full((N, C + 2, H + 2, W), np.nan, np.float32)
    x = buf[:, 1:C + 1, 1:H + 1, :]
    x[...] = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal((O, C, 3, 3)).astype(np.float32)
    kernel, = [k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, [fk.DType.F32] * 3) if k.source == "im2col"]
    expected, scale = reference(x, w, None, stride, 1, 1, 1)
    got = run(kernel, x, w, None, np.empty(expected.shape, np.float32), stride, 1, 1, 1)
    assert not np.isnan(got).any()
    assert (np.abs(got - expected) <= 1e-5 * scale + 1e-6).all()


# (C, H, W, O, stride): 3x3, padding 1; K = 9 C from one K block to three (kstep from K alone), O
# with a partial 8-row tile, OH * OW with a partial 32-column strip
ENGINE_SHAPES = [(5, 12, 30, 12, 1), (100, 9, 21, 20, 1), (190, 11, 14, 9, 2)]


def test_the_engine_shapes_span_one_to_three_k_blocks():
    assert [gemm_k_blocks(fk.DType.F32, 9 * shape[0]) for shape in ENGINE_SHAPES] == [1, 2, 3]


@pytest.mark.parametrize("shape", ENGINE_SHAPES, ids=str)
def test_conv2d_im2col_has_the_matmul_engines_bits(shape, rng):
    """The im2col sibling's planes path (on AVX-512 its micro-kernel reads B's rows from the
    planes in place; elsewhere it packs them) gives the bits of the native MATMUL of the weight
    rows and NumPy-built image columns: the same engine, K blocks and fma order."""
    C, H, W, O, stride = shape
    x = rng.standard_normal((2, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, 3, 3)).astype(np.float32)
    kernel, = [k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, [fk.DType.F32] * 3) if k.source == "im2col"]
    OH, OW = (H + 2 - 3) // stride + 1, (W + 2 - 3) // stride + 1
    got = run(kernel, x, w, None, np.empty((2, O, OH, OW), np.float32), stride, 1, 1, 1)
    matmul, = [k for k in fk.bindings().alternatives(fk.OpKind.MATMUL, [fk.DType.F32] * 3) if k.source == "native"]
    xpad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for n in range(2):
        cols = np.stack([xpad[n, c, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride].reshape(-1)
                         for c in range(C) for kh in range(3) for kw in range(3)])
        want = matmul(w.reshape(O, -1), np.ascontiguousarray(cols), out=np.empty((O, OH * OW), np.float32))
        assert got[n].reshape(O, -1).tobytes() == want.tobytes(), n


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_im2col_planes_in_batches_of_images(stride, rng):
    """Images whose planes pass FK_CONV_PLANE_ELEMS a thread (1M elements; 160 channels of 132 x 132
    padded, or of four 65 x 65 phases: stride 1 reads x in place on AVX-512 CPUs, stride 2 fills
    them) go one batch at a time: three images in one call give the bits of each image alone."""
    x = rng.standard_normal((3, 160, 130, 130)).astype(np.float32)
    w = (rng.standard_normal((8, 160, 3, 3)) * 0.1).astype(np.float32)
    kernel, = [k for k in fk.bindings().alternatives(fk.OpKind.CONV2D, [fk.DType.F32] * 3) if k.source == "im2col"]
    side = (130 - 1) // stride + 1
    whole = run(kernel, x, w, None, np.empty((3, 8, side, side), np.float32), stride, 1, 1, 1)
    for n in range(3):
        alone = run(kernel, x[n:n + 1], w, None, np.empty((1, 8, side, side), np.float32), stride, 1, 1, 1)
        assert alone.tobytes() == whole[n:n + 1].tobytes(), n
    expected, scale = reference(x[2:, :, :20, :20], w, None, stride, 1, 1, 1)
    inner = (Ellipsis, slice(0, 19 // stride), slice(0, 19 // stride))   # outputs that read no column or row past 20
    assert (np.abs(whole[2:][inner] - expected[inner]) <= 1e-5 * scale[inner]).all()


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


# ---- CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT ------------------------------------------------
BACKWARD_INPUT, BACKWARD_WEIGHT = fk.OpKind.CONV2D_BACKWARD_INPUT, fk.OpKind.CONV2D_BACKWARD_WEIGHT
BACKWARD_CASES = [(op, dt) for op in (BACKWARD_INPUT, BACKWARD_WEIGHT) for dt in FLOAT_DTYPES]
# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups): stride remainders (rows or columns
# of x no tap reads), groups, depthwise, dilation, 1x1 taps that skip inputs, a kernel as large as
# the input, no image, no input or output channel, an output wider than one GEMM block of dx's
# columns, and more positions than one GEMM depth block of dw's
BACKWARD_SHAPES = [(2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1), (1, 4, 8, 9, 6, 3, 2, 2, (1, 0), 1, 2),
                   (1, 6, 11, 13, 6, 3, 3, (2, 3), 2, 2, 3), (2, 2, 5, 5, 3, 1, 1, 2, 0, 1, 1),
                   (1, 1, 5, 5, 1, 5, 5, 1, 0, 1, 1), (0, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1),
                   (1, 2, 1, 1, 3, 1, 1, 1, 0, 1, 1), (2, 6, 6, 7, 6, 3, 3, 1, 1, 1, 6),
                   (1, 3, 33, 40, 5, 3, 3, 1, 1, 1, 1), (1, 2, 4, 4, 3, 3, 3, 3, 2, 2, 1),
                   (1, 0, 4, 4, 2, 3, 3, 1, 1, 1, 1), (2, 4, 6, 6, 0, 3, 3, 1, 1, 1, 2),
                   (1, 3, 2, 600, 2, 1, 3, 1, (0, 1), 1, 1)]


def backward_params(H, W, KH, KW, stride=1, padding=0, dilation=1, groups=1):
    return fk.params.conv2d_backward(input_size=(H, W), kernel_size=(KH, KW), stride=stride, padding=padding,
                                     dilation=dilation, groups=groups)


def output_like(shape, dtype, layout, fill=7):
    """A preallocated output filled with `fill`: channels-last for "transposed", reversed for
    "negative", dense otherwise."""
    if layout == "transposed":
        return np.full(shape[:1] + shape[2:] + shape[1:2], fill, dtype=dtype.numpy).transpose(0, 3, 1, 2)
    if layout == "negative":
        return np.full(shape, fill, dtype=dtype.numpy)[::-1, :, ::-1]
    return np.full(shape, fill, dtype=dtype.numpy)


@pytest.mark.parametrize("op,dtype", BACKWARD_CASES,
                         ids=[f"{op.short_name}-{d.short_name}" for op, d in BACKWARD_CASES])
def test_conv2d_backward_binding(op, dtype, rng):
    kernels = fk.bindings().alternatives(op, [dtype] * 3, fk.Backend.CPU)
    assert [k.source for k in kernels] == ["native"]
    kernel, claim = kernels[0], kernels[0].precision
    for i, (N, C, H, W, O, KH, KW, stride, padding, dilation, groups) in enumerate(BACKWARD_SHAPES):
        OH, OW = conv2d_output_size((H, W), (KH, KW), stride, padding, dilation)
        params = backward_params(H, W, KH, KW, stride, padding, dilation, groups)
        for layout in (LAYOUTS if i < 3 else ("contiguous", LAYOUTS[i % len(LAYOUTS)])):
            dy = make_operand((N, O, OH, OW), dtype, layout, rng, special=False)
            if op is BACKWARD_INPUT:
                w = make_operand((O, C // groups, KH, KW), dtype, layout, rng, special=False)
                inputs = (dy, w)
                expected, scale = conv2d_backward_input_reference(dy, w, (H, W), stride, padding, dilation, groups)
            else:
                x = make_operand((N, C, H, W), dtype, layout, rng, special=False)
                inputs = (x, dy)
                expected, scale = conv2d_backward_weight_reference(x, dy, (KH, KW), stride, padding, dilation, groups)
            out = output_like(expected.shape, dtype, layout)
            assert kernel(*inputs, out=out, params=params) is out
            err = np.abs(out.astype(np.float64) - expected)
            assert (err <= claim.max_rel * scale + claim.max_abs).all(), (i, layout, err.max())


# (x shape, w shape, stride, padding, dilation, groups)
FINITE_DIFFERENCE_CASES = [((2, 2, 5, 6), (3, 2, 3, 3), 1, 1, 1, 1), ((1, 4, 8, 7), (6, 2, 3, 2), 2, (1, 0), (1, 2), 2),
                           ((2, 3, 7, 6), (3, 1, 2, 3), (3, 2), 2, 2, 3), ((1, 2, 5, 5), (2, 2, 1, 1), 2, 0, 1, 1)]


@pytest.mark.parametrize("case", FINITE_DIFFERENCE_CASES, ids=lambda c: f"x{c[0]}-w{c[1]}")
def test_finite_differences_of_the_forward_reference_validate_the_gradient_references(case, rng):
    """dL/dx and dL/dw of L = sum(conv2d(x, w) * dy), by central differences of the forward F64
    reference (exact up to rounding: L is linear in each), match the gradient references."""
    x_shape, w_shape, stride, padding, dilation, groups = case
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    forward = lambda x_, w_: reference(x_, w_, None, stride, padding, dilation, groups)[0]
    dy = rng.standard_normal(forward(x, w).shape)
    loss = lambda x_, w_: float((forward(x_, w_) * dy).sum())
    h = 0.5
    conv = (stride, padding, dilation, groups)
    for wrt, gradient in ((x, conv2d_backward_input_reference(dy, w, x_shape[2:], *conv)[0]),
                          (w, conv2d_backward_weight_reference(x, dy, w_shape[2:], *conv)[0])):
        numeric = np.zeros(wrt.shape)
        for index in np.ndindex(wrt.shape):
            step = np.zeros(wrt.shape)
            step[index] = h
            plus, minus = (loss(x + step, w), loss(x - step, w)) if wrt is x else (loss(x, w + step), loss(x, w - step))
            numeric[index] = (plus - minus) / (2 * h)
        np.testing.assert_allclose(numeric, gradient, rtol=1e-9, atol=1e-9)


def test_gradients_through_the_kernels_match_finite_differences_of_the_forward_kernel(rng):
    """The same check on the F64 kernels themselves: CONV2D differenced against both gradients."""
    x, w = rng.standard_normal((1, 4, 7, 6)), rng.standard_normal((4, 2, 3, 2))
    conv_params = fk.params.conv2d(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    forward = lambda x_, w_: fk.dispatch(fk.OpKind.CONV2D, [x_, w_], params=conv_params)
    dy = rng.standard_normal(forward(x, w).shape)
    params = backward_params(7, 6, 3, 2, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    dx = fk.dispatch(BACKWARD_INPUT, [dy, w], params=params)
    dw = fk.dispatch(BACKWARD_WEIGHT, [x, dy], params=params)
    for wrt, gradient in ((x, dx), (w, dw)):
        numeric = np.zeros(wrt.shape)
        for index in np.ndindex(wrt.shape):
            step = np.zeros(wrt.shape)
            step[index] = 0.5
            plus = forward(x + step, w) if wrt is x else forward(x, w + step)
            minus = forward(x - step, w) if wrt is x else forward(x, w - step)
            numeric[index] = ((plus - minus) * dy).sum()
        np.testing.assert_allclose(numeric, gradient, rtol=1e-9, atol=1e-9)


def test_dx_is_plus_zero_where_no_tap_reaches(rng):
    """A 1x1 kernel at stride 2 reads the even rows and columns of a 5x6 input: the rest of dx is +0
    (the output was NaN before), and dw sums over the positions read."""
    dy = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    params = backward_params(5, 6, 1, 1, stride=2)
    kernel = fk.bindings().lookup(BACKWARD_INPUT, [fk.DType.F32] * 3, fk.Backend.CPU)
    dx = kernel(dy, w, out=np.full((2, 2, 5, 6), np.nan, np.float32), params=params)
    skipped = np.ones(dx.shape, bool)
    skipped[:, :, ::2, ::2] = False
    assert (dx[skipped] == 0).all() and not np.signbit(dx[skipped]).any()
    np.testing.assert_allclose(dx[:, :, ::2, ::2], np.einsum("nohw,oc->nchw", dy, w[:, :, 0, 0]), rtol=1e-5, atol=1e-6)


def test_nan_in_dy_reaches_exactly_the_inputs_of_its_window(rng):
    dy = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    dy[0, 1, 1, 2] = np.nan
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    dx = fk.dispatch(BACKWARD_INPUT, [dy, w], params=backward_params(6, 6, 3, 3))
    window = np.zeros(dx.shape, bool)
    window[0, :, 1:4, 2:5] = True
    assert (np.isnan(dx) == window).all()


def test_inf_dy_meeting_the_padding_gives_nan_in_dw_as_conv2d_counts_the_padding(rng):
    """dy at output (0, 0) is inf; with padding 1 its taps kh = 0 and kw = 0 read padding zeros
    (inf * 0 = NaN, the zeros take part as in CONV2D); its other taps read finite x (+-inf)."""
    x = rng.uniform(1, 2, (1, 1, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    dy[0, 0, 0, 0] = np.inf
    dw = fk.dispatch(BACKWARD_WEIGHT, [x, dy], params=backward_params(4, 4, 3, 3, padding=1))
    expected, _ = conv2d_backward_weight_reference(x, dy, (3, 3), 1, 1, 1, 1)
    assert np.isnan(dw[0, 0, 0, :]).all() and np.isnan(dw[0, 0, :, 0]).all()
    assert (dw[0, 0, 1:, 1:] == np.inf).all() and np.isfinite(dw[1]).all()
    np.testing.assert_array_equal(np.isnan(dw), np.isnan(expected))


def test_dispatch_allocates_the_gradients_from_params(rng):
    """Inputs of height 7 and 8 both give 4 output rows at stride 2: input_size says which."""
    dy = rng.standard_normal((1, 4, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    for H in (7, 8):
        params = backward_params(H, 9, 3, 3, stride=2, padding=1)
        dx = fk.dispatch(BACKWARD_INPUT, [dy, w], params=params)
        assert dx.shape == (1, 2, H, 9)
        np.testing.assert_allclose(dx, conv2d_backward_input_reference(dy, w, (H, 9), 2, 1, 1, 1)[0], rtol=1e-4,
                                   atol=1e-5)
        x = rng.standard_normal((1, 2, H, 9)).astype(np.float32)
        dw = fk.dispatch(BACKWARD_WEIGHT, [x, dy], params=params)
        assert dw.shape == (4, 2, 3, 3)
        np.testing.assert_allclose(dw, conv2d_backward_weight_reference(x, dy, (3, 3), 2, 1, 1, 1)[0], rtol=1e-4,
                                   atol=1e-5)


def test_graph_builders_infer_the_gradient_shapes(rng):
    g = Graph()
    x, w = g.input((2, 4, 9, 8), fk.DType.F32), g.input((6, 2, 3, 3), fk.DType.F32)
    y = g.conv2d(x, w, stride=2, padding=1, groups=2)
    dy = g.input(y.shape, fk.DType.F32)
    keywords = dict(input_size=(9, 8), kernel_size=(3, 3), stride=2, padding=1, groups=2)
    dx, dw = g.conv2d_backward_input(dy, w, **keywords), g.conv2d_backward_weight(x, dy, **keywords)
    assert (dx.shape, dw.shape) == ((2, 4, 9, 8), (6, 2, 3, 3))
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in ((2, 4, 9, 8), (6, 2, 3, 3), y.shape)]
    got_dx, got_dw = g.compile([dx, dw]).run(arrays)
    np.testing.assert_allclose(got_dx, conv2d_backward_input_reference(arrays[2], arrays[1], (9, 8), 2, 1, 1, 2)[0],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_dw, conv2d_backward_weight_reference(arrays[0], arrays[2], (3, 3), 2, 1, 1, 2)[0],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [lambda: backward_params(-1, 4, 3, 3), lambda: backward_params(4, 4, 0, 3),
                                  lambda: backward_params(4, 4, 3, 3, stride=0),
                                  lambda: backward_params(4, 4, 3, 3, groups=0),
                                  lambda: backward_params(4, 4, 3, 3, padding=-1),
                                  lambda: backward_params((4,), 4, 3, 3)])
def test_bad_conv2d_backward_params_are_params_errors(make):
    with pytest.raises(fk.ParamsError):
        make()


def test_conv2d_backward_params_round_trip():
    p = fk.params.conv2d_backward(input_size=(2 ** 40, 5), kernel_size=3, stride=(2, 1), padding=1, groups=4)
    assert p.fields() == {"input_size": (2 ** 40, 5), "kernel_size": (3, 3), "stride": (2, 1), "padding": (1, 1),
                          "dilation": (1, 1), "groups": 4}


SHARED_REFUSALS = ("self_overlap", "count")


def shared_refusal(problem, inputs, out):
    """(inputs, out, the error expected) for a refusal every conv call makes alike: an output whose
    rows overlap each other, or an operand missing."""
    if problem == "self_overlap":
        return inputs, np.lib.stride_tricks.as_strided(np.full(out.size, 7.0, np.float32), out.shape,
                                                       (0,) + out.strides[1:]), fk.AliasError
    return inputs[:1], out, fk.OperandCountError


BACKWARD_PROBLEMS = ["dtype", "out_shape", "input_size", "kernel_size", "groups", "no_params", "conv2d_params",
                     "rank", "batch", "readonly", "alias", "self_overlap", "count"]


@pytest.mark.parametrize("op", [BACKWARD_INPUT, BACKWARD_WEIGHT], ids=lambda op: op.short_name)
@pytest.mark.parametrize("problem", BACKWARD_PROBLEMS)
def test_backward_errors_leave_the_output_untouched(op, problem, rng):
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    inputs = [dy, w] if op is BACKWARD_INPUT else [x, dy]
    out = np.full((2, 4, 6, 6) if op is BACKWARD_INPUT else (2, 4, 3, 3), 7.0, np.float32)
    params = backward_params(6, 6, 3, 3)
    error = fk.ShapeError
    if problem == "dtype":
        out = out.astype(np.float64)
        error = fk.DTypeError
    elif problem == "out_shape":
        out = np.full((2, 4, 7, 6) if op is BACKWARD_INPUT else (2, 4, 3, 2), 7.0, np.float32)
    elif problem == "input_size":                   # 7x6 gives 5 output rows, dy has 4
        params = backward_params(7, 6, 3, 3)
        out = np.full((2, 4, 7, 6), 7.0, np.float32) if op is BACKWARD_INPUT else out
    elif problem == "kernel_size":                  # w is 3x3 (input gradient), dw is 3x3
        params = backward_params(6, 6, 3, 2, padding=(0, 0))
        dy_wide = rng.standard_normal((2, 2, 4, 5)).astype(np.float32)
        inputs = [dy_wide, w] if op is BACKWARD_INPUT else [x, dy_wide]
    elif problem == "groups":
        params = backward_params(6, 6, 3, 3, groups=3)
    elif problem == "no_params":
        params = None
        error = fk.ParamsError
    elif problem == "conv2d_params":
        params = fk.params.conv2d()
        error = fk.ParamsError
    elif problem == "rank":
        inputs[0] = inputs[0][0]
    elif problem == "batch":
        inputs[0] = inputs[0][:1]
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":
        big = np.zeros(400, np.float32)
        inputs[1] = big[:inputs[1].size].reshape(inputs[1].shape)
        out = big[8:8 + out.size].reshape(out.shape)
        error = fk.AliasError
    elif problem in SHARED_REFUSALS:
        inputs, out, error = shared_refusal(problem, inputs, out)
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * 2 + [fk.DType.F32], fk.Backend.CPU)
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)




# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups) of input-gradient calls that run on the
# pool as (image, group, block of dx's channels) tasks: one image of 70 channels (blocks of 17, the
# last of 2), three images at stride 2 (4 blocks of 16 each), two images of two groups at dilation 2
# (images x groups x 2 blocks of 16)
DX_TASK_SHAPES = [(1, 70, 20, 20, 64, 3, 3, 1, 1, 1, 1), (3, 64, 40, 40, 64, 3, 3, 2, 1, 1, 1),
                  (2, 64, 24, 24, 64, 3, 3, 1, 2, 2, 2)]
THREAD_COUNTS = (1, 2, 3, 7)


def threaded_results(call, out_shape, dtype, layout):
    """call(out) on 1, 2, 3 and 7 threads into fresh outputs of `layout`; the pool is used exactly when
    there is more than one thread."""
    results = []
    for threads in THREAD_COUNTS:
        out = (np.full(out_shape[:3] + (2 * out_shape[3],), 7, dtype.numpy)[..., ::2] if layout == "every-other"
               else output_like(out_shape, dtype, layout))
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            assert call(out) is out
        assert (_dispatch._parallel_calls() > calls) == (threads > 1), threads
        results.append(out.copy())
    return results


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape", DX_TASK_SHAPES, ids=["1-image", "stride-2", "groups-dilation"])
def test_conv2d_backward_input_channel_block_tasks_same_bits_for_every_thread_count(dtype, shape, rng):
    """The input-gradient run cuts its own (image, group, channel block) tasks and starts them all at
    once: 1, 2, 3 and 7 threads give the bits of the one-thread run, into dense outputs (F32/F64
    accumulate in place), channels-last and every-other-column ones (through a compute-type slab),
    from a dense and a channels-last dy, within the claim of the reference."""
    N, C, H, W, O, KH, KW, stride, padding, dilation, groups = shape
    OH, OW = conv2d_output_size((H, W), (KH, KW), stride, padding, dilation)
    kernel = fk.bindings().lookup(BACKWARD_INPUT, [dtype] * 3)
    params = backward_params(H, W, KH, KW, stride, padding, dilation, groups)
    w = make_operand((O, C // groups, KH, KW), dtype, "contiguous", rng, special=False)
    for dy_layout, layout in (("contiguous", "contiguous"), ("transposed", "transposed"),
                              ("contiguous", "every-other")):
        dy = make_operand((N, O, OH, OW), dtype, dy_layout, rng, special=False)
        expected, scale = conv2d_backward_input_reference(dy, w, (H, W), stride, padding, dilation, groups)
        results = threaded_results(lambda out: kernel(dy, w, out=out, params=params), (N, C, H, W), dtype, layout)
        assert all(r.tobytes() == results[0].tobytes() for r in results[1:]), layout
        err = np.abs(results[0].astype(np.float64) - expected)
        assert (err <= kernel.precision.max_rel * scale + kernel.precision.max_abs).all(), (layout, err.max())


# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups) of weight-gradient calls that run on the
# pool: one group of 576 rows of dw^T (8 blocks of 72, dy^T packed once for them all), 90 rows
# (blocks of 8 rows, the last of 2), stride 2 with dilation, and four groups (a task each)
DW_TASK_SHAPES = [(2, 64, 20, 20, 64, 3, 3, 1, 1, 1, 1), (4, 10, 32, 32, 64, 3, 3, 1, 1, 1, 1),
                  (2, 32, 30, 30, 48, 3, 3, 2, 1, 2, 1), (2, 64, 24, 24, 64, 3, 3, 1, 1, 1, 4)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape", DW_TASK_SHAPES, ids=["576-rows", "90-rows", "stride-dilation", "groups"])
def test_conv2d_backward_weight_row_block_tasks_same_bits_for_every_thread_count(dtype, shape, rng):
    """The weight-gradient run cuts its own (group, block of dw^T's rows) tasks and starts them all at
    once, dy^T packed once before them when a group has several blocks: 1, 2, 3 and 7 threads give
    the bits of the one-thread run, from dense and reversed x, into dense, reversed and channels-last
    dw, within the claim of the reference."""
    N, C, H, W, O, KH, KW, stride, padding, dilation, groups = shape
    OH, OW = conv2d_output_size((H, W), (KH, KW), stride, padding, dilation)
    kernel = fk.bindings().lookup(BACKWARD_WEIGHT, [dtype] * 3)
    params = backward_params(H, W, KH, KW, stride, padding, dilation, groups)
    dy = make_operand((N, O, OH, OW), dtype, "contiguous", rng, special=False)
    for x_layout, layout in (("contiguous", "contiguous"), ("transposed", "negative"), ("contiguous", "transposed")):
        x = make_operand((N, C, H, W), dtype, x_layout, rng, special=False)
        expected, scale = conv2d_backward_weight_reference(x, dy, (KH, KW), stride, padding, dilation, groups)
        results = threaded_results(lambda out: kernel(x, dy, out=out, params=params), expected.shape, dtype, layout)
        assert all(r.tobytes() == results[0].tobytes() for r in results[1:]), layout
        err = np.abs(results[0].astype(np.float64) - expected)
        assert (err <= kernel.precision.max_rel * scale + kernel.precision.max_abs).all(), (layout, err.max())


# a call large enough for the gradients' and CONV_TRANSPOSE2D's tasks (2 images of 64 channels, 20x20,
# 3x3 taps, padding 1: 2 x 4 tasks; dw: 8 blocks of rows), and its refusals, each made on that path
LARGE_REFUSALS = ["dtype", "out_shape", "groups", "params", "bias", "readonly", "alias", "self_overlap", "count"]


@pytest.mark.parametrize("op", [BACKWARD_INPUT, BACKWARD_WEIGHT, fk.OpKind.CONV_TRANSPOSE2D],
                         ids=lambda op: op.short_name)
@pytest.mark.parametrize("problem", LARGE_REFUSALS)
def test_refusals_of_calls_cut_into_tasks_leave_the_output_untouched(op, problem, rng):
    a = rng.standard_normal((2, 64, 20, 20)).astype(np.float32)       # dy, x (dw), or CONV_TRANSPOSE2D's x
    second = (rng.standard_normal((2, 64, 20, 20)) if op == BACKWARD_WEIGHT     # dy (dw), or w
              else rng.standard_normal((64, 64, 3, 3))).astype(np.float32)
    inputs = [a, second]
    out_shape = (64, 64, 3, 3) if op == BACKWARD_WEIGHT else (2, 64, 20, 20)
    out = np.full(out_shape, 7.0, np.float32)
    transposed = op == fk.OpKind.CONV_TRANSPOSE2D
    params = fk.params.conv_transpose2d(1, 1, 1) if transposed else backward_params(20, 20, 3, 3, padding=1)
    error = fk.ShapeError
    if problem == "dtype":
        out = out.astype(np.float64)
        error = fk.DTypeError
    elif problem == "out_shape":
        out = np.full(out_shape[:3] + (out_shape[3] + 1,), 7.0, np.float32)
    elif problem == "groups":
        params = (fk.params.conv_transpose2d(1, 1, 1, groups=3) if transposed
                  else backward_params(20, 20, 3, 3, padding=1, groups=3))
    elif problem == "params":
        params = fk.params.conv2d(padding=1)
        error = fk.ParamsError
    elif problem == "bias":                         # a bias of the wrong extent (CONV_TRANSPOSE2D), or
        inputs.append(np.ones(63, np.float32))     # one operand too many (the gradients)
        error = fk.ShapeError if transposed else fk.OperandCountError
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":                        # the output overlaps the end of input 1
        big = np.zeros(second.size + out.size, np.float32)
        inputs[1] = big[:second.size].reshape(second.shape)
        inputs[1][...] = second
        out = big[second.size - 8:second.size - 8 + out.size].reshape(out.shape)
        error = fk.AliasError
    elif problem in SHARED_REFUSALS:
        inputs, out, error = shared_refusal(problem, inputs, out)
    n = 3 if problem == "count" or (problem == "bias" and not transposed) else len(inputs) + 1
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * n, fk.Backend.CPU)
    before = out.copy()
    with fk.threads(2):
        with pytest.raises(error):
            kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)
    if problem == "readonly":                       # the same call on a writable output runs on the pool
        out = out.copy()
        calls = _dispatch._parallel_calls()
        with fk.threads(2):
            kernel(*inputs, out=out, params=params)
        assert _dispatch._parallel_calls() > calls

# ---- CONV1D -----------------------------------------------------------------------------------------
CONV1D = fk.OpKind.CONV1D
CONV1D_CASES = [(dt, bias) for dt in FLOAT_DTYPES for bias in (False, True)]
# (N, C, L, O, K, stride, padding, dilation, groups): groups, depthwise, stride remainders, dilation,
# a kernel as long as the padded input, no image, no channel, and an output longer than one GEMM panel;
# ONNX's asymmetric pads (begin, end): more before, more after, pads longer than the kernel (outputs
# of padding only at either end), a kernel as long as the padded input, and the long output again
CONV1D_SHAPES = [(2, 3, 17, 4, 3, 1, 1, 1, 1), (1, 4, 20, 6, 3, 2, 1, 2, 2), (2, 6, 13, 6, 4, 3, 2, 1, 3),
                 (2, 3, 17, 4, 3, 1, (2, 0), 1, 1), (1, 4, 11, 6, 3, 2, (0, 3), 2, 2),
                 (2, 2, 6, 3, 2, 1, (5, 1), 1, 1), (1, 3, 4, 2, 3, 3, (1, 7), 1, 1), (1, 2, 1, 2, 2, 2, (6, 6), 3, 1),
                 (1, 2, 5, 3, 9, 1, (4, 0), 1, 1),
                 (1, 2, 5, 3, 5, 1, 0, 1, 1), (2, 4, 9, 4, 2, 1, 0, 3, 4), (0, 3, 8, 2, 3, 1, 1, 1, 1),
                 (1, 0, 8, 2, 3, 1, 1, 1, 1), (1, 3, 1, 2, 3, 1, 1, 1, 1), (1, 5, 1500, 7, 5, 1, 2, 1, 1),
                 (1, 5, 1500, 7, 5, 2, (1, 6), 1, 1)]
COVERED = {(CONV1D, (dt,) * (4 if bias else 3)) for dt, bias in CONV1D_CASES}


def conv1d_params(stride=1, padding=0, dilation=1, groups=1):
    return fk.params.conv1d(stride=stride, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("dtype,bias", CONV1D_CASES,
                         ids=[f"{d.short_name}-{'bias' if b else 'nobias'}" for d, b in CONV1D_CASES])
def test_conv1d_binding(dtype, bias, rng):
    dts = [dtype] * (4 if bias else 3)
    kernels = fk.bindings().alternatives(CONV1D, dts, fk.Backend.CPU)
    assert sorted(k.source for k in kernels) == ["direct", "im2col"]
    for kernel in kernels:
        claim = kernel.precision
        for i, (N, C, L, O, K, stride, padding, dilation, groups) in enumerate(CONV1D_SHAPES):
            for layout in (LAYOUTS if i < 5 else ("contiguous", LAYOUTS[i % len(LAYOUTS)])):
                x = make_operand((N, C, L), dtype, layout, rng, special=False)
                w = make_operand((O, C // groups, K), dtype, layout, rng, special=False)
                b = make_operand((O,), dtype, "negative", rng, special=False) if bias else None
                expected, scale = conv1d_reference(x, w, b, stride, padding, dilation, groups)
                out = np.full(expected.shape, 7, dtype=dtype.numpy)
                if layout in ("transposed", "negative"):     # a strided or reversed output view
                    out = np.full(expected.shape[::-1], 7, dtype=dtype.numpy).T if layout == "transposed" \
                        else out[::-1, :, ::-1]
                inputs = (x, w) if b is None else (x, w, b)
                assert kernel(*inputs, out=out, params=conv1d_params(stride, padding, dilation, groups)) is out
                err = np.abs(out.astype(np.float64) - expected)
                assert (err <= claim.max_rel * scale + claim.max_abs).all(), (kernel.source, i, layout, err.max())


@pytest.mark.parametrize("source", ["im2col", "direct"])
def test_conv1d_gives_conv2d_bits_on_the_height_1_view(source, rng):
    """One shared path: CONV1D is CONV2D's sibling on x[:, :, None], w[:, :, None], bit for bit."""
    x = rng.standard_normal((2, 6, 50)).astype(np.float32)
    w = rng.standard_normal((4, 3, 5)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    pick = lambda op, n: [k for k in fk.bindings().alternatives(op, [fk.DType.F32] * n) if k.source == source][0]
    got = pick(CONV1D, 4)(x, w, b, params=conv1d_params(2, 3, 2, 2))
    want = pick(fk.OpKind.CONV2D, 4)(x[:, :, None], w[:, :, None], b,
                                     params=fk.params.conv2d((1, 2), (0, 3), (1, 2), 2))
    assert got.tobytes() == want[:, :, 0].tobytes()


@pytest.mark.parametrize("source", ["im2col", "direct"])
def test_conv1d_asymmetric_pads_are_symmetric_pads_cut_or_zero_extended(source, rng):
    """Pads (begin, end) with end < begin give the first outputs of pads (begin, begin) bit for bit; with
    end > begin, those of pads (begin, begin) on x with end - begin zeros appended."""
    x = rng.standard_normal((2, 4, 23)).astype(np.float32)
    w = rng.standard_normal((6, 4, 4)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    kernel = [k for k in fk.bindings().alternatives(CONV1D, [fk.DType.F32] * 4) if k.source == source][0]
    fewer = kernel(x, w, b, params=conv1d_params(2, (5, 1)))
    symmetric = kernel(x, w, b, params=conv1d_params(2, 5))
    assert fewer.shape == (2, 6, 13) and fewer.tobytes() == np.ascontiguousarray(symmetric[:, :, :13]).tobytes()
    more = kernel(x, w, b, params=conv1d_params(2, (1, 6)))
    extended = kernel(np.concatenate([x, np.zeros((2, 4, 5), np.float32)], 2), w, b, params=conv1d_params(2, 1))
    assert more.shape == extended.shape == (2, 6, 14) and more.tobytes() == extended.tobytes()


@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.BF16])
def test_conv1d_same_bits_for_every_thread_count(dtype, rng):
    """Through CONV2D's threads (direct: the split's images x output-channel blocks; im2col: its own
    (image, pixel-chunk) tasks): the same bits on 1, 2 and 3 threads."""
    x = rng.standard_normal((2, 32, 900)).astype(dtype.numpy)
    w = rng.standard_normal((64, 32, 5)).astype(dtype.numpy)
    b = rng.standard_normal(64).astype(dtype.numpy)
    for kernel in fk.bindings().alternatives(CONV1D, [dtype] * 4):
        results = []
        for threads in (1, 2, 3):
            calls = _dispatch._parallel_calls()
            with fk.threads(threads):
                results.append(kernel(x, w, b, params=conv1d_params(padding=(3, 1))))
            # one thread runs the call whole
            assert (_dispatch._parallel_calls() > calls) == (threads > 1), (kernel.source, threads)
        assert all(r.tobytes() == results[0].tobytes() for r in results[1:]), kernel.source


def test_conv1d_dispatch_allocates_from_params_and_the_graph_builder(rng):
    x = rng.standard_normal((2, 4, 30)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    out = fk.dispatch(CONV1D, [x, w, b], params=conv1d_params(stride=2, padding=1, groups=2))
    assert out.shape == (2, 6, 15)
    expected, _ = conv1d_reference(x, w, b, 2, 1, 1, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert fk.dispatch(CONV1D, [x, w[:, :, :1].repeat(2, 1)]).shape == (2, 6, 30)    # params none: 1, 0, 1, 1
    g = Graph()
    gx, gw, gb = g.input(x.shape, fk.DType.F32), g.input(w.shape, fk.DType.F32), g.input(b.shape, fk.DType.F32)
    y, y_nobias = g.conv1d(gx, gw, gb, stride=2, padding=1, groups=2), g.conv1d(gx, gw, dilation=3, groups=2)
    assert (y.shape, y_nobias.shape) == ((2, 6, 15), (2, 6, 24))
    got, got_nobias = g.compile([y, y_nobias]).run([x, w, b])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_nobias, conv1d_reference(x, w, None, 1, 0, 3, 2)[0], rtol=1e-4, atol=1e-4)
    # ONNX's pads [begin, end]: the params, the shape rule that allocates, and the builder's padding=(begin, end)
    p = conv1d_params(stride=3, padding=(4, 0), groups=2)
    assert p.fields()["padding"] == (4, 0) and conv1d_params(padding=2).fields()["padding"] == (2, 2)
    out = fk.dispatch(CONV1D, [x, w, b], params=p)
    assert out.shape == (2, 6, 11)
    np.testing.assert_allclose(out, conv1d_reference(x, w, b, 3, (4, 0), 1, 2)[0], rtol=1e-4, atol=1e-4)
    g = Graph()
    gx, gw = g.input(x.shape, fk.DType.F32), g.input(w.shape, fk.DType.F32)
    y = g.conv1d(gx, gw, padding=(0, 7), dilation=2, groups=2)
    assert y.shape == (2, 6, 33)
    np.testing.assert_allclose(g.compile([y]).run([x, w])[0], conv1d_reference(x, w, None, 1, (0, 7), 2, 2)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [lambda: conv1d_params(stride=0), lambda: conv1d_params(padding=-1),
                                  lambda: conv1d_params(dilation=0), lambda: conv1d_params(groups=0),
                                  lambda: conv1d_params(stride=(1, 2)), lambda: conv1d_params(padding=1.5),
                                  lambda: conv1d_params(padding=(-1, 2)), lambda: conv1d_params(padding=(2, -1)),
                                  lambda: conv1d_params(padding=(1, 2, 3)), lambda: conv1d_params(padding=(1, 2 ** 31))])
def test_bad_conv1d_params_are_params_errors(make):
    with pytest.raises(fk.ParamsError):
        make()


CONV1D_PROBLEMS = ["dtype", "out_shape", "groups", "too_big", "params", "bias", "rank", "out_rank", "readonly",
                   "alias", "self_overlap", "count", "huge", "asymmetric_out_shape", "asymmetric_too_big",
                   "asymmetric_huge"]


@pytest.mark.parametrize("problem", CONV1D_PROBLEMS)
def test_conv1d_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((2, 4, 10)).astype(np.float32)
    w = rng.standard_normal((2, 4, 3)).astype(np.float32)
    inputs = [x, w]
    out = np.full((2, 2, 8), 7.0, np.float32)
    params = conv1d_params()
    error, match = fk.ShapeError, None
    if problem == "dtype":
        out = out.astype(np.float64)
        error = fk.DTypeError
    elif problem == "out_shape":
        out = np.full((2, 2, 9), 7.0, np.float32)
    elif problem == "groups":
        params = conv1d_params(groups=3)
    elif problem == "too_big":                      # a kernel of 11 taps on 10 positions
        inputs[1] = rng.standard_normal((2, 4, 11)).astype(np.float32)
    elif problem == "asymmetric_out_shape":         # pads (2, 0) give 10 outputs; 12 (pads (2, 2)'s) is wrong
        out = np.full((2, 2, 12), 7.0, np.float32)
        params = conv1d_params(padding=(2, 0))
    elif problem == "asymmetric_too_big":           # 13 taps on 10 positions padded with (0, 2): output size 0
        inputs[1] = rng.standard_normal((2, 4, 13)).astype(np.float32)
        out = np.full((2, 2, 1), 7.0, np.float32)
        params = conv1d_params(padding=(0, 2))
    elif problem == "asymmetric_huge":              # begin + end past int32: summed in int64, not wrapped
        params = conv1d_params(padding=(2 ** 31 - 1, 2 ** 31 - 1))
        match = "4294967302"
    elif problem == "params":
        params = fk.params.conv2d()
        error = fk.ParamsError
    elif problem == "bias":
        inputs.append(np.ones(3, np.float32))
    elif problem == "rank":
        inputs[0] = x[:, :, :, None]
    elif problem == "out_rank":
        out = np.full((2, 2, 1, 8), 7.0, np.float32)
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":
        big = np.zeros(200, np.float32)
        out = big[:32].reshape(2, 2, 8)
        inputs[0] = big[16:96].reshape(2, 4, 10)
        error = fk.AliasError
    elif problem == "self_overlap":
        out = np.lib.stride_tricks.as_strided(np.full(32, 7.0, np.float32), (2, 2, 8), (0, 32, 4))
        error = fk.AliasError
    elif problem == "count":
        inputs = inputs[:1]
        error = fk.OperandCountError
    elif problem == "huge":                         # dilation * (K - 1) overflows int64: refused, not wrapped
        with pytest.raises(fk.ParamsError):         # (padding past int32 is refused by the constructor)
            conv1d_params(padding=2 ** 40)
        inputs = [x[:1, :1], np.lib.stride_tricks.as_strided(w, (1, 1, 2 ** 60), (0, 0, 0))]
        out = out[:1, :1]
        params = conv1d_params(dilation=2 ** 30)
    dts = [fk.DType.F32] * (len(inputs) + 1)
    for kernel in fk.bindings().alternatives(CONV1D, dts if problem != "count" else [fk.DType.F32] * 3):
        before = out.copy()
        with pytest.raises(error, match=match):
            kernel(*inputs, out=out, params=params)
        np.testing.assert_array_equal(out, before)


# ---- CONV_TRANSPOSE2D ---------------------------------------------------------------------------------
TRANSPOSED = fk.OpKind.CONV_TRANSPOSE2D
TRANSPOSED_CASES = [(dt, bias) for dt in FLOAT_DTYPES for bias in (False, True)]
COVERED |= {(TRANSPOSED, (dt,) * (4 if bias else 3)) for dt, bias in TRANSPOSED_CASES}
# (N, C, H, W, O, KH, KW, stride, pads_begin, pads_end, dilation, output_padding, groups): stride with
# output padding, asymmetric pads, dilation, output padding below the dilation but not the stride (rows
# no tap reaches), groups and depthwise, pads past the kernel's reach, 1x1, no image, no input or output
# channel, and an input wider than one GEMM block of columns
TRANSPOSED_SHAPES = [(2, 3, 5, 6, 4, 3, 3, 2, 1, 1, 1, 1, 1), (1, 4, 4, 5, 6, 3, 2, (2, 3), (1, 0), (0, 2), 1, (1, 2), 2),
                     (1, 6, 5, 4, 3, 2, 3, 1, 0, (1, 0), 2, (1, 0), 3), (2, 4, 3, 3, 4, 1, 1, 2, 0, 0, 1, 1, 4),
                     (1, 2, 4, 4, 2, 3, 3, 3, 4, 2, 2, 0, 1), (1, 2, 1, 1, 3, 1, 1, 1, 0, 0, 1, 0, 1),
                     (0, 3, 4, 4, 2, 3, 3, 2, 1, 1, 1, 0, 1), (1, 0, 4, 4, 2, 3, 3, 1, 1, 1, 1, 0, 1),
                     (1, 2, 4, 4, 0, 3, 3, 1, 1, 1, 1, 0, 1), (1, 3, 2, 600, 2, 1, 3, 1, 0, (0, 1), 1, 0, 1)]


def transposed_params(stride=1, pads_begin=0, pads_end=0, dilation=1, output_padding=0, groups=1):
    return fk.params.conv_transpose2d(stride=stride, pads_begin=pads_begin, pads_end=pads_end, dilation=dilation,
                                      output_padding=output_padding, groups=groups)


@pytest.mark.parametrize("dtype,bias", TRANSPOSED_CASES,
                         ids=[f"{d.short_name}-{'bias' if b else 'nobias'}" for d, b in TRANSPOSED_CASES])
def test_conv_transpose2d_binding(dtype, bias, rng):
    kernels = fk.bindings().alternatives(TRANSPOSED, [dtype] * (4 if bias else 3), fk.Backend.CPU)
    assert [k.source for k in kernels] == ["native"]
    kernel, claim = kernels[0], kernels[0].precision
    for i, (N, C, H, W, O, KH, KW, stride, pb, pe, dilation, opad, groups) in enumerate(TRANSPOSED_SHAPES):
        params = transposed_params(stride, pb, pe, dilation, opad, groups)
        for layout in (LAYOUTS if i < 3 else ("contiguous", LAYOUTS[i % len(LAYOUTS)])):
            x = make_operand((N, C, H, W), dtype, layout, rng, special=False)
            w = make_operand((C, O // groups, KH, KW), dtype, layout, rng, special=False)
            b = make_operand((O,), dtype, "negative", rng, special=False) if bias else None
            expected, scale = conv_transpose2d_reference(x, w, b, stride, pb, pe, dilation, opad, groups)
            out = output_like(expected.shape, dtype, layout)
            inputs = (x, w) if b is None else (x, w, b)
            assert kernel(*inputs, out=out, params=params) is out
            err = np.abs(out.astype(np.float64) - expected)
            assert (err <= claim.max_rel * scale + claim.max_abs).all(), (i, layout, err.max())


def test_conv_transpose2d_is_the_input_gradient_bit_for_bit(rng):
    """One shared path: with pads_begin = pads_end and output_padding 0, CONV_TRANSPOSE2D of (x, w) is
    CONV2D_BACKWARD_INPUT of (dy = x, w) for the matching forward call, the same bits."""
    x = rng.standard_normal((2, 6, 7, 9)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    y = fk.dispatch(TRANSPOSED, [x, w], params=transposed_params(2, 1, 1, 1, 0, 3))
    dx = fk.dispatch(BACKWARD_INPUT, [x, w], params=backward_params(y.shape[2], y.shape[3], 3, 3, 2, 1, 1, 3))
    assert y.shape == (2, 6, 13, 17) and y.tobytes() == dx.tobytes()


def test_conv_transpose2d_agrees_with_torch(rng):
    """PyTorch's conv_transpose2d (symmetric padding) in F64 on every option the two share."""
    torch = pytest.importorskip("torch")
    for stride, padding, dilation, opad, groups, O in ((2, 1, 1, 1, 1, 6), ((2, 3), (0, 2), (2, 1), (1, 2), 2, 6),
                                                       (1, 0, 3, 2, 4, 4)):
        x = rng.standard_normal((2, 4, 5, 6))
        w = rng.standard_normal((4, O // groups, 3, 2))
        b = rng.standard_normal(O)
        want = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                    stride, padding, opad, groups, dilation).numpy()
        got = fk.dispatch(TRANSPOSED, [x, w, b], params=transposed_params(stride, padding, padding, dilation, opad,
                                                                           groups))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# (N, C, H, W, O, KH, KW, stride, pads_begin, pads_end, dilation, output_padding, groups) run as the input
# gradient's tasks: one image, stride 2 with output padding, 70 output channels (blocks of 17, the last of
# 2); three images at dilation 2 with asymmetric pads (one task each); two images of two groups, stride 2,
# output padding and asymmetric pads (images x groups)
TRANSPOSED_TASK_SHAPES = [(1, 64, 16, 16, 70, 3, 3, 2, 1, 1, 1, 1, 1), (3, 32, 14, 15, 48, 3, 3, 1, 0, 1, 2, 0, 1),
                          (2, 64, 12, 12, 64, 4, 4, 2, 1, 2, 1, 1, 2)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape", TRANSPOSED_TASK_SHAPES, ids=["1-image", "dilation", "groups"])
def test_conv_transpose2d_same_bits_for_every_thread_count(dtype, shape, rng):
    """The input gradient's (image, group, channel block) tasks, the bias added by each task to its
    channels: 1, 2, 3 and 7 threads give the one-thread bits, with and without bias, into dense,
    channels-last and every-other-column outputs, within the claim of the reference."""
    N, C, H, W, O, KH, KW, stride, pb, pe, dilation, opad, groups = shape
    params = transposed_params(stride, pb, pe, dilation, opad, groups)
    x = make_operand((N, C, H, W), dtype, "contiguous", rng, special=False)
    w = make_operand((C, O // groups, KH, KW), dtype, "contiguous", rng, special=False)
    b = make_operand((O,), dtype, "negative", rng, special=False)
    for bias in (None, b):
        inputs = (x, w) if bias is None else (x, w, bias)
        kernel = fk.bindings().lookup(TRANSPOSED, [dtype] * (len(inputs) + 1))
        expected, scale = conv_transpose2d_reference(x, w, bias, stride, pb, pe, dilation, opad, groups)
        for layout in ("contiguous", "transposed", "every-other"):
            results = threaded_results(lambda out: kernel(*inputs, out=out, params=params), expected.shape, dtype,
                                       layout)
            assert all(r.tobytes() == results[0].tobytes() for r in results[1:]), (bias is None, layout)
            err = np.abs(results[0].astype(np.float64) - expected)
            assert (err <= kernel.precision.max_rel * scale + kernel.precision.max_abs).all(), (layout, err.max())


def test_conv_transpose2d_dispatch_and_the_graph_builder(rng):
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    params = transposed_params(stride=2, pads_begin=(1, 0), pads_end=(0, 1), output_padding=1, groups=2)
    out = fk.dispatch(TRANSPOSED, [x, w, b], params=params)
    assert out.shape == (1, 6, 11, 11) == (1, 6) + conv_transpose2d_output_size((5, 5), (3, 3), 2, (1, 0), (0, 1), 1, 1)
    expected, _ = conv_transpose2d_reference(x, w, b, 2, (1, 0), (0, 1), 1, 1, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert fk.dispatch(TRANSPOSED, [x, w[:, :1]]).shape == (1, 1, 7, 7)     # params none: 1, 0, 0, 1, 0, 1
    g = Graph()
    gx, gw, gb = g.input(x.shape, fk.DType.F32), g.input(w.shape, fk.DType.F32), g.input(b.shape, fk.DType.F32)
    y = g.conv_transpose2d(gx, gw, gb, stride=2, pads_begin=(1, 0), pads_end=(0, 1), output_padding=1, groups=2)
    assert y.shape == (1, 6, 11, 11) and g.conv_transpose2d(gx, gw[:, :1]).shape == (1, 1, 7, 7)
    np.testing.assert_allclose(g.compile([y]).run([x, w, b])[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [lambda: transposed_params(stride=0), lambda: transposed_params(pads_begin=-1),
                                  lambda: transposed_params(pads_end=(0, -1)), lambda: transposed_params(dilation=0),
                                  lambda: transposed_params(output_padding=-1), lambda: transposed_params(groups=0),
                                  lambda: transposed_params(stride=2 ** 40)])
def test_bad_conv_transpose2d_params_are_params_errors(make):
    with pytest.raises(fk.ParamsError):
        make()


def test_conv_transpose2d_params_round_trip():
    p = transposed_params(stride=(2, 1), pads_begin=(1, 0), pads_end=2, dilation=(1, 3), output_padding=(1, 2),
                          groups=4)
    assert p.fields() == {"stride": (2, 1), "pads_begin": (1, 0), "pads_end": (2, 2), "dilation": (1, 3),
                          "output_padding": (1, 2), "groups": 4}


TRANSPOSED_PROBLEMS = ["dtype", "out_shape", "channels", "groups", "output_padding", "empty_output", "params",
                       "bias", "rank", "readonly", "alias", "self_overlap", "count", "huge"]


@pytest.mark.parametrize("problem", TRANSPOSED_PROBLEMS)
def test_conv_transpose2d_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    inputs = [x, w]
    out = np.full((2, 3, 7, 7), 7.0, np.float32)
    params = transposed_params()
    error = fk.ShapeError
    if problem == "dtype":
        out = out.astype(np.float64)
        error = fk.DTypeError
    elif problem == "out_shape":
        out = np.full((2, 3, 8, 7), 7.0, np.float32)
    elif problem == "channels":                     # w's first extent is not x's channels
        inputs[1] = rng.standard_normal((3, 3, 3, 3)).astype(np.float32)
    elif problem == "groups":
        params = transposed_params(groups=3)
    elif problem == "output_padding":               # not below the stride (1) nor the dilation (1)
        params = transposed_params(output_padding=(0, 1))
        out = np.full((2, 3, 7, 8), 7.0, np.float32)
        error = fk.ParamsError
    elif problem == "empty_output":                 # (5 - 1) + 2 + 1 - 4 - 4 = -1
        params = transposed_params(pads_begin=4, pads_end=4)
    elif problem == "params":
        params = fk.params.conv2d()
        error = fk.ParamsError
    elif problem == "bias":
        inputs.append(np.ones(4, np.float32))
    elif problem == "rank":
        inputs[0] = x[0]
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "alias":
        big = np.zeros(2000, np.float32)
        out = big[:294].reshape(2, 3, 7, 7)
        inputs[0] = big[100:300].reshape(2, 4, 5, 5)
        error = fk.AliasError
    elif problem == "self_overlap":
        out = np.lib.stride_tricks.as_strided(np.full(147, 7.0, np.float32), out.shape, (0,) + out.strides[1:])
        error = fk.AliasError
    elif problem == "count":
        inputs = inputs[:1]
        error = fk.OperandCountError
    elif problem == "huge":                         # (H - 1) * stride overflows int64: refused, not wrapped
        inputs[0] = np.lib.stride_tricks.as_strided(x, (1, 4, 2 ** 40, 1), (0, 4, 0, 0))
        params = transposed_params(stride=2 ** 30)
    n = len(inputs) + 1 if problem != "count" else 3
    kernel = fk.bindings().lookup(TRANSPOSED, [fk.DType.F32] * n, fk.Backend.CPU)
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)
