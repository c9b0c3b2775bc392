#!/usr/bin/env bash
# bench-report.sh OUTDIR CHECKED MODE: turns bench.sh's numbers in OUTDIR
# (*.tsv) into its results.md and plots (*.png).  CHECKED: how many doorbells
# were checked; MODE: full, smoke or headline (headline.tsv alone, no plots).
set -euo pipefail

out=$1 checked=$2 mode=$3
headline=$out/headline.tsv rates=$out/rates.tsv scale=$out/scale.tsv
head_k=$(awk -F'\t' 'NR == 2 { print $2 }' "$headline") # the headline's K
stats=$(cat "$(dirname "$0")/stats.awk")

# median FILE WHAT K WINDOW [range]: the median writes/s of those rows of FILE
# (rates.tsv or headline.tsv); with "range", followed by the lowest and highest.
median() {
	awk -F'\t' -v what="$2" -v k="$3" -v w="$4" -v range="${5:-}" "$stats"'
		NR > 1 && $1 == what && $2 == k && $3 == w { v[++n] = $5 }
		END {
			if (!n) exit 1
			m = int(median_of(v, n))
			print range ? with_range("%s", m, v, n) : m
		}' "$1"
}

# latency_table: one row per server of latency.tsv, in the order they ran:
# the medians over its runs (every client of every round) of each run's
# median (with the lowest and highest) and p99 round trip, and of idle CPU.
latency_table() {
	awk -F'\t' "$stats"'
		function med(list,   n, v, mid) {
			n = split(list, v, " ")
			mid = median_of(v, n) # sorts v
			lo = v[1]; hi = v[n]
			return mid
		}
		NR > 1 {
			if (!($1 in m)) order[k++] = $1
			m[$1] = m[$1] " " $3; p[$1] = p[$1] " " $4; c[$1] = c[$1] " " $5
		}
		END {
			for (i = 0; i < k; i++) {
				w = order[i]
				pm = med(p[w]); cm = med(c[w]); mm = med(m[w])
				printf "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%s\n", w, mm, lo, hi, pm,
					(c[w] ~ /-/) ? "-" : sprintf("%.2f", cm)
			}
		}' "$out/latency.tsv"
}

