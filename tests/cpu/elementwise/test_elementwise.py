"""Elementwise kernels (unary, binary, compare, where), tested from the binding table itself.

Every registered binding of an elementwise op is run on every layout of support.LAYOUTS (plus
rank-broadcast, 0-d scalar, strided-output and a tiled transposed case) and compared with a NumPy
oracle (ml_dtypes for BF16) at the precision the binding claims.  A binding whose op has no
oracle here fails test_every_binding_has_a_case.  Error paths check that the caller's output is
left untouched.
"""
import math
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import (TRANSCENDENTAL_UNARY, activation_grad, compute_dtype, infinite_dy_meets_underflow,
                     softmax_last_dim, trunc_divide)
from extension_build import child_env
from support import LAYOUTS, assert_same, cpu_vendor, make_operand, random_values

D = fk.DType
Op = fk.OpKind

UNARY = (Op.NEG, Op.ABS, Op.SQR, Op.SQRT, Op.RSQRT, Op.RECIP, Op.EXP, Op.LOG, Op.SIN, Op.COS,
         Op.TANH, Op.SIGMOID, Op.RELU, Op.SILU, Op.GELU, Op.GELU_ERF, Op.ERF, Op.STEP, Op.FLOOR,
         Op.CEIL, Op.ROUND, Op.SIGN)
BINARY = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAXIMUM, Op.MINIMUM, Op.POW, Op.REM, Op.FMOD)
INT_BINARY_ONLY = (Op.TRUNC_DIV,)        # C's truncating division: integers only
COMPARE = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
PARAMS_OPS = (Op.AFFINE, Op.CLAMP, Op.POWI)
# the activation backward ops: inputs (x, dy), dx = dy * f'(x)
BACKWARD = (Op.GELU_BACKWARD, Op.GELU_ERF_BACKWARD, Op.SILU_BACKWARD, Op.SIGMOID_BACKWARD,
            Op.TANH_BACKWARD, Op.RELU_BACKWARD, Op.POWI_BACKWARD)
ELEMENTWISE = UNARY + BINARY + INT_BINARY_ONLY + COMPARE + (Op.WHERE,) + PARAMS_OPS + BACKWARD

SMALL = (6, 37)
TILED = (80, 100)       # big enough that a transposed operand takes the tiled walk

OP_PARAMS = {
    Op.AFFINE: fk.params.affine(1.5, -0.25),
    Op.CLAMP: fk.params.clamp(-1.5, 2.25),
}
CLAMP_INT = fk.params.clamp(-100.5, 1000.25)
POWI_FLOAT = fk.params.powi(-3)
POWI_INT = fk.params.powi(3)


def params_for(op, dtype):
    if op in (Op.POWI, Op.POWI_BACKWARD):
        return POWI_FLOAT if dtype.is_float else POWI_INT
    if op == Op.CLAMP and not dtype.is_float:
        return CLAMP_INT
    return OP_PARAMS.get(op)


def elementwise_bindings():
    """The CPU backend's own elementwise bindings (other tests register extras elsewhere)."""
    return [k for k in fk.bindings() if k.op in ELEMENTWISE and k.backend == fk.Backend.CPU
            and k.source == "native"]


# ---- oracles ---------------------------------------------------------------------------------------
# the transcendental references are oracles.py's (TRANSCENDENTAL_UNARY), run here in a wider dtype
# np.longdouble has these on x86 (80-bit): a reference accurate well beyond F64
LONGDOUBLE_OK = (Op.EXP, Op.LOG, Op.SIN, Op.COS, Op.TANH, Op.SIGMOID, Op.SILU, Op.GELU, Op.RSQRT, Op.POWI)

EXACT_UNARY = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.SQR: lambda x: x * x, Op.SQRT: np.sqrt,
    Op.RECIP: lambda x: np.ones_like(x) / x,
    Op.RELU: lambda x: np.where(x > 0, x, np.where(np.isnan(x), x, np.zeros_like(x))),
    Op.STEP: lambda x: np.heaviside(x, np.zeros_like(x)),
    Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.ROUND: np.round, Op.SIGN: np.sign,
}
INT_UNARY = {Op.NEG: np.negative, Op.ABS: np.abs, Op.SQR: lambda x: x * x, Op.SIGN: np.sign,
             Op.RELU: lambda x: np.maximum(x, np.zeros_like(x))}

FLOAT_BINARY = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
                Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum, Op.REM: np.remainder, Op.FMOD: np.fmod}
INT_BINARY = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.floor_divide,
              Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum, Op.REM: np.remainder, Op.POW: np.power,
              Op.FMOD: np.fmod, Op.TRUNC_DIV: trunc_divide}
BOOL_BINARY = {Op.ADD: np.logical_or, Op.MUL: np.logical_and, Op.MAXIMUM: np.logical_or,
               Op.MINIMUM: np.logical_and}
COMPARE_FN = {Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
              Op.GT: np.greater, Op.GE: np.greater_equal}


