"""Property-based fuzzing of the public call API over every binding the live table holds.

Bindings are drawn from fk.bindings().coverage() at run time, so kernel families merged later are
fuzzed without touching this file.  Each case is a valid call or one mutation of it (wrong dtype,
operand count, read-only or aliased output, more than 8 dims, misalignment, a non-array operand,
nonsense params, unrelated shapes).  Property (fuzzing.run_case): the call either matches the op's
oracle (tests/oracles.py) or raises a FuelKernelError; it never crashes the process; on an
exception the caller's output is byte-for-byte unchanged; on success nothing outside the output
view and no input changed.

Case counts: FUEL_KERNEL_FUZZ_EXAMPLES overrides; FUEL_KERNEL_FUZZ_LONG=1 runs 100,000 cases in
test_every_binding (plus the focused tests); the default is a few thousand in all, well under a
minute on one core.
"""
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuel_kernel as fk
from fuel_kernel import ops

import oracles
from fuzzing import (INPUT_LAYOUTS, LAST_DIM_OPS, OUTPUT_LAYOUTS, REDUCE_OPS, SIZES, Case, fill,
                     guarded, live_bindings, params_family, random_values, run_case)

D = fk.DType
LONG = os.environ.get("FUEL_KERNEL_FUZZ_LONG", "") not in ("", "0")
EXAMPLES = int(os.environ.get("FUEL_KERNEL_FUZZ_EXAMPLES", 100_000 if LONG else 2500))
MUST_FAIL = ("wrong_dtype", "wrong_count", "read_only", "too_many_dims", "misaligned", "non_array")
MODES = ("valid",) * 8 + MUST_FAIL + ("alias", "alias", "bad_params", "random_shapes",
                                     "wrong_dtype_dispatch")
STATS = {"cases": 0, "ok": 0, "error": 0, "skip": 0, "seconds": 0.0}


def fuzz_settings(n):
    return settings(max_examples=n, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print(f"\nfuzz: {STATS['cases']} cases ({STATS['ok']} matched an oracle, {STATS['error']} raised a "
          f"typed error, {STATS['skip']} without oracle verdict) in {STATS['seconds']:.1f} s")


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
        return P.reduce(tuple(dims), keepdim=draw(st.booleans()))
    if family == "slice":
        starts = [draw(st.integers(-3, 3)) for _ in range(ndim)]
        return P.slice(starts, [s + draw(st.integers(-2, 6)) for s in starts],
                       [draw(st.sampled_from([1, 1, 2, -1, 3])) for _ in range(ndim)])
    if family in ("concat", "index_select", "gather", "scatter"):
        return getattr(P, family)(draw(st.integers(-max(ndim, 1), max(ndim - 1, 0))))
    if family == "cumsum":
        return P.cumsum(draw(st.integers(-max(ndim, 1), max(ndim - 1, 0))), draw(st.booleans()), draw(st.booleans()))
    if family in ("flip", "roll"):
        dims = draw(st.lists(st.integers(0, max(ndim - 1, 0)), max_size=max(ndim, 1), unique=True))
        if family == "flip":
            return P.flip(dims)
        return P.roll([draw(st.integers(-9, 9)) for _ in dims], dims)
    if family == "triangular":
        return P.triangular(draw(st.integers(-4, 4)))
    if family == "pad":
        k = draw(st.integers(0, ndim))
        return P.pad([draw(st.integers(0, 3)) for _ in range(k)], [draw(st.integers(0, 3)) for _ in range(k)],
                     draw(st.sampled_from(["constant", "reflect", "replicate"])), draw(st.floats(-2, 2)))
    if family == "masked_fill":
        return P.masked_fill(draw(st.floats(-5, 5)))
    if family == "rope":
        return P.rope(draw(st.booleans()))
    if family == "flash_attn":
        return P.flash_attn(draw(st.floats(0.01, 2)), causal=draw(st.booleans()),
                            window_left=draw(st.integers(-1, 4)), window_right=draw(st.integers(-1, 4)))
    if family == "paged_attn":
        return P.paged_attn(draw(st.floats(0.01, 2)), draw(st.integers(1, 4)))
    if family == "conv2d":
        return P.conv2d(draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2)), 1)
    if family == "matmul":
        return None
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


