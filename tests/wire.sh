#!/usr/bin/env bash
# The two-machine tests: server and client in two VMs joined by one virtual cable
# (scripts/vm-pair.sh).  One pair of boots runs the sessions of PLAN one after the other, each
# checked as the end-to-end tests check one device (tests/lib.sh's check_session, and SIGINT),
# then packet by packet in the cable's capture by scripts/wire-check.sh, which must also catch a
# capture that differs, naming the packet; one rping crosses the second cable.  Runs here, not in
# a VM (it boots the VMs); reports in TAP.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The VMs see the repository, not this machine's /tmp.
mkdir -p "$top/build"
dir=$(mktemp -d "$top/build/wire-test.XXXXXX")
work=$dir pcap=$dir/cable.pcap report_stage=wire
. "$top/tests/lib.sh"
# Every session: NAME SERVER PORT SIZE WRITES DOORBELL_EVERY FAMILY.  The first writes more than
# its slice has slots (4096 bytes: 1024), so they wrap; the last goes over IPv6 (make wire --ipv6).
PLAN="poll rdma_pool_server 7471 4096 1100 100 4
ev rdma_srq_pool_server_ev 7472 10000 12 4 4
v6 rdma_srq_pool_server_ev 7473 10000 12 4 6"
declare -A GRANTED=([4096]=4096 [10000]=12288) # bytes asked -> granted

# test_session NAME SERVER SIZE WRITES EVERY FAMILY: one session, from both programs' output
# (the server's SIGINT from the status the server VM wrote down), then from the cable.
test_session() {
	local name=$1 server=$2 size=$3 writes=$4 every=$5 family=$6
	local t=wire/$server status why
	[ "$family" = 4 ] || t=wire/ipv6/$server
	work=$dir/$name
	status=$(cat "$work/client.status" 2>/dev/null || echo none)
	expect_served "$t/one_client" client "$writes" "$every" "${GRANTED[$size]}" "$status"

	expect_shutdown "$t/sigint_exits_0" "$(cat "$work/server.status" 2>/dev/null || echo none)"

	if why=$("$top/scripts/wire-check.sh" "$pcap" --outputs "$work" \
		size="$size" writes="$writes" every="$every" 2>&1); then
		pass "$t/every_packet"
	else
		fail "$t/every_packet" "$why"
	fi
}

# check_fails T PCAP WANT ARGS...: wire-check.sh with a capture or
# expectations that do not match must fail with the message WANT.
check_fails() {
	local t=$1 capture=$2 want=$3 got status=0 why=''
	shift 3
	got=$("$top/scripts/wire-check.sh" "$capture" "$@" 2>&1) || status=$?
	if [ "$status" = 0 ]; then
		why="wire-check.sh passed a mismatch ($*)"
	elif [ "$got" != "$want" ]; then
		why="wire-check.sh said '$got', want '$want'"
	fi
	pass_unless "$t" "$why"
}

# first_packet FILTER: "FRAME PSN" of the first packet tshark's FILTER picks,
# or nothing if tshark fails (a capture cut short): the test fails by name,
# not the stage by set -e.  (sed, not head: see session in tests/lib.sh.)
first_packet() {
	tshark -r "$pcap" -Y "$1" -T fields -e frame.number -e infiniband.bth.psn 2>/dev/null | sed -n 1p || true
}

# grant_of NAME KEY: KEY's value (addr or rkey) in the grant that session NAME's client printed.
grant_of() { sed -n "s/^granted .*$2=\(0x[0-9a-f]*\) .*/\1/p" "$dir/$1/client.out"; }

