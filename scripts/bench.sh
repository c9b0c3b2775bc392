#!/usr/bin/env bash
# make bench: the client's stream of 4-byte RDMA WRITEs against perftest's
# ib_write_bw and ib_write_lat on one Soft-RoCE device in one boot, each
# server's CPU time and how it scales with clients: a measurement, not a test.
#
#   scripts/soft-roce.sh scripts/bench.sh [--smoke | --headline] [--rounds N] [OUTDIR]
#
# Writes into OUTDIR (bench-results/ by default, not committed) results.md
# (the tables), its plots (*.png), the raw numbers (*.tsv) and every
# program's output (logs/).  --smoke is the same run made small, for make
# test.  --headline measures the headline alone (the client at K = 64
# against ib_write_bw -l 64 -Q 64), a few minutes, to see whether two runs
# of one commit agree.  --rounds N: the headline's rounds (20; smoke: 6).
#
# Rates are noisy, on an emulated CPU above all, so each rate is measured
# ROUNDS times, every configuration once per round in turn, and the median
# is reported; ratios only compare numbers from the same boot.
# Exits non-zero if a program fails or a doorbell arrives out of order or
# with the wrong value: a fast run that broke the protocol measures nothing.
# An unguarded failure ends the run saying which command, line and status
# (set -E: in functions and subshells too), never just make's "Error 1".
set -Eeuo pipefail
trap 'echo "bench: stopped: line $LINENO: $BASH_COMMAND: exit status $?" >&2' ERR

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh, which sets RDMA_ADDR}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/system-lib.sh"
. "$top/scripts/program-lib.sh"

usage_error() {
	printf 'bench: %s\nusage: bench.sh [--smoke | --headline] [--rounds N] [OUTDIR]\n' "$*" >&2
	exit 2
}
mode=full head_rounds='' # mode: full, smoke or headline
while [ $# -gt 0 ]; do
	case $1 in
	--smoke | --headline) mode=${1#--}; shift ;;
	--rounds)
		[[ ${2:-} =~ ^[1-9][0-9]{0,3}$ ]] ||
			usage_error "--rounds wants a number of rounds from 1 to 9999, not '${2:-}'"
		head_rounds=$2; shift 2 ;;
	-*) usage_error "unknown option '$1'" ;;
	*) break ;;
	esac
