"""Graph.grad against torch.autograd, where PyTorch is installed (it is not a test dependency: the
rules are checked against central differences in test_autodiff.py everywhere; this cross-check runs
on machines that have torch).  Each backward op through Graph.grad in F32 against torch's gradient
of the same loss at 1e-4 relative, a training step of a 2-layer MLP plus an attention block, and
100 SGD steps following torch's loss curve within 1e-3."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel.graph import Graph

torch = pytest.importorskip("torch")
F = torch.nn.functional
RTOL = 1e-4


def _attention_reference(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0):
    """softmax(scale q k^T (softcapped), masked bottom-right as FLASH_ATTN) v, GQA by repeat."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = scale * q @ k.transpose(-1, -2)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[2], k.shape[2]
    pos = torch.arange(sq)[:, None] + sk - sq
    key = torch.arange(sk)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        visible &= key <= pos
    if window[0] >= 0:
        visible &= key >= pos - window[0]
    if window[1] >= 0:
        visible &= key <= pos + window[1]
    s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


CASES = {
    "gelu": ([(4, 7)], lambda g, x: g.gelu(x), lambda x: F.gelu(x, approximate="tanh")),
    "gelu_erf": ([(4, 7)], lambda g, x: g.gelu_erf(x), lambda x: F.gelu(x)),
    "silu": ([(4, 7)], lambda g, x: g.silu(x), F.silu),
    "sigmoid": ([(4, 7)], lambda g, x: g.sigmoid(x), torch.sigmoid),
    "tanh": ([(4, 7)], lambda g, x: g.tanh(x), torch.tanh),
    "relu": ([(4, 7)], lambda g, x: g.relu(x), F.relu),
    "powi": ([(4, 7)], lambda g, x: g.powi(x, exp=3), lambda x: x ** 3),
    "softmax": ([(4, 7)], lambda g, x: g.softmax_last_dim(x), lambda x: F.softmax(x, -1)),
    "log_softmax": ([(4, 7)], lambda g, x: g.log_softmax_last_dim(x), lambda x: F.log_softmax(x, -1)),
    "rms_norm": ([(4, 8), (8,)], lambda g, x, w: g.rms_norm(x, w, eps=1e-5),
                 lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w),
    "layer_norm": ([(4, 8), (8,), (8,)], lambda g, x, w, b: g.layer_norm(x, w, b, eps=1e-5),
                   lambda x, w, b: F.layer_norm(x, (8,), w, b, eps=1e-5)),
    "flash_attn_gqa_causal": ([(1, 4, 70, 16), (1, 2, 80, 16), (1, 2, 80, 8)],
                              lambda g, q, k, v: g.flash_attn(q, k, v, scale=0.25, causal=True),
                              lambda q, k, v: _attention_reference(q, k, v, 0.25, causal=True)),
    "flash_attn_window_softcap": ([(2, 2, 9, 4), (2, 2, 9, 4), (2, 2, 9, 4)],
                                  lambda g, q, k, v: g.flash_attn(q, k, v, scale=0.5, softcap=3.0, window_left=2,
                                                                  window_right=1),
                                  lambda q, k, v: _attention_reference(q, k, v, 0.5, window=(2, 1), softcap=3.0)),
    "cross_entropy": ([(6, 5)], lambda g, x: g.fused_softmax_cross_entropy(
                          x, g.constant(np.array([0, 4, 1, -100, 2, 2])), label_smoothing=0.1)[0],
                      lambda x: F.cross_entropy(x, torch.tensor([0, 4, 1, -100, 2, 2]), reduction="none",
                                                label_smoothing=0.1)),
    "pad_reflect": ([(2, 3, 6)], lambda g, x: g.pad(x, before=[2], after=[1], mode="reflect"),
                    lambda x: F.pad(x, (2, 1), mode="reflect")),
    "conv2d": ([(2, 4, 7, 6), (6, 2, 3, 2), (6,)],
               lambda g, x, w, b: g.conv2d(x, w, b, stride=2, padding=1, groups=2),
               lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2)),
    "fused_linear": ([(5, 6), (6, 3), (3,)], lambda g, x, w, b: g.fused_linear(x, w, b),
                     lambda x, w, b: x @ w + b),
    "amax": ([(4, 6)], lambda g, x: g.reduce_max_to(x, shape=(4, 1)), lambda x: torch.amax(x, 1, keepdim=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_torch(name):
    shapes, build, reference = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = Graph()
    leaves = [g.input(s, "f32") for s in shapes]
    out = build(g, *leaves)
    weights = rng.standard_normal(out.shape).astype(np.float32)
    loss = g.sum(g.mul(out, g.constant(weights)))
    got = g.compile([loss] + g.grad(loss, leaves)).run(values)
    tensors = [torch.tensor(v, requires_grad=True) for v in values]
    want = (reference(*tensors) * torch.tensor(weights)).sum()
    want.backward()
    np.testing.assert_allclose(got[0], want.item(), rtol=RTOL, atol=RTOL)
    for i, (ours, t) in enumerate(zip(got[1:], tensors)):
        theirs = t.grad.numpy()
        scale = max(float(np.max(np.abs(theirs))), 1e-6)
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * scale, err_msg=f"{name} input {i}")


D, H, S, CLASSES = 16, 32, 6, 5
NAMES = ["w1", "b1", "w2", "b2", "ln_w", "ln_b", "wq", "wk", "wv", "wo"]
SHAPES = {"w1": (D, H), "b1": (H,), "w2": (H, D), "b2": (D,), "ln_w": (D,), "ln_b": (D,),
          "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, CLASSES)}


def _plan():
    g = Graph()
    x, targets = g.input((S, D), "f32"), g.input((S,), "i64")
    p = {n: g.input(SHAPES[n], "f32") for n in NAMES}
    h = g.gelu(g.add(g.matmul(x, p["w1"]), p["b1"]))
    y = g.add(g.add(g.matmul(h, p["w2"]), p["b2"]), x)
    z = g.layer_norm(y, p["ln_w"], p["ln_b"], eps=1e-5)
    q, k, v = (g.reshape(g.matmul(z, p[n]), (1, 1, S, D)) for n in ("wq", "wk", "wv"))
    a = g.reshape(g.flash_attn(q, k, v, scale=1 / np.sqrt(D), causal=True), (S, D))
    losses, _ = g.fused_softmax_cross_entropy(g.matmul(g.add(a, z), p["wo"]), targets)
    loss = g.mean(losses)
    return g.compile([loss] + g.grad(loss, [p[n] for n in NAMES]))


def _torch_loss(p, x, targets):
    h = F.gelu(x @ p["w1"] + p["b1"], approximate="tanh")
    y = h @ p["w2"] + p["b2"] + x
    z = F.layer_norm(y, (D,), p["ln_w"], p["ln_b"], eps=1e-5)
    q, k, v = (z @ p[n] for n in ("wq", "wk", "wv"))
    a = F.scaled_dot_product_attention(q[None, None], k[None, None], v[None, None], is_causal=True)[0, 0]
    return F.cross_entropy((a + z) @ p["wo"], targets)


def test_training_step_and_sgd_follow_torch():
    rng = np.random.default_rng(5)
    params = {n: (rng.standard_normal(SHAPES[n]) / 4).astype(np.float32) for n in NAMES}
    params["ln_w"] += 1
    x = rng.standard_normal((S, D)).astype(np.float32)
    targets = rng.integers(0, CLASSES, S)
    plan = _plan()
    tp = {n: torch.tensor(v, requires_grad=True) for n, v in params.items()}
    tx, tt = torch.tensor(x), torch.tensor(targets)
    lr, ours, theirs = 0.1, [], []
    for step in range(100):
        out = plan.run([x, targets] + [params[n] for n in NAMES])
        loss = _torch_loss(tp, tx, tt)
        loss.backward()
        if step == 0:                               # one training step: the loss and every gradient
            np.testing.assert_allclose(out[0], loss.item(), rtol=RTOL)
            for n, grad in zip(NAMES, out[1:]):
                want = tp[n].grad.numpy()
                np.testing.assert_allclose(grad, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)), err_msg=n)
        ours.append(float(out[0]))
        theirs.append(loss.item())
        with torch.no_grad():
            for n, grad in zip(NAMES, out[1:]):
                params[n] = params[n] - np.float32(lr) * grad
                tp[n] -= lr * tp[n].grad
                tp[n].grad = None
    assert theirs[-1] < theirs[0] / 2
    np.testing.assert_allclose(ours, theirs, atol=1e-3, rtol=0)
