"""Every float unary op (and POWI, POW) at 4M elements in F32 and BF16: fuel_kernel against NumPy
(+ml_dtypes for BF16; SciPy's erf where NumPy has none) and, when importable, single-threaded PyTorch.

Each contender writes into a preallocated output; PyTorch reads and writes the same NumPy buffers
as fuel_kernel.  Ops NumPy has no ufunc for are composed from ufuncs with out= (SIGMOID, SILU,
GELU, GELU_ERF, RSQRT, RELU), which is what a NumPy user writes.
Inputs: standard normal times 4 (positive for LOG, SQRT, RSQRT; POW bases positive).
Run: python -m bench --only UNARY

Measured 2026-12-01 on the shared 2-core Intel Xeon (AVX-512) dev VM under heavy load from other
jobs, 3 runs, fuel_kernel time / NumPy time (F32):
  RSQRT 0.72-0.79  EXP 0.77-0.84  LOG 1.00-1.10  SIN 0.79-0.83  COS 0.83-0.90  SIGMOID 0.87-1.00
  SILU 0.83-0.86  GELU 0.84-0.89  GELU_ERF 0.13-0.14 (SciPy erf)  ERF 0.12-0.15 (SciPy)
  POWI(3) 0.06-0.07  POW 1.79-1.84  TANH 1.25-1.71; the memory-bound NEG ABS SQR SQRT RECIP RELU
  FLOOR CEIL ROUND read 1.3-2.0x here while a plain timeit loop gives NEG 1.0x, SQRT 0.9x.
  BF16 (vs NumPy + ml_dtypes): every op 0.04-0.7x.
2026-12-04, one pinned core of a Zen 4 (AVX-512) VM, 3 runs: POW 1.55x (1.41-1.65) NumPy after the
F64 table-driven pow (before 3.6x); POWI(3) 0.99x PyTorch at 4M, 0.91x in L2 (before 1.64x in L2).
2026-12-05, same VM and method: POW 1.01x (1.00-1.03) NumPy, 0.27x (0.27-0.28) PyTorch with the F32
two-float pow (before, this day: 1.58x (1.45-1.61) and 0.43x).  Then, the same bits with 4 fewer
FMA-pipe instructions per 16 lanes: POW 0.93x (0.92-0.94) NumPy, 0.25x (0.24-0.25) PyTorch.
2026-12-06, same VM and method: GELU_ERF f32 0.88x (0.83-1.08, 6 runs) PyTorch at 4M, 0.85x (0.84-0.85)
in L2, after cuts to its F32 form (before: 1.08x and 0.90x).  Later that day, every op at 4M, 3 runs:
every f32 op 0.03-1.02x PyTorch but GELU_ERF 1.05x (1.04-1.05); every bf16 op 0.03-1.00x.  Stop 55:
ROUND by rint, 0.96x (0.95-1.01) NumPy; GELU_ERF's degree-5 form 0.91x (0.88-0.93) PyTorch at 4M,
0.73x (0.72-0.74) in L2.
"""
import math

import numpy as np

import fuel_kernel as fk
from bench.harness import case_with_peer, optional_import, torch_view

