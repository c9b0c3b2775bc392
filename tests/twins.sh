#!/usr/bin/env bash
# The two servers are twins on purpose: rdma_pool_server.c (a polling tick) and
# rdma_srq_pool_server_ev.c (events) differ only where their designs differ, so that `diff` between
# them is a lesson: events against a tick, and registered reply buffers (event-driven) against
# inline replies (polling). This keeps it true: a function both define must be the same, word for
# word (its comment above it may differ), unless DESIGNED gives the reason; shared functions come
# in the same order in both files; a function only one defines is one OWN_EV names (the polling
# file has none); a macro both define is defined alike (one only one defines is named).  Reports
# in TAP (tests/report-lib.sh), exits non-zero if a check failed; last, checks itself.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tick=$top/rdma_pool_server.c
ev=$top/rdma_srq_pool_server_ev.c

declare -A DESIGNED=(
	[cq_open]="the event-driven CQ has a completion channel and is armed"
	[verbs_open]="the event-driven server also registers its reply buffers"
	[verbs_close]="... and gives back the channel and the reply buffers"
	[reply_send]="inline from the stack, or from a registered buffer (the second lesson)"
	[on_completion]="a completed reply gives its buffer back, by wr_id"
	[serve]="the tick loop, or poll() on the descriptors"
	[main]="the event-driven server takes --rearm-after-us"
	[stats_print]="the event-driven server counts its free reply buffers too"
	[conn_destroy]="... and takes back those of the sends it abandons"
)
# The event-driven server's own: its sleep, its arming, and its buffers.
OWN_EV="poll_timeout replies_open cq_event reply_buffer_put"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
report_prefix=twins/ report_stage=twins
. "$top/tests/report-lib.sh"
report_plan

