"""NumPy references for fuel_kernel ops: a registry OpKind -> Oracle, used by the fuzz suite.

An oracle takes the call's inputs (NumPy arrays, read before the call), its params, the output
dtype and shape, and returns the expected output, raises ExpectError(cls) when the call must fail
with a FuelKernelError, or raises Skip when it cannot judge the case (params of another family,
where kernels may refuse or ignore them, or a convention left to the kernels, said where it is
raised).  An expected array is compared elementwise by `compare`; ops that sum terms (CUMSUM, the
index adds, CONV2D and its gradients, ROPE, attention) return an `Accumulated` instead, compared by
`compare_accumulated` against a bound scaled by each element's own magnitude.

Semantics follow the README's kernels table, fuel_kernel/ops.py and the family headers: F16/BF16 compute in F32 and
round once; integer arithmetic wraps; integer DIV/REM are floor division/remainder and fail on a
zero divisor; reductions over empty dims reduce everything; data movement copies exactly, and an
out-of-range axis in its params is a ParamsError; indices must lie in [0, extent), no negative
wrap-around, else KernelIndexError.  Tolerances (TOLERANCES, per output dtype and per op class):
ints and bools are exact; exactly-rounded float ops (arithmetic, CAST, rounding functions,
comparisons, data movement) are exact up to the double rounding of a half type (1 ulp);
transcendental ops get a few ulp; sums, products of many terms, matmul, softmax and norms get an
error bound that grows with the reduced length, and the Accumulated ops one that grows with their
number of terms.  Every op of the CPU table has an entry; an op without one is still fuzzed for
"typed exception or success, never a crash, never a partial write" (test_fuzz.py names it).
"""
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import gguf
import ml_dtypes
import numpy as np

import fuel_kernel as fk
from fuel_kernel import spec

D = fk.DType
HALF = (D.F16, D.BF16)
# the float types NumPy lacks (NumPy's dtype kind is not "f" for them): BF16 and the FP8 formats
NARROW_FLOATS = (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))


class Skip(Exception):
    """The oracle cannot judge this case; only the crash / partial-write properties apply."""


class ExpectError(Exception):
    """The call must raise a FuelKernelError (ideally `cls`)."""

    def __init__(self, cls):
        super().__init__(cls.__name__)
        self.cls = cls


@dataclass(frozen=True)
class Oracle:
    fn: Callable                      # (inputs, params, out_dtype, out_shape) -> expected array
    kind: str = "exact"               # tolerance class: exact | transcendental | accumulate
    strict: bool = True               # a valid case must succeed (not just raise a typed error)
    destination: bool = False         # an in-place op: fn's inputs end with the output's values before the call


ORACLES = {}

# (rtol, atol) for floats per tolerance class and output dtype; `accumulate` also scales with the
# reduced length n (see tolerance()).
EPS = {D.F16: 2.0 ** -10, D.BF16: 2.0 ** -7, D.F32: 2.0 ** -23, D.F64: 2.0 ** -52}
TOLERANCES = {
    "exact": {d: (EPS[d] if d in HALF else 0.0, 0.0) for d in EPS},
    "transcendental": {D.F16: (2e-3, 1e-4), D.BF16: (1.6e-2, 1e-3), D.F32: (8e-6, 1e-6),
                       D.F64: (1e-13, 1e-15)},
}


def tolerance(kind, dtype, n=1):
    dtype = D(dtype)
    if kind == "accumulate":
        eps = EPS[dtype]
        return (max(8 * eps, 4e-6 if dtype != D.F64 else 0) * max(1.0, math.log2(max(n, 2))) + eps,
                8 * eps * max(n, 1))
    return TOLERANCES[kind][dtype]


def compute_dtype(dtype):
    """Where a kernel computes: F16/BF16 in F32, everything else in itself."""
    dtype = D(dtype)
    if dtype in HALF:
        return np.dtype(np.float32)
    return dtype.numpy


def up(x):
    x = np.asarray(x)
    if x.dtype == np.dtype(np.float16) or x.dtype in NARROW_FLOATS:
        return x.astype(np.float32)
    return x


def to(values, dtype):
    """Round computed values to the output dtype (BF16 through F32, as ml_dtypes)."""
    dtype = D(dtype)
    values = np.asarray(values)
    with np.errstate(all="ignore"):
        if dtype == D.BF16 and values.dtype == np.float64:
            values = values.astype(np.float32)
        if not dtype.is_float and dtype != D.BOOL and values.dtype.kind == "f":
            raise Skip("float result into an integer output")
        return values.astype(dtype.numpy)


def register(ops, kind="exact", strict=True, destination=False):
    def wrap(fn):
        for op in ops:
            ORACLES[op] = Oracle(fn, kind, strict, destination)
        return fn
    return wrap


def params_family(params):
    return "none" if params is None else params.kind


def need_params(params, *families):
    if params_family(params) not in families:
        raise Skip(f"params {params_family(params)} is not {families}")


# ---- CAST, CONTIGUIZE ----------------------------------------------------------------------------
def cast_values(x, dst):
    """The documented CAST rules (README): saturating float->int, NaN->0, BF16 via F32, FP8 as
    ml_dtypes converts (F64 directly)."""
    src_dtype = np.asarray(x).dtype
    dst = D(dst)
    x = np.asarray(x)
    if src_dtype == dst.numpy:
        return x.copy()
    if x.dtype.kind == "f" or x.dtype in NARROW_FLOATS:
        if dst != D.BOOL and not dst.is_float and not dst.is_float8:
            v = x.astype(np.float64)
            t = np.trunc(np.where(np.isnan(v), 0.0, v))
            info = np.iinfo(dst.numpy)
            out = np.clip(t, info.min, info.max)
            res = np.zeros(x.shape, dtype=dst.numpy)
            low, high = t <= info.min, t >= info.max
            mid = ~(low | high)
            res[low] = info.min
            res[high] = info.max
            res[mid] = out[mid].astype(dst.numpy)
            return res
    if dst == D.BF16 and x.dtype == np.float64:
        return x.astype(np.float32).astype(ml_dtypes.bfloat16)
    with np.errstate(all="ignore"):
        return x.astype(dst.numpy)


@register([fk.OpKind.CAST, fk.OpKind.CONTIGUIZE])
def _copy(inputs, params, out_dtype, out_shape):
    (x,) = inputs
    try:
        x = np.broadcast_to(x, out_shape)
    except ValueError:
        raise ExpectError(fk.ShapeError) from None
    return cast_values(x, out_dtype)


# ---- elementwise ---------------------------------------------------------------------------------
def broadcast_inputs(inputs, out_shape):
    try:
        return [np.broadcast_to(x, out_shape) for x in inputs]
    except ValueError:
        raise ExpectError(fk.ShapeError) from None


def unary(fn, int_ok=False):
    def oracle(inputs, params, out_dtype, out_shape):
        need_params(params, "none")
        (x,) = broadcast_inputs(inputs, out_shape)
        if not D(out_dtype).is_float and not int_ok:
            raise Skip("integer flavour not specified")
        with np.errstate(all="ignore"):
            return to(fn(up(x)), out_dtype)
    return oracle


def sigmoid(x):
    """1 / (1 + exp(-x)) through exp(-|x|), which never overflows."""
    t = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, t) / (1.0 + t)


def erf(x):
    """math.erf elementwise (within an ulp of the float64 erf), in x's dtype."""
    return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)


def erfc(x):
    """math.erfc elementwise, in x's dtype: 1 - erf(x) without the cancellation for large x."""
    return np.vectorize(math.erfc, otypes=[np.asarray(x).dtype])(x)


def _at_infinity(fn):
    """x * (something -> 0) is NaN at -Inf in floating point; the function's limit there is -0."""
    def wrapped(x):
        with np.errstate(all="ignore"):
            y = fn(x)
        return np.where(np.isneginf(x), -np.zeros_like(y), np.where(np.isposinf(x), x, y))
    return wrapped


@_at_infinity
def _gelu_tanh(x):
    """x * (1 + tanh(c (x + 0.044715 x^3))) / 2, written as x * sigmoid(2 c (...)): no cancellation
    for large negative x."""
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return x * sigmoid(2 * c * (x + np.asarray(0.044715, x.dtype) * x * x * x))


@_at_infinity
def _gelu_erf(x):
    """x * (1 + erf(x / sqrt 2)) / 2, written with erfc(-x / sqrt 2)."""
    return 0.5 * x * erfc(-x / np.asarray(math.sqrt(2.0), x.dtype))


@_at_infinity
def _silu(x):
    return x * sigmoid(x)


EXACT_UNARY = {
    fk.OpKind.NEG: np.negative, fk.OpKind.ABS: np.abs, fk.OpKind.SQR: np.square,
    fk.OpKind.SQRT: np.sqrt, fk.OpKind.RECIP: np.reciprocal, fk.OpKind.FLOOR: np.floor,
    fk.OpKind.CEIL: np.ceil, fk.OpKind.ROUND: np.rint, fk.OpKind.SIGN: np.sign,
    fk.OpKind.RELU: lambda x: np.where(x > 0, x, np.zeros_like(x)),
}
INT_UNARY = {fk.OpKind.NEG, fk.OpKind.ABS, fk.OpKind.SQR, fk.OpKind.SIGN, fk.OpKind.RELU}
TRANSCENDENTAL_UNARY = {
    fk.OpKind.RSQRT: lambda x: 1 / np.sqrt(x), fk.OpKind.EXP: np.exp, fk.OpKind.LOG: np.log,
    fk.OpKind.SIN: np.sin, fk.OpKind.COS: np.cos, fk.OpKind.TANH: np.tanh,
    fk.OpKind.SIGMOID: sigmoid, fk.OpKind.SILU: _silu,
    fk.OpKind.GELU: _gelu_tanh, fk.OpKind.GELU_ERF: _gelu_erf, fk.OpKind.ERF: erf,
}

for _op, _fn in EXACT_UNARY.items():
    # RELU of NaN and SIGN of NaN/-0.0 are conventions: mask() leaves NaN inputs out for them
    ORACLES[_op] = Oracle(unary(_fn, int_ok=_op in INT_UNARY), "exact")
for _op, _fn in TRANSCENDENTAL_UNARY.items():
    ORACLES[_op] = Oracle(unary(_fn), "transcendental")


@register([fk.OpKind.STEP])
def _step(inputs, params, out_dtype, out_shape):
    need_params(params, "none")
    (x,) = broadcast_inputs(inputs, out_shape)
    if not D(out_dtype).is_float:
        raise Skip("integer STEP not specified")
    return to(np.where(up(x) > 0, 1.0, 0.0).astype(compute_dtype(out_dtype)), out_dtype)


def binary(fn, bool_fn=None):
    def oracle(inputs, params, out_dtype, out_shape):
        need_params(params, "none")
        a, b = broadcast_inputs(inputs, out_shape)
        if a.dtype == np.bool_:
            if bool_fn is None:
                raise Skip("bool flavour not specified")
            return to(bool_fn(a, b), out_dtype)
        with np.errstate(all="ignore"):
            return to(fn(up(a), up(b)), out_dtype)
    return oracle


def trunc_divide(a, b):
    """Integer a / b rounded toward zero (C): the floor quotient, plus one where a remainder is
    left and the signs differ; MIN / -1 wraps to MIN as NumPy's floor division does."""
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _int_division(fn):
    """fn on integers (a zero divisor: KernelZeroDivisionError); on floats true division for the
    floor quotient, the same remainder function otherwise."""
    def oracle(a, b):
        if a.dtype.kind in "iu":
            if (b == 0).any():
                raise ExpectError(fk.KernelZeroDivisionError)
            return fn(a, b)
        return np.divide(a, b) if fn is np.floor_divide else fn(a, b)
    return oracle


def _pow(a, b):
    if a.dtype.kind in "iu":
        if (b < 0).any():
            raise ExpectError(fk.ParamsError)
        return np.power(a, b)
    return np.power(a, b)


ORACLES[fk.OpKind.ADD] = Oracle(binary(np.add, np.logical_or))
ORACLES[fk.OpKind.SUB] = Oracle(binary(np.subtract))
ORACLES[fk.OpKind.MUL] = Oracle(binary(np.multiply, np.logical_and))
ORACLES[fk.OpKind.DIV] = Oracle(binary(_int_division(np.floor_divide)))
ORACLES[fk.OpKind.REM] = Oracle(binary(_int_division(np.remainder)))
ORACLES[fk.OpKind.FMOD] = Oracle(binary(_int_division(np.fmod)))
ORACLES[fk.OpKind.TRUNC_DIV] = Oracle(binary(_int_division(trunc_divide)))
ORACLES[fk.OpKind.MAXIMUM] = Oracle(binary(np.maximum, np.logical_or))
ORACLES[fk.OpKind.MINIMUM] = Oracle(binary(np.minimum, np.logical_and))
ORACLES[fk.OpKind.POW] = Oracle(binary(_pow), "transcendental")

for _op, _fn in ((fk.OpKind.EQ, np.equal), (fk.OpKind.NE, np.not_equal), (fk.OpKind.LT, np.less),
                 (fk.OpKind.LE, np.less_equal), (fk.OpKind.GT, np.greater),
                 (fk.OpKind.GE, np.greater_equal)):
    ORACLES[_op] = Oracle((lambda f: lambda inputs, params, out_dtype, out_shape: (
        need_params(params, "none"),
        to(f(*[up(x) for x in broadcast_inputs(inputs, out_shape)]), out_dtype))[1])(_fn))


@register([fk.OpKind.WHERE])
def _where(inputs, params, out_dtype, out_shape):
    need_params(params, "none")
    cond, a, b = broadcast_inputs(inputs, out_shape)
    return to(np.where(cond.astype(bool), a, b), out_dtype)


@register([fk.OpKind.AFFINE])
def _affine(inputs, params, out_dtype, out_shape):
    """x*mul + add, each step rounded in the compute type (mul and add rounded to it first)."""
    need_params(params, "affine")
    (x,) = broadcast_inputs(inputs, out_shape)
    if not D(out_dtype).is_float:
        raise Skip("AFFINE is registered for floats only")
    f = params.fields()
    ct = compute_dtype(out_dtype)
    with np.errstate(all="ignore"):
        return to(up(x).astype(ct) * ct.type(f["mul"]) + ct.type(f["add"]), out_dtype)


def _saturated_bound(value, dtype, rounding):
    info = np.iinfo(D(dtype).numpy) if D(dtype) != D.BOOL else None
    lo, hi = (0, 1) if info is None else (int(info.min), int(info.max))
    v = rounding(value)
    return lo if v <= lo else hi if v >= hi else int(v)


@register([fk.OpKind.CLAMP])
def _clamp(inputs, params, out_dtype, out_shape):
    """min(max(x, lo), hi), NaN kept; float bounds rounded to the compute type, integer bounds
    ceil(min) / floor(max) saturated to the dtype's range."""
    need_params(params, "clamp")
    (x,) = broadcast_inputs(inputs, out_shape)
    f = params.fields()
    if not D(out_dtype).is_float:
        lo = _saturated_bound(f["min"], out_dtype, math.ceil)
        hi = _saturated_bound(f["max"], out_dtype, math.floor)
        return to(np.minimum(np.maximum(x.astype(object), lo), hi).astype(np.int64), out_dtype) \
            if x.size else x.astype(D(out_dtype).numpy)
    ct = compute_dtype(out_dtype)
    return to(np.minimum(np.maximum(up(x), ct.type(f["min"])), ct.type(f["max"])), out_dtype)


@register([fk.OpKind.POWI], kind="transcendental")
def _powi(inputs, params, out_dtype, out_shape):
    """Floats: pow in F64 rounded once (through F32 for F16/BF16); integers wrap, and a negative
    exponent is a ParamsError."""
    need_params(params, "powi")
    (x,) = broadcast_inputs(inputs, out_shape)
    e = params.fields()["exp"]
    if not D(out_dtype).is_float:
        if e < 0:
            raise ExpectError(fk.ParamsError)
        with np.errstate(all="ignore"):
            return np.power(x, np.asarray(e, dtype=x.dtype)).astype(D(out_dtype).numpy)
    with np.errstate(all="ignore"):
        r = np.power(up(x).astype(np.float64), float(e))
        if D(out_dtype) in HALF:
            r = r.astype(np.float32)
        return to(r, out_dtype)


