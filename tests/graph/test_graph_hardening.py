"""Graph builder and Plan.run hardening: operands reach kernels aligned and in native byte order,
constants are private copies, view builders refuse what they cannot represent, and every refusal
is a typed FuelKernelError that is also the builtin a caller expects."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg

F32, F64 = fk.DType.F32, fk.DType.F64


def misaligned_f32(values):
    """A C-contiguous float32 array holding `values` whose data pointer is 1 byte past an
    alignment boundary."""
    values = np.asarray(values, dtype=np.float32)
    raw = bytearray(values.nbytes + 1)
    raw[1:] = values.tobytes()
    a = np.frombuffer(raw, np.float32, values.size, 1)
    assert not a.flags.aligned and a.flags.c_contiguous
    return a


class _SpyProgram:
    """Stands in for a Plan's PlanProgram and records the base arrays the executor would get."""

    def __init__(self, program):
        self.program = program
        self.bases = None

    def run(self, bases):
        self.bases = list(bases)
        return self.program.run(bases)


def _spy(plan):
    spy = _SpyProgram(plan._program)
    plan._program = spy
    return spy


# ---- operands: alignment, byte order, private constants ------------------------------------------
def test_misaligned_plan_input_is_copied_to_an_aligned_base():
    g = fg.Graph()
    x = g.input((6,), F32)
    plan = g.compile(g.neg(x))
    spy = _spy(plan)
    a_values = np.arange(6, dtype=np.float32)
    a = misaligned_f32(a_values)
    out = plan.run([a])
    np.testing.assert_array_equal(out, -a_values)
    assert all(b.flags.aligned and b.flags.c_contiguous for b in spy.bases)


def test_misaligned_constant_is_stored_aligned():
    g = fg.Graph()
    x = g.input((6,), F32)
    k = g.constant(misaligned_f32(np.arange(6)))
    stored = g.buffers[k.buffer.id].array
    assert stored.flags.aligned and stored.flags.c_contiguous
    plan = g.compile(g.add(x, k))
    spy = _spy(plan)
    np.testing.assert_array_equal(plan.run([np.ones(6, np.float32)]), np.arange(1, 7, dtype=np.float32))
    assert all(b.flags.aligned for b in spy.bases)


def test_constant_is_a_private_copy():
    g = fg.Graph()
    x = g.input((4,), F32)
    c = np.arange(4, dtype=np.float32)
    plan = g.compile(g.add(x, g.constant(c)))
    c[:] = 100.0                                       # after building: must not reach the plan
    np.testing.assert_array_equal(plan.run([np.zeros(4, np.float32)]), np.arange(4, dtype=np.float32))


def test_constant_that_is_already_contiguous_is_still_copied():
    g = fg.Graph()
    c = np.ones((2, 3), dtype=np.float32)
    k = g.constant(c)
    assert not np.shares_memory(g.buffers[k.buffer.id].array, c)


def test_zero_d_constant_keeps_shape_and_runs():
    g = fg.Graph()
    x = g.input((), F32)
    k = g.constant(np.float32(2.5))
    assert k.shape == () and g.buffers[k.buffer.id].shape == ()
    out = g.compile(g.add(x, k)).run([np.array(1.0, np.float32)])
    assert out.shape == () and out == np.float32(3.5)


def test_zero_d_constant_broadcasts_against_a_vector():
    g = fg.Graph()
    x = g.input((3,), F32)
    out = g.compile(g.mul(x, g.broadcast_to(g.constant(np.float32(2.0)), (3,)))).run(
        [np.arange(3, dtype=np.float32)])
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])


def test_byte_swapped_input_is_converted_to_native():
    g = fg.Graph()
    x = g.input((5,), F32)
    plan = g.compile(g.neg(x))
    spy = _spy(plan)
    swapped = np.arange(5, dtype=np.float32).astype(np.dtype(np.float32).newbyteorder())
    assert not swapped.dtype.isnative
    np.testing.assert_array_equal(plan.run([swapped]), -np.arange(5, dtype=np.float32))
    assert all(b.dtype.isnative for b in spy.bases)


def test_byte_swapped_constant_is_stored_native():
    g = fg.Graph()
    x = g.input((3,), F64)
    swapped = np.array([1.0, 2.0, 3.0]).astype(np.dtype(np.float64).newbyteorder())
    k = g.constant(swapped)
    assert k.dtype == F64 and g.buffers[k.buffer.id].array.dtype.isnative
    np.testing.assert_array_equal(g.compile(g.add(x, k)).run([np.zeros(3)]), [1.0, 2.0, 3.0])


def test_byte_swapped_input_of_another_dtype_is_still_refused():
    g = fg.Graph()
    plan = g.compile(g.neg(g.input((3,), F32)))
    with pytest.raises(fk.DTypeError):
        plan.run([np.zeros(3, dtype=np.dtype(np.float64).newbyteorder())])


