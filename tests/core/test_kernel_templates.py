"""The CPU kernel tables of fuel_kernel/spec.py are what the runtime registers, and the headers
rendered from the kernel templates are fresh.

* Every row tools/generate_kernels.py derives from spec.CPU_KERNELS is a live CPU binding with the
  spec's kernel source, caps, precision claim and revision (so a table edit cannot be lost on the
  way to the manifest), and revisions are unique.
* The spec's own check refuses a table that names an unknown op, dtype or claim, or gives an op
  the wrong operand count.
* Rendering the templates now gives exactly the headers the build compiled, each opening with
  the "do not edit" line; none of them is tracked by git.
"""
import importlib.util
import subprocess
from pathlib import Path

import pytest

import fuel_kernel as fk
from fuel_kernel import spec
from support import imports_this_tree

ROOT = Path(__file__).resolve().parent.parent.parent   # the repository


def load_generator():
    module_spec = importlib.util.spec_from_file_location(
        "generate_kernels", ROOT / "tools" / "generate_kernels.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


generate_kernels = load_generator()


def caps_value(expression):
    """The integer a spec caps expression such as "FK_CAP_STRIDED_INPUT | FK_CAP_INPLACE" means;
    named groups (FK_ELEMENTWISE_CAPS, ...) are resolved by the generated headers, so a table row
    that uses one is not checked here (None)."""
    value = 0
    for term in expression.split("|"):
        term = term.strip()
        if not term.startswith("FK_CAP_"):
            return None
        value |= int(fk.KernelCaps[term[len("FK_CAP_"):]])
    return value


@pytest.mark.parametrize("family", sorted(spec.CPU_KERNELS))
def test_every_table_row_is_registered_as_the_spec_says(family):
    if family == "matmul_blas":
        from fuel_kernel.cpu import _matmul_blas
        if not _matmul_blas.AVAILABLE:
            pytest.skip("SciPy is not importable, so the BLAS module registers no rows")
    table = fk.bindings()
    rows = generate_kernels.manifest_rows(spec, family)
    assert rows
    for op, signature, kernel, claim, cost, caps, source in rows:
        dtypes = [fk.DType[name] for name in signature]
        entries = [k for k in table.alternatives(fk.OpKind[op], dtypes, fk.Backend.CPU)
                   if k.source == source
                   and k.revision == generate_kernels.revision(source, op, signature, kernel)]
        assert len(entries) == 1, (family, op, signature, kernel)
        entry = entries[0]
        assert entry.precision.max_ulp == claim.max_ulp
        assert entry.precision.max_rel == claim.max_rel
        assert entry.precision.max_abs == claim.max_abs
        assert entry.precision.notes == claim.notes
        expected_caps = caps_value(caps)
        if expected_caps is not None:
            assert int(entry.caps) == expected_caps


def test_revisions_are_unique():
    revisions = [generate_kernels.revision(source, op, signature, kernel)
                 for family in spec.CPU_KERNELS
                 for op, signature, kernel, _, _, _, source in generate_kernels.manifest_rows(spec, family)]
    assert len(revisions) == len(set(revisions))


@pytest.mark.parametrize("bad, message", [
    (spec.KernelRows(("NO_SUCH_OP",), spec.same(("F32",), 2), "fk_x", "EXACT", "c", "0"), "unknown op"),
    (spec.KernelRows(("NEG",), (("F32",),), "fk_x", "EXACT", "c", "0"), "cannot take"),
    (spec.KernelRows(("NEG",), (("F32", "F99"),), "fk_x", "EXACT", "c", "0"), "unknown dtypes"),
    (spec.KernelRows(("NEG",), spec.same(("F32",), 2), "fk_x", "NO_SUCH_CLAIM", "c", "0"), "unknown claim"),
    (spec.KernelRows(("NEG",), spec.same(("F32",), 2), "fk_x", {"F64": "EXACT"}, "c", "0"), "no NEG claim"),
])
def test_spec_check_refuses_a_bad_table(monkeypatch, bad, message):
    monkeypatch.setitem(spec.CPU_KERNELS, "bad", (bad,))
    with pytest.raises(ValueError, match=message):
        spec.check()


def test_spec_check_refuses_claim_notes_the_table_would_cut(monkeypatch):
    notes = "x" * (spec.CLAIM_NOTES_MAX + 1)
    monkeypatch.setitem(spec.CLAIMS, "LONG_NOTES", spec.Claim(1, notes))
    monkeypatch.setitem(spec.CPU_KERNELS, "bad", (
        spec.KernelRows(("NEG",), spec.same(("F32",), 2), "fk_x", "LONG_NOTES", "c", "0"),))
    with pytest.raises(ValueError, match="notes longer"):
        spec.check()
    monkeypatch.setitem(spec.CLAIMS, "LONG_NOTES", spec.Claim(1, notes[:-1]))
    spec.check()


def test_rendered_headers_are_fresh_and_untracked():
    if not imports_this_tree():
        pytest.skip(f"the rendered headers are build outputs of a source tree; this run tests the "
                    f"installed {fk.__file__}")
    assert generate_kernels.templates(), "no kernel templates found"
    assert generate_kernels.stale() == [], "run python tools/generate_kernels.py (or rebuild)"
    for path, text in generate_kernels.outputs().items():
        assert text.startswith("/* generated from fuel_kernel/cpu/") and "do not edit" in text.splitlines()[0]
        assert ROOT / "build" in path.parents
    tracked = subprocess.run(["git", "ls-files", "build"], cwd=ROOT, capture_output=True, text=True)
    assert tracked.returncode != 0 or tracked.stdout == ""
