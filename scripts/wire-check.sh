#!/usr/bin/env bash
# wire-check.sh PCAP [--outputs DIR] KEY=VALUE...: check that one session of the protocol went over
# the wire exactly as README.md's "The protocol" says, packet by packet. Prints one line saying
# what it found, or fails naming the first packet that differs from what it should be.
# PCAP - reads the packets as wire-trace.sh --raw prints them, on stdin.
#
# The session is the one whose CM ConnectRequest comes from client_qp to port (the last such in the
# capture), up to the next ConnectRequest. In it, in this order, with nothing else from either QP:
#   the CM ConnectReply from server_qp, and ReadyToUse;
#   client -> server: a SEND of a REQ_ALLOC for size bytes, then writes RDMA WRITEs: write i
#     (1..writes) to va = addr + ((i-1) mod slots) * 4 (slots = granted / 4), r_key = rkey, 4 bytes
#     holding i big-endian; every every-th write and the last are WRITEs with immediate, ImmDt = i;
#   server -> client: one SEND of a RESP_ALLOC, status 0, granted bytes at
#     addr, with rkey; and anywhere, a keepalive probe (an RDMA WRITE of no
#     bytes) every --keepalive-ms of the connection's life;
#   on each side, PSNs from the Starting PSN the CM exchanged, one more per packet;
#   each side's last packet acknowledged, no NAK;
#   a CM DisconnectRequest and DisconnectReply after the last write.
#
# Expectations (KEY=VALUE, all needed): port client_qp server_qp size granted addr rkey writes
# every. --outputs DIR reads client_qp, port, addr, rkey and granted from DIR/client.out
# (rdma_pool_client's output) and server_qp from DIR/server.out; KEY=VALUEs after it override them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KEYS=(port client_qp server_qp size granted addr rkey writes every)

die() { echo "wire-check: $*" >&2; exit 1; }

usage() { echo "usage: $0 PCAP [--outputs DIR] KEY=VALUE... (keys: ${KEYS[*]})" >&2; exit 2; }

# from_outputs DIR: sets main's want[KEY] from what the programs printed.
from_outputs() {
	local dir=$1 f connect=' port=([0-9]+) qp=(0x[0-9a-f]+)$'
	local granted='^granted (addr=(0x[0-9a-f]+) rkey=(0x[0-9a-f]+) size=([0-9]+))$'
	for f in client server; do [ -r "$dir/$f.out" ] || die "cannot read $dir/$f.out"; done
	[[ $(grep -m1 '^connect server=' "$dir/client.out") =~ $connect ]] ||
		die "$dir/client.out has no 'connect server=... port=... qp=...' line"
	want[port]=${BASH_REMATCH[1]} want[client_qp]=${BASH_REMATCH[2]}
	[[ $(grep -m1 '^granted ' "$dir/client.out") =~ $granted ]] ||
		die "$dir/client.out has no 'granted addr=... rkey=... size=...' line"
	want[addr]=${BASH_REMATCH[2]} want[rkey]=${BASH_REMATCH[3]} want[granted]=${BASH_REMATCH[4]}
	# The server's QP is the one its grant of that slice names.
	want[server_qp]=$(sed -n "s/^grant qp=\(0x[0-9a-f]*\) ${BASH_REMATCH[1]}\$/\1/p" "$dir/server.out" | tail -n 1)
	[ -n "${want[server_qp]}" ] || die "$dir/server.out has no grant of ${BASH_REMATCH[1]}"
}

main() {
	local pcap=${1:-} key value re what lines vars=()
	local -A want=() known=()
	[ $# -ge 1 ] || usage
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		--outputs) [ $# -ge 2 ] || usage; from_outputs "$2"; shift ;;
		*=*) want[${1%%=*}]=${1#*=} ;;
		*) usage ;;
		esac
		shift
	done

	for key in "${KEYS[@]}"; do
		value=${want[$key]:-}
		case $key in
		client_qp | server_qp | addr | rkey)
			re='^0x[0-9a-fA-F]+$' what='a hexadecimal number (0x...)' ;;
		*) re='^[0-9]+$' what='a whole number' ;;
		esac
		[[ $value =~ $re ]] || die "$key='$value': want $what"
		vars+=(-v "$key=$value")
		known[$key]=$value
		unset "want[$key]"
	done
	[ "${#want[@]}" -eq 0 ] || die "unknown keys: ${!want[*]}"
	# In base 10, as awk reads them (bash reads 010 as octal, and fails on 09).
	((10#${known[every]} > 0)) || die "every=${known[every]}: a doorbell every 0 writes?"
	((10#${known[granted]} >= 4 && 10#${known[granted]} % 4 == 0)) ||
		die "granted=${known[granted]}: want a positive multiple of 4"
	# Decoded first, so that a capture tshark cannot read stops here.
	if [ "$pcap" = - ]; then lines=$(cat); else lines=$("$here/wire-trace.sh" --raw "$pcap"); fi
	awk "${vars[@]}" -f "$here/wire-lib.awk" -f "$here/wire-check.awk" <<<"$lines"
}

main "$@"