# The checker must fail and name the first packet that differs, as found by tshark's own filters:
# in a corrupted copy of the capture; told that the ev session rang every 5 writes (it rang every
# 4); told that the poll session was granted another key (the ev session's server's pool key).
test_checker_fails() {
	local t=wire/checker_names_first_difference addr rkey va pool at=''
	addr=$(grant_of ev addr) rkey=$(grant_of ev rkey)
	test_corrupted_capture "$t/corrupted_payload" "$addr" "$rkey"

	va=$(printf '0x%x' $((${addr:-0} + 12)))
	[ -n "$addr" ] && at=$(first_packet "infiniband.reth.va == $va && infiniband.reth.r_key == $rkey")
	if [ -z "$at" ]; then
		fail "$t/doorbell_interval" "tshark finds no write to $va in the ev session"
	else
		check_fails "$t/doorbell_interval" "$pcap" "wire-check: packet ${at%$'\t'*} (client->server, PSN ${at#*$'\t'}): want write 4, a RDMA WRITE (no immediate), got a RDMA WRITE with immediate (va=$va rkey=$rkey len=4 value=4 imm=4)" \
			--outputs "$dir/ev" size=10000 writes=12 every=5
	fi

	rkey=$(grant_of poll rkey)
	pool=$(sed -n 's/^pool .* rkey=\(0x[0-9a-f]*\)$/\1/p' "$dir/ev/server.out")
	at=$(with_probe resp || true)
	if [ -z "$at" ] || [ -z "$pool" ]; then
		fail "$t/pool_rkey" "tshark finds no RESP_ALLOC with rkey ${rkey:-?} or the ev session's server printed no pool rkey"
	else
		check_fails "$t/pool_rkey" "$pcap" "wire-check: packet ${at%$'\t'*} (server->client, PSN ${at#*$'\t'}): the RESP_ALLOC: ctrl_msg rkey is $rkey, want $pool" \
			--outputs "$dir/poll" size=4096 writes=1100 every=100 rkey="$pool"
	fi
}

# test_corrupted_capture T ADDR RKEY: the ev session's write 2 (to ADDR + 4,
# RKEY) changed in a copy of the capture, found by its RETH and payload in a
# hex dump, at whole bytes (grep fails where an address holds a 0x0a byte).
test_corrupted_capture() {
	local t=$1 addr=${2:-0} rkey=${3:-0} copy=$dir/corrupted.pcap va at hex off
	va=$(printf '0x%x' $((addr + 4)))
	at=$(first_packet "infiniband.reth.va == $va && infiniband.reth.r_key == $rkey")
	hex=$(printf '%016x%08x%08x%08x' "$va" "$rkey" 4 2)
	off=$(od -An -v -tx1 "$pcap" | tr -d ' \n' | awk -v want="$hex" '{
		for (base = 0; (j = index(substr($0, base + 1), want)); base += j)
			if ((base + j - 1) % 2 == 0)
				print (base + j - 1) / 2
	}')
	if [ -z "$at" ] || [[ ! $off =~ ^[0-9]+$ ]]; then
		fail "$t" "cannot find write 2 (va $va) once in the capture"
		return
	fi
	cp "$pcap" "$copy"
	printf '\x00\x00\x00\x63' |
		dd of="$copy" bs=1 seek=$((off + 16)) conv=notrunc status=none
	check_fails "$t" "$copy" "wire-check: packet ${at%$'\t'*} (client->server, PSN ${at#*$'\t'}): write 2: payload is 99, want 2" \
		--outputs "$dir/ev" size=10000 writes=12 every=4
}