def oracle(op, dtypes, inputs, params):
    """(expected array, 'exact' | 'ulp' | 'rel'): the reference result for one binding."""
    dtype = dtypes[-1]
    nd = dtype.numpy
    with np.errstate(all="ignore"):
        if op in COMPARE_FN:
            a, b = (x.astype(compute_dtype(dtypes[0])) for x in inputs)
            return COMPARE_FN[op](a, b), "exact"
        if op == Op.WHERE:
            return np.where(inputs[0], inputs[1], inputs[2]), "exact"
        if not dtype.is_float:
            if dtype == D.BOOL:
                return BOOL_BINARY[op](*inputs), "exact"
            if op in INT_BINARY:
                return INT_BINARY[op](*inputs).astype(nd), "exact"
            if op in INT_UNARY:
                return INT_UNARY[op](inputs[0]).astype(nd), "exact"
            if op == Op.CLAMP:
                info = np.iinfo(nd)
                f = params.fields()
                lo = max(math.ceil(f["min"]), int(info.min))
                hi = min(math.floor(f["max"]), int(info.max))
                return np.clip(inputs[0].astype(np.int64), lo, hi).astype(nd), "exact"
            if op == Op.POWI:
                return np.power(inputs[0], params.fields()["exp"]).astype(nd), "exact"
            raise NotImplementedError(op)
        if op in BACKWARD:
            return backward_oracle(op, dtype, inputs, params)
        ct = compute_dtype(dtype).type
        xs = [x.astype(ct) for x in inputs]
        if op in FLOAT_BINARY:
            return FLOAT_BINARY[op](*xs).astype(nd), "exact"
        if op in EXACT_UNARY:
            return EXACT_UNARY[op](xs[0]).astype(nd), "exact"
        if op == Op.AFFINE:
            f = params.fields()
            return (xs[0] * ct(f["mul"]) + ct(f["add"])).astype(nd), "exact"
        if op == Op.CLAMP:
            f = params.fields()
            return np.clip(xs[0], ct(f["min"]), ct(f["max"])).astype(nd), "exact"
        # transcendental: a higher-precision reference, rounded once to the dtype
        wide = np.longdouble if dtype == D.F64 and op in LONGDOUBLE_OK + (Op.POW,) else np.float64
        xw = [x.astype(wide) for x in inputs]
        if op == Op.POW:
            ref = np.power(xw[0], xw[1])
        elif op == Op.POWI:
            ref = np.power(xw[0], wide(params.fields()["exp"]))
        else:
            ref = TRANSCENDENTAL_UNARY[op](xw[0])
        ref = np.asarray(ref)
        if dtype == D.BF16:
            ref = ref.astype(np.float64).astype(np.float32)
        return ref.astype(nd), ("rel" if op in (Op.GELU, Op.GELU_ERF) and dtype == D.F64 else "ulp")


def backward_oracle(op, dtype, inputs, params):
    """An activation backward op in long double: (dx rounded to dtype, ("scaled", dx, x, dy, |dy| M)),
    RELU_BACKWARD exact."""
    x, dy = (np.asarray(v).astype(np.longdouble) for v in inputs)
    exp = params.fields()["exp"] if op == Op.POWI_BACKWARD else None
    exact, scale = activation_grad(op, x, dy, exp, overflow_at=np.finfo(compute_dtype(dtype)).max)
    rounded = exact.astype(np.float32 if dtype == D.BF16 else np.float64).astype(dtype.numpy)
    if op == Op.RELU_BACKWARD:
        return rounded, "exact"
    return rounded, ("scaled", exact, x, dy, scale)


def half_subnormal(dtype):
    finfo = ml_dtypes.finfo if dtype == D.BF16 else np.finfo
    return np.longdouble(float(finfo(dtype.numpy).smallest_subnormal)) / 2     # F64's halves only in long double


def check_scaled(out, rounded, mode, claim, dtype, op):
    """|out - dx| <= max_rel |dy| M + max_abs |dy| + half the smallest subnormal, NaN where dx is
    NaN, and the rounded dx where that overflows; an infinite dy meeting an underflowed f' is a
    convention (inf * 0) and is left out."""
    _, exact, x, dy, scale = (np.broadcast_to(np.asarray(m), out.shape) if i else m for i, m in enumerate(mode))
    skip = infinite_dy_meets_underflow(op, x, dy, compute_dtype(dtype))
    a = out.astype(np.longdouble)
    nan_a, nan_e = np.isnan(a) & ~skip, np.isnan(exact) & ~skip
    assert (nan_a == nan_e).all(), f"NaN mismatch at {np.argwhere(nan_a != nan_e)[:5].tolist()}"
    bound = claim.max_rel * scale + claim.max_abs * np.abs(dy) + half_subnormal(dtype)
    with np.errstate(all="ignore"):
        ok = (a == rounded.astype(np.longdouble)) | (np.abs(a - exact) <= bound) | np.isnan(exact) | skip
        ok &= ~np.isinf(exact) | (a == exact) | skip
    assert ok.all(), (f"beyond the claim at {np.argwhere(~ok)[:5].tolist()}: got {a[~ok][:5]} expected "
                      f"{exact[~ok][:5]} bound {bound[~ok][:5]} x {x[~ok][:5]}")


def check(kernel, inputs, out, params, context):
    op, dtypes = kernel.op, kernel.dtypes
    expected, mode = oracle(op, dtypes, [np.asarray(x) for x in inputs], params)
    expected = np.broadcast_to(expected, out.shape)
    claim = kernel.precision
    dtype = dtypes[-1]
    try:
        if isinstance(mode, tuple):
            check_scaled(out, expected, mode, claim, dtype, op)
        elif mode == "exact" or claim.exact:
            assert_same(out, expected, dtype)
        elif mode == "rel":
            a, e = out.astype(np.float64), expected.astype(np.float64)
            assert (np.isnan(a) == np.isnan(e)).all()
            fin = ~np.isnan(e) & (a != e)
            assert (np.abs(a - e)[fin] <= np.maximum(claim.max_rel * np.abs(e[fin]), claim.max_abs)).all()
        else:
            # ERF / GELU_ERF in F64 have only an F64 oracle (math.erf): one more ulp of slack
            slack = 1 if dtype == D.F64 and op in (Op.ERF, Op.GELU_ERF) else 0
            assert_same(out, expected, dtype, ulp=claim.max_ulp + slack)
    except AssertionError as exc:
        raise AssertionError(f"{kernel!r} {context}: {exc}") from None


# ---- inputs -------------------------------------------------------------------------------------------
def values(op, position, shape, dtype, rng):
    """Random operand values with the special cases each op should see."""
    v = np.array(random_values(shape, dtype, rng))
    flat = v.reshape(-1)
    if not dtype.is_float and not dtype.is_float8 and dtype != D.BOOL and flat.size >= 4:
        info = np.iinfo(dtype.numpy)
        flat[:4] = [info.min, info.max, 0, (-1 if info.min < 0 else 1)]   # wrap-around and MIN // -1
        rng.shuffle(flat)
    if op in (Op.DIV, Op.REM, Op.FMOD, Op.TRUNC_DIV) and position == 1 and not dtype.is_float:
        flat[flat == 0] = 1
    if op == Op.POW and position == 1 and not dtype.is_float:
        flat[...] = rng.integers(0, 9, flat.size)
    if op == Op.WHERE and position == 0:
        return v.astype(np.bool_)
    return v


