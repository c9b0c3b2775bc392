/*
 * ctrl_peer.c - a client that misbehaves on purpose, for the end-to-end
 * tests: it sends control messages of any length and content, and writes or
 * reads wherever it is told, inside its slice or not.
 *
 *   usage: ctrl_peer [--rnr-retry N] [--no-rtu] [--source ADDR] <server_ip>
 *                    <port> STEP...
 *
 *   --rnr-retry N     the rnr_retry_count of our connect request (default
 *                     6); the server's NIC applies it to its own QP, when
 *                     we have no receive posted for its reply (7: forever)
 *   --no-rtu          connect without ever finishing the handshake: our QP
 *                     is made ready by hand when the server's reply (REP)
 *                     comes, but the last message (RTU) is never sent, so
 *                     the server's side of the connection never becomes
 *                     ESTABLISHED, though its QP already works
 *   --source ADDR     connect from this local address, not the one the
 *                     route to the server picks
 *
 *   req:SIZE          a well-formed REQ_ALLOC for SIZE bytes
 *   send:LEN:MAGIC:VERSION:TYPE:SIZE
 *                     a control message with these fields, cut or padded
 *                     with zeros to LEN bytes
 *   write:OFF:VALUE   RDMA WRITE the 32-bit VALUE at granted addr + OFF
 *                     (OFF in bytes, may be negative)
 *   read:OFF          RDMA READ the 32 bits at granted addr + OFF
 *   ring:SEQ          a doorbell that writes nothing: an RDMA WRITE WITH
 *                     IMMEDIATE of no bytes, immediate SEQ, so that the
 *                     server reports what slot (SEQ-1) % slots holds
 *   sleep:MS          hold the connection that long
 *   wait:PATH         hold it until the file PATH exists (30 s at most)
 *   blind:N           N REQ_ALLOCs of 4096 bytes, one after the other, with
 *                     no receive posted for the replies: they stay stuck in
 *                     the server's send queue
 *   sendinv:RKEY      a REQ_ALLOC for 4096 bytes sent as a SEND WITH
 *                     INVALIDATE naming RKEY: the receiver's NIC
 *                     invalidates that MR, if it lets us
 *   vanish            stop answering without a word, as a machine that
 *                     died or a pulled cable: our QP goes to the error
 *                     state, so our NIC acknowledges nothing more, and no
 *                     disconnect request is sent
 *   kill              die by SIGKILL, as a crashed client does
 *
 * Each step prints one line: "reply status=... size=... rkey=...",
 * "write off=... status=IBV_WC_...", "read off=... value=... status=...",
 * "ring seq=... status=IBV_WC_...", "blind sent=N",
 * "sendinv rkey=... status=IBV_WC_...", "vanished".
 * Exits 0 once every step has run, whatever the server answered, and 1 if
 * it could not connect or a step got no answer at all.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"
#include "tests/peer.h"

#define TIMEOUT_MS 10000
#define WAIT_MS 30000 /* wait:PATH */
#define BUF_SIZE 256  /* the largest message a step may send */

struct peer {
	struct rdma_event_channel *events;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[3][BUF_SIZE]; /* send, receive, RDMA source/target */
	uint64_t addr;		  /* of the granted slice, once granted */
	uint32_t rkey;
	uint8_t rnr_retry;
	bool no_rtu;
	const char *source; /* --source, or NULL */
	struct ibv_qp *qp;  /* ours, or the cm_id's */
};

/*
 * --no-rtu: a QP of our own rather than rdma_create_qp()'s.  librdmacm then
 * leaves the end of the handshake to us: the server's REP arrives as
 * RDMA_CM_EVENT_CONNECT_RESPONSE, and only rdma_establish() would send the
 * RTU.  We bring the QP to RTS with the attributes rdma_cm computed, and
 * never call it.
 */
static int qp_ready_by_hand(struct peer *p)
{
	static const enum ibv_qp_state states[] = { IBV_QPS_INIT, IBV_QPS_RTR,
						    IBV_QPS_RTS };
	struct ibv_qp_attr attr;
	int mask;

	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		attr = (struct ibv_qp_attr){ .qp_state = states[i] };
		if (rdma_init_qp_attr(p->id, &attr, &mask))
			return fail("rdma_init_qp_attr", errno);
		if (states[i] == IBV_QPS_RTS)
			attr.rnr_retry = p->rnr_retry;
		if (ibv_modify_qp(p->qp, &attr, mask))
			return fail("ibv_modify_qp", errno);
	}
	return 0;
}

