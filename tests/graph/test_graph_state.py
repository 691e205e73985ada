"""Graph.state and the in-place writes into it (write_slice, write_slice_rotating): a decode loop
appends to a KV cache the caller owns, across plan.run calls, without copies."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel.graph import Graph

D = fk.DType


def decode_graph(capacity, dim, rotating=False, fuse=True):
    """One decode step of single-head attention scores: the new token's key is written into the key
    cache at the run-time position (or ring slot), then q scores against the whole cache."""
    g = Graph()
    q = g.input((1, dim), D.F32, "q")
    k_new = g.input((1, dim), D.F32, "k_new")
    position = g.input((), D.I64, "position")
    cache = g.state((capacity, dim), D.F32, "k_cache")
    write = g.write_slice_rotating if rotating else g.write_slice
    keys = write(k_new, cache, position, start=(0, 0), axis=0)
    scores = g.matmul(q, keys.T)
    return g.compile(scores, fuse=fuse)


@pytest.mark.parametrize("fuse", [True, False])
def test_decode_loop_appends_to_the_cache_in_place(fuse, rng):
    capacity, dim = 6, 4
    plan = decode_graph(capacity, dim, fuse=fuse)
    cache = np.zeros((capacity, dim), np.float32)
    address = cache.ctypes.data
    keys = []
    for t in range(capacity):
        q = rng.standard_normal((1, dim)).astype(np.float32)
        k = rng.standard_normal((1, dim)).astype(np.float32)
        keys.append(k)
        scores = plan.run([q, k, np.array(t, np.int64), cache])
        expected_cache = np.concatenate(keys + [np.zeros((capacity - t - 1, dim), np.float32)])
        np.testing.assert_array_equal(cache, expected_cache)
        np.testing.assert_allclose(scores, q @ expected_cache.T, rtol=1e-5, atol=1e-6)
    assert cache.ctypes.data == address                 # the caller's own array, written in place
    assert plan.peak_bytes < cache.nbytes                 # never in the arena


def test_decode_ring_keeps_the_last_tokens(rng):
    capacity, dim = 4, 3
    plan = decode_graph(capacity, dim, rotating=True)
    cache = np.zeros((capacity, dim), np.float32)
    keys = [rng.standard_normal((1, dim)).astype(np.float32) for _ in range(9)]
    for t, k in enumerate(keys):
        plan.run([np.ones((1, dim), np.float32), k, np.array(t, np.int64), cache])
    np.testing.assert_array_equal(cache, np.concatenate([keys[8], keys[5], keys[6], keys[7]]))


def test_position_past_the_cache_is_an_index_error_and_writes_nothing(rng):
    plan = decode_graph(3, 2)
    cache = rng.standard_normal((3, 2)).astype(np.float32)
    before = cache.copy()
    with pytest.raises(fk.KernelIndexError):
        plan.run([np.ones((1, 2), np.float32), np.ones((1, 2), np.float32), np.array(3, np.int64), cache])
    np.testing.assert_array_equal(cache, before)


@pytest.mark.parametrize("fuse", [True, False])
def test_reads_see_the_writes_built_before_them(fuse, rng):
    """A node built before the write reads the old state, one built after reads the new one, with
    or without elementwise groups; two writes into one state run in the order they were built."""
    g = Graph()
    x = g.input((2, 3), D.F32)
    cache = g.state((4, 3), D.F32)
    old = g.neg(cache)
    g.write_slice(x, cache, start=(1, 0))
    written = g.write_slice(g.mul(x, x), cache, start=(2, 0))
    new = g.neg(written)
    plan = g.compile([old, new], fuse=fuse)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    state = rng.standard_normal((4, 3)).astype(np.float32)
    original = state.copy()
    expected = state.copy()
    expected[1:3] = a
    expected[2:4] = a * a
    got_old, got_new = plan.run([a, state])
    np.testing.assert_array_equal(got_old, -original)
    np.testing.assert_array_equal(state, expected)
    np.testing.assert_array_equal(got_new, -expected)


def test_old_reads_keep_the_old_values(rng):
    g = Graph()
    x = g.input((1, 3), D.F32)
    cache = g.state((2, 3), D.F32)
    old = g.neg(cache)
    g.write_slice(x, cache, start=(0, 0))
    plan = g.compile(old)
    state = rng.standard_normal((2, 3)).astype(np.float32)
    before = state.copy()
    got = plan.run([np.ones((1, 3), np.float32), state])
    np.testing.assert_array_equal(got, -before)
    assert (state[0] == 1).all() and (state[1] == before[1]).all()


def test_a_write_is_kept_without_being_an_output(rng):
    g = Graph()
    x = g.input((2,), D.I32)
    cache = g.state((5,), D.I32)
    g.write_slice(x, cache, start=(3,))
    plan = g.compile([])
    state = np.zeros(5, np.int32)
    plan.run([np.array([7, 8], np.int32), state])
    assert state.tolist() == [0, 0, 0, 7, 8]


def test_a_state_view_is_written_through(rng):
    g = Graph()
    x = g.input((2, 2), D.F64)
    cache = g.state((2, 4, 2), D.F64)           # [layer, token, dim]
    g.write_slice(x, cache[1], start=(2, 0))
    state = np.zeros((2, 4, 2))
    a = rng.standard_normal((2, 2))
    g.compile([]).run([a, state])
    expected = np.zeros((2, 4, 2))
    expected[1, 2:4] = a
    np.testing.assert_array_equal(state, expected)


def test_state_binding_refusals(rng):
    g = Graph()
    x = g.input((1, 2), D.F32)
    cache = g.state((3, 2), D.F32)
    g.write_slice(x, cache, start=(0, 0))
    plan = g.compile([])
    a = np.ones((1, 2), np.float32)
    with pytest.raises(fk.ShapeError):                       # a copy would lose the write
        plan.run([a, np.zeros((3, 4), np.float32)[:, ::2]])
    with pytest.raises(fk.DTypeError):
        plan.run([a, np.zeros((3, 2), np.float64)])
    with pytest.raises(fk.ShapeError):
        plan.run([a, np.zeros((2, 2), np.float32)])
    read_only = np.zeros((3, 2), np.float32)
    read_only.setflags(write=False)
    with pytest.raises(fk.ReadOnlyError):
        plan.run([a, read_only])
    with pytest.raises(fk.OperandTypeError):
        plan.run([a, [[0.0, 0.0]] * 3])
    shared = np.zeros((3, 2), np.float32)
    with pytest.raises(fk.AliasError):
        plan.run([shared[:1], shared])


def test_builder_refusals():
    g = Graph()
    x = g.input((1, 2), D.F32)
    not_a_state = g.input((3, 2), D.F32)
    cache = g.state((3, 2), D.F32)
    with pytest.raises(fk.OperandTypeError):
        g.write_slice(x, not_a_state, start=(0, 0))
    with pytest.raises(fk.ParamsError):
        g.write_slice(x, cache)
    with pytest.raises(fk.ShapeError):
        g.write_slice(g.input((2,), D.F32), cache, start=(0, 0))
    with pytest.raises(fk.DTypeError):
        g.write_slice(g.input((1, 2), D.F64), cache, start=(0, 0))
    with pytest.raises(fk.ParamsError):
        g.write_slice(x, cache, start=(0, 0), params=fk.params.write_slice((0, 0)))
    with pytest.raises(fk.NoKernelError):                    # the position operand is I64
        g.write_slice(x, cache, g.input((), D.I32), start=(0, 0))
