"""Every error path leaves the caller's output exactly as it was (byte for byte, guards included).

One test per error path of _dispatch.run_entry (operand count, params type, non-array, unsupported
dtype, dtype mismatch, more than 8 dims, misalignment, stride not a multiple of the item size,
read-only output, aliasing) and of the kernels (shapes that do not broadcast, integer division by
zero, negative integer exponents, out-of-range indices).  Ops are discovered from the live coverage
list, so each test runs for every kernel family that is merged; a family whose operand conventions
the generic builder cannot meet is reported as a skip, not silently passed.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuel_kernel as fk

from fuzzing import MUST_FAIL, cases, fill, guarded, live_bindings, random_values, refusal_of_inputs, run_case

D = fk.DType
CPU = fk.Backend.CPU


def one_binding_per_op():
    seen = {}
    for op, dtypes in live_bindings():
        seen.setdefault(op, dtypes)
    return sorted(seen.items())


OPS = one_binding_per_op()
OP_IDS = [op.short_name for op, _ in OPS]

# error path -> the FuelKernelError subclass the call must raise
MUTATIONS = {
    "wrong_dtype": fk.DTypeError, "wrong_count": fk.OperandCountError,
    "read_only": fk.ReadOnlyError, "too_many_dims": fk.ShapeError, "misaligned": fk.ShapeError,
    "non_array": fk.OperandTypeError, "byte_order": fk.DTypeError, "self_overlap": fk.AliasError,
    # a huge stride-0 output overlaps itself; an input that did not grow with it no longer broadcasts,
    # and an op whose params state the output's extents (MATMUL's m, n) contradicts them
    "huge_output": (fk.AliasError, fk.ShapeError, fk.ParamsError),
}
assert set(MUTATIONS) == set(MUST_FAIL)


@pytest.mark.parametrize("mode", sorted(MUTATIONS))
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_validation_error_paths_write_nothing(mode, data):
    case = data.draw(cases(live_bindings(), modes=(mode,)))
    if case.mode != mode:                 # e.g. no misalignment possible for 1-byte dtypes
        return
    calls = []

    def call(inputs, out, params):
        kernel = fk.bindings().lookup(case.op, case.dtypes, CPU)
        outs = None if out is None else [out] + [o.view for o in case.extra_outputs]
        try:
            return kernel.run(inputs, outs, params)[0]
        except fk.FuelKernelError as exc:
            calls.append(exc)
            raise

    assert run_case(case, call=call) == "error"
    if mode == "self_overlap" and not isinstance(calls[0], MUTATIONS[mode]):
        # the drawn inputs may be refused on their own (CONV2D's gradients draw an input_size one
        # off in a tenth of the cases): the kernel may report that before the output's overlap
        expected = refusal_of_inputs(case)
        assert expected is not None and isinstance(calls[0], expected), (calls[0], case.describe())
    else:
        assert isinstance(calls[0], MUTATIONS[mode]), (calls[0], case.describe())


def _valid_operands(op, dtypes, rng):
    """Inputs and a guarded output for a plain call of op: same-shape elementwise operands."""
    shape = (3, 5)
    inputs = []
    for dt in dtypes[:-1]:
        o = guarded(shape, D(dt).numpy, "contiguous", rng)
        fill(o, random_values(shape, dt, rng, "plain"))
        inputs.append(o)
    return inputs, guarded(shape, D(dtypes[-1]).numpy, "strided", rng)


def _assert_unchanged_after(exc_type, fn, *operands):
    before = [o.root.copy() for o in operands]
    with pytest.raises(exc_type):
        fn()
    for o, b in zip(operands, before):
        assert np.array_equal(o.root, b), "a failing call changed an operand"


@pytest.mark.parametrize("op,dtypes", OPS, ids=OP_IDS)
def test_run_entry_error_paths(op, dtypes, rng):
    """The checks run_entry makes before any kernel runs, one by one, on every op."""
    k = fk.bindings().lookup(op, dtypes, CPU)
    inputs, out = _valid_operands(op, dtypes, rng)
    views = [o.view for o in inputs]
    ops_ = inputs + [out]
    _assert_unchanged_after(fk.ParamsError, lambda: k(*views, out=out.view, params={"eps": 1}), *ops_)
    _assert_unchanged_after(fk.ParamsError, lambda: k(*views, out=out.view, params=3.5), *ops_)
    _assert_unchanged_after(fk.OperandCountError, lambda: k(*views, views[0] if views else out.view,
                                                            out=out.view), *ops_)
    _assert_unchanged_after(fk.OperandCountError, lambda: k.run(views, [out.view, out.view]), *ops_)
    _assert_unchanged_after(fk.OperandTypeError, lambda: k(*views, out=[[0.0] * 15]), *ops_)
    _assert_unchanged_after(fk.OperandTypeError, lambda: k(*views, out=3.5), *ops_)
    _assert_unchanged_after(fk.OperandTypeError, lambda: k(*([object()] * len(views)), out=out.view), *ops_)
    _assert_unchanged_after(fk.DTypeError, lambda: k(*views, out=out.view.astype(np.complex64)), *ops_)
    swapped = out.view.view(out.view.dtype.newbyteorder())
    if out.view.dtype.itemsize > 1:
        _assert_unchanged_after(fk.DTypeError, lambda: k(*views, out=swapped), *ops_)
    if out.view.dtype.itemsize > 1:
        # a stride that is not a multiple of the item size (a packed record field, say)
        odd = np.ndarray(out.view.shape, out.view.dtype, buffer=out.root, offset=0,
                         strides=(out.view.itemsize * 5 + 1, 1 + out.view.itemsize))
        if odd.flags.aligned:
            _assert_unchanged_after(fk.ShapeError, lambda: k(*views, out=odd), *ops_)
    out.view.flags.writeable = False
    _assert_unchanged_after(fk.ReadOnlyError, lambda: k(*views, out=out.view), *ops_)
    out.view.flags.writeable = True
    big = guarded((1,) * 9, D(dtypes[-1]).numpy, "contiguous", rng)
    _assert_unchanged_after(fk.ShapeError, lambda: k(*views, out=big.view), *(ops_ + [big]))


@pytest.mark.parametrize("op,dtypes", OPS, ids=OP_IDS)
def test_partial_overlap_is_refused_and_writes_nothing(op, dtypes, rng):
    if len(dtypes) < 2:
        pytest.skip("no input to alias")
    k = fk.bindings().lookup(op, dtypes, CPU)
    src = guarded((16,), D(dtypes[0]).numpy, "contiguous", rng)
    fill(src, random_values((16,), dtypes[0], rng, "plain"))
    out_nd = np.dtype(D(dtypes[-1]).numpy)
    base = src.view.__array_interface__["data"][0] - src.root.__array_interface__["data"][0]
    n_out = (16 * src.view.itemsize) // out_nd.itemsize - 1
    shift = out_nd.itemsize if out_nd.itemsize <= src.view.itemsize else 0
    out = np.ndarray((max(n_out, 1),), out_nd, buffer=src.root, offset=base + shift)
    others = []
    for dt in dtypes[1:-1]:
        o = guarded((16,), D(dt).numpy, "contiguous", rng)
        fill(o, random_values((16,), dt, rng, "plain"))
        others.append(o)
    before = src.root.copy()
    with pytest.raises(fk.FuelKernelError) as info:
        k(src.view, *[o.view for o in others], out=out)
    assert np.array_equal(src.root, before)
    if len(dtypes) == 2 and op in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE):
        assert isinstance(info.value, fk.AliasError)


@pytest.mark.parametrize("op,dtypes", OPS, ids=OP_IDS)
def test_shapes_that_do_not_fit_write_nothing(op, dtypes, rng):
    """Kernel-side shape validation: an output whose shape no input fits."""
    k = fk.bindings().lookup(op, dtypes, CPU)
    inputs = []
    for dt in dtypes[:-1]:
        o = guarded((3, 5), D(dt).numpy, "contiguous", rng)
        fill(o, random_values((3, 5), dt, rng, "plain"))
        inputs.append(o)
    out = guarded((7, 4, 6), D(dtypes[-1]).numpy, "negative", rng)
    before = [o.root.copy() for o in inputs + [out]]
    try:
        k(*[o.view for o in inputs], out=out.view)
    except fk.FuelKernelError:
        pass
    else:
        pytest.fail(f"{op.name}: an output of shape (7, 4, 6) for (3, 5) inputs was accepted")
    for o, b in zip(inputs + [out], before):
        assert np.array_equal(o.root, b)


# ---- data-dependent kernel errors, found late in the operand ------------------------------------
def _bindings(op, predicate=lambda dtypes: True):
    return [dtypes for o, dtypes in live_bindings() if o == op and predicate(dtypes)]


INT = lambda d: not D(d).is_float and d != D.BOOL
DIVISION = [(op, dts) for op in (fk.OpKind.DIV, fk.OpKind.REM, fk.OpKind.FMOD, fk.OpKind.TRUNC_DIV)
            for dts in _bindings(op, lambda dts: INT(dts[0]))]


@pytest.mark.skipif(not DIVISION, reason="no integer DIV/REM bindings registered yet")
@pytest.mark.parametrize("op,dtypes", DIVISION or [(None, None)],
                         ids=[f"{op.short_name}-{dts[0].short_name}" for op, dts in DIVISION] or ["none"])
def test_integer_division_by_zero_writes_nothing(op, dtypes, rng):
    k = fk.bindings().lookup(op, dtypes, CPU)
    shape = (40, 33)                      # large enough that a kernel writing first would show it
    a = guarded(shape, D(dtypes[0]).numpy, "contiguous", rng)
    fill(a, random_values(shape, dtypes[0], rng, "plain"))
    b = guarded(shape, D(dtypes[1]).numpy, "strided", rng)
    divisor = np.where(random_values(shape, dtypes[1], rng, "plain") == 0, 1,
                       random_values(shape, dtypes[1], rng, "plain")).astype(b.view.dtype)
    divisor[divisor == 0] = 1
    fill(b, divisor)
    out = guarded(shape, D(dtypes[-1]).numpy, "contiguous", rng)
    k(a.view, b.view, out=out.view)                     # the valid call works
    b.view[-1, -1] = 0                                  # the very last element divides by zero
    before = [o.root.copy() for o in (a, b, out)]
    with pytest.raises(fk.KernelZeroDivisionError):
        k(a.view, b.view, out=out.view)
    with pytest.raises(ZeroDivisionError):
        fk.dispatch(op, [a.view, b.view], [out.view])
    for o, before_bytes in zip((a, b, out), before):
        assert np.array_equal(o.root, before_bytes)


NEG_POW = _bindings(fk.OpKind.POW, lambda dts: D(dts[0]).is_signed_int)


@pytest.mark.skipif(not NEG_POW, reason="no signed-integer POW bindings registered yet")
@pytest.mark.parametrize("dtypes", NEG_POW or [None], ids=[d[0].short_name for d in NEG_POW] or ["none"])
def test_negative_integer_exponent_writes_nothing(dtypes, rng):
    k = fk.bindings().lookup(fk.OpKind.POW, dtypes, CPU)
    a = guarded((64,), D(dtypes[0]).numpy, "contiguous", rng)
    fill(a, random_values((64,), dtypes[0], rng, "small"))
    b = guarded((64,), D(dtypes[1]).numpy, "contiguous", rng)
    fill(b, np.abs(random_values((64,), dtypes[1], rng, "small")))
    out = guarded((64,), D(dtypes[-1]).numpy, "negative", rng)
    k(a.view, b.view, out=out.view)
    b.view[-1] = -1
    before = [o.root.copy() for o in (a, b, out)]
    with pytest.raises(fk.FuelKernelError):
        k(a.view, b.view, out=out.view)
    for o, before_bytes in zip((a, b, out), before):
        assert np.array_equal(o.root, before_bytes)


INDEX_OPS = (fk.OpKind.INDEX_SELECT, fk.OpKind.GATHER, fk.OpKind.SCATTER_ADD, fk.OpKind.INDEX_ADD,
             fk.OpKind.SCATTER)
INDEXED = [(op, dts) for op in INDEX_OPS for dts in _bindings(op)[:3]]


def _index_call(op, dtypes, rng, bad):
    """Operands for op with axis 0: x (6, 4); the index operand holds `bad` last when given."""
    index_pos = next(i for i, d in enumerate(dtypes[:-1]) if d in (D.I32, D.I64) and i > 0)
    n_idx = 5
    shapes = {fk.OpKind.INDEX_SELECT: [(6, 4), (n_idx,)], fk.OpKind.GATHER: [(6, 4), (n_idx, 4)],
              fk.OpKind.SCATTER_ADD: [(6, 4), (n_idx, 4), (n_idx, 4)],
              fk.OpKind.SCATTER: [(6, 4), (n_idx, 4), (n_idx, 4)],
              fk.OpKind.INDEX_ADD: [(6, 4), (n_idx,), (n_idx, 4)]}[op]
    out_shape = {fk.OpKind.INDEX_SELECT: (n_idx, 4), fk.OpKind.GATHER: (n_idx, 4)}.get(op, (6, 4))
    operands = []
    for i, (shape, dt) in enumerate(zip(shapes, dtypes[:-1])):
        o = guarded(shape, D(dt).numpy, "contiguous", rng)
        if i == index_pos:
            values = rng.integers(0, 6, shape)
            if bad is not None:
                values.reshape(-1)[-1] = bad
            fill(o, values.astype(o.view.dtype))
        else:
            fill(o, random_values(shape, dt, rng, "plain"))
        operands.append(o)
    out = guarded(out_shape, D(dtypes[-1]).numpy, "strided", rng)
    params = {fk.OpKind.INDEX_SELECT: fk.params.index_select(0), fk.OpKind.GATHER: fk.params.gather(0),
              fk.OpKind.SCATTER: fk.params.scatter_reduce(0, "max")}.get(op, fk.params.scatter(0))
    return operands, out, params


@pytest.mark.skipif(not INDEXED, reason="no index kernels registered yet")
@pytest.mark.parametrize("op,dtypes", INDEXED or [(None, None)],
                         ids=[f"{op.short_name}-{'-'.join(d.short_name for d in dts)}" for op, dts in INDEXED] or ["none"])
@pytest.mark.parametrize("bad", [6, -7, 2 ** 31 - 1])
def test_out_of_range_index_writes_nothing(op, dtypes, bad, rng):
    k = fk.bindings().lookup(op, dtypes, CPU)
    if not any(d in (D.I32, D.I64) for d in dtypes[1:-1]):
        pytest.skip("no index operand")
    operands, out, params = _index_call(op, dtypes, rng, None)
    try:
        k(*[o.view for o in operands], out=out.view, params=params)
    except fk.FuelKernelError as exc:
        pytest.skip(f"the generic operand builder does not meet {op.name}'s conventions: {exc}")
    operands, out, params = _index_call(op, dtypes, rng, bad)
    before = [o.root.copy() for o in operands + [out]]
    with pytest.raises(fk.KernelIndexError):
        k(*[o.view for o in operands], out=out.view, params=params)
    for o, b in zip(operands + [out], before):
        assert np.array_equal(o.root, b)


# ---- arguments that are not operands: op, dtypes, backend, operand sequences --------------------
BAD_ARGUMENTS = {
    "op name": (fk.UnknownOpError, lambda a, o: fk.dispatch("nonsense", [a], [o])),
    "op code": (fk.UnknownOpError, lambda a, o: fk.dispatch(999, [a], [o])),
    "op huge": (fk.UnknownOpError, lambda a, o: fk.bindings().lookup(2 ** 70, [a.dtype, o.dtype])),
    "op None": (fk.UnknownOpError, lambda a, o: fk.dispatch(None, [a], [o])),
    "inputs None": (fk.OperandTypeError, lambda a, o: fk.dispatch(fk.OpKind.CAST, None, [o])),
    "inputs int": (fk.OperandTypeError, lambda a, o: fk.bindings().lookup(
        fk.OpKind.CAST, [a.dtype, o.dtype]).run(5, [o])),
    "outputs int": (fk.OperandTypeError, lambda a, o: fk.bindings().lookup(
        fk.OpKind.CAST, [a.dtype, o.dtype]).run([a], 5)),
    "backend name": (fk.BackendError, lambda a, o: fk.dispatch(fk.OpKind.CAST, [a], [o], backend="nope")),
    "backend id": (fk.BackendError, lambda a, o: fk.dispatch(fk.OpKind.CAST, [a], [o], backend=999)),
    "backend huge": (fk.BackendError, lambda a, o: fk.dispatch(fk.OpKind.CAST, [a], [o], backend=2 ** 70)),
    "backend float": (fk.BackendError, lambda a, o: fk.dispatch(fk.OpKind.CAST, [a], [o], backend=1.5)),
    "dtypes None": (fk.DTypeError, lambda a, o: fk.bindings().lookup(fk.OpKind.CAST, None)),
    "dtype code": (fk.DTypeError, lambda a, o: fk.bindings().lookup(fk.OpKind.CAST, [99, 9])),
    "dtype huge": (fk.DTypeError, lambda a, o: fk.bindings().lookup(fk.OpKind.CAST, [2 ** 70, 9])),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_get_typed_errors_and_write_nothing(name):
    expected, call = BAD_ARGUMENTS[name]
    a = np.arange(6, dtype=np.float32)
    o = np.full(6, 7.0)
    with pytest.raises(expected):
        call(a, o)
    assert (o == 7.0).all()


def test_bad_registration_arguments_are_registration_errors():
    capsule = fk.bindings().lookup(fk.OpKind.CAST, [D.F32, D.F64]).capsule()
    before = fk.bindings().generation
    for kwargs in ({"caps": 2 ** 40}, {"revision": -1}, {"precision": fk.PrecisionGuarantee(True, -1)},
                   {"precision": "exact"}):
        with pytest.raises(fk.RegistrationError):
            with fk.edit_bindings() as tx:
                tx.register(fk.OpKind.CAST, [D.F32, D.F64], CPU, capsule, **kwargs)
    with pytest.raises(fk.RegistrationError):
        with fk.edit_bindings() as tx:
            tx.drop_runtime_fused(2 ** 70)
    assert fk.bindings().generation == before
