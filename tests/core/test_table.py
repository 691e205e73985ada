"""The binding table: registration, transactions, lookups, runtime fused keys, copy-on-write snapshots."""
import gc
import re
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch

CPU = fk.Backend.CPU
F32, F64, F16 = fk.DType.F32, fk.DType.F64, fk.DType.F16


def capsule(src=F32, dst=F64):
    return fk.bindings().lookup(fk.OpKind.CAST, [src, dst], CPU).capsule()


def test_enums_match_the_c_header():
    include = Path(fk.get_include()) / "fuel_kernel"
    header = (include / "abi.h").read_text() + (include / "abi_enums.h").read_text()
    for enum_cls, prefix in ((fk.DType, "FK_"), (fk.OpKind, "FK_OP_")):
        for member in enum_cls:
            match = re.search(rf"\b{prefix}{member.name} = (\d+)", header)
            assert match and int(match.group(1)) == member.value, member
    assert int(re.search(r"FK_OP_COUNT = (\d+)", header).group(1)) == len(fk.OpKind)
    for member in (fk.Backend.CPU, fk.Backend.CUDA, fk.Backend.VULKAN, fk.Backend.METAL):
        assert re.search(rf"FK_BACKEND_{member.name} = {member.value}\b", header)
    for flag in fk.KernelCaps:
        if flag.value:
            assert re.search(rf"FK_CAP_{flag.name} = {flag.value}u", header), flag


def test_several_alternatives_per_key_in_registration_order():
    backend = fk.claim_backend("test-alternatives")
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule(), source="first",
                    caps=fk.KernelCaps.STRIDED_INPUT)
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule(F32, F32), source="second",
                    precision=fk.PrecisionGuarantee(True, 2, notes="claimed"))
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule(F16, F64), source="bcast",
                    caps=fk.KernelCaps.REQUIRES_BROADCAST)
    t = fk.bindings()
    alts = t.alternatives(fk.OpKind.CAST, [F32, F64], backend)
    assert [k.source for k in alts] == ["first", "second", "bcast"]
    assert t.lookup(fk.OpKind.CAST, [F32, F64], backend).source == "first"
    assert alts[1].precision == fk.PrecisionGuarantee(True, 2, notes="claimed")
    assert t.lookup_precision(fk.OpKind.CAST, [F32, F64], backend) is None
    assert t.lookup_with_caps(fk.OpKind.CAST, [F32, F64], backend, fk.KernelCaps.STRIDED_INPUT).source == "first"
    with pytest.raises(fk.NoKernelError, match="caps"):
        t.lookup_with_caps(fk.OpKind.CAST, [F32, F64], backend, fk.KernelCaps.INPLACE)
    assert t.supports(fk.OpKind.CAST, [F32, F64], backend)
    assert not t.supports(fk.OpKind.CAST, [F64, F64], backend)
    out = np.empty(3)
    alts[0](np.ones(3, dtype=np.float32), out=out)       # a registered capsule really runs
    np.testing.assert_array_equal(out, 1.0)


def test_requires_broadcast_entry_alone_is_never_picked_by_lookup():
    backend = fk.claim_backend("test-bcast-only")
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule(), caps=fk.KernelCaps.REQUIRES_BROADCAST)
    t = fk.bindings()
    assert not t.supports(fk.OpKind.CAST, [F32, F64], backend)
    assert len(t.alternatives(fk.OpKind.CAST, [F32, F64], backend)) == 1
    with pytest.raises(fk.NoKernelError):
        t.lookup(fk.OpKind.CAST, [F32, F64], backend)


def test_same_kernel_twice_at_one_key_publishes_nothing():
    backend = fk.claim_backend("test-duplicate")
    before = fk.bindings()
    with pytest.raises(fk.RegistrationError, match="registered twice"):
        with fk.edit_bindings() as tx:
            tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
            tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
    after = fk.bindings()
    assert after.generation == before.generation and len(after) == len(before)


def test_failed_registration_poisons_the_transaction():
    backend = fk.claim_backend("test-poison")
    before = fk.bindings().generation
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
        with pytest.raises(fk.RegistrationError):
            tx.register(fk.OpKind.CAST, [F32, F64], backend, "not a capsule")
        with pytest.raises(fk.RegistrationError):
            tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule(F16, F16), source="x" * 40)
        with pytest.raises(Exception):
            tx.commit()
    assert fk.bindings().generation == before
    assert not fk.bindings().supports(fk.OpKind.CAST, [F32, F64], backend)


def test_exception_inside_the_block_aborts():
    backend = fk.claim_backend("test-abort")
    before = fk.bindings().generation
    with pytest.raises(KeyError):
        with fk.edit_bindings() as tx:
            tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
            raise KeyError("boom")
    assert fk.bindings().generation == before
    with pytest.raises(fk.RegistrationError):
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())


def test_registration_validates_keys():
    with fk.edit_bindings() as tx:
        with pytest.raises(ValueError):
            tx.register(fk.OpKind.CAST, [F32, F64], 999, capsule())
        with pytest.raises(fk.OperandCountError):
            tx.register(fk.OpKind.CAST, [], CPU, capsule())
        tx.abort()


