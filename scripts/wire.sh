#!/usr/bin/env bash
# make wire: a server and a client on two machines joined by one cable,
# one short session between them, and every packet of it decoded.
#
# The machines are two VMs (scripts/vm-pair.sh); the cable's frames go to wire-results/cable.pcap,
# and scripts/wire-trace.sh prints them one per line, in the protocol's terms. The lines at the
# end tie the trace to what the programs printed, and scripts/wire-check.sh checks that every
# packet is what the protocol says. Everything stays in wire-results/.
#
#   usage: wire.sh [--server PROGRAM] [-n WRITES] [-k DOORBELL_EVERY] [--size BYTES] [--ipv6]
#   defaults: rdma_srq_pool_server_ev, 12 writes, a doorbell every 4, 10000 bytes, over IPv4
#             (--ipv6: the client connects to the server's IPv6 address; RoCE v2 goes over IPv6)
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/system-lib.sh"
final=$top/wire-results
PORT=7471

usage() { echo "usage: $0 [--server PROGRAM] [-n WRITES] [-k DOORBELL_EVERY] [--size BYTES] [--ipv6]" >&2; exit 2; }
die() { echo "wire: $*" >&2; exit 1; }

# The options, checked here: a bad one must not cost two boots.
parse_options() {
	server=rdma_srq_pool_server_ev writes=12 every=4 size=10000 family=4
	while [ $# -gt 0 ]; do
		[ "$1" = --ipv6 ] || [ $# -ge 2 ] || usage
		case $1 in
		--ipv6) family=6; shift; continue ;;
		--server) server=$2 ;;
		-n | --writes) writes=$2 ;;
		-k | --doorbell-every) every=$2 ;;
		--size) size=$2 ;;
		*) usage ;;
		esac
		shift 2
	done
	[[ $server =~ ^rdma_(pool_server|srq_pool_server_ev)$ ]] ||
		die "--server must be rdma_pool_server or rdma_srq_pool_server_ev"
	[[ $writes =~ ^[0-9]{1,4}$ ]] || die "-n '$writes': want 0 to 9999 writes (the trace has a line per packet)"
	[[ $every =~ ^[1-9][0-9]*$ ]] || die "-k '$every': want a positive number"
	[[ $size =~ ^[1-9][0-9]{0,6}$ ]] || die "--size '$size': want 1 to 9999999 bytes"
	for program in "$server" rdma_pool_client; do [ -x "$top/$program" ] || die "no $program: run make first"; done
	command -v tshark >/dev/null || die "no tshark: install it with apt-get install tshark (or run scripts/deps.sh)"
}

# tie: the lines that tie what the programs printed to the trace, from the
# session's records (wire-trace.sh --raw) on stdin, which awk reads whole.
tie() {
	local granted
	granted=$(grep '^granted ' "$out/session/client.out" || true)
	awk -F'\t' -v granted="$granted" '
		$5 == "send" && $9 ~ /msg=RESP_ALLOC/ { resp = $1; server = $3 }
		# Keepalive probes (RDMA WRITEs of no bytes) come from the server
		# program, and it hears of the ACKs to it as send completions.
		$5 == "write" && $3 == server && $9 ~ / len=0$/ { probes++; next }
		$5 ~ /^write/ {
			n++
			split($9, kv, " ")
			for (i in kv)
				if (kv[i] ~ /^rkey=/)
					keys[substr(kv[i], 6)]++
		}
		$5 == "write-imm" { imm = imm " " $1 }
		$5 == "ack" && $4 != server { acks++ }
		END {
			if (granted == "") { print "The client printed no grant: nothing to tie."; exit }
			printf "The client printed \"%s\": that is the" \
				" RESP_ALLOC of packet %d.\n", granted, resp
			for (k in keys)
				printf "%d of the %d RDMA WRITEs carry r_key %s in" \
					" their RETH.\n", keys[k], n, k
			printf "The server program heard of the CM REQ, RTU and" \
				" DREQ as CM events; of the REQ_ALLOC and the WRITEs" \
				" with immediate (packets%s) as receive completions" \
				" (its grant and doorbell lines); and of the ACK of its" \
				" RESP_ALLOC as the completion of that send%s. Its REP" \
				" and DREP went out on its own calls (rdma_accept," \
				" rdma_disconnect). It heard nothing of the other" \
				" WRITEs and the other %d ACKs: the NICs handled them" \
				" alone (here: rxe, in the kernel of each VM).\n", imm,
				probes ? " (and likewise of its " probes " keepalive" \
				" probe(s), RDMA WRITEs of no bytes)" : "", acks
		}' | fold -s -w 78
}

