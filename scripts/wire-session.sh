#!/usr/bin/env bash
# wire-session.sh DIR: one side of the sessions planned in DIR/plan, run in
# both VMs of scripts/vm-pair.sh (make wire, tests/wire.sh). WIRE_ROLE says
# which side this is; RDMA_ADDR and RDMA_ADDR6: the server VM's addresses.
#
# DIR/plan has one session per line, run one after the other so that each
# session's packets are together on the cable:
#   NAME SERVER PORT SIZE WRITES DOORBELL_EVERY FAMILY (4: IPv4, 6: IPv6)
#
# The server VM runs every session's server, each on its own port; the client VM, one client per
# session. Everything each program prints goes to DIR/NAME/{server,client}.{out,err,status}. The
# two VMs talk through files in DIR, which both see:
#   ready    written by the server VM once every server listens
#   finished written by the client VM once every client has finished
#   abort    written by either side that gives up, with the reason
# Exits 0 if this side did its part; judging the results is the caller's.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
via='run this through scripts/vm-pair.sh, which sets it'
: "${RDMA_ADDR:?$via}" "${RDMA_ADDR6:?$via}" "${WIRE_ROLE:?$via}"
. "$top/scripts/program-lib.sh"
dir=${1:?usage: wire-session.sh DIR}
READY_TIMEOUT=120 # seconds for the other VM to boot and its servers to listen
CLIENT_TIMEOUT=120
DONE_TIMEOUT=600 # seconds for every client, the other VM's boot included

say() { echo "$WIRE_ROLE: $*"; }

# give_up WHY: tell the other VM not to wait for us any more, and fail.
give_up() { say "$*" >&2; mark abort "$WIRE_ROLE: $*"; exit 1; }

# mark NAME [TEXT]: create DIR/NAME, holding TEXT (or the time), as a whole, so the other VM never
# sees half (each side through its own temp file: both may give up at once).
mark() { echo "${2:-$(date +%s)}" >"$dir/$1.$WIRE_ROLE.tmp"; mv "$dir/$1.$WIRE_ROLE.tmp" "$dir/$1"; }

# await NAME SECONDS: wait for the other VM's mark; fail if it gave up.
await() {
	local end=$((SECONDS + $2))
	while ((SECONDS < end)); do
		[ -e "$dir/$1" ] && return 0
		[ ! -e "$dir/abort" ] || { say "the other VM gave up: $(cat "$dir/abort")" >&2; exit 1; }
		sleep 0.1
	done
	give_up "no '$1' from the other VM within $2 s"
}

read_plan() {
	local fields line
	# NAME SERVER PORT SIZE WRITES DOORBELL_EVERY FAMILY, as above
	local re='^[A-Za-z0-9_-]+ rdma_(pool_server|srq_pool_server_ev)( [0-9]+){4} [46]$'
	[ -s "$dir/plan" ] || give_up "no sessions in $dir/plan"
	while read -r -a fields; do
		line=${fields[*]}
		[[ $line =~ $re ]] || give_up "bad plan line '$line'"
	done <"$dir/plan"
}

serve() {
	local name server port pids=() i=0 status
	while read -r name server port _; do
		mkdir -p "$dir/$name"
		"$top/$server" --port "$port" \
			</dev/null >"$dir/$name/server.out" 2>"$dir/$name/server.err" &
		pids+=("$!")
		[ "$(listen_port "$dir/$name/server.out" "$!")" = "$port" ] ||
			give_up "$server did not listen on port $port:" \
				"$(head -c 300 "$dir/$name/server.err")"
		say "$server listens on port $port"
	done <"$dir/plan"
	mark ready

	await finished "$DONE_TIMEOUT"
	while read -r name server _; do
		status=0
		stop_program "${pids[$i]}" || status=$?
		echo "$status" >"$dir/$name/server.status"
		say "$server stopped with SIGINT, exit status $status"
		i=$((i + 1))
	done <"$dir/plan"
}

connect() {
	local name server port size writes every family addr status
	await ready "$READY_TIMEOUT"
	while read -r name server port size writes every family; do
		addr=$RDMA_ADDR
		[ "$family" = 4 ] || addr=$RDMA_ADDR6
		say "rdma_pool_client $addr $size -n $writes -k $every --port $port (to $server)"
		status=0
		timeout "$CLIENT_TIMEOUT" "$top/rdma_pool_client" --port "$port" \
			"$addr" "$size" -n "$writes" -k "$every" \
			</dev/null >"$dir/$name/client.out" 2>"$dir/$name/client.err" || status=$?
		echo "$status" >"$dir/$name/client.status"
		say "exit status $status"
		# The next session starts once this one's disconnect is over on
		# both sides, so that sessions do not overlap on the cable.
		await_line "$dir/$name/server.out" '^disconnect ' 10 || say "no disconnect line from $server within 10 s"
	done <"$dir/plan"
	mark finished
}

read_plan
case $WIRE_ROLE in
server) serve ;;
client) connect ;;
*) give_up "WIRE_ROLE must be server or client, not '$WIRE_ROLE'" ;;
esac