heading() { printf '## %s\n\n' "$*"; }
para() { printf '%s\n\n' "$*"; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# What bench.sh ran: the shell assignments it wrote.
writes='' load='' scaling='' lat='' rearm_default='' where=''
# shellcheck source=/dev/null
. "$out/run.env"

# ratios FILE WHAT K W: round by round, WHAT's writes/s at K and W (W "best":
# its best W of that round) over perftest's list (-l K -Q K) in the same
# round: the spread the medians' ratio hides.  W "best": their median
# (lowest-highest); else, tab-separated, their median, its 95% interval ("-":
# too few rounds; stats.awk's interval_rank), lowest and highest, and ahead,
# level, behind (that interval against 1) or too few rounds.
ratios() {
	awk -F'\t' -v what="$2" -v k="$3" -v w="$4" "$stats"'
		NR > 1 && $1 == what && $2 == k && w == "best" && $5 > c[$4] { c[$4] = $5 }
		NR > 1 && $1 == what && $2 == k && $3 == w { c[$4] = $5 }
		NR > 1 && $1 == "ib_write_bw -l -Q" && $2 == k { pt[$4] = $5 }
		END {
			n = paired_ratios(c, pt, v)
			if (!n) exit 1
			m = median_of(v, n)
			if (w == "best") {
				print with_range("%.2f", m, v, n)
				exit
			}
			ci = interval_of(v, n, b)
			so = ci == "-" ? "too few rounds" : b[1] > 1 ? "ahead" : b[2] < 1 ? "behind" : "level"
			printf "%.2f\t%s\t%.2f-%.2f\t%s\n", m, ci, v[1], v[n], so
		}' "$1"
}

# cpu_median TAG W COLUMN: the median of that column of headline.tsv over
# the client's runs at W against the server TAG (a share of CPU time, %).
cpu_median() {
	awk -F'\t' -v what="client $1" -v w="$2" -v col="$3" "$stats"'
		NR > 1 && $1 == what && $3 == w && $col != "-" { v[++n] = $col }
		END {
			if (!n) { print "-"; exit }
			printf "%.0f%%\n", median_of(v, n)
		}' "$headline"
}

# headline_section: the client at its K against ib_write_bw at its best.
headline_section() {
	local k=$head_k n pt w row tag
	local -A server=([ev]=rdma_srq_pool_server_ev [tick]=rdma_pool_server)
	n=$(awk -F'\t' 'NR > 1 { r[$4] = 1 } END { print length(r) }' "$headline")
	pt=$(median "$headline" "ib_write_bw -l -Q" "$k" - range)
	heading "The headline: K=$k against ib_write_bw -s 4 -l $k -Q $k, $n rounds"
	echo "| writer | writes/s | ÷ perftest, round by round | its 95% interval | lowest-highest | so | busiest CPU busy | other CPUs idle |"
	echo "|---|---:|---:|---:|---:|---|---:|---:|"
	echo "| ib_write_bw -s 4 -R -l $k -Q $k | $pt | 1.00 | - | - | - | - | - |"
	for tag in ev tick; do
		for w in 1 4; do
			IFS=$'\t' read -r -a row <<<"$(ratios "$headline" "client $tag" "$k" "$w")"
			echo "| rdma_pool_client -k $k -w $w against ${server[$tag]} | $(median "$headline" "client $tag" "$k" "$w" range) | ${row[0]} | ${row[1]} | ${row[2]} | ${row[3]} | $(cpu_median "$tag" "$w" 6) | $(cpu_median "$tag" "$w" 7) |"
		done
	done
	echo
	para "Each round: perftest's run, and for each server the client at W=1 and W=4 against" \
		"it, $writes writes each run; these three take turns at going first. writes/s:" \
		"the median (lowest-highest). Round by round: the client's writes/s over" \
		"perftest's in the same round; the median of the $n ratios and the interval that" \
		"holds their true median with 95% confidence (order statistics: the j-th lowest" \
		"to the j-th highest ratio). Two runs of one commit agree when their intervals" \
		"overlap. So: ahead when the whole interval lies above 1, behind when below," \
		"level when it holds 1. Busiest CPU busy, other CPUs idle: over each client run," \
		"connecting included (/proc/stat), the median over the rounds; one CPU busy and" \
		"the others idle means the work runs on one CPU, and more doorbells in flight (W)" \
		"cannot spread it."
}

# breakdown_section: where a write's CPU goes (breakdown.tsv), per write,
# and per doorbell: every K writes (perftest's: a completion every K).
breakdown_section() {
	heading "Where a write's CPU goes, K=$head_k, one run each"
	echo "| writer | against | W | writes/s | user µs/write | system µs/write | read+write calls/write | writer's sleeps/doorbell | server CPU µs/doorbell | server's sleeps/doorbell | all CPUs µs/write | above the floor µs/write |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' -v k="$head_k" -v hz="$(getconf CLK_TCK)" 'NR > 1 { us = 1e6 / hz / $4; d = $4 / k }
		$1 ~ /^ib_write_bw/ { floor = ($13 - $6 - $10) * us; $1 = "ib_write_bw -s 4 -R -l " k " -Q " k; $2 = "its own server" }
		$1 == "client" { $1 = "rdma_pool_client -k " k }
		NR > 1 { printf "| %s | %s | %s | %d | %.2f | %.2f | %.3f | %.2f | %.1f | %.2f | %.2f | %.2f |\n",
			$1, $2, $3, $5, $6 * us, $7 * us, $8 / $4, $9 / d, $10 * 1e6 / hz / d,
			$12 / d, $13 * us, $13 * us - floor }' "$out/breakdown.tsv"
	echo
	para "Each run: $((4 * writes)) writes. CPU time: user and system, in clock ticks of" \
		"1/$(getconf CLK_TCK) s (/proc/PID/stat); calls: read(2) and write(2) (/proc/PID/io);" \
		"sleeps: voluntary context switches (/proc/PID/status). The writer's over its whole" \
		"life, connecting included; its server's over the same span (ib_write_bw's server:" \
		"its whole life); all CPUs: their busy time over the run (/proc/stat; for" \
		"ib_write_bw, from just before its server's start to its end). The floor: all" \
		"CPUs' busy time in ib_write_bw's run less its writer's user time and its server's" \
		"CPU time (it spins): mostly the kernel's work for a write."
}

{
	para "# make bench: results"
	[ "$mode" = smoke ] && para "**Smoke run** (make test): too small to mean anything."
	[ "$mode" = headline ] && para "**The headline alone** (bench.sh --headline)."
	echo "- When: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
	echo "- Where: $where"
	para "- Doorbells checked on the server side: $checked, every one in order with value == seq."
	headline_section
} >"$out/results.md"
[ "$mode" != headline ] || exit 0

bw=$(median "$rates" ib_write_bw - -)
rounds=$(awk -F'\t' 'NR > 1 { r[$4] = 1 } END { print length(r) }' "$rates")
ks=$(awk -F'\t' 'NR > 1 && $1 == "client" { print $2 }' "$rates" | sort -nu)
read -r -a wins <<<"$(awk -F'\t' 'NR > 1 && $1 == "client" { print $3 }' "$rates" | sort -nu | tr '\n' ' ')"
step_k=$(awk -F'\t' 'NR > 1 && $1 ~ /^client -/ { print $2; exit }' "$rates")

{
	breakdown_section
	heading "Message rate: 4-byte RDMA WRITEs, against rdma_srq_pool_server_ev"
	para "Rates: median of $rounds round(s) of $writes 4-byte writes each;" \
		"every configuration ran once per round, in turn."
	head='| writer | K |' rule='|---|---:|' pt='| ib_write_bw -s 4 -R | - |'
	for w in "${wins[@]}"; do
		head+=" writes/s (W=$w) | ratio |" rule+='---:|---:|'
		pt+=" $(median "$rates" ib_write_bw - - range) | 1.00 |"
	done
	printf '%s\n' "$head" "$rule" "$pt"
	for k in $ks; do
		printf '| rdma_pool_client | %s |' "$k"
		for w in "${wins[@]}"; do
			m=$(median "$rates" client "$k" "$w")
			printf ' %s | %s |' "$(median "$rates" client "$k" "$w" range)" "$(ratio "$m" "$bw")"
		done
		echo
	done
	echo
	echo "writes/s: the median (lowest-highest) over the rounds; ratio: of the medians."
	para "K: a doorbell every K writes. W: doorbells in flight (--window);" \
		"W=1 waits for each doorbell's completion before posting the next batch."
	heading "Against perftest at its best: K writes per post, a completion every K"
	head='| K | ib_write_bw -s 4 -R -l K -Q K |' rule='|---:|---:|'
	for w in "${wins[@]}"; do head+=" rdma_pool_client W=$w |" rule+='---:|'; done
	printf '%s\n' "$head client's best ÷ perftest's | the same, round by round |" "$rule---:|---:|"
	for k in $ks; do
		pl=$(median "$rates" "ib_write_bw -l -Q" "$k" -) || continue
		printf '| %s | %s |' "$k" "$(median "$rates" "ib_write_bw -l -Q" "$k" - range)"
		best=0
		for w in "${wins[@]}"; do
			m=$(median "$rates" client "$k" "$w")
			if ((m > best)); then best=$m; fi
			printf ' %s |' "$(median "$rates" client "$k" "$w" range)"
		done
		echo " $(ratio "$best" "$pl") | $(ratios "$rates" client "$k" best) |"
	done
	echo
	echo "client's best ÷ perftest's: of the medians; round by round: in each" \
		"round, the client's better W over perftest's run of that round," \
		"their median (lowest-highest)."
	para "Per ibv_post_send() (on rxe, one write(2) to the kernel whatever the list's length:" \
		"post_send_db() in rdma-core's providers/rxe): ib_write_bw at its defaults posts" \
		"one write and asks for a completion every 100; with -l K -Q K it posts a list of" \
		"K writes and asks for one completion per list; the client posts K writes, K-1" \
		"unsignaled and the doorbell signaled, in one call."
	heading "What each step is worth (K=$step_k, W=1 unless said)"
	echo "| client options | inline | one post per batch | W | writes/s | ratio to ib_write_bw |"
	echo "|---|---|---|---:|---:|---:|"
	while IFS='|' read -r what opts inl lst w; do
		m=$(median "$rates" "$what" "$step_k" "$w")
		echo "| $opts | $inl | $lst | $w | $(median "$rates" "$what" "$step_k" "$w" range) | $(ratio "$m" "$bw") |"
	done <<EOF
client --no-inline --post-each|--no-inline --post-each|no|no|1
client --post-each|--post-each|yes|no|1
client --no-inline|--no-inline|no|yes|1
client|(defaults)|yes|yes|1
client|-w ${wins[-1]}|yes|yes|${wins[-1]}
EOF
	echo
	heading "Doorbell round trip (4 bytes), and idle CPU, by re-arm delay"
	echo "| measure | median µs | p99 µs | idle after serving: % of a core |"
	echo "|---|---:|---:|---:|"
	latency_table | awk -F'\t' -v def="rdma_srq_pool_server_ev --rearm-after-us $rearm_default" '{
		if ($1 == def) $1 = $1 " (the default)"
		range = ($3 != $4) ? sprintf(" (%s-%s)", $3, $4) : ""
		if ($1 == "ib_write_lat") {
			printf "| ib_write_lat -s 4 -R (half a ping-pong round trip) | %s | %s | - |\n", $2, $5
			printf "| the same doubled: a whole round trip | %.1f | %.1f | - |\n", 2 * $2, 2 * $5
		} else {
			printf "| rdma_pool_client -k 1 -w 1 against %s | %s%s | %s | %s |\n", $1, $2, range, $5, $6
		}
	}'
	echo
	para "Each server: $lat. Median and p99: the medians over all its clients'" \
		"(in brackets, the lowest and highest median). Idle: the server's CPU" \
		"time (from /proc/PID/schedstat) in the seconds after the client left."
	ev="rdma_srq_pool_server_ev --rearm-after-us $rearm_default" tick=rdma_pool_server
	# The p99s as the headline's rates: each client's over the tick loop's
	# client in its place (latency.tsv's round R.C: round R, the C-th of the
	# server's clients), the median of those ratios and its 95% interval;
	# worse only if that interval, as printed, lies above 1.
	p99=$(awk -F'\t' -v ev="$ev" -v tick="$tick" "$stats"'
		$1 == ev { e[$2] = $4 } $1 == tick { t[$2] = $4 }
		END {
			n = paired_ratios(e, t, v)
			if (!n) exit
			ci = interval_of(v, n, b)
			printf "p99 %.2f x the tick loop'"'"'s, client by client (95%% interval %s;" \
				" target no worse, that interval not all above 1: %s)", median_of(v, n), ci,
				ci == "-" ? "too few clients" : (b[1] > 1 ? "NOT met" : "met")
		}' "$out/latency.tsv")
	latency_table | awk -F'\t' -v ev="$ev" -v tick="$tick" -v p99="$p99" '
		$1 == ev { em = $2; ei = $6 }
		$1 == tick { tm = $2 }
		END {
			if (!tm || !em) exit
			r = em / tm
			printf "Targets, %s (its default re-arm delay) against %s:" \
				" median %.2f x the tick loop'"'"'s (target at most 1.20: %s); %s;" \
				" idle %s%% of a core (target under 1%%: %s).\n",
				ev, tick, r, (r <= 1.2) ? "met" : "NOT met", p99,
				ei, (ei + 0 < 1) ? "met" : "NOT met"
		}'
	echo
	para "![round trip and idle CPU against the re-arm delay](rearm.png)"
	heading "Server CPU time (user + system, from /proc/PID/stat)"
	echo "| server | idle: seconds | CPU s | % of a core | load: seconds | CPU s | % of a core |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' 'NR > 1 {
		printf "| %s | %s | %s | %.1f | %s | %s | %.1f |\n", $1, $2, $3,
			100 * $3 / $2, $4, $5, ($4 > 0 ? 100 * $5 / $4 : 0) }' "$out/cpu.tsv"
	echo
	para "Idle: nobody connected. Load: $load, all at once."
	para "![writes/s against K](writes_per_s.png)"
	heading "Scaling with clients, all at once"
	echo "| server | clients | writes/s | doorbells/s | server CPU s per 1000 doorbells | server % of a core | slowest client s | RNR NAKs |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' 'NR > 1 {
		printf "| %s | %d | %.0f | %.0f | %.3f | %.1f | %s | %s |\n", $1, $2,
			$3 / $5, $4 / $5, 1000 * $6 / $4, 100 * $6 / $5, $7, $8 }' "$scale"
	echo
	para "Each client: $scaling. writes/s and doorbells/s: all the clients' together, over" \
		"the wall time from the first client's start to the last one's end (each client's" \
		"start-up and connection included); the server's CPU time (from" \
		"/proc/PID/schedstat) is over the same span. Slowest client: the longest of the" \
		"clients' own stream times, first write to last doorbell. RNR NAKs: the rise of" \
		"the device's send_rnr_err counter, every \"receiver not ready\" NAK its responders" \
		"sent, for every QP on it (a doorbell retried counts once per try; a REQ_ALLOC too)."
	echo "![aggregate writes/s against clients](scale.png)"
} >>"$out/results.md"

