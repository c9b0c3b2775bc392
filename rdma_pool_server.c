/*
 * rdma_pool_server.c - lends slices of one registered memory pool to RDMA
 * clients and checks the doorbells they ring.  The polling edition: one
 * thread whose loop, every tick, asks the connection manager (CM) and the
 * completion queue (CQ) for news.  Each client has a queue pair (QP) of its
 * own; all share one receive queue (the SRQ) and the CQ.  The core path:
 *
 *   main, listen_open   listen; then serve, the tick loop:
 *     cm_handle         a client's connect request (on_connect_request; the
 *                       first opens the verbs: verbs_open, pool_register,
 *                       srq_open, recv_post, cq_open; each gets a QP on the
 *                       SRQ, conn_create), or a client gone (conn_close)
 *     async_handle      the device's own events: LAST_WQE_REACHED
 *     cq_drain          each completion to on_completion, via conn_find:
 *                       on_request and reply_send, or on_doorbell
 *     conns_reap        each closed QP, once conn_quiet: conn_destroy
 * Past the banner: options, reports, troubles, limits and deadlines, the
 * end, --isolation mw.  The twin rdma_srq_pool_server_ev.c waits for events.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"

/* Replies in flight per connection; its send queue has room for them, a
 * window bind (--isolation mw) and a keepalive probe (conns_watch()). */
#define SEND_DEPTH 8
#define SQ_DEPTH (SEND_DEPTH + 2)
/* wr_id is ours, handed back in the completion, failed or not: what the
 * work request was in the high 32 bits, a receive buffer's index below. */
#define WRID_RECV (UINT64_C(1) << 32)
#define WRID_SEND (UINT64_C(2) << 32)
#define WRID_BIND (UINT64_C(3) << 32)
#define WRID_PROBE (UINT64_C(4) << 32)
#define WRID_KIND(wr_id) ((wr_id) & ~UINT64_C(0xffffffff))
#define WRID_INDEX(wr_id) ((uint32_t)(wr_id))

struct options {
	uint16_t port;
	uint32_t pool_size, srq_depth, max_conns;
	uint32_t handshake_ms, keepalive_ms; /* conns_watch() */
	bool isolation, help; /* --isolation mw: a memory window per slice */
};

struct conn {
	struct rdma_cm_id *id;
	uint32_t qp_num;
	struct slice slice;   /* this client's part of the pool */
	unsigned int sending; /* sends posted, not yet completed */
	bool closing, last_wqe, established, probing; /* conn_close() ... */
	double accepted_at, probed_at, closed_at;     /* conns_watch() ... */
	struct window *window; /* --isolation mw: window_bind() */
	struct conn *next;
};

struct server {
	struct options opt;
	struct rdma_event_channel *events;
	struct rdma_cm_id *listener;
	struct ibv_context *verbs; /* this and the rest: verbs_open() */
	struct ibv_pd *pd;
	uint8_t *pool_mem, *recv_bufs;
	struct ibv_mr *pool_mr, *recv_mr;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct pool pool;
	struct conn *conns;
	unsigned int nconns, nclosing; /* in conns; of them closing */
	uint32_t recvs_posted;	       /* receives on the SRQ now */
	uint64_t doorbells, sends_abandoned;
	int sigfd, stopped_by; /* signals; the one that ended serve() */
	struct outlet out;     /* say(): reports that never block */
};

/* Beyond the core path: after the banner below. */
static int parse_options(int argc, char **argv, struct options *opt);
static int signals_open(struct server *srv);
static int signal_take(struct server *srv);
static int listen_fail(struct server *srv, int err);
static int cm_other(enum rdma_cm_event_type type);
static int devices_fit(struct server *srv);
static int windows_pool(struct server *srv);
static int srq_limit_arm(struct server *srv);
static const char *conn_refusal(struct server *srv, struct rdma_cm_id *id,
				int *err);
static void conn_reject(struct server *srv, struct rdma_cm_id *id,
			const char *reason);
static void rnr_timer_shorten(struct ibv_qp *qp);
static bool replies_full(struct server *srv, struct conn *conn);
static int window_bind(struct server *srv, struct conn *conn, uint32_t *rkey);
static void reply_print(struct server *srv, const struct conn *conn,
			const struct ctrl_msg *reply, uint32_t asked);
static void doorbell_print(struct server *srv, const struct conn *conn,
			   uint32_t seq, uint32_t value);
static bool key_revoked(const struct server *srv, const struct ibv_wc *wc);
static void on_trouble(struct server *srv, struct conn *conn,
		       const struct ibv_wc *wc);
static void conn_drop(struct server *srv, struct conn *conn,
		      const char *reason);
static int conns_watch(struct server *srv);
static int async_other(struct server *srv, const struct ibv_async_event *event);
static void destroy_print(struct server *srv, struct conn *conn, double now);
static int window_unbind(struct conn *conn);
static int conns_close_all(struct server *srv);
static int verbs_close(struct server *srv, int err);

#define LISTEN_BACKLOG 16 /* connect requests queued until accepted */

/* The CM speaks IP addresses and ports, like sockets, and tells of each
 * connection on a channel, non-blocking: the tick loop looks and goes on. */
