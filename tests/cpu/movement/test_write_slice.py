"""WRITE_SLICE and WRITE_SLICE_ROTATING (KV-cache writes into a destination, in place) against NumPy
slice assignment, on every dtype and layout, with a run-time position, wrap-around and refusals."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops as fk_ops
from fuel_kernel import params as P
from fuel_kernel.graph import Graph
from oracles import write_slice_reference
from support import ALL_DTYPES, LAYOUTS, make_operand

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
OPS = (OP.WRITE_SLICE, OP.WRITE_SLICE_ROTATING)
OUT_LAYOUTS = tuple(layout for layout in LAYOUTS if layout != "broadcast")   # a written view cannot repeat


def kernel(op, dtype, position=False):
    return fk.bindings().lookup(op, [dtype, D.I64, dtype] if position else [dtype, dtype], CPU)


def raw(a):
    """The bytes of each element (so NaN payloads and -0.0 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.ndim else a.view(np.uint8)


def assert_bytes(actual, expected):
    np.testing.assert_array_equal(raw(actual), raw(expected))


def check(op, src, dst, start, axis=0, position=None):
    """Run op on (src[, position]) into dst and compare with the NumPy reference (all of dst: the
    region written, every other element untouched)."""
    expected = write_slice_reference(src, dst, start, axis, position, op == OP.WRITE_SLICE_ROTATING)
    dtype = D.parse(dst.dtype)
    inputs = [src] if position is None else [src, position]
    result = kernel(op, dtype, position is not None)(*inputs, out=dst, params=P.write_slice(start, axis=axis))
    assert result is dst
    assert_bytes(dst, expected)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("src_layout", LAYOUTS)
@pytest.mark.parametrize("dst_layout", OUT_LAYOUTS)
def test_write_slice(dtype, src_layout, dst_layout, rng):
    for dst_shape, src_shape, start in (((5, 6, 4), (2, 3, 4), (1, 2, 0)), ((5, 6, 4), (5, 6, 4), (0, 0, 0)),
                                        ((5, 6, 4), (1, 1, 1), (4, 5, 3)), ((7,), (3,), (4,)),
                                        ((3, 8), (0, 2), (3, 1))):
        src = make_operand(src_shape, dtype, src_layout, rng)
        dst = make_operand(dst_shape, dtype, dst_layout, rng)
        check(OP.WRITE_SLICE, src, dst, start)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_write_slice_zero_dims(dtype, rng):
    """0-d into 0-d: the one element; a ring needs an axis, so 0-d is a ParamsError there."""
    src = np.asarray(make_operand((1,), dtype, "contiguous", rng)[0])
    dst = np.zeros((), src.dtype)
    check(OP.WRITE_SLICE, src, dst, ())
    with pytest.raises(fk.ParamsError):
        kernel(OP.WRITE_SLICE_ROTATING, dtype)(src, out=dst, params=P.write_slice(()))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("src_layout", LAYOUTS)
@pytest.mark.parametrize("dst_layout", OUT_LAYOUTS)
def test_write_slice_rotating_wraps(dtype, src_layout, dst_layout, rng):
    """A ring of 7 on axis 1: starts that fit, that wrap, that are negative or past the capacity,
    a src as long as the ring, and a ring on the first and last axis."""
    ring_cases = (((3, 7, 2), (3, 5, 2), (0, 4, 0), 1), ((3, 7, 2), (3, 7, 2), (0, 3, 0), 1),
                  ((3, 7, 2), (2, 2, 1), (1, -1, 1), 1), ((3, 7, 2), (3, 1, 2), (0, 15, 0), -2),
                  ((3, 7, 2), (3, 0, 2), (0, 6, 0), 1), ((4, 3), (3, 3), (2, 0), 0),
                  ((2, 5), (2, 4), (0, 3), 1), ((6,), (6,), (-13,), 0))
    for dst_shape, src_shape, start, axis in ring_cases:
        src = make_operand(src_shape, dtype, src_layout, rng)
        dst = make_operand(dst_shape, dtype, dst_layout, rng)
        check(OP.WRITE_SLICE_ROTATING, src, dst, start, axis)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name)
