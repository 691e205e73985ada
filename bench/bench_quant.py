"""QMATMUL and NF4_MATMUL decode (m = 1) on quantized weights (GGML blocks; bitsandbytes' NF4):
time against a memcpy of the same weight bytes (the bandwidth floor: ratio = memcpy GB/s over the
kernel's GB/s of weight bytes; NF4's are its codes and absmax) and against NumPy's F32 matvec on
the dequantized weights (gguf's NumPy dequantization when gguf is importable; NF4's code book).
The rate column is the quantized W's bytes over each contender's time (GB/s), whatever it reads."""
import numpy as np

import fuel_kernel as fk
from fuel_kernel import spec
from bench.harness import Case, optional_import

from bench.bench_compute import _single_thread_peers

N = K = 4096
QUANTS = {q.name: q for q in spec.QUANT_TYPES}
F16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,)}         # byte offsets of the f16 scale in a block


def random_weights(name, rng):
    """N rows of K values of well-formed blocks: random codes, f16 scales in [-2, 2]."""
    q = QUANTS[name]
    blocks = rng.integers(0, 256, (N * K // q.block_size, q.block_bytes), dtype=np.uint8)
    for at in F16_FIELDS[name]:
        blocks[:, at:at + 2] = rng.standard_normal((blocks.shape[0], 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(-1)


def cases():
    note = _single_thread_peers()
    gguf, gguf_missing = optional_import("gguf")
    rng = np.random.default_rng(0)
    kernel = fk.bindings().lookup(fk.OpKind.QMATMUL, [fk.DType.F32, fk.DType.U8, fk.DType.F32], fk.Backend.CPU)
    for name in ("Q4_0", "Q8_0"):
        w = random_weights(name, rng)
        copy = np.empty_like(w)
        a = rng.standard_normal((1, K)).astype(np.float32)
        c = np.empty((1, N), np.float32)
        params = fk.params.qmatmul(QUANTS[name].code, 1, N, K)
        contenders = {"memcpy of W (np.copyto)": lambda w=w, copy=copy: np.copyto(copy, w),
                      "fk QMATMUL": lambda w=w, a=a, c=c, params=params: kernel(a, w, out=c, params=params)}
        skipped = {}
        if gguf is not None:
            dequantized = np.ascontiguousarray(gguf.quants.dequantize(w.reshape(N, -1), gguf.GGMLQuantizationType(
                QUANTS[name].code)).reshape(N, K))
            contenders["numpy matmul, dequantized F32 W"] = \
                lambda a=a, d=dequantized, c=c: np.matmul(a, d.T, out=c)
        else:
            skipped["numpy on dequantized W"] = gguf_missing
        yield Case(name=f"fk: QMATMUL {name} m=1 k=n=4096 ({w.nbytes / 1e6:.1f} MB W) [{note}]",
                   contenders=contenders, baseline="memcpy of W (np.copyto)", skipped=skipped,
                   target="QMATMUL reads W at >= 70% of a memcpy's bandwidth (<= 1.43x its time)",
                   rate=(w.nbytes / 1e9, "GB"))
    yield from nf4_cases(note)


def nf4_weights(rng):
    """N rows of K values in NF4: random codes, absmax |N(0, 1)| per block of 64."""
    codes = rng.integers(0, 256, N * K // 2, dtype=np.uint8)
    absmax = np.abs(rng.standard_normal(N * K // spec.NF4_BLOCK)).astype(np.float32)
    return codes, absmax


def nf4_dequantized(codes, absmax):
    """dequant(W) (N, K) F32: the code book at each nibble (the high one first) times its block's absmax."""
    code_book = np.array(spec.NF4_CODE, np.float32)
    nibbles = np.stack([codes >> 4, codes & 15], axis=1).reshape(-1, spec.NF4_BLOCK)
    return (code_book[nibbles] * absmax[:, None]).reshape(N, K)


def nf4_cases(note):
    rng = np.random.default_rng(1)
    kernel = fk.bindings().lookup(fk.OpKind.NF4_MATMUL, [fk.DType.F32, fk.DType.U8, fk.DType.F32, fk.DType.F32],
                                  fk.Backend.CPU)
    codes, absmax = nf4_weights(rng)
    w_bytes = np.empty(codes.nbytes + absmax.nbytes, np.uint8)
    copy = np.empty_like(w_bytes)
    a = rng.standard_normal((1, K)).astype(np.float32)
    c = np.empty((1, N), np.float32)
    params = fk.params.nf4_matmul(1, N, K)
    dequantized = np.ascontiguousarray(nf4_dequantized(codes, absmax))
    contenders = {"memcpy of W (np.copyto)": lambda: np.copyto(copy, w_bytes),
                  "fk NF4_MATMUL": lambda: kernel(a, codes, absmax, out=c, params=params),
                  "numpy matmul, dequantized F32 W": lambda: np.matmul(a, dequantized.T, out=c)}
    yield Case(name=f"fk: NF4_MATMUL m=1 k=n=4096 ({w_bytes.nbytes / 1e6:.1f} MB codes + absmax) [{note}]",
               contenders=contenders, baseline="memcpy of W (np.copyto)",
               target="NF4_MATMUL reads W at >= 70% of a memcpy's bandwidth (<= 1.43x its time)",
               rate=(w_bytes.nbytes / 1e9, "GB"))
