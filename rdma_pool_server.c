/*
 * rdma_pool_server.c - lends slices of one registered memory pool to RDMA
 * clients and checks the doorbells they ring.  The polling edition: one
 * thread whose loop, every tick, asks the connection manager and the
 * completion queue (CQ) for news.  Each client has a queue pair (QP) of its
 * own; all share one receive queue (the SRQ) and the CQ.  The core path:
 *
 *   main
 *     listen_open             a cm_id listening on the port
 *     serve                   the tick loop; each tick:
 *       cm_handle               the connection manager's news
 *         on_connect_request      a client: the first time, verbs_open
 *                                 (PD, pool MR, SRQ, CQ); then conn_create
 *                                 (its QP on the SRQ, rdma_accept)
 *         conn_close              a client gone: its QP to the error state
 *       cq_drain                every completion, each to on_completion:
 *                                 on_request and reply_send, on_doorbell
 *     server_close            everything, in reverse order
 * After the banner: options, signals, failures, destroying closed QPs.
 * rdma_srq_pool_server_ev.c is this server driven by events; a diff shows
 * that, and a second lesson: its replies come from registered buffers,
 * given back by wr_id, where this one sends them inline from the stack.
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

/* Replies in flight per connection, and a send queue entry for a bind. */
#define SEND_DEPTH 8
#define SQ_DEPTH (SEND_DEPTH + 1)
/* wr_id is ours: its completion hands it back, even a failed one. */
#define WRID_RECV (UINT64_C(1) << 32)
#define WRID_SEND (UINT64_C(2) << 32)
#define WRID_BIND (UINT64_C(3) << 32)
#define WRID_KIND(wr_id) ((wr_id) & ~UINT64_C(0xffffffff))
#define WRID_INDEX(wr_id) ((uint32_t)(wr_id))

struct options {
	uint16_t port;
	uint32_t pool_size;
	uint32_t srq_depth;
	uint32_t max_conns;
	bool isolation; /* --isolation mw: a memory window per slice */
	bool help;
};

struct conn {
	struct rdma_cm_id *id;
	uint32_t qp_num;
	struct slice slice;   /* this client's part of the pool */
	unsigned int sending; /* sends posted, not yet completed */
	bool closing;  /* see conn_close() */
	bool last_wqe; /* IBV_EVENT_QP_LAST_WQE_REACHED has come */
	double closed_at;
	/* --isolation mw: a memory window (a key to part of a region) */
	struct ibv_mw *window;
	struct ibv_mr *slice_mr;
	struct conn *next;
};

struct server {
	struct options opt;
	int sigfd;
	struct rdma_event_channel *events;
	struct rdma_cm_id *listener;

	/* Verbs resources, made on the first connect request: verbs_open() */
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	uint8_t *pool_mem;
	struct ibv_mr *pool_mr;
	uint8_t *recv_bufs;
	struct ibv_mr *recv_mr;
	struct ibv_srq *srq;
	struct ibv_cq *cq;

	struct pool pool;
	struct conn *conns;
	unsigned int nconns; /* in conns, open or closing */
	unsigned int nclosing;
	uint32_t recvs_posted; /* receives on the SRQ now */
	uint64_t doorbells;
	int stopped_by; /* the signal that ended serve() */
};

/* Beyond the core path: after the banner below. */
static int parse_options(int argc, char **argv, struct options *opt);
static void usage(FILE *out);
static int listen_fail(struct server *srv, int err);
static int signals_open(struct server *srv);
static int signal_take(struct server *srv);
static void shutdown_print(const struct server *srv);
static int async_handle(struct server *srv);
static int srq_limit_arm(struct server *srv);
static void rnr_timer_shorten(struct ibv_qp *qp);
static void on_doorbell(struct server *srv, struct conn *conn, uint32_t seq);
static void on_failure(struct server *srv, struct conn *conn,
		       const struct ibv_wc *wc);
static void conn_reject(struct rdma_cm_id *id, const char *reason);
static struct conn *conn_find(struct server *srv, uint32_t qp_num);
static bool conns_full(struct server *srv);
static void conns_reap(struct server *srv);
static void conns_close_all(struct server *srv);
static int windows_check(struct server *srv);
static int window_alloc(struct server *srv, struct conn *conn);
static int window_bind(struct server *srv, struct conn *conn, uint32_t *rkey);
static unsigned int window_fence(const struct conn *conn);
static void window_unbind(struct conn *conn);

/* ---- listening ---------------------------------------------------------- */

