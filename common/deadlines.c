/*
 * deadlines.c - no peer holds a place it does not use: each connection's
 * next deadline (conn_due(), deadline_name()) and the keepalive probe
 * (probe_send()), and when a closed one is quiet (conn_quiet()), from
 * conns_walk(); a handshake finished by a completion or a COMM_EST event
 * (handshake_finish()), from on_completion() and async_handle().
 */
#include <errno.h>
#include <math.h>

#include "common/server.h"

/* A connection not ESTABLISHED --handshake-timeout-ms after its accept (no
 * RTU) is closed, and so is one with no request --request-timeout-ms after it
 * (a client asks for its slice at once).  Then it gets a probe every
 * --keepalive-ms: a client that only writes is quiet to the server program,
 * but RC has no keepalive, and a peer that vanished without a disconnect (its
 * machine died) would hold its place for ever.  A probe completes once the
 * peer's NIC has acknowledged it and every send before it (a send queue
 * completes in order); one unanswered --keepalive-ms later closes the
 * connection.  Cost: a packet and its ack per connection each period. */
struct due conn_due(const struct options *opt, const struct conn *conn)
{
	double since = conn->accepted_at, keepalive = opt->keepalive_ms / 1e3;

	if (conn->closing)
		return (struct due){ DEADLINE_NONE, INFINITY };
	if (!conn->established)
		return (struct due){ DEADLINE_HANDSHAKE,
				     since + opt->handshake_ms / 1e3 };
	if (!conn->requested)
		return (struct due){ DEADLINE_REQUEST,
				     since + opt->request_ms / 1e3 };
	if (!keepalive)
		return (struct due){ DEADLINE_NONE, INFINITY };
	return (struct due){ conn->probing ? DEADLINE_SILENT : DEADLINE_PROBE,
			     conn->probed_at + keepalive };
}

const char *deadline_name(enum deadline what)
{
	static const char *const names[] = {
		[DEADLINE_HANDSHAKE] = "handshake_timeout",
		[DEADLINE_REQUEST] = "request_timeout",
		[DEADLINE_SILENT] = "peer_silent",
	};

	return names[what]; /* NULL for the two that do not close */
}

/* A keepalive probe: an RDMA WRITE of no bytes, which the peer's NIC
 * acknowledges without its program, its memory or a receive: a zero-length
 * RDMA operation carries no key to check (the IB spec's C9-88, as rxe's
 * check_rkey() has it), and the connection manager gives every connected
 * QP remote write access (the kernel's cm.c, cm_init_qp_init_attr()). */
int probe_send(struct conn *conn, double now)
{
	struct ibv_send_wr wr = {
		.wr_id = WRID_PROBE,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret = ibv_post_send(conn->id->qp, &wr, &bad);

	if (ret)
		return fail("ibv_post_send(keepalive probe)", ret);
	conn->sending++;
	conn->probing = true;
	conn->probed_at = now;
	return 0;
}

/* A completion on a connection whose RTU the CM has not reported proves what
 * the RTU would: the client has our REP.  Lest the handshake deadline close a
 * client that works, rdma_notify(IBV_EVENT_COMM_EST) tells the CM so, once
 * (ib_cm_notify() in the kernel's cm.c: REP_SENT becomes ESTABLISHED, and
 * librdmacm reports RDMA_CM_EVENT_ESTABLISHED as for an RTU); a device's
 * IBV_EVENT_COMM_EST is answered so too (rxe raises none).  EISCONN: the RTU
 * came first, its event is on its way; EINVAL: the connection is ending. */
void handshake_finish(struct conn *conn)
{
	if (!rdma_notify(conn->id, IBV_EVENT_COMM_EST) || errno == EISCONN ||
	    errno == EINVAL)
		conn->established = true; /* a second notify would fail */
	else
		report("rdma_notify(COMM_EST)", errno);
}

/* Every send of a closing QP has completed, and the device has raised
 * LAST_WQE_REACHED, or, where it never does (rxe on 6.1; 6.12 raises it),
 * CLOSE_TIMEOUT_MS have passed: nothing of it can complete any more.  With
 * sends still outstanding, CLOSE_GIVE_UP_MS. */
bool conn_quiet(const struct conn *conn, double now)
{
	double ms = (now - conn->closed_at) * 1000;

	if (!conn->closing)
		return false;
	if (conn->sending)
		return ms >= CLOSE_GIVE_UP_MS;
	return conn->last_wqe || ms >= CLOSE_TIMEOUT_MS;
}