static int listen_open(struct server *srv)
{
	struct sockaddr_in addr = {
		.sin_family = AF_INET,
		.sin_port = htons(srv->opt.port),
		.sin_addr.s_addr = htonl(INADDR_ANY),
	};

	srv->events = rdma_create_event_channel();
	if (!srv->events)
		return fail("rdma_create_event_channel", errno);
	if (fcntl(srv->events->fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(O_NONBLOCK)", errno);
	if (rdma_create_id(srv->events, &srv->listener, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id", errno);
	if (rdma_bind_addr(srv->listener, (struct sockaddr *)&addr))
		return listen_fail(srv, errno);
	/* Port 0 asks the CM for any free port, as bind(2) does for a
	 * socket; the listen line tells clients which one it chose. */
	srv->opt.port = ntohs(rdma_get_src_port(srv->listener));
	if (rdma_listen(srv->listener, LISTEN_BACKLOG))
		return fail("rdma_listen", errno);
	say(&srv->out, "listen port=%u pool_size=%" PRIu32 "\n", srv->opt.port,
	    srv->opt.pool_size);
	return 0;
}

/* Registering pins the pool and gives the NIC its translation; the rkey
 * lets RDMA WRITEs in (REMOTE_WRITE needs LOCAL_WRITE), nothing else. */
static int pool_register(struct server *srv)
{
	size_t size = srv->opt.pool_size;

	srv->pool_mem = aligned_alloc(POOL_CHUNK_SIZE, size);
	if (!srv->pool_mem)
		return fail("aligned_alloc(pool)", ENOMEM);
	memset(srv->pool_mem, 0, size);
	if (srv->opt.isolation)
		return windows_pool(srv); /* no key to all of the pool */
	srv->pool_mr =
		ibv_reg_mr(srv->pd, srv->pool_mem, size,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!srv->pool_mr)
		return fail("ibv_reg_mr(pool)", errno);
	say(&srv->out, "pool addr=0x%" PRIxPTR " size=%zu rkey=0x%" PRIx32 "\n",
	    (uintptr_t)srv->pool_mem, size, srv->pool_mr->rkey);
	return 0;
}

/* A few bytes too many still get an EBADMSG reply. */
#define RECV_BUF_SIZE (2 * CTRL_MSG_SIZE)

/* Offer receive buffer index to whichever client needs one next. */
static int recv_post(struct server *srv, uint32_t index)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(srv->recv_bufs + index * RECV_BUF_SIZE),
		.length = RECV_BUF_SIZE,
		.lkey = srv->recv_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV | index,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	int ret = ibv_post_srq_recv(srv->srq, &wr, &bad);

	if (ret)
		return fail("ibv_post_srq_recv", ret);
	srv->recvs_posted++;
	return 0;
}

/* Receive buffers for all QPs.  Empty, the NIC answers "receiver not
 * ready" (RNR) and the client's NIC retries: slower, nothing lost. */
static int srq_open(struct server *srv)
{
	uint32_t depth = srv->opt.srq_depth;
	struct ibv_srq_init_attr attr = {
		.attr.max_wr = depth,
		.attr.max_sge = 1,
	};

	srv->recv_bufs = calloc(depth, RECV_BUF_SIZE);
	if (!srv->recv_bufs)
		return fail("calloc(receive buffers)", ENOMEM);
	srv->recv_mr =
		ibv_reg_mr(srv->pd, srv->recv_bufs, depth * RECV_BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!srv->recv_mr)
		return fail("ibv_reg_mr(receive buffers)", errno);
	srv->srq = ibv_create_srq(srv->pd, &attr);
	if (!srv->srq)
		return fail("ibv_create_srq", errno);
	for (uint32_t i = 0; i < depth; i++) {
		int err = recv_post(srv, i);

		if (err)
			return err;
	}
	return srq_limit_arm(srv);
}

/* One CQ for all sends and receives, with room for all that can be
 * outstanding: one per SRQ receive, SQ_DEPTH a connection (conn_refusal()). */
static int cq_open(struct server *srv)
{
	int depth = (int)(srv->opt.srq_depth + srv->opt.max_conns * SQ_DEPTH);

	srv->cq = ibv_create_cq(srv->verbs, depth, NULL, NULL, 0);
	return srv->cq ? 0 : fail("ibv_create_cq", errno);
}

/* On the device of the first connect request (we learn it then).  A QP
 * may only use memory registered in its own protection domain (PD). */
static int verbs_open(struct server *srv, struct ibv_context *verbs)
{
	int err;

	srv->verbs = verbs;
	if (fcntl(verbs->async_fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(async_fd, O_NONBLOCK)", errno);
	srv->pd = ibv_alloc_pd(verbs);
	if (!srv->pd)
		return fail("ibv_alloc_pd", errno);
	err = pool_register(srv);
	if (err)
		return err;
	err = srq_open(srv);
	if (err)
		return err;
	return cq_open(srv);
}

#define RNR_RETRY_FOREVER 7 /* 7: retry "receiver not ready" forever */

/* A reliable-connected (RC) QP on the SRQ: rdma_create_qp() moves it from
 * RESET to INIT, rdma_accept() to RTR and RTS and sends the reply (CM REP);
 * the client's RTU makes it ESTABLISHED.  responder_resources: READs served
 * at once; the protocol sends none, and one sent anyway is refused. */
static int conn_create(struct server *srv, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = srv->cq,
		.recv_cq = srv->cq,
		.srq = srv->srq,
		.qp_type = IBV_QPT_RC,
		.cap.max_send_wr = SQ_DEPTH,
		.cap.max_send_sge = 1,
		.cap.max_inline_data = CTRL_MSG_SIZE,
	};
	struct rdma_conn_param param = {
		.responder_resources = 1,
		.rnr_retry_count = RNR_RETRY_FOREVER,
	};
	struct conn *conn = calloc(1, sizeof(*conn));
	int err;

	if (!conn)
		return fail("calloc(conn)", ENOMEM);
	if (rdma_create_qp(id, srv->pd, &attr)) {
		err = fail("rdma_create_qp", errno);
		goto out_free;
	}
	if (rdma_accept(id, &param)) {
		err = fail("rdma_accept", errno);
		goto out_destroy_qp;
	}
	rnr_timer_shorten(id->qp);
	conn->id = id;
	conn->qp_num = id->qp->qp_num;
	conn->accepted_at = now_seconds();
	conn->next = srv->conns;
	id->context = srv->conns = conn;
	srv->nconns++;
	return 0;

out_destroy_qp:
	rdma_destroy_qp(id);
out_free:
	free(conn);
	return err;
}

/* A client: accepted, or refused with a reason it is told. */
static int on_connect_request(struct server *srv, struct rdma_cm_id *id)
{
	int err = 0;
	const char *refusal = conn_refusal(srv, id, &err);

	if (!refusal && !srv->verbs) {
		err = verbs_open(srv, id->verbs);
		refusal = err ? "server-setup-failed" : NULL;
	}
	if (!refusal && conn_create(srv, id))
		refusal = "connection-setup-failed";
	if (refusal)
		conn_reject(srv, id, refusal);
	return err;
}

/* Its QP to the error state: it takes nothing more, its work requests are
 * flushed.  Destroyed once nothing of it can complete (conns_reap()). */
static void conn_close(struct server *srv, struct conn *conn)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int ret;

	if (conn->closing)
		return;
	ret = ibv_modify_qp(conn->id->qp, &attr, IBV_QP_STATE);
	if (ret)
		fail("ibv_modify_qp(IBV_QPS_ERR)", ret);
	if (rdma_disconnect(conn->id)) /* a DREQ, unless there was no RTU */
		fail("rdma_disconnect", errno);
	conn->closing = true;
	conn->closed_at = now_seconds();
	srv->nclosing++;
	say(&srv->out, "disconnect qp=0x%" PRIx32 "\n", conn->qp_num);
}

/* Signaled: its completion frees its send queue entry.  Inline: copied now
 * into that entry (the WQE), so wire needs no registration. */
static void reply_send(struct server *srv, struct conn *conn,
		       const struct ctrl_msg *reply)
{
	uint8_t wire[CTRL_MSG_SIZE];
	struct ibv_sge sge = {
		.addr = (uintptr_t)wire,
		.length = sizeof(wire),
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
	}, *bad;
	int ret;

	if (replies_full(srv, conn))
		return;
	msg_encode(reply, wire);
	ret = ibv_post_send(conn->id->qp, &wr, &bad);
	if (ret) {
		fail("ibv_post_send(reply)", ret);
		conn_close(srv, conn);
		return;
	}
	conn->sending++;
}

/* A control message arrived: answer it with one RESP_ALLOC. */
static void on_request(struct server *srv, struct conn *conn, const void *buf,
		       uint32_t len)
{
	uint32_t asked, rkey = srv->pool_mr ? srv->pool_mr->rkey : 0;
	int err = alloc_request(&srv->pool, buf, len, &conn->slice, &asked);
	uint8_t *slice = srv->pool_mem + conn->slice.off;
	struct ctrl_msg reply = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_RESP_ALLOC,
	};

	if (!err) {
		/* the last holder's data is none of the next one's business */
		memset(slice, 0, conn->slice.len);
		err = window_bind(srv, conn, &rkey);
	}
	if (!err) {
		reply.addr = (uintptr_t)slice;
		reply.rkey = rkey;
		reply.size = (uint32_t)conn->slice.len;
	}
	reply.status = (uint32_t)-err;
	reply_print(srv, conn, &reply, asked);
	reply_send(srv, conn, &reply);
}

/* The NIC completes the doorbell's receive only once its write, and all
 * before it on the QP, are in memory: slot (seq - 1) % slots holds seq, or
 * seq plus a multiple of slots if the client has lapped since (slot_check()).
 */
static void on_doorbell(struct server *srv, struct conn *conn, uint32_t seq)
{
	uint32_t slots = conn->slice.len / 4, value = 0;
	uint8_t *slot = srv->pool_mem + conn->slice.off;

	if (slots)
		memcpy(&value, slot + (size_t)(seq - 1) % slots * 4, 4);
	srv->doorbells++;
	doorbell_print(srv, conn, seq, be32toh(value)); /* ok? slot_check() */
}

/* A walk of the list: what a completion costs more with more clients. */
static struct conn *conn_find(struct server *srv, uint32_t qp_num)
{
	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		if (conn->qp_num == qp_num)
			return conn;
	return NULL;
}

/* One completion; a receive's buffer goes back whatever it brought.  A
 * doorbell counts even once its connection is closing: a receive completes
 * successfully only before its QP enters the error state, so it landed
 * before the QP broke (whose event may have been handled first). */
static int on_completion(struct server *srv, const struct ibv_wc *wc)
{
	struct conn *conn = conn_find(srv, wc->qp_num);
	uint32_t index = WRID_INDEX(wc->wr_id);

	if (!conn || wc->status || key_revoked(srv, wc))
		on_trouble(srv, conn, wc); /* failed, or a key revoked */
	else if (!conn->closing && wc->opcode == IBV_WC_RECV) /* a SEND */
		on_request(srv, conn, srv->recv_bufs + index * RECV_BUF_SIZE,
			   wc->byte_len);
	else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		on_doorbell(srv, conn, be32toh(wc->imm_data));

	if (WRID_KIND(wc->wr_id) == WRID_RECV) {
		srv->recvs_posted--;
		return recv_post(srv, index);
	}
	if (conn) /* a reply or a window bind: one send fewer */
		conn->sending--;
	return 0;
}

#define CQ_BATCH 16 /* completions taken per ibv_poll_cq(): arbitrary */

/* The heart of the server: every completion the CQ holds, each a client
 * waiting, handled even after an error (returned; else how many). */
static int cq_drain(struct server *srv)
{
	struct ibv_wc wc[CQ_BATCH];
	int n, total = 0, err = 0;

	do {
		n = ibv_poll_cq(srv->cq, CQ_BATCH, wc);
		if (n < 0)
			return fail("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++)
			err = undo(err, NULL, on_completion(srv, &wc[i]));
		total += n;
	} while (n > 0 && !err);
	return err ? err : total;
}

/* One CM event (1; 0 if none), acked at once: rdma_destroy_id() waits for
 * the ack of its every event. */
static int cm_handle(struct server *srv)
{
	struct rdma_cm_event *event;
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	struct conn *conn;
	int err = 0;

	if (rdma_get_cm_event(srv->events, &event))
		return errno == EAGAIN ? 0 : fail("rdma_get_cm_event", errno);
	type = event->event;
	id = event->id;
	rdma_ack_cm_event(event);
	conn = id->context;

	switch (type) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: /* the client's CM REQ */
		err = on_connect_request(srv, id);
		break;
	case RDMA_CM_EVENT_ESTABLISHED: /* its RTU */
		conn->established = true;
		if (!conn->closing)
			say(&srv->out, "connect qp=0x%" PRIx32 "\n",
			    conn->qp_num);
		break;
	case RDMA_CM_EVENT_DISCONNECTED: /* its DREQ, or our own */
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE: /* our REP never got its RTU */
	case RDMA_CM_EVENT_REJECTED:
		err = cq_drain(srv); /* first its last doorbells */
		if (conn)
			conn_close(srv, conn);
		break;
	default:
		err = cm_other(type); /* TIMEWAIT_EXIT, DEVICE_REMOVAL... */
	}
	return err < 0 ? err : 1;
}

/* The device's asynchronous events (1; 0 if none), acked: a QP's destroy
 * waits for the acks of its events.  LAST_WQE_REACHED: a QP on the SRQ, in
 * the error state, takes no more of its receives (conn_quiet()). */
static int async_handle(struct server *srv)
{
	struct ibv_async_event event;
	struct conn *conn;
	int ret = 1;

	if (ibv_get_async_event(srv->verbs, &event))
		return errno == EAGAIN ? 0 : fail("ibv_get_async_event", errno);
	if (event.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
		conn = conn_find(srv, event.element.qp->qp_num);
		if (conn && !conn->closing) /* it broke: a bad write, say */
			conn_drop(srv, conn, "qp_error");
		if (conn)
			conn->last_wqe = true;
	} else {
		ret = async_other(srv, &event); /* a QP broke, the CQ... */
	}
	ibv_ack_async_event(&event);
	return ret;
}

#define CLOSE_TIMEOUT_MS 2000  /* waiting for LAST_WQE_REACHED at most */
#define CLOSE_GIVE_UP_MS 10000 /* a send not flushed by then never will be */

/* Every send of a closing QP has completed, and the device has raised
 * LAST_WQE_REACHED, or, where it never does (rxe before Linux 6.5),
 * CLOSE_TIMEOUT_MS have passed: nothing of it can complete any more. */
static bool conn_quiet(const struct conn *conn, double now)
{
	double ms = (now - conn->closed_at) * 1000;

	if (!conn->closing)
		return false;
	if (conn->sending)
		return ms >= CLOSE_GIVE_UP_MS;
	return conn->last_wqe || ms >= CLOSE_TIMEOUT_MS;
}

/* Give back what a quiet connection held (a write the NIC was placing in
 * its slice when the QP stopped has landed by now); destroy QP and id. */
static int conn_destroy(struct server *srv, struct conn *conn, double now)
{
	int err = window_unbind(conn);

	if (conn->slice.len)
		pool_free(&srv->pool, conn->slice.off, conn->slice.len);
	destroy_print(srv, conn, now);
	srv->nconns--;
	srv->nclosing--;
	rdma_destroy_qp(conn->id);
	if (rdma_destroy_id(conn->id))
		err = undo(err, "rdma_destroy_id", errno);
	free(conn);
	return err;
}

/* Destroy each quiet QP as the verbs ask for one on an SRQ: error state,
 * LAST_WQE_REACHED, the CQ drained of its last completions (a destroy would
 * lose them: mlx5 deletes them), destroy. */
static int conns_reap(struct server *srv)
{
	struct conn **link = &srv->conns, *conn;
	double now = now_seconds();
	int n = srv->nclosing ? cq_drain(srv) : 0, err = 0; /* the last first */

	if (n < 0)
		return n;
	while ((conn = *link)) {
		if (!conn_quiet(conn, now)) {
			link = &conn->next;
			continue;
		}
		*link = conn->next;
		err = undo(err, NULL, conn_destroy(srv, conn, now));
	}
	return err;
}

#define TICK_NS 1000000 /* sleep 1 ms when a tick found nothing to do */

/* Each tick asks for news; an idle one sleeps, sparing the core. */
static int serve(struct server *srv)
{
	const struct timespec tick = { .tv_nsec = TICK_NS };
	int signo = 0;

	while (!signo) {
		int busy = cm_handle(srv), ret;

		if (busy < 0)
			return busy;
		if (srv->cq) {
			ret = async_handle(srv);
			if (ret < 0)
				return ret;
			busy += ret;
			ret = cq_drain(srv);
			if (ret < 0)
				return ret;
			busy += ret;
			ret = conns_reap(srv);
			if (ret < 0)
				return ret;
			conns_watch(srv);
		}
		signo = signal_take(srv);
		if (!busy && !signo)
			nanosleep(&tick, NULL);
	}
	srv->stopped_by = signo;
	return signo == SIGPIPE ? -EPIPE : 0; /* stdout's reader gone */
}

/* The setup, the loop, and a goto ladder undoing the setup (common.h). */
int main(int argc, char **argv)
{
	struct server srv = { .sigfd = -1 };
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	err = parse_options(argc, argv, &srv.opt);
	if (err || srv.opt.help)
		goto out;
	err = devices_fit(&srv);
	if (err)
		goto out;
	err = pool_init(&srv.pool, srv.opt.pool_size);
	if (err)
		goto out;
	err = signals_open(&srv);
	if (err)
		goto out_free_pool;
	err = listen_open(&srv);
	if (err)
		goto out_destroy_listener;
	err = serve(&srv);
	err = undo(err, NULL, conns_close_all(&srv));
	err = verbs_close(&srv, err);
out_destroy_listener:
	if (srv.listener && rdma_destroy_id(srv.listener))
		err = undo(err, "rdma_destroy_id(listener)", errno);
	if (srv.events)
		rdma_destroy_event_channel(srv.events);
	if (srv.sigfd >= 0)
		close(srv.sigfd);
out_free_pool:
	pool_destroy(&srv.pool);
out:
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ======================================================================== */
/*                  Beyond the core path: a first read may skip              */
/* ======================================================================== */

/* ---- the command line --------------------------------------------------- */

#define DEFAULT_SRQ_DEPTH 128
#define MAX_SRQ_DEPTH 65536 /* ours; the device may allow fewer */
/* Connections at once (--max-conns): it sizes the CQ, see cq_open(). */
#define DEFAULT_MAX_CONNS 64
#define MAX_MAX_CONNS 1024
/* The deadlines of conns_watch(), in ms. */
#define DEFAULT_HANDSHAKE_MS 5000
#define DEFAULT_KEEPALIVE_MS 10000
#define MAX_DEADLINE_MS 600000

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s [options]\n"
		"  -p, --port PORT        port to listen on, 0 for any free one\n"
		"                         (default %d)\n"
		"      --pool-size BYTES  size of the pool, a multiple of %d\n"
		"                         (default %u)\n"
		"      --srq-depth N      receives kept posted (default %d)\n"
		"      --max-conns N      clients at once (default %d)\n"
		"      --isolation MODE   none: every client gets the pool's\n"
		"                         rkey (default); mw: a memory window\n"
		"                         over its own slice only (refused on\n"
		"                         Soft-RoCE, where a client could crash\n"
		"                         the machine: docs/design.md)\n"
		"      --handshake-timeout-ms MS\n"
		"                         close a connection not established\n"
		"                         that long after its accept (default %d)\n"
		"      --keepalive-ms MS  probe a connection quiet that long, and\n"
		"                         close it if the probe is not answered\n"
		"                         as long again; 0: never (default %d)\n"
		"  -h, --help             show this text\n",
		program_invocation_short_name, DEFAULT_PORT, POOL_CHUNK_SIZE,
		DEFAULT_POOL_SIZE, DEFAULT_SRQ_DEPTH, DEFAULT_MAX_CONNS,
		DEFAULT_HANDSHAKE_MS, DEFAULT_KEEPALIVE_MS);
}

/* Fills opt from the arguments, or says what is wrong and fails; --help
 * prints the usage and sets opt->help. */
static int parse_options(int argc, char **argv, struct options *opt)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "pool-size", required_argument, NULL, 'P' },
		{ "srq-depth", required_argument, NULL, 'S' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "isolation", required_argument, NULL, 'I' },
		{ "handshake-timeout-ms", required_argument, NULL, 'T' },
		{ "keepalive-ms", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, size = DEFAULT_POOL_SIZE;
	uint64_t srq_depth = DEFAULT_SRQ_DEPTH, max_conns = DEFAULT_MAX_CONNS;
	uint64_t handshake_ms = DEFAULT_HANDSHAKE_MS;
	uint64_t keepalive_ms = DEFAULT_KEEPALIVE_MS;
	int c, err = 0;

	while (!err &&
	       (c = getopt_long(argc, argv, "p:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			err = parse_number("port", optarg, 0, UINT16_MAX,
					   &port);
			break;
		case 'P':
			err = parse_number("pool size", optarg, POOL_CHUNK_SIZE,
					   UINT32_MAX, &size);
			if (!err && size % POOL_CHUNK_SIZE) {
				errorf("bad pool size '%s': want a multiple "
				       "of %d",
				       optarg, POOL_CHUNK_SIZE);
				err = -EINVAL;
			}
			break;
		case 'S':
			err = parse_number("SRQ depth", optarg, 1,
					   MAX_SRQ_DEPTH, &srq_depth);
			break;
		case 'C':
			err = parse_number("connection limit", optarg, 1,
					   MAX_MAX_CONNS, &max_conns);
			break;
		case 'I':
			opt->isolation = strcmp(optarg, "mw") == 0;
			if (!opt->isolation && strcmp(optarg, "none")) {
				errorf("bad isolation '%s': want none or mw",
				       optarg);
				err = -EINVAL;
			}
			break;
		case 'T':
			err = parse_number("handshake timeout", optarg, 1,
					   MAX_DEADLINE_MS, &handshake_ms);
			break;
		case 'K':
			err = parse_number("keepalive time", optarg, 0,
					   MAX_DEADLINE_MS, &keepalive_ms);
			break;
		case 'h':
			opt->help = true;
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (err)
		return err;
	if (optind < argc) {
		errorf("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	opt->port = (uint16_t)port;
	opt->pool_size = (uint32_t)size;
	opt->srq_depth = (uint32_t)srq_depth;
	opt->max_conns = (uint32_t)max_conns;
	opt->handshake_ms = (uint32_t)handshake_ms;
	opt->keepalive_ms = (uint32_t)keepalive_ms;
	return 0;
}

/* ---- signals and statistics --------------------------------------------- */

/*
 * Signals arrive as readable data on a file descriptor instead of
 * interrupting the program: the loop checks it like any other source of
 * work, and no global flag is needed.  SIGINT and SIGTERM stop the server,
 * SIGUSR1 asks for its counters.  SIGPIPE, which would end the server
 * without its teardown when its stdout's reader goes away, is ignored:
 * say() sees EPIPE instead, and signal_take() stops the server.
 */
static int signals_open(struct server *srv)
{
	sigset_t mask;

	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return fail("signal(SIGPIPE)", errno);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGUSR1);
	if (sigprocmask(SIG_BLOCK, &mask, NULL))
		return fail("sigprocmask", errno);
	srv->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (srv->sigfd < 0)
		return fail("signalfd", errno);
	return 0;
}

/*
 * What is in use right now.  Once every client has gone, and its QP with
 * it: 0 connections, 0 closing, 0 chunks and every receive posted; a
 * receive missing was lost.
 */
static void stats_print(struct server *srv, const char *what)
{
	say(&srv->out,
	    "%s connections=%u chunks_in_use=%zu doorbells=%" PRIu64
	    " closing=%u recvs_posted=%" PRIu32 "/%" PRIu32 "\n",
	    what, srv->nconns - srv->nclosing, srv->pool.used, srv->doorbells,
	    srv->nclosing, srv->recvs_posted,
	    srv->srq ? srv->opt.srq_depth : 0);
}

/*
 * Take a pending signal, if any.  SIGUSR1 prints the counters; SIGINT and
 * SIGTERM return their number, which ends the loop.  0: go on.
 */
static int signal_take(struct server *srv)
{
	struct signalfd_siginfo info;

	if (srv->out.closed) {
		errorf("stdout's reader is gone (EPIPE): stopping");
		return SIGPIPE;
	}
	if (read(srv->sigfd, &info, sizeof(info)) != sizeof(info))
		return 0;
	if (info.ssi_signo == SIGUSR1) {
		stats_print(srv, "stats");
		return 0;
	}
	return (int)info.ssi_signo;
}

/* The last line: which signal, and what came back. */
static void shutdown_print(struct server *srv)
{
	char what[48];

	snprintf(what, sizeof(what), "shutdown signal=SIG%s",
		 sigabbrev_np(srv->stopped_by));
	stats_print(srv, what);
}

/* ---- troubles ----------------------------------------------------------- */

/* 0.0.0.0 is always there: whatever else, the port is taken. */
static int listen_fail(struct server *srv, int err)
{
	if (err != EADDRINUSE && err != EADDRNOTAVAIL)
		return fail("rdma_bind_addr", err);
	errorf("port %u is already in use (rdma_bind_addr: %s)", srv->opt.port,
	       strerror(err));
	return -err;
}

/* Refuse a connect request; the reason goes to the client as private
 * data.  A failure here concerns that client alone: said, not passed up. */
static void conn_reject(struct server *srv, struct rdma_cm_id *id,
			const char *reason)
{
	say(&srv->out, "reject reason=%s\n", reason);
	if (rdma_reject(id, reason, (uint8_t)(strlen(reason) + 1)))
		fail("rdma_reject", errno);
	if (rdma_destroy_id(id))
		fail("rdma_destroy_id", errno);
}

/* The grant or denial on_request() sends. */
static void reply_print(struct server *srv, const struct conn *conn,
			const struct ctrl_msg *reply, uint32_t asked)
{
	if (reply->status)
		say(&srv->out,
		    "deny qp=0x%" PRIx32 " size=%" PRIu32 " status=%s\n",
		    conn->qp_num, asked, errno_name((int)reply->status));
	else
		say(&srv->out,
		    "grant qp=0x%" PRIx32 " addr=0x%" PRIx64 " rkey=0x%" PRIx32
		    " size=%" PRIu32 "\n",
		    conn->qp_num, reply->addr, reply->rkey, reply->size);
}

/* A doorbell's verdict (slot_check()): its slot holds seq, ok; or seq plus
 * a multiple of the slots, lapped; or anything else: ordering or data
 * broke, and stderr says so too. */
static void doorbell_print(struct server *srv, const struct conn *conn,
			   uint32_t seq, uint32_t value)
{
	uint32_t slots = conn->slice.len / sizeof(uint32_t);
	enum slot_verdict verdict = slot_check(seq, value, slots);

	say(&srv->out,
	    "doorbell qp=0x%" PRIx32 " seq=%" PRIu32 " value=%" PRIu32 " %s\n",
	    conn->qp_num, seq, value, slot_verdict_name(verdict));
	if (verdict == SLOT_MISMATCH)
		errorf("MISMATCH qp=0x%" PRIx32 ": doorbell %" PRIu32
		       " found %" PRIu32 " in its slot%s",
		       conn->qp_num, seq, value,
		       slots ? "" : " (it holds no slice)");
}

/* The CM's other events: nothing to do, or no device any more. */
static int cm_other(enum rdma_cm_event_type type)
{
	if (type != RDMA_CM_EVENT_DEVICE_REMOVAL)
		return 0;
	errorf("the RDMA device went away");
	return -ENODEV;
}

static void on_invalidate(struct server *srv, struct conn *conn, uint32_t rkey);

/*
 * A completion the server cannot take as it comes.  A work request failed,
 * and its QP is now in the error state: end the connection.  Only wr_id,
 * status and qp_num are set (not opcode).  A flush (IBV_WC_WR_FLUSH_ERR)
 * is only the echo of an error state reported before, or of a close.  A
 * receive that carried an invalidation: on_invalidate().  A completion of
 * no connection of ours is said.
 */
static void on_trouble(struct server *srv, struct conn *conn,
		       const struct ibv_wc *wc)
{
	const char *what = "reply";

	if (conn && wc->status == IBV_WC_SUCCESS) {
		on_invalidate(srv, conn, wc->invalidated_rkey);
		return;
	}
	if (!conn) {
		errorf("a completion for qp=0x%" PRIx32 ", which is no "
		       "connection of ours",
		       wc->qp_num);
		return;
	}
	if (WRID_KIND(wc->wr_id) == WRID_RECV)
		what = "receive";
	else if (WRID_KIND(wc->wr_id) == WRID_BIND)
		what = "window bind";
	else if (WRID_KIND(wc->wr_id) == WRID_PROBE)
		what = "keepalive probe";
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		errorf("%s qp=0x%" PRIx32 " failed: %s", what, wc->qp_num,
		       wc_status_name(wc->status));
	if (WRID_KIND(wc->wr_id) == WRID_PROBE)
		conn_drop(srv, conn, "qp_error");
	conn_close(srv, conn);
}

/* Any other asynchronous event: named.  A QP that broke is closed; a CQ,
 * an SRQ or a device that broke stops the server (-EIO). */
static int async_other(struct server *srv, const struct ibv_async_event *event)
{
	const char *name = async_event_name(event->event_type);
	struct conn *conn;

	switch (event->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		say(&srv->out, "async event=%s qp=0x%" PRIx32 "\n", name,
		    event->element.qp->qp_num);
		conn = conn_find(srv, event->element.qp->qp_num);
		if (conn)
			conn_close(srv, conn);
		return 1;
	case IBV_EVENT_CQ_ERR:
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		say(&srv->out, "async event=%s\n", name);
		errorf("%s: completions can no longer be trusted: stopping",
		       name);
		return -EIO;
	default:
		say(&srv->out, "async event=%s\n", name);
		return 1;
	}
}

/*
 * conn_quiet() gave up waiting for a send: a device that flushes nothing
 * (never seen).  Destroying the QP takes its sends with it: they are
 * counted, and nothing of theirs is waited for any more.  Their
 * completions, should one come after all, find no connection: conn_find()
 * looks for a QP number, and rxe gives a number again only after about a
 * million QPs (docs/design.md).
 */
static void sends_abandon(struct server *srv, struct conn *conn)
{
	srv->sends_abandoned += conn->sending;
	errorf("qp=0x%" PRIx32 ": %u sends still outstanding after %d ms: "
	       "destroying it anyway",
	       conn->qp_num, conn->sending, CLOSE_GIVE_UP_MS);
}

/* A QP is gone, its slice back; what ended the wait (conn_quiet()). */
static void destroy_print(struct server *srv, struct conn *conn, double now)
{
	if (conn->sending)
		sends_abandon(srv, conn);
	say(&srv->out,
	    "destroy qp=0x%" PRIx32 " after_ms=%.0f ended_by=%s freed=%zu\n",
	    conn->qp_num, (now - conn->closed_at) * 1000,
	    conn->last_wqe ? "last_wqe" : "timer", conn->slice.len);
}

/* ---- limits and tuning -------------------------------------------------- */

/*
 * Why a device cannot take this server's settings, or NULL if it can: an
 * SRQ of --srq-depth, a CQ for it and --max-conns send queues (cq_open()),
 * a QP per connection and, for --isolation mw, type 2 windows and a region
 * per slice, on a device that is not Soft-RoCE (RXE_VENDOR_ID in common.h
 * says why not).  Says which limit a setting passes (the device's
 * attribute, ibv_query_device(3)), if say_why.
 */
static const char *device_refusal(struct server *srv,
				  struct ibv_context *verbs, bool say_why)
{
	uint64_t cqe =
		srv->opt.srq_depth + (uint64_t)srv->opt.max_conns * SQ_DEPTH;
	const char *name = ibv_get_device_name(verbs->device);
	struct ibv_device_attr attr;
	int ret = ibv_query_device(verbs, &attr);

	if (ret) {
		fail("ibv_query_device", ret);
		return "device-limits";
	}
	if (srv->opt.srq_depth > (uint32_t)attr.max_srq_wr) {
		if (say_why)
			errorf("--srq-depth %" PRIu32 ": %s allows %d receives "
			       "on an SRQ (max_srq_wr)",
			       srv->opt.srq_depth, name, attr.max_srq_wr);
		return "device-limits";
	}
	if (cqe > (uint64_t)attr.max_cqe) {
		if (say_why)
			errorf("--srq-depth %" PRIu32
			       " and --max-conns %" PRIu32
			       " need a CQ of %" PRIu64 " entries: %s allows "
			       "%d (max_cqe)",
			       srv->opt.srq_depth, srv->opt.max_conns, cqe,
			       name, attr.max_cqe);
		return "device-limits";
	}
	if (srv->opt.max_conns > (uint32_t)attr.max_qp) {
		if (say_why)
			errorf("--max-conns %" PRIu32 ": %s allows %d QPs "
			       "(max_qp)",
			       srv->opt.max_conns, name, attr.max_qp);
		return "device-limits";
	}
	if (!srv->opt.isolation)
		return NULL;
	if (attr.vendor_id == RXE_VENDOR_ID) {
		if (say_why)
			errorf("--isolation mw: %s is Soft-RoCE (rxe), whose "
			       "memory windows let any client crash this "
			       "machine's kernel (a window invalidated twice: "
			       "rxe_check_invalidate_mw() in "
			       "drivers/infiniband/sw/rxe/rxe_mw.c); use "
			       "--isolation none",
			       name);
		return "isolation-mw-on-rxe";
	}
	if (!(attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
				       IBV_DEVICE_MEM_WINDOW_TYPE_2B)) ||
	    srv->opt.max_conns > (uint32_t)attr.max_mw ||
	    srv->opt.max_conns + 2 > (uint32_t)attr.max_mr) {
		if (say_why)
			errorf("--isolation mw: %s has no type 2 memory "
			       "windows, or fewer than --max-conns %" PRIu32
			       " (max_mw %d, max_mr %d)",
			       name, srv->opt.max_conns, attr.max_mw,
			       attr.max_mr);
		return "device-limits";
	}
	return NULL;
}

/*
 * At start: an RDMA device at all (devices_check()), and one at least that
 * can take the settings; a setting none can take is refused now, by name,
 * not at the first client.  A device that cannot, when another can, is
 * named, and a client that comes through it refused (conn_refusal()).
 */
static int devices_fit(struct server *srv)
{
	struct ibv_device **list;
	int n, fits = 0, err = devices_check();

	if (err)
		return err;
	list = ibv_get_device_list(&n);
	if (!list)
		return fail("ibv_get_device_list", errno);
	for (int i = 0; i < n; i++) {
		struct ibv_context *verbs = ibv_open_device(list[i]);

		if (!verbs) {
			fail("ibv_open_device", errno);
			continue;
		}
		fits += !device_refusal(srv, verbs, true);
		err = undo(err, "ibv_close_device", ibv_close_device(verbs));
	}
	ibv_free_device_list(list);
	if (err)
		return err;
	return fits ? 0 : -EINVAL;
}

/*
 * Ask the device to raise IBV_EVENT_SRQ_LIMIT_REACHED once, when fewer than
 * an eighth of the SRQ's receives are left: a sign that the server is not
 * keeping up and clients are about to hear "receiver not ready".  The limit
 * disarms itself when it fires; we do not re-arm it, one line is enough.
 */
static int srq_limit_arm(struct server *srv)
{
	struct ibv_srq_attr attr = { .srq_limit = srv->opt.srq_depth / 8 };
	int ret;

	if (!attr.srq_limit)
		return 0;
	ret = ibv_modify_srq(srv->srq, &attr, IBV_SRQ_LIMIT);
	return ret ? fail("ibv_modify_srq(srq_limit)", ret) : 0;
}

/* "receiver not ready", wait 0.64 ms (code 12); rxe: at least a kernel tick */
#define MIN_RNR_TIMER 12

/*
 * When a message finds the SRQ empty, our NIC answers "receiver not ready"
 * and names the wait before a retry: the QP's min_rnr_timer, a 5-bit code.
 * rdma_accept() leaves it at 0, which is not "no wait" but the longest,
 * 655 ms.  Only a connected QP takes a shorter one; if it will not, the
 * connection still works, slowly under load: a warning, not an error.
 */
static void rnr_timer_shorten(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .min_rnr_timer = MIN_RNR_TIMER };
	int ret = ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER);

	if (ret)
		fail("ibv_modify_qp(min_rnr_timer)", ret);
}