def run_binding(kernel, layout, shape, rng, out_layout="contiguous"):
    dtypes = kernel.dtypes
    n_in = kernel.n_inputs
    vals = [values(kernel.op, i, shape, dtypes[i], rng) for i in range(n_in)]
    inputs = [make_operand(shape, dtypes[i], layout, rng, values=vals[i]) for i in range(n_in)]
    params = params_for(kernel.op, dtypes[-1])
    out = make_operand(shape, dtypes[-1], out_layout, rng)
    result = kernel(*inputs, out=out, params=params)
    assert result is out
    check(kernel, inputs, out, params, f"layout={layout} out={out_layout} shape={shape}")


BINDINGS = elementwise_bindings()
IDS = [f"{k.op.short_name}-{'-'.join(d.short_name for d in k.dtypes)}" for k in BINDINGS]


@pytest.mark.parametrize("kernel", BINDINGS, ids=IDS)
def test_binding_against_numpy(kernel, rng):
    for layout in LAYOUTS:
        run_binding(kernel, layout, SMALL, rng)
    run_binding(kernel, "strided", SMALL, rng, out_layout="strided")
    run_binding(kernel, "transposed", TILED, rng)
    run_binding(kernel, "contiguous", TILED, rng, out_layout="transposed")
    # rank broadcast and 0-d scalars on the last input (the stride-0 vector paths)
    dtypes = kernel.dtypes
    n_in = kernel.n_inputs
    for small in ((SMALL[-1],), ()):
        inputs = [make_operand(SMALL, dtypes[i], "contiguous", rng, values=values(kernel.op, i, SMALL, dtypes[i], rng))
                  for i in range(n_in - 1)]
        inputs.append(np.asarray(values(kernel.op, n_in - 1, small, dtypes[n_in - 1], rng)))
        params = params_for(kernel.op, dtypes[-1])
        out = np.empty(SMALL, dtype=dtypes[-1].numpy)
        kernel(*inputs, out=out, params=params)
        check(kernel, inputs, out, params, f"last input of shape {small}")


SAME_DTYPE = [(k, i) for k, i in zip(BINDINGS, IDS) if k.dtypes[0] == k.dtypes[-1]]


@pytest.mark.parametrize("kernel", [k for k, _ in SAME_DTYPE], ids=[i for _, i in SAME_DTYPE])
def test_in_place_over_first_input(kernel, rng):
    """FK_CAP_INPLACE: the output may be exactly the first input's view (when dtypes agree)."""
    dtypes = kernel.dtypes
    n_in = kernel.n_inputs
    inputs = [make_operand(SMALL, dtypes[i], "strided", rng, values=values(kernel.op, i, SMALL, dtypes[i], rng))
              for i in range(n_in)]
    before = [x.copy() for x in inputs]
    params = params_for(kernel.op, dtypes[-1])
    kernel(*inputs, out=inputs[0], params=params)
    check(kernel, before, inputs[0], params, "in place")


LONG_ROW = 3000          # past the row length from which contiguous rows align their output


