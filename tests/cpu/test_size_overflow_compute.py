"""FLASH_ATTN, PAGED_ATTN, MATMUL (native and BLAS), SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM, their backward ops, RMS_NORM and
LAYER_NORM under hostile operands and hostile C callers.

* Impossible sizes: a 1-element buffer viewed through a stride-0 axis of extent 2**52 .. 2**62
  makes a scratch or accumulator size overflow int64 (or exceed memory).  The call is a ShapeError
  (or a FuelKernelError that is a MemoryError), with the output untouched; before, the size
  wrapped to a few bytes and the kernel wrote past its scratch.
* params = NULL through the kernel capsule (a C caller): FK_ERR_PARAMS, nothing written, no crash.
* A self-overlapping output (stride 0 on an axis of extent > 1) is an AliasError.
* A window of 2**63 - 1 is the unbounded window (it used to overflow the band arithmetic and zero
  every row), and a huge stride-0 block table no longer wraps max_blocks * block_size.
"""
import ctypes

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from fuel_kernel.errors import STATUS_ERRORS
from oracles import attention_reference, f64, paged_reference
from support import make_operand, np_dtype
from capi import KERNEL_FN, Layout, Storage, layout

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
STATUS = {cls: code for code, cls in STATUS_ERRORS.items()}
HUGE = [2 ** 52, 2 ** 58, 2 ** 60, 2 ** 62 - 1]      # extents of a stride-0 view of one element
N_IN = {OP.SOFTMAX_LAST_DIM: 1, OP.LOG_SOFTMAX_LAST_DIM: 1, OP.RMS_NORM: 2, OP.LAYER_NORM: 3,
        OP.SOFTMAX_LAST_DIM_BACKWARD: 2, OP.LOG_SOFTMAX_LAST_DIM_BACKWARD: 2}
BACKWARD = (OP.SOFTMAX_LAST_DIM_BACKWARD, OP.LOG_SOFTMAX_LAST_DIM_BACKWARD)


def kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), CPU)


