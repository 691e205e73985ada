"""Reprs name things: records show enum member names rather than numbers, KernelCaps prints its
flags, and a graph's values, nodes, buffers and plans say what they hold."""
import numpy as np

import fuel_kernel as fk
from fuel_kernel.graph import Graph

CPU = fk.Backend.CPU


def test_coverage_binding_names_its_backend_op_and_dtypes():
    binding = next(b for b in fk.bindings().coverage() if b.op == fk.OpKind.ADD and b.dtypes[0] == fk.DType.F32)
    assert repr(binding) == ("CoverageBinding(backend=Backend.CPU, op=OpKind.ADD, "
                             "dtypes=(DType.F32, DType.F32, DType.F32))")


def test_coverage_binding_of_an_extension_backend_shows_its_id():
    binding = fk.CoverageBinding(70, fk.BindingKey.runtime_fused(3), (fk.DType.BF16,))
    assert repr(binding) == ("CoverageBinding(backend=70, op=BindingKey.runtime_fused(3), "
                             "dtypes=(DType.BF16,))")


def test_not_found_names_the_backend():
    assert repr(fk.NotFound(7, CPU)) == "NotFound(fused_id=7, backend=Backend.CPU)"
    assert fk.NotFound(7, CPU) == fk.NotFound(7, 0)          # the repr changed, equality did not


def test_matmul_m_reads_as_its_constructor():
    assert repr(fk.MatmulM.all()) == "MatmulM.all()"
    assert repr(fk.MatmulM.rows(5)) == "MatmulM.rows(5)"
    assert repr(fk.MatmulM.deferred(2)) == "MatmulM.deferred(2)"
    assert repr(fk.MatmulM(9, 1)) == "MatmulM(kind=9, value=1)"
    assert eval(repr(fk.MatmulM.rows(5)), {"MatmulM": fk.MatmulM}) == fk.MatmulM.rows(5)
    assert "m_compute=MatmulM.rows(3)" in repr(fk.params.matmul(4, 4, 4, m_compute=fk.MatmulM.rows(3)))


def test_unique_and_ambiguous_name_their_dtypes():
    kernel = fk.bindings().lookup(fk.OpKind.ADD, [fk.DType.F32] * 3, CPU)
    unique = fk.Unique((fk.DType.F32,) * 3, kernel)
    assert repr(unique).startswith("Unique(dtypes=(DType.F32, DType.F32, DType.F32), kernel=<Kernel add(")
    ambiguous = fk.Ambiguous((((fk.DType.F16,), kernel), ((fk.DType.F32,), kernel)))
    assert repr(ambiguous).startswith("Ambiguous(candidates=(((DType.F16,), <Kernel add(")


def test_kernel_caps_print_flag_names():
    caps = fk.KernelCaps.STRIDED_INPUT | fk.KernelCaps.INPLACE
    assert str(caps) == "STRIDED_INPUT|INPLACE"
    assert repr(caps) == "KernelCaps.STRIDED_INPUT|KernelCaps.INPLACE"
    assert eval(repr(caps), {"KernelCaps": fk.KernelCaps}) == caps
    assert str(fk.KernelCaps.NONE) == "NONE" and repr(fk.KernelCaps(0)) == "KernelCaps.NONE"
    assert str(fk.KernelCaps(1 | 32)) == "STRIDED_INPUT|0x20"
    assert f"{fk.KernelCaps.INPLACE}" == "INPLACE"
    kernel = fk.bindings().lookup(fk.OpKind.ADD, [fk.DType.F32] * 3, CPU)
    assert f"caps={kernel.caps!r}" in repr(kernel) and "KernelCaps." in repr(kernel)


def test_graph_values_nodes_buffers_and_plans_say_what_they_hold():
    g = Graph(target_backend=CPU)
    x = g.input((4, 8), "f32", name="x")
    w = g.constant(np.ones((8, 3), np.float32))
    y = g.relu(g.matmul(x, w))
    assert repr(x) == "<Value f32[4, 8] of buffer 0>"
    assert repr(x.T) == "<Value f32[8, 4] of buffer 0 view strides=[1, 8] offset=0>"
    assert repr(y).startswith("<Value f32[4, 3] of buffer ") and repr(y).endswith(" relu>")
    assert repr(y.producer).startswith(f"<Node {y.producer.id} relu(f32, f32) on (buffer ")
    assert repr(w.buffer) == f"<Buffer {w.buffer.id}: const f32[8, 3]>"     # not the array's values
    assert repr(x.buffer) == "<Buffer 0 'x': input f32[4, 8]>"
    plan = g.compile(y)
    assert repr(plan) == f"<Plan (x) -> (f32[4, 3]): {plan.n_steps} steps, arena {plan.peak_bytes} bytes>"


def test_graph_says_its_backend_inputs_and_nodes():
    g = Graph(target_backend="cpu")
    assert repr(g) == "<Graph on cpu: inputs (), 0 nodes ()>"
    x = g.input((4, 8), "f32", name="x")
    g.relu(g.add(x, x))
    assert repr(g) == "<Graph on cpu: inputs (x f32[4, 8]), 2 nodes (add, relu)>"
    for _ in range(8):
        x = g.neg(x)
    assert repr(g).endswith("10 nodes (add, relu, neg, neg, neg, neg, neg, neg, ...)>")


def test_transaction_says_whether_it_is_open_and_how_much_it_holds():
    kernel = fk.bindings().lookup(fk.OpKind.ADD, [fk.DType.F32] * 3, CPU)
    backend = fk.claim_backend("repr_check")
    tx = fk.Transaction()
    assert repr(tx) == "<Transaction open: 0 registrations>"
    tx.register("add", ["f32"] * 3, backend, kernel.capsule())
    assert repr(tx) == "<Transaction open: 1 registrations>"
    tx.abort()
    assert repr(tx) == "<Transaction closed: committed or aborted>"


def test_enum_members_repr_as_the_expression_that_names_them():
    import inspect
    for member in (fk.DType.F32, fk.OpKind.ADD, fk.Backend.CPU):
        assert repr(member) == f"{type(member).__name__}.{member.name}"
        assert eval(repr(member), {type(member).__name__: type(member)}) is member
    assert "backend=Backend.CPU)" in str(inspect.signature(fk.dispatch))
    assert repr([fk.DType.BF16]) == "[DType.BF16]"
