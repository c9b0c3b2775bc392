#!/usr/bin/env bash
# make demo: one server and one client on Soft-RoCE, what each says, and between the steps what the
# kernel holds for the two of them (the rdma tool's "rdma resource show", trimmed to these two
# processes). Run it through scripts/soft-roce.sh, which sets RDMA_ADDR and RDMA_DEV.
#   DEMO_SERVER  rdma_srq_pool_server_ev (default) or rdma_pool_server
#   DEMO_STEP    1: wait for Enter after each view of the kernel
set -euo pipefail

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh}" "${RDMA_DEV:?run this through scripts/soft-roce.sh}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/program-lib.sh"
server=${DEMO_SERVER:-rdma_srq_pool_server_ev}
client_args=("$RDMA_ADDR" 10000 --writes 1000 --doorbell-every 100 --step)
port=7471
# The trap ends every child by SIGTERM (bash starts them ignoring SIGINT, which a server loses till
# it blocks it in reports_open()), even one not yet in $server_pid, and waits, lest one create its
# output after rm read the folder.  That goes by name: a signal just after mktemp leaves $out unset.
cleanup() {
	jobs -p | xargs -r kill 2>/dev/null || true
	wait || true
	rm -rf "${TMPDIR:-/tmp}/demo.$$".*
}
trap cleanup EXIT
out=$(mktemp -d "${TMPDIR:-/tmp}/demo.$$.XXXXXX")

# until_line FILE REGEX PID: wait (20 s at most, and only while process
# PID runs) for a line of FILE matching REGEX, or say what did not come
# and what PID wrote to FILE (its cause: the cleanup deletes FILE).
until_line() {
	local why="no line matching '$2' in 20 s"
	await_line "$1" "$2" 20 "$3" && return 0
	[ $? != 2 ] || why="it ended before a line matching '$2'"
	echo "demo: $why; it wrote:" >&2
	cat "$1" >&2
	return 1
}

# start_server: the server on the port of the README (7471), or, if
# another program holds that one (a second make demo), on the next free one.
start_server() {
	for _ in {1..20}; do
		"$top/$server" --port "$port" >"$out/server" 2>&1 &
		server_pid=$!
		until_line "$out/server" '^listen ' "$server_pid" && return 0
		grep -q "port $port is already in use" "$out/server" || break
		wait "$server_pid" || true
		port=$((port + 1))
	done
	stop_program "$server_pid" || true
	echo "demo: the server did not start" >&2
	return 1
}

# kernel_view WHAT...: the rows of "rdma resource show WHAT" that belong to the server or the
# client, with the columns that teach.  Of this run's device alone: a dump of every device fails
# ("Invalid argument") when one goes away while the tool walks them (measured in the VM on 6.1,
# another device added and deleted in a loop: 5 to 58 dumps in 100; one device's: 0 in 600).  mr
# takes its device as "dev DEV", qp and cm_id as "link DEV".
kernel_view() {
	local what by listed pids="$server_pid ${client_pid:-}"
	for what in "$@"; do
		case $what in mr) by=dev ;; *) by="link" ;; esac
		listed=$(rdma resource show "$what" "$by" "$RDMA_DEV" 2>&1) ||
			{ printf '  %-6s (rdma resource show failed: %s)\n' "$what" "${listed//$'\n'/ }"; continue; }
		awk -v what="$what" -v pids="$pids" '
			BEGIN { n = split(pids, p, " "); for (i = 1; i <= n; i++) ours[p[i]] = 1 }
			{
				row = ""; pid = ""
				for (i = 1; i < NF; i++) {
					if ($i == "pid") pid = $(i + 1)
					if ($i ~ /^(lqpn|rqpn|type|state|mrlen|rkey|cqe|users|comm|src-addr|dst-addr|qp-type|srqn)$/)
						row = row " " $i " " $(i + 1)
				}
				if (pid in ours) { printf "  %-6s%s\n", what, row; rows++ }
			}
			END { if (!rows) printf "  %-6s (none of theirs)\n", what }' <<<"$listed"
	done
	[ "$(id -u)" = 0 ] || echo "  (as $(id -un) the kernel shows no keys: it shows them to CAP_NET_ADMIN only)"
	[ "${DEMO_STEP:-}" != 1 ] || read -r -p "  [Enter] " _ || true
}

start_server
[ "$port" = 7471 ] || client_args+=(--port "$port")
echo "== the kernel, once the server listens: a cm_id on every address; no QP"
echo "   or MR yet: the first client's request says which device to open"
kernel_view cm_id qp mr

# The client stops after its grant and after its stream until it is told
# to go on (--step): a line into its stdin, a FIFO we hold open.
mkfifo "$out/go"
exec 3<>"$out/go"
echo "== client: rdma_pool_client ${client_args[*]}"
"$top/rdma_pool_client" "${client_args[@]}" <&3 >"$out/client" 2>&1 &
client_pid=$!
until_line "$out/client" '^pause after=granted$' "$client_pid"
grep -v '^pause ' "$out/client"
shown=$(grep -vc '^pause ' "$out/client")
echo "== the kernel, once the client holds its slice: two QPs in RTS, each"
echo "   the other's rqpn (qp= above, in hex); the pool MR with the rkey the"
echo "   client was granted; each one's buffers, which allow no remote access"
kernel_view qp mr cm_id
echo >&3
until_line "$out/client" '^pause after=streamed$' "$client_pid"
echo >&3
status=0
wait "$client_pid" || status=$?
grep -v '^pause ' "$out/client" | tail -n "+$((shown + 1))"
echo "== the kernel, just after the client's disconnect: the server's QP in"
echo "   the error state until the server destroys it (at once where the"
echo "   kernel raises LAST_WQE_REACHED, as 6.12 does; 2 s on 6.1)"
kernel_view qp
until_line "$out/server" '^destroy ' "$server_pid"
echo "== the kernel, once the server destroyed that QP: nothing of the client,"
echo "   nor the server's MRs: it let the device go with its last client"
kernel_view qp mr

stop_program "$server_pid" || status=$?
echo "== the kernel, after the server's exit: nothing left"
kernel_view cm_id qp mr
echo
echo "== server: $server (stopped with SIGINT)"
cat "$out/server"
exit "$status"
