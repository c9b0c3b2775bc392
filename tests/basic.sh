# shellcheck shell=bash disable=SC2154,SC2153 # e2e.sh and lib.sh, which come first, set top, work, the peers and RDMA_*
# The protocol working as it should, against one server, and make bench's
# smoke run: sourced by e2e.sh after lib.sh. Most test_* take SERVER PORT.

# client_session T NAME PORT SIZE N K GRANTED [OPTIONS...]: test T, the
# client's run NAME asking SIZE bytes, N writes with a doorbell every K:
# it must exit 0 and check_session must find all of it.
client_session() {
	local status=0
	run_client "$2" "$3" "$RDMA_ADDR" "$4" -n "$5" -k "$6" "${@:8}" || status=$?
	expect_served "$1" "$2" "$5" "$6" "$7" "$status" "$([[ " ${*:8} " != *" --quiet "* ]] || echo quiet)"
}

test_one_client() { client_session "$1/one_client" one "$2" 10000 1000 32 12288; }

# The client's ways of posting (see make bench): several doorbells in
# flight, values from registered memory, one ibv_post_send per write. The
# protocol must not notice: every doorbell in order, value == seq.
test_client_modes() {
	local mode
	for mode in "-w 3" "--no-inline --post-each" "-w 8 --no-inline"; do
		# shellcheck disable=SC2086 # the options are words
		client_session "$1/client_modes/${mode// /}" "mode_${mode// /}" "$2" 10000 1000 7 12288 $mode
	done
}