static int peer_connect(struct peer *p, const char *server, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *ai, *src = NULL;
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap.max_send_wr = 4,
		.cap.max_recv_wr = 4,
		.cap.max_send_sge = 1,
		.cap.max_recv_sge = 1,
	};
	struct rdma_conn_param param = {
		.initiator_depth = 1, /* we issue RDMA READs */
		.retry_count = 6,
		.rnr_retry_count = p->rnr_retry,
	};
	int err;

	if (p->source && getaddrinfo(p->source, NULL, &hints, &src)) {
		errorf("cannot resolve %s", p->source);
		return -EINVAL;
	}
	if (getaddrinfo(server, port, &hints, &ai)) {
		errorf("cannot resolve %s", server);
		if (src)
			freeaddrinfo(src);
		return -EINVAL;
	}
	p->events = rdma_create_event_channel();
	if (!p->events || rdma_create_id(p->events, &p->id, NULL, RDMA_PS_TCP))
		err = fail("rdma_create_id", errno);
	else
		err = peer_resolve(p->events, p->id, src ? src->ai_addr : NULL,
				   ai->ai_addr);
	freeaddrinfo(ai);
	if (src)
		freeaddrinfo(src);
	if (err)
		return err;

	p->pd = ibv_alloc_pd(p->id->verbs);
	p->cq = p->pd ? ibv_create_cq(p->id->verbs, 16, NULL, NULL, 0) : NULL;
	if (!p->cq)
		return fail("ibv_alloc_pd/ibv_create_cq", errno);
	attr.send_cq = attr.recv_cq = p->cq;
	if (p->no_rtu) {
		p->qp = ibv_create_qp(p->pd, &attr);
		if (!p->qp)
			return fail("ibv_create_qp", errno);
		param.qp_num = p->qp->qp_num;
	} else if (rdma_create_qp(p->id, p->pd, &attr)) {
		return fail("rdma_create_qp", errno);
	} else {
		p->qp = p->id->qp;
	}
	p->mr = ibv_reg_mr(p->pd, p->buf, sizeof(p->buf),
			   IBV_ACCESS_LOCAL_WRITE);
	if (!p->mr)
		return fail("ibv_reg_mr", errno);
	if (rdma_connect(p->id, &param))
		return fail("rdma_connect", errno);
	if (!p->no_rtu)
		return peer_expect(p->events, RDMA_CM_EVENT_ESTABLISHED);
	err = peer_expect(p->events, RDMA_CM_EVENT_CONNECT_RESPONSE);
	return err ? err : qp_ready_by_hand(p);
}