def test_plan_input_that_is_not_an_array():
    g = fg.Graph()
    plan = g.compile(g.neg(g.input((3,), F32)))
    with pytest.raises(fk.OperandTypeError) as info:
        plan.run(5)
    assert isinstance(info.value, TypeError)
    view = memoryview(np.zeros(3, np.float32))
    view.release()
    with pytest.raises(fk.OperandTypeError):
        plan.run([view])


def test_plan_run_given_an_array_instead_of_a_list_says_so():
    g = fg.Graph()
    plan = g.compile(g.neg(g.input((3,), F32)))
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(fk.OperandTypeError, match=r"plan\.run\(\[x\]\), not plan\.run\(x\)"):
        plan.run(x)
    np.testing.assert_array_equal(plan.run([x]), -x)


# ---- typed errors from the builders ----------------------------------------------------------------
@pytest.mark.parametrize("shape", [("a",), (1.5,), ("ab"), (2, None), object()])
def test_input_with_a_bad_shape_is_a_shape_error(shape):
    g = fg.Graph()
    with pytest.raises(fk.ShapeError) as info:
        g.input(shape, F32)
    assert isinstance(info.value, ValueError)


def test_input_with_an_int_shape_is_one_dim():
    assert fg.Graph().input(5, F32).shape == (5,)


@pytest.mark.parametrize("shape", [(2 ** 40, 2 ** 40), (2 ** 62, 2), (2 ** 61, 1, 1, 1)])
def test_input_whose_size_overflows_is_a_shape_error(shape):
    with pytest.raises(fk.ShapeError, match="too large"):
        fg.Graph().input(shape, F32)


def test_huge_broadcast_node_is_a_shape_error():
    g = fg.Graph()
    a = g.input((2 ** 31, 1), F32)
    b = g.input((1, 2 ** 31), F32)
    with pytest.raises(fk.ShapeError):
        g.add(a, b)                                    # 2**62 elements = 2**64 bytes of f32
    x = g.input((1,), F32)
    with pytest.raises(fk.ShapeError):
        g.broadcast_to(x, (2 ** 32, 2 ** 32))


def test_broadcast_to_more_than_eight_dims_is_a_shape_error():
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.ShapeError):
        g.broadcast_to(x, (1,) * 7 + (2, 3))


def test_compile_of_a_non_value_is_an_operand_type_error():
    g = fg.Graph()
    g.neg(g.input((3,), F32))
    for bad in (5, None, [5]):
        with pytest.raises(fk.OperandTypeError) as info:
            g.compile(bad)
        assert isinstance(info.value, TypeError)


def test_ragged_constant_is_a_shape_error():
    with pytest.raises(fk.ShapeError) as info:
        fg.Graph().constant([[1.0, 2.0], [3.0]])
    assert isinstance(info.value, ValueError)


def test_constant_whose_values_do_not_fit_the_dtype_is_typed():
    with pytest.raises(fk.FuelKernelError):
        fg.Graph().constant([2 ** 70], dtype="i32")


@pytest.mark.parametrize("params", [5, "abc", {"dims": (0,)}, object()])
@pytest.mark.parametrize("build", ["add", "sum", "matmul", "conv2d", "slice"])
def test_params_of_the_wrong_type_are_a_params_error(params, build):
    g = fg.Graph()
    x = g.input((2, 3, 4, 5), F32)
    inputs = {"add": (x, x), "sum": (x,), "matmul": (x, g.transpose(x, (0, 1, 3, 2))),
              "conv2d": (x, x), "slice": (x,)}[build]
    with pytest.raises(fk.ParamsError) as info:
        getattr(g, build)(*inputs, params=params)
    assert isinstance(info.value, ValueError)


def test_params_of_another_family_are_a_params_error():
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.ParamsError):
        g.sum(x, params=fk.params.concat(0))
    with pytest.raises(fk.ParamsError):
        g.conv2d(g.input((1, 1, 4, 4), F32), g.input((1, 1, 3, 3), F32), params=fk.params.reduce((0,)))


def test_concat_without_inputs_is_an_operand_count_error():
    g = fg.Graph()
    with pytest.raises(fk.OperandCountError):
        g.concat(params=fk.params.concat(0))


@pytest.mark.parametrize("fused_id", ["x", 1.5, None])
def test_fused_with_a_bad_id_is_typed(fused_id):
    g = fg.Graph()
    x = g.input((3,), F32)
    with pytest.raises(fk.UnknownOpError):
        g.fused(fused_id, x)


