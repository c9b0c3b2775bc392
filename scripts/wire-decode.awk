# wire-decode.awk: from tshark's fields (one tab-separated line per packet,
# the fields in the order of the variable "fields", space-separated, as
# wire-trace.sh passes them) to one record per packet: frame, time,
# source, destination, kind, BTH opcode, PSN, destination QP, and the
# details as key=value words ("-" if none). Kinds: arp-request, arp-reply,
# nd-solicit, nd-advert (IPv6's neighbour discovery, its ARP), cm-req, cm-rep, cm-rtu, cm-rej, cm-dreq, cm-drep, cm-other, send, write,
# write-imm, ack, rnr-nak, nak, other. A SEND's 32-byte ctrl_msg is decoded
# (every field big-endian, as common/common.h lays it out).

function be(p, off, len) {
	return num("0x" substr(p, off * 2 + 1, len * 2))
}
function ctrl_msg(p,   type, name) {
	if (length(p) != 64 || substr(p, 1, 8) != "52444d41")
		return "bytes=" length(p) / 2
	type = be(p, 6, 2)
	name = type == 1 ? "REQ_ALLOC" : type == 2 ? "RESP_ALLOC" : "type" type
	return "msg=" name " version=" be(p, 4, 2) " size=" be(p, 8, 4) \
		" addr=" hex(be(p, 16, 8)) " rkey=" hex(be(p, 24, 4)) \
		" status=" be(p, 28, 4)
}
function cm(attr) {
	if (attr == 16) return "cm-req"
	if (attr == 18) return "cm-rej"
	if (attr == 19) return "cm-rep"
	if (attr == 20) return "cm-rtu"
	if (attr == 21) return "cm-dreq"
	if (attr == 22) return "cm-drep"
	return "cm-other"
}
# The value of tshark's field NAME in this packet ("" if it has none).
function v(name) {
	return $(col[name])
}
BEGIN {
	FS = OFS = "\t"
	n = split(fields, names, " ")
	for (i = 1; i <= n; i++)
		col[names[i]] = i
}
{
	src = v("ip.src") v("ipv6.src"); dst = v("ip.dst") v("ipv6.dst")
	op = v("infiniband.bth.opcode"); psn = v("infiniband.bth.psn")
	qp = v("infiniband.bth.destqp")
	qp = qp == "" ? "-" : hex(num(qp))
	payload = v("data.data")
	gsub(/:/, "", payload)
	info = ""
	if (v("arp.opcode") != "") {
		src = v("arp.src.proto_ipv4"); dst = v("arp.dst.proto_ipv4")
		op = psn = "-"
		kind = v("arp.opcode") == 1 ? "arp-request" : "arp-reply"
		info = "target=" dst " mac=" v("arp.src.hw_mac")
	} else if (v("icmpv6.type") != "") { # 135 or 136 (wire-trace.sh)
		op = psn = "-"
		kind = v("icmpv6.type") == 135 ? "nd-solicit" : "nd-advert"
		if (kind == "nd-solicit") # to a multicast group: to whom it asks
			dst = v("icmpv6.nd.ns.target_address")
		info = "target=" dst " mac=" v("icmpv6.opt.linkaddr")
	} else if (op == 100 && v("infiniband.mad.attributeid") != "") {
		kind = cm(num(v("infiniband.mad.attributeid")))
		if (kind == "cm-req")
			info = "qpn=" hex(num(v("infiniband.cm.req.localqpn"))) \
				" port=" num(v("infiniband.cm.req.serviceid.dport")) \
				" retry=" num(v("infiniband.cm.req.retrcount")) \
				" rnr_retry=" num(v("infiniband.cm.req.rnrretrcount")) \
				" startpsn=" num(v("infiniband.cm.req.startpsn"))
		else if (kind == "cm-rep")
			info = "qpn=" hex(num(v("infiniband.cm.rep.localqpn"))) \
				" startpsn=" num(v("infiniband.cm.rep.startpsn"))
		else if (kind == "cm-rej")
			info = "reason=" num(v("infiniband.cm.rej.reason"))
		else if (kind == "cm-other")
			info = "attr=" hex(num(v("infiniband.mad.attributeid")))
	} else if (op == 4) {
		kind = "send"
		info = ctrl_msg(payload)
	} else if (op == 10 || op == 11) {
		kind = op == 10 ? "write" : "write-imm"
		info = "va=" hex(num(v("infiniband.reth.va"))) \
			" rkey=" hex(num(v("infiniband.reth.r_key"))) \
			" len=" v("infiniband.reth.dmalen")
		if (length(payload) == 8)
			info = info " value=" num("0x" payload)
		if (op == 11)
			info = info " imm=" num("0x" v("infiniband.immdt"))
	} else if (op == 17) {
		# AETH syndrome: 3 bits of kind (0 ACK, 1 RNR NAK, 3 NAK), then
		# 5 bits of credit count, RNR timer or NAK code.
		syndrome = num(v("infiniband.aeth.syndrome"))
		if (syndrome < 32)
			kind = "ack"
		else if (syndrome < 64)
			kind = "rnr-nak"
		else
			kind = "nak"
		info = "msn=" v("infiniband.aeth.msn") " code=" syndrome % 32
	} else {
		kind = "other"
	}
	print v("frame.number"), v("frame.time_relative"), src, dst, kind, op,
		psn, qp, info == "" ? "-" : info
}
