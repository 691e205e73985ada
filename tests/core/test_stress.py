"""Thread stress: dispatching threads against a writer that registers and drops runtime fused
kernels, and proof that large calls release the GIL.

Eight threads call fk.dispatch, pre-resolved Kernel handles (taken from a snapshot that goes stale
as the writer publishes) and the writer's newest fused kernels, checking every result, while one
writer publishes a transaction per iteration.  5 s by default, 30 s with FUEL_KERNEL_STRESS_LONG=1
(FUEL_KERNEL_STRESS_SECONDS overrides).  Afterwards every superseded snapshot must be reclaimed.
Scaling with two threads is measured in bench/bench_reliability.py, not asserted here.
"""
import gc
import os
import sys
import threading
import time

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch

CPU = fk.Backend.CPU
F32, F64, I32 = fk.DType.F32, fk.DType.F64, fk.DType.I32
LONG = os.environ.get("FUEL_KERNEL_STRESS_LONG", "") not in ("", "0")
SECONDS = float(os.environ.get("FUEL_KERNEL_STRESS_SECONDS", 30 if LONG else 5))
N_DISPATCHERS = 8


def _settle():
    gc.collect()
    fk.dispatch(fk.OpKind.CONTIGUIZE, [np.zeros(1, np.float32)], [np.zeros(1, np.float32)])
    _dispatch.reclaim()
    return _dispatch.live_snapshots(), _dispatch.allocated_bytes()


def _workloads(rng):
    """(callable, expected) pairs: small calls keep the GIL, large ones (>= 16384 elements) drop it."""
    small = rng.standard_normal(37).astype(np.float32)
    large = rng.standard_normal((130, 257)).astype(np.float32)
    ints = rng.integers(-1000, 1000, 5000).astype(np.int32)
    table = fk.bindings()                 # stale on purpose: the writer publishes over it
    cast = table.lookup(fk.OpKind.CAST, [F32, F64], CPU)
    cast_i = table.lookup(fk.OpKind.CAST, [I32, F32], CPU)
    contig = table.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU)
    work = [
        (lambda out: fk.dispatch(fk.OpKind.CAST, [small], [out]), np.empty(37), small.astype(np.float64)),
        (lambda out: fk.dispatch(fk.OpKind.CONTIGUIZE, [large.T], [out]), np.empty((257, 130), np.float32),
         np.ascontiguousarray(large.T)),
        (lambda out: cast(large[:, ::-1], out=out), np.empty((130, 257)), large[:, ::-1].astype(np.float64)),
        (lambda out: cast_i(ints[::-1], out=out), np.empty(5000, np.float32), ints[::-1].astype(np.float32)),
        (lambda out: contig(small[::2], out=out), np.empty(19, np.float32), small[::2].copy()),
    ]
    add = None
    if table.supports(fk.OpKind.ADD, [F32, F32, F32], CPU):
        add = table.lookup(fk.OpKind.ADD, [F32, F32, F32], CPU)
        work.append((lambda out: add(large, large[::-1], out=out), np.empty_like(large), large + large[::-1]))
        work.append((lambda out: fk.dispatch(fk.OpKind.ADD, [small, small], [out]), np.empty_like(small),
                     small + small))
    return work


