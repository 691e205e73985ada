"""Every key with two or more alternatives (siblings such as CONV2D im2col/direct, MATMUL
native/blas, or the softmax and norm native/native-f64): all alternatives agree on random and on special values (NaN, +-inf, +-0, huge,
subnormal) within their precision claims.

The route picker may choose any sibling (a Graph and fk.dispatch can pick differently), so a
sibling that drops a NaN another one propagates is a wrong result, not a style difference.  The
keys are read from the live table: a new op with siblings and no operand builder below fails.
"""
import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from oracles import conv1d_reference, conv2d_reference

D = fk.DType
SEEDS = (0, 1, 2)


def sibling_keys():
    table = fk.bindings()
    keys = []
    for row in table.coverage():
        if row.backend == fk.Backend.CPU and isinstance(row.op, fk.OpKind):
            if len(table.alternatives(row.op, list(row.dtypes), fk.Backend.CPU)) >= 2:
                keys.append((row.op, tuple(row.dtypes)))
    return keys


KEYS = sibling_keys()


def finfo(dtype):
    import ml_dtypes
    return ml_dtypes.finfo(dtype.numpy)


def values(shape, dtype, rng, special):
    """Normal values; with `special`, about one element in six replaced by NaN, +-inf, +-0, a huge
    value (max/4) or a subnormal."""
    x = rng.standard_normal(shape) * 2
    if special and x.size:
        info = finfo(dtype)
        picks = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max) / 4, -float(info.max) / 4,
                          float(info.smallest_subnormal), -3 * float(info.smallest_subnormal)])
        mask = rng.random(shape) < 1 / 6
        x[mask] = rng.choice(picks, int(mask.sum()))
    return x.astype(dtype.numpy)


def finite_part(x):
    """x in float64 with NaN and inf replaced by 0: the terms a precision claim scales with."""
    x = x.astype(np.float64)
    return np.where(np.isfinite(x), x, 0.0)


def conv2d_cases(dtypes, rng, special):
    bias = len(dtypes) == 4
    dt = dtypes[0]
    # (N, C, H, W, O, KH, KW, stride, padding, dilation, groups): every one meets padding
    for N, C, H, W, O, KH, KW, stride, padding, dilation, groups in (
            (1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1), (2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1),
            (1, 4, 7, 5, 6, 3, 2, 2, (1, 2), 1, 2), (1, 2, 6, 6, 2, 2, 3, (2, 1), 2, 2, 1)):
        x = values((N, C, H, W), dt, rng, special)
        w = values((O, C // groups, KH, KW), dt, rng, special)
        b = values((O,), dt, rng, special) if bias else None
        params = fk.params.conv2d(stride=stride, padding=padding, dilation=dilation, groups=groups)
        _, scale = conv2d_reference(finite_part(x), finite_part(w), None if b is None else finite_part(b),
                                    stride, padding, dilation, groups)
        inputs = (x, w) if b is None else (x, w, b)
        yield inputs, params, scale.shape, scale


def conv1d_cases(dtypes, rng, special):
    bias = len(dtypes) == 4
    dt = dtypes[0]
    # (N, C, L, O, K, stride, padding, dilation, groups): every one meets padding
    for N, C, L, O, K, stride, padding, dilation, groups in (
            (1, 1, 4, 1, 3, 1, 1, 1, 1), (2, 3, 9, 4, 3, 1, 1, 1, 1), (1, 4, 11, 6, 2, 2, 2, 1, 2),
            (1, 2, 8, 2, 3, 2, 2, 2, 1)):
        x = values((N, C, L), dt, rng, special)
        w = values((O, C // groups, K), dt, rng, special)
        b = values((O,), dt, rng, special) if bias else None
        params = fk.params.conv1d(stride=stride, padding=padding, dilation=dilation, groups=groups)
        _, scale = conv1d_reference(finite_part(x), finite_part(w), None if b is None else finite_part(b),
                                    stride, padding, dilation, groups)
        inputs = (x, w) if b is None else (x, w, b)
        yield inputs, params, scale.shape, scale


def matmul_cases(dtypes, rng, special):
    dt = dtypes[0]
    for m, k, n in ((1, 1, 1), (3, 7, 5), (17, 33, 9), (4, 70, 6)):
        a = values((m, k), dt, rng, special)
        b = values((k, n), dt, rng, special)
        scale = np.abs(finite_part(a)) @ np.abs(finite_part(b))
        if len(dtypes) == 4:                   # a deferred row count operand (all rows)
            params = fk.params.matmul(m, n, k, m_compute=fk.MatmulM.deferred(2))
            inputs = (a, b, np.array(m, dtype=dtypes[2].numpy))
        else:
            params = fk.params.matmul(m, n, k)
            inputs = (a, b)
        yield inputs, params, (m, n), scale


def last_dim_cases(op):
    """Softmax / norm rows; the scale is the one each claim names (|y|, or the layer-norm scale)."""
    def cases(dtypes, rng, special):
        dt = dtypes[0]
        eps = 1e-5
        for shape in ((1, 1), (3, 7), (4, 33), (2, 130), (3, 300)):
            x = values(shape, dt, rng, special)
            xf = finite_part(x)
            if op in (fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD, fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD):
                log = op == fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD
                with np.errstate(all="ignore"):          # y: a forward output; dy carries the specials
                    y = oracles.softmax_last_dim(xf, log=log).astype(dt.numpy)
                dy = values(shape, dt, rng, special)
                scale = oracles.softmax_backward_last_dim(y.astype(np.float64), finite_part(dy), log=log)[1]
                yield (y, dy), fk.params.softmax_last_dim(), shape, scale
                continue
            if op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM):
                with np.errstate(all="ignore"):
                    y = oracles.softmax_last_dim(xf, log=op == fk.OpKind.LOG_SOFTMAX_LAST_DIM)
                yield (x,), fk.params.softmax_last_dim(), shape, np.abs(y)
                continue
            w = values(shape[-1:], dt, rng, special)
            params = fk.params.norm_last_dim(eps)
            if op == fk.OpKind.RMS_NORM:
                yield (x, w), params, shape, np.abs(oracles.rms_norm(xf, eps, finite_part(w)))
                continue
            b = values(shape[-1:], dt, rng, special)
            scale = oracles.layer_norm_error_scale(xf, eps, finite_part(w), finite_part(b))
            yield (x, w, b), params, shape, scale
    return cases


def fused_linear_cases(dtypes, rng, special):
    dt = dtypes[0]
    for m, k, n in ((1, 1, 1), (3, 7, 5), (17, 33, 9), (4, 70, 6), (20, 300, 40)):
        x, w, b = values((m, k), dt, rng, special), values((k, n), dt, rng, special), values((n,), dt, rng, special)
        scale = np.abs(finite_part(x)) @ np.abs(finite_part(w)) + np.abs(finite_part(b))
        yield (x, w, b), None, (m, n), scale


BUILDERS = {fk.OpKind.CONV2D: conv2d_cases, fk.OpKind.CONV1D: conv1d_cases, fk.OpKind.MATMUL: matmul_cases,
            fk.OpKind.FUSED_LINEAR: fused_linear_cases}
BUILDERS.update({op: last_dim_cases(op) for op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM,
                                                   fk.OpKind.RMS_NORM, fk.OpKind.LAYER_NORM,
                                                   fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD,
                                                   fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD)})


def assert_agree(first, other, scale, claims, dtype, where):
    """`scale` is sum |x*w| (+ |b|) over the finite inputs.  Where it exceeds the dtype's largest
    finite value, partial sums may overflow or not depending on the summation order (inf - inf
    is NaN), which no precision claim covers: those elements are left out.  Everywhere else NaN
    and infinities come only from NaN and inf inputs, whatever the order, so they must match."""
    keep = scale <= float(finfo(dtype).max)
    a, b = first.astype(np.float64)[keep], other.astype(np.float64)[keep]
    scale = scale[keep]
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    assert (nan_a == nan_b).all(), f"{where}: NaN at {np.flatnonzero(keep)[nan_a != nan_b][:4]} (flat) in one sibling only"
    inf = np.isinf(a) | np.isinf(b)
    assert (a[inf] == b[inf]).all(), f"{where}: an infinity in one sibling is {b[inf][a[inf] != b[inf]][:4]} in the other"
    finite = ~(nan_a | inf)
    # each sibling is within its claim of the exact result, so they are within both claims of each other
    bound = sum(c.max_rel * scale[finite] + c.max_abs for c in claims)
    err = np.abs(a[finite] - b[finite])
    assert (err <= bound + 1e-300).all(), f"{where}: differ by {err.max()} (bound {bound[err.argmax()]})"


def test_every_key_with_siblings_has_a_builder():
    assert KEYS, "no key with two or more alternatives: the table lost its siblings"
    assert {op for op, _ in KEYS} <= set(BUILDERS), "add an operand builder for the new siblings"


@pytest.mark.parametrize("special", [False, True], ids=["random", "special"])
@pytest.mark.parametrize("op,dtypes", KEYS, ids=[f"{op.name}-{'-'.join(d.short_name for d in dts)}" for op, dts in KEYS])
def test_siblings_agree(op, dtypes, special):
    kernels = fk.bindings().alternatives(op, list(dtypes), fk.Backend.CPU)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        for i, (inputs, params, out_shape, scale) in enumerate(BUILDERS[op](dtypes, rng, special)):
            outs = []
            for kernel in kernels:
                out = np.full(out_shape, 7, dtype=dtypes[-1].numpy)
                with np.errstate(all="ignore"):
                    kernel(*inputs, out=out, params=params)
                outs.append(out)
            for kernel, out in zip(kernels[1:], outs[1:]):
                assert_agree(outs[0], out, scale, (kernels[0].precision, kernel.precision), dtypes[0],
                             f"{kernels[0].source} vs {kernel.source}, seed {seed}, case {i}")


def test_a_nan_weight_meeting_padding_is_nan_in_every_conv2d_sibling():
    """The named case: direct used to skip taps on padding, so 0 * NaN never happened there."""
    x = np.ones((1, 1, 3, 3), np.float32)
    w = np.zeros((1, 1, 3, 3), np.float32)
    w[0, 0, 0, 0] = np.nan                      # meets padding at every output of row 0 / column 0
    expected, _ = conv2d_reference(x, w, None, 1, 1, 1, 1)
    for kernel in fk.bindings().alternatives(fk.OpKind.CONV2D, [D.F32] * 3, fk.Backend.CPU):
        out = kernel(x, w, out=np.zeros((1, 1, 3, 3), np.float32), params=fk.params.conv2d(padding=1))
        np.testing.assert_array_equal(np.isnan(out), np.isnan(expected), err_msg=kernel.source)
        assert np.isnan(out).all(), kernel.source     # every output window includes the NaN tap
