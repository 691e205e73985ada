"""The graph builder infers shapes and dtypes of movement, indexing and attention ops from the
schemas in fuel_kernel/ops.py, and a compiled plan runs them."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg
from fuel_kernel import params as P


def test_graph_builds_and_runs_movement_index_and_attention_ops(rng):
    F32, I64 = fk.DType.F32, fk.DType.I64
    g = fg.Graph()
    x = g.input((6, 4), F32)
    idx = g.input((3,), I64)
    picked = g.index_select(x, idx, params=P.index_select(0))
    joined = g.concat(g.flip(picked, params=P.flip((1,))), picked, params=P.concat(0))
    padded = g.pad(g.cumsum(joined, params=P.cumsum(1)), params=P.pad((1,), (2,), mode="replicate"))
    q = g.input((1, 2, 5, 4), F32)
    attended = g.flash_attn(q, q, q, params=P.flash_attn(0.5, causal=True))
    plan = g.compile([padded, attended])
    xa = rng.standard_normal((6, 4)).astype(np.float32)
    qa = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    got, att = plan.run([xa, np.array([5, 0, 2]), qa])
    rows = xa[[5, 0, 2]]
    expected = np.pad(np.cumsum(np.concatenate([np.flip(rows, 1), rows]), 1), [(0, 0), (1, 2)], mode="edge")
    np.testing.assert_array_equal(got, expected)
    assert att.shape == (1, 2, 5, 4)
    with pytest.raises(IndexError, match="index 6 at position"):
        plan.run([xa, np.array([6, 0, 2]), qa])