#define LISTEN_BACKLOG 16 /* connect requests queued until accepted */

/*
 * The connection manager (librdmacm) speaks IP addresses and ports, like
 * sockets, and reports each connection's progress as events on a channel,
 * non-blocking here: the tick loop asks it for news and moves on.
 */
static int listen_open(struct server *srv)
{
	struct sockaddr_in addr = {
		.sin_family = AF_INET,
		.sin_port = htons(srv->opt.port),
		.sin_addr.s_addr = htonl(INADDR_ANY),
	};

	srv->events = rdma_create_event_channel();
	if (!srv->events)
		return devices_missing("rdma_create_event_channel", errno);
	if (fcntl(srv->events->fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(O_NONBLOCK)", errno);
	if (rdma_create_id(srv->events, &srv->listener, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id", errno);
	if (rdma_bind_addr(srv->listener, (struct sockaddr *)&addr))
		return listen_fail(srv, errno);
	if (rdma_listen(srv->listener, LISTEN_BACKLOG))
		return fail("rdma_listen", errno);
	printf("listen port=%u pool_size=%" PRIu32 "\n", srv->opt.port,
	       srv->opt.pool_size);
	return 0;
}

/* ---- verbs resources ---------------------------------------------------- */

/* Registering pins the pool and gives the NIC its translation.  With
 * REMOTE_WRITE, an RDMA WRITE within its bounds and rkey just lands. */
static int pool_register(struct server *srv)
{
	size_t size = srv->opt.pool_size;

	srv->pool_mem = aligned_alloc(POOL_CHUNK_SIZE, size);
	if (!srv->pool_mem)
		return fail("aligned_alloc(pool)", ENOMEM);
	memset(srv->pool_mem, 0, size);
	if (srv->opt.isolation) {
		printf("pool addr=0x%" PRIxPTR " size=%zu rkey=none\n",
		       (uintptr_t)srv->pool_mem, size);
		return 0;
	}
	srv->pool_mr =
		ibv_reg_mr(srv->pd, srv->pool_mem, size,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ);
	if (!srv->pool_mr)
		return mr_fail("ibv_reg_mr(pool)", errno);
	printf("pool addr=0x%" PRIxPTR " size=%zu rkey=0x%" PRIx32 "\n",
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
	};
	struct ibv_recv_wr *bad;
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
		return mr_fail("ibv_reg_mr(receive buffers)", errno);
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

/*
 * One CQ for every QP's sends and the SRQ's receives, with room for all that
 * can be outstanding, or it overruns: one per SRQ receive (reposted only
 * once handled), SQ_DEPTH sends for each of --max-conns connections
 * (conns_full(), docs/design.md).  The tick loop polls it.
 */
static int cq_open(struct server *srv)
{
	int depth = (int)(srv->opt.srq_depth + srv->opt.max_conns * SQ_DEPTH);

	srv->cq = ibv_create_cq(srv->verbs, depth, NULL, NULL, 0);
	return srv->cq ? 0 : fail("ibv_create_cq", errno);
}

/* On the first client's device.  A QP may only touch memory registered in
 * its own protection domain (PD). */
static int verbs_open(struct server *srv, struct ibv_context *verbs)
{
	int err;

	srv->verbs = verbs;
	if (fcntl(verbs->async_fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(async_fd, O_NONBLOCK)", errno);
	err = windows_check(srv);
	if (err)
		return err;
	srv->pd = ibv_alloc_pd(verbs);
	if (!srv->pd)
		return fail("ibv_alloc_pd", errno);
	err = pool_register(srv);
	if (!err)
		err = srq_open(srv);
	if (!err)
		err = cq_open(srv);
	return err;
}

/* ---- connections -------------------------------------------------------- */

#define RNR_RETRY_FOREVER 7 /* 7: retry "receiver not ready" forever */

/* A reliable-connected (RC) QP on the SRQ.  rdma_accept() takes it from
 * RESET through INIT, RTR (ready to receive) to RTS (ready to send). */
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
	err = window_alloc(srv, conn);
	if (err)
		goto out_destroy_qp;
	if (rdma_accept(id, &param)) {
		err = fail("rdma_accept", errno);
		goto out_unbind;
	}
	rnr_timer_shorten(id->qp);
	conn->id = id;
	conn->qp_num = id->qp->qp_num;
	id->context = conn;
	conn->next = srv->conns;
	srv->conns = conn;
	srv->nconns++;
	return 0;

out_unbind:
	window_unbind(conn);
out_destroy_qp:
	rdma_destroy_qp(id);
out_free:
	free(conn);
	return err;
}

/* A connection is over: its QP to the error state, where it takes nothing
 * more and its sends are flushed.  It is destroyed, and its slice lent
 * again, once nothing of it can complete (conns_reap()). */
static void conn_close(struct server *srv, struct conn *conn)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	if (conn->closing)
		return;
	check("ibv_modify_qp(IBV_QPS_ERR)",
	      ibv_modify_qp(conn->id->qp, &attr, IBV_QP_STATE));
	/* a DREQ to the client, if connected (and ERR again, by librdmacm) */
	rdma_disconnect(conn->id);
	conn->closing = true;
	conn->closed_at = now_seconds();
	srv->nclosing++;
	printf("disconnect qp=0x%" PRIx32 "\n", conn->qp_num);
}

/* ---- control messages and doorbells ------------------------------------- */

/* Signaled: the completion frees its send queue entry (conn->sending). */
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
		.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED |
			      window_fence(conn),
	};
	struct ibv_send_wr *bad;
	int ret;

	if (conn->sending >= SEND_DEPTH) {
		errorf("qp=0x%" PRIx32 " sent more than %d requests without "
		       "waiting for replies: disconnecting it",
		       conn->qp_num, SEND_DEPTH);
		conn_close(srv, conn);
		return;
	}
	msg_encode(reply, wire);
	/* INLINE: copied now into the send queue entry (the WQE, the NIC's
	 * copy of the work request): wire needs no registration. */
	ret = ibv_post_send(conn->id->qp, &wr, &bad);
	if (ret) {
		fail("ibv_post_send(reply)", ret);
		conn_close(srv, conn);
		return;
	}
	conn->sending++;
}

/* A control message arrived: answer it with exactly one RESP_ALLOC. */
static void on_request(struct server *srv, struct conn *conn, const void *buf,
		       uint32_t len)
{
	uint32_t asked, rkey = srv->pool_mr ? srv->pool_mr->rkey : 0;
	int err = alloc_request(&srv->pool, buf, len, &conn->slice, &asked);
	struct ctrl_msg reply = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_RESP_ALLOC,
	};

	if (!err)
		err = window_bind(srv, conn, &rkey);
	if (!err) {
		uint8_t *slice = srv->pool_mem + conn->slice.off;

		/* the last holder's data is none of the next one's business */
		memset(slice, 0, conn->slice.len);
		reply.addr = (uintptr_t)slice;
		reply.rkey = rkey;
		reply.size = (uint32_t)conn->slice.len;
		printf("grant qp=0x%" PRIx32 " addr=0x%" PRIx64
		       " rkey=0x%" PRIx32 " size=%" PRIu32 "\n",
		       conn->qp_num, reply.addr, reply.rkey, reply.size);
	} else {
		reply.status = (uint32_t)-err;
		printf("deny qp=0x%" PRIx32 " size=%" PRIu32 " status=%s\n",
		       conn->qp_num, asked, errno_name(-err));
	}
	reply_send(srv, conn, &reply);
}

/* ---- completions -------------------------------------------------------- */

/* A reply or a window bind completed, well or not: one send fewer. */
static void send_done(struct conn *conn)
{
	if (conn)
		conn->sending--;
}

/* One completion from the shared CQ; a receive's buffer goes back to the
 * SRQ whatever it brought.  A closing connection gets no reply. */
static int on_completion(struct server *srv, const struct ibv_wc *wc)
{
	struct conn *conn = conn_find(srv, wc->qp_num);
	uint32_t index = WRID_INDEX(wc->wr_id);

	if (!conn) {
		errorf("a completion for qp=0x%" PRIx32 ", which is no "
		       "connection of ours",
		       wc->qp_num);
	} else if (wc->status != IBV_WC_SUCCESS) {
		on_failure(srv, conn, wc);
	} else if (!conn->closing) {
		switch (wc->opcode) {
		case IBV_WC_RECV:
			/* A SEND arrived: a control message, in our buffer. */
			on_request(srv, conn,
				   srv->recv_bufs + index * RECV_BUF_SIZE,
				   wc->byte_len);
			break;
		case IBV_WC_RECV_RDMA_WITH_IMM:
			/* A doorbell: its immediate value took a receive.  The
			 * NIC completes it only once this write's data, and
			 * every earlier one's on the QP, is in memory. */
			on_doorbell(srv, conn, be32toh(wc->imm_data));
			break;
		default:
			break; /* IBV_WC_SEND, IBV_WC_BIND_MW: see below */
		}
	}

	if (WRID_KIND(wc->wr_id) == WRID_RECV) {
		srv->recvs_posted--;
		return recv_post(srv, index);
	}
	send_done(conn);
	return 0;
}

#define CQ_BATCH 16 /* completions taken per ibv_poll_cq(): arbitrary */

/*
 * The heart of the server: every completion the CQ holds, until
 * ibv_poll_cq() finds none; each is a client waiting.  Every one polled is
 * handled, even after an error.  Returns how many, or the error.
 */
static int cq_drain(struct server *srv)
{
	struct ibv_wc wc[CQ_BATCH];
	int n, total = 0, err = 0;

	do {
		n = ibv_poll_cq(srv->cq, CQ_BATCH, wc);
		if (n < 0)
			return fail("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			int ret = on_completion(srv, &wc[i]);

			err = err ? err : ret;
		}
		total += n;
	} while (n > 0 && !err);
	return err ? err : total;
}

/* ---- connection manager events ------------------------------------------ */

static int on_connect_request(struct server *srv, struct rdma_cm_id *id)
{
	int err;

	if (!srv->verbs) {
		err = verbs_open(srv, id->verbs);
		if (err) {
			conn_reject(id, "server-setup-failed");
			return err;
		}
	}
	if (id->verbs != srv->verbs) {
		conn_reject(id, "other-device");
		return 0;
	}
	if (conns_full(srv)) {
		conn_reject(id, "server-full");
		return 0;
	}
	if (conn_create(srv, id))
		conn_reject(id, "connection-setup-failed");
	return 0;
}

/* One CM event: 1 if handled, 0 if none, or a negative errno.  Acked as
 * soon as read: rdma_destroy_id() waits for the ack of its every event. */
static int cm_handle(struct server *srv)
{
	struct rdma_cm_event *event;
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	struct conn *conn;

	if (rdma_get_cm_event(srv->events, &event))
		return errno == EAGAIN ? 0 : fail("rdma_get_cm_event", errno);
	type = event->event;
	id = event->id;
	rdma_ack_cm_event(event);
	conn = id->context;

	switch (type) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		int err = on_connect_request(srv, id);

		return err ? err : 1;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (!conn->closing)
			printf("connect qp=0x%" PRIx32 "\n", conn->qp_num);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		/* First what the CQ holds for it: its last doorbells. */
		cq_drain(srv);
		if (conn)
			conn_close(srv, conn);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		errorf("the RDMA device went away");
		return -ENODEV;
	default:
		break; /* e.g. TIMEWAIT_EXIT: nothing left to do */
	}
	return 1;
}

/* ---- the tick loop ------------------------------------------------------ */

#define TICK_NS 1000000 /* sleep 1 ms when a tick found nothing to do */

/* Each tick asks for news and empties the CQ; an idle tick sleeps, so
 * that an idle server does not spin a core. */
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
			conns_reap(srv);
		}
		signo = signal_take(srv);
		if (!busy && !signo)
			nanosleep(&tick, NULL);
	}
	srv->stopped_by = signo;
	return 0;
}

/* ---- the end ------------------------------------------------------------ */

/* Undo verbs_open() in reverse, once no QP is left. */
static void verbs_close(struct server *srv)
{
	if (srv->cq)
		check("ibv_destroy_cq", ibv_destroy_cq(srv->cq));
	if (srv->srq)
		check("ibv_destroy_srq", ibv_destroy_srq(srv->srq));
	if (srv->recv_mr)
		check("ibv_dereg_mr(receive buffers)",
		      ibv_dereg_mr(srv->recv_mr));
	free(srv->recv_bufs);
	if (srv->pool_mr)
		check("ibv_dereg_mr(pool)", ibv_dereg_mr(srv->pool_mr));
	free(srv->pool_mem);
	if (srv->pd)
		check("ibv_dealloc_pd", ibv_dealloc_pd(srv->pd));
}

/* In reverse order of setup; after a signal, a last count. */
static void server_close(struct server *srv)
{
	conns_close_all(srv);
	if (srv->stopped_by)
		shutdown_print(srv);
	verbs_close(srv);
	if (srv->listener)
		rdma_destroy_id(srv->listener);
	if (srv->events)
		rdma_destroy_event_channel(srv->events);
	if (srv->sigfd >= 0)
		close(srv->sigfd);
	pool_destroy(&srv->pool);
}