def test_fill_unset_cost_and_precision():
    backend = fk.claim_backend("test-fill")
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
        tx.register(fk.OpKind.CAST, [F64, F64], backend, capsule(F64, F64),
                    precision=fk.PrecisionGuarantee(False, 7))
    k = fk.bindings().lookup(fk.OpKind.CAST, [F32, F64], backend)
    # no claim yet: priced by the family default (never 0 ns), and still reported as unpriced
    assert not k.has_cost and k.cost((4,), (4,)) == fk.CostEstimate(4, 4 * 4 + 4 * 8, 50.0)
    claim = fk.PrecisionGuarantee(True, 0, notes="filled")
    with fk.edit_bindings() as tx:
        tx.fill_unset_cost(backend)
        tx.fill_unset_precision(backend, claim)
    t = fk.bindings()
    k = t.lookup(fk.OpKind.CAST, [F32, F64], backend)
    assert k.has_cost and k.cost((4,), (4,)).bytes_moved == 4 * 4 + 4 * 8
    assert k.precision == claim
    assert t.lookup_precision(fk.OpKind.CAST, [F64, F64], backend) == fk.PrecisionGuarantee(False, 7)


def test_every_cpu_binding_has_cost_and_precision():
    for k in fk.bindings():
        if k.backend == CPU and k.source in ("native", "blas"):
            assert k.has_cost, k
            assert k.precision is not None, k


def test_runtime_fused_lookup_three_outcomes():
    fused = fk.new_runtime_fused_id()
    key = fk.BindingKey.runtime_fused(fused)
    t = fk.bindings()
    assert t.unique_runtime_fused(fused, CPU) == fk.NotFound(fused, CPU)
    with fk.edit_bindings() as tx:
        tx.register(key, [F32, F64], CPU, capsule(), source="fused")
    found = fk.bindings().unique_runtime_fused(fused, CPU)
    assert isinstance(found, fk.Unique) and found.dtypes == (F32, F64) and found.kernel.source == "fused"
    assert found.kernel.op == key
    with fk.edit_bindings() as tx:
        tx.register(key, [F64, F64], CPU, capsule(F64, F64))
    found = fk.bindings().unique_runtime_fused(fused, CPU)
    assert isinstance(found, fk.Ambiguous) and len(found.candidates) == 2
    with fk.edit_bindings() as tx:
        tx.drop_runtime_fused(fused, CPU)
    assert isinstance(fk.bindings().unique_runtime_fused(fused, CPU), fk.NotFound)
    assert isinstance(t.unique_runtime_fused(fused, CPU), fk.NotFound)   # old snapshot unchanged


def test_coverage_len_iteration():
    t = fk.bindings()
    rows = t.coverage()
    assert len(rows) == t.key_count()
    assert sum(len(t.alternatives(r.op, r.dtypes, r.backend)) for r in rows) == len(t)
    assert len(list(t)) == len(t)
    cast_rows = [r for r in rows if r.op == fk.OpKind.CAST and r.backend == CPU]
    assert len(cast_rows) == len(fk.DType) ** 2      # every pair of the 13 dtypes


def test_snapshot_is_immutable_and_handles_outlive_it():
    backend = fk.claim_backend("test-snapshot")
    old = fk.bindings()
    with fk.edit_bindings() as tx:
        tx.register(fk.OpKind.CAST, [F32, F64], backend, capsule())
    new = fk.bindings()
    assert new.generation > old.generation
    assert not old.supports(fk.OpKind.CAST, [F32, F64], backend)
    k = new.lookup(fk.OpKind.CAST, [F32, F64], backend)
    del new, old
    for _ in range(3):
        with fk.edit_bindings() as tx:
            tx.register(fk.BindingKey.runtime_fused(fk.new_runtime_fused_id()), [F32, F64], backend, capsule())
    gc.collect()
    out = np.empty(2)
    k(np.ones(2, dtype=np.float32), out=out)             # the handle's snapshot is still alive
    assert (out == 1).all()


def _settle():
    """Drop every snapshot only this test's garbage holds, and point dispatch at the newest one."""
    gc.collect()
    fk.dispatch(fk.OpKind.CONTIGUIZE, [np.zeros(1, np.float32)], [np.zeros(1, np.float32)])
    _dispatch.reclaim()
    return _dispatch.live_snapshots(), _dispatch.allocated_bytes()


def test_readers_see_whole_snapshots_while_a_writer_publishes_1000_times():
    """Each transaction registers two keys under one fresh fused id and drops the id registered
    two transactions earlier; a reader must never see exactly one of a pair."""
    backend = fk.claim_backend("test-cow-stress")
    cap_a, cap_b = capsule(), capsule(F64, F64)
    live_before, bytes_before = _settle()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()
    ids = []
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                t = fk.bindings()
                recent = ids[-3:]
                for fused in recent:
                    outcome = t.unique_runtime_fused(fused, backend)
                    if isinstance(outcome, fk.Unique):
                        errors.append(f"half a transaction visible for id {fused}")
                t.lookup(fk.OpKind.CAST, [F32, F64], CPU)
        except Exception as exc:      # reported below, not swallowed
            errors.append(repr(exc))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for th in threads:
        th.start()
    try:
        for i in range(1000):
            fused = fk.new_runtime_fused_id()
            with fk.edit_bindings() as tx:
                tx.register(fk.BindingKey.runtime_fused(fused), [F32, F64], backend, cap_a)
                tx.register(fk.BindingKey.runtime_fused(fused), [F64, F64], backend, cap_b)
                if len(ids) >= 2:
                    tx.drop_runtime_fused(ids[-2], backend)
            ids.append(fused)
    finally:
        stop.set()
        for th in threads:
            th.join()
    with fk.edit_bindings() as tx:
        for fused in ids[-2:]:
            tx.drop_runtime_fused(fused, backend)
    assert not errors, errors[:3]
    live_after, bytes_after = _settle()
    assert live_after == live_before
    assert bytes_after == bytes_before
    traced_after = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # The published snapshot was allocated while tracing (the one it replaced was not), so the
    # growth includes one whole snapshot, which scales with the registered kernels: a leak is
    # growth beyond it.
    assert traced_after[0] - traced_before[0] - bytes_after < 256 * 1024
