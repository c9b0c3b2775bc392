/*
 * deadlines.c - no peer holds a place it does not use.  When each
 * connection's next deadline falls and what it asks for (conn_due()); the
 * keepalive probe (probe_send()); a handshake finished by a completion
 * (handshake_finish()).  Each server's conns_watch() asks for each
 * connection and acts: a close (named by deadline_name()), or a probe; its
 * on_completion() and async_handle() finish a handshake.
 */
#include <errno.h>
#include <math.h>

#include "common/server.h"

/*
 * A connection not ESTABLISHED --handshake-timeout-ms after its accept (its
 * peer never sent the RTU; the CM would resend its REP for a minute or
 * more) is closed, and so is one that sent no request --request-timeout-ms
 * after it (a client asks for its slice at once; a peer that never asks
 * would hold its place for ever).  Then a connection gets a probe every
 * --keepalive-ms: a client that only writes is quiet to the server
 * program, which is no reason to close it, but RC has no keepalive of its
 * own, and a peer that vanished without a disconnect (its machine died,
 * its cable was pulled) would hold its place for ever.  A probe is
 * answered when it completes, which it does only once the peer's NIC has
 * acknowledged it and every send before it (a send queue completes in
 * order); one still unanswered --keepalive-ms later closes the
 * connection: the peer is gone, or it leaves our replies unreceived.  The
 * cost: a look at each connection per loop, and a packet and its
 * acknowledgement per connection every --keepalive-ms.
 */
struct due conn_due(const struct options *opt, const struct conn *conn)
{
	double keepalive = opt->keepalive_ms / 1e3;

	if (conn->closing)
		return (struct due){ DEADLINE_NONE, INFINITY };
	if (!conn->established)
		return (struct due){ DEADLINE_HANDSHAKE,
				     conn->accepted_at +
					     opt->handshake_ms / 1e3 };
	if (!conn->requested)
		return (struct due){ DEADLINE_REQUEST,
				     conn->accepted_at +
					     opt->request_ms / 1e3 };
	if (!keepalive)
		return (struct due){ DEADLINE_NONE, INFINITY };
	return (struct due){ conn->probing ? DEADLINE_SILENT : DEADLINE_PROBE,
			     conn->probed_at + keepalive };
}

/* The reason a close at one of the three deadlines that close gives. */
const char *deadline_name(enum deadline what)
{
	static const char *const names[] = {
		[DEADLINE_HANDSHAKE] = "handshake_timeout",
		[DEADLINE_REQUEST] = "request_timeout",
		[DEADLINE_SILENT] = "peer_silent",
	};

	return names[what];
}

/*
 * A keepalive probe: an RDMA WRITE of no bytes.  The peer's NIC (or
 * kernel) acknowledges it without its program, its memory or a receive:
 * a zero-length RDMA operation carries no key to check (the IB spec's
 * C9-88, as rxe's check_rkey() has it), and the connection manager gives
 * every connected QP remote write access (the kernel's cm.c,
 * cm_init_qp_init_attr()).  Signaled, like every send of ours.
 */
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

/*
 * A completion came on a connection whose RTU the CM has not reported: the
 * client is established on its side since our REP came, and sends.  Were
 * its RTU lost, our CM would wait for it, resending the REP now and then
 * (the client answers a REP again with its RTU, seconds later), and the
 * handshake deadline could close a client that works.  The completion
 * proves what the RTU would: rdma_notify(IBV_EVENT_COMM_EST) tells the CM
 * so (ib_cm_notify() in the kernel's cm.c: REP_SENT becomes ESTABLISHED,
 * the REP is no longer resent, and librdmacm reports
 * RDMA_CM_EVENT_ESTABLISHED as for an RTU; an RTU that comes later is a
 * duplicate).  A device raises IBV_EVENT_COMM_EST for the first receive of
 * such a QP, answered here too; rxe raises none.  EISCONN: the RTU came
 * first, and its event is on its way; EINVAL: the connection is ending.
 */
void handshake_finish(struct conn *conn)
{
	if (rdma_notify(conn->id, IBV_EVENT_COMM_EST) && errno != EISCONN &&
	    errno != EINVAL)
		report("rdma_notify(COMM_EST)", errno);
}
