"""Calling kernels from Python: operand kinds, validation, typed errors and no partial writes."""
import array
import ctypes

import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk

CPU = fk.Backend.CPU
F32, F64, I32, BF16 = fk.DType.F32, fk.DType.F64, fk.DType.I32, fk.DType.BF16


@pytest.fixture
def cast_f32_f64():
    return fk.bindings().lookup(fk.OpKind.CAST, [F32, F64], CPU)


def untouched(out):
    """A sentinel-filled output and a check that it still holds the sentinel."""
    out[...] = 12345
    before = out.copy()
    return lambda: np.testing.assert_array_equal(out, before)


def test_call_forms_agree(cast_f32_f64):
    a = np.arange(10, dtype=np.float32)
    c1, c2 = np.empty(10), np.empty(10)
    assert cast_f32_f64(a, out=c1) is c1
    (r,) = cast_f32_f64.run([a], [c2])
    assert r is c2
    np.testing.assert_array_equal(c1, c2)
    c3 = fk.dispatch(fk.OpKind.CAST, [a], [np.empty(10)])
    np.testing.assert_array_equal(c3, c1)


def test_allocates_output_when_omitted():
    k = fk.bindings().lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU)
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T
    out = k(x)
    assert out.flags.c_contiguous and out.dtype == np.float32
    np.testing.assert_array_equal(out, x)
    out2 = fk.dispatch(fk.OpKind.CONTIGUIZE, [x])
    np.testing.assert_array_equal(out2, x)


def test_buffer_protocol_and_dlpack_operands(cast_f32_f64):
    src = array.array("f", [1.5, -2.0, 3.25])
    dst = array.array("d", [0.0] * 3)
    cast_f32_f64(src, out=dst)
    assert list(dst) == [1.5, -2.0, 3.25]
    mv_out = memoryview(bytearray(24)).cast("d")
    cast_f32_f64(memoryview(src), out=mv_out)
    assert list(mv_out) == [1.5, -2.0, 3.25]

    class Producer:                      # any object with __dlpack__ (here: NumPy underneath)
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kwargs):
            return self.arr.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    out = np.empty(3)
    cast_f32_f64(Producer(np.array([1, 2, 3], dtype=np.float32)), out=out)
    np.testing.assert_array_equal(out, [1, 2, 3])


def test_bfloat16_operands():
    k = fk.bindings().lookup(fk.OpKind.CAST, [BF16, F32], CPU)
    x = np.array([1.0, -2.5, 3.0e38], dtype=ml_dtypes.bfloat16)
    out = np.empty(3, dtype=np.float32)
    k(x, out=out)
    np.testing.assert_array_equal(out, x.astype(np.float32))


def test_wrong_dtype(cast_f32_f64):
    out = np.empty(4)
    check = untouched(out)
    with pytest.raises(fk.DTypeError, match="input 0 has dtype f64"):
        cast_f32_f64(np.zeros(4), out=out)
    with pytest.raises(TypeError):                       # also a TypeError
        cast_f32_f64(np.zeros(4, dtype=np.float32), out=np.empty(4, dtype=np.float32))
    with pytest.raises(fk.DTypeError, match="not support"):
        cast_f32_f64(np.zeros(4, dtype=np.complex64), out=out)
    with pytest.raises(fk.DTypeError):
        cast_f32_f64(np.zeros(4, dtype=">f4"), out=out)  # non-native byte order
    check()


def test_wrong_operand_count(cast_f32_f64):
    out = np.empty(4)
    check = untouched(out)
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(fk.OperandCountError, match="takes 1 input"):
        cast_f32_f64(a, a, out=out)
    with pytest.raises(fk.OperandCountError):
        cast_f32_f64(out=out)
    with pytest.raises(fk.OperandCountError):
        cast_f32_f64.run([a], [out, out])
    check()


def test_shape_mismatch_and_too_many_dims(cast_f32_f64):
    out = np.empty((3, 4))
    check = untouched(out)
    with pytest.raises(fk.ShapeError, match="does not broadcast"):
        cast_f32_f64(np.zeros((3, 5), dtype=np.float32), out=out)
    with pytest.raises(fk.ShapeError, match="at most 8"):
        cast_f32_f64(np.zeros((1,) * 9, dtype=np.float32), out=np.empty((1,) * 9))
    with pytest.raises(fk.ShapeError):
        cast_f32_f64(np.zeros((2, 3, 4), dtype=np.float32), out=out)   # input has more dims
    with pytest.raises(ValueError):                      # ShapeError is a ValueError
        cast_f32_f64(np.zeros(7, dtype=np.float32), out=out)
    check()


def test_read_only_output(cast_f32_f64):
    out = np.zeros(4)
    out.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        cast_f32_f64(np.ones(4, dtype=np.float32), out=out)
    assert (out == 0).all()
    with pytest.raises(fk.ReadOnlyError):
        cast_f32_f64(np.ones(4, dtype=np.float32), out=np.broadcast_to(np.zeros(1), (4,)))


def test_aliasing():
    k = fk.bindings().lookup(fk.OpKind.CAST, [F32, F32], CPU)
    buf = np.arange(10, dtype=np.float32)
    before = buf.copy()
    with pytest.raises(fk.AliasError, match="overlaps input 0"):
        k(buf[:8], out=buf[2:])                          # partial overlap: refused
    np.testing.assert_array_equal(buf, before)
    k(buf, out=buf)                                      # exactly in place: allowed
    np.testing.assert_array_equal(buf, before)
    wide = fk.bindings().lookup(fk.OpKind.CAST, [F32, I32], CPU)
    with pytest.raises(fk.AliasError):
        wide(buf[::2], out=buf.view(np.int32)[1::2])       # interleaved views of one buffer
    np.testing.assert_array_equal(buf, before)


