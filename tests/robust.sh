# shellcheck shell=bash disable=SC2154,SC2153 # e2e.sh and lib.sh, which come first, set top, work, the peers and RDMA_*
# Bad input, misbehaving peers, faults and load: sourced by e2e.sh after
# lib.sh. Whatever goes wrong, the programs say what, exit non-zero, and
# never hang; the servers lose and leak nothing and keep serving.

# expect_error NAME SECONDS REGEX CMD...: CMD must exit non-zero within SECONDS, its stderr
# matching REGEX (grep -E).  KILL follows timeout's TERM: a server blocks TERM (signalfd) and,
# wedged before its loop, would never take it.  (Braces: bash's "Killed" notice away.)
expect_error() {
	local t=$1 secs=$2 regex=$3 status=0 start=$SECONDS
	shift 3
	{ timeout -k 5 "$((secs + 5))" "$@" >"$work/cmd.out" 2>"$work/cmd.err" || status=$?; } 2>/dev/null
	if [ "$status" = 0 ]; then
		fail "$t" "exited 0"
	elif [ "$status" = 124 ] || ((SECONDS - start > secs)); then
		fail "$t" "took more than $secs s"
	else
		pass_if "$t" "no message matching '$regex': $(head -c 300 "$work/cmd.err")" grep -Eq -e "$regex" "$work/cmd.err"
	fi
}

# Client arguments: each refused before anything is sent.
test_client_args() {
	local t=client_args
	expect_error "$t/none" 5 'want 2 arguments' "$client"
	expect_error "$t/one" 5 'want 2 arguments.*got 1' "$client" "$RDMA_ADDR"
	expect_error "$t/three" 5 'want 2 arguments.*got 3' "$client" "$RDMA_ADDR" 1 2
	expect_error "$t/size_not_a_number" 5 "bad allocation size 'ten'" "$client" "$RDMA_ADDR" ten
	expect_error "$t/size_negative" 5 "'-5'.*cannot be negative" "$client" "$RDMA_ADDR" -5
	expect_error "$t/size_trailing_junk" 5 "bad allocation size '12abc'" "$client" "$RDMA_ADDR" 12abc
	expect_error "$t/size_beyond_32_bits" 5 "bad allocation size '4294967296'" "$client" "$RDMA_ADDR" 4294967296
	expect_error "$t/port_0" 5 "bad port '0'" "$client" -p 0 "$RDMA_ADDR" 100
	expect_error "$t/port_65536" 5 "bad port '65536'" "$client" -p 65536 "$RDMA_ADDR" 100
	expect_error "$t/writes_junk" 5 "bad number of writes 'x'" "$client" -n x "$RDMA_ADDR" 100
	expect_error "$t/doorbell_every_0" 5 "bad doorbell interval '0'" "$client" -k 0 "$RDMA_ADDR" 100
	expect_error "$t/window_0" 5 "bad window '0'" "$client" -w 0 "$RDMA_ADDR" 100
	expect_error "$t/window_too_deep" 10 "need a send queue 4294967296 deep; $RDMA_DEV allows" "$client" -k 65536 -w 65536 "$RDMA_ADDR" 100
	expect_error "$t/unresolvable_address" 10 "cannot resolve 'no-such-host.invalid'" "$client" no-such-host.invalid 100
	# No server listens on 7999: below the local port range (start_server).
	expect_error "$t/no_server_listening" 10 "rejected the connection: is a server listening there" "$client" -p 7999 "$RDMA_ADDR" 100
}

# A server may reject a connection with any bytes as its reason: the
# client shows them escaped, never raw (an escape sequence would reach the
# user's terminal: retitle it, move its cursor, rewrite what it shows).
test_client_rejection_escaped() {
	local t=client_args/rejection_escaped pid port status=0
	"$top/tests/bad_server" "$RDMA_ADDR" $'busy\e]0;owned\a' >"$work/bad.out" 2>"$work/bad.err" &
	pid=$!
	port=$(listen_port "$work/bad.out" "$pid") ||
		{ fail "$t" "bad_server did not listen: $(head -c 300 "$work/bad.err")"; end_jobs "$pid"; return; }
	timeout 30 "$client" -p "$port" "$RDMA_ADDR" 100 >"$work/cmd.out" 2>"$work/cmd.err" || status=$?
	{ wait "$pid" || true; } 2>/dev/null
	if [ "$status" = 0 ]; then
		fail "$t" "the client exited 0"
	elif grep -q $'\e' "$work/cmd.err"; then
		fail "$t" "the client printed the escape byte raw: $(cat -v "$work/cmd.err")"
	else
		pass_if "$t" "$(cat -v "$work/cmd.err")" \
			grep -qxF "rdma_pool_client: $RDMA_ADDR:$port rejected the connection: busy\x1b]0;owned\x07" "$work/cmd.err"
	fi
}

# make bench's arguments: each refused at once, naming it, with no folder made.
test_bench_args() {
	local t=bench_args bench=$top/scripts/bench.sh dir=$work/bench-args
	expect_error "$t/rounds_0" 5 "--rounds wants a number of rounds from 1 to 9999, not '0'" "$bench" --rounds 0 "$dir"
	expect_error "$t/rounds_not_a_number" 5 "--rounds wants .* not 'many'" "$bench" --headline --rounds many "$dir"
	expect_error "$t/rounds_missing" 5 "--rounds wants .* not ''" "$bench" --rounds
	expect_error "$t/unknown_option" 5 "unknown option '--fast'" "$bench" --fast "$dir"
	expect_error "$t/two_outdirs" 5 "one OUTDIR at most" "$bench" "$dir" "$dir.2"
	pass_if "$t/nothing_made" "a refused run left $(echo "$dir"*)" [ -z "$(compgen -G "$dir*")" ]
}