/*
 * The connections that can still complete a send: every open one, and a
 * closing one until its last send has completed.  After that its QP can
 * complete only receives it took from the SRQ, which the SRQ's share of
 * the CQ covers.  Only these count toward --max-conns, what the CQ is sized
 * for (cq_open()).
 */
static unsigned int conns_sending(const struct server *srv)
{
	unsigned int n = 0;

	for (const struct conn *conn = srv->conns; conn; conn = conn->next)
		n += !conn->closing || conn->sending;
	return n;
}

/*
 * Why a connect request must be refused, or NULL: it came through a device
 * that cannot take the settings (device_refusal()), or another device than
 * the first (a listener on 0.0.0.0 may hear several), or the server is
 * full.  At the limit, drain the CQ first: a flushed send may
 * have freed a place.  *err is set if that drain failed.
 */
static const char *conn_refusal(struct server *srv, struct rdma_cm_id *id,
				int *err)
{
	int n = 0;

	if (!srv->verbs)
		return device_refusal(srv, id->verbs, false);
	if (id->verbs != srv->verbs)
		return "other-device";
	if (conns_sending(srv) >= srv->opt.max_conns)
		n = cq_drain(srv);
	if (n < 0)
		*err = n;
	if (n < 0 || conns_sending(srv) >= srv->opt.max_conns)
		return "server-full";
	return NULL;
}

/* A client may have at most SEND_DEPTH requests unanswered (the protocol
 * is request and reply); one that sends more is disconnected. */
static bool replies_full(struct server *srv, struct conn *conn)
{
	if (conn->sending < SEND_DEPTH)
		return false;
	errorf("qp=0x%" PRIx32 " sent more than %d requests without "
	       "waiting for replies: disconnecting it",
	       conn->qp_num, SEND_DEPTH);
	conn_close(srv, conn);
	return true;
}

/* ---- deadlines: no peer holds a place it does not use ------------------ */

/* The server ends a connection itself, and says why. */
static void conn_drop(struct server *srv, struct conn *conn, const char *reason)
{
	if (conn->closing)
		return;
	say(&srv->out, "close qp=0x%" PRIx32 " reason=%s\n", conn->qp_num,
	    reason);
	conn_close(srv, conn);
}

/*
 * A keepalive probe: an RDMA WRITE of no bytes.  The peer's NIC (or
 * kernel) acknowledges it without its program, its memory or a receive:
 * a zero-length RDMA operation carries no key to check (the IB spec's
 * C9-88, as rxe's check_rkey() has it), and the connection manager gives
 * every connected QP remote write access (the kernel's cm.c,
 * cm_init_qp_init_attr()).  Signaled, like every send of ours.
 */
