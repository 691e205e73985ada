"""fuel_kernel/spec.py agrees with what the runtime has, and the files generated from it are fresh.

* Every spec op is an OpKind with the same number, has a schema in ops.py with the same params
  family and input count, at least one CPU kernel, and an oracle in tests/oracles.py; every
  registered static binding is for a spec op, with an input count the spec allows.
* Every spec dtype is a DType with the spec's item size and NumPy type; every params family is
  a constructor in fuel_kernel.params and its fields are the abi.h struct of its union member;
  every status maps to the exception class the spec names.
* tools/generate_abi.py, run now, gives exactly the files the build wrote (abi_enums.h,
  abi_enums.pxi, dtype_tables.h), and those carry the "do not edit" line; the per-dtype tables
  say what the spec says.
"""
import importlib.util
import re
from pathlib import Path

import pytest

import fuel_kernel as fk
from fuel_kernel import errors, ops, spec

import abi_signature
import oracles

ROOT = Path(__file__).resolve().parent.parent.parent   # the repository


def load_generator():
    module_spec = importlib.util.spec_from_file_location("generate_abi", ROOT / "tools" / "generate_abi.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def input_range(op_spec):
    return op_spec.inputs if isinstance(op_spec.inputs, tuple) else (op_spec.inputs, op_spec.inputs)


def static_bindings():
    return [k for k in fk.bindings() if isinstance(k.op, fk.OpKind)]


def test_spec_checks_itself():
    spec.check()


def test_ops_are_the_opkinds():
    assert {o.name: o.number for o in spec.OPS} == {k.name: int(k) for k in fk.OpKind}
    assert all(fk.OpKind[o.name].doc == o.doc for o in spec.OPS)


def test_dtypes_are_the_dtypes():
    assert {d.name: d.code for d in spec.DTYPES} == {t.name: int(t) for t in fk.DType}
    for d in spec.DTYPES:
        t = fk.DType[d.name]
        assert t.short_name == d.short and t.itemsize == d.itemsize == t.numpy.itemsize, d
        assert t.numpy.name == d.numpy.rsplit(".", 1)[-1], d
        assert fk.DType.parse(t.numpy) is t


def test_every_op_has_a_schema_with_the_spec_family_and_inputs():
    for o in spec.OPS:
        schema = ops.SCHEMAS[fk.OpKind[o.name]]
        assert schema.params == o.params, o.name
        lo, hi = input_range(o)
        assert schema.n_inputs == (lo if lo == hi else None), o.name


def test_every_op_has_a_kernel_and_an_oracle():
    registered = {k.op for k in static_bindings() if k.backend == fk.Backend.CPU}
    assert [o.name for o in spec.OPS if fk.OpKind[o.name] not in registered] == []
    assert [o.name for o in spec.OPS if fk.OpKind[o.name] not in oracles.ORACLES] == []


def test_every_binding_is_for_a_spec_op_with_a_spec_operand_count():
    by_name = {o.name: o for o in spec.OPS}
    bad = []
    for k in static_bindings():
        o = by_name.get(k.op.name)
        lo, hi = input_range(o) if o else (None, None)
        if o is None or not lo <= k.n_inputs <= hi or len(k.dtypes) != k.n_inputs + o.outputs:
            bad.append((k.op.name, k.n_inputs, tuple(d.name for d in k.dtypes)))
    assert not bad, f"bindings the spec does not allow: {bad}"


def test_params_families_match_abi_h_and_params_py():
    header = abi_signature.header_model()
    union = {name: re.match(r"^(\w+) ", decl).group(1)
             for name, decl in header["structs"]["fk_params_union"]["members"]}
    assert {p.member for p in spec.PARAMS if p.member} == set(union)
    assert header["enums"]["fk_params_kind"] == \
        [f"FK_PARAMS_{p.name.upper()}" for p in spec.PARAMS] + ["FK_PARAMS_KIND_COUNT"]
    for p in spec.PARAMS:
        assert callable(getattr(fk.params, p.name, None)), f"fuel_kernel.params has no {p.name}()"
        if p.member is None:
            continue
        declared = [decl for _, decl in header["structs"][union[p.member]]["members"]]
        expected = [abi_signature.normalize(re.sub(r"^(\w+)(\[\w+\])?$", lambda m: f"{m.group(1)} {name}{m.group(2) or ''}", ctype))
                    for ctype, name in p.fields]
        assert declared == expected, p.name


def test_statuses_map_to_the_spec_errors():
    assert {s.value: s.error for s in spec.STATUSES if s.error} == \
        {code: cls.__name__ for code, cls in errors.STATUS_ERRORS.items()}
    assert abi_signature.header_model()["enums"]["fk_status"] == [f"FK_{s.name}" for s in spec.STATUSES]


def test_generated_files_are_fresh():
    generator = load_generator()
    files = generator.outputs()
    assert set(files) == {generator.HEADER, generator.PXI, generator.DTYPE_TABLES}
    for path, text in files.items():
        if not path.exists():
            pytest.fail(f"{path.relative_to(ROOT)} is missing: build with `python setup.py build_ext --inplace`")
        assert path.read_text() == text, \
            f"{path.relative_to(ROOT)} is stale: the spec changed since the build; rebuild"
        assert generator.NOTICE in text.splitlines()[0]


def test_dtype_tables_follow_the_spec():
    text = load_generator().dtype_tables_text(spec)

    def table(name):
        body = re.search(name + r"\[FK_DTYPE_COUNT\] = \{(.*?)\};", text, re.S).group(1)
        return [item.strip().strip('"') for item in body.split(",")]

    assert table("fk_dtype_itemsize") == [str(d.itemsize) for d in spec.DTYPES]
    assert table("fk_dtype_shift") == [str(d.itemsize.bit_length() - 1) for d in spec.DTYPES]
    assert table("fk_dtype_short_name") == [d.short for d in spec.DTYPES]