# Server arguments; no RDMA device: the real one hidden in a private mount namespace, untouched.
test_server_args() {
	local s=$1 port=$2 t=$1/args low high
	# PORT came from the CM (start_server's --port 0).
	read -r low high </proc/sys/net/ipv4/ip_local_port_range
	pass_if "$t/port_0_lets_the_cm_choose" "port $port is outside the local port range $low-$high" \
		[ "$((low <= port && port <= high))" = 1 ]
	expect_error "$t/port_in_use" 10 "port $port is already in use" "$top/$s" --port "$port"
	expect_error "$t/pool_not_multiple" 5 "bad pool size '5000': want a multiple of 4096" "$top/$s" --pool-size 5000
	expect_error "$t/pool_zero" 5 "bad pool size '0'" "$top/$s" --pool-size 0
	expect_error "$t/pool_junk" 5 "bad pool size '4M'" "$top/$s" --pool-size 4M
	expect_error "$t/srq_depth_0" 5 "bad SRQ depth '0'" "$top/$s" --srq-depth 0
	[ "$s" != rdma_srq_pool_server_ev ] ||
		expect_error "$t/rearm_too_long" 5 "bad re-arm delay '1000001'" "$top/$s" --rearm-after-us 1000001
	expect_error "$t/extra_argument" 5 "unexpected argument 'extra'" "$top/$s" extra
	needs_root "$t/no_rdma_device" "hide the device in a mount namespace" &&
		expect_error "$t/no_rdma_device" 10 "no RDMA device found.*rdma link add" unshare --mount sh -c \
		'mount -t tmpfs none /sys/class/infiniband_verbs &&
		 mount -t tmpfs none /dev/infiniband && exec "$0" --port 0' "$top/$s"
	test_memlock "$s"
}

# An ordinary user whose locked-memory limit (ulimit -l) is below the pool: the server says why
# and how to fix it, rejects each client, leaves the device closed, and ends on SIGINT as ever.
test_memlock() {
	local s=$1 t=$1/args/memlock_too_low kib=$((4096 - 4)) status=0 pid port
	needs_root "$t" "run the server as another user (setpriv)" || return 0
	as_user "$kib"
	"${nobody_cmd[@]}" "$open_top/$s" --port 0 >"$work/memlock.out" 2>"$work/memlock.err" &
	pid=$!
	if ! port=$(listen_port "$work/memlock.out" "$pid"); then
		fail "$t" "no listen line in 20 s: $(head -c 300 "$work/memlock.err")"
		stop_program "$pid" || true
		return 0
	fi
	run_client memlock_client "$port" "$RDMA_ADDR" 4096 || true
	run_client memlock_again "$port" "$RDMA_ADDR" 4096 || true
	stop_program "$pid" || status=$?
	if [ "$status" != 0 ]; then
		fail "$t" "server exit status $status after SIGINT, not 0: $(head -c 300 "$work/memlock.err")"
	elif ! grep -q 'ibv_reg_mr(pool): Cannot allocate memory' "$work/memlock.err" ||
		! grep -q "may pin only $kib KiB (ulimit -l).*limits.conf.*LimitMEMLOCK" "$work/memlock.err"; then
		fail "$t" "no memlock hint: $(head -c 400 "$work/memlock.err")"
	else
		pass_if "$t" "both clients were not told: $(head -c 200 "$work/memlock_again.err")" \
			test "$(cat "$work"/memlock_{client,again}.err | grep -c 'rejected the connection: server-setup-failed')" = 2
	fi
}

# A device the server cannot open (its pool passes ulimit -l, the first device's pool having
# taken most of it) costs only its own clients: one through it is refused while a first-device
# client holds its slice, the first device serves another, then SIGINT ends the server as ever.
test_device_unopenable() {
	local s=$1 t=$1/two_devices/one_unopenable status=0 why=''
	[ -n "${RDMA_DEV2:-}" ] || { skip "$t" "no second device (RDMA_DEV2)"; return; }
	needs_root "$t" "run the server as another user (setpriv)" || return 0
	own_server "$t" --as-nobody 6144 "$s" || return 0
	peer_bg held "$server_port" req:4096 sleep:3000
	await_line "$work/held.out" '^reply status=0 ' 20 || why+="the first device's first client got no slice; "
	run_client second "$server_port" "$RDMA_ADDR_DEV2" 4096 || true
	run_client first_again "$server_port" "$RDMA_ADDR" 4096 -n 100 -k 10 || true
	wait "$peer_pid" || true
	stop_server || status=$?
	grep -q 'rejected the connection: server-setup-failed' "$work/second.err" ||
		why+="the second device's client was not refused server-setup-failed: $(head -c 200 "$work/second.err"); "
	grep -q '^done writes=100 doorbells=10 ' "$work/first_again.out" ||
		why+="the first device's next client was not served: $(head -c 200 "$work/first_again.err"); "
	grep -q 'ibv_reg_mr(pool): Cannot allocate memory' "$work/server.err" || why+="the server did not say why; "
	[ "$status" = 0 ] || why+="server exit status $status after SIGINT, not 0: $(head -c 200 "$work/server.err")"
	pass_unless "$t" "$why"
}

# peer_steps NAME PORT STEP...: run ctrl_peer; its lines in $work/NAME.out.
peer_steps() { timeout 60 "$peer" "$RDMA_ADDR" "$2" "${@:3}" >"$work/$1.out" 2>"$work/$1.err"; }

# peer_bg NAME PORT [--no-rtu] STEP...: the same in the background, for up
# to 120 s; its pid in $peer_pid (timeout's own: it passes a kill on).
peer_bg() {
	local name=$1 port=$2 opts=()
	shift 2
	[ "${1:-}" != --no-rtu ] || { opts=(--no-rtu); shift; }
	timeout 120 "$peer" "${opts[@]}" "$RDMA_ADDR" "$port" "$@" >"$work/$name.out" 2>"$work/$name.err" &
	peer_pid=$!
}

# expect_lines NAME FILE: FILE holds exactly the lines on stdin, once a
# non-zero rkey in it is written as rkey=KEY (its value is the server's).
expect_lines() {
	local want got
	want=$(cat)
	got=$(sed 's/rkey=0x[1-9a-f][0-9a-f]*/rkey=KEY/' "$2")
	pass_if "$1" "wanted [$(echo "$want" | tr '\n' '|')] got [$(echo "$got" | tr '\n' '|')]" [ "$want" = "$got" ]
}