done
[ $# -le 1 ] || usage_error "one OUTDIR at most, not '$*'"
final=${1:-$top/bench-results}

if [ "$mode" = smoke ]; then
	writes=320 ks=(16) windows=(1 4) rounds=1 step_k=16
	lat_doorbells=200 idle_seconds=1 load_clients=2 load_writes=300
	scale_clients=(1 4) scale_writes=640
	delays=(0) lat_rounds=1 lat_clients=1 lat_idle_seconds=1
	# Six rounds: the fewest that give a 95% interval (bench-report.sh).
	head_k=16 head_rounds=${head_rounds:-6}
else
	writes=51200 ks=(1 4 16 64 256) windows=(1 4) rounds=5 step_k=64
	lat_doorbells=1000 idle_seconds=10 load_clients=4 load_writes=20000
	scale_clients=(1 2 4 8 16 32) scale_writes=20000
	delays=(0 1000 2000 5000) lat_rounds=4 lat_clients=3 lat_idle_seconds=2
	head_k=64 head_rounds=${head_rounds:-20}
fi
# writes is a multiple of every K: perftest's post list (-l K) must divide
# its number of writes (perftest_parameters.c).
load_k=4
# Every slot of the slice is written at most once (1 MiB = 262144 slots),
# so every doorbell must find exactly its own sequence number.
slice=1048576
# Scaling: a client's slice fits its writes (in whole 4 KiB), the pool
# (--pool-size) exactly the most clients' slices, whatever scale_writes is.
scale_k=64 scale_slice=$(((scale_writes * 4 + 4095) / 4096 * 4096))

ev_server=rdma_srq_pool_server_ev tick_server=rdma_pool_server
# The servers compared, each "PROGRAM [OPTIONS...]" (the tables and plots
# name it so): the event-driven server plain (--rearm-after-us 0: it re-arms
# the CQ at every wake-up) and with its default deferred re-arming.
servers=("$tick_server" "$ev_server --rearm-after-us 0" "$ev_server")
scale_servers=("${servers[@]}")
[ "$mode" != smoke ] || scale_servers=("$tick_server" "$ev_server")
# perftest's, a fresh one per pair: one bench at a time holds a lock, but
# root's and a user's are two locks (lock_dir), so each has ports of its own.
pt_port=18600
[ "$(id -u)" = 0 ] || pt_port=28600

server_pid='' work='' out='' doorbells_checked=0
cleanup() {
	if [ -n "$server_pid" ]; then # the run failed while it served
		kill -KILL "$server_pid" 2>/dev/null || true
		server_log || true
	fi
	rm -rf "$work"
	[ -z "$out" ] || [ "$out" = "$final" ] || publish_dir "$out" "$final" ||
		echo "bench: this run's results are in $out" >&2
}
trap cleanup EXIT
# on_signal SIG (stop_on_signals): a run stopped midway publishes nothing.
on_signal() {
	echo "bench: SIG$1: stopped; nothing is published" >&2 || exec 2>/dev/null
	[ "$out" = "$final" ] || rm -rf "$out"
	out=''
	cleanup
}
stop_on_signals on_signal
# Scratch on the machine that runs the device (in the VM, its own tmpfs):
# the servers print doorbell lines, and where they go is timed too.
work=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")

# $work/costed FILE CMD...: runs CMD and, once it has ended but before it is
# reaped (a zombie: its stat and status still there), writes its cost to FILE;
# $work/costed PID: the cost of process PID so far.  A cost: "user system calls
# sleeps", CPU time in clock ticks (/proc/PID/stat), read(2) and write(2) calls
# (syscr + syscw, /proc/PID/io), voluntary context switches (/proc/PID/status).
# A zombie's io only root may read: the calls are what reaping it adds to ours
# (wait_task_zombie() in kernel/exit.c adds a child's I/O counts to its parent's).
cost='' # when set, client_run and perftest run their programs costed
cat >"$work/costed" <<'EOF'
#!/usr/bin/perl
sub fields { # FILE, %v: its "name: number" lines, and stat's CPU ticks, into %v
	my ($file, $v) = @_;
	open my $h, "<", $file or die "$file: $!\n";
	sysread $h, my $t, 65536; # in one read(2), which the delta below counts
	@$v{"utime", "stime"} = (split / /, $t)[13, 14] if $file =~ m{/stat$};
	$v->{$1} = $2 while $t =~ /^(\w+):\s+(\d+)/mg;
}
sub line { my $v = shift; "$v->{utime} $v->{stime} " . ($v->{syscr} + $v->{syscw}) . " $v->{voluntary_ctxt_switches}\n" }
if (@ARGV == 1) { my %v; fields("/proc/$ARGV[0]/$_", \%v) for "stat", "io", "status"; print line(\%v); exit }
my ($file, $ended, %v, %ours, %then) = shift;
$SIG{CHLD} = sub { $ended = 1 }; # and the child stays until waitpid
my $pid = fork // die "fork: $!\n";
unless ($pid) { exec @ARGV; die "$ARGV[0]: $!\n" }
select undef, undef, undef, 0.1 until $ended;
fields("/proc/$pid/$_", \%v) for "stat", "status";
fields("/proc/self/io", \%ours);
waitpid $pid, 0;
my $status = $?;
fields("/proc/self/io", \%then);
$v{$_} = $then{$_} - $ours{$_} for "syscr", "syscw";
$v{syscr}--; # the read of %ours
open my $out, ">", $file or die "$file: $!\n";
print $out line(\%v);
exit($status & 127 ? 128 + ($status & 127) : $status >> 8);
EOF
chmod +x "$work/costed"

say() { echo "bench: [${SECONDS}s] $*" >&2; }
die() { say "$*"; exit 1; }

# One bench at a time on one machine: two would measure each other, and
# their perftest runs would meet on one port.  (Opened to read: users
# share /run/lock, and one may have made the file.)
bench_lock=$(lock_dir)/rdma-pool-doorbell-bench.lock
[ -e "$bench_lock" ] || : >"$bench_lock"
exec {lock}<"$bench_lock"
if ! flock -n "$lock"; then
	say "another bench runs on this machine: waiting for it to end (two at once would measure each other)"
	flock "$lock"
fi
# What this run writes goes to a folder of its own, which takes FINAL's
# place when the run ends, whole or failed (its logs say why), not when it
# is stopped; made once the lock is held.
out=$(run_dir "$final")
mkdir -p "$out/logs"

# The round trip against the tick loop, and against the event-driven server
# at each re-arm delay, its default (from its --help) always one.
rearm_default=$("$top/$ev_server" --help | tr '\n' ' ' |
	sed -n 's/.*--rearm-after-us N[^(]*(default \([0-9]*\)).*/\1/p')
[ -n "$rearm_default" ] || die "$ev_server --help names no default for --rearm-after-us"
read -r -a delays <<<"$(printf '%s\n' "${delays[@]}" "$rearm_default" | sort -nu | paste -sd' ')"
latency_servers=("$tick_server")
for b in "${delays[@]}"; do latency_servers+=("$ev_server --rearm-after-us $b"); done

# server_start "PROGRAM [OPTIONS...]" [MORE...]: in the background (the
# entry split at spaces), logging to $work/server.out; returns once it listens.
server_start() {
	local -a argv
	read -r -a argv <<<"$1"
	# Emptied first: the redirection below happens after the fork, and
	# listen_port might meanwhile find the last server's listen line.
	: >"$work/server.out"
	"$top/${argv[0]}" --port 0 "${argv[@]:1}" "${@:2}" >"$work/server.out" 2>"$work/server.err" &
	server_pid=$!
	port=$(listen_port "$work/server.out" "$server_pid") || die "$* did not listen: $(cat "$work/server.err")"
}

server_stop() {
	local status=0
	stop_program "$server_pid" || status=$?
	server_pid=''
	server_log
	[ "$status" = 0 ] || die "the server exited with status $status (124: still running 20 s after SIGINT): $(tail -n 3 "$work/server.err")"
}

# server_log: the ended server's stdout, then its errors (MISMATCH among them).
server_log() { cat "$work/server.out" "$work/server.err" >>"$out/logs/servers.out"; }

# server_cpu: user + system CPU time of the server so far, in clock ticks
# (fields 14 and 15 of /proc/PID/stat; the name in field 2 has no spaces).
server_cpu() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }

# sum_first FILE...: the sum of the first numbers of the FILEs.  Read by
# bash: starting a program costs a fifth of a second under emulation.
sum_first() {
	local file n total=0
	for file; do read -r n _ <"$file"; total=$((total + n)); done
	echo "$total"
}

# server_cpu_ns: the server's time on a CPU so far, in nanoseconds (field 1
# of /proc/PID/task/TID/schedstat, summed over its threads): the 10 ms
# ticks of /proc/PID/stat are too coarse for a few hundred doorbells.
server_cpu_ns() { sum_first "/proc/$server_pid/task/"*/schedstat; }

# rnr_naks: "receiver not ready" NAKs RDMA_DEV's responders have sent so far,
# for every QP of the device (a message found the SRQ empty, once per try:
# the writer's NIC retries it), or "-" where it has no such counter.  Not
# another run's device, made or removed meanwhile: every device's only
# where RDMA_DEV is unset (RDMA_ADDR given by hand).
rnr_naks() {
	# shellcheck disable=SC2206 # a device's name, or the pattern *
	local counters=(/sys/class/infiniband/${RDMA_DEV:-*}/ports/*/hw_counters/send_rnr_err)
	if [ -r "${counters[0]}" ]; then sum_first "${counters[@]}"; else echo -; fi
}

# client_run NAME [--size BYTES] ARGS...: one client against the current
# server, quiet, asking for BYTES (default: $slice); its output in
# $work/NAME.out (into logs/: by clients_end after the timing; on failure, at once).
client_run() {
	local name=$1 size=$slice
	shift
	if [ "${1:-}" = --size ]; then size=$2; shift 2; fi
	timeout 300 ${cost:+"$work/costed" "$work/$name.cost"} "$top/rdma_pool_client" --port "$port" --quiet "$RDMA_ADDR" "$size" \
		"$@" >"$work/$name.out" 2>&1 && return
	cat "$work/$name.out" >>"$out/logs/clients.out"
	die "rdma_pool_client $* failed: $(tail -n 3 "$work/$name.out")"
}

# clients_end FROM NAME...: those client runs, all ended, into logs/clients.out;
# each must have said "done", and doorbells_check FROM all they rang.  Sets
# rung (their doorbells, all together) and slowest (the longest seconds=).
clients_end() {
	local from=$1 name files=()
	shift
	for name; do files+=("$work/$name.out"); done
	cat "${files[@]}" >>"$out/logs/clients.out"
	read -r rung slowest <<<"$(awk '$1 == "done" {
		for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] + 0 }
		rung += f["doorbells"]
		if (f["seconds"] > slowest) slowest = f["seconds"]
		n++
	}
	END { if (n == ARGC - 1) print rung, slowest + 0 }' "${files[@]}")"
	[ -n "$slowest" ] || die "of the client runs $*, one said no 'done' (logs/clients.out)"
	doorbells_check "$from" "$#" "$rung"
}

server_lines() { wc -l <"$work/server.out"; }

# doorbells_check FROM CLIENTS RUNG: once CLIENTS connections' QPs are
# destroyed (the next run needs their slices back: up to 2 s later on 6.1,
# whose rxe never raises LAST_WQE_REACHED), the server's lines from FROM on
# must say each one's doorbells in order, value == seq and "ok", and those
# held back (beyond 10 a second) counted "ok": RUNG in all.
doorbells_check() {
	local from=$1 clients=$2 rung=$3 i seen
	for ((i = 0; i < 100; i++)); do
		seen=$(tail -n "+$from" "$work/server.out" | grep -c '^destroy ' || true)
		[ "$seen" -ge "$clients" ] && break
		sleep 0.1
	done
	seen=$(tail -n "+$from" "$work/server.out" | awk '
		$1 == "grant" { open[$2] = 1; last[$2] = 0 }
		$1 == "disconnect" { open[$2] = 0 }
		$1 == "doorbell" {
			split($3, s, "="); split($4, v, "=")
			if (!open[$2] || $5 != "ok" || s[2] != v[2] || s[2] + 0 <= last[$2])
				bad++
			last[$2] = s[2] + 0
			n++
		}
		$1 == "doorbells" { # at the next second, or the destroy
			split($3, c, "=")
			if ($4 != "ok=" c[2])
				bad++
			n += c[2]
		}
		END { print (bad ? -1 : n + 0) }')
	[ "$seen" = "$rung" ] || die "the clients rang $rung doorbells, the server saw $seen" \
		"in order with value == seq (-1: some were not)"
	doorbells_checked=$((doorbells_checked + rung))
}

client_checked() { local from; from=$(($(server_lines) + 1)); client_run "$@"; clients_end "$from" "$1"; }

# clients_at_once PREFIX N ARGS...: N clients, PREFIX1 to PREFIXN, all at
# once, each with ARGS (client_run); fails if one does, once all have ended.
clients_at_once() {
	local prefix=$1 n=$2 i pids=() status=0
	shift 2
	for ((i = 1; i <= n; i++)); do client_run "$prefix$i" "$@" & pids+=($!); done
	for i in "${pids[@]}"; do wait "$i" || status=$?; done
	((status == 0)) || echo "bench: a client exited with status $status" >&2
	return "$status"
}

# field NAME FILE: the value of NAME=value in FILE's last line that has it.
field() { sed -n "s/.*\<$1=\([0-9.]*\).*/\1/p" "$2" | tail -n 1; }

# perftest TOOL NAME ARGS...: TOOL's server and client over rdma_cm on
# RDMA_ADDR (the client fails at once while nobody listens, so it retries:
# the server's output says nothing before it is done); the client's output
# in $work/NAME.out.  A pair that fails (seen: "Unexpected CM event"; no
# connection in twenty tries) is started again, both sides, twice at most.
perftest() {
	local tool=$1 name=$2 pid i pair
	shift 2
	for pair in 1 2 3; do
		pt_port=$((pt_port + 1))
		timeout 300 ${cost:+"$work/costed" "$work/$name.server.cost"} "$tool" -R -F -p "$pt_port" "$@" >"$work/$name.server" 2>&1 &
		pid=$!
		for ((i = 0; i < 20; i++)); do
			sleep 0.5
			if timeout 120 ${cost:+"$work/costed" "$work/$name.cost"} "$tool" -R -F -p "$pt_port" "$@" "$RDMA_ADDR" \
				>"$work/$name.out" 2>&1; then
				wait "$pid" || true
				cat "$work/$name.out" >>"$out/logs/perftest.out"
				return 0
			fi
			kill -0 "$pid" 2>/dev/null || break
		done
		{ kill "$pid"; wait "$pid"; } 2>/dev/null || true
		printf '== %s %s, pair %d: server\n%s\n== client\n%s\n' "$tool" "$*" \
			"$pair" "$(cat "$work/$name.server")" "$(cat "$work/$name.out")" \
			>>"$out/logs/perftest-failures.out"
		say "$tool $* failed (pair $pair of 3; both sides in logs/perftest-failures.out)"
	done
	die "$tool $* failed three times: $(tail -n 3 "$work/$name.out")"
}

# measured TOOL NAME AWK WHAT ARGS...: perftest, then AWK on the row under
# its "#bytes" header into figures; run again, twice at most, while AWK
# prints nothing ("TOOL ARGS WHAT").
measured() {
	local tool=$1 name=$2 prog=$3 what=$4 try
	shift 4
	for try in 1 2 3; do
		perftest "$tool" "$name" "$@"
		figures=$(grep -A1 '#bytes' "$work/$name.out" | tail -n 1 | awk "$prog") || figures=''
		[ -z "$figures" ] || return 0
		say "$tool $* $what (try $try; see logs/perftest.out)"
	done
	die "$tool $* $what three times"
}

# write_bw NAME ARGS...: ib_write_bw's run NAME; its writes/s (its MsgRate,
# in millions of packets, here writes, per second); none from a run that
# completed with 0 for every figure (seen on 6.1).
write_bw() {
	measured ib_write_bw "$1" '$5 * 1e6 > 0.5 { printf "%.0f", $5 * 1e6 }' \
		'reported 0 writes/s or none' "${@:2}"
}

# write_bw_list K [N]: ib_write_bw at its best (N writes, $writes by default), as the client posts: K writes
# per ibv_post_send() (-l K), a completion every K (-Q K).  It posts a list
# only while the list fits in its send queue (-t, 128 by default), so for
# K > 64 the queue is 2K deep: two lists in flight, as at K = 64.
write_bw_list() { write_bw bwl -s 4 -n "${2:-$writes}" -l "$1" -Q "$1" -t $(($1 > 64 ? 2 * $1 : 128)); }

# row TABLE FIELD...: one line of tab-separated fields at the end of
# OUTDIR/TABLE.tsv (the first, each table's header, makes the file).
row() { local IFS=$'\t'; printf '%s\n' "${*:2}" >>"$out/$1.tsv"; }
row rates what k window round writes_per_s

measure_rates() {
	local r k w step
	server_start "$ev_server"
	for ((r = 1; r <= rounds; r++)); do
		say "rates, round $r of $rounds"
		# perftest at its defaults: one write per ibv_post_send(), a
		# completion asked for every 100th (-Q 100), 128 in flight.
		write_bw bw -s 4 -n "$writes"
		row rates ib_write_bw - - "$r" "$figures"
		# And at its best, as the client posts (write_bw_list).
		for k in "${ks[@]}"; do
			write_bw_list "$k"
			row rates "ib_write_bw -l -Q" "$k" - "$r" "$figures"
		done
		for k in "${ks[@]}"; do
			for w in "${windows[@]}"; do
				client_checked rate -n "$writes" -k "$k" -w "$w"
				row rates client "$k" "$w" "$r" "$(field writes_per_s "$work/rate.out")"
			done
		done
		# The steps: what inline data and posting lists are worth.
		for step in "--no-inline --post-each" "--post-each" "--no-inline"; do
			# shellcheck disable=SC2086 # two options in one word
			client_checked rate -n "$writes" -k "$step_k" $step
			row rates "client $step" "$step_k" 1 "$r" "$(field writes_per_s "$work/rate.out")"
		done
	done
	server_stop
}

row headline what k window round writes_per_s busiest_cpu_busy_pct others_idle_pct

# cpu_times: each CPU's line of /proc/stat (cpuN user nice system idle
# iowait irq softirq steal ...), in clock ticks since boot.
cpu_times() { local line; while read -r line; do [[ $line != cpu[0-9]* ]] || echo "$line"; done </proc/stat; }

# cpu_shares BEFORE AFTER: between two cpu_times, the busiest CPU's busy
# share (all but idle and iowait) and the other CPUs' idle share, as
# percentages, tab-separated: whether one CPU did all the work.
cpu_shares() {
	awk 'NR == FNR { for (i = 2; i <= 9; i++) a[$1, i] = $i; next }
	{
		all = 0
		for (i = 2; i <= 9; i++) all += $i - a[$1, i]
		idle = $5 - a[$1, 5] + $6 - a[$1, 6]
		busy[$1] = all > 0 ? 100 * (all - idle) / all : 0
		idle_pct[$1] = all > 0 ? 100 * idle / all : 100
		if (top == "" || busy[$1] > busy[top]) top = $1
	}
	END {
		for (c in busy) if (c != top) { others += idle_pct[c]; n++ }
		printf "%.0f\t%s\n", busy[top], n ? sprintf("%.0f", others / n) : "-"
	}' <(echo "$1") <(echo "$2")
}

# The headline, against each server, since they cost the writer differently:
# a doorbell that completes on the event-driven server's armed CQ wakes it
# (the kernel's completion handler, in the writer's system call or on its
# CPU); the tick loop polls.  Under emulation a whole round runs fast or slow
# (perftest's list: 22380 to 49405 writes/s in one run on 6.12): the report
# compares the client with perftest round by round, and in each round the
# three take turns at going first, lest one always start after a pause.
measure_headline() {
	local r i turn=(perftest "$ev_server" "$tick_server")
	for ((r = 1; r <= head_rounds; r++)); do
		say "headline, round $r of $head_rounds"
		for ((i = 0; i < 3; i++)); do
			case ${turn[(r + i) % 3]} in
			perftest) write_bw_list "$head_k"; row headline "ib_write_bw -l -Q" "$head_k" - "$r" "$figures" - - ;;
			"$ev_server") headline_clients "$r" "$ev_server" ev ;;
			*) headline_clients "$r" "$tick_server" tick ;;
			esac
		done
	done
}

