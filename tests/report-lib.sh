# report-lib.sh: how every stage of make test reports its tests in TAP (the Test Anything
# Protocol), which prove and tests/run.sh read.  First the plan, "1..N": the N tests
# tests/plan.txt names for the stage (report_plan).  Then "ok - NAME [Ns]" (N: the stage's seconds
# so far, to see where the time goes), "not ok - NAME: WHY [Ns]", or "ok - NAME # SKIP WHY" (skip,
# not_here).  A stage that stops early, or reports another number of tests than its plan, fails
# there.  A stage sets report_stage (its name in plan.txt) and report_prefix (its tests are
# PREFIXNAME) before sourcing this; a name the plan lacks, or reported twice, fails by name.  Its
# on_fail, if any, runs after each failure (to show what the programs said).
failed=0 reported=' '
: "${report_prefix:=}" "${report_stage:=}"
report_plan_file=$(dirname "${BASH_SOURCE[0]}")/plan.txt

report_plan() { echo "1..$(grep -c "^$report_stage " "$report_plan_file")"; }

# report OK NAME[ NOTE] [WHY]: NAME's line; the plan must name it, once.
report() {
	local name=$report_prefix${2%% *}
	if [[ $reported == *" $name "* ]]; then
		set -- "not ok" "$2" "${3:+$3; }reported twice"
	elif [ "$1" = ok ] && [ -n "$report_stage" ] && ! grep -qxF "$report_stage $name" "$report_plan_file"; then
		set -- "not ok" "$2" "tests/plan.txt does not name it"
	fi
	reported+="$name "
	[ "$1" != ok ] || { echo "ok - $report_prefix$2 [${SECONDS}s]"; return; }
	# A failure's reason may hold a program's words: "#" escaped, or TAP
	# reads "# TODO" in it as a directive (and a TODO's failure as none);
	# one line, or a line of it could read as a test's.
	set -- "$report_prefix$2: $3"
	set -- "${1//$'\n'/ }"
	echo "not ok - ${1//#/\\#} [${SECONDS}s]"
	failed=$((failed + 1))
	if declare -F on_fail >/dev/null; then on_fail; fi
	return 0
}

pass() { report ok "$1"; }
fail() { report "not ok" "$1" "$2"; }
# pass_unless NAME WHY: NAME passes if WHY is empty, else fails saying WHY.
pass_unless() { if [ -n "$2" ]; then fail "$1" "$2"; else pass "$1"; fi; }
# pass_if NAME WHY CMD...: NAME passes if CMD succeeds, else fails saying
# WHY (expanded before CMD runs: it may name only what is known by then).
pass_if() { if "${@:3}"; then pass "$1"; else fail "$1" "$2"; fi; }

# skip NAME WHY: NAME, a test or a group of them in the plan, is skipped;
# under CI (CI set), where everything runs as root, it fails.
skip() {
	local names name
	names=$(awk -v s="$report_stage" -v n="$report_prefix$1" '$1 == s &&
		($2 == n || index($2, n "/") == 1) { print $2 }' "$report_plan_file")
	[ -n "$names" ] || fail "$1" "skipped: $2"
	for name in $names; do
		if [ -n "${CI:-}" ]; then
			fail "${name#"$report_prefix"}" "skipped, and under CI nothing may be: $2"
		else
			reported+="$name "
			echo "ok - $name # SKIP $2"
		fi
	done
}

# not_here NAME WHY: NAME tests what this machine has not got (a KVM probe
# where there is no KVM): skipped, under CI too, as a test that does not apply.
not_here() { report ok "$1 # SKIP does not apply here: $2"; }

# needs_root NAME WHY: true as root, else skips NAME ("needs root, to WHY").
needs_root() { [ "$(id -u)" = 0 ] || { skip "$1" "needs root, to $2"; return 1; }; }

report_end() { [ "$failed" = 0 ]; }

# as_job CMD...: CMD in the background as a terminal's job, in a process
# group of its own; $! is its PID.  (Without set -m bash starts CMD with
# SIGINT ignored, under nohup make test would inherit SIGHUP ignored, and a
# script cannot trap what it inherits ignored: hence env --default-signal.)
as_job() { set -m; "$@" & set +m; }

# group_runs PGID: true while a process of group PGID runs (a zombie no
# longer does), or ps fails (a stop is not proven so).
group_runs() {
	{ ps -A -o pgid=,stat= || echo "$1 R"; } | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { n++ } END { exit !n }'
}

# signal_job PID group|alone SIG SECONDS: SIG to as_job's PID, or to its whole group as a terminal
# sends Ctrl-C; then up to SECONDS for every process of the group to end, not only the leader: a
# subshell may still run its EXIT trap after the leader is gone, and a test that looked then would
# find its work undone.  Sets job_status to the leader's exit status; false if the group still
# ran, and was then killed.
# shellcheck disable=SC2034 # job_status is the caller's
signal_job() {
	local pid=$1 i target=$1
	[ "$2" = group ] && target=-$1
	job_status=0
	{ # (stderr away: bash reports a job of set -m killed by a signal)
		kill -s "$3" -- "$target"
		for ((i = 0; i < $4 * 10; i++)); do
			group_runs "$pid" || break
			sleep 0.1
		done
		if group_runs "$pid"; then
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
# finish runs the test's CMDs, the last first, once it ends or from a
# signal handler when it is stopped midway (git's test_when_finished).
finish_cmds=''
when_finished() { finish_cmds="$1; $finish_cmds"; }

finish() { local cmds=$finish_cmds; finish_cmds=''; eval "$cmds" || true; }

# below PID REGEX: "PID ARGS" of each process below PID (not another
# run's) whose command line matches REGEX; false if none does.
below() {
	local pids
	pids=$(descendants "$1" | paste -sd,)
	ps -o pid=,args= -p "${pids:-0}" 2>/dev/null |
		awk -v re="$2" '$0 ~ re { print; n++ } END { exit !n }'
}

# dead_stderr FILE: FILE.fifo, to be a job's stderr, whose reader copies it
# to FILE until end_reader: then the job's writes to it fail, as to a dead
# tee or a closed terminal.  Sets reader, which the caller makes local.
dead_stderr() { mkfifo "$1.fifo"; cat "$1.fifo" >"$1" & reader=$!; }
end_reader() { [ -z "$reader" ] || { kill "$reader"; wait "$reader"; } 2>/dev/null || true; }
