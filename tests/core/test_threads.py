"""Intra-op threads: the thread-count controls, and every threaded binding giving the same bits
for 1, 2 and 3 threads (the first binding of each op also 7 and 16), right against its oracle,
with no write outside the output.

The threaded bindings are those whose op spec.SPLIT_RULES names (fuel_kernel/cpu/parallel.h cuts
a call into blocks only above a grain of work, so the cases here are just large enough to be cut
into several blocks).  Each binding runs one large case per layout in LAYOUTS (its layout chosen
round-robin over the bindings of an op), through the fuzz suite's checker (tests/fuzzing.py).
"""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch, spec

from fuzzing import Case, fill, guarded, random_values, run_case

D = fk.DType
P = fk.params
THREAD_COUNTS = (1, 2, 3, 7, 16)
QUICK_COUNTS = (1, 2, 3)              # every binding; the first binding of each op gets them all
# under ASan/UBSan (tools/sanitize.sh) every third binding of an op is enough to exercise its code
BINDING_STEP = 3 if os.environ.get("FUEL_KERNEL_SANITIZED") else 1
LAYOUTS = ("contiguous", "strided", "negative", "offset", "broadcast", "fortran")


# ---- the controls ------------------------------------------------------------------------------
def test_set_get_and_context_manager_restore():
    before = fk.get_num_threads()
    assert before >= 1
    with fk.threads(3) as n:
        assert n == 3 and fk.get_num_threads() == 3
        with fk.threads(1):
            assert fk.get_num_threads() == 1
        assert fk.get_num_threads() == 3
    assert fk.get_num_threads() == before
    fk.set_num_threads(2)
    try:
        assert fk.get_num_threads() == 2
    finally:
        fk.set_num_threads(before)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (10 ** 6, ValueError),
                                        (2.0, TypeError), ("2", TypeError), (True, TypeError)])
def test_bad_thread_counts_are_typed_errors(bad, error):
    before = fk.get_num_threads()
    with pytest.raises(error):
        fk.set_num_threads(bad)
    assert fk.get_num_threads() == before


def _python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                          cwd=os.getcwd(), check=True)


def test_environment_variable_sets_the_default():
    out = _python("import fuel_kernel as fk; print(fk.get_num_threads())", FUEL_KERNEL_NUM_THREADS="3")
    assert out.stdout.strip() == "3"
    default = _python("import os, fuel_kernel as fk; print(fk.get_num_threads(), len(os.sched_getaffinity(0)))",
                      FUEL_KERNEL_NUM_THREADS="")
    got, cpus = default.stdout.split()
    assert got == cpus
    bad = _python("import fuel_kernel as fk; print(fk.get_num_threads())", FUEL_KERNEL_NUM_THREADS="many")
    assert "FUEL_KERNEL_NUM_THREADS='many'" in bad.stderr and bad.stdout.strip() == cpus


def test_child_process_after_fork_runs_threaded_kernels():
    x = np.arange(1 << 18, dtype=np.float32)
    with fk.threads(2):
        expected = fk.dispatch("EXP", [x])          # the parent has started its workers
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                 # child: its own pool, same bits
            try:
                ok = np.array_equal(fk.dispatch("EXP", [x]), expected)
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"1"


POOL_JOBS = """
import fuel_kernel as fk
from fuel_kernel import _dispatch
import numpy as np
rng = np.random.default_rng(5)
wrong = 0
with fk.threads(16):                  # more threads than cores: workers wake late, mid-publication
    for _ in range(1500):
        sizes = np.stack([rng.integers(2, 8, 100), rng.integers(16, 200, 100)], 1).ravel()
        wrong += _dispatch._pool_task_runs(sizes.tolist())
print(wrong)
"""


