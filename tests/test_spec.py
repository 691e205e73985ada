"""Every CPU binding of the movement, indexing and attention ops has a test, a cost claim and a
precision claim; movement ops claim exactness and every binding declares strided input."""
import fuel_kernel as fk
from tests import test_attention, test_index, test_movement

OP = fk.OpKind
ISSUE5_OPS = {OP.SLICE, OP.CONCAT, OP.INDEX_SELECT, OP.GATHER, OP.SCATTER_ADD, OP.INDEX_ADD, OP.FLIP,
              OP.ROLL, OP.CUMSUM, OP.TRIU, OP.TRIL, OP.PAD, OP.MASKED_FILL, OP.ROPE, OP.FLASH_ATTN,
              OP.PAGED_ATTN}
EXACT_OPS = {OP.SLICE, OP.CONCAT, OP.INDEX_SELECT, OP.GATHER, OP.FLIP, OP.ROLL, OP.TRIU, OP.TRIL,
             OP.PAD, OP.MASKED_FILL}
COVERED = test_movement.COVERED | test_index.COVERED | test_attention.COVERED


def issue5_kernels():
    return [k for k in fk.bindings() if k.op in ISSUE5_OPS and k.backend == fk.Backend.CPU]


def test_every_binding_has_a_test():
    untested = [(k.op.name, tuple(d.name for d in k.dtypes)) for k in issue5_kernels()
                if (k.op, tuple(k.dtypes)) not in COVERED]
    assert not untested, f"bindings without a test: {untested}"


def test_every_op_is_registered():
    assert {k.op for k in issue5_kernels()} == ISSUE5_OPS
    assert len(issue5_kernels()) == len(COVERED)


def test_claims():
    for k in issue5_kernels():
        assert k.has_cost, k
        assert k.precision is not None and k.precision.bit_stable, k
        assert k.caps & fk.KernelCaps.STRIDED_INPUT, k
        if k.op in EXACT_OPS:
            assert k.precision.max_ulp == 0 and k.precision.max_rel == 0 and k.precision.max_abs == 0, k
        c = k.cost(*[(4,) * 4] * len(k.dtypes))
        assert c.bytes_moved >= 0 and c.flops >= 0


def test_graph_builds_and_runs_issue5_ops(rng):
    """The schemas in fuel_kernel/ops.py give the graph builder shape/dtype inference for these ops."""
    import numpy as np
    import pytest
    from fuel_kernel import graph as fg
    from fuel_kernel import params as P

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