# ---- activation backward ------------------------------------------------------------------------
# f'(x) as (value, M) where M is the sum of the magnitudes of its terms, the scale the claims of the
# activation backward ops bound their error by (cpu/binary_kernels.h.in); x in its own dtype (long
# double for the tight tests).  The limits at x = +-inf are the kernels' (0, or 1 at +inf for SiLU
# and the GELUs): a term x * (something -> 0) is 0 there.
def _sigmoid_prime(x):
    t = np.exp(-np.abs(x))
    return t / ((1 + t) * (1 + t))


def _no_inf_product(x, term):
    return np.where(np.isinf(x), np.zeros_like(term), term)


def _grad_terms(op, x):
    """(first term, second term) of f'(x), f' = their sum."""
    with np.errstate(all="ignore"):
        if op == fk.OpKind.SIGMOID_BACKWARD:
            return _sigmoid_prime(x), np.zeros_like(x)
        if op == fk.OpKind.TANH_BACKWARD:
            t = np.exp(-2 * np.abs(x))
            return 4 * t / ((1 + t) * (1 + t)), np.zeros_like(x)
        if op == fk.OpKind.SILU_BACKWARD:
            return sigmoid(x), _no_inf_product(x, x * _sigmoid_prime(x))
        if op == fk.OpKind.GELU_BACKWARD:
            c1 = 2 * np.sqrt(x.dtype.type(2) / x.dtype.type(np.pi))
            c3 = c1 * x.dtype.type(0.044715)
            w = c1 * x + c3 * x * x * x
            return sigmoid(w), _no_inf_product(x, x * _sigmoid_prime(w) * (c1 + 3 * c3 * x * x))
        if op == fk.OpKind.GELU_ERF_BACKWARD:
            cdf = 0.5 * erfc(-x.astype(np.float64) / math.sqrt(2.0)).astype(x.dtype)
            pdf = np.exp(-x * x / 2) / np.sqrt(2 * x.dtype.type(np.pi))
            return cdf, _no_inf_product(x, x * pdf)
    raise KeyError(op)


ACTIVATION_BACKWARD = (fk.OpKind.SIGMOID_BACKWARD, fk.OpKind.TANH_BACKWARD, fk.OpKind.SILU_BACKWARD,
                       fk.OpKind.GELU_BACKWARD, fk.OpKind.GELU_ERF_BACKWARD)


def activation_grad(op, x, dy, exp=None, overflow_at=None):
    """(dx, |dy| M(x)) of an activation backward op (POWI_BACKWARD with its exp), in x's dtype;
    RELU_BACKWARD is exact (M = |dy|).  POWI_BACKWARD forms exp * x**(exp - 1) first (PyTorch's
    order): past `overflow_at` (the compute dtype's largest value) that factor is inf."""
    with np.errstate(all="ignore"):
        if op == fk.OpKind.RELU_BACKWARD:
            return np.where(x <= 0, np.zeros_like(dy), dy), np.abs(dy)
        if op == fk.OpKind.POWI_BACKWARD:
            if exp == 0:
                return np.zeros(np.broadcast_shapes(x.shape, dy.shape), x.dtype), np.zeros_like(dy)
            d = exp * np.power(x, x.dtype.type(exp - 1))
            if overflow_at is not None:
                d = np.where(np.abs(d) > overflow_at, np.copysign(np.inf, d), d)
            return dy * d, np.abs(dy) * np.abs(d)
        a, b = _grad_terms(op, x)
        return dy * (a + b), np.abs(dy) * (np.abs(a) + np.abs(b))


def infinite_dy_meets_underflow(op, x, dy, compute):
    """Where an infinite dy meets a derivative that is 0 in the compute dtype or nearly so: inf * 0
    (NaN) or inf * tiny (inf) is then decided by the last rounding of f', a convention."""
    if op == fk.OpKind.RELU_BACKWARD:
        return np.zeros(np.broadcast_shapes(x.shape, dy.shape), bool)
    one = np.ones_like(x)
    with np.errstate(all="ignore"):
        _, m = activation_grad(op, x, one, exp=2)
    tiny = np.finfo(compute).tiny * 2 ** 30
    return np.isinf(dy) & (np.abs(m) < tiny) & ~np.isnan(x)


def activation_backward(op):
    """The oracle of an activation backward op: dy * f'(x) in F64 as an Accumulated whose magnitude
    is |dy| (M(x) + tiny) (tiny: the claims' absolute part, a subnormal exp inside f')."""
    family = "powi" if op == fk.OpKind.POWI_BACKWARD else "none"

    def oracle(inputs, params, out_dtype, out_shape):
        need_params(params, family)
        x, dy = broadcast_inputs(inputs, out_shape)
        if not D(out_dtype).is_float:
            raise Skip("float ops only")
        compute = compute_dtype(out_dtype)
        xw, gw = up(x).astype(np.float64), up(dy).astype(np.float64)
        if infinite_dy_meets_underflow(op, xw, gw, compute).any():
            raise Skip("an infinite dy meets a derivative that underflows")
        exp = params.fields()["exp"] if family == "powi" else None
        values, magnitude = activation_grad(op, xw, gw, exp, overflow_at=np.finfo(compute).max)
        tiny = 1e-300 if compute == np.float64 else 1e-35
        with np.errstate(all="ignore"):
            magnitude = magnitude + np.abs(gw) * tiny
        terms = 600 if compute == np.float64 and op in (fk.OpKind.GELU_BACKWARD, fk.OpKind.GELU_ERF_BACKWARD) else 4
        if D(out_dtype) in HALF:
            values = values.astype(np.float32)
        return Accumulated(to(values, out_dtype), magnitude, terms)
    return oracle


for _op in ACTIVATION_BACKWARD + (fk.OpKind.RELU_BACKWARD, fk.OpKind.POWI_BACKWARD):
    ORACLES[_op] = Oracle(activation_backward(_op), "accumulate")


# ---- reductions ----------------------------------------------------------------------------------
def reduce_axes(x, params):
    need_params(params, "none", "reduce")
    fields = params.fields() if params is not None and params.kind == "reduce" else {}
    dims = fields.get("dims", ())
    if not dims:
        return tuple(range(x.ndim)), bool(fields.get("keepdim", False))
    axes = []
    for d in dims:
        n = d + x.ndim if d < 0 else d
        if not 0 <= n < x.ndim:
            raise ExpectError(fk.ParamsError)
        axes.append(n)
    return tuple(sorted(axes)), bool(fields.get("keepdim", False))


def select_last(params):
    """params.reduce's select_last_index (False without params)."""
    return bool(params is not None and params.kind == "reduce" and params.fields()["select_last_index"])


def arg_extremum(flat, name, last):
    """np.argmax / np.argmin over the last axis of flat; with last, the last such index (ONNX's
    select_last_index): n - 1 - the first index in the reversed row (so the last NaN if any)."""
    find = np.argmax if name == "argmax" else np.argmin
    if not last:
        return find(flat, axis=-1)
    return flat.shape[-1] - 1 - find(flat[..., ::-1], axis=-1)


def reduction(name):
    def oracle(inputs, params, out_dtype, out_shape):
        (x,) = inputs
        axes, keepdim = reduce_axes(x, params)
        if select_last(params) and name not in ("argmax", "argmin"):
            raise ExpectError(fk.ParamsError)
        n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        if n == 0 and name in ("max", "min", "argmax", "argmin"):
            raise ExpectError(fk.ShapeError)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)      # the mean of an empty slice
            if name in ("argmax", "argmin"):
                moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
                flat = up(moved).reshape(moved.shape[:x.ndim - len(axes)] + (n,))
                if flat.dtype == np.bool_:
                    flat = flat.astype(np.uint8)
                r = arg_extremum(flat, name, select_last(params))
                if keepdim:
                    r = r.reshape(tuple(1 if d in axes else s for d, s in enumerate(x.shape)))
                return r.astype(np.int64)
            if x.dtype == np.bool_ and name in ("max", "min"):
                r = (np.any if name == "max" else np.all)(x, axis=axes, keepdims=keepdim)
                return r
            if name in ("sum", "prod", "mean"):
                acc = np.float64 if x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16 else np.int64
                if name == "mean":
                    acc = np.float64
                r = getattr(np, name)(x.astype(acc), axis=axes, keepdims=keepdim)
                if name == "mean" and n == 0:
                    r = np.full(r.shape, np.nan)
            else:
                r = getattr(np, name)(up(x), axis=axes, keepdims=keepdim)
        return to(r, out_dtype)
    return oracle


for _op in (fk.OpKind.SUM, fk.OpKind.MEAN, fk.OpKind.PROD):
    ORACLES[_op] = Oracle(reduction(_op.name.lower()), "accumulate", strict=False)
for _op in (fk.OpKind.MAX, fk.OpKind.MIN, fk.OpKind.ARGMAX, fk.OpKind.ARGMIN):
    ORACLES[_op] = Oracle(reduction(_op.name.lower()), "exact", strict=False)


# ---- matmul, softmax, norms -----------------------------------------------------------------------
def grouped_batch(a, b):
    """b with each batch axis where a's extent is a multiple g > 1 of b's (b's > 1) repeated g times
    per index (index i reads b's i / g: MATMUL's grouped, GQA, broadcasting)."""
    n = min(a.ndim, b.ndim) - 2
    for axis in range(1, n + 1):
        ea, eb = a.shape[-2 - axis], b.shape[-2 - axis]
        if eb > 1 and ea != eb and ea % eb == 0:
            b = np.repeat(b, ea // eb, axis=b.ndim - 2 - axis)
    return b


def matmul_reference(a, b):
    """a @ b exactly for integers (in int64, wrapping as the kernels do) and in float64 for floats;
    batch dims broadcast, grouped ones too (grouped_batch)."""
    a, b = np.asarray(a), np.asarray(b)
    b = grouped_batch(a, b)
    if a.dtype.kind in "iub":
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def softmax_last_dim(x, log=False):
    """(log-)softmax over the last axis, computed in x's own dtype (float64 or long double)."""
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True) if x.shape[-1] else x[..., :0]
        e = np.exp(x - m)
        s = np.sum(e, axis=-1, keepdims=True)
        return (x - m) - np.log(s) if log else e / s


def rms_norm(x, eps, w=None, b=None):
    """x / sqrt(mean(x^2) + eps) over the last axis, then * w (+ b), in x's own dtype."""
    with np.errstate(invalid="ignore", divide="ignore"):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        if w is not None:
            y = y * w
        return y if b is None else y + b


def layer_norm(x, eps, w=None, b=None):
    """(x - mean) / sqrt(var + eps) over the last axis, then * w + b, in x's own dtype."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.mean(x, axis=-1, keepdims=True)
        y = (x - mean) / np.sqrt(np.mean((x - mean) ** 2, axis=-1, keepdims=True) + eps)
        if w is not None:
            y = y * w
        return y if b is None else y + b


def layer_norm_error_scale(x, eps, w, b, with_std=True):
    """The scale a LAYER_NORM claim bounds its error by: |w| (|x| + |mean| (+ std)) rstd + |b| over
    the last axis, in x's own dtype.  std covers an F32 kernel's corrected mean, whose error is
    relative to the spread of the row, where x and the mean are both near 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
        spread = np.abs(x) + np.abs(mean) + (np.sqrt(var) if with_std else 0)
        return np.abs(w) * spread / np.sqrt(var + eps) + np.abs(b)


@register([fk.OpKind.MATMUL], kind="accumulate", strict=False)
def _matmul(inputs, params, out_dtype, out_shape):
    if len(inputs) != 2:
        raise Skip("DEFERRED row count operand")
    a, b = inputs
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ExpectError(fk.ShapeError)
    rows, scale = a.shape[-2], 1.0
    if params is not None:
        need_params(params, "matmul", "none")
        if params.kind == "matmul":
            f = params.fields()
            if (f["m"], f["n"], f["k"]) != (a.shape[-2], b.shape[-1], a.shape[-1]):
                raise Skip("params disagree with the operand shapes")
            # C = scale_a * scale_b * (A @ B) for FP8 inputs; other dtypes refuse scales but 1.0
            if (f["scale_a"], f["scale_b"]) != (1.0, 1.0) and not (D.parse(a.dtype).is_float8 or D.parse(b.dtype).is_float8):
                raise ExpectError(fk.ParamsError)
            scale = f["scale_a"] * f["scale_b"]
            mc = f["m_compute"]
            if mc.kind == fk.MatmulM.DEFERRED_KIND:
                raise Skip("deferred")
            if mc.kind == fk.MatmulM.ROWS_KIND:
                rows = mc.value
    r = matmul_reference(a, b) * scale if scale != 1.0 else matmul_reference(a, b)
    if r.shape != tuple(out_shape):
        if params is None or params.kind != "matmul":   # the batch is A's and B's, as they broadcast
            raise ExpectError(fk.ShapeError)
        try:                              # a batch broadcast that only params.matmul's batch spells out
            r = np.broadcast_to(r, out_shape).copy()
        except ValueError:
            raise ExpectError(fk.ShapeError) from None
    r[..., rows:, :] = 0
    return to(r, out_dtype)


def last_dim(fn):
    def oracle(inputs, params, out_dtype, out_shape):
        x = inputs[0]
        if not D(out_dtype).is_float:
            raise Skip("float ops only")
        if x.size == 0:
            return np.empty(x.shape, dtype=D(out_dtype).numpy)
        with np.errstate(all="ignore"):
            return to(fn(up(x).astype(np.float64), inputs[1:], params), out_dtype)
    return oracle


def _softmax(x, extra, params):
    if extra:
        raise Skip("extra operands")
    need_params(params, "none", "softmax_last_dim")
    return softmax_last_dim(x)


def _log_softmax(x, extra, params):
    if extra:
        raise Skip("extra operands")
    need_params(params, "none", "softmax_last_dim")
    return softmax_last_dim(x, log=True)


def _norm_eps(params):
    need_params(params, "norm_last_dim")
    return params.fields()["eps"]


def _f64_operands(extra):
    return [up(v).astype(np.float64) for v in extra]


def _rms_norm(x, extra, params):
    return rms_norm(x, _norm_eps(params), *_f64_operands(extra[:2]))


def _layer_norm(x, extra, params):
    return layer_norm(x, _norm_eps(params), *_f64_operands(extra[:2]))


ORACLES[fk.OpKind.SOFTMAX_LAST_DIM] = Oracle(last_dim(_softmax), "accumulate", strict=False)
ORACLES[fk.OpKind.LOG_SOFTMAX_LAST_DIM] = Oracle(last_dim(_log_softmax), "accumulate", strict=False)
def softmax_backward_last_dim(y, dy, log=False):
    """(dx, S) of SOFTMAX_LAST_DIM_BACKWARD (LOG_: log) over the last axis, in y's own dtype: dx =
    y (dy - sum(dy y)) with S = |y| (|dy| + sum|dy y|), or dx = dy - exp(y) sum(dy) with S = |dy| +
    exp(y) sum|dy| (the scales the claims bound the error by)."""
    with np.errstate(all="ignore"):
        if log:
            e = np.exp(y)
            s = np.sum(dy, axis=-1, keepdims=True)
            return dy - e * s, np.abs(dy) + e * np.sum(np.abs(dy), axis=-1, keepdims=True)
        p = dy * y
        s = np.sum(p, axis=-1, keepdims=True)
        return y * (dy - s), np.abs(y) * (np.abs(dy) + np.sum(np.abs(p), axis=-1, keepdims=True))


def softmax_backward(log):
    def oracle(inputs, params, out_dtype, out_shape):
        need_params(params, "none", "softmax_last_dim")
        y, dy = inputs
        if not D(out_dtype).is_float:
            raise Skip("float ops only")
        if y.ndim < 1 or y.shape != dy.shape or tuple(out_shape) != y.shape:
            raise ExpectError(fk.ShapeError)
        if y.size == 0:
            return np.empty(y.shape, dtype=D(out_dtype).numpy)
        values, scale = softmax_backward_last_dim(up(y).astype(np.float64), up(dy).astype(np.float64), log)
        return Accumulated(to(values, out_dtype), scale, y.shape[-1] + 2)
    return oracle