def test_run_time_position(dtype, op, rng):
    """The position operand (one I64 element: 0-d, a 1-vector or a strided view of one) adds to the
    start on params.axis."""
    positions = [np.array(p, np.int64) for p in (0, 3, 5)] + [np.array([2], np.int64),
                                                             np.arange(12, dtype=np.int64)[::-4][2:3]]
    for position in positions:
        for layout in ("contiguous", "negative", "transposed"):
            dst = make_operand((2, 8, 3), dtype, layout, rng)
            src = make_operand((2, 3, 3), dtype, "strided", rng)
            check(op, src, dst, (0, 0, 0), axis=1, position=position)
    ring = make_operand((2, 8, 3), dtype, "contiguous", rng)
    check(OP.WRITE_SLICE_ROTATING, make_operand((2, 3, 3), dtype, "contiguous", rng), ring, (0, 2, 0), axis=1,
          position=np.array(2 ** 62 + 5, np.int64))


def test_decode_appends_and_ring_overwrites_the_oldest(rng):
    """A cache [heads, capacity, dim] filled one token at a time from the position operand; the ring
    keeps the last `capacity` tokens, each at token % capacity."""
    cache = np.zeros((2, 4, 3), np.float32)
    ring = np.zeros((2, 4, 3), np.float32)
    tokens = [rng.standard_normal((2, 1, 3)).astype(np.float32) for _ in range(7)]
    for t, token in enumerate(tokens):
        position = np.array(t, np.int64)
        if t < 4:
            fk.dispatch(OP.WRITE_SLICE, [token, position], cache, params=P.write_slice((0, 0, 0), axis=1))
        fk.dispatch(OP.WRITE_SLICE_ROTATING, [token, position], ring, params=P.write_slice((0, 0, 0), axis=1))
    np.testing.assert_array_equal(cache, np.concatenate(tokens[:4], axis=1))
    np.testing.assert_array_equal(ring, np.concatenate([tokens[4], tokens[5], tokens[6], tokens[3]], axis=1))


def test_the_destination_must_be_given(rng):
    src = np.ones((2, 3), np.float32)
    with pytest.raises(fk.ShapeError, match="in place"):
        fk.dispatch(OP.WRITE_SLICE, [src], params=P.write_slice((0, 0)))
    with pytest.raises(fk.ShapeError, match="in place"):
        fk_ops.infer_output_shape(OP.WRITE_SLICE_ROTATING, [(2, 3)], P.write_slice((0, 0)))
    dst = np.zeros((4, 3), np.float32)
    assert fk.dispatch(OP.WRITE_SLICE, [src], dst, params=P.write_slice((1, 0))) is dst
    assert dst[1:3].tolist() == src.tolist() and not dst[0].any() and not dst[3].any()


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name)
@pytest.mark.parametrize("problem", ["start_past_end", "start_negative", "position_past_end", "position_overflow",
                                     "rank", "dtype", "position_dtype", "position_size", "position_huge", "no_params",
                                     "other_params", "params_ndim", "axis", "ring_too_short", "read_only",
                                     "alias", "self_overlap", "count"])
