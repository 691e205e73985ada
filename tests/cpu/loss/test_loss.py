"""FUSED_SOFTMAX_CROSS_ENTROPY (two outputs: loss and log-sum-exp) and its backward: every binding
over every layout against a long-double reference (itself checked by central differences), the
precision claims, ignore_index and label smoothing, special values, and every refusal, each
leaving every output untouched."""
import math

import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from fuel_kernel.graph import Graph
from support import FLOAT_DTYPES, LAYOUTS, make_operand

OP = fk.OpKind
CE, CEB = OP.FUSED_SOFTMAX_CROSS_ENTROPY, OP.FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD
INDEX = (fk.DType.I32, fk.DType.I64)
CASES = [(dt, it) for dt in FLOAT_DTYPES for it in INDEX]
LSE = {dt: fk.DType.F64 if dt == fk.DType.F64 else fk.DType.F32 for dt in FLOAT_DTYPES}
COVERED = ({(CE, (dt, it, dt, LSE[dt])) for dt, it in CASES}
           | {(CEB, (dt, it, LSE[dt], dt, dt)) for dt, it in CASES})
SHAPES = [(5, 7), (1, 1), (3, 1), (2, 257), (0, 4), (4, 1100), (6, 33)]
SETTINGS = [(None, -100, 0.0), (fk.params.cross_entropy(ignore_index=1), 1, 0.0),
            (fk.params.cross_entropy(label_smoothing=0.1), -100, 0.1),
            (fk.params.cross_entropy(ignore_index=0, label_smoothing=1.0), 0, 1.0)]


def logits_and_targets(shape, dtype, index, layout, rng):
    n, c = shape
    x = make_operand(shape, dtype, layout, rng, special=False)
    t = make_operand((n,), index, "strided" if layout == "broadcast" else layout, rng,
                     values=rng.integers(0, c, n), special=False)
    return x, t


def check(got, want, scale, claim, where, rel_scale=None):
    """|err| <= max_rel rel_scale (default |want|) + max_abs scale, plus half the output dtype's
    smallest subnormal (the claims' notes: one rounding of a subnormal result)."""
    tiny = np.longdouble(float(ml_dtypes.finfo(np.asarray(got).dtype).smallest_subnormal) / 2)
    g = np.asarray(got).astype(np.longdouble)
    assert (np.isnan(g) == np.isnan(want)).all(), where
    fin = np.isfinite(want)
    assert (g[~fin & ~np.isnan(want)] == want[~fin & ~np.isnan(want)]).all(), where
    err = np.abs(g[fin] - want[fin])
    rel = np.abs(want) if rel_scale is None else rel_scale
    bound = claim.max_rel * rel[fin] + claim.max_abs * scale[fin] + tiny
    assert (err <= bound).all(), (where, float(np.max(err - bound)))


def long(values):
    return np.asarray(values).astype(np.float64).astype(np.longdouble)


@pytest.mark.parametrize("dtype,index", CASES, ids=[f"{d.short_name}-{i.short_name}" for d, i in CASES])
def test_forward_binding(dtype, index, rng):
    kernel = fk.bindings().lookup(CE, [dtype, index, dtype, LSE[dtype]], fk.Backend.CPU)
    assert kernel.n_outputs == 2 and kernel.has_cost
    for shape in SHAPES:
        for layout in LAYOUTS:
            for params, ignore, smoothing in SETTINGS:
                x, t = logits_and_targets(shape, dtype, index, layout, rng)
                loss = np.full(shape[0], 7, dtype.numpy)
                lse = np.full(shape[0], 7, LSE[dtype].numpy)
                assert kernel(x, t, out=(loss, lse), params=params) == (loss, lse)
                want_loss, want_lse = oracles.cross_entropy(long(x), t, ignore, smoothing)
                scale = np.full(shape[0], 3 + math.log(shape[1]), np.longdouble)
                xl = long(x)
                keep = np.asarray(t) != ignore
                x_t = np.where(keep, xl[np.arange(shape[0]), np.where(keep, t, 0)], 0) if shape[0] else 0
                loss_scale = np.abs(want_lse) + np.abs(x_t) + smoothing * np.mean(np.abs(xl), axis=1)
                check(lse, want_lse, scale, kernel.precision, (shape, layout, "lse"), np.abs(want_lse))
                check(loss, want_loss, scale, kernel.precision, (shape, layout, params, "loss"), loss_scale)


@pytest.mark.parametrize("dtype,index", CASES, ids=[f"{d.short_name}-{i.short_name}" for d, i in CASES])
def test_backward_binding(dtype, index, rng):
    kernel = fk.bindings().lookup(CEB, [dtype, index, LSE[dtype], dtype, dtype], fk.Backend.CPU)
    assert kernel.n_outputs == 1 and kernel.has_cost
    for shape in SHAPES:
        for layout in LAYOUTS:
            for params, ignore, smoothing in SETTINGS:
                x, t = logits_and_targets(shape, dtype, index, layout, rng)
                _, lse = fk.dispatch(CE, [x, t], params=params)
                dloss = make_operand((shape[0],), dtype, "negative", rng, special=False)
                out = np.full(shape, 7, dtype.numpy)
                kernel(x, t, lse, dloss, out=out, params=params)
                want = oracles.cross_entropy_backward(long(x), t, long(lse), long(dloss), ignore, smoothing)
                scale = np.broadcast_to(np.abs(long(dloss))[:, None], shape)
                check(out, want, scale, kernel.precision, (shape, layout, params))


def test_reference_matches_central_differences():
    """d(sum(dloss * loss))/dx by central differences in F64 equals the backward reference."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5))
    t = np.array([0, 4, 2, 1])
    dloss = rng.standard_normal(4)
    for ignore, smoothing in ((-100, 0.0), (2, 0.2)):
        loss, lse = oracles.cross_entropy(x, t, ignore, smoothing)
        grad = oracles.cross_entropy_backward(x, t, lse, dloss, ignore, smoothing)
        numeric = np.zeros_like(x)
        h = 1e-6
        for index in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[index] += h
            down[index] -= h
            numeric[index] = (np.sum(dloss * oracles.cross_entropy(up, t, ignore, smoothing)[0])
                              - np.sum(dloss * oracles.cross_entropy(down, t, ignore, smoothing)[0])) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(lse, np.log(np.sum(np.exp(x), axis=1)), rtol=1e-15)


@pytest.mark.parametrize("dtype", (fk.DType.F32, fk.DType.F64))
def test_special_values(dtype):
    nan, inf = np.nan, np.inf
    x = np.array([[0.0, 1.0, 2.0], [nan, 1.0, 2.0], [inf, 1.0, 2.0], [-inf, -inf, -inf], [1e30, -1e30, 0.0]],
                 dtype.numpy)
    t = np.array([2, 1, 1, 0, 0], np.int64)
    loss, lse = fk.dispatch(CE, [x, t])
    assert np.isfinite(lse[0]) and np.isnan(lse[1]) and lse[2] == inf and lse[3] == -inf
    assert lse[4] == np.float32(1e30) if dtype == fk.DType.F32 else lse[4] == 1e30
    assert np.isnan(loss[1]) and loss[2] == inf and np.isnan(loss[3]) and loss[4] == 0
    want_loss, want_lse = oracles.cross_entropy(x.astype(np.float64), t)
    np.testing.assert_array_equal(np.isnan(loss), np.isnan(want_loss))
    np.testing.assert_array_equal(np.isnan(lse), np.isnan(want_lse))


def test_ignored_rows_and_all_kinds_of_call(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    t = np.array([0, -100, 4, 3, -100, 1], np.int32)
    loss, lse = fk.dispatch(CE, [x, t])
    assert loss[1] == 0 and loss[4] == 0 and np.all(loss[[0, 2, 3, 5]] > 0)
    dx = fk.dispatch(CEB, [x, t, lse, np.ones(6, np.float32)])
    assert (dx[[1, 4]] == 0).all()
    np.testing.assert_allclose(dx.sum(axis=1), 0, atol=1e-6)       # softmax minus a distribution
    g = Graph()
    gx, gt = g.input((6, 5), "f32"), g.input((6,), "i32")
    gloss, glse = g.fused_softmax_cross_entropy(gx, gt)
    gdx = g.fused_softmax_cross_entropy_backward(gx, gt, glse, g.constant(np.ones(6, np.float32)))
    got_loss, got_dx = g.compile([gloss, gdx]).run([x, t])
    np.testing.assert_array_equal(got_loss, loss)
    np.testing.assert_array_equal(got_dx, dx)


def test_refusals_leave_outputs_untouched(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = np.array([0, 2, 1, 0], np.int64)
    kernel = fk.bindings().lookup(CE, ["f32", "i64", "f32", "f32"], fk.Backend.CPU)

    def refused(inputs, outs, error, params=None, match=None):
        before = [np.array(o, copy=True) for o in outs]
        with pytest.raises(error, match=match):
            kernel(*inputs, out=tuple(outs), params=params)
        for o, b in zip(outs, before):
            np.testing.assert_array_equal(o, b)

    loss, lse = np.full(4, 9, np.float32), np.full(4, 9, np.float32)
    for bad in (-1, 3, 2 ** 40):
        targets = t.copy()
        targets[2] = bad
        refused([x, targets], [loss, lse], fk.KernelIndexError, match="not a class")
    refused([x, t], [loss], fk.OperandCountError)
    refused([x, t], [loss, lse.astype(np.float64)], fk.DTypeError)
    refused([x, t.astype(np.float32)], [loss, lse], fk.DTypeError)
    refused([x, t[:3]], [loss, lse], fk.ShapeError)
    refused([x[:, :, None], t], [loss, lse], fk.ShapeError)
    refused([x, t], [loss[:3], lse], fk.ShapeError)
    locked = lse.copy()
    locked.flags.writeable = False
    refused([x, t], [loss, locked], fk.ReadOnlyError, match="output 1")
    shared = np.zeros(8, np.float32)
    refused([x, t], [shared[:4], shared[2:6]], fk.AliasError, match="overlaps output 0")
    refused([x, t], [loss, x[0, :]], fk.AliasError)
    refused([x, t], [loss, lse], fk.ParamsError, params=fk.params.norm_last_dim())
    with pytest.raises(fk.ParamsError):
        fk.params.cross_entropy(label_smoothing=-0.5)
    refused([x, t], [loss, lse], fk.ParamsError, params=fk.params.cross_entropy(label_smoothing=1.5))
    refused([x.reshape((1,) * 7 + (4, 3)), t], [loss, lse], fk.ShapeError)


def test_huge_stride_zero_class_dim_is_refused_before_any_write():
    """Logits of 2**60 broadcast classes: the row scratch size overflows, a ShapeError."""
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1, 2 ** 60), (0, 0))
    t = np.zeros(1, np.int64)
    loss, lse = np.full(1, 9, np.float32), np.full(1, 9, np.float32)
    with pytest.raises(fk.ShapeError, match="impossible"):
        fk.dispatch(CE, [x, t], (loss, lse))
    assert loss[0] == 9 and lse[0] == 9
