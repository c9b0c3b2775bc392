# shellcheck shell=bash disable=SC2154,SC2034 # e2e.sh sets top and work; it uses the names this sets
# What the end-to-end tests share.  Sourced by e2e.sh, which sets top, work
# (a scratch directory) and RDMA_ADDR.

. "$top/tests/report-lib.sh"
. "$top/scripts/program-lib.sh"

client=$top/rdma_pool_client
peer=$top/tests/ctrl_peer
server_pid='' server_port='' server_pool=''

# After a failed test's line (tests/report-lib.sh), what the programs said,
# as TAP comments: the server first, since a log shown in part keeps its head.
on_fail() {
	local f shown=''
	for f in "$work"/server*.out "$work"/server*.err "$work"/*.out "$work"/*.err; do
		[[ -s $f && " $shown " != *" $f "* ]] || continue
		shown+=" $f"
		sed "s|^|#   ${f##*/}: |" "$f" | tail -n 15
	done
}

# end_jobs PID...: background jobs no longer needed, killed and reaped
# (stderr away: bash reports a job killed by a signal).
end_jobs() { kill "$@" 2>/dev/null || true; { wait "$@" || true; } 2>/dev/null; }

# test_lib: the helpers find a line early in a long server log, with much
# after it (no test of the programs, and no server for slice_back to show).
test_lib() {
	local grant='grant qp=0x460 addr=0x1000 rkey=0x3b4 size=8192' server_pid=
	printf '%s\n' "$grant" 'disconnect qp=0x460' \
		'destroy qp=0x460 after_ms=2255 ended_by=timer freed=8192' >"$work/server.out"
	seq 20000 | sed 's/.*/doorbell qp=0x461 seq=& value=& ok/' >>"$work/server.out"
	if [ "$(session "$grant" | tail -n 1)" = 'disconnect qp=0x460' ] &&
		slice_back "$grant" 8192 >/dev/null; then
		pass lib/long_server_log
	else
		fail lib/long_server_log "session or slice_back missed a line followed by 20000 more"
	fi
	rm -f "$work/server.out"
}

cleanup() { [ -z "$server_pid" ] || kill -KILL "$server_pid" 2>/dev/null || true; rm -rf "$work" "${open_top:-}"; }

