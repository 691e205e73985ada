"""Whole models on one core: an MLP, a GPT-2 block and its decode step, against torch and ONNX Runtime.

Each model is built once with the Graph and compiled to a Plan; torch eager runs the same math
with the same weights, and ONNX Runtime runs the torch module exported with torch.onnx.export
(all graph optimizations on, one thread).  Before timing, every contender's output is compared
with the Plan's (the largest difference is in the case's notes; a disagreement beyond the
tolerance fails the case rather than timing different work).

Models (f32, single thread):
* MLP 32 x 512-2048-2048-512: Linear + bias, exact (erf) GELU between layers.
* GPT-2 block, S = 128, d = 768, 12 heads: LayerNorm, QKV projection, causal attention,
  output projection, residual, LayerNorm, 768-3072-768 MLP with the tanh GELU, residual; and the
  same plan compiled with fuse=False, to show what the fused groups save.
* Its decode step: one new token against a 4096-token KV cache held by the caller (the step
  returns the token's output and its new K and V rows, which the caller appends), with the cache
  contiguous (FLASH_ATTN) or paged in 16-token blocks in shuffled order (PAGED_ATTN); torch and
  ONNX Runtime read the contiguous cache.
* Decode attention alone (32 heads, D = 128, 4096 keys): FLASH_ATTN, PAGED_ATTN on the same tokens
  in shuffled blocks, torch SDPA and a copy of the K and V bytes (the bandwidth floor).
* Its training step: the block's forward pass, a loss (the sum of the output times fixed random
  weights) and the gradients of every weight and bias (Graph.grad, one Plan), against torch eager
  running forward and loss.backward() with the same weights.
* The plan's own cost: the MLP's and the block's Plan.run against the sum of their steps, each
  timed alone by Plan.profile (what running them together costs: cache traffic between steps and
  the executor's work).
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import
from fuel_kernel.graph import Graph

F32 = fk.DType.F32
D_MODEL, HEADS, SEQ, CACHE, BLOCK = 768, 12, 128, 4096, 16
HEAD_DIM = D_MODEL // HEADS
TOLERANCE = 2e-4          # max |difference| allowed between contenders (f32, summed over 3072)
TRAINING_TOLERANCE = 1e-4  # the training step's: relative to each output's largest magnitude


def _torch():
    torch, why = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
    return torch, why


def _linear(rng, fan_in, fan_out):
    w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
    b = (rng.standard_normal(fan_out) * 0.02).astype(np.float32)
    return w, b


def _ort_session(torch, module, example_inputs, input_names, threads=1):
    """An ONNX Runtime session (`threads` intra-op threads, all optimizations) for a torch module,
    or (None, why)."""
    ort, why = optional_import("onnxruntime")
    if ort is None:
        return None, why
    import io
    import warnings
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)   # export traces once
    try:
        buffer = io.BytesIO()
        torch.onnx.export(module, example_inputs, buffer, input_names=input_names, opset_version=17,
                          dynamo=False)
    except TypeError:           # an older torch without the dynamo switch
        buffer = io.BytesIO()
        torch.onnx.export(module, example_inputs, buffer, input_names=input_names, opset_version=17)
    except Exception as exc:    # the exporter is optional tooling: report, do not fail the suite
        return None, f"torch.onnx.export failed ({type(exc).__name__}: {exc})"
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"]), None


def _peers(torch, why, module, arrays, names):
    """(name, run, why) for torch eager and ONNX Runtime running `module` on `arrays`; both are
    (name, None, why) without torch.  run() returns the outputs as a list of arrays."""
    if torch is None:
        return [("torch eager (1 thread)", None, why), ("onnxruntime (1 thread)", None, why)]
    tensors = tuple(torch.from_numpy(a) for a in arrays)

    def torch_run():
        with torch.no_grad():
            out = module(*tensors)
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    session, why = _ort_session(torch, module, tensors, names)
    feeds = dict(zip(names, arrays))
    return [("torch eager (1 thread)", torch_run, None),
            ("onnxruntime (1 thread)", (lambda: session.run(None, feeds)) if session else None, why)]


def _compare(reference, got, what, relative=None):
    """Largest |difference| between two outputs (lists of arrays), absolute, or relative to each
    output's largest magnitude when `relative` is the bound; raises beyond the bound."""
    worst, bound = 0.0, TOLERANCE if relative is None else relative
    for a, b in zip(reference, got):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = 1.0 if relative is None else max(float(np.max(np.abs(a))), 1e-30)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    if not worst <= bound:
        raise AssertionError(f"{what} disagrees with the plan by {worst:.3g} (> {bound})")
    return worst