main() {
	local status=0 name server size writes every raw
	cd "$top"
	report_plan
	if ! command -v tshark >/dev/null; then
		fail wire/tshark "no tshark to read the capture with: apt-get install tshark (or run scripts/deps.sh)"
		end_run
	fi
	echo "$PLAN" >"$dir/plan"
	# The first cable, the one recorded, is of the kind make wire takes.
	VM_CABLE="auto socket" VM_TIMEOUT=${WIRE_VM_TIMEOUT:-300} \
		"$top/scripts/vm-pair.sh" --pcap "$pcap" bash -c '"$1" "$2" && exec "$3"' \
		wire-job "$top/scripts/wire-session.sh" "$dir" "$top/tests/cable-ping.sh" \
		>"$dir/vms.log" 2>&1 || status=$?
	if [ "$status" != 0 ]; then
		# What vm-pair.sh says is why; nothing else can run without it.
		fail wire/two_vms "scripts/vm-pair.sh exited $status: $(grep -E \
			'^(\[(server|client) vm\] )?vm-pair' "$dir/vms.log" |
			tail -n 3 | tr '\n' ' ')"
		end_run
	fi
	pass wire/two_vms
	# The capture's records, as the decoder reads them, for the tests below.
	raw=$("$top/scripts/wire-trace.sh" --raw "$pcap" 2>&1) || true
	while read -r -u 3 name server _ size writes every family; do
		test_session "$name" "$server" "$size" "$writes" "$every" "$family"
	done 3<"$dir/plan"
	test_ipv6_trace
	pass_unless wire/chart/rdma_pool_server "$(chart_why poll 7471)"
	pass_unless wire/chart/rdma_srq_pool_server_ev "$(chart_why ev 7472)"
	pass_unless wire/chart/readme_picture "$(picture_why)"
	test_decoder_layout
	test_checker_fails
	test_checker_probe
	test_socket_cable
	end_run
}

# The IPv6 session in the trace: the client asks for the server's MAC by
# neighbour discovery (IPv6's ARP, from its link-local address), and its CM
# ConnectRequest goes over RoCE v2 from its IPv6 address to the server's.
test_ipv6_trace() {
	local t=wire/ipv6/trace server=fd52:444d:4200::1 client=fd52:444d:4200::2
	pass_if "$t/neighbour_discovery" "no neighbour solicitation for $server: $(grep -c . <<<"$raw") records" \
		awk -F'\t' -v s="$server" '$5 == "nd-solicit" &&
		$9 ~ "^target=" s " mac=" { found = 1 } END { exit !found }' <<<"$raw"
	pass_if "$t/connect_request" "no CM ConnectRequest from $client to $server, port 7473" \
		awk -F'\t' -v s="$server" -v c="$client" '$5 == "cm-req" && $3 == c &&
		$4 == s && $9 ~ / port=7473 / { found = 1 } END { exit !found }' <<<"$raw"
}

# A keepalive probe, the server's RDMA WRITE of no bytes every --keepalive-ms, is part of a
# session (a client stalled 10 s in CI met one).  The poll session with one put before its
# disconnect, and acknowledged, passes the checker; with 4 bytes, it is named.
test_checker_probe() {
	local t=wire/checker_takes_a_keepalive_probe at got status=0 probes why=''
	at=$(with_probe where || true)
	# The probes the session had already (a slow run may have some).
	probes=$("$top/scripts/wire-check.sh" - --outputs "$dir/poll" size=4096 \
		writes=1100 every=100 <<<"$raw" 2>&1 | sed -n 's/.*; \([0-9]*\) keepalive probe.*/\1/p' || true)
	got=$(with_probe 0 | "$top/scripts/wire-check.sh" - --outputs "$dir/poll" \
		size=4096 writes=1100 every=100 2>&1) || status=$?
	if [ -z "$at" ]; then
		why="no RESP_ALLOC of the poll session in the capture"
	elif [ "$status" != 0 ] || [[ $got != *"; $((probes + 1)) keepalive probe(s) from the server; "* ]]; then
		why="wire-check.sh exited $status: $got"
	fi
	pass_unless "$t" "$why"
	check_fails "wire/checker_names_first_difference/server_write" - \
		"wire-check: packet ${at%$'\t'*} (server->client, PSN ${at#*$'\t'}): nothing more should come from the server after the RESP_ALLOC, but this is a RDMA WRITE (no immediate) (va=0x0 rkey=0x0 len=4)" \
		--outputs "$dir/poll" size=4096 writes=1100 every=100 < <(with_probe 4)
}

