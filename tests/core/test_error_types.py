"""Every error a caller can provoke through the public Python API is a FuelKernelError that also
derives from the builtin the caller would expect; nothing escapes as a bare ValueError,
TypeError, AttributeError, IndexError or RuntimeError, and no value is silently truncated."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P

F32 = fk.DType.F32
CPU = fk.Backend.CPU
KEY3 = [F32, F32, F32]


# ---- params constructors ---------------------------------------------------------------------
BAD_PARAMS = [
    lambda: P.affine("x", 1.0), lambda: P.affine(1.0, None),
    lambda: P.clamp(None, 1.0), lambda: P.clamp(0.0, [1]),
    lambda: P.powi("a"), lambda: P.powi(None),
    lambda: P.concat(None), lambda: P.concat("1"),
    lambda: P.pad((1,), (1,), value="x"), lambda: P.pad((1,), (1,), mode=[]),
    lambda: P.norm_last_dim("e"), lambda: P.norm_last_dim(object()),
    lambda: P.flash_attn("s"), lambda: P.flash_attn(1.0, window_left="w"),
    lambda: P.paged_attn(1.0, "b"), lambda: P.paged_attn("s", 16),
    lambda: P.masked_fill([1]), lambda: P.masked_fill(None),
    lambda: P.scatter("a"), lambda: P.gather(None), lambda: P.index_select(object()),
    lambda: P.matmul(2, 2, 2, m_compute=5), lambda: P.matmul(2, 2, 2, m_compute="all"),
    lambda: P.slice(5, (1,)), lambda: P.reduce(None), lambda: P.roll(1, 0),
    lambda: P.triangular(2 ** 63), lambda: P.cumsum(2 ** 70),
]


@pytest.mark.parametrize("build", BAD_PARAMS)
def test_bad_params_are_params_errors(build):
    with pytest.raises(fk.ParamsError) as info:
        build()
    assert isinstance(info.value, ValueError)


NON_INTEGRAL = [
    lambda: P.conv2d(stride=1.5), lambda: P.conv2d(padding=(0.5, 1)), lambda: P.conv2d(dilation=(1, 2.5)),
    lambda: P.conv2d(groups=1.5), lambda: P.powi(2.5), lambda: P.concat(1.5),
    lambda: P.triangular(0.5), lambda: P.reduce((1.5,)), lambda: P.matmul(1.5, 2, 2),
    lambda: P.matmul(2, 2, 2, batch=(1.5,)), lambda: P.slice((0,), (1.5,)),
    lambda: P.cumsum(0.5), lambda: P.flip((0.5,)), lambda: P.roll((1.5,), (0,)),
    lambda: P.pad((0.5,), (1,)), lambda: P.flash_attn(1.0, window_left=2.5),
    lambda: P.paged_attn(1.0, 16.5), lambda: fk.MatmulM.rows(1.5), lambda: fk.MatmulM.deferred(0.5),
]


@pytest.mark.parametrize("build", NON_INTEGRAL)
def test_non_integral_integer_params_are_refused_not_truncated(build):
    with pytest.raises(fk.ParamsError):
        build()


def test_integral_values_of_other_types_are_still_accepted():
    assert P.conv2d(stride=np.int64(2)).fields()["stride"] == (2, 2)
    assert P.conv2d(stride=2.0).fields()["stride"] == (2, 2)
    assert P.powi(np.int32(3)).fields()["exp"] == 3
    assert P.affine(np.float32(2), 1).fields() == {"mul": 2.0, "add": 1.0}
    assert P.slice((0,), (4,)).fields()["step"] == (1,)


# ---- keys ---------------------------------------------------------------------------------------
def test_out_of_range_keys_are_refused_not_truncated():
    table = fk.bindings()
    with pytest.raises(fk.KeyRangeError) as info:
        fk.BindingKey(2 ** 16, int(fk.OpKind.ADD))          # kind truncated to 16 bits was STATIC
    assert isinstance(info.value, ValueError) and isinstance(info.value, OverflowError)
    with pytest.raises(fk.KeyRangeError):
        fk.BindingKey(0, 10 ** 6)
    with pytest.raises(fk.KeyRangeError):
        fk.BindingKey(0, -1)
    fid = fk.new_runtime_fused_id()
    with pytest.raises(fk.KeyRangeError):
        fk.BindingKey.runtime_fused(fid + 2 ** 32)          # id truncated to 32 bits was fid
    with pytest.raises(fk.KeyRangeError):
        fk.BindingKey.runtime_fused(0)
    with pytest.raises(fk.UnknownOpError):
        fk.BindingKey.runtime_fused("x")
    # a key forged past the constructor is refused by the table too
    forged = fk.BindingKey(0, int(fk.OpKind.ADD))
    object.__setattr__(forged, "kind", 2 ** 16)
    with pytest.raises(fk.KeyRangeError):
        table.lookup(forged, KEY3)
    object.__setattr__(forged, "kind", 1)
    object.__setattr__(forged, "id", 2 ** 32 + 1)
    with pytest.raises(fk.KeyRangeError):
        table.alternatives(forged, KEY3)


@pytest.mark.parametrize("op", [999, 2 ** 63, 2 ** 64 + int(fk.OpKind.ADD), -1])
def test_unknown_op_ids_are_unknown_op_errors(op):
    with pytest.raises(fk.UnknownOpError):
        fk.bindings().lookup(op, KEY3)


@pytest.mark.parametrize("caps", ["x", -1, 2 ** 70, 1.5, None])
def test_bad_caps_are_typed(caps):
    with pytest.raises(fk.ArgumentError) as info:
        fk.bindings().lookup_with_caps(fk.OpKind.ADD, KEY3, CPU, caps)
    assert isinstance(info.value, ValueError)


def test_runtime_fused_id_arguments_are_typed():
    table = fk.bindings()
    for bad in ("x", 0, 2 ** 32, 2 ** 63, -5):
        with pytest.raises(fk.UnknownOpError):
            table.unique_runtime_fused(bad)
        before = fk.bindings().generation
        with pytest.raises(fk.RegistrationError):
            with fk.edit_bindings() as tx:
                tx.drop_runtime_fused(bad)
        assert fk.bindings().generation == before


def test_fill_unset_precision_with_a_non_claim_is_a_registration_error():
    before = fk.bindings().generation
    with pytest.raises(fk.RegistrationError):
        with fk.edit_bindings() as tx:
            tx.fill_unset_precision(0, 5)
    assert fk.bindings().generation == before


# ---- calls ---------------------------------------------------------------------------------------
def test_dispatch_with_a_missing_input_is_an_operand_count_error():
    with pytest.raises(fk.OperandCountError, match="where takes 3 inputs, got 1"):
        fk.dispatch("where", [np.ones(3, dtype=bool)])


def test_output_allocation_errors_are_typed():
    a = np.ones((2, 2), dtype=np.float32)
    matmul = fk.bindings().lookup(fk.OpKind.MATMUL, KEY3)
    with pytest.raises(fk.ParamsError):
        matmul(a, a, params=5)
    with pytest.raises(fk.ParamsError):
        matmul(a, a, params=P.concat(0))
    huge = np.lib.stride_tricks.as_strided(np.ones(1, np.float32), (2 ** 30, 2 ** 30), (0, 0))
    with pytest.raises(fk.FuelKernelError) as info:
        fk.dispatch("neg", [huge])
    assert isinstance(info.value, (ValueError, MemoryError))


def test_more_than_32_dims_is_a_shape_error():
    x = np.ones((1,) * 33, dtype=np.float32)
    with pytest.raises(fk.ShapeError):
        fk.dispatch("add", [x, x])
    with pytest.raises(fk.ShapeError):
        fk.bindings().lookup(fk.OpKind.ADD, KEY3)(x, x)


def test_released_memoryview_is_an_operand_type_error():
    view = memoryview(np.ones(3, dtype=np.float32))
    view.release()
    with pytest.raises(fk.OperandTypeError):
        fk.dispatch("neg", [view])
    add = fk.bindings().lookup(fk.OpKind.ADD, KEY3)
    with pytest.raises(fk.OperandTypeError):
        add(view, view, out=np.empty(3, np.float32))


class RefusingProducer:
    def __dlpack__(self, **kwargs):
        raise NotImplementedError("this producer does not export")

    def __dlpack_device__(self):
        return (1, 0)


def test_dlpack_producer_that_refuses_export_is_an_operand_type_error():
    with pytest.raises(fk.OperandTypeError):
        fk.dispatch("neg", [RefusingProducer()])
    add = fk.bindings().lookup(fk.OpKind.ADD, KEY3)
    with pytest.raises(fk.OperandTypeError):
        add(RefusingProducer(), np.ones(3, np.float32), out=np.empty(3, np.float32))


@pytest.mark.parametrize("shapes", [((2, "a"), (2,), (2,)), ((2 ** 70,), (2,), (2,)), ((-1,), (2,), (2,)),
                                    ((2.5,), (2,), (2,)), ((1,) * 9, (2,), (2,)),
                                    ((2 ** 62, 2 ** 62), (2,), (2,))])
def test_kernel_cost_with_bad_shapes_is_a_shape_error(shapes):
    with pytest.raises(fk.ShapeError):
        fk.bindings().lookup(fk.OpKind.ADD, KEY3).cost(*shapes)


def test_backend_helpers_are_typed():
    from fuel_kernel import _dispatch
    with pytest.raises(fk.RegistrationError):
        fk.claim_backend(5)
    assert _dispatch.backend_name(2 ** 40) == f"backend#{2 ** 40}"
    assert _dispatch.backend_name(0) == "cpu"


@pytest.mark.parametrize("operand", [np.ones(3, dtype=object), np.ones(3, dtype=np.complex64),
                                     np.ones(3, dtype=">f4")])
def test_dispatch_with_an_unsupported_dtype_is_a_dtype_error(operand):
    with pytest.raises(fk.DTypeError):
        fk.dispatch("neg", [operand])


def test_call_kernel_capsule_with_non_sequence_operands_is_typed():
    from fuel_kernel import _dispatch
    neg = fk.bindings().lookup(fk.OpKind.NEG, [F32, F32])
    with pytest.raises(fk.OperandTypeError):
        _dispatch.call_kernel_capsule(neg.capsule(), [F32, F32], [np.ones(2, np.float32)], None)
    with pytest.raises(fk.OperandTypeError):
        _dispatch.call_kernel_capsule(neg.capsule(), [F32, F32], 5, [np.ones(2, np.float32)])
