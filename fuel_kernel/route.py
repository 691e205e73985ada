"""The route picker: choose among the alternatives registered at one key, by estimated time.

For each candidate Kernel the picker turns its CostEstimate for the actual operand shapes into a
time with the machine's constants (peak flop/s and memory bandwidth, measured once and cached on
disk): max(flops / peak_flops, bytes / bandwidth) + overhead.  Candidates are filtered by caps
(requires_broadcast only when an input is broadcast; strided_input when the caller cannot
materialize operands) and by an optional precision floor.  An alternative registered without a
cost (or whose cost function gives no usable time) is priced by the op family's default, as
Transaction.fill_unset_cost would price it, and ranks after every priced alternative.  Ties break
on stable registration data (source, precision claim, caps, revision), never on registration
order or an address.  A measured mode times the candidates
on the real shapes instead and caches the choice on disk, per thread setting.  With more than one
thread, kernels that run threads of their own (spec.OWN_THREAD_SOURCES: the BLAS sibling) rank
after the rest.  Graph.compile and BindingTable.pick both call pick().
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import numpy as np

from . import spec
from .errors import NoKernelError, ParamsError
from .records import CostEstimate
from .types import DType, KernelCaps

if TYPE_CHECKING:
    from ._dispatch import Kernel, OpParams
    from .records import PrecisionGuarantee

# An operand as the picker sees it: an array, or just its shape.
Operand = Any


def cache_dir() -> str:
    """Where the route cache lives, read each time it is used (not at import):
    $FUEL_KERNEL_CACHE_DIR, else $XDG_CACHE_HOME/fuel_kernel, else ~/.cache/fuel_kernel.  It holds
    machine.json (this machine's peak flop/s and memory bandwidth, measured once) and
    measured_routes.json (measured timings of sibling kernels per shape, for pick(measure=True)).
    Deleting either is safe: it is measured again."""
    configured = os.environ.get("FUEL_KERNEL_CACHE_DIR")
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fuel_kernel")

_machine_lock = threading.Lock()
_machine: Optional[MachineConstants] = None


@dataclass(frozen=True)
class MachineConstants:
    peak_flops: float        # flop/s of one core on a large f32 matmul
    bandwidth: float         # bytes/s of one core on a large copy


MACHINE_FORMAT = 3       # bump when the measurement changes, so old caches are re-measured
# (3: measured on one thread; format 2 ran on every thread of the pool)


class CacheWarning(RuntimeWarning):
    """A cache file under cache_dir() is unreadable or corrupt; it is ignored and re-measured."""


def _warn_corrupt(path: str, why: str) -> None:
    warnings.warn(f"ignoring the route cache {path}: {why}; re-measuring", CacheWarning, stacklevel=3)


def _usable_constants(constants: MachineConstants) -> bool:
    return all(math.isfinite(v) and v > 0 for v in (constants.peak_flops, constants.bandwidth))


def _read_machine(path: str) -> Optional[MachineConstants]:
    """The cached constants, or None: silently when the file is missing or from an older format,
    with a CacheWarning when it is corrupt (not JSON, not an object, missing or non-positive
    values)."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _warn_corrupt(path, f"unreadable ({exc})")
        return None
    if not isinstance(data, dict):
        _warn_corrupt(path, f"a JSON {type(data).__name__}, not an object")
        return None
    if data.get("format") != MACHINE_FORMAT:
        return None
    try:
        constants = MachineConstants(float(data["peak_flops"]), float(data["bandwidth"]))
    except (KeyError, TypeError, ValueError) as exc:
        _warn_corrupt(path, f"bad or missing constants ({exc!r})")
        return None
    if not _usable_constants(constants):
        _warn_corrupt(path, f"constants must be finite and positive, got {constants}")
        return None
    return constants


def machine_constants() -> MachineConstants:
    """Measured once per machine (about 0.2 s) and cached in cache_dir()/machine.json."""
    global _machine
    with _machine_lock:
        if _machine is not None:
            return _machine
        folder = cache_dir()
        path = os.path.join(folder, "machine.json")
        cached = _read_machine(path)
        if cached is not None:
            _machine = cached
            return _machine
        _machine = _measure_machine()
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w") as handle:
                json.dump({"format": MACHINE_FORMAT, "peak_flops": _machine.peak_flops,
                           "bandwidth": _machine.bandwidth}, handle)
        except OSError:
            pass                      # a read-only home only costs a re-measurement next time
        return _machine


def _best_time(fn: Callable[[], object], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)            # a coarse clock can read 0; never divide by it


# Rounds of a measurement: each round times every candidate once, so a burst of load on the host
# falls on all of them rather than on one candidate's consecutive repeats.
MEASURE_ROUNDS = 5


def _measure_interleaved(runs: dict[str, Callable[[], object]], rounds: int = MEASURE_ROUNDS) -> dict[str, float]:
    """Each run's best time in ns over `rounds` rounds that call every run once, in turn, after one
    warm-up call each (scratch, pages, a BLAS library's threads)."""
    for run in runs.values():
        run()
    best = {name: math.inf for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], _best_time(run, repeats=1))
    return {name: t * 1e9 for name, t in best.items()}