def output_at(n, dtype, offset_bytes):
    """A 1-D output of n elements starting offset_bytes past a 64-byte boundary."""
    isz = dtype.numpy.itemsize
    raw = np.empty(n * isz + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    return raw[start:start + n * isz].view(dtype.numpy)


@pytest.mark.parametrize("kernel", BINDINGS, ids=IDS)
def test_long_rows_give_the_same_bits_at_every_output_alignment(kernel, rng):
    """A long contiguous row runs its head up to the output's next 64-byte boundary as a separate
    call: the result must be bit for bit that of short rows (which never split), at each offset."""
    dtypes = kernel.dtypes
    n_in = kernel.n_inputs
    params = params_for(kernel.op, dtypes[-1])
    out_dtype = dtypes[-1]
    for broadcast_last in (False, True):
        shapes = [(LONG_ROW,)] * n_in
        if broadcast_last and n_in > 1:
            shapes[-1] = ()
        elif broadcast_last:
            continue
        inputs = [np.asarray(values(kernel.op, i, shapes[i], dtypes[i], rng)) for i in range(n_in)]
        pieces = np.empty(LONG_ROW, out_dtype.numpy)
        for start in range(0, LONG_ROW, 500):   # rows shorter than the alignment threshold
            part = [x if x.ndim == 0 else x[start:start + 500] for x in inputs]
            kernel(*part, out=pieces[start:start + 500], params=params)
        for offset in sorted({0, out_dtype.numpy.itemsize, 16, 32, 64 - out_dtype.numpy.itemsize}):
            out = output_at(LONG_ROW, out_dtype, offset)
            kernel(*inputs, out=out, params=params)
            assert out.tobytes() == pieces.tobytes(), f"output {offset} bytes past a line, broadcast={broadcast_last}"


def stream_bytes(n_inputs):
    """The output size from which this process's contiguous rows are written with non-temporal
    stores (elementwise_kernels.h): FUEL_KERNEL_STREAM_BYTES where set, else 4 MiB on Intel cores
    (or with FUEL_KERNEL_STREAM_AS=intel), and elsewhere 64 MiB for unary ops and never (None) for
    two-input ones."""
    setting = os.environ.get("FUEL_KERNEL_STREAM_BYTES", "")
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    streams_as = os.environ.get("FUEL_KERNEL_STREAM_AS", "")
    if streams_as == "intel" or (streams_as != "other" and cpu_vendor() == "GenuineIntel"):
        return 4 << 20
    return 64 << 20 if n_inputs == 1 else None


STREAM_CHILD_BYTES = 4 << 20        # the setting test_streamed_rows_on_any_cpu's child runs with
# the ops whose kernels stream: the unary ones and the activation derivatives (binary_kernels.h.in's
# GRADS: not RELU_BACKWARD, a select, nor POWI_BACKWARD, a kernel of its own)
STREAMED = UNARY + PARAMS_OPS + tuple(op for op in BACKWARD if op not in (Op.POWI_BACKWARD, Op.RELU_BACKWARD))
STREAMED_BINDINGS = [(k, i) for k, i in zip(BINDINGS, IDS)
                     if k.op in STREAMED and stream_bytes(k.n_inputs) is not None]
# where a unary op streams from 64 MiB, these bindings run at that size (the others at 4 MiB: plain stores)
STREAMED_LARGE = {"exp-f32-f32", "neg-bf16-bf16", "sqrt-f64-f64", "abs-i8-i8", "powi-f32-f32"}


@pytest.mark.parametrize("kernel,name", STREAMED_BINDINGS, ids=[i for _, i in STREAMED_BINDINGS])
def test_streamed_rows_give_the_same_bits(kernel, name, rng):
    """An output of stream_bytes() and more is computed a chunk at a time (4 KiB; a unary op's 512
    bytes on Intel cores) and stored with non-temporal stores, or on x86-64-v4 CPUs an F32 AVX-512
    unary row stores each vector non-temporally as it computes it (the elements before the first
    64-byte line plainly either way; there the F32 derivatives with AVX-512 loops, SILU_BACKWARD and
    GELU_ERF_BACKWARD, store plainly): the same bits as the
    same elements computed into outputs too small to stream, at a line boundary, one element past
    it, with each input of a two-input op broadcast from one element, and in place over the first
    input; POWI on floats with a negative and a small positive exponent."""
    dtypes = kernel.dtypes
    n_in = kernel.n_inputs
    isz = dtypes[-1].numpy.itemsize
    threshold = stream_bytes(n_in)
    size = threshold if threshold == 4 << 20 or name in STREAMED_LARGE else 4 << 20
    n = size // isz + 1000 + 3                           # whole chunks, then a ragged last one
    full = [np.asarray(values(kernel.op, i, (n,), dtypes[i], rng)) for i in range(n_in)]
    layouts = [full] + [[np.broadcast_to(x[:1], (n,)) if i == b else x for i, x in enumerate(full)]
                        for b in range(n_in if n_in > 1 else 0)]
    step = n // 3 + 1
    # POWI on floats: a negative exponent and a small positive one (BF16's own loop for 2..8)
    options = (POWI_FLOAT, fk.params.powi(3)) if kernel.op == Op.POWI and dtypes[0].is_float else (
        params_for(kernel.op, dtypes[-1]),)
    for params, inputs in ((p, x) for p in options for x in layouts):
        broadcast = [x.strides[0] == 0 for x in inputs]
        pieces = np.empty(n, dtypes[-1].numpy)
        for start in range(0, n, step):                  # each piece's own output is under 4 MiB
            part = np.empty(min(step, n - start), dtypes[-1].numpy)
            kernel(*[x[start:start + step] for x in inputs], out=part, params=params)
            pieces[start:start + step] = part
        for offset in (0, isz):
            out = output_at(n, dtypes[-1], offset)
            kernel(*inputs, out=out, params=params)
            assert out.tobytes() == pieces.tobytes(), f"output {offset} bytes past a line, broadcast {broadcast}, {params}"
        if dtypes[0] == dtypes[-1] and not broadcast[0]:
            inplace = output_at(n, dtypes[0], isz)
            inplace[...] = inputs[0]
            kernel(inplace, *inputs[1:], out=inplace, params=params)
            assert inplace.tobytes() == pieces.tobytes(), f"in place, broadcast {broadcast}, {params}"


@pytest.mark.parametrize("streams_as", ["intel", "other"])
def test_streamed_rows_on_any_cpu(streams_as):
    """With FUEL_KERNEL_STREAM_BYTES set, every x86-64 CPU streams outputs from that size, whatever
    its own rule, and FUEL_KERNEL_STREAM_AS picks the vendor's way of streaming (Intel cores: 512-byte
    chunks for unary ops; others: 4 KiB chunks; the F32 AVX-512 unary rows' direct stores on
    x86-64-v4 CPUs either way): a child process runs test_streamed_rows_give_the_same_bits at
    4 MiB as each, so every streamed binding (the derivatives included, which stream only on Intel
    cores by default) is checked in both ways wherever the suite runs."""
    env = child_env()
    env["FUEL_KERNEL_STREAM_BYTES"] = str(STREAM_CHILD_BYTES)
    env["FUEL_KERNEL_STREAM_AS"] = streams_as
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"{__file__}::test_streamed_rows_give_the_same_bits"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    every = sum(1 for k in BINDINGS if k.op in STREAMED)
    assert f"{every} passed" in result.stdout, result.stdout[-2000:]


def test_every_binding_has_a_case(rng):
    """Each elementwise binding in the table has an oracle (a new binding without one fails)."""
    missing = []
    for k in elementwise_bindings():
        try:
            ins = [np.asarray(values(k.op, i, (4,), k.dtypes[i], rng)) for i in range(k.n_inputs)]
            oracle(k.op, k.dtypes, ins, params_for(k.op, k.dtypes[-1]))
        except (NotImplementedError, KeyError, TypeError) as exc:
            missing.append(f"{k!r}: {exc!r}")
    assert not missing, "bindings without a test case:\n" + "\n".join(missing)


def test_registered_coverage():
    """Every unary, binary, compare and params op is registered at its documented dtypes, with a
    claim, caps and a cost on every entry."""
    table = fk.bindings()
    floats = (D.F16, D.BF16, D.F32, D.F64)
    numeric = floats + (D.U8, D.I8, D.I16, D.I32, D.I64, D.U32)
    for op in UNARY:
        for d in floats:
            assert table.supports(op, [d, d]), (op, d)
    for op in (Op.NEG, Op.ABS, Op.SQR, Op.SIGN, Op.RELU):
        for d in (D.I8, D.I16, D.I32, D.I64):
            assert table.supports(op, [d, d]), (op, d)
    for op in BINARY:
        for d in numeric:
            assert table.supports(op, [d, d, d]), (op, d)
    for op in INT_BINARY_ONLY:
        for d in numeric:
            assert table.supports(op, [d, d, d]) == (not d.is_float), (op, d)
    for op in COMPARE:
        for d in fk.DType:          # every dtype but the FP8 storage formats, which compare after a CAST
            assert table.supports(op, [d, d, D.BOOL]) == (not d.is_float8), (op, d)
    for d in fk.DType:
        assert table.supports(Op.WHERE, [D.BOOL, d, d, d]), d
    for op in PARAMS_OPS:
        for d in floats:
            assert table.supports(op, [d, d]), (op, d)
    for k in elementwise_bindings():
        assert k.source == "native"
        assert k.precision is not None and k.has_cost
        assert fk.KernelCaps.STRIDED_INPUT in k.caps and fk.KernelCaps.STRIDED_OUTPUT in k.caps
        cost = k.cost(*[SMALL] * len(k.dtypes), params=params_for(k.op, k.dtypes[-1]))
        assert cost.flops > 0 and cost.bytes_moved > 0


# ---- precision claims of the fast F32 approximations: dense sweeps ------------------------------------
def f32_sweep():
    rng = np.random.default_rng(7)
    return np.concatenate([
        np.linspace(-110, 100, 1_500_001), rng.standard_normal(500_000) * 3, np.linspace(-1, 1, 500_001),
        np.geomspace(1e-38, 1e2, 300_000), -np.geomspace(1e-38, 1e2, 300_000),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.3, -103.9, -104.0, 9.01, -9.01, 0.625, -0.625],
    ]).astype(np.float32)


