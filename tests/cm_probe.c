/*
 * cm_probe.c - which side's retry counts end up on which QP?
 *
 *   usage: cm_probe [--send] ADDR PORT CONNECT_RETRY CONNECT_RNR
 *                   ACCEPT_RETRY ACCEPT_RNR [ACK_TIMEOUT]
 *
 * rdma_connect() and rdma_accept() both take a retry_count and an
 * rnr_retry_count, and the connection manager carries them in its REQ
 * (sent by the active side) and REP (sent by the passive side) messages.
 * Which QP each one is applied to is easy to get backwards, so this
 * measures it.  In one process, on the RDMA device that has ADDR: listen on
 * ADDR:PORT (PORT 0: one the CM picks), connect to it with rdma_connect(CONNECT_RETRY, CONNECT_RNR),
 * accept with rdma_accept(ACCEPT_RETRY, ACCEPT_RNR), wait until both sides
 * are ESTABLISHED, then ask the NIC for both QPs' attributes and print:
 *
 *   active rnr_retry=N retry_cnt=N timeout=N min_rnr_timer=N
 *   passive rnr_retry=N retry_cnt=N timeout=N min_rnr_timer=N
 *
 * Counts are 0 to 7 (7 in rnr_retry means "forever").  ACK_TIMEOUT, if
 * given, is set on the active cm_id (RDMA_OPTION_ID_ACK_TIMEOUT, as the
 * client does), to see which QP it reaches.
 *
 * With --send, it then shows what that means: the active side SENDs to the
 * passive side, which has no receive posted, and one more line says how
 * that went (see send_probe()):
 *
 *   send status=IBV_WC_... with no receive posted
 * or
 *   send still retrying after 3000 ms with no receive posted
 *   send status=IBV_WC_... once a receive was posted
 *
 * Exits 0 once all its lines are printed, 1 on any failure or after 10 s
 * without the expected event.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"
#include "tests/peer.h"

#define MAX_COUNT 7	   /* retry counts are 3-bit fields */
#define MAX_ACK_TIMEOUT 31 /* a 5-bit exponent */
#define SEND_WAIT_MS 3000  /* --send: how long a SEND may go unanswered */
#define BUF_SIZE 64

/* One end of the connection: its cm_id and the verbs objects of its QP. */
struct side {
	const char *name;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr; /* over buf: the SEND's source, or its receive */
	uint8_t buf[BUF_SIZE];
	bool established;
	bool disconnected;
};

struct probe {
	struct rdma_event_channel *events;
	struct rdma_cm_id *listener;
	struct side active;
	struct side passive;
	struct rdma_conn_param connect;
	struct rdma_conn_param accept;
	int ack_timeout; /* -1: leave the default */
	bool send;	 /* --send */
};

static int args_parse(struct probe *pr, int argc, char **argv)
{
	static const char *const what[] = { "connect retry_count",
					    "connect rnr_retry_count",
					    "accept retry_count",
					    "accept rnr_retry_count" };
	uint8_t *field[] = { &pr->connect.retry_count,
			     &pr->connect.rnr_retry_count,
			     &pr->accept.retry_count,
			     &pr->accept.rnr_retry_count };
	uint64_t v;

	if (argc != 7 && argc != 8) {
		errorf("usage: cm_probe [--send] ADDR PORT CONNECT_RETRY "
		       "CONNECT_RNR ACCEPT_RETRY ACCEPT_RNR [ACK_TIMEOUT] (want "
		       "6 or 7 arguments, got %d)",
		       argc - 1);
		return -EINVAL;
	}
	if (parse_number("port", argv[2], 0, UINT16_MAX, &v))
		return -EINVAL;
	for (int i = 0; i < 4; i++) {
		if (parse_number(what[i], argv[3 + i], 0, MAX_COUNT, &v))
			return -EINVAL;
		*field[i] = (uint8_t)v;
	}
	pr->ack_timeout = -1;
	if (argc == 8) {
		if (parse_number("ACK timeout", argv[7], 0, MAX_ACK_TIMEOUT,
				 &v))
			return -EINVAL;
		pr->ack_timeout = (int)v;
	}
	return 0;
}