def test_every_pool_task_runs_exactly_once_and_the_caller_returns():
    """300,000 jobs on 16 threads, a few tasks then many: each task runs once and every job ends.
    A worker that woke late for a finished job once read the next job's task count before
    claiming, ran one of its tasks under the old job's number (twice in all), and left the
    caller waiting for ever on a count below zero: the run here hung within a few seconds."""
    try:
        result = subprocess.run([sys.executable, "-c", POOL_JOBS], capture_output=True, text=True,
                                cwd=os.getcwd(), timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("a pool job never finished")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "0", "tasks ran other than once"
    with pytest.raises(ValueError):
        _dispatch._pool_task_runs([0])


def test_a_child_forked_during_a_pool_job_runs_its_own_jobs():
    """fork() while another thread runs pool jobs: the child starts with none of the parent's
    workers, and its own jobs run each task once and return (the parent's job in flight is closed
    in the child, so the child's new workers cannot claim one of its tasks)."""
    stop = threading.Event()

    def busy():
        with fk.threads(4):
            while not stop.is_set():
                _dispatch._pool_task_runs([200] * 20)

    worker = threading.Thread(target=busy)
    worker.start()
    failures = []
    try:
        for _ in range(20):
            time.sleep(0.01)
            pid = os.fork()
            if pid == 0:
                try:
                    if _dispatch._workers_started() != 0:     # the parent's workers are not here
                        os._exit(3)
                    with fk.threads(4):
                        os._exit(0 if _dispatch._pool_task_runs([64] * 200) == 0 else 1)
                finally:
                    os._exit(2)
            deadline = time.monotonic() + 60
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            if done[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                failures.append("hung")
            elif os.waitstatus_to_exitcode(done[1]) != 0:
                failures.append(os.waitstatus_to_exitcode(done[1]))
    finally:
        stop.set()
        worker.join(timeout=120)
    assert not failures, ("children that failed (1: a task ran other than once, 3: it counted "
                          f"the parent's workers): {failures}")


def test_python_threads_share_the_pool():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((384, 256)).astype(np.float32)
    b = rng.standard_normal((256, 384)).astype(np.float32)
    x = rng.standard_normal(1 << 18).astype(np.float32)
    with fk.threads(1):
        want_mm, want_exp = fk.dispatch("MATMUL", [a, b]), fk.dispatch("EXP", [x])
    failures = []

    def work():
        for _ in range(20):
            if not (np.array_equal(fk.dispatch("MATMUL", [a, b]), want_mm)
                    and np.array_equal(fk.dispatch("EXP", [x]), want_exp)):
                failures.append(1)

    with fk.threads(4):
        workers = [threading.Thread(target=work) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
        assert not any(w.is_alive() for w in workers), "a kernel call deadlocked"
    assert not failures


def test_visible_to_threadpoolctl():
    import threadpoolctl                  # >= 3.2, from the test extras: it lists custom libraries
    before = fk.get_num_threads()
    infos = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "fuel_kernel"]
    assert len(infos) == 1 and infos[0]["num_threads"] == before
    with threadpoolctl.threadpool_limits(1, user_api="fuel_kernel"):
        assert fk.get_num_threads() == 1
    assert fk.get_num_threads() == before


def test_blas_sibling_follows_the_setting():
    from fuel_kernel.cpu import blas_sibling_loaded
    from fuel_kernel.threads import _scipy_blas_controllers
    assert blas_sibling_loaded() and _scipy_blas_controllers(), "SciPy (test extras) must load its BLAS"
    with fk.threads(1):
        assert all(lib.num_threads == 1 for lib in _scipy_blas_controllers())
    assert all(lib.num_threads == fk.get_num_threads() for lib in _scipy_blas_controllers())


# ---- every threaded binding: same bits for every thread count, right against the oracle --------
def threaded_bindings():
    """(op, dtypes, Kernel, rule) of every CPU kernel that runs threaded, siblings included."""
    rows = []
    table = fk.bindings()
    for b in table.coverage():
        if b.backend != fk.Backend.CPU or not isinstance(b.op, fk.OpKind):
            continue
        names = tuple(D(d).name for d in b.dtypes)
        for kernel in table.alternatives(b.op, b.dtypes, fk.Backend.CPU):
            rule = spec.split_rule(b.op.name, names, kernel.source)
            if rule is not None:
                rows.append((b.op, tuple(b.dtypes), kernel, rule))
    return rows


BINDINGS = threaded_bindings()


def large_shapes(op, rule, n_in):
    """Input shapes, output shape and params of a call big enough to be cut into blocks."""
    name = op.name
    if rule == "ROWS_0":
        return [(260, 300)] * n_in, (260, 300), {"AFFINE": P.affine(0.5, -1.0), "CLAMP": P.clamp(-2, 3),
                                                 "POWI": P.powi(3), "POWI_BACKWARD": P.powi(3),
                                                 "MASKED_FILL": P.masked_fill(2.5)}.get(name)
    if rule == "ROWS_1":
        if name == "ROPE":
            return [(3, 4, 64, 128), (64, 64), (64, 64)], (3, 4, 64, 128), P.rope(False)
        if name.endswith("SOFTMAX_LAST_DIM_BACKWARD"):               # y and dy of one shape
            return [(300, 256)] * 2, (300, 256), None
        shapes = [(300, 256), (256,), (256,)][:n_in]
        return shapes, (300, 256), P.norm_last_dim(1e-5) if "NORM" in name else None
    if rule == "ROWS_2":
        if name.endswith("POOL2D"):                  # 2 images x 64 channels, each plane whole
            return [(2, 64, 40, 40)], (2, 64, 40, 40), P.pool2d(3, pads_begin=1, pads_end=1, count_include_pad=True)
        return [(4, 130, 130)], (4, 130, 130), P.triangular(1)
    if rule == "REDUCE":
        return [(300, 256)], (300,), P.reduce((1,))
    if rule == "MOVEMENT":
        return {"CUMSUM": ([(260, 300)], (260, 300), P.cumsum(1, False, True)),
                "FLIP": ([(260, 300)], (260, 300), P.flip([0])),
                "ROLL": ([(260, 300)], (260, 300), P.roll([7], [-1])),
                "PAD": ([(260, 300)], (260, 305), P.pad([2], [3], "reflect", 0.0)),
                "PAD_BACKWARD": ([(260, 305)], (260, 300), P.pad([2], [3], "reflect", 0.0))}[name]
    if rule == "MATMUL":
        return [(3, 96, 128), (128, 200)], (3, 96, 200), None
    if rule in ("CONV2D", "CONV2D_IM2COL"):          # im2col: 2 images x 3 chunks (192, 192, 100 pixels)
        return [(2, 16, 24, 24), (64, 16, 3, 3), (64,)][:n_in], (2, 64, 22, 22), P.conv2d(1, 0, 1, 1)
    if rule == "CONV2D_BACKWARD_INPUT":              # its own tasks: 2 images x 4 blocks of 16 input channels
        return [(2, 32, 22, 22), (32, 64, 3, 3)], (2, 64, 24, 24), P.conv2d_backward((24, 24), 3)
    if rule == "CONV_TRANSPOSE2D":                   # the same tasks: 2 images x 4 blocks of 16 output channels
        return [(2, 32, 22, 22), (32, 64, 3, 3), (64,)][:n_in], (2, 64, 24, 24), P.conv_transpose2d()
    if rule == "CONV2D_BACKWARD_WEIGHT":             # its own tasks: 8 blocks of dw^T's 288 rows
        return [(2, 32, 24, 24), (2, 64, 22, 22)], (64, 32, 3, 3), P.conv2d_backward((24, 24), 3)
    if rule == "ATTN":
        return [(1, 4, 256, 32), (1, 2, 256, 32), (1, 2, 256, 32)], (1, 4, 256, 32), \
            P.flash_attn(0.2, causal=True, window_left=100)
    raise AssertionError(rule)


def make_case(op, dtypes, rule, layout, seed):
    rng = np.random.default_rng(seed)
    n_in = len(dtypes) - 1
    in_shapes, out_shape, params = large_shapes(op, rule, n_in)
    inputs = []
    for k, (shape, dtype) in enumerate(zip(in_shapes, dtypes[:n_in])):
        # broadcast inputs of a 2-d elementwise call come in as rows or columns of stride 0
        operand = guarded(shape, D(dtype).numpy, layout if rule != "ATTN" or layout != "broadcast"
                          else "contiguous", rng)
        mode = "special" if D(dtype).is_float and rule in ("ROWS_0", "REDUCE") else "plain"
        fill(operand, random_values(shape, dtype, rng, mode))
        inputs.append(operand)
    output = guarded(out_shape, D(dtypes[-1]).numpy, "negative" if layout == "negative" else "contiguous", rng)
    return Case(op, dtypes, "valid", "call", inputs, output, params, out_shape=out_shape)


# keys with several outputs (FLASH_ATTN with its lse, FLASH_ATTN_BACKWARD) are run on every thread
# count by their family's tests (tests/cpu/attention/test_attention_backward.py); MATMUL_PREPACKED's
# packed operand is a whole packed buffer, which no Python call passes: tests/cpu/matmul/
# test_matmul_prepacked.py runs it on every thread count as a C caller
ONE_OUTPUT = [b for b in BINDINGS if b[2].n_outputs == 1 and b[0] != fk.OpKind.MATMUL_PREPACKED]


@pytest.mark.parametrize("op", sorted({b[0] for b in ONE_OUTPUT}, key=int), ids=lambda op: op.name)
def test_threaded_bindings_same_bits_for_every_thread_count(op):
    rows = [b for b in ONE_OUTPUT if b[0] == op]
    assert rows
    for index, (_, dtypes, kernel, rule) in enumerate(rows):
        if index % BINDING_STEP:
            continue
        counts = THREAD_COUNTS if index == 0 else QUICK_COUNTS
        layout = LAYOUTS[index % len(LAYOUTS)]
        case = make_case(op, dtypes, rule, layout, seed=index)
        fresh = case.output.root.copy()
        with fk.threads(1):
            run_case(case, call=lambda views, out, params: kernel(*views, out=out, params=params))
        want = case.output.root.copy()
        for threads in counts[1:]:
            case.output.root[...] = fresh
            calls = _dispatch._parallel_calls()
            with fk.threads(threads):
                kernel(*[o.view for o in case.inputs], out=case.output.view, params=case.params)
            assert _dispatch._parallel_calls() > calls, \
                f"{op.name}{[D(d).name for d in dtypes]} ({kernel.source}) ran whole: the case is too small to cut"
            assert np.array_equal(case.output.root, want), \
                f"{op.name}{[D(d).name for d in dtypes]} ({kernel.source}, {layout}): {threads} threads differ from 1"


@pytest.mark.parametrize("rows", [260, (384, 130)])
@pytest.mark.parametrize("dtype", [D.F32, D.F64])
def test_matmul_blocks_of_few_rows_give_the_whole_products_bits(rows, dtype):
    """One thread runs MATMUL whole; more cut C into row blocks, and a last block of at most 4 rows
    (260 = 128 + 128 + 4; or 130 rows computed of 384 in blocks of 128) takes the few-rows path.  With K = 1000 (two
    K blocks in F32, four in F64) that path must still add the blocks as the GEMM engine does: the same bits."""
    m, count = (rows, rows) if isinstance(rows, int) else rows
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, 1000)).astype(dtype.numpy)
    b = rng.standard_normal((1000, 64)).astype(dtype.numpy)
    kernel, = [k for k in fk.bindings().alternatives("MATMUL", [dtype] * 3) if k.source == "native"]
    params = P.matmul(m, 64, 1000, m_compute=fk.MatmulM.rows(count))
    results = []
    for threads in (1, 2, 3):
        out = np.full((m, 64), np.nan, dtype.numpy)
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            kernel(a, b, out=out, params=params)
        assert (_dispatch._parallel_calls() > calls) == (threads > 1)
        results.append(out)
    assert all(r.tobytes() == results[0].tobytes() for r in results[1:])
    want = a[:count].astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(results[0][:count], want, rtol=1e-4 if dtype == D.F32 else 1e-12, atol=1e-4)
    assert not results[0][count:].any()