# functions FILE DIR: each function definition of FILE into DIR/NAME, the names in file order into
# DIR/.order. A definition runs from a line at column 0 naming a function to a '}' at column 0,
# with a '{' at column 0 before any line ending in ';' (so multi-line prototypes are skipped).
functions() {
	mkdir -p "$2"
	awk -v dir="$2" '
		state == 0 && /^[A-Za-z_].*\(/ && !/;[ \t]*$/ {
			line = $0
			sub(/\(.*/, "", line)
			n = split(line, w, /[ *]+/)
			name = w[n]
			buf = $0 "\n"
			state = 1
			next
		}
		state == 1 && /;[ \t]*$/ && !/^\{/ { state = 0; next }
		state == 1 && /^\{/ { state = 2 }
		state >= 1 { buf = buf $0 "\n" }
		state == 2 && /^}/ {
			printf "%s", buf > (dir "/" name)
			print name >> (dir "/.order")
			state = 0
		}' "$1"
	[ -s "$2/.order" ]
}

# compare TICK EV OUT: the checks, with OUT as scratch.
compare() {
	local out=$3 shared same=0 differ='' name own own_ev why=''
	functions "$1" "$out/tick" || { fail read "no function found in $1"; exit 1; }
	functions "$2" "$out/ev" || { fail read "no function found in $2"; exit 1; }
	# The shared functions, in each file's order.
	grep -Fxf "$out/ev/.order" "$out/tick/.order" >"$out/tick.shared" || true
	grep -Fxf "$out/tick/.order" "$out/ev/.order" >"$out/ev.shared" || true
	shared=$(wc -l <"$out/tick.shared")
	while read -r name; do
		if [ -n "${DESIGNED[$name]+set}" ]; then
			! cmp -s "$out/tick/$name" "$out/ev/$name" ||
				fail "designed_$name" "declared a designed difference (${DESIGNED[$name]}), but it is the same in both: drop it from tests/twins.sh"
		elif cmp -s "$out/tick/$name" "$out/ev/$name"; then
			same=$((same + 1))
		else
			differ+=" $name"
			echo "    $name differs:"
			{ diff "$out/tick/$name" "$out/ev/$name" || true; } |
				sed -n '1,20s/^/      /p'
		fi
	done <"$out/tick.shared"
	((same > 0)) || differ+=" (none alike: none read?)"
	pass_unless "shared_functions_identical ($same identical, ${#DESIGNED[@]} designed differences)" \
		"${differ:+differ but are not designed to:$differ (change both, or declare why in tests/twins.sh)}"
	for name in "${!DESIGNED[@]}"; do
		[[ -e $out/tick/$name && -e $out/ev/$name ]] ||
			fail "designed_$name" "declared a designed difference, but not defined in both files"
	done
	pass_if "same_order ($shared shared functions)" \
		"the shared functions come in another order: $(diff "$out/tick.shared" "$out/ev.shared" | grep '^[<>]' | tr '\n' ' ')" \
		sh -c '[ -s "$1" ] && cmp -s "$1" "$2"' sh "$out/tick.shared" "$out/ev.shared"
	own=$(grep -Fvxf "$out/ev/.order" "$out/tick/.order" | tr '\n' ' ' || true)
	own_ev=$(grep -Fvxf "$out/tick/.order" "$out/ev/.order" | sort | tr '\n' ' ' || true)
	[ -z "$own" ] && [ "$own_ev" = "$(tr ' ' '\n' <<<"$OWN_EV" | sort | tr '\n' ' ')" ] ||
		why="only the polling file defines: ${own:-none}; only the ev file: ${own_ev:-none}, not OWN_EV's $OWN_EV"
	pass_unless "own_functions (the event-driven server's: $own_ev)" "$why"
	macros "$1" >"$out/tick.macros"
	macros "$2" >"$out/ev.macros"
	differ=$(join -t $'\t' "$out/tick.macros" "$out/ev.macros" | awk -F'\t' '$2 != $3 { printf " %s", $1 }
		END { if (!NR) printf " (none in both: none read?)" }')
	pass_unless "shared_macros_identical ($(join -t $'\t' "$out/tick.macros" "$out/ev.macros" | wc -l) alike; one file's own:$(join -t $'\t' -v1 -v2 "$out/tick.macros" "$out/ev.macros" | cut -f1 | tr '\n' ' ' | sed 's/^/ /'))" \
		"${differ:+defined otherwise in the two files:$differ}"
}

# macros FILE: "NAME<TAB>definition" of each #define of FILE, sorted by
# name (a definition continued by a backslash is joined).
macros() {
	awk '/^#define / { def = $0; while (def ~ /\\$/ && (getline line) > 0)
		def = substr(def, 1, length(def) - 1) line
		split(def, w, /[ (\t]/); print w[2] "\t" def }' "$1" | sort -t $'\t' -k1,1
}

compare "$tick" "$ev" "$work/real"

# The check checks itself: on_doorbell, shared and not designed to differ,
# and CQ_BATCH, each changed by one word in a copy, must be caught.
sed 's/conn->dev->doorbells++;/conn->dev->doorbells += 2;/; s/^#define CQ_BATCH 16 /#define CQ_BATCH 32 /' \
	"$ev" >"$work/ev_changed.c"
(compare "$tick" "$work/ev_changed.c" "$work/self") >"$work/self.out" 2>&1 || true
if [ "$(diff "$ev" "$work/ev_changed.c" | grep -c '^>')" != 2 ]; then
	fail catches_a_difference "the self-test's sed did not find both on_doorbell's count and CQ_BATCH to change"
elif ! grep -q '^not ok - twins/shared_functions_identical (.*: .* on_doorbell' "$work/self.out"; then
	fail catches_a_difference "a changed on_doorbell went unnoticed"
else
	pass_if catches_a_difference "a changed CQ_BATCH went unnoticed" \
		grep -q '^not ok - twins/shared_macros_identical (.*: .* CQ_BATCH' "$work/self.out"
fi
report_end
