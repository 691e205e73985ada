"""Operands inside guarded buffers, the hypothesis case strategy (`cases`) and the outcome check
(`run_case`) shared by the fuzz suite (test_fuzz.py) and the error-path tests
(test_no_partial_writes.py).  `cases` builds a plausible valid call of a binding from its op's
schema and family (OPERANDS for ops whose operands do not just broadcast, with index operands
mostly in range), then applies one mutation (MODES).

Every operand is a view into its own `root` byte buffer with guard space around it, filled with
random bytes first.  After a call the whole root is compared byte for byte: on an exception
nothing may have changed; on success only the bytes the output view addresses may have changed
(so a kernel writing outside its output, or into an input, is caught too).
"""
import math
import warnings
from dataclasses import dataclass, field
from typing import Optional

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import fuel_kernel as fk
from fuel_kernel import ops, spec

import oracles

D = fk.DType
OUTPUT_LAYOUTS = ("contiguous", "fortran", "strided", "negative", "offset", "random_strides")
INPUT_LAYOUTS = OUTPUT_LAYOUTS + ("broadcast", "overlapping")
SIZES = (0, 1, 1, 2, 2, 3, 3, 5, 7, 11, 13)
MUST_FAIL = ("wrong_dtype", "wrong_count", "read_only", "too_many_dims", "misaligned", "non_array",
             "byte_order", "self_overlap", "huge_output")
MODES = ("valid",) * 8 + MUST_FAIL + ("alias", "alias", "bad_params", "random_shapes",
                                     "wrong_dtype_dispatch")
# extents of the adversarial stride-0 views: past 2**31, 2**52 (doubles stop being exact) and 2**63-1
HUGE_EXTENTS = (2 ** 31 + 1, 2 ** 52, 2 ** 59 + 1, 2 ** 61, 2 ** 62, 2 ** 63 - 1)
REDUCE_OPS = {fk.OpKind.SUM, fk.OpKind.MAX, fk.OpKind.MIN, fk.OpKind.MEAN, fk.OpKind.PROD,
              fk.OpKind.ARGMAX, fk.OpKind.ARGMIN}
LAST_DIM_OPS = {fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM, fk.OpKind.RMS_NORM,
                fk.OpKind.LAYER_NORM}
SOFTMAX_BACKWARD_OPS = {fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD, fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD}
PARAMS_BY_OP = {fk.OpKind.AFFINE: "affine", fk.OpKind.CLAMP: "clamp", fk.OpKind.POWI: "powi",
                fk.OpKind.POWI_BACKWARD: "powi",
                fk.OpKind.MATMUL: "matmul", fk.OpKind.CONV2D: "conv2d",
                fk.OpKind.RMS_NORM: "norm_last_dim", fk.OpKind.LAYER_NORM: "norm_last_dim",
                fk.OpKind.CONV2D_BACKWARD_INPUT: "conv2d_backward",
                fk.OpKind.CONV2D_BACKWARD_WEIGHT: "conv2d_backward", fk.OpKind.QMATMUL: "qmatmul",
                fk.OpKind.NF4_MATMUL: "nf4_matmul", fk.OpKind.QEMBEDDING: "qembedding",
                **{op: "reduce" for op in REDUCE_OPS}}


def live_bindings():
    """(op, dtypes) of every static CPU key of a one-output op in the current snapshot: grows as
    families merge.  Ops with several outputs are fuzzed by their family's tests, which run the
    same mutations on every output (tests/cpu/norm_backward)."""
    table = fk.bindings()
    return [(row.op, tuple(row.dtypes)) for row in table.coverage()
            if row.backend == fk.Backend.CPU and isinstance(row.op, fk.OpKind)
            and table.lookup(row.op, row.dtypes, row.backend).n_outputs == 1]


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
    huge: bool = False               # a stride-0 view too large to copy (no oracle value)

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
    addressed = element_addresses(view, root)
    for b in range(itemsize):
        footprint[addressed + b] = True
    return Operand(root, view, footprint, len(np.unique(addressed)) != addressed.size)


def element_addresses(view, root):
    """Byte offset in `root` of every element of `view`."""
    if view.size == 0:
        return np.zeros(0, dtype=np.int64)
    offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if view.ndim == 0:
        return np.array([offset], dtype=np.int64)
    grids = np.indices(view.shape).reshape(view.ndim, -1)
    return offset + (np.asarray(view.strides, np.int64)[:, None] * grids).sum(axis=0)


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
    elif dtype.is_float or dtype.is_float8:           # FP8: F64 values rounded by ml_dtypes
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


def run_case(case, call=None):
    """Call, then check the reliability properties; returns "ok", "error" or "skip".

    `call(inputs, output, params)` replaces the real call (the checker's own tests use it)."""
    in_before = [o.snapshot() for o in case.inputs]
    out_before = case.output.snapshot() if case.output is not None else None
    extra_before = [o.snapshot() for o in case.extra_outputs]
    in_values = [np.array(o.view, copy=True) if isinstance(o.view, np.ndarray) and not o.huge else None
                 for o in case.inputs]
    oracle = oracles.ORACLES.get(case.op)
    if oracle is not None and oracle.destination:     # an in-place op: its result depends on the output's values
        out = case.output
        in_values.append(np.array(out.view, copy=True) if out is not None and isinstance(out.view, np.ndarray)
                         and not out.huge and not out.self_overlapping else None)
    views = [o.view for o in case.inputs]
    out_view = case.output.view if case.output is not None else None
    try:
        if call is not None:
            result = call(views, out_view, case.params)
        elif case.form in ("dispatch", "dispatch_alloc"):
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
        assert not has_zero_stride_axis(out_view), \
            f"accepted an output that overlaps itself (stride 0 on a written axis): {case.describe()}"
        changed = case.output.root != out_before
        assert not (changed & ~case.output.footprint).any(), \
            f"wrote outside the output view: {case.describe()}"
    for o, before in zip(case.inputs, in_before):
        if case.aliased and o is case.inputs[0]:
            continue
        assert np.array_equal(o.root, before), f"an input changed: {case.describe()}"
    if case.output is not None and case.output.self_overlapping:
        return "skip"
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
    if isinstance(expected, oracles.Accumulated):
        try:
            oracles.compare_accumulated(case.op, actual, expected, out_dtype)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{case.describe()}") from None
        return "ok"
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
        term = max(term, 1.0)
        term = term ** max(reduced, 1) if max(reduced, 1) * math.log(term) < 700 else math.inf
    if case.op == fk.OpKind.MATMUL:
        term = term * term
    if case.op in (fk.OpKind.RMS_NORM, fk.OpKind.LAYER_NORM) and in_values[0].size:
        # rounding in x - mean (or x) is amplified by 1/sqrt(var + eps) and scaled by the weight
        x = oracles.up(in_values[0]).astype(np.float64)
        eps = case.params.fields()["eps"] if case.params is not None else 0.0
        spread = np.var(x, axis=-1) if case.op == fk.OpKind.LAYER_NORM else np.mean(x * x, axis=-1)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)           # all-NaN rows
            amplification = float(np.nanmax(1.0 / np.sqrt(spread + eps))) if spread.size else 1.0
            weight = max([float(np.nanmax(np.abs(oracles.up(v).astype(np.float64))))
                          for v in in_values[1:2] if v.size] + [1.0])
        if not np.isfinite(weight):
            weight = np.inf
        term = term * max(amplification, 1.0) * weight if np.isfinite(amplification * weight) else np.inf
    rtol, atol = oracles.tolerance("accumulate", out_dtype, reduced)
    bad = finite & ~(np.abs(a - e) <= atol * term + rtol * np.abs(e))
    assert not bad.any(), (f"{case.op.name}: got {a[bad][:5]} expected {e[bad][:5]} "
                           f"(rtol {rtol}, atol {atol}*{term}): {case.describe()}")


