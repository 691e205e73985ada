#!/usr/bin/env bash
# Build fuel_kernel with AddressSanitizer + UndefinedBehaviorSanitizer in a scratch copy of this
# tree and run the test suite (or the pytest arguments given) under it; exit non-zero on any
# sanitizer report or test failure.
#
#   tools/sanitize.sh                      # whole suite
#   tools/sanitize.sh tests/properties/test_fuzz.py   # a subset (any pytest arguments)
#   FK_SANITIZE_DIR=/tmp/x FK_SANITIZE_REUSE=1 tools/sanitize.sh ...   # reuse an existing build
#   FK_SANITIZERS=thread tools/sanitize.sh tests/core/test_threads.py   # ThreadSanitizer instead
#
# ThreadSanitizer checks the pool and the shared GEMM's atomics (it cannot be combined with ASan).
# It needs the address space laid out without randomization (setarch -R); races with a frame in
# NumPy's OpenBLAS are suppressed (its threads, which follow the thread setting, hand work over with
# spin flags TSan cannot see, as it is not instrumented); and a child forked from a threaded parent
# may not start threads under it, so the fork tests are deselected in that mode.
# It is about 20 times slower than a plain run: point it at the threaded tests, not the suite.
#
# CPython itself is not instrumented, so the gcc ASan/UBSan runtimes are LD_PRELOADed into the
# interpreter.  Leak detection is off: CPython keeps interned objects and arenas alive until exit
# by design, and the table's own C allocations are checked exactly by tests/core/test_leaks.py through
# allocated_bytes() and tracemalloc instead.  Reports go to per-process log files (subprocesses
# such as the coverage CLI tests inherit the environment), and any log file fails the run.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${FK_SANITIZE_DIR:-/tmp/fuel_kernel-sanitize}"
sanitizers="${FK_SANITIZERS:-address,undefined}"
python="${PYTHON:-python}"
# the interpreter itself, not a wrapper script (a shell under a preloaded TSan runtime crashes)
python="$("$python" -c 'import sys; print(sys.executable)')"

# shellcheck source=tools/scratch_build.sh
source "$here/tools/scratch_build.sh"
if [[ "${FK_SANITIZE_REUSE:-0}" != "1" || ! -d "$scratch/fuel_kernel" ]]; then
    scratch_build "$here" "$scratch" sanitize "$python" FUEL_KERNEL_SANITIZE="$sanitizers"
fi

# the build must be instrumented: the core names libasan (libtsan) among its needed libraries.  readelf
# reads the file itself (ldd would also list the runtimes preloaded below, and a `ldd | grep -q`
# pipeline can fail under pipefail when grep exits before ldd has written everything)
needed="$(readelf -d "$scratch"/fuel_kernel/_dispatch*.so)"
if [[ "$sanitizers" == *address* && "$needed" != *"libasan"* || "$sanitizers" == thread && "$needed" != *"libtsan"* ]]; then
    echo "sanitize: the build is not instrumented" >&2
    exit 1
fi

logs="$scratch/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
preload=""
runtimes="libasan.so libubsan.so"
[[ "$sanitizers" == thread ]] && runtimes="libtsan.so"
for runtime in $runtimes; do
    path="$(gcc -print-file-name=$runtime)"
    [[ -f "$path" ]] || { echo "sanitize: gcc has no $runtime (install gcc's sanitizer runtimes)" >&2; exit 2; }
    preload="$preload $path"
done
export LD_PRELOAD="$preload"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:allocator_may_return_null=1:log_path=$logs/asan:${ASAN_OPTIONS_EXTRA:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87:log_path=$logs/ubsan"
export TSAN_OPTIONS="halt_on_error=1:exitcode=88:log_path=$logs/tsan:${TSAN_OPTIONS_EXTRA:-}"
launcher=()
pytest_extra=()
if [[ "$sanitizers" == thread ]]; then
    launcher=(setarch -R)
    printf 'race:libscipy_openblas\n' > "$scratch/tsan.supp"
    TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$scratch/tsan.supp"
    pytest_extra=(-k "not fork")
fi
export PYTHONPATH="$scratch${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONMALLOC=malloc              # pymalloc arenas would hide Python-object overruns from ASan
export FUEL_KERNEL_SANITIZED=1         # tests skip RSS thresholds: ASan's quarantine holds freed memory

# the run must use the instrumented scratch build, not an installed or in-place copy
(cd "$scratch" && "${launcher[@]}" "$python" -c "
import fuel_kernel, fuel_kernel._dispatch as d, os, sys
assert os.path.realpath(d.__file__).startswith(os.path.realpath(sys.argv[1])), d.__file__
" "$scratch") || { echo "sanitize: fuel_kernel did not import from $scratch" >&2; exit 1; }

status=0
(cd "$scratch" && "${launcher[@]}" "$python" -m pytest -q -p no:cacheprovider "${pytest_extra[@]}" "${@:-tests}") || status=$?
# Tests ask for impossible scratch sizes on purpose (the kernel must report KernelMemoryError when
# malloc returns NULL); ASan logs each such request as a warning.  A log holding nothing else is
# not a finding.
for log in "$logs"/*; do
    [[ -e "$log" ]] || continue
    if ! grep -v -e 'WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]* bytes' -e '^[[:space:]]*$' "$log" > /dev/null; then
        rm -f "$log"
    fi
done
if compgen -G "$logs/*" > /dev/null; then
    echo "sanitize: sanitizer reports:" >&2
    cat "$logs"/* >&2
    exit 1
fi
if [[ $status -ne 0 ]]; then
    echo "sanitize: tests failed (exit $status)" >&2
    exit $status
fi
echo "sanitize: no sanitizer report; tests passed"
