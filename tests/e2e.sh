#!/usr/bin/env bash
# End-to-end tests of the three programs on a real Soft-RoCE device.
#
# Run it through scripts/soft-roce.sh, which brings the device up (on this
# machine or in a VM) and sets RDMA_ADDR to the address clients connect to.
# Every test runs against each of the two servers. Prints "PASS name" or
# "FAIL name: why" per test, then "e2e: N passed, N failed".
set -euo pipefail

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh, which sets RDMA_ADDR}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
client=$top/rdma_pool_client
work=$(mktemp -d "${TMPDIR:-/tmp}/e2e.XXXXXX")
passed=0
failed=0
server_pid=

pass() {
	echo "PASS $1"
	passed=$((passed + 1))
}
fail() {
	echo "FAIL $1: $2"
	failed=$((failed + 1))
	# Show what the programs said, for whoever reads the log.
	for f in "$work"/*.out "$work"/*.err; do
		[ -s "$f" ] && sed "s|^|    ${f##*/}: |" "$f" | tail -n 15
	done
	return 0
}

cleanup() {
	[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# wait_for FILE REGEX SECONDS: true once a line of FILE matches REGEX.
wait_for() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# start_server PROGRAM PORT: run it in the background, logging to
# $work/server.out and .err, and wait until it listens.
start_server() {
	rm -f "$work"/*.out "$work"/*.err
	"$top/$1" --port "$2" >"$work/server.out" 2>"$work/server.err" &
	server_pid=$!
	wait_for "$work/server.out" "^listen port=$2 " 20
}

# stop_server: SIGINT, then its exit status (124 if it did not exit in 20 s).
stop_server() {
	local i status
	kill -INT "$server_pid"
	for ((i = 0; i < 200; i++)); do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			status=0
			wait "$server_pid" || status=$?
			server_pid=
			return "$status"
		fi
		sleep 0.1
	done
	kill -KILL "$server_pid"
	server_pid=
	return 124
}

# run_client NAME PORT ARGS...: the client, output in $work/NAME.out/.err.
run_client() {
	local name=$1 port=$2
	shift 2
	timeout 120 "$client" --port "$port" "$@" \
		>"$work/$name.out" 2>"$work/$name.err"
}

# The doorbells a client rings for N writes, one every K: K, 2K, ... and N.
doorbell_seqs() {
	local n=$1 k=$2 i
	for ((i = k; i <= n; i += k)); do echo "$i"; done
	if ((n % k)); then echo "$n"; fi
}

# session ANCHOR: the server's lines about one connection, from the last
# line equal to ANCHOR (a grant or deny line, which names the qp) up to the
# connection's disconnect line. Waits up to 10 s for that line to come.
# QP numbers are reused once a connection is gone, hence "the last".
session() {
	local qp from i lines
	qp=$(echo "$1" | cut -d' ' -f2)
	for ((i = 0; i < 100; i++)); do
		from=$(grep -nxF "$1" "$work/server.out" | tail -n 1 | cut -d: -f1)
		if [ -n "$from" ]; then
			lines=$(tail -n "+$from" "$work/server.out" | awk -v q="$qp" '
				$2 == q { print }
				$2 == q && $1 == "disconnect" { exit }')
			if [[ $lines == *$'\n'disconnect* ]]; then
				echo "$lines"
				return 0
			fi
		fi
		sleep 0.1
	done
	echo "$lines"
}

# check_session CLIENT_NAME N K GRANTED: everything one successful client
# run must show on both sides. Prints the reason and fails if anything is
# missing.
check_session() {
	local name=$1 n=$2 k=$3 granted=$4
	local out=$work/$name.out sout=$work/server.out
	local addr rkey grant qp lines want got

	addr=$(sed -n 's/^granted addr=\(0x[0-9a-f]*\) .*/\1/p' "$out")
	rkey=$(sed -n 's/^granted .* rkey=\(0x[0-9a-f]*\) .*/\1/p' "$out")
	if ! grep -qx "granted addr=$addr rkey=$rkey size=$granted" "$out"; then
		echo "client did not print 'granted ... size=$granted'"
		return 1
	fi
	grant=$(grep -x "grant qp=0x[0-9a-f]* addr=$addr rkey=$rkey size=$granted" "$sout" | tail -n 1)
	if [ -z "$grant" ]; then
		echo "server printed no grant of $addr rkey=$rkey size=$granted"
		return 1
	fi
	qp=$(echo "$grant" | cut -d' ' -f2)

	want=$(doorbell_seqs "$n" "$k" | sed 's/.*/doorbell seq=& completed/')
	got=$(grep '^doorbell ' "$out" || true)
	if [ "$want" != "$got" ]; then
		echo "client doorbells differ from the expected $(doorbell_seqs "$n" "$k" | wc -l)"
		return 1
	fi
	if ! grep -qx "done writes=$n doorbells=$(doorbell_seqs "$n" "$k" | wc -l) seconds=[0-9.]* writes_per_s=[0-9]*" "$out"; then
		echo "client printed no matching 'done' summary"
		return 1
	fi

	lines=$(session "$grant")
	want=$(doorbell_seqs "$n" "$k" | sed "s/.*/doorbell $qp seq=& value=& ok/")
	got=$(echo "$lines" | grep '^doorbell ' || true)
	if [ "$want" != "$got" ]; then
		echo "server doorbells for $qp are not exactly seq=value ok for each expected seq"
		return 1
	fi
	if [ "$(echo "$lines" | tail -n 1)" != "disconnect $qp freed=$granted" ]; then
		echo "server did not free $granted bytes of $qp on disconnect"
		return 1
	fi
}

# ---- the tests ------------------------------------------------------------

test_one_client() {
	local t=$1/one_client port=$2 why
	if ! run_client one "$port" "$RDMA_ADDR" 10000 -n 1000 -k 32; then
		fail "$t" "client exited $? ($(head -c 300 "$work/one.err"))"
	elif why=$(check_session one 1000 32 12288); then
		pass "$t"
	else
		fail "$t" "$why"
	fi
}

# grants_disjoint FILE: no slice is granted over one still held. Walking the
# server's lines in order, each grant must not overlap any slice granted
# before it and not yet freed by its connection's disconnect line.
grants_disjoint() {
	local -A lo=() hi=()
	local kind qp addr size q grants=0
	while read -r kind qp addr _ size; do
		case $kind in
		grant)
			addr=$((${addr#addr=}))
			size=${size#size=}
			for q in "${!lo[@]}"; do
				if ((lo[$q] < addr + size && addr < hi[$q])); then
					return 1
				fi
			done
			lo[$qp]=$addr
			hi[$qp]=$((addr + size))
			grants=$((grants + 1))
			;;
		disconnect)
			unset "lo[$qp]" "hi[$qp]"
			;;
		esac
	done <"$1"
	# Every grant line must have been read, or this proves nothing.
	[ "$grants" = "$(grep -c '^grant ' "$1")" ]
}

# Eight clients at once, asking different sizes: each is granted its own
# chunk-rounded slice, overlapping no slice held at the same time, and sees
# all its doorbells.
test_eight_clients() {
	local t=$1/eight_clients port=$2 i pids=() why='' start
	local sizes=(4096 10000 1 8192 20000 4097 65536 12288)
	local granted=(4096 12288 4096 8192 20480 8192 65536 12288)
	start=$(wc -l <"$work/server.out")
	for i in "${!sizes[@]}"; do
		run_client "c$i" "$port" "$RDMA_ADDR" "${sizes[$i]}" -n 1000 -k 16 &
		pids+=("$!")
	done
	for i in "${!pids[@]}"; do
		if ! wait "${pids[$i]}"; then
			why="client $i failed: $(head -c 300 "$work/c$i.err")"
		fi
	done
	for i in "${!sizes[@]}"; do
		[ -n "$why" ] && break
		check_session "c$i" 1000 16 "${granted[$i]}" >"$work/check" ||
			why="client $i: $(cat "$work/check")"
	done
	tail -n "+$((start + 1))" "$work/server.out" >"$work/grants"
	if [ -z "$why" ] && [ "$(grep -c '^grant ' "$work/grants")" != 8 ]; then
		why="server did not print 8 grants"
	fi
	if [ -z "$why" ] && ! grants_disjoint "$work/grants"; then
		why="two grants overlap"
	fi
	if [ -n "$why" ]; then fail "$t" "$why"; else pass "$t"; fi
}

# deny_test NAME PORT SIZE STATUS
deny_test() {
	local t=$1 port=$2 size=$3 status=$4 deny
	if run_client deny "$port" "$RDMA_ADDR" "$size"; then
		fail "$t" "client exited 0 on a denied request"
	elif ! grep -qx "denied size=$size status=$status" "$work/deny.out"; then
		fail "$t" "client did not print 'denied size=$size status=$status'"
	elif ! grep -q "$status" "$work/deny.err"; then
		fail "$t" "client's error message does not name $status"
	elif ! deny=$(grep -x "deny qp=0x[0-9a-f]* size=$size status=$status" "$work/server.out" | tail -n 1) ||
		[ -z "$deny" ]; then
		fail "$t" "server did not print 'deny ... size=$size status=$status'"
	elif [ "$(session "$deny" | tail -n 1)" != "disconnect $(echo "$deny" | cut -d' ' -f2) freed=0" ]; then
		fail "$t" "server did not see the denied client go"
	else
		pass "$t"
	fi
}

test_serves_after_deny() {
	local t=$1/serves_after_deny port=$2 why
	if ! run_client after "$port" "$RDMA_ADDR" 4096 -n 100 -k 10; then
		fail "$t" "client exited $?"
	elif why=$(check_session after 100 10 4096); then
		pass "$t"
	else
		fail "$t" "$why"
	fi
}

test_sigint() {
	local t=$1/sigint_exits_0 status=0
	stop_server || status=$?
	if [ "$status" != 0 ]; then
		fail "$t" "server exited $status after SIGINT"
	elif ! grep -q '^shutdown signal=SIGINT connections=0 chunks_in_use=0 ' "$work/server.out"; then
		fail "$t" "no 'shutdown signal=SIGINT connections=0 chunks_in_use=0' line"
	elif [ -s "$work/server.err" ]; then
		fail "$t" "server wrote errors: $(head -c 300 "$work/server.err")"
	else
		pass "$t"
	fi
}

port=7471
for server in rdma_pool_server rdma_srq_pool_server_ev; do
	if ! start_server "$server" "$port"; then
		fail "$server/starts" "no 'listen' line within 20 s"
		continue
	fi
	test_one_client "$server" "$port"
	test_eight_clients "$server" "$port"
	deny_test "$server/deny_size_0" "$port" 0 EINVAL
	deny_test "$server/deny_larger_than_pool" "$port" 4194305 EINVAL
	test_serves_after_deny "$server" "$port"
	test_sigint "$server"
	port=$((port + 1))
done

echo "e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
