"""The package's type information: mypy finds no error in the package's own code, accepts correct
use of the public API and reports the usual mistakes (a misspelled attribute, an extra positional
argument, a misspelled keyword) through the shipped stubs and annotations; inspect.signature reads
every public function."""
import importlib.machinery
import importlib.util
import inspect
import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fuel_kernel as fk
import fuel_kernel.graph
import fuel_kernel.params

PACKAGE = Path(fk.__file__).resolve().parent

CORRECT_USE = """
    import numpy as np
    import fuel_kernel as fk
    from fuel_kernel.graph import Graph

    t: fk.BindingTable = fk.bindings()
    cast: fk.Kernel = t.lookup(fk.OpKind.CAST, [fk.DType.F32, fk.DType.F64], fk.Backend.CPU)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1]
    out = np.empty((2, 3))
    cast(x, out=out)
    fresh: np.ndarray = cast(x)
    outputs: tuple = cast.run([x], [out])
    y = fk.dispatch(fk.OpKind.CONTIGUIZE, [x.T])
    z = fk.dispatch("sum", [x], params=fk.params.reduce((1,), keepdim=True), backend="cpu")
    for k in t.alternatives(fk.OpKind.CAST, ["f32", "f64"], "cpu"):
        print(k.source, k.caps, k.precision, k.cost(x, out), k.dtypes[0].short_name, k.n_inputs)
    if fk.KernelCaps.STRIDED_INPUT in cast.caps:
        print(t.pick("cast", ["f32", "f64"], "cpu", [x, out], max_ulp=0).identity)
    print(len(t), t.key_count(), t.generation, t.supports("add", ["f32"] * 3))
    for binding in t.coverage():
        print(binding.backend, binding.op, binding.dtypes)
    found = t.unique_runtime_fused(fk.new_runtime_fused_id())
    if isinstance(found, fk.NotFound):
        print(found.fused_id)
    precision = t.lookup_precision("add", ["f32"] * 3)
    if precision is not None:
        print(precision.max_ulp, precision.exact)
    backend: int = fk.claim_backend("typing_check")
    with fk.edit_bindings() as tx:
        tx.register("cast", ["f32", "f64"], backend, cast.capsule(), caps=fk.KernelCaps.STRIDED_INPUT,
                    precision=fk.PrecisionGuarantee(max_ulp=0), source="typed")
        tx.fill_unset_cost(backend)
    m = fk.params.matmul(4, 4, 4, m_compute=fk.MatmulM.rows(2))
    print(m.kind, m.fields(), fk.OpKind.parse("add").doc, fk.DType.parse(np.float32).itemsize)
    with fk.threads(2) as n_threads:
        fk.set_num_threads(fk.get_num_threads() + n_threads - 2)

    g = Graph(target_backend=fk.Backend.CPU)
    a = g.input((32, 512), "f32")
    w = g.constant(np.random.rand(512, 512).astype(np.float32))
    h = g.relu(g.add(g.matmul(a, w), g.constant(np.zeros(512, np.float32))))
    plan = g.compile(h)
    print(plan.run([np.ones((32, 512), np.float32)]), plan.explain(), plan.peak_bytes)
"""