# A window deeper than the slice: with -w 4 -k 512 up to 2048 writes are in
# flight over 1024 slots, so the client can overwrite a doorbell's slot before
# the server reads it; SIGSTOP stops the server a second, not its NIC.  The
# server must then say "lapped" for those slots, never "MISMATCH".
test_lapping() {
	local t=$1/lapping port=$2 status=0 grant qp lines counts pid
	run_client lap "$port" "$RDMA_ADDR" 4096 -n 200000 -k 512 -w 4 --quiet &
	pid=$!
	# (A server already gone fails the test below, not e2e.sh under set -e.)
	if await_line "$work/lap.out" '^granted ' 20 && kill -STOP "$server_pid"; then
		sleep 1
		kill -CONT "$server_pid"
	fi
	wait "$pid" || status=$?
	grant=$(grant_line "$work/lap.out" 4096)
	qp=$(echo "$grant" | cut -d' ' -f2)
	if [ "$status" != 0 ]; then
		fail "$t" "client exited $status ($(head -c 300 "$work/lap.err"))"
	elif [ -z "$grant" ]; then
		fail "$t" "no grant for the client's slice"
	elif lines=$(session "$grant" destroy) && grep -Eq ' MISMATCH$|MISMATCH=[1-9]' <<<"$lines"; then
		fail "$t" "the server printed MISMATCH for $qp"
	elif counts=$(awk '$1 == "doorbell" { n[$5]++; all++ } # said, and held back:
		$1 == "doorbells" { for (i = 3; i <= 5; i++) { split($i, c, "="); n[c[1]] += c[2] } }
		END { printf "%d %d %d", all + n["not_printed"], n["ok"] + 0, n["lapped"] + 0 }' <<<"$lines") &&
		[ "${counts%% *}" != 391 ]; then
		fail "$t" "the server saw ${counts%% *} doorbells of $qp, not 391"
	elif [ "${counts##* }" = 0 ]; then
		fail "$t" "no doorbell was lapped (doorbells ok lapped: $counts): the test did not test lapping"
	else
		pass "$t (doorbells ok lapped: $counts)"
	fi
}

# --quiet: the doorbells still ring and the server still checks each one,
# but the client prints only the summaries.
test_client_quiet() { client_session "$1/client_quiet" quiet "$2" 4096 300 1 4096 -w 4 --quiet; }

# scale_row_missing RESULTS: the first row of the smoke run's scaling table
# that RESULTS lacks, or has with a number not positive (but the last, RNR
# NAKs, may be 0, or - where rxe has no counter); nothing if all are there.
scale_row_missing() {
	local server n pos='[0-9.]*[1-9][0-9.]*'
	for server in rdma_pool_server rdma_srq_pool_server_ev; do
		for n in 1 4; do
			grep -Eq "^\| $server \| $n( \| $pos){5} \| ([0-9]+|-) \|\$" "$1" ||
				{ echo "$server with $n client(s)"; return; }
		done
	done
}

# latency_row_missing RESULTS: the first row of the smoke run's round-trip table that RESULTS
# lacks, or has without a positive median and p99 or an idle CPU figure; nothing if all are there.
latency_row_missing() {
	local what pos='[0-9.]*[1-9][0-9.]*'
	grep -Eq "^\| ib_write_lat -s 4 -R .* \| $pos \| $pos \| - \|\$" "$1" || { echo ib_write_lat; return; }
	for what in rdma_pool_server "rdma_srq_pool_server_ev --rearm-after-us 0" \
		"rdma_srq_pool_server_ev --rearm-after-us [0-9]+ \(the default\)"; do
		grep -Eq "^\| rdma_pool_client -k 1 -w 1 against $what \| $pos( \([0-9.]+-[0-9.]+\))? \| $pos \| [0-9]+\.[0-9]+ \|\$" "$1" ||
			{ echo "$what"; return; }
	done
}

# make bench's smoke run (bench.sh --smoke), so that it cannot rot: a few hundred writes at
# K = 16 through every measurement, up to 4 clients at once against each server.  bench.sh fails
# on a doorbell out of order or wrong; here every number it reports must be there, each rate positive.
# It starts while the test holds bench's lock, as another bench would: it must say that it waits,
# and go on once the lock is let go.  Its first perftest server ends at once, as a peer's hiccup
# would: the pair is started again.  OUTDIR holds an older run's file: the run replaces it whole.
# The timeout only stops a hang (the test took 160 to 260 s in the VM under TCG).
test_bench_smoke() {
	local t=bench_smoke dir=$work/bench status=0 why='' missing idle pid holder lock png
	local waits='^bench: .* another bench runs on this machine: waiting'
	mkdir -p "$work/flaky" "$dir"
	: >"$dir/older-run"
	cat >"$work/flaky/ib_write_bw" <<-EOF
		#!/bin/sh
		case " \$* " in
		*" $RDMA_ADDR "*) ;;
		*) [ -e "$work/flaky/used" ] || { : >"$work/flaky/used"; exit 1; } ;;
		esac
		exec "$(command -v ib_write_bw)" "\$@"
	EOF
	chmod +x "$work/flaky/ib_write_bw"
	lock=$(bash -c '. "$1" && lock_dir' _ "$top/scripts/system-lib.sh")/rdma-pool-doorbell-bench.lock
	bash -c ': >>"$1" && exec 9<"$1" && flock 9 && : >"$2" && exec sleep 600' _ "$lock" "$work/held" &
	holder=$!
	wait_until "$holder" 30 test -e "$work/held" || true
	PATH=$work/flaky:$PATH timeout 1200 "$top/scripts/bench.sh" --smoke "$dir" >"$work/bench.out" 2>&1 &
	pid=$!
	wait_until "$pid" 60 grep -q "$waits" "$work/bench.out" || true
	end_jobs "$holder"
	wait "$pid" || status=$?
	if [ "$status" != 0 ]; then
		why="bench.sh --smoke exited $status: $(tail -n 3 "$work/bench.out")"
	elif ! grep -q "$waits" "$work/bench.out"; then
		why="bench.sh did not say that it waited for another bench (the test held its lock, $lock)"
	elif ! grep -q 'ib_write_bw .* failed (pair 1 of 3; both sides in logs/perftest-failures.out)$' "$work/bench.out"; then
		why="bench.sh did not say that its first perftest pair failed"
	elif compgen -G "$dir.run.*" >/dev/null; then
		why="a run's own folder was left behind: $(echo "$dir".run.*)"
	elif [ -e "$dir/older-run" ]; then
		why="the older run's file is still in $dir: the new run did not replace it whole"
	elif ! grep -Eq '^\| ib_write_bw -s 4 -R -l 16 -Q 16 \| [1-9][0-9]* \([1-9][0-9]*-[1-9][0-9]*\) \| 1\.00 \| - \| - \| - \| - \| - \|$' "$dir/results.md"; then
		why="no headline row for ib_write_bw -l 16 -Q 16 (its writes/s over six rounds), in results.md"
	elif [ "$(grep -Ec '^\| rdma_pool_client -k 16 -w [14] against rdma_(srq_pool_server_ev|pool_server) \| [1-9][0-9]* \([1-9][0-9]*-[1-9][0-9]*\) \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+-[0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+-[0-9]+\.[0-9]+ \| (ahead|level|behind) \| [0-9]+% \| [0-9]+% \|$' "$dir/results.md")" != 4 ]; then
		why="not 4 headline rows for the client (W=1 and W=4 against each server: writes/s, the ratio round by round, its 95% interval and range, ahead, level or behind, the CPUs' shares), in results.md"
	elif [ "$(grep -Ec '^\| (ib_write_bw -s 4 -R -l 16 -Q 16 \| its own server \| -|rdma_pool_client -k 16 \| rdma_(pool_server|srq_pool_server_ev) \| [14]) \| [1-9][0-9]* \|( -?[0-9]+\.[0-9]+ \|){8}$' "$dir/results.md")" != 5 ]; then
		why="not 5 rows of where a write's CPU goes (perftest; the client at W=1 and W=4 against each server), in results.md"
	elif ! grep -Eq '^\| ib_write_bw -s 4 -R \| - \| [1-9][0-9]* \|' "$dir/results.md"; then
		why="no ib_write_bw rate in results.md"
	elif ! grep -Eq '^\| rdma_pool_client \| 16 \| [1-9][0-9]* \| [0-9]+\.[0-9]+ \| [1-9][0-9]* \| [0-9]+\.[0-9]+ \|$' "$dir/results.md"; then
		why="no client rates for K=16, W=1 and W=4, in results.md"
	elif ! grep -Eq '^\| 16 \| [1-9][0-9]* \| [1-9][0-9]* \| [1-9][0-9]* \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+( \([0-9.]+-[0-9.]+\))? \|$' "$dir/results.md"; then
		why="no row for K=16 against ib_write_bw -l 16 -Q 16 (its rate, the client's at W=1 and W=4, the ratio of the medians and round by round), in results.md"
	elif missing=$(latency_row_missing "$dir/results.md") && [ -n "$missing" ]; then
		why="no round-trip row for $missing, with a positive median and p99 and an idle CPU, in results.md: $(grep -E '^\| (ib_write_lat|rdma_pool_client -k 1)' "$dir/results.md" | tr '\n' ' ' || true)"
	elif ! grep -Eq '^Targets, rdma_srq_pool_server_ev .* median [0-9.]+ x .* p99 [0-9.]+ x .* interval (-|[0-9.]+-[0-9.]+);.* idle [0-9.]+% ' "$dir/results.md"; then
		why="no line that holds the default re-arm delay to its targets, in results.md"
	elif idle=$(sed -n 's/^Targets, .* idle \([0-9.]*\)% .*/\1/p' "$dir/results.md") &&
		! awk -v i="$idle" 'BEGIN { exit !(i < 10) }'; then
		# Measured 0.2 to 0.3%; never asleep, it would use a whole core.
		why="rdma_srq_pool_server_ev with its default re-arm delay used $idle% of a core while idle: it does not fall asleep"
	elif [ "$(grep -Ec '^\| rdma_(pool_server|srq_pool_server_ev( --rearm-after-us 0)?) \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]*[1-9][0-9.]* \| [0-9.]+ \| [0-9.]+ \|$' "$dir/results.md")" != 3 ]; then
		why="not 3 CPU rows (the tick loop, the event-driven server plain and deferring its re-arm) in results.md"
	elif missing=$(scale_row_missing "$dir/results.md") && [ -n "$missing" ]; then
		why="no scaling row for $missing, every number positive, in results.md"
	fi
	for png in rearm.png writes_per_s.png scale.png; do # each must start with the PNG signature
		[ -n "$why" ] || [ "$(head -c 8 "$dir/$png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] ||
			why="$png is not a PNG"
	done
	pass_unless "$t" "$why"
}