# headline_clients ROUND SERVER TAG: the client at W = 1 and W = 4 (their
# order changes with the round) against SERVER, a row "client TAG" each.
# The CPUs' shares over each client run (connecting included) say whether
# more doorbells in flight could help: not while one CPU does all the work.
headline_clients() {
	local r=$1 tag=$3 w from before after
	server_start "$2"
	for w in $((r % 2 ? 1 : 4)) $((r % 2 ? 4 : 1)); do
		from=$(($(server_lines) + 1))
		before=$(cpu_times)
		client_run head -n "$writes" -k "$head_k" -w "$w"
		after=$(cpu_times)
		clients_end "$from" head
		row headline "client $tag" "$head_k" "$w" "$r" \
			"$(field writes_per_s "$work/head.out")" "$(cpu_shares "$before" "$after")"
	done
	server_stop
}

row breakdown what server window writes writes_per_s user sys calls sleeps server_cpu server_calls server_sleeps cpus_busy

# Where a write's CPU goes: perftest at its best and the client at its K and
# each W against each server, once each, 4 x writes writes (CPU time counts
# in clock ticks, hundredths of a second): the writer's cost (costed), its
# server's over the same span (perftest's: its whole life), and all the CPUs'
# busy time, connecting included.  (On 6.12 rxe sends and receives on a
# workqueue of its own: rxe_sched_task() in rxe_verbs.c; on 6.1 mostly in
# the writer's system call, in tasklets when a queue backs up.)
measure_breakdown() {
	local n=$((4 * writes)) w server from busy c
	say "breakdown"
	cost=1 busy=$(cpus_busy)
	write_bw_list "$head_k" "$n"
	breakdown_row "ib_write_bw -l -Q" ib_write_bw - "$n" "$figures" bwl "$busy" "0 0 0 0" "$(cat "$work/bwl.server.cost")"
	for server in "$tick_server" "$ev_server"; do
		server_start "$server"
		for w in "${windows[@]}"; do
			from=$(($(server_lines) + 1)) busy=$(cpus_busy) c=$("$work/costed" "$server_pid")
			client_run bd -n "$n" -k "$head_k" -w "$w"
			breakdown_row client "$server" "$w" "$n" "$(field writes_per_s "$work/bd.out")" bd "$busy" "$c" \
				"$("$work/costed" "$server_pid")"
			clients_end "$from" bd
		done
		server_stop
	done
	cost=''
}

