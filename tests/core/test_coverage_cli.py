"""`python -m fuel_kernel.coverage`: formats, filters, --missing and exit codes."""
import json
import subprocess
import sys

import pytest

from fuel_kernel import coverage


def run(*args):
    return subprocess.run([sys.executable, "-m", "fuel_kernel.coverage", *args],
                          capture_output=True, text=True, timeout=120)


def test_text_lists_cast_and_contiguize_for_every_dtype():
    result = run()
    assert result.returncode == 0, result.stderr
    assert "backend cpu:" in result.stdout
    assert "cast (169 keys)" in result.stdout
    assert "contiguize (13 keys)" in result.stdout


def test_text_states_the_float8_rule():
    """The listing ends with the ops that hold an FP8 key: CAST, the bit-moving ops and MATMUL."""
    result = run()
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("FP8 (f8e4m3, f8e5m2) are storage formats")]
    listed = line.split(", on ")[1].split(";")[0].split(", ")
    assert {"cast", "contiguize", "slice", "concat", "gather", "where", "write_slice", "matmul"} <= set(listed)
    assert not {"add", "sum", "eq", "exp", "scatter_add", "cumsum"} & set(listed)
    filtered = run("--op", "add")
    assert "FP8" not in filtered.stdout


def test_json_shape():
    result = run("--json", "--op", "cast")
    assert result.returncode == 0
    rows = json.loads(result.stdout)
    assert len(rows) == 169
    row = next(r for r in rows if r["dtypes"] == ["f32", "f64"])
    assert row["backend"] == "cpu" and row["op"] == "cast"
    (alt,) = row["alternatives"]
    assert alt["source"] == "native" and alt["cost"] is True
    assert "strided_input" in alt["caps"]
    assert alt["precision"]["max_ulp"] == 0


def test_markdown_and_backend_filter():
    result = run("--markdown", "--backend", "cpu", "--op", "contiguize")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("| backend | op | dtypes |") and len(lines) == 2 + 13


def test_missing_reports_family_gaps():
    result = run("--missing", "--json")
    assert result.returncode == 0
    gaps = json.loads(result.stdout)
    assert all({"backend", "op", "dtypes", "kind"} <= set(g) for g in gaps)
    assert not [g for g in gaps if g["op"] in ("cast", "contiguize")]
    # ARG* give I64 whatever the input: moving their output within the integers is by design
    arg_gaps = [g for g in gaps if g["op"] in ("argmax", "argmin")]
    assert arg_gaps and all(g["kind"] == "by design" for g in arg_gaps)


def test_missing_separates_real_gaps_from_those_by_design():
    def row(op, *dtypes):
        return {"backend": "cpu", "op": op, "dtypes": list(dtypes), "alternatives": []}

    rows = [row("add", "f32", "f32", "f32"), row("add", "f64", "f64", "f64"),
            row("argmax", "f32", "i64"), row("sum", "i32", "i64"), row("sum", "i8", "i64")]
    gaps = {(op, dtypes): kind for _, op, dtypes, kind in coverage.missing(rows)}
    assert gaps[("add", ("f16", "f16", "f16"))] == "gap"
    assert gaps[("argmax", ("f32", "i32"))] == "by design"     # ARGMAX's output is always I64
    assert gaps[("sum", ("i64", "i64"))] == "gap"              # the rule gives I64: could exist
    assert gaps[("sum", ("i16", "i16"))] == "by design"        # integer SUM accumulates in I64
    order = [kind for _, _, _, kind in coverage.missing(rows)]
    assert order == sorted(order, key=lambda kind: kind != "gap")   # real gaps first


@pytest.mark.parametrize("args", [["--bogus"], ["--backend", "nowhere"], ["--op", "frobnicate"],
                                  ["--json", "--markdown"]])
def test_bad_arguments_exit_2_with_usage(args):
    result = run(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr
