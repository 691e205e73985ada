"""examples/llama_decode.py's model: its prefill, chunk-prefill and decode plans (QMATMUL and
QEMBEDDING on gguf-quantized weights, FLASH_ATTN, a paged cache written by WRITE_SLICE, PAGED_ATTN)
agree with a float64 NumPy model on gguf's dequantized weights, logits and greedy tokens, and the
cache holds each token where the block table puts it; a prompt prefilled in two chunks gives what
one prefill gives."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import fuel_kernel as fk

pytest.importorskip("gguf")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_decode.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("llama_decode", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


llama = _load_example()

# 4 query heads over 2 KV heads of 32; a 21-token prompt fills one 16-token page and part of a
# second, and 14 decode steps cross into a third; 6 physical pages behind a 4-wide block table
CFG = llama.Config(vocab=384, dim=128, layers=2, heads=4, kv_heads=2, ffn=256, block_size=16, max_context=64)
PROMPT, STEPS, PAGES = 21, 14, 6
# Both sides use the same dequantized weights; the plan computes in F32 (QMATMUL's dot products,
# RMS_NORM, FLASH_ATTN / PAGED_ATTN with their fast exp) and the reference in F64, so the logits
# differ by F32 rounding carried through 2 layers: bounded here by 5e-6 of the largest logit
# (seen: under 5e-7), far below the gaps between the top two logits that decide the tokens.
LOGIT_TOLERANCE = 5e-6


@pytest.fixture(scope="module")
def weights():
    return llama.random_weights(CFG, seed=3)


@pytest.fixture(scope="module", params=llama.QUANT_TYPES)
def quantized(request, weights):
    blocks, dequantized = llama.quantize(weights, request.param)
    return request.param, blocks, dequantized


def _close(got, want):
    scale = float(np.max(np.abs(want)))
    worst = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    assert worst <= LOGIT_TOLERANCE * scale, f"max |diff| {worst:.3g} > {LOGIT_TOLERANCE} * {scale:.3g}"


def _top_two_gap(logits):
    top = np.sort(logits)[-2:]
    return top[1] - top[0]


def test_prefill_and_decode_match_the_float64_reference(quantized):
    quant, blocks, dequantized = quantized
    model = llama.FuelLlama(CFG, blocks, quant, pages=PAGES, seed=5, all_logits=True)
    reference = llama.NumpyLlama(CFG, dequantized, np.float64)
    prompt = np.random.default_rng(7).integers(0, CFG.vocab, PROMPT)

    logits, token = model.prefill(prompt)
    want = reference.forward(prompt)
    assert logits.shape == (PROMPT, CFG.vocab)
    _close(logits, want)
    assert token == int(np.argmax(want[-1]))
    decode_plan = model.decode_plan
    tokens = [token]
    for _ in range(STEPS):
        logits, token = model.decode(tokens[-1])
        want = reference.forward([tokens[-1]])[0]
        _close(logits[0], want)
        # the greedy token is the reference's (the seed keeps the top two logits apart)
        assert _top_two_gap(want) > 100 * LOGIT_TOLERANCE * np.max(np.abs(want))
        assert token == int(np.argmax(want))
        tokens.append(token)
    assert model.decode_plan is decode_plan and model.position == PROMPT + STEPS   # one plan, every step

    # every token's K and V sit in the page the block table names, at row position % block size
    for position in range(PROMPT + STEPS):
        page, row = model.block_table[0, position // CFG.block_size], position % CFG.block_size
        for kv, cache in ((0, reference.k), (1, reference.v)):
            np.testing.assert_allclose(model.cache[:, kv, page, row], cache[:, :, position], rtol=1e-4, atol=1e-5)


def test_prefill_of_the_last_position_only_gives_the_same_logits(quantized):
    quant, blocks, _ = quantized
    prompt = np.random.default_rng(8).integers(0, CFG.vocab, PROMPT)
    every = llama.FuelLlama(CFG, blocks, quant, pages=PAGES, all_logits=True)
    last = llama.FuelLlama(CFG, blocks, quant, pages=PAGES)
    all_logits, token = every.prefill(prompt)
    last_logits, last_token = last.prefill(prompt)
    assert last_logits.shape == (1, CFG.vocab) and token == last_token
    np.testing.assert_allclose(last_logits[0], all_logits[-1], rtol=1e-5, atol=1e-5 * np.max(np.abs(all_logits)))
    np.testing.assert_array_equal(every.cache, last.cache)


def test_a_position_past_the_context_is_refused_before_any_cache_write(quantized):
    quant, blocks, _ = quantized
    model = llama.FuelLlama(CFG, blocks, quant, pages=PAGES)
    model.prefill(np.arange(PROMPT) % CFG.vocab)
    before = model.cache.copy()
    run = model.decode_plan.run
    with pytest.raises(fk.KernelIndexError):       # RoPE's table and the block table end there
        run([np.array([1], np.int64), np.array([CFG.max_context], np.int64), model.block_table, model.cache])
    np.testing.assert_array_equal(model.cache, before)
    bad_table = model.block_table.copy()
    bad_table[0, PROMPT // CFG.block_size] = PAGES  # a page the cache does not have
    with pytest.raises(fk.KernelIndexError):
        run([np.array([1], np.int64), np.array([PROMPT], np.int64), bad_table, model.cache])
    np.testing.assert_array_equal(model.cache, before)


@pytest.mark.parametrize("split", [5, 16])
def test_prefill_in_two_chunks_matches_one_prefill(quantized, split):
    """The prompt prefilled as [0, split) then [split, PROMPT) onto the cache (PAGED_ATTN over the
    chunk's queries, the chunk's K and V written at run-time slots; split 5 puts the second chunk
    across a page boundary, 16 starts it on a page) gives one prefill's logits, to the tolerance
    both keep against the float64 reference, the same cache and the same greedy tokens after."""
    quant, blocks, dequantized = quantized
    prompt = np.random.default_rng(9).integers(0, CFG.vocab, PROMPT)
    one = llama.FuelLlama(CFG, blocks, quant, pages=PAGES, seed=5, all_logits=True)
    two = llama.FuelLlama(CFG, blocks, quant, pages=PAGES, seed=5, all_logits=True)
    want = llama.NumpyLlama(CFG, dequantized, np.float64).forward(prompt)
    logits, token = one.prefill(prompt)
    first, _ = two.prefill(prompt[:split])
    second, chunked_token = two.prefill_chunk(prompt[split:])
    chunked = np.concatenate([first, second])
    assert chunked.shape == (PROMPT, CFG.vocab) and two.position == PROMPT
    _close(chunked, want)
    _close(chunked, logits)
    assert chunked_token == token == int(np.argmax(want[-1]))
    np.testing.assert_allclose(two.cache, one.cache, rtol=1e-4, atol=1e-5)
    tokens, chunked_tokens = [token], [chunked_token]
    for _ in range(STEPS):
        one_logits, t = one.decode(tokens[-1])
        two_logits, u = two.decode(chunked_tokens[-1])
        _close(two_logits, one_logits)
        tokens.append(t)
        chunked_tokens.append(u)
    assert chunked_tokens == tokens


def test_a_chunk_from_position_zero_is_a_prefill(quantized):
    quant, blocks, _ = quantized
    prompt = np.random.default_rng(10).integers(0, CFG.vocab, PROMPT)
    whole = llama.FuelLlama(CFG, blocks, quant, pages=PAGES)
    chunk = llama.FuelLlama(CFG, blocks, quant, pages=PAGES)
    logits, token = whole.prefill(prompt)
    chunk_logits, chunk_token = chunk.prefill_chunk(prompt)
    assert chunk_token == token
    _close(chunk_logits, logits)
    np.testing.assert_allclose(chunk.cache, whole.cache, rtol=1e-4, atol=1e-5)


def test_a_chunk_past_the_context_is_refused_before_any_cache_write(quantized):
    quant, blocks, _ = quantized
    model = llama.FuelLlama(CFG, blocks, quant, pages=PAGES)
    model.prefill(np.arange(PROMPT) % CFG.vocab)
    model.prefill_chunk(np.arange(4))                # compiles the plan for chunks of 4
    before = model.cache.copy()
    with pytest.raises(fk.KernelIndexError):         # positions 62 .. 65: RoPE's table ends at 64
        model._chunk_plans[4].run([np.arange(4, dtype=np.int64), np.array([CFG.max_context - 2], np.int64),
                                   model.block_table, model.cache])
    np.testing.assert_array_equal(model.cache, before)