def test_refusals_write_nothing(op, problem, rng):
    """Each bad call is a typed error before anything is written: dst keeps every byte."""
    rotating = op == OP.WRITE_SLICE_ROTATING
    dst = make_operand((3, 6, 2), D.F32, "contiguous", rng)
    src = make_operand((3, 2, 2), D.F32, "strided", rng)
    inputs, params, dtypes = [src], P.write_slice((0, 1, 0), axis=1), [D.F32, D.F32]
    error = {"start_past_end": fk.KernelIndexError, "start_negative": fk.KernelIndexError,
             "position_past_end": fk.KernelIndexError, "position_overflow": fk.KernelIndexError,
             "rank": fk.ShapeError, "dtype": fk.DTypeError, "position_dtype": fk.DTypeError,
             "position_size": fk.ShapeError, "position_huge": fk.ShapeError, "no_params": fk.ParamsError,
             "other_params": fk.ParamsError,
             "params_ndim": fk.ParamsError, "axis": fk.ParamsError, "ring_too_short": fk.ShapeError,
             "read_only": fk.ReadOnlyError, "alias": fk.AliasError, "self_overlap": fk.AliasError,
             "count": fk.OperandCountError}[problem]
    if problem == "start_past_end":         # on the ring axis the start wraps, so past the end elsewhere
        params = P.write_slice((1, 1, 0), axis=1)
    elif problem == "start_negative":
        params = P.write_slice((0, 0, -1), axis=1)
    elif problem == "position_past_end":
        inputs, dtypes = [src, np.array(3 if not rotating else 0, np.int64)], [D.F32, D.I64, D.F32]
        params = P.write_slice((0, 2, 0) if not rotating else (1, 0, 0), axis=1)
    elif problem == "position_overflow":
        inputs, dtypes = [src, np.array(2 ** 62, np.int64)], [D.F32, D.I64, D.F32]
        params = P.write_slice((0, 2 ** 62, 0), axis=1)
    elif problem == "rank":
        inputs = [src[0]]
    elif problem == "dtype":
        inputs = [src.astype(np.float64)]
    elif problem == "position_dtype":
        inputs, dtypes = [src, np.array(1, np.int32)], [D.F32, D.I64, D.F32]
    elif problem == "position_size":
        inputs, dtypes = [src, np.array([1, 2], np.int64)], [D.F32, D.I64, D.F32]
    elif problem == "position_huge":        # a stride-0 view of 2^58 elements
        huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), (2 ** 29, 2 ** 29), (0, 0))
        inputs, dtypes = [src, huge], [D.F32, D.I64, D.F32]
    elif problem == "no_params":
        params = None
    elif problem == "other_params":
        params = P.slice((0, 0, 0), (3, 2, 2))
    elif problem == "params_ndim":
        params = P.write_slice((0, 1), axis=1)
    elif problem == "axis":
        inputs, dtypes = [src, np.array(0, np.int64)], [D.F32, D.I64, D.F32]
        params = P.write_slice((0, 1, 0), axis=3)
    elif problem == "ring_too_short":
        src = make_operand((3, 7, 2), D.F32, "contiguous", rng)
        inputs = [src]
        if not rotating:
            error = fk.KernelIndexError
    elif problem == "read_only":
        dst.setflags(write=False)
    elif problem == "alias":                # src is a view of the region it would be written to
        inputs = [dst[:, 1:3]]
    elif problem == "self_overlap":
        dst = np.lib.stride_tricks.as_strided(make_operand((6, 2), D.F32, "contiguous", rng), (3, 6, 2), (0, 8, 4))
    elif problem == "count":
        inputs = [src, np.array(0, np.int64), src]
    before = np.array(dst, copy=True)
    k = fk.bindings().lookup(op, dtypes, CPU)
    with pytest.raises(error):
        k.run(inputs, [dst], params)
    assert_bytes(dst, before)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name)
def test_kernel_refuses_an_overlapping_source_itself(op, rng):
    """The AliasError is the kernel's own (a C caller gets it too): through a plan, which does not
    go through the Python call's checks, src a view of the state region it is written to."""
    g = Graph()
    cache = g.state((4, 6), D.F32)
    g.write_slice(cache[1:3, 0:2], cache, start=(1, 1)) if op == OP.WRITE_SLICE else \
        g.write_slice_rotating(cache[1:3, 0:2], cache, start=(1, 1), axis=1)
    plan = g.compile([])
    state = rng.standard_normal((4, 6)).astype(np.float32)
    before = state.copy()
    with pytest.raises(fk.AliasError):
        plan.run([state])
    assert_bytes(state, before)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name)
@pytest.mark.parametrize("layout", ["contiguous", "negative", "transposed"])
def test_large_copies_split_over_threads_with_the_same_bytes(op, layout, rng):
    """Copies of 2 * 32768 elements and more are cut into blocks on the intra-op pool: the same bytes
    for 1, 2 and 3 threads, and NumPy's."""
    src = make_operand((4, 300, 64), D.BF16, layout, rng)
    results = []
    for threads in (1, 2, 3):
        dst = make_operand((4, 512, 64), D.BF16, "offset", np.random.default_rng(7))
        rotating = op == OP.WRITE_SLICE_ROTATING
        start = (0, 400, 0) if rotating else (0, 200, 0)         # the ring wraps at 512
        expected = write_slice_reference(src, dst, start, 1, None, rotating)
        with fk.threads(threads):
            kernel(op, D.BF16)(src, out=dst, params=P.write_slice(start, axis=1))
        assert_bytes(dst, expected)
        results.append(raw(dst).copy())
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


# the (op, dtypes) keys the tests above exercise; tests/cpu/movement/test_movement.py adds them to
# its COVERED, which tests/test_spec.py reads
COVERED = ({(op, (d, d)) for op in OPS for d in ALL_DTYPES}
           | {(op, (d, D.I64, d)) for op in OPS for d in ALL_DTYPES})
