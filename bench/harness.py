"""The benchmark harness: cases with contenders, timed in one run, reported as ratios.

A benchmark module under bench/ (bench_*.py) defines cases() yielding Case objects.  Each case
names a baseline contender (usually NumPy) and any number of others.  A contender is a callable,
or a statement string run by timeit against the case's namespace (no wrapper call, which matters
for sub-microsecond calls); a peer whose package is not
installed is listed in `skipped` with the reason instead.  The runner (python -m bench) times every
contender in the same process, interleaving repeats so machine noise hits all of them alike, and
prints one table of best times and ratios to the baseline (ratio < 1 = faster than the baseline).
"""
import gc
import importlib
import time
from dataclasses import dataclass, field
import timeit
from typing import Callable, Dict, Optional, Tuple, Union


@dataclass
class Case:
    name: str
    contenders: Dict[str, Union[str, Callable[[], object]]]
    baseline: str
    target: str = ""                     # the performance goal, e.g. "fuel_kernel <= 1.05x numpy"
    skipped: Dict[str, str] = field(default_factory=dict)
    setup: Optional[Callable[[], None]] = None
    namespace: Dict[str, object] = field(default_factory=dict)   # globals for string contenders
    notes: str = ""                      # facts measured without timing (e.g. peak memory)
    # A contender that runs a counted loop of n operations per call lists n here; its time is then
    # reported per operation, so a C loop and a single Python call compare in the same unit.
    items: Dict[str, int] = field(default_factory=dict)
    # What one call does, as (amount, unit): the runner also prints amount / time, e.g. (1, "tokens")
    # prints tokens/s and (bytes / 1e9, "GB") GB/s.
    rate: Optional[Tuple[float, str]] = None


def optional_import(name):
    """(module, None) if `name` imports, else (None, reason)."""
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # any failure means the peer is unavailable here
        return None, f"{name} not installed ({type(exc).__name__})"


def torch_view(torch, array):
    """A PyTorch tensor over the NumPy array's own memory, so both libraries read and write the same
    buffers (BF16 through an int16 view: torch.from_numpy does not take ml_dtypes' bfloat16)."""
    import ml_dtypes
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def case_with_peer(name, contenders, target, peer_label, peer_call, peer_missing, skipped=None):
    """A Case timed against its first contender, plus the optional peer package's contender
    `peer_label`: peer_call, or, when the package is not importable (peer_call None), peer_missing --
    (package, reason) -- listed among the skipped."""
    skipped = dict(skipped or {})
    if peer_call is not None:
        contenders[peer_label] = peer_call
    else:
        package, reason = peer_missing
        skipped[package] = reason
    return Case(name=name, contenders=contenders, baseline=next(iter(contenders)), target=target,
                skipped=skipped)


def _runner(contender, namespace):
    """A function(number) -> seconds for `number` back-to-back runs of the contender."""
    if isinstance(contender, str):
        return timeit.Timer(contender, globals=namespace).timeit

    def run(number):
        start = time.perf_counter()
        for _ in range(number):
            contender()
        return time.perf_counter() - start
    return run


def _calibrate(run, min_seconds):
    number = 1
    while True:
        elapsed = run(number)
        if elapsed >= min_seconds or number >= 1 << 24:
            return number
        number = max(number * 2, int(number * min_seconds / max(elapsed, 1e-9) * 1.2))


def time_case(case: Case, repeats=7, min_seconds=0.05):
    """Best seconds per call (per item, for contenders listed in case.items) for every contender,
    repeats interleaved across contenders."""
    if case.setup:
        case.setup()
    runners = {name: _runner(c, case.namespace) for name, c in case.contenders.items()}
    numbers = {name: _calibrate(run, min_seconds) for name, run in runners.items()}
    best = {name: float("inf") for name in runners}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, run in runners.items():
                best[name] = min(best[name], run(numbers[name]) / numbers[name])
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: seconds / case.items.get(name, 1) for name, seconds in best.items()}


def format_rate(case: Case, seconds: float) -> str:
    """The case's rate at `seconds` per call ("12.3 GB/s"), or "" for a case without one."""
    if case.rate is None:
        return ""
    amount, unit = case.rate
    return f"{amount / seconds:.4g} {unit}/s"


def format_seconds(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
