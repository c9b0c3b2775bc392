#!/usr/bin/env bash
# bench-report.sh OUTDIR CHECKED SMOKE: turns the numbers scripts/bench.sh
# left in OUTDIR (rates.tsv, latency.tsv, cpu.tsv, scale.tsv) into
# OUTDIR/results.md and the plots OUTDIR/writes_per_s.png and
# OUTDIR/scale.png.  CHECKED is how many doorbells were checked; SMOKE is 1
# for the small run of make test.
set -euo pipefail

out=$1 checked=$2 smoke=$3
rates=$out/rates.tsv
scale=$out/scale.tsv

# median WHAT K WINDOW [range]: the median writes/s of those rows of
# rates.tsv; with "range", followed by the lowest and highest.
median() {
	awk -F'\t' -v what="$1" -v k="$2" -v w="$3" -v range="${4:-}" '
		NR > 1 && $1 == what && $2 == k && $3 == w { v[n++] = $5 }
		END {
			if (!n) exit 1
			for (i = 1; i < n; i++)
				for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
					t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
				}
			m = (n % 2) ? v[int(n / 2)] : int((v[n / 2 - 1] + v[n / 2]) / 2)
			if (range && n > 1)
				printf "%s (%s-%s)\n", m, v[0], v[n - 1]
			else
				print m
		}' "$rates"
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'
}

bw=$(median ib_write_bw - -)
rounds=$(awk -F'\t' 'NR > 1 { r[$4] = 1 } END { print length(r) }' "$rates")
# What bench.sh ran: writes, load, scaling (shell assignments it wrote).
writes='' load='' scaling='' where=''
# shellcheck source=/dev/null
. "$out/run.env"
ks=$(awk -F'\t' 'NR > 1 && $1 == "client" { print $2 }' "$rates" | sort -nu)
windows=$(awk -F'\t' 'NR > 1 && $1 == "client" { print $3 }' "$rates" | sort -nu)
step_k=$(awk -F'\t' 'NR > 1 && $1 ~ /^client -/ { print $2; exit }' "$rates")
read -r -a wins <<<"$(echo "$windows" | tr '\n' ' ')"