# with_probe LEN|where|resp: the capture's records (raw), with a server's RDMA WRITE of LEN bytes
# and its ACK just before the poll session's CM DisconnectRequest (named as that frame, with the
# server's next PSN); "where": that frame and PSN; "resp": those of its RESP_ALLOC, by its rkey.
with_probe() {
	awk -F'\t' -v OFS='\t' -v k="$(grant_of poll rkey)" -v len="$1" '
		{ line[NR] = $0 }
		!s && $9 ~ "^msg=RESP_ALLOC " && (" " $9 " ") ~ (" rkey=" k " ") {
			s = $3; c = $4; q = $8; psn = $7; r = $1 "\t" $7
		}
		s && !at && $5 != "ack" && $5 !~ /^cm-/ && $3 == s && $8 == q { psn = $7 }
		s && !at && $5 == "ack" && $3 == c && $4 == s { sq = $8 }
		s && !at && $5 == "cm-dreq" { at = NR; f = $1; n = (psn + 1) % 16777216 }
		END {
			if (len == "resp") { if (r) print r; exit !r }
			if (!at) exit 1
			if (len == "where") { print f "\t" n; exit }
			for (i = 1; i <= NR; i++) {
				if (i == at) {
					split(line[i], d, "\t")
					print f, d[2], s, c, "write", 10, n, q, "va=0x0 rkey=0x0 len=" len
					print f, d[2], c, s, "ack", 17, n, sq, "msn=0 code=31"
				}
				print line[i]
			}
		}' <<<"$raw"
}

