"""`python -m fuel_kernel.coverage`: formats, filters, --missing and exit codes."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "fuel_kernel.coverage", *args],
                          capture_output=True, text=True, timeout=120)


def test_text_lists_cast_and_contiguize_for_every_dtype():
    result = run()
    assert result.returncode == 0, result.stderr
    assert "backend cpu:" in result.stdout
    assert "cast (121 keys)" in result.stdout
    assert "contiguize (11 keys)" in result.stdout


def test_json_shape():
    result = run("--json", "--op", "cast")
    assert result.returncode == 0
    rows = json.loads(result.stdout)
    assert len(rows) == 121
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
    assert lines[0].startswith("| backend | op | dtypes |") and len(lines) == 2 + 11


def test_missing_reports_family_gaps():
    result = run("--missing", "--json")
    assert result.returncode == 0
    gaps = json.loads(result.stdout)
    assert all({"backend", "op", "dtypes"} <= set(g) for g in gaps)
    assert not [g for g in gaps if g["op"] in ("cast", "contiguize")]


@pytest.mark.parametrize("args", [["--bogus"], ["--backend", "nowhere"], ["--op", "frobnicate"],
                                  ["--json", "--markdown"]])
def test_bad_arguments_exit_2_with_usage(args):
    result = run(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr
