# wire-decode.awk: from tshark's fields (one tab-separated line per packet,
# the fields in the order of the variable "fields", space-separated, as
# wire-trace.sh passes them) to one record per packet: frame, time,
# source, destination, kind, BTH opcode, PSN, destination QP, and the
# details as key=value words ("-" if none). Kinds: arp-request, arp-reply,
# nd-solicit, nd-advert (IPv6's neighbour discovery, its ARP), cm-req,
# cm-rep, cm-rtu, cm-rej, cm-dreq, cm-drep, cm-other, send, write,
# write-imm, ack, rnr-nak, nak, other.
#
# A SEND's ctrl_msg is decoded by the layout the programs are built with,
# read from the variable "common" (the folder common/): each field's
# offset from common.c's _Static_asserts, which the compiler holds true,
# and the message's size, magic and types from common.h. Every field is
# big-endian on the wire (msg_encode).

function read_layout(   line, f, i, j) {
	while ((getline line < (common "/common.c")) > 0)
		if (match(line, /offsetof\(struct ctrl_msg, [a-z_]+\) == [0-9]+/)) {
			split(substr(line, RSTART, RLENGTH), f, /[ ,)]+/)
			fname[++fields_n] = f[3]; foff[fields_n] = f[5] + 0
		}
	while ((getline line < (common "/common.h")) > 0) {
		split(line, f, /[ \t=,]+/)
		if (f[1] == "#define" && f[2] == "CTRL_MSG_SIZE") msg_size = f[3]
		if (f[1] == "#define" && f[2] == "CTRL_MAGIC") magic = num(substr(f[3], 1, length(f[3]) - (f[3] ~ /u$/)))
		if (f[2] ~ /^CTRL_RE(Q|SP)_ALLOC$/) { mtype[f[3]] = substr(f[2], 6); types++ }
	}
	if (fields_n < 2 || !msg_size || !magic || types != 2) {
		print "wire-decode: no ctrl_msg layout in " common "/common.[ch]" > "/dev/stderr"
		exit 1
	}
	for (i = 1; i <= fields_n; i++) { # up to the next field, or the end
		flen[i] = msg_size - foff[i]
		for (j = 1; j <= fields_n; j++)
			if (foff[j] > foff[i] && foff[j] - foff[i] < flen[i])
				flen[i] = foff[j] - foff[i]
	}
}
function be(p, off, len) {
	return num("0x" substr(p, off * 2 + 1, len * 2))
}
# A SEND's payload P (hex digits): "msg=TYPE" and each other field as
# NAME=VALUE (addr and rkey in hex), or "bytes=N" if it is no ctrl_msg.
function ctrl_msg(p,   i, v, s) {
	if (length(p) != 2 * msg_size)
		return "bytes=" length(p) / 2
	s = ""
	for (i = 1; i <= fields_n; i++) {
		v = be(p, foff[i], flen[i])
		if (fname[i] == "magic" && v != magic)
			return "bytes=" length(p) / 2
		if (fname[i] == "type")
			s = "msg=" (v in mtype ? mtype[v] : "type" v) s
		else if (fname[i] != "magic")
			s = s " " fname[i] "=" (fname[i] ~ /^(addr|rkey)$/ ? hex(v) : v)
	}
	return s
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
	read_layout()
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
