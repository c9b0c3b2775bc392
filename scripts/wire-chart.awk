# wire-chart.awk: from wire-decode.awk's records of one session to a message
# sequence chart in mscgen's language (mscgen -T svg): four columns, the
# client program, its NIC, the server's NIC and the server program.  Each
# packet is an arrow between the NICs, a run of writes or of ACKs one arrow
# for the run; on the same row, what a program did to send it and heard of
# it: its calls, its CM events and completions, and the lines it printed
# for them (cout, sout: the client's and the server's stdout).  A packet
# sent again (the same PSN from the same side: after a NAK, say) is marked
# so; the program posted it once, and heard of its last copy.  So the chart
# shows which packets a program hears of and which the NICs handle alone.
# Before each arrow a comment says which packets it stands for, by kind and
# number ("# packets write 3").

BEGIN {
	FS = "\t"
	while ((getline line < cout) > 0) {
		if (line ~ /^granted /) granted = line
		if (line ~ /^doorbell seq=/) rung[word(line, 2)] = line
	}
	while ((getline line < sout) > 0) {
		if (line ~ /^(grant|deny) /) grant = line
		if (line ~ /^doorbell qp=/) heard[word(line, 3)] = line
		if (line ~ /^destroy /) destroy = line
	}
}
# Word n of a line, "seq=4" for instance.
function word(s, n,   w) {
	split(s, w, " ")
	return w[n]
}
{
	n++
	for (i = 1; i <= 9; i++)
		rec[n, i] = $i
	if ($5 == "cm-req")
		sip = $4 # the server's address
	if ($5 == "cm-rej")
		rejected = 1
}
# The column packet r leaves from: the client's NIC or the server's.  An
# ARP or ND request comes from the side that asks for the other's address
# (a client's from its link-local address, over IPv6); its answer from the
# side asked.
function side(r,   kind, target) {
	kind = rec[r, 5]; target = get(rec[r, 9], "target")
	if (kind == "arp-request" || kind == "nd-solicit")
		return target == sip ? "cn" : "sn"
	return rec[r, 3] == sip ? "sn" : "cn"
}
# A mark on column who: a box with text, in the row being made.
function mark(who, text) {
	gsub(/"/, "\\\"", text)
	row = row sprintf(",\n    %s abox %s [label=\"%s\"]", who, who, text)
}
# The arrow of packets r1..r2 (one kind, one direction), its label.
function arrow(r1, r2, kind, text,   from, frames) {
	from = side(r1)
	frames = rec[r1, 1] (r2 > r1 ? "-" rec[r2, 1] : "")
	printf "  # packets %s %d\n", kind, r2 - r1 + 1
	gsub(/"/, "\\\"", text)
	row = row sprintf(",\n    %s => %s [label=\"%s: %s\"]", from,
			  from == "cn" ? "sn" : "cn", frames, text)
}
# What a program does before packet r goes out, and what a program hears
# of it once it has come.
function calls(r,   kind, info) {
	kind = rec[r, 5]; info = rec[r, 9]
	if (kind == "cm-req")
		mark("cp", "rdma_connect()")
	else if (kind == "cm-dreq")
		mark(side(r) == "cn" ? "cp" : "sp", "rdma_disconnect()")
	else if (kind == "send" && get(info, "msg") == "REQ_ALLOC")
		mark("cp", "post SEND: REQ_ALLOC")
}
function heard_of(r,   kind, info, to, seq) {
	kind = rec[r, 5]; info = rec[r, 9]; to = side(r) == "cn" ? "sp" : "cp"
	if (kind == "cm-req")
		mark("sp", "CONNECT_REQUEST; " (rejected ? "rdma_reject()" : \
		     "rdma_accept()"))
	else if (kind == "cm-rep")
		mark("cp", "ESTABLISHED (its CM sends the RTU)")
	else if (kind == "cm-rtu")
		mark("sp", "ESTABLISHED")
	else if (kind == "cm-rej")
		mark(to, "REJECTED")
	else if (kind == "cm-dreq")
		mark(to, "DISCONNECTED; rdma_disconnect() (the DREP)")
	else if (kind == "cm-drep")
		mark(to, "DISCONNECTED")
	else if (kind == "send" && get(info, "msg") == "REQ_ALLOC")
		mark("sp", "receive completion: " (grant != "" ? grant : \
		     "REQ_ALLOC") "; post the RESP_ALLOC")
	else if (kind == "send" && get(info, "msg") == "RESP_ALLOC")
		mark("cp", "receive completion: " (granted != "" ? granted : \
		     "RESP_ALLOC"))
	else if (kind == "write-imm") {
		seq = "seq=" get(info, "imm")
		mark("sp", "receive completion: " (seq in heard ? heard[seq] : \
		     "doorbell " seq))
	}
}
# The label of packet r: the protocol's terms, else the decoded fields.
function label(r,   kind, info, psn) {
	kind = rec[r, 5]; info = rec[r, 9]; psn = ", PSN " rec[r, 7]
	if (kind ~ /^arp-request|^nd-solicit/)
		return "who has " get(info, "target") "? (ARP or ND, not RoCE)"
	if (kind ~ /^arp-reply|^nd-advert/)
		return "here, at " get(info, "mac") " (ARP or ND, not RoCE)"
	if (kind == "cm-req") return "CM ConnectRequest, QP " get(info, "qpn")
	if (kind == "cm-rep") return "CM ConnectReply, QP " get(info, "qpn")
	if (kind == "cm-rtu") return "CM ReadyToUse"
	if (kind == "cm-rej") return "CM ConnectReject, " info
	if (kind == "cm-dreq") return "CM DisconnectRequest"
	if (kind == "cm-drep") return "CM DisconnectReply"
	if (kind == "send" && get(info, "msg") == "REQ_ALLOC")
		return "SEND REQ_ALLOC size=" get(info, "size")
	if (kind == "send" && get(info, "msg") == "RESP_ALLOC")
		return "SEND RESP_ALLOC status=" get(info, "status") \
		       " size=" get(info, "size")
	if (kind == "write" && get(info, "len") == 0)
		return "RDMA WRITE of no bytes: a keepalive probe"
	if (kind == "write")
		return "RDMA WRITE, value " get(info, "value")
	if (kind == "write-imm")
		return "WRITE with Imm: doorbell seq=" get(info, "imm")
	if (kind == "rnr-nak")
		return "RNR NAK: receiver not ready" psn
	if (kind == "nak")
		return "NAK, code " get(info, "code") psn
	return kind " " info psn
}
END {
	print "# The session make wire captured, for mscgen (-T svg or png)."
	print "msc {"
	print "  hscale=\"1.6\", arcgradient=\"4\";"
	print "  cp [label=\"client program\"], cn [label=\"client NIC\"]," \
	      " sn [label=\"server NIC\"], sp [label=\"server program\"];"
	for (r = 1; r <= n; r = s + 1) {
		kind = rec[r, 5]
		# A run: writes (not probes, not doorbells) or ACKs, one way.
		for (s = r; s < n && (kind == "write" || kind == "ack") &&
		     rec[s + 1, 5] == kind && rec[s + 1, 3] == rec[r, 3] &&
		     (kind == "ack" || get(rec[s + 1, 9], "len") != 0); s++)
			;
		if (s > r && kind == "write")
			text = (s - r + 1) " RDMA WRITEs, values " \
			       get(rec[r, 9], "value") " to " get(rec[s, 9], "value")
		else if (kind == "ack")
			text = (s > r ? s - r + 1 " ACKs" : "ACK") ", PSN " \
			       rec[r, 7] (s > r ? " to " rec[s, 7] : "")
		else
			text = label(r)
		# A row: the call that sends it, the arrow, what is heard of it.
		row = ""
		again = kind !~ /^(cm-|arp|nd-)/ && (rec[r, 3] SUBSEP rec[r, 7] \
			SUBSEP kind) in sent
		for (a = r; a <= s; a++)
			sent[rec[a, 3], rec[a, 7], kind] = 1
		if (!again)
			calls(r)
		arrow(r, s, kind, again ? text " (sent again)" : text)
		if (kind != "ack" && !sent_later(r))
			heard_of(r)
		for (a = r; kind == "ack" && !again && a <= s; a++)
			acked(a) # its sender hears of it as its send's completion
		print "  " substr(row, 7) ";"
	}
	if (destroy != "") {
		row = ""
		mark("sp", destroy)
		print "  |||;\n  " substr(row, 7) ";"
	}
	print "}"
}
# Whether packet r is sent again later (the same PSN from the same side):
# then the last copy is the one heard of.
function sent_later(r,   q) {
	for (q = r + 1; q <= n; q++)
		if (rec[q, 3] == rec[r, 3] && rec[q, 7] == rec[r, 7] &&
		    rec[q, 5] == rec[r, 5] && rec[r, 5] !~ /^(cm-|arp|nd-)/)
			return 1
	return 0
}
# ACK a, of the send or doorbell with its PSN: the completion its sender
# hears of (a write's, unsignaled, is heard of by no one).
function acked(a,   p, who) {
	who = side(a) == "cn" ? "sp" : "cp"
	for (p = a - 1; p > 0; p--)
		if (rec[p, 7] == rec[a, 7] && rec[p, 3] == rec[a, 4] &&
		    rec[p, 5] !~ /^(ack|rnr-nak|nak|cm-|arp|nd-)/)
			break
	if (p == 0)
		return
	if (rec[p, 5] == "write-imm")
		mark(who, "send completion: " (("seq=" get(rec[p, 9], "imm")) in \
		     rung ? rung["seq=" get(rec[p, 9], "imm")] : "doorbell"))
	else if (rec[p, 5] == "send")
		mark(who, "send completion: " get(rec[p, 9], "msg"))
	else if (rec[p, 5] == "write" && get(rec[p, 9], "len") == 0)
		mark(who, "send completion: the probe answered")
}