def test_dispatch_while_a_writer_registers_and_drops_fused_kernels():
    backend = CPU
    capsules = [fk.bindings().lookup(fk.OpKind.CAST, [F32, F64], CPU).capsule(),
                fk.bindings().lookup(fk.OpKind.CAST, [F64, F64], CPU).capsule()]
    # a fresh snapshot first (an empty transaction publishes one): what else in this process holds
    # the current one (another test module's kernels, collected at import) is then counted below as
    # a retired snapshot it holds, instead of turning up as one more after the writer's transactions
    with fk.edit_bindings():
        pass
    live_before, bytes_before = _settle()
    stop = threading.Event()
    errors = []
    calls = [0] * N_DISPATCHERS
    published = [0]
    fused_ids = []

    def dispatcher(index):
        rng = np.random.default_rng(index)
        work = _workloads(rng)
        x = rng.standard_normal(64).astype(np.float32)
        try:
            while not stop.is_set():
                for fn, out, expected in work:
                    out[...] = -7
                    result = fn(out)
                    if result is not out or not np.array_equal(out, expected):
                        errors.append(f"thread {index}: wrong result")
                        return
                    calls[index] += 1
                recent = fused_ids[-2:]
                for fused in recent:
                    found = fk.bindings().unique_runtime_fused(fused, backend)
                    if isinstance(found, fk.Ambiguous):
                        errors.append(f"fused id {fused} is ambiguous: half a transaction visible")
                    if isinstance(found, fk.Unique):
                        out = np.empty(64)
                        found.kernel(x, out=out)           # the handle keeps its snapshot alive
                        if not np.array_equal(out, x.astype(np.float64)):
                            errors.append("fused kernel gave a wrong result")
                        calls[index] += 1
        except Exception as exc:                           # reported by the main thread
            errors.append(f"thread {index}: {exc!r}")

    def writer():
        try:
            while not stop.is_set():
                fused = fk.new_runtime_fused_id()
                with fk.edit_bindings() as tx:
                    tx.register(fk.BindingKey.runtime_fused(fused), [F32, F64], backend, capsules[0],
                                source="stress")
                    if len(fused_ids) >= 3:
                        tx.drop_runtime_fused(fused_ids[-3], backend)
                fused_ids.append(fused)
                published[0] += 1
                if published[0] % 7 == 0:                 # a transaction that fails publishes nothing
                    try:
                        with fk.edit_bindings() as tx:
                            tx.register(fk.BindingKey.runtime_fused(fused), [F64, F64], backend, capsules[1])
                            tx.register(fk.BindingKey.runtime_fused(fused), [F64, F64], backend, capsules[1])
                    except fk.RegistrationError:
                        pass
                    else:
                        errors.append("a duplicate registration was published")
        except Exception as exc:
            errors.append(f"writer: {exc!r}")

    threads = [threading.Thread(target=dispatcher, args=(i,)) for i in range(N_DISPATCHERS)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:5]
    assert all(c > 0 for c in calls), calls
    assert published[0] > 10, published
    with fk.edit_bindings() as tx:
        for fused in fused_ids[-3:]:
            tx.drop_runtime_fused(fused, backend)
    print(f"\nstress: {sum(calls)} checked calls on {N_DISPATCHERS} threads, "
          f"{published[0]} transactions published in {SECONDS:.0f} s")
    live_after, bytes_after = _settle()
    assert live_after == live_before
    assert bytes_after == bytes_before


def test_large_calls_release_the_gil():
    """While one thread is inside a large kernel call another Python thread runs.

    The switch interval is raised far above the call's duration, so the other thread can only run
    if the call releases the GIL (not by preemption); no timing threshold is involved."""
    x = np.random.default_rng(1).standard_normal(1 << 23).astype(np.float32)
    out = np.empty(x.shape)
    cast = fk.bindings().lookup(fk.OpKind.CAST, [F32, F64], CPU)
    cast(x, out=out)                                      # fault the pages in first
    samples = []
    stop = threading.Event()
    started = threading.Event()

    def spinner():
        started.set()
        while not stop.is_set():
            samples.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        thread = threading.Thread(target=spinner)
        thread.start()
        started.wait()
        released = False
        for _ in range(5):
            t0 = time.perf_counter()
            cast(x, out=out)
            t1 = time.perf_counter()
            if any(t0 < s < t1 for s in samples[-100000:]):
                released = True
                break
        stop.set()
        thread.join()
    finally:
        sys.setswitchinterval(old)
    assert released, "no other Python thread ran during a large kernel call: the GIL was held"
    np.testing.assert_array_equal(out, x.astype(np.float64))