# Each planted mistake: the script, and the mypy error code it must draw on the marked line.
MISTAKES = {
    "misspelled_attribute": ("""
        import fuel_kernel as fk
        table = fk.bindings()
        kernel = table.lokup(fk.OpKind.ADD, ["f32"] * 3)            # MISTAKE
    """, "attr-defined"),
    "misspelled_kernel_property": ("""
        import fuel_kernel as fk
        kernel = fk.bindings().lookup(fk.OpKind.ADD, ["f32"] * 3)
        print(kernel.sorce)                                          # MISTAKE
    """, "attr-defined"),
    "extra_positional_argument": ("""
        import fuel_kernel as fk
        kernel = fk.bindings().lookup(fk.OpKind.ADD, ["f32"] * 3, "cpu", 0)   # MISTAKE
    """, "call-arg"),
    "extra_positional_to_dispatch": ("""
        import numpy as np
        import fuel_kernel as fk
        x = np.ones(3, np.float32)
        fk.dispatch("add", [x, x], None, None, "cpu", True)                # MISTAKE
    """, "call-arg"),
    "misspelled_keyword": ("""
        import numpy as np
        import fuel_kernel as fk
        x = np.ones(3, np.float32)
        fk.dispatch("add", [x, x], paramz=None)                            # MISTAKE
    """, "call-arg"),
    "misspelled_keyword_on_kernel_call": ("""
        import numpy as np
        import fuel_kernel as fk
        x = np.ones(3, np.float32)
        kernel = fk.bindings().lookup(fk.OpKind.ADD, ["f32"] * 3)
        kernel(x, x, outt=x)                                               # MISTAKE
    """, "call-overload"),
    "misspelled_transaction_keyword": ("""
        import fuel_kernel as fk
        kernel = fk.bindings().lookup(fk.OpKind.ADD, ["f32"] * 3)
        with fk.edit_bindings() as tx:
            tx.register("add", ["f32"] * 3, "cpu", kernel.capsule(), cap=0)   # MISTAKE
    """, "call-arg"),
    "misspelled_graph_builder_keyword": ("""
        from fuel_kernel.graph import Graph
        g = Graph("cpu")
        x = g.input((2, 3), "f32")
        y = g.sum(x, dimz=[1])                                             # MISTAKE
    """, "call-arg"),
    "params_constructor_given_a_string": ("""
        import fuel_kernel as fk
        p = fk.params.powi("2")                                            # MISTAKE
    """, "arg-type"),
    "graph_value_where_an_array_is_expected": ("""
        import numpy as np
        from fuel_kernel.graph import Graph
        g = Graph()
        x = g.input(4, "f32")
        total: np.ndarray = g.add(x, x)                                    # MISTAKE
    """, "assignment"),
}