# chart DIR: the session as a message sequence chart, DIR/session.msc, from
# its records on stdin and the programs' output, drawn by mscgen into
# DIR/session.svg and .png, or a line that says why there is no picture.
chart() {
	awk -v "cout=$1/session/client.out" -v "sout=$1/session/server.out" \
		-f "$top/scripts/wire-lib.awk" -f "$top/scripts/wire-chart.awk" >"$1/session.msc"
	if ! command -v mscgen >/dev/null; then
		echo "No picture: no mscgen (scripts/deps.sh wire installs it where the system packages it); its input is wire-results/session.msc."
	elif mscgen -T svg -o "$1/session.svg" "$1/session.msc" &&
		mscgen -T png -o "$1/session.png" "$1/session.msc"; then
		echo "The session as a picture: wire-results/session.svg (and .png), drawn by mscgen."
	else
		echo "No picture: mscgen could not draw wire-results/session.msc (above)."
	fi
}

# on_signal SIG (stop_on_signals): the VMs stopped by vm-pair.sh's own
# handler, on SIGTERM (a command in the background has SIGINT ignored), and
# this run's folder removed: nothing half-written is published.
on_signal() {
	echo "wire: SIG$1: stopping the VMs; nothing is published" >&2 || exec 2>/dev/null
	[ -z "$pair" ] || { kill -s TERM "$pair" 2>/dev/null; wait "$pair"; } || true
	rm -rf "$out"
}

main() {
	local status=0
	parse_options "$@"
	# This run's own folder, which takes wire-results/'s place when it ends.
	out=$(run_dir "$final") pair=''
	stop_on_signals on_signal
	trap 'publish_dir "$out" "$final" || echo "wire: this run is in $out" >&2' EXIT
	echo "session $server $PORT $size $writes $every $family" >"$out/plan"

	echo "== two VMs on one virtual cable: $server in one," \
		"rdma_pool_client -n $writes -k $every in the other, over IPv$family"
	cd "$top"
	# In the background, so that a signal's trap runs at once.
	VM_TIMEOUT=${VM_TIMEOUT:-300} "$top/scripts/vm-pair.sh" \
		--pcap "$out/cable.pcap" "$top/scripts/wire-session.sh" "$out" &
	pair=$!
	wait "$pair" || status=$?
	pair=
	[ "$status" = 0 ] || die "the two VMs did not run the session" \
		"(vm-pair.sh exited $status; see above)"
	printf '\n== client: rdma_pool_client (its output)\n'
	cat "$out/session/client.out" "$out/session/client.err"
	printf '\n== server: %s (its output)\n' "$server"
	cat "$out/session/server.out" "$out/session/server.err"
	printf '\n== the cable: wire-results/cable.pcap (this trace: wire-results/trace.txt)\n'
	"$top/scripts/wire-trace.sh" "$out/cable.pcap" | tee "$out/trace.txt"
	echo
	"$top/scripts/wire-trace.sh" --raw "$out/cable.pcap" | tie
	"$top/scripts/wire-trace.sh" --raw "$out/cable.pcap" | chart "$out"
	"$top/scripts/wire-check.sh" "$out/cable.pcap" --outputs "$out/session" \
		size="$size" writes="$writes" every="$every" 2>&1 |
		fold -s -w 78 || status=$?
	printf '\nEvery field of every packet: open wire-results/cable.pcap in\n'
	echo "Wireshark (it decodes UDP port 4791 as RoCE v2 by itself)."
	exit "$status"
}

main "$@"
