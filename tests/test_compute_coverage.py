"""Every registered binding of the compute ops (issue 4) is exercised by a test.

Each family's test runs every alternative at its keys (all sources), parametrized over the key
lists imported below; a binding registered at a key none of them lists fails here."""
import fuel_kernel as fk

import test_conv
import test_matmul
import test_norm
import test_reduce

COMPUTE_OPS = set(test_reduce.OPS) | {fk.OpKind.MATMUL, fk.OpKind.CONV2D} | set(test_norm.OPS)


def keys_under_test():
    keys = set()
    for op, dt in test_reduce.CASES:
        keys.add((op, (dt, test_reduce.out_dtype(op, dt))))
    for dt, count_dt in test_matmul.CASES:
        keys.add((fk.OpKind.MATMUL, tuple(test_matmul.key(dt, count_dt))))
    for op, dt in test_norm.CASES:
        keys.add((op, (dt,) * (test_norm.N_INPUTS[op] + 1)))
    for dt, bias in test_conv.CASES:
        keys.add((fk.OpKind.CONV2D, (dt,) * (4 if bias else 3)))
    return keys


def test_every_compute_binding_is_tested():
    tested = keys_under_test()
    untested = []
    count = 0
    for kernel in fk.bindings():
        if kernel.op not in COMPUTE_OPS or kernel.backend != fk.Backend.CPU:
            continue
        count += 1
        if (kernel.op, tuple(kernel.dtypes)) not in tested:
            untested.append(repr(kernel))
    assert not untested, "untested bindings:\n" + "\n".join(untested)
    assert count >= len(tested)


def test_every_compute_binding_states_precision_and_cost():
    for kernel in fk.bindings():
        if kernel.op in COMPUTE_OPS and kernel.backend == fk.Backend.CPU:
            assert kernel.precision is not None and kernel.precision.notes, kernel
            assert kernel.has_cost, kernel
            assert kernel.source in ("native", "blas", "im2col", "direct"), kernel