ORACLES[fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD] = Oracle(softmax_backward(False), "accumulate", strict=False)
ORACLES[fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD] = Oracle(softmax_backward(True), "accumulate", strict=False)
ORACLES[fk.OpKind.RMS_NORM] = Oracle(last_dim(_rms_norm), "accumulate", strict=False)
ORACLES[fk.OpKind.LAYER_NORM] = Oracle(last_dim(_layer_norm), "accumulate", strict=False)


def norm_backward(op, x, w, dy, eps):
    """RMS_NORM_BACKWARD / LAYER_NORM_BACKWARD in the dtype of x (long double in the tests):
    (outputs, scales), each scale the magnitude sum the NORM_BACKWARD claims bound the error by
    (fuel_kernel/cpu/norm_backward_kernels.h.in).  Rows are x's last dim; dw, db sum over rows."""
    rows_axes = tuple(range(x.ndim - 1))
    with np.errstate(all="ignore"):
        g = w * dy
        if op == fk.OpKind.RMS_NORM_BACKWARD:
            r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
            c = r ** 3 * np.mean(g * x, axis=-1, keepdims=True)
            dx = r * g - x * c
            dx_scale = r * np.abs(g) + np.abs(x) * r ** 3 * np.mean(np.abs(g * x), axis=-1, keepdims=True)
            t = dy * x * r
            return (dx, t.sum(axis=rows_axes)), (dx_scale, np.abs(t).sum(axis=rows_axes))
        mu = np.mean(x, axis=-1, keepdims=True)
        r = 1 / np.sqrt(np.mean((x - mu) ** 2, axis=-1, keepdims=True) + eps)
        xh = (x - mu) * r
        mg = np.mean(g, axis=-1, keepdims=True)
        mgx = np.mean(g * xh, axis=-1, keepdims=True)
        dx = r * ((g - mg) - xh * mgx)
        dx_scale = r * (np.abs(g) + np.mean(np.abs(g), axis=-1, keepdims=True)
                        + np.abs(xh) * np.mean(np.abs(g * xh), axis=-1, keepdims=True))
        t = dy * xh
        return ((dx, t.sum(axis=rows_axes), dy.sum(axis=rows_axes)),
                (dx_scale, np.abs(t).sum(axis=rows_axes), np.abs(dy).sum(axis=rows_axes)))


def _norm_backward_oracle(op):
    def oracle(inputs, params, out_dtype, out_shape):
        """The tuple of outputs, each rounded to out_dtype."""
        if not D(out_dtype).is_float:
            raise Skip("float ops only")
        x, w, dy = (up(v).astype(np.float64) for v in (inputs[0], inputs[1], inputs[-1]))
        with np.errstate(all="ignore"):
            outputs, _ = norm_backward(op, x, w, dy, _norm_eps(params))
        return tuple(to(o, out_dtype) for o in outputs)
    return oracle


for _op in (fk.OpKind.RMS_NORM_BACKWARD, fk.OpKind.LAYER_NORM_BACKWARD):
    ORACLES[_op] = Oracle(_norm_backward_oracle(_op), "accumulate", strict=False)


def cross_entropy(logits, targets, ignore_index=-100, smoothing=0.0):
    """FUSED_SOFTMAX_CROSS_ENTROPY in the dtype of logits (long double in the tests): (loss, lse)
    per row, as fuel_kernel/cpu/loss_kernels.h.in defines them (torch's reduction="none")."""
    x = np.asarray(logits)
    n, c = x.shape
    with np.errstate(all="ignore"):
        m = np.max(x, axis=1, keepdims=True) if c else np.full((n, 1), -np.inf, x.dtype)
        finite_m = np.where(np.isinf(m), 0, m)
        lse = (finite_m + np.log(np.sum(np.exp(x - finite_m), axis=1, keepdims=True)))[:, 0] if c else m[:, 0]
        lse = np.where(np.isinf(m[:, 0]) & ~np.isnan(lse), m[:, 0], lse)
        lse = np.where(np.isnan(x).any(axis=1), np.nan, lse) if c else lse
        t = np.asarray(targets).astype(np.int64)
        keep = t != ignore_index
        x_t = np.where(keep, x[np.arange(n), np.where(keep, t, 0)] if c else 0, 0)
        loss = (1 - smoothing) * (lse - x_t)
        if smoothing:
            loss = loss + smoothing * (lse - (np.mean(x, axis=1) if c else 0))
        return np.where(keep, loss, 0), lse


def cross_entropy_backward(logits, targets, lse, dloss, ignore_index=-100, smoothing=0.0, compute=None):
    """FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD: dloss_n (exp(x - lse_n) - q), 0 on ignored rows.
    `compute` (a NumPy float type) is the precision exp runs in, as the kernel's: where x - lse_n
    overflows its exp there (past 88.7 in F32, with an lse that is not x's), a zero dloss_n gives
    NaN (0 * inf) as the kernel does, where an F64 exp would give 0."""
    x = np.asarray(logits)
    n, c = x.shape
    t = np.asarray(targets).astype(np.int64)
    keep = t != ignore_index
    q = np.full(x.shape, smoothing / max(c, 1), dtype=x.dtype)
    rows = np.nonzero(keep)[0]
    q[rows, t[rows]] += 1 - smoothing
    with np.errstate(all="ignore"):
        z = x - lse[:, None]
        e = np.exp(z if compute is None else z.astype(compute)).astype(z.dtype)
        g = dloss[:, None] * (e - q)
    return np.where(keep[:, None], g, 0)


def _cross_entropy_params(params):
    need_params(params, "none", "cross_entropy")
    if params is None or params.kind == "none":
        return -100, 0.0
    f = params.fields()
    return f["ignore_index"], f["label_smoothing"]


@register([fk.OpKind.FUSED_SOFTMAX_CROSS_ENTROPY], kind="accumulate", strict=False)
def _cross_entropy(inputs, params, out_dtype, out_shape):
    """(loss, lse), rounded to the loss dtype and the lse's (F32, or F64 for F64 logits)."""
    x = up(inputs[0]).astype(np.float64)
    loss, lse = cross_entropy(x, inputs[1], *_cross_entropy_params(params))
    return to(loss, out_dtype), to(lse, D.F64 if D(out_dtype) == D.F64 else D.F32)


@register([fk.OpKind.FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD], kind="accumulate", strict=False)
def _cross_entropy_backward(inputs, params, out_dtype, out_shape):
    if not D(out_dtype).is_float:
        raise Skip("float ops only")
    x, lse, dloss = (up(v).astype(np.float64) for v in (inputs[0], inputs[2], inputs[3]))
    t = np.asarray(inputs[1]).astype(np.int64)
    ignore, smoothing = _cross_entropy_params(params)
    if ((t != ignore) & ((t < 0) | (t >= x.shape[1]))).any():
        raise ExpectError(fk.KernelIndexError)
    compute = np.float64 if D(out_dtype) == D.F64 else np.float32       # F16/BF16 compute in F32
    return to(cross_entropy_backward(x, t, lse, dloss, ignore, smoothing, compute), out_dtype)


# ---- shared by the movement, indexing, attention and conv oracles ------------------------------
@dataclass
class Accumulated:
    """What an oracle of a summing op returns: the expected values (in the output dtype) and, per
    element, the magnitude of what was summed (sum of |terms|) and how many roundings can pile up
    (`terms`), in the dtype the kernel rounds in (`compute`; None: compute_dtype of the output).
    compare_accumulated() allows the accumulate class's atol (tolerance("accumulate", compute,
    terms)) times that magnitude, plus the final rounding into the output dtype."""
    values: np.ndarray
    magnitude: object
    terms: int
    compute: object = None


def expect_shape(out_shape, shape):
    """The kernels take only the output shape their operands imply."""
    if tuple(out_shape) != tuple(shape):
        raise ExpectError(fk.ShapeError)


def kernel_axis(axis, ndim):
    """An axis as the movement kernels normalize it: negative counts from the end, out of range
    (or any axis of a 0-d operand) is a ParamsError."""
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ExpectError(fk.ParamsError)
    return axis % ndim


def kernel_dims(dims, ndim):
    axes = [kernel_axis(d, ndim) for d in dims]
    if len(set(axes)) != len(axes):             # -1 and ndim - 1 name the same dim
        raise ExpectError(fk.ParamsError)
    return axes


def fill_value(value, dtype):
    """A params scalar (PAD's value, MASKED_FILL's) as one element of `dtype`, converted like CAST."""
    return cast_values(np.asarray(float(value)), D.parse(dtype))


def f64(x):
    return up(x).astype(np.float64)


# ---- data movement: SLICE, CONCAT, FLIP, ROLL, TRIU, TRIL, PAD, MASKED_FILL (exact) ---------------
@register([fk.OpKind.SLICE])
def _slice(inputs, params, out_dtype, out_shape):
    """Python slice rules on every dim (start, stop and step may be anything but a zero step)."""
    need_params(params, "slice")
    (x,) = inputs
    f = params.fields()
    if len(f["start"]) != x.ndim:
        raise ExpectError(fk.ParamsError)
    r = x[tuple(slice(a, b, s) for a, b, s in zip(f["start"], f["stop"], f["step"]))]
    expect_shape(out_shape, r.shape)
    return r


@register([fk.OpKind.CONCAT])
def _concat(inputs, params, out_dtype, out_shape):
    need_params(params, "concat")
    axis = kernel_axis(params.fields()["axis"], inputs[0].ndim)
    first = inputs[0].shape
    for x in inputs:
        if x.ndim != len(first) or any(a != b for d, (a, b) in enumerate(zip(x.shape, first)) if d != axis):
            raise ExpectError(fk.ShapeError)
    r = np.concatenate(inputs, axis=axis)
    expect_shape(out_shape, r.shape)
    return r


@register([fk.OpKind.FLIP])
def _flip(inputs, params, out_dtype, out_shape):
    need_params(params, "flip")
    (x,) = inputs
    expect_shape(out_shape, x.shape)
    return np.flip(x, kernel_dims(params.fields()["dims"], x.ndim))


@register([fk.OpKind.ROLL])
def _roll(inputs, params, out_dtype, out_shape):
    """out[(i + shift) mod n] = x[i] on each listed dim; at least one dim."""
    need_params(params, "roll")
    (x,) = inputs
    f = params.fields()
    expect_shape(out_shape, x.shape)
    if not f["dims"]:
        raise ExpectError(fk.ParamsError)
    return np.roll(x, f["shifts"], kernel_dims(f["dims"], x.ndim))


def triangular(upper):
    def oracle(inputs, params, out_dtype, out_shape):
        """The last two dims are the matrix: triu keeps j - i >= diagonal, tril j - i <= diagonal."""
        need_params(params, "none", "triangular")
        (x,) = inputs
        diagonal = params.fields()["diagonal"] if params_family(params) == "triangular" else 0
        expect_shape(out_shape, x.shape)
        if x.ndim < 2:
            raise ExpectError(fk.ShapeError)
        rows, cols = x.shape[-2:]
        offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
        keep = offset >= diagonal if upper else offset <= diagonal
        return np.where(keep, x, np.zeros((), x.dtype))
    return oracle


ORACLES[fk.OpKind.TRIU] = Oracle(triangular(upper=True))
ORACLES[fk.OpKind.TRIL] = Oracle(triangular(upper=False))


@register([fk.OpKind.PAD])
def _pad(inputs, params, out_dtype, out_shape):
    """Widths for the last len(before) dims; reflect (no edge repeat) needs widths below the
    extent, replicate a non-empty dim, constant converts its value like CAST."""
    need_params(params, "pad")
    (x,) = inputs
    f = params.fields()
    k = len(f["before"])
    if k > x.ndim:
        raise ExpectError(fk.ParamsError)
    widths = [(0, 0)] * (x.ndim - k) + list(zip(f["before"], f["after"]))
    for n, (before, after) in zip(x.shape, widths):
        if (before or after) and (f["mode"] == "reflect" and max(before, after) >= n
                                  or f["mode"] == "replicate" and n == 0):
            raise ExpectError(fk.ParamsError)
    expect_shape(out_shape, tuple(n + b + a for n, (b, a) in zip(x.shape, widths)))
    if x.ndim == 0:
        return x
    if f["mode"] == "constant":
        return np.pad(x, widths, mode="constant", constant_values=fill_value(f["value"], x.dtype))
    return np.pad(x, widths, mode="reflect" if f["mode"] == "reflect" else "edge")


@register([fk.OpKind.MASKED_FILL])
def _masked_fill(inputs, params, out_dtype, out_shape):
    """out = mask ? value : x, x and the BOOL mask broadcast to the output's shape."""
    need_params(params, "masked_fill")
    x, mask = broadcast_inputs(inputs, out_shape)
    return np.where(mask, fill_value(params.fields()["value"], x.dtype), x)


# ---- KV-cache writes: WRITE_SLICE, WRITE_SLICE_ROTATING (exact, in place) -----------------------
def write_slice_reference(src, dst, start, axis=0, position=None, rotating=False):
    """dst (a copy) with src written at start, the position added on `axis`; rotating: the rows of
    src on `axis` land at (start + position + i) mod dst's extent there.  Refusals as the kernels'."""
    src, out = np.asarray(src), np.array(dst, copy=True)
    if src.ndim != out.ndim:
        raise ExpectError(fk.ShapeError)
    if len(start) != out.ndim:
        raise ExpectError(fk.ParamsError)
    start = list(start)
    if rotating or position is not None:
        axis = kernel_axis(axis, out.ndim)
    if position is not None:
        if np.asarray(position).size != 1:
            raise ExpectError(fk.ShapeError)
        start[axis] += int(np.asarray(position).reshape(-1)[0])
        if not -2 ** 63 <= start[axis] < 2 ** 63:
            raise ExpectError(fk.KernelIndexError)
    index = []
    for d, (s, n, cap) in enumerate(zip(start, src.shape, out.shape)):
        if rotating and d == axis:
            if n > cap:
                raise ExpectError(fk.ShapeError)
            index.append((s % cap + np.arange(n)) % cap if cap else np.arange(0))
        elif s < 0 or s + n > cap:
            raise ExpectError(fk.KernelIndexError)
        else:
            index.append(np.arange(s, s + n))
    out[np.ix_(*index)] = src
    return out


def _write_slice_oracle(rotating):
    def oracle(inputs, params, out_dtype, out_shape):
        if params_family(params) != "write_slice":
            raise ExpectError(fk.ParamsError)
        f = params.fields()
        src, position, dst = inputs[0], inputs[1] if len(inputs) == 3 else None, inputs[-1]
        return write_slice_reference(src, dst, f["start"], f["axis"], position, rotating)
    return oracle


ORACLES[fk.OpKind.WRITE_SLICE] = Oracle(_write_slice_oracle(False), destination=True)
ORACLES[fk.OpKind.WRITE_SLICE_ROTATING] = Oracle(_write_slice_oracle(True), destination=True)


# ---- indexing: INDEX_SELECT, GATHER (exact), SCATTER_ADD, INDEX_ADD (accumulate) -----------------
def checked_indices(idx, extent):
    """Indices must lie in [0, extent): no negative wrap-around (index_kernels.h.in)."""
    idx = np.asarray(idx).astype(np.int64)
    if ((idx < 0) | (idx >= extent)).any():
        raise ExpectError(fk.KernelIndexError)
    return idx


def add_at(x, index, src):
    """numpy.add.at in x's dtype: a copy of x, then out[index] += src with repeated indices
    adding up (in index order); BOOL ORs."""
    out = np.array(x, copy=True)
    with np.errstate(all="ignore"):
        (np.logical_or if out.dtype == np.bool_ else np.add).at(out, index, src)
    return out


def indexed_sum(x, index, src, out_dtype):
    """add_at as the kernels promise it: integers wrap and BOOL ORs in the dtype (exact); floats are
    summed in F64 and rounded once, against an error bound of one rounding in the output dtype
    per add (the kernels round every add, F16/BF16 through F32)."""
    if not D(out_dtype).is_float:
        return add_at(x, index, src)
    values = add_at(f64(x), index, f64(src))
    magnitude = add_at(np.abs(f64(x)), index, np.abs(f64(src)))
    adds = add_at(np.zeros(x.shape, np.int64), index, np.ones(np.shape(src), np.int64))
    return Accumulated(to(values, out_dtype), magnitude, 1 + int(adds.max(initial=0)), compute=out_dtype)