N = 4 * 1024 * 1024
N_IN_CACHE = 64 * 1024
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _numpy_ops(scipy_special):
    """op -> function(x, out, tmp) computing it with NumPy ufuncs (None where NumPy cannot)."""
    def sigmoid(x, out, tmp):
        np.negative(x, out=tmp)
        np.exp(tmp, out=tmp)
        np.add(tmp, 1, out=tmp)
        np.reciprocal(tmp, out=out)

    def silu(x, out, tmp):
        sigmoid(x, out, tmp)
        np.multiply(out, x, out=out)

    def gelu(x, out, tmp):
        np.multiply(x, x, out=tmp)
        np.multiply(tmp, x, out=tmp)
        np.multiply(tmp, 0.044715, out=tmp)
        np.add(tmp, x, out=tmp)
        np.multiply(tmp, SQRT_2_OVER_PI, out=tmp)
        np.tanh(tmp, out=tmp)
        np.add(tmp, 1, out=tmp)
        np.multiply(tmp, x, out=tmp)
        np.multiply(tmp, 0.5, out=out)

    def gelu_erf(x, out, tmp):
        np.multiply(x, 1 / math.sqrt(2.0), out=tmp)
        scipy_special.erf(tmp, out=tmp)
        np.add(tmp, 1, out=tmp)
        np.multiply(tmp, x, out=tmp)
        np.multiply(tmp, 0.5, out=out)

    def rsqrt(x, out, tmp):
        np.sqrt(x, out=tmp)
        np.reciprocal(tmp, out=out)

    Op = fk.OpKind
    ops = {
        Op.NEG: lambda x, out, tmp: np.negative(x, out=out),
        Op.ABS: lambda x, out, tmp: np.abs(x, out=out),
        Op.SQR: lambda x, out, tmp: np.square(x, out=out),
        Op.SQRT: lambda x, out, tmp: np.sqrt(x, out=out),
        Op.RSQRT: rsqrt,
        Op.RECIP: lambda x, out, tmp: np.reciprocal(x, out=out),
        Op.EXP: lambda x, out, tmp: np.exp(x, out=out),
        Op.LOG: lambda x, out, tmp: np.log(x, out=out),
        Op.SIN: lambda x, out, tmp: np.sin(x, out=out),
        Op.COS: lambda x, out, tmp: np.cos(x, out=out),
        Op.TANH: lambda x, out, tmp: np.tanh(x, out=out),
        Op.SIGMOID: sigmoid,
        Op.RELU: lambda x, out, tmp: np.maximum(x, 0, out=out),
        Op.SILU: silu,
        Op.GELU: gelu,
        Op.STEP: lambda x, out, tmp: np.heaviside(x, 0, out=out),
        Op.FLOOR: lambda x, out, tmp: np.floor(x, out=out),
        Op.CEIL: lambda x, out, tmp: np.ceil(x, out=out),
        Op.ROUND: lambda x, out, tmp: np.rint(x, out=out),
        Op.SIGN: lambda x, out, tmp: np.sign(x, out=out),
        Op.POWI: lambda x, out, tmp: np.power(x, 3, out=out),
    }
    if scipy_special is not None:
        ops[Op.ERF] = lambda x, out, tmp: scipy_special.erf(x, out=out)
        ops[Op.GELU_ERF] = gelu_erf
    return ops


def _torch_ops(torch):
    """op -> function(tx, tout) with PyTorch; ops whose out= form is missing in this version
    fall back to the allocating call (named in the contender label)."""
    Op = fk.OpKind
    nn = torch._C._nn
    ops = {
        Op.NEG: torch.neg, Op.ABS: torch.abs, Op.SQR: torch.square, Op.SQRT: torch.sqrt,
        Op.RSQRT: torch.rsqrt, Op.RECIP: torch.reciprocal, Op.EXP: torch.exp, Op.LOG: torch.log,
        Op.SIN: torch.sin, Op.COS: torch.cos, Op.TANH: torch.tanh, Op.SIGMOID: torch.sigmoid,
        Op.ERF: torch.special.erf, Op.FLOOR: torch.floor, Op.CEIL: torch.ceil, Op.ROUND: torch.round,
        Op.SIGN: torch.sign,
    }
    table = {op: (lambda fn: lambda tx, tout: fn(tx, out=tout))(fn) for op, fn in ops.items()}
    table[Op.RELU] = lambda tx, tout: torch.clamp(tx, min=0, out=tout)
    table[Op.STEP] = lambda tx, tout: torch.heaviside(tx, torch.zeros((), dtype=tx.dtype), out=tout)
    table[Op.SILU] = lambda tx, tout: nn.silu(tx, out=tout)
    table[Op.GELU] = lambda tx, tout: nn.gelu(tx, approximate="tanh", out=tout)
    table[Op.GELU_ERF] = lambda tx, tout: nn.gelu(tx, out=tout)
    table[Op.POWI] = lambda tx, tout: torch.pow(tx, 3, out=tout)
    fallback = {
        Op.SILU: lambda tx, tout: torch.nn.functional.silu(tx),
        Op.GELU: lambda tx, tout: torch.nn.functional.gelu(tx, approximate="tanh"),
        Op.GELU_ERF: lambda tx, tout: torch.nn.functional.gelu(tx),
    }
    return table, fallback


