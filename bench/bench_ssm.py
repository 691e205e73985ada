"""State-space model ops against NumPy, single-threaded (the kernels run whole): CAUSAL_CONV1D
(silu, W = 4), SELECTIVE_SCAN (softplus) and SSD_CHUNK_SCAN (chunk 64) at Mamba-like inference
sizes in f32, and CAUSAL_CONV1D in bf16.

The NumPy references are what a caller without fuel_kernel would write: the conv as W shifted
slices, the scans as a loop over time steps vectorised over the other axes (f32 throughout; bf16
widened to f32 and rounded back through ml_dtypes).  fuel_kernel writes into preallocated outputs.

Measured 2026-12-02 on the shared 2-core dev VM under heavy load (load average about 7; ratios to
NumPy from 3 --quick runs):
  CAUSAL_CONV1D silu f32 1x1536x1024 W=4     0.84-1.13x
  CAUSAL_CONV1D silu bf16 1x1536x1024 W=4    0.84-0.95x
  SELECTIVE_SCAN softplus f32 D768 L256 N16  1.22-1.69x  (a scalar libm expf per state element and step;
                                                          fk_fast_expf there, not vectorized, was 3.3-5.1x)
Measured 2026-12-03 on a 2-core Intel Xeon VM (AVX-512), one pinned core, 3 runs: SELECTIVE_SCAN
0.115-0.120x (1.35-1.40 ms; 17.5 ms, 1.47-1.57x, before its F32 recurrence ran 16 channels side by side
in vectors with a vector softplus); CAUSAL_CONV1D silu f32 0.235-0.247x (1.96-2.05 ms), bf16
0.232-0.239x (before: 8.67 ms, 1.04x, and 1.005x: a libm expf per output and a tap loop per output;
now a pass per tap over the row and the vector SILU function).
  SSD_CHUNK_SCAN f32 L512 H8 P64 N64 Q64     0.46-0.54x
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import

CONV_SHAPE = (1, 1536, 1024, 4)          # B, D, L, W
SCAN_SHAPE = (1, 768, 256, 16)           # B, D, L, N
SSD_SHAPE = (1, 512, 8, 64, 64)          # B, L, H, P, N
CHUNK = 64


def numpy_causal_conv1d(x, w, bias):
    """silu(bias + sum_k w[:, k] x[t - (W-1) + k]) by shifted slices."""
    length, width = x.shape[2], w.shape[1]
    padded = np.concatenate([np.zeros(x.shape[:2] + (width - 1,), x.dtype), x], axis=2)
    acc = np.broadcast_to(bias[None, :, None], x.shape).copy()
    for k in range(width):
        acc += w[None, :, k, None] * padded[:, :, k:k + length]
    return acc / (1 + np.exp(-acc))


def numpy_selective_scan(u, delta, a, bm, cm, skip):
    dt = np.where(delta <= 20, np.log1p(np.exp(np.minimum(delta, 20))), delta)
    h = np.zeros(u.shape[:2] + (a.shape[1],), u.dtype)
    y = np.empty_like(u)
    for t in range(u.shape[2]):
        h = np.exp(dt[:, :, t, None] * a[None]) * h + (dt[:, :, t] * u[:, :, t])[:, :, None] * bm[:, None, :, t]
        y[:, :, t] = np.einsum("bdn,bn->bd", h, cm[:, :, t]) + skip * u[:, :, t]
    return y, h


def numpy_ssd(x, a, bm, cm):
    nb, length, nh, p = x.shape
    h = np.zeros((nb, nh, p, bm.shape[3]), x.dtype)
    y = np.empty_like(x)
    for t in range(length):
        h = np.exp(a[:, t])[:, :, None, None] * h + x[:, t, :, :, None] * bm[:, t, :, None, :]
        y[:, t] = np.einsum("bhpn,bhn->bhp", h, cm[:, t])
    return y, h


def cases():
    ml_dtypes, ml_missing = optional_import("ml_dtypes")
    rng = np.random.default_rng(0)
    f32 = np.float32

    b, d, length, width = CONV_SHAPE
    x = rng.standard_normal((b, d, length)).astype(f32)
    w, bias = rng.standard_normal((d, width)).astype(f32), rng.standard_normal(d).astype(f32)
    silu = fk.params.causal_conv1d("silu")
    for dtype in (fk.DType.F32, fk.DType.BF16):
        if dtype == fk.DType.BF16 and ml_dtypes is None:
            continue
        npdt = dtype.numpy
        xs, ws, bs = x.astype(npdt), w.astype(npdt), bias.astype(npdt)
        out = np.empty(x.shape, npdt)
        kernel = fk.bindings().lookup(fk.OpKind.CAUSAL_CONV1D, [dtype] * 4, fk.Backend.CPU)
        reference = ((lambda: numpy_causal_conv1d(x, w, bias)) if dtype == fk.DType.F32 else
                     (lambda: numpy_causal_conv1d(*(v.astype(f32) for v in (xs, ws, bs))).astype(npdt)))
        yield Case(name=f"fk: CAUSAL_CONV1D silu {dtype.short_name} {b}x{d}x{length} W={width} [1 thread]",
                   contenders={"fk": lambda k=kernel, o=out, i=(xs, ws, bs): k(*i, out=o, params=silu),
                               "numpy f32": reference},
                   baseline="numpy f32", target="fk <= 1x numpy")

    b, d, length, n = SCAN_SHAPE
    scan = (rng.standard_normal((b, d, length)).astype(f32), rng.standard_normal((b, d, length)).astype(f32),
            -np.exp(rng.standard_normal((d, n))).astype(f32), rng.standard_normal((b, n, length)).astype(f32),
            rng.standard_normal((b, n, length)).astype(f32), rng.standard_normal(d).astype(f32))
    outs = (np.empty((b, d, length), f32), np.empty((b, d, n), f32))
    kernel = fk.bindings().lookup(fk.OpKind.SELECTIVE_SCAN, [fk.DType.F32] * 8, fk.Backend.CPU)
    softplus = fk.params.selective_scan(True)
    yield Case(name=f"fk: SELECTIVE_SCAN softplus f32 B{b} D{d} L{length} N{n} [1 thread]",
               contenders={"fk": lambda k=kernel: k(*scan, out=outs, params=softplus),
                           "numpy f32 (loop over t)": lambda: numpy_selective_scan(*scan)},
               baseline="numpy f32 (loop over t)", target="fk <= 1x numpy")

    b, length, nh, p, n = SSD_SHAPE
    ssd = (rng.standard_normal((b, length, nh, p)).astype(f32), -rng.uniform(0, 0.5, (b, length, nh)).astype(f32),
           rng.standard_normal((b, length, nh, n)).astype(f32), rng.standard_normal((b, length, nh, n)).astype(f32))
    outs_ssd = (np.empty((b, length, nh, p), f32), np.empty((b, nh, p, n), f32))
    kernel = fk.bindings().lookup(fk.OpKind.SSD_CHUNK_SCAN, [fk.DType.F32] * 6, fk.Backend.CPU)
    chunk = fk.params.ssd_chunk_scan(CHUNK)
    yield Case(name=f"fk: SSD_CHUNK_SCAN f32 B{b} L{length} H{nh} P{p} N{n} Q{CHUNK} [1 thread]",
               contenders={"fk": lambda k=kernel: k(*ssd, out=outs_ssd, params=chunk),
                           "numpy f32 (loop over t)": lambda: numpy_ssd(*ssd)},
               baseline="numpy f32 (loop over t)", target="fk <= 1x numpy")
