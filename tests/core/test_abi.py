"""The public C ABI stays what extensions were compiled against.

* test_c_abi_is_frozen: abi.h (structs with sizes and offsets, enum values, the fk_api table's
  member signatures, the inline helpers) against tests/data/abi_signature.json.
* test_pxd_mirrors_the_header: abi.pxd declares exactly what abi.h defines, with the same types.
* test_every_declaration_compiles_from_outside: an extension that uses every name abi.pxd declares
  builds and agrees with the C layout.
* test_abi_version_mismatch_is_refused_at_import: a module built against another ABI version (or
  another fk_api size) fails to import, naming both versions.
"""
import json
import shutil
import struct
import textwrap

import pytest

import fuel_kernel as fk
from fuel_kernel import errors

import abi_signature
from extension_build import build_inplace, import_from

F32 = int(fk.DType.F32)


@pytest.fixture(scope="module")
def current():
    if shutil.which(abi_signature.compiler()[0]) is None:
        pytest.skip("no C compiler to measure the ABI with")
    return abi_signature.signature()


@pytest.fixture(scope="module")
def frozen():
    return json.loads(abi_signature.FROZEN.read_text())


def test_c_abi_is_frozen(current, frozen):
    if current["pointer_size"] != frozen["pointer_size"]:
        pytest.skip(f"the frozen ABI was measured with {frozen['pointer_size']}-byte pointers")
    breaking, compatible = abi_signature.compare(frozen, current)
    if not breaking and not compatible:
        assert current == frozen            # same content, e.g. a reordered table member
        return
    listing = "\n  ".join(breaking + compatible)
    if breaking and current["abi_version"] == frozen["abi_version"]:
        pytest.fail(
            f"the public C ABI (fuel_kernel/include/fuel_kernel/abi.h) changed incompatibly:\n  {listing}\n"
            f"Extensions compiled against ABI version {frozen['abi_version']} would misread these.  If the "
            f"change is deliberate, bump FK_ABI_VERSION in abi.h (old extensions then refuse to import "
            f"instead of crashing), mirror it in fuel_kernel/abi.pxd, and regenerate the frozen copy with "
            f"`{abi_signature.REGENERATE}`.  Otherwise undo the change.")
    pytest.fail(
        f"the public C ABI differs from tests/data/abi_signature.json "
        f"({'compatible additions only' if not breaking else 'ABI version bumped'}):\n  {listing}\n"
        f"Regenerate the frozen copy with `{abi_signature.REGENERATE}` and commit it.")


def test_only_deliberate_changes_are_called_compatible(frozen):
    """The classifier: appended enum members are compatible; moved fields and renumbered members are not."""
    changed = json.loads(json.dumps(frozen))
    changed["enums"]["fk_op"]["FK_OP_NEW"] = frozen["enums"]["fk_op"]["FK_OP_COUNT"]
    changed["enums"]["fk_op"]["FK_OP_COUNT"] += 1
    breaking, compatible = abi_signature.compare(frozen, changed)
    assert not breaking and len(compatible) == 2
    changed["enums"]["fk_dtype"]["FK_F64"] = 11
    changed["structs"]["fk_entry"]["members"][1]["offset"] += 4
    breaking, _ = abi_signature.compare(frozen, changed)
    assert any("FK_F64" in b for b in breaking) and any("fk_entry.caps" in b for b in breaking)


def test_frozen_copy_is_current_version(frozen):
    text = abi_signature.HEADER.read_text()
    assert f"#define FK_ABI_VERSION {frozen['abi_version']}\n" in text, \
        f"FK_ABI_VERSION was bumped; regenerate the frozen copy with `{abi_signature.REGENERATE}`"


def test_pxd_mirrors_the_header():
    problems = abi_signature.mirror_problems()
    assert not problems, "fuel_kernel/abi.pxd does not mirror abi.h:\n  " + "\n  ".join(problems)


def test_python_enums_match_the_header(frozen):
    enums = frozen["enums"]
    assert {d.name: int(d) for d in fk.DType} == {k[3:]: v for k, v in enums["fk_dtype"].items() if k != "FK_DTYPE_COUNT"}
    assert {o.name: int(o) for o in fk.OpKind} == {k[6:]: v for k, v in enums["fk_op"].items() if k != "FK_OP_COUNT"}
    assert {b.name: int(b) for b in fk.Backend} == {k[11:]: v for k, v in enums["fk_backend"].items()}
    caps = enums["enum FK_CAP_STRIDED_INPUT"]
    assert {c.name: int(c) for c in fk.KernelCaps if c.name != "NONE"} == {k[7:]: v for k, v in caps.items()}
    statuses = {k: v for k, v in enums["fk_status"].items() if k != "FK_OK"}
    assert set(errors.STATUS_ERRORS) == set(statuses.values())


