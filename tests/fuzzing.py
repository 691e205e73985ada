"""Operands inside guarded buffers, case generators and the outcome check shared by the fuzz suite
(test_fuzz.py) and the error-path tests (test_no_partial_writes.py).

Every operand is a view into its own `root` byte buffer with guard space around it, filled with
random bytes first.  After a call the whole root is compared byte for byte: on an exception
nothing may have changed; on success only the bytes the output view addresses may have changed
(so a kernel writing outside its output, or into an input, is caught too).
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import ml_dtypes
import numpy as np

import fuel_kernel as fk
from fuel_kernel import ops

import oracles

D = fk.DType
OUTPUT_LAYOUTS = ("contiguous", "fortran", "strided", "negative", "offset", "random_strides")
INPUT_LAYOUTS = OUTPUT_LAYOUTS + ("broadcast", "overlapping")
SIZES = (0, 1, 1, 2, 2, 3, 3, 5, 7, 11, 13)
REDUCE_OPS = {fk.OpKind.SUM, fk.OpKind.MAX, fk.OpKind.MIN, fk.OpKind.MEAN, fk.OpKind.PROD,
              fk.OpKind.ARGMAX, fk.OpKind.ARGMIN}
LAST_DIM_OPS = {fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM, fk.OpKind.RMS_NORM,
                fk.OpKind.LAYER_NORM}
PARAMS_BY_OP = {fk.OpKind.AFFINE: "affine", fk.OpKind.CLAMP: "clamp", fk.OpKind.POWI: "powi",
                fk.OpKind.MATMUL: "matmul", fk.OpKind.CONV2D: "conv2d",
                fk.OpKind.RMS_NORM: "norm_last_dim", fk.OpKind.LAYER_NORM: "norm_last_dim",
                **{op: "reduce" for op in REDUCE_OPS}}


def live_bindings():
    """(op, dtypes) of every static CPU key in the current snapshot: grows as families merge."""
    return [(row.op, tuple(row.dtypes)) for row in fk.bindings().coverage()
            if row.backend == fk.Backend.CPU and isinstance(row.op, fk.OpKind)]


def params_family(op):
    try:
        return ops.schema(op).params
    except fk.FuelKernelError:
        return PARAMS_BY_OP.get(op, "none")


# ---- guarded operands ----------------------------------------------------------------------------
@dataclass
class Operand:
    root: np.ndarray                 # uint8: every byte the operand can touch, plus guards
    view: object                     # what is passed to the call (an ndarray, or a non-array)
    footprint: np.ndarray            # bool per root byte: addressed by the view
    self_overlapping: bool = False   # two elements of the view share memory

    def snapshot(self):
        return self.root.copy()


def element_strides(shape, layout, rng):
    n = len(shape)
    c = [1] * n
    for d in range(n - 2, -1, -1):
        c[d] = c[d + 1] * max(shape[d + 1], 1)
    if layout in ("contiguous", "offset"):
        return c
    if layout == "fortran":
        f = [1] * n
        for d in range(1, n):
            f[d] = f[d - 1] * max(shape[d - 1], 1)
        return f
    if layout == "strided":
        return [2 * s for s in c]
    if layout == "negative":
        flip = rng.integers(0, 2, n) if n else []
        if n and not any(flip):
            flip[rng.integers(0, n)] = 1
        return [-s if f else s for s, f in zip(c, flip)]
    if layout == "broadcast":
        zero = rng.integers(0, 2, n) if n else []
        return [0 if z else s for s, z in zip(c, zero)]
    if layout == "overlapping":
        return [int(rng.integers(0, 3)) for _ in shape]
    if layout == "random_strides":
        return [int(rng.integers(-7, 8)) for _ in shape]
    raise ValueError(layout)


def guarded(shape, dtype, layout, rng, misalign=False):
    """An ndarray view of `shape` and `dtype` inside a random-filled guarded root buffer."""
    nd = np.dtype(dtype)
    itemsize = nd.itemsize
    shape = tuple(int(s) for s in shape)
    strides = element_strides(shape, layout, rng)
    empty = any(s == 0 for s in shape)
    lo = 0 if empty else sum(min(0, st * (s - 1)) for st, s in zip(strides, shape))
    hi = 0 if empty else sum(max(0, st * (s - 1)) for st, s in zip(strides, shape))
    guard = 3 + (5 if layout == "offset" else 0)
    n_elements = hi - lo + 1 + 2 * guard
    root = rng.integers(0, 256, n_elements * itemsize + 16, dtype=np.uint8)
    # numpy's allocation is 16-byte aligned; keep element alignment unless asked not to
    offset = (guard - lo) * itemsize + (1 if misalign and itemsize > 1 else 0)
    view = np.ndarray(shape, nd, buffer=root, offset=offset, strides=tuple(s * itemsize for s in strides))
    footprint = np.zeros(root.shape, dtype=bool)
    addressed = np.zeros(0, dtype=np.int64)
    if not empty:
        grids = np.indices(shape, sparse=False).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
        addressed = offset + (np.asarray(strides, np.int64)[:, None] * grids).sum(axis=0) * itemsize
        for b in range(itemsize):
            footprint[addressed + b] = True
    self_overlap = len(np.unique(addressed)) != addressed.size
    return Operand(root, view, footprint, self_overlap)


def fill(operand, values):
    """Write valid values through the view (overlapping views keep their last write)."""
    operand.view[...] = values


def random_values(shape, dtype, rng, mode):
    """Values of `dtype`: 'special' adds NaN/Inf/-0.0 and int extremes, 'small' gives small
    integers (zeros included, for division), 'plain' moderate magnitudes."""
    dtype = D(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if dtype == D.BOOL:
        return rng.integers(0, 2, size).astype(bool).reshape(shape)
    if mode == "small":
        flat = rng.integers(-3, 4, size).astype(np.float64)
        if not dtype.is_signed_int and not dtype.is_float:
            flat = np.abs(flat)
    elif dtype.is_float:
        flat = rng.standard_normal(size) * (4.0 if mode != "special" else 30.0)
        if mode == "special" and size:
            picks = rng.choice(size, size=min(size, 4), replace=False)
            flat[picks] = np.array([np.nan, np.inf, -np.inf, -0.0])[: len(picks)]
    else:
        info = np.iinfo(dtype.numpy)
        if mode == "special":
            flat = rng.integers(info.min, info.max, size, endpoint=True, dtype=dtype.numpy)
            return flat.reshape(shape)
        flat = rng.integers(max(info.min, -1000), min(info.max, 1000), size, endpoint=True).astype(np.float64)
    with np.errstate(all="ignore"):
        return flat.astype(dtype.numpy).reshape(shape)


# ---- a case --------------------------------------------------------------------------------------
@dataclass
class Case:
    op: fk.OpKind
    dtypes: tuple                    # the binding's key
    mode: str                        # "valid", or the mutation applied
    form: str                        # "call" | "run" | "dispatch" | "dispatch_alloc"
    inputs: list                     # Operand
    output: Optional[Operand]
    params: object = None
    extra_outputs: list = field(default_factory=list)
    aliased: bool = False            # output shares memory with input 0
    out_shape: tuple = ()

    def describe(self):
        ins = ", ".join(f"{getattr(o.view, 'dtype', type(o.view).__name__)}{getattr(o.view, 'shape', '')}"
                        f"/{getattr(o.view, 'strides', '')}" for o in self.inputs)
        out = self.output.view if self.output is not None else None
        return (f"{self.op.name}{tuple(d.short_name for d in self.dtypes)} mode={self.mode} form={self.form} "
                f"inputs=[{ins}] out={getattr(out, 'dtype', None)}{getattr(out, 'shape', None)}"
                f"/{getattr(out, 'strides', None)} params={self.params!r}")


def run_case(case, stats=None):
    """Call, then check the reliability properties; returns "ok", "error" or "skip"."""
    in_before = [o.snapshot() for o in case.inputs]
    out_before = case.output.snapshot() if case.output is not None else None
    extra_before = [o.snapshot() for o in case.extra_outputs]
    in_values = [np.array(o.view, copy=True) if isinstance(o.view, np.ndarray) else None
                 for o in case.inputs]
    views = [o.view for o in case.inputs]
    out_view = case.output.view if case.output is not None else None
    try:
        if case.form in ("dispatch", "dispatch_alloc"):
            outs = None if case.form == "dispatch_alloc" else [out_view] + [o.view for o in case.extra_outputs]
            result = fk.dispatch(case.op, views, outs, params=case.params)
        else:
            kernel = fk.bindings().lookup(case.op, case.dtypes, fk.Backend.CPU)
            if case.form == "run":
                outs = None if out_view is None else [out_view] + [o.view for o in case.extra_outputs]
                (result,) = kernel.run(views, outs, case.params)
            else:
                assert not case.extra_outputs
                result = kernel(*views, out=out_view, params=case.params)
    except fk.FuelKernelError as exc:
        for o, before in zip(case.inputs, in_before):
            assert np.array_equal(o.root, before), f"input changed by a failing call ({exc!r}): {case.describe()}"
        if case.output is not None:
            assert np.array_equal(case.output.root, out_before), \
                f"partial write: output changed by a failing call ({exc!r}): {case.describe()}"
        for o, before in zip(case.extra_outputs, extra_before):
            assert np.array_equal(o.root, before), f"extra output changed by a failing call: {case.describe()}"
        _expect_success_if_valid(case, in_values, exc)
        return "error"
    except Exception as exc:     # anything else escaping the public API is a bug
        raise AssertionError(f"untyped exception {type(exc).__name__}: {exc} for {case.describe()}") from exc

    assert case.mode in ("valid", "alias", "random_shapes", "bad_params", "wrong_dtype_dispatch"), \
        f"mode {case.mode} must fail but the call succeeded: {case.describe()}"
    if case.output is not None:
        assert result is out_view, "the call must return the caller's output"
        changed = case.output.root != out_before
        assert not (changed & ~case.output.footprint).any(), \
            f"wrote outside the output view: {case.describe()}"
    for o, before in zip(case.inputs, in_before):
        if case.aliased and o is case.inputs[0]:
            continue
        assert np.array_equal(o.root, before), f"an input changed: {case.describe()}"
    if case.output is not None and case.output.self_overlapping:
        return "skip"
    oracle = oracles.ORACLES.get(case.op)
    if oracle is None or any(v is None for v in in_values):
        return "skip"
    actual = np.asarray(result)
    out_dtype = D.parse(actual.dtype)
    try:
        expected = oracle.fn(in_values, case.params, out_dtype, actual.shape)
    except oracles.Skip:
        return "skip"
    except oracles.ExpectError as expect:
        if oracle.strict:
            raise AssertionError(f"succeeded where {expect.cls.__name__} was due: {case.describe()}")
        return "skip"
    reduced = max(1, int(np.prod(in_values[0].shape, dtype=np.int64)) // max(1, actual.size)) \
        if in_values and in_values[0] is not None else 1
    if case.op == fk.OpKind.MATMUL and in_values[0].ndim >= 2:
        reduced = in_values[0].shape[-1]
    if case.op in oracles.ORACLES and oracles.ORACLES[case.op].kind == "accumulate":
        _scale_check(case, actual, expected, out_dtype, in_values, reduced)
        return "ok"
    try:
        oracles.compare(case.op, actual, expected, out_dtype, in_values, reduced)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{case.describe()}") from None
    return "ok"


def _scale_check(case, actual, expected, out_dtype, in_values, reduced):
    """Accumulating ops: the error bound scales with the magnitude of the terms, not the result."""
    if not D(out_dtype).is_float:
        np.testing.assert_array_equal(actual, expected, err_msg=case.describe())
        return
    a, e = actual.astype(np.float64), np.asarray(expected).astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert (nan_a == nan_e).all(), f"NaN mismatch: {case.describe()}"
    finite = np.isfinite(e)
    assert (a[~finite & ~nan_e] == e[~finite & ~nan_e]).all(), f"Inf mismatch: {case.describe()}"
    with np.errstate(all="ignore"):
        mags = [np.abs(v.astype(np.float64)) for v in in_values if v is not None and v.dtype.kind == "f"
                or (v is not None and v.dtype == ml_dtypes.bfloat16)]
        term = max([float(np.nanmax(np.where(np.isfinite(m), m, 0))) for m in mags if m.size] + [1.0])
    if case.op == fk.OpKind.PROD:
        term = max(term, 1.0) ** max(reduced, 1)
    if case.op == fk.OpKind.MATMUL:
        term = term * term
    rtol, atol = oracles.tolerance("accumulate", out_dtype, reduced)
    bad = finite & ~(np.abs(a - e) <= atol * term + rtol * np.abs(e))
    assert not bad.any(), (f"{case.op.name}: got {a[bad][:5]} expected {e[bad][:5]} "
                           f"(rtol {rtol}, atol {atol}*{term}): {case.describe()}")


def _expect_success_if_valid(case, in_values, exc):
    """A strict oracle's valid case must not fail unless the oracle itself says it must."""
    if case.mode != "valid" or case.aliased:
        return
    oracle = oracles.ORACLES.get(case.op)
    if oracle is None or not oracle.strict or case.output is None or case.output.self_overlapping:
        return
    if any(v is None for v in in_values):
        return
    try:
        oracle.fn(in_values, case.params, case.dtypes[-1], case.out_shape)
    except (oracles.Skip, oracles.ExpectError):
        return
    except Exception:
        return
    raise AssertionError(f"a valid case raised {exc!r}: {case.describe()}")
