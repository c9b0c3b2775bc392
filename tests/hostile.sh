# shellcheck shell=bash disable=SC2154,SC2153 # e2e.sh and lib.sh, which come first, set top, work, the peers and RDMA_*
# Peers that hold a place they do not use, break their QP, revoke another
# client's key, or a reader that stalls the server's output: each must cost
# the server nothing lasting. Sourced by e2e.sh after lib.sh and robust.sh.

# server_end T [NAME [PID...]]: every place and chunk back (T/NAME, default
# T/nothing_lost), the peers PID then ended, and the server exits 0 on SIGINT.
server_end() {
	expect_stats "$1/${2:-nothing_lost}"
	[ $# -lt 3 ] || end_jobs "${@:3}"
	stop_server || fail "$1/server_survives" "exit status $?"
}

# granted_qp NAME: the qp=0x... of the server's grant for peer NAME's slice (by its key), or false.
granted_qp() {
	local rkey
	await_line "$work/$1.out" '^reply status=0 ' 20 || return 1
	rkey=$(sed -n 's/^reply status=0 .* rkey=\(0x[0-9a-f]*\)$/\1/p' "$work/$1.out")
	grep -x "grant qp=0x[0-9a-f]* addr=0x[0-9a-f]* rkey=$rkey size=[0-9]*" "$work/server.out" | tail -n 1 | cut -d' ' -f2
}

# A peer that never sends the handshake's last message (RTU) holds a place
# until the kernel's CM gives up resending its reply, a minute or more: with
# --max-conns 1 it must be closed after --handshake-timeout-ms, the next served.
test_handshake_deadline() {
	local s=$1 t=$1/handshake_deadline
	own_server "$t" "$s" --max-conns 1 --handshake-timeout-ms 1500 || return 0
	peer_bg nortu "$server_port" --no-rtu sleep:30000
	pass_if "$t/closed_in_time" "no 'close ... reason=handshake_timeout' within 20 s" \
		await_line "$work/server.out" '^close qp=0x[0-9a-f]+ reason=handshake_timeout$' 20
	client_session "$t/next_client_served" after "$server_port" 4096 100 10 4096
	end_jobs "$peer_pid"
	server_end "$t"
}

# A client whose RTU is lost already works on its side: it asks for a
# slice and rings. Its first message must establish the connection (the
# server tells its CM, rdma_notify), not leave it to the handshake deadline.
test_lost_rtu() {
	local s=$1 t=$1/lost_rtu qp
	own_server "$t" "$s" --handshake-timeout-ms 1500 || return 0
	peer_bg nortu "$server_port" --no-rtu req:4096 write:0:1 ring:1 sleep:4000 ring:1
	qp=$(granted_qp nortu) ||
		{ give_up "$t" "the peer got no slice: $(cat "$work/nortu.out" "$work/nortu.err")" "$peer_pid"; return; }
	pass_if "$t/established" "no 'connect $qp' line within 5 s" await_line "$work/server.out" "^connect $qp device=" 5
	wait "$peer_pid" || true
	# The peer is gone once its last ring is acked: the server may print
	# that doorbell later, before the peer's disconnect.
	await_line "$work/server.out" "^(close|disconnect) $qp( |\$)" 10 || true
	if grep -q "^close $qp " "$work/server.out"; then
		fail "$t/not_closed" "$(grep "^close $qp " "$work/server.out")"
	else
		pass_if "$t/not_closed" "its two doorbells, 4 s apart, were not both ok: $(tail -n 3 "$work/nortu.out")" \
			[ "$(grep -c "^doorbell $qp seq=1 value=1 ok\$" "$work/server.out")" = 2 ]
	fi
	server_end "$t"
}

# A peer whose RTU is lost rings 5 times (no slice) while the server sleeps: strace holds each return
# from a sleep or a poll 200 ms, so one drain takes all 5 completions.  The first tells the CM
# (rdma_notify: a write of command 15, "\17", of rdma_user_cm.h); any later one would fail.
test_notify_once() {
	local s=$1 t=$1/notifies_once tracer n='not counted'; rm -f "$work"/server.*
	ASAN_OPTIONS=detect_leaks=0 strace -qq -e trace=write,poll,clock_nanosleep -e signal=none \
		-e inject=poll,clock_nanosleep:delay_exit=200000 -o "$work/writes" \
		"$top/$s" --port 0 >"$work/server.out" 2>"$work/server.err" & tracer=$! # (LSan: no ptrace)
	server_port=$(listen_port "$work/server.out" "$tracer") && server_pid=$(pgrep -P "$tracer") &&
		timeout 60 "$peer" --no-rtu "$RDMA_ADDR" "$server_port" sleep:50 ring:{1..5} sleep:3000 >"$work/held.out" 2>&1 &&
		await_line "$work/server.out" '^doorbell qp=0x[0-9a-f]* seq=5 ' 10 &&
		n="$(grep -c '"\\17\\0\\0\\0' "$work/writes" || :) calls, $(grep -c '"\\17\\0\\0\\0.*) = -1 ' "$work/writes" || :) failed"
	{ kill -INT "$server_pid"; server_pid=; await_exit "$tracer" 30; } 2>/dev/null || n="$n (exit status $?)"
	pass_if "$t" "rdma_notify: $n (want 1 call, none failed): $(tail -c 300 "$work"/{held.out,server.err})" [ "$n" = '1 calls, 0 failed' ]
}

# A client rings with every write, 1000 doorbells, while the server program is away (stopped here;
# a slow file or the scheduler may hold it).  The server's NIC takes each into the SRQ, whose 1024
# receives hold them all: none finds it empty and waits for an RNR retry, on rxe till a kernel tick
# (at 128 receives: RNR NAKs, and on 6.1 the client's write failed, its transport retries run out).
test_away_no_rnr() {
	local s=$1 t=$1/away_no_rnr pid go before='' after='' why=''
	own_server "$t" "$s" || return 0
	rm -f "$work/away.in"; mkfifo "$work/away.in" || { give_up "$t" "could not make the FIFO $work/away.in"; return; }
	exec {go}<>"$work/away.in"
	run_client away "$server_port" --step -q -n 1000 -k 1 "$RDMA_ADDR" 4096 <&"$go" & pid=$!
	if await_line "$work/away.out" '^pause after=granted$' 30 "$pid" && kill -STOP "$server_pid"; then
		before=$(hw_counter send_rnr_err) && echo >&"$go"
		await_line "$work/away.out" '^pause after=streamed$' 20 "$pid" || why='its stream did not end (20 s at most); '
		after=$(hw_counter send_rnr_err) && kill -CONT "$server_pid" && echo >&"$go"
	else why='no grant within 30 s, or no server to stop; '; fi
	wait "$pid" || why+="the client exited $?: $(head -c 200 "$work/away.err"); "
	exec {go}>&- && rm -f "$work/away.in" && stop_server || why+="the server exited $?; "
	[ -n "$before" ] && [ -n "$after" ] || why+="no send_rnr_err counter read on $RDMA_DEV; "
	[ "$after" = "$before" ] || why+="the server's NIC sent $((after - before)) RNR NAKs (want 0)"
	pass_unless "$t" "$why"
}

# second_address T: whether the device has a second address; else skips T.
second_address() {
	[ -n "${RDMA_ADDR2:-}" ] ||
		{ skip "$1" "no second address on $RDMA_DEV to connect from (RDMA_ADDR2: a device this run made has one)"; return 1; }
}

# other_address_served T: a peer from the second address gets a slice.
other_address_served() {
	timeout 60 "$peer" --source "$RDMA_ADDR2" "$RDMA_ADDR" "$server_port" req:4096 \
		>"$work/other.out" 2>"$work/other.err" || true
	expect_lines "$1/other_address_served" "$work/other.out" <<<"reply status=0 size=4096 rkey=KEY"
}

# qps_of PID: how many RC QPs the kernel lists for process PID.
qps_of() { rdma resource show qp 2>/dev/null | grep -c " type RC .* pid $1 " || true; }

# One address could hold every place (connections that ask for a slice and stay, or half-open
# ones reopened as each deadline closes them).  It may hold --conns-per-source places, by default
# half of --max-conns: with --max-conns 4, an established and a half-open peer from one address,
# and the next from there is refused; a client from another address is served.
test_source_limits() {
	local s=$1 t=$1/source_limits pids=() i
	second_address "$t" || return 0
	# The half-open peer must outlast the checks: a long deadline.
	own_server "$t" "$s" --max-conns 4 --handshake-timeout-ms 20000 || return 0
	peer_bg stays "$server_port" req:4096 sleep:8000
	pids+=("$peer_pid")
	peer_bg half "$server_port" --no-rtu sleep:8000
	pids+=("$peer_pid")
	for ((i = 0; i < 100 && $(qps_of "$server_pid") < 2; i++)); do sleep 0.1; done
	await_line "$work/stays.out" '^reply status=0 ' 20 || true
	peer_steps same "$server_port" req:4096 || true
	if [ -s "$work/same.out" ]; then
		fail "$t/same_address_refused" "a third from $RDMA_ADDR got in: $(cat "$work/same.out")"
	else
		pass_if "$t/same_address_refused" "no 'reject reason=source-full': $(head -c 300 "$work/same.err")" \
			grep -qx 'reject reason=source-full' "$work/server.out"
	fi
	other_address_served "$t"
	end_jobs "${pids[@]}"
	server_end "$t"
}

# An established peer that never asks for a slice would hold its place for ever: it is closed
# --request-timeout-ms after its accept.  One that asked at once stays, however late it writes.
test_request_deadline() {
	local s=$1 t=$1/request_deadline qp
	own_server "$t" "$s" --request-timeout-ms 1500 || return 0
	peer_bg asker "$server_port" req:4096 sleep:3000 write:0:1 ring:1
	local asker=$peer_pid
	peer_bg idle "$server_port" sleep:6000
	pass_if "$t/closed_in_time" "no 'close ... reason=request_timeout' within 10 s" \
		await_line "$work/server.out" '^close qp=0x[0-9a-f]+ reason=request_timeout$' 10
	wait "$asker" || true
	qp=$(granted_qp asker) || true
	if [ -n "$qp" ] && ! grep -q "^close $qp " "$work/server.out" &&
		await_line "$work/server.out" "^doorbell $qp seq=1 value=1 ok\$" 5; then
		pass "$t/asker_stays"
	else
		fail "$t/asker_stays" "$(cat "$work/asker.out" "$work/asker.err"; grep "^close ${qp:-none} " "$work/server.out")"
	fi
	end_jobs "$peer_pid"
	server_end "$t"
}

# A peer that vanishes without a disconnect (its QP stops answering, as a machine that died
# would) must be found by the keepalive probe and closed; a peer that is merely quiet must not be.
test_keepalive() {
	local s=$1 t=$1/keepalive qp
	own_server "$t" "$s" --keepalive-ms 1000 || return 0
	peer_bg quiet "$server_port" req:4096 sleep:4000
	qp=$(granted_qp quiet) || { give_up "$t" "the quiet peer got no slice" "$peer_pid"; return; }
	wait "$peer_pid" || true
	if grep -q "^close $qp " "$work/server.out"; then
		fail "$t/quiet_is_no_reason" "$(grep "^close $qp " "$work/server.out")"
	else
		pass_if "$t/quiet_is_no_reason" "the quiet peer's own disconnect was not seen" \
			await_line "$work/server.out" "^disconnect $qp\$" 10
	fi

	peer_bg gone "$server_port" req:4096 vanish sleep:30000
	qp=$(granted_qp gone) || { give_up "$t" "the vanishing peer got no slice" "$peer_pid"; return; }
	await_line "$work/gone.out" '^vanished$' 10 || true
	pass_if "$t/vanished_peer_closed" "no 'close $qp reason=peer_silent' within 8 s" \
		await_line "$work/server.out" "^close $qp reason=peer_silent\$" 8
	# Its place and slice come back while it still sleeps.
	server_end "$t" vanished_peer_freed "$peer_pid"
}

# A write past the end of the pool's region breaks the server's QP (on rxe with no completion;
# 6.12 raises LAST_WQE_REACHED, 6.1 nothing): a pool of one chunk, all of it the peer's slice.
# The connection must close with a line saying why, not keep its place until the peer leaves.
test_broken_qp() {
	local s=$1 t=$1/broken_qp qp
	own_server "$t" "$s" --keepalive-ms 1000 --pool-size 4096 || return 0
	peer_bg broken "$server_port" req:4096 write:4096:1 sleep:30000
	qp=$(granted_qp broken) || { give_up "$t" "the peer got no slice" "$peer_pid"; return; }
	if await_line "$work/broken.out" '^write off=4096 status=IBV_WC_REM_ACCESS_ERR$' 10; then
		pass_if "$t/closed_with_reason" "no 'close $qp reason=qp_error' within 8 s" \
			await_line "$work/server.out" "^close $qp reason=qp_error\$" 8
	else
		fail "$t/closed_with_reason" "the write past the pool was not refused: $(cat "$work/broken.out")"
	fi
	server_end "$t" place_freed "$peer_pid"
}

# Under --isolation mr a client's key opens its own slice only, but can be
# guessed (rxe draws 8 bits of it at random): a wrong one breaks the guesser's
# QP.  After four guessers from one address, each writing just past its slice,
# the next from there is refused for a minute; one from elsewhere is served.
test_key_guesses() {
	local s=$1 t=$1/key_guesses i wrong=''
	second_address "$t" || return 0
	own_server "$t" "$s" --isolation mr || return 0
	for i in 1 2 3 4; do
		peer_steps "guess$i" "$server_port" req:4096 write:4096:1 || true
		grep -qx 'write off=4096 status=IBV_WC_REM_ACCESS_ERR' "$work/guess$i.out" ||
			wrong="guess $i: $(cat "$work/guess$i.out" "$work/guess$i.err" | head -c 300 || true)"
	done
	pass_unless "$t/wrong_keys_fail" "$wrong"
	if run_client fifth "$server_port" "$RDMA_ADDR" 4096 -n 16 -k 4; then
		fail "$t/fifth_refused" "a fifth client from $RDMA_ADDR was served"
	elif grep -q 'rejected the connection: source-penalized$' "$work/fifth.err" &&
		grep -qx 'reject reason=source-penalized' "$work/server.out"; then
		pass "$t/fifth_refused"
	else
		fail "$t/fifth_refused" "no 'source-penalized' from client and server: $(head -c 300 "$work/fifth.err")"
	fi
	other_address_served "$t"
	server_end "$t"
}

# The guessers' connections open first, then on each at once a write its key does not open (just
# past its slice, as a wrong key is refused): the penalty refuses only new connections, so a
# source guesses as often as it holds places (--conns-per-source, 8 here), then is refused.
test_guesses_at_once() {
	local s=$1 t=$1/key_guesses/at_once i pids=() refused
	own_server "$t" "$s" --isolation mr --conns-per-source 8 || return 0
	rm -f "$work/go"
	for i in 1 2 3 4 5 6 7 8; do
		peer_bg "burst$i" "$server_port" req:4096 "wait:$work/go" write:4096:1
		pids+=("$peer_pid")
	done
	for i in 1 2 3 4 5 6 7 8; do await_line "$work/burst$i.out" '^reply status=0 ' 20 || true; done
	touch "$work/go"
	wait "${pids[@]}" 2>/dev/null || true
	refused=$(cat "$work"/burst*.out | grep -c '^write off=4096 status=IBV_WC_REM_ACCESS_ERR$' || true)
	pass_if "$t/every_guess_made" "$refused of 8 wrong keys were refused by the NIC" [ "$refused" = 8 ]
	for ((i = 0; i < 100 && $(grep -c '^disconnect ' "$work/server.out") < 8; i++)); do sleep 0.1; done
	if run_client ninth "$server_port" "$RDMA_ADDR" 4096 -n 16 -k 4; then
		fail "$t/then_refused" "a ninth client from $RDMA_ADDR was served"
	else
		pass_if "$t/then_refused" "no 'source-penalized': $(head -c 300 "$work/ninth.err")" \
			grep -q 'rejected the connection: source-penalized$' "$work/ninth.err"
	fi
	server_end "$t"
}

# A SEND WITH INVALIDATE naming a neighbour's key while the neighbour streams.  Under --isolation
# mr the key is a region's from ibv_reg_mr(), which rxe does not let a peer invalidate (seen on
# 6.1 and 6.12): the attacker's receive fails and it is closed, and the victim streams to its end
# (1 MiB, 262144 slots: lapped only if the server is 262 doorbells behind).
test_invalidate() {
	local s=$1 t=$1/invalidate n=1000000 rkey victim seen status=0
	own_server "$t" "$s" --isolation mr || return 0
	run_client victim "$server_port" "$RDMA_ADDR" 1048576 -n "$n" -k 1000 &
	victim=$!
	await_line "$work/victim.out" '^granted ' 20 ||
		{ give_up "$t" "the victim got no slice: $(head -c 300 "$work/victim.err")"; wait "$victim" || true; return; }
	rkey=$(sed -n 's/^granted .* rkey=\(0x[0-9a-f]*\) .*/\1/p' "$work/victim.out")
	peer_steps attacker "$server_port" "sendinv:$rkey" || true
	# The stream must outlast the attack, or the test shows nothing.
	seen=$(grep -c '^doorbell ' "$work/victim.out" || true)
	pass_if "$t/attacker_closed" \
		"no failed receive for the attacker: $(cat "$work"/attacker.{out,err} "$work/server.err" | head -c 400)" \
		await_line "$work/server.err" '^[a-z_]+: receive qp=0x[0-9a-f]+ failed: IBV_WC_REM_INV_REQ_ERR$' 10
	wait "$victim" || status=$?
	if [ "$seen" -ge $((n / 1000)) ]; then
		fail "$t/victim_streams_on" "the victim's $n writes were done before the attack was: make the stream longer"
	else
		expect_served "$t/victim_streams_on" victim "$n" 1000 1048576 "$status"
	fi
	server_end "$t"
}

# Settings the device cannot take are refused at start, by name.
test_device_limits() {
	local s=$1 t=$1/device_limits
	expect_error "$t/srq_depth_beyond_cq" 20 'srq-depth 40000 .*need a CQ.*max_cqe' \
		"$top/$s" --port 0 --srq-depth 40000
	pass_unless "$t/never_listens" "$(sed -n 's/^listen /it listened first: &/p' "$work/cmd.out"
		grep -q 'srq-depth 40000' "$work/cmd.err" || echo "it never said why it ended")"
}

