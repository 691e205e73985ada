"""Compute kernels against NumPy and PyTorch, single-threaded: MATMUL, SUM, SOFTMAX, CONV2D and its
gradients CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT, the training ops FUSED_LINEAR and
REDUCE_SUM_TO, and MAX_POOL2D, AVG_POOL2D and TOPK.

Every peer runs on one thread: torch.set_num_threads(1), and NumPy's/SciPy's BLAS through the
OPENBLAS_NUM_THREADS=1 pin that `python -m bench` sets before they load (or threadpoolctl when
installed); each case name says which limit is in force, so an unpinned run is visible.

"route-picked" is the alternative fuel_kernel's route picker (BindingTable.pick, the choice
Graph.compile makes) takes for the case's shapes.
"""
import os

import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import

_LIMITS = []


def _single_thread_peers():
    """Limit NumPy's BLAS and PyTorch to one thread; returns a note for the case names."""
    torch, _ = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
    threadpoolctl, _ = optional_import("threadpoolctl")
    if threadpoolctl is not None:
        if not _LIMITS:
            _LIMITS.append(threadpoolctl.threadpool_limits(1))
        return "1 thread"
    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        return "1 thread (env)"
    return "BLAS threads NOT limited"


def route_picked(op, dtypes, operands, params=None):
    """The alternative fuel_kernel's route picker (BindingTable.pick) chooses for these operands."""
    return fk.bindings().pick(op, dtypes, fk.Backend.CPU, operands, params)


