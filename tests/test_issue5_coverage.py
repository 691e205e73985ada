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