def huge(shape, dtype):
    """A view of one zero element with `shape` (every stride 0)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np_dtype(dtype)), shape, (0,) * len(shape))


def assert_impossible_size(call, out, refusals=(fk.ShapeError, MemoryError)):
    """The call is a typed size error (ShapeError, or a FuelKernelError that is a MemoryError) and
    leaves `out` as it was."""
    before = out.copy()
    with pytest.raises(fk.FuelKernelError) as info:
        call()
    assert isinstance(info.value, refusals), repr(info.value)
    np.testing.assert_array_equal(out, before)


def fits(extent, dtype):
    return extent * np.dtype(np_dtype(dtype)).itemsize < 2 ** 63


# ---- impossible sizes -------------------------------------------------------------------------------
@pytest.mark.parametrize("extent", HUGE)
@pytest.mark.parametrize("axis", ["head_dim", "keys"])
def test_flash_attn_scratch_size_overflow_is_refused(extent, axis):
    dt = D.F16
    if axis == "head_dim":
        q, k, v = huge((1, 1, 1, extent), dt), huge((1, 1, 1, extent), dt), huge((1, 1, 1, 1), dt)
    else:
        q, k, v = huge((1, 1, 1, 1), dt), huge((1, 1, extent, 1), dt), huge((1, 1, extent, 1), dt)
    out = np.full((1, 1, 1, 1), 7.0, np.float16)
    assert_impossible_size(lambda: kernel(OP.FLASH_ATTN, [dt] * 4)(q, k, v, out=out, params=P.flash_attn(1.0)), out)


@pytest.mark.parametrize("extent", HUGE)
def test_paged_attn_scratch_size_overflow_is_refused(extent):
    dt = D.F16
    q, k_cache, v_cache = huge((1, 1, extent), dt), huge((1, 1, 1, extent), dt), huge((1, 1, 1, 1), dt)
    table, lens = np.zeros((1, 1), np.int32), np.ones(1, np.int32)
    out = np.full((1, 1, 1), 7.0, np.float16)
    k = kernel(OP.PAGED_ATTN, [dt, dt, dt, D.I32, D.I32, D.F32, dt])
    assert_impossible_size(lambda: k(q, k_cache, v_cache, table, lens, np.zeros(0, np.float32), out=out,
                                     params=P.paged_attn(1.0, block_size=1)), out)


@pytest.mark.parametrize("dt", [D.U8, D.I8])
@pytest.mark.parametrize("extent", [2 ** 52, 2 ** 60, 2 ** 61])
def test_integer_matmul_accumulator_size_overflow_is_refused(dt, extent):
    a, b = huge((1, extent), dt), huge((extent, 2), dt)        # (k*n + n) * 4 bytes
    out = np.full((1, 2), 7, np_dtype(dt))
    assert_impossible_size(lambda: kernel(OP.MATMUL, [dt] * 3)(a, b, out=out), out)


@pytest.mark.parametrize("op", [OP.SOFTMAX_LAST_DIM, OP.LOG_SOFTMAX_LAST_DIM, OP.RMS_NORM, OP.LAYER_NORM,
                                OP.SOFTMAX_LAST_DIM_BACKWARD, OP.LOG_SOFTMAX_LAST_DIM_BACKWARD])
@pytest.mark.parametrize("dt", [D.F16, D.BF16, D.F32])
@pytest.mark.parametrize("extent", [2 ** 59, 2 ** 60, 2 ** 61])
def test_softmax_and_norm_row_scratch_size_overflow_is_refused(op, dt, extent):
    if not fits(extent, dt):
        pytest.skip("NumPy cannot describe this view")
    n_in = N_IN[op]
    operands = [huge((extent,), dt) for _ in range(n_in)]
    storage = np.full(1, 7.0, np_dtype(dt))
    out = np.lib.stride_tricks.as_strided(storage, (extent,), (0,))
    # scratch bytes per element of a row: x and y in F32 (softmax), y, dy and dx in F32 (softmax
    # backward), x, y, weight, bias in F64 (norms)
    scratch = extent * (8 if n_in == 1 else 12 if op in BACKWARD else 32)
    # a scratch that fits int64 is refused for the self-overlapping output instead (checked after sizes)
    refusals = (fk.ShapeError,) if scratch >= 2 ** 63 else (fk.AliasError, MemoryError)
    assert_impossible_size(lambda: kernel(op, [dt] * (n_in + 1))(*operands, out=out), storage, refusals)


# ---- params = NULL from a C caller ------------------------------------------------------------------
def call_with_null_params(k, arrays):
    """Run kernel `k` through its capsule on contiguous `arrays` (inputs, then the output) with
    params = NULL; the status code."""
    fn = KERNEL_FN(ctypes.pythonapi.PyCapsule_GetPointer(k.capsule(), b"fuel_kernel.kernel"))
    storages = (Storage * len(arrays))(*[Storage(a.ctypes.data, a.nbytes, 0, int(DTYPE_OF[a.dtype]), 0, 0)
                                          for a in arrays])
    layouts = (Layout * len(arrays))(*[layout(a.shape, [s // a.itemsize for s in a.strides]) for a in arrays])
    n_in = len(arrays) - 1
    inputs = ctypes.cast(storages, ctypes.POINTER(Storage))
    outputs = ctypes.cast(ctypes.byref(storages, n_in * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
    return fn(inputs, n_in, outputs, 1, layouts, None)


DTYPE_OF = {np.dtype(np.float32): D.F32, np.dtype(np.float64): D.F64, np.dtype(np.int32): D.I32,
            np.dtype(np.int64): D.I64}


def null_params_cases():
    f, i32 = np.float32, np.int32
    x = np.ones((2, 4), f)
    cases = {
        "softmax": (OP.SOFTMAX_LAST_DIM, [x, np.zeros((2, 4), f)]),
        "log_softmax": (OP.LOG_SOFTMAX_LAST_DIM, [x, np.zeros((2, 4), f)]),
        "softmax_backward": (OP.SOFTMAX_LAST_DIM_BACKWARD, [x, x, np.zeros((2, 4), f)]),
        "log_softmax_backward": (OP.LOG_SOFTMAX_LAST_DIM_BACKWARD, [x, x, np.zeros((2, 4), f)]),
        "rms_norm": (OP.RMS_NORM, [x, np.ones(4, f), np.zeros((2, 4), f)]),
        "layer_norm": (OP.LAYER_NORM, [x, np.ones(4, f), np.zeros(4, f), np.zeros((2, 4), f)]),
        "matmul": (OP.MATMUL, [np.ones((2, 3), f), np.ones((3, 4), f), np.zeros((2, 4), f)]),
        "matmul_int": (OP.MATMUL, [np.ones((2, 3), i32), np.ones((3, 4), i32), np.zeros((2, 4), i32)]),
        "matmul_count": (OP.MATMUL, [np.ones((2, 3), f), np.ones((3, 4), f), np.ones(1, i32), np.zeros((2, 4), f)]),
        "flash_attn": (OP.FLASH_ATTN, [np.ones((1, 1, 2, 4), f)] * 3 + [np.zeros((1, 1, 2, 4), f)]),
        "paged_attn": (OP.PAGED_ATTN, [np.ones((1, 1, 4), f), np.ones((1, 2, 1, 4), f), np.ones((1, 2, 1, 4), f),
                                       np.zeros((1, 1), i32), np.ones(1, i32), np.zeros(0, f),
                                       np.zeros((1, 1, 4), f)]),
    }
    for name, (op, arrays) in cases.items():
        key = [DTYPE_OF[a.dtype] for a in arrays]
        for k in fk.bindings().alternatives(op, key, CPU):
            yield pytest.param(k, arrays, id=f"{name}-{k.source}")


@pytest.mark.parametrize("k,arrays", list(null_params_cases()))
def test_null_params_from_c_is_a_params_error(k, arrays):
    arrays = [a.copy() for a in arrays]
    out = arrays[-1]
    out.fill(7)
    assert call_with_null_params(k, arrays) == STATUS[fk.ParamsError]
    assert (out == 7).all()


# ---- self-overlapping outputs -----------------------------------------------------------------------
def self_overlapping(shape, dtype=np.float32):
    storage = np.full(shape[-1], 7.0, dtype)
    return storage, np.lib.stride_tricks.as_strided(storage, shape, (0,) * (len(shape) - 1) + (storage.itemsize,))


@pytest.mark.parametrize("op", list(N_IN))
def test_softmax_and_norms_refuse_a_self_overlapping_output(op, rng):
    n_in = N_IN[op]
    x = rng.standard_normal((3, 4)).astype(np.float32)
    extra = [x] if op in BACKWARD else [np.ones(4, np.float32)] * (n_in - 1)
    storage, out = self_overlapping((3, 4))
    with pytest.raises(fk.AliasError):
        kernel(op, [D.F32] * (n_in + 1))(x, *extra, out=out)
    assert (storage == 7).all()


def test_attention_ops_refuse_a_self_overlapping_output(rng):
    f = np.float32
    q = rng.standard_normal((1, 2, 3, 4)).astype(f)
    storage, out = self_overlapping((1, 2, 3, 4))
    with pytest.raises(fk.AliasError):
        kernel(OP.FLASH_ATTN, [D.F32] * 4)(q, q, q, out=out, params=P.flash_attn(0.5))
    storage_p, out_p = self_overlapping((1, 2, 4))
    with pytest.raises(fk.AliasError):
        kernel(OP.PAGED_ATTN, [D.F32, D.F32, D.F32, D.I32, D.I32, D.F32, D.F32])(
            q[0, :, :1, :].copy().reshape(1, 2, 4), np.ones((1, 2, 1, 4), f), np.ones((1, 2, 1, 4), f),
            np.zeros((1, 1), np.int32), np.ones(1, np.int32), np.zeros(0, f), out=out_p,
            params=P.paged_attn(0.5, block_size=2))
    x = rng.standard_normal((3, 4)).astype(f)
    storage_r, out_r = self_overlapping((3, 4))
    with pytest.raises(fk.AliasError):
        kernel(OP.ROPE, [D.F32] * 4)(x, np.ones((3, 2), f), np.zeros((3, 2), f), out=out_r)
    assert (storage == 7).all() and (storage_p == 7).all() and (storage_r == 7).all()


# ---- huge windows and block tables ------------------------------------------------------------------
BIG = 2 ** 63 - 1


@pytest.mark.parametrize("dtype", [D.F32, D.F64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(5, 5), (70, 130), (9, 3)])
def test_flash_attn_huge_window_is_the_unbounded_window(dtype, causal, sq, sk, rng):
    q = make_operand((1, 2, sq, 8), dtype, "contiguous", rng, special=False)
    k = make_operand((1, 2, sk, 8), dtype, "contiguous", rng, special=False)
    v = make_operand((1, 2, sk, 8), dtype, "contiguous", rng, special=False)
    fa = kernel(OP.FLASH_ATTN, [dtype] * 4)
    unbounded = fa(q, k, v, params=P.flash_attn(0.1, causal=causal))
    expected, _ = attention_reference(q, k, v, 0.1, causal)
    tol = fa.precision.max_abs * np.abs(f64(v)).max()
    assert np.abs(f64(unbounded) - expected).max() <= tol
    for wl, wr in ((BIG, -1), (-1, BIG), (BIG, BIG), (BIG - 1, 2 ** 62)):
        got = fa(q, k, v, params=P.flash_attn(0.1, causal=causal, window_left=wl, window_right=wr))
        np.testing.assert_array_equal(got, unbounded)


def test_paged_attn_huge_window_and_huge_block_table(rng):
    f = np.float32
    q = rng.standard_normal((2, 2, 8)).astype(f)
    k_cache = rng.standard_normal((3, 8, 1, 8)).astype(f)
    v_cache = rng.standard_normal((3, 8, 1, 8)).astype(f)
    table = np.array([[2, 0, 1], [1, 2, 0]], np.int32)
    lens = np.array([20, 3], np.int32)
    none = np.zeros(0, f)
    k = kernel(OP.PAGED_ATTN, [D.F32, D.F32, D.F32, D.I32, D.I32, D.F32, D.F32])
    unbounded = k(q, k_cache, v_cache, table, lens, none, params=P.paged_attn(0.2, block_size=8))
    expected, _ = paged_reference(q, k_cache, v_cache, table, lens, none, 0.2, 8, 0.0, -1)
    assert np.abs(f64(unbounded) - expected).max() <= k.precision.max_abs * np.abs(v_cache).max()
    got = k(q, k_cache, v_cache, table, lens, none, params=P.paged_attn(0.2, block_size=8, window_left=BIG))
    np.testing.assert_array_equal(got, unbounded)
    # max_blocks * block_size overflows int64: every context length fits, nothing wraps
    one_seq = np.lib.stride_tricks.as_strided(np.array([2], np.int32), (1, 2 ** 60), (0, 0))
    got = k(q[:1], k_cache, v_cache, one_seq, np.array([6], np.int32), none, params=P.paged_attn(0.2, block_size=8))
    expected, _ = paged_reference(q[:1], k_cache, v_cache, np.array([[2]], np.int32), np.array([6], np.int32),
                                  none, 0.2, 8, 0.0, -1)
    assert np.abs(f64(got) - expected).max() <= k.precision.max_abs * np.abs(v_cache).max()