# cpus_busy: the CPUs' busy time so far, in clock ticks (/proc/stat's first
# line: user, nice, system, irq, softirq, steal; not idle, not iowait).
cpus_busy() { awk '{ print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# breakdown_row WHAT SERVER W WRITES WRITES/S NAME BUSY BEFORE AFTER: a row of
# breakdown.tsv: the writer's cost ($work/NAME.cost), its server's from cost
# BEFORE to AFTER (user + system, calls, sleeps), the CPUs' busy ticks since BUSY.
breakdown_row() {
	row breakdown "${@:1:5}" "$(tr ' ' '\t' <"$work/$6.cost")" "$(awk -v a="$8" -v b="$9" -v t="$7" \
		-v now="$(cpus_busy)" 'BEGIN { OFS = "\t"; split(a, x, " "); split(b, y, " ")
		print y[1] + y[2] - x[1] - x[2], y[3] - x[3], y[4] - x[4], now - t }')"
}

row latency what round median_us p99_us idle_pct

# ib_write_lat's ping-pong, and the client's doorbell round trip against
# each of latency_servers, many times (under emulation one client's median
# swings by 2x from run to run); then the server's CPU while idle just after
# it served: with a re-arm delay it must fall asleep within it.
measure_latency() {
	local r c entry a b idle rows
	say "latency"
	# ib_write_lat's t_typical (the median) and 99% percentile, in µs, run
	# again unless both are positive (seen on 6.1, two benches at once).
	measured ib_write_lat lat '$5 + 0 > 0 && $8 + 0 > 0 { print $5 "\t" $8 }' \
		'gave no positive median and p99' -s 4 -n "$lat_doorbells"
	row latency ib_write_lat 1 "$figures" -
	for ((r = 1; r <= lat_rounds; r++)); do
		for entry in "${latency_servers[@]}"; do
			say "latency, round $r of $lat_rounds: $entry"
			server_start "$entry"
			rows=()
			for ((c = 1; c <= lat_clients; c++)); do
				client_checked lat -n "$lat_doorbells" -k 1 -w 1
				rows+=("$(field median_us "$work/lat.out")	$(field p99_us "$work/lat.out")")
			done
			a=$(server_cpu_ns)
			sleep "$lat_idle_seconds"
			b=$(server_cpu_ns)
			idle=$(awk -v a="$a" -v b="$b" -v s="$lat_idle_seconds" \
				'BEGIN { printf "%.2f", (b - a) / (s * 1e7) }')
			for c in "${!rows[@]}"; do
				row latency "$entry" "$r.$((c + 1))" "${rows[$c]}" "$idle"
			done
			server_stop
		done
	done
}