# as_user KIB: sets the array nobody_cmd to the words that run a command as nobody, a user without
# CAP_IPC_LOCK (setpriv drops root, and with it every capability), so that ulimit -l KIB binds
# ibv_reg_mr.  prlimit and setpriv each exec the next: the command keeps the pid they were started
# with.  The first call sets open_top to a copy of the programs and scripts any user can run, for
# the tests run as nobody: a clone under /root (mode 700) is not.
as_user() {
	nobody_cmd=(prlimit --memlock=$(($1 * 1024))
		setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
	[ -z "${open_top:-}" ] || return 0
	open_top=$(mktemp -d /tmp/rdma-pool-open.XXXXXX)
	cp -a "$top"/{rdma_pool_server,rdma_srq_pool_server_ev,rdma_pool_client,scripts} "$open_top/"
	chmod -R a+rX "$open_top"
}

# start_server [--as-nobody KIB] PROGRAM [OPTIONS...]: start it (as_user KIB)
# and wait until it listens, on server_port: one the CM picks (--port 0, see
# listen_port) from the kernel's local port range, never a fixed port below it.
start_server() {
	local as=() dir=$top
	if [ "$1" = --as-nobody ]; then as_user "$2"; as=("${nobody_cmd[@]}") dir=$open_top; shift 2; fi
	rm -f "$work"/*.out "$work"/*.err
	"${as[@]}" "$dir/$1" --port 0 "${@:2}" >"$work/server.out" 2>"$work/server.err" &
	server_pid=$!
	server_port=$(listen_port "$work/server.out" "$server_pid") || return
	# The pool's size, as the server says it: the one source of it.
	server_pool=$(sed -n 's/^listen .* pool_size=\([0-9]*\)$/\1/p' "$work/server.out")
}

# stop_server: SIGINT, then its exit status (124 if it did not exit in 20 s).
stop_server() { local status=0; stop_program "$server_pid" || status=$?; server_pid=; return "$status"; }

# run_client NAME PORT ARGS...: the client, output in $work/NAME.out/.err.
run_client() { timeout 120 "$client" --port "$2" "${@:3}" >"$work/$1.out" 2>"$work/$1.err"; }

# since ANCHOR: the server's log from its last line equal to ANCHOR (a grant or deny line, which
# names the qp; the last, as QP numbers are reused); false while there is none.
since() {
	local from
	from=$(grep -nxF "$1" "$work/server.out" | tail -n 1 | cut -d: -f1) || true
	[ -n "$from" ] && tail -n "+$from" "$work/server.out"
}

# session ANCHOR [LAST]: the server's lines about one connection, since
# ANCHOR up to its LAST line (disconnect, or destroy); waits up to 10 s.
session() {
	local qp i lines='' last=${2:-disconnect}
	qp=$(echo "$1" | cut -d' ' -f2)
	for ((i = 0; i < 100; i++)); do
		# awk reads to the end: a reader that quits early
		# would kill tail with SIGPIPE, a failure under pipefail.
		lines=$(since "$1" | awk -v q="$qp" -v e="$last" '
			!done && $2 == q { print }
			$2 == q && $1 == e { done = 1 }') || true
		[[ $lines == *$'\n'$last* ]] && break
		sleep 0.1
	done
	echo "$lines"
}

# grant_line OUT SIZE: the server's last grant line of SIZE bytes for the
# slice the client that wrote OUT was granted: its address, and its key
# where the server prints it (not under --isolation mr).
grant_line() {
	local addr rkey
	read -r addr rkey < <(sed -n 's/^granted addr=\(0x[0-9a-f]*\) rkey=\(0x[0-9a-f]*\) .*/\1 \2/p' "$1") || true
	[ -n "$addr" ] || return 0
	grep -E -x "grant qp=0x[0-9a-f]+ addr=$addr( rkey=$rkey)? size=$2" "$work/server.out" | tail -n 1 || true
}

# check_session CLIENT_NAME N K GRANTED [quiet]: everything one successful client run (with
# --quiet: no line per doorbell) must show on both sides, or it prints what is missing and fails.
check_session() {
	local name=$1 n=$2 k=$3 granted=$4
	local out=$work/$name.out grant qp lines seqs=() want got why

	grant=$(grant_line "$out" "$granted")
	[ -n "$grant" ] || { echo "no 'granted ... size=$granted' from the client, or no grant of its slice from the server"; return 1; }
	qp=$(echo "$grant" | cut -d' ' -f2)

	# The doorbells rung for N writes, one every K: K, 2K, ... and N.
	mapfile -t seqs < <(seq "$k" "$k" "$n"; if ((n % k)); then echo "$n"; fi)
	want=$(printf 'doorbell seq=%s completed\n' "${seqs[@]}")
	got=$(grep '^doorbell ' "$out" || true)
	if [ "${5:-}" = quiet ]; then
		[ -z "$got" ] || { echo "the client printed doorbell lines"; return 1; }
	elif [ "$want" != "$got" ]; then
		echo "client doorbells differ from the expected ${#seqs[@]}"
		return 1
	fi
	grep -qx "done writes=$n doorbells=${#seqs[@]} seconds=[0-9.]* writes_per_s=[0-9]*" "$out" ||
		{ echo "client printed no matching 'done' summary"; return 1; }
	grep -qx "rtt doorbells=${#seqs[@]} median_us=[0-9.]* p99_us=[0-9.]* max_us=[0-9.]*" "$out" ||
		{ echo "client printed no matching 'rtt' summary"; return 1; }

	lines=$(session "$grant" destroy)
	# The server's doorbell lines: each "seq=S value=S ok" for the seqs in
	# their order, and those it held back (a doorbells line a second, beyond
	# the first 10) all ok: every seq said or counted.
	why=$(awk -v list="${seqs[*]}" -v q="$qp" '
		BEGIN { n = split(list, want, " ") }
		$1 == "doorbell" && !bad {
			while (j < n && $0 != "doorbell " q " seq=" want[j + 1] " value=" want[j + 1] " ok") j++
			if (j++ == n) bad = "a doorbell line not in order or not ok: " $0
			said++
		}
		$1 == "doorbells" && !bad {
			split($3, c, "=")
			if ($4 != "ok=" c[2] || $5 != "lapped=0" || $6 != "MISMATCH=0") bad = "a held-back doorbell not ok: " $0
			held += c[2]
		}
		END {
			if (!bad && said + held != n) bad = said " doorbells said and " held " counted, want " n
			if (bad) print "server doorbells of " q ": " bad
		}' <<<"$lines")
	[ -z "$why" ] || { echo "$why"; return 1; }
	grep -qx "disconnect $qp" <<<"$lines" || { echo "server did not see $qp disconnect"; return 1; }
	slice_back "$grant" "$granted"
}

# expect_served NAME CLIENT N K GRANTED STATUS [quiet]: the client (run_client
# CLIENT, exit STATUS) was served in full, on both sides (check_session).
expect_served() {
	local why
	if [ "$6" != 0 ]; then
		fail "$1" "client exited $6: $(head -c 300 "$work/$2.err")"
	elif why=$(check_session "$2" "$3" "$4" "$5" "${7:-}"); then
		pass "$1"
	else
		fail "$1" "$why"
	fi
}

# expect_shutdown NAME STATUS: the server exited STATUS 0 after SIGINT, its
# last line a shutdown line with nothing in use or lost, and no error written.
expect_shutdown() {
	local last why=''
	last=$(tail -n 1 "$work/server.out" 2>/dev/null || true)
	if [ "$2" != 0 ]; then
		why="server exited $2 after SIGINT"
	elif [[ $last != "shutdown signal=SIGINT "* ]] || ! stats_whole "$last"; then
		why="last line is not a shutdown line with nothing in use or lost: '$last'"
	elif [ -s "$work/server.err" ]; then
		why="server wrote errors: $(head -c 300 "$work/server.err")"
	fi
	pass_unless "$1" "$why"
}

# slice_back GRANT BYTES: after the server's line GRANT, the line that destroys that QP gives BYTES
# back to the pool.  Waits up to 10 s for it: a QP is destroyed only once it is quiet, up to 2 s
# after its disconnect where the device never raises LAST_WQE_REACHED.
slice_back() {
	local qp i
	qp=$(echo "$1" | cut -d' ' -f2)
	for ((i = 0; i < 100; i++)); do
		# Not grep -q (see session; seen failing after test_load).
		since "$1" | grep -E "^destroy $qp after_ms=[0-9]+ ended_by=(last_wqe|timer) freed=$2\$" >/dev/null &&
			return 0
		sleep 0.1
	done
	echo "server did not destroy $qp and give back its $2 bytes; its last lines of $qp:"
	grep -E "^[a-z]+ $qp( |\$)" "$work/server.out" | tail -n 4 | sed 's/^/      /'
	[ -n "$server_pid" ] && ps -o pid=,stat=,wchan:32=,etime= -p "$server_pid" |
		sed 's/^/      server process (pid stat wchan elapsed): /'
	return 1
}

# stats_whole LINE: true if a stats (or shutdown) line says nothing is in use and nothing was lost:
# no connection open or closing, no chunk, every receive back on the SRQ and (event-driven server)
# every reply buffer free on the devices in use; and the server's stderr says none was lost on a
# device let go with its last client (device_forget()).
stats_whole() {
	local re='^[a-z]+.* connections=0 chunks_in_use=0 doorbells=[0-9]+ closing=0 recvs_posted=([0-9]+)/([0-9]+)'
	[[ $1 =~ $re ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || return 1
	re=' replies_free=([0-9]+)/([0-9]+)$'
	{ [[ ! $1 =~ $re ]] || [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; } &&
		! grep -qs ' let go with ' "$work/server.err"
}
