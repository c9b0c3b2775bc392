# shellcheck shell=bash disable=SC2154,SC2153 # e2e.sh and lib.sh, which come first, set top, work, the peers and RDMA_*
# Where rdma_connect()'s and rdma_accept()'s retry counts end up, measured by tests/cm_probe on the
# real device: docs/retry-counts.md explains it (Linux 6.1, rxe), and the programs' comments and
# the README teach it.  Sourced by e2e.sh after lib.sh; run once.

# test_cm_probe_case CONNECT_RETRY CONNECT_RNR ACCEPT_RETRY ACCEPT_RNR ACK
test_cm_probe_case() {
	local a=$1 b=$2 c=$3 d=$4 ack=$5 t="cm_probe/connect_${1}_${2}_accept_${3}_${4}"
	local out=$work/cm_probe.out status=0 passive why=''
	timeout 60 "$top/tests/cm_probe" "$RDMA_ADDR" 0 \
		"$a" "$b" "$c" "$d" "$ack" >"$out" 2>"$work/cm_probe.err" || status=$?
	passive=$(grep '^passive ' "$out" || true)
	if [ "$status" != 0 ]; then
		why="cm_probe exited $status: $(head -c 300 "$work/cm_probe.err")"
	elif ! grep -qx "active rnr_retry=$d retry_cnt=$a timeout=$ack min_rnr_timer=0" "$out"; then
		why="active QP: '$(grep '^active ' "$out" || true)', want rnr_retry=$d (accept's) retry_cnt=$a (connect's) timeout=$ack"
	elif [[ ! $passive =~ ^passive\ rnr_retry=$b\ retry_cnt=$a\ timeout=([0-9]+)\ min_rnr_timer=0$ ]]; then
		why="passive QP: '$passive', want rnr_retry=$b (connect's) retry_cnt=$a (connect's)"
	elif [ "${BASH_REMATCH[1]}" = "$ack" ]; then
		why="passive QP got the active side's ACK timeout $ack"
	fi
	pass_unless "$t" "$why"
}

# test_cm_send_case NAME CONNECT_RNR ACCEPT_RNR LINES: cm_probe --send with these rnr_retry_counts
# (transport retries 6 and 0, as the programs pass) prints exactly LINES after the two QP lines.
test_cm_send_case() {
	local t=cm_probe/$1 out=$work/cm_send.out status=0 got why=''
	timeout 60 "$top/tests/cm_probe" --send "$RDMA_ADDR" 0 6 "$2" 0 "$3" >"$out" 2>"$work/cm_send.err" || status=$?
	got=$(grep '^send ' "$out" || true)
	if [ "$status" != 0 ]; then
		why="cm_probe exited $status: $(head -c 300 "$work/cm_send.err")"
	elif [ "$got" != "$4" ]; then
		why="got [$(echo "$got" | tr '\n' '|')], want [$(echo "$4" | tr '\n' '|')]"
	fi
	pass_unless "$t" "$why"
}

# Two sets of four different counts, the second the mirror of the first, so that no value can land
# in the right place by chance.  Then what follows, as the client meets it: with no receive posted
# on the passive side, the active side's SEND fails at once if rdma_accept() said rnr_retry_count
# 0, whatever rdma_connect() said, and waits if it said 7.
test_cm_retry() {
	test_cm_probe_case 5 4 3 2 12
	test_cm_probe_case 2 3 4 5 12
	test_cm_send_case client_7_server_0_send_fails 7 0 \
		"send status=IBV_WC_RNR_RETRY_EXC_ERR with no receive posted"
	test_cm_send_case client_0_server_7_send_waits 0 7 \
		"send still retrying after 3000 ms with no receive posted
send status=IBV_WC_SUCCESS once a receive was posted"
}