def test_every_rule_is_exercised():
    assert {b[3] for b in BINDINGS} == set(spec.SPLIT_RULES.values()) | set(spec.SIBLING_SPLIT_RULES.values())


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("dtype", [D.F16, D.BF16, D.F32, D.F64, D.I32, D.U8])
def test_long_row_sums_same_bits_for_every_thread_count(op, dtype):
    """A whole-array SUM or MEAN of a long row adds fixed 65536-element blocks on the pool."""
    rng = np.random.default_rng(7)
    x = random_values((5 * 65536 + 4099,), dtype, rng, "plain")
    kernel = fk.bindings().lookup(op, [dtype, D.parse(spec.reduce_output(op, dtype.name))])
    results = []
    for threads in THREAD_COUNTS:
        with fk.threads(threads):
            results.append(np.asarray(kernel(x)))
    assert all(r.tobytes() == results[0].tobytes() for r in results[1:])
    wide = x.astype(np.float64)
    if dtype.is_float or op == "MEAN":               # the table's claim: max_rel*sum|x| + max_abs
        expected = wide.sum() if op == "SUM" else wide.mean()
        claim = spec.CLAIMS[spec.reduce_claim(op, dtype.name)]
        scale = np.abs(wide).sum() / (1 if op == "SUM" else x.size)
        assert abs(float(results[0]) - expected) <= claim.max_rel * scale + claim.max_abs
    else:                                             # integers accumulate exactly in I64
        assert int(results[0]) == int(x.astype(np.int64).sum())


def test_large_self_overlapping_output_is_refused_whole():
    """A block cannot see that the whole output overlaps itself (stride 0 on an axis the grid cuts
    into blocks of one): such calls run whole, so the kernel's AliasError comes before any write."""
    x = np.arange(3 * 100_000, dtype=np.float32).reshape(3, 100_000)
    root = np.zeros(100_000 + 16, np.float32)
    out = np.lib.stride_tricks.as_strided(root[8:], (3, 100_000), (0, 4))
    kernel = fk.bindings().lookup("EXP", [D.F32, D.F32])
    with fk.threads(2):
        with pytest.raises(fk.AliasError):
            kernel(x, out=out)
    assert not root.any()