row cpu server idle_s idle_cpu_s load_s load_cpu_s

# Each server's CPU time while nobody is connected, then while
# load_clients clients stream load_writes writes each, all at once.
measure_cpu() {
	local server hz a b c start end i names=() from rung slowest
	hz=$(getconf CLK_TCK)
	for ((i = 1; i <= load_clients; i++)); do names+=("load$i"); done
	for server in "${servers[@]}"; do
		say "CPU time of $server"
		server_start "$server"
		sleep 1 # let it settle after start-up
		a=$(server_cpu)
		sleep "$idle_seconds"
		b=$(server_cpu)
		from=$(($(server_lines) + 1))
		start=$EPOCHREALTIME
		clients_at_once load "$load_clients" -n "$load_writes" -k "$load_k" || die "a load client failed"
		end=$EPOCHREALTIME
		c=$(server_cpu)
		clients_end "$from" "${names[@]}"
		server_stop
		awk -v s="$server" -v i="$idle_seconds" -v hz="$hz" \
			-v a="$a" -v b="$b" -v c="$c" -v t0="$start" -v t1="$end" \
			'BEGIN { printf "%s\t%d\t%.2f\t%.2f\t%.2f\n",
				 s, i, (b - a) / hz, t1 - t0, (c - b) / hz }' >>"$out/cpu.tsv"
	done
}

