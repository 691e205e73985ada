"""Softmax and norms over the last dim against NumPy and PyTorch, single-threaded: LAYER_NORM,
RMS_NORM, SOFTMAX_LAST_DIM and LOG_SOFTMAX_LAST_DIM at 4096x1024 and 128x768, in f32 and bf16, and
the softmax backward ops at 4096x1024 f32.

"fk default" is the alternative the route picker (BindingTable.pick, Graph.compile's choice) takes
for the case's shapes; "fk native-f64" is the F64-compute sibling a caller gets by asking for a
tight max_ulp.  Every fuel_kernel contender writes into a preallocated output.  The NumPy
references compute in f32 (bf16 inputs are widened to f32 and the result rounded to bf16 through
ml_dtypes).  PyTorch, when importable, runs on one thread over the same input arrays as fuel_kernel
and allocates its outputs (layer_norm and rms_norm have no out=).

Measured 2026-12-01 on the shared 2-core Xeon (AVX-512) dev VM under heavy load (NumPy's own times
moved 2x between runs; ratios to NumPy from 3 runs each; "F64 rows" is the former default, now the
native-f64 sibling):
                        F32 compute (default)   F64 rows (before)
  LAYER_NORM f32 4096x1024   0.21-0.26x        0.34-0.53x
  LAYER_NORM f32 128x768     0.16-0.20x        0.97-1.08x
  RMS_NORM   f32 4096x1024   0.19-0.22x        0.60-0.63x
  RMS_NORM   f32 128x768     0.18-0.23x        1.31-1.41x
  LAYER_NORM bf16 4096x1024  0.10-0.12x        0.45-0.55x
  RMS_NORM   bf16 128x768    0.16-0.21x        1.02-1.26x
Softmax already computed in F32; with fk_fast_expf and blocked sums (before: its own x <= 0 exp,
F64 sums): SOFTMAX f32 4096x1024 0.35-0.44x (0.39-0.47x), 128x768 0.33-0.37x (0.29-0.36x);
LOG_SOFTMAX f32 4096x1024 0.12-0.14x (0.13-0.15x), 128x768 0.40-0.43x (0.30-0.35x); bf16
SOFTMAX 128x768 0.30-0.33x (0.75-0.80x).
Backward, f32 4096x1024 (3 --quick runs, 2026-12-01): SOFTMAX_LAST_DIM_BACKWARD 0.288-0.306x NumPy
(native-f64 0.77-0.93x), LOG_SOFTMAX_LAST_DIM_BACKWARD 0.53-0.76x (native-f64 2.5-3.4x).
2026-12-06, one pinned core of a Zen 4 VM, against PyTorch, 3 runs: SOFTMAX_LAST_DIM_BACKWARD 1.12x
(1.10-1.17; before its products left dx's row alone and dx was streamed, 1.57x),
LOG_SOFTMAX_LAST_DIM_BACKWARD 1.04x (1.01-1.05; before its AVX-512 form, 1.23x).
Run: python -m bench --only SOFTMAX_LAST_DIM_BACKWARD
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import, torch_view

SHAPES = ((4096, 1024), (128, 768))
EPS = 1e-5
OPS = (fk.OpKind.LAYER_NORM, fk.OpKind.RMS_NORM, fk.OpKind.SOFTMAX_LAST_DIM,
       fk.OpKind.LOG_SOFTMAX_LAST_DIM)
N_INPUTS = {fk.OpKind.LAYER_NORM: 3, fk.OpKind.RMS_NORM: 2, fk.OpKind.SOFTMAX_LAST_DIM: 1,
            fk.OpKind.LOG_SOFTMAX_LAST_DIM: 1}


def _numpy_reference(op, x, w, b):
    """The op in NumPy f32, as a caller without fuel_kernel would write it."""
    if op == fk.OpKind.LAYER_NORM:
        d = x - x.mean(axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        return d / np.sqrt(var + EPS) * w + b
    if op == fk.OpKind.RMS_NORM:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w
    shifted = x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=-1, keepdims=True)
    if op == fk.OpKind.SOFTMAX_LAST_DIM:
        return e / s
    return shifted - np.log(s)


def _torch_call(torch, op, x, w, b):
    f = torch.nn.functional
    d = x.shape[-1]
    if op == fk.OpKind.LAYER_NORM:
        return lambda: f.layer_norm(x, (d,), w, b, EPS)
    if op == fk.OpKind.RMS_NORM:
        if hasattr(f, "rms_norm"):
            return lambda: f.rms_norm(x, (d,), w, EPS)
        return lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
    if op == fk.OpKind.SOFTMAX_LAST_DIM:
        return lambda: torch.softmax(x, -1)
    return lambda: torch.log_softmax(x, -1)


def cases():
    torch, torch_missing = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
    ml_dtypes, ml_missing = optional_import("ml_dtypes")
    table = fk.bindings()
    rng = np.random.default_rng(0)
    for dtype in (fk.DType.F32, fk.DType.BF16):
        if dtype == fk.DType.BF16 and ml_dtypes is None:
            continue
        npdt = dtype.numpy
        for shape in SHAPES:
            d = shape[-1]
            x32 = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
            w32 = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
            b32 = (0.1 * rng.standard_normal(d)).astype(np.float32)
            x, w, b = x32.astype(npdt), w32.astype(npdt), b32.astype(npdt)
            for op in OPS:
                n_in = N_INPUTS[op]
                inputs = [x, w, b][:n_in]
                out = np.empty(shape, npdt)
                dtypes = [dtype] * (n_in + 1)
                params = (fk.params.norm_last_dim(EPS) if n_in > 1 else fk.params.softmax_last_dim())
                picked = table.pick(op, dtypes, fk.Backend.CPU, inputs + [out], params)
                alts = {k.source: k for k in table.alternatives(op, dtypes, fk.Backend.CPU)}
                contenders = {f"fk default ({picked.source})":
                              (lambda k=picked, i=inputs, o=out, p=params: k(*i, out=o, params=p))}
                if "native-f64" in alts and picked.source != "native-f64":
                    contenders["fk native-f64"] = (lambda k=alts["native-f64"], i=inputs, o=out, p=params:
                                                   k(*i, out=o, params=p))
                if dtype == fk.DType.F32:
                    contenders["numpy f32"] = (lambda o=op, i=[x32, w32, b32]: _numpy_reference(o, *i))
                else:
                    contenders["numpy f32 + bf16 casts"] = (
                        lambda o=op, i=inputs: _numpy_reference(
                            o, *[v.astype(np.float32) for v in i], *([None] * (3 - len(i)))).astype(npdt))
                skipped = {}
                if torch is not None:
                    tx, tw, tb = (torch_view(torch, v) for v in (x, w, b))   # fuel_kernel's arrays
                    contenders["torch"] = _torch_call(torch, op, tx, tw, tb)
                else:
                    skipped["torch"] = torch_missing
                numpy_name = "numpy f32" if dtype == fk.DType.F32 else "numpy f32 + bf16 casts"
                yield Case(name=f"fk: {op.name} {dtype.short_name} {shape[0]}x{shape[1]} [1 thread]",
                           contenders=contenders, skipped=skipped,
                           baseline="torch" if torch is not None else numpy_name,
                           target="fk default <= 0.8x torch" if torch is not None
                           else "torch absent: numpy only")
    yield from backward_cases()


# ---- softmax backward: (y, dy) -> dx over the last dim, 4096x1024 f32 --------------------------------
BACKWARD_SHAPE = (4096, 1024)


def _numpy_backward(op, y, dy):
    if op == fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD:
        return y * (dy - np.sum(dy * y, axis=-1, keepdims=True))
    return dy - np.exp(y) * np.sum(dy, axis=-1, keepdims=True)


def backward_cases():
    """SOFTMAX_LAST_DIM_BACKWARD and LOG_SOFTMAX_LAST_DIM_BACKWARD f32 at 4096x1024 against NumPy's
    formula (and ATen's _softmax_backward_data / _log_softmax_backward_data when torch is there)."""
    torch, torch_missing = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
    table = fk.bindings()
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(BACKWARD_SHAPE) * 3).astype(np.float32)
    dy = rng.standard_normal(BACKWARD_SHAPE).astype(np.float32)
    params = fk.params.softmax_last_dim()
    for op, log in ((fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD, False), (fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD, True)):
        y = _numpy_reference(fk.OpKind.LOG_SOFTMAX_LAST_DIM if log else fk.OpKind.SOFTMAX_LAST_DIM,
                             x, None, None).astype(np.float32)
        out = np.empty_like(y)
        dtypes = [fk.DType.F32] * 3
        picked = table.pick(op, dtypes, fk.Backend.CPU, [y, dy, out], params)
        alts = {k.source: k for k in table.alternatives(op, dtypes, fk.Backend.CPU)}
        contenders = {f"fk default ({picked.source})": lambda k=picked, y=y, o=out: k(y, dy, out=o, params=params),
                      "fk native-f64": lambda k=alts["native-f64"], y=y, o=out: k(y, dy, out=o, params=params),
                      "numpy f32": lambda op=op, y=y: _numpy_backward(op, y, dy)}
        skipped = {}
        if torch is not None:
            ty, tdy = torch.from_numpy(y), torch.from_numpy(dy)
            aten = torch.ops.aten
            fn = aten._log_softmax_backward_data if log else aten._softmax_backward_data
            contenders["torch"] = lambda fn=fn, ty=ty: fn(tdy, ty, -1, torch.float32)
        else:
            skipped["torch"] = torch_missing
        yield Case(name=f"fk: {op.name} f32 {BACKWARD_SHAPE[0]}x{BACKWARD_SHAPE[1]} [1 thread]",
                   contenders=contenders, skipped=skipped,
                   baseline="torch" if torch is not None else "numpy f32",
                   target="fk default <= 0.8x torch" if torch is not None else "torch absent: numpy only")
