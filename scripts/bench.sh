#!/usr/bin/env bash
# make bench: the client's stream of 4-byte RDMA WRITEs against perftest's
# ib_write_bw and ib_write_lat on the same Soft-RoCE device in the same boot,
# and what each server costs in CPU time.  A measurement, not a test.
#
#   scripts/soft-roce.sh scripts/bench.sh [--smoke] [OUTDIR]
#
# Writes OUTDIR/results.md (the tables), OUTDIR/writes_per_s.png (the plot),
# the raw numbers (*.tsv) and every program's output (logs/).  OUTDIR is
# bench-results/ by default (not committed).  --smoke is the same run made
# small (a few hundred writes, K = 16, one round) for make test.
#
# Rates are noisy, on an emulated CPU above all, so each rate is measured
# ROUNDS times, every configuration once per round in turn, and the median
# is reported; ratios only compare numbers from the same boot.
# Exits non-zero if a program fails or a doorbell arrives out of order or
# with the wrong value: a fast run that broke the protocol measures nothing.
set -euo pipefail

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh, which sets RDMA_ADDR}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1
	shift
fi
out=${1:-$top/bench-results}

if [ "$smoke" = 1 ]; then
	writes=300 ks=(16) windows=(1 4) rounds=1 step_k=16
	lat_doorbells=200 idle_seconds=1 load_clients=2 load_writes=300
else
	writes=50000 ks=(1 4 16 64 256) windows=(1 4) rounds=5 step_k=64
	lat_doorbells=2000 idle_seconds=10 load_clients=4 load_writes=20000
fi
# The load for the CPU comparison: clients at once, a doorbell every 4.
load_k=4
# Every slot of the slice is written at most once (1 MiB = 262144 slots),
# so every doorbell must find exactly its own sequence number.
slice=1048576

client=$top/rdma_pool_client
ev_server=rdma_srq_pool_server_ev
tick_server=rdma_pool_server
port=7700     # our servers'
pt_port=18600 # perftest's, a fresh one per run

# Scratch on the machine that runs the device (in the VM, its own tmpfs):
# the servers print a line per doorbell, and where that goes is timed too.
work=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$out/logs"
rm -f "$out"/*.tsv "$out"/results.md "$out"/writes_per_s.png "$out"/logs/*

say() {
	echo "bench: $*" >&2
}
die() {
	say "$*"
	exit 1
}

# ---- running things ---------------------------------------------------------

# server_start PROGRAM: in the background, logging to $work/server.out;
# returns once it listens.
server_start() {
	local i
	port=$((port + 1))
	"$top/$1" --port "$port" >"$work/server.out" 2>"$work/server.err" &
	server_pid=$!
	for ((i = 0; i < 200; i++)); do
		grep -q '^listen ' "$work/server.out" && return 0
		sleep 0.1
	done
	die "$1 did not listen within 20 s: $(cat "$work/server.err")"
}

server_stop() {
	kill -INT "$server_pid"
	wait "$server_pid" || die "the server exited with status $?"
	server_pid=
	cat "$work/server.out" >>"$out/logs/servers.out"
}

# server_cpu: user + system CPU time of the server so far, in clock ticks
# (fields 14 and 15 of /proc/PID/stat; the name in field 2 has no spaces).
server_cpu() {
	awk '{ print $14 + $15 }' "/proc/$server_pid/stat"
}

# client_run NAME ARGS...: one client against the current server, quiet;
# its output in $work/NAME.out.
client_run() {
	local name=$1
	shift
	timeout 300 "$client" --port "$port" --quiet "$RDMA_ADDR" "$slice" \
		"$@" >"$work/$name.out" 2>&1 ||
		die "rdma_pool_client $* failed: $(tail -n 3 "$work/$name.out")"
	cat "$work/$name.out" >>"$out/logs/clients.out"
}

# doorbells_of NAME: how many doorbells that client run rang.
doorbells_of() {
	sed -n 's/^done .* doorbells=\([0-9]*\) .*/\1/p' "$work/$1.out"
}

