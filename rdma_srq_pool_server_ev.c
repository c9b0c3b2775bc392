/*
 * rdma_srq_pool_server_ev.c - lends slices of a registered memory pool to
 * RDMA clients and checks the doorbells they ring: the event-driven twin
 * of rdma_pool_server.c (read that first).  One thread sleeps in poll()
 * until the connection manager (CM), or a device's completion queue (CQ)
 * or its own events, have news.  The core path, in the order it runs:
 *
 *   main          listen_open; serve, which sleeps in poll() (poll_timeout);
 *                 at the end, conns_end
 *   cm_handle     a connect request (the first through a device opens it:
 *                 verbs_open, replies_open; each gets a QP: conn_create),
 *                 or a client or its device gone (conn_close)
 *   async_handle  a device's events: a QP that broke (conn_close),
 *                 LAST_WQE_REACHED, COMM_EST
 *   cq_event      the CQ's event: get, ack, drain, re-arm (or not yet), drain
 *   cq_drain      each completion: on_request and reply_send (a registered
 *                 buffer, freed by reply_buffer_put), on_doorbell, or a
 *                 failure (conn_close)
 *   conns_walk    each connection, once a turn: at a deadline, a close or
 *                 a keepalive probe; once closed and conn_quiet,
 *                 conn_destroy (a device's last client: verbs_close)
 * common/ (server.h lists it) holds what both servers do alike beyond this
 * lesson, and closes no connection: every close is in this file.  The twin
 * rdma_pool_server.c polls on a tick.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/server.h"

/* The core path, in the order it runs (main first). */
static int listen_open(struct server *srv);
static int serve(struct server *srv);
static int poll_timeout(struct server *srv, double due);
static void stats_print(struct server *srv, int signo);
static int cm_handle(struct server *srv);
static void on_connect_request(struct server *srv, struct rdma_cm_id *id);
static int verbs_open(struct server *srv, struct device *dev,
		      struct ibv_context *verbs);
static int pool_register(struct server *srv, struct device *dev);
static int srq_open(struct server *srv, struct device *dev);
static int recv_post(struct device *dev, uint32_t index);
static int cq_open(struct server *srv, struct device *dev);
static int replies_open(struct server *srv, struct device *dev);
static int conn_create(struct server *srv, struct device *dev,
		       struct rdma_cm_id *id);
static void conn_close(struct server *srv, struct conn *conn,
		       const char *reason);
static int async_handle(struct server *srv, struct device *dev);
static int cq_event(struct server *srv, struct device *dev, bool woken);
static int cq_drain(struct server *srv, struct device *dev);
static int on_completion(struct server *srv, struct device *dev,
			 const struct ibv_wc *wc);
static struct conn *conn_find(struct server *srv, struct device *dev,
			      uint32_t qp_num);
static void on_request(struct server *srv, struct conn *conn, const void *buf,
		       uint32_t len);
static void reply_send(struct server *srv, struct conn *conn,
		       const struct ctrl_msg *reply);
static void reply_buffer_put(struct conn *conn, uint64_t wr_id);
static void on_doorbell(struct server *srv, struct conn *conn, uint32_t seq);
static int conns_walk(struct server *srv, double *next);
static int conn_destroy(struct server *srv, struct conn *conn, double now);
static int conns_end(struct server *srv);
static int verbs_close(struct server *srv, struct device *dev);

