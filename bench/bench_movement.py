"""Movement, indexing and attention kernels against their peers with their performance targets, single thread.

FLASH_ATTN f32 [1, 8, 1024, 64] causal against torch's scaled_dot_product_attention on the CPU, and
INDEX_SELECT / GATHER of 1M rows against numpy.take; every contender writes a preallocated output.
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import

OP = fk.OpKind
D = fk.DType


def _kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), fk.Backend.CPU)


def flash_attn_case():
    rng = np.random.default_rng(0)
    shape = (1, 8, 1024, 64)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    out = np.empty(shape, np.float32)
    params = fk.params.flash_attn(64 ** -0.5, causal=True)
    kernel = _kernel(OP.FLASH_ATTN, [D.F32] * 4)
    contenders = {"fuel_kernel FLASH_ATTN": lambda: kernel(q, k, v, out=out, params=params)}
    skipped = {}
    torch, reason = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        contenders["torch sdpa (1 thread)"] = lambda: sdpa(tq, tk, tv, is_causal=True)
        baseline = "torch sdpa (1 thread)"
    else:
        skipped["torch sdpa (1 thread)"] = reason
        baseline = "fuel_kernel FLASH_ATTN"
    return Case(name="FLASH_ATTN f32 [1, 8, 1024, 64] causal", contenders=contenders, baseline=baseline,
                target="fuel_kernel <= 1.5x torch sdpa", skipped=skipped,
                notes="fuel_kernel scratch: K^T and V packed once per kv head (Sk x D each) plus one "
                      "64x64 score tile; the 1024x1024 score matrix is never formed")


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


def cases():
    yield flash_attn_case()
    yield from index_cases()