@register([fk.OpKind.INDEX_SELECT])
def _index_select(inputs, params, out_dtype, out_shape):
    """take(x, idx, axis) with 1-d idx."""
    need_params(params, "index_select")
    x, idx = inputs
    axis = kernel_axis(params.fields()["axis"], x.ndim)
    if idx.ndim != 1:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, x.shape[:axis] + idx.shape + x.shape[axis + 1:])
    return np.take(x, checked_indices(idx, x.shape[axis]), axis=axis)


@register([fk.OpKind.GATHER])
def _gather(inputs, params, out_dtype, out_shape):
    """torch.gather: idx has x's rank and at most x's extents off the axis; out[i] = x[i with
    i[axis] = idx[i]]."""
    need_params(params, "gather")
    x, idx = inputs
    axis = kernel_axis(params.fields()["axis"], x.ndim)
    if idx.ndim != x.ndim or any(i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != axis):
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, idx.shape)
    idx = checked_indices(idx, x.shape[axis])
    corner = x[tuple(slice(None) if d == axis else slice(0, i) for d, i in enumerate(idx.shape))]
    return np.take_along_axis(corner, idx, axis=axis)


@register([fk.OpKind.SCATTER_ADD], kind="accumulate")
def _scatter_add(inputs, params, out_dtype, out_shape):
    """torch.scatter_add: out = x, then out[i with i[axis] = idx[i]] += src[i] over idx's shape
    (src at least idx's shape, idx at most x's off the axis)."""
    need_params(params, "scatter")
    x, idx, src = inputs
    axis = kernel_axis(params.fields()["axis"], x.ndim)
    expect_shape(out_shape, x.shape)
    if idx.ndim != x.ndim or src.ndim != x.ndim or any(
            i > s or (d != axis and i > n) for d, (i, s, n) in enumerate(zip(idx.shape, src.shape, x.shape))):
        raise ExpectError(fk.ShapeError)
    target = list(np.indices(idx.shape, sparse=True))
    target[axis] = checked_indices(idx, x.shape[axis])
    return indexed_sum(x, tuple(target), src[tuple(slice(0, i) for i in idx.shape)], out_dtype)


@register([fk.OpKind.INDEX_ADD], kind="accumulate")
def _index_add(inputs, params, out_dtype, out_shape):
    """out = x, then out[.., idx[j], ..] += src[.., j, ..] (params scatter or index_select)."""
    need_params(params, "scatter", "index_select")
    x, idx, src = inputs
    axis = kernel_axis(params.fields()["axis"], x.ndim)
    expect_shape(out_shape, x.shape)
    if idx.ndim != 1 or src.shape != x.shape[:axis] + idx.shape + x.shape[axis + 1:]:
        raise ExpectError(fk.ShapeError)
    index = (slice(None),) * axis + (checked_indices(idx, x.shape[axis]),)
    return indexed_sum(x, index, src, out_dtype)


def scatter_fold(current, value, reduction):
    """One SCATTER step at an index (index_kernels.h.in): none writes value; max and min keep the
    current value unless value is larger (smaller) or is NaN where current is not -- np.maximum's
    NaN propagation, with ties (-0.0 against 0.0 too) keeping what is there; mul multiplies in the
    dtype (integers wrap; F16/BF16 round each product, as NumPy and ml_dtypes do).  BOOL: max ORs,
    min and mul AND."""
    if reduction == "none":
        return value
    if current.dtype == np.bool_:
        return np.bool_(current or value) if reduction == "max" else np.bool_(current and value)
    if reduction == "mul":
        with np.errstate(all="ignore"):
            return (np.array([current]) * np.array([value]))[0]
    number = (lambda v: float(up(v))) if D.parse(current.dtype).is_float else int
    a, b = number(current), number(value)
    keep = (a >= b if reduction == "max" else a <= b) or a != a
    return current if keep else value


def scatter_reference(x, idx, src, axis, reduction):
    """SCATTER as a plain loop: a copy of x, then every index of idx in row-major order applies
    scatter_fold at out[i with i[axis] = idx[i]] with src[i]."""
    out = np.array(x, copy=True)
    for i in np.ndindex(*idx.shape):
        target = list(i)
        target[axis] = int(idx[i])
        target = tuple(target)
        out[target] = scatter_fold(out[target], src[i], reduction)
    return out


@register([fk.OpKind.SCATTER])
def _scatter(inputs, params, out_dtype, out_shape):
    """ONNX ScatterElements with reduction none / max / min / mul; SCATTER_ADD's shapes."""
    need_params(params, "scatter_reduce")
    x, idx, src = inputs
    f = params.fields()
    axis = kernel_axis(f["axis"], x.ndim)
    expect_shape(out_shape, x.shape)
    if idx.ndim != x.ndim or src.ndim != x.ndim or any(
            i > s or (d != axis and i > n) for d, (i, s, n) in enumerate(zip(idx.shape, src.shape, x.shape))):
        raise ExpectError(fk.ShapeError)
    return scatter_reference(x, checked_indices(idx, x.shape[axis]), src, axis, f["reduction"])


def nonzero_reference(x):
    """(indices (ndim, count), count) of NONZERO: np.nonzero's row-major multi-indices stacked as
    ONNX's NonZero gives them (NaN is nonzero, -0.0 is zero); a 0-d x is one element with no dims.
    The kernel's indices output has room for numel columns: compare its first count columns."""
    x = np.asarray(x)
    flat = up(x).reshape(-1) if x.dtype != np.bool_ else x.reshape(-1)
    where = np.flatnonzero(flat != 0)
    if x.ndim == 0:
        return np.zeros((0, where.size), np.int64), where.size
    return np.array(np.unravel_index(where, x.shape), dtype=np.int64).reshape(x.ndim, -1), where.size


@register([fk.OpKind.NONZERO])
def _nonzero(inputs, params, out_dtype, out_shape):
    need_params(params, "none")
    return nonzero_reference(inputs[0])


# ---- CUMSUM --------------------------------------------------------------------------------------
def running_sum(x, axis, exclusive, reverse, dtype):
    """Prefix sums along axis in `dtype`: exclusive sums the elements before, reverse runs from
    the end."""
    if reverse:
        x = np.flip(x, axis)
    with np.errstate(all="ignore"):
        s = np.cumsum(x, axis=axis, dtype=dtype)
    if exclusive and s.size:
        s = np.roll(s, 1, axis)
        s[(slice(None),) * axis + (0,)] = 0
    return np.flip(s, axis) if reverse else s


@register([fk.OpKind.CUMSUM], kind="accumulate")
def _cumsum(inputs, params, out_dtype, out_shape):
    """Integers wrap in the dtype (exact); floats are summed in F64 and rounded once, against the
    bound of a sequential sum of the axis' length (the kernel adds in the dtype, F16/BF16 in F32)."""
    need_params(params, "cumsum")
    (x,) = inputs
    f = params.fields()
    expect_shape(out_shape, x.shape)
    axis = kernel_axis(f["axis"], x.ndim)
    prefix = lambda v, dtype: running_sum(v, axis, f["exclusive"], f["reverse"], dtype)
    if not D(out_dtype).is_float:
        return prefix(x, x.dtype)
    return Accumulated(to(prefix(f64(x), np.float64), out_dtype), prefix(np.abs(f64(x)), np.float64),
                       max(x.shape[axis], 1))


# ---- CONV2D --------------------------------------------------------------------------------------
def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_reference(x, w, b, stride, padding, dilation, groups):
    """(expected, scale) in float64: scale = sum |x*w| + |b| per output."""
    x = f64(x)
    w = f64(w)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((N, O, OH, OW))
    scale = np.zeros((N, O, OH, OW))
    Og = O // groups
    with np.errstate(all="ignore"):
        for kh in range(KH):
            for kw in range(KW):
                win = xp[:, :, kh * dh: kh * dh + (OH - 1) * sh + 1: sh, kw * dw: kw * dw + (OW - 1) * sw + 1: sw]
                for g in range(groups):
                    xs = win[:, g * Cg:(g + 1) * Cg]
                    ws = w[g * Og:(g + 1) * Og, :, kh, kw]
                    out[:, g * Og:(g + 1) * Og] += np.einsum("nchw,oc->nohw", xs, ws)
                    scale[:, g * Og:(g + 1) * Og] += np.einsum("nchw,oc->nohw", np.abs(xs), np.abs(ws))
        if b is not None:
            b = f64(b)
            out += b[None, :, None, None]
            scale += np.abs(b)[None, :, None, None]
    return out, scale