def _case(name, plan_run, plan_out, peers, target, notes, tolerance=None):
    """A Case from the plan and (name, callable, outputs-as-list) peers, outputs compared first
    (absolutely, or relative to each output's scale when `tolerance` is given)."""
    contenders = {"fuel_kernel Plan.run": plan_run}
    skipped, differences = {}, []
    for peer, run, why in peers:
        if run is None:
            skipped[peer] = why
            continue
        differences.append(f"{peer} max |diff| {_compare(plan_out, run(), peer, tolerance):.2g}")
        contenders[peer] = run
    baseline = next((p for p, run, _ in peers if run is not None), "fuel_kernel Plan.run")
    return Case(name=name, contenders=contenders, baseline=baseline, skipped=skipped, target=target,
                notes="; ".join([notes] + differences))


# ---- MLP -------------------------------------------------------------------------------------------
MLP_WIDTHS, MLP_BATCH = (512, 2048, 2048, 512), 32


def mlp_plan(rng):
    """The MLP as a compiled Plan, an input for it, and its (weight, bias) layers."""
    layers = [_linear(rng, a, b) for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:])]
    x = rng.standard_normal((MLP_BATCH, MLP_WIDTHS[0])).astype(np.float32)
    g = Graph()
    v = g.input((MLP_BATCH, MLP_WIDTHS[0]), F32)
    for i, (w, b) in enumerate(layers):
        v = g.add(g.matmul(v, g.constant(w)), g.constant(b))
        if i < len(layers) - 1:
            v = g.gelu_erf(v)
    return g.compile(v, measure=True), x, layers


def _mlp_case(rng):
    plan, x, layers = mlp_plan(rng)
    batch = MLP_BATCH
    plan_out = [plan.run([x])]

    torch, why = _torch()
    module = None
    if torch is not None:
        class MLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weights = [torch.from_numpy(w) for w, _ in layers]
                self.biases = [torch.from_numpy(b) for _, b in layers]

            def forward(self, inp):
                for i, (w, b) in enumerate(zip(self.weights, self.biases)):
                    inp = torch.addmm(b, inp, w)
                    if i < len(self.weights) - 1:
                        inp = torch.nn.functional.gelu(inp)
                return inp
        module = MLP().eval()
    peers = _peers(torch, why, module, [x], ["x"])
    return _case(f"MLP {batch}x512-2048-2048-512, bias + GELU (erf), f32", lambda: plan.run([x]),
                 plan_out, peers, "plan <= 0.9x onnxruntime",
                 f"plan arena: peak {plan.peak_bytes} B")


# ---- the plan's own cost -----------------------------------------------------------------------------
PROFILE_REPEATS = 8


def _overhead_case(name, plan, inputs):
    """plan.run against the sum of its steps, each run alone PROFILE_REPEATS times back to back
    (Plan.profile; timed per repeat, so the two compare per run): what running the steps together
    costs beyond the steps themselves."""
    return Case(name=f"plan overhead: {name}, Plan.run against its steps run alone",
                contenders={"steps alone (Plan.profile)": lambda: plan.profile(inputs, PROFILE_REPEATS),
                            "fuel_kernel Plan.run": lambda: plan.run(inputs)},
                baseline="steps alone (Plan.profile)", items={"steps alone (Plan.profile)": PROFILE_REPEATS},
                target="Plan.run <= 1.03x the sum of its steps alone", notes=f"{plan.n_steps} steps")