def test_unknown_op_and_backend():
    t = fk.bindings()
    with pytest.raises(ValueError):
        t.lookup(999, [F32, F32], CPU)
    with pytest.raises(ValueError):
        t.lookup("no_such_op", [F32, F32], CPU)
    with pytest.raises(ValueError):
        t.lookup(fk.OpKind.CAST, [F32, F32], 300)
    with pytest.raises(fk.DTypeError):
        t.lookup(fk.OpKind.CAST, ["f33", F32], CPU)
    with pytest.raises(fk.OperandCountError):
        t.lookup(fk.OpKind.CAST, [F32] * 9, CPU)


def test_non_array_operand(cast_f32_f64):
    out = np.empty(3)
    with pytest.raises(fk.OperandTypeError):
        cast_f32_f64([1.0, 2.0, 3.0], out=out)
    with pytest.raises(fk.OperandTypeError):
        cast_f32_f64(np.zeros(3, dtype=np.float32), out=object())


def test_misaligned_operand(cast_f32_f64):
    raw = np.zeros(4 * 8 + 1, dtype=np.uint8)
    misaligned = raw[1:].view(np.float32)
    with pytest.raises(fk.ShapeError, match="aligned"):
        cast_f32_f64(misaligned, out=np.empty(misaligned.shape))


def test_bad_params_type(cast_f32_f64):
    with pytest.raises(fk.ParamsError):
        cast_f32_f64(np.zeros(2, dtype=np.float32), out=np.empty(2), params={"mul": 2})


def test_string_and_numpy_dtype_keys():
    t = fk.bindings()
    k1 = t.lookup("cast", ["f32", "f64"], "cpu")
    k2 = t.lookup(fk.OpKind.CAST, [np.float32, np.dtype("float64")], 0)
    assert k1 is k2                                      # handles are cached per entry


def test_no_kernel_error_names_nearest_keys_and_cast():
    with pytest.raises(fk.NoKernelError) as info:
        fk.bindings().lookup(fk.OpKind.CAST, [F32], CPU)
    assert "no kernel for cast(f32) on cpu" in str(info.value)
    assert isinstance(info.value, LookupError)
    claimed = fk.claim_backend("test-miss-backend")
    with pytest.raises(fk.NoKernelError) as info:
        fk.bindings().lookup(fk.OpKind.CAST, [F32, F64], claimed)
    message = str(info.value)
    assert "same dtypes on other backends: cpu" in message
    assert len(message.splitlines()) <= 5


def test_miss_suggests_cast():
    backend = fk.claim_backend("test-suggest-cast")
    add_like = fk.bindings().lookup(fk.OpKind.CAST, [F32, F32], CPU).capsule()
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CONTIGUIZE, [F32, F32], backend, add_like, source="test")
    with pytest.raises(fk.NoKernelError) as info:
        fk.bindings().lookup(fk.OpKind.CONTIGUIZE, [fk.DType.F16, F32], backend)
    message = str(info.value)
    assert "registered with other dtypes: contiguize(f32, f32)" in message
    assert "cast input 0 f16->f32" in message


def test_large_calls_release_the_gil_and_stay_correct(cast_f32_f64):
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    out = np.empty(x.shape)
    cast_f32_f64(x, out=out)
    np.testing.assert_array_equal(out, x.astype(np.float64))


def test_kernel_metadata(cast_f32_f64):
    k = cast_f32_f64
    assert k.op == fk.OpKind.CAST and k.dtypes == (F32, F64) and k.backend == CPU
    assert k.source == "native" and fk.KernelCaps.STRIDED_INPUT in k.caps
    cost = k.cost(np.zeros(100, dtype=np.float32), np.zeros(100))
    assert cost.bytes_moved == 100 * (4 + 8) and k.has_cost
    assert k.cost((10, 10), (10, 10)).bytes_moved == 100 * 12
    assert "cast(f32, f64) on cpu" in repr(k)


def test_call_keywords():
    """out= and params= are the only keywords; names built at run time (not interned) match too."""
    add = fk.bindings().lookup(fk.OpKind.ADD, [fk.DType.F32] * 3)
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    out = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match="unexpected keyword argument 'outt'"):
        add(a, b, outt=out)
    assert not out.any()
    name = "".join(["o", "u", "t"])
    add(a, b, **{name: out})
    np.testing.assert_array_equal(out, a + b)
    add(a, b, out=out, params=None)
    np.testing.assert_array_equal(out, a + b)
    # params= before out= (out then is not right after the inputs in the call's argument vector)
    out[:] = 0
    add(a, b, params=None, out=out)
    np.testing.assert_array_equal(out, a + b)


def test_call_keywords_in_either_order_with_params():
    affine = fk.bindings().lookup(fk.OpKind.AFFINE, [fk.DType.F32] * 2)
    x = np.arange(6, dtype=np.float32)
    first, second = np.zeros(6, np.float32), np.zeros(6, np.float32)
    affine(x, out=first, params=fk.params.affine(2.0, 1.0))
    affine(x, params=fk.params.affine(2.0, 1.0), out=second)
    np.testing.assert_array_equal(first, 2 * x + 1)
    np.testing.assert_array_equal(second, 2 * x + 1)
    with pytest.raises(fk.ParamsError):
        affine(x, params=fk.params.clamp(0.0, 1.0), out=second)
    np.testing.assert_array_equal(second, 2 * x + 1)