@register([fk.OpKind.CONV2D], kind="accumulate")
def _conv2d(inputs, params, out_dtype, out_shape):
    """NCHW x, (O, C/groups, KH, KW) w, optional bias (O,); params conv2d or none (1, 0, 1, 1)."""
    need_params(params, "none", "conv2d")
    f = params.fields() if params_family(params) == "conv2d" else {
        "stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    x, w, bias = inputs[0], inputs[1], inputs[2] if len(inputs) == 3 else None
    if x.ndim != 4 or w.ndim != 4 or len(out_shape) != 4:
        raise ExpectError(fk.ShapeError)
    c, o, cg, groups = x.shape[1], w.shape[0], w.shape[1], f["groups"]
    if c % groups or o % groups or cg * groups != c:
        raise ExpectError(fk.ShapeError)
    room = [x.shape[2 + i] + 2 * f["padding"][i] - f["dilation"][i] * (w.shape[2 + i] - 1) - 1 for i in range(2)]
    if min(room) < 0 or 0 in w.shape[2:]:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (x.shape[0], o) + tuple(r // s + 1 for r, s in zip(room, f["stride"])))
    if bias is not None and bias.shape != (o,):
        raise ExpectError(fk.ShapeError)
    if any(f["padding"]) and not np.isfinite(f64(w)).all():
        # the padding's zeros times an infinite weight: NaN in the im2col sibling, which multiplies
        # them, but not in the direct one, which skips the taps outside the input
        raise Skip("infinite weight meets the zero padding")
    values, magnitude = conv2d_reference(x, w, bias, f["stride"], f["padding"], f["dilation"], groups)
    return Accumulated(to(values, out_dtype), magnitude, cg * w.shape[2] * w.shape[3] + 1)


# ---- CONV1D ----------------------------------------------------------------------------------------
def conv1d_reference(x, w, b, stride, padding, dilation, groups):
    """(expected, scale) in float64 by the definition, tap by tap: y[n, o, l] = b[o] + sum over the
    group's channels c and taps k of w[o, c, k] * xpad[n, g*Cg + c, l*stride + k*dilation], xpad
    holding padding (begin, end) zeros before and after x (one int: that many at both ends);
    scale = sum |x*w| + |b| per output."""
    x, w = f64(x), f64(w)
    N, C, L = x.shape
    O, Cg, K = w.shape
    begin, end = pair(padding)
    OL = (L + begin + end - dilation * (K - 1) - 1) // stride + 1
    xp = np.zeros((N, C, L + begin + end))
    xp[:, :, begin:begin + L] = x
    out, scale = np.zeros((N, O, OL)), np.zeros((N, O, OL))
    Og = O // groups
    with np.errstate(all="ignore"):
        for o in range(O):
            g = o // Og
            for c in range(Cg):
                for k in range(K):
                    taps = xp[:, g * Cg + c, k * dilation: k * dilation + (OL - 1) * stride + 1: stride]
                    out[:, o] += w[o, c, k] * taps
                    scale[:, o] += abs(w[o, c, k]) * np.abs(taps)
        if b is not None:
            out += f64(b)[None, :, None]
            scale += np.abs(f64(b))[None, :, None]
    return out, scale


@register([fk.OpKind.CONV1D], kind="accumulate")
def _conv1d(inputs, params, out_dtype, out_shape):
    """x (N, C, L), w (O, C/groups, K), optional bias (O,); params conv1d or none (1, 0, 1, 1)."""
    need_params(params, "none", "conv1d")
    f = params.fields() if params_family(params) == "conv1d" else {"stride": 1, "padding": (0, 0), "dilation": 1,
                                                                     "groups": 1}
    x, w, bias = inputs[0], inputs[1], inputs[2] if len(inputs) == 3 else None
    if x.ndim != 3 or w.ndim != 3 or len(out_shape) != 3:
        raise ExpectError(fk.ShapeError)
    c, o, cg, groups = x.shape[1], w.shape[0], w.shape[1], f["groups"]
    if c % groups or o % groups or cg * groups != c:
        raise ExpectError(fk.ShapeError)
    room = x.shape[2] + sum(f["padding"]) - f["dilation"] * (w.shape[2] - 1) - 1
    if room < 0 or w.shape[2] == 0:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (x.shape[0], o, room // f["stride"] + 1))
    if bias is not None and bias.shape != (o,):
        raise ExpectError(fk.ShapeError)
    if any(f["padding"]) and not np.isfinite(f64(w)).all():
        raise Skip("infinite weight meets the zero padding (as CONV2D: the siblings differ)")
    values, magnitude = conv1d_reference(x, w, bias, f["stride"], f["padding"], f["dilation"], groups)
    return Accumulated(to(values, out_dtype), magnitude, cg * w.shape[2] + 1)


# ---- CONV_TRANSPOSE2D -------------------------------------------------------------------------------
def conv_transpose2d_output_size(input_size, kernel_size, stride, pads_begin, pads_end, dilation, output_padding):
    """(OH, OW) = (H - 1) stride - pads_begin - pads_end + dilation (K - 1) + output_padding + 1 per axis."""
    return tuple((input_size[i] - 1) * pair(stride)[i] - pair(pads_begin)[i] - pair(pads_end)[i]
                 + pair(dilation)[i] * (kernel_size[i] - 1) + pair(output_padding)[i] + 1 for i in range(2))


def conv_transpose2d_reference(x, w, b, stride, pads_begin, pads_end, dilation, output_padding, groups):
    """(expected, scale) in float64 by the definition, as a scatter: every input element x[n, c, h, v]
    times every tap w[c, oc, kh, kw] lands at y[n, g*Og + oc, h*sh - pt + kh*dh, v*sw - pl + kw*dw]
    when that lies inside y (taps landing outside are dropped); scale = sum |x*w| + |b| per output."""
    x, w = f64(x), f64(w)
    (sh, sw), (pt, pl), (dh, dw) = pair(stride), pair(pads_begin), pair(dilation)
    N, C, H, W = x.shape
    _, Og, KH, KW = w.shape
    OH, OW = conv_transpose2d_output_size((H, W), (KH, KW), stride, pads_begin, pads_end, dilation, output_padding)
    Cg = C // groups
    out, scale = np.zeros((N, Og * groups, OH, OW)), np.zeros((N, Og * groups, OH, OW))
    with np.errstate(all="ignore"):
        for c in range(C):
            g = c // Cg
            for kh in range(KH):
                for kw in range(KW):
                    for h in range(H):
                        oh = h * sh - pt + kh * dh
                        if not 0 <= oh < OH:
                            continue
                        for v in range(W):
                            ow = v * sw - pl + kw * dw
                            if not 0 <= ow < OW:
                                continue
                            taps = x[:, c, h, v, None] * w[c, :, kh, kw][None, :]
                            out[:, g * Og:(g + 1) * Og, oh, ow] += taps
                            scale[:, g * Og:(g + 1) * Og, oh, ow] += np.abs(taps)
        if b is not None:
            out += f64(b)[None, :, None, None]
            scale += np.abs(f64(b))[None, :, None, None]
    return out, scale


@register([fk.OpKind.CONV_TRANSPOSE2D], kind="accumulate")
def _conv_transpose2d(inputs, params, out_dtype, out_shape):
    """NCHW x, (C, O/groups, KH, KW) w, optional bias (O,); params conv_transpose2d or none."""
    need_params(params, "none", "conv_transpose2d")
    f = params.fields() if params_family(params) == "conv_transpose2d" else {
        "stride": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0), "dilation": (1, 1), "output_padding": (0, 0),
        "groups": 1}
    x, w, bias = inputs[0], inputs[1], inputs[2] if len(inputs) == 3 else None
    if x.ndim != 4 or w.ndim != 4 or len(out_shape) != 4:
        raise ExpectError(fk.ShapeError)
    groups = f["groups"]
    if any(op >= s and op >= d for op, s, d in zip(f["output_padding"], f["stride"], f["dilation"])):
        raise ExpectError(fk.ParamsError)
    if w.shape[0] != x.shape[1] or x.shape[1] % groups:
        raise ExpectError(fk.ShapeError)
    size = conv_transpose2d_output_size(x.shape[2:], w.shape[2:], f["stride"], f["pads_begin"], f["pads_end"],
                                        f["dilation"], f["output_padding"])
    if min(x.shape[2:]) < 1 or min(w.shape[2:]) < 1 or min(size) < 1:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (x.shape[0], w.shape[1] * groups) + size)
    if bias is not None and bias.shape != (w.shape[1] * groups,):
        raise ExpectError(fk.ShapeError)
    values, magnitude = conv_transpose2d_reference(x, w, bias, f["stride"], f["pads_begin"], f["pads_end"],
                                                   f["dilation"], f["output_padding"], groups)
    return Accumulated(to(values, out_dtype), magnitude, x.shape[1] // groups * w.shape[2] * w.shape[3] + 1)


# ---- CONV2D_BACKWARD_INPUT, CONV2D_BACKWARD_WEIGHT -----------------------------------------------
def conv2d_output_size(input_size, kernel_size, stride, padding, dilation):
    """CONV2D's (OH, OW), or None where the dilated kernel does not fit the padded input."""
    room = [input_size[i] + 2 * pair(padding)[i] - pair(dilation)[i] * (kernel_size[i] - 1) - 1 for i in range(2)]
    if min(room) < 0:
        return None
    return tuple(r // s + 1 for r, s in zip(room, pair(stride)))


def conv2d_backward_input_reference(dy, w, input_size, stride, padding, dilation, groups):
    """(dx, scale) in float64: every tap (kh, kw) adds dy * w (summed over the group's output
    channels) into a zero-padded dx at the input positions it reads, the padding cropped at the
    end; scale sums |dy * w| over the same terms."""
    dy, w = f64(dy), f64(w)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    N, O, OH, OW = dy.shape
    _, Cg, KH, KW = w.shape
    H, W = input_size
    Og = O // groups
    dxp = np.zeros((N, Cg * groups, H + 2 * ph, W + 2 * pw))
    scale = np.zeros_like(dxp)
    with np.errstate(all="ignore"):
        for kh in range(KH):
            for kw in range(KW):
                rows = slice(kh * dh, kh * dh + (OH - 1) * sh + 1, sh)
                cols = slice(kw * dw, kw * dw + (OW - 1) * sw + 1, sw)
                for g in range(groups):
                    dys, ws = dy[:, g * Og:(g + 1) * Og], w[g * Og:(g + 1) * Og, :, kh, kw]
                    dxp[:, g * Cg:(g + 1) * Cg, rows, cols] += np.einsum("nohw,oc->nchw", dys, ws)
                    scale[:, g * Cg:(g + 1) * Cg, rows, cols] += np.einsum("nohw,oc->nchw", np.abs(dys), np.abs(ws))
    return dxp[:, :, ph:ph + H, pw:pw + W], scale[:, :, ph:ph + H, pw:pw + W]


def conv2d_backward_weight_reference(x, dy, kernel_size, stride, padding, dilation, groups):
    """(dw, scale) in float64: dw[o, c, kh, kw] sums dy * x over images and output positions, x
    zero-padded (the padding's zeros take part, as in CONV2D); scale sums |dy * x|."""
    x, dy = f64(x), f64(dy)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    _, O, OH, OW = dy.shape
    KH, KW = kernel_size
    Cg, Og = C // groups, O // groups
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((O, Cg, KH, KW))
    scale = np.zeros_like(out)
    with np.errstate(all="ignore"):
        for kh in range(KH):
            for kw in range(KW):
                win = xp[:, :, kh * dh: kh * dh + (OH - 1) * sh + 1: sh, kw * dw: kw * dw + (OW - 1) * sw + 1: sw]
                for g in range(groups):
                    xs, dys = win[:, g * Cg:(g + 1) * Cg], dy[:, g * Og:(g + 1) * Og]
                    out[g * Og:(g + 1) * Og, :, kh, kw] = np.einsum("nohw,nchw->oc", dys, xs)
                    scale[g * Og:(g + 1) * Og, :, kh, kw] = np.einsum("nohw,nchw->oc", np.abs(dys), np.abs(xs))
    return out, scale


def _conv2d_backward_fields(inputs, params, out_shape):
    """params.conv2d_backward's fields, after the checks both gradient kernels make first."""
    if params_family(params) != "conv2d_backward":
        raise ExpectError(fk.ParamsError)
    if inputs[0].ndim != 4 or inputs[1].ndim != 4 or len(out_shape) != 4:
        raise ExpectError(fk.ShapeError)
    return params.fields()


@register([fk.OpKind.CONV2D_BACKWARD_INPUT], kind="accumulate")
def _conv2d_backward_input(inputs, params, out_dtype, out_shape):
    """dy (N, O, OH, OW), w (O, C/groups, KH, KW) -> dx (N, C, H, W), (H, W) = input_size."""
    f = _conv2d_backward_fields(inputs, params, out_shape)
    dy, w = inputs
    groups = f["groups"]
    if dy.shape[1] % groups or w.shape[0] != dy.shape[1] or tuple(w.shape[2:]) != f["kernel_size"]:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (dy.shape[0], w.shape[1] * groups) + f["input_size"])
    if dy.shape[2:] != conv2d_output_size(f["input_size"], f["kernel_size"], f["stride"], f["padding"], f["dilation"]):
        raise ExpectError(fk.ShapeError)
    values, magnitude = conv2d_backward_input_reference(dy, w, f["input_size"], f["stride"], f["padding"],
                                                        f["dilation"], groups)
    return Accumulated(to(values, out_dtype), magnitude, dy.shape[1] // groups * w.shape[2] * w.shape[3])


@register([fk.OpKind.CONV2D_BACKWARD_WEIGHT], kind="accumulate")
def _conv2d_backward_weight(inputs, params, out_dtype, out_shape):
    """x (N, C, H, W), dy (N, O, OH, OW) -> dw (O, C/groups, KH, KW), (KH, KW) = kernel_size."""
    f = _conv2d_backward_fields(inputs, params, out_shape)
    x, dy = inputs
    groups = f["groups"]
    if dy.shape[1] % groups or x.shape[0] != dy.shape[0] or x.shape[1] % groups or \
            tuple(x.shape[2:]) != f["input_size"]:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (dy.shape[1], x.shape[1] // groups) + f["kernel_size"])
    if dy.shape[2:] != conv2d_output_size(f["input_size"], f["kernel_size"], f["stride"], f["padding"], f["dilation"]):
        raise ExpectError(fk.ShapeError)
    values, magnitude = conv2d_backward_weight_reference(x, dy, f["kernel_size"], f["stride"], f["padding"],
                                                         f["dilation"], groups)
    return Accumulated(to(values, out_dtype), magnitude, max(dy.shape[0] * dy.shape[2] * dy.shape[3], 1))


# ---- attention: ROPE, FLASH_ATTN, PAGED_ATTN ------------------------------------------------------
def rope_reference(x, cos, sin, interleaved):
    """(out, scale) in float64: pairs (x[i], x[i + D/2]) or, interleaved, (x[2i], x[2i+1]) turned
    by (cos, sin) of their row; scale = |a c| + |b s| (or |a s| + |b c|) per output."""
    x, cos, sin = f64(x), f64(cos), f64(sin)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
    with np.errstate(all="ignore"):
        ra, rb = a * cos - b * sin, a * sin + b * cos
        bound_a, bound_b = np.abs(a * cos) + np.abs(b * sin), np.abs(a * sin) + np.abs(b * cos)
    out = np.empty_like(x)
    scale = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
        scale[..., 0::2], scale[..., 1::2] = bound_a, bound_b
    else:
        out[..., :half], out[..., half:] = ra, rb
        scale[..., :half], scale[..., half:] = bound_a, bound_b
    return out, scale


@register([fk.OpKind.ROPE], kind="accumulate")
def _rope(inputs, params, out_dtype, out_shape):
    """x [..., S, D] (D even), cos and sin [S, D/2]; params rope(interleaved) or none (half-split)."""
    need_params(params, "none", "rope")
    x, cos, sin = inputs
    expect_shape(out_shape, x.shape)
    if x.ndim < 2 or x.shape[-1] % 2 or any(t.shape != (x.shape[-2], x.shape[-1] // 2) for t in (cos, sin)):
        raise ExpectError(fk.ShapeError)
    interleaved = params_family(params) == "rope" and params.fields()["interleaved"]
    values, magnitude = rope_reference(x, cos, sin, interleaved)
    return Accumulated(to(values, out_dtype), magnitude, 2)


def attention_scores(q, k, scale, softcap):
    """(scores, sum |scale * q * k| per score) in float64 of q [..., Sq, D] against k [..., Sk, D]:
    scale * q.k, then softcap * tanh(s / softcap) when softcap > 0."""
    q, k = f64(q), f64(k)
    with np.errstate(all="ignore"):
        s = np.einsum("...id,...jd->...ij", q, k) * scale
        s_abs = np.einsum("...id,...jd->...ij", np.abs(q), np.abs(k)) * abs(scale)
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
    return s, s_abs


def softmax_rows(s, visible):
    """Softmax over the last axis among the visible entries; a row with none visible, or whose
    visible scores are all -inf, weighs nothing and is zeros (the kernels' documented rule; a
    plain softmax would give 0 / 0 = NaN for the second)."""
    with np.errstate(all="ignore"):
        m = np.where(visible, s, -np.inf).max(-1, keepdims=True, initial=-np.inf)
        p = np.where(visible, np.exp(s - m), 0.0)
        total = p.sum(-1, keepdims=True)
        weighs = visible.any(-1, keepdims=True) & (m != -np.inf)
        return np.where(weighs, p / np.where(weighs, total, 1.0), 0.0)


def attention_error_scale(v, s, s_abs, visible):
    """Per output row, the magnitude its rounding error scales with: max |v| over the visible keys
    times (1 + the largest sum |scale * q * k| among them), since an absolute error in a score is a
    relative error in its weight.  A -inf score weighs exactly 0 and adds no error."""
    v_abs = np.abs(v).max(-1, initial=0.0)[..., None, :]
    with np.errstate(invalid="ignore"):         # 0 * inf: NaN, an unbounded error to compare_accumulated
        v_max = np.where(visible, v_abs, 0.0).max(-1, initial=0.0)
        s_max = np.where(visible & (s != -np.inf), s_abs, 0.0).max(-1, initial=0.0)
        return (v_max * (1 + s_max))[..., None]


def attend(s, s_abs, v, visible):
    """(softmax(s) @ v, error scale) with v [..., Sk, Dv] and the scores' rows [..., Sq, Sk]."""
    with np.errstate(all="ignore"):
        out = softmax_rows(s, visible) @ v
    return out, attention_error_scale(v, s, s_abs, visible)


def attention_positions(sq, keys, top_left=False):
    """[Sq, 1]: where each query sits among `keys` keys: i + keys - Sq (bottom-right aligned), or i
    (top-left, ONNX Attention's)."""
    return np.arange(sq)[:, None] + (0 if top_left else keys - sq)


def attention_visible(sq, sk, causal, window_left, window_right, top_left=False, keys=None):
    """[Sq, Sk]: query i sits at attention_positions(Sq, keys, top_left); only the first `keys` of
    the Sk keys (all when None: FLASH_ATTN_MASKED's key length) can be seen."""
    keys = sk if keys is None else keys
    pos = attention_positions(sq, keys, top_left)
    j = np.arange(sk)[None, :]
    visible = np.broadcast_to(j < keys, (sq, sk)).copy()
    if causal:
        visible &= j <= pos
    if window_left >= 0:
        visible &= j >= pos - window_left
    if window_right >= 0:
        visible &= j <= pos + window_right
    return visible


def kv_for_query_heads(x, hq):
    """[B, Hkv, ...] -> [B, Hq, ...]: query head h reads kv head h / (Hq / Hkv)."""
    return np.repeat(f64(x), hq // x.shape[1], axis=1)


def attention_reference(q, k, v, scale, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                        top_left=False):
    """(out, error scale) of plain attention in float64 with the kernel's masking rules: q [B, Hq,
    Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]."""
    s, s_abs = attention_scores(q, kv_for_query_heads(k, q.shape[1]), scale, softcap)
    visible = attention_visible(q.shape[2], k.shape[2], causal, window_left, window_right, top_left)
    return attend(s, s_abs, kv_for_query_heads(v, q.shape[1]), visible)


def masked_attention_reference(q, k, v, mask, alibi, key_lens, scale, causal=False, window_left=-1,
                               window_right=-1, softcap=0.0, top_left=False):
    """(out, lse, error scale) of FLASH_ATTN_MASKED in float64: batch b has L_b keys (key_lens[b], all
    Sk when key_lens is empty), keys j >= L_b unseen, query i at p = i + L_b - Sq (or i, top-left);
    t = softcap(scale q.k) + mask[b, h, i, j] (broadcast; none when mask is empty) - slope[h] |p - j|
    (none when alibi is empty); softmax over the visible keys (a row with none, or only -inf, is 0).
    A BOOL mask adds nothing: its False keys are not visible (their scores, NaN or not, never count)."""
    b, hq, sq, _ = q.shape
    sk = k.shape[2]
    lens = [sk] * b if len(key_lens) == 0 else [int(x) for x in np.asarray(key_lens)]
    s, s_abs = attention_scores(q, kv_for_query_heads(k, hq), scale, softcap)          # [B, Hq, Sq, Sk]
    visible = np.array([attention_visible(sq, sk, causal, window_left, window_right, top_left, n) for n in lens],
                       bool).reshape(b, 1, sq, sk)
    visible = np.broadcast_to(visible, s.shape)
    if np.asarray(mask).ndim == 4 and np.asarray(mask).dtype == bool:
        visible = visible & np.asarray(mask)
    with np.errstate(all="ignore"):
        if np.asarray(mask).ndim == 4 and np.asarray(mask).dtype != bool:
            s, s_abs = s + f64(mask), s_abs + np.abs(f64(mask))
        if len(alibi):
            pos = np.array([attention_positions(sq, n, top_left) for n in lens]).reshape(b, 1, sq, 1)
            bias = -f64(alibi)[None, :, None, None] * np.abs(pos - np.arange(sk))
            s, s_abs = s + bias, s_abs + np.abs(bias)
    out, scale_out = attend(s, s_abs, kv_for_query_heads(v, hq), visible)
    return out, attention_lse(s, visible), scale_out


def attention_lse(s, visible):
    """The log of each row's softmax denominator over its visible scores: -inf for a row that sees
    no key (or whose visible scores are all -inf)."""
    with np.errstate(all="ignore"):
        m = np.where(visible, s, -np.inf).max(-1, keepdims=True, initial=-np.inf)
        total = np.where(visible, np.exp(s - np.where(m == -np.inf, 0.0, m)), 0.0).sum(-1, keepdims=True)
        return np.where(m == -np.inf, -np.inf, m + np.log(total))[..., 0]


def sum_group_heads(x, hkv):
    """[B, Hq, ...] -> [B, Hkv, ...]: the sum over the query heads that share each kv head."""
    b, hq = x.shape[:2]
    return x.reshape((b, hkv, hq // hkv) + x.shape[2:]).sum(2)


def attention_backward_reference(q, k, v, do, scale, causal=False, window_left=-1, window_right=-1,
                                 softcap=0.0, top_left=False):
    """FlashAttention's gradients in float64, from the math: with s = scale q.k (then t = softcap
    tanh(s / softcap) under softcap), P = softmax(t) over the visible keys, o = P v,
      dP = do v^T, D = rowsum(do * o), dt = P (dP - D), ds = dt (1 - tanh^2) (ds = dt without softcap),
      dq = scale ds k, dk = scale ds^T q, dv = P^T do,
    dk and dv summed over the query heads that share a kv head (D = rowsum(do * o) = sum_j P_j dP_j).  Returns (o, lse, (dq, dk, dv),
    (dq, dk, dv) magnitudes): a magnitude is each element's sum of |terms|, each weight P taken as
    P (1 + sum |scale q k| + |lse|) since an absolute error in a score or the lse is a relative one in
    its weight."""
    hq, hkv = q.shape[1], k.shape[1]
    qf, kf, vf, dof = f64(q), kv_for_query_heads(k, hq), kv_for_query_heads(v, hq), f64(do)
    visible = attention_visible(q.shape[2], k.shape[2], causal, window_left, window_right, top_left)
    with np.errstate(all="ignore"):
        s = np.einsum("...id,...jd->...ij", qf, kf) * scale
        s_abs = np.einsum("...id,...jd->...ij", np.abs(qf), np.abs(kf)) * abs(scale)
        t = softcap * np.tanh(s / softcap) if softcap > 0 else s
        p = softmax_rows(t, visible)
        lse = attention_lse(t, visible)
        o = p @ vf
        dp = dof @ np.swapaxes(vf, -1, -2)
        di = (dof * o).sum(-1, keepdims=True)
        ds = p * (dp - di)
        if softcap > 0:
            ds = ds * (1 - np.tanh(s / softcap) ** 2)
        dq = scale * ds @ kf
        dk = sum_group_heads(scale * np.swapaxes(ds, -1, -2) @ qf, hkv)
        dv = sum_group_heads(np.swapaxes(p, -1, -2) @ dof, hkv)
        w = p * (1 + s_abs + np.where(np.isfinite(lse), np.abs(lse), 0.0)[..., None])
        dp_abs = np.abs(dof) @ np.abs(np.swapaxes(vf, -1, -2))
        ds_abs = w * (dp_abs + (p * dp_abs).sum(-1, keepdims=True))      # D = sum_j p_j dp_j
        mags = (abs(scale) * ds_abs @ np.abs(kf),
                sum_group_heads(abs(scale) * np.swapaxes(ds_abs, -1, -2) @ np.abs(qf), hkv),
                sum_group_heads(np.swapaxes(w, -1, -2) @ np.abs(dof), hkv))
    return o, lse, (dq, dk, dv), mags


def skip_infinite_values(v):
    # A zero weight times an infinite value is NaN in the kernels (as in any matmul-based
    # attention) but which zero weights meet which values (masked keys sharing a 64-key tile with
    # visible ones, weights that underflow in the F32 exp) is the kernels' business.
    if not np.isfinite(f64(v)).all():
        raise Skip("infinite or NaN values")


def _attention_shapes(q, k, v, out_shape):
    """(B, Hq, Sq, D, Sk) of FLASH_ATTN's q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] and
    output [B, Hq, Sq, Dv] (Hkv dividing Hq), or the ShapeError the kernels give."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or len(out_shape) != 4:
        raise ExpectError(fk.ShapeError)
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1:3]
    if (k.shape[0], k.shape[3], v.shape[0]) != (b, d, b) or v.shape[1:3] != (hkv, sk) or hkv == 0 or hq % hkv:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (b, hq, sq, v.shape[3]))
    return b, hq, sq, d, sk


@register([fk.OpKind.FLASH_ATTN], kind="accumulate")
def _flash_attn(inputs, params, out_dtype, out_shape):
    need_params(params, "flash_attn")
    q, k, v = inputs
    b, hq, sq, d, sk = _attention_shapes(q, k, v, out_shape)
    skip_infinite_values(v)
    f = params.fields()
    s, s_abs = attention_scores(q, kv_for_query_heads(k, hq), f["scale"], f["softcap"])
    visible = attention_visible(sq, sk, f["causal"], f["window_left"], f["window_right"], f["top_left"])
    values, magnitude = attend(s, s_abs, kv_for_query_heads(v, hq), visible)
    return Accumulated(to(values, out_dtype), magnitude, sk + d + 2)


@register([fk.OpKind.FLASH_ATTN_MASKED], kind="accumulate")
def _flash_attn_masked(inputs, params, out_dtype, out_shape):
    """FLASH_ATTN plus mask [B|1, Hq|1, Sq|1, Sk] (q's dtype or BOOL), ALiBi slopes [Hq] (f32) and key lengths
    [B] (i32 / i64, each in [0, Sk]), each [0] when absent."""
    need_params(params, "flash_attn")
    q, k, v, mask, alibi, key_lens = inputs
    b, hq, sq, d, sk = _attention_shapes(q, k, v, out_shape)
    if mask.shape != (0,) and (mask.ndim != 4 or mask.shape[3] != sk
                               or any(m not in (1, want) for m, want in zip(mask.shape[:3], (b, hq, sq)))):
        raise ExpectError(fk.ShapeError)
    if alibi.ndim != 1 or alibi.shape[0] not in (hq, 0) or key_lens.ndim != 1 or key_lens.shape[0] not in (b, 0):
        raise ExpectError(fk.ShapeError)
    checked_indices(key_lens, sk + 1)
    skip_infinite_values(v)
    f = params.fields()
    values, _, magnitude = masked_attention_reference(q, k, v, mask, alibi, key_lens, f["scale"], f["causal"],
                                                      f["window_left"], f["window_right"], f["softcap"],
                                                      f["top_left"])
    return Accumulated(to(values, out_dtype), magnitude, sk + d + 2)


@register([fk.OpKind.FLASH_ATTN_BACKWARD], kind="accumulate", strict=False)
def _flash_attn_backward(inputs, params, out_dtype, out_shape):
    """(dq, dk, dv) of FLASH_ATTN from the math (attention_backward_reference), rounded to the dtype;
    the lse input is taken to be the forward's."""
    need_params(params, "flash_attn")
    q, k, v, lse, do = inputs
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or lse.ndim != 3 or do.ndim != 4:
        raise ExpectError(fk.ShapeError)
    b, hq, sq, _ = q.shape
    hkv, sk = k.shape[1:3]
    if (k.shape[0], k.shape[3], v.shape[0]) != (b, q.shape[3], b) or v.shape[1:3] != (hkv, sk) or hkv == 0 or hq % hkv:
        raise ExpectError(fk.ShapeError)
    if lse.shape != (b, hq, sq) or do.shape != (b, hq, sq, v.shape[3]):
        raise ExpectError(fk.ShapeError)
    f = params.fields()
    _, _, grads, _ = attention_backward_reference(q, k, v, do, f["scale"], f["causal"], f["window_left"],
                                                  f["window_right"], f["softcap"], f["top_left"])
    return tuple(to(g, out_dtype) for g in grads)


def paged_sequence(q, k_cache, v_cache, block_table, context_lens, alibi, scale, block_size, softcap,
                   window_left, n):
    """Sequence n's scores [Hq, Sq, T] (and their sum |terms|) over the T tokens its queries may see,
    those tokens' values [Hq, T, Dv] and which token each query sees [Sq, T].  q[n] is [Sq, Hq, D]
    (a chunk: rank-4 q) or [Hq, D] (one decode query, Sq = 1).  Token t lives in block
    block_table[n, t / block_size], row t % block_size; with L the context length, query i sits at
    p = L - Sq + i and sees tokens max(0, p - window_left) <= t <= p (no lower bound when window_left
    < 0); scores are softcapped, then biased by slope[h] * (t - p)."""
    qn = f64(q[n]) if q.ndim == 4 else f64(q[n])[None]           # [Sq, Hq, D]
    sq, hq = qn.shape[:2]
    ctx = int(context_lens[n])
    pos = ctx - sq + np.arange(sq)[:, None]                       # [Sq, 1]
    first = max(ctx - sq - window_left, 0) if window_left >= 0 else 0
    t = np.arange(min(first, max(ctx, 0)), max(ctx, 0))
    blocks, rows = np.asarray(block_table[n, t // block_size]).astype(np.int64), t % block_size
    k = kv_for_query_heads(k_cache[blocks, rows].transpose(1, 0, 2)[None], hq)[0]    # [Hq, T, D]
    v = kv_for_query_heads(v_cache[blocks, rows].transpose(1, 0, 2)[None], hq)[0]
    s, s_abs = attention_scores(qn.transpose(1, 0, 2), k, scale, softcap)          # [Hq, Sq, T]
    visible = t[None, :] <= pos
    if window_left >= 0:
        visible &= t[None, :] >= pos - window_left
    if len(alibi):
        with np.errstate(invalid="ignore"):
            bias = f64(alibi)[:, None, None] * (t[None, None, :] - pos[None])
            s, s_abs = s + bias, s_abs + np.abs(bias)
    return s, s_abs, v, visible


def paged_reference(q, k_cache, v_cache, block_table, context_lens, alibi, scale, block_size, softcap, window_left):
    """(out, error scale) in float64: each sequence's queries (one, or a chunk of Sq) against its
    tokens in the paged caches (see paged_sequence); out has q's rank, [N, Hq, Dv] or [N, Sq, Hq, Dv]."""
    out = np.zeros(q.shape[:-1] + (v_cache.shape[3],))
    magnitude = np.zeros(q.shape[:-1] + (1,))
    for n in range(q.shape[0]):
        s, s_abs, v, visible = paged_sequence(q, k_cache, v_cache, block_table, context_lens, alibi, scale,
                                              block_size, softcap, window_left, n)
        values, scale_n = attend(s, s_abs, v, visible)           # [Hq, Sq, ...]
        values, scale_n = values.transpose(1, 0, 2), scale_n.transpose(1, 0, 2)
        out[n], magnitude[n] = (values, scale_n) if q.ndim == 4 else (values[0], scale_n[0])
    return out, magnitude


@register([fk.OpKind.PAGED_ATTN], kind="accumulate")
def _paged_attn(inputs, params, out_dtype, out_shape):
    """q [N, Hq, D] or [N, Sq, Hq, D], k/v caches [blocks, block_size, Hkv, D or Dv], block_table
    [N, max_blocks] (i32), context_lens [N] (i32), alibi_slopes [Hq] or [0] (f32); every context
    length (at least Sq for a chunk) and every block index it reaches are bounds-checked (the rest of
    the table is never read)."""
    need_params(params, "paged_attn")
    q, k_cache, v_cache, table, lens, alibi = inputs
    if q.ndim not in (3, 4) or (k_cache.ndim, v_cache.ndim, table.ndim, lens.ndim, alibi.ndim) != (4, 4, 2, 1, 1):
        raise ExpectError(fk.ShapeError)
    n_seqs, hq, d = q.shape[0], q.shape[-2], q.shape[-1]
    sq = q.shape[1] if q.ndim == 4 else 1
    blocks, block_size, hkv = k_cache.shape[:3]
    if (k_cache.shape[3] != d or v_cache.shape[:3] != (blocks, block_size, hkv) or table.shape[0] != n_seqs
            or lens.shape[0] != n_seqs or alibi.shape[0] not in (hq, 0) or hkv == 0 or hq % hkv):
        raise ExpectError(fk.ShapeError)
    f = params.fields()
    if f["block_size"] != block_size:
        raise ExpectError(fk.ParamsError)
    expect_shape(out_shape, q.shape[:-1] + (v_cache.shape[3],))
    checked_indices(lens, table.shape[1] * block_size + 1)
    for n in range(n_seqs):
        if q.ndim == 4 and int(lens[n]) < sq:
            raise ExpectError(fk.KernelIndexError)
        reached = -(-int(lens[n]) // block_size)            # blocks holding tokens < context_len
        checked_indices(table[n, :reached], blocks)
    args = (q, k_cache, v_cache, table, lens, alibi, f["scale"], block_size, f["softcap"], f["window_left"])
    for n in range(n_seqs):
        skip_infinite_values(paged_sequence(*args, n)[2])
    values, magnitude = paged_reference(*args)
    return Accumulated(to(values, out_dtype), magnitude, table.shape[1] * block_size + d + 2)


# ---- training: reductions to a shape, their backward, PAD's backward, the fused linear layer -------
def reduce_to_groups(x, params):
    """(the reduced axes of x, the target shape) for params.reduce_to: the target matched to x's
    dims right-aligned, x's extra leading dims and the target's 1s over longer dims reduced."""
    need_params(params, "reduce_to")
    target = tuple(params.fields()["shape"])
    lead = x.ndim - len(target)
    if lead < 0 or any(t not in (1, n) for t, n in zip(target, x.shape[lead:])):
        raise ExpectError(fk.ParamsError)
    axes = tuple(range(lead)) + tuple(lead + d for d, t in enumerate(target) if t == 1 and x.shape[lead + d] != 1)
    return axes, target


def reduce_to_reference(x, params, name):
    """REDUCE_SUM_TO / REDUCE_MAX_TO in F64 (ints in I64, wrapping), shaped as the target."""
    axes, target = reduce_to_groups(x, params)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if name == "max" and n == 0 and int(np.prod(target, dtype=np.int64)) > 0:
        raise ExpectError(fk.ShapeError)
    src = f64(x) if x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16 else x.astype(np.int64)
    if x.size == 0:
        return np.zeros(target, src.dtype), axes, target
    with np.errstate(all="ignore"):
        r = (np.sum if name == "sum" else np.max)(src, axis=axes, keepdims=True)
    return r.reshape(target), axes, target


@register([fk.OpKind.REDUCE_SUM_TO], strict=False)
def _reduce_sum_to(inputs, params, out_dtype, out_shape):
    """Sum over the dims the target drops or holds as 1 (F64 pairwise accumulation, rounded once)."""
    (x,) = inputs
    values, axes, target = reduce_to_reference(x, params, "sum")
    expect_shape(out_shape, target)
    if not D(out_dtype).is_float:
        return to(values, out_dtype)
    with np.errstate(all="ignore"):
        magnitude = np.sum(np.abs(f64(x)), axis=axes, keepdims=True).reshape(target)
    terms = max(1, int(np.prod([x.shape[a] for a in axes], dtype=np.int64)))
    return Accumulated(to(values, out_dtype), magnitude, terms)


@register([fk.OpKind.REDUCE_MAX_TO], strict=False)
def _reduce_max_to(inputs, params, out_dtype, out_shape):
    """The maximum of each group, NaN propagating; over zero elements a ShapeError."""
    (x,) = inputs
    values, _, target = reduce_to_reference(x, params, "max")
    expect_shape(out_shape, target)
    return to(values, out_dtype)


def reduce_max_to_backward_reference(x, dy, params):
    """dx in F64: dy / (count of maxima) where x is its group's maximum (a NaN group: its NaNs)."""
    axes, target = reduce_to_groups(x, params)
    if tuple(dy.shape) != target:
        raise ExpectError(fk.ShapeError)
    xf = f64(x)
    if xf.size == 0:
        return np.zeros(x.shape)
    with np.errstate(all="ignore"):
        m = np.max(xf, axis=axes, keepdims=True)
        hit = (xf == m) | (np.isnan(xf) & np.isnan(m))
        count = np.sum(hit, axis=axes, keepdims=True)
        g = np.broadcast_to(f64(dy).reshape(m.shape), x.shape)
        return np.where(hit, g / np.maximum(count, 1), 0.0)


@register([fk.OpKind.REDUCE_MAX_TO_BACKWARD], strict=False)
def _reduce_max_to_backward(inputs, params, out_dtype, out_shape):
    x, dy = inputs
    values = reduce_max_to_backward_reference(x, dy, params)
    expect_shape(out_shape, x.shape)
    return to(values, out_dtype)


def pad_sources(n, before, after, mode):
    """For each index of a padded dim of extent n + before + after: the index of the cell it copied
    (constant mode: -1 for the padded cells, which copy nothing)."""
    src = []
    for i in range(n + before + after):
        rel = i - before
        if 0 <= rel < n:
            src.append(rel)
        elif mode == "constant":
            src.append(-1)
        elif mode == "reflect":
            src.append(-rel if rel < 0 else (n - 1) - (rel - (n - 1)))
        else:
            src.append(0 if rel < 0 else n - 1)
    return np.array(src, dtype=np.int64)


def pad_backward_reference(dy, params, value_fn=f64):
    """dx (F64 for floats) and, per cell, how many dy cells were added into it."""
    f = params.fields()
    k = len(f["before"])
    if k > dy.ndim:
        raise ExpectError(fk.ParamsError)
    widths = [(0, 0)] * (dy.ndim - k) + list(zip(f["before"], f["after"]))
    shape = tuple(n - b - a for n, (b, a) in zip(dy.shape, widths))
    if any(n < 0 for n in shape):
        raise ExpectError(fk.ShapeError)
    for n, (before, after) in zip(shape, widths):
        if (before or after) and (f["mode"] == "reflect" and max(before, after) >= n
                                  or f["mode"] == "replicate" and n == 0):
            raise ExpectError(fk.ParamsError)
    maps = [pad_sources(n, b, a, f["mode"]) for n, (b, a) in zip(shape, widths)]
    keep = [m >= 0 for m in maps]
    sub = value_fn(dy)[np.ix_(*keep)] if dy.ndim else value_fn(dy)
    out = np.zeros(shape, dtype=sub.dtype)
    counts = np.zeros(shape, dtype=np.int64)
    if dy.ndim and sub.size:
        index = np.ix_(*[m[k] for m, k in zip(maps, keep)])
        with np.errstate(all="ignore"):               # inf + -inf is NaN, as in the kernels
            np.add.at(out, index, sub)
        np.add.at(counts, index, 1)
    elif not dy.ndim:
        out, counts = sub, np.ones((), np.int64)
    return out, counts


@register([fk.OpKind.PAD_BACKWARD], strict=False)
def _pad_backward(inputs, params, out_dtype, out_shape):
    """Constant: dy's interior; reflect/replicate: each dx cell sums the dy cells that copied it."""
    need_params(params, "pad")
    (dy,) = inputs
    values, counts = pad_backward_reference(dy, params)
    expect_shape(out_shape, values.shape)
    magnitude, _ = pad_backward_reference(dy, params, lambda v: np.abs(f64(v)))
    return Accumulated(to(values, out_dtype), magnitude, int(counts.max(initial=1)), compute=D.F64)


def linear_reference(x, w, b):
    """x @ w + b in F64 and its magnitude |x| @ |w| + |b|."""
    with np.errstate(all="ignore"):
        return f64(x) @ f64(w) + f64(b), np.abs(f64(x)) @ np.abs(f64(w)) + np.abs(f64(b))


# ---- pre-packed MATMUL B: the GEMM engine's panel layout, rebuilt in NumPy from its description -------
def packed_b_reference(b, dtype):
    """The bytes MATMUL_PACK_B writes for B (k, n) of `dtype`, from the layout gemm_core.h.in
    describes: a 64-byte header (magic, version 2, dtype, element size, KC, NC, NR, k, n, panel
    bytes, 0), then per column block of NC (from column 0) and per K block of kstep rows (kstep =
    ceil(k / ceil(k / KC))), the block's columns in NR-wide strips of kc x NR values, zero past n;
    column block jc at element k * jc, its K block at row pc at pc * (its width rounded up to NR).
    The values are of B's compute type, but a BF16 B's stay BF16."""
    import struct
    dtype = D(dtype)
    compute, _, _, nr, kc_max, _, nc_max = spec.gemm_blocking(dtype.name)
    ct = np.float32 if compute == "float" else np.float64
    k, n = b.shape
    values = up(np.asarray(b)).astype(ct)
    cols = -(-n // nr) * nr
    panels = np.zeros(k * cols, dtype=ct)
    kstep = -(-k // -(-k // kc_max)) if k else 1
    for jc in range(0, n, nc_max):
        nc = min(nc_max, n - jc)
        ncap = -(-nc // nr) * nr
        for pc in range(0, k, kstep):
            kc = min(kstep, k - pc)
            block = np.zeros((kc, ncap), dtype=ct)
            block[:, :nc] = values[pc:pc + kc, jc:jc + nc]
            strips = block.reshape(kc, ncap // nr, nr).transpose(1, 0, 2)      # [strip][p][lane]
            start = k * jc + pc * ncap
            panels[start:start + kc * ncap] = strips.reshape(-1)
    if dtype == D.BF16:
        panels = panels.astype(ml_dtypes.bfloat16)                                      # exact
    header = struct.pack("<8s2i4i3qq", b"fkpackB\0", 2, int(dtype), panels.itemsize, kc_max, nc_max, nr,
                         k, n, panels.nbytes, 0)
    assert len(header) == spec.MATMUL_PACKED_HEADER_BYTES
    return np.frombuffer(header + panels.tobytes(), dtype=np.uint8)


@register([fk.OpKind.MATMUL_PACK_B], strict=False)
def _matmul_pack_b(inputs, params, out_dtype, out_shape):
    (b,) = inputs
    need_params(params, "none")
    if b.ndim != 2:
        raise ExpectError(fk.ShapeError)
    expected = packed_b_reference(b, D.parse(b.dtype))
    if tuple(out_shape) != expected.shape:
        raise ExpectError(fk.ShapeError)
    return expected


@register([fk.OpKind.MATMUL_PREPACKED], kind="accumulate", strict=False)
def _matmul_prepacked(inputs, params, out_dtype, out_shape):
    # its packed operand's storage is a whole MATMUL_PACK_B buffer, which no NumPy view passed to a
    # Kernel call spans (a call's storage is what its view addresses): such calls are ShapeErrors,
    # and tests/cpu/matmul/test_matmul_prepacked.py checks the op through plans and C calls.  The
    # ranks, extents and packed header are checked before the output's own overlap, so a refused
    # self-overlapping output reports the ShapeError (the fuzzers' refusal_of_inputs)
    raise ExpectError(fk.ShapeError)


@register([fk.OpKind.FUSED_LINEAR], strict=False)
def _fused_linear(inputs, params, out_dtype, out_shape):
    x, w, b = inputs
    need_params(params, "none")
    if x.ndim != 2 or w.ndim != 2 or b.ndim != 1 or x.shape[1] != w.shape[0] or b.shape[0] != w.shape[1]:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (x.shape[0], w.shape[1]))
    values, magnitude = linear_reference(x, w, b)
    skip_infinite_values(values)
    return Accumulated(to(values, out_dtype), magnitude, x.shape[1] + 1)


# ---- QMATMUL ---------------------------------------------------------------------------------------
QUANT_TYPES = {q.code: q for q in spec.QUANT_TYPES}


def dequantized_weights(w, quant_type, n, k):
    """dequant(W) as (n, k) F32: gguf's NumPy dequantization of W's bytes (read through any layout)."""
    if n == 0 or k == 0:
        return np.zeros((n, k), np.float32)
    rows = np.ascontiguousarray(w, dtype=np.uint8).reshape(n, -1)
    with np.errstate(all="ignore"):                  # random bytes may hold an inf or NaN scale
        return gguf.quants.dequantize(rows, gguf.GGMLQuantizationType(quant_type)).reshape(n, k)


def product_with_dequantized(a, deq):
    """A @ deq.T in F64 and its magnitude |A| @ |deq|.T."""
    deq = deq.astype(np.float64)
    with np.errstate(all="ignore"):
        return f64(a) @ deq.T, np.abs(f64(a)) @ np.abs(deq).T


def qmatmul_reference(a, w, quant_type, n, k):
    """A @ dequant(W).T in F64 and its magnitude |A| @ |dequant(W)|.T."""
    return product_with_dequantized(a, dequantized_weights(w, quant_type, n, k))


def fma_f32(x, y, z):
    """F32 fma(x, y, z) elementwise, rounded once: x * y is exact in F64, x * y + z is rounded to
    odd in F64 (TwoSum's error term picks the odd neighbour when the sum is inexact), and rounding
    that to F32 is the correctly rounded result (F64 has more than 24 + 1 bits)."""
    x, y, z = (np.asarray(v, np.float32).astype(np.float64) for v in (x, y, z))
    p = x * y
    s = p + z
    bp = s - p
    e = (p - (s - bp)) + (z - bp)
    even = (s.view(np.uint64) & 1) == 0
    toward = np.nextafter(s, np.where(e > 0, np.inf, -np.inf))
    return np.where((e != 0) & even, toward, s).astype(np.float32)


QGEMV_IN_REGISTERS = ("Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K", "Q5_K", "Q6_K")


def qgemv_register_bits(a, w, quant_type, n, k):
    """QMATMUL's m = 1 result for the 32-value types, in the exact F32 order its every form computes
    (quant_kernels.h.in).  Code c_v: Q8_0 q, Q4_0 q - 8, Q5_0 q - 16, Q4_1 / Q5_1 q.  Without a
    minimum (value d * c_v), per block s_l = fma(a_{l+16}, c_{l+16}, a_l * c_l) for l < 16 and
    acc_l = fma(d, s_l, acc_l); with one (value w_v = d * c_v + m), s_l = fma(a_{l+16}, w_{l+16},
    a_l * w_l) and acc_l = acc_l + s_l; the blocks in order, then f_l = acc_l + acc_{l+8} and
    c = ((f0 + f1) + (f2 + f3)) + ((f4 + f5) + (f6 + f7)).  The K-quants sum their 32-value sub-blocks as
    the types with a minimum, on gguf's values.  a: the (k,) row as F32.  The codes of the 32-value
    types are read from W's bytes here and their values checked against gguf's."""
    q = QUANT_TYPES[quant_type]
    assert q.name in QGEMV_IN_REGISTERS and k % q.block_size == 0
    blocks = k // 32
    if q.block_size == 256:
        values = dequantized_weights(w, quant_type, n, k).reshape(n, blocks, 32)
        return _qgemv_lanes_bits(a, values, None, n, blocks)
    raw = np.ascontiguousarray(w, dtype=np.uint8).reshape(n, blocks, q.block_bytes)

    def f16(at):
        return raw[..., at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32)

    d, minimum = f16(0), (f16(2) if q.name in ("Q4_1", "Q5_1") else None)
    if q.name == "Q8_0":
        codes = raw[..., 2:34].view(np.int8).astype(np.int32)
    else:
        at = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[q.name]
        nibbles = raw[..., at:at + 16].astype(np.int32)
        codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1)
        if q.name in ("Q5_0", "Q5_1"):
            word = raw[..., at - 4:at].copy().view(np.uint32).astype(np.int64)        # (n, blocks, 1)
            codes = codes | (((word >> np.arange(32)) & 1) << 4).astype(np.int32)
        codes = codes - {"Q4_0": 8, "Q5_0": 16}.get(q.name, 0)
    codes = codes.astype(np.float32)
    with np.errstate(all="ignore"):
        values = d[..., None] * codes if minimum is None else d[..., None] * codes + minimum[..., None]
        np.testing.assert_array_equal(values.reshape(n, k), dequantized_weights(w, quant_type, n, k))
    return _qgemv_lanes_bits(a, codes if minimum is None else values, d if minimum is None else None, n, blocks)


def _qgemv_lanes_bits(a, terms, d, n, blocks):
    """The fma order over 32-value blocks of terms (n, blocks, 32): codes scaled per block by d, or
    values (d None)."""
    with np.errstate(all="ignore"):
        a = np.asarray(a, np.float32).reshape(1, blocks, 32)
        s = fma_f32(a[..., 16:], terms[..., 16:], a[..., :16] * terms[..., :16])
        acc = np.zeros((n, 16), np.float32)
        for b in range(blocks):
            acc = acc + s[:, b] if d is None else fma_f32(np.broadcast_to(d[:, b, None], (n, 16)), s[:, b], acc)
        f = acc[:, :8] + acc[:, 8:]
        return ((f[:, 0] + f[:, 1]) + (f[:, 2] + f[:, 3])) + ((f[:, 4] + f[:, 5]) + (f[:, 6] + f[:, 7]))


@register([fk.OpKind.QMATMUL], kind="accumulate", strict=False)
def _qmatmul(inputs, params, out_dtype, out_shape):
    """A @ dequant(W).T; m = 0 takes A's rows; [A, W, count]: rows from count on are zero."""
    need_params(params, "qmatmul")
    a, w = inputs[:2]
    f = params.fields()
    quant = QUANT_TYPES.get(f["quant_type"])
    if quant is None:
        raise ExpectError(fk.ParamsError)
    m, n, k = f["m"] or (a.shape[0] if a.ndim == 2 else 0), f["n"], f["k"]
    if a.shape != (m, k) or w.ndim != 1 or k % quant.block_size or \
            w.shape[0] != n * (k // quant.block_size) * quant.block_bytes or \
            (len(inputs) == 3 and inputs[2].size != 1):
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (m, n))
    rows = m
    if len(inputs) == 3:
        rows = int(inputs[2].reshape(-1)[0])
        if not 0 <= rows <= m:
            raise ExpectError(fk.KernelIndexError)
    if not np.isfinite(dequantized_weights(w, quant.code, n, k)).all():
        raise Skip("random bytes gave a non-finite scale")
    values, magnitude = qmatmul_reference(a, w, quant.code, n, k)
    values[rows:], magnitude[rows:] = 0, 0
    skip_infinite_values(values)
    return Accumulated(to(values, out_dtype), magnitude, max(k, 1))


def qembedding_reference(w, ids, quant_type, n, k):
    """dequant(W)[ids] (*ids.shape, k) F32: gguf's NumPy dequantization, then the rows taken."""
    return dequantized_weights(w, quant_type, n, k)[np.asarray(ids, np.int64)]


@register([fk.OpKind.QEMBEDDING], kind="exact")
def _qembedding(inputs, params, out_dtype, out_shape):
    need_params(params, "qembedding")
    w, ids = inputs
    f = params.fields()
    quant = QUANT_TYPES.get(f["quant_type"])
    if quant is None:
        raise ExpectError(fk.ParamsError)
    n, k = f["n"], f["k"]
    if w.ndim != 1 or k % quant.block_size or w.shape[0] != n * (k // quant.block_size) * quant.block_bytes:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, ids.shape + (k,))
    if ((ids < 0) | (ids >= n)).any():
        raise ExpectError(fk.KernelIndexError)
    return to(qembedding_reference(w, ids, quant.code, n, k), out_dtype)


NF4_CODE = np.array(spec.NF4_CODE, np.float32)


def nf4_dequantized_weights(codes, absmax, n, k):
    """dequant(W) as (n, k) F32 from the NF4 code book: two codes per byte, the high nibble first,
    times each block's absmax (bitsandbytes' dequantize_4bit)."""
    packed = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    q = np.empty(2 * packed.size, np.uint8)
    q[0::2], q[1::2] = packed >> 4, packed & 15
    scale = np.ascontiguousarray(absmax, dtype=np.float32).reshape(-1, 1)
    with np.errstate(all="ignore"):
        return (NF4_CODE[q].reshape(-1, spec.NF4_BLOCK) * scale).reshape(n, k)


def nf4_matmul_reference(a, codes, absmax, n, k):
    """A @ dequant(W).T in F64 and its magnitude |A| @ |dequant(W)|.T."""
    return product_with_dequantized(a, nf4_dequantized_weights(codes, absmax, n, k))


def nf4_lane_order(x):
    """x (..., k) in NF4_MATMUL's m = 1 lane order: in every 32 values, the even-numbered ones (a code
    byte's high nibble) first, then the odd-numbered ones (its low nibble)."""
    x = np.asarray(x)
    return x.reshape(*x.shape[:-1], -1, 16, 2).swapaxes(-1, -2).reshape(x.shape)


def nf4_gemv_register_bits(a, codes, absmax, n, k):
    """NF4_MATMUL's m = 1 result in the exact F32 order its every form computes (quant_kernels.h.in):
    the values w_v = NF4_CODE[q_v] * absmax summed as QMATMUL's types with a minimum, per 32 values,
    lane l pairing values 2l and 2l + 1 of those 32 (one code byte): s_l = fma(a_{2l+1}, w_{2l+1},
    a_{2l} * w_{2l}), acc_l = acc_l + s_l, the lanes folded as QMATMUL's.  a: the (k,) row as F32."""
    assert k % spec.NF4_BLOCK == 0
    values = nf4_lane_order(nf4_dequantized_weights(codes, absmax, n, k)).reshape(n, k // 32, 32)
    return _qgemv_lanes_bits(nf4_lane_order(np.asarray(a, np.float32)), values, None, n, k // 32)


@register([fk.OpKind.NF4_MATMUL], kind="accumulate", strict=False)
def _nf4_matmul(inputs, params, out_dtype, out_shape):
    need_params(params, "nf4_matmul")
    a, codes, absmax = inputs[:3]
    f = params.fields()
    m, n, k = f["m"] or (a.shape[0] if a.ndim == 2 else 0), f["n"], f["k"]
    if a.shape != (m, k) or codes.ndim != 1 or absmax.ndim != 1 or k % spec.NF4_BLOCK or \
            codes.shape[0] != n * k // 2 or absmax.shape[0] != n * k // spec.NF4_BLOCK or \
            (len(inputs) == 4 and inputs[3].size != 1):
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, (m, n))
    rows = m
    if len(inputs) == 4:
        rows = int(inputs[3].reshape(-1)[0])
        if not 0 <= rows <= m:
            raise ExpectError(fk.KernelIndexError)
    if not np.isfinite(f64(absmax)).all():
        raise Skip("a non-finite absmax")
    values, magnitude = nf4_matmul_reference(a, codes, absmax, n, k)
    values[rows:], magnitude[rows:] = 0, 0
    skip_infinite_values(values)
    return Accumulated(to(values, out_dtype), magnitude, max(k, 1))
# ---- state-space models: CAUSAL_CONV1D, SELECTIVE_SCAN, SSD_CHUNK_SCAN (accumulate) --------------
@_at_infinity
def silu(a):
    """a / (1 + exp(-a)), the form the kernels evaluate; -0 at -inf, as the kernels and the SILU op."""
    return a / (1 + np.exp(-a))


def causal_conv1d(x, w, bias, activation="none"):
    """(y, S) for x (B, D, L), w (D, W), bias (D,) in their dtype (float64 in the tests): taps before
    t = 0 are left out (not multiplied by 0), as the kernels do; S = |bias| + sum |w x|."""
    b, d, length = x.shape
    width = w.shape[1]
    acc = np.broadcast_to(bias[None, :, None], (b, d, length)).astype(x.dtype)
    mag = np.abs(acc)
    with np.errstate(all="ignore"):
        for k in range(width):
            shift = width - 1 - k          # the tap reads x[t - shift]
            if shift >= length:
                continue
            term = w[None, :, k, None] * x[:, :, :length - shift]
            acc = acc + np.concatenate([np.zeros((b, d, shift), x.dtype), term], axis=2)
            mag = mag + np.concatenate([np.zeros((b, d, shift), x.dtype), np.abs(term)], axis=2)
    return (silu(acc) if activation == "silu" else acc), mag


def softplus(v):
    """log(1 + exp(v)), v itself above 20 (torch's threshold)."""
    with np.errstate(all="ignore"):
        return np.where(v <= 20, np.log1p(np.exp(np.minimum(v, 20))), v)


def selective_scan(u, delta, a, bm, cm, skip, delta_softplus=False):
    """(y, state, S_y, S_state) of Mamba's selective scan, the plain recurrence over t: per (b, d, n)
    h = exp(dt A) h + dt B u (dt = softplus(delta) or delta), y = sum_n C h + D u; S the same
    recurrence on |terms|."""
    dt = softplus(delta) if delta_softplus else delta
    nb, nd, length = u.shape
    n = a.shape[1]
    h = np.zeros((nb, nd, n), u.dtype)
    g = np.zeros((nb, nd, n), u.dtype)
    y = np.zeros((nb, nd, length), u.dtype)
    mag = np.zeros((nb, nd, length), u.dtype)
    with np.errstate(all="ignore"):
        for t in range(length):
            decay = np.exp(dt[:, :, t, None] * a[None])
            update = (dt[:, :, t] * u[:, :, t])[:, :, None] * bm[:, None, :, t]
            h = decay * h + update
            g = decay * g + np.abs(update)
            y[:, :, t] = np.sum(cm[:, None, :, t] * h, axis=2) + skip[None] * u[:, :, t]
            mag[:, :, t] = np.sum(np.abs(cm[:, None, :, t]) * g, axis=2) + np.abs(skip[None] * u[:, :, t])
    return y, h, mag, g


def ssd_scan(x, a, bm, cm):
    """(Y, state, S_Y, S_state) of Mamba-2's SSD as the plain sequential recurrence per (b, h):
    h_t = exp(A_t) h_{t-1} + x_t^T B_t (P x N), Y_t = h_t C_t; S the recurrence on |terms|."""
    nb, length, nh, p = x.shape
    n = bm.shape[3]
    h = np.zeros((nb, nh, p, n), x.dtype)
    g = np.zeros((nb, nh, p, n), x.dtype)
    y = np.zeros(x.shape, x.dtype)
    mag = np.zeros(x.shape, x.dtype)
    with np.errstate(all="ignore"):
        for t in range(length):
            decay = np.exp(a[:, t])[:, :, None, None]
            update = x[:, t, :, :, None] * bm[:, t, :, None, :]
            h = decay * h + update
            g = decay * g + np.abs(update)
            y[:, t] = np.sum(h * cm[:, t, :, None, :], axis=3)
            mag[:, t] = np.sum(g * np.abs(cm[:, t, :, None, :]), axis=3)
    return y, h, mag, g


def _ssm_fields(params, family, key, default):
    need_params(params, "none", family)
    return default if params is None or params.kind == "none" else params.fields()[key]


@register([fk.OpKind.CAUSAL_CONV1D], kind="accumulate", strict=False)
def _causal_conv1d(inputs, params, out_dtype, out_shape):
    if not D(out_dtype).is_float:
        raise Skip("float ops only")
    x, w, bias = (up(v).astype(np.float64) for v in inputs)
    if x.ndim != 3 or w.ndim != 2 or w.shape != (x.shape[1], w.shape[1]) or w.shape[1] < 1 \
            or bias.shape != (x.shape[1],):
        raise ExpectError(fk.ShapeError)
    activation = _ssm_fields(params, "causal_conv1d", "activation", "none")
    y, mag = causal_conv1d(x, w, bias, activation)
    return Accumulated(to(y, out_dtype), 1.25 * mag, w.shape[1] + 8)


@register([fk.OpKind.SELECTIVE_SCAN], kind="accumulate", strict=False)
def _selective_scan(inputs, params, out_dtype, out_shape):
    """(y, state) rounded to the dtype."""
    softplus_delta = _ssm_fields(params, "selective_scan", "delta_softplus", False)
    y, h, _, _ = selective_scan(*(up(v).astype(np.float64) for v in inputs), softplus_delta)
    return to(y, out_dtype), to(h, out_dtype)


@register([fk.OpKind.SSD_CHUNK_SCAN], kind="accumulate", strict=False)
def _ssd_chunk_scan(inputs, params, out_dtype, out_shape):
    """(Y, state) rounded to the dtype: the chunk size changes the evaluation, not the values."""
    _ssm_fields(params, "ssd_chunk_scan", "chunk_size", 64)
    y, h, _, _ = ssd_scan(*(up(v).astype(np.float64) for v in inputs))
    return to(y, out_dtype), to(h, out_dtype)
# ---- pooling: MAX_POOL2D (exact), AVG_POOL2D (accumulate); selection: TOPK (exact) ---------------
def pool2d_output_size(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode):
    """One axis of ONNX pooling (floor or ceil; in ceil mode a window starting in the after padding
    is dropped), or None where the dilated kernel does not fit the padded axis."""
    span = size + pad_begin + pad_end - (dilation * (kernel - 1) + 1)
    if span < 0:
        return None
    out = -(-span // stride) + 1 if ceil_mode else span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def pool2d_reference(x, f, average):
    """MAX_POOL2D (average=False) or AVG_POOL2D by plain loops over every output and tap:
    (values in float64 or x's integer type, mean |taps| per output, taps per output).  None when a
    window holds padding only."""
    x = up(np.asarray(x))
    n, c, h, w = x.shape
    sizes = [pool2d_output_size(x.shape[2 + a], f["kernel"][a], f["stride"][a], f["pads_begin"][a],
                                f["pads_end"][a], f["dilation"][a], f["ceil_mode"]) for a in range(2)]
    oh, ow = sizes
    out = np.zeros((n, c, oh, ow), dtype=np.float64 if average or x.dtype.kind == "f" else x.dtype)
    magnitude = np.zeros((n, c, oh, ow))
    terms = 1
    for i in range(oh):
        for j in range(ow):
            rows = [i * f["stride"][0] - f["pads_begin"][0] + t * f["dilation"][0] for t in range(f["kernel"][0])]
            cols = [j * f["stride"][1] - f["pads_begin"][1] + t * f["dilation"][1] for t in range(f["kernel"][1])]
            inside_r = [r for r in rows if 0 <= r < h]
            inside_c = [q for q in cols if 0 <= q < w]
            if not inside_r or not inside_c:
                return None
            win = x[:, :, inside_r][:, :, :, inside_c].reshape(n, c, len(inside_r) * len(inside_c))
            if not average:
                if x.dtype.kind == "f":
                    with np.errstate(invalid="ignore"):
                        out[:, :, i, j] = np.max(win.astype(np.float64), axis=-1)
                else:
                    out[:, :, i, j] = np.max(win, axis=-1)
                continue
            if f["count_include_pad"]:
                count = (sum(-f["pads_begin"][0] <= r < h + f["pads_end"][0] for r in rows)
                         * sum(-f["pads_begin"][1] <= q < w + f["pads_end"][1] for q in cols))
            else:
                count = len(inside_r) * len(inside_c)
            win = win.astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                out[:, :, i, j] = win.astype(np.longdouble).sum(axis=-1) / count
                magnitude[:, :, i, j] = np.abs(win).sum(axis=-1) / count
            terms = max(terms, count)
    return out, magnitude, terms


def _pool2d_case(inputs, params, out_shape):
    """The pool2d fields after the refusals the kernels make (params and shapes)."""
    if params_family(params) != "pool2d":
        raise ExpectError(fk.ParamsError)
    f = params.fields()
    x = inputs[0]
    if any(f["pads_begin"][a] >= f["kernel"][a] or f["pads_end"][a] >= f["kernel"][a] for a in range(2)):
        raise ExpectError(fk.ParamsError)
    if x.ndim != 4 or len(out_shape) != 4:
        raise ExpectError(fk.ShapeError)
    sizes = [pool2d_output_size(x.shape[2 + a], f["kernel"][a], f["stride"][a], f["pads_begin"][a],
                                f["pads_end"][a], f["dilation"][a], f["ceil_mode"]) for a in range(2)]
    if None in sizes:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, x.shape[:2] + tuple(sizes))
    return f


@register([fk.OpKind.MAX_POOL2D])
def _max_pool2d(inputs, params, out_dtype, out_shape):
    f = _pool2d_case(inputs, params, out_shape)
    result = pool2d_reference(inputs[0], f, average=False)
    if result is None:
        raise ExpectError(fk.ShapeError)
    return to(result[0], out_dtype)


@register([fk.OpKind.AVG_POOL2D], kind="accumulate")
def _avg_pool2d(inputs, params, out_dtype, out_shape):
    f = _pool2d_case(inputs, params, out_shape)
    result = pool2d_reference(inputs[0], f, average=True)
    if result is None:
        raise ExpectError(fk.ShapeError)
    values, magnitude, terms = result
    return Accumulated(to(values, out_dtype), magnitude, terms, D.F64)


def topk_reference(x, k, largest):
    """(values, I64 indices) of TOPK by NumPy's stable argsort: ascending puts NaN last and keeps
    ties in index order; descending sorts the reversed row and reverses the order back, which
    keeps ties in index order and puts NaN first."""
    x = np.asarray(x)
    keys, n = up(x), x.shape[-1]                # F16/BF16 ordered as F32: the same order
    if largest:
        order = (n - 1 - np.argsort(keys[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    else:
        order = np.argsort(keys, axis=-1, kind="stable")
    order = np.ascontiguousarray(order[..., :k]).astype(np.int64)
    return np.take_along_axis(x, order, axis=-1), order


@register([fk.OpKind.TOPK])
def _topk(inputs, params, out_dtype, out_shape):
    if params_family(params) != "topk":
        raise ExpectError(fk.ParamsError)
    f = params.fields()
    x = inputs[0]
    if x.ndim < 1 or f["k"] > x.shape[-1]:
        raise ExpectError(fk.ShapeError)
    expect_shape(out_shape, x.shape[:-1] + (f["k"],))
    return topk_reference(x, f["k"], f["largest"])


# ---- comparison ----------------------------------------------------------------------------------
NAN_CONVENTION_OPS = {fk.OpKind.RELU, fk.OpKind.SIGN, fk.OpKind.STEP, fk.OpKind.CLAMP}


def compare(op, actual, expected, out_dtype, inputs, reduced=1):
    """Assert `actual` matches `expected` within the op's tolerance class (see TOLERANCES)."""
    oracle = ORACLES[op]
    out_dtype = D(out_dtype)
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if out_dtype.is_float8:       # copies and ml_dtypes conversions (no FP8 arithmetic): the same bits
        expected = np.ascontiguousarray(expected.astype(out_dtype.numpy)).view(np.uint8)
        np.testing.assert_array_equal(np.ascontiguousarray(actual).view(np.uint8), expected)
        return
    if not out_dtype.is_float:
        np.testing.assert_array_equal(actual, expected)
        return
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    skip = np.zeros(a.shape, dtype=bool)
    if op in NAN_CONVENTION_OPS and inputs:
        # what RELU/SIGN/STEP/CLAMP give for NaN (and SIGN for -0.0) is a convention of the kernel
        skip |= np.isnan(np.broadcast_to(up(inputs[0]).astype(np.float64), a.shape))
    nan_a, nan_e = np.isnan(a) & ~skip, np.isnan(e) & ~skip
    assert (nan_a == nan_e).all(), f"NaN mismatch at {np.argwhere(nan_a != nan_e)[:5].tolist()}"
    check = ~(np.isnan(e) | skip)
    rtol, atol = tolerance(oracle.kind, out_dtype, reduced)
    if op in (fk.OpKind.DIV, fk.OpKind.REM, fk.OpKind.POWI, fk.OpKind.RECIP) and out_dtype in HALF:
        rtol = max(rtol, EPS[out_dtype])        # F32 then half: a double rounding of one ulp
    if oracle.kind == "exact" and rtol == 0 and atol == 0:
        bad = check & (a != e)
    else:
        with np.errstate(all="ignore"):
            diff = np.abs(a - e)
            bad = check & (a != e) & ~(diff <= atol + rtol * np.abs(e))
            # near an overflow threshold one side may round to Inf and the other to the largest finite
            big = np.finfo(np.float16).max if out_dtype == D.F16 else (
                float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) if out_dtype == D.BF16 else
                np.finfo(out_dtype.numpy).max)
            bad &= ~(np.isinf(a) & (np.abs(e) >= big * (1 - 4 * rtol)) & (np.sign(a) == np.sign(e)))
            bad &= ~(np.isinf(e) & (np.abs(a) >= big * (1 - 4 * rtol)) & (np.sign(a) == np.sign(e)))
    assert not bad.any(), (f"{op.name} {out_dtype.name}: mismatch at {np.argwhere(bad)[:5].tolist()}: "
                           f"got {a[bad][:5]} expected {e[bad][:5]} (rtol {rtol}, atol {atol})")


def compare_accumulated(op, actual, expected, out_dtype):
    """Assert `actual` matches an Accumulated result: NaN exactly where it has NaN, elsewhere within
    the accumulate class's atol (it grows with `terms`) times the element's magnitude, plus one
    rounding into the output dtype.  A per-element magnitude bounds every partial sum, so the
    class's rtol, there for bounds taken from the largest input alone, is not added."""
    out_dtype = D(out_dtype)
    a, e = np.asarray(actual), np.asarray(expected.values)
    assert a.shape == e.shape, (a.shape, e.shape)
    if not out_dtype.is_float:
        np.testing.assert_array_equal(a, e)
        return
    a, e = a.astype(np.float64), e.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert (nan_a == nan_e).all(), f"{op.name}: NaN mismatch at {np.argwhere(nan_a != nan_e)[:5].tolist()}"
    compute = D.parse(compute_dtype(out_dtype)) if expected.compute is None else D(expected.compute)
    atol = tolerance("accumulate", compute, expected.terms)[1]
    rtol = EPS[out_dtype]
    finfo = ml_dtypes.finfo if out_dtype == D.BF16 else np.finfo
    floor = float(finfo(out_dtype.numpy).smallest_subnormal)
    magnitude = np.asarray(expected.magnitude, dtype=np.float64)
    magnitude = np.broadcast_to(np.where(np.isnan(magnitude), np.inf, magnitude), a.shape)
    with np.errstate(all="ignore"):
        bad = ~nan_e & (a != e) & ~(np.abs(a - e) <= atol * magnitude + rtol * np.abs(e) + floor)
    assert not bad.any(), (f"{op.name} {out_dtype.name}: mismatch at {np.argwhere(bad)[:5].tolist()}: got "
                           f"{a[bad][:5]} expected {e[bad][:5]} (rtol {rtol}, atol {atol} x magnitude "
                           f"{magnitude[bad][:5]})")