int main(int argc, char **argv)
{
	struct server srv = { .sigfd = -1 };
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse_options(argc, argv, &srv.opt))
		return EXIT_FAILURE;
	if (srv.opt.help) {
		usage(stdout);
		return EXIT_SUCCESS;
	}

	err = devices_check();
	if (!err) {
		err = pool_init(&srv.pool, srv.opt.pool_size);
		if (err)
			fail("pool_init", -err);
	}
	if (!err)
		err = signals_open(&srv);
	if (!err)
		err = listen_open(&srv);
	if (!err)
		err = serve(&srv);
	server_close(&srv);
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

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s [options]\n"
		"  -p, --port PORT        port to listen on (default %d)\n"
		"      --pool-size BYTES  size of the pool, a multiple of %d\n"
		"                         (default %u)\n"
		"      --srq-depth N      receives kept posted (default %d)\n"
		"      --max-conns N      clients at once (default %d)\n"
		"      --isolation MODE   none: every client gets the pool's\n"
		"                         rkey (default); mw: a memory window\n"
		"                         over its own slice only\n"
		"  -h, --help             show this text\n",
		program_invocation_short_name, DEFAULT_PORT, POOL_CHUNK_SIZE,
		DEFAULT_POOL_SIZE, DEFAULT_SRQ_DEPTH, DEFAULT_MAX_CONNS);
}

