"""Run the benchmarks: python -m bench [--module SUBSTRING] [--only SUBSTRING] [--json PATH] [--quick].

Prints one table: case, contender, best time per call, ratio to the case's baseline (and, for a
case that states what one call does, the rate: tokens/s, GB/s).
"""
import os

# Every benchmark compares single-threaded work (bench/scaling.py measures threads): pin the
# thread pools, fuel_kernel's and the peers', before NumPy, SciPy
# or PyTorch load their BLAS (torch.set_num_threads(1) is called by the cases that use it).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "FUEL_KERNEL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402  (after the thread pinning above)
import importlib  # noqa: E402
import json  # noqa: E402
import pkgutil  # noqa: E402
import sys  # noqa: E402

from bench.harness import format_rate, format_seconds, time_case


def benchmark_modules(name_contains=""):
    """The bench_* modules whose name contains name_contains, imported in name order."""
    here = os.path.dirname(os.path.abspath(__file__))
    for info in sorted(pkgutil.iter_modules([here]), key=lambda m: m.name):
        if info.name.startswith("bench_") and name_contains in info.name:
            yield importlib.import_module(f"bench.{info.name}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--module", default="",
                        help="only the bench_* modules whose name contains this text (--only tests a case's "
                             "name after its module has built it: its arrays, and for some its PyTorch "
                             "and ONNX Runtime models, tens of seconds over all modules)")
    parser.add_argument("--only", default="", help="run cases whose name contains this text")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    repeats, min_seconds = (2, 0.01) if args.quick else (7, 0.1)
    results = []
    failed_modules = []
    modules = list(benchmark_modules(args.module))
    if not modules:
        parser.error(f"no bench_* module's name contains {args.module!r}")
    print(f"{'case':58} {'contender':28} {'time':>10} {'ratio':>8}")
    for module in modules:
        try:
            for case in module.cases():
                if args.only and args.only not in case.name:
                    continue
                results.extend(run_case(case, repeats, min_seconds))
        except Exception as exc:     # one broken module must not hide the others' figures
            failed_modules.append(module.__name__)
            print(f"{module.__name__}: failed: {type(exc).__name__}: {exc}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 1 if failed_modules else 0


def run_case(case, repeats, min_seconds):
    """Time one case, print its rows, return them as dicts."""
    rows = []
    best = time_case(case, repeats=repeats, min_seconds=min_seconds)
    base = best[case.baseline]
    for name, seconds in best.items():
        rate = format_rate(case, seconds)
        print(f"{case.name[:58]:58} {name[:28]:28} {format_seconds(seconds):>10} {seconds / base:>7.3f}x"
              + (f"  {rate}" if rate else ""))
        rows.append({"case": case.name, "contender": name, "seconds": seconds,
                     "ratio_to_baseline": seconds / base, "baseline": case.baseline,
                     "target": case.target, "notes": case.notes, **({"rate": rate} if rate else {})})
    for name, reason in case.skipped.items():
        print(f"{case.name[:58]:58} {name[:28]:28} {'skipped':>10}  {reason}")
        rows.append({"case": case.name, "contender": name, "skipped": reason})
    if case.target:
        print(f"{'':58} target: {case.target}")
    if case.notes:
        print(f"{'':58} {case.notes}")
    sys.stdout.flush()
    return rows


if __name__ == "__main__":
    sys.exit(main())
