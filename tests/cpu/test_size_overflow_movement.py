"""Size arithmetic, per-axis params and written views in the movement, index, reduce, conv and
elementwise families, reproduced from Python with ordinary NumPy views.

A 1-element buffer viewed through np.lib.stride_tricks.as_strided with stride 0 claims extents up
to 2**63 - 1 while addressing one element, so every layout check passes and only the kernels' own
arithmetic stands between such a view and a wrapped size.  Every error must be typed, raised
before anything is written, and leave the output untouched.  NumPy itself refuses a view of more
than 2**63 - 1 bytes, so sizes past that (a reduced count of 2**64, conv scratch) are built as
layouts and passed through the kernel's C function, as a C caller would.
"""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import spec
from capi import KERNEL_FN, Layout, Storage

D = fk.DType
Op = fk.OpKind
BIG = 2 ** 63 - 1
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/: the helper modules


def huge(shape, value=1, dtype=np.uint8):
    """A view of shape `shape` (any extents) over one element: stride 0 everywhere."""
    one = np.full(1, value, dtype)
    return np.lib.stride_tricks.as_strided(one, shape, (0,) * len(shape))


def kernel(op, dtypes):
    return fk.bindings().lookup(op, dtypes)


# ---- extent sums and products cannot wrap ----------------------------------------------------
def test_concat_axis_extents_that_wrap_are_a_shape_error_before_any_write():
    # 1 + 2 * (2**63 - 1) + 2 wraps to 1: the old sum matched the 1-element output, copied x0 into
    # out[0] and only then failed on the next slab (a partial write)
    xs = [np.full(1, 5, np.uint8), huge((BIG,)), huge((BIG,)), np.full(2, 6, np.uint8)]
    out = np.full(1, 7, np.uint8)
    with pytest.raises(fk.ShapeError):
        kernel(Op.CONCAT, [D.U8] * 5)(*xs, out=out, params=fk.params.concat(0))
    assert out.tolist() == [7]


@pytest.mark.parametrize("op", [Op.TRIU, Op.TRIL])
@pytest.mark.parametrize("diagonal", [BIG, BIG - 1, -BIG - 1, -BIG, 2 ** 40, -(2 ** 40)])
def test_triangular_with_an_extreme_diagonal_saturates(op, diagonal):
    x = np.arange(1.0, 13.0).reshape(3, 4)
    out = np.full((3, 4), 7.0)
    kernel(op, [D.F64] * 2)(x, out=out, params=fk.params.triangular(diagonal))
    expected = (np.triu if op == Op.TRIU else np.tril)(x, k=min(max(diagonal, -10), 10))
    np.testing.assert_array_equal(out, expected)


def test_pad_widths_that_wrap_are_a_shape_error():
    x = huge((BIG,))
    out = np.full(1, 7, np.uint8)
    for mode in ("constant", "replicate"):
        with pytest.raises(fk.ShapeError):
            kernel(Op.PAD, [D.U8] * 2)(x, out=out, params=fk.params.pad((BIG,), (2,), mode=mode))
        assert out.tolist() == [7]


# ---- a self-overlapping output is refused by every family ------------------------------------
def overlapping_out(shape, dtype=np.float64):
    """A writable view whose first axis has stride 0: every row is the same memory."""
    base = np.full(int(np.prod(shape[1:], dtype=np.int64)), 7, dtype)
    return base, np.lib.stride_tricks.as_strided(base, shape, (0,) + base.reshape(shape[1:]).strides)


def _f(*shape):
    return np.arange(float(np.prod(shape))).reshape(shape) - 3