# ---- building extensions against the header --------------------------------------------------------
def build(directory, setup_source):
    (directory / "setup.py").write_text(textwrap.dedent(setup_source))
    build_inplace(directory)


@pytest.mark.parametrize("language", ["c", "c++"])
def test_every_declaration_compiles_from_outside(tmp_path, current, language):
    pytest.importorskip("Cython")
    name = "fk_abi_usage_" + ("cpp" if language == "c++" else "c")
    (tmp_path / f"{name}.pyx").write_text(abi_signature.usage_pyx())
    strict = ["-Werror=incompatible-pointer-types", "-Werror=int-conversion"] if language == "c" else []
    build(tmp_path, f"""
        import os
        import fuel_kernel
        from Cython.Build import cythonize
        from setuptools import Extension, setup
        parent = os.path.dirname(os.path.dirname(os.path.abspath(fuel_kernel.__file__)))
        ext = Extension({name!r}, [{name!r} + ".pyx"], language={language!r},
                        include_dirs=[fuel_kernel.get_include()], extra_compile_args={strict!r})
        setup(ext_modules=cythonize([ext], include_path=[parent], quiet=True))
    """)
    usage = import_from(tmp_path, name)
    values = {m: v for members in current["enums"].values() for m, v in members.items()}
    values.update(current["constants"], FK_ABI_VERSION=current["abi_version"])
    assert usage.enum_values() == values
    assert usage.string_macros() == {k: v.encode() for k, v in current["strings"].items()}
    offsets = usage.member_offsets()
    for name, layout in current["structs"].items():
        if name != "fk_api":
            assert offsets[name] == {m["name"]: m["offset"] for m in layout["members"]}, name
    assert usage.never_called_address() != 0
    assert usage.thread_local_error(int(errors_status("ShapeError")), 42, b"forty-two") == \
        (int(errors_status("ShapeError")), b"number 42, word forty-two", 0)

    # fk_key_make: the documented layout, and dtypes past n zeroed whatever the caller left there
    for n in range(9):
        garbage = bytes(range(1, 9))
        expected = struct.pack("=IHHB8s7x", 70000, 1, 300, n, garbage[:n].ljust(8, b"\0"))
        assert usage.key_bytes(1, 70000, bytes([n]) + garbage, 300) == expected, n


def errors_status(class_name):
    return next(code for code, cls in errors.STATUS_ERRORS.items() if cls.__name__ == class_name)


PROBE_C = r"""
#include <Python.h>
#include "fuel_kernel/abi.h"

static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "NAME", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_NAME(void) {
    if (fk_import_api() < 0) return NULL;
    return PyModule_Create(&probe);
}
"""


def test_abi_version_mismatch_is_refused_at_import(tmp_path):
    """Three probes: one against the real header, one against a copy claiming ABI version 999,
    and one whose fk_api table has grown by one member without a version bump."""
    header = abi_signature.HEADER.read_text()
    version = abi_signature.header_model()["abi_version"]
    variants = {
        "fk_probe_same": header,
        "fk_probe_version": header.replace(f"#define FK_ABI_VERSION {version}\n", "#define FK_ABI_VERSION 999\n"),
        "fk_probe_size": header.replace("} fk_api;", "    void *appended_member;\n} fk_api;"),
    }
    assert len(set(variants.values())) == 3
    for name, text in variants.items():
        (tmp_path / name / "fuel_kernel").mkdir(parents=True)
        (tmp_path / name / "fuel_kernel" / "abi.h").write_text(text)
        (tmp_path / f"{name}.c").write_text(PROBE_C.replace("NAME", name))
    build(tmp_path, f"""
        from setuptools import Extension, setup
        setup(ext_modules=[Extension(name, [name + ".c"], include_dirs=[name])
                           for name in {sorted(variants)!r}])
    """)
    assert import_from(tmp_path, "fk_probe_same").__name__ == "fk_probe_same"
    with pytest.raises(ImportError) as refused:
        import_from(tmp_path, "fk_probe_version")
    message = str(refused.value)
    assert "ABI version 999" in message and f"ABI version {version}" in message
    assert "rebuild the module" in message
    with pytest.raises(ImportError, match=rf"ABI version {version} \(api size \d+\) but the installed "
                                          rf"fuel_kernel provides ABI version {version} \(api size \d+\)"):
        import_from(tmp_path, "fk_probe_size")