# ---- GPT-2 block -------------------------------------------------------------------------------------
def _block_weights(rng):
    return {
        "ln1": ((1 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32),
                (0.1 * rng.standard_normal(D_MODEL)).astype(np.float32)),
        "qkv": _linear(rng, D_MODEL, 3 * D_MODEL),
        "proj": _linear(rng, D_MODEL, D_MODEL),
        "ln2": ((1 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32),
                (0.1 * rng.standard_normal(D_MODEL)).astype(np.float32)),
        "fc": _linear(rng, D_MODEL, 4 * D_MODEL),
        "out": _linear(rng, 4 * D_MODEL, D_MODEL),
    }


def _graph_linear(g, v, weights):
    w, b = weights
    return g.add(g.matmul(v, g.constant(w)), g.constant(b))


def _graph_mlp_tail(g, x, attention, W):
    """Output projection, residual, LayerNorm, MLP, residual: the part every variant shares."""
    x = g.add(x, _graph_linear(g, attention, W["proj"]))
    h = g.layer_norm(x, g.constant(W["ln2"][0]), g.constant(W["ln2"][1]), eps=1e-5)
    h = _graph_linear(g, g.gelu(_graph_linear(g, h, W["fc"])), W["out"])
    return g.add(x, h)


def _graph_heads(g, qkv, rows):
    """q, k, v as [1, H, rows, Dh] views of a [rows, 3d] projection."""
    qkv = g.reshape(qkv, (1, rows, 3, HEADS, HEAD_DIM))
    return [g.transpose(g.slice_view(qkv, (slice(None), slice(None), i)), (0, 2, 1, 3)) for i in range(3)]


