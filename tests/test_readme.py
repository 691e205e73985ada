"""README.md's code works as printed: every ```python block runs on its own in a fresh
interpreter and a fresh folder.  A block whose first line names a file (`# setup.py`) is saved
under that name, next to the ```cython blocks that name theirs (`# my_backend.pyx`); a setup.py
block builds in place and the module it builds must import."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from extension_build import child_env

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
FILE_NAME = re.compile(r"#\s*([\w.]+\.(?:py|pyx))\s*$")


def readme_blocks(language):
    return [code for lang, code in FENCE.findall(README.read_text()) if lang == language]


def named_file(code):
    """The file name a block's first line gives (`# setup.py`), or None."""
    match = FILE_NAME.match(code.splitlines()[0]) if code.strip() else None
    return match.group(1) if match else None


PYTHON_BLOCKS = readme_blocks("python")


def test_readme_has_python_examples():
    assert len(PYTHON_BLOCKS) >= 2


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))])
def test_readme_python_block_runs_on_its_own(tmp_path, code):
    env = child_env()
    name = named_file(code) or "example.py"
    (tmp_path / name).write_text(code)
    if name == "setup.py":
        for companion in readme_blocks("cython"):
            if named_file(companion):
                (tmp_path / named_file(companion)).write_text(companion)
        command = [sys.executable, "setup.py", "build_ext", "--inplace"]
    else:
        command = [sys.executable, name]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{name} failed:\n{code}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    if name == "setup.py":
        built = sorted(p.name.split(".")[0] for p in tmp_path.glob("*.so"))
        assert built, result.stdout[-3000:]
        for module in built:
            imported = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=120)
            assert imported.returncode == 0, imported.stderr[-3000:]


def section(title):
    """The README text under `## title` up to the next heading of the same level."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_binding_count_matches_the_table_and_says_it_depends_on_scipy():
    match = re.search(r"(\d+) bindings over all (\d+) ops register at import when SciPy is installed,\s+"
                      r"(\d+) without it \(the (\d+)\s+BLAS MATMUL siblings", README.read_text())
    assert match, "the CPU kernels section states the binding count with and without SciPy"
    with_scipy, n_ops, without_scipy, n_blas = map(int, match.groups())
    # what registers at import, in a fresh interpreter (tests here register more)
    counted = subprocess.run([sys.executable, "-c", "import fuel_kernel as fk; t = fk.bindings(); "
                              "print(len(t), sum(k.source == 'blas' for k in t), "
                              "len({b.op for b in t.coverage()}))"],
                             env=child_env(), capture_output=True, text=True, timeout=120)
    assert counted.returncode == 0, counted.stderr
    total, blas, ops = map(int, counted.stdout.split())
    assert with_scipy - without_scipy == n_blas
    assert total == (with_scipy if blas else without_scipy)
    assert blas in (0, n_blas)
    assert n_ops == ops


def test_set_up_warns_that_the_build_is_long_and_silent():
    text = section("Set up")
    assert text.index("prints nothing") < text.index("pip install -e .")
    assert re.search(r"\d+ to \d+ minutes", text)


def test_extension_section_gives_its_build_command():
    assert "python setup.py build_ext --inplace" in section("Extending fuel_kernel")


def test_error_list_names_every_error_class():
    import fuel_kernel as fk
    api = section("The API in brief")
    errors = [name for name in fk.__all__ if isinstance(getattr(fk, name), type)
              and issubclass(getattr(fk, name), fk.FuelKernelError)]
    assert "BackendError" in errors and "UnknownOpError" in errors
    assert [name for name in errors if not re.search(rf"\b{name}\b", api)] == []
