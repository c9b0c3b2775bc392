#!/usr/bin/env bash
# make test: the unit tests of common/, the check that the two servers stay
# twins, a short fuzzing run of the message decoder, what scripts/deps.sh
# and make doctor would do on each supported system, the end-to-end tests
# on a real Soft-RoCE device (tests/host-mode.sh: make demo and tests/e2e.sh
# as on a learner's machine), the VMs stopped by signals
# (tests/vm-interrupt.sh), then server and client on two VMs joined by one
# cable, with every packet checked (tests/wire.sh).
# Every test tests/plan.txt names must report.  Ends with the line "N
# passed, N failed"; exits non-zero if anything failed or if the Soft-RoCE
# tests could not run: they are never skipped.  A test
# that cannot run for this user (it needs root) says SKIP and why; under CI
# (CI set), where everything runs as root, each test skipped counts as a
# failure.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/rdma-lib.sh
. "$top/scripts/rdma-lib.sh"
# shellcheck source=scripts/system-lib.sh
. "$top/scripts/system-lib.sh"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed_runs=0 stage_sid='' skipped=''

# on_signal SIG: every process of the stage that runs gets SIGTERM, which
# its scripts turn into stopping their VMs and removing their devices (30
# s for that at most); then this run's log goes too (stop_on_signals).
on_signal() {
	echo "run: SIG$1: stopping the stage that runs" >&2 || exec 2>/dev/null
	[ -z "$stage_sid" ] || stop_session "$stage_sid" 30
	rm -f "$log"
}
stop_on_signals on_signal

