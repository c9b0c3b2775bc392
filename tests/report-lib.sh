# shellcheck shell=bash
# report-lib.sh: how every stage of make test reports its tests, in the
# lines tests/run.sh counts and checks against tests/plan.txt:
#   PASS NAME [Ns]               a test passed (N: the stage's seconds so far,
#                                to see where the time goes)
#   FAIL NAME: WHY [Ns]          a test failed, and why
#   STAGE: N passed, N failed    the stage's last line (report_end STAGE)
# A stage that sets report_prefix before sourcing this reports its tests as
# PREFIXNAME; one that defines on_fail has it run after each FAIL line (to
# show what the programs said).  signal_job stops a job a test started, as
# a terminal or kill would, once wait_until has seen it get where it
# should; when_finished names what a test must undo.
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

# signal_job PID group|alone SIG SECONDS: SIG to the job PID (started under
# set -m: a process group of its own) or to its whole group, as a terminal
# sends Ctrl-C; then up to SECONDS for it to end.  Sets job_status to its
# exit status; false if it was still running, and was then killed.
# shellcheck disable=SC2034 # job_status is the caller's
signal_job() {
	local pid=$1 i
	job_status=0
	{ # (stderr away: bash reports a job of set -m killed by a signal)
		if [ "$2" = group ]; then
			kill -s "$3" -- "-$pid"
		else
			kill -s "$3" "$pid"
		fi
		for ((i = 0; i < $4 * 10; i++)); do
			kill -0 "$pid" || break
			sleep 0.1
		done
		if kill -0 "$pid"; then
			kill -KILL -- "-$pid"
			wait "$pid" || true
			return 1
		fi
		wait "$pid" || job_status=$?
	} 2>/dev/null
}

# wait_until PID SECONDS CMD...: true once CMD is, false if the job PID
# ends first, or SECONDS pass.
wait_until() {
	local pid=$1 i
	for ((i = 0; i < $2 * 10; i++)); do
		"${@:3}" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# when_finished CMD: CMD (a line of shell) undoes what the test just made;
# finish runs the test's CMDs, the last first, once it ends, and a test
# script's signal handler runs them when it is stopped midway (git's
# test_when_finished).
finish_cmds=''
when_finished() {
	finish_cmds="$1; $finish_cmds"
}

finish() {
	local cmds=$finish_cmds
	finish_cmds=''
	eval "$cmds" || true
}