def _measure_machine() -> MachineConstants:
    """One core's peak: fuel_kernel's own F32 matmul and a large F32 copy through CONTIGUIZE, both
    on one thread (fuel_kernel.threads(1) for the measurement: both kernels split over the intra-op
    pool, and constants measured on a 16-core Xeon's 16 threads, 655 GFLOP/s and 261 GB/s, were
    cached and then priced the choices of a process pinned to one core, where the core's own are
    165 GFLOP/s and 25 GB/s).  Best of several runs, after a warm-up."""
    from . import _dispatch
    from .threads import threads
    from .types import OpKind
    table = _dispatch.bindings()
    n = 384
    a = np.ones((n, n), dtype=np.float32)
    c = np.empty_like(a)
    try:
        matmul = table.lookup(OpKind.MATMUL, [DType.F32] * 3, 0)
        run_matmul: Callable[[], object] = lambda: matmul(a, a, out=c)
    except NoKernelError:
        run_matmul = lambda: np.matmul(a, a, out=c)
    src = np.ones(1 << 22, dtype=np.float32)
    dst = np.empty_like(src)
    copy = table.lookup(OpKind.CONTIGUIZE, [DType.F32, DType.F32], 0)
    with threads(1):
        run_matmul()
        flops = 2.0 * n ** 3 / _best_time(run_matmul, repeats=7)
        copy(src, out=dst)
        bandwidth = 2.0 * src.nbytes / _best_time(lambda: copy(src, out=dst), repeats=7)
    return MachineConstants(flops, bandwidth)


@dataclass
class Verdict:
    """One candidate's line in Plan.explain(): its estimate and why it won or lost."""
    source: str
    identity: tuple
    estimate_ns: Optional[float]
    verdict: str                  # "chosen", "slower", "filtered: ...", "measured ..."
    flops: float = 0.0
    bytes_moved: float = 0.0
    priced: bool = True           # False: no cost claim, estimated by the family default


@dataclass
class Choice:
    """The picker's answer: the winning Kernel and every candidate's verdict."""
    kernel: Kernel
    verdicts: List[Verdict] = field(default_factory=list)


# The share of the shorter of a kernel's two times (arithmetic, memory) that its longer one does not
# hide.  With max() alone two kernels moving the same bytes tied wherever both were memory-bound,
# however much arithmetic either did: on a 16-core Xeon's core (165 GFLOP/s against 25 GB/s copied)
# the BLAS sibling, whose 8-row products run at a fifth of the core's rate, won 8 x 2048 x 2048 from
# the native engine on its smaller call overhead and ran it 2-3x slower.
OVERLAP_SLACK = 0.1


def estimate_ns(cost: CostEstimate, machine: MachineConstants) -> float:
    """A cost claim as time: the longer of its arithmetic and memory times, a tenth of the shorter
    (OVERLAP_SLACK), and its fixed overhead."""
    compute = cost.flops / machine.peak_flops
    memory = cost.bytes_moved / machine.bandwidth
    return (max(compute, memory) + OVERLAP_SLACK * min(compute, memory)) * 1e9 + cost.overhead_ns


def _shape_of(operand: Operand) -> tuple[int, ...]:
    return tuple(operand) if isinstance(operand, tuple) else tuple(np.shape(operand))


DEFAULT_OVERHEAD_NS = 50.0


