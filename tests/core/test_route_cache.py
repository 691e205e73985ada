"""The route picker's on-disk caches and its pricing of alternatives.

A corrupt machine.json or measured_routes.json is ignored with a CacheWarning and re-measured,
never an AttributeError or ZeroDivisionError.  An alternative registered without a cost is priced
by the op family's default and ranks after every priced alternative, so it cannot win at 0 ns.
Every test points the cache at a temporary folder."""
import json
import os

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch, route
from fuel_kernel import graph as fg
from fuel_kernel.records import CostEstimate, PrecisionGuarantee
from fuel_kernel.types import KernelCaps

F32, F64 = fk.DType.F32, fk.DType.F64
CPU = fk.Backend.CPU


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FUEL_KERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(route, "_machine", None)
    return tmp_path


@pytest.fixture
def fixed_machine(monkeypatch):
    monkeypatch.setattr(route, "_machine", route.MachineConstants(1e10, 1e10))


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


# ---- machine.json --------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [
    "[]",
    "not json",
    "null",
    json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 0, "bandwidth": 1e10}),
    json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 1e10, "bandwidth": -1}),
    json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": "fast", "bandwidth": 1e10}),
    json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 1e10}),
    json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 1e10, "bandwidth": [1]}),
], ids=["list", "not-json", "null", "zero-peak", "negative-bandwidth", "string", "missing", "list-value"])
def test_corrupt_machine_cache_is_ignored_and_remeasured(cache_dir, content):
    path = os.path.join(cache_dir, "machine.json")
    _write(path, content)
    with pytest.warns(route.CacheWarning):
        machine = route.machine_constants()
    assert machine.peak_flops > 0 and machine.bandwidth > 0
    with open(path) as handle:
        rewritten = json.load(handle)
    assert rewritten["format"] == route.MACHINE_FORMAT and rewritten["peak_flops"] > 0
    # and the picker works on the re-measured constants
    assert fk.bindings().pick(fk.OpKind.CAST, [F32, F64], CPU, [(10,), (10,)]).source


def test_machine_cache_from_an_older_format_is_remeasured_quietly(cache_dir, recwarn):
    _write(os.path.join(cache_dir, "machine.json"), json.dumps({"format": 1, "peak_flops": 0}))
    machine = route.machine_constants()
    assert machine.peak_flops > 0
    assert not [w for w in recwarn if issubclass(w.category, route.CacheWarning)]


def test_the_machine_constants_are_measured_on_one_thread(monkeypatch):
    """One core's constants, whatever the thread setting: measured on every thread of the pool and
    cached, they had priced the choices of later single-core processes."""
    best_time, seen = route._best_time, []

    def timed(fn, repeats=5):
        seen.append(fk.get_num_threads())
        return best_time(fn, repeats)
    monkeypatch.setattr(route, "_best_time", timed)
    with fk.threads(3):
        machine = route._measure_machine()
        assert fk.get_num_threads() == 3
    assert seen == [1, 1] and machine.peak_flops > 0 and machine.bandwidth > 0


def test_valid_machine_cache_is_used(cache_dir):
    _write(os.path.join(cache_dir, "machine.json"),
           json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 1.5e10, "bandwidth": 2.5e10}))
    assert route.machine_constants() == route.MachineConstants(1.5e10, 2.5e10)


def test_graph_compiles_with_a_zero_peak_in_the_cache(cache_dir):
    _write(os.path.join(cache_dir, "machine.json"),
           json.dumps({"format": route.MACHINE_FORMAT, "peak_flops": 0, "bandwidth": 0}))
    g = fg.Graph()
    x = g.input((4,), F32)
    with pytest.warns(route.CacheWarning):
        plan = g.compile(g.neg(x))
    np.testing.assert_array_equal(plan.run([np.ones(4, np.float32)]), -np.ones(4, np.float32))