def _mypy_environment():
    """MYPYPATH pointing at the imported fuel_kernel when it is not an installed package (a
    source checkout), so mypy checks against the same files the tests import."""
    env = dict(os.environ)
    parent = str(PACKAGE.parent)
    installed = {str(Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if parent not in installed:
        env["MYPYPATH"] = parent
    return env


def _require_mypy():
    """mypy is a test dependency (the [test] extra): without it these checks fail, not skip, so a
    test environment that lost it cannot pass silently."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed; it is in the test dependencies: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory):
    """One mypy run over the correct script and every planted mistake: {file stem: [(line, code)]}."""
    _require_mypy()
    folder = tmp_path_factory.mktemp("typing")
    scripts = {"correct_use": CORRECT_USE}
    scripts.update({name: source for name, (source, _) in MISTAKES.items()})
    for name, source in scripts.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    # follow-imports=silent: fuel_kernel is analysed for its types, only the scripts are judged
    command = [sys.executable, "-m", "mypy", "--follow-imports=silent", "--show-error-codes",
               "--no-error-summary", "--cache-dir", str(folder / ".mypy_cache"),
               *sorted(f"{name}.py" for name in scripts)]
    result = subprocess.run(command, cwd=folder, env=_mypy_environment(), capture_output=True,
                            text=True, timeout=600)
    errors = {name: [] for name in scripts}
    for line in result.stdout.splitlines():
        match = re.match(r"(\w+)\.py:(\d+): error: .*\[([\w-]+)\]$", line)
        if match:
            errors[match.group(1)].append((int(match.group(2)), match.group(3)))
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return errors, result.stdout, {name: textwrap.dedent(source) for name, source in scripts.items()}


def test_correct_use_of_the_public_api_type_checks(mypy_report):
    errors, output, _ = mypy_report
    assert errors["correct_use"] == [], output


def test_the_package_itself_type_checks(tmp_path_factory):
    """mypy finds no error in the imported package's own code (the directory the tests import,
    checked against its own stubs), so its annotations agree with how it uses them."""
    _require_mypy()
    folder = tmp_path_factory.mktemp("package_typing")
    # mypy is given a copy of the package's Python files and stubs: given the installed directory
    # itself, it takes site-packages for a source root, where typing_extensions.py then "shadows"
    # the library module and stops the check
    def not_python(directory, names):
        return [n for n in names if not (os.path.isdir(os.path.join(directory, n))
                                         or n.endswith((".py", ".pyi", ".typed")))]
    shutil.copytree(PACKAGE, folder / "fuel_kernel", ignore=not_python)
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    command = [sys.executable, "-m", "mypy", "--show-error-codes", "--cache-dir", str(folder / ".mypy_cache"),
               "fuel_kernel"]
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_mypy_reports_a_planted_mistake(mypy_report, name):
    errors, output, sources = mypy_report
    marked = [i for i, line in enumerate(sources[name].splitlines(), start=1) if "# MISTAKE" in line]
    expected_code = MISTAKES[name][1]
    assert errors[name], f"mypy accepted {name}:\n{sources[name]}"
    assert all(line in marked for line, _ in errors[name]), output
    assert (marked[0], expected_code) in errors[name], output


def _public_callables():
    """(qualified name, object) for every public function, class and public method of fuel_kernel,
    fuel_kernel.params and fuel_kernel.graph."""
    modules = [(fk, [n for n in vars(fk) if not n.startswith("_")]),
               (fuel_kernel.params, fuel_kernel.params.__all__),
               (fuel_kernel.graph, fuel_kernel.graph.__all__)]
    found = {}
    for module, names in modules:
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not callable(obj):
                continue
            found[f"{module.__name__}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and callable(getattr(obj, attr)):
                        found[f"{module.__name__}.{name}.{attr}"] = getattr(obj, attr)
    return sorted(found.items())


def _handle_type(obj):
    """Kernel and BindingTable: handles the table hands out (lookup(), bindings()), never built by
    calling the class, which refuses (test_api_hardening); their methods are listed separately."""
    return obj in (fk.Kernel, fk.BindingTable)


@pytest.mark.parametrize("qualified, obj", [(q, o) for q, o in _public_callables() if not _handle_type(o)],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_public_callable_has_a_signature(qualified, obj):
    assert isinstance(inspect.signature(obj), inspect.Signature)


def test_exception_classes_show_how_they_are_constructed():
    errors = [getattr(fk, name) for name in fk.__all__
              if isinstance(getattr(fk, name), type) and issubclass(getattr(fk, name), BaseException)]
    assert fk.KeyRangeError in errors and len(errors) > 10
    for error in errors:
        assert str(inspect.signature(error)) == "(*args: object) -> None", error


def test_the_cpu_backend_default_reads_as_backend_cpu():
    for function in (fk.dispatch, fk.bindings().lookup, fk.Transaction.fill_unset_cost):
        default = inspect.signature(function).parameters["backend"].default
        assert default is fk.Backend.CPU, (function, default)


def test_compiled_modules_have_stubs_and_the_package_is_marked_typed():
    assert (PACKAGE / "py.typed").is_file()
    # the extension modules as built (an installed package ships no .pyx)
    compiled = {p.name.split(".")[0] for suffix in importlib.machinery.EXTENSION_SUFFIXES
                for p in PACKAGE.rglob(f"*{suffix}")}
    assert "_dispatch" in compiled and "_executor" in compiled
    stubs = {p.stem for p in PACKAGE.rglob("*.pyi")}
    assert compiled <= stubs, f"compiled modules without a stub: {sorted(compiled - stubs)}"


@pytest.mark.parametrize("qualified, obj", _public_callables(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_callable_has_a_docstring(qualified, obj):
    lines = (inspect.getdoc(obj) or "").splitlines()
    name = qualified.rsplit(".", 1)[-1]
    if lines and re.match(rf"([\w.]+\.)?{re.escape(name)}\(", lines[0]):
        lines = lines[1:]         # the signature Cython or a dataclass writes is not a description
    assert "\n".join(lines).strip(), f"{qualified} has no docstring"


def test_extension_types_show_no_cython_pickling_internals():
    for cls in (fk.Kernel, fk.BindingTable, fk.Transaction, fk.OpParams):
        assert [name for name in dir(cls) if "cython" in name] == [], cls