# make bench stopped by Ctrl-C midway (here once it measures the headline)
# publishes nothing: the smoke run's results stay, whole.
test_bench_interrupted() {
	local t=bench_interrupted dir=$work/bench pid before why=''
	before=$(md5sum 2>/dev/null <"$dir/results.md") || true
	as_job timeout 600 "$top/scripts/bench.sh" --smoke "$dir" >"$work/bench3.out" 2>&1
	pid=$!
	wait_until "$pid" 300 grep -q 'headline' "$work/bench3.out" || true
	signal_job "$pid" group INT 30 || why="bench.sh still ran 30 s after SIGINT; "
	if [ ! -s "$dir/results.md" ]; then
		why+="no results.md of the smoke run to keep"
	elif [ "$(md5sum <"$dir/results.md")" != "$before" ]; then
		why+="the stopped run replaced the smoke run's results: $(tail -n 3 "$work/bench3.out" | tr '\n' '|')"
	elif compgen -G "$dir.run.*" >/dev/null; then
		why+="a run's own folder was left behind: $(echo "$dir".run.*)"
	elif [ "$job_status" != 130 ]; then
		why+="bench.sh exited $job_status, not by SIGINT: $(tail -n 3 "$work/bench3.out" | tr '\n' '|')"
	fi
	pass_unless "$t" "$why"
}

