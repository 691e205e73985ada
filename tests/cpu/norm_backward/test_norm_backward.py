"""RMS_NORM_BACKWARD and LAYER_NORM_BACKWARD, ops with several outputs: every binding over every
layout against a long-double reference (itself checked by central differences of the forward
oracle), the precision claims, special values, the several-output call forms (Kernel, run,
dispatch, Graph) and every refusal, each leaving every output untouched."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops as fk_ops
import oracles
from fuel_kernel.graph import Graph
from support import FLOAT_DTYPES, LAYOUTS, make_operand

OP = fk.OpKind
OPS = (OP.RMS_NORM_BACKWARD, OP.LAYER_NORM_BACKWARD)
N_INPUTS = {OP.RMS_NORM_BACKWARD: 3, OP.LAYER_NORM_BACKWARD: 4}
N_OUTPUTS = {OP.RMS_NORM_BACKWARD: 2, OP.LAYER_NORM_BACKWARD: 3}
CASES = [(op, dt) for op in OPS for dt in FLOAT_DTYPES]
COVERED = {(op, (dt,) * (N_INPUTS[op] + N_OUTPUTS[op])) for op, dt in CASES}
SHAPES = [(5, 7), (1, 1), (3, 1), (1, 257), (2, 3, 17), (0, 4), (4, 0), (13,), (2, 1100)]
EPS = 1e-5
PARAMS = fk.params.norm_last_dim(EPS)


def key(op, dtype):
    return [dtype] * (N_INPUTS[op] + N_OUTPUTS[op])


def operands(op, shape, dtype, layout, rng):
    """x, w (, b), dy of `shape`: x and dy in `layout`, the vectors strided or reversed."""
    d = shape[-1]
    x = make_operand(shape, dtype, layout, rng, special=False)
    w = make_operand((d,), dtype, "strided" if layout == "broadcast" else layout, rng, special=False)
    dy = make_operand(shape, dtype, "negative" if layout == "contiguous" else layout, rng, special=False)
    if op == OP.RMS_NORM_BACKWARD:
        return [x, w, dy]
    return [x, w, make_operand((d,), dtype, "negative", rng, special=False), dy]


def expected(op, inputs, eps=EPS):
    x, w, dy = (np.asarray(v).astype(np.float64).astype(np.longdouble) for v in (inputs[0], inputs[1], inputs[-1]))
    return oracles.norm_backward(op, x, w, dy, eps)


def check(got, want, scale, claim, where):
    g = np.asarray(got).astype(np.longdouble)
    assert (np.isnan(g) == np.isnan(want)).all(), where
    fin = np.isfinite(want)
    err = np.abs(g[fin] - want[fin])
    bound = claim.max_rel * scale[fin] + claim.max_abs
    assert (err <= bound).all(), (where, float(np.max(err - bound)))


def fresh_outputs(op, shape, dtype, fill=7):
    d = shape[-1]
    return [np.full(shape, fill, dtype=dtype.numpy)] + [np.full((d,), fill, dtype=dtype.numpy)
                                                        for _ in range(N_OUTPUTS[op] - 1)]


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in CASES])
def test_binding(op, dtype, rng):
    kernels = fk.bindings().alternatives(op, key(op, dtype), fk.Backend.CPU)
    assert kernels
    for kernel in kernels:
        assert kernel.n_inputs == N_INPUTS[op] and kernel.n_outputs == N_OUTPUTS[op]
        assert kernel.has_cost and kernel.precision is not None
        for shape in SHAPES:
            for layout in LAYOUTS:
                inputs = operands(op, shape, dtype, layout, rng)
                outs = fresh_outputs(op, shape, dtype)
                result = kernel(*inputs, out=tuple(outs), params=PARAMS)
                assert len(result) == N_OUTPUTS[op] and all(r is o for r, o in zip(result, outs))
                want, scales = expected(op, inputs)
                for i, (o, w, s) in enumerate(zip(outs, want, scales)):
                    check(o, w, s, kernel.precision, (shape, layout, i))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_outputs_are_written_through_their_strides(dtype, rng):
    op = OP.LAYER_NORM_BACKWARD
    inputs = operands(op, (6, 9), dtype, "contiguous", rng)
    big = np.full((11, 17), 3, dtype=dtype.numpy)
    dx = big[::2, ::2][:, ::-1][:, ::-1]
    vec, vec2 = np.full(30, 3, dtype=dtype.numpy), np.full(20, 3, dtype=dtype.numpy)
    dw, db = vec[::3][:9], vec2[1::2][::-1][:9]
    fk.dispatch(op, inputs, (dx, dw, db), PARAMS)
    want, scales = expected(op, inputs)
    claim = fk.bindings().lookup(op, key(op, dtype), fk.Backend.CPU).precision
    for o, w, s in zip((dx, dw, db), want, scales):
        check(o, w, s, claim, dtype)
    untouched = np.ones((11, 17), bool)
    untouched[::2, ::2] = False
    assert (big[untouched] == 3).all()
    assert (vec[1::3] == 3).all() and (vec2[::2] == 3).all()


def test_reference_matches_central_differences_of_the_forward_ops(rng):
    """The long-double formulas are the gradients of oracles.rms_norm / layer_norm: the vector-
    Jacobian product with dy, by central differences in F64."""
    x = rng.standard_normal((3, 6))
    w, b, dy = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal((3, 6))
    h = 1e-6
    for op, forward in ((OP.RMS_NORM_BACKWARD, lambda x, w, b: oracles.rms_norm(x, EPS, w)),
                        (OP.LAYER_NORM_BACKWARD, lambda x, w, b: oracles.layer_norm(x, EPS, w, b))):
        inputs = [x, w, dy] if op == OP.RMS_NORM_BACKWARD else [x, w, b, dy]
        grads = [np.asarray(g, dtype=np.float64) for g in expected(op, inputs)[0]]
        for position, value in ((0, x), (1, w), (2, b))[:N_OUTPUTS[op]]:
            numeric = np.zeros_like(value)
            for index in np.ndindex(value.shape):
                args = [x.copy(), w.copy(), b.copy()]
                args[position][index] += h
                up_value = np.sum(forward(*args) * dy)
                args[position][index] -= 2 * h
                numeric[index] = (up_value - np.sum(forward(*args) * dy)) / (2 * h)
            np.testing.assert_allclose(grads[position], numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op", OPS)
def test_special_values_follow_ieee_arithmetic(op):
    dtype = fk.DType.F32
    x = np.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
    w = np.array([1.0, -2.0, 0.5], np.float32)
    dy = np.ones_like(x)
    inputs = [x, w, dy] if op == OP.RMS_NORM_BACKWARD else [x, w, np.zeros(3, np.float32), dy]
    outs = fk.dispatch(op, inputs, params=PARAMS)
    want, _ = expected(op, inputs)
    for got, ref in zip(outs, want):
        assert got.dtype == dtype.numpy
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(outs[0][1]).all() and np.isnan(outs[1]).all()   # a NaN row: its dx, and every dw
    if op == OP.LAYER_NORM_BACKWARD:
        assert np.isfinite(outs[2]).all()                             # db = sum(dy) never reads x
    assert np.isfinite(outs[0][0]).all() and np.isfinite(outs[0][3]).all()   # a zero row: r = 1/sqrt(eps)


@pytest.mark.parametrize("op", OPS)
def test_call_forms_allocate_and_return_every_output(op, rng):
    inputs = operands(op, (4, 8), fk.DType.F32, "contiguous", rng)
    kernel = fk.bindings().lookup(op, key(op, fk.DType.F32), fk.Backend.CPU)
    allocated = kernel(*inputs, params=PARAMS)
    assert isinstance(allocated, tuple) and len(allocated) == N_OUTPUTS[op]
    assert allocated[0].shape == (4, 8) and all(o.shape == (8,) for o in allocated[1:])
    ran = kernel.run(inputs, None, PARAMS)
    dispatched = fk.dispatch(op, inputs, params=PARAMS)
    mine = fresh_outputs(op, (4, 8), fk.DType.F32)
    assert kernel.run(inputs, mine, PARAMS) == tuple(mine)
    for results in (ran, dispatched, mine):
        for a, b in zip(allocated, results):
            np.testing.assert_array_equal(a, b)
    assert fk_ops.infer_output_shapes(op, [v.shape for v in inputs]) == ((4, 8),) + ((8,),) * (N_OUTPUTS[op] - 1)
    assert fk_ops.infer_output_dtypes(op, [fk.DType.F32] * N_INPUTS[op]) == (fk.DType.F32,) * N_OUTPUTS[op]
    with pytest.raises(fk.OperandCountError, match="infer_output_shapes"):
        fk_ops.infer_output_shape(op, [v.shape for v in inputs])


@pytest.mark.parametrize("op", OPS)
def test_graph_builder_returns_a_value_per_output(op, rng):
    inputs = operands(op, (5, 16), fk.DType.F32, "contiguous", rng)
    g = Graph()
    leaves = [g.input(v.shape, "f32") for v in inputs]
    builder = getattr(g, op.name.lower())
    values = builder(*leaves, eps=EPS)
    assert isinstance(values, tuple) and len(values) == N_OUTPUTS[op]
    scaled = g.mul(values[0], leaves[0])                # an output feeds a later node
    plan = g.compile([scaled, *values[1:]])
    got = plan.run(inputs)
    want = fk.dispatch(op, inputs, params=PARAMS)
    np.testing.assert_array_equal(got[0], want[0] * inputs[0])
    for a, b in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(a, b)
    single = g.compile(values[1])                       # one output of a several-output node
    np.testing.assert_array_equal(single.run(inputs), want[1])
    assert op.short_name in plan.explain()


# ---- refusals: typed errors, every output untouched -------------------------------------------------
def refused(op, inputs, outs, error, params=PARAMS, match=None):
    kernel = fk.bindings().lookup(op, key(op, fk.DType.F32), fk.Backend.CPU)
    before = [np.array(o, copy=True) for o in outs]
    with pytest.raises(error, match=match):
        kernel(*inputs, out=tuple(outs), params=params)
    for o, b in zip(outs, before):
        np.testing.assert_array_equal(o, b)


@pytest.mark.parametrize("op", OPS)
def test_refusals_leave_every_output_untouched(op, rng):
    f32 = fk.DType.F32
    inputs = operands(op, (4, 6), f32, "contiguous", rng)
    outs = fresh_outputs(op, (4, 6), f32)
    n_out = N_OUTPUTS[op]
    # operand counts: one output short, one input short, an output among the inputs
    refused(op, inputs, outs[:-1], fk.OperandCountError, match=f"writes {n_out} outputs")
    kernel = fk.bindings().lookup(op, key(op, f32), fk.Backend.CPU)
    with pytest.raises(fk.OperandCountError):
        kernel(*inputs[:-1], out=tuple(outs), params=PARAMS)
    with pytest.raises(fk.OperandCountError):
        kernel(*inputs, outs[0], out=tuple(outs[1:]), params=PARAMS)
    # dtypes: an input, then the last output
    refused(op, [inputs[0].astype(np.float64)] + inputs[1:], outs, fk.DTypeError)
    refused(op, inputs, outs[:-1] + [outs[-1].astype(np.float64)], fk.DTypeError)
    # shapes: dy unlike x, a weight of another extent, a dw of another extent, dx unlike x
    refused(op, inputs[:-1] + [inputs[-1][:, :5]], outs, fk.ShapeError)
    refused(op, [inputs[0], inputs[1][:5]] + inputs[2:], outs, fk.ShapeError)
    refused(op, inputs, [outs[0], np.zeros(5, np.float32)] + outs[2:], fk.ShapeError)
    refused(op, inputs, [np.zeros((4, 5), np.float32)] + outs[1:], fk.ShapeError)
    # too many dims
    nine = (1,) * 7 + (4, 6)
    refused(op, [inputs[0].reshape(nine)] + inputs[1:-1] + [inputs[-1].reshape(nine)],
            [outs[0].reshape(nine)] + outs[1:], fk.ShapeError)
    # read-only, each output in turn
    for i in range(n_out):
        locked = [o.copy() for o in outs]
        locked[i].flags.writeable = False
        refused(op, inputs, locked, fk.ReadOnlyError, match=f"output {i}")
    # aliasing: dx over x, dw over w, two outputs sharing memory, an output overlapping itself
    refused(op, inputs, [inputs[0]] + outs[1:], fk.AliasError)
    refused(op, inputs, [outs[0], inputs[1]] + outs[2:], fk.AliasError)
    shared = np.zeros(12, np.float32)
    if n_out == 3:
        refused(op, inputs, [outs[0], shared[:6], shared[3:9]], fk.AliasError, match="overlaps output 1")
    refused(op, inputs, [outs[0], np.broadcast_to(np.float32(0), (6,))] + outs[2:], fk.ReadOnlyError)
    # params: another family, a negative eps
    refused(op, inputs, outs, fk.ParamsError, params=fk.params.softmax_last_dim())
    with pytest.raises(fk.ParamsError):
        fk.params.norm_last_dim(-1.0)


@pytest.mark.parametrize("op", OPS)
def test_dispatch_counts_and_unknown_keys(op, rng):
    inputs = operands(op, (2, 3), fk.DType.F32, "contiguous", rng)
    with pytest.raises(fk.OperandCountError, match=f"writes {N_OUTPUTS[op]} outputs, got 1"):
        fk.dispatch(op, inputs, np.zeros((2, 3), np.float32), PARAMS)
    with pytest.raises(fk.NoKernelError):
        fk.dispatch(op, [v.astype(np.int32) for v in inputs], params=PARAMS)
    with pytest.raises(fk.OperandCountError):
        g = Graph()
        g.op(op, g.input((2, 3), "f32"))


def test_huge_stride_zero_operands_are_refused_before_any_write():
    """Rows of 2**60 broadcast elements: dx would overlap itself (an AliasError), and the other
    outputs stay untouched; with dx real, the size would exceed memory first."""
    op = OP.RMS_NORM_BACKWARD
    n = 2 ** 60
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (n,), (0,))
    dx = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (n,), (0,))
    kernel = fk.bindings().lookup(op, key(op, fk.DType.F32), fk.Backend.CPU)
    dw = np.full(4, 5, np.float32)
    with pytest.raises(fk.AliasError, match="overlaps itself"):
        kernel(x, x, x, out=(dx, dw), params=PARAMS)
    assert (dw == 5).all()


def test_several_output_ops_in_the_spec_and_abi():
    assert fk_ops.n_outputs(OP.RMS_NORM_BACKWARD) == 2 and fk_ops.n_outputs(OP.LAYER_NORM_BACKWARD) == 3
    assert fk_ops.n_outputs(OP.ADD) == 1
    assert fk_ops.min_outputs(OP.FLASH_ATTN) == 1 and fk_ops.n_outputs(OP.FLASH_ATTN) == 2   # optional lse
    for kernel in fk.bindings():
        assert kernel.n_inputs + kernel.n_outputs == len(kernel.dtypes)
        if isinstance(kernel.op, fk.OpKind):
            assert fk_ops.min_outputs(kernel.op) <= kernel.n_outputs <= fk_ops.n_outputs(kernel.op), kernel
        else:
            assert kernel.n_outputs == 1


def test_keys_that_do_not_fit_the_op_are_refused_at_registration():
    """A static key must list at least one input before the op's outputs, and an output count in
    the op's range (a FLASH_ATTN key of 6 dtypes would be 3 outputs)."""
    capsule = fk.bindings().lookup(OP.RMS_NORM_BACKWARD, key(OP.RMS_NORM_BACKWARD, fk.DType.F32),
                                   fk.Backend.CPU).capsule()
    backend = fk.claim_backend("several-outputs-test")
    for op, n in ((OP.RMS_NORM_BACKWARD, 2), (OP.FLASH_ATTN, 6), (OP.LAYER_NORM_BACKWARD, 3)):
        with pytest.raises(fk.RegistrationError):
            with fk.edit_bindings() as txn:
                txn.register(op, ["f32"] * n, backend, capsule)