@pytest.mark.parametrize("op", [Op.EXP, Op.TANH, Op.SIGMOID, Op.SILU, Op.GELU, Op.LOG])
def test_precision_claims_f32_sweep(op):
    k = fk.bindings().lookup(op, [D.F32, D.F32])
    x = f32_sweep()
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        k(x, out=out)
        ref, _ = oracle(op, (D.F32, D.F32), [x], None)
    assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)


@pytest.mark.parametrize("op", [Op.EXP, Op.TANH, Op.SIGMOID])
def test_precision_claims_half_sweep(op):
    """Every finite F16 value, and a BF16 sweep: one rounding after the F32 result."""
    for dtype, x in ((D.F16, np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16)),
                     (D.BF16, np.arange(0, 1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16))):
        k = fk.bindings().lookup(op, [dtype, dtype])
        out = np.empty_like(x)
        with np.errstate(all="ignore"):
            k(x, out=out)
            ref, _ = oracle(op, (dtype, dtype), [x], None)
        assert_same(out, ref, dtype, ulp=k.precision.max_ulp)


def gelu_erf_f64(x):
    """x Phi(x) in F64 through SciPy's erfc (accurate in the negative tail), -0 at -inf."""
    import scipy.special
    with np.errstate(all="ignore"):
        y = 0.5 * x * scipy.special.erfc(-x / np.sqrt(2.0))
    return np.where(x == -np.inf, -0.0, y)


HALF_TABLE_ORACLES = {Op.GELU_ERF: gelu_erf_f64}


def test_every_half_table_op_has_an_oracle():
    from fuel_kernel import spec
    assert {Op[name] for name in spec.HALF_TABLE_OPS} == set(HALF_TABLE_ORACLES)


@pytest.mark.parametrize("op", sorted(HALF_TABLE_ORACLES, key=lambda o: o.name))
@pytest.mark.parametrize("dtype", [D.F16, D.BF16])
def test_half_table_ops_are_correctly_rounded_at_every_input(op, dtype):
    """A table op's F16 and BF16 kernels give, at every one of the 65536 inputs, the F64 value
    rounded once (NumPy's and ml_dtypes' F64 casts round directly), contiguous, reversed, offset by
    one and every other element (the strided walk), in place too; NaN inputs give a quiet NaN of the same sign."""
    pytest.importorskip("scipy")
    bits = np.arange(1 << 16, dtype=np.uint16)
    x = bits.view(dtype.numpy)
    expected = HALF_TABLE_ORACLES[op](x.astype(np.float64))
    with np.errstate(all="ignore"):
        expected = expected.astype(dtype.numpy)
    k = fk.bindings().lookup(op, [dtype, dtype])
    assert k.precision.max_ulp == 1
    nan = np.isnan(x.astype(np.float32))
    quiet = 0x0200 if dtype == D.F16 else 0x0040
    want = np.where(nan, bits | quiet, expected.view(np.uint16))
    for got, where in ((k(x), slice(None)), (k(x[::-1]), slice(None, None, -1)), (k(x[1:]), slice(1, None)),
                       (k(x[::2]), slice(None, None, 2))):
        assert (got.view(np.uint16) == want[where]).all()
    inplace = x.copy()
    k(inplace, out=inplace)
    assert (inplace.view(np.uint16) == want).all()
    # a long call (cut into blocks, each row read and written four values to a word) from an
    # unaligned start, in place too
    big = np.tile(x, 40)[1:]
    assert (k(big).view(np.uint16) == np.tile(want, 40)[1:]).all()
    k(big, out=big)
    assert (big.view(np.uint16) == np.tile(want, 40)[1:]).all()


