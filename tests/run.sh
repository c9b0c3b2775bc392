#!/usr/bin/env bash
# make test: the unit tests of common/, the check that the two servers stay
# twins, a short fuzzing run of the message decoder, the end-to-end tests on
# a real Soft-RoCE device (scripts/soft-roce.sh brings one up, here or in a
# VM), then server and client on two VMs joined by one cable, with every
# packet checked (tests/wire.sh).
# Ends with the line "N passed, N failed"; exits non-zero if anything failed
# or if the Soft-RoCE tests could not run: they are never skipped.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed_runs=0

# run NAME CMD...: CMD's PASS/FAIL lines count; if it fails without saying
# which test failed (it crashed, or the VM did), that is a failure too.
run() {
	local name=$1 status=0 before
	shift
	before=$(grep -c '^FAIL ' "$log" || true)
	"$@" 2>&1 | tee -a "$log" || status=$?
	if [ "$status" != 0 ] && [ "$(grep -c '^FAIL ' "$log" || true)" = "$before" ]; then
		echo "FAIL $name: exited with status $status before its tests reported (see above)"
		failed_runs=$((failed_runs + 1))
	fi
}

run unit "$top/tests/unit_common"
run twins "$top/tests/twins.sh"
run fuzz "$top/tests/fuzz.sh" "${FUZZER:-$top/build/fuzz_ctrl_msg}" "${FUZZ_SECONDS:-20}"
run e2e "$top/scripts/soft-roce.sh" "$top/tests/e2e.sh"
run wire "$top/tests/wire.sh"

passed=$(grep -c '^PASS ' "$log" || true)
failed=$(($(grep -c '^FAIL ' "$log" || true) + failed_runs))
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