static void probe_send(struct server *srv, struct conn *conn, double now)
{
	struct ibv_send_wr wr = {
		.wr_id = WRID_PROBE,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret = ibv_post_send(conn->id->qp, &wr, &bad);

	if (ret) {
		fail("ibv_post_send(keepalive probe)", ret);
		conn_drop(srv, conn, "qp_error");
		return;
	}
	conn->sending++;
	conn->probing = true;
	conn->probed_at = now;
}

/*
 * Every connection's deadlines, each time round the loop.  One not
 * ESTABLISHED --handshake-timeout-ms after its accept (its peer never sent
 * the RTU; the CM would resend its REP for a minute or more) is closed.
 * An established one gets a probe every --keepalive-ms: a client that only
 * writes is quiet to the server program, which is no reason to close it,
 * but RC has no keepalive of its own, and a peer that vanished without a
 * disconnect (its machine died, its cable was pulled) would hold its place
 * for ever.  The probe is answered once nothing is outstanding on the send
 * queue (sends complete in order); one still outstanding --keepalive-ms
 * later closes the connection: the peer is gone, or it leaves our replies
 * unreceived.  The cost: a look at each connection per loop, and a packet
 * and its acknowledgement per connection every --keepalive-ms.  Returns the
 * ms until the next deadline, or -1 if there is none.
 */
static int conns_watch(struct server *srv)
{
	double now = now_seconds(), next = -1, due;
	double keepalive = srv->opt.keepalive_ms / 1e3;

	for (struct conn *conn = srv->conns; conn; conn = conn->next) {
		if (conn->probing && !conn->sending)
			conn->probing = false; /* answered */
		if (conn->closing || (conn->established && !keepalive))
			continue;
		if (!conn->established) {
			due = conn->accepted_at + srv->opt.handshake_ms / 1e3;
			if (now >= due)
				conn_drop(srv, conn, "handshake_timeout");
		} else {
			due = (conn->probed_at ? conn->probed_at
					       : conn->accepted_at) +
			      keepalive;
			if (now >= due && conn->probing)
				conn_drop(srv, conn, "peer_silent");
			else if (now >= due)
				probe_send(srv, conn, now);
			if (now >= due)
				due = now + keepalive;
		}
		if (!conn->closing && (next < 0 || due < next))
			next = due;
	}
	return next < 0 ? -1 : (int)((next - now) * 1e3) + 1;
}

/* ---- the end of all connections ----------------------------------------- */

/*
 * At the end: close every connection, then take events and completions
 * until each QP is quiet and destroyed (CLOSE_TIMEOUT_MS at most, unless
 * sends are still outstanding); after a signal, a last count.
 */
static int conns_close_all(struct server *srv)
{
	const struct timespec pause = { .tv_nsec = 1000000 };
	int ret = 0;

	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		conn_close(srv, conn);
	while (srv->conns && ret >= 0) {
		while ((ret = async_handle(srv)) > 0)
			;
		if (ret == 0)
			ret = cq_drain(srv);
		if (ret >= 0)
			ret = conns_reap(srv);
		nanosleep(&pause, NULL);
	}
	if (srv->stopped_by)
		shutdown_print(srv);
	if (srv->out.dropped)
		errorf("%" PRIu64 " lines of output dropped: stdout was not "
		       "read fast enough",
		       srv->out.dropped);
	if (srv->sends_abandoned)
		errorf("%" PRIu64 " sends abandoned with their QPs",
		       srv->sends_abandoned);
	return ret < 0 ? ret : 0;
}

/* Undo verbs_open() in reverse, once no QP is left. */
static int verbs_close(struct server *srv, int err)
{
	if (srv->cq)
		err = undo(err, "ibv_destroy_cq", ibv_destroy_cq(srv->cq));
	if (srv->srq)
		err = undo(err, "ibv_destroy_srq", ibv_destroy_srq(srv->srq));
	if (srv->recv_mr)
		err = undo(err, "ibv_dereg_mr(receive buffers)",
			   ibv_dereg_mr(srv->recv_mr));
	free(srv->recv_bufs);
	if (srv->pool_mr)
		err = undo(err, "ibv_dereg_mr(pool)",
			   ibv_dereg_mr(srv->pool_mr));
	free(srv->pool_mem);
	if (srv->pd)
		err = undo(err, "ibv_dealloc_pd", ibv_dealloc_pd(srv->pd));
	return err;
}

/* ---- isolation: a memory window per slice (--isolation mw) --------------- */

/*
 * The pool's rkey opens all of the pool to whoever holds it.  With
 * --isolation mw the pool has no rkey at all, and each client gets the
 * rkey of a type 2 memory window over its slice alone: a window is bound
 * by a work request on the client's own QP and works only through that QP.
 * Without the option, each of these functions does nothing.
 */
struct window {
	struct ibv_mw *mw;
	struct ibv_mr *mr; /* the slice's own region, under the window */
	uint32_t rkey;	   /* the key handed out */
};

/* The pool is not registered as a whole: no key to all of it exists to
 * be printed, leaked or guessed. */
static int windows_pool(struct server *srv)
{
	say(&srv->out, "pool addr=0x%" PRIxPTR " size=%" PRIu32 " rkey=none\n",
	    (uintptr_t)srv->pool_mem, srv->opt.pool_size);
	return 0;
}

/*
 * Bind the window over the connection's slice, with the key rkey, by a work
 * request on the client's send queue.  Work requests on one send queue run
 * in order, so the window works before a reply posted after it can tell
 * the client its key (ibv_bind_mw(3)).  The bind is signaled like every
 * send, so that conn->sending counts all that can still complete; SQ_DEPTH
 * keeps it a send queue entry.
 */
static int window_post(struct server *srv, struct conn *conn, uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = WRID_BIND,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_mw.mw = conn->window->mw,
		.bind_mw.rkey = rkey,
		.bind_mw.bind_info.mr = conn->window->mr,
		.bind_mw.bind_info.addr =
			(uintptr_t)(srv->pool_mem + conn->slice.off),
		.bind_mw.bind_info.length = conn->slice.len,
		.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
	}, *bad;
	int ret = ibv_post_send(conn->id->qp, &wr, &bad);

	if (ret)
		return fail("ibv_post_send(bind window)", ret);
	conn->sending++;
	conn->window->rkey = rkey;
	/* A bind names the window by ibv_mw.rkey, which nothing updates
	 * after a type 2 bind; rxe refuses a bind naming a key the window
	 * no longer has (rxe_bind_mw() in rxe_mw.c), as on_invalidate()'s
	 * rebind would. */
	conn->window->mw->rkey = rkey;
	return 0;
}

