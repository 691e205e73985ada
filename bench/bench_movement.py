"""Movement, indexing and attention kernels against their peers with their performance targets, single thread.

FLASH_ATTN f32 [1, 8, 1024, 64], [1, 16, 2048, 64] and [1, 8, 2048, 128] causal (prefill) against torch's
scaled_dot_product_attention on the CPU, with their useful GFLOP/s,
FLASH_ATTN_BACKWARD on the same shape against torch's SDPA backward and a dense NumPy backward (the
[S, S] matrices in full), and
INDEX_SELECT / GATHER of 1M rows against numpy.take, and WRITE_SLICE into an f16 KV cache (one decode
token, a 512-token prefill chunk) against NumPy slice assignment; every contender writes a
preallocated output.
2026-12-06, one pinned core of a Zen 4 VM, 3 runs: FLASH_ATTN causal [1, 16, 2048, 64] 0.76x SDPA
(0.93x before its softmax rows ran in registers and K^T was packed by transposes), [1, 8, 2048, 128]
0.75x (0.885x). Run: python -m bench --only "FLASH_ATTN f32"
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import

OP = fk.OpKind
D = fk.DType


def _kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), fk.Backend.CPU)


def flash_attn_case(shape=(1, 8, 1024, 64), target="fuel_kernel <= 1.5x torch sdpa"):
    """FLASH_ATTN causal on [batch, heads, S, D] against torch's SDPA; the rate is the causal
    product's useful GFLOP (QK^T and PV over the lower triangle, 2 S (S + 1) D per head)."""
    b, h, s, d = shape
    state = {}
    kernel = _kernel(OP.FLASH_ATTN, [D.F32] * 4)
    params = fk.params.flash_attn(d ** -0.5, causal=True)
    torch, reason = optional_import("torch")

    def setup():
        if state:
            return
        rng = np.random.default_rng(0)
        state["q"], state["k"], state["v"] = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        state["out"] = np.empty(shape, np.float32)
        if torch is not None:
            torch.set_num_threads(1)
            state["t"] = tuple(torch.from_numpy(state[name]) for name in "qkv")

    contenders = {"fuel_kernel FLASH_ATTN": lambda: kernel(state["q"], state["k"], state["v"], out=state["out"],
                                                         params=params)}
    skipped = {}
    if torch is not None:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        contenders["torch sdpa (1 thread)"] = lambda: sdpa(*state["t"], is_causal=True)
        baseline = "torch sdpa (1 thread)"
    else:
        skipped["torch sdpa (1 thread)"] = reason
        baseline = "fuel_kernel FLASH_ATTN"
    return Case(name=f"FLASH_ATTN f32 {list(shape)} causal", contenders=contenders, baseline=baseline,
                target=target, skipped=skipped, setup=setup, rate=(b * h * 2.0 * s * (s + 1) * d / 1e9, "GFLOP"),
                notes=f"fuel_kernel scratch: K^T and V packed once per kv head (Sk x D each) plus one "
                      f"score tile; the {s}x{s} score matrix is never formed")


def flash_attn_backward_case():
    rng = np.random.default_rng(0)
    shape = (1, 8, 1024, 64)
    q, k, v, do = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    scale = np.float32(64 ** -0.5)
    params = fk.params.flash_attn(float(scale), causal=True)
    o, lse = np.empty(shape, np.float32), np.empty(shape[:3], np.float32)
    _kernel(OP.FLASH_ATTN, [D.F32] * 5)(q, k, v, out=(o, lse), params=params)
    grads = tuple(np.empty(shape, np.float32) for _ in range(3))
    kernel = _kernel(OP.FLASH_ATTN_BACKWARD, [D.F32] * 3 + [D.F32] + [D.F32] * 4)
    future = np.triu(np.ones(shape[2:3] * 2, bool), 1)

    def numpy_backward():
        s = np.matmul(q, k.swapaxes(-1, -2)) * scale
        p = np.exp(s - lse[..., None])
        p[..., future] = 0
        ds = p * (np.matmul(do, v.swapaxes(-1, -2)) - (do * o).sum(-1, keepdims=True))
        return np.matmul(ds, k) * scale, np.matmul(ds.swapaxes(-1, -2), q) * scale, np.matmul(p.swapaxes(-1, -2), do)

    # flops: 5 matmuls of 2 S^2 D each over the visible half (causal), as FlashAttention counts them
    # (fuel_kernel takes rowsum(do * o), o not being an operand, from the same sweep's p and dp tiles)
    flops = 5 * 2 * shape[0] * shape[1] * shape[2] * shape[2] * shape[3] / 2
    contenders = {"numpy dense backward": numpy_backward,
                  "fuel_kernel FLASH_ATTN_BACKWARD": lambda: kernel(q, k, v, lse, do, out=grads, params=params)}
    skipped, baseline, target = {}, "numpy dense backward", "fuel_kernel <= 1.0x numpy"
    torch, reason = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        tq, tk, tv = (torch.from_numpy(a.copy()).requires_grad_() for a in (q, k, v))
        tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        tdo = torch.from_numpy(do)
        contenders["torch sdpa backward (1 thread)"] = lambda: torch.autograd.grad(
            tout, (tq, tk, tv), tdo, retain_graph=True)
        baseline, target = "torch sdpa backward (1 thread)", "fuel_kernel <= 1.0x torch sdpa backward"
    else:
        skipped["torch sdpa backward (1 thread)"] = reason
    return Case(name="FLASH_ATTN_BACKWARD f32 [1, 8, 1024, 64] causal", contenders=contenders,
                baseline=baseline, target=target, skipped=skipped,
                notes=f"{flops / 1e9:.2f} GFLOP per call (GFLOP/s = that / time); fuel_kernel scratch: "
                      "K, V panels and dK, dV accumulators per kv head plus a query block's p and dp "
                      "tiles over its band (2 x 64 x Sk)")


