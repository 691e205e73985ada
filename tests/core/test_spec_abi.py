"""fuel_kernel/spec.py agrees with what the runtime has, and the files generated from it are fresh.

* Every spec op is an OpKind with the same number, has a schema in ops.py with the same params
  family and input count, at least one CPU kernel, and an oracle in tests/oracles.py; every
  registered static binding is for a spec op, with an input count the spec allows.
* Every spec dtype is a DType with the spec's item size and NumPy type; every params family is
  a constructor in fuel_kernel.params and its fields are the abi.h struct of its union member;
  every status maps to the exception class the spec names.
* Every schema uses the shape and dtype rules its spec op names; every params constructor has the
  spec's arguments and defaults, fills and reads back through the generated code, and refuses
  what the spec's checks refuse with a ParamsError; KERNEL_MODULES is the spec's module list.
* tools/generate_abi.py, run now, gives exactly the files the build wrote (the enum files, the
  per-dtype tables, the graph builders, the params constructors and fill, the kernel modules), those carry the "do not
  edit" line, and git ignores them.
"""
import importlib.util
import inspect
import re
import shutil
import subprocess
import types
from pathlib import Path

import pytest

import fuel_kernel as fk
from fuel_kernel import errors, ops, spec

import abi_signature
import oracles
from support import imports_this_tree

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
        out_lo, out_hi = spec.output_range(o) if o else (None, None)
        if o is None or not lo <= k.n_inputs <= hi or not out_lo <= k.n_outputs <= out_hi \
                or len(k.dtypes) != k.n_inputs + k.n_outputs:
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
    if not imports_this_tree():
        pytest.skip(f"the generated files are build outputs of a source tree; this run tests the "
                    f"installed {fk.__file__}")
    generator = load_generator()
    files = generator.outputs()
    expected = {generator.HEADER, generator.PXI, generator.BUILDERS, generator.PARAMS_PY,
                generator.PARAMS_PXI, generator.DTYPE_TABLES}
    expected |= {generator.kernel_module_path(m) for m in spec.KERNEL_MODULES if m.generated}
    expected |= {generator.kernel_module_path(m).with_suffix(".pyi") for m in spec.KERNEL_MODULES
                 if m.generated}
    assert set(files) == expected
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


def test_generated_files_are_not_committed():
    """Every generated file is gitignored (skipped outside a git checkout, as an unpacked sdist)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = [str(p.relative_to(ROOT)) for p in load_generator().outputs()]
    ignored = subprocess.run([git, "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert sorted(ignored.stdout.split()) == sorted(paths)
    tracked = subprocess.run([git, "ls-files", *paths], cwd=ROOT, capture_output=True, text=True)
    assert tracked.stdout.split() == []


def test_every_schema_uses_the_rules_the_spec_names():
    for o in spec.OPS:
        schema = ops.SCHEMAS[fk.OpKind[o.name]]
        assert schema.infer_shape is getattr(ops, f"{o.shape}_shape"), o.name
        assert schema.infer_dtype is (None if o.dtype is None else getattr(ops, f"{o.dtype}_dtype")), o.name


def test_params_constructors_follow_the_spec():
    """Each constructor's signature is the spec's arguments with their defaults, and OpParams.fields()
    reads back exactly those arguments (a "const" one included)."""
    for c in spec.PARAMS_CONSTRUCTORS:
        constructor = getattr(fk.params, c.name)
        assert constructor.__doc__, c.name
        parameters = inspect.signature(constructor).parameters
        passed = [a for a in c.args if a.kind != "const"]
        assert list(parameters) == [a.name for a in passed], c.name
        for a in passed:
            default = parameters[a.name].default
            assert default == (inspect.Parameter.empty if a.default == spec.REQUIRED else a.default), (c.name, a)
    assert fk.params.__all__ == ["OpParams", "MatmulM"] + [c.name for c in spec.PARAMS_CONSTRUCTORS]


def test_params_round_trip_through_the_generated_fill():
    made = {"reduce": fk.params.reduce((0, -1), True),
            "roll": fk.params.roll((2, -1), (0, 1)),
            "pad": fk.params.pad((1, 2), (0, 3), mode="reflect", value=2.5),
            "slice": fk.params.slice((0, 1), (4, 5)),
            "conv2d": fk.params.conv2d(2, (0, 1)),
            "softmax_last_dim": fk.params.softmax_last_dim(),
            "pool2d": fk.params.pool2d((3, 2), stride=2, pads_begin=(1, 0), pads_end=(2, 1), dilation=(1, 3),
                                       ceil_mode=True, count_include_pad=True),
            "topk": fk.params.topk(7, largest=False),
            "scatter_reduce": fk.params.scatter_reduce(-1, "min")}
    assert made["reduce"].fields() == {"dims": (0, -1), "keepdim": True, "select_last_index": False}
    assert fk.params.reduce((), select_last_index=True).fields()["select_last_index"] is True
    assert made["roll"].fields() == {"shifts": (2, -1), "dims": (0, 1)}
    assert made["pad"].fields() == {"before": (1, 2), "after": (0, 3), "mode": "reflect", "value": 2.5}
    assert made["slice"].fields() == {"start": (0, 1), "stop": (4, 5), "step": (1, 1)}
    assert made["conv2d"].fields() == {"stride": (2, 2), "padding": (0, 1), "dilation": (1, 1), "groups": 1}
    assert made["softmax_last_dim"].fields() == {"axis": -1}
    assert made["pool2d"].fields() == {"kernel": (3, 2), "stride": (2, 2), "pads_begin": (1, 0), "pads_end": (2, 1),
                                       "dilation": (1, 3), "ceil_mode": True, "count_include_pad": True}
    assert made["topk"].fields() == {"k": 7, "largest": False, "sorted": True}
    assert made["scatter_reduce"].fields() == {"axis": -1, "reduction": "min"}
    assert [p.kind for p in made.values()] == list(made)


@pytest.mark.parametrize("make", [
    lambda: fk.params.matmul(-1, 2, 3), lambda: fk.params.matmul(2, 2, 2, batch=(1,) * 7),
    lambda: fk.params.matmul(2, 2, 2, m_compute=fk.params.MatmulM.rows(3)),
    lambda: fk.params.conv2d(stride=(1, 0)), lambda: fk.params.conv2d(groups=0),
    lambda: fk.params.slice((0,), (1, 2)), lambda: fk.params.slice((0,), (1,), (0,)),
    lambda: fk.params.clamp(float("nan"), 1), lambda: fk.params.norm_last_dim(float("nan")),
    lambda: fk.params.roll((1, 2), (0,)), lambda: fk.params.flip((0, 0)), lambda: fk.params.reduce((9,)),
    lambda: fk.params.pad((1,), (1,), mode="wrap"), lambda: fk.params.pad((-1,), (1,)),
    lambda: fk.params.paged_attn(1.0, 0), lambda: fk.params.powi(1.5), lambda: fk.params.affine("1", 0),
    lambda: fk.params.triangular(2 ** 70), lambda: fk.params.pool2d(0), lambda: fk.params.pool2d(2, stride=0),
    lambda: fk.params.pool2d(2, pads_end=-1), lambda: fk.params.topk(-1),
    lambda: fk.params.scatter_reduce(0, "add"), lambda: fk.params.scatter_reduce(0.5)])
def test_every_spec_check_is_a_params_error(make):
    with pytest.raises(fk.ParamsError):
        make()


def test_kernel_modules_are_the_spec_list():
    assert fk.cpu.KERNEL_MODULES == tuple(f"fuel_kernel.cpu._{m.name}" for m in spec.KERNEL_MODULES)
    for m in spec.KERNEL_MODULES:
        header = ROOT / "fuel_kernel" / "cpu" / m.header          # hand-written, or rendered from a template
        assert header.exists() or header.with_name(m.header + ".in").exists(), m.header
        source = (ROOT / "fuel_kernel" / "cpu" / f"_{m.name}.pyx").read_text()
        assert f"const fk_manifest_row {m.manifest}[]" in source, m.name


def test_a_plain_new_op_needs_only_its_spec_row():
    """An op appended with the defaults gets its builder from the generator and its schema rules
    from functions ops.py already has."""
    generator = load_generator()
    foo = spec._op(len(spec.OPS), "FOO", 1, "none", "a new unary op")
    grown = types.SimpleNamespace(**{name: getattr(spec, name) for name in dir(spec) if name.isupper()})
    grown.OPS = spec.OPS + (foo,)
    text = generator.builders_text(grown)
    assert ("    def foo(self, x: Value, *, params: Optional[OpParams] = None,\n"
            "            backend: Union[Backend, int, str, None] = None) -> Value:\n"
            "        \"\"\"a new unary op.") in text
    assert "self._node(OpKind.FOO, (x,), params, backend=backend)" in text
    assert ops._rule(foo.shape, "shape") is ops.broadcast_shape
    assert ops._rule(foo.dtype, "dtype") is ops.same_as_first_dtype