{
	echo "# make bench: results"
	echo
	[ "$smoke" = 1 ] && echo "**Smoke run** (make test): too small to mean anything." && echo
	echo "- When: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
	echo "- Where: $where"
	echo "- Rates: median of $rounds round(s) of $writes 4-byte writes each;" \
		"every configuration ran once per round, in turn."
	echo "- Doorbells checked on the server side: $checked, every one in order with value == seq."
	echo
	echo "## Message rate: 4-byte RDMA WRITEs, against rdma_srq_pool_server_ev"
	echo
	printf '| writer | K |'
	for w in "${wins[@]}"; do printf ' writes/s (W=%s) | ratio |' "$w"; done
	echo
	printf '|---|---:|'
	for _ in "${wins[@]}"; do printf -- '---:|---:|'; done
	echo
	printf '| ib_write_bw -s 4 -R | - |'
	for _ in "${wins[@]}"; do printf ' %s | 1.00 |' "$(median ib_write_bw - - range)"; done
	echo
	for k in $ks; do
		printf '| rdma_pool_client | %s |' "$k"
		for w in "${wins[@]}"; do
			m=$(median client "$k" "$w")
			printf ' %s | %s |' "$(median client "$k" "$w" range)" "$(ratio "$m" "$bw")"
		done
		echo
	done
	echo
	echo "writes/s: the median (lowest-highest) over the rounds; ratio: of the medians."
	echo "K: a doorbell every K writes. W: doorbells in flight (--window);" \
		"W=1 waits for each doorbell's completion before posting the next batch."
	echo
	echo "## What each step is worth (K=$step_k, W=1 unless said)"
	echo
	echo "| client options | inline | one post per batch | W | writes/s | ratio to ib_write_bw |"
	echo "|---|---|---|---:|---:|---:|"
	while IFS='|' read -r what opts inl lst w; do
		m=$(median "$what" "$step_k" "$w")
		echo "| $opts | $inl | $lst | $w | $(median "$what" "$step_k" "$w" range) | $(ratio "$m" "$bw") |"
	done <<EOF
client --no-inline --post-each|--no-inline --post-each|no|no|1
client --post-each|--post-each|yes|no|1
client --no-inline|--no-inline|no|yes|1
client|(defaults)|yes|yes|1
client|-w ${wins[-1]}|yes|yes|${wins[-1]}
EOF
	echo
	echo "## Doorbell round trip (4 bytes)"
	echo
	echo "| measure | median µs | p99 µs |"
	echo "|---|---:|---:|"
	awk -F'\t' 'NR > 1 {
		what = $1
		if (what == "ib_write_lat") {
			printf "| ib_write_lat -s 4 -R (half a ping-pong round trip) | %s | %s |\n", $2, $3
			printf "| the same doubled: a whole round trip | %.1f | %.1f |\n", 2 * $2, 2 * $3
		} else {
			printf "| rdma_pool_client -k 1 -w 1 against %s | %s | %s |\n", substr(what, 8), $2, $3
		}
	}' "$out/latency.tsv"
	echo
	echo "## Server CPU time (user + system, from /proc/PID/stat)"
	echo
	echo "| server | idle: seconds | CPU s | % of a core | load: seconds | CPU s | % of a core |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' 'NR > 1 {
		printf "| %s | %s | %s | %.1f | %s | %s | %.1f |\n", $1, $2, $3,
			100 * $3 / $2, $4, $5, ($4 > 0 ? 100 * $5 / $4 : 0) }' "$out/cpu.tsv"
	echo
	echo "Idle: nobody connected. Load: $load, all at once."
	echo
	echo "![writes/s against K](writes_per_s.png)"
	echo
	echo "## Scaling with clients, all at once"
	echo
	echo "| server | clients | writes/s | doorbells/s | server CPU s per 1000 doorbells | server % of a core | slowest client s | RNR NAKs |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' 'NR > 1 {
		printf "| %s | %d | %.0f | %.0f | %.3f | %.1f | %s | %s |\n", $1, $2,
			$3 / $5, $4 / $5, 1000 * $6 / $4, 100 * $6 / $5, $7, $8
	}' "$scale"
	echo
	echo "Each client: $scaling. writes/s and doorbells/s: all the" \
		"clients' together, over the wall time from the first client's start" \
		"to the last one's end (each client's start-up and connection" \
		"included); the server's CPU time (from /proc/PID/schedstat) is" \
		"over the same span. Slowest client: the longest of the clients' own" \
		"stream times, first write to last doorbell. RNR NAKs: doorbells" \
		"that found the SRQ empty and were retried (the device's" \
		"send_rnr_err counter)."
	echo
	echo "![aggregate writes/s against clients](scale.png)"
} >"$out/results.md"

# The plots, in one run of gnuplot (starting it takes seconds under
# emulation).  The first: the client's writes/s against K, one line per
# window, and ib_write_bw's rate as a horizontal line.
for k in $ks; do
	printf '%s' "$k"
	for w in "${wins[@]}"; do printf '\t%s' "$(median client "$k" "$w")"; done
	echo
done >"$out/plot.dat"
plots="$bw title 'ib_write_bw -s 4' with lines dashtype 2 linewidth 2"
col=2
for w in "${wins[@]}"; do
	plots+=", '$out/plot.dat' using 1:$col title 'rdma_pool_client, W=$w' with linespoints linewidth 2"
	col=$((col + 1))
done
# The second: aggregate writes/s against clients, one line per server (a
# block of scale.dat each, in the order they ran).
awk -F'\t' 'NR > 1 {
	if ($1 != last) { if (NR > 2) printf "\n\n"; last = $1 }
	printf "%d\t%.0f\n", $2, $3 / $5
}' "$scale" >"$out/scale.dat"
scale_plots='' index=0
while IFS= read -r server; do
	scale_plots+="${scale_plots:+, }'$out/scale.dat' index $index using 1:2 title '$server' with linespoints linewidth 2"
	index=$((index + 1))
done <<<"$(awk -F'\t' 'NR > 1 && !seen[$1]++ { print $1 }' "$scale")"
clients=$(awk -F'\t' 'NR > 1 { print $2 }' "$scale" | sort -nu)
# gnuplot's fonts want a cache directory; the VM's home is read-only.
XDG_CACHE_HOME=$(mktemp -d) gnuplot <<EOF
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
EOF
echo "bench: wrote $out/results.md, $out/writes_per_s.png and $out/scale.png" >&2