def index_cases():
    rng = np.random.default_rng(1)
    n = 1 << 20
    table = rng.standard_normal((1 << 16, 16)).astype(np.float32)
    rows = rng.integers(0, table.shape[0], n)
    out_rows = np.empty((n, 16), np.float32)
    select = _kernel(OP.INDEX_SELECT, [D.F32, D.I64, D.F32])
    p_select = fk.params.index_select(0)
    yield Case(
        name="INDEX_SELECT 1M rows of 16 f32 (i64 indices)",
        contenders={"numpy.take(axis=0)": lambda: np.take(table, rows, axis=0, out=out_rows),
                    "fuel_kernel INDEX_SELECT": lambda: select(table, rows, out=out_rows, params=p_select)},
        baseline="numpy.take(axis=0)", target="fuel_kernel <= 1.0x numpy.take")

    flat = rng.standard_normal(n).astype(np.float32)
    idx = rng.integers(0, n, n)
    out_flat = np.empty(n, np.float32)
    gather = _kernel(OP.GATHER, [D.F32, D.I64, D.F32])
    p_gather = fk.params.gather(0)
    yield Case(
        name="GATHER 1M f32 elements (i64 indices)",
        contenders={"numpy.take": lambda: np.take(flat, idx, out=out_flat),
                    "fuel_kernel GATHER": lambda: gather(flat, idx, out=out_flat, params=p_gather)},
        baseline="numpy.take", target="fuel_kernel <= 1.0x numpy.take")


def write_slice_cases():
    """A [1, 8, 4096, 128] f16 key cache: one decode token written at position 2000 from a position
    operand (the shape a decode loop runs), and a 512-token chunk at 1024 (a prefill step)."""
    rng = np.random.default_rng(2)
    cache = np.zeros((1, 8, 4096, 128), np.float16)
    params = fk.params.write_slice((0, 0, 0, 0), axis=2)
    for tokens, at in ((1, 2000), (512, 1024)):
        src = rng.standard_normal((1, 8, tokens, 128)).astype(np.float16)
        position = np.array(at, np.int64)
        kernel = _kernel(OP.WRITE_SLICE, [D.F16, D.I64, D.F16])

        def assign(src=src, at=at, tokens=tokens):
            cache[:, :, at:at + tokens] = src
        yield Case(
            name=f"WRITE_SLICE f16 KV cache [1, 8, 4096, 128] <- {tokens} token{'s' if tokens > 1 else ''}",
            contenders={"numpy slice assignment": assign,
                        "fuel_kernel WRITE_SLICE": lambda src=src, position=position: kernel(
                            src, position, out=cache, params=params)},
            baseline="numpy slice assignment", target="fuel_kernel <= 1.0x numpy slice assignment",
            notes=f"{src.nbytes} bytes written per call; the position is read from an I64 operand")


def cases():
    yield flash_attn_case()
    # the whole-model issue's prefill shapes (GPT-2-sized heads, and D = 128)
    for shape in ((1, 16, 2048, 64), (1, 8, 2048, 128)):
        yield flash_attn_case(shape, target="fuel_kernel <= 0.5x torch sdpa")
    yield flash_attn_backward_case()
    yield from index_cases()
    yield from write_slice_cases()