def refusal_of_inputs(case):
    """The error class the oracle expects for the case's inputs and output shape on their own (a
    generator draws some wrong extents on purpose), or None when it expects them to work or cannot
    tell.  For a mutation of the output alone (self_overlap): the kernel may report such an input
    refusal before it looks at the output."""
    oracle = oracles.ORACLES.get(case.op)
    if oracle is None or any(not isinstance(o.view, np.ndarray) or o.huge for o in case.inputs):
        return None
    try:
        oracle.fn([np.array(o.view, copy=True) for o in case.inputs], case.params, case.dtypes[-1],
                  case.out_shape)
    except oracles.ExpectError as exc:
        return exc.cls
    except Exception:            # Skip, or an oracle that cannot evaluate these operands
        return None
    return None


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


# ---- shapes and params of a valid call -----------------------------------------------------------
def draw_shape(draw, min_ndim=0, max_ndim=8, max_size=2048):
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = [draw(st.sampled_from(SIZES)) for _ in range(ndim)]
    while int(np.prod(shape, dtype=np.int64)) > max_size:
        shape[int(np.argmax(shape))] = 1
    return tuple(shape)


def broadcast_from(draw, out_shape):
    """An input shape that broadcasts to out_shape: leading dims dropped, some extents 1."""
    drop = draw(st.integers(0, len(out_shape)))
    return tuple(1 if draw(st.integers(0, 3)) == 0 else s for s in out_shape[drop:])