def default_cost(kernel: Kernel, shapes: Sequence[tuple[int, ...]],
                 params: Optional[OpParams] = None) -> CostEstimate:
    """The op-family default estimate, as DEFAULT_COST (the cost fill_unset_cost installs)
    computes it: every operand read or written once, one flop per output element, 2*k flops per
    output element for a matmul with params.matmul, and a 50 ns call overhead."""
    bytes_moved = 0.0
    for shape, dtype in zip(shapes, kernel.dtypes):
        numel = 1
        for extent in shape:
            numel *= int(extent)
        bytes_moved += float(numel) * DType(dtype).itemsize
    flops = 0.0
    if shapes:
        flops = 1.0
        for extent in shapes[len(shapes) - kernel.n_outputs]:      # the first output
            flops *= int(extent)
        if params is not None and getattr(params, "kind", None) == "matmul":
            flops *= 2.0 * params.fields()["k"]
    return CostEstimate(flops, bytes_moved, DEFAULT_OVERHEAD_NS)


def _priced_estimate(kernel: Kernel, shapes: Sequence[tuple[int, ...]], params: Optional[OpParams],
                     machine: MachineConstants) -> tuple[CostEstimate, float, bool]:
    """(cost, estimate in ns, priced).  An entry without a cost claim, or whose cost function
    yields no usable time (zero, negative or not finite), gets the family default and
    priced=False: it must never win at 0 ns."""
    if getattr(kernel, "has_cost", True):
        cost = kernel.cost(*shapes, params=params)
        ns = estimate_ns(cost, machine)
        if math.isfinite(ns) and ns > 0:
            return cost, ns, True
    cost = default_cost(kernel, shapes, params)
    return cost, estimate_ns(cost, machine), False


def _precision_rank(precision: Optional[PrecisionGuarantee]) -> tuple[int, float]:
    if precision is None:
        return (2, math.inf)
    return (0 if precision.exact else 1, float(precision.max_ulp))


def tie_break(kernel: Kernel) -> tuple[str, tuple[int, float], int, int]:
    """A deterministic order among equally estimated alternatives, from registration data only:
    source tag, then the stronger precision claim, then caps, then the revision.  Never the
    registration order or an address.  (A Python registration's default revision must itself be
    stable across runs for same-source ties to be.)"""
    return (kernel.source, _precision_rank(kernel.precision), int(kernel.caps), int(kernel.revision))


def pick(alternatives: Sequence[Kernel], operands: Sequence[Operand], params: Optional[OpParams] = None, *,
         broadcast_inputs: bool = False, require_strided_input: bool = False,
         max_ulp: Optional[float] = None, measure: bool = False, describe: Optional[str] = None) -> Choice:
    """Choose one of `alternatives` (Kernel handles of one key) for these operands.

    `operands` are inputs then outputs: arrays or shapes.  Priced alternatives rank before
    unpriced ones.  Raises NoKernelError when the filters leave nothing."""
    if max_ulp is not None and (isinstance(max_ulp, bool) or not isinstance(max_ulp, (int, float, np.integer, np.floating))
                                or not max_ulp >= 0):
        raise ParamsError(f"max_ulp is a non-negative number of ulps or None, not {max_ulp!r}")
    machine = machine_constants()
    shapes = [_shape_of(o) for o in operands]
    verdicts: list[Verdict] = []
    viable: list[tuple[Verdict, Kernel]] = []
    for k in alternatives:
        reason = None
        if KernelCaps.REQUIRES_BROADCAST in k.caps and not broadcast_inputs:
            reason = "filtered: requires broadcast inputs"
        elif require_strided_input and KernelCaps.STRIDED_INPUT not in k.caps:
            reason = "filtered: lacks strided_input"
        elif max_ulp is not None and (k.precision is None or k.precision.max_ulp > max_ulp):
            reason = f"filtered: precision above {max_ulp} ulp"
        if reason:
            verdicts.append(Verdict(k.source, k.identity, None, reason))
            continue
        cost, ns, priced = _priced_estimate(k, shapes, params, machine)
        verdict = Verdict(k.source, k.identity, ns, "" if priced else " (unpriced: family default)",
                          cost.flops, cost.bytes_moved, priced)
        verdicts.append(verdict)
        viable.append((verdict, k))
    if not viable:
        raise NoKernelError(f"no alternative survives the filters for {describe or 'this key'}: "
                            + "; ".join(f"{v.source}: {v.verdict}" for v in verdicts))
    viable, own_threads = _pool_first(viable)
    if measure and len(viable) > 1:
        viable = _measured_order(viable, operands, params)
    else:
        viable.sort(key=lambda vk: (not vk[0].priced, vk[0].estimate_ns, tie_break(vk[1])))
    viable += own_threads
    winner_verdict, winner = viable[0]
    winner_verdict.verdict = "chosen" + winner_verdict.verdict
    for v, _ in viable[1:]:
        v.verdict = "slower" + v.verdict
    return Choice(winner, verdicts)


