# shellcheck shell=bash
# The protocol working as it should, against one server: sourced by e2e.sh
# after lib.sh. Each test_* function takes the server's name and port.

test_one_client() {
	local t=$1/one_client port=$2 why status=0
	run_client one "$port" "$RDMA_ADDR" 10000 -n 1000 -k 32 || status=$?
	if [ "$status" != 0 ]; then
		fail "$t" "client exited $status ($(head -c 300 "$work/one.err"))"
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

# test_deny NAME PORT SIZE STATUS
test_deny() {
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
	local t=$1/serves_after_deny port=$2 why status=0
	run_client after "$port" "$RDMA_ADDR" 4096 -n 100 -k 10 || status=$?
	if [ "$status" != 0 ]; then
		fail "$t" "client exited $status"
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

