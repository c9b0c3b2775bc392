# program-lib.sh: waiting for what a program of this project says, and
# stopping it, done one way by everything that starts one in the background:
# the tests (tests/lib.sh), make demo, make bench and make wire.

# await_line FILE REGEX SECONDS [PID]: true once a line of FILE matches REGEX; false (1) after
# SECONDS, or (2) as soon as process PID has ended without writing one.  Seconds of the clock, not
# rounds of the loop: under emulation on a busy host one round can take far longer than its sleep.
await_line() {
	local end=$((SECONDS + $3)) ended=''
	while ((SECONDS < end)); do
		# PID first: a line written just before it ended still counts.
		if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then ended=1; fi
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		[ -z "$ended" ] || return 2
		sleep 0.1
	done
	return 1
}

# listen_port FILE [PID]: waits (20 s at most, and only while PID runs) for
# the server's "listen port=N" line in FILE and prints N.  With --port 0 the
# CM picks N from the kernel's local port range: two runs at once never meet.
listen_port() {
	await_line "$1" '^listen port=[0-9]+ ' 20 "${2:-}" && sed -n 's/^listen port=\([0-9]*\) .*/\1/p' "$1"
}

# await_exit PID SECONDS: the exit status of process PID (a child of this shell, for wait to give
# its status) once it has ended; 124 if it still runs after SECONDS (it is then killed).
await_exit() {
	local end=$((SECONDS + $2))
	while ((SECONDS < end)) && kill -0 "$1" 2>/dev/null; do sleep 0.1; done
	if kill -0 "$1" 2>/dev/null; then
		kill -KILL "$1" 2>/dev/null || true
		wait "$1" 2>/dev/null || true
		return 124
	fi
	wait "$1"
}

# stop_program PID: SIGINT, as Ctrl-C sends, then await_exit's status.
stop_program() { kill -INT "$1" 2>/dev/null || true; await_exit "$1" 20; }
