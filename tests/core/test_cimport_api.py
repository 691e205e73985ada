"""The cimport API proven from outside: build examples/extension in a temp dir and run it.

The example is compiled by its own setup.py against whichever fuel_kernel this interpreter imports
(in-place build or installed wheel), so the test also proves that abi.pxd and the headers ship with
the package.  It registers on a backend id it claims, so the CPU bindings other tests see are
untouched.
"""
import shutil
from pathlib import Path

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch

from extension_build import build_inplace, import_from

pytest.importorskip("Cython")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "extension"
F32x3 = [fk.DType.F32] * 3


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    build = tmp_path_factory.mktemp("fk_example")
    for name in ("setup.py", "fk_example.pyx"):
        shutil.copy(EXAMPLE / name, build)
    build_inplace(build)
    return import_from(build, "fk_example")


def f32(rng, shape):
    return (rng.standard_normal(shape) * 4).astype(np.float32)


def test_claims_a_backend_in_the_extension_range(example):
    assert fk.Backend.EXTENSION_FIRST <= example.BACKEND_ID <= fk.Backend.EXTENSION_LAST
    assert _dispatch.backend_name(example.BACKEND_ID) == "fk_example"
    assert fk.claim_backend("fk_example") == example.BACKEND_ID      # same name, same id


def layouts(rng):
    a, b = f32(rng, (5, 7)), f32(rng, (5, 7))
    yield "contiguous", a, b, np.empty((5, 7), np.float32)
    yield "transposed", a.T, b.T, np.empty((7, 5), np.float32)
    yield "negative", a[::-1, ::-2], b[:, ::-2], np.empty((5, 4), np.float32)
    yield "broadcast", np.broadcast_to(a[:1], (5, 7)), b, np.empty((5, 7), np.float32)
    yield "strided out", a, b, np.zeros((10, 14), np.float32)[::2, ::2]
    yield "3-d", f32(rng, (2, 3, 4)), f32(rng, (2, 3, 4)).transpose(1, 0, 2).copy().transpose(1, 0, 2), np.empty((2, 3, 4), np.float32)
    yield "0-d", np.float32(1.5) * np.ones((), np.float32), np.full((), -4.0, np.float32), np.empty((), np.float32)
    yield "empty", f32(rng, (0, 3)), f32(rng, (0, 3)), np.empty((0, 3), np.float32)


def test_add_from_the_nogil_loop_matches_numpy(example, rng):
    for name, a, b, out in layouts(rng):
        assert example.run_add(a, b, out) is out
        np.testing.assert_array_equal(out, a + b, err_msg=name)


def test_runtime_fused_add_relu_matches_numpy(example, rng):
    for name, a, b, out in layouts(rng):
        example.run_add_relu(a, b, out, repeat=3)
        np.testing.assert_array_equal(out, np.maximum(a + b, np.float32(0)), err_msg=name)
    nan = np.array([np.nan, -1, 2], np.float32)
    out = np.empty(3, np.float32)
    example.run_add_relu(nan, np.zeros(3, np.float32), out)
    np.testing.assert_array_equal(out, [np.nan, 0, 2])


def test_in_place(example, rng):
    a, b = f32(rng, (64,)), f32(rng, (64,))
    expected = a + b
    example.run_add(a, b, a)
    np.testing.assert_array_equal(a, expected)


def test_python_face_sees_the_registrations(example):
    table = fk.bindings()
    kernel = table.lookup(fk.OpKind.ADD, F32x3, example.BACKEND_ID)
    assert kernel.source == "fk_example"
    assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
    assert kernel.precision.bit_stable and kernel.precision.max_ulp == 0
    assert kernel.has_cost and kernel.cost((4, 8), (4, 8), (4, 8)).flops == 32
    assert [k.source for k in table.alternatives(fk.OpKind.ADD, F32x3, example.BACKEND_ID)] == ["fk_example"]
    assert example.alternative_sources() == ["fk_example"]
    assert fk.CoverageBinding(example.BACKEND_ID, fk.OpKind.ADD, tuple(F32x3)) in table.coverage()

    fused = table.unique_runtime_fused(example.ADD_RELU_ID, example.BACKEND_ID)
    assert isinstance(fused, fk.Unique)
    assert fused.dtypes == tuple(F32x3)
    assert fused.kernel.op == fk.BindingKey.runtime_fused(example.ADD_RELU_ID)
    assert fused.kernel.source == "fk_example"
    assert isinstance(table.unique_runtime_fused(example.ADD_RELU_ID, fk.Backend.CPU), fk.NotFound)


def test_errors_cross_the_boundary_as_typed_exceptions(example, rng):
    a = f32(rng, (3, 4))
    with pytest.raises(fk.ShapeError, match=r"operand 1 has extent 2 on axis 0, the output 3"):
        example.run_add(a, a[:2], np.empty((3, 4), np.float32))
    with pytest.raises(fk.ReadOnlyError):
        example.run_add(a, a, np.broadcast_to(np.float32(0), (3, 4)))
    with pytest.raises(fk.NoKernelError, match=rf"no kernel for op {int(fk.OpKind.SUB)} with 3 dtypes on backend {example.BACKEND_ID}"):
        example.run_static(fk.OpKind.SUB, a, a, np.empty_like(a))
    with pytest.raises(TypeError):
        example.run_add(a.astype(np.float64), a, np.empty_like(a))


def test_its_kernel_refuses_storage_of_another_backend(example, rng):
    """Python's Kernel call hands the kernel CPU storages; the example's kernel checks the backend."""
    kernel = fk.bindings().lookup(fk.OpKind.ADD, F32x3, example.BACKEND_ID)
    a = f32(rng, (4,))
    with pytest.raises(fk.BackendError, match="lives on backend 0, not on fk_example"):
        kernel(a, a, out=np.empty(4, np.float32))


def test_a_held_snapshot_survives_later_commits(example, rng):
    """The loop holds its snapshot; commits in between neither free it nor leak it."""
    a, b, out = f32(rng, (1000,)), f32(rng, (1000,)), np.empty(1000, np.float32)
    before = _dispatch.live_snapshots()
    for _ in range(5):
        with fk.edit_bindings():
            pass
        example.run_add(a, b, out, repeat=100)
    _dispatch.reclaim()
    assert _dispatch.live_snapshots() <= before
    np.testing.assert_array_equal(out, a + b)


def test_nogil_loops_run_in_threads_while_the_table_changes(example, rng):
    """Readers never lock: two threads dispatch without the GIL while commits publish new snapshots."""
    import threading
    a, b = f32(rng, (256,)), f32(rng, (256,))
    outs = [np.empty(256, np.float32) for _ in range(2)]
    failures = []

    def reader(out):
        try:
            for _ in range(20):
                example.run_add_relu(a, b, out, repeat=500)
        except BaseException as exc:       # reported below; a thread cannot fail the test itself
            failures.append(exc)

    threads = [threading.Thread(target=reader, args=(out,)) for out in outs]
    for thread in threads:
        thread.start()
    for _ in range(30):
        with fk.edit_bindings():
            pass
    for thread in threads:
        thread.join()
    assert not failures
    for out in outs:
        np.testing.assert_array_equal(out, np.maximum(a + b, np.float32(0)))