/* The setup, the loop, and a goto ladder undoing the setup (common.h). */
int main(int argc, char **argv)
{
	struct server srv = { .sigfd = -1 };
	int err;

	err = parse_options(argc, argv, true, &srv.opt); /* --rearm-after-us */
	if (err || srv.opt.help)
		goto out;
	err = devices_fit(&srv);
	if (err)
		goto out;
	err = reports_open(&srv);
	if (err)
		goto out;
	err = listen_open(&srv);
	if (err)
		goto out_destroy_listener;
	err = serve(&srv);
	err = undo(err, NULL, conns_end(&srv)); /* and each device's */
out_destroy_listener:
	if (srv.listener && rdma_destroy_id(srv.listener))
		err = undo(err, "rdma_destroy_id(listener)", errno);
	if (srv.events)
		rdma_destroy_event_channel(srv.events);
	if (srv.sigfd >= 0)
		close(srv.sigfd);
out:
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define LISTEN_BACKLOG 16 /* connect requests queued until accepted */

/* The CM speaks IP addresses and ports, like sockets, and tells of each
 * connection on a channel: a descriptor poll() waits on, non-blocking. */
static int listen_open(struct server *srv)
{
	int err;

	srv->events = rdma_create_event_channel();
	if (!srv->events)
		return fail("rdma_create_event_channel", errno);
	if (fcntl(srv->events->fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(O_NONBLOCK)", errno);
	if (rdma_create_id(srv->events, &srv->listener, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id", errno);
	err = listener_bind(srv); /* -a ADDR, or every address */
	if (err)
		return err;
	/* Port 0 asks the CM for any free port, as bind(2) does for a
	 * socket; the listen line tells clients which one it chose. */
	srv->opt.port = ntohs(rdma_get_src_port(srv->listener));
	if (rdma_listen(srv->listener, LISTEN_BACKLOG))
		return fail("rdma_listen", errno);
	say(&srv->out, "listen port=%u address=%s pool_size=%" PRIu32 "\n",
	    srv->opt.port, srv->opt.address, srv->opt.pool_size);
	return 0;
}

/* Sleep in poll() till a CM event or a signal, a device's CQ or async event
 * (two fds each, polled from the turn after it opens), or the next deadline
 * or look (poll_timeout()); until SIGINT, SIGTERM or EPIPE. */
static int serve(struct server *srv)
{
	enum { CM, SIG, DEVICES }; /* then each device's CQ and ASYNC */
	enum { CQ, ASYNC };
	struct pollfd fds[DEVICES + 2 * MAX_DEVICES] = {
		[CM] = { .fd = srv->events->fd, .events = POLLIN },
		[SIG] = { .fd = srv->sigfd, .events = POLLIN },
	};
	int signo = 0, err;
	double due = INFINITY;

	while (signo != SIGINT && signo != SIGTERM && !srv->out.closed) {
		unsigned int n = srv->ndevices; /* cm_handle() may add one */

		for (unsigned int i = 0; i < n; i++) {
			struct pollfd *f = &fds[DEVICES + 2 * i];

			f[CQ].fd = srv->devices[i].comp->fd;
			f[ASYNC].fd = srv->devices[i].verbs->async_fd;
			f[CQ].events = f[ASYNC].events = POLLIN;
		}
		if (poll(fds, DEVICES + 2 * n, poll_timeout(srv, due)) < 0) {
			if (errno == EINTR)
				continue;
			return fail("poll", errno);
		}
		err = fds[CM].revents ? cm_handle(srv) : 0;
		for (unsigned int i = 0; i < n && err >= 0; i++) {
			struct device *dev = &srv->devices[i];
			struct pollfd *f = &fds[DEVICES + 2 * i];

			if (f[ASYNC].revents)
				err = async_handle(srv, dev);
			if (err >= 0 &&
			    (f[CQ].revents || dev->unarmed || dev->cq_more))
				err = cq_event(srv, dev, f[CQ].revents);
		}
		if (err >= 0)
			err = conns_walk(srv, &due);
		if (err < 0)
			return err;
		devices_look(srv, &due);
		signo = fds[SIG].revents ? signal_take(srv) : 0;
		if (signo == SIGUSR1)
			stats_print(srv, signo);
	}
	if (srv->out.closed) {
		errorf("stdout's reader is gone (EPIPE): stopping");
		return -EPIPE;
	}
	srv->stopped_by = signo;
	return 0;
}

#define LOOK_MS 1   /* how often to look at a CQ left unarmed */
#define REAP_MS 100 /* how often to look at closing connections */

/* How long poll() may sleep, in ms: 0 while a CQ may have more; at most LOOK_MS
 * while one is unarmed, REAP_MS while QPs close; else till due (-1: none). */
static int poll_timeout(struct server *srv, double due)
{
	double ms = (due - now_seconds()) * 1e3;

	for (unsigned int i = 0; i < srv->ndevices; i++)
		if (srv->devices[i].cq_more || srv->devices[i].look_again)
			return 0;
	for (unsigned int i = 0; i < srv->ndevices; i++)
		if (srv->devices[i].unarmed && ms > LOOK_MS)
			return LOOK_MS;
	if (srv->nclosing && ms > REAP_MS)
		return REAP_MS;
	if (isinf(ms))
		return -1;
	return ms > 0 ? (int)ms + 1 : 0;
}

/* What is in use, after SIGUSR1 or at the end after signo: a line for each
 * device in use, then the totals; each with its reply buffers free. */
static void stats_print(struct server *srv, int signo)
{
	uint32_t each = srv->opt.max_conns * SEND_DEPTH, free_all = 0;
	char tail[64];

	for (unsigned int i = 0; i < srv->ndevices; i++) {
		free_all += srv->devices[i].nsend_free;
		snprintf(tail, sizeof(tail),
			 " replies_free=%" PRIu32 "/%" PRIu32,
			 srv->devices[i].nsend_free, each);
		stats_line(srv, signo, &srv->devices[i], tail);
	}
	snprintf(tail, sizeof(tail), " replies_free=%" PRIu32 "/%" PRIu32,
		 free_all, each * srv->ndevices);
	stats_line(srv, signo, NULL, tail);
}

/* One CM event (1; 0 if none), acked at once: rdma_destroy_id() waits for
 * the ack of its every event. */
static int cm_handle(struct server *srv)
{
	struct rdma_cm_event *event;
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	struct conn *conn;
	const char *reason = NULL; /* NULL: the peer's own doing */
	int err = 0;

	if (rdma_get_cm_event(srv->events, &event))
		return errno == EAGAIN ? 0 : fail("rdma_get_cm_event", errno);
	type = event->event;
	id = event->id;
	rdma_ack_cm_event(event);
	conn = id->context;

	switch (type) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: /* the client's CM REQ */
		on_connect_request(srv, id);
		break;
	case RDMA_CM_EVENT_ESTABLISHED: /* its RTU, or our COMM_EST notify */
		conn->established = true;
		if (!conn->closing) /* a QP number is its device's own */
			say(&srv->out, "connect qp=0x%" PRIx32 " device=%s\n",
			    conn->qp_num,
			    ibv_get_device_name(id->verbs->device));
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL: /* rdma link delete: its ids' */
		if (!conn) /* the listener's, bound by -a to that device */
			return fail("the device -a listens on", ENODEV);
		reason = "device_removed";
		/* fall through */
	case RDMA_CM_EVENT_DISCONNECTED: /* its DREQ, or ours answered or not */
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE: /* our REP never got its RTU */
	case RDMA_CM_EVENT_REJECTED:
		if (conn) {
			err = cq_drain(srv, conn->dev); /* its last doorbells */
			conn_close(srv, conn, reason);
		}
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE...: nothing to do */
		break;
	}
	return err < 0 ? err : 1;
}

/* A client: accepted, or refused with a reason it is told.  The CM chose
 * the device that carries its address (id->verbs); the first client
 * through a device opens what that device needs, or is refused and the
 * device left closed (fail() said why), the others served as before. */
static void on_connect_request(struct server *srv, struct rdma_cm_id *id)
{
	const char *refusal = conn_refusal(srv, id);
	struct device *dev = device_find(srv, id->verbs);

	if (!refusal && !dev) {
		dev = &srv->devices[srv->ndevices++];
		if (verbs_open(srv, dev, id->verbs))
			refusal = "server-setup-failed";
	}
	if (!refusal && conn_create(srv, dev, id))
		refusal = "connection-setup-failed";
	if (dev && !dev->nconns) /* its first client, refused */
		verbs_close(srv, dev);
	if (refusal)
		conn_reject(srv, id, refusal);
}

/* What one device needs, on the first connect request through it (we
 * learn the device then).  A QP may only use memory registered in its own
 * protection domain (PD), and a PD belongs to one device. */
static int verbs_open(struct server *srv, struct device *dev,
		      struct ibv_context *verbs)
{
	int err;

	dev->verbs = verbs;
	if (fcntl(verbs->async_fd, F_SETFL, O_NONBLOCK))
		return fail("fcntl(async_fd, O_NONBLOCK)", errno);
	dev->pd = ibv_alloc_pd(verbs);
	if (!dev->pd)
		return fail("ibv_alloc_pd", errno);
	err = pool_register(srv, dev);
	if (err)
		return err;
	err = srq_open(srv, dev);
	if (err)
		return err;
	err = cq_open(srv, dev);
	if (err)
		return err;
	return replies_open(srv, dev);
}

/* Registering pins the pool and gives the NIC its translation; the rkey
 * lets RDMA WRITEs in (REMOTE_WRITE needs LOCAL_WRITE), nothing else. */
static int pool_register(struct server *srv, struct device *dev)
{
	size_t size = srv->opt.pool_size;
	int err = pool_init(&dev->pool, size); /* its chunks' bitmap */

	if (err)
		return err;
	dev->pool_mem = aligned_alloc(POOL_CHUNK_SIZE, size);
	if (!dev->pool_mem)
		return fail("aligned_alloc(pool)", ENOMEM);
	memset(dev->pool_mem, 0, size);
	if (srv->opt.isolation != ISOLATION_NONE)
		return pool_keyless(srv, dev); /* no key to all of the pool */
	dev->pool_mr =
		ibv_reg_mr(dev->pd, dev->pool_mem, size,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!dev->pool_mr)
		return fail("ibv_reg_mr(pool)", errno);
	say(&srv->out,
	    "pool device=%s addr=0x%" PRIxPTR " size=%zu rkey=0x%" PRIx32 "\n",
	    ibv_get_device_name(dev->verbs->device), (uintptr_t)dev->pool_mem,
	    size, dev->pool_mr->rkey);
	return 0;
}

/* A few bytes too many still get an EBADMSG reply. */
#define RECV_BUF_SIZE (2 * CTRL_MSG_SIZE)

/* Receive buffers for all the device's QPs.  Empty, the NIC answers "receiver
 * not ready" (RNR) and the client's NIC retries: slower, nothing lost. */
static int srq_open(struct server *srv, struct device *dev)
{
	uint32_t depth = srv->opt.srq_depth;
	struct ibv_srq_init_attr attr = {
		.attr.max_wr = depth,
		.attr.max_sge = 1,
	};

	dev->recv_bufs = calloc(depth, RECV_BUF_SIZE);
	if (!dev->recv_bufs)
		return fail("calloc(receive buffers)", ENOMEM);
	dev->recv_mr =
		ibv_reg_mr(dev->pd, dev->recv_bufs, depth * RECV_BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!dev->recv_mr)
		return fail("ibv_reg_mr(receive buffers)", errno);
	dev->srq = ibv_create_srq(dev->pd, &attr);
	if (!dev->srq)
		return fail("ibv_create_srq", errno);
	for (uint32_t i = 0; i < depth; i++) {
		int err = recv_post(dev, i);

		if (err)
			return err;
	}
	return srq_limit_arm(srv, dev);
}

/* Offer receive buffer index to whichever client needs one next. */
static int recv_post(struct device *dev, uint32_t index)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(dev->recv_bufs + index * RECV_BUF_SIZE),
		.length = RECV_BUF_SIZE,
		.lkey = dev->recv_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV | index,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	int ret = ibv_post_srq_recv(dev->srq, &wr, &bad);

	if (ret)
		return fail("ibv_post_srq_recv", ret);
	dev->recvs_posted++;
	return 0;
}

/* One CQ for all the device's sends and receives, with room for all that
 * can be outstanding: one per SRQ receive, SQ_DEPTH for each of
 * --max-conns, who may all come through this device (conn_refusal()). */
static int cq_open(struct server *srv, struct device *dev)
{
	int depth = (int)(srv->opt.srq_depth + srv->opt.max_conns * SQ_DEPTH);
	int ret;

	/* Its fd turns readable when a completion reaches the CQ armed. */
	dev->comp = ibv_create_comp_channel(dev->verbs);
	if (!dev->comp)
		return fail("ibv_create_comp_channel", errno);
	dev->cq = ibv_create_cq(dev->verbs, depth, NULL, dev->comp, 0);
	if (!dev->cq)
		return fail("ibv_create_cq", errno);
	ret = ibv_req_notify_cq(dev->cq, 0);
	return ret ? fail("ibv_req_notify_cq", ret) : 0;
}

/* Replies from registered buffers (inline, the polling server's, suits
 * only small messages), on a stack of free ones, each taken till its send
 * completes (the device may read it until then): SEND_DEPTH (reply_room())
 * for each of the --max-conns that can still send (conn_refusal()). */
static int replies_open(struct server *srv, struct device *dev)
{
	uint32_t count = srv->opt.max_conns * SEND_DEPTH;

	dev->send_bufs = calloc(count, CTRL_MSG_SIZE);
	dev->send_free = calloc(count, sizeof(*dev->send_free));
	dev->send_owner = calloc(count, sizeof(*dev->send_owner));
	if (!dev->send_bufs || !dev->send_free || !dev->send_owner)
		return fail("calloc(reply buffers)", ENOMEM);
	dev->send_mr =
		ibv_reg_mr(dev->pd, dev->send_bufs, count * CTRL_MSG_SIZE, 0);
	if (!dev->send_mr)
		return fail("ibv_reg_mr(reply buffers)", errno);
	for (uint32_t i = 0; i < count; i++)
		dev->send_free[dev->nsend_free++] = i;
	return 0;
}

#define RNR_RETRY_FOREVER 7 /* 7: retry "receiver not ready" forever */

/* A reliable-connected (RC) QP on the SRQ: rdma_create_qp() moves it from
 * RESET to INIT, rdma_accept() to RTR and RTS and sends the reply (CM REP);
 * the client's RTU makes it ESTABLISHED.  responder_resources: READs served
 * at once; the protocol sends none, and one sent anyway is refused. */
static int conn_create(struct server *srv, struct device *dev,
		       struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = dev->cq,
		.recv_cq = dev->cq,
		.srq = dev->srq,
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
	if (rdma_create_qp(id, dev->pd, &attr)) {
		err = fail("rdma_create_qp", errno);
		goto out_free;
	}
	if (rdma_accept(id, &param)) {
		err = fail("rdma_accept", errno);
		goto out_destroy_qp;
	}
	rnr_timer_shorten(id->qp);
	conn->id = id;
	conn->dev = dev;
	dev->nconns++;
	conn->qp_num = id->qp->qp_num;
	conn->accepted_at = conn->probed_at = now_seconds(); /* keepalive */
	conn->next = srv->conns;
	id->context = srv->conns = conn;
	return 0;

out_destroy_qp:
	rdma_destroy_qp(id);
out_free:
	free(conn);
	return err;
}

/* Its QP to the error state, as in rdma_pool_server.c; reason: why the server
 * ends it, for the close line (NULL: the peer did, the end, or stderr said). */
static void conn_close(struct server *srv, struct conn *conn,
		       const char *reason)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int ret;

	if (conn->closing)
		return;
	if (reason)
		say(&srv->out, "close qp=0x%" PRIx32 " reason=%s\n",
		    conn->qp_num, reason);
	breaks_count(srv, conn);
	ret = ibv_modify_qp(conn->id->qp, &attr, IBV_QP_STATE);
	if (ret)
		report("ibv_modify_qp(IBV_QPS_ERR)", ret);
	/* A DREQ, or the DREP if the client's DREQ came first; before an RTU,
	 * neither (rdma_disconnect() in the kernel's cma.c). */
	if (rdma_disconnect(conn->id) && errno != ENXIO) /* device gone */
		report("rdma_disconnect", errno);
	conn->closing = true;
	conn->closed_at = now_seconds();
	srv->nclosing++;
	say(&srv->out, "disconnect qp=0x%" PRIx32 "\n", conn->qp_num);
}

/* The device's asynchronous events (1; 0 if none), acked: a QP's destroy
 * waits for the acks of its events; -EIO if the server must stop. */
static int async_handle(struct server *srv, struct device *dev)
{
	struct ibv_async_event event;
	struct ibv_qp *qp;
	struct conn *conn;
	int ret = 1;

	if (ibv_get_async_event(dev->verbs, &event))
		return errno == EAGAIN ? 0 : fail("ibv_get_async_event", errno);
	async_print(srv, &event);
	qp = event.element.qp;
	switch (event.event_type) {
	case IBV_EVENT_QP_LAST_WQE_REACHED: /* in ERR, it takes no more of the
					     * SRQ's receives: conn_quiet() */
	case IBV_EVENT_QP_FATAL: /* it broke (a bad write, say) if still open */
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		conn = conn_find(srv, dev, qp->qp_num);
		if (conn)
			conn_close(srv, conn, "qp_error");
		if (conn && event.event_type == IBV_EVENT_QP_LAST_WQE_REACHED)
			conn->last_wqe = true;
		break;
	case IBV_EVENT_COMM_EST: /* it receives before its RTU came */
		conn = conn_find(srv, dev, qp->qp_num);
		if (conn && !conn->established)
			handshake_finish(conn);
		break;
	case IBV_EVENT_CQ_ERR: /* completions can no longer be trusted */
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		ret = -EIO;
		break;
	default: /* news: SRQ_LIMIT_REACHED, a port's state... */
		break;
	}
	ibv_ack_async_event(&event);
	return ret;
}

/* The armed CQ got a completion (woken), or is looked at unarmed, or the
 * last pass left some: get the event (a read() of the channel), ack it
 * (ibv_destroy_cq() waits for the acks), drain, re-arm, drain again: the
 * re-arm missed those.  Not re-armed till --rearm-after-us pass with no
 * completion: till then serve() looks every LOOK_MS, or at once after a look
 * that found some (dev->look_again), and a stream of doorbells wakes nobody. */
static int cq_event(struct server *srv, struct device *dev, bool woken)
{
	struct ibv_cq *cq;
	void *cq_context;
	double now, quiet_us;
	int n, ret;

	if (woken && ibv_get_cq_event(dev->comp, &cq, &cq_context))
		return fail("ibv_get_cq_event", errno);
	if (woken)
		ibv_ack_cq_events(cq, 1);
	n = cq_drain(srv, dev);
	if (n < 0)
		return n;
	now = now_seconds();
	if (n > 0 || !dev->unarmed)
		dev->last_completion = now;
	quiet_us = (now - dev->last_completion) * 1e6;
	dev->unarmed = dev->cq_more || quiet_us < srv->opt.rearm_after_us;
	dev->look_again = dev->unarmed && n > 0; /* as the tick loop goes on */
	if (dev->unarmed)
		return 0;
	/* A system call on rxe, an MMIO write on mlx5: not per completion. */
	ret = ibv_req_notify_cq(dev->cq, 0);
	if (ret)
		return fail("ibv_req_notify_cq", ret);
	n = cq_drain(srv, dev);
	return n < 0 ? n : 0;
}

#define CQ_BATCH 16 /* completions taken per ibv_poll_cq(): arbitrary */

/* The heart of the server: the CQ polled until it is empty, each completion
 * a client waiting, or for about one SRQ depth of completions at most
 * (dev->cq_more: serve() comes back at once, for an armed CQ raises no
 * event for those already there).  How many, or the first error. */
static int cq_drain(struct server *srv, struct device *dev)
{
	struct ibv_wc wc[CQ_BATCH];
	int n, total = 0, err = 0;

	do {
		n = ibv_poll_cq(dev->cq, CQ_BATCH, wc);
		if (n < 0)
			return fail("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) /* the first error is kept */
			err = undo(err, NULL, on_completion(srv, dev, &wc[i]));
		if (err)
			return err;
		total += n;
	} while (n > 0 && total < (int)srv->opt.srq_depth);
	dev->cq_more = n > 0;
	dev->polled += (uint64_t)total;
	return total;
}

/* One completion; a receive's buffer goes back whatever it brought; a
 * failed one ends its connection (failure_print() says what failed, a
 * flush aside).  A doorbell counts even once its connection is closing: a
 * receive completes successfully only before its QP enters the error
 * state, so it landed before the QP broke. */
static int on_completion(struct server *srv, struct device *dev,
			 const struct ibv_wc *wc)
{
	struct conn *conn = conn_find(srv, dev, wc->qp_num);
	uint32_t index = WRID_INDEX(wc->wr_id);

	if (conn && !wc->status && !conn->established)
		handshake_finish(conn); /* it sends: its RTU may be lost */
	if (!conn || wc->status) { /* failed (its QP is in ERR), or not ours */
		failure_print(conn, wc);
		if (conn)
			conn_close(srv, conn, "qp_error");
	} else if (!conn->closing && wc->opcode == IBV_WC_RECV) { /* a SEND */
		on_request(srv, conn, dev->recv_bufs + index * RECV_BUF_SIZE,
			   wc->byte_len);
	} else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		on_doorbell(srv, conn, be32toh(wc->imm_data));
	}

	if (WRID_KIND(wc->wr_id) == WRID_RECV) {
		dev->recvs_posted--;
		return recv_post(dev, index);
	}
	if (conn) /* a reply or a keepalive probe: one send fewer */
		conn->sending--;
	if (conn && WRID_KIND(wc->wr_id) == WRID_PROBE) /* answered */
		conn->probing = false;
	if (WRID_KIND(wc->wr_id) == WRID_SEND) /* its buffer was read */
		reply_buffer_put(conn, wc->wr_id);
	return 0;
}

/* A walk of the list: what a completion costs more with more clients.  A
 * QP number is unique on its device only. */
static struct conn *conn_find(struct server *srv, struct device *dev,
			      uint32_t qp_num)
{
	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		if (conn->qp_num == qp_num && conn->dev == dev)
			return conn;
	return NULL;
}

/* A control message arrived: answer it with one RESP_ALLOC. */
static void on_request(struct server *srv, struct conn *conn, const void *buf,
		       uint32_t len)
{
	struct device *dev = conn->dev;
	uint32_t asked, rkey = dev->pool_mr ? dev->pool_mr->rkey : 0;
	int err = alloc_request(&dev->pool, buf, len, &conn->slice, &asked);
	uint8_t *slice = dev->pool_mem + conn->slice.off;
	struct ctrl_msg reply = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_RESP_ALLOC,
	};

	conn->requested = true; /* in time: conns_walk() */
	if (!err) {
		/* the last holder's data is none of the next one's business */
		memset(slice, 0, conn->slice.len);
		err = slice_key_make(srv, conn, &rkey);
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

/* Signaled: its completion frees its send queue entry, and its buffer (off
 * the device's stack of free ones, named by wr_id), which the device may
 * read until then: rxe on 6.1 mostly within the call, again to resend. */
static void reply_send(struct server *srv, struct conn *conn,
		       const struct ctrl_msg *reply)
{
	struct device *dev = conn->dev;
	struct ibv_sge sge = {
		.length = CTRL_MSG_SIZE,
		.lkey = dev->send_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret = reply_room(conn); /* it may ask faster than it takes them */
	uint32_t index;

	if (ret || !dev->nsend_free) { /* none free: replies_open() */
		conn_close(srv, conn, ret ? NULL : "no_reply_buffer");
		return;
	}
	index = dev->send_free[--dev->nsend_free];
	dev->send_owner[index] = conn;
	wr.wr_id = WRID_SEND | index;
	sge.addr = (uintptr_t)(dev->send_bufs + index * CTRL_MSG_SIZE);
	msg_encode(reply, dev->send_bufs + index * CTRL_MSG_SIZE);
	ret = ibv_post_send(conn->id->qp, &wr, &bad);
	if (ret) {
		reply_buffer_put(conn, wr.wr_id);
		report("ibv_post_send(reply)", ret);
		conn_close(srv, conn, NULL);
		return;
	}
	conn->sending++;
}

/* wr_id's buffer is free again, if conn still holds it (conn_destroy()
 * gives back those of sends it abandoned). */
static void reply_buffer_put(struct conn *conn, uint64_t wr_id)
{
	struct device *dev = conn ? conn->dev : NULL;
	uint32_t index = WRID_INDEX(wr_id);

	if (dev && dev->send_owner[index] == conn) {
		dev->send_owner[index] = NULL;
		dev->send_free[dev->nsend_free++] = index;
	}
}

/* The NIC completes the doorbell's receive only once its write, and all
 * before it on the QP, are in memory: slot (seq - 1) % slots holds seq, or
 * seq plus a multiple of slots if the client lapped since (slot_check()). */
static void on_doorbell(struct server *srv, struct conn *conn, uint32_t seq)
{
	uint32_t slots = conn->slice.len / 4, value = 0;
	uint8_t *slot = conn->dev->pool_mem + conn->slice.off;

	if (slots)
		memcpy(&value, slot + (size_t)(seq - 1) % slots * 4, 4);
	value = be32toh(value);
	conn->dev->doorbells++;
	doorbell_print(srv, conn, seq, value, slot_check(seq, value, slots));
}

/* Each connection, once a turn, as in rdma_pool_server.c: a deadline met,
 * or closed and quiet, destroyed once the CQ is drained of its last
 * completions.  *next: when the next deadline falls (INFINITY: none). */
static int conns_walk(struct server *srv, double *next)
{
	struct conn **link = &srv->conns, *conn;
	double now = now_seconds();
	int err = 0;

	for (unsigned int i = 0; srv->nclosing && i < srv->ndevices; i++) {
		int n = cq_drain(srv, &srv->devices[i]); /* the last */

		if (n < 0)
			return n;
	}
	*next = INFINITY;
	while ((conn = *link)) {
		struct device *dev = conn->dev;
		struct due due = conn_due(&srv->opt, conn);

		if (due.at <= now && due.what == DEADLINE_PROBE &&
		    probe_send(conn, now))
			conn_close(srv, conn, "qp_error");
		else if (due.at <= now && due.what != DEADLINE_PROBE)
			conn_close(srv, conn, deadline_name(due.what));
		due = conn_due(&srv->opt, conn); /* after what was done */
		*next = due.at < *next ? due.at : *next;
		if (!conn->quiet && conn_quiet(conn, now)) {
			conn->quiet = true;
			conn->cq_mark = dev->polled + (uint64_t)dev->cq->cqe;
		}
		if (!conn->quiet ||
		    (dev->cq_more && dev->polled < conn->cq_mark)) {
			link = &conn->next;
			continue;
		}
		*link = conn->next;
		err = undo(err, NULL, conn_destroy(srv, conn, now));
	}
	return err;
}

/* Give back what a quiet connection held (a write the NIC was placing in
 * its slice when the QP stopped has landed by now), and the buffers of sends
 * it abandoned; destroy QP, the device's set if the last, id; say so. */
static int conn_destroy(struct server *srv, struct conn *conn, double now)
{
	int err = slice_key_drop(conn);

	if (conn->slice.len)
		pool_free(&conn->dev->pool, conn->slice.off, conn->slice.len);
	for (uint32_t i = 0; i < srv->opt.max_conns * SEND_DEPTH; i++)
		reply_buffer_put(conn, WRID_SEND | i);
	srv->nclosing--;
	rdma_destroy_qp(conn->id);
	if (!--conn->dev->nconns) /* before its last cm_id goes */
		err = undo(err, NULL, verbs_close(srv, conn->dev));
	if (rdma_destroy_id(conn->id))
		err = undo(err, "rdma_destroy_id", errno);
	destroy_print(srv, conn, now);
	free(conn);
	return err;
}

/* At the end: close every connection, take events and completions till each
 * QP is quiet and destroyed (conn_quiet()); after a signal, a last count. */
static int conns_end(struct server *srv)
{
	const struct timespec pause = { .tv_nsec = 1000000 };
	double next;
	int ret = 0;

	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		conn_close(srv, conn, NULL);
	while (srv->conns && ret >= 0) {
		for (unsigned int i = 0; i < srv->ndevices && ret >= 0; i++)
			while ((ret = async_handle(srv, &srv->devices[i])) > 0)
				;
		if (ret >= 0)
			ret = conns_walk(srv, &next); /* drains each CQ first */
		nanosleep(&pause, NULL);
	}
	if (srv->stopped_by)
		stats_print(srv, srv->stopped_by);
	end_print(srv);
	return ret < 0 ? ret : 0;
}

/* Undo verbs_open() in reverse, once no QP is left, and forget dev. */
static int verbs_close(struct server *srv, struct device *dev)
{
	int err = 0;

	if (dev->send_mr)
		err = undo(err, "ibv_dereg_mr(reply buffers)",
			   ibv_dereg_mr(dev->send_mr));
	free(dev->send_owner);
	free(dev->send_free);
	free(dev->send_bufs);
	if (dev->cq)
		err = undo(err, "ibv_destroy_cq", ibv_destroy_cq(dev->cq));
	if (dev->comp)
		err = undo(err, "ibv_destroy_comp_channel",
			   ibv_destroy_comp_channel(dev->comp));
	if (dev->srq)
		err = undo(err, "ibv_destroy_srq", ibv_destroy_srq(dev->srq));
	if (dev->recv_mr)
		err = undo(err, "ibv_dereg_mr(receive buffers)",
			   ibv_dereg_mr(dev->recv_mr));
	free(dev->recv_bufs);
	if (dev->pool_mr)
		err = undo(err, "ibv_dereg_mr(pool)",
			   ibv_dereg_mr(dev->pool_mr));
	free(dev->pool_mem);
	pool_destroy(&dev->pool);
	if (dev->pd)
		err = undo(err, "ibv_dealloc_pd", ibv_dealloc_pd(dev->pd));
	device_forget(srv, dev);
	return err;
}