SELF_OVERLAP_CASES = {
    "add": (Op.ADD, [D.F64] * 3, lambda: (_f(4, 3), _f(4, 3)), None, (4, 3)),
    "exp": (Op.EXP, [D.F64] * 2, lambda: (_f(4, 3),), None, (4, 3)),
    "clamp": (Op.CLAMP, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.clamp(0, 1), (4, 3)),
    "lt": (Op.LT, [D.F64, D.F64, D.BOOL], lambda: (_f(4, 3), _f(4, 3)), None, (4, 3)),
    "where": (Op.WHERE, [D.BOOL, D.F64, D.F64, D.F64], lambda: (_f(4, 3) > 0, _f(4, 3), _f(4, 3)), None, (4, 3)),
    "cast": (Op.CAST, [D.F32, D.F64], lambda: (_f(4, 3).astype(np.float32),), None, (4, 3)),
    "sum": (Op.SUM, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.reduce((1,)), (4,)),
    "slice": (Op.SLICE, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.slice((0, 0), (4, 3)), (4, 3)),
    "flip": (Op.FLIP, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.flip((1,)), (4, 3)),
    "roll": (Op.ROLL, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.roll((1,), (1,)), (4, 3)),
    "triu": (Op.TRIU, [D.F64] * 2, lambda: (_f(4, 3),), None, (4, 3)),
    "pad": (Op.PAD, [D.F64] * 2, lambda: (_f(4, 1),), fk.params.pad((0,), (2,)), (4, 3)),
    "cumsum": (Op.CUMSUM, [D.F64] * 2, lambda: (_f(4, 3),), fk.params.cumsum(1), (4, 3)),
    "concat": (Op.CONCAT, [D.F64] * 3, lambda: (_f(2, 3), _f(2, 3)), fk.params.concat(0), (4, 3)),
    "masked_fill": (Op.MASKED_FILL, [D.F64, D.BOOL, D.F64], lambda: (_f(4, 3), _f(4, 3) > 0),
                    fk.params.masked_fill(9), (4, 3)),
    "index_select": (Op.INDEX_SELECT, [D.F64, D.I64, D.F64], lambda: (_f(4, 3), np.array([0, 2, 1])),
                     fk.params.index_select(1), (4, 3)),
    "gather": (Op.GATHER, [D.F64, D.I64, D.F64], lambda: (_f(4, 3), np.zeros((4, 3), np.int64)),
               fk.params.gather(1), (4, 3)),
    "scatter_add": (Op.SCATTER_ADD, [D.F64, D.I64, D.F64, D.F64],
                    lambda: (_f(4, 3), np.zeros((4, 3), np.int64), _f(4, 3)), fk.params.scatter(1), (4, 3)),
    "conv2d": (Op.CONV2D, [D.F64] * 3, lambda: (_f(2, 1, 4, 3), np.ones((4, 1, 1, 1))), None, (2, 4, 4, 3)),
}


@pytest.mark.parametrize("name", SELF_OVERLAP_CASES)
def test_a_self_overlapping_output_is_an_alias_error(name):
    op, dtypes, inputs, params, out_shape = SELF_OVERLAP_CASES[name]
    base, out = overlapping_out(out_shape, D(dtypes[-1]).numpy)
    before = base.copy()
    for k in fk.bindings().alternatives(op, dtypes, fk.Backend.CPU):
        with pytest.raises(fk.AliasError):
            k(*inputs(), out=out, params=params)
        np.testing.assert_array_equal(base, before, err_msg=k.source)


def test_an_empty_output_with_a_stride_0_axis_is_not_an_overlap():
    base = np.full(3, 7.0)
    out = np.lib.stride_tricks.as_strided(base, (0, 3), (0, 8))
    kernel(Op.ADD, [D.F64] * 3)(np.ones((0, 3)), np.ones((0, 3)), out=out)
    assert base.tolist() == [7.0] * 3