/* The next completion, within TIMEOUT_MS. */
static int cq_wait(struct peer *p, struct ibv_wc *wc)
{
	int n = peer_cq_wait(p->cq, TIMEOUT_MS, wc);

	if (n == 0) {
		errorf("no completion within %d ms", TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	return n < 0 ? n : 0;
}

/* Post one work request on the send queue and wait for its completion. */
static int send_one(struct peer *p, struct ibv_send_wr *wr, struct ibv_wc *wc)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(p->qp, wr, &bad);

	if (ret)
		return fail("ibv_post_send", ret);
	return cq_wait(p, wc);
}

static int step_send(struct peer *p, uint32_t len, const struct ctrl_msg *msg)
{
	struct ibv_sge rsge = { (uintptr_t)p->buf[1], BUF_SIZE, p->mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 };
	struct ibv_sge sge = { (uintptr_t)p->buf[0], len, p->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_recv_wr *bad;
	struct ibv_send_wr *sbad;
	struct ctrl_msg reply;
	struct ibv_wc wc;
	uint32_t reply_len = 0;
	int err;

	memset(p->buf[0], 0, BUF_SIZE);
	msg_encode(msg, p->buf[0]);
	if (ibv_post_recv(p->qp, &rwr, &bad))
		return fail("ibv_post_recv", errno);
	if (ibv_post_send(p->qp, &wr, &sbad))
		return fail("ibv_post_send", errno);
	/* The send's and the reply's completions, in either order. */
	for (int done = 0; done < 2; done++) {
		err = cq_wait(p, &wc);
		if (err)
			return err;
		if (wc.status != IBV_WC_SUCCESS) {
			printf("reply status=%s\n", wc_status_name(wc.status));
			return 0;
		}
		if (wc.wr_id == 1)
			reply_len = wc.byte_len;
	}
	if (msg_decode(p->buf[1], reply_len, &reply)) {
		printf("reply undecodable len=%" PRIu32 "\n", reply_len);
		return 0;
	}
	if (!reply.status) {
		p->addr = reply.addr;
		p->rkey = reply.rkey;
	}
	printf("reply status=%s size=%" PRIu32 " rkey=0x%" PRIx32 "\n",
	       reply.status ? errno_name((int)reply.status) : "0", reply.size,
	       reply.rkey);
	return 0;
}

static int step_rdma(struct peer *p, enum ibv_wr_opcode opcode, int64_t off,
		     uint32_t value)
{
	struct ibv_sge sge = { (uintptr_t)p->buf[2], 4, p->mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma.remote_addr = p->addr + (uint64_t)off,
		.wr.rdma.rkey = p->rkey,
	};
	struct ibv_wc wc;
	uint32_t be = htobe32(value);
	int err;

	memcpy(p->buf[2], &be, 4);
	err = send_one(p, &wr, &wc);
	if (err)
		return err;
	if (opcode == IBV_WR_RDMA_WRITE) {
		printf("write off=%" PRId64 " status=%s\n", off,
		       wc_status_name(wc.status));
	} else {
		memcpy(&be, p->buf[2], 4);
		printf("read off=%" PRId64 " value=%" PRIu32 " status=%s\n",
		       off, be32toh(be), wc_status_name(wc.status));
	}
	return 0;
}

static int step_ring(struct peer *p, uint32_t seq)
{
	struct ibv_send_wr wr = {
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(seq),
		.wr.rdma.remote_addr = p->addr,
		.wr.rdma.rkey = p->rkey,
	};
	struct ibv_wc wc;
	int err = send_one(p, &wr, &wc);

	if (!err)
		printf("ring seq=%" PRIu32 " status=%s\n", seq,
		       wc_status_name(wc.status));
	return err;
}

/*
 * A well-formed REQ_ALLOC for 4096 bytes, sent with opcode (a SEND, or a
 * SEND WITH INVALIDATE naming rkey), and its own completion in *wc: that
 * only says that the server's NIC took it.
 */
static int send_request(struct peer *p, enum ibv_wr_opcode opcode,
			uint32_t rkey, struct ibv_wc *wc)
{
	struct ctrl_msg msg = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_REQ_ALLOC,
		.size = 4096,
	};
	struct ibv_sge sge = { (uintptr_t)p->buf[0], CTRL_MSG_SIZE,
			       p->mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.invalidate_rkey = rkey,
	};

	msg_encode(&msg, p->buf[0]);
	return send_one(p, &wr, wc);
}

/*
 * Requests whose replies can find no receive: the server's NIC is told
 * "receiver not ready" and retries (as often as --rnr-retry asked), so the
 * replies sit in its send queue.
 */
static int step_blind(struct peer *p, uint32_t n)
{
	struct ibv_wc wc;
	uint32_t sent = 0;
	int err = 0;

	while (!err && sent < n) {
		err = send_request(p, IBV_WR_SEND, 0, &wc);
		if (!err && wc.status != IBV_WC_SUCCESS) {
			errorf("request %" PRIu32 " failed: %s", sent + 1,
			       wc_status_name(wc.status));
			err = -EIO;
		}
		sent += !err;
	}
	printf("blind sent=%" PRIu32 "\n", sent);
	return err;
}

static int step_sendinv(struct peer *p, uint32_t rkey)
{
	struct ibv_wc wc;
	int err = send_request(p, IBV_WR_SEND_WITH_INV, rkey, &wc);

	if (!err)
		printf("sendinv rkey=0x%" PRIx32 " status=%s\n", rkey,
		       wc_status_name(wc.status));
	return err;
}

static int step_vanish(struct peer *p)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int ret = ibv_modify_qp(p->qp, &attr, IBV_QP_STATE);

	if (ret)
		return fail("ibv_modify_qp(IBV_QPS_ERR)", ret);
	printf("vanished\n");
	return 0;
}