# ---- activation backward: claims over sampled ranges, finite differences, special values -------------
def backward_sweep(dtype, rng):
    """(x, dy): x over each dtype's interesting range (dense around 0, the tails where the derivatives
    underflow, every binade) and the special values; dy of mixed magnitudes."""
    if dtype == D.F16:
        x = np.concatenate([np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)])
        dy = rng.choice([1.0, -2.5, 1e-3, 3e4, 6e-8], x.size) * rng.uniform(0.5, 1.0, x.size)
    else:
        x = np.concatenate([np.linspace(-130, 130, 400_001), rng.standard_normal(200_000) * 3,
                            np.linspace(-2, 2, 100_001), np.geomspace(1e-38, 1e3, 50_000),
                            -np.geomspace(1e-38, 1e3, 50_000), [0.0, -0.0, np.inf, -np.inf, np.nan, 12.0,
                                                                -12.0, -12.1, 15.0, -15.0, 120.0, -120.0]])
        scale = [1.0, -2.5, 1e30, -1e-30, 3e-39] if dtype != D.F64 else [1.0, -2.5, 1e300, -1e-300, 1e-310]
        dy = rng.choice(scale, x.size) * rng.uniform(0.5, 1.0, x.size)
        dy[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
    with np.errstate(all="ignore"):
        return x.astype(dtype.numpy), dy.astype(dtype.numpy)


POWI_SWEEP = (0, 1, 2, 3, -1, -2, 5, 9, -7, 2 ** 31 - 1, -2 ** 31)


@pytest.mark.parametrize("dtype", [D.F32, D.F64, D.F16, D.BF16], ids=lambda d: d.short_name)
@pytest.mark.parametrize("op", BACKWARD, ids=lambda o: o.short_name)
def test_activation_backward_claims_sweep(op, dtype, rng):
    """Each binding meets its claim against the long double derivative over the sweep."""
    kernel = fk.bindings().lookup(op, [dtype] * 3)
    x, dy = backward_sweep(dtype, rng)
    for exp in (POWI_SWEEP if op == Op.POWI_BACKWARD else (None,)):
        params = fk.params.powi(exp) if exp is not None else None
        xs = x if exp is None or abs(exp) < 10 else np.clip(x, -1.2, 1.2).astype(x.dtype)
        out = np.empty_like(x)
        with np.errstate(all="ignore"):
            kernel(xs, dy, out=out, params=params)
        check(kernel, [xs, dy], out, params, f"sweep exp={exp}")


def forward_reference(op, x, exp=None):
    """The forward op's F64 reference (tests/oracles.py), the function the backward op differentiates."""
    fn = {Op.SIGMOID_BACKWARD: TRANSCENDENTAL_UNARY[Op.SIGMOID], Op.TANH_BACKWARD: np.tanh,
          Op.SILU_BACKWARD: TRANSCENDENTAL_UNARY[Op.SILU], Op.GELU_BACKWARD: TRANSCENDENTAL_UNARY[Op.GELU],
          Op.GELU_ERF_BACKWARD: TRANSCENDENTAL_UNARY[Op.GELU_ERF], Op.RELU_BACKWARD: EXACT_UNARY[Op.RELU],
          Op.POWI_BACKWARD: lambda v: np.power(v, float(exp))}[op]
    return fn(x)


@pytest.mark.parametrize("op", BACKWARD, ids=lambda o: o.short_name)
def test_activation_backward_matches_finite_differences_of_the_forward(op, rng):
    """The F64 kernel's dx against central differences of the forward reference (the analytic
    formula itself, independently of the oracle's derivative)."""
    x = np.concatenate([np.linspace(-7.9, 7.7, 301), rng.standard_normal(200) * 3])
    if op == Op.RELU_BACKWARD:
        x = x[np.abs(x) > 1e-3]                     # away from the kink
    dy = rng.standard_normal(x.size)
    for exp in ((3, -2, 1, 0) if op == Op.POWI_BACKWARD else (None,)):
        xs = x[np.abs(x) > 0.05] if exp is not None and exp < 0 else x
        g = dy[:xs.size]
        h = 1e-5 * np.maximum(0.05, np.abs(xs))      # relative to x: x**-2 curves fast near 0
        numeric = g * (forward_reference(op, xs + h, exp) - forward_reference(op, xs - h, exp)) / (2 * h)
        kernel = fk.bindings().lookup(op, [D.F64] * 3)
        params = fk.params.powi(exp) if exp is not None else None
        dx = kernel(xs, g, out=np.empty_like(xs), params=params)
        scale = np.abs(g) * (1 + np.abs(forward_reference(op, xs, exp)))
        assert (np.abs(dx - numeric) <= 1e-7 * scale).all(), (op, exp, xs[np.abs(dx - numeric) > 1e-7 * scale][:5])


def test_activation_backward_special_values():
    f = lambda *v: np.array(v, np.float32)
    nan, inf = np.nan, np.inf
    # RELU_BACKWARD: PyTorch's threshold_backward, x <= 0 ? 0 : dy; a NaN x passes dy through
    assert call(Op.RELU_BACKWARD, f(-1, 0, -0.0, 2, nan, -3), f(5, 5, 5, 5, 5, nan)).tolist() == [0, 0, 0, 5, 5, 0]
    # the limits at +-inf: f'(+inf) = 1 and f'(-inf) = 0 for SiLU and the GELUs, 0 for sigmoid and tanh
    for op in (Op.SILU_BACKWARD, Op.GELU_BACKWARD, Op.GELU_ERF_BACKWARD):
        assert call(op, f(inf, -inf, 0), f(2, 2, 2)).tolist() == [2, 0, 1], op
    for op in (Op.SIGMOID_BACKWARD, Op.TANH_BACKWARD):
        assert call(op, f(inf, -inf), f(2, 2)).tolist() == [0, 0], op
        assert np.isnan(call(op, f(inf, 1, nan), f(inf, nan, 1))).all(), op
    assert call(Op.TANH_BACKWARD, f(0), f(3)).tolist() == [3] and call(Op.SIGMOID_BACKWARD, f(0), f(4)).tolist() == [1]
    # POWI_BACKWARD: exp 0 gives +0 everywhere; 0 to a negative power is inf as np.power (0 * inf NaN)
    powi = lambda e, x, dy, dtype=np.float32: call(Op.POWI_BACKWARD, np.array(x, dtype), np.array(dy, dtype),
                                                   params=fk.params.powi(e))
    for dtype in (np.float32, np.float64):
        assert powi(0, [nan, inf, 0.0, 2.0], [1.0, 1.0, nan, inf], dtype).tolist() == [0, 0, 0, 0]
        assert powi(-1, [0.0, -0.0, 0.0], [1.0, 1.0, 0.0], dtype)[:2].tolist() == [-inf, -inf]
        assert np.isnan(powi(-1, [0.0], [0.0], dtype)).all()
        assert powi(-2, [0.0, -0.0], [1.0, 1.0], dtype).tolist() == [-inf, inf]
        assert powi(1, [nan, inf, 3.0], [2.0, 2.0, 2.0], dtype).tolist() == [2, 2, 2]
        assert powi(3, [2.0, -2.0], [1.0, 0.5], dtype).tolist() == [12, 6]
        assert powi(-2 ** 31, [1.0, -1.0, 2.0], [1.0, 1.0, 1.0], dtype).tolist() == [-2 ** 31, 2 ** 31, 0]


@pytest.mark.parametrize("op", BACKWARD, ids=lambda o: o.short_name)
@pytest.mark.parametrize("problem", ["dtype", "count", "shape", "out shape", "readonly", "alias", "params",
                                     "too many dims"])
def test_activation_backward_bad_input_leaves_the_output_untouched(op, problem):
    k = fk.bindings().lookup(op, [D.F32] * 3)
    x = np.linspace(-2, 2, 8).astype(np.float32)
    dy = np.ones(8, np.float32)
    inputs = [x, dy]
    out = sentinel(8, D.F32)
    params = fk.params.powi(2) if op == Op.POWI_BACKWARD else None
    error = {"dtype": fk.DTypeError, "count": fk.OperandCountError, "shape": fk.ShapeError,
             "out shape": fk.ShapeError, "readonly": fk.ReadOnlyError, "alias": fk.AliasError,
             "params": fk.ParamsError, "too many dims": fk.ShapeError}[problem]
    if problem == "dtype":
        inputs[1] = dy.astype(np.float64)
    elif problem == "count":
        inputs = [x]
    elif problem == "shape":
        inputs[1] = np.ones(5, np.float32)
    elif problem == "out shape":
        out = sentinel(9, D.F32)
    elif problem == "readonly":
        out.flags.writeable = False
    elif problem == "alias":
        buf = np.arange(9, dtype=np.float32)
        inputs = [buf[1:], dy]
        out = buf[:-1]
    elif problem == "params":
        params = fk.params.affine(1, 2) if op == Op.POWI_BACKWARD else fk.params.powi(2)
    elif problem == "too many dims":
        shape = (1,) * 9 + (8,)
        inputs = [x.reshape(shape), dy.reshape(shape)]
        out = sentinel(shape, D.F32)
    before = out.copy()
    with pytest.raises(error):
        k(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)


# ---- semantics spot checks ---------------------------------------------------------------------------
def call(op, *inputs, params=None, out=None):
    return fk.dispatch(op, list(inputs), out, params=params)


def test_integer_semantics_documented():
    i8 = lambda *v: np.array(v, np.int8)
    assert call(Op.ADD, i8(127, -128), i8(1, -1)).tolist() == [-128, 127]
    assert call(Op.MUL, i8(64), i8(4)).tolist() == [0]
    assert call(Op.DIV, i8(-7, 7, -7, 7, -128), i8(2, -2, -2, 2, -1)).tolist() == [-4, -4, 3, 3, -128]
    assert call(Op.REM, i8(-7, 7, -7, 7, -128), i8(2, -2, -2, 2, -1)).tolist() == [1, -1, -1, 1, 0]
    assert call(Op.TRUNC_DIV, i8(-7, 7, -7, 7, -128), i8(2, -2, -2, 2, -1)).tolist() == [-3, -3, 3, 3, -128]
    assert call(Op.FMOD, i8(-7, 7, -7, 7, -128), i8(2, -2, -2, 2, -1)).tolist() == [-1, 1, -1, 1, 0]
    assert call(Op.POW, i8(3, 2, -2), i8(5, 7, 7)).tolist() == [-13, -128, -128]
    assert call(Op.NEG, i8(-128)).tolist() == [-128] and call(Op.ABS, i8(-128)).tolist() == [-128]
    u = np.array([3, 250], np.uint8)
    assert call(Op.SUB, u, np.array([5, 1], np.uint8)).tolist() == [254, 249]


def test_float_semantics_documented():
    f = lambda *v: np.array(v, np.float32)
    nan = np.nan
    assert np.isnan(call(Op.MAXIMUM, f(nan, 1), f(1, nan))).all()
    assert np.isnan(call(Op.MINIMUM, f(nan, 1), f(1, nan))).all()
    assert call(Op.ROUND, f(0.5, 1.5, 2.5, -0.5, -1.5)).tolist() == [0, 2, 2, -0.0, -2]
    assert np.isnan(call(Op.SIGN, f(nan))).all() and call(Op.SIGN, f(-3, 0, 2)).tolist() == [-1, 0, 1]
    assert call(Op.STEP, f(-1, 0, 2)).tolist() == [0, 0, 1]
    assert call(Op.SILU, f(-np.inf)).tolist() == [0] and call(Op.GELU, f(-np.inf, np.inf)).tolist() == [0, np.inf]
    assert call(Op.REM, f(5, -5, 5, 0), f(3, 3, -3, -3)).tolist() == [2, 1, -1, 0]
    got = call(Op.FMOD, f(5, -5, 5, -0.0, 1, np.inf), f(3, 3, -3, 3, np.inf, 2))
    assert got[:5].tolist() == [2, -2, 2, 0, 1] and np.signbit(got[3]) and np.isnan(got[5])
    b = lambda *v: np.array(v, np.bool_)
    assert call(Op.ADD, b(1, 0, 0), b(1, 1, 0)).tolist() == [True, True, False]
    assert call(Op.MUL, b(1, 0, 1), b(1, 1, 0)).tolist() == [True, False, False]


# ---- errors: the caller's output is untouched ------------------------------------------------------------
def sentinel(shape, dtype):
    return np.full(shape, 7, dtype=fk.DType.parse(dtype).numpy)


@pytest.mark.parametrize("dtype", [D.U8, D.I8, D.I16, D.I32, D.I64, D.U32])
@pytest.mark.parametrize("op", [Op.DIV, Op.REM, Op.FMOD, Op.TRUNC_DIV])
def test_integer_division_by_zero(op, dtype):
    k = fk.bindings().lookup(op, [dtype] * 3)
    a = np.arange(1, 41, dtype=dtype.numpy).reshape(5, 8)
    b = np.ones((5, 8), dtype=dtype.numpy)
    b[4, 7] = 0                                   # the very last element: nothing may be written first
    out = sentinel((5, 8), dtype)
    with pytest.raises(fk.KernelZeroDivisionError):
        k(a, b, out=out)
    assert (out == 7).all()
    with pytest.raises(ZeroDivisionError):        # also a built-in ZeroDivisionError
        k(a, b.T.copy().T, out=out)
    assert (out == 7).all()


def test_integer_negative_power_is_refused():
    k = fk.bindings().lookup(Op.POW, [D.I32] * 3)
    out = sentinel(4, D.I32)
    with pytest.raises(fk.ParamsError):
        k(np.arange(4, dtype=np.int32), np.array([1, 2, 3, -1], np.int32), out=out)
    assert (out == 7).all()
    kp = fk.bindings().lookup(Op.POWI, [D.I32] * 2)
    with pytest.raises(fk.ParamsError):
        kp(np.arange(4, dtype=np.int32), out=out, params=fk.params.powi(-1))
    assert (out == 7).all()


def test_wrong_dtype_count_shape_readonly_alias():
    t = fk.bindings()
    add = t.lookup(Op.ADD, [D.F32] * 3)
    a = np.ones(8, np.float32)
    out = sentinel(8, D.F32)
    with pytest.raises(fk.DTypeError):
        add(a, np.ones(8, np.float64), out=out)
    with pytest.raises(fk.OperandCountError):
        add(a, out=out)
    with pytest.raises(fk.OperandCountError):
        add.run([a, a, a], [out])
    with pytest.raises(fk.ShapeError):
        add(a, np.ones(5, np.float32), out=out)
    with pytest.raises(fk.ShapeError):
        add(a, a, out=sentinel(9, D.F32))
    assert (out == 7).all()
    ro = sentinel(8, D.F32)
    ro.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        add(a, a, out=ro)
    buf = np.arange(9, dtype=np.float32)
    with pytest.raises(fk.AliasError):
        add(buf[1:], a, out=buf[:-1])
    assert buf.tolist() == list(range(9))


def test_params_kind_is_checked():
    t = fk.bindings()
    x = np.ones(4, np.float32)
    out = sentinel(4, D.F32)
    with pytest.raises(fk.ParamsError):
        t.lookup(Op.AFFINE, [D.F32] * 2)(x, out=out)                      # no params
    with pytest.raises(fk.ParamsError):
        t.lookup(Op.CLAMP, [D.F32] * 2)(x, out=out, params=fk.params.affine(1, 2))
    with pytest.raises(fk.ParamsError):
        t.lookup(Op.ADD, [D.F32] * 3)(x, x, out=out, params=fk.params.powi(2))
    assert (out == 7).all()


def test_schema_allocates_outputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.arange(3, dtype=np.float32)
    assert fk.dispatch(Op.ADD, [x, y]).shape == (2, 3)
    assert fk.dispatch(Op.LT, [x, y]).dtype == np.bool_
    w = fk.dispatch(Op.WHERE, [x > 2, x, y])
    assert w.dtype == np.float32 and w.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert fk.dispatch(Op.CLAMP, [x], params=fk.params.clamp(1, 4)).tolist() == [[1, 1, 2], [3, 4, 4]]


def test_empty_and_zero_dim():
    add = fk.bindings().lookup(Op.ADD, [D.F32] * 3)
    e = np.empty((0, 3), np.float32)
    assert add(e, e).shape == (0, 3)
    s = np.float32(2.0) * np.ones((), np.float32)
    assert add(s, s).tolist() == 4.0


@pytest.mark.parametrize("dtype", [D.U8, D.I16, D.BF16, D.I32, D.F32, D.F64])
def test_tiled_walk_variants(dtype, rng):
    """Transposed operands in 3-d (several planes), reversed, and on both inputs at once.  Extents
    are not multiples of the tile or of the 8x8 register-transpose blocks of 4-byte elements."""
    add = fk.bindings().lookup(Op.ADD, [dtype] * 3)
    nd = dtype.numpy
    base = random_values((3, 150, 130), dtype, rng, special=False)
    other = random_values((3, 130, 150), dtype, rng, special=False)
    cases = [
        (base, other.transpose(0, 2, 1)),                       # planes x transposed
        (base[:, ::-1], other.transpose(0, 2, 1)[:, ::-1, ::-1]),  # transposed and reversed
        (base, other.transpose(0, 2, 1)[:, :, ::-1]),           # transposed, columns reversed
        (base[:, 3:, 5:], other.transpose(0, 2, 1)[:, 3:, 5:]),  # offset start inside a block
        (other.transpose(0, 2, 1), other[::-1].transpose(0, 2, 1)),  # both inputs transposed
        (base[0], other[1].T[:, :1]),                           # transposed column broadcast
    ]
    for a, b in cases:
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), dtype=nd)
        add(a, b, out=out)
        with np.errstate(all="ignore"):
            expected = (a.astype(compute_dtype(dtype)) + b.astype(compute_dtype(dtype))).astype(nd)
        assert_same(out, expected, dtype)


