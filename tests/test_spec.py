"""The op table as a whole: every op has CPU kernels, a NumPy oracle and a test, and every CPU
binding the package ships is exercised by its family's tests.

The family test modules (tests/cpu/<family>/test_<family>.py) each state the (op, dtypes) keys
their tests run; a binding registered at a key none of them lists, or an op with no oracle in
oracles.py, fails here."""
import importlib
import sys
from pathlib import Path

import fuel_kernel as fk
import oracles

TESTS = Path(__file__).resolve().parent

OP = fk.OpKind
CPU = fk.Backend.CPU
SHIPPED_SOURCES = ("native", "native-f64", "blas", "im2col", "direct")   # what fuel_kernel.cpu registers
MOVEMENT_INDEX_ATTENTION_OPS = {
    OP.SLICE, OP.CONCAT, OP.INDEX_SELECT, OP.GATHER, OP.SCATTER_ADD, OP.INDEX_ADD, OP.FLIP, OP.ROLL,
    OP.CUMSUM, OP.TRIU, OP.TRIL, OP.PAD, OP.MASKED_FILL, OP.ROPE, OP.FLASH_ATTN, OP.PAGED_ATTN,
    OP.FLASH_ATTN_BACKWARD, OP.WRITE_SLICE, OP.WRITE_SLICE_ROTATING}
EXACT_OPS = {OP.SLICE, OP.CONCAT, OP.INDEX_SELECT, OP.GATHER, OP.FLIP, OP.ROLL, OP.TRIU, OP.TRIL,
             OP.PAD, OP.MASKED_FILL, OP.WRITE_SLICE, OP.WRITE_SLICE_ROTATING}


def family(name):
    """tests/cpu/<name>/test_<name>.py, imported as pytest imports it (its folder on sys.path, its
    basename as the module name), so this and the collected tests share one module."""
    folder = str(TESTS / "cpu" / name)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(f"test_{name}")


def keys_under_test():
    """Every (op, dtypes) key some family's tests run."""
    cast, elementwise = family("cast"), family("elementwise")
    reduce, matmul, norm, conv = family("reduce"), family("matmul"), family("norm"), family("conv")
    keys = {(OP.CAST, (s, d)) for s, d in cast.PAIRS}
    keys |= {(OP.CONTIGUIZE, (d, d)) for d in cast.ALL_DTYPES}
    keys |= {(k.op, tuple(k.dtypes)) for k in elementwise.elementwise_bindings()}   # each runs
    keys |= {(op, (dt, reduce.out_dtype(op, dt))) for op, dt in reduce.CASES}
    keys |= {(OP.MATMUL, tuple(matmul.key(dt, count_dt))) for dt, count_dt in matmul.CASES}
    keys |= {(op, (dt,) * (norm.N_INPUTS[op] + 1)) for op, dt in norm.CASES}
    keys |= {(OP.CONV2D, (dt,) * (4 if bias else 3)) for dt, bias in conv.CASES}
    keys |= {(op, (dt,) * 3) for op, dt in conv.BACKWARD_CASES} | conv.COVERED
    for name in ("movement", "index", "attention", "norm_backward", "loss", "reduce", "matmul", "quant", "ssm",
                 "pool", "topk"):
        keys |= family(name).COVERED
    float8_matmul = importlib.import_module("test_matmul_float8")     # its folder is on sys.path now
    keys |= {(OP.MATMUL, tuple(float8_matmul.key(*case))) for case in float8_matmul.CASES}
    keys |= importlib.import_module("test_matmul_prepacked").COVERED
    return keys


def shipped_cpu_bindings():
    return [k for k in fk.bindings() if k.backend == CPU and k.source in SHIPPED_SOURCES]


def test_every_op_has_kernels_an_oracle_and_a_test():
    ops = set(OP)
    with_kernels = {k.op for k in shipped_cpu_bindings()}
    tested = {op for op, _ in keys_under_test()}
    assert not ops - with_kernels, f"ops without a CPU kernel: {sorted(o.name for o in ops - with_kernels)}"
    assert not ops - set(oracles.ORACLES), \
        f"ops without an oracle: {sorted(o.name for o in ops - set(oracles.ORACLES))}"
    assert not ops - tested, f"ops without a test: {sorted(o.name for o in ops - tested)}"


def test_every_shipped_cpu_binding_is_tested():
    tested = keys_under_test()
    untested = [repr(k) for k in shipped_cpu_bindings() if (k.op, tuple(k.dtypes)) not in tested]
    assert not untested, "bindings without a test:\n" + "\n".join(untested)


def test_movement_index_and_attention_claims():
    """Each states a cost and a bit-stable precision and takes strided input; movement is exact."""
    for k in shipped_cpu_bindings():
        if k.op not in MOVEMENT_INDEX_ATTENTION_OPS:
            continue
        assert k.has_cost, k
        assert k.precision is not None and k.precision.bit_stable, k
        assert k.caps & fk.KernelCaps.STRIDED_INPUT, k
        if k.op in EXACT_OPS:
            assert k.precision.max_ulp == 0 and k.precision.max_rel == 0 and k.precision.max_abs == 0, k
        c = k.cost(*[(4,) * 4] * len(k.dtypes))
        assert c.bytes_moved >= 0 and c.flops >= 0


def test_every_compute_binding_states_precision_and_cost():
    reduce, norm = family("reduce"), family("norm")
    compute_ops = set(reduce.OPS) | {OP.MATMUL, OP.CONV2D, OP.CONV2D_BACKWARD_INPUT, OP.CONV2D_BACKWARD_WEIGHT,
                                     OP.QMATMUL, OP.CONV1D, OP.CONV_TRANSPOSE2D} | \
        set(norm.OPS)
    for kernel in fk.bindings():
        if kernel.op in compute_ops and kernel.backend == CPU:
            assert kernel.precision is not None and kernel.precision.notes, kernel
            assert kernel.has_cost, kernel
            assert kernel.source in SHIPPED_SOURCES, kernel