@pytest.mark.parametrize("backend", ["no-such-backend", 1.5, -1, 256])
def test_bad_backend_is_a_backend_error(backend):
    with pytest.raises(fk.BackendError):
        fg.Graph(backend)
    g = fg.Graph()
    x = g.input((3,), F32)
    with pytest.raises(fk.BackendError):
        g.neg(x, backend=backend)


def test_backend_by_name():
    g = fg.Graph("cpu")
    assert g.target_backend == int(fk.Backend.CPU)


# ---- view builders: refused, never wrapped ------------------------------------------------------
@pytest.mark.parametrize("axes", [(3, 0), (2, 0), (-3, 0), (0, 0), (1, -1), (0,), (0, 1, 2), ("a", 0), (0.0, 1)])
def test_transpose_refuses_axes_that_are_not_a_permutation(axes):
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.ShapeError) as info:
        g.transpose(x, axes)
    assert isinstance(info.value, ValueError)


def test_transpose_takes_negative_axes_in_range():
    g = fg.Graph()
    x = g.input((2, 3, 4), F32)
    assert g.transpose(x, (-1, 0, -2)).shape == (4, 2, 3)


@pytest.mark.parametrize("shape", [(-2, -3), (-1, -1), (-6,), (-1, 0), (4, -1), ("a",), (2.0, 3)])
def test_reshape_refuses_bad_shapes(shape):
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.ShapeError) as info:
        g.reshape(x, shape)
    assert isinstance(info.value, ValueError)


def test_reshape_infers_one_extent():
    g = fg.Graph()
    x = g.input((2, 3, 4), F32)
    assert g.reshape(x, (-1, 4)).shape == (6, 4)
    assert g.reshape(x, 24).shape == (24,)
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(g.compile(g.neg(g.reshape(x, (4, -1)))).run([a]), -a.reshape(4, 6))


def test_slicing_refusals_are_typed():
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.KernelIndexError) as info:
        x[2]
    assert isinstance(info.value, IndexError)
    with pytest.raises(fk.KernelIndexError):
        x[-3]
    with pytest.raises(fk.KernelIndexError):
        x[0, 0, 0]
    for bad in ("a", 1.5, None, Ellipsis, slice("a", None), slice(None, None, 1.5), True):
        with pytest.raises(fk.ShapeError):
            x[bad]
    with pytest.raises(fk.ShapeError) as info:
        x[::0]
    assert isinstance(info.value, ValueError)


def test_slicing_still_matches_numpy(rng):
    g = fg.Graph()
    x = g.input((4, 5), F32)
    views = [x[np.int64(1)], x[-1, 1:4], x[::-1, ::2], x[3:1], x[:, -2]]
    plan = g.compile([g.neg(v) for v in views])
    a = rng.standard_normal((4, 5)).astype(np.float32)
    for got, want in zip(plan.run([a]), [a[1], a[-1, 1:4], a[::-1, ::2], a[3:1], a[:, -2]]):
        np.testing.assert_array_equal(got, -want)


@pytest.mark.parametrize("shape", [("a", 3), (2, -1), (3,), (2, 4)])
def test_broadcast_to_refusals_are_shape_errors(shape):
    g = fg.Graph()
    x = g.input((2, 3), F32)
    with pytest.raises(fk.ShapeError):
        g.broadcast_to(x, shape)


# ---- runtime fused registration ----------------------------------------------------------------------
def _neg_capsule():
    return fk.bindings().lookup(fk.OpKind.NEG, [F32, F32], fk.Backend.CPU).capsule()


def _double_neg(g, a):
    return g.neg(g.neg(a))


@pytest.mark.parametrize("dtypes", [[], [F32], "f32", 5])
def test_register_runtime_fused_refuses_bad_dtypes(dtypes):
    with pytest.raises(fk.RegistrationError):
        fg.register_runtime_fused("bad-dtypes", _double_neg, _neg_capsule(), dtypes)


def test_register_runtime_fused_refuses_a_precision_that_is_not_a_guarantee():
    with pytest.raises(fk.RegistrationError):
        fg.register_runtime_fused("bad-precision", _double_neg, _neg_capsule(), [F32, F32], precision="exact")


def test_register_runtime_fused_takes_a_backend_name():
    copy_kernel = fk.bindings().lookup(fk.OpKind.CONTIGUIZE, [F32, F32], fk.Backend.CPU).capsule()
    fused_id = fg.register_runtime_fused("double-neg-by-name", _double_neg, copy_kernel, [F32, F32],
                                         backend="cpu", caps=fk.KernelCaps.NONE)
    assert (F32, F32) in [dtypes for dtypes, backend in fg.fused_op(fused_id).kernels
                          if backend == fk.Backend.CPU]
    with pytest.raises(fk.BackendError):
        fg.register_runtime_fused("double-neg-by-name", _double_neg, copy_kernel, [F32, F32], backend="cpux")