# ---- measured_routes.json -------------------------------------------------------------------------
def _fresh_key_with(copy_source, neg_source, neg_revision):
    """Yields a fresh runtime fused key holding CONTIGUIZE's f32 kernel under `copy_source`
    (revision 1) and NEG's under `neg_source`, equally priced; drops the key after."""
    t = fk.bindings()
    copy = t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU).capsule()
    other = t.lookup(fk.OpKind.NEG, [F32, F32], CPU).capsule()
    fused = fk.new_runtime_fused_id()
    key = fk.BindingKey.runtime_fused(fused)
    with fk.edit_bindings() as tx:
        tx.register(key, [F32, F32], CPU, copy, source=copy_source, revision=1, cost=_dispatch.DEFAULT_COST)
        tx.register(key, [F32, F32], CPU, other, source=neg_source, revision=neg_revision, cost=_dispatch.DEFAULT_COST)
    yield key
    with fk.edit_bindings() as tx:
        tx.drop_runtime_fused(fused)


@pytest.fixture
def two_copy_alternatives():
    """A fresh runtime fused key with two priced f32 -> f32 alternatives; dropped after."""
    yield from _fresh_key_with("zeta", "alpha", 2)


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", "7"])
def test_corrupt_measured_route_cache_is_ignored_and_remeasured(cache_dir, two_copy_alternatives, content):
    path = os.path.join(cache_dir, "measured_routes.json")
    _write(path, content)
    with pytest.warns(route.CacheWarning):
        chosen = fk.bindings().pick(two_copy_alternatives, [F32, F32], CPU, [(64,), (64,)], measure=True)
    assert chosen.source in ("alpha", "zeta")
    with open(path) as handle:
        rewritten = json.load(handle)
    assert isinstance(rewritten, dict) and len(rewritten) == 1


def test_measured_route_entry_with_bad_timings_is_remeasured(cache_dir, two_copy_alternatives):
    t = fk.bindings()
    t.pick(two_copy_alternatives, [F32, F32], CPU, [(64,), (64,)], measure=True)
    path = os.path.join(cache_dir, "measured_routes.json")
    with open(path) as handle:
        cache = json.load(handle)
    (key,) = cache
    for bad in ([1, 2], {}, {name: "slow" for name in cache[key]}):
        _write(path, json.dumps({key: bad}))
        with pytest.warns(route.CacheWarning):
            assert t.pick(two_copy_alternatives, [F32, F32], CPU, [(64,), (64,)], measure=True).source
        with open(path) as handle:
            assert all(isinstance(v, float) for v in json.load(handle)[key].values())


def test_a_measurement_at_one_thread_count_does_not_decide_another(cache_dir, two_copy_alternatives):
    """The measured cache keys on the thread setting: timings at one thread priced the choice at
    16, where the candidates' threads behave otherwise."""
    t = fk.bindings()
    with fk.threads(1):
        t.pick(two_copy_alternatives, [F32, F32], CPU, [(64,), (64,)], measure=True)
    with fk.threads(2):
        t.pick(two_copy_alternatives, [F32, F32], CPU, [(64,), (64,)], measure=True)
    with open(os.path.join(cache_dir, "measured_routes.json")) as handle:
        keys = [json.loads(key) for key in json.load(handle)]
    assert sorted(key[-1] for key in keys) == [1, 2]


def test_a_measurement_interleaves_the_candidates(monkeypatch):
    """Each round times every candidate once, so a burst of load falls on all of them."""
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    times = route._measure_interleaved(runs, rounds=3)
    assert calls == ["a", "b"] * 4 and set(times) == {"a", "b"}
    assert all(np.isfinite(v) and v > 0 for v in times.values())


@pytest.fixture
def blas_and_pool_alternatives():
    """A fresh runtime fused key with two equally priced alternatives, one under the source of a
    kernel that runs its own threads (spec.OWN_THREAD_SOURCES) and one that does not."""
    assert fk.spec.OWN_THREAD_SOURCES == ("blas",)
    yield from _fresh_key_with("blas", "zeta", 1)


