#!/usr/bin/env bash
# The end-to-end stage of make test, run the way a learner runs it on a
# machine whose kernel has rdma_rxe: nothing is set up beforehand.  First
# `make demo`, then the end-to-end tests (tests/e2e.sh), each through
# scripts/soft-roce.sh, which must choose host mode by itself (its own
# interface, or an RDMA device that was already there) and leave behind no
# rdma link, no interface and no module that was not there before.
#
# tests/run.sh runs this here if this machine can do that, else in a VM
# whose kernel can (scripts/vm-run.sh), which then stands in for such a
# machine.  Prints PASS/FAIL lines (e2e.sh's among them).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/rdma-lib.sh
. "$top/scripts/rdma-lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/host-mode.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=0

pass() { echo "PASS host_mode/$1"; }
fail() {
	echo "FAIL host_mode/$1: $2"
	failed=$((failed + 1))
}

# What the harness may create, and must remove again: rdma links,
# network interfaces, and the modules it loads.
machine_state() {
	rdma link show 2>/dev/null | awk '{ print "link", $2 }'
	ip -o link show | awk -F': ' '{ print "interface", $2 }'
	for m in rdma_rxe rdma_ucm dummy; do
		[ ! -e "/sys/module/$m/initstate" ] || echo "module $m"
	done
}

# The mode line soft-roce.sh must print: its own device, unless an RDMA
# device was already there, which it must then use.
if [ -n "$(active_ports)" ]; then
	want_mode='^soft-roce: mode: host \([^ ]+, an existing device'
else
	want_mode='^soft-roce: mode: host \(rxe_demo0, made for this run'
fi

# check_run NAME LOG STATUS BEFORE: the mode soft-roce.sh chose, and the
# machine as it was.
check_run() {
	local name=$1 log=$2 status=$3 before=$4 after
	after=$(machine_state)
	if ! grep -Eq "$want_mode" "$log"; then
		fail "$name/chooses_host_mode" "no line matching '$want_mode': $(grep '^soft-roce:' "$log" | tr '\n' '|')"
	else
		pass "$name/chooses_host_mode"
	fi
	if [ "$after" != "$before" ]; then
		fail "$name/leaves_nothing_behind" "before: $(echo "$before" | tr '\n' ' '); after: $(echo "$after" | tr '\n' ' ')"
	else
		pass "$name/leaves_nothing_behind"
	fi
}

# make demo, as the README tells a newcomer: it must run, and show the
# session of the README's excerpt.
test_demo() {
	local before status=0 log=$work/demo.log
	before=$(machine_state)
	make -s -C "$top" demo SANITIZE="${SANITIZE:-}" >"$log" 2>&1 || status=$?
	if [ "$status" != 0 ]; then
		fail demo/runs "make demo exited $status: $(tail -n 5 "$log" | tr '\n' '|')"
	elif [ "$(grep -c '^doorbell qp=0x[0-9a-f]* seq=[0-9]* value=[0-9]* ok$' "$log")" != 10 ] ||
		! grep -q '^done writes=1000 doorbells=10 ' "$log"; then
		fail demo/runs "not the README's session (10 doorbells ok, done writes=1000): $(tail -n 5 "$log" | tr '\n' '|')"
	else
		pass demo/runs
		test_demo_kernel_view "$log"
	fi
	check_run demo "$log" "$status" "$before"
}

# block LOG TITLE: the rows of the demo's kernel view headed TITLE.
block() {
	awk -v t="$2" 'index($0, "== the kernel, " t) == 1 { on = 1; next }
		on && /^  [a-z_]+ / { print; next } on && /^[^ ]/ { on = 0 }' "$1"
}

# What the demo shows of the kernel is what the programs said: both QPs in
# RTS, each the other's peer, with the numbers the two printed; the pool MR
# with the grant's rkey and the pool's length; nothing of theirs at the end.
test_demo_kernel_view() {
	local log=$1 cqp sqp rkey pool rows why=''
	cqp=$(sed -n 's/^connect server=.* qp=\(0x[0-9a-f]*\)$/\1/p' "$log")
	sqp=$(sed -n 's/^connect qp=\(0x[0-9a-f]*\)$/\1/p' "$log")
	rkey=$(sed -n 's/^grant .* rkey=\(0x[0-9a-f]*\) .*/\1/p' "$log")
	pool=$(sed -n 's/^listen .* pool_size=\([0-9]*\)$/\1/p' "$log")
	rows=$(block "$log" 'once the client holds its slice')
	if [ -z "$cqp" ] || [ -z "$sqp" ] || [ -z "$rkey" ] || [ -z "$pool" ]; then
		why="the programs' qp=, rkey= or pool_size= lines are missing"
	elif ! grep -Eq "^  qp +lqpn $((cqp)) rqpn $((sqp)) type RC state RTS comm rdma_pool_clien" <<<"$rows"; then
		why="no client QP $((cqp)) in RTS with peer $((sqp))"
	elif ! grep -Eq "^  qp +lqpn $((sqp)) rqpn $((cqp)) type RC state RTS comm rdma_" <<<"$rows"; then
		why="no server QP $((sqp)) in RTS with peer $((cqp))"
	elif ! grep -Eq "^  mr +rkey $rkey mrlen $pool comm rdma_" <<<"$rows"; then
		why="no MR with the grant's rkey $rkey and the pool's $pool bytes"
	elif [ "$(block "$log" "after the server's exit" | grep -vc '(none of theirs)$')" != 0 ]; then
		why="something of theirs was left: $(block "$log" "after the server's exit" | tr '\n' '|')"
	fi
	if [ -n "$why" ]; then
		fail demo/kernel_view "$why: $(echo "$rows" | tr '\n' '|')"
	else
		pass demo/kernel_view
	fi
}

# The end-to-end tests through soft-roce.sh; their PASS and FAIL lines
# come out as they run.
test_e2e() {
	local before status=0 log=$work/e2e.log
	before=$(machine_state)
	"$top/scripts/soft-roce.sh" "$top/tests/e2e.sh" 2>&1 | tee "$log" || status=$?
	if [ "$status" != 0 ] && ! grep -q '^FAIL ' "$log"; then
		fail e2e/runs "exited $status before its tests reported"
	fi
	check_run e2e "$log" "$status" "$before"
}

if [ "$(id -u)" != 0 ] && [ -z "$(active_ports)" ]; then
	# The Soft-RoCE tests are never skipped: a run without them is no pass.
	echo "FAIL host_mode/soft_roce: no RDMA device, and only root can make one: run make test as root, which brings Soft-RoCE up itself"
	exit 1
fi
test_demo
test_e2e
echo "host_mode: $failed failed"
[ "$failed" = 0 ]
