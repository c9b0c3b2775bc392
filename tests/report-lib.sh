# shellcheck shell=bash
# report-lib.sh: how every stage of make test reports its tests, in the
# lines tests/run.sh counts and checks against tests/plan.txt:
#   PASS NAME [Ns]               a test passed (N: the stage's seconds so far,
#                                to see where the time goes)
#   FAIL NAME: WHY [Ns]          a test failed, and why
#   STAGE: N passed, N failed    the stage's last line (report_end STAGE)
# A stage that sets report_prefix before sourcing this reports its tests as
# PREFIXNAME; one that defines on_fail has it run after each FAIL line (to
# show what the programs said).
passed=0
failed=0
report_prefix=${report_prefix:-}

pass() {
	echo "PASS $report_prefix$1 [${SECONDS}s]"
	passed=$((passed + 1))
}

fail() {
	echo "FAIL $report_prefix$1: $2 [${SECONDS}s]"
	failed=$((failed + 1))
	if declare -F on_fail >/dev/null; then
		on_fail
	fi
	return 0
}

# report_end STAGE: the stage's summary line; true if nothing failed.
report_end() {
	echo "$1: $passed passed, $failed failed"
	[ "$failed" = 0 ]
}
