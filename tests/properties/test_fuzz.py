"""Property-based fuzzing of the public call API over every binding the live table holds.

Bindings are drawn from fk.bindings().coverage() at run time, so kernel families merged later are
fuzzed without touching this file.  Each case is a valid call or one mutation of it (wrong dtype,
operand count, read-only or aliased output, more than 8 dims, misalignment, a non-array operand,
nonsense params, unrelated shapes) or an adversarial layout (non-native byte order, an output with
stride 0 on a written axis, a huge stride-0 output of up to 2**63-1 elements with inputs grown to
match: each must be a typed error with the output untouched).  Property (fuzzing.run_case): the call either matches the op's
oracle (tests/oracles.py) or raises a FuelKernelError; it never crashes the process; on an
exception the caller's output is byte-for-byte unchanged; on success nothing outside the output
view and no input changed.

Case counts: FUEL_KERNEL_FUZZ_EXAMPLES overrides; FUEL_KERNEL_FUZZ_LONG=1 runs 100,000 cases in
test_every_binding (plus the focused tests); the default is a few thousand in all, well under a
minute on one core.
"""
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuel_kernel as fk

import oracles
from fuzzing import Case, cases, fill, guarded, live_bindings, random_values, run_case

D = fk.DType
LONG = os.environ.get("FUEL_KERNEL_FUZZ_LONG", "") not in ("", "0")
EXAMPLES = int(os.environ.get("FUEL_KERNEL_FUZZ_EXAMPLES", 100_000 if LONG else 2500))
STATS = {"cases": 0, "ok": 0, "error": 0, "skip": 0, "seconds": 0.0}
MATCHED_OPS = set()                  # ops with at least one case checked against their oracle


def fuzz_settings(n):
    return settings(max_examples=n, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print(f"\nfuzz: {STATS['cases']} cases ({STATS['ok']} matched an oracle, {STATS['error']} raised a "
          f"typed error, {STATS['skip']} without oracle verdict) in {STATS['seconds']:.1f} s")
    live = {op for op, _ in live_bindings()}
    for what, names in (("without an oracle", live - set(oracles.ORACLES)),
                        ("with an oracle but no case checked against it", live & set(oracles.ORACLES) - MATCHED_OPS)):
        if STATS["cases"] and names:
            print(f"fuzz: ops {what}: {', '.join(sorted(op.name for op in names))}")


def execute(case):
    start = time.perf_counter()
    outcome = run_case(case)
    STATS["seconds"] += time.perf_counter() - start
    STATS["cases"] += 1
    STATS[outcome] += 1
    if outcome == "ok":
        MATCHED_OPS.add(case.op)


# ---- the properties ------------------------------------------------------------------------------


@fuzz_settings(EXAMPLES)
@given(st.data())
def test_every_binding(data):
    """Any binding of the live table, any mode."""
    execute(data.draw(cases(live_bindings())))


ORACLE_OPS = sorted({op for op, _ in live_bindings() if op in oracles.ORACLES})


@pytest.mark.parametrize("op", ORACLE_OPS, ids=[op.short_name for op in ORACLE_OPS])
@fuzz_settings(max(EXAMPLES // 5 // max(len(ORACLE_OPS), 1), 5))
@given(st.data())
def test_oracle_ops_valid_calls(op, data):
    """Valid calls only, the same number for every op that has an oracle (an op with 4 keys as
    many as CAST with 121; hypothesis, left to pick the op, clusters on a few)."""
    execute(data.draw(cases([b for b in live_bindings() if b[0] == op], modes=("valid",))))


def test_coverage_list_is_live():
    """The fuzzer draws from the snapshot, so a binding registered now is fuzzed too."""
    backend_rows = live_bindings()
    assert (fk.OpKind.CAST, (D.F32, D.F64)) in backend_rows
    assert len(backend_rows) == len({b for b in backend_rows})
    assert all(op in oracles.ORACLES for op, _ in backend_rows if op in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE))


def _simple_case(rng):
    x = guarded((4, 3), np.float32, "strided", rng)
    fill(x, random_values((4, 3), D.F32, rng, "plain"))
    out = guarded((4, 3), np.float64, "negative", rng)
    return Case(fk.OpKind.CAST, (D.F32, D.F64), "valid", "call", [x], out, out_shape=(4, 3))


def test_the_checker_catches_what_it_promises(rng):
    """The properties are not vacuous: a fake kernel that misbehaves is caught every way."""
    def partial(inputs, out, params):
        out[0, 0] = 1.0
        raise fk.ShapeError("fails after writing")

    def outside(inputs, out, params):
        out[...] = inputs[0]
        np.ndarray((1,), np.uint8, buffer=case.output.root, offset=0)[0] ^= 0xFF
        return out

    def untyped(inputs, out, params):
        raise IndexError("not a FuelKernelError")

    def wrong(inputs, out, params):
        out[...] = inputs[0] + 1
        return out

    def into_input(inputs, out, params):
        out[...] = inputs[0]
        inputs[0][0, 0] = 5
        return out

    for fake, message in ((partial, "partial write"), (outside, "outside the output"),
                          (untyped, "untyped exception"), (wrong, "mismatch"),
                          (into_input, "an input changed")):
        case = _simple_case(rng)
        with pytest.raises(AssertionError, match=message):
            run_case(case, call=fake)
    case = _simple_case(rng)
    assert run_case(case, call=lambda inputs, out, params: np.copyto(out, inputs[0]) or out) == "ok"