def valid_params(draw, family, shapes):
    P = fk.params
    if family == "none":
        return draw(st.sampled_from([None, None, None, P.none()]))
    if family == "affine":
        return P.affine(draw(st.floats(-4, 4)), draw(st.floats(-4, 4)))
    if family == "clamp":
        lo = draw(st.integers(-5, 5))
        return P.clamp(lo, lo + draw(st.integers(0, 6)))
    if family == "powi":
        return P.powi(draw(st.integers(-6, 8)))
    if family == "softmax_last_dim":
        return draw(st.sampled_from([None, P.softmax_last_dim()]))
    if family == "norm_last_dim":
        return P.norm_last_dim(draw(st.sampled_from([1e-5, 1e-6, 0.1])))
    ndim = len(shapes[0]) if shapes else 1
    if family == "reduce":
        if draw(st.integers(0, 5)) == 0:
            return None
        dims = draw(st.lists(st.integers(-ndim, ndim - 1), max_size=ndim, unique_by=lambda d: d % max(ndim, 1))) if ndim else []
        # select_last_index is for ARGMAX / ARGMIN: the other reductions refuse it (a ParamsError)
        return P.reduce(tuple(dims), keepdim=draw(st.booleans()),
                        select_last_index=draw(st.integers(0, 3)) == 0)
    if family == "slice":
        starts = [draw(st.integers(-3, 3)) for _ in range(ndim)]
        return P.slice(starts, [s + draw(st.integers(-2, 6)) for s in starts],
                       [draw(st.sampled_from([1, 1, 2, -1, 3])) for _ in range(ndim)])
    if family in ("concat", "index_select", "gather", "scatter"):
        return getattr(P, family)(draw(st.integers(-max(ndim, 1), max(ndim - 1, 0))))
    if family == "scatter_reduce":
        return P.scatter_reduce(draw(st.integers(-max(ndim, 1), max(ndim - 1, 0))),
                                draw(st.sampled_from(("none", "max", "min", "mul"))))
    if family == "cumsum":
        return P.cumsum(draw(st.integers(-max(ndim, 1), max(ndim - 1, 0))), draw(st.booleans()), draw(st.booleans()))
    if family in ("flip", "roll"):                   # roll needs a dim, flip may list none
        dims = draw(st.lists(st.integers(0, max(ndim - 1, 0)), min_size=int(family == "roll"),
                             max_size=max(ndim, 1), unique=True))
        if family == "flip":
            return P.flip(dims)
        return P.roll([draw(st.integers(-9, 9)) for _ in dims], dims)
    if family == "triangular":
        return draw(st.sampled_from([None, P.triangular(draw(st.integers(-4, 4)))]))
    if family == "pad":
        # reflect needs widths below the extent: mostly respect that, sometimes not
        k = draw(st.integers(0, ndim))
        mode = draw(st.sampled_from(["constant", "reflect", "replicate"]))
        tail = shapes[0][len(shapes[0]) - k:] if k else ()
        fit = mode == "reflect" and draw(st.integers(0, 3)) > 0
        width = lambda n: draw(st.integers(0, max(min(3, n - 1), 0) if fit else 3))
        return P.pad([width(n) for n in tail], [width(n) for n in tail], mode, draw(st.floats(-2, 2)))
    if family == "masked_fill":
        return P.masked_fill(draw(st.floats(-5, 5)))
    if family == "write_slice":
        return P.write_slice([0] * ndim if shapes else [], axis=draw(st.integers(0, max(ndim - 1, 0))))
    if family == "reduce_to":
        return P.reduce_to(broadcast_from(draw, shapes[0] if shapes else ()))
    if family == "rope":
        return draw(st.sampled_from([None, P.none(), P.rope(False), P.rope(True)]))
    window = st.sampled_from((-1, -1, 0, 1, 3, 40))
    if family == "flash_attn":
        return P.flash_attn(draw(st.floats(0.01, 2)), causal=draw(st.booleans()),
                            softcap=draw(st.sampled_from((0.0, 0.0, 0.5, 5.0))),
                            window_left=draw(window), window_right=draw(window), top_left=draw(st.booleans()))
    if family == "paged_attn":                       # the block size is the caches' (shapes[1])
        block_size = shapes[1][1] if len(shapes) > 1 and len(shapes[1]) == 4 else draw(st.integers(1, 4))
        return P.paged_attn(draw(st.floats(0.01, 2)), max(block_size, 1),
                            softcap=draw(st.sampled_from((0.0, 0.0, 3.0))), window_left=draw(window))
    if family == "conv2d":
        if draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from([None, P.none()]))

        def one_or_pair(lo, hi):
            a = draw(st.integers(lo, hi))
            return a if draw(st.booleans()) else (a, draw(st.integers(lo, hi)))
        return P.conv2d(one_or_pair(1, 2), one_or_pair(0, 2), one_or_pair(1, 2), draw(st.integers(1, 3)))
    if family == "conv1d":
        if draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from([None, P.none()]))
        padding = draw(st.integers(0, 2))                  # one int, or (begin, end) as ONNX's pads
        padding = padding if draw(st.booleans()) else (padding, draw(st.integers(0, 5)))
        return P.conv1d(draw(st.integers(1, 3)), padding, draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    if family == "conv_transpose2d":               # output_padding below the stride, now and then not
        if draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from([None, P.none()]))
        stride, dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3))), (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        limit = lambda a: max(stride[a], dilation[a]) - (draw(st.integers(0, 9)) > 0)
        return P.conv_transpose2d(stride, pads_begin=(draw(st.integers(0, 2)), draw(st.integers(0, 2))),
                                  pads_end=(draw(st.integers(0, 2)), draw(st.integers(0, 2))), dilation=dilation,
                                  output_padding=(draw(st.integers(0, limit(0))), draw(st.integers(0, limit(1)))),
                                  groups=draw(st.integers(1, 3)))
    if family == "conv2d_backward":                # sizes from a 4-d operand when there is one
        shape = shapes[0] if shapes and len(shapes[0]) == 4 else (1, 1, 5, 5)
        kernel_size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        return P.conv2d_backward(input_size=tuple(shape[2:]), kernel_size=kernel_size,
                                 stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, 2)),
                                 dilation=draw(st.integers(1, 2)), groups=draw(st.integers(1, 3)))
    if family == "matmul":
        return None
    if family == "qmatmul":                          # extents from A (m, k) when there is one
        m, k = shapes[0] if shapes and len(shapes[0]) == 2 else (1, 32)
        quant = draw(st.sampled_from(spec.QUANT_TYPES))
        return P.qmatmul(quant.code, m, draw(st.sampled_from((0, 1, 3))), k)
    if family == "qembedding":                       # a table of 0 to 3 rows of one or two blocks
        quant = draw(st.sampled_from(spec.QUANT_TYPES))
        return P.qembedding(quant.code, draw(st.sampled_from((0, 1, 3))), quant.block_size * draw(st.integers(1, 2)))
    if family == "nf4_matmul":
        m, k = shapes[0] if shapes and len(shapes[0]) == 2 else (1, 64)
        return P.nf4_matmul(m, draw(st.sampled_from((0, 1, 3))), k)
    if family == "causal_conv1d":
        return draw(st.sampled_from([None, P.none(), P.causal_conv1d(), P.causal_conv1d("silu")]))
    if family == "selective_scan":
        return draw(st.sampled_from([None, P.selective_scan(False), P.selective_scan(True)]))
    if family == "ssd_chunk_scan":
        return draw(st.sampled_from([None, P.ssd_chunk_scan(draw(st.integers(1, 9)))]))
    if family == "pool2d":                         # pads below the kernel, as the kernels require
        kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        pad = lambda a: draw(st.integers(0, kernel[a] - 1))
        return P.pool2d(kernel, stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                        pads_begin=(pad(0), pad(1)), pads_end=(pad(0), pad(1)),
                        dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                        ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()))
    if family == "topk":
        n = shapes[0][-1] if shapes and len(shapes[0]) else 1
        return P.topk(draw(st.integers(0, max(n, 0))), largest=draw(st.booleans()), sorted=draw(st.booleans()))
    if family == "cross_entropy":
        if draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from([None, P.none()]))
        return P.cross_entropy(draw(st.sampled_from((-100, 0, 1))), draw(st.sampled_from((0.0, 0.0, 0.1, 1.0))))
    return None


def nonsense_params(draw):
    P = fk.params
    pick = draw(st.integers(0, 11))
    try:
        return [lambda: P.reduce((7, -8), True), lambda: P.powi(-2 ** 31), lambda: P.affine(float("nan"), float("inf")),
                lambda: P.clamp(-1e308, 1e308), lambda: P.matmul(3, 0, 2 ** 40, (5,), fk.MatmulM.rows(3)),
                lambda: P.matmul(1, 1, 1, m_compute=fk.MatmulM.deferred(7)),
                lambda: P.conv2d(5, 9, 3, 7), lambda: P.slice((2 ** 40,), (-2 ** 40,), (-1,)),
                lambda: P.pad((2 ** 40,), (1,), "reflect"), lambda: P.norm_last_dim(float("inf")),
                lambda: P.roll((2 ** 62,), (0,)), lambda: P.triangular(-2 ** 62)][pick]()
    except fk.ParamsError:
        return None


# ---- operands of the ops whose inputs do not just broadcast together --------------------------------
# Each builder: (draw, op, number of inputs) -> (input shapes, params, index extents), where index
# extents maps an index operand's position to the extent its values address.
def _axis_params(draw, op, x):
    """params of op's axis family for x, and the axis they name as a non-negative number."""
    params = valid_params(draw, params_family(op), [x])
    return params, params.fields()["axis"] % len(x)


def _at_most(draw, shape, axis):
    """A shape of the same rank: any extent on the axis, at most shape's elsewhere."""
    return tuple(draw(st.sampled_from(SIZES)) if d == axis else draw(st.integers(0, n)) for d, n in enumerate(shape))


def _one_input(min_ndim=0, max_ndim=8, max_size=2048):
    def build(draw, op, n_in):
        x = draw_shape(draw, min_ndim, max_ndim, max_size)
        return [x], valid_params(draw, params_family(op), [x]), {}
    return build


def _concat(draw, op, n_in):
    shape = list(draw_shape(draw, 1, 5, 256))
    params, axis = _axis_params(draw, op, shape)
    shapes = []
    for _ in range(n_in):
        shape[axis] = draw(st.sampled_from(SIZES))
        shapes.append(tuple(shape))
    return shapes, params, {}


def _index_select(draw, op, n_in):
    x = draw_shape(draw, 1, 4, 256)
    params, axis = _axis_params(draw, op, x)
    return [x, (draw(st.sampled_from(SIZES)),)], params, {1: x[axis]}


def _gather(draw, op, n_in):
    x = draw_shape(draw, 1, 4, 256)
    params, axis = _axis_params(draw, op, x)
    return [x, _at_most(draw, x, axis)], params, {1: x[axis]}


def _scatter_add(draw, op, n_in):
    x = draw_shape(draw, 1, 4, 256)
    params, axis = _axis_params(draw, op, x)
    idx = _at_most(draw, x, axis)
    return [x, idx, tuple(i + draw(st.sampled_from((0, 0, 1))) for i in idx)], params, {1: x[axis]}


def _index_add(draw, op, n_in):
    x = draw_shape(draw, 1, 4, 256)
    params, axis = _axis_params(draw, op, x)
    if draw(st.booleans()):                      # index_add also takes index_select's params
        params = fk.params.index_select(params.fields()["axis"])
    m = draw(st.sampled_from(SIZES))
    return [x, (m,), x[:axis] + (m,) + x[axis + 1:]], params, {1: x[axis]}


def _rope(draw, op, n_in):
    """x [..., S, D] with D even, cos and sin [S, D/2]."""
    s, half = draw(st.sampled_from(SIZES)), draw(st.sampled_from((0, 1, 2, 3, 4, 8)))
    x = draw_shape(draw, 0, 2, 16) + (s, 2 * half)
    return [x, (s, half), (s, half)], valid_params(draw, "rope", [x]), {}


def _heads(draw):
    """(query heads, kv heads): grouped-query attention shares a kv head among 1-3 query heads."""
    kv = draw(st.sampled_from((1, 1, 2)))
    return kv * draw(st.sampled_from((1, 2, 3))), kv


def _flash_attn(draw, op, n_in):
    """q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]; a quarter of the sequences are
    longer than the kernel's 64-row and 64-key tiles."""
    hq, hkv = _heads(draw)
    seq = lambda: draw(st.sampled_from((63, 64, 65, 100, 129) if draw(st.integers(0, 3)) == 0 else SIZES))
    b, sq, sk = draw(st.sampled_from((1, 1, 2, 0))), seq(), seq()
    d, dv = draw(st.sampled_from((0, 1, 2, 4, 8, 13))), draw(st.sampled_from((0, 1, 3, 8)))
    shapes = [(b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, dv)]
    return shapes, valid_params(draw, "flash_attn", shapes), {}


def _flash_attn_masked(draw, op, n_in):
    """FLASH_ATTN's q, k, v with a mask [B|1, Hq|1, Sq|1, Sk] or [0], ALiBi slopes [Hq] or [0] and key
    lengths [B] or [0] (values up to Sk)."""
    shapes, params, _ = _flash_attn(draw, op, 3)
    (b, hq, sq, _), (_, _, sk, _) = shapes[0], shapes[1]
    mask = (0,) if draw(st.booleans()) else tuple(draw(st.sampled_from((n, 1))) for n in (b, hq, sq)) + (sk,)
    alibi, lens = (draw(st.sampled_from((hq, 0))),), (draw(st.sampled_from((b, 0))),)
    return shapes + [mask, alibi, lens], params, {5: sk + 1}


def _paged_attn(draw, op, n_in):
    """q [N, Hq, D] (decode) or, in half the cases, [N, Sq, Hq, D] (a chunk of 1-3 queries), k/v caches
    [blocks, block_size, Hkv, D or Dv], block_table [N, max_blocks] of cache blocks, context_lens [N]
    up to max_blocks * block_size, alibi slopes [Hq] or [0]."""
    hq, hkv = _heads(draw)
    n, d, dv = draw(st.sampled_from((1, 2, 3, 0))), draw(st.sampled_from((0, 1, 4, 8))), draw(st.sampled_from((0, 1, 3, 8)))
    block_size, blocks, max_blocks = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(0, 4))
    chunk = (draw(st.integers(1, 3)),) if draw(st.booleans()) else ()
    shapes = [(n,) + chunk + (hq, d), (blocks, block_size, hkv, d), (blocks, block_size, hkv, dv), (n, max_blocks), (n,),
              (draw(st.sampled_from((hq, 0))),)]
    return shapes, valid_params(draw, "paged_attn", shapes), {3: blocks, 4: max_blocks * block_size + 1}


