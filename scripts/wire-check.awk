# wire-check.awk: wire-check.sh's judge. Reads wire-decode.awk's records of
# a whole capture; the expectations come as variables (-v port=... client_qp=...
# server_qp=... size=... granted=... addr=... rkey=... writes=... every=...).
# Prints one line on success; otherwise fails with one line on stderr that
# names the first packet that differs.

function fail(msg) {
	print "wire-check: " msg > "/dev/stderr"
	failed = 1
	exit 1
}
function where(i) {
	return sprintf("packet %d (%s%s)", r[i, 1],
		r[i, 3] == C ? "client->server" : "server->client",
		r[i, 5] ~ /^cm-/ ? "" : ", PSN " r[i, 7])
}
# Where a record's key is in the packet of that kind.
function wire(kind, key) {
	if (kind == "send") return "ctrl_msg " key
	if (key == "va") return "RETH va"
	if (key == "rkey") return "RETH r_key"
	if (key == "len") return "RETH dmalen"
	if (key == "imm") return "ImmDt"
	if (key == "value") return "payload"
	return key
}
function kindname(k) {
	if (k == "send") return "SEND"
	if (k == "write") return "RDMA WRITE (no immediate)"
	if (k == "write-imm") return "RDMA WRITE with immediate"
	return k
}
# expect(DIR, KIND, INFO, NAME): the next packet that should come from
# that side.
function expect(d, kind, info, name) {
	m[d]++
	ekind[d, m[d]] = kind; einfo[d, m[d]] = info; ename[d, m[d]] = name
}
# check(I, D): packet I against the next expectation of side D.
function check(i, d,   j, n, kv, k, want, got) {
	j = ++seen[d]
	if (j > m[d])
		fail(where(i) ": nothing more should come from the " \
			(d == "c" ? "client" : "server") " after " \
			ename[d, m[d]] ", but this is a " kindname(r[i, 5]) \
			" (" r[i, 9] ")")
	if (r[i, 5] != ekind[d, j])
		fail(where(i) ": want " ename[d, j] ", a " \
			kindname(ekind[d, j]) ", got a " kindname(r[i, 5]) \
			" (" r[i, 9] ")")
	n = split(einfo[d, j], kv, " ")
	for (k = 1; k <= n; k++) {
		want = substr(kv[k], index(kv[k], "=") + 1)
		got = get(r[i, 9], substr(kv[k], 1, index(kv[k], "=") - 1))
		if (got != want)
			fail(where(i) ": " ename[d, j] ": " \
				wire(r[i, 5], substr(kv[k], 1, index(kv[k], "=") - 1)) \
				" is " (got == "" ? "missing" : got) ", want " want)
	}
	next_psn(i, d, ename[d, j])
}
# next_psn(I, D, NAME): packet I, NAME, must carry side D's next PSN.
function next_psn(i, d, name) {
	if (last_psn[d] == "" && r[i, 7] != first_psn[d])
		fail(where(i) ": " name ": PSN " r[i, 7] ", want " \
			first_psn[d] " (the Starting PSN of the CM " \
			(d == "c" ? "ConnectReply" : "ConnectRequest") ")")
	if (last_psn[d] != "" && r[i, 7] != (last_psn[d] + 1) % 16777216)
		fail(where(i) ": " name ": PSN " r[i, 7] ", want " \
			(last_psn[d] + 1) % 16777216 " (one more than the packet before)")
	last_psn[d] = r[i, 7]
	last_frame[d] = r[i, 1]
	last_name[d] = name
}
BEGIN { FS = "\t" }
{
	n++
	for (f = 1; f <= 9; f++)
		r[n, f] = $f
}
END {
	if (failed)
		exit 1
	client_qp = hex(num(client_qp)); server_qp = hex(num(server_qp))
	for (i = 1; i <= n; i++)
		if (r[i, 5] == "cm-req" && get(r[i, 9], "qpn") == client_qp &&
		    get(r[i, 9], "port") == port + 0)
			start = i
	if (!start)
		fail("no CM ConnectRequest from QP " client_qp " to port " port \
			" in the capture (" n " ARP, neighbour discovery and RoCE" \
			" packets)")
	C = r[start, 3]; S = r[start, 4]
	# Each side announces the PSN it will expect: the server numbers its
	# packets from the ConnectRequest's Starting PSN, the client from the
	# ConnectReply's.
	first_psn["s"] = get(r[start, 9], "startpsn")

	slots = granted / 4
	expect("c", "send", "msg=REQ_ALLOC version=1 size=" size, "the REQ_ALLOC")
	expect("s", "send", "msg=RESP_ALLOC version=1 status=0 size=" granted \
		" addr=" hex(num(addr)) " rkey=" hex(num(rkey)), "the RESP_ALLOC")
	for (w = 1; w <= writes; w++) {
		info = "va=" hex(num(addr) + ((w - 1) % slots) * 4) \
			" rkey=" hex(num(rkey)) " len=4 value=" w
		if (w % every == 0 || w == writes)
			expect("c", "write-imm", info " imm=" w, "write " w " (a doorbell)")
		else
			expect("c", "write", info, "write " w)
	}

	cm = "rep"
	for (i = start + 1; i <= n; i++) {
		kind = r[i, 5]
		if (kind == "cm-req")
			break # the next session
		if (!(r[i, 3] == C && r[i, 4] == S) && !(r[i, 3] == S && r[i, 4] == C))
			continue
		d = r[i, 3] == C ? "c" : "s"
		if (kind ~ /^cm-/) {
			if (kind != "cm-" cm)
				fail(where(i) ": want a CM " cm ", got a " kind)
			if (cm == "rep" && get(r[i, 9], "qpn") != server_qp)
				fail(where(i) ": the ConnectReply names QP " \
					get(r[i, 9], "qpn") ", want " server_qp)
			if (cm == "rep")
				first_psn["c"] = get(r[i, 9], "startpsn")
			if (cm == "dreq" && seen["c"] < m["c"])
				fail(where(i) ": disconnect before " \
					ename["c", seen["c"] + 1])
			cm = cm == "rep" ? "rtu" : cm == "rtu" ? "dreq" : \
				cm == "dreq" ? "drep" : "nothing more"
			end = i
			continue
		}
		if (r[i, 8] != (d == "c" ? server_qp : client_qp))
			continue # another connection between the same two
		if (kind == "ack") {
			acked[d, r[i, 7]] = 1
			continue
		}
		if (kind ~ /nak/)
			fail(where(i) ": a " kind " (" r[i, 9] ")")
		if (cm == "rep" || cm == "rtu")
			fail(where(i) ": a " kindname(kind) " before the CM" \
				" established the connection (no " cm " yet)")
		if (cm != "dreq")
			fail(where(i) ": a " kindname(kind) " after the CM" \
				" disconnected")
		# The server's keepalive probe, an RDMA WRITE of no bytes, comes
		# every --keepalive-ms of the connection's life (README.md).
		if (d == "s" && kind == "write" && get(r[i, 9], "len") == 0) {
			next_psn(i, d, "a keepalive probe")
			probes++
			end = i
			continue
		}
		check(i, d)
		end = i
	}
	for (d in m)
		if (seen[d] < m[d])
			fail("after packet " r[end, 1] ": want " \
				ename[d, seen[d] + 1] " from the " \
				(d == "c" ? "client" : "server") \
				", but the session has no more packets from it")
	if (cm != "nothing more")
		fail("after packet " r[end, 1] ": want a CM " cm \
			", but the session ends")
	if (!(("c", last_psn["s"]) in acked))
		fail("packet " last_frame["s"] ": " last_name["s"] " was never acknowledged")
	if (!(("s", last_psn["c"]) in acked))
		fail("packet " last_frame["c"] ": " last_name["c"] " was never acknowledged")
	printf "wire-check: packets %d-%d are client QP %s to server QP %s," \
		" port %d: REQ_ALLOC size=%d, RESP_ALLOC size=%d addr=%s rkey=%s," \
		" %d RDMA WRITEs with r_key %s, %d with ImmDt = seq, each in its" \
		" slot%s; all acknowledged; disconnected\n", r[start, 1], r[end, 1],
		client_qp, server_qp, port, size, granted, hex(num(addr)), hex(num(rkey)),
		writes, hex(num(rkey)), int(writes / every) + (writes % every != 0),
		probes ? "; " probes " keepalive probe(s) from the server" : ""
}