row scale server clients writes doorbells wall_s cpu_s slowest_s rnr_naks

measure_scale() {
	local entry n
	for entry in "${scale_servers[@]}"; do
		say "scaling of $entry"
		# All the clients come from one address, at once.
		server_start "$entry" --pool-size "$((scale_slice * scale_clients[-1]))" \
			--conns-per-source "${scale_clients[-1]}"
		# The first client makes the server open the device (pool MR,
		# SRQ, CQ: verbs_open), once; that is not what the rows measure.
		client_checked warm-up --size "$scale_slice" -n "$scale_k" -k "$scale_k"
		for n in "${scale_clients[@]}"; do
			say "scaling of $entry: $n client(s) at once"
			scale_row "$entry" "$n"
		done
		server_stop
	done
}

# scale_row NAME N: N clients at once against the running server (NAME in
# the table), each scale_writes writes into a slice of its own: the wall
# time from the first client's start to the last one's end, and the server's
# CPU time and RNR NAKs over it, in which nothing but the clients (and their
# renice) starts a program.  Nice 19 stands in for other machines: each
# client busy-polls its CQ while a doorbell is on its way, and 32 at the
# server's priority on two CPUs would leave its one thread a 33rd of the time
# (measured: doorbells waited over 10 s for an SRQ it had no time to refill).
scale_row() {
	local name=$1 n=$2 i names=() from t0 t1 c0 c1 r0 r1 rung slowest
	for ((i = 1; i <= n; i++)); do names+=("scale$i"); done
	from=$(($(server_lines) + 1))
	c0=$(server_cpu_ns)
	r0=$(rnr_naks)
	t0=$EPOCHREALTIME
	(
		renice -n 19 -p "$BASHPID" >/dev/null
		clients_at_once scale "$n" --size "$scale_slice" -n "$scale_writes" -k "$scale_k" -w 1
	) || die "a client of $n against $name failed"
	t1=$EPOCHREALTIME
	c1=$(server_cpu_ns)
	r1=$(rnr_naks)
	clients_end "$from" "${names[@]}"
	row scale "$name" "$n" "$((n * scale_writes))" "$rung" "$(awk \
		-v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v r0="$r0" \
		-v r1="$r1" -v slowest="$slowest" 'BEGIN {
			printf "%.3f\t%.4f\t%.3f\t%s", t1 - t0, (c1 - c0) / 1e9,
				slowest, (r0 == "-" ? "-" : r1 - r0) }')"
}

printf '%s=%q\n' writes "$writes" \
	load "$load_clients clients, each $load_writes writes with a doorbell every $load_k" \
	scaling "$scale_writes writes with a doorbell every $scale_k (K=$scale_k), W=1, a slice of $scale_slice bytes" \
	lat "$lat_rounds round(s), every server once per round in turn; each time $lat_clients client(s) of $lat_doorbells doorbells (K=1, W=1) one after the other, then $lat_idle_seconds s idle" \
	rearm_default "$rearm_default" \
	where "kernel $(uname -r), $(nproc) CPUs, device ${RDMA_DEV:-$(cd /sys/class/infiniband && echo *)} at $RDMA_ADDR" >"$out/run.env"
measure_headline
[ "$mode" = headline ] || { measure_breakdown; measure_rates; measure_latency; measure_cpu; measure_scale; }
say "doorbells checked: $doorbells_checked, all in order with value == seq"

"$top/scripts/bench-report.sh" "$out" "$doorbells_checked" "$mode"
publish_dir "$out" "$final" || die "cannot put $out in $final's place"
out=$final plots=''
[ "$mode" = headline ] || plots=", $out/writes_per_s.png, $out/rearm.png and $out/scale.png"
say "wrote $out/results.md$plots"