def test_powi_bf16_small_exponents_every_input_and_layout():
    """BF16 POWI for 2 <= exp <= 8 multiplies in F32 and rounds once: within 1 ulp of the F64 power
    on every BF16 input (inf, NaN, zeros and subnormals included), the same bits contiguous, strided
    and reversed."""
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    k = fk.bindings().lookup(Op.POWI, [D.BF16] * 2)
    for exp in range(2, 9):
        params = fk.params.powi(exp)
        got = np.empty_like(x)
        k(x, out=got, params=params)
        with np.errstate(all="ignore"):
            want = np.power(x.astype(np.float64), exp)
        g = got.astype(np.float64)
        assert (np.isnan(g) == np.isnan(want)).all(), exp
        rounded = want.astype(ml_dtypes.bfloat16).astype(np.float64)      # inf where it overflows
        fin = np.isfinite(rounded)
        assert (g[~fin & ~np.isnan(want)] == rounded[~fin & ~np.isnan(want)]).all(), exp
        ulp = np.spacing(np.abs(rounded[fin]).astype(ml_dtypes.bfloat16)).astype(np.float64)
        assert (np.abs(g[fin] - want[fin]) <= ulp).all(), exp
        wide = np.zeros(2 * x.size, x.dtype)
        wide[::2] = x
        strided = np.empty_like(wide)
        k(wide[::2], out=strided[1::2], params=params)
        reversed_out = np.empty_like(x)
        k(x[::-1], out=reversed_out, params=params)
        np.testing.assert_array_equal(strided[1::2].view(np.uint16), got.view(np.uint16))
        np.testing.assert_array_equal(reversed_out[::-1].view(np.uint16), got.view(np.uint16))