def cases():
    note = _single_thread_peers()
    torch, torch_missing = optional_import("torch")
    rng = np.random.default_rng(0)
    F32 = fk.DType.F32
    table = fk.bindings()

    # ---- MATMUL f32 512x512 -------------------------------------------------------------------
    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    c = np.empty((512, 512), np.float32)
    alts = {k.source: k for k in table.alternatives(fk.OpKind.MATMUL, [F32] * 3, fk.Backend.CPU)}
    picked = route_picked(fk.OpKind.MATMUL, [F32] * 3, (a, b, c))
    contenders = {"numpy matmul(out=)": lambda: np.matmul(a, b, out=c),
                  f"fk route-picked ({picked.source})": lambda: picked(a, b, out=c),
                  "fk native": lambda: alts["native"](a, b, out=c)}
    skipped = {}
    if "blas" in alts:
        contenders["fk blas"] = lambda: alts["blas"](a, b, out=c)
    else:
        skipped["fk blas"] = "SciPy not importable: no BLAS sibling registered"
    if torch is not None:
        at, bt, ct = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        contenders["torch matmul(out=)"] = lambda: torch.matmul(at, bt, out=ct)
    else:
        skipped["torch"] = torch_missing
    yield Case(name=f"fk: MATMUL f32 512x512 [{note}]", contenders=contenders,
               baseline="numpy matmul(out=)", skipped=skipped,
               target="route-picked <= 1.05x numpy; native <= 2.5x numpy")

    # ---- SUM and MEAN f32 4M: a whole-array reduction is memory-bound ---------------------------
    # PyTorch twice: writing a preallocated 0-d output (out=), as fuel_kernel does, and allocating
    # its result; the rate is GB/s of x read, against np.copyto's read of the same bytes (which also
    # writes them, so its GB/s is a lower bound of a read's).
    x = rng.standard_normal(4 * 1024 * 1024).astype(np.float32)
    copy_dst = np.empty_like(x)
    for name, numpy_fn, torch_name in (("SUM", np.sum, "sum"), ("MEAN", np.mean, "mean")):
        s = np.empty((), np.float32)
        kernel = table.lookup(getattr(fk.OpKind, name), [F32, F32], fk.Backend.CPU)
        contenders = {"fk": lambda kernel=kernel, s=s: kernel(x, out=s),
                      "numpy": lambda numpy_fn=numpy_fn: numpy_fn(x),
                      "np.copyto of x (memory reference)": lambda: np.copyto(copy_dst, x)}
        skipped = {}
        if torch is not None:
            xt, st = torch.from_numpy(x), torch.from_numpy(s.copy())
            fn = getattr(torch, torch_name)
            contenders[f"torch {torch_name}(out=0-d)"] = lambda fn=fn, xt=xt, st=st: fn(xt, dim=(0,), out=st)
            contenders[f"torch {torch_name} (allocates)"] = lambda fn=fn, xt=xt: fn(xt)
            baseline = f"torch {torch_name}(out=0-d)"
        else:
            skipped["torch"] = torch_missing
            baseline = "numpy"
        yield Case(name=f"fk: {name} f32 4M elements [{note}]", contenders=contenders, baseline=baseline,
                   skipped=skipped, rate=(x.nbytes / 1e9, "GB"),
                   target="fk <= 1.0x torch, both with out= and allocating" if torch is not None
                   else "torch absent: numpy only")

    # ---- SOFTMAX_LAST_DIM f32 1024x1024 --------------------------------------------------------
    y = (rng.standard_normal((1024, 1024)) * 3).astype(np.float32)
    yo = np.empty_like(y)
    ksm = table.lookup(fk.OpKind.SOFTMAX_LAST_DIM, [F32, F32], fk.Backend.CPU)

    def numpy_softmax():
        e = np.exp(y - y.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    contenders = {"fk softmax(out=)": lambda: ksm(y, out=yo),
                  "fk softmax (allocating)": lambda: ksm(y), "numpy": numpy_softmax}
    skipped = {}
    if torch is not None:
        yt = torch.from_numpy(y)
        contenders["torch softmax"] = lambda: torch.softmax(yt, -1)
    else:
        skipped["torch"] = torch_missing
    yield Case(name=f"fk: SOFTMAX_LAST_DIM f32 1024x1024 [{note}]", contenders=contenders,
               baseline="torch softmax" if torch is not None else "numpy", skipped=skipped,
               target="fk <= 1.0x torch" if torch is not None else "torch absent: numpy only")

    # ---- CONV2D 8x32x56x56, 64 3x3 filters, padding 1 ------------------------------------------
    xi = rng.standard_normal((8, 32, 56, 56)).astype(np.float32)
    wi = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    oi = np.empty((8, 64, 56, 56), np.float32)
    p = fk.params.conv2d(padding=1)
    conv = route_picked(fk.OpKind.CONV2D, [F32] * 3, (xi, wi, oi), params=p)
    contenders = {f"fk route-picked ({conv.source})(out=)": lambda: conv(xi, wi, out=oi, params=p),
                  f"fk route-picked ({conv.source}) alloc": lambda: conv(xi, wi, params=p)}
    skipped = {"fk direct": "not timed: the route picker never takes it at this size"}
    if torch is not None:
        xt4, wt4 = torch.from_numpy(xi), torch.from_numpy(wi)
        contenders["torch conv2d"] = lambda: torch.nn.functional.conv2d(xt4, wt4, padding=1)
        baseline = "torch conv2d"
    else:
        skipped["torch"] = torch_missing
        baseline = f"fk route-picked ({conv.source})(out=)"
    yield Case(name=f"fk: CONV2D 8x32x56x56 * 64x3x3 pad 1 [{note}]", contenders=contenders,
               baseline=baseline, skipped=skipped,
               target="fk <= 1.5x torch" if torch is not None else "torch absent: no peer")

    # ---- CONV2D at ResNet's shapes: 3x3, 1x1 (both ways) and the stride-2 3x3 --------------------
    # (N, C, H, O, kernel, stride, padding): 8 images of 56x56, one CONV2D each, against torch conv2d
    for n, c, h, o, kk, st, pd in ((8, 64, 56, 64, 3, 1, 1), (8, 256, 56, 64, 1, 1, 0), (8, 64, 56, 256, 1, 1, 0),
                                   (8, 128, 56, 128, 3, 2, 1)):
        xr = rng.standard_normal((n, c, h, h)).astype(np.float32)
        wr = rng.standard_normal((o, c, kk, kk)).astype(np.float32)
        oh = (h + 2 * pd - kk) // st + 1
        orr = np.empty((n, o, oh, oh), np.float32)
        pr = fk.params.conv2d(stride=st, padding=pd)
        kr = route_picked(fk.OpKind.CONV2D, [F32] * 3, (xr, wr, orr), params=pr)
        contenders = {f"fk route-picked ({kr.source})(out=)": lambda kr=kr, xr=xr, wr=wr, orr=orr, pr=pr: kr(xr, wr, out=orr, params=pr)}
        skipped = {}
        if torch is not None:
            xt, wt = torch.from_numpy(xr), torch.from_numpy(wr)
            contenders["torch conv2d"] = lambda xt=xt, wt=wt, st=st, pd=pd: torch.nn.functional.conv2d(xt, wt, stride=st, padding=pd)
        else:
            skipped["torch"] = torch_missing
        flops = 2 * n * o * oh * oh * c * kk * kk
        yield Case(name=f"fk: CONV2D {n}x{c}x{h}x{h} * {o}x{kk}x{kk} stride {st} pad {pd} [{note}]",
                   contenders=contenders, baseline="torch conv2d" if torch is not None else next(iter(contenders)),
                   skipped=skipped, rate=(flops / 1e9, "GFLOP"),
                   target="fk <= 1.0x torch" if torch is not None else "torch absent: no peer")

    # ---- CONV2D_BACKWARD_INPUT and _WEIGHT, 8x64x56x56, 64 3x3 filters, stride 1, padding 1 -------
    yield from conv2d_backward_cases(rng, note, torch, torch_missing)


def numpy_conv2d_backward_input(dy, w, padding):
    """dx by im2col + matmul in NumPy: columns w^T @ dy per image (batched BLAS), then col2im."""
    N, O, OH, OW = dy.shape
    _, C, KH, KW = w.shape
    cols = np.matmul(w.reshape(O, C * KH * KW).T, dy.reshape(N, O, OH * OW)).reshape(N, C, KH, KW, OH, OW)
    dxp = np.zeros((N, C, OH + KH - 1, OW + KW - 1), dy.dtype)
    for kh in range(KH):
        for kw in range(KW):
            dxp[:, :, kh:kh + OH, kw:kw + OW] += cols[:, :, kh, kw]
    return dxp[:, :, padding:dxp.shape[2] - padding, padding:dxp.shape[3] - padding]


def numpy_conv2d_backward_weight(x, dy, kernel, padding):
    """dw by im2col + matmul in NumPy: x's columns (N, C*KH*KW, OH*OW) contracted with dy over the
    batch and the positions (one BLAS GEMM)."""
    N, O, OH, OW = dy.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.stack([xp[:, :, kh:kh + OH, kw:kw + OW] for kh in range(kernel) for kw in range(kernel)], axis=2)
    cols = cols.reshape(N, -1, OH * OW)
    return np.tensordot(dy.reshape(N, O, OH * OW), cols, axes=([0, 2], [0, 2])).reshape(O, x.shape[1], kernel, kernel)


def conv2d_backward_cases(rng, note, torch, torch_missing):
    F32 = fk.DType.F32
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    dx, dw = np.empty_like(x), np.empty_like(w)
    p = fk.params.conv2d_backward(input_size=(56, 56), kernel_size=3, padding=1)
    table = fk.bindings()
    backward_input = table.lookup(fk.OpKind.CONV2D_BACKWARD_INPUT, [F32] * 3, fk.Backend.CPU)
    backward_weight = table.lookup(fk.OpKind.CONV2D_BACKWARD_WEIGHT, [F32] * 3, fk.Backend.CPU)
    for name, kernel, inputs, out, numpy_fn, torch_fn in (
            ("CONV2D_BACKWARD_INPUT", backward_input, (dy, w), dx, lambda: numpy_conv2d_backward_input(dy, w, 1),
             lambda t: t.nn.grad.conv2d_input(x.shape, t.from_numpy(w), t.from_numpy(dy), padding=1)),
            ("CONV2D_BACKWARD_WEIGHT", backward_weight, (x, dy), dw, lambda: numpy_conv2d_backward_weight(x, dy, 3, 1),
             lambda t: t.nn.grad.conv2d_weight(t.from_numpy(x), w.shape, t.from_numpy(dy), padding=1))):
        contenders = {"fk (out=)": lambda k=kernel, i=inputs, o=out: k(*i, out=o, params=p),
                      "numpy im2col+matmul": numpy_fn}
        skipped = {}
        if torch is not None:
            contenders["torch"] = lambda f=torch_fn: f(torch)
        else:
            skipped["torch"] = torch_missing
        yield Case(name=f"fk: {name} 8x64x56x56 * 64x3x3 pad 1 [{note}]", contenders=contenders,
                   baseline="numpy im2col+matmul", skipped=skipped, target="fk <= 1.0x numpy im2col+matmul")
    # ---- training: FUSED_LINEAR f32 (x @ w + b) and REDUCE_SUM_TO [4096, 1024] -> [1024] ---------
    for m, k, n in ((32, 512, 2048), (128, 768, 3072)):
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        y = np.empty((m, n), np.float32)
        alts = {kernel.source: kernel for kernel in table.alternatives(fk.OpKind.FUSED_LINEAR, [F32] * 4,
                                                                     fk.Backend.CPU)}
        picked = route_picked(fk.OpKind.FUSED_LINEAR, [F32] * 4, (x, w, bias, y))
        contenders = {"numpy x @ w + b": lambda x=x, w=w, bias=bias: x @ w + bias,
                      "numpy matmul(out=) += b": lambda x=x, w=w, bias=bias, y=y: np.add(np.matmul(x, w, out=y), bias, out=y),
                      f"fk route-picked ({picked.source})": lambda x=x, w=w, bias=bias, y=y, k=picked: k(x, w, bias, out=y),
                      "fk native": lambda x=x, w=w, bias=bias, y=y, k=alts["native"]: k(x, w, bias, out=y)}
        skipped = {}
        if "blas" in alts:
            contenders["fk blas"] = lambda x=x, w=w, bias=bias, y=y, k=alts["blas"]: k(x, w, bias, out=y)
        else:
            skipped["fk blas"] = "SciPy not importable: no BLAS sibling registered"
        yield Case(name=f"fk: FUSED_LINEAR f32 {m}x{k}x{n} [{note}]", contenders=contenders,
                   baseline="numpy x @ w + b", skipped=skipped, target="route-picked <= 1.0x numpy")

    g = rng.standard_normal((4096, 1024)).astype(np.float32)
    gs = np.empty(1024, np.float32)
    ksum_to = table.lookup(fk.OpKind.REDUCE_SUM_TO, [F32, F32], fk.Backend.CPU)
    to_1024 = fk.params.reduce_to((1024,))
    yield Case(name=f"fk: REDUCE_SUM_TO f32 [4096, 1024] -> [1024] [{note}]",
               contenders={"fk reduce_sum_to(out=)": lambda: ksum_to(g, out=gs, params=to_1024),
                           "numpy sum(axis=0)": lambda: g.sum(axis=0),
                           "numpy sum(axis=0, out=)": lambda: g.sum(axis=0, out=gs)},
               baseline="numpy sum(axis=0)", target="fk <= 1.0x numpy")
    yield from pool_and_topk_cases(rng, note, torch, torch_missing)


def numpy_pool2d(x, kernel, stride, pad, average):
    """NCHW pooling in NumPy: pad (with -inf for max, 0 for the average that counts the padding),
    a strided sliding-window view, and one max or mean over the window axes."""
    fill = 0.0 if average else -np.inf
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    return win.mean(axis=(-2, -1)) if average else win.max(axis=(-2, -1))


def pool_and_topk_cases(rng, note, torch, torch_missing):
    F32 = fk.DType.F32
    table = fk.bindings()
    # ---- MAX_POOL2D / AVG_POOL2D f32 8x64x56x56, 3x3 stride 2 pad 1 (a ResNet stem's pooling) ----
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    y = np.empty((8, 64, 28, 28), np.float32)
    p = fk.params.pool2d(3, stride=2, pads_begin=1, pads_end=1, count_include_pad=True)
    for op, average in ((fk.OpKind.MAX_POOL2D, False), (fk.OpKind.AVG_POOL2D, True)):
        kernel = table.lookup(op, [F32, F32], fk.Backend.CPU)
        contenders = {"fk (out=)": lambda k=kernel: k(x, out=y, params=p),
                      "numpy sliding_window_view": lambda a=average: numpy_pool2d(x, 3, 2, 1, a)}
        skipped = {}
        if torch is not None:
            xt = torch.from_numpy(x)
            fn = torch.nn.functional.avg_pool2d if average else torch.nn.functional.max_pool2d
            contenders["torch"] = lambda f=fn: f(xt, 3, 2, 1)
        else:
            skipped["torch"] = torch_missing
        yield Case(name=f"fk: {op.name} f32 8x64x56x56 3x3 stride 2 pad 1 [{note}]", contenders=contenders,
                   baseline="numpy sliding_window_view", skipped=skipped, target="fk <= 1.0x numpy")

    # ---- TOPK f32 [4096, 1000], k 10 and 100 -----------------------------------------------------
    r = rng.standard_normal((4096, 1000)).astype(np.float32)
    topk = table.lookup(fk.OpKind.TOPK, [F32, F32, fk.DType.I64], fk.Backend.CPU)
    for k in (10, 100):
        values, indices = np.empty((4096, k), np.float32), np.empty((4096, k), np.int64)
        pk = fk.params.topk(k)

        def partition(k=k):
            part = np.argpartition(-r, k - 1, axis=-1)[:, :k]
            order = np.take_along_axis(part, np.argsort(-np.take_along_axis(r, part, -1), axis=-1), -1)
            return np.take_along_axis(r, order, -1), order

        def stable(k=k):
            order = (r.shape[-1] - 1 - np.argsort(r[:, ::-1], axis=-1, kind="stable"))[:, ::-1][:, :k]
            return np.take_along_axis(r, order, -1), order
        contenders = {"fk (out=)": lambda pk=pk, v=values, i=indices: topk(r, out=(v, i), params=pk),
                      "numpy argpartition+argsort (ties unordered)": partition,
                      "numpy stable argsort (same result)": stable}
        skipped = {}
        if torch is not None:
            rt = torch.from_numpy(r)
            contenders["torch topk"] = lambda k=k: torch.topk(rt, k)
        else:
            skipped["torch"] = torch_missing
        yield Case(name=f"fk: TOPK f32 4096x1000 k={k} [{note}]", contenders=contenders,
                   baseline="numpy argpartition+argsort (ties unordered)", skipped=skipped,
                   target="fk <= 1.0x numpy")