@pytest.mark.parametrize("measure", [False, True])
def test_own_thread_kernels_rank_after_the_pools_with_more_than_one_thread(cache_dir, blas_and_pool_alternatives,
                                                                          measure):
    """On one thread 'blas' competes (the estimates' tie goes to it by name, or it is timed); on
    more, OpenBLAS's threads would spin on the cores the pool's next job needs, so 'zeta' is chosen
    and 'blas' is not even timed."""
    t = fk.bindings()
    alternatives = t.alternatives(blas_and_pool_alternatives, [F32, F32], CPU)
    with fk.threads(1):
        alone = route.pick(alternatives, [(64,), (64,)], measure=measure)
    if measure:
        assert all("measured" in v.verdict for v in alone.verdicts)
    else:
        assert alone.kernel.source == "blas"
    with fk.threads(2):
        choice = route.pick(alternatives, [(64,), (64,)], measure=measure)
    assert choice.kernel.source == "zeta"
    (blas,) = [v for v in choice.verdicts if v.source == "blas"]
    assert blas.verdict.startswith("slower") and "own threads" in blas.verdict and "measured" not in blas.verdict


def test_own_thread_kernels_are_chosen_where_nothing_else_serves(fixed_machine, blas_and_pool_alternatives):
    t = fk.bindings()
    alternatives = [k for k in t.alternatives(blas_and_pool_alternatives, [F32, F32], CPU) if k.source == "blas"]
    assert len(alternatives) == 1
    with fk.threads(2):
        assert route.pick(alternatives, [(64,), (64,)]).kernel.source == "blas"


# ---- unpriced alternatives -------------------------------------------------------------------------
def test_unpriced_alternative_does_not_beat_a_priced_one(cache_dir):
    """'alpha' is registered without a cost and would win at 0 ns (and on the name tie-break);
    priced by the family default it ranks after the priced 'zeta'."""
    t = fk.bindings()
    copy = t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU).capsule()
    other = t.lookup(fk.OpKind.NEG, [F32, F32], CPU).capsule()
    fused = fk.new_runtime_fused_id()
    key = fk.BindingKey.runtime_fused(fused)
    with fk.edit_bindings() as tx:
        tx.register(key, [F32, F32], CPU, copy, source="zeta", revision=1, cost=_dispatch.DEFAULT_COST)
        tx.register(key, [F32, F32], CPU, other, source="alpha", revision=2)
    try:
        alternatives = fk.bindings().alternatives(key, [F32, F32], CPU)
        choice = route.pick(alternatives, [(1000,), (1000,)])
        assert choice.kernel.source == "zeta"
        unpriced = next(v for v in choice.verdicts if v.source == "alpha")
        assert not unpriced.priced and "unpriced" in unpriced.verdict
        assert unpriced.estimate_ns > 0
        assert unpriced.bytes_moved == 1000 * 4 * 2          # the family default, not 0
        assert fk.bindings().pick(key, [F32, F32], CPU, [(1000,), (1000,)]).source == "zeta"
    finally:
        with fk.edit_bindings() as tx:
            tx.drop_runtime_fused(fused)


class _FakeKernel:
    """Enough of a Kernel handle for route.pick."""

    def __init__(self, source, cost, revision=0, has_cost=True, precision=None, caps=KernelCaps.NONE):
        self.source = source
        self._cost = cost
        self.revision = revision
        self.has_cost = has_cost
        self.precision = precision if precision is not None else PrecisionGuarantee()
        self.caps = caps
        self.dtypes = (F32, F32)
        self.n_outputs = 1
        self.identity = (source, revision, "fake(f32, f32) on cpu")

    def cost(self, *shapes, params=None):
        return self._cost