def cases():
    Op = fk.OpKind
    COMPUTE_BOUND = [Op.EXP, Op.LOG, Op.SIN, Op.COS, Op.TANH, Op.SIGMOID, Op.SILU, Op.GELU, Op.GELU_ERF,
                     Op.ERF, Op.POWI]
    D = fk.DType
    table = fk.bindings()
    rng = np.random.default_rng(0)
    special, _ = optional_import("scipy.special")
    numpy_ops = _numpy_ops(special)
    torch, reason = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        torch_ops, torch_fallback = _torch_ops(torch)
    base = (rng.standard_normal(N) * 4).astype(np.float32)
    positive = np.abs(base) + np.float32(1e-3)
    ops = [Op.NEG, Op.ABS, Op.SQR, Op.SQRT, Op.RSQRT, Op.RECIP, Op.EXP, Op.LOG, Op.SIN, Op.COS,
           Op.TANH, Op.SIGMOID, Op.RELU, Op.SILU, Op.GELU, Op.GELU_ERF, Op.ERF, Op.STEP, Op.FLOOR,
           Op.CEIL, Op.ROUND, Op.SIGN, Op.POWI]
    # The 4M-element cases measure the memory system as much as the op; the 64K-element ones run in
    # L2 and measure the arithmetic alone (the polynomial ops' side of the limit).
    plan = [(dtype, op, N) for dtype in (D.F32, D.BF16) for op in ops]
    plan += [(D.F32, op, N_IN_CACHE) for op in COMPUTE_BOUND]
    for dtype, op, n in plan:
        src = (positive if op in (Op.LOG, Op.SQRT, Op.RSQRT) else base)[:n]
        x = src.astype(dtype.numpy)
        out = np.empty_like(x)
        tmp = np.empty_like(x)
        kernel = table.lookup(op, [dtype] * 2)
        params = fk.params.powi(3) if op == Op.POWI else None
        contenders = {}
        skipped = {}
        if op in numpy_ops:
            label = "scipy.special" if op in (Op.ERF, Op.GELU_ERF) else "numpy"
            label += " +ml_dtypes" if dtype == D.BF16 else ""
            contenders[label] = lambda fn=numpy_ops[op], x=x, out=out, tmp=tmp: fn(x, out, tmp)
        else:
            skipped["numpy"] = "no NumPy ufunc (and SciPy not installed)"
        contenders["fuel_kernel Kernel"] = (
            lambda kernel=kernel, x=x, out=out, params=params: kernel(x, out=out, params=params))
        peer_label, peer_call = None, None
        if torch is not None:
            # the very buffers fuel_kernel reads and writes: tensors of their own (fresh, 64-byte
            # aligned, other pages) made memory-bound ops such as ABS read 1.7x slower
            tx, tout = torch_view(torch, x), torch_view(torch, out)
            fn, peer_label = torch_ops[op], "torch, 1 thread"
            try:
                fn(tx, tout)
            except (TypeError, RuntimeError, AttributeError):
                fn, peer_label = torch_fallback[op], "torch (allocates), 1 thread"
            peer_call = lambda fn=fn, tx=tx, tout=tout: fn(tx, tout)
        size = "4M elements" if n == N else f"{n // 1024}K elements in L2"
        yield case_with_peer(f"UNARY {op.name} {dtype.short_name}, {size}", contenders,
                             "fuel_kernel <= 1.0x numpy and <= 1.0x torch", peer_label, peer_call,
                             ("torch", reason), skipped)

    pow32 = table.lookup(Op.POW, [D.F32] * 3)
    a = positive[: N]
    b = (rng.standard_normal(N) * 2).astype(np.float32)
    c = np.empty_like(a)
    contenders = {"numpy np.power(out=)": lambda: np.power(a, b, out=c),
                  "fuel_kernel Kernel": lambda: pow32(a, b, out=c)}
    peer_call = None
    if torch is not None:
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c.copy())
        peer_call = lambda: torch.pow(ta, tb, out=tc)
    yield case_with_peer("UNARY POW f32 (binary op), 4M elements", contenders, "fuel_kernel <= 1.0x numpy",
                         "torch, 1 thread", peer_call, ("torch", reason))