# run NAME CMD...: CMD's PASS/FAIL lines count; if it fails without saying
# which test failed (it crashed, or the VM did), that is a failure too.  A
# stage ends with "STAGE: N passed, N failed", counting every PASS and FAIL
# line it printed: without it the stage stopped before its end, and with
# other numbers some of its tests did not report; either is a failure,
# whatever its exit status.
run() {
	local name=$1 status=0 before lines out summary p f
	shift
	before=$(grep -c '^FAIL ' "$log" || true)
	lines=$(wc -l <"$log")
	# In the background, so that a signal's trap runs at once, and in a
	# session of its own, which on_signal stops whole.  Not being a process
	# group leader here, setsid makes no new process: $! is the session's
	# ID.
	# shellcheck disable=SC2016 # expanded by that bash
	setsid bash -c 'set -o pipefail; "${@:2}" 2>&1 | tee -a "$1"' \
		stage "$log" "$@" &
	stage_sid=$!
	wait "$stage_sid" || status=$?
	stage_sid=
	if [ "$status" != 0 ] && [ "$(grep -c '^FAIL ' "$log" || true)" = "$before" ]; then
		echo "FAIL $name: exited with status $status before its tests reported (see above)"
		failed_runs=$((failed_runs + 1))
		return
	fi
	out=$(tail -n "+$((lines + 1))" "$log")
	summary=$(grep -E '^[a-z0-9_]+: [0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -n 1 || true)
	p=$(grep -c '^PASS ' <<<"$out" || true)
	f=$(grep -c '^FAIL ' <<<"$out" || true)
	if [ -z "$summary" ]; then
		echo "FAIL $name: it ended without its summary line (STAGE: N passed, N failed): not all of its tests ran"
		failed_runs=$((failed_runs + 1))
	elif [ "${summary#*: }" != "$p passed, $f failed" ]; then
		echo "FAIL $name: its summary says '$summary', but it printed $p PASS and $f FAIL lines: not all of its tests reported"
		failed_runs=$((failed_runs + 1))
	fi
	check_plan "$name" "$out"
}

# check_plan STAGE OUTPUT: every test tests/plan.txt names for STAGE
# reported PASS, FAIL or SKIP, and STAGE reported no test the plan lacks.
# A SKIP of a/b stands for every a/b/... the plan names, each one counted
# and named in the summary as skipped.  A stage that stopped early, or a
# test left out by a change, fails here by name.
check_plan() {
	local stage=$1 reported planned missing extra
	reported=$(sed -nE 's/^(PASS|FAIL|SKIP) ([^ :]+).*/\1 \2/p' <<<"$2" | sort -u)
	planned=$(awk -v s="$stage" '$1 == s { print $2 }' "$top/tests/plan.txt")
	missing=$(awk 'NR == FNR { if ($1 == "SKIP") skip[$2]; else seen[$2]; next }
		{ name = $0
		  if (name in seen) next
		  for (p = name; ; sub("/[^/]*$", "", p)) {
			if (p in skip) { print "skipped", name; next }
			if (p !~ "/") break
		  }
		  print "missing", name }' <(echo "$reported") <(echo "$planned") | sed '/^$/d')
	skipped+=$(sed -n 's/^skipped /  /p' <<<"$missing")${missing:+$'\n'}
	missing=$(sed -n 's/^missing //p' <<<"$missing")
	extra=$(awk 'NR == FNR { planned[$1]; for (p = $1; sub("/[^/]*$", "", p); ) group[p]; next }
		!($2 in planned) && !($1 == "SKIP" && $2 in group) { print $2 }' \
		<(echo "$planned") <(echo "$reported") | sed '/^$/d')
	if [ -n "$missing" ]; then
		echo "FAIL $stage: $(wc -l <<<"$missing") of the tests tests/plan.txt names for it did not report: $(head -n 5 <<<"$missing" | paste -sd' ')"
		failed_runs=$((failed_runs + 1))
	fi
	if [ -n "$extra" ]; then
		echo "FAIL $stage: tests that tests/plan.txt does not name (add them there): $(head -n 5 <<<"$extra" | paste -sd' ')"
		failed_runs=$((failed_runs + 1))
	fi
}

# A report that blocks would hang: a timeout makes that a failure.
run unit timeout 60 "$top/tests/unit_common"
# Its bug was a loop that never ended: a timeout makes that a failure.
run unit_client timeout 60 "$top/tests/unit_client"
run twins "$top/tests/twins.sh"
run fuzz "$top/tests/fuzz.sh" "${FUZZER:-$top/build/fuzz_ctrl_msg}" "${FUZZ_SECONDS:-20}"
run systems "$top/tests/systems.sh"
# On a machine that can run Soft-RoCE itself (an RDMA device, or rdma_rxe
# in its kernel, installed first where a package of this system adds it,
# as make demo does), here; else in a VM whose kernel can, standing in for
# one, saying why.
if [ -z "$(active_ports)" ] && [ "$(rxe_module)" = none ] && [ "$(id -u)" = 0 ]; then
	"$top/scripts/deps.sh" rxe || true
fi
if [ -n "$(active_ports)" ] || [ "$(rxe_module)" != none ]; then
	run e2e "$top/tests/host-mode.sh"
else
	echo "e2e: in a VM: no RDMA device here, and this kernel ($(uname -r)) has no rdma_rxe module"
	# The stage took 25 minutes in an emulated (TCG) VM beside other VMs,
	# and the sanitizers slow it further: an hour at most, not vm-run.sh's
	# default half hour.
	run e2e env VM_PASS_ENV="SANITIZE CI" VM_TIMEOUT="${VM_TIMEOUT:-3600}" \
		"$top/scripts/vm-run.sh" "$top/tests/host-mode.sh"
fi
# Cut short by Ctrl-C, SIGTERM or SIGHUP, the VMs leave nothing behind.
run vm_interrupt "$top/tests/vm-interrupt.sh"
run wire "$top/tests/wire.sh"

passed=$(grep -c '^PASS ' "$log" || true)
failed=$(($(grep -c '^FAIL ' "$log" || true) + failed_runs))
skipped=$(sed '/^$/d' <<<"$skipped")
if [ -n "$skipped" ]; then
	echo "$(wc -l <<<"$skipped") skipped:"
	echo "$skipped"
	echo "by these lines:"
	grep '^SKIP ' "$log" | sed 's/^/  /'
	if [ -n "${CI:-}" ]; then
		echo "under CI nothing may be skipped: each test skipped counts as a failure"
		failed=$((failed + $(wc -l <<<"$skipped")))
	fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