def valid_shapes(draw, op, dtypes):
    """(input shapes, params, output shape) of a plausible valid call of op on this key."""
    n_in = len(dtypes) - 1
    family = params_family(op)
    if op in REDUCE_OPS and n_in == 1:
        x = draw_shape(draw, 0, 5)
        params = valid_params(draw, "reduce", [x])
        try:
            out = ops.infer_output_shape(op, [x], params)
        except (fk.FuelKernelError, KeyError):
            axes, keep = oracles.reduce_axes(np.empty(x), params)
            out = tuple(1 if d in axes else s for d, s in enumerate(x) if keep or d not in axes)
        return [x], params, out
    if op == fk.OpKind.MATMUL and n_in == 2:
        m, k, n = (draw(st.sampled_from((0, 1, 2, 3, 5, 7, 17))) for _ in range(3))
        batch = draw_shape(draw, 0, 2, 16)
        a = broadcast_from(draw, batch) + (m, k)
        b = broadcast_from(draw, batch) + (k, n)
        out = batch + (m, n)
        params = draw(st.sampled_from(["none", "all", "rows"]))
        if params == "none":
            params = None
        else:
            mc = fk.MatmulM.all() if params == "all" else fk.MatmulM.rows(draw(st.integers(0, m)))
            params = fk.params.matmul(m, n, k, batch=batch, m_compute=mc)
        return [a, b], params, out
    if op in LAST_DIM_OPS:
        x = draw_shape(draw, 1, 4, 1024)
        extras = [(x[-1],)] * (n_in - 1)
        return [x] + extras, valid_params(draw, family, [x]), x
    out = draw_shape(draw)
    shapes = [broadcast_from(draw, out) for _ in range(n_in)]
    params = valid_params(draw, family, shapes or [out])
    if op not in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE) and op in ops.SCHEMAS:
        if ops.SCHEMAS[op].infer_shape is not ops.broadcast_shape:
            shapes = [out] * n_in            # movement ops: same-shape inputs, the schema decides
        try:
            out = ops.infer_output_shape(op, shapes, params)
        except Exception:
            pass
    return shapes, params, tuple(out)


# ---- cases ---------------------------------------------------------------------------------------
@st.composite
def cases(draw, bindings):
    op, dtypes = draw(st.sampled_from(bindings))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    mode = draw(st.sampled_from(MODES))
    in_dtypes, out_dtype = list(dtypes[:-1]), dtypes[-1]
    shapes, params, out_shape = valid_shapes(draw, op, dtypes)
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
            from fuzzing import Operand
            output = Operand(src.root, view, footprint, _self_overlapping(view))
            aliased = True
    if mode == "read_only" and output is not None:
        output.view.flags.writeable = False
    if mode == "non_array":
        which = draw(st.integers(0, len(inputs)))
        bogus = draw(st.sampled_from([[1.0, 2.0], "text", object(), 3.5, {"a": 1}]))
        from fuzzing import Operand
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
    if form == "dispatch_alloc" and mode != "valid":
        form = "dispatch"
    return Case(op, tuple(dtypes), mode, form, inputs, output, params, extra_outputs, aliased, tuple(out_shape))


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


def _self_overlapping(view):
    return any(st == 0 and s > 1 for st, s in zip(view.strides, view.shape))


def execute(case):
    start = time.perf_counter()
    outcome = run_case(case)
    STATS["seconds"] += time.perf_counter() - start
    STATS["cases"] += 1
    STATS[outcome] += 1


# ---- the properties ------------------------------------------------------------------------------
BINDINGS = live_bindings()


@fuzz_settings(EXAMPLES)
@given(st.data())
def test_every_binding(data):
    """Any binding of the live table, any mode."""
    execute(data.draw(cases(live_bindings())))


@fuzz_settings(max(EXAMPLES // 10, 200))
@given(st.data())
def test_oracle_ops_valid_calls(data):
    """Valid calls only, on ops that have an oracle: weighted so each of them is hit often."""
    bindings = [b for b in live_bindings() if b[0] in oracles.ORACLES]
    case = data.draw(cases(bindings).filter(lambda c: c.mode == "valid"))
    execute(case)


def test_coverage_list_is_live():
    """The fuzzer draws from the snapshot, so a binding registered now is fuzzed too."""
    backend_rows = live_bindings()
    assert (fk.OpKind.CAST, (D.F32, D.F64)) in backend_rows
    assert len(backend_rows) == len({b for b in backend_rows})
    assert all(op in oracles.ORACLES for op, _ in backend_rows if op in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE))
