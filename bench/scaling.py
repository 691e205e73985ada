"""Thread scaling: fuel_kernel at 1, 2, 4, 8, 16 threads against PyTorch (and ONNX Runtime for the
GPT-2 block) at the same thread counts, side by side in one process.

    python -m bench.scaling [--threads 1,2,4,8,16] [--only TEXT] [--set large|small|all] [--repeats N]

Prints, per case and thread count: fuel_kernel's best time, each peer's, the ratio
fuel_kernel / peer and fuel_kernel's speed-up over its own 1-thread time.  The `small` set holds
the cases of the 2-core targets (2-thread speed-up >= 1.7x); `large` the 16-core ones.
"""
import argparse
import time

import numpy as np

import fuel_kernel as fk
from bench.harness import optional_import

F32 = fk.DType.F32


def _native(op, dtypes):
    """The native (not BLAS-backed) kernel at a key."""
    return next(k for k in fk.bindings().alternatives(op, dtypes) if k.source == "native")


def _best(run, repeats, min_seconds=0.05):
    run()
    number, start = 1, time.perf_counter()
    run()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_seconds / once))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            run()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def _cases(torch, which):
    rng = np.random.default_rng(0)
    P = fk.params

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def unary(op, n, torch_fn):
        x = f32(n)
        out = np.empty_like(x)
        k = fk.bindings().lookup(op, [F32, F32])
        t = torch.from_numpy(x) if torch else None
        return {"fuel_kernel": lambda: k(x, out=out)}, ({"torch": lambda: torch_fn(t)} if torch else {})

    def matmul(n):
        a, b = f32(n, n), f32(n, n)
        out = np.empty((n, n), np.float32)
        k = _native("MATMUL", [F32] * 3)
        ta, tb = (torch.from_numpy(a), torch.from_numpy(b)) if torch else (None, None)
        return {"fuel_kernel native": lambda: k(a, b, out=out)}, ({"torch": lambda: ta @ tb} if torch else {})

    def softmax(rows, cols):
        x = f32(rows, cols)
        out = np.empty_like(x)
        k = fk.bindings().lookup("SOFTMAX_LAST_DIM", [F32, F32])
        t = torch.from_numpy(x) if torch else None
        return {"fuel_kernel": lambda: k(x, out=out)}, ({"torch": lambda: torch.softmax(t, -1)} if torch else {})

    def conv(n, c, hw):
        x, w = f32(n, c, hw, hw), f32(c, c, 3, 3) * 0.1
        out = np.empty((n, c, hw, hw), np.float32)
        k = fk.bindings().lookup("CONV2D", [F32] * 3)
        p = P.conv2d(1, 1, 1, 1)
        tx, tw = (torch.from_numpy(x), torch.from_numpy(w)) if torch else (None, None)
        peers = {"torch": lambda: torch.nn.functional.conv2d(tx, tw, padding=1)} if torch else {}
        return {"fuel_kernel": lambda: k(x, w, out=out, params=p)}, peers

    def conv_grad(op, n, c, hw):
        """CONV2D's gradients and CONV_TRANSPOSE2D (the input gradient's run): c -> c channels, 3x3, pad 1."""
        a, w = f32(n, c, hw, hw), f32(c, c, 3, 3) * 0.1
        ta, tw = (torch.from_numpy(a), torch.from_numpy(w)) if torch else (None, None)
        if op == "CONV2D_BACKWARD_INPUT":               # a is dy
            ins, p = (a, w), P.conv2d_backward((hw, hw), 3, 1, 1)
            peer = lambda: torch.nn.grad.conv2d_input(ta.shape, tw, ta, padding=1)  # noqa: E731
        elif op == "CONV_TRANSPOSE2D":                  # a is x
            ins, p = (a, w), P.conv_transpose2d(1, 1, 1)
            peer = lambda: torch.nn.functional.conv_transpose2d(ta, tw, padding=1)  # noqa: E731
        else:                                           # CONV2D_BACKWARD_WEIGHT: x, dy
            dy = f32(n, c, hw, hw)
            tdy = torch.from_numpy(dy) if torch else None
            ins, p = (a, dy), P.conv2d_backward((hw, hw), 3, 1, 1)
            peer = lambda: torch.nn.grad.conv2d_weight(ta, tw.shape, tdy, padding=1)  # noqa: E731
        k = fk.bindings().lookup(op, [F32] * 3)
        out = np.empty((c, c, 3, 3) if op == "CONV2D_BACKWARD_WEIGHT" else (n, c, hw, hw), np.float32)
        return {"fuel_kernel": lambda: k(*ins, out=out, params=p)}, ({"torch": peer} if torch else {})

    def attn(b, h, s, d):
        q, kk, v = f32(b, h, s, d), f32(b, h, s, d), f32(b, h, s, d)
        out = np.empty_like(q)
        k = fk.bindings().lookup("FLASH_ATTN", [F32] * 4)
        p = P.flash_attn(1.0 / np.sqrt(d), causal=True)
        peers = {}
        if torch:
            tq, tk, tv = (torch.from_numpy(a) for a in (q, kk, v))
            peers["torch"] = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        return {"fuel_kernel": lambda: k(q, kk, v, out=out, params=p)}, peers

    def add(n):
        x, y = f32(n), f32(n)
        out = np.empty_like(x)
        k = fk.bindings().lookup("ADD", [F32] * 3)
        tx, ty = (torch.from_numpy(x), torch.from_numpy(y)) if torch else (None, None)
        return {"fuel_kernel": lambda: k(x, y, out=out)}, ({"torch": lambda: tx + ty} if torch else {})

    def total(n):
        x = f32(n)
        out = np.empty((), np.float32)
        k = fk.bindings().lookup("SUM", [F32, F32])
        t = torch.from_numpy(x) if torch else None
        return {"fuel_kernel": lambda: k(x, out=out)}, ({"torch": lambda: t.sum()} if torch else {})

    small = {
        "MATMUL f32 1024 (native)": lambda: matmul(1024),
        "CONV2D f32 8x64x56x56, 3x3": lambda: conv(8, 64, 56),
        **{f"CONV2D_BACKWARD_INPUT f32 {n}x64x56x56 3x3": (lambda n=n: conv_grad("CONV2D_BACKWARD_INPUT", n, 64, 56))
           for n in (8, 1, 2, 3)},
        "CONV_TRANSPOSE2D f32 8x64x56x56, 3x3": lambda: conv_grad("CONV_TRANSPOSE2D", 8, 64, 56),
        "CONV_TRANSPOSE2D f32 2x64x56x56, 3x3": lambda: conv_grad("CONV_TRANSPOSE2D", 2, 64, 56),
        "CONV2D_BACKWARD_WEIGHT f32 8x64x56x56": lambda: conv_grad("CONV2D_BACKWARD_WEIGHT", 8, 64, 56),
        "SOFTMAX f32 4096x1024": lambda: softmax(4096, 1024),
        "FLASH_ATTN causal f32 1x8x1024x64": lambda: attn(1, 8, 1024, 64),
        "GELU f32 4M": lambda: unary("GELU", 1 << 22, lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    }
    large = {
        "MATMUL f32 2048 (native)": lambda: matmul(2048),
        "ADD f32 64M": lambda: add(1 << 26),
        "EXP f32 16M": lambda: unary("EXP", 1 << 24, lambda t: torch.exp(t)),
        "SOFTMAX f32 8192x4096": lambda: softmax(8192, 4096),
        "SUM f32 64M": lambda: total(1 << 26),
        "CONV2D f32 32x64x56x56, 3x3": lambda: conv(32, 64, 56),
        "FLASH_ATTN causal f32 4x16x2048x64": lambda: attn(4, 16, 2048, 64),
    }
    chosen = {"small": small, "large": large, "all": {**small, **large}}[which]
    return chosen


def _block(torch, threads_list):
    """(fuel_kernel run, {peer: {threads: run}}) for the GPT-2 block at S = 512."""
    from bench import bench_models as models
    rng = np.random.default_rng(0)
    W = models._block_weights(rng)
    plan, x = models.gpt2_block_plan(rng, W, 512)
    peers = {}
    if torch:
        module = models._torch_block(torch, W, decode=False)
        tx = torch.from_numpy(x)

        def torch_run():
            with torch.no_grad():
                return module(tx)
        peers["torch"] = {t: torch_run for t in threads_list}
        sessions = {}
        for t in threads_list:
            session, why = models._ort_session(torch, module, (tx,), ["x"], threads=t)
            if session is not None:
                sessions[t] = (lambda s: (lambda: s.run(None, {"x": x})))(session)
        if sessions:
            peers["onnxruntime"] = sessions
    return (lambda: plan.run([x])), peers


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--threads", default="1,2,4,8,16")
    parser.add_argument("--only", default="")
    parser.add_argument("--set", default="all", choices=("small", "large", "all"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-block", action="store_true", help="skip the GPT-2 block")
    parser.add_argument("--no-peers", action="store_true", help="time fuel_kernel alone")
    args = parser.parse_args(argv)
    threads_list = [int(t) for t in args.threads.split(",")]
    torch, why = (None, "--no-peers") if args.no_peers else optional_import("torch")
    if torch is None:
        print(f"(no peers: {why})")
    print(f"{'case':40} {'threads':>7} {'fuel_kernel':>12} {'peer':>12} {'peer time':>10} {'fk/peer':>8} {'speed-up':>8}")
    work = [(name, build) for name, build in _cases(torch, args.set).items() if args.only in name]
    for name, build in work:
        ours, peers = build()
        run = next(iter(ours.values()))
        _report(name, threads_list, {t: run for t in threads_list},
                {peer: {t: peer_run for t in threads_list} for peer, peer_run in peers.items()},
                torch, args.repeats)
    if not args.no_block and args.only in "GPT-2 block S=512":
        ours, peers = _block(torch, threads_list)
        _report("GPT-2 block S=512 f32", threads_list, {t: ours for t in threads_list}, peers, torch, args.repeats)


def _report(name, threads_list, ours, peers, torch, repeats):
    base = None
    for t in threads_list:
        fk.set_num_threads(t)
        if torch:
            torch.set_num_threads(t)
        mine = _best(ours[t], repeats)
        base = base or mine
        peer_times = {peer: _best(runs[t], repeats) for peer, runs in peers.items() if t in runs}
        if not peer_times:
            print(f"{name[:40]:40} {t:>7} {mine * 1e3:>10.3f}ms {'-':>12} {'-':>10} {'-':>8} {base / mine:>7.2f}x")
        for peer, seconds in peer_times.items():
            print(f"{name[:40]:40} {t:>7} {mine * 1e3:>10.3f}ms {peer:>12} {seconds * 1e3:>8.3f}ms "
                  f"{mine / seconds:>7.2f}x {base / mine:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
