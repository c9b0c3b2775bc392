#!/usr/bin/env bash
# wire-trace.sh [--raw] PCAP: the RoCE v2 packets of a capture, one line each, decoded in the terms
# of this project's protocol, to read next to the source: who sent it, its BTH opcode and PSN, the
# headers the NIC acts on (RETH, ImmDt, AETH), and what it means here (the CM handshake, REQ_ALLOC
# and RESP_ALLOC, each write's slot and value, each doorbell, each ACK).
#
# PCAP may come from make wire (wire-results/cable.pcap), or from two real machines: on either one,
# tcpdump -i eth0 -w x.pcap udp port 4791 or arp or icmp6.  Wireshark shows every field of the same
# packets (it decodes UDP port 4791 as RoCE v2 by itself); this is the short version.
#
#   --raw  one tab-separated record per packet instead, for programs
#          (scripts/wire-check.sh): frame, time, source, destination, kind,
#          BTH opcode, PSN, destination QP, key=value details
set -euo pipefail

# What tshark hands over, in this order (tshark -G fields lists them all).
FIELDS=(frame.number frame.time_relative ip.src ip.dst ipv6.src ipv6.dst
	arp.opcode arp.src.proto_ipv4 arp.dst.proto_ipv4 arp.src.hw_mac
	icmpv6.type icmpv6.nd.ns.target_address icmpv6.opt.linkaddr
	infiniband.bth.opcode infiniband.bth.psn infiniband.bth.destqp
	infiniband.reth.va infiniband.reth.r_key infiniband.reth.dmalen
	infiniband.immdt infiniband.aeth.syndrome infiniband.aeth.msn
	data.data infiniband.mad.attributeid
	infiniband.cm.req.localqpn infiniband.cm.req.serviceid.dport
	infiniband.cm.req.retrcount infiniband.cm.req.rnrretrcount
	infiniband.cm.req.startpsn infiniband.cm.rep.localqpn
	infiniband.cm.rep.startpsn infiniband.cm.rej.reason)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "wire-trace: $*" >&2; exit 1; }

# tshark's fields for every ARP, IPv6 neighbour discovery (ICMPv6 types
# 135 and 136: IPv6's ARP) and RoCE packet of PCAP, tab-separated.
packets() {
	local args=() f err
	for f in "${FIELDS[@]}"; do args+=(-e "$f"); done
	# The substitution keeps tshark's stderr, shown only on failure (it
	# warns about running as root every time); its stdout goes on via fd 3.
	{ err=$(tshark -r "$1" -Y 'arp || icmpv6.type == 135 || icmpv6.type == 136 || infiniband' -T fields \
		-E separator=/t -E occurrence=f "${args[@]}" 2>&1 >&3 3>&-); } 3>&1 && return
	echo "wire-trace: tshark cannot read $1: $(grep -v 'Running as user' <<<"$err")" >&2
	return 1
}

main() {
	local raw=no records
	[ "${1:-}" != --raw ] || { raw=yes; shift; }
	[ $# -eq 1 ] || { echo "usage: $0 [--raw] PCAP" >&2; exit 2; }
	command -v tshark >/dev/null || die "no tshark: install it with apt-get install tshark (or run scripts/deps.sh)"
	[ -r "$1" ] || die "cannot read '$1'"
	records=$(packets "$1" | awk -v "fields=${FIELDS[*]}" \
		-v "common=$here/../common" -f "$here/wire-lib.awk" -f "$here/wire-decode.awk")
	[ -n "$records" ] || die "no RoCE v2 (UDP port 4791), ARP or neighbour discovery packet in '$1'"
	[ "$raw" = no ] || { echo "$records"; return; }
	awk -f "$here/wire-lib.awk" -f "$here/wire-trace.awk" <<<"$records"
}

main "$@"
