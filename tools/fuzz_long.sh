#!/usr/bin/env bash
# The long fuzz mode spread over N processes: each runs the fuzz properties (tests/properties/test_fuzz.py,
# including the adversarial-layout modes) with its own hypothesis seed and its share of the cases,
# then the counts are added up.  Exit non-zero if any process failed or crashed.
#
#   tools/fuzz_long.sh [CASES] [PROCESSES]      # defaults: 100000 cases, every CPU
#
# Run from a built tree (pip install -e . or setup.py build_ext --inplace); PYTHON picks the interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
cases="${1:-100000}"
procs="${2:-$(nproc)}"
per=$(( (cases + procs - 1) / procs ))
logs="$(mktemp -d)"
echo "fuzz_long: $procs processes x $per cases (logs in $logs)"
for i in $(seq 1 "$procs"); do
    FUEL_KERNEL_FUZZ_LONG=1 FUEL_KERNEL_FUZZ_EXAMPLES="$per" "${PYTHON:-python3}" -m pytest -q -s -p no:cacheprovider \
        --hypothesis-seed="$i" tests/properties/test_fuzz.py -k "test_every_binding" > "$logs/$i.log" 2>&1 &
done
failed=0
for job in $(jobs -p); do wait "$job" || failed=1; done
total=0
for i in $(seq 1 "$procs"); do
    line="$(grep -E '^fuzz: [0-9]+ cases' "$logs/$i.log" | tail -1)"
    echo "  seed $i: ${line:-no summary (crashed?)}; $(tail -1 "$logs/$i.log")"
    n="$(sed -E 's/^fuzz: ([0-9]+) cases.*/\1/' <<< "$line")"
    total=$(( total + ${n:-0} ))
done
echo "fuzz_long: $total cases in all"
exit "$failed"