def _conv2d(draw, op, n_in):
    """x (N, C, H, W), w (O, C/groups, KH, KW) and, on the 4-operand keys, a bias (O,)."""
    params = valid_params(draw, "conv2d", [])
    groups = params.fields()["groups"] if params is not None and params.kind == "conv2d" else 1
    cg, og = draw(st.sampled_from((1, 2, 3, 0))), draw(st.sampled_from((1, 2, 3)))
    x = (draw(st.sampled_from((1, 1, 2, 0))), groups * cg, draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    w = (groups * og, cg, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return [x, w, (w[0],)][:n_in], params, {}


def _conv1d(draw, op, n_in):
    """x (N, C, L), w (O, C/groups, K) and, on the 4-operand keys, a bias (O,)."""
    params = valid_params(draw, "conv1d", [])
    groups = params.fields()["groups"] if params is not None and params.kind == "conv1d" else 1
    cg, og = draw(st.sampled_from((1, 2, 3, 0))), draw(st.sampled_from((1, 2, 3)))
    x = (draw(st.sampled_from((1, 1, 2, 0))), groups * cg, draw(st.integers(1, 40)))
    w = (groups * og, cg, draw(st.integers(1, 4)))
    return [x, w, (w[0],)][:n_in], params, {}


def _conv_transpose2d(draw, op, n_in):
    """x (N, C, H, W), w (C, O/groups, KH, KW) and, on the 4-operand keys, a bias (O,); pads past the
    kernel's reach leave the kernels to refuse an empty output."""
    params = valid_params(draw, "conv_transpose2d", [])
    groups = params.fields()["groups"] if params is not None and params.kind == "conv_transpose2d" else 1
    cg, og = draw(st.sampled_from((1, 2, 3, 0))), draw(st.sampled_from((1, 2, 3, 0)))
    x = (draw(st.sampled_from((1, 1, 2, 0))), groups * cg, draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    w = (groups * cg, og, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return [x, w, (groups * og,)][:n_in], params, {}


def _cross_entropy_backward(draw, op, n_in):
    """logits (N, C), targets (N,) in [0, C), lse (N,), dloss (N,)."""
    n, c = draw(st.sampled_from((0, 1, 2, 5, 17))), draw(st.sampled_from((1, 2, 7, 33)))
    shapes = [(n, c), (n,), (n,), (n,)]
    return shapes, valid_params(draw, "cross_entropy", shapes), {1: c}


def _conv2d_backward(draw, op, n_in):
    """A CONV2D's x (N, C, H, W), w (O, C/groups, KH, KW) and dy (N, O, OH, OW), and its
    params.conv2d_backward (input_size off by one in a tenth of the cases); CONV2D_BACKWARD_INPUT
    takes [dy, w], CONV2D_BACKWARD_WEIGHT [x, dy].  A kernel too large gives dy of a 1x1 output."""
    groups = draw(st.integers(1, 3))
    cg, og = draw(st.sampled_from((1, 2, 3, 0))), draw(st.sampled_from((1, 2, 3)))
    n, h, w_ = draw(st.sampled_from((1, 1, 2, 0))), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, padding, dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))), \
        (draw(st.integers(0, 2)), draw(st.integers(0, 2))), (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    size = oracles.conv2d_output_size((h, w_), (kh, kw), stride, padding, dilation) or (1, 1)
    off = draw(st.sampled_from((0,) * 9 + (1,)))
    params = fk.params.conv2d_backward(input_size=(h + off, w_), kernel_size=(kh, kw), stride=stride,
                                       padding=padding, dilation=dilation, groups=groups)
    x, dy = (n, groups * cg, h, w_), (n, groups * og) + size
    if op == fk.OpKind.CONV2D_BACKWARD_INPUT:
        return [dy, (groups * og, cg, kh, kw)], params, {}
    return [x, dy], params, {}
def _reduce_max_to_backward(draw, op, n_in):
    """x, and dy of the target shape params.reduce_to names."""
    x = draw_shape(draw, 0, 5)
    params = valid_params(draw, "reduce_to", [x])
    return [x, tuple(params.fields()["shape"])], params, {}


def _pad_backward(draw, op, n_in):
    """dy: the shape PAD gives an input of at most 4 dims, with PAD's params."""
    x = draw_shape(draw, 0, 4, 256)
    params = valid_params(draw, "pad", [x])
    try:
        dy = ops.infer_output_shape(fk.OpKind.PAD, [x], params)
    except fk.FuelKernelError:
        dy = x
    return [tuple(dy)], params, {}


def _causal_conv1d(draw, op, n_in):
    """x (B, D, L), weight (D, W) with W from 1 past L, bias (D,)."""
    b, d = draw(st.sampled_from((0, 1, 2, 3))), draw(st.sampled_from((0, 1, 3, 5)))
    length, w = draw(st.sampled_from((0, 1, 2, 7, 33))), draw(st.integers(1, 5))
    return [(b, d, length), (d, w), (d,)], valid_params(draw, "causal_conv1d", []), {}
def _pool2d(draw, op, n_in):
    """x (N, C, H, W) and params.pool2d; a kernel that does not fit, or a dilated window over
    padding only, leaves the kernels to refuse the call."""
    x = (draw(st.sampled_from((1, 1, 2, 0))), draw(st.sampled_from((1, 2, 3, 0))), draw(st.integers(1, 9)),
         draw(st.integers(1, 9)))
    return [x], valid_params(draw, "pool2d", [x]), {}


def _fused_linear(draw, op, n_in):
    """x (M, K), w (K, N), b (N,)."""
    m, k, n = (draw(st.sampled_from((0, 1, 2, 3, 5, 7, 17, 33))) for _ in range(3))
    return [(m, k), (k, n), (n,)], valid_params(draw, "none", []), {}


def _write_slice(draw, op, n_in):
    """The output is the destination (no shape rule gives it): src no larger than it on every dim
    (the ring axis of WRITE_SLICE_ROTATING may start anywhere), a start that mostly fits, and the
    position operand, a 0-d I64 valued in [0, room on the axis].  Returns what valid_shapes does."""
    rotating = op == fk.OpKind.WRITE_SLICE_ROTATING
    dst = draw_shape(draw, 1 if rotating or n_in == 2 else 0, 5, 512)
    src = tuple(draw(st.integers(0, n)) for n in dst)
    axis = draw(st.integers(0, len(dst) - 1)) if dst else 0
    start = [draw(st.integers(0, n - m)) for n, m in zip(dst, src)]
    if rotating:
        start[axis] = draw(st.integers(-9, 9))
    if n_in == 2:
        start[axis] = 0
    if start and draw(st.integers(0, 7)) == 0:             # sometimes past the end: an index error
        start[draw(st.integers(0, len(start) - 1))] += draw(st.integers(1, 3))
    params = fk.params.write_slice(start, axis=axis - len(dst) * draw(st.integers(0, 1)))
    if n_in == 2:
        return [src, ()], params, dst, {1: dst[axis] - src[axis] + 1}
    return [src], params, dst, {}
def _qmatmul(draw, op, n_in):
    """A (m, k) and W: the bytes of n rows of k values in a quant type of spec.QUANT_TYPES (one
    block too many or too few in a tenth of the cases), with its params.qmatmul (m given, or 0: A's
    rows); with a third input, the run-time row count in [0, m]."""
    quant = draw(st.sampled_from(spec.QUANT_TYPES))
    m, n = draw(st.sampled_from((0, 1, 1, 2, 3, 5))), draw(st.sampled_from((0, 1, 2, 3, 7)))
    k = quant.block_size * draw(st.sampled_from((0, 1, 2)))
    extra = draw(st.sampled_from((0,) * 9 + (-1, 1))) * quant.block_bytes
    w_bytes = max(n * (k // quant.block_size) * quant.block_bytes + extra, 0)
    params = fk.params.qmatmul(quant.code, draw(st.sampled_from((m, m, 0))), n, k)
    if n_in == 3:
        return [(m, k), (w_bytes,), ()], params, {2: m + 1}
    return [(m, k), (w_bytes,)], params, {}


def _qembedding(draw, op, n_in):
    """W: the bytes of n rows of k values in a quant type of spec.QUANT_TYPES (one block too many in
    a tenth of the cases) and ids of up to 3 dims in [0, n), with params.qembedding."""
    quant = draw(st.sampled_from(spec.QUANT_TYPES))
    n, k = draw(st.sampled_from((0, 1, 2, 5))), quant.block_size * draw(st.sampled_from((0, 1, 2)))
    extra = draw(st.sampled_from((0,) * 9 + (1,))) * quant.block_bytes
    ids = draw_shape(draw, 0, 3, 12)
    return [(n * (k // quant.block_size) * quant.block_bytes + extra,), ids], \
        fk.params.qembedding(quant.code, n, k), {1: n}


def _nf4_matmul(draw, op, n_in):
    """A (m, k), the NF4 codes (n * k / 2 bytes) and absmax (n * k / 64 values) of W (n, k), with
    params.nf4_matmul (one absmax too many in a tenth of the cases)."""
    m, n = draw(st.sampled_from((0, 1, 1, 2, 3, 5))), draw(st.sampled_from((0, 1, 2, 3, 7)))
    k = spec.NF4_BLOCK * draw(st.sampled_from((0, 1, 2)))
    extra = draw(st.sampled_from((0,) * 9 + (1,)))
    shapes = [(m, k), (n * k // 2,), (n * k // spec.NF4_BLOCK + extra,)]
    params = fk.params.nf4_matmul(draw(st.sampled_from((m, m, 0))), n, k)
    if n_in == 4:                                    # the run-time row count, in [0, m]
        return shapes + [()], params, {3: m + 1}
    return shapes, params, {}


OPERANDS = {
    fk.OpKind.SLICE: _one_input(), fk.OpKind.FLIP: _one_input(), fk.OpKind.ROLL: _one_input(),
    fk.OpKind.CUMSUM: _one_input(), fk.OpKind.TRIU: _one_input(2), fk.OpKind.TRIL: _one_input(2),
    fk.OpKind.PAD: _one_input(max_ndim=4, max_size=256),       # the output grows by up to 6 per dim
    fk.OpKind.CONCAT: _concat, fk.OpKind.INDEX_SELECT: _index_select,
    fk.OpKind.GATHER: _gather, fk.OpKind.SCATTER_ADD: _scatter_add, fk.OpKind.INDEX_ADD: _index_add,
    fk.OpKind.SCATTER: _scatter_add,
    fk.OpKind.ROPE: _rope, fk.OpKind.FLASH_ATTN: _flash_attn, fk.OpKind.PAGED_ATTN: _paged_attn,
    fk.OpKind.FLASH_ATTN_MASKED: _flash_attn_masked,
    fk.OpKind.CONV2D: _conv2d, fk.OpKind.FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD: _cross_entropy_backward,
    fk.OpKind.CONV2D_BACKWARD_INPUT: _conv2d_backward, fk.OpKind.CONV2D_BACKWARD_WEIGHT: _conv2d_backward,
    fk.OpKind.CONV2D: _conv2d,
    # training
    fk.OpKind.REDUCE_SUM_TO: _one_input(max_ndim=5), fk.OpKind.REDUCE_MAX_TO: _one_input(max_ndim=5),
    fk.OpKind.REDUCE_MAX_TO_BACKWARD: _reduce_max_to_backward, fk.OpKind.PAD_BACKWARD: _pad_backward,
    fk.OpKind.FUSED_LINEAR: _fused_linear,
    fk.OpKind.QMATMUL: _qmatmul, fk.OpKind.NF4_MATMUL: _nf4_matmul, fk.OpKind.QEMBEDDING: _qembedding,
    # state-space models (the two scans have two outputs: tests/cpu/ssm fuzzes them)
    fk.OpKind.CAUSAL_CONV1D: _causal_conv1d,
    # pooling
    fk.OpKind.MAX_POOL2D: _pool2d, fk.OpKind.AVG_POOL2D: _pool2d,
    # convolutions
    fk.OpKind.CONV1D: _conv1d, fk.OpKind.CONV_TRANSPOSE2D: _conv_transpose2d,
}


def index_values(shape, extent, dtype, rng, mode):
    """Indices in [0, extent); in 'special' mode, half the time one of them is out of range (negative,
    one past the end, or an int32 extreme) so the kernels' index checks are exercised too."""
    size = int(np.prod(shape, dtype=np.int64))
    flat = rng.integers(0, extent, size) if extent > 0 else np.zeros(size, np.int64)
    if mode == "special" and size and rng.integers(0, 2):
        flat[rng.integers(0, size)] = rng.choice([-1, extent, 2 ** 31 - 1, -2 ** 31])
    return flat.astype(D(dtype).numpy).reshape(shape)


def valid_shapes(draw, op, dtypes):
    """(input shapes, params, output shape, index extents) of a plausible valid call of op on this
    key (index extents: see OPERANDS)."""
    n_in = len(dtypes) - 1
    family = params_family(op)
    if op in (fk.OpKind.WRITE_SLICE, fk.OpKind.WRITE_SLICE_ROTATING):
        return _write_slice(draw, op, n_in)
    if op in OPERANDS:
        shapes, params, index_extents = OPERANDS[op](draw, op, n_in)
        try:
            out = ops.infer_output_shape(op, shapes, params)
        except Exception:
            out = shapes[0]                 # operands that do not fit: the kernel must refuse them
        return shapes, params, tuple(out), index_extents
    if op in REDUCE_OPS and n_in == 1:
        x = draw_shape(draw, 0, 5)
        params = valid_params(draw, "reduce", [x])
        try:
            out = ops.infer_output_shape(op, [x], params)
        except (fk.FuelKernelError, KeyError):
            axes, keep = oracles.reduce_axes(np.empty(x), params)
            out = tuple(1 if d in axes else s for d, s in enumerate(x) if keep or d not in axes)
        return [x], params, out, {}
    if op == fk.OpKind.MATMUL:
        m, k, n = (draw(st.sampled_from((0, 1, 2, 3, 5, 7, 17))) for _ in range(3))
        batch = draw_shape(draw, 0, 2, 16)
        a = broadcast_from(draw, batch) + (m, k)
        b = broadcast_from(draw, batch) + (k, n)
        out = batch + (m, n)
        if n_in == 3:                    # [A, B, count]: the row count is read at run time
            params = fk.params.matmul(m, n, k, batch=batch, m_compute=fk.MatmulM.deferred(2))
            return [a, b, ()], params, out, {}
        params = draw(st.sampled_from(["none", "all", "rows"]))
        if params == "none":             # without params the batch is A's and B's, broadcast
            params = None
            out = tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (m, n)
        else:
            mc = fk.MatmulM.all() if params == "all" else fk.MatmulM.rows(draw(st.integers(0, m)))
            params = fk.params.matmul(m, n, k, batch=batch, m_compute=mc)
        return [a, b], params, out, {}
    if op == fk.OpKind.MATMUL_PACK_B:
        # the output is a byte buffer whose size depends on B's dtype, which no shape rule can
        # infer: ops.matmul_packed_nbytes gives it.  Now and then B of another rank, refused
        ndim = draw(st.sampled_from((2, 2, 2, 2, 1, 3)))
        b = draw_shape(draw, ndim, ndim, 256)
        k, n = ((1,) + b)[-2:]
        return [b], None, (ops.matmul_packed_nbytes(dtypes[0], k, n),), {}
    if op in SOFTMAX_BACKWARD_OPS:                 # y and dy of one shape
        y = draw_shape(draw, 1, 4, 1024)
        return [y, y], valid_params(draw, family, [y]), y, {}
    if op in LAST_DIM_OPS:
        x = draw_shape(draw, 1, 4, 1024)
        extras = [(x[-1],)] * (n_in - 1)
        return [x] + extras, valid_params(draw, family, [x]), x, {}
    out = draw_shape(draw)
    shapes = [broadcast_from(draw, out) for _ in range(n_in)]
    params = valid_params(draw, family, shapes or [out])
    if op not in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE) and op in ops.SCHEMAS:
        if ops.SCHEMAS[op].infer_shape is not ops.broadcast_shape:
            shapes = [out] * n_in            # a schema that does not broadcast decides the output
        try:
            out = ops.infer_output_shape(op, shapes, params)
        except Exception:
            pass
    return shapes, params, tuple(out), {}


# ---- cases ---------------------------------------------------------------------------------------
@st.composite
def cases(draw, bindings, modes=MODES):
    op, dtypes = draw(st.sampled_from(bindings))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    mode = draw(st.sampled_from(modes))
    in_dtypes, out_dtype = list(dtypes[:-1]), dtypes[-1]
    shapes, params, out_shape, index_extents = valid_shapes(draw, op, dtypes)
    value_mode = draw(st.sampled_from(["plain", "plain", "special", "small"]))
    form = draw(st.sampled_from(["call", "call", "run", "dispatch"]))
    in_layouts = [draw(st.sampled_from(INPUT_LAYOUTS)) for _ in shapes]
    out_layout = draw(st.sampled_from(OUTPUT_LAYOUTS))
    misalign_at = -1

    if mode == "too_many_dims":
        extra = draw(st.integers(9 - max(len(out_shape), 0), 11 - max(len(out_shape), 0)))
        out_shape = (1,) * max(extra, 1) + tuple(out_shape)
        shapes = [(1,) * max(extra, 1) + tuple(s) for s in shapes]
        if not shapes:
            mode = "valid"
    if mode == "random_shapes":
        shapes = [draw_shape(draw, 0, 4, 256) for _ in shapes]
        out_shape = draw_shape(draw, 0, 4, 256)
        form = draw(st.sampled_from(["call", "dispatch"]))
    if mode == "wrong_dtype" and (in_dtypes or out_dtype is not None):
        k = draw(st.integers(0, len(in_dtypes)))
        current = in_dtypes[k] if k < len(in_dtypes) else out_dtype
        other = draw(st.sampled_from([d for d in D if d != current]))
        if k < len(in_dtypes):
            in_dtypes[k] = other
        else:
            out_dtype = other
        form = draw(st.sampled_from(["call", "run"]))
    if mode == "wrong_dtype_dispatch":
        k = draw(st.integers(0, len(in_dtypes) - 1)) if in_dtypes else 0
        if in_dtypes:
            in_dtypes[k] = draw(st.sampled_from(list(D)))
        form = "dispatch"
    if mode == "misaligned":
        sizes = [np.dtype(D(d).numpy).itemsize for d in in_dtypes + [out_dtype]]
        wide = [i for i, s in enumerate(sizes) if s > 1]
        if wide:
            misalign_at = draw(st.sampled_from(wide))
        else:
            mode = "valid"
        form = draw(st.sampled_from(["call", "run"]))
    if mode in MUST_FAIL and form == "dispatch":
        form = "call"
    if form == "dispatch" and mode == "valid" and draw(st.integers(0, 3)) == 0:
        try:
            ops.infer_output_dtype(op, in_dtypes, params)
            ops.infer_output_shape(op, shapes, params)
            form = "dispatch_alloc"
        except Exception:
            pass

    inputs = []
    for i, (shape, dt, layout) in enumerate(zip(shapes, in_dtypes, in_layouts)):
        o = guarded(shape, D(dt).numpy, layout, rng, misalign=misalign_at == i)
        if i in index_extents and D(dt) in (D.I32, D.I64):
            fill(o, index_values(shape, index_extents[i], dt, rng, value_mode))
        else:
            fill(o, random_values(shape, dt, rng, value_mode))
        inputs.append(o)
    output = None
    aliased = False
    if form != "dispatch_alloc":
        output = guarded(out_shape, D(out_dtype).numpy, out_layout, rng, misalign=misalign_at == len(in_dtypes))
    if misalign_at >= 0:
        target = inputs[misalign_at] if misalign_at < len(inputs) else output
        if target is None or target.view.flags.aligned:     # NumPy calls empty arrays aligned
            mode = "valid"
    if mode == "alias" and inputs:
        src = inputs[0]
        out_nd = np.dtype(D(out_dtype).numpy)
        exact = (draw(st.booleans()) and src.view.shape == tuple(out_shape) and src.view.itemsize == out_nd.itemsize)
        shift = 0 if exact else draw(st.integers(-2, 2)) * out_nd.itemsize
        base_offset = src.view.__array_interface__["data"][0] - src.root.__array_interface__["data"][0]
        offset = base_offset + shift
        strides = src.view.strides if exact else None
        if strides is None:
            strides = tuple(s * out_nd.itemsize for s in _c_strides(out_shape))
        span = _span(out_shape, strides)
        if offset + span[0] < 0 or offset + span[1] + out_nd.itemsize > src.root.size or offset % out_nd.itemsize:
            offset, strides = base_offset - base_offset % out_nd.itemsize, tuple(s * out_nd.itemsize for s in _c_strides(out_shape))
            span = _span(out_shape, strides)
            if offset + span[0] < 0 or offset + span[1] + out_nd.itemsize > src.root.size:
                offset = -1
        if offset >= 0:
            view = np.ndarray(out_shape, out_nd, buffer=src.root, offset=offset, strides=strides)
            footprint = np.zeros(src.root.shape, dtype=bool)
            footprint[:] = True                        # the aliased input may legitimately change
            addressed = element_addresses(view, src.root)
            output = Operand(src.root, view, footprint, len(np.unique(addressed)) != addressed.size)
            aliased = True
    if mode == "read_only" and output is not None:
        output.view.flags.writeable = False
    if mode == "non_array":
        which = draw(st.integers(0, len(inputs)))
        bogus = draw(st.sampled_from([[1.0, 2.0], "text", object(), 3.5, {"a": 1}]))
        fake = Operand(np.zeros(1, np.uint8), bogus, np.zeros(1, bool))
        if which < len(inputs):
            inputs[which] = fake
        elif output is not None:
            output = fake
    extra_outputs = []
    if mode == "wrong_count":
        how = draw(st.sampled_from(["more", "fewer", "two_outputs"]))
        if how == "more":
            o = guarded(shapes[0] if shapes else out_shape, D(in_dtypes[0] if in_dtypes else out_dtype).numpy,
                        "contiguous", rng)
            inputs.append(o)
        elif how == "fewer" and inputs:
            inputs.pop()
        else:
            extra_outputs.append(guarded(out_shape, D(out_dtype).numpy, "contiguous", rng))
            form = "run"
    if mode == "bad_params":
        params = nonsense_params(draw) if draw(st.booleans()) else valid_params(
            draw, draw(st.sampled_from(["reduce", "affine", "powi", "slice", "pad", "matmul", "norm_last_dim", "roll"])),
            shapes or [out_shape])
    if mode in ("byte_order", "self_overlap", "huge_output"):
        if form == "dispatch_alloc":
            form = "call"
        mode, inputs, output = _adversarial(draw, mode, inputs, output, form)
    if form == "dispatch_alloc" and mode != "valid":
        form = "dispatch"
    return Case(op, tuple(dtypes), mode, form, inputs, output, params, extra_outputs, aliased, tuple(out_shape))


def has_zero_stride_axis(view):
    """A written axis of extent > 1 with stride 0: the output overlaps itself (refused by every kernel)."""
    if not isinstance(view, np.ndarray) or view.size == 0:
        return False
    return any(n > 1 and s == 0 for n, s in zip(view.shape, view.strides))


def stride_zero(operand, extents):
    """`operand` viewed with the given axes set to stride 0 and these extents: the same addressed
    memory (index 0 on each such axis), so footprint and guards stay valid."""
    view = operand.view
    shape, strides = list(view.shape), list(view.strides)
    for axis, extent in extents.items():
        shape[axis], strides[axis] = extent, 0
    huge = int(np.prod([float(n) for n in shape])) > 2 ** 24
    footprint = np.zeros(operand.root.shape, dtype=bool)
    corner = view[tuple(slice(0, 1) if a in extents else slice(None) for a in range(view.ndim))]
    addressed = element_addresses(corner, operand.root)
    for b in range(view.itemsize):
        footprint[addressed + b] = True
    # through unsigned ints of the item size: as_strided spells the dtype as an array-interface
    # string, which NumPy cannot read back for ml_dtypes' float8_e5m2 ('<f1')
    out = np.lib.stride_tricks.as_strided(view.view(f"u{view.itemsize}"), tuple(shape),
                                          tuple(strides)).view(view.dtype)
    return Operand(operand.root, out, footprint, self_overlapping=True, huge=huge)


def _adversarial(draw, mode, inputs, output, form):
    """Apply one of the adversarial-layout mutations; returns (mode, inputs, output)."""
    if mode == "byte_order":
        wide = [i for i, o in enumerate(inputs + [output]) if o is not None and o.view.itemsize > 1]
        if not wide:
            return "valid", inputs, output
        i = draw(st.sampled_from(wide))
        target = inputs[i] if i < len(inputs) else output
        swapped = Operand(target.root, target.view.view(target.view.dtype.newbyteorder()), target.footprint,
                          target.self_overlapping)
        if i < len(inputs):
            inputs[i] = swapped
        else:
            output = swapped
        return mode, inputs, output
    if mode in ("self_overlap", "huge_output"):
        if output is None or output.view.ndim == 0 or 0 in output.view.shape:
            return "valid", inputs, output
        # self_overlap keeps the shape (an axis already longer than 1 gets stride 0)
        axes = [a for a, n in enumerate(output.view.shape) if n > 1 or mode == "huge_output"]
        if not axes:
            return "valid", inputs, output
        axis = draw(st.sampled_from(axes))
        extent = draw(st.sampled_from(HUGE_EXTENTS)) if mode == "huge_output" else output.view.shape[axis]
        if mode == "huge_output":                # NumPy describes views of at most 2**63-1 bytes
            back = axis - output.view.ndim          # operands match right-aligned: the axis that grows
            for o in [output] + inputs:
                v = o.view
                if isinstance(v, np.ndarray) and v.ndim >= -back:
                    rest = int(np.prod(v.shape, dtype=object)) // max(v.shape[v.ndim + back], 1)
                    extent = min(extent, (2 ** 63 - 1) // max(rest * v.itemsize, 1))
            extent = max(extent, 2)
        out_extent = output.view.shape[axis]
        output = stride_zero(output, {axis: extent})
        if mode == "huge_output":                # inputs that match the output's axis grow with it
            back = axis - output.view.ndim
            for k, o in enumerate(inputs):
                v = o.view
                if isinstance(v, np.ndarray) and v.ndim >= -back and v.shape[back] == out_extent \
                        and 0 not in v.shape and draw(st.booleans()):
                    inputs[k] = stride_zero(o, {v.ndim + back: extent})
        return mode, inputs, output
    return mode, inputs, output


def _c_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _span(shape, strides):
    if any(s == 0 for s in shape):
        return (0, 0)
    lo = sum(min(0, st * (s - 1)) for st, s in zip(strides, shape))
    hi = sum(max(0, st * (s - 1)) for st, s in zip(strides, shape))
    return (lo, hi)