/* A PD, a buffer, a CQ and an RC QP for one side. */
static int qp_open(struct side *s)
{
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap.max_send_wr = 1,
		.cap.max_recv_wr = 1,
		.cap.max_send_sge = 1,
		.cap.max_recv_sge = 1,
	};

	s->pd = ibv_alloc_pd(s->id->verbs);
	if (!s->pd)
		return fail("ibv_alloc_pd", errno);
	s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf),
			   IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr)
		return fail("ibv_reg_mr", errno);
	s->cq = ibv_create_cq(s->id->verbs, 4, NULL, NULL, 0);
	if (!s->cq)
		return fail("ibv_create_cq", errno);
	attr.send_cq = attr.recv_cq = s->cq;
	if (rdma_create_qp(s->id, s->pd, &attr))
		return fail("rdma_create_qp", errno);
	return 0;
}

static int listener_open(struct probe *pr, struct sockaddr *addr)
{
	if (rdma_create_id(pr->events, &pr->listener, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id(listener)", errno);
	if (rdma_bind_addr(pr->listener, addr))
		return fail("rdma_bind_addr", errno);
	if (rdma_listen(pr->listener, 1))
		return fail("rdma_listen", errno);
	/* Port 0: the CM chose one; the active side connects to it. */
	((struct sockaddr_in *)addr)->sin_port = rdma_get_src_port(pr->listener);
	return 0;
}

/* The active side up to rdma_connect(): resolve, make the QP, connect. */
static int active_connect(struct probe *pr, struct sockaddr *addr)
{
	struct side *s = &pr->active;
	uint8_t exponent = (uint8_t)pr->ack_timeout;
	int err;

	if (rdma_create_id(pr->events, &s->id, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id(active)", errno);
	err = peer_resolve(pr->events, s->id, NULL, addr);
	if (err)
		return err;
	if (pr->ack_timeout >= 0 &&
	    rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &exponent, sizeof(exponent)))
		return fail("rdma_set_option(ACK_TIMEOUT)", errno);
	err = qp_open(s);
	if (err)
		return err;
	if (rdma_connect(s->id, &pr->connect))
		return fail("rdma_connect", errno);
	return 0;
}

/*
 * Both sides' events arrive on the one channel: the connect request (the
 * passive side's new cm_id, which we accept), then ESTABLISHED for each.
 */
static int handshake(struct probe *pr)
{
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	int status, err;

	while (!pr->active.established || !pr->passive.established) {
		err = peer_event(pr->events, &type, &id, &status);
		if (err)
			return err;
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST && !pr->passive.id) {
			pr->passive.id = id;
			err = qp_open(&pr->passive);
			if (err)
				return err;
			if (rdma_accept(id, &pr->accept))
				return fail("rdma_accept", errno);
		} else if (type == RDMA_CM_EVENT_ESTABLISHED &&
			   (id == pr->active.id || id == pr->passive.id)) {
			(id == pr->active.id ? &pr->active : &pr->passive)
				->established = true;
		} else {
			errorf("unexpected %s (status %d) during the handshake",
			       rdma_event_str(type), status);
			return -EPROTO;
		}
	}
	return 0;
}

/* What the NIC holds for one side's QP, as the verbs report it. */
static int side_print(const struct side *s)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int ret;

	ret = ibv_query_qp(s->id->qp, &attr,
			   IBV_QP_STATE | IBV_QP_RNR_RETRY | IBV_QP_RETRY_CNT |
				   IBV_QP_TIMEOUT | IBV_QP_MIN_RNR_TIMER,
			   &init);
	if (ret)
		return fail("ibv_query_qp", ret);
	if (attr.qp_state != IBV_QPS_RTS) {
		errorf("the %s QP is in state %d, not RTS", s->name,
		       attr.qp_state);
		return -EPROTO;
	}
	printf("%s rnr_retry=%u retry_cnt=%u timeout=%u min_rnr_timer=%u\n",
	       s->name, attr.rnr_retry, attr.retry_cnt, attr.timeout,
	       attr.min_rnr_timer);
	return 0;
}

/*
 * --send: what the active QP's rnr_retry means in practice.  The passive
 * side has no receive posted, so its NIC answers the SEND "receiver not
 * ready", and the active side's NIC tries again as often as its own QP's
 * rnr_retry allows (waiting the passive QP's min_rnr_timer in between):
 * with 0 the send fails at once with IBV_WC_RNR_RETRY_EXC_ERR, with 7 it
 * keeps trying until a receive is posted.
 */
static int send_probe(struct probe *pr)
{
	struct side *a = &pr->active, *p = &pr->passive;
	struct ibv_sge sge = { (uintptr_t)a->buf, 4, a->mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_sge rsge = { (uintptr_t)p->buf, sizeof(p->buf),
				p->mr->lkey };
	struct ibv_recv_wr rwr = { .sg_list = &rsge, .num_sge = 1 };
	struct ibv_send_wr *bad;
	struct ibv_recv_wr *rbad;
	struct ibv_wc wc;
	int ret;

	memset(a->buf, 0x5a, sizeof(a->buf));
	ret = ibv_post_send(a->id->qp, &wr, &bad);
	if (ret)
		return fail("ibv_post_send", ret);
	ret = peer_cq_wait(a->cq, SEND_WAIT_MS, &wc);
	if (ret < 0)
		return ret;
	if (ret) {
		printf("send status=%s with no receive posted\n",
		       wc_status_name(wc.status));
		return 0;
	}
	printf("send still retrying after %d ms with no receive posted\n",
	       SEND_WAIT_MS);
	ret = ibv_post_recv(p->id->qp, &rwr, &rbad);
	if (ret)
		return fail("ibv_post_recv", ret);
	ret = peer_cq_wait(a->cq, PEER_TIMEOUT_MS, &wc);
	if (ret < 0)
		return ret;
	if (!ret) {
		errorf("no send completion %d ms after the receive was posted",
		       PEER_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	printf("send status=%s once a receive was posted\n",
	       wc_status_name(wc.status));
	return 0;
}

/*
 * Disconnect as the programs do: the active side sends a DREQ; the passive
 * side, told DISCONNECTED, answers with its own rdma_disconnect() (a DREP),
 * which is what ends the active side's wait.
 */
static int disconnect(struct probe *pr)
{
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	int status, err;

	if (rdma_disconnect(pr->active.id))
		return fail("rdma_disconnect(active)", errno);
	while (!pr->active.disconnected || !pr->passive.disconnected) {
		err = peer_event(pr->events, &type, &id, &status);
		if (err)
			return err;
		if (type != RDMA_CM_EVENT_DISCONNECTED) {
			errorf("unexpected %s (status %d) while disconnecting",
			       rdma_event_str(type), status);
			return -EPROTO;
		}
		if (id == pr->active.id) {
			pr->active.disconnected = true;
		} else if (id == pr->passive.id) {
			pr->passive.disconnected = true;
			if (rdma_disconnect(id))
				return fail("rdma_disconnect(passive)", errno);
		}
	}
	return 0;
}

static void side_close(struct side *s)
{
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id);
	if (s->cq)
		undo(0, "ibv_destroy_cq", ibv_destroy_cq(s->cq));
	if (s->mr)
		undo(0, "ibv_dereg_mr", ibv_dereg_mr(s->mr));
	if (s->pd)
		undo(0, "ibv_dealloc_pd", ibv_dealloc_pd(s->pd));
	if (s->id)
		rdma_destroy_id(s->id);
}

int main(int argc, char **argv)
{
	struct probe pr = {
		.active.name = "active",
		.passive.name = "passive",
	};
	struct addrinfo hints = { .ai_family = AF_INET }, *ai = NULL;
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "--send")) {
		pr.send = true;
		argc--;
		argv++;
	}
	err = args_parse(&pr, argc, argv);
	if (err)
		return EXIT_FAILURE;
	if (getaddrinfo(argv[1], argv[2], &hints, &ai)) {
		errorf("cannot resolve '%s'", argv[1]);
		return EXIT_FAILURE;
	}
	pr.events = rdma_create_event_channel();
	if (!pr.events)
		err = fail("rdma_create_event_channel", errno);
	if (!err)
		err = listener_open(&pr, ai->ai_addr);
	if (!err)
		err = active_connect(&pr, ai->ai_addr);
	if (!err)
		err = handshake(&pr);
	if (!err)
		err = side_print(&pr.active);
	if (!err)
		err = side_print(&pr.passive);
	if (!err && pr.send)
		err = send_probe(&pr);
	if (!err)
		err = disconnect(&pr);

	side_close(&pr.passive);
	side_close(&pr.active);
	if (pr.listener)
		rdma_destroy_id(pr.listener);
	if (pr.events)
		rdma_destroy_event_channel(pr.events);
	freeaddrinfo(ai);
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}