# stats_idle [WHY]: ask the server for its counters (SIGUSR1) until its answer (a "stats device="
# line per device in use, then the "stats connections=" totals) passes WHY ANSWER (by default
# totals_whole); prints the last answer.  20 asks 0.4 s apart, each waiting up to 1 s: about 8 s
# if each answer comes at once and fails WHY, 30 s if none comes.  Only answers since the call
# count (the log is only read: the server writes on into it).  A gone server is an answer: under
# set -e a failed kill would end the stage, not fail tests.
stats_idle() {
	local answer='' i j first seen
	first=$(stats_answers)
	for ((i = 0; i < 20; i++)); do
		seen=$(stats_answers)
		kill -USR1 "$server_pid" 2>/dev/null || { answer="no answer: server pid ${server_pid:-none} is gone"; break; }
		for ((j = 0; j < 20 && $(stats_answers) <= seen; j++)); do sleep 0.05; done
		answer="no answer: server pid $server_pid has not answered SIGUSR1"
		(($(stats_answers) <= first)) || answer=$(awk '/^stats / { b = b $0 "\n" }
			/^stats connections=/ { last = b; b = "" }
			END { printf "%s", last }' "$work/server.out")
		"${1:-totals_whole}" "$answer" >/dev/null && break
		sleep 0.4
	done
	echo "$answer"
}

# stats_answers: how many answers to SIGUSR1 the server's log holds.
stats_answers() { grep -c '^stats connections=' "$work/server.out" || true; }

# totals_whole ANSWER: stats_whole on the answer's last line, the totals.
totals_whole() { stats_whole "$(tail -n 1 <<<"$1")"; }

# expect_stats NAME: once every client has gone, nothing in use or lost.
expect_stats() {
	local line
	line=$(stats_idle | tail -n 1)
	pass_if "$1" "after every client left: '$line'" stats_whole "$line"
}

# Every kind of wrong message from a peer gets exactly one error reply, on one
# connection that stays up, while a client streams beside it undisturbed.
test_bad_messages() {
	local port=$2 t=$1/bad_messages m=0x52444d41 status=0 bystander
	run_client bystander "$port" "$RDMA_ADDR" 65536 -n 16000 -k 16 &
	bystander=$!
	peer_steps bad "$port" send:16:$m:1:1:4096 send:31:$m:1:1:4096 send:33:$m:1:1:4096 \
		send:32:0x41444d52:1:1:4096 send:32:$m:2:1:4096 \
		send:32:$m:1:0:4096 send:32:$m:1:2:4096 send:32:$m:1:9:4096 \
		req:0 req:4096 req:4096 req:1 || true
	expect_lines "$t/one_reply_each" "$work/bad.out" <<-EOF
		$(printf 'reply status=EBADMSG size=0 rkey=0x0\n%.0s' {1..8})
		reply status=EINVAL size=0 rkey=0x0
		reply status=0 size=4096 rkey=KEY
		reply status=EBUSY size=0 rkey=0x0
		reply status=EBUSY size=0 rkey=0x0
	EOF
	wait "$bystander" || status=$?
	expect_served "$t/bystander_undisturbed" bystander 16000 16 65536 "$status"
}

# The edges of the 32-bit size field, each on a connection of its own.
test_size_edges() {
	local port=$2 t=$1/size_edges i want
	local names=(1 4096 pool pool+1 4294967295)
	local sizes=(1 4096 "$server_pool" $((server_pool + 1)) 4294967295)
	local granted=(4096 4096 "$server_pool" denied denied)
	for i in "${!sizes[@]}"; do
		stats_idle >/dev/null # the whole pool must be free for all of it
		peer_steps "size$i" "$port" "req:${sizes[$i]}" || true
		want="reply status=0 size=${granted[$i]} rkey=KEY"
		[ "${granted[$i]}" != denied ] || want="reply status=EINVAL size=0 rkey=0x0"
		expect_lines "$t/${names[$i]}" "$work/size$i.out" <<<"$want"
	done
}

# A message too long for a receive buffer fails that receive and ends that
# connection only: a client streaming beside it sees every doorbell through.
test_oversized_message() {
	local port=$2 t=$1/oversized_message bystander status=0
	run_client bystander "$port" "$RDMA_ADDR" 65536 -n 16000 -k 16 &
	bystander=$!
	await_line "$work/bystander.out" '^doorbell seq=' 20 || true
	peer_steps big "$port" send:200:0x52444d41:1:1:4096 || true
	pass_if "$t/connection_ended" "peer saw: $(cat "$work/big.out" "$work/big.err")" \
		grep -q '^reply status=IBV_WC_' "$work/big.out"
	# IBV_WC_LOC_LEN_ERR on most devices; rxe says IBV_WC_LOC_QP_OP_ERR.
	pass_if "$t/server_names_it" "no 'receive ... failed: IBV_WC_...' on the server's stderr" \
		await_line "$work/server.err" '^rdma_[a-z_]+: receive qp=0x[0-9a-f]+ failed: IBV_WC_' 5
	wait "$bystander" || status=$?
	expect_served "$t/bystander_undisturbed" bystander 16000 16 65536 "$status"
}

# A client killed midstream: the server notices, frees its slice, destroys its QP, serves the next.
test_client_killed() {
	local port=$2 t=$1/client_killed grant qp why
	# Not through run_client: $! must be the client itself, not a subshell.
	"$client" --port "$port" "$RDMA_ADDR" 16384 -n 4000000 -k 64 >"$work/victim.out" 2>"$work/victim.err" &
	local pid=$!
	await_line "$work/victim.out" '^doorbell seq=' 20 ||
		{ fail "$t" "the victim never rang a doorbell: $(head -c 300 "$work/victim.err")"; end_jobs "$pid"; return; }
	kill -KILL "$pid" 2>/dev/null ||
		{ fail "$t" "the victim ended before it was killed: $(head -c 300 "$work/victim.err")"; return; }
	wait "$pid" 2>/dev/null || true
	local killed_at=$SECONDS
	grant=$(grep -x "grant qp=0x[0-9a-f]* addr=0x[0-9a-f]* rkey=0x[0-9a-f]* size=16384" "$work/server.out" | tail -n 1 || true)
	qp=$(echo "$grant" | cut -d' ' -f2)
	if [ -z "$grant" ] || [ "$(session "$grant" | tail -n 1)" != "disconnect $qp" ]; then
		fail "$t/slice_freed" "no 'disconnect $qp' after the kill"
	elif ! why=$(slice_back "$grant" 16384); then
		fail "$t/slice_freed" "$why"
	elif ((SECONDS - killed_at > 10)); then
		fail "$t/slice_freed" "the server took $((SECONDS - killed_at)) s to notice"
	else
		pass "$t/slice_freed"
	fi
	expect_stats "$t/nothing_lost"
}

# 100 connect / allocate / write / disconnect cycles: all succeed, no slice is lent again before
# the QP that held it is destroyed (each cycle comes while the last one's QP is still closing: see
# slice_back), and the pool, the connection count and the SRQ are whole afterwards.  100: more
# than the places of one address (32) or of the server (64); each cycle takes five receives (a
# request, four doorbells) from the SRQ: 500 of its 1024, each posted again (none come round twice).
test_cycles() {
	local port=$2 t=$1/cycles_100 i bad=0 start
	start=$(wc -l <"$work/server.out")
	for ((i = 0; i < 100; i++)); do
		run_client cycle "$port" "$RDMA_ADDR" $((4096 * (i % 7 + 1))) -n 64 -k 16 || bad=$((bad + 1))
	done
	pass_if "$t/all_succeed" "$bad of 100 failed" [ "$bad" = 0 ]
	expect_stats "$t/nothing_left"
	tail -n "+$((start + 1))" "$work/server.out" >"$work/cycles"
	pass_if "$t/no_slice_lent_before_its_qp_is_destroyed" "not 100 grants, or one overlaps a slice whose QP was not destroyed yet" \
		grants_disjoint "$work/cycles" 100
}

# own_server T PROGRAM [OPTIONS...]: start_server, or T fails saying what
# the server said, and false (callers return 0: e2e.sh runs under set -e).
own_server() {
	start_server "${@:2}" || { give_up "$1" "server did not start: $(head -c 300 "$work/server.err")"; return 1; }
}

# give_up T WHY [PID...]: T fails saying WHY, and the test's server and
# peers (PIDs) are ended. A server left running would outlive the run: the
# next start_server forgets its pid, and cleanup kills only the last.
give_up() { fail "$1" "$2"; stop_server || true; [ $# -lt 3 ] || end_jobs "${@:3}"; }

# Servers stopped under load: each streaming client reports the failed work
# completion by its status name and exits non-zero within a few seconds.
test_server_dies() {
	local s=$1 how=$2 t=$1/server_$2_under_load i pids=() status bad='' sig=INT
	own_server "$t" "$s" || return 0
	for i in 0 1 2; do
		run_client "load$i" "$server_port" "$RDMA_ADDR" 8192 -n 4000000 -k 64 &
		pids+=("$!")
	done
	for i in 0 1 2; do
		await_line "$work/load$i.out" '^doorbell seq=' 20 || bad="client $i never started"
	done
	[ "$how" = stopped ] || sig=KILL
	kill -s "$sig" "$server_pid" 2>/dev/null || bad="the server was gone before SIG$sig"
	local start=$SECONDS
	# (stderr away here and at its wait: bash reports it a command late.)
	for i in 0 1 2; do
		status=0
		wait "${pids[$i]}" || status=$?
		if [ "$status" = 0 ] || [ "$status" = 124 ]; then
			bad="client $i exited $status"
		elif ! grep -Eq 'failed: IBV_WC_[A-Z_]+ ' "$work/load$i.err"; then
			bad="client $i did not name the failed completion: $(head -c 200 "$work/load$i.err")"
		fi
	done 2>/dev/null
	((SECONDS - start <= 15)) || bad="clients took $((SECONDS - start)) s to notice"
	status=0
	{ await_exit "$server_pid" 20 || status=$?; } 2>/dev/null
	server_pid=
	[ "$how" = killed ] || [ "$status" = 0 ] || bad="server exited $status after SIGINT (124: still running 20 s on)"
	pass_unless "$t" "$bad"
}

# One connection more than --max-conns is rejected, the reason on both sides; the others are served
# and held until the test ends them (a fixed hold time can run out first on a busy machine).
test_max_conns() {
	local s=$1 t=$1/max_conns i pids=()
	own_server "$t" "$s" --max-conns 2 --conns-per-source 3 || return 0
	for i in 1 2; do
		peer_bg "hold$i" "$server_port" req:4096 sleep:100000
		pids+=("$peer_pid")
	done
	if await_line "$work/hold1.out" '^reply' 20 && await_line "$work/hold2.out" '^reply' 20; then
		expect_error "$t/third_rejected" 10 'rejected the connection: server-full' \
			"$client" -p "$server_port" "$RDMA_ADDR" 4096
		pass_if "$t/server_says_why" "no 'reject reason=server-full' line" grep -qx 'reject reason=server-full' "$work/server.out"
	else
		fail "$t" "the two holders were not both served: $(cat "$work"/hold?.out "$work"/hold?.err | head -c 300)"
	fi
	end_jobs "${pids[@]}"
	stop_server || true
}

# A peer that never sends the RTU (the handshake's last message) sends a message too long for a
# receive buffer: the server ends the connection, and as no disconnect request can be sent before
# it is ESTABLISHED, no DISCONNECTED event comes: the server must close it itself, at once.
# With --max-conns 1 the next client is served while the peer still holds it.
test_closed_before_established() {
	local s=$1 t=$1/closed_before_established
	own_server "$t" "$s" --max-conns 1 || return 0
	peer_bg nortu "$server_port" --no-rtu send:200:0x52444d41:1:1:4096 sleep:30000
	if ! await_line "$work/nortu.out" '^reply status=IBV_WC_' 20; then
		fail "$t/server_closes_it" "the peer's message was not refused: $(cat "$work/nortu.out" "$work/nortu.err" | head -c 300)"
	elif ! await_line "$work/server.out" '^disconnect qp=' 5; then
		fail "$t/server_closes_it" "no disconnect line: the half-open connection stays open"
	elif grep -q '^connect qp=' "$work/server.out"; then
		fail "$t/server_closes_it" "the connection became ESTABLISHED: the test did not test this"
	else
		pass "$t/server_closes_it"
	fi
	test_one_client "$t" "$server_port"
	end_jobs "$peer_pid"
	expect_stats "$t/nothing_lost"
	stop_server || true
}

# At the limit (--max-conns 4) three peers hold places, 8 replies each stuck in the server's send
# queue; twelve more, one after another, do the same through the fourth place and go.  A closing
# connection whose sends have all completed (flushed, its QP in the error state) can complete only
# receives, which the SRQ's share of the CQ covers: it must not keep its place until its QP is
# destroyed.  All twelve get in, the CQ never overruns (the server would stop on
# IBV_EVENT_CQ_ERR) and nothing is lost.
test_burst_at_the_limit() {
	local s=$1 t=$1/burst_at_the_limit i holders=() bad='' status=0
	own_server "$t" "$s" --max-conns 4 --conns-per-source 4 --srq-depth 16 || return 0
	for i in 1 2 3; do
		timeout 120 "$peer" --rnr-retry 7 "$RDMA_ADDR" "$server_port" blind:8 sleep:100000 \
			>"$work/holder$i.out" 2>"$work/holder$i.err" &
		holders+=("$!")
		await_line "$work/holder$i.out" '^blind sent=8$' 20 || bad="holder $i: $(cat "$work/holder$i.err")"
	done
	for ((i = 1; i <= 12; i++)); do
		[ -n "$bad" ] && break
		(timeout 60 "$peer" --rnr-retry 7 "$RDMA_ADDR" "$server_port" blind:8 \
			>"$work/burst.out" 2>"$work/burst.err") || true
		grep -qx 'blind sent=8' "$work/burst.out" ||
			bad="peer $i of 12 was not let in: $(head -c 200 "$work/burst.err")"
	done
	[ -n "$bad" ] || ! grep -q 'server-full' "$work/server.out" || bad="a peer was refused as server-full"
	pass_unless "$t/all_get_in" "$bad"
	end_jobs "${holders[@]}"
	expect_stats "$t/nothing_lost"
	stop_server || status=$?
	pass_if "$t/server_survives" \
		"the server exited $status after SIGINT (124: still running 20 s on): $(head -c 300 "$work/server.err")" \
		[ "$status" = 0 ]
}

# hw_counter NAME: the device's port counter NAME (rxe's are in sysfs), if any.
hw_counter() { cat "/sys/class/infiniband/$RDMA_DEV/ports/1/hw_counters/$1" 2>/dev/null || true; }

# 32 clients at once against a deliberately small SRQ: receivers are not always ready, the NICs
# retry (the counters show RNR NAKs, no retry run out), every doorbell still arrives intact, and
# nothing is lost.  The clients run at nice 19 (LOAD_NICE): each spins on its CQ, and rxe's "NIC"
# is the kernel (6.1: mostly the posting call and tasklets; 6.12: a workqueue's threads) competing
# with the server, which 32 at nice 0 leave a 34th of the VM's two CPUs.  Measured on 6.1: at
# nice 0 the slowest doorbell took up to 2.9 s, and once in CI a write's retries ran out
# (IBV_WC_RETRY_EXC_ERR: 7 tries of 0.27 s); at nice 19, still some RNR NAKs in every run.
test_load() {
	local s=$1 t=$1/load_32_clients_srq_4 i pids=() bad='' want line why slowest
	local -A before=() after=()
	local counters=(send_rnr_err rcvd_rnr_err retry_rnr_exceeded_err retry_exceeded_err)
	# 32 from one address, at once: the places it may hold by default.
	own_server "$t" "$s" --srq-depth 4 || return 0
	for i in "${counters[@]}"; do before[$i]=$(hw_counter "$i"); done
	for ((i = 0; i < 32; i++)); do
		(
			renice -n "${LOAD_NICE:-19}" -p "$BASHPID" >/dev/null
			run_client "l$i" "$server_port" "$RDMA_ADDR" 8192 -n 2000 -k 16
		) &
		pids+=("$!")
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || bad="client $i failed: $(head -c 200 "$work/l$i.err")"
	done
	for i in "${counters[@]}"; do after[$i]=$(hw_counter "$i"); done
	for ((i = 0; i < 32; i++)); do
		[ -n "$bad" ] && break
		why=$(check_session "l$i" 2000 16 8192) || bad="client $i: $why"
	done
	want=$((32 * 125))
	line=$(stats_idle | tail -n 1)
	stop_server || true
	[ -n "$bad" ] || [[ $line =~ \ doorbells=$want\  ]] || bad="the server counted no $want doorbells: '$line'"
	[ -n "$bad" ] || stats_whole "$line" || bad="something was left in use or lost: '$line'"
	slowest=$(sed -n 's/^rtt .* max_us=\([0-9]*\).*/\1/p' "$work"/l*.out |
		sort -n | tail -n 1 | awk '{ printf "%.0f", $1 / 1000 }') || true
	pass_unless "$t (slowest doorbell $slowest ms)" "$bad"
	test_rnr_counters "$t/rnr_happened_no_retry_ran_out"
	# A server that sleeps with completions in its CQ (a missed wake-up)
	# shows here as seconds, where 0.17 to 0.33 s is usual, ASan included.
	[ -n "$bad" ] || [ "$slowest" -lt 1000 ] || bad="the slowest doorbell took $slowest ms"
	pass_unless "$t/slowest_doorbell_under_1_s" "$bad"
}

# test_rnr_counters NAME: from the before and after arrays of test_load.
test_rnr_counters() {
	local i deltas=''
	for i in "${counters[@]}"; do
		[[ -n ${before[$i]} && -n ${after[$i]} ]] ||
			{ skip "$1" "$RDMA_DEV has no port counter $i (not rxe?), so RNR cannot be shown"; return; }
		deltas+=" $i=+$((after[$i] - before[$i]))"
	done
	if ((after[send_rnr_err] - before[send_rnr_err] == 0)); then
		fail "$1" "no RNR NAK was sent: the SRQ never ran dry, so this load proves nothing about RNR ($deltas )"
	elif ((after[retry_rnr_exceeded_err] != before[retry_rnr_exceeded_err] ||
		after[retry_exceeded_err] != before[retry_exceeded_err])); then
		fail "$1" "a retry counter ran out ($deltas )"
	else
		pass "$1 ($deltas )"
	fi
}

# After a look that found completions the event-driven server polls with a timeout of 0
# (look_again), also while a connection closes, 2 s on 6.1 (no LAST_WQE_REACHED): here a
# client of -n 1's, while the next client streams (on 6.12 it is gone first). strace counts polls.
test_looks_again() {
	local t=rdma_srq_pool_server_ev/looks_again_while_one_closes tracer n='not counted'; rm -f "$work"/server.*
	ASAN_OPTIONS=detect_leaks=0 strace -qq -f --seccomp-bpf -e trace=poll -e signal=none -o "$work/polls" \
		"$top/rdma_srq_pool_server_ev" --port 0 >"$work/server.out" 2>"$work/server.err" & tracer=$! # (LSan: no ptrace)
	server_port=$(listen_port "$work/server.out" "$tracer") && server_pid=$(pgrep -P "$tracer") &&
		run_client closing "$server_port" "$RDMA_ADDR" 4096 -n 1 &&
		run_client streaming "$server_port" "$RDMA_ADDR" 4096 -n 1000 -k 1 -w 1 &&
		n=$(grep -cE '\], ([2-9]|[0-9]{2,}), 0\) = ' "$work/polls" || :) # serve()'s, not say()'s
	{ kill -INT "$server_pid"; server_pid=; await_exit "$tracer" 20; } 2>/dev/null || n="$n (exit status $?)"
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 10)) && pass "$t" ||
		fail "$t" "polls with a timeout of 0 in the run: $n (want 10 or more): $(tail -c 300 "$work"/{streaming,server}.err)"
}

# Peers that leave their replies stuck: each asks the server's NIC to retry "receiver not ready"
# forever (--rnr-retry 7), posts no receive, sends 8 requests, then disconnects or is killed.
# The replies leave the send queue only as flushes, at the server's close; any lost with the QP
# would leave the event-driven server out of reply buffers (8 at --max-conns 1) and the SRQ
# shrunk.  After more peers than that, clients are served and nothing is lost.
test_stuck_replies() {
	local s=$1 t=$1/stuck_replies i bad='' steps
	own_server "$t" "$s" --max-conns 1 || return 0
	for ((i = 1; i <= 9; i++)); do
		stats_idle >/dev/null # the one connection it may have must be gone
		steps=(blind:8)
		((i % 2)) || steps+=(kill)
		# (Braces: for a subshell bash reports the subshell itself.)
		{ timeout 60 "$peer" --rnr-retry 7 "$RDMA_ADDR" "$server_port" "${steps[@]}" \
			>"$work/stuck.out" 2>"$work/stuck.err"; } 2>/dev/null || true
		grep -qx 'blind sent=8' "$work/stuck.out" ||
			{ bad="peer $i (${steps[*]}): $(cat "$work/stuck.out" "$work/stuck.err" | head -c 300 || true)"; break; }
	done
	# Nothing in use: the server has taken every request (the last peer's maybe after it went).
	expect_stats "$t/nothing_lost"
	[ -n "$bad" ] || ! grep -Eq 'reason=no_reply_buffer|sent more than' "$work"/server.{out,err} ||
		bad="the server ran out: $(grep -h -m 1 -E 'reason=no_reply_buffer|sent more than' "$work"/server.{out,err})"
	pass_unless "$t/nine_peers" "$bad"
	test_one_client "$t" "$server_port"
	expect_stats "$t/nothing_lost_after_a_client"
	stop_server || true
}

# address_case T SERVER V4 V6 LISTEN [OPTIONS...]: a server with OPTIONS, whose
# listen line says address=LISTEN; then a client through RDMA_ADDR and one
# through RDMA_ADDR6, each served (V4, V6: yes) or refused: no listener (no).
address_case() {
	local t=$1 s=$2 v4=$3 v6=$4 listen=$5 fam addr want status
	shift 5
	own_server "$t" "$s" "$@" || return 0
	pass_if "$t/listen_line_says_where" "$(head -n 1 "$work/server.out")" \
		grep -q "^listen port=$server_port address=$listen pool_size=" "$work/server.out"
	for fam in 4 6; do
		addr=$RDMA_ADDR want=$v4 status=0
		[ "$fam" = 6 ] && addr=$RDMA_ADDR6 want=$v6
		if [ "$want" = yes ]; then
			run_client "v$fam" "$server_port" "$addr" 4096 -n 100 -k 10 || status=$?
			expect_served "$t/ipv${fam}_served" "v$fam" 100 10 4096 "$status"
		else
			expect_error "$t/ipv${fam}_refused" 10 'rejected the connection: is a server listening there' \
				"$client" -p "$server_port" "$addr" 4096 -n 100 -k 10
		fi
	done
	stop_server || fail "$t/sigint_exits_0" "exit status $?"
}

# Where the server listens (-a): by default every address of both families,
# one listener for both (with a key per slice too); given an address, that
# one only; given one that is not this machine's, it says so and exits.
test_addresses() {
	local s=$1 t=$1/address
	[ -n "${RDMA_ADDR6:-}" ] ||
		{ skip "$t" "no IPv6 address on $RDMA_DEV (RDMA_ADDR6: a device this run made has one, where IPv6 is on)"; return; }
	address_case "$t/default" "$s" yes yes ::
	address_case "$t/default_isolation_mr" "$s" yes yes :: --isolation mr
	address_case "$t/ipv4_only" "$s" yes no "$RDMA_ADDR" -a "$RDMA_ADDR"
	address_case "$t/ipv6_only" "$s" no yes "$RDMA_ADDR6" -a "$RDMA_ADDR6"
	expect_error "$t/not_here" 10 "^$s: cannot listen on 203\.0\.113\.7 port 0: the port is in use, or 203\.0\.113\.7 is no address of this machine" \
		"$top/$s" --port 0 -a 203.0.113.7
}

# device_clients T NAME ADDR...: a client through each ADDR in turn, each
# served (exit 0, its session whole on both sides); else T fails saying why.
device_clients() {
	local t=$1 name=$2 addr i=0 status why
	shift 2
	for addr; do
		i=$((i + 1)) status=0
		run_client "$name$i" "$server_port" "$addr" 4096 -n 100 -k 10 || status=$?
		[ "$status" = 0 ] || { fail "$t" "through $addr: exit $status: $(head -c 300 "$work/$name$i.err")"; return; }
		why=$(check_session "$name$i" 100 10 4096) || { fail "$t" "through $addr: $why"; return; }
	done
	pass "$t"
}

# devices_let_go_why BLOCK: one SIGUSR1's stats, once every client has gone,
# have no device's line (each is let go with its last client) and whole
# totals, last, with two_devices_case's 4040 doorbells; else prints why.
devices_let_go_why() {
	local line
	if line=$(grep -m 1 '^stats device=' <<<"$1"); then
		echo "a device is still held: '$line'"
		return 1
	fi
	line=$(tail -n 1 <<<"$1")
	{ [[ $line == "stats connections="* ]] && stats_whole "$line" && [[ $line == *" doorbells=4040 "* ]]; } ||
		{ echo "the last line is not the totals, or not whole, or counts no 4040 doorbells"; return 1; }
}

# device_gone T DEL NETDEV: T passes if the delete (pid DEL) of RDMA_DEV2 ends
# in 10 s, with the server running if one is (a delete still waiting is let end
# by the server's end); then the device is made again on NETDEV.
device_gone() {
	local why='' status=0
	wait_until "$2" 10 false || true
	if kill -0 "$2" 2>/dev/null; then
		why="rdma link delete $RDMA_DEV2 still waits after 10 s, the server running"
		stop_server || true
	elif [ -n "$server_pid" ] && ! kill -0 "$server_pid" 2>/dev/null; then
		why="the server has ended: $(head -c 300 "$work/server.err")"
	fi
	wait "$2" || status=$?
	[ "$status" = 0 ] || why+=" (rdma link delete: exit $status)"
	rdma link add "$RDMA_DEV2" type rxe netdev "$3" ||
		why+=" (rdma link add $RDMA_DEV2 type rxe netdev $3 failed: the tests after lack it)"
	pass_unless "$1" "$why"
}

# rdma link delete of a device: the kernel's CM tells each connection on it
# (RDMA_CM_EVENT_DEVICE_REMOVAL), and the server closes those, serves the other device's clients
# on, and lets the device go with its last client: the delete ends while the server runs.  So
# does the delete of a device whose clients have all gone, and a client through it made again is
# served.  A server listening on the device (-a) says so and ends.
test_device_removed() {
	local s=$1 t=$1/device_removed netdev stays gone qp del status=0
	[ -n "${RDMA_DEV2:-}" ] || { skip "$t" "no second device (SOFT_ROCE_DEVICES=2)"; return; }
	needs_root "$t" "delete a device and make it again" || return 0
	netdev=$(rdma link show "$RDMA_DEV2/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
	own_server "$t" "$s" || return 0
	run_client stays "$server_port" "$RDMA_ADDR" 81920 -n 2000000 -k 1000 &
	stays=$!
	timeout 120 "$peer" "$RDMA_ADDR_DEV2" "$server_port" req:4096 sleep:100000 >"$work/gone.out" 2>"$work/gone.err" &
	gone=$!
	if ! await_line "$work/gone.out" '^reply status=0 ' 20 || ! await_line "$work/stays.out" '^doorbell seq=' 20; then
		give_up "$t" "a client got no slice: $(cat "$work/gone.err" "$work/stays.err" | head -c 300)" "$stays" "$gone"
		return
	fi
	qp=$(sed -n "s/^connect qp=\(0x[0-9a-f]*\) device=$RDMA_DEV2\$/\1/p" "$work/server.out")
	rdma link delete "$RDMA_DEV2" &
	pass_if "$t/its_clients_closed" "no 'destroy qp=${qp:-?}' line in 10 s" \
		await_line "$work/server.out" "^destroy qp=${qp:-none} " 10 "$server_pid"
	end_jobs "$gone" # its own hold on the device
	device_gone "$t/delete_done" "$!" "$netdev"
	wait "$stays" || status=$?
	pass_if "$t/others_served" "the other device's client exited $status: $(head -c 300 "$work/stays.err")" \
		grep -q '^done writes=2000000 doorbells=2000 ' "$work/stays.out"
	device_clients "$t/served_again" again "$RDMA_ADDR_DEV2"
	rdma link delete "$RDMA_DEV2" &
	device_gone "$t/idle_delete_done" "$!" "$netdev"
	status=0
	stop_server || status=$?
	[ ! -s "$work/server.err" ] || status+=" (and an error)"
	pass_if "$t/server_survives" "exit status $status: $(head -c 300 "$work/server.err")" [ "$status" = 0 ]
	own_server "$t" "$s" -a "$RDMA_ADDR_DEV2" || return 0
	rdma link delete "$RDMA_DEV2" &
	del=$! status=0
	await_exit "$server_pid" 10 || status=$?
	server_pid=
	pass_if "$t/its_listener_ends" "exit $status, saying: $(head -c 300 "$work/server.err")" \
		grep -q "the device -a listens on: No such device" "$work/server.err"
	device_gone "$t/listener_delete_done" "$del" "$netdev"
}

# two_devices_case T SERVER [OPTIONS...]: one server with OPTIONS serves
# clients through both devices: the second's first, one after the other,
# and at once; then its stats say every device was let go.
two_devices_case() {
	local t=$1 s=$2 p1 p2 s1=0 s2=0 bad answer why ok
	shift 2
	own_server "$t" "$s" "$@" || return 0
	device_clients "$t/second_first" first "$RDMA_ADDR_DEV2" "$RDMA_ADDR"
	device_clients "$t/one_after_other" turn "$RDMA_ADDR" "$RDMA_ADDR_DEV2"
	# Long enough to overlap, into slices with a slot for every write (a
	# server slowed by two may read a slot only once its client lapped).
	# A QP number is per device: the two's server lines may share one.
	run_client once1 "$server_port" "$RDMA_ADDR" 81920 -n 20000 -k 10 &
	p1=$!
	run_client once2 "$server_port" "$RDMA_ADDR_DEV2" 81920 -n 20000 -k 10 &
	p2=$!
	wait "$p1" || s1=$?
	wait "$p2" || s2=$?
	# The stats first: the server prints a doorbell's verdict as it counts
	# it, maybe after the client has ended (its NIC acked the ring); asked
	# again while a connection of the clients before is still closing.
	answer=$(stats_idle devices_let_go_why)
	why=$(devices_let_go_why "$answer") || why+=": [$(tr '\n' '|' <<<"$answer")]"
	pass_unless "$t/devices_let_go" "$why"
	if [ "$s1$s2" != 00 ]; then
		fail "$t/at_once" "exit $s1 and $s2: $(head -c 300 "$work/once1.err" "$work/once2.err")"
	elif [ "$(cat "$work/once1.out" "$work/once2.out" | grep -c '^done writes=20000 doorbells=2000 ')" != 2 ]; then
		fail "$t/at_once" "a client printed no 'done writes=20000 doorbells=2000'"
	elif bad=$(grep -E '^doorbells? ' "$work/server.out" | grep -Ev ' ok$| MISMATCH=0$'); then
		fail "$t/at_once" "the server found a doorbell not ok: ${bad%%$'\n'*}"
	elif ok=$(awk '$1 == "doorbell" && $NF == "ok" { n++ } $1 == "doorbells" { for (i = 3; i <= NF; i++)
		if ($i ~ /^ok=/) n += substr($i, 4) } END { print n + 0 }' "$work/server.out") && [ "$ok" != 4040 ]; then
		fail "$t/at_once" "the server said $ok doorbells ok, not the 4040 rung"
	else
		pass "$t/at_once"
	fi
	stop_server || true
}

# A server serves every RDMA device, each with a pool of its own: clients
# through the second (RDMA_ADDR_DEV2) as the first, plain and with isolation.
test_two_devices() {
	local s=$1 t=$1/two_devices
	[ -n "${RDMA_DEV2:-}" ] ||
		{ skip "$t" "no second device (RDMA_DEV2: a run that makes its own device makes one with SOFT_ROCE_DEVICES=2)"; return; }
	two_devices_case "$t/plain" "$s"
	two_devices_case "$t/isolation_mr" "$s" --isolation mr
}

# Isolation.  Without it every client holds the pool MR's rkey, and can (the
# test shows it) write into its neighbour's slice and past the end of its own.
# With --isolation mr each client's key is a region's over its own slice: the
# same writes fail (IBV_WC_REM_ACCESS_ERR), the neighbour's data unchanged.
test_isolation() {
	local s=$1 mode=$2 t=$1/isolation_$2 owner want_write want_value pool mrs keys
	own_server "$t" "$s" --isolation "$mode" || return 0
	# The owner writes 1025 into slot 0 (of 1024) of the first slice and,
	# once the others have tried, rings doorbell 1025: the server reports
	# what slot 0 holds.  Last a read, which nothing in the pool allows.
	rm -f "$work/go"
	peer_bg owner "$server_port" req:4096 write:0:1025 "wait:$work/go" ring:1025 read:0
	await_line "$work/owner.out" '^write off=0 status=' 20 || true # expect_lines says
	# The intruder's slice follows: offset -4096 is the owner's slot 0.
	# 2049 is 1025 a lap on: a doorbell finding it says "lapped", no error.
	peer_steps intruder "$server_port" req:4096 write:-4096:2049 || true
	# A 4-byte write whose last byte lies one past the end of the slice.
	peer_steps overrun "$server_port" req:4096 write:4093:1 || true
	# The server's regions, taken while the owner's slice holds the device.
	mrs=$(rdma resource show mr 2>/dev/null | grep " pid $server_pid " || true)
	touch "$work/go"
	wait "$peer_pid" || true

	want_write=IBV_WC_REM_ACCESS_ERR want_value='1025 ok'
	[ "$mode" != none ] || want_write=IBV_WC_SUCCESS want_value='2049 lapped'
	expect_lines "$t/write_into_neighbour" "$work/intruder.out" <<-EOF
		reply status=0 size=4096 rkey=KEY
		write off=-4096 status=$want_write
	EOF
	expect_lines "$t/write_one_byte_past_the_end" "$work/overrun.out" <<-EOF
		reply status=0 size=4096 rkey=KEY
		write off=4093 status=$want_write
	EOF
	expect_lines "$t/no_remote_read" "$work/owner.out" <<-EOF
		reply status=0 size=4096 rkey=KEY
		write off=0 status=IBV_WC_SUCCESS
		ring seq=1025 status=IBV_WC_SUCCESS
		read off=0 value=0 status=IBV_WC_REM_ACCESS_ERR
	EOF
	owner=$(grep -m1 '^grant ' "$work/server.out" | cut -d' ' -f2) || true
	pass_if "$t/neighbour_sees" "no 'doorbell $owner seq=1025 value=$want_value' line" \
		await_line "$work/server.out" "^doorbell $owner seq=1025 value=$want_value\$" 5
	if [ "$mode" != none ]; then
		# No key reaches the pool, for no region covers it: the server
		# says rkey=none, and the kernel lists no region of the pool's
		# size among the server's (only the slice, and its own buffers).
		pool=$(sed -n 's/^pool .* size=\([0-9]*\) rkey=\([0-9a-fx]*\|none\)$/\1 \2/p' "$work/server.out")
		if [ "${pool#* }" != none ]; then
			fail "$t/pool_has_no_key" "the server's pool line gives a key: '$pool'"
		elif [ -z "$mrs" ]; then
			fail "$t/pool_has_no_key" "rdma resource show mr lists no region of the server (pid $server_pid)"
		elif grep -q " mrlen ${pool% *} " <<<"$mrs"; then
			fail "$t/pool_has_no_key" "the kernel has a region of the pool's ${pool% *} bytes: $(tr '\n' '|' <<<"$mrs")"
		else
			pass "$t/pool_has_no_key"
		fi
		keys=$(sed -n 's/^reply status=0 .* rkey=\(0x[0-9a-f]*\)$/rkey=\1/p' "$work"/owner.out "$work"/intruder.out "$work"/overrun.out)
		if [ -z "$keys" ]; then
			fail "$t/no_key_printed" "the peers were given no key"
		elif grep -qwF "$keys" "$work/server.out" "$work/server.err"; then
			fail "$t/no_key_printed" "the server printed a slice's key: $(grep -hwF "$keys" "$work/server.out" "$work/server.err" | head -n 1)"
		else
			pass "$t/no_key_printed"
		fi
		pass_if "$t/keys_of_their_own" "two clients were given the same rkey" \
			[ "$(grep -h '^reply status=0 ' "$work"/owner.out "$work"/intruder.out "$work"/overrun.out | sort -u | wc -l)" = 3 ]
		test_one_client "$t" "$server_port"
	fi
	test_sigint "$t"
}

# --isolation mr as an ordinary user, under ulimit -l: the pool has no region of its own, so only
# the granted slices are pinned, once.  At 2 MiB a 1 MiB slice is granted; a second would pass
# the limit, and the server says that this, not a full pool, is why it denies it (ENOMEM, the
# protocol's only status for "no memory").
test_isolation_unprivileged() {
	local s=$1 t=$1/isolation_mr/unprivileged
	needs_root "$t" "run the server as another user (setpriv)" || return 0
	own_server "$t" --as-nobody 2048 "$s" --isolation mr || return 0
	peer_bg first "$server_port" req:1048576 sleep:4000
	await_line "$work/first.out" '^reply ' 20 || true
	peer_steps second "$server_port" req:1048576 || true
	wait "$peer_pid" || true
	expect_lines "$t/first_slice_granted" "$work/first.out" <<<"reply status=0 size=1048576 rkey=KEY"
	expect_lines "$t/second_denied" "$work/second.out" <<<"reply status=ENOMEM size=0 rkey=0x0"
	if grep -q 'ibv_reg_mr(slice): Cannot allocate memory' "$work/server.err" &&
		grep -q 'may pin only 2048 KiB (ulimit -l)' "$work/server.err"; then
		pass "$t/says_it_is_the_memlock_limit"
	else
		fail "$t/says_it_is_the_memlock_limit" "server said: $(head -c 300 "$work/server.err")"
	fi
	stop_server || true
}
