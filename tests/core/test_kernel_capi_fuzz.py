"""Every registered kernel, called through its capsule as a C caller would (ctypes mirrors of the
abi.h structs, as in test_kernel_layouts.py), with params = NULL and with garbage params bytes of
every params kind (and of kinds that do not exist).

The verdict of each call is a typed status (an fk_status code) or success, never a crash, and a
failed call leaves its output untouched; no call writes outside its operands' buffers.  The calls
run in child processes, a batch of keys each, so a crash is reported as a failure naming the call
that crashed instead of killing pytest.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import fuel_kernel as fk

N_BATCHES = 6
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/: the helper modules

# The child: calls every kernel of its batch of keys and prints one JSON line per problem, plus a
# "start" line before every kernel and shape so a crash can be located from the last one printed.
CHILD = textwrap.dedent(r'''
    import ctypes, json, os, sys
    import numpy as np
    import fuel_kernel as fk
    from capi import Storage, Layout, KERNEL_FN, MAX_DIMS

    batch, n_batches = int(sys.argv[1]), int(sys.argv[2])
    PARAMS_BYTES = 1024                  # more than sizeof(fk_params)
    GUARD = 64                           # bytes after each operand that no call may touch
    SHAPES = [(4,), (3, 4), (2, 3, 4, 4)]
    KIND_COUNT = 23                      # FK_PARAMS_KIND_COUNT in abi.h
    KINDS = list(range(KIND_COUNT)) + [KIND_COUNT, 1000, -1]     # the last three do not exist

    def say(**record):
        print(json.dumps(record), flush=True)

    def params_variants():
        """(name, ctypes buffer or None): NULL, kind NONE, then 0xFF and random bytes under each kind."""
        yield "NULL", None
        yield "none", ctypes.create_string_buffer(PARAMS_BYTES)
        rng = np.random.default_rng(5)
        for kind in KINDS:
            for fill in ("ones", "random"):
                raw = (np.full(PARAMS_BYTES, 0xFF, np.uint8) if fill == "ones" else
                       rng.integers(0, 256, PARAMS_BYTES, dtype=np.uint8))
                raw[:4] = np.frombuffer(np.int32(kind).tobytes(), np.uint8)
                yield f"kind {kind} {fill}", ctypes.create_string_buffer(raw.tobytes(), PARAMS_BYTES)

    VARIANTS = list(params_variants())

    def operand(dtype, shape, rng):
        n = int(np.prod(shape))
        itemsize = np.dtype(dtype.numpy).itemsize
        buf = np.zeros(n * itemsize + GUARD, np.uint8)
        if dtype.is_float:
            buf[: n * itemsize] = rng.standard_normal(n).astype(dtype.numpy).view(np.uint8)
        elif dtype != fk.DType.I32 and dtype != fk.DType.I64:     # indices stay 0: always in range
            buf[: n * itemsize] = rng.integers(0, 2, n * itemsize, dtype=np.uint8)
        storage = Storage(buf.ctypes.data, n * itemsize, 0, int(dtype), 0, 0)
        lay = Layout(len(shape), 0, 0)
        stride = 1
        for d in reversed(range(len(shape))):
            lay.shape[d], lay.strides[d] = shape[d], stride
            stride *= shape[d]
        return buf, storage, lay

    table = fk.bindings()
    keys = sorted({(int(r.op), tuple(int(d) for d in r.dtypes)) for r in table.coverage()
                   if r.backend == fk.Backend.CPU and isinstance(r.op, fk.OpKind)})
    rng = np.random.default_rng(11)
    kernels = [(op, dtypes, kernel) for op, dtypes in keys[batch::n_batches]
               for kernel in table.alternatives(fk.OpKind(op), [fk.DType(d) for d in dtypes], fk.Backend.CPU)]
    def fuzz(op, dtypes, kernel):
        calls = 0
        fn = KERNEL_FN(ctypes.pythonapi.PyCapsule_GetPointer(kernel.capsule(), b"fuel_kernel.kernel"))
        n_in = kernel.n_inputs
        name = f"{fk.OpKind(op).name} {[fk.DType(d).short_name for d in dtypes]} {kernel.source}"
        for shape in SHAPES:
            ops = [operand(fk.DType(d), shape, rng) for d in dtypes]
            storages = (Storage * len(ops))(*[o[1] for o in ops])
            layouts = (Layout * len(ops))(*[o[2] for o in ops])
            inputs = ctypes.cast(storages, ctypes.POINTER(Storage))
            outputs = ctypes.cast(ctypes.byref(storages, n_in * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
            for pname, pbuf in VARIANTS:
                before = [o[0].copy() for o in ops]
                status = fn(inputs, n_in, outputs, len(ops) - n_in, layouts, pbuf)
                calls += 1
                where = f"{name} shape {shape} params {pname}"
                if not 0 <= status <= 13:
                    say(problem=f"{where}: status {status} is not an fk_status")
                for k, (o, b) in enumerate(zip(ops, before)):
                    if (o[0][-GUARD:] != b[-GUARD:]).any():
                        say(problem=f"{where}: wrote past operand {k}")
                    if k >= n_in and status != 0 and (o[0] != b).any():
                        say(problem=f"{where}: status {status} but output {k - n_in} was written")
        return calls

    for op, dtypes, kernel in kernels:
        # each kernel in a forked process: a crash ends only that one, and is reported
        where = f"{fk.OpKind(op).name} {[fk.DType(d).short_name for d in dtypes]} {kernel.source}"
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                say(calls=fuzz(op, dtypes, kernel))
            except BaseException as exc:
                say(problem=f"{where}: {exc!r}")
                code = 1
            sys.stdout.flush()
            os._exit(code)
        _, wait_status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(wait_status):
            say(crash=f"{where}: signal {os.WTERMSIG(wait_status)}", op=fk.OpKind(op).name)
    say(done=True)
''')


def run_batch(batch):
    """Returns (crashes as (op name, description), problem lines, calls made)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(batch), str(N_BATCHES)], capture_output=True,
                          text=True, env=env, timeout=300)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and records and "done" in records[-1], proc.stderr[-2000:]
    crashes = [(r["op"], r["crash"]) for r in records if "crash" in r]
    problems = [r["problem"] for r in records if "problem" in r]
    return crashes, problems, sum(r.get("calls", 0) for r in records)


# Ops whose NULL-params handling is fixed with the attention / matmul / norm kernels, which are
# hardened separately: their crashes are expected until that work lands, and nothing else may
# crash.  Delete entries as they stop crashing (the test says when one does).
@pytest.mark.parametrize("batch", range(N_BATCHES))
def test_null_and_garbage_params_give_a_typed_status_never_a_crash(batch):
    crashes, problems, calls = run_batch(batch)
    assert not crashes, "crashed:\n" + "\n".join(where for _, where in crashes)
    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:20])
    assert calls > 0
