"""A Llama-style decode demo: a random-weight model with Q4_0 or Q8_0 weights, built with the Graph, prefills a prompt (in one go or in chunks) and decodes greedily over a paged KV cache.

    python examples/llama_decode.py                 # the small model (seconds)
    python examples/llama_decode.py --large         # a TinyLlama-shaped model (d 2048, a minute to quantize)
    python examples/llama_decode.py --tokens 64 --threads 1

The model is Llama's: token embedding, then per layer RMSNorm, one QKV projection, RoPE (half-split
pairs, as Hugging Face's Llama), grouped-query attention (8 query heads share 2 KV heads by
default), the output projection and a residual add, RMSNorm, the SwiGLU MLP (silu(gate) * up, then
down) and a residual add; a final RMSNorm, the output head, and ARGMAX for the greedy next token.
Every projection (the head too) is QMATMUL on GGML blocks made by `gguf.quants.quantize`, and the
token embedding table is quantized the same way and read by QEMBEDDING (rows dequantized at the
token ids).  The QKV and the gate / up weights are each stored as one matrix (their rows
concatenated), which computes exactly what separate projections would, in fewer calls.

The plans:
* prefill (m = prompt length, compiled per length): QMATMUL's GEMM path, FLASH_ATTN (causal, GQA)
  over the prompt, and one WRITE_SLICE per 16-token page of K and of V into the cache;
* prefill of a further chunk of prompt onto the cache (compiled per chunk length; its start
  position is a run-time operand): each token's K and V written at its slot, computed in the plan
  from the block table, and PAGED_ATTN with the chunk's queries [1, S, Hq, D] aligned to the
  context length start + S (query i at position start + i, causal);
* decode (m = 1): QMATMUL's GEMV path, the new token's K and V written by WRITE_SLICE at its slot,
  PAGED_ATTN over the block table.  The position is a run-time operand (an I64 array), so the one
  plan serves every token: RoPE's cos / sin rows are INDEX_SELECTed from a table by it, the slot is
  block_table[pos // 16] * 16 + pos % 16 and the context length pos + 1, all computed in the plan.

The KV cache is one caller-owned array, `Graph.state` [layers, 2 (K, V), pages, 16, kv heads,
head dim], written in place across `plan.run` calls; the block table maps the sequence's logical
pages to physical pages (shuffled here, to show that nothing assumes they are in order).

The peer is the same model in PyTorch (when it is installed) on the dequantized F32 weights
(`gguf.quants.dequantize`), with a contiguous cache, and `NumpyLlama` is a plain NumPy version of
it (any float dtype) that the tests use, in float64, as the reference.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

QUANT_TYPES = ("Q4_0", "Q8_0")


@dataclasses.dataclass(frozen=True)
class Config:
    """The model's shape.  dim and ffn are multiples of 32 (GGML blocks run along the input axis)."""
    vocab: int = 4096
    dim: int = 512
    layers: int = 2
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 1408
    block_size: int = 16          # tokens per KV-cache page
    max_context: int = 256        # the positions the RoPE table and the block table cover
    rope_theta: float = 10000.0
    eps: float = 1e-5

    def __post_init__(self):
        if self.dim % self.heads or self.heads % self.kv_heads or (self.dim // self.heads) % 2:
            raise ValueError(f"dim {self.dim} must split into {self.heads} heads of an even size, and the "
                             f"query heads into groups over {self.kv_heads} KV heads")
        if self.dim % 32 or self.ffn % 32:
            raise ValueError(f"dim {self.dim} and ffn {self.ffn} must be multiples of 32 (GGML blocks)")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def max_blocks(self) -> int:
        """Pages one sequence may use (the block table's width)."""
        return -(-self.max_context // self.block_size)

    @property
    def qkv_rows(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


SMALL = Config()
# TinyLlama 1.1B's layer shape (d 2048, 32 query and 4 KV heads of 64, SwiGLU 5632), fewer layers
LARGE = Config(vocab=32000, dim=2048, layers=4, heads=32, kv_heads=4, ffn=5632, max_context=512)


# ---- weights ----------------------------------------------------------------------------------------
def random_weights(cfg: Config, seed: int = 0) -> Dict[str, np.ndarray]:
    """F32 weights.  Projections are [out, in] (nn.Linear's and GGUF's row order), scaled by
    1/sqrt(in); norm weights near 1."""
    rng = np.random.default_rng(seed)

    def linear(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(cfg.dim)).astype(np.float32)

    w = {"embedding": rng.standard_normal((cfg.vocab, cfg.dim)).astype(np.float32)}
    for i in range(cfg.layers):
        w[f"{i}.attn_norm"] = norm()
        w[f"{i}.qkv"] = linear(cfg.qkv_rows, cfg.dim)
        w[f"{i}.out"] = linear(cfg.dim, cfg.heads * cfg.head_dim)
        w[f"{i}.ffn_norm"] = norm()
        w[f"{i}.gate_up"] = linear(2 * cfg.ffn, cfg.dim)
        w[f"{i}.down"] = linear(cfg.dim, cfg.ffn)
    w["out_norm"] = norm()
    w["head"] = linear(cfg.vocab, cfg.dim)
    return w


def is_projection(name: str) -> bool:
    return name.split(".")[-1] in ("qkv", "out", "gate_up", "down", "head")


def quantize(weights: Dict[str, np.ndarray], quant: str):
    """(blocks, dequantized): every projection and the embedding table as GGML blocks of `quant` (a
    flat U8 array, what QMATMUL and QEMBEDDING take) and as gguf's F32 dequantization of those
    blocks ([rows, cols], what the peers use); the norm weights are in both as they are."""
    import gguf
    qtype = gguf.GGMLQuantizationType[quant]
    blocks, dequantized = {}, {}
    for name, w in weights.items():
        if is_projection(name) or name == "embedding":
            q = gguf.quants.quantize(w, qtype)
            blocks[name] = np.ascontiguousarray(q).reshape(-1)
            dequantized[name] = np.ascontiguousarray(gguf.quants.dequantize(q, qtype), np.float32).reshape(w.shape)
        else:
            blocks[name] = dequantized[name] = w
    return blocks, dequantized


def rope_tables(cfg: Config):
    """cos and sin [max_context, head_dim / 2] in F32: angle(p, i) = p * theta^(-2i / head_dim)."""
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_theta ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim)
    angles = np.arange(cfg.max_context, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# ---- the model as fuel_kernel plans ----------------------------------------------------------------
def cache_shape(cfg: Config, pages: int):
    """The KV cache state: [layers, 2 (K, V), pages, block_size, kv_heads, head_dim]."""
    return (cfg.layers, 2, pages, cfg.block_size, cfg.kv_heads, cfg.head_dim)


def new_cache(cfg: Config, pages: int) -> np.ndarray:
    return np.zeros(cache_shape(cfg, pages), np.float32)


class _Builder:
    """What the prefill and the decode graphs share: the constants and one transformer layer's
    projections and MLP."""

    def __init__(self, cfg: Config, blocks: Dict[str, np.ndarray], quant: str, pages: int):
        import fuel_kernel as fk
        from fuel_kernel.graph import Graph
        self.cfg, self.blocks, self.pages = cfg, blocks, pages
        self.code = {q.name: q.code for q in fk.spec.QUANT_TYPES}[quant]
        self.g = g = Graph()
        self.consts: Dict[str, object] = {}
        cos, sin = rope_tables(cfg)
        self.cos, self.sin = g.constant(cos), g.constant(sin)
        self.block = g.constant(np.array([cfg.block_size], np.int64))

    def weight(self, name):
        if name not in self.consts:
            self.consts[name] = self.g.constant(self.blocks[name])
        return self.consts[name]

    def linear(self, x, name, rows):
        """x [m, k] @ dequant(W).T -> [m, rows] (QMATMUL; GEMV when m == 1)."""
        m, k = x.shape
        return self.g.qmatmul(x, self.weight(name), quant_type=self.code, m=m, n=rows, k=k)

    def embed(self, tokens):
        """The tokens' rows of the quantized embedding table, dequantized (QEMBEDDING) -> [S, dim]."""
        cfg = self.cfg
        return self.g.qembedding(self.weight("embedding"), tokens, quant_type=self.code, n=cfg.vocab, k=cfg.dim)

    def inputs(self):
        """The plan inputs after the tokens: the block table and the cache state."""
        cfg, g = self.cfg, self.g
        self.block_table = g.input((1, cfg.max_blocks), "i32", name="block_table")
        self.cache = g.state(cache_shape(cfg, self.pages), "f32", name="kv_cache")

    def cache_rows(self, layer, kv):
        """Layer `layer`'s K (kv = 0) or V (1) pages as [pages * block_size, kv_heads, head_dim]:
        a token's row there is its slot, page * block_size + row."""
        cfg = self.cfg
        pages = self.g.slice_view(self.cache, (layer, kv))
        return self.g.reshape(pages, (self.pages * cfg.block_size, cfg.kv_heads, cfg.head_dim))

    def attention_heads(self, x, i, cos, sin):
        """Layer i's RMSNorm and QKV projection of x [S, dim], split into heads and q, k rotated:
        q [1, Hq, S, hd], k and v [1, Hkv, S, hd]."""
        g, cfg = self.g, self.cfg
        S, Hq, Hkv, hd = x.shape[0], cfg.heads, cfg.kv_heads, cfg.head_dim
        h = g.rms_norm(x, self.weight(f"{i}.attn_norm"), eps=cfg.eps)
        qkv = g.reshape(self.linear(h, f"{i}.qkv", cfg.qkv_rows), (1, S, Hq + 2 * Hkv, hd))
        heads = [g.transpose(g.slice_view(qkv, (slice(None), slice(None), span)), (0, 2, 1, 3))
                 for span in (slice(0, Hq), slice(Hq, Hq + Hkv), slice(Hq + Hkv, Hq + 2 * Hkv))]
        return g.rope(heads[0], cos, sin), g.rope(heads[1], cos, sin), heads[2]

    def mlp_tail(self, x, attention, i):
        """Output projection, residual, RMSNorm, SwiGLU MLP, residual."""
        g, cfg = self.g, self.cfg
        x = g.add(x, self.linear(attention, f"{i}.out", cfg.dim))
        h = g.rms_norm(x, self.weight(f"{i}.ffn_norm"), eps=cfg.eps)
        gate_up = self.linear(h, f"{i}.gate_up", 2 * cfg.ffn)
        gate = g.slice_view(gate_up, (slice(None), slice(0, cfg.ffn)))
        up = g.slice_view(gate_up, (slice(None), slice(cfg.ffn, 2 * cfg.ffn)))
        return g.add(x, self.linear(g.mul(g.silu(gate), up), f"{i}.down", cfg.dim))

    def head(self, x):
        """Final RMSNorm, the output head and the greedy token: (logits [m, vocab], argmax [m])."""
        g, cfg = self.g, self.cfg
        logits = self.linear(g.rms_norm(x, self.weight("out_norm"), eps=cfg.eps), "head", cfg.vocab)
        return logits, g.argmax(logits, dims=(1,))


def build_prefill(cfg: Config, blocks: Dict[str, np.ndarray], quant: str, prompt_len: int, pages: int,
                  all_logits: bool = False):
    """The prefill plan for a prompt of `prompt_len` tokens at positions 0 .. prompt_len - 1.

    Inputs: tokens (I64 [prompt_len]), the block table (I32 [1, max_blocks]) and the cache state.
    Outputs: logits (F32 [prompt_len or 1, vocab]: every position's, or the last one's) and the
    greedy next token (I64 [1])."""
    if not 0 < prompt_len <= cfg.max_context:
        raise ValueError(f"prompt length {prompt_len} is outside 1 .. {cfg.max_context}")
    b = _Builder(cfg, blocks, quant, pages)
    g, S, hd, Hq, Hkv, bs = b.g, prompt_len, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.block_size
    tokens = g.input((S,), "i64", name="tokens")
    b.inputs()
    n_pages = -(-S // bs)
    # each prompt page's first slot, block_table[0, p] * block_size, as a one-element I64 position
    pages_used = g.index_select(b.block_table, g.constant(np.arange(n_pages, dtype=np.int64)), axis=1)
    page_slots = g.mul(g.cast(pages_used, "i64"), b.block)                            # [1, n_pages]
    cos = g.slice_view(b.cos, (slice(0, S),))
    sin = g.slice_view(b.sin, (slice(0, S),))
    x = b.embed(tokens)                                                                # [S, dim]
    for i in range(cfg.layers):
        q, k, v = b.attention_heads(x, i, cos, sin)                                  # [1, H, S, hd]
        k_rows, v_rows = b.cache_rows(i, 0), b.cache_rows(i, 1)
        for p in range(n_pages):
            span = slice(p * bs, min(S, (p + 1) * bs))
            slot = g.slice_view(page_slots, (0, slice(p, p + 1)))
            for src, rows in ((k, k_rows), (v, v_rows)):
                page = g.transpose(g.slice_view(src, (0, slice(None), span)), (1, 0, 2))   # [n, Hkv, hd]
                g.write_slice(page, rows, slot, start=(0, 0, 0), axis=0)
        a = g.flash_attn(q, k, v, scale=1.0 / np.sqrt(hd), causal=True)              # [1, Hq, S, hd]
        a = g.reshape(g.transpose(a, (0, 2, 1, 3)), (S, Hq * hd))
        x = b.mlp_tail(x, a, i)
    if not all_logits:
        x = g.slice_view(x, (slice(S - 1, S),))
    logits, token = b.head(x)
    token = g.slice_view(token, (slice(token.shape[0] - 1, None),))
    return g.compile([logits, token])


def build_decode(cfg: Config, blocks: Dict[str, np.ndarray], quant: str, pages: int):
    """The decode plan: one token at a run-time position, attending to every cached token before it.

    Inputs: the token (I64 [1]), its position (I64 [1]), the block table (I32 [1, max_blocks]) and
    the cache state.  Outputs: logits (F32 [1, vocab]) and the greedy next token (I64 [1])."""
    b = _Builder(cfg, blocks, quant, pages)
    g, hd, Hq, Hkv, bs = b.g, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.block_size
    token = g.input((1,), "i64", name="token")
    position = g.input((1,), "i64", name="position")
    b.inputs()
    # everything the position decides, computed in the plan
    cos = g.index_select(b.cos, position, axis=0)                                      # [1, hd / 2]
    sin = g.index_select(b.sin, position, axis=0)
    context_len = g.cast(g.add(position, g.constant(np.array([1], np.int64))), "i32")
    page = g.index_select(b.block_table, g.div(position, b.block), axis=1)             # [1, 1] I32
    slot = g.add(g.mul(g.cast(g.reshape(page, (1,)), "i64"), b.block), g.rem(position, b.block))
    no_alibi = g.constant(np.zeros(0, np.float32))
    x = b.embed(token)                                                                 # [1, dim]
    for i in range(cfg.layers):
        h = g.rms_norm(x, b.weight(f"{i}.attn_norm"), eps=cfg.eps)
        qkv = g.reshape(b.linear(h, f"{i}.qkv", cfg.qkv_rows), (cfg.qkv_rows,))
        part = [g.slice_view(qkv, (slice(a * hd, z * hd),)) for a, z in
                ((0, Hq), (Hq, Hq + Hkv), (Hq + Hkv, Hq + 2 * Hkv))]
        q = g.rope(g.reshape(part[0], (Hq, 1, hd)), cos, sin)
        k = g.rope(g.reshape(part[1], (Hkv, 1, hd)), cos, sin)
        pages_kv = []
        for src, kv in ((g.reshape(k, (1, Hkv, hd)), 0), (g.reshape(part[2], (1, Hkv, hd)), 1)):
            rows = g.write_slice(src, b.cache_rows(i, kv), slot, start=(0, 0, 0), axis=0)
            pages_kv.append(g.reshape(rows, (pages, bs, Hkv, hd)))
        a = g.paged_attn(g.reshape(q, (1, Hq, hd)), pages_kv[0], pages_kv[1], b.block_table, context_len,
                         no_alibi, scale=1.0 / np.sqrt(hd), block_size=bs)            # [1, Hq, hd]
        x = b.mlp_tail(x, g.reshape(a, (1, Hq * hd)), i)
    logits, next_token = b.head(x)
    return g.compile([logits, next_token])


def build_prefill_chunk(cfg: Config, blocks: Dict[str, np.ndarray], quant: str, chunk_len: int, pages: int,
                        all_logits: bool = False):
    """The plan that prefills a chunk of `chunk_len` prompt tokens at a run-time start position onto
    a cache already holding positions 0 .. start - 1.

    Inputs: tokens (I64 [chunk_len]), start (I64 [1]), the block table (I32 [1, max_blocks]) and
    the cache state.  Outputs: logits (F32 [chunk_len or 1, vocab]) and the greedy next token (I64 [1]).
    Token t sits at position start + t: RoPE's rows and its cache slot block_table[p // 16] * 16 +
    p % 16 are computed in the plan, its K and V written there (one WRITE_SLICE each), and
    PAGED_ATTN reads the chunk's queries [1, S, Hq, D] aligned to the context length start + S."""
    if not 0 < chunk_len <= cfg.max_context:
        raise ValueError(f"chunk length {chunk_len} is outside 1 .. {cfg.max_context}")
    b = _Builder(cfg, blocks, quant, pages)
    g, S, hd, Hq, Hkv, bs = b.g, chunk_len, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.block_size
    tokens = g.input((S,), "i64", name="tokens")
    start = g.input((1,), "i64", name="start")
    b.inputs()
    positions = g.add(g.constant(np.arange(S, dtype=np.int64)), start)                 # [S]
    cos = g.index_select(b.cos, positions, axis=0)                                     # [S, hd / 2]
    sin = g.index_select(b.sin, positions, axis=0)
    page = g.index_select(b.block_table, g.div(positions, b.block), axis=1)            # [1, S] I32
    slots = g.add(g.mul(g.cast(g.reshape(page, (S,)), "i64"), b.block), g.rem(positions, b.block))
    context_len = g.cast(g.add(start, g.constant(np.array([S], np.int64))), "i32")
    no_alibi = g.constant(np.zeros(0, np.float32))
    x = b.embed(tokens)                                                                # [S, dim]
    for i in range(cfg.layers):
        q, k, v = b.attention_heads(x, i, cos, sin)                                  # [1, H, S, hd]
        pages_kv = []
        for src, kv in ((k, 0), (v, 1)):
            rows = b.cache_rows(i, kv)
            for t in range(S):
                token_kv = g.transpose(g.slice_view(src, (0, slice(None), slice(t, t + 1))), (1, 0, 2))
                rows = g.write_slice(token_kv, rows, g.slice_view(slots, (slice(t, t + 1),)),
                                     start=(0, 0, 0), axis=0)                          # [1, Hkv, hd] at its slot
            pages_kv.append(g.reshape(rows, (pages, bs, Hkv, hd)))
        a = g.paged_attn(g.transpose(q, (0, 2, 1, 3)), pages_kv[0], pages_kv[1], b.block_table, context_len,
                         no_alibi, scale=1.0 / np.sqrt(hd), block_size=bs)            # [1, S, Hq, hd]
        x = b.mlp_tail(x, g.reshape(a, (S, Hq * hd)), i)
    if not all_logits:
        x = g.slice_view(x, (slice(S - 1, S),))
    logits, token = b.head(x)
    token = g.slice_view(token, (slice(token.shape[0] - 1, None),))
    return g.compile([logits, token])


class FuelLlama:
    """The model on fuel_kernel: a prefill plan per prompt length and a chunk-prefill plan per chunk
    length (compiled on first use), one decode plan, a paged cache of `pages` pages and a block
    table (pages in shuffled order)."""

    def __init__(self, cfg: Config, blocks: Dict[str, np.ndarray], quant: str, pages: Optional[int] = None,
                 seed: int = 0, all_logits: bool = False):
        self.cfg, self.blocks, self.quant, self.all_logits = cfg, blocks, quant, all_logits
        self.pages = cfg.max_blocks if pages is None else pages
        if self.pages < cfg.max_blocks:
            raise ValueError(f"{self.pages} pages cannot hold {cfg.max_context} tokens of {cfg.block_size}")
        self.cache = new_cache(cfg, self.pages)
        order = np.random.default_rng(seed).permutation(self.pages)[:cfg.max_blocks]
        self.block_table = order.astype(np.int32)[None, :]
        self.decode_plan = build_decode(cfg, blocks, quant, self.pages)
        self._prefill_plans: Dict[int, object] = {}
        self._chunk_plans: Dict[int, object] = {}
        self.position = 0

    def prefill_plan(self, prompt_len: int):
        if prompt_len not in self._prefill_plans:
            self._prefill_plans[prompt_len] = build_prefill(self.cfg, self.blocks, self.quant, prompt_len,
                                                            self.pages, self.all_logits)
        return self._prefill_plans[prompt_len]

    def prefill(self, tokens: Sequence[int]):
        """Run the prompt from position 0: (logits, next token)."""
        tokens = np.asarray(tokens, np.int64)
        logits, token = self.prefill_plan(len(tokens)).run([tokens, self.block_table, self.cache])
        self.position = len(tokens)
        return logits, int(token[0])

    def prefill_chunk(self, tokens: Sequence[int]):
        """Run a further chunk of prompt from the current position, onto what the cache holds:
        (logits, next token)."""
        tokens = np.asarray(tokens, np.int64)
        if self.position + len(tokens) > self.cfg.max_context:
            raise ValueError(f"the context is full ({self.cfg.max_context} tokens)")
        if len(tokens) not in self._chunk_plans:
            self._chunk_plans[len(tokens)] = build_prefill_chunk(self.cfg, self.blocks, self.quant, len(tokens),
                                                                 self.pages, self.all_logits)
        logits, token = self._chunk_plans[len(tokens)].run(
            [tokens, np.array([self.position], np.int64), self.block_table, self.cache])
        self.position += len(tokens)
        return logits, int(token[0])

    def decode(self, token: int):
        """One token at the next position: (logits [1, vocab], next token)."""
        if self.position >= self.cfg.max_context:
            raise ValueError(f"the context is full ({self.cfg.max_context} tokens)")
        logits, nxt = self.decode_plan.run([np.array([token], np.int64), np.array([self.position], np.int64),
                                            self.block_table, self.cache])
        self.position += 1
        return logits, int(nxt[0])


# ---- the peers ----------------------------------------------------------------------------------------
class NumpyLlama:
    """The same model in plain NumPy on dequantized weights, computed in `dtype` (float64 for the
    tests' reference, float32 as a peer), with a contiguous cache per layer."""

    def __init__(self, cfg: Config, dequantized: Dict[str, np.ndarray], dtype=np.float64):
        self.cfg, self.dtype = cfg, np.dtype(dtype)
        self.w = {name: a.astype(self.dtype) for name, a in dequantized.items()}
        half = cfg.head_dim // 2
        inv_freq = cfg.rope_theta ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim)
        angles = np.arange(cfg.max_context, dtype=np.float64)[:, None] * inv_freq[None, :]
        self.cos, self.sin = np.cos(angles).astype(self.dtype), np.sin(angles).astype(self.dtype)
        shape = (cfg.layers, cfg.kv_heads, cfg.max_context, cfg.head_dim)
        self.k, self.v = np.zeros(shape, self.dtype), np.zeros(shape, self.dtype)
        self.position = 0

    def _rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * weight

    def _rope(self, x, positions):          # x [H, S, hd], half-split pairs
        half = self.cfg.head_dim // 2
        c, s = self.cos[positions], self.sin[positions]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits [len(tokens), vocab] for tokens at the next positions, appending their K and V."""
        cfg, w = self.cfg, self.w
        S, hd, Hq, Hkv = len(tokens), cfg.head_dim, cfg.heads, cfg.kv_heads
        start, end = self.position, self.position + S
        if end > cfg.max_context:
            raise ValueError(f"the context is full ({cfg.max_context} tokens)")
        positions = np.arange(start, end)
        x = w["embedding"][np.asarray(tokens)]
        for i in range(cfg.layers):
            qkv = self._rms_norm(x, w[f"{i}.attn_norm"]) @ w[f"{i}.qkv"].T
            q = qkv[:, :Hq * hd].reshape(S, Hq, hd).transpose(1, 0, 2)
            k = qkv[:, Hq * hd:(Hq + Hkv) * hd].reshape(S, Hkv, hd).transpose(1, 0, 2)
            v = qkv[:, (Hq + Hkv) * hd:].reshape(S, Hkv, hd).transpose(1, 0, 2)
            self.k[i, :, start:end] = self._rope(k, positions)
            self.v[i, :, start:end] = v
            q = self._rope(q, positions)
            keys = np.repeat(self.k[i, :, :end], Hq // Hkv, axis=0)       # [Hq, end, hd]
            values = np.repeat(self.v[i, :, :end], Hq // Hkv, axis=0)
            scores = q @ keys.transpose(0, 2, 1) / np.sqrt(hd)             # [Hq, S, end]
            scores = np.where(np.arange(end)[None, None, :] <= positions[None, :, None], scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            a = (p / p.sum(axis=-1, keepdims=True)) @ values               # [Hq, S, hd]
            x = x + a.transpose(1, 0, 2).reshape(S, Hq * hd) @ w[f"{i}.out"].T
            gate_up = self._rms_norm(x, w[f"{i}.ffn_norm"]) @ w[f"{i}.gate_up"].T
            gate, up = gate_up[:, :cfg.ffn], gate_up[:, cfg.ffn:]
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[f"{i}.down"].T
        self.position = end
        return self._rms_norm(x, w["out_norm"]) @ w["head"].T


def torch_llama(cfg: Config, dequantized: Dict[str, np.ndarray]):
    """The same model in PyTorch (F32, eager, a contiguous cache), or None without torch.  Returns
    an object with forward(tokens, position) -> logits [len(tokens), vocab] as a torch tensor."""
    try:
        import torch
    except Exception:           # torch is optional: the demo and the bench skip this peer
        return None
    F = torch.nn.functional

    class TorchLlama:
        def __init__(self):
            self.w = {name: torch.from_numpy(np.ascontiguousarray(a, np.float32)) for name, a in dequantized.items()}
            cos, sin = rope_tables(cfg)
            self.cos, self.sin = torch.from_numpy(cos), torch.from_numpy(sin)
            shape = (cfg.layers, 1, cfg.kv_heads, cfg.max_context, cfg.head_dim)
            self.k, self.v = torch.zeros(shape), torch.zeros(shape)

        def _rms_norm(self, x, weight):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.eps) * weight

        def _rope(self, x, c, s):            # x [1, H, S, hd]
            a, b = x.chunk(2, dim=-1)
            return torch.cat([a * c - b * s, a * s + b * c], dim=-1)

        @torch.inference_mode()
        def forward(self, tokens, position: int):
            w, hd, Hq, Hkv = self.w, cfg.head_dim, cfg.heads, cfg.kv_heads
            S = tokens.shape[0]
            end = position + S
            c, s = self.cos[position:end], self.sin[position:end]
            x = F.embedding(tokens, w["embedding"])
            for i in range(cfg.layers):
                qkv = F.linear(self._rms_norm(x, w[f"{i}.attn_norm"]), w[f"{i}.qkv"])
                q, k, v = qkv.view(1, S, Hq + 2 * Hkv, hd).transpose(1, 2).split([Hq, Hkv, Hkv], dim=1)
                self.k[i, :, :, position:end] = self._rope(k, c, s)
                self.v[i, :, :, position:end] = v
                keys = self.k[i, :, :, :end].repeat_interleave(Hq // Hkv, dim=1)
                values = self.v[i, :, :, :end].repeat_interleave(Hq // Hkv, dim=1)
                a = F.scaled_dot_product_attention(self._rope(q, c, s), keys, values, is_causal=S > 1)
                x = x + F.linear(a.transpose(1, 2).reshape(S, Hq * hd), w[f"{i}.out"])
                gate, up = F.linear(self._rms_norm(x, w[f"{i}.ffn_norm"]), w[f"{i}.gate_up"]).chunk(2, dim=-1)
                x = x + F.linear(F.silu(gate) * up, w[f"{i}.down"])
            return F.linear(self._rms_norm(x, w["out_norm"]), w["head"])

    return TorchLlama()


# ---- the demo -----------------------------------------------------------------------------------------
def _generate_fuel(model: FuelLlama, prompt, n_tokens):
    start = time.perf_counter()
    _, token = model.prefill(prompt)
    prefill_s = time.perf_counter() - start
    tokens = [token]
    start = time.perf_counter()
    for _ in range(n_tokens - 1):
        _, token = model.decode(token)
        tokens.append(token)
    return tokens, prefill_s, (n_tokens - 1) / (time.perf_counter() - start)


def _generate_chunked(model: FuelLlama, prompt, n_tokens, split):
    """Greedy tokens after prefilling the prompt as [0, split) then [split, len) onto the cache."""
    model.prefill(prompt[:split])
    _, token = model.prefill_chunk(prompt[split:])
    tokens = [token]
    for _ in range(n_tokens - 1):
        _, token = model.decode(token)
        tokens.append(token)
    return tokens


def _generate_torch(peer, prompt, n_tokens):
    import torch
    start = time.perf_counter()
    token = int(peer.forward(torch.as_tensor(prompt), 0)[-1].argmax())
    prefill_s = time.perf_counter() - start
    tokens, position = [token], len(prompt)
    start = time.perf_counter()
    for _ in range(n_tokens - 1):
        token = int(peer.forward(torch.tensor([token]), position)[-1].argmax())
        tokens.append(token)
        position += 1
    return tokens, prefill_s, (n_tokens - 1) / (time.perf_counter() - start)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="a TinyLlama-shaped model (d 2048, 4 layers)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate (default 32)")
    parser.add_argument("--threads", type=int, default=None, help="threads for fuel_kernel and torch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = LARGE if args.large else SMALL
    if not (0 < args.prompt and 0 < args.tokens and args.prompt + args.tokens <= cfg.max_context):
        parser.error(f"prompt + tokens must be at most {cfg.max_context}")

    import fuel_kernel as fk
    if args.threads:
        fk.set_num_threads(args.threads)
    print(f"model: vocab {cfg.vocab}, d {cfg.dim}, {cfg.layers} layers, {cfg.heads} query / {cfg.kv_heads} KV "
          f"heads of {cfg.head_dim}, SwiGLU {cfg.ffn}; {cfg.block_size}-token pages; "
          f"{fk.get_num_threads()} fuel_kernel threads")
    weights = random_weights(cfg, args.seed)
    prompt = np.random.default_rng(args.seed + 1).integers(0, cfg.vocab, args.prompt)
    print(f"{'':16} {'prefill':>10} {'decode':>14}  first tokens")
    for quant in QUANT_TYPES:
        blocks, dequantized = quantize(weights, quant)
        model = FuelLlama(cfg, blocks, quant, seed=args.seed)
        model.prefill_plan(len(prompt))          # compile before timing
        tokens, prefill_s, rate = _generate_fuel(model, prompt, args.tokens)
        weight_mb = sum(a.nbytes for name, a in blocks.items() if is_projection(name)) / 1e6
        print(f"fuel_kernel {quant} {prefill_s * 1e3:8.1f} ms {rate:9.1f} tok/s  {tokens[:8]}  "
              f"({weight_mb:.0f} MB of projection weights)")
        if len(prompt) > 1:
            split = len(prompt) // 2
            chunked = _generate_chunked(FuelLlama(cfg, blocks, quant, seed=args.seed), prompt, args.tokens, split)
            same = sum(a == b for a, b in zip(tokens, chunked))
            print(f"  prefilled in two chunks ({split} + {len(prompt) - split} tokens): {same}/{len(tokens)} "
                  f"tokens agree")
        peer = torch_llama(cfg, dequantized)
        if peer is None:
            print(f"torch F32 ({quant})  skipped: torch is not installed")
            continue
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
        peer_tokens, prefill_s, rate = _generate_torch(peer, prompt, args.tokens)
        same = sum(a == b for a, b in zip(tokens, peer_tokens))
        f32_mb = sum(a.nbytes for name, a in dequantized.items() if is_projection(name)) / 1e6
        print(f"torch F32 ({quant}) {prefill_s * 1e3:7.1f} ms {rate:9.1f} tok/s  {peer_tokens[:8]}  "
              f"(dequantized {quant} weights, {f32_mb:.0f} MB; {same}/{len(tokens)} tokens agree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
