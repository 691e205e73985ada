"""A Llama decode step on GGML-quantized weights (examples/llama_decode.py's model) against the same
model in PyTorch on the dequantized F32 weights (NumPy F32 when torch is not installed), one thread
(the runner pins fuel_kernel's and the BLAS pools; torch gets set_num_threads(1)).

The model has TinyLlama 1.1B's layer shape (d 2048, 32 query and 4 KV heads of 64, SwiGLU 5632),
2 layers and an 8192-token vocabulary: 105M projection weights, 59 MB in Q4_0, 111 MB in Q8_0 and
420 MB in F32: larger than most last-level caches, so the step streams its weights from memory.  The step is one token at
position 255 (a 256-token context already in the cache, random K and V, the same values in the
peer's contiguous cache): fuel_kernel runs the example's decode plan (QMATMUL GEMVs, RoPE,
WRITE_SLICE into the paged cache, PAGED_ATTN); the peer runs F.linear / SDPA.  Before timing, the
logits are compared (a disagreement fails the case).  The rate column is tokens/s (one per step).
"""
import importlib.util
import sys
from pathlib import Path

import numpy as np

from bench.harness import Case, optional_import

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama_decode.py"
POSITION = 255
TOLERANCE = 1e-4          # max |logit difference| relative to the largest logit (F32 against F32)


def _example():
    spec = importlib.util.spec_from_file_location("llama_decode", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _peer(llama, cfg, dequantized, cache, block_table):
    """(name, step() -> logits as a NumPy array) for torch, or NumPy F32 without it; the peer's
    contiguous cache holds the paged cache's tokens 0 .. POSITION - 1."""
    token = 7
    torch, why = optional_import("torch")
    contiguous = np.empty((cfg.layers, 2, cfg.kv_heads, POSITION, cfg.head_dim), np.float32)
    for t in range(POSITION):
        page, row = block_table[0, t // cfg.block_size], t % cfg.block_size
        contiguous[:, :, :, t] = cache[:, :, page, row]
    if torch is not None:
        torch.set_num_threads(1)
        model = llama.torch_llama(cfg, dequantized)
        model.k[:, 0, :, :POSITION] = torch.from_numpy(contiguous[:, 0])
        model.v[:, 0, :, :POSITION] = torch.from_numpy(contiguous[:, 1])
        tokens = torch.tensor([token])
        return "torch F32 (1 thread)", lambda: model.forward(tokens, POSITION).numpy(), None
    model = llama.NumpyLlama(cfg, dequantized, np.float32)
    model.k[:, :, :POSITION], model.v[:, :, :POSITION] = contiguous[:, 0], contiguous[:, 1]

    def numpy_step():
        model.position = POSITION
        return model.forward([token])
    return "numpy F32", numpy_step, why


def cases():
    gguf, gguf_missing = optional_import("gguf")
    if gguf is None:            # the weights are quantized by gguf: nothing to run without it
        yield Case(name="Llama decode step (gguf-quantized weights)", contenders={"nothing to time": lambda: None},
                   baseline="nothing to time", skipped={"every contender (gguf)": gguf_missing})
        return
    llama = _example()
    cfg = llama.Config(vocab=8192, dim=2048, layers=2, heads=32, kv_heads=4, ffn=5632, max_context=512)
    weights = llama.random_weights(cfg, seed=0)
    rng = np.random.default_rng(1)
    for quant, target in (("Q4_0", "fuel_kernel Q4_0 <= 0.25x the F32 peer (4x faster)"),
                          ("Q8_0", "")):
        blocks, dequantized = llama.quantize(weights, quant)
        model = llama.FuelLlama(cfg, blocks, quant, seed=2)
        model.cache[...] = rng.standard_normal(model.cache.shape, np.float32)
        inputs = [np.array([7], np.int64), np.array([POSITION], np.int64), model.block_table, model.cache]
        plan = model.decode_plan
        logits = plan.run(inputs)[0]
        peer_name, peer_step, why = _peer(llama, cfg, dequantized, model.cache, model.block_table)
        peer_logits = peer_step()
        difference = float(np.max(np.abs(peer_logits - logits))) / float(np.max(np.abs(peer_logits)))
        if not difference <= TOLERANCE:
            raise AssertionError(f"{peer_name} disagrees with the {quant} plan by {difference:.3g} of the "
                                 f"largest logit (> {TOLERANCE})")
        weight_mb = sum(a.nbytes for name, a in blocks.items() if llama.is_projection(name)) / 1e6
        yield Case(name=f"Llama decode step, {quant} weights (d {cfg.dim}, {cfg.layers} layers, ctx {POSITION + 1})",
                   contenders={peer_name: peer_step, f"fuel_kernel {quant} Plan.run": lambda p=plan, i=inputs: p.run(i)},
                   baseline=peer_name, skipped={"torch": why} if why else {}, target=target, rate=(1, "tokens"),
                   notes=(f"{weight_mb:.0f} MB of {quant} projection weights against "
                          f"{4 * sum(a.size for n, a in weights.items() if llama.is_projection(n)) / 1e6:.0f} MB "
                          f"in F32; logits agree to {difference:.2g} of the largest"))
        del blocks, dequantized, model, plan, inputs, peer_step