# ---- NULL params and per-axis params bounds, through the C API --------------------------------
def c_call(op, dtypes, arrays, params_bytes, layouts=None, source=None, nbytes=None):
    """Call the kernel's C function on `arrays` (inputs, then the output) with a raw params buffer
    (None: NULL).  `layouts` ((shape, element strides) per operand) defaults to each array's own
    layout; a 1-element array with a layout of huge extents and stride 0 is how a C caller
    describes a broadcast scalar.  `nbytes` overrides the storage sizes the kernel is told.
    Returns the status."""
    if source is None:
        k = fk.bindings().lookup(op, dtypes)
    else:
        k = {a.source: a for a in fk.bindings().alternatives(op, dtypes, fk.Backend.CPU)}[source]
    fn = KERNEL_FN(ctypes.pythonapi.PyCapsule_GetPointer(k.capsule(), b"fuel_kernel.kernel"))
    nbytes = nbytes or [a.nbytes for a in arrays]
    storages = (Storage * len(arrays))(*[Storage(a.ctypes.data, n, 0, int(dt), 0, 0)
                                         for a, n, dt in zip(arrays, nbytes, dtypes)])
    if layouts is None:
        layouts = [(a.shape, [s // a.itemsize for s in a.strides]) for a in arrays]
    lays = (Layout * len(arrays))()
    for lay, (shape, strides) in zip(lays, layouts):
        lay.ndim = len(shape)
        for d in range(len(shape)):
            lay.shape[d], lay.strides[d] = shape[d], strides[d]
    n_in = len(arrays) - 1
    outputs = ctypes.cast(ctypes.byref(storages, n_in * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
    buf = None if params_bytes is None else ctypes.create_string_buffer(params_bytes, 1024)
    return fn(ctypes.cast(storages, ctypes.POINTER(Storage)), n_in, outputs, 1, lays, buf)


def raw_params(kind, fields=b""):
    """fk_params bytes: int32 kind, int32 reserved, then the union member's bytes."""
    raw = np.zeros(1024, np.uint8)
    raw[:4] = np.frombuffer(np.int32(kind).tobytes(), np.uint8)
    raw[8:8 + len(fields)] = np.frombuffer(fields, np.uint8)
    return raw.tobytes()


SHAPE_STATUS = 2      # FK_ERR_SHAPE
PARAMS_STATUS = 4     # FK_ERR_PARAMS


@pytest.mark.parametrize("op,kind", [(Op.FLIP, 15), (Op.ROLL, 16)])
def test_per_axis_params_listing_more_than_8_dims_are_refused(op, kind):
    # ndims is a byte: 9..255 used to index the 8-entry dims array (and ROLL's stack arrays)
    # an 8-d input whose first 8 listed dims are 0..7, so nothing else stops the walk at the 9th
    x, out = _f(*(1,) * 7, 2), np.full((1,) * 7 + (2,), 7.0)
    for ndims in (9, 255):
        # fk_flip_params / fk_roll_params: uint8 ndims, then int8 dims
        raw = raw_params(kind, bytes([ndims]) + bytes(range(8)))
        assert c_call(op, [D.F64] * 2, [x, out], raw) == PARAMS_STATUS
        assert (out == 7.0).all()


def test_conv2d_with_null_params_runs_as_no_params():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    expected = kernel(Op.CONV2D, [D.F64] * 3)(x, w, out=np.empty((1, 3, 3, 3)))
    for k in fk.bindings().alternatives(Op.CONV2D, [D.F64] * 3, fk.Backend.CPU):
        out = np.full((1, 3, 3, 3), 7.0)
        assert c_call(Op.CONV2D, [D.F64] * 3, [x, w, out], None, source=k.source) == 0
        np.testing.assert_allclose(out, expected, rtol=1e-12, err_msg=k.source)


@pytest.mark.parametrize("op", [Op.SUM, Op.MEAN, Op.PROD, Op.MAX])
def test_a_reduced_count_past_int64_is_a_shape_error(op):
    # 2**32 * 2**32 elements of one value: the old count wrapped to 0, so SUM wrote 0 and MEAN NaN
    x, out = np.ones(1), np.full(1, 7.0)
    layouts = [((2 ** 32, 2 ** 32), (0, 0)), ((), ())]
    assert c_call(op, [D.F64] * 2, [x, out], None, layouts) == SHAPE_STATUS
    assert out.tolist() == [7.0]


def test_an_elementwise_output_count_past_int64_is_a_shape_error():
    # strides (1, 1) over 2**32 x 2**32 stay inside 2**33 bytes yet count 2**64 elements: the old
    # planner's count wrapped to 0 and ADD returned success having computed nothing.  The storage
    # only claims 2**33 bytes; a refused call reads and writes none of them.
    one, out = np.ones(1, np.uint8), np.full(16, 7, np.uint8)
    layouts = [((2 ** 32, 2 ** 32), (0, 0))] * 2 + [((2 ** 32, 2 ** 32), (1, 1))]
    status = c_call(Op.ADD, [D.U8] * 3, [one, one, out], None, layouts, nbytes=[1, 1, 2 ** 33])
    assert status == SHAPE_STATUS
    assert (out == 7).all()


@pytest.mark.parametrize("op", [Op.GELU_BACKWARD, Op.GELU_ERF_BACKWARD, Op.SILU_BACKWARD, Op.SIGMOID_BACKWARD,
                                Op.TANH_BACKWARD, Op.RELU_BACKWARD, Op.POWI_BACKWARD])
def test_an_activation_backward_output_count_past_int64_is_a_shape_error(op):
    # as for ADD above: x and dy broadcast from one element over 2**32 x 2**32, 2**64 outputs
    one, out = np.ones(1, np.float32), np.full(16, 7, np.float32)
    layouts = [((2 ** 32, 2 ** 32), (0, 0))] * 2 + [((2 ** 32, 2 ** 32), (1, 1))]
    powi = next(p.kind for p in spec.PARAMS if p.name == "powi")
    params = raw_params(powi, np.int32(3).tobytes()) if op == Op.POWI_BACKWARD else None
    status = c_call(op, [D.F32] * 3, [one, one, out], params, layouts, nbytes=[4, 4, 2 ** 35])
    assert status == SHAPE_STATUS
    assert (out == 7).all()


def test_conv2d_im2col_scratch_past_int64_is_a_shape_error_not_a_heap_overflow():
    # K = 2**62 taps of one value: the packed weight's 2**62 * 4 bytes wrapped to a small allocation
    # that the packing then overran.  In a child, so the old crash fails this test, not pytest.
    child = textwrap.dedent('''
        import numpy as np, fuel_kernel as fk
        from test_size_overflow_movement import c_call
        one, out = np.ones(1, np.float32), np.full(1, 7, np.float32)
        big = ((1, 1, 2 ** 62, 1), (0, 0, 0, 0))
        status = c_call(fk.OpKind.CONV2D, [fk.DType.F32] * 3, [one, one, out], None,
                        [big, big, ((1, 1, 1, 1), (1, 1, 1, 1))], source="im2col")
        print(status, out.tolist())
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.path.dirname(os.path.abspath(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert proc.stdout.split() == [str(SHAPE_STATUS), "[7.0]"]


def test_conv2d_depth_past_int64_is_a_shape_error_in_every_sibling():
    # C/groups * KH * KW = 4 * 2**61 * 1 = 2**63: the old product wrapped negative
    one, out = np.ones(1, np.float32), np.full(2, 7, np.float32)
    layouts = [((1, 4, 2 ** 61, 1), (0, 0, 0, 0)), ((2, 4, 2 ** 61, 1), (0, 0, 0, 0)), ((1, 2, 1, 1), (1, 1, 1, 1))]
    for k in fk.bindings().alternatives(Op.CONV2D, [D.F32] * 3, fk.Backend.CPU):
        assert c_call(Op.CONV2D, [D.F32] * 3, [one, one, out], None, layouts, source=k.source) == SHAPE_STATUS
        assert out.tolist() == [7.0, 7.0]


def conv2d_backward_raw(input_size, kernel_size, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """fk_params bytes of params.conv2d_backward with any int64 sizes (fk_conv2d_backward_params)."""
    fields = np.array([*stride, *padding, *dilation, groups, 0], np.int32).tobytes()
    kind = next(family.kind for family in fk.spec.PARAMS if family.name == "conv2d_backward")
    return raw_params(kind, fields + np.array([*input_size, *kernel_size], np.int64).tobytes())


# (op, [input layouts], output layout, params): dx's channels w in-channels * groups = 2**62 * 4;
# the GEMM depth C/groups*KH*KW = 2**61 * 16; dw's depth N*OH*OW = 2**62 * 16; the padded height
# input_size + 2 * padding past 2**63 - 1
BACKWARD_OVERFLOWS = {
    "channels": (Op.CONV2D_BACKWARD_INPUT, [((1, 4, 1, 1), (0,) * 4), ((4, 2 ** 62, 1, 1), (0,) * 4)],
                 ((1, 1, 1, 1), (1,) * 4), ((1, 1), (1, 1), 4)),
    "depth": (Op.CONV2D_BACKWARD_INPUT, [((1, 1, 1, 1), (0,) * 4), ((1, 2 ** 61, 4, 4), (0,) * 4)],
              ((1, 2 ** 61, 4, 4), (0,) * 4), ((4, 4), (4, 4), 1)),
    "positions": (Op.CONV2D_BACKWARD_WEIGHT, [((2 ** 62, 1, 4, 4), (0,) * 4), ((2 ** 62, 1, 4, 4), (0,) * 4)],
                  ((1, 1, 1, 1), (1,) * 4), ((4, 4), (1, 1), 1)),
    "padded_height": (Op.CONV2D_BACKWARD_INPUT, [((1, 1, 1, 1), (0,) * 4), ((1, 1, 1, 1), (0,) * 4)],
                      ((1, 1, BIG, 1), (0,) * 4), ((BIG, 1), (1, 1), 1)),
}


@pytest.mark.parametrize("case", sorted(BACKWARD_OVERFLOWS))
def test_conv2d_backward_sizes_past_int64_are_shape_errors(case):
    op, in_layouts, out_layout, (input_size, kernel_size, groups) = BACKWARD_OVERFLOWS[case]
    one, out = np.ones(1, np.float32), np.full(1, 7, np.float32)
    padding = (1, 0) if case == "padded_height" else (0, 0)
    raw = conv2d_backward_raw(input_size, kernel_size, padding=padding, groups=groups)
    assert c_call(op, [D.F32] * 3, [one, one, out], raw, in_layouts + [out_layout]) == SHAPE_STATUS
    assert out.tolist() == [7.0]


@pytest.mark.parametrize("op", [Op.CONV2D_BACKWARD_INPUT, Op.CONV2D_BACKWARD_WEIGHT])
def test_conv2d_backward_with_null_params_is_a_params_error(op):
    a, b, out = np.ones((1, 1, 1, 1)), np.ones((1, 1, 1, 1)), np.full((1, 1, 1, 1), 7.0)
    assert c_call(op, [D.F64] * 3, [a, b, out], None) == PARAMS_STATUS
    assert out.tolist() == [[[[7.0]]]]


# ---- CLAMP with min > max ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [D.F64, D.F32, D.F16, D.BF16, D.I32, D.U8, D.I64])
def test_clamp_with_min_above_max_gives_max_everywhere(dtype):
    x = np.array([-300, -2, 0, 1, 3, 200]).astype(dtype.numpy)
    out = kernel(Op.CLAMP, [dtype] * 2)(x, params=fk.params.clamp(5, 2))
    np.testing.assert_array_equal(out, np.clip(x, 5, 2).astype(dtype.numpy))
    assert (out.astype(np.float64) == 2).all()


def test_clamp_min_above_max_keeps_nan_and_agrees_with_numpy():
    x = np.array([np.nan, -np.inf, -1.0, 0.5, np.inf])
    out = kernel(Op.CLAMP, [D.F64] * 2)(x, params=fk.params.clamp(1.0, -1.0))
    np.testing.assert_array_equal(out, np.clip(x, 1.0, -1.0))


def test_integer_clamp_whose_rounded_bounds_cross_gives_the_floor_of_max():
    # ceil(0.5) = 1 > floor(0.7) = 0: min(max(x, 1), 0) is 0 everywhere
    x = np.array([-5, 0, 1, 9], np.int32)
    out = kernel(Op.CLAMP, [D.I32] * 2)(x, params=fk.params.clamp(0.5, 0.7))
    assert out.tolist() == [0, 0, 0, 0]


def test_clamp_with_a_nan_bound_is_still_a_params_error():
    with pytest.raises(fk.ParamsError):
        fk.params.clamp(float("nan"), 1.0)
