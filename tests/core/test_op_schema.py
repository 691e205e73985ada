"""fuel_kernel.ops, the op schema: output-shape inference refuses bad params, missing inputs and
impossible shapes with typed errors (it is what allocates dispatch's outputs and sizes graph
nodes)."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops


@pytest.mark.parametrize("params", [5, "x", {"dims": (0,)}])
@pytest.mark.parametrize("op, shapes", [("add", [(3,), (3,)]), ("sum", [(2, 3)]),
                                        ("matmul", [(2, 3), (3, 4)]), ("conv2d", [(1, 1, 4, 4), (1, 1, 3, 3)]),
                                        ("slice", [(4,)])])
def test_params_that_are_not_op_params_are_a_params_error(op, shapes, params):
    with pytest.raises(fk.ParamsError):
        ops.infer_output_shape(fk.OpKind.parse(op), shapes, params)


def test_params_of_another_family_are_a_params_error():
    with pytest.raises(fk.ParamsError):
        ops.infer_output_shape(fk.OpKind.CONV2D, [(1, 1, 4, 4), (1, 1, 3, 3)], fk.params.reduce((0,)))
    with pytest.raises(fk.ParamsError):
        ops.infer_output_shape(fk.OpKind.MATMUL, [(2, 3), (3, 4)], fk.params.concat(0))
    assert ops.infer_output_shape(fk.OpKind.SUM, [(2, 3)], fk.params.none()) == ()


def test_concat_of_nothing_is_an_operand_count_error():
    with pytest.raises(fk.OperandCountError):
        ops.infer_output_shape(fk.OpKind.CONCAT, [], fk.params.concat(0))


def test_output_shape_past_int64_is_a_shape_error():
    with pytest.raises(fk.ShapeError, match="too large"):
        ops.infer_output_shape(fk.OpKind.MATMUL, [(2, 3), (3, 4)], fk.params.matmul(2 ** 40, 2 ** 40, 3))


def test_dispatch_allocation_of_an_impossible_output_is_a_shape_error():
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    with pytest.raises(fk.ShapeError):
        fk.dispatch("matmul", [a, b], params=fk.params.matmul(2 ** 40, 2 ** 40, 3))


def test_schema_of_a_runtime_fused_key_is_a_shape_error():
    with pytest.raises(fk.ShapeError):
        ops.schema(fk.BindingKey.runtime_fused(1))