# The plots, in one run of gnuplot (starting it takes seconds under emulation).  The first: the
# client's writes/s against K, one line per window, and ib_write_bw's rate as a horizontal line.
for k in $ks; do
	printf '%s' "$k"
	for w in "${wins[@]}"; do printf '\t%s' "$(median "$rates" client "$k" "$w")"; done
	echo
done >"$out/plot.dat"
plots="$bw title 'ib_write_bw -s 4' with lines dashtype 2 linewidth 2"
for i in "${!wins[@]}"; do
	plots+=", '$out/plot.dat' using 1:$((i + 2)) title 'rdma_pool_client, W=${wins[i]}' with linespoints linewidth 2"
done
# The second: aggregate writes/s against clients, one line per server (a
# block of scale.dat each, in the order they ran).
awk -F'\t' 'NR > 1 {
	if ($1 != last) { if (NR > 2) printf "\n\n"; last = $1 }
	printf "%d\t%.0f\n", $2, $3 / $5
}' "$scale" >"$out/scale.dat"
scale_plots='' index=0
while IFS= read -r server; do
	scale_plots+="${scale_plots:+, }'$out/scale.dat' index $((index++)) using 1:2 title '$server' with linespoints linewidth 2"
done <<<"$(awk -F'\t' 'NR > 1 && !seen[$1]++ { print $1 }' "$scale")"
clients=$(awk -F'\t' 'NR > 1 { print $2 }' "$scale" | sort -nu)
# The third: the event-driven server's round trip (median, p99) and idle CPU against its re-arm
# delay, with the tick loop's round trip as lines; a delay per x position, in the order they ran.
latency_table | awk -F'\t' '$1 ~ /--rearm-after-us / {
	n = split($1, w, " "); printf "%d\t%s\t%s\t%s\t%s\n", i++, w[n], $2, $5, $6 }' >"$out/rearm.dat"