# server_lines: how many lines the server has printed so far.
server_lines() {
	wc -l <"$work/server.out"
}

# doorbells_check FROM CLIENTS RUNG: what the server printed from line FROM
# on, once CLIENTS connections have ended there: each connection's
# doorbells in order, each with value == seq and "ok", RUNG in all.
doorbells_check() {
	local from=$1 clients=$2 rung=$3 i seen
	for ((i = 0; i < 100; i++)); do
		seen=$(tail -n "+$from" "$work/server.out" | grep -c '^disconnect ' || true)
		[ "$seen" -ge "$clients" ] && break
		sleep 0.1
	done
	seen=$(tail -n "+$from" "$work/server.out" | awk '
		$1 == "grant" { open[$2] = 1; last[$2] = 0 }
		$1 == "disconnect" { open[$2] = 0 }
		$1 == "doorbell" {
			split($3, s, "="); split($4, v, "=")
			if (!open[$2] || $5 != "ok" || s[2] != v[2] ||
			    s[2] + 0 <= last[$2])
				bad++
			last[$2] = s[2] + 0
			n++
		}
		END { print (bad ? -1 : n + 0) }')
	[ "$seen" = "$rung" ] ||
		die "the clients rang $rung doorbells, the server saw $seen" \
			"in order with value == seq (-1: some were not)"
	doorbells_checked=$((doorbells_checked + rung))
}

# client_checked NAME ARGS...: client_run, then doorbells_check.
client_checked() {
	local from
	from=$(($(server_lines) + 1))
	client_run "$@"
	doorbells_check "$from" 1 "$(doorbells_of "$1")"
}

# field NAME FILE: the value of NAME=value in FILE's last line that has it.
field() {
	sed -n "s/.*\<$1=\([0-9.]*\).*/\1/p" "$2" | tail -n 1
}

# perftest TOOL NAME ARGS...: TOOL's server and client over rdma_cm on
# RDMA_ADDR (the client fails at once while nobody listens, so it retries:
# the server's output says nothing before it is done); the client's
# output in $work/NAME.out.
perftest() {
	local tool=$1 name=$2 pid i
	shift 2
	pt_port=$((pt_port + 1))
	timeout 300 "$tool" -R -F -p "$pt_port" "$@" >"$work/$name.server" 2>&1 &
	pid=$!
	for ((i = 0; i < 20; i++)); do
		sleep 0.5
		if timeout 120 "$tool" -R -F -p "$pt_port" "$@" "$RDMA_ADDR" \
			>"$work/$name.out" 2>&1; then
			wait "$pid" || true
			cat "$work/$name.out" >>"$out/logs/perftest.out"
			return 0
		fi
	done
	kill "$pid" 2>/dev/null || true
	die "$tool $* failed: $(tail -n 3 "$work/$name.out")"
}

# The row of numbers under perftest's "#bytes" header.
perftest_row() {
	grep -A1 '#bytes' "$1" | tail -n 1
}

# ---- the measurements -------------------------------------------------------

doorbells_checked=0
rates=$out/rates.tsv # what  k  window  round  writes_per_s
printf 'what\tk\twindow\tround\twrites_per_s\n' >"$rates"

# ib_write_bw's message rate, and the client's for every K and window, all
# against the event-driven server, round after round.
measure_rates() {
	local r k w rate
	server_start "$ev_server"
	for ((r = 1; r <= rounds; r++)); do
		say "rates, round $r of $rounds"
		perftest ib_write_bw bw -s 4 -n "$writes"
		# MsgRate is in millions of packets (here: writes) per second.
		rate=$(perftest_row "$work/bw.out" | awk '{ printf "%.0f", $5 * 1e6 }')
		printf 'ib_write_bw\t-\t-\t%d\t%s\n' "$r" "$rate" >>"$rates"
		for k in "${ks[@]}"; do
			for w in "${windows[@]}"; do
				client_checked rate -n "$writes" -k "$k" -w "$w"
				printf 'client\t%s\t%s\t%d\t%s\n' "$k" "$w" "$r" \
					"$(field writes_per_s "$work/rate.out")" >>"$rates"
			done
		done
		# The steps: what inline data and posting lists are worth.
		for step in "--no-inline --post-each" "--post-each" "--no-inline"; do
			# shellcheck disable=SC2086 # two options in one word
			client_checked rate -n "$writes" -k "$step_k" $step
			printf '%s\t%s\t1\t%d\t%s\n' "client $step" "$step_k" "$r" \
				"$(field writes_per_s "$work/rate.out")" >>"$rates"
		done
	done
	server_stop
}

latency=$out/latency.tsv # what  median_us  p99_us
printf 'what\tmedian_us\tp99_us\n' >"$latency"

# ib_write_lat's ping-pong, and the client's doorbell round trip (K = 1,
# one in flight) against each server.
measure_latency() {
	local server
	say "latency"
	perftest ib_write_lat lat -s 4 -n "$lat_doorbells"
	# t_typical (the median) and the 99th percentile.
	perftest_row "$work/lat.out" |
		awk '{ printf "ib_write_lat\t%s\t%s\n", $5, $8 }' >>"$latency"
	for server in "$ev_server" "$tick_server"; do
		server_start "$server"
		client_checked lat -n "$lat_doorbells" -k 1 -w 1
		printf 'client %s\t%s\t%s\n' "$server" \
			"$(field median_us "$work/lat.out")" \
			"$(field p99_us "$work/lat.out")" >>"$latency"
		server_stop
	done
}

cpu=$out/cpu.tsv # server  idle_s  idle_cpu_s  load_s  load_cpu_s
printf 'server\tidle_s\tidle_cpu_s\tload_s\tload_cpu_s\n' >"$cpu"

# Each server's CPU time while nobody is connected, then while
# load_clients clients stream load_writes writes each, all at once.
measure_cpu() {
	local server hz a b c start end i pids from rung
	hz=$(getconf CLK_TCK)
	for server in "$ev_server" "$tick_server"; do
		say "CPU time of $server"
		server_start "$server"
		sleep 1 # let it settle after start-up
		a=$(server_cpu)
		sleep "$idle_seconds"
		b=$(server_cpu)
		pids=()
		from=$(($(server_lines) + 1))
		start=$(date +%s.%N)
		for ((i = 1; i <= load_clients; i++)); do
			client_run "load$i" -n "$load_writes" -k "$load_k" &
			pids+=($!)
		done
		for i in "${pids[@]}"; do
			wait "$i" || die "a load client failed"
		done
		end=$(date +%s.%N)
		c=$(server_cpu)
		rung=0
		for ((i = 1; i <= load_clients; i++)); do
			rung=$((rung + $(doorbells_of "load$i")))
		done
		doorbells_check "$from" "$load_clients" "$rung"
		server_stop
		awk -v s="$server" -v i="$idle_seconds" -v hz="$hz" \
			-v a="$a" -v b="$b" -v c="$c" -v t0="$start" -v t1="$end" \
			'BEGIN { printf "%s\t%d\t%.2f\t%.2f\t%.2f\n",
				 s, i, (b - a) / hz, t1 - t0, (c - b) / hz }' >>"$cpu"
	done
}

{
	printf 'writes=%q\n' "$writes"
	printf 'load=%q\n' "$load_clients clients, each $load_writes writes with a doorbell every $load_k"
	printf 'where=%q\n' "kernel $(uname -r), $(nproc) CPUs, device $(cd /sys/class/infiniband && echo *) at $RDMA_ADDR"
} >"$out/run.env"
measure_rates
measure_latency
measure_cpu
say "doorbells checked: $doorbells_checked, all in order with value == seq"

# ---- the report -------------------------------------------------------------

"$top/scripts/bench-report.sh" "$out" "$doorbells_checked" "$smoke"