/* Fills opt from the arguments, or says what is wrong and fails. */
static int parse_options(int argc, char **argv, struct options *opt)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "pool-size", required_argument, NULL, 'P' },
		{ "srq-depth", required_argument, NULL, 'S' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "isolation", required_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, size = DEFAULT_POOL_SIZE;
	uint64_t srq_depth = DEFAULT_SRQ_DEPTH, max_conns = DEFAULT_MAX_CONNS;
	int c, err = 0;

	while (!err &&
	       (c = getopt_long(argc, argv, "p:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			err = parse_number("port", optarg, 1, UINT16_MAX,
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
		case 'h':
			opt->help = true;
			return 0;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!err && optind < argc) {
		errorf("unexpected argument '%s'", argv[optind]);
		err = -EINVAL;
	}
	opt->port = (uint16_t)port;
	opt->pool_size = (uint32_t)size;
	opt->srq_depth = (uint32_t)srq_depth;
	opt->max_conns = (uint32_t)max_conns;
	return err;
}

/* ---- signals and statistics --------------------------------------------- */

/*
 * Signals arrive as readable data on a file descriptor instead of
 * interrupting the program: the loop checks it like any other source of
 * work, and no global flag is needed.  SIGINT and SIGTERM stop the server,
 * SIGUSR1 asks for its counters.
 */
static int signals_open(struct server *srv)
{
	sigset_t mask;

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
static void stats_print(const struct server *srv, const char *what)
{
	printf("%s connections=%u chunks_in_use=%zu doorbells=%" PRIu64
	       " closing=%u recvs_posted=%" PRIu32 "/%" PRIu32 "\n",
	       what, srv->nconns - srv->nclosing, srv->pool.used,
	       srv->doorbells, srv->nclosing, srv->recvs_posted,
	       srv->srq ? srv->opt.srq_depth : 0);
}

/*
 * Take a pending signal, if any.  SIGUSR1 prints the counters; SIGINT and
 * SIGTERM return their number, which ends the loop.  0: go on.
 */
static int signal_take(struct server *srv)
{
	struct signalfd_siginfo info;

	if (read(srv->sigfd, &info, sizeof(info)) != sizeof(info))
		return 0;
	if (info.ssi_signo == SIGUSR1) {
		stats_print(srv, "stats");
		return 0;
	}
	return (int)info.ssi_signo;
}

/* The last line: which signal, and what came back. */
static void shutdown_print(const struct server *srv)
{
	char what[48];

	snprintf(what, sizeof(what), "shutdown signal=SIG%s",
		 sigabbrev_np(srv->stopped_by));
	stats_print(srv, what);
}

/* ---- asynchronous events ----------------------------------------------- */

/*
 * The device reports trouble that belongs to no work request as an
 * asynchronous event: a QP that broke, a CQ that overran, an SRQ running
 * low.  Each is named on a line and acknowledged (ibv_destroy_qp() and
 * friends wait until their events have been).  Returns 1 if one was
 * handled, 0 if there was none, or a negative errno if the server must stop.
 */
static int async_handle(struct server *srv)
{
	struct ibv_async_event event;
	const char *name;
	struct conn *conn;
	int ret = 1;

	if (ibv_get_async_event(srv->verbs, &event))
		return errno == EAGAIN ? 0 : fail("ibv_get_async_event", errno);
	name = async_event_name(event.event_type);

	switch (event.event_type) {
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		/* A QP on the SRQ is in the error state and will take no more
		 * receives from it: see conn_close(). */
		conn = conn_find(srv, event.element.qp->qp_num);
		if (conn)
			conn->last_wqe = true;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		printf("async event=%s qp=0x%" PRIx32 "\n", name,
		       event.element.qp->qp_num);
		conn = conn_find(srv, event.element.qp->qp_num);
		if (conn)
			conn_close(srv, conn);
		break;
	case IBV_EVENT_CQ_ERR:
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		printf("async event=%s\n", name);
		errorf("%s: completions can no longer be trusted: stopping",
		       name);
		ret = -EIO;
		break;
	default:
		printf("async event=%s\n", name);
		break;
	}
	ibv_ack_async_event(&event);
	return ret;
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

	if (!attr.srq_limit)
		return 0;
	return check("ibv_modify_srq(srq_limit)",
		     ibv_modify_srq(srv->srq, &attr, IBV_SRQ_LIMIT));
}

/* ---- the doorbell's slot ------------------------------------------------ */

/*
 * A doorbell: the client wrote value seq into slot (seq - 1) % slots, and
 * the NIC completed the receive its immediate value took only once that
 * write's data, and every earlier one's on the QP, was in memory.  So the
 * slot holds seq, or, if the client has since gone a whole lap round its
 * slice, seq plus a multiple of slots (slot_check()).
 */
static void on_doorbell(struct server *srv, struct conn *conn, uint32_t seq)
{
	uint32_t slots = conn->slice.len / sizeof(uint32_t), value;
	enum slot_verdict verdict;
	uint8_t *slot;

	if (!slots) {
		errorf("doorbell qp=0x%" PRIx32 " seq=%" PRIu32
		       " but it holds no slice",
		       conn->qp_num, seq);
		return;
	}
	slot = srv->pool_mem + conn->slice.off + (size_t)(seq - 1) % slots * 4;
	memcpy(&value, slot, sizeof(value));
	value = be32toh(value);
	verdict = slot_check(seq, value, slots);
	srv->doorbells++;
	printf("doorbell qp=0x%" PRIx32 " seq=%" PRIu32 " value=%" PRIu32
	       " %s\n",
	       conn->qp_num, seq, value, slot_verdict_name(verdict));
	if (verdict == SLOT_MISMATCH)
		errorf("MISMATCH qp=0x%" PRIx32 ": doorbell %" PRIu32
		       " found %" PRIu32 " in its slot",
		       conn->qp_num, seq, value);
}

/* ---- connection troubles ------------------------------------------------ */

/* 0.0.0.0 is always there: whatever else, the port is taken. */
static int listen_fail(struct server *srv, int err)
{
	if (err != EADDRINUSE && err != EADDRNOTAVAIL)
		return fail("rdma_bind_addr", err);
	errorf("port %u is already in use (rdma_bind_addr: %s)", srv->opt.port,
	       strerror(err));
	return -err;
}

/* how long a client waits after "receiver not ready": code 12 = 0.64 ms */
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

	check("ibv_modify_qp(min_rnr_timer)",
	      ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER));
}

/* Refuse a connect request; the reason goes to the client as private data. */
static void conn_reject(struct rdma_cm_id *id, const char *reason)
{
	printf("reject reason=%s\n", reason);
	if (rdma_reject(id, reason, (uint8_t)(strlen(reason) + 1)))
		fail("rdma_reject", errno);
	rdma_destroy_id(id);
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

/* At the limit, drain first: a flushed send may have freed a place. */
static bool conns_full(struct server *srv)
{
	if (conns_sending(srv) < srv->opt.max_conns)
		return false;
	cq_drain(srv);
	return conns_sending(srv) >= srv->opt.max_conns;
}

static struct conn *conn_find(struct server *srv, uint32_t qp_num)
{
	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		if (conn->qp_num == qp_num)
			return conn;
	return NULL;
}

/*
 * A work request failed, and its QP is now in the error state: end the
 * connection.  Only wr_id, status and qp_num are set (not opcode).  A
 * flush (IBV_WC_WR_FLUSH_ERR) is only the echo of an error state reported
 * before, or of a close.
 */
static void on_failure(struct server *srv, struct conn *conn,
		       const struct ibv_wc *wc)
{
	const char *what = "reply";

	if (WRID_KIND(wc->wr_id) == WRID_RECV)
		what = "receive";
	else if (WRID_KIND(wc->wr_id) == WRID_BIND)
		what = "window bind";
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		errorf("%s qp=0x%" PRIx32 " failed: %s", what, wc->qp_num,
		       wc_status_name(wc->status));
	conn_close(srv, conn);
}

/* ---- destroying a closed QP, by the book -------------------------------- */

/* How long a closing QP waits for LAST_WQE_REACHED: see conn_quiet(). */
#define CLOSE_TIMEOUT_MS 2000
/* A send still outstanding after this never completes: conn_quiet(). */
#define CLOSE_GIVE_UP_MS 10000

/*
 * Nothing of a closing QP can complete: every send has (they are flushed),
 * and the device has raised IBV_EVENT_QP_LAST_WQE_REACHED, its word that
 * the QP takes no more receives from the SRQ.  Where it never comes (rxe
 * before Linux 6.5, siw), CLOSE_TIMEOUT_MS stand in for it, and the destroy
 * line says that a timer, not the device, ended the wait.
 */
static bool conn_quiet(const struct conn *conn, double now)
{
	double ms = (now - conn->closed_at) * 1000;

	if (!conn->closing)
		return false;
	if (conn->sending)
		return ms >= CLOSE_GIVE_UP_MS;
	return conn->last_wqe || ms >= CLOSE_TIMEOUT_MS;
}

/*
 * Give back what a quiet connection held (its window, then its slice: a
 * write the NIC was placing into it when the QP stopped has landed by
 * now), then destroy its QP and id.
 */
static void conn_destroy(struct server *srv, struct conn *conn, double now)
{
	if (conn->sending)
		errorf("qp=0x%" PRIx32 ": %u sends still outstanding after "
		       "%d ms: destroying it anyway",
		       conn->qp_num, conn->sending, CLOSE_GIVE_UP_MS);
	window_unbind(conn);
	if (conn->slice.len)
		pool_free(&srv->pool, conn->slice.off, conn->slice.len);
	printf("destroy qp=0x%" PRIx32 " after_ms=%.0f ended_by=%s "
	       "freed=%zu\n",
	       conn->qp_num, (now - conn->closed_at) * 1000,
	       conn->last_wqe ? "last_wqe" : "timer", conn->slice.len);
	srv->nconns--;
	srv->nclosing--;
	rdma_destroy_qp(conn->id);
	rdma_destroy_id(conn->id);
	free(conn);
}

/*
 * Destroy the closing QPs that are quiet, in the order the verbs ask for a
 * QP on an SRQ: error state, LAST_WQE_REACHED, drain the CQ (so that the
 * QP's last completions are handled while its connection is there), then
 * destroy.  Sooner, its completions are lost (mlx5 deletes them: a receive
 * never reposted, a reply buffer never back) or come later under a QP
 * number already reused (rxe).
 */
static void conns_reap(struct server *srv)
{
	struct conn **link = &srv->conns, *conn;
	double now = now_seconds();
	bool any = false;

	for (conn = srv->conns; conn; conn = conn->next)
		any = any || conn_quiet(conn, now);
	if (!any)
		return;
	cq_drain(srv);
	while ((conn = *link)) {
		if (conn_quiet(conn, now)) {
			*link = conn->next;
			conn_destroy(srv, conn, now);
		} else {
			link = &conn->next;
		}
	}
}

/*
 * At the end: close every connection, then take events and completions
 * until each QP is quiet and destroyed (CLOSE_TIMEOUT_MS at most, unless
 * sends are still outstanding).
 */
static void conns_close_all(struct server *srv)
{
	const struct timespec pause = { .tv_nsec = 1000000 };

	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		conn_close(srv, conn);
	while (srv->conns) {
		while (async_handle(srv) > 0)
			;
		cq_drain(srv);
		conns_reap(srv);
		nanosleep(&pause, NULL);
	}
}

/* ---- isolation: a memory window per slice (--isolation mw) --------------- */

/*
 * The pool's rkey opens all of the pool to whoever holds it; with
 * --isolation mw, the pool has no rkey at all (pool_register()), and the
 * client gets the rkey of a type 2 memory window over its slice alone.  A
 * type 2 window is bound by a work request on the client's own QP and
 * works only through that QP.  Without the option, each of these functions
 * does nothing.
 */

/* --isolation mw needs type 2 memory windows: not every device has them. */
static int windows_check(struct server *srv)
{
	struct ibv_device_attr attr;
	int ret;

	if (!srv->opt.isolation)
		return 0;
	ret = ibv_query_device(srv->verbs, &attr);
	if (ret)
		return fail("ibv_query_device", ret);
	if (!(attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
				       IBV_DEVICE_MEM_WINDOW_TYPE_2B))) {
		errorf("--isolation mw: %s has no type 2 memory windows",
		       ibv_get_device_name(srv->verbs->device));
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The connection's window, not bound yet: a key to nothing. */
static int window_alloc(struct server *srv, struct conn *conn)
{
	if (!srv->opt.isolation)
		return 0;
	conn->window = ibv_alloc_mw(srv->pd, IBV_MW_TYPE_2);
	return conn->window ? 0 : fail("ibv_alloc_mw", errno);
}

/*
 * Bind the window over the slice just granted, and hand out its rkey in
 * *rkey.  ibv_inc_rkey() gives the key a fresh low byte, so no earlier key
 * of this window can match.  The bind goes on the send queue before the
 * reply, and the reply is fenced (window_fence()): the window is bound
 * before the client can know its key.  The bind is signaled like every
 * send, so that conn->sending counts all that can still complete; its
 * send-queue entry is the one SQ_DEPTH keeps for it.
 *
 * The window sits on a region registered for this slice alone: the only
 * pin of these pages, since the pool has no region of its own under
 * isolation.  By the verbs, every access through a window is checked
 * against the window's bounds; Soft-RoCE (rxe, Linux 6.1 and 6.12) checks
 * only the bounds of the region underneath, so over one region for the
 * whole pool a client could still write into its neighbour's slice.  With
 * a region per slice, the two checks are the same one.  The region itself
 * allows no remote access: MW_BIND lets windows be bound over it, and
 * LOCAL_WRITE is required for a window that allows REMOTE_WRITE.  If the
 * window cannot be bound, the slice goes back to the pool and the client
 * is denied (ENOMEM when the region cannot be pinned: mr_fail() says
 * whether the locked-memory limit is why).
 */
static int window_bind(struct server *srv, struct conn *conn, uint32_t *rkey)
{
	uint8_t *slice = srv->pool_mem + conn->slice.off;
	struct ibv_send_wr wr = {
		.wr_id = WRID_BIND,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_mw.mw = conn->window,
		.bind_mw.bind_info.addr = (uintptr_t)slice,
		.bind_mw.bind_info.length = conn->slice.len,
		.bind_mw.bind_info.mw_access_flags =
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	struct ibv_send_wr *bad;
	int err;

	if (!conn->window)
		return 0;
	conn->slice_mr =
		ibv_reg_mr(srv->pd, slice, conn->slice.len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	if (!conn->slice_mr) {
		err = mr_fail("ibv_reg_mr(slice)", errno);
		goto out_free_slice;
	}
	wr.bind_mw.rkey = ibv_inc_rkey(conn->window->rkey);
	wr.bind_mw.bind_info.mr = conn->slice_mr;
	err = ibv_post_send(conn->id->qp, &wr, &bad);
	if (err) {
		err = fail("ibv_post_send(bind window)", err);
		goto out_dereg;
	}
	conn->sending++;
	*rkey = wr.bind_mw.rkey;
	return 0;

out_dereg:
	check("ibv_dereg_mr(slice)", ibv_dereg_mr(conn->slice_mr));
	conn->slice_mr = NULL;
out_free_slice:
	pool_free(&srv->pool, conn->slice.off, conn->slice.len);
	conn->slice = (struct slice){ 0 };
	return err;
}

/*
 * A reply may publish the key of a window bound just before it, so the
 * bind must be done before the reply goes out.  A send after a bind on the
 * same QP is ordered (ibv_bind_mw(3)), rxe runs them in order and mlx5
 * fences the work request after a bind by itself; IBV_SEND_FENCE asks for
 * it in the work request, whatever the device.  It costs nothing here: the
 * server has no RDMA READ or atomic outstanding for a fence to wait on.
 */
static unsigned int window_fence(const struct conn *conn)
{
	return conn->window ? IBV_SEND_FENCE : 0;
}

/*
 * The client is gone and its QP quiet: invalidate its key (deallocating
 * the window does that) before its slice goes back to the pool, then drop
 * the region the window sat on.
 */
static void window_unbind(struct conn *conn)
{
	if (conn->window)
		check("ibv_dealloc_mw", ibv_dealloc_mw(conn->window));
	conn->window = NULL;
	if (conn->slice_mr)
		check("ibv_dereg_mr(slice)", ibv_dereg_mr(conn->slice_mr));
	conn->slice_mr = NULL;
}