read -r tick_median tick_p99 <<<"$(latency_table | awk -F'\t' '$1 == "rdma_pool_server" { print $2, $5 }')"
delay_tics=$(awk -F'\t' '{ printf "%s\"%s\" %s", (NR > 1 ? ", " : ""), $2, $1 }' "$out/rearm.dat")
# The idle axis up to the highest idle CPU, and at least 1%: the event-driven server's is often
# below 1%, and may be 0 at every delay, which gnuplot's autoscale cannot draw (an empty range).
idle_top=$(awk -F'\t' '$5 > m { m = $5 } END { print (m > 1 ? m * 1.1 : 1) }' "$out/rearm.dat")
# gnuplot's fonts want a cache directory; the VM's home is read-only.
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
XDG_CACHE_HOME=$cache gnuplot <<EOF
set terminal pngcairo size 800,500 noenhanced
set logscale x 2
set yrange [0:*]
set key bottom right
set grid

set output '$out/writes_per_s.png'
set title '4-byte RDMA WRITEs on Soft-RoCE (medians)'
set xlabel 'K (a doorbell every K writes)'
set ylabel 'writes per second'
set xrange [0.7:370]
set xtics ($(echo "$ks" | paste -sd,))
plot $plots

set output '$out/scale.png'
set title 'Clients at once, 4-byte RDMA WRITEs on Soft-RoCE'
set xlabel 'clients at once'
set key below
set ylabel 'writes per second, all clients together'
set xrange [0.7:$(echo "$clients" | tail -n 1)*1.4]
set xtics ($(echo "$clients" | paste -sd,))
plot $scale_plots

set output '$out/rearm.png'
set title 'Doorbell round trip and idle CPU of rdma_srq_pool_server_ev, by re-arm delay'
unset logscale x
set logscale y
set xlabel '--rearm-after-us'
set xrange [-0.5:*]
set xtics ($delay_tics)
set ylabel 'round trip, µs'
set yrange [*:*]
set y2label 'idle CPU after serving, % of a core'
set y2range [0:$idle_top]
set y2tics
plot '$out/rearm.dat' using 1:3 title 'median round trip' with linespoints linewidth 2, \
     '$out/rearm.dat' using 1:4 title 'p99 round trip' with linespoints linewidth 2, \
     ${tick_median:-0} title 'rdma_pool_server median' with lines dashtype 2, \
     ${tick_p99:-0} title 'rdma_pool_server p99' with lines dashtype 3, \
     '$out/rearm.dat' using 1:5 axes x1y2 title 'idle CPU' with linespoints linewidth 2
EOF