# grants_disjoint FILE N: FILE has N grants, and none overlaps a slice whose
# QP has no destroy line yet: that QP could still complete a write the NIC was
# placing there (a disconnect is not enough: that leaves it in the error state).
grants_disjoint() {
	local -A lo=() hi=()
	local kind qp addr size q grants=0
	while read -r kind qp addr _ size; do
		case $kind in
		grant)
			addr=$((${addr#addr=}))
			size=${size#size=}
			for q in "${!lo[@]}"; do
				((lo[$q] < addr + size && addr < hi[$q])) && return 1
			done
			lo[$qp]=$addr hi[$qp]=$((addr + size))
			grants=$((grants + 1))
			;;
		destroy) unset "lo[$qp]" "hi[$qp]" ;;
		esac
	done <"$1"
	# Every grant must have been read, or this proves nothing.
	[ "$grants" = "$2" ] && [ "$(grep -c '^grant ' "$1")" = "$2" ]
}

# Eight clients at once, asking different sizes: each is granted its own
# chunk-rounded slice, overlapping none held with it, and sees every doorbell.
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
		wait "${pids[$i]}" || why="client $i failed: $(head -c 300 "$work/c$i.err")"
	done
	for i in "${!sizes[@]}"; do
		[ -n "$why" ] && break
		why=$(check_session "c$i" 1000 16 "${granted[$i]}") || why="client $i: $why"
	done
	tail -n "+$((start + 1))" "$work/server.out" >"$work/grants"
	[ -n "$why" ] || grants_disjoint "$work/grants" 8 || why="server did not print 8 grants, or two overlap"
	pass_unless "$t" "$why"
}

test_deny() {
	local t=$1 port=$2 size=$3 status=$4 deny why=''
	if run_client deny "$port" "$RDMA_ADDR" "$size"; then
		why="client exited 0 on a denied request"
	elif ! grep -qx "denied size=$size status=$status" "$work/deny.out"; then
		why="client did not print 'denied size=$size status=$status'"
	elif ! grep -q "$status" "$work/deny.err"; then
		why="client's error message does not name $status"
	elif ! deny=$(grep -x "deny qp=0x[0-9a-f]* size=$size status=$status" "$work/server.out" | tail -n 1); then
		why="server did not print 'deny ... size=$size status=$status'"
	elif [ "$(session "$deny" | tail -n 1)" != "disconnect $(echo "$deny" | cut -d' ' -f2)" ]; then
		why="server did not see the denied client go"
	else
		why=$(slice_back "$deny" 0) || true
	fi
	pass_unless "$t" "$why"
}

# SIGINT: the server closes every connection, destroys every QP, and its
# last line says that everything came back (expect_shutdown).
test_sigint() { local status=0; stop_server || status=$?; expect_shutdown "$1/sigint_exits_0" "$status"; }