# server_into_fifo T PROGRAM READER [--stderr-too] [OPTIONS...]: the server's stdout (and
# stderr) into a FIFO that the shell command READER reads, its output in $work/server.out; waits
# until the server listens (else T fails, both are ended, and false).
server_into_fifo() {
	local t=$1 program=$2 reader=$3 err=$work/server.err
	shift 3
	[ "${1:-}" != --stderr-too ] || { err=$work/fifo; shift; }
	rm -f "$work"/*.out "$work"/*.err "$work/fifo"
	mkfifo "$work/fifo"
	bash -c "$reader" <"$work/fifo" >"$work/server.out" 2>/dev/null &
	reader_pid=$!
	"$top/$program" --port 0 "$@" >"$work/fifo" 2>"$err" &
	server_pid=$!
	server_port=$(listen_port "$work/server.out" "$server_pid") && return
	give_up "$t" "server did not start" "$reader_pid"
	return 1
}

# stats_flood: SIGUSR1 to the server (a stats line each it reads; signals
# sent faster are one) until what its write()s took (wchar) has not grown for
# 2 s: its output is full (a pipe holds 64 KiB, a pty about 12 KiB; doorbell
# lines, 10 a second, are too few) or blocked; false if still growing at 30 s.
stats_flood() {
	local end=$((SECONDS + 30)) k v wrote=0 last=-1 since=$SECONDS
	while ((SECONDS < end)) && kill -USR1 "$server_pid" 2>/dev/null; do
		while read -r k v; do [ "$k" != wchar: ] || wrote=$v; done <"/proc/$server_pid/io"
		if ((wrote != last)); then
			last=$wrote since=$SECONDS
		elif ((SECONDS - since >= 2)); then
			return 0
		fi
	done
	return 1
}

# drops_counted T STATUS: the server, stopped, exited STATUS 0 and said
# that it dropped lines (its output did fill).
drops_counted() {
	if [ "$2" = 0 ] && grep -Eq '^rdma_[a-z_]+: [0-9]+ lines of output dropped' "$work/server.err"; then
		pass "$1/drops_counted"
	else
		fail "$1/drops_counted" "exit status $2, stderr: $(head -c 300 "$work/server.err")"
	fi
}

# Whoever reads the server's stdout stops reading: the server must serve on (its lines dropped and
# counted), not block with its receives unposted while every client meets "receiver not ready".
test_output_stalled() {
	local s=$1 t=$1/output_stalled status=0
	server_into_fifo "$t" "$s" 'head -n 1; exec sleep 600' || return 0
	stats_flood || fail "$t/output_filled" "the server's output still took more after 30 s of SIGUSR1"
	run_client stalled "$server_port" "$RDMA_ADDR" 4096 -n 4000 -k 1 || status=$?
	pass_if "$t/client_served" "client exited $status: $(head -c 300 "$work/stalled.err")" [ "$status" = 0 ]
	status=0
	stop_server || status=$?
	drops_counted "$t" "$status"
	end_jobs "$reader_pid"
}

# The same on a terminal whose reader stopped (a hung ssh session): a stopped
# script(1) holds the server's pty.  poll() says a terminal can take more while
# it has any room, and a write() that needs more sleeps unless non-blocking.
test_tty_stalled() {
	local s=$1 t=$1/tty_stalled status=0 script_pid i
	rm -f "$work"/*.out "$work"/*.err
	script -qefc "echo \$\$ >'$work/pid'; exec '$top/$s' --port 0 2>'$work/server.err'" /dev/null \
		</dev/null >"$work/server.out" &
	script_pid=$!
	if ! server_port=$(listen_port "$work/server.out" "$script_pid") || ! server_pid=$(cat "$work/pid"); then
		fail "$t" "the server did not start: $(head -c 300 "$work/server.err")"
		end_jobs "$script_pid"
		return
	fi
	kill -STOP "$script_pid"
	stats_flood || fail "$t/output_filled" "the server's output still took more after 30 s of SIGUSR1"
	run_client stalled "$server_port" "$RDMA_ADDR" 4096 -n 100 -k 10 || status=$?
	pass_if "$t/client_served" "client exited $status: $(head -c 300 "$work/stalled.err")" [ "$status" = 0 ]
	# Ended, the server is a zombie until script, stopped, waits for it.
	kill -INT "$server_pid"
	for ((i = 0; i < 100; i++)); do
		[[ $(ps -o stat= -p "$server_pid") == Z* ]] && break
		sleep 0.1
	done
	pass_if "$t/sigint_stops_it" "still running 10 s after SIGINT: $(ps -o stat=,wchan:32= -p "$server_pid")" [ "$i" -lt 100 ]
	kill -KILL "$server_pid" 2>/dev/null || true
	server_pid=
	kill -CONT "$script_pid"
	status=0
	await_exit "$script_pid" 10 || status=$?
	drops_counted "$t" "$status"
}

# The reader of the server's stdout goes away: SIGPIPE would end the server
# without its teardown.  It must stop by itself (no signal), say why, exit 1.
test_output_gone() {
	local s=$1 t=$1/output_gone status=0
	server_into_fifo "$t" "$s" 'head -n 1' || return 0
	wait "$reader_pid" 2>/dev/null || true
	run_client gone "$server_port" "$RDMA_ADDR" 4096 -n 100 -k 10 || true
	await_exit "$server_pid" 10 || status=$?
	server_pid=
	if [ "$status" = 124 ]; then
		fail "$t" "it still ran 10 s after its stdout's reader went away"
	elif [ "$status" = 1 ] && grep -q 'reader is gone' "$work/server.err"; then
		pass "$t"
	else
		fail "$t" "exit status $status (want 1), stderr: $(head -c 300 "$work/server.err")"
	fi
}

# mismatch_flood_case T SERVER [req:SIZE]: a peer rings 4000 doorbells whose
# slots never match (it writes nothing), into a slice or with none (a doorbell
# of no bytes needs no key).  The server says at most 10 a second, on stdout
# and the MISMATCHes on stderr, and counts the rest: all accounted for, none ok.
mismatch_flood_case() {
	local t=$1 n=4000 said counted shown held start elapsed
	own_server "$t" "$2" || return 0
	shift 2
	start=$SECONDS
	# shellcheck disable=SC2046 # one step per word
	peer_steps flood "$server_port" "$@" $(printf 'ring:2 %.0s' $(seq "$n")) || true
	elapsed=$((SECONDS - start + 1))
	stop_server || true
	said=$(grep -c '^rdma_[a-z_]*: MISMATCH qp=0x[0-9a-f]*: doorbell 2 found 0 in its slot' "$work/server.err" || true)
	counted=$(sed -n 's/^rdma_[a-z_]*: MISMATCH qp=0x[0-9a-f]*: \([0-9]*\) more, not printed$/\1/p' "$work/server.err" | awk '{ n += $1 } END { print n + 0 }')
	shown=$(grep -c '^doorbell qp=0x[0-9a-f]* seq=2 value=0 MISMATCH$' "$work/server.out" || true)
	held=$(sed -n 's/^doorbells qp=0x[0-9a-f]* not_printed=\([0-9]*\) ok=0 lapped=0 MISMATCH=\1$/\1/p' "$work/server.out" | awk '{ n += $1 } END { print n + 0 }')
	if [ "$(grep -c '^ring seq=2 status=IBV_WC_SUCCESS$' "$work/flood.out")" != "$n" ]; then
		fail "$t" "the peer did not ring $n times: $(tail -n 2 "$work/flood.out" "$work/flood.err")"
	elif [ "$said" -gt $((10 * elapsed)) ] || [ "$shown" -gt $((10 * elapsed)) ]; then
		fail "$t/lines_limited" "$shown doorbell lines and $said MISMATCH lines in ${elapsed} s, want at most 10 a second"
	else
		pass_if "$t/lines_limited" "stdout: $shown said and $held counted, stderr: $said and $counted, want $n MISMATCH in all" \
			[ "$((said + counted)):$((shown + held))" = "$n:$n" ]
	fi
}

# Nobody reads the server's stdout and stderr (one pipe, full) while a peer
# rings MISMATCH doorbells: it must still serve the next client, stop on SIGINT.
test_stderr_stalled() {
	local s=$1 t=$1/stderr_stalled status=0
	server_into_fifo "$t" "$s" 'head -n 1; exec sleep 600' --stderr-too || return 0
	stats_flood || fail "$t/output_filled" "the server's output still took more after 30 s of SIGUSR1"
	# shellcheck disable=SC2046 # one step per word
	peer_steps flood "$server_port" req:4096 $(printf 'ring:2 %.0s' $(seq 4000)) || true
	timeout 30 "$client" --port "$server_port" "$RDMA_ADDR" 4096 -n 100 -k 10 \
		>"$work/next.out" 2>"$work/next.err" || status=$?
	pass_if "$t/next_client_served" "client exited $status: $(head -c 300 "$work/next.err")" [ "$status" = 0 ]
	status=0
	stop_server || status=$?
	pass_if "$t/sigint_stops_it" "exit status $status (124: still running 20 s after SIGINT)" [ "$status" = 0 ]
	end_jobs "$reader_pid"
}
