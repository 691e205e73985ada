#!/usr/bin/env bash
# Build fuel_kernel capped at x86-64-v3 (FUEL_KERNEL_MAX_ISA: no AVX-512 or AMX form) in a scratch
# copy of this tree and run the vector-form tests under it, so that an AVX-512 machine checks the
# AVX2 forms an AVX2-only CPU runs: their bits against the portable functions and their claims
# against the oracles.  On a CPU without AVX2 the capped build runs the baseline forms instead.
#
#   tools/isa_check.sh                     # the vector-form tests (elementwise, norms, casts)
#   tools/isa_check.sh -n auto             # pytest options (the same tests)
#   tools/isa_check.sh tests/cpu/norm      # other tests
#   FK_ISA_DIR=/tmp/x FK_ISA_REUSE=1 tools/isa_check.sh ...   # reuse an existing build
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${FK_ISA_DIR:-/tmp/fuel_kernel-isa-v3}"
python="${PYTHON:-python}"

# shellcheck source=tools/scratch_build.sh
source "$here/tools/scratch_build.sh"
if [[ "${FK_ISA_REUSE:-0}" != "1" || ! -d "$scratch/fuel_kernel" ]]; then
    scratch_build "$here" "$scratch" isa_check "$python" FUEL_KERNEL_MAX_ISA=x86-64-v3
fi

# the cap must have taken: no module holds an AVX-512 clone
for module in "$scratch"/fuel_kernel/cpu/_*.so; do
    if nm "$module" | grep -q 'arch_x86_64_v4'; then
        echo "isa_check: $module holds x86-64-v4 clones: the build is not capped" >&2
        exit 1
    fi
done

export PYTHONPATH="$scratch${PYTHONPATH:+:$PYTHONPATH}"
export FUEL_KERNEL_MAX_ISA=x86-64-v3   # tests that check an AVX-512 form's own behaviour skip it
(cd "$scratch" && "$python" -c "
import fuel_kernel, fuel_kernel._dispatch as d, os, sys
assert os.path.realpath(d.__file__).startswith(os.path.realpath(sys.argv[1])), d.__file__
" "$scratch") || { echo "isa_check: fuel_kernel did not import from $scratch" >&2; exit 1; }
# the pytest arguments given, and the vector-form tests where they name no test path
args=("$@")
[[ " $* " == *" tests"* ]] || args+=(tests/cpu/elementwise tests/cpu/test_vectorized.py tests/cpu/norm
                                    tests/cpu/norm_backward tests/cpu/cast)
(cd "$scratch" && "$python" -m pytest -q -p no:cacheprovider "${args[@]}")
echo "isa_check: the x86-64-v3 forms pass"