/* Until the test that runs us says go, by making the file path. */
static int step_wait(const char *path)
{
	const struct timespec tick = { .tv_nsec = 10000000 };

	for (int i = 0; i < WAIT_MS / 10; i++) {
		if (access(path, F_OK) == 0)
			return 0;
		nanosleep(&tick, NULL);
	}
	errorf("no %s within %d ms", path, WAIT_MS);
	return -ETIMEDOUT;
}

static int step_run(struct peer *p, const char *step)
{
	struct ctrl_msg msg = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_REQ_ALLOC,
	};
	unsigned long long a, b, c, d, e;
	long long off;

	if (sscanf(step, "req:%lli", &a) == 1) {
		msg.size = (uint32_t)a;
		return step_send(p, CTRL_MSG_SIZE, &msg);
	}
	if (sscanf(step, "send:%lli:%lli:%lli:%lli:%lli", &a, &b, &c, &d, &e) ==
		    5 &&
	    a <= BUF_SIZE) {
		msg = (struct ctrl_msg){ .magic = (uint32_t)b,
					 .version = (uint16_t)c,
					 .type = (uint16_t)d,
					 .size = (uint32_t)e };
		return step_send(p, (uint32_t)a, &msg);
	}
	if (sscanf(step, "write:%lli:%lli", &off, &a) == 2)
		return step_rdma(p, IBV_WR_RDMA_WRITE, off, (uint32_t)a);
	if (sscanf(step, "read:%lli", &off) == 1)
		return step_rdma(p, IBV_WR_RDMA_READ, off, 0);
	if (sscanf(step, "ring:%lli", &a) == 1)
		return step_ring(p, (uint32_t)a);
	if (sscanf(step, "blind:%lli", &a) == 1 && a <= 64)
		return step_blind(p, (uint32_t)a);
	if (sscanf(step, "sendinv:%lli", &a) == 1)
		return step_sendinv(p, (uint32_t)a);
	if (strcmp(step, "vanish") == 0)
		return step_vanish(p);
	if (strcmp(step, "kill") == 0)
		return raise(SIGKILL);
	if (strncmp(step, "wait:", 5) == 0)
		return step_wait(step + 5);
	if (sscanf(step, "sleep:%lli", &a) == 1) {
		struct timespec ts = { (time_t)a / 1000,
				       (long)(a % 1000) * 1000000 };

		nanosleep(&ts, NULL);
		return 0;
	}
	errorf("bad step '%s'", step);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct peer p = { 0 };
	int err = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	p.rnr_retry = 6;
	for (;;) {
		if (argc > 2 && strcmp(argv[1], "--rnr-retry") == 0) {
			p.rnr_retry = (uint8_t)atoi(argv[2]);
			argv += 2;
			argc -= 2;
		} else if (argc > 2 && strcmp(argv[1], "--source") == 0) {
			p.source = argv[2];
			argv += 2;
			argc -= 2;
		} else if (argc > 1 && strcmp(argv[1], "--no-rtu") == 0) {
			p.no_rtu = true;
			argv++;
			argc--;
		} else {
			break;
		}
	}
	if (argc < 3) {
		errorf("usage: ctrl_peer [--rnr-retry N] [--no-rtu] "
		       "[--source ADDR] <server_ip> <port> STEP...");
		return EXIT_FAILURE;
	}
	err = peer_connect(&p, argv[1], argv[2]);
	for (int i = 3; !err && i < argc; i++)
		err = step_run(&p, argv[i]);
	if (p.id && p.id->qp) {
		rdma_disconnect(p.id);
		rdma_destroy_qp(p.id);
	} else if (p.qp) {
		ibv_destroy_qp(p.qp);
	}
	if (p.mr)
		ibv_dereg_mr(p.mr);
	if (p.cq)
		ibv_destroy_cq(p.cq);
	if (p.pd)
		ibv_dealloc_pd(p.pd);
	if (p.id)
		rdma_destroy_id(p.id);
	if (p.events)
		rdma_destroy_event_channel(p.events);
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}