def test_zero_cost_claim_is_treated_as_unpriced(fixed_machine):
    cheap_liar = _FakeKernel("a-liar", CostEstimate(0.0, 0.0, 0.0))
    honest = _FakeKernel("b-honest", CostEstimate(1e6, 1e6, 50.0))
    choice = route.pick([cheap_liar, honest], [(10,), (10,)])
    assert choice.kernel is honest


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), -1.0])
def test_non_finite_or_negative_cost_is_treated_as_unpriced(fixed_machine, bad):
    liar = _FakeKernel("a-liar", CostEstimate(bad, 0.0, 0.0))
    honest = _FakeKernel("b-honest", CostEstimate(1e9, 1e9, 50.0))
    assert route.pick([liar, honest], [(10,), (10,)]).kernel is honest


def test_unpriced_entries_rank_among_themselves_by_default_cost_then_tie_break(fixed_machine):
    a = _FakeKernel("b-unpriced", None, has_cost=False)
    b = _FakeKernel("a-unpriced", None, has_cost=False)
    assert route.pick([a, b], [(10,), (10,)]).kernel is b


def test_default_cost_matches_the_fill_pass():
    """route.default_cost mirrors DEFAULT_COST, the cost fill_unset_cost installs."""
    t = fk.bindings()
    copy = t.lookup(fk.OpKind.CONTIGUIZE, [F32, F32], CPU).capsule()
    fused = fk.new_runtime_fused_id()
    key = fk.BindingKey.runtime_fused(fused)
    with fk.edit_bindings() as tx:
        tx.register(key, [F32, F32], CPU, copy, source="filled", revision=1, cost=_dispatch.DEFAULT_COST)
    try:
        (k,) = fk.bindings().alternatives(key, [F32, F32], CPU)
        for shape in [(7,), (3, 5), ()]:
            assert route.default_cost(k, [shape, shape]) == k.cost(shape, shape)
    finally:
        with fk.edit_bindings() as tx:
            tx.drop_runtime_fused(fused)


def test_tie_break_does_not_use_registration_order(fixed_machine):
    cost = CostEstimate(100.0, 100.0, 50.0)
    exact = _FakeKernel("same", cost, revision=9, precision=PrecisionGuarantee(max_ulp=0))
    loose = _FakeKernel("same", cost, revision=1, precision=PrecisionGuarantee(max_ulp=4))
    assert route.pick([loose, exact], [(10,), (10,)]).kernel is exact
    assert route.pick([exact, loose], [(10,), (10,)]).kernel is exact
    one = _FakeKernel("same", cost, revision=1)
    two = _FakeKernel("same", cost, revision=2)
    assert route.pick([two, one], [(10,), (10,)]).kernel is one
    assert route.pick([one, two], [(10,), (10,)]).kernel is one


@pytest.mark.parametrize("max_ulp", ["1", -1, float("nan"), True, [1]])
def test_bad_precision_floor_is_a_params_error(max_ulp):
    with pytest.raises(fk.ParamsError):
        fk.bindings().pick(fk.OpKind.CAST, [F32, F64], CPU, [(10,), (10,)], max_ulp=max_ulp)
    g = fg.Graph()
    x = g.input((3,), F32)
    with pytest.raises(fk.ParamsError):
        g.compile(g.neg(x), max_ulp=max_ulp)


def test_precision_floor_still_filters():
    assert fk.bindings().pick(fk.OpKind.CAST, [F32, F64], CPU, [(10,), (10,)], max_ulp=0).source


def test_cache_folder_is_read_when_used_and_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FUEL_KERNEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert route.cache_dir() == str(tmp_path / "xdg" / "fuel_kernel")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert route.cache_dir() == str(tmp_path / "home" / ".cache" / "fuel_kernel")
    monkeypatch.setenv("FUEL_KERNEL_CACHE_DIR", str(tmp_path / "explicit"))
    assert route.cache_dir() == str(tmp_path / "explicit")


def test_machine_constants_land_in_the_folder_named_at_use(cache_dir):
    route.machine_constants()
    assert (cache_dir / "machine.json").exists()
