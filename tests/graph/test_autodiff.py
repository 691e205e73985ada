"""Graph.grad: every gradient rule against central differences of the compiled forward plan (an
independent oracle: it never runs a backward kernel), gradients through views and broadcasting, a
training step of a 2-layer MLP plus an attention block against a NumPy hand-written backward pass
(1e-4 relative in F32), 100 SGD steps following the NumPy loss curve within 1e-3, and the errors."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel.graph import Graph

F64 = fk.DType.F64
OP = fk.OpKind


def _positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def _away_from_zero(rng, shape):
    return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _normal(rng, shape):
    return rng.standard_normal(shape)


# name -> (input makers [(shape, values)], build(graph, *leaves) -> Value): each builds a small F64
# graph exercising one rule (and the MUL and SUM rules of the loss on top)
CASES = {
    "neg": ([((3, 4), _normal)], lambda g, x: g.neg(x)),
    "add_broadcast": ([((3, 4), _normal), ((4,), _normal)], lambda g, x, y: g.add(x, y)),
    "sub_broadcast": ([((3, 4), _normal), ((3, 1), _normal)], lambda g, x, y: g.sub(x, y)),
    "mul": ([((2, 3), _normal), ((2, 3), _normal)], lambda g, x, y: g.mul(x, y)),
    "div": ([((2, 3), _normal), ((2, 3), _positive)], lambda g, x, y: g.div(x, y)),
    "sqr": ([((5,), _normal)], lambda g, x: g.sqr(x)),
    "sqrt": ([((5,), _positive)], lambda g, x: g.sqrt(x)),
    "rsqrt": ([((5,), _positive)], lambda g, x: g.rsqrt(x)),
    "recip": ([((5,), _away_from_zero)], lambda g, x: g.recip(x)),
    "exp": ([((5,), _normal)], lambda g, x: g.exp(x)),
    "log": ([((5,), _positive)], lambda g, x: g.log(x)),
    "sin": ([((5,), _normal)], lambda g, x: g.sin(x)),
    "cos": ([((5,), _normal)], lambda g, x: g.cos(x)),
    "abs": ([((5,), _away_from_zero)], lambda g, x: g.abs(x)),
    "affine": ([((5,), _normal)], lambda g, x: g.affine(x, mul=-1.5, add=2.0)),
    "tanh": ([((6,), _normal)], lambda g, x: g.tanh(x)),
    "sigmoid": ([((6,), _normal)], lambda g, x: g.sigmoid(x)),
    "relu": ([((6,), _away_from_zero)], lambda g, x: g.relu(x)),
    "silu": ([((6,), _normal)], lambda g, x: g.silu(x)),
    "gelu": ([((6,), _normal)], lambda g, x: g.gelu(x)),
    "gelu_erf": ([((6,), _normal)], lambda g, x: g.gelu_erf(x)),
    "powi": ([((6,), _away_from_zero)], lambda g, x: g.powi(x, exp=3)),
    "softmax": ([((3, 5), _normal)], lambda g, x: g.softmax_last_dim(x)),
    "log_softmax": ([((3, 5), _normal)], lambda g, x: g.log_softmax_last_dim(x)),
    "rms_norm": ([((3, 6), _normal), ((6,), _normal)], lambda g, x, w: g.rms_norm(x, w, eps=1e-5)),
    "layer_norm": ([((3, 6), _normal), ((6,), _normal), ((6,), _normal)],
                   lambda g, x, w, b: g.layer_norm(x, w, b, eps=1e-5)),
    "matmul_batch_broadcast": ([((2, 3, 4), _normal), ((4, 5), _normal)], lambda g, a, b: g.matmul(a, b)),
    "sum": ([((3, 4, 2), _normal)], lambda g, x: g.sum(x, dims=[1])),
    "mean_keepdim": ([((3, 4), _normal)], lambda g, x: g.mean(x, dims=[0], keepdim=True)),
    "cross_entropy": ([((4, 5), _normal)],
                      lambda g, x: g.fused_softmax_cross_entropy(
                          x, g.constant(np.array([0, 4, 2, 2], np.int64)), label_smoothing=0.1)[0]),
    "where": ([((3, 4), _normal), ((4,), _normal)],
              lambda g, a, b: g.where(g.constant(np.arange(12).reshape(3, 4) % 3 == 0), a, b)),
    "rope": ([((2, 3, 4), _normal)],
             lambda g, x: g.rope(x, g.constant(np.cos(np.arange(6.0)).reshape(3, 2)),
                                 g.constant(np.sin(np.arange(6.0)).reshape(3, 2)))),
    "transpose_view": ([((3, 4), _normal), ((3, 2), _normal)], lambda g, a, b: g.matmul(a.T, b)),
    "broadcast_view": ([((1, 4), _normal)], lambda g, x: g.mul(g.broadcast_to(x, (3, 4)), g.exp(x))),
    "reshape_view": ([((2, 6), _normal)], lambda g, x: g.softmax_last_dim(g.reshape(x, (3, 4)))),
    "index_select": ([((5, 3), _normal)],
                     lambda g, x: g.index_select(x, g.constant(np.array([4, 0, 4], np.int64)), axis=0)),
    "gather": ([((3, 4), _normal)],
               lambda g, x: g.gather(x, g.constant(np.array([[1, 1], [0, 3], [2, 2]], np.int64)), axis=1)),
    "flash_attn_causal_gqa": ([((1, 4, 3, 4), _normal), ((1, 2, 5, 4), _normal), ((1, 2, 5, 3), _normal)],
                              lambda g, q, k, v: g.flash_attn(q, k, v, scale=0.5, causal=True)),
    "flash_attn_window_softcap": ([((2, 1, 4, 2), _normal), ((2, 1, 4, 2), _normal), ((2, 1, 4, 2), _normal)],
                                  lambda g, q, k, v: g.flash_attn(q, k, v, scale=0.7, softcap=2.0,
                                                                  window_left=1, window_right=1)),
    "slices_of_one_buffer": ([((3, 6), _normal)],
                             lambda g, x: g.mul(g.exp(x[:, 0:3]), g.transpose(x[::-1, 3:], (0, 1)))),
    "strided_window": ([((4, 5), _normal)], lambda g, x: g.sin(x[1::2, ::-2])),
    # slices whose gradients join by one CONCAT: along an axis they share, along a new axis (the
    # q, k, v heads of one projection, read transposed), and with a whole read of the same buffer
    "slices_tile_an_axis": ([((3, 6), _normal)], lambda g, x: g.mul(g.sin(x[:, 4:]), g.exp(x[:, :2]))
                            + g.cos(x[:, 2:4])),
    "slices_stack_on_a_new_axis": ([((4, 12), _normal)],
                                   lambda g, x: _heads_product(g, g.reshape(x, (4, 3, 2, 2)))),
    "slices_tile_and_a_whole_read": ([((2, 6), _normal)],
                                     lambda g, x: g.mul(x[:, 3:], g.exp(x[:, :3])) + g.sin(x)[:, 1:4]),
    "slices_overlap": ([((3, 5), _normal)], lambda g, x: g.mul(g.sin(x[:, :3]), g.exp(x[:, 2:]))),
    "fused_linear": ([((3, 4), _normal), ((4, 5), _normal), ((5,), _normal)],
                     lambda g, x, w, b: g.fused_linear(x, w, b)),
    "conv2d_bias_strided_grouped": ([((2, 4, 5, 6), _normal), ((4, 2, 2, 3), _normal), ((4,), _normal)],
                                    lambda g, x, w, b: g.conv2d(x, w, b, stride=(2, 1), padding=(1, 0),
                                                                dilation=(1, 2), groups=2)),
    "conv1d_bias_strided_grouped": ([((2, 4, 9), _normal), ((6, 2, 3), _normal), ((6,), _normal)],
                                    lambda g, x, w, b: g.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2)),
    "conv1d_plain": ([((1, 3, 7), _normal), ((2, 3, 2), _normal)], lambda g, x, w: g.conv1d(x, w)),
    # ONNX's asymmetric pads (begin, end): more after (x grows, dx drops the rows), more before (dy grows)
    "conv1d_pads_more_after": ([((2, 2, 7), _normal), ((3, 2, 3), _normal), ((3,), _normal)],
                               lambda g, x, w, b: g.conv1d(x, w, b, stride=2, padding=(1, 4))),
    "conv1d_pads_more_before": ([((1, 4, 8), _normal), ((2, 2, 2), _normal)],
                                lambda g, x, w: g.conv1d(x, w, stride=3, padding=(5, 0), dilation=2, groups=2)),
    "conv_transpose2d_bias_grouped": (
        [((2, 4, 3, 4), _normal), ((4, 3, 3, 2), _normal), ((6,), _normal)],
        lambda g, x, w, b: g.conv_transpose2d(x, w, b, stride=(2, 1), pads_begin=(1, 0), pads_end=(0, 1),
                                              dilation=(1, 2), output_padding=(1, 0), groups=2)),
    # per axis r = pads_begin - pads_end + output_padding: past the stride (extra rows), and negative
    "conv_transpose2d_extra_rows": ([((1, 2, 3, 3), _normal), ((2, 2, 2, 3), _normal)],
                                    lambda g, x, w: g.conv_transpose2d(x, w, stride=2, pads_begin=(3, 0),
                                                                       pads_end=(0, 2), output_padding=(1, 0))),
    "max_dims": ([((3, 4, 5), _normal)], lambda g, x: g.max(x, dims=[1, 2])),
    "reduce_max_to": ([((3, 4), _normal)], lambda g, x: g.reduce_max_to(x, shape=(3, 1))),
    "reduce_sum_to": ([((2, 3, 4), _normal)], lambda g, x: g.reduce_sum_to(x, shape=(3, 1))),
    "pad_reflect": ([((3, 5), _normal)], lambda g, x: g.pad(x, before=[1, 2], after=[2, 1], mode="reflect")),
    "shared_input": ([((4,), _normal)], lambda g, x: g.mul(g.exp(x), g.sin(x))),
}


def _heads_product(g, x):
    """q * sin(k) * v for q, k, v = x[:, i] (i = 0, 1, 2), each read with its first two axes swapped."""
    q, k, v = (g.transpose(x[:, i], (1, 0, 2)) for i in range(3))
    return g.mul(g.mul(q, g.sin(k)), v)


def _loss_graph(name, rng):
    makers, build = CASES[name]
    g = Graph()
    leaves = [g.input(shape, "f64") for shape, _ in makers]
    out = build(g, *leaves)
    weights = g.constant(rng.standard_normal(out.shape))
    loss = g.sum(g.mul(out, weights))
    values = [maker(rng, shape) for shape, maker in makers]
    return g, leaves, loss, values


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_central_differences(name):
    rng = np.random.default_rng(sorted(CASES).index(name))
    g, leaves, loss, values = _loss_graph(name, rng)
    forward = g.compile(loss)
    grads = g.grad(loss, leaves)
    plan = g.compile([loss] + grads)
    got = plan.run(values)
    np.testing.assert_allclose(got[0], forward.run(values), rtol=1e-14)
    h = 1e-6
    for position, (value, grad) in enumerate(zip(values, got[1:])):
        assert grad.shape == value.shape and grad.dtype == np.float64
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            up = [v.copy() for v in values]
            down = [v.copy() for v in values]
            up[position][index] += h
            down[position][index] -= h
            numeric[index] = (forward.run(up) - forward.run(down)) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=2e-6, atol=2e-7, err_msg=f"{name} input {position}")


def _plan_ops(plan):
    return {line.split("(")[0].split()[-1] for line in plan.explain().splitlines() if line.startswith(("step", "    node"))}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_slices_that_tile_a_buffer_join_by_one_concat(dtype, monkeypatch):
    """q, k, v cut from one [S, 3, H, D] projection and read transposed: their gradients fill the
    projection's by one CONCAT of the transposed views (no SCATTER_ADD, no zeros, no copy first),
    bit for bit what scattering them into zeros gives (NumPy: the products' derivatives)."""
    from fuel_kernel.graph import autodiff
    rng = np.random.default_rng(7)
    x_value = rng.standard_normal((5, 3 * 2 * 4)).astype({"f32": np.float32, "f64": np.float64}[dtype])
    r_value = rng.standard_normal((2, 5, 4)).astype(x_value.dtype)

    def gradient_plan():
        g = Graph()
        x = g.input(x_value.shape, dtype)
        heads = g.reshape(x, (5, 3, 2, 4))
        q, k, v = (g.transpose(heads[:, i], (1, 0, 2)) for i in range(3))
        loss = g.sum(g.mul(g.mul(g.mul(q, k), v), g.constant(r_value)))
        return g.compile(g.grad(loss, [x])[0])
    plan = gradient_plan()
    ops_used = _plan_ops(plan)
    assert "concat" in ops_used and "scatter_add" not in ops_used and "contiguize" not in ops_used
    got = plan.run([x_value])
    qv, kv, vv = (x_value.reshape(5, 3, 2, 4)[:, i].transpose(1, 0, 2) for i in range(3))
    expected = np.stack([kv * vv * r_value, qv * vv * r_value, qv * kv * r_value], axis=0)  # [3, 2, 5, 4]
    np.testing.assert_allclose(got, expected.transpose(2, 0, 1, 3).reshape(x_value.shape),
                               rtol=1e-6 if dtype == "f32" else 1e-14)
    monkeypatch.setattr(autodiff, "_join_slices", lambda graph, pieces: None)
    scattered = gradient_plan()
    assert "scatter_add" in _plan_ops(scattered)
    np.testing.assert_array_equal(got, scattered.run([x_value]))


def test_slices_that_do_not_tile_a_buffer_scatter():
    """Overlapping slices, a partial cover and a reversed slice keep SCATTER_ADD (into zeros), with
    the overlap's gradients added (NumPy oracle)."""
    rng = np.random.default_rng(8)
    x_value = rng.standard_normal((3, 6))
    for build, expected in [
            (lambda g, x: g.add(x[:, :4], x[:, 2:]), lambda: np.c_[np.ones((3, 2)), 2 * np.ones((3, 2)), np.ones((3, 2))]),
            (lambda g, x: g.add(x[:, :2], x[:, 2:4]), lambda: np.c_[np.ones((3, 4)), np.zeros((3, 2))]),
            (lambda g, x: g.add(x[:, :3], x[:, :2:-1]), lambda: np.ones((3, 6)))]:
        g = Graph()
        x = g.input(x_value.shape, "f64")
        (dx,) = g.grad(g.sum(build(g, x)), [x])
        plan = g.compile(dx)
        assert "scatter_add" in _plan_ops(plan) and "concat" not in _plan_ops(plan)
        np.testing.assert_array_equal(plan.run([x_value]), expected())


def test_cast_passes_the_gradient_through_in_the_input_dtype():
    """CAST's gradient is the output's gradient cast back (central differences cannot see through
    an F32 round trip, so the gradient is checked against its definition)."""
    g = Graph()
    x = g.input((5,), "f64")
    r = np.arange(1.0, 6.0) / 7
    loss = g.sum(g.mul(g.cast(g.cast(x, "f32"), "f64"), g.constant(r)))
    (dx,) = g.grad(loss, [x])
    assert dx.dtype == F64
    np.testing.assert_array_equal(g.compile(dx).run([np.ones(5)]), r.astype(np.float32).astype(np.float64))


def test_every_rule_is_exercised():
    from fuel_kernel.graph.autodiff import RULES
    exercised = set()
    for name in CASES:
        g, leaves, loss, _ = _loss_graph(name, np.random.default_rng(0))
        exercised |= {node.key for node in g.nodes}
    assert not set(RULES) - exercised - {OP.CONTIGUIZE, OP.CAST}, sorted(o.name for o in set(RULES) - exercised)


# ---- a training step: 2-layer MLP and an attention block, against NumPy ------------------------
D, H, S, N_CLASSES = 16, 32, 6, 5


def _params(rng):
    p = {"w1": rng.standard_normal((D, H)) / 4, "b1": rng.standard_normal(H) / 4,
         "w2": rng.standard_normal((H, D)) / 6, "b2": rng.standard_normal(D) / 4,
         "ln_w": 1 + rng.standard_normal(D) / 8, "ln_b": rng.standard_normal(D) / 8,
         "wq": rng.standard_normal((D, D)) / 4, "wk": rng.standard_normal((D, D)) / 4,
         "wv": rng.standard_normal((D, D)) / 4, "wo": rng.standard_normal((D, N_CLASSES)) / 4}
    return {k: v.astype(np.float32) for k, v in p.items()}


NAMES = ["w1", "b1", "w2", "b2", "ln_w", "ln_b", "wq", "wk", "wv", "wo"]


def _build_step():
    g = Graph()
    x = g.input((S, D), "f32", name="x")
    targets = g.input((S,), "i64", name="targets")
    p = {k: g.input(shape, "f32", name=k) for k, shape in
         (("w1", (D, H)), ("b1", (H,)), ("w2", (H, D)), ("b2", (D,)), ("ln_w", (D,)), ("ln_b", (D,)),
          ("wq", (D, D)), ("wk", (D, D)), ("wv", (D, D)), ("wo", (D, N_CLASSES)))}
    h = g.gelu(g.add(g.matmul(x, p["w1"]), p["b1"]))
    y = g.add(g.add(g.matmul(h, p["w2"]), p["b2"]), x)            # residual
    z = g.layer_norm(y, p["ln_w"], p["ln_b"], eps=1e-5)
    q, k, v = g.matmul(z, p["wq"]), g.matmul(z, p["wk"]), g.matmul(z, p["wv"])
    scores = g.affine(g.matmul(q, k.T), mul=1 / np.sqrt(D), add=0.0)
    a = g.matmul(g.softmax_last_dim(scores), v)
    logits = g.matmul(g.add(a, z), p["wo"])
    losses, _ = g.fused_softmax_cross_entropy(logits, targets)
    loss = g.mean(losses)
    grads = g.grad(loss, [p[n] for n in NAMES])
    return g.compile([loss] + grads)


def _gelu(x):
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def _numpy_step(p, x, targets):
    """The same model's loss and gradients, forward and backward written out in F64."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x = x.astype(np.float64)
    u = x @ p["w1"] + p["b1"]
    h, dh_du = _gelu(u)
    y = h @ p["w2"] + p["b2"] + x
    mu = y.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    yh = (y - mu) * r
    z = yh * p["ln_w"] + p["ln_b"]
    q, k, v = z @ p["wq"], z @ p["wk"], z @ p["wv"]
    s = q @ k.T / np.sqrt(D)
    e = np.exp(s - s.max(-1, keepdims=True))
    pa = e / e.sum(-1, keepdims=True)
    a = pa @ v
    c = a + z
    logits = c @ p["wo"]
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    loss = np.mean(lse - logits[np.arange(S), targets])
    dlogits = np.exp(logits - lse[:, None])
    dlogits[np.arange(S), targets] -= 1
    dlogits /= S
    g = {"wo": c.T @ dlogits}
    dc = dlogits @ p["wo"].T
    da, dz = dc, dc.copy()
    dpa, dv = da @ v.T, pa.T @ da
    ds = pa * (dpa - (dpa * pa).sum(-1, keepdims=True)) / np.sqrt(D)
    dq, dk = ds @ k, ds.T @ q
    g["wq"], g["wk"], g["wv"] = z.T @ dq, z.T @ dk, z.T @ dv
    dz += dq @ p["wq"].T + dk @ p["wk"].T + dv @ p["wv"].T
    g["ln_w"], g["ln_b"] = (dz * yh).sum(0), dz.sum(0)
    gz = dz * p["ln_w"]
    dy = r * (gz - gz.mean(-1, keepdims=True) - yh * (gz * yh).mean(-1, keepdims=True))
    g["w2"], g["b2"] = h.T @ dy, dy.sum(0)
    du = (dy @ p["w2"].T) * dh_du
    g["w1"], g["b1"] = x.T @ du, du.sum(0)
    return loss, g


def test_training_step_matches_numpy():
    rng = np.random.default_rng(7)
    params = _params(rng)
    x = rng.standard_normal((S, D)).astype(np.float32)
    targets = rng.integers(0, N_CLASSES, S)
    plan = _build_step()
    got = plan.run([x, targets] + [params[n] for n in NAMES])
    loss, want = _numpy_step(params, x, targets)
    np.testing.assert_allclose(got[0], loss, rtol=1e-4)
    for name, grad in zip(NAMES, got[1:]):
        scale = np.max(np.abs(want[name]))
        np.testing.assert_allclose(grad, want[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def test_sgd_follows_the_numpy_loss_curve():
    rng = np.random.default_rng(11)
    params = _params(rng)
    reference = {k: v.astype(np.float64) for k, v in params.items()}
    x = rng.standard_normal((S, D)).astype(np.float32)
    targets = rng.integers(0, N_CLASSES, S)
    plan = _build_step()
    lr = 0.1
    ours, theirs = [], []
    for _ in range(100):
        out = plan.run([x, targets] + [params[n] for n in NAMES])
        ours.append(float(out[0]))
        for name, grad in zip(NAMES, out[1:]):
            params[name] = params[name] - np.float32(lr) * grad
        loss, grads = _numpy_step(reference, x, targets)
        theirs.append(loss)
        for name in NAMES:
            reference[name] = reference[name] - lr * grads[name]
    assert theirs[-1] < theirs[0] / 2                      # it trains
    np.testing.assert_allclose(ours, theirs, atol=1e-3, rtol=0)


# ---- errors -------------------------------------------------------------------------------------------
def test_grad_refusals():
    g = Graph()
    x = g.input((4, 4), "f64")
    n = g.input((4,), "i64")
    y = g.floor(x)
    with pytest.raises(fk.NoKernelError, match="floor.*no gradient rule"):
        g.grad(g.sum(y), [x])
    with pytest.raises(fk.DTypeError):
        g.grad(g.sum(g.exp(x)), [n])
    with pytest.raises(fk.ShapeError, match="whole value"):
        g.grad(g.sum(g.exp(x)), [x.T])
    with pytest.raises(fk.ShapeError, match="seed"):
        g.grad(g.exp(x), [x], seed=g.input((3,), "f64"))
    with pytest.raises(fk.OperandTypeError):
        g.grad(g.sum(x), 5)
    z = g.input((4, 4), "f64")
    unused = g.grad(g.sum(g.exp(x)), [z])[0]
    arrays = [np.ones((4, 4)), np.ones(4, np.int64), np.ones(3), np.ones((4, 4))]
    assert (g.compile(unused).run(arrays) == 0).all()


def test_an_output_without_a_rule_is_named():
    """The log-sum-exp output of FUSED_SOFTMAX_CROSS_ENTROPY has no gradient rule: differentiating
    through it fails at grad() time, naming it."""
    g = Graph()
    x = g.input((3, 4), "f32")
    loss, lse = g.fused_softmax_cross_entropy(x, g.constant(np.zeros(3, np.int64)))
    with pytest.raises(fk.NoKernelError, match="log-sum-exp"):
        g.grad(g.sum(lse), [x])