/*
 * A window over the slice just granted (and zeroed), and its rkey in *rkey.
 * ibv_inc_rkey() gives the key a fresh low byte, so no earlier key of this
 * window can match.
 *
 * The window sits on a region registered for this slice alone, the only pin
 * of these pages.  By the verbs, an access through a window is checked
 * against the window's bounds; Soft-RoCE (rxe, Linux 6.1 and 6.12) checks
 * only the bounds of the region underneath, so over one region for the
 * whole pool a client could still write into its neighbour's slice.  With
 * a region per slice, the two checks are the same one.  The region itself
 * allows no remote access: MW_BIND lets windows be bound over it, and
 * LOCAL_WRITE is required for a window that allows REMOTE_WRITE.  If the
 * window cannot be bound, the slice goes back to the pool and the client
 * is denied (ENOMEM when the region cannot be pinned: fail() says whether
 * the locked-memory limit is why).
 */
static int window_bind(struct server *srv, struct conn *conn, uint32_t *rkey)
{
	uint8_t *slice = srv->pool_mem + conn->slice.off;
	struct window *win;
	int err;

	if (!srv->opt.isolation)
		return 0;
	win = calloc(1, sizeof(*win));
	if (!win) {
		err = fail("calloc(window)", ENOMEM);
		goto out_free_slice;
	}
	win->mw = ibv_alloc_mw(srv->pd, IBV_MW_TYPE_2);
	if (!win->mw) {
		err = fail("ibv_alloc_mw", errno);
		goto out_free_window;
	}
	win->mr = ibv_reg_mr(srv->pd, slice, conn->slice.len,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	if (!win->mr) {
		err = fail("ibv_reg_mr(slice)", errno);
		goto out_dealloc_mw;
	}
	conn->window = win;
	err = window_post(srv, conn, ibv_inc_rkey(win->mw->rkey));
	if (err)
		goto out_dereg;
	*rkey = win->rkey;
	return 0;

out_dereg:
	conn->window = NULL;
	err = undo(err, "ibv_dereg_mr(slice)", ibv_dereg_mr(win->mr));
out_dealloc_mw:
	err = undo(err, "ibv_dealloc_mw", ibv_dealloc_mw(win->mw));
out_free_window:
	free(win);
out_free_slice:
	pool_free(&srv->pool, conn->slice.off, conn->slice.len);
	conn->slice = (struct slice){ 0 };
	return err;
}

/*
 * Did this receive revoke a key (a SEND WITH INVALIDATE)?  libibverbs says
 * so with IBV_WC_WITH_INV (1 << 3).  rxe does not: its kernel half writes
 * the kernel's flag, IB_WC_WITH_INVALIDATE (1 << 2), into the completion
 * (do_complete() in rxe_resp.c) and rdma-core's rxe_poll_cq() copies it
 * unchanged, where libibverbs calls that bit IBV_WC_IP_CSUM_OK (measured:
 * the server saw no IBV_WC_WITH_INV).  That bit counts only with a key
 * that is one of our windows', so that a checksum flag from another
 * device cannot close a client.
 */
static bool key_revoked(const struct server *srv, const struct ibv_wc *wc)
{
	if (!(wc->opcode & IBV_WC_RECV))
		return false;
	if (wc->wc_flags & IBV_WC_WITH_INV)
		return true;
	if (!(wc->wc_flags & IBV_WC_IP_CSUM_OK))
		return false;
	for (const struct conn *c = srv->conns; c; c = c->next)
		if (c->window && c->window->rkey == wc->invalidated_rkey)
			return true;
	return false;
}

/*
 * A SEND WITH INVALIDATE came from conn: its sender asked our NIC to revoke
 * the key rkey.  The protocol never sends one, so the sender is closed.  A
 * type 2 window works only through the QP it was bound on, but rxe lets
 * any QP invalidate it: rxe_check_invalidate_mw() (rxe_mw.c) checks the
 * window's state and type, not its QP, where rxe_lookup_mw() checks the QP
 * for every access.  So a client that guessed its neighbour's key has just
 * revoked it.  The neighbour's window is bound again at once, with the same
 * key: a write of the neighbour's that came in between has failed, and
 * broke its connection (the device decides that, not us); every later one
 * lands.  A device that checks the QP refuses the invalidation itself.
 */
static void on_invalidate(struct server *srv, struct conn *conn, uint32_t rkey)
{
	struct conn *victim = srv->conns;

	conn_drop(srv, conn, "invalidate");
	while (victim && !(victim->window && victim->window->rkey == rkey))
		victim = victim->next;
	if (!victim || victim == conn || victim->closing)
		return;
	if (window_post(srv, victim, rkey))
		conn_drop(srv, victim, "window_lost");
	else
		say(&srv->out, "rebind qp=0x%" PRIx32 " rkey=0x%" PRIx32 "\n",
		    victim->qp_num, rkey);
}

/*
 * The client is gone and its QP quiet: invalidate its key (deallocating
 * the window does that) before its slice goes back to the pool, then drop
 * the region the window sat on.
 */
static int window_unbind(struct conn *conn)
{
	struct window *win = conn->window;
	int err = 0;

	if (!win)
		return 0;
	err = undo(err, "ibv_dealloc_mw", ibv_dealloc_mw(win->mw));
	err = undo(err, "ibv_dereg_mr(slice)", ibv_dereg_mr(win->mr));
	free(win);
	conn->window = NULL;
	return err;
}