def _torch_block(torch, W, decode, as_tensors=False):
    F = torch.nn.functional
    t = W if as_tensors else {name: tuple(torch.from_numpy(a) for a in pair) for name, pair in W.items()}

    class Block(torch.nn.Module):
        def forward(self, x, *cache):
            h = F.layer_norm(x, (D_MODEL,), t["ln1"][0], t["ln1"][1], eps=1e-5)
            qkv = torch.addmm(t["qkv"][1], h, t["qkv"][0])
            rows = x.shape[0]
            q, k, v = qkv.view(1, rows, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
            if decode:
                a = F.scaled_dot_product_attention(q, cache[0], cache[1])
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.permute(0, 2, 1, 3).reshape(rows, D_MODEL)
            x = x + torch.addmm(t["proj"][1], a, t["proj"][0])
            h = F.layer_norm(x, (D_MODEL,), t["ln2"][0], t["ln2"][1], eps=1e-5)
            h = F.gelu(torch.addmm(t["fc"][1], h, t["fc"][0]), approximate="tanh")
            x = x + torch.addmm(t["out"][1], h, t["out"][0])
            if decode:
                return x, k.reshape(HEADS, HEAD_DIM), v.reshape(HEADS, HEAD_DIM)
            return x
    return Block().eval()


def gpt2_block_plan(rng, W, seq, fuse=True):
    """The GPT-2 block over `seq` tokens as a compiled Plan (compile(fuse=fuse)), and an input for it."""
    x = (rng.standard_normal((seq, D_MODEL))).astype(np.float32)
    g = Graph()
    xi = g.input((seq, D_MODEL), F32)
    h = g.layer_norm(xi, g.constant(W["ln1"][0]), g.constant(W["ln1"][1]), eps=1e-5)
    q, k, v = _graph_heads(g, _graph_linear(g, h, W["qkv"]), seq)
    a = g.flash_attn(q, k, v, scale=1.0 / np.sqrt(HEAD_DIM), causal=True)
    a = g.reshape(g.transpose(a, (0, 2, 1, 3)), (seq, D_MODEL))
    return g.compile(_graph_mlp_tail(g, xi, a, W), measure=True, fuse=fuse), x


def _block_case(rng, W):
    plan, x = gpt2_block_plan(rng, W, SEQ)
    plan_out = [plan.run([x])]

    torch, why = _torch()
    module = _torch_block(torch, W, decode=False) if torch is not None else None
    peers = _peers(torch, why, module, [x], ["x"])
    return _case(f"GPT-2 block S={SEQ} d={D_MODEL} {HEADS} heads, f32", lambda: plan.run([x]), plan_out,
                 peers, "plan <= 1.0x onnxruntime", f"plan arena: peak {plan.peak_bytes} B")


def _block_fusion_case(rng, W):
    """The same block compiled with and without fused groups (epilogues of the projections, the
    residual adds in the LayerNorm row pass): the same bytes, and what fusing saves."""
    fused, x = gpt2_block_plan(np.random.default_rng(1), W, SEQ)
    unfused, _ = gpt2_block_plan(np.random.default_rng(1), W, SEQ, fuse=False)
    if fused.run([x]).tobytes() != unfused.run([x]).tobytes():
        raise AssertionError("the fused GPT-2 block plan differs from fuse=False")
    groups = ", ".join(f"{len(g.members)}" + (f" after {g.head.name}" if g.head is not None else "")
                       for g in fused.groups)
    return Case(name=f"GPT-2 block S={SEQ}: fused plan against compile(fuse=False)",
                contenders={"Plan.run fused": lambda: fused.run([x]),
                            "Plan.run fuse=False": lambda: unfused.run([x])},
                baseline="Plan.run fuse=False", skipped={}, target="fused <= 0.87x fuse=False (15% faster)",
                notes=(f"groups of {groups} nodes; arena peak {fused.peak_bytes} B fused, "
                       f"{unfused.peak_bytes} B unfused; the same bytes"))


def _paged(rng, k_cache, v_cache):
    """The contiguous caches [1, H, CACHE, Dh] as paged ones, the same tokens in shuffled BLOCK-token
    blocks [blocks, BLOCK, H, Dh], and the block table [1, blocks] (i32) that finds them."""
    n_blocks = CACHE // BLOCK
    order = rng.permutation(n_blocks)
    k_paged = np.empty((n_blocks, BLOCK) + k_cache.shape[1:2] + k_cache.shape[3:], np.float32)
    v_paged = np.empty((n_blocks, BLOCK) + v_cache.shape[1:2] + v_cache.shape[3:], np.float32)
    for logical, physical in enumerate(order):
        span = slice(logical * BLOCK, (logical + 1) * BLOCK)
        k_paged[physical] = k_cache[0, :, span].transpose(1, 0, 2)
        v_paged[physical] = v_cache[0, :, span].transpose(1, 0, 2)
    return k_paged, v_paged, order.astype(np.int32)[None, :]


def _decode_cases(rng, W):
    x = rng.standard_normal((1, D_MODEL)).astype(np.float32)
    k_cache = rng.standard_normal((1, HEADS, CACHE, HEAD_DIM)).astype(np.float32)
    v_cache = rng.standard_normal((1, HEADS, CACHE, HEAD_DIM)).astype(np.float32)
    k_paged, v_paged, table = _paged(rng, k_cache, v_cache)
    lens = np.array([CACHE], np.int32)
    scale = 1.0 / np.sqrt(HEAD_DIM)

    def build(paged):
        g = Graph()
        xi = g.input((1, D_MODEL), F32)
        if paged:
            kc, vc = g.input(k_paged.shape, F32), g.input(v_paged.shape, F32)
        else:
            kc, vc = g.input(k_cache.shape, F32), g.input(v_cache.shape, F32)
        h = g.layer_norm(xi, g.constant(W["ln1"][0]), g.constant(W["ln1"][1]), eps=1e-5)
        q, k, v = _graph_heads(g, _graph_linear(g, h, W["qkv"]), 1)
        if paged:
            q3 = g.reshape(q, (1, HEADS, HEAD_DIM))
            a = g.paged_attn(q3, kc, vc, g.constant(table), g.constant(lens),
                             g.constant(np.zeros(0, np.float32)), scale=scale, block_size=BLOCK)
        else:
            a = g.flash_attn(q, kc, vc, scale=scale)
        a = g.reshape(a, (1, D_MODEL))
        out = _graph_mlp_tail(g, xi, a, W)
        return g.compile([out, g.reshape(k, (HEADS, HEAD_DIM)), g.reshape(v, (HEADS, HEAD_DIM))],
                         measure=True)

    flat, paged = build(False), build(True)
    flat_inputs, paged_inputs = [x, k_cache, v_cache], [x, k_paged, v_paged]
    flat_out = flat.run(flat_inputs)
    _compare(flat_out, paged.run(paged_inputs), "the paged plan")

    torch, why = _torch()
    module = _torch_block(torch, W, decode=True) if torch is not None else None
    peers = _peers(torch, why, module, [x, k_cache, v_cache], ["x", "k_cache", "v_cache"])
    target = "plan <= 1.0x the faster of torch and onnxruntime"
    yield _case(f"GPT-2 decode step, {CACHE}-token cache, contiguous (FLASH_ATTN)",
                lambda: flat.run(flat_inputs), flat_out, peers, target, f"plan arena: peak {flat.peak_bytes} B")
    yield _case(f"GPT-2 decode step, {CACHE}-token cache, paged (PAGED_ATTN)",
                lambda: paged.run(paged_inputs), flat_out, peers, target,
                f"{BLOCK}-token blocks in shuffled order; peers read the contiguous cache")


# ---- GPT-2 block training step -------------------------------------------------------------------
TRAINED = ("ln1", "qkv", "proj", "ln2", "fc", "out")


def gpt2_training_plan(W, seq):
    """The GPT-2 block's forward pass, loss = sum(out * r) and the gradient of every weight, as one
    Plan; its inputs are x, r and the weights (each pair in TRAINED order)."""
    g = Graph()
    xi, r = g.input((seq, D_MODEL), F32, name="x"), g.input((seq, D_MODEL), F32, name="r")
    p = {name: tuple(g.input(a.shape, F32, name=f"{name}{i}") for i, a in enumerate(W[name])) for name in TRAINED}
    h = g.layer_norm(xi, p["ln1"][0], p["ln1"][1], eps=1e-5)
    qkv = g.add(g.matmul(h, p["qkv"][0]), p["qkv"][1])
    q, k, v = _graph_heads(g, qkv, seq)
    a = g.flash_attn(q, k, v, scale=1.0 / np.sqrt(HEAD_DIM), causal=True)
    a = g.reshape(g.transpose(a, (0, 2, 1, 3)), (seq, D_MODEL))
    x = g.add(xi, g.add(g.matmul(a, p["proj"][0]), p["proj"][1]))
    h = g.layer_norm(x, p["ln2"][0], p["ln2"][1], eps=1e-5)
    h = g.add(g.matmul(g.gelu(g.add(g.matmul(h, p["fc"][0]), p["fc"][1])), p["out"][0]), p["out"][1])
    loss = g.sum(g.mul(g.add(x, h), r))
    wanted = [value for name in TRAINED for value in p[name]]
    return g.compile([loss] + g.grad(loss, wanted))


def _training_case(rng, W):
    x = rng.standard_normal((SEQ, D_MODEL)).astype(np.float32)
    r = rng.standard_normal((SEQ, D_MODEL)).astype(np.float32)
    weights = [a for name in TRAINED for a in W[name]]
    plan = gpt2_training_plan(W, SEQ)
    plan_out = plan.run([x, r] + weights)
    peers = []
    torch, why = _torch()
    if torch is None:
        peers.append(("torch eager (1 thread)", None, why))
    else:
        params = [torch.from_numpy(a.copy()).requires_grad_() for a in weights]
        module = _torch_block(torch, {name: (params[2 * i], params[2 * i + 1]) for i, name in enumerate(TRAINED)},
                              decode=False, as_tensors=True)
        tx, tr = torch.from_numpy(x), torch.from_numpy(r)

        def torch_step():
            for t in params:
                t.grad = None
            loss = (module(tx) * tr).sum()
            loss.backward()
            return [loss.detach().numpy()] + [t.grad.numpy() for t in params]
        peers.append(("torch eager (1 thread)", torch_step, None))
    return _case(f"GPT-2 block training step S={SEQ} (forward + backward), f32",
                 lambda: plan.run([x, r] + weights), plan_out, peers, "plan <= 1.0x torch eager",
                 f"plan arena: peak {plan.peak_bytes} B; {plan.n_steps} steps", tolerance=TRAINING_TOLERANCE)


def _decode_attention_case(rng, heads=32, head_dim=128):
    """Decode attention alone, 1 query over a 4096-token cache (32 heads, D = 128, f32): FLASH_ATTN on
    the contiguous cache and PAGED_ATTN on the same tokens in shuffled 16-token blocks, against a copy
    of the same K and V bytes (the bandwidth floor) and torch SDPA on the contiguous cache."""
    k = rng.standard_normal((1, heads, CACHE, head_dim)).astype(np.float32)
    v = rng.standard_normal((1, heads, CACHE, head_dim)).astype(np.float32)
    q = rng.standard_normal((1, heads, 1, head_dim)).astype(np.float32)
    kp, vp, table = _paged(rng, k, v)
    lens, slopes = np.array([CACHE], np.int32), np.zeros(0, np.float32)
    scale = 1.0 / np.sqrt(head_dim)
    flash = fk.bindings().lookup(fk.OpKind.FLASH_ATTN, [F32] * 4)
    paged = fk.bindings().lookup(fk.OpKind.PAGED_ATTN, [F32, F32, F32, fk.DType.I32, fk.DType.I32, F32, F32])
    o_flash, o_paged = np.empty_like(q), np.empty((1, heads, head_dim), np.float32)
    fp, pp = fk.params.flash_attn(scale=scale), fk.params.paged_attn(scale, block_size=BLOCK)
    q3 = q.reshape(1, heads, head_dim)
    flash(q, k, v, out=o_flash, params=fp)
    paged(q3, kp, vp, table, lens, slopes, out=o_paged, params=pp)
    difference = float(np.abs(o_flash.reshape(o_paged.shape) - o_paged).max())
    copy_src, copy_dst = np.concatenate([k.ravel(), v.ravel()]), np.empty(k.size + v.size, np.float32)
    contenders = {"FLASH_ATTN (contiguous cache)": lambda: flash(q, k, v, out=o_flash, params=fp),
                  "PAGED_ATTN (shuffled 16-token blocks)": lambda: paged(q3, kp, vp, table, lens, slopes, out=o_paged,
                                                                         params=pp),
                  "np.copyto of the K and V bytes": lambda: np.copyto(copy_dst, copy_src)}
    skipped = {}
    torch, why = _torch()
    if torch is not None:
        tq, tk, tv = map(torch.from_numpy, (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        contenders["torch SDPA (1 thread)"] = lambda: sdpa(tq, tk, tv, scale=scale)
    else:
        skipped["torch"] = why
    return Case(name=f"decode attention, 1 query x {CACHE} keys, {heads} heads, D {head_dim}, f32",
                contenders=contenders, baseline="FLASH_ATTN (contiguous cache)", skipped=skipped,
                rate=((k.nbytes + v.nbytes) / 1e9, "GB"),
                target="PAGED_ATTN <= 1.1x FLASH_ATTN; FLASH_ATTN <= 1.0x torch SDPA and >= 80% of the copy's GB/s",
                notes=f"max |FLASH_ATTN - PAGED_ATTN| = {difference:.3g}")


def cases():
    rng = np.random.default_rng(0)
    yield _decode_attention_case(rng)
    yield _mlp_case(rng)
    W = _block_weights(rng)
    yield _block_case(rng, W)
    yield _block_fusion_case(rng, W)
    yield from _decode_cases(rng, W)
    yield _training_case(rng, W)
    rng = np.random.default_rng(1)
    plan, x, _ = mlp_plan(rng)
    yield _overhead_case("MLP", plan, [x])
    plan, x = gpt2_block_plan(rng, _block_weights(rng), SEQ)
    yield _overhead_case(f"GPT-2 block S={SEQ}", plan, [x])