def _pool_first(viable: list[tuple[Verdict, Kernel]]) -> tuple[list[tuple[Verdict, Kernel]],
                                                                list[tuple[Verdict, Kernel]]]:
    """(the candidates to rank, the ones ranked after them): with more than one thread, the
    alternatives of spec.OWN_THREAD_SOURCES go last wherever another one is viable.  Timed alone
    they can win, but OpenBLAS's threads spin after each call on the cores the pool's next job
    needs: a GPT-2 block plan at S = 512 on a 16-core Xeon's 16 threads ran in 9.6-10.6 ms on the
    native engine alone, 15.6-17.4 ms with its four products on BLAS and 26-36 ms with two of
    them (the sum of its steps timed alone 8.6-16 ms in each)."""
    from .threads import get_num_threads
    threads = get_num_threads()
    if threads <= 1:
        return viable, []
    own = [vk for vk in viable if vk[1].source in spec.OWN_THREAD_SOURCES]
    if len(own) == len(viable):
        return viable, []
    for v, _ in own:
        v.verdict = f" (runs its own threads: ranked after the pool's kernels at {threads} threads)" + v.verdict
    return [vk for vk in viable if vk[1].source not in spec.OWN_THREAD_SOURCES], own


def _measured_order(viable: list[tuple[Verdict, Kernel]], operands: Sequence[Operand],
                    params: Optional[OpParams]) -> list[tuple[Verdict, Kernel]]:
    """Order candidates by their measured time on these shapes (the best of MEASURE_ROUNDS
    interleaved rounds) at the current thread count; the result is cached on disk."""
    from .threads import get_num_threads
    shapes = [_shape_of(o) for o in operands]
    k0 = viable[0][1]
    key = json.dumps([repr(k0.op), [d.short_name for d in k0.dtypes], k0.backend, shapes,
                      sorted(str(v.identity) for v, _ in viable), repr(params), get_num_threads()])
    cache = _load_measure_cache()
    timings: Optional[dict[str, Any]] = cache.get(key)
    wanted = {str(v.identity) for v, _ in viable}
    if timings is not None and not _valid_timings(timings, wanted):
        _warn_corrupt(_measure_cache_path(), "an entry with missing or non-numeric timings")
        timings = None
    if timings is None:
        rng = np.random.default_rng(0)
        arrays = []
        for shape, dtype in zip(shapes, k0.dtypes):
            dtype = DType(dtype)
            if dtype.is_float:
                arrays.append(rng.standard_normal(shape).astype(dtype.numpy))
            else:
                arrays.append(np.zeros(shape, dtype=dtype.numpy))
        n_in = len(arrays) - k0.n_outputs
        inputs, outputs = arrays[:n_in], arrays[n_in:]
        def runner(kernel: Kernel) -> Callable[[], object]:
            return lambda: kernel.run(inputs, outputs, params)
        runs = {str(v.identity): runner(k) for v, k in viable}
        timings = _measure_interleaved(runs)
        cache[key] = timings
        _store_measure_cache(cache)
    measured: dict[str, Any] = timings
    for v, _ in viable:
        v.verdict = f" (measured {measured[str(v.identity)]:.0f} ns)" + v.verdict
    return sorted(viable, key=lambda vk: (measured[str(vk[0].identity)], tie_break(vk[1])))


def _valid_timings(timings: object, wanted: set[str]) -> bool:
    return isinstance(timings, dict) and all(
        isinstance(timings.get(name), (int, float)) and not isinstance(timings.get(name), bool)
        and math.isfinite(timings[name]) and timings[name] >= 0 for name in wanted)


def _measure_cache_path() -> str:
    return os.path.join(cache_dir(), "measured_routes.json")


def _load_measure_cache() -> dict[str, Any]:
    """The measured-route cache (a JSON object); a corrupt file is ignored with a CacheWarning
    and overwritten by the next measurement."""
    path = _measure_cache_path()
    try:
        with open(path) as handle:
            cache = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        _warn_corrupt(path, f"unreadable ({exc})")
        return {}
    if not isinstance(cache, dict):
        _warn_corrupt(path, f"a JSON {type(cache).__name__}, not an object")
        return {}
    return cache


def _store_measure_cache(cache: dict[str, Any]) -> None:
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        tmp = _measure_cache_path() + f".{os.getpid()}"
        with open(tmp, "w") as handle:
            json.dump(cache, handle)
        os.replace(tmp, _measure_cache_path())
    except OSError:
        pass