# The decoder reads the message's layout from common/, as the programs are built with it: in a
# copy whose rkey and status trade places, the server's RESP_ALLOC decodes with them traded.
test_decoder_layout() {
	local t=wire/decoder_follows_common copy=$dir/layout rkey got why=''
	mkdir -p "$copy/scripts"
	cp -r "$top/common" "$copy/"
	cp "$top"/scripts/wire-{trace.sh,lib.awk,decode.awk} "$copy/scripts/"
	sed -i 's/\(rkey) == \)24/\128/; s/\(status) == \)28/\124/' "$copy/common/common.c"
	rkey=$(grep -m 1 -o 'msg=RESP_ALLOC .* rkey=0x[0-9a-f]* status=0$' <<<"$raw" || true)
	rkey=${rkey##*rkey=} rkey=${rkey%% *}
	got=$("$copy/scripts/wire-trace.sh" --raw "$pcap" 2>&1 | grep -m 1 -o 'msg=RESP_ALLOC .*' || true)
	if [ -z "$rkey" ]; then
		why="no RESP_ALLOC with status 0 in the capture"
	elif [[ " $got " != *" rkey=0x0 "* || " $got " != *" status=$((rkey)) "* ]]; then
		why="rkey and status traded in common.c, the RESP_ALLOC of rkey $rkey decodes as [$got]"
	fi
	pass_unless "$t" "$why"
}

# session_records PORT: the capture's records of the session whose CM
# ConnectRequest went to PORT, from it to its DisconnectReply.
session_records() {
	awk -F'\t' -v port="$1" '$5 == "cm-req" { on = $9 ~ " port=" port " " }
		on { print } $5 == "cm-drep" { on = 0 }' <<<"$raw"
}

# chart_why NAME PORT: why session NAME's chart (scripts/wire-chart.awk) is wrong, if it is: the
# arrows' comments count its packets by kind, each once; each program's line that tells of a
# packet (the grant, each doorbell) is in a mark on its column; mscgen draws it.
chart_why() {
	local msc=$dir/$1/session.msc want got line marks
	session_records "$2" | awk -v "cout=$dir/$1/client.out" -v "sout=$dir/$1/server.out" \
		-f "$top/scripts/wire-lib.awk" -f "$top/scripts/wire-chart.awk" >"$msc" || true
	want=$(session_records "$2" | cut -f 5 | sort | uniq -c | awk '{ print $2, $1 }')
	got=$(awk '$1 == "#" && $2 == "packets" { n[$3] += $4 } END { for (k in n) print k, n[k] }' "$msc" | sort)
	if [[ $want != *"cm-req 1"* || $want != *write-imm* ]]; then
		echo "no session to port $2 in the capture: [${want//$'\n'/, }]"
	elif [ "$want" != "$got" ]; then
		echo "packets by kind [${want//$'\n'/, }], arrows' [${got//$'\n'/, }]"
	fi
	marks=$(sed -n 's/^\(granted \|doorbell seq=\)/cp &/p' "$dir/$1/client.out"
		sed -n 's/^\(grant \|doorbell qp=\)/sp &/p' "$dir/$1/server.out")
	[[ $marks == *"cp granted "*"sp grant "* ]] || echo "no grant line of the client's and the server's to find in a mark"
	while read -r col line; do
		grep -qF "$col abox $col" <<<"$(grep -F ": $line" "$msc")" || echo "no mark '$line' on $col"
	done <<<"$marks"
	if ! command -v mscgen >/dev/null; then
		echo "no mscgen to draw it: scripts/deps.sh wire installs it"
	elif ! mscgen -T svg -o "$dir/$1/session.svg" "$msc" >/dev/null 2>&1 ||
		! grep -q '<svg' "$dir/$1/session.svg"; then
		echo "mscgen drew no SVG of $msc"
	fi
}

# picture_why: why docs/session.svg, the README's picture of make wire's
# default session, no longer shows the protocol, if it does not: its arrows
# against the ev session's chart (the same but for its port and the ARP).
picture_why() {
	local want got
	want=$(sed -n 's/^[0-9-]*: //p' "$top/docs/session.svg" | arrows)
	got=$(sed -En 's/^ *[a-z]+ => [a-z]+ \[label="[0-9-]+: (.*)"\].*/\1/p' "$dir/ev/session.msc" | arrows)
	if [[ $want != *"CM ConnectRequest"*"WRITE with Imm"* ]]; then
		echo "docs/session.svg has no arrows of a session: make wire, then cp wire-results/session.svg docs/"
	elif [ "$want" != "$got" ]; then
		echo "docs/session.svg's arrows differ from the ev session's: $(diff <(echo "$want") \
			<(echo "$got") | grep '^[<>]' | head -n 4 | tr '\n' ' ')(< the picture's)"
	fi
}

# arrows: a chart's arrows' labels on stdin as the protocol orders them,
# whatever the timing: every packet but the ACKs in order, a run of writes
# one line a write, the ACKs counted (on 6.1 one sometimes comes back before
# its batch's doorbell); no ARP or ND; addresses, keys, QPNs and PSNs aside.
arrows() {
	awk '/\(ARP or ND/ { next }
		/ RDMA WRITEs, values / { for (v = $5; v <= $7; v++) print "write " v; next }
		/^RDMA WRITE, value / { print "write " $4; next }
		/^[0-9]+ ACKs, / { acks += $1; next }
		/^ACK, / { acks++; next }
		{ gsub(/0x[0-9a-f]+/, "0x?"); gsub(/PSN [0-9]+/, "PSN ?"); print }
		END { print acks + 0 " ACKs" }'
}

# The older cable, qemu's "socket" netdev (TCP on 127.0.0.1), for the qemu versions without
# "stream" (Ubuntu 22.04's 6.2): the VMs' second cable, and one rping across it after the sessions.
test_socket_cable() {
	local why=''
	if ! grep -q "^vm-pair: cable 1: qemu's socket netdev" "$dir/vms.log"; then
		why="no second cable of qemu's socket netdev: $(grep '^vm-pair: cable' "$dir/vms.log" | tr '\n' ' ' || true)"
	elif ! grep -q '^\[client vm\] rping: 3 pings over 198\.18\.1\.1$' "$dir/vms.log"; then
		why="no 3 pings over the second cable (198.18.1.1): $(grep 'rping' "$dir/vms.log" | tail -n 3 | tr '\n' ' ' || true)"
	fi
	pass_unless wire/socket_cable "$why"
}

end_run() {
	report_end && rm -rf "$dir" && exit 0
	echo "wire: the capture and every program's output are in $dir"
	exit 1
}

main "$@"
