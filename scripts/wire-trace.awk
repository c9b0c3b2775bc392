# wire-trace.awk: from wire-decode.awk's records to the lines a learner
# reads, one per packet. A first pass finds which address is the client (it
# sends the ConnectRequest, the REQ_ALLOC, the WRITEs) and which the
# server; with one of each, lines say "client" and "server" instead of
# addresses.

BEGIN {
	FS = "\t"
	opname[4] = "SEND Only"
	opname[10] = "RDMA WRITE Only"
	opname[11] = "RDMA WRITE Only with Imm"
	opname[17] = "Acknowledge"
	cmname["cm-req"] = "CM ConnectRequest"
	cmname["cm-rep"] = "CM ConnectReply"
	cmname["cm-rtu"] = "CM ReadyToUse"
	cmname["cm-rej"] = "CM ConnectReject"
	cmname["cm-dreq"] = "CM DisconnectRequest"
	cmname["cm-drep"] = "CM DisconnectReply"
	cmname["cm-other"] = "CM, other"
	errname[0] = "0"; errname[12] = "ENOMEM"; errname[16] = "EBUSY"
	errname[22] = "EINVAL"; errname[74] = "EBADMSG"
	nakname[0] = "PSN sequence error"; nakname[1] = "invalid request"
	nakname[2] = "remote access error"; nakname[3] = "remote operational error"
}
{
	n++
	for (i = 1; i <= 9; i++)
		rec[n, i] = $i
	kind = $5; info = $9
	if (kind == "cm-req" || kind == "write" || kind == "write-imm" ||
	    get(info, "msg") == "REQ_ALLOC") {
		client[$3] = 1; server[$4] = 1
	} else if (kind == "cm-rep" || get(info, "msg") == "RESP_ALLOC") {
		server[$3] = 1; client[$4] = 1
	}
}
function name(ip) {
	if (!named)
		return ip
	return ip in client ? "client" : ip in server ? "server" : ip
}
# The slice a connection was granted, by the server's address and QP
# (or the client's address, if the capture missed the handshake).
function conn(s, sq, c) {
	return s "/" (sq != "" ? sq : c)
}
# What a packet means here, a tab, and the headers that say so.
function describe(src, dst, kind, psn, qp, info,
		  key, cq, msg, st, slot, what, heads) {
	# The client asks, and over IPv6 the server too (docs/wire.md).
	if (kind == "arp-request" || kind == "nd-solicit")
		return "who has " get(info, "target") "? " \
			(get(info, "target") in client ? "(for its CM reply)" : \
			 "(rdma_resolve_addr)")
	if (kind == "arp-reply" || kind == "nd-advert")
		return src " is at " get(info, "mac")
	if (kind == "cm-req") {
		reqqp[src "/" dst] = get(info, "qpn")
		return sprintf("rdma_connect: QP %s, port %d\tStarting PSN=%d" \
			" retry_count=%d rnr_retry_count=%d", get(info, "qpn"),
			get(info, "port"), get(info, "startpsn"), get(info, "retry"),
			get(info, "rnr_retry"))
	}
	if (kind == "cm-rep") {
		cq = reqqp[dst "/" src]
		if (cq != "")
			srvqp[dst "/" cq] = get(info, "qpn")
		return "rdma_accept: server QP " get(info, "qpn") \
			"\tStarting PSN=" get(info, "startpsn")
	}
	if (kind == "cm-rtu")
		return "ESTABLISHED, both sides"
	if (kind == "cm-rej")
		return "rdma_reject: reason " get(info, "reason")
	if (kind == "cm-dreq")
		return "rdma_disconnect: DISCONNECTED at the other end"
	if (kind == "cm-drep")
		return "its rdma_disconnect: DISCONNECTED at the other end"
	if (kind == "send") {
		msg = get(info, "msg")
		label[src "/" dst "/" psn] = msg != "" ? msg : "SEND"
		if (msg == "REQ_ALLOC")
			return "REQ_ALLOC size=" get(info, "size")
		if (msg == "RESP_ALLOC") {
			st = get(info, "status")
			key = conn(src, srvqp[dst "/" qp], dst)
			if (st == 0) {
				slice[key] = num(get(info, "addr"))
				slots[key] = get(info, "size") / 4
			}
			return sprintf("RESP_ALLOC status=%s size=%d addr=%s rkey=%s",
				st in errname ? errname[st] : st, get(info, "size"),
				get(info, "addr"), get(info, "rkey"))
		}
		return "SEND of " get(info, "bytes") " bytes, not a ctrl_msg"
	}
	if (kind == "write" || kind == "write-imm") {
		key = conn(dst, qp, src)
		if (!(key in slice))
			key = conn(dst, "", src)
		heads = sprintf("RETH va=%s r_key=%s len=%d", get(info, "va"),
			get(info, "rkey"), get(info, "len"))
		what = get(info, "value") != "" ? get(info, "value") : \
			get(info, "len") " bytes"
		if (key in slice) {
			slot = (num(get(info, "va")) - slice[key]) / 4
			if (slot >= 0 && slot < slots[key] && slot == int(slot))
				what = "slot " slot " <- " what
			else
				what = "OUTSIDE the slice <- " what
		} else {
			what = "<- " what
		}
		if (kind == "write-imm") {
			label[src "/" dst "/" psn] = "doorbell " get(info, "imm")
			return sprintf("doorbell seq=%d: %s\t%s ImmDt=%d",
				get(info, "imm"), what, heads, get(info, "imm"))
		}
		label[src "/" dst "/" psn] = "write " get(info, "value")
		return "write: " what "\t" heads
	}
	if (kind == "ack" || kind == "rnr-nak" || kind == "nak") {
		what = label[dst "/" src "/" psn]
		if (what == "")
			what = "PSN " psn
		st = get(info, "code")
		if (kind == "ack")
			return sprintf("ACK of %s\tAETH ACK msn=%d", what, get(info, "msn"))
		if (kind == "rnr-nak")
			return sprintf("RNR NAK of %s: receiver not ready\tAETH RNR" \
				" timer=%d", what, st)
		return sprintf("NAK of %s: %s\tAETH NAK code=%d", what,
			st in nakname ? nakname[st] : "error", st)
	}
	return "not part of this protocol"
}
END {
	for (ip in client) nclients++
	for (ip in server) nservers++
	for (ip in client) if (ip in server) both = 1
	named = nclients == 1 && nservers == 1 && !both
	if (named)
		for (ip in client)
			for (sip in server)
				printf "client %s, server %s: ", ip, sip
	printf "%d packets (ARP or IPv6 neighbour discovery, and RoCE v2:" \
		" UDP port 4791)\n\n", n
	printf "%5s %8s  %-14s  %-24s %9s  %-34s %s\n", "frame", "time(s)",
		"direction", "BTH opcode", "PSN", "what it means here",
		"headers (CM, RETH, ImmDt, AETH)"
	for (r = 1; r <= n; r++) {
		kind = rec[r, 5]; op = rec[r, 6]
		if (kind ~ /^arp/)
			opn = "ARP, not RoCE"
		else if (kind ~ /^nd-/)
			opn = "ICMPv6 ND, not RoCE"
		else if (kind ~ /^cm-/)
			opn = cmname[kind]
		else if (op in opname)
			opn = opname[op]
		else
			opn = "opcode " op
		split(describe(rec[r, 3], rec[r, 4], kind, rec[r, 7], rec[r, 8],
			       rec[r, 9]) "\t", text, "\t")
		line = sprintf("%5d %8.4f  %-14s  %-24s %9s  %-34s %s", rec[r, 1],
			rec[r, 2], name(rec[r, 3]) "->" name(rec[r, 4]), opn,
			kind ~ /^(arp|nd-|cm-)/ ? "" : rec[r, 7], text[1], text[2])
		sub(/ +$/, "", line)
		print line
	}
}
