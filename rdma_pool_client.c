/*
 * rdma_pool_client.c - borrows a slice of a server's memory and writes into
 * it with one-sided RDMA WRITEs, ringing a doorbell every K writes.
 *
 * Read this file first: one connection meets every idea of the project, in
 * this order.  The core path, as it runs:
 *
 *   main
 *     cm_resolve      find the server: its address, then a route to it
 *     verbs_open      a protection domain, a completion queue, a queue pair,
 *                     registered memory, and a receive posted for the reply
 *     cm_connect      connect our queue pair to one on the server
 *     slice_request   SEND a REQ_ALLOC; the RESP_ALLOC that comes back holds
 *                     the slice's address, its rkey and its size
 *     stream          write i = 1..N into slot (i-1) % slots of the slice:
 *       batch_post      K writes with one ibv_post_send(), the last of them
 *                       the doorbell, an RDMA WRITE WITH IMMEDIATE
 *       doorbell_wait   its completion: the server's NIC has them all
 *     cm_disconnect   say goodbye, so that the server frees the slice at once
 *     client_close    everything, in reverse order
 *
 * The server's CPU never sees a plain RDMA WRITE: the NIC puts the data in
 * memory and tells nobody.  The doorbell writes its slot like the others,
 * but its immediate value (i) also consumes a receive on the server, and
 * that makes a completion the server's CPU does see.
 *
 * Below the banner "Beyond the core path" is what a first read may skip:
 * the command line, the ACK timeout, the buffers of the stream (a window of
 * doorbells in flight, --no-inline, --post-each) and the round-trip
 * statistics.
 *
 *   usage: rdma_pool_client [options] <server_ip> <alloc_size_bytes>
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"

/*
 * How long any one wait may take: a CM event, a reply, a doorbell.  A
 * server that dies mid-stream shows up sooner, as a failed completion, once
 * the NIC has given up its retries.
 */
#define WAIT_TIMEOUT_MS 10000
/* wr_id of the two control-message work requests; write i has wr_id i. */
#define WRID_REQ 0
#define WRID_REPLY UINT64_MAX

struct options {
	const char *server;
	uint32_t size;
	uint16_t port;
	uint32_t writes;
	uint32_t every;	 /* K: a doorbell every K writes */
	uint32_t window; /* W: doorbells in flight at most */
	bool inline_data;
	bool post_each;
	bool quiet;
	bool help;
};

/* A doorbell posted and not yet completed, and the values of its batch. */
struct doorbell {
	uint32_t seq;
	uint32_t *values; /* K of them, big-endian */
	double posted;	  /* when it was handed to the NIC */
};

struct client {
	struct options opt;
	struct rdma_event_channel *events;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	bool has_qp;
	uint8_t ctrl[2][CTRL_MSG_SIZE]; /* [0] request out, [1] reply in */
	struct ibv_mr *ctrl_mr;
	bool connected;

	/* The slice the server granted. */
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t slots;

	/* One batch of work requests: K - 1 writes and a doorbell. */
	struct ibv_send_wr *wrs;
	struct ibv_sge *sges;
	unsigned int send_flags; /* IBV_SEND_INLINE, unless --no-inline */
	uint32_t values_lkey;	 /* 0 for inline data, which needs none */
	/* Doorbells in flight: a ring of W, oldest first. */
	struct doorbell *doorbells;
	uint32_t posted, completed;

	/* Beyond the core path: stream_open() and friends. */
	uint32_t *values;
	struct ibv_mr *values_mr;
	double *rtts;
	uint32_t nrtts, max_rtts;
};

/* Beyond the core path: defined after the banner below. */
static int parse_options(int argc, char **argv, struct options *opt);
static void usage(FILE *out);
static int cm_unexpected(struct client *cl, struct rdma_cm_event *event,
			 enum rdma_cm_event_type expected);
static int ack_timeout_set(struct client *cl);
static int send_queue_depth(struct client *cl, uint32_t *depth);
static int qp_fail(struct client *cl, int err);
static int stream_open(struct client *cl);
static void stream_close(struct client *cl);
static int batch_send(struct client *cl, struct doorbell *doorbell);
static void rtt_record(struct client *cl, const struct doorbell *doorbell);
static void rtt_report(struct client *cl);

/* ---- finding the server ------------------------------------------------- */

/*
 * The connection manager (librdmacm) reports the progress of a connection
 * as events on an event channel, one at a time: wait (at most
 * WAIT_TIMEOUT_MS) for the next one and check that it is the one the
 * protocol expects now.  Every event must be acknowledged, and whatever it
 * points to is only valid until then.
 */
static int cm_wait(struct client *cl, enum rdma_cm_event_type expected)
{
	struct pollfd pfd = { .fd = cl->events->fd, .events = POLLIN };
	struct rdma_cm_event *event;
	int ret;

	ret = poll(&pfd, 1, WAIT_TIMEOUT_MS);
	if (ret < 0)
		return fail("poll(cm events)", errno);
	if (ret == 0) {
		errorf("no %s from %s within %d ms", rdma_event_str(expected),
		       cl->opt.server, WAIT_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	if (rdma_get_cm_event(cl->events, &event))
		return fail("rdma_get_cm_event", errno);
	if (event->event != expected)
		return cm_unexpected(cl, event, expected); /* acks it */
	rdma_ack_cm_event(event);
	return 0;
}

#define RESOLVE_TIMEOUT_MS 2000 /* for address and route resolution */

/*
 * Name to address with getaddrinfo(), as for a socket.  Then a cm_id, the
 * connection manager's handle on one connection (what a socket is to TCP;
 * RDMA_PS_TCP is its port space: reliable and connected).  Resolving the
 * address finds the local RDMA device that reaches it, which binds the
 * cm_id to that device (cl->id->verbs); resolving the route finds the path
 * through the network.
 */
static int cm_resolve(struct client *cl)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC };
	struct addrinfo *ai;
	int ret, err;

	ret = getaddrinfo(cl->opt.server, NULL, &hints, &ai);
	if (ret) {
		errorf("cannot resolve '%s': %s", cl->opt.server,
		       gai_strerror(ret));
		return -EINVAL;
	}
	if (ai->ai_family == AF_INET)
		((struct sockaddr_in *)ai->ai_addr)->sin_port =
			htons(cl->opt.port);
	else
		((struct sockaddr_in6 *)ai->ai_addr)->sin6_port =
			htons(cl->opt.port);

	cl->events = rdma_create_event_channel();
	if (!cl->events) {
		err = devices_missing("rdma_create_event_channel", errno);
	} else if (rdma_create_id(cl->events, &cl->id, NULL, RDMA_PS_TCP)) {
		err = fail("rdma_create_id", errno);
	} else if (rdma_resolve_addr(cl->id, NULL, ai->ai_addr,
				     RESOLVE_TIMEOUT_MS)) {
		err = fail("rdma_resolve_addr", errno);
	} else {
		err = cm_wait(cl, RDMA_CM_EVENT_ADDR_RESOLVED);
	}
	freeaddrinfo(ai);
	if (err)
		return err;

	if (rdma_resolve_route(cl->id, RESOLVE_TIMEOUT_MS))
		return fail("rdma_resolve_route", errno);
	return cm_wait(cl, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

/* ---- the verbs objects -------------------------------------------------- */

/*
 * A receive work request: the buffer the NIC may fill with the next message
 * that arrives, described by a scatter/gather element (SGE: address, length
 * and the lkey of the registered memory it lies in).  A message that finds
 * no receive posted is answered "receiver not ready" and must be resent
 * later, so this one is posted before anything is sent.
 */
static int recv_post_reply(struct client *cl)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)cl->ctrl[1],
		.length = CTRL_MSG_SIZE,
		.lkey = cl->ctrl_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_REPLY,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;

	return check("ibv_post_recv", ibv_post_recv(cl->id->qp, &wr, &bad));
}

/*
 * Everything the NIC needs, made on the device the cm_id is bound to:
 *   - a protection domain (PD): a QP may only touch memory registered in
 *     its own PD, which is what keeps one program's NIC work out of
 *     another's memory;
 *   - a completion queue (CQ): where the NIC reports each finished work
 *     request as a work completion (WC);
 *   - a reliable-connected (RC) queue pair (QP): a send queue and a receive
 *     queue, the endpoint of one connection; "reliable" means the NICs
 *     acknowledge, resend and keep order, as TCP does;
 *   - a memory region (MR) for the two control messages: registering pins
 *     the memory and gives the NIC its address translation, and the lkey
 *     that names it in our own work requests.
 * The CQ must hold every completion that can be outstanding: on an error
 * every queued work request completes, signaled or not.
 */
static int verbs_open(struct client *cl)
{
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap.max_recv_wr = 1,
		.cap.max_send_sge = 1,
		.cap.max_recv_sge = 1,
		/* room for a 4-byte value inside each work request */
		.cap.max_inline_data =
			cl->opt.inline_data ? sizeof(uint32_t) : 0,
	};
	int err = send_queue_depth(cl, &attr.cap.max_send_wr);

	if (err)
		return err;
	cl->pd = ibv_alloc_pd(cl->id->verbs);
	if (!cl->pd)
		return fail("ibv_alloc_pd", errno);
	cl->cq = ibv_create_cq(cl->id->verbs, (int)attr.cap.max_send_wr + 1,
			       NULL, NULL, 0);
	if (!cl->cq)
		return fail("ibv_create_cq", errno);
	attr.send_cq = cl->cq;
	attr.recv_cq = cl->cq;
	if (rdma_create_qp(cl->id, cl->pd, &attr))
		return qp_fail(cl, errno);
	cl->has_qp = true;

	/* LOCAL_WRITE: the NIC writes the reply into this memory. */
	cl->ctrl_mr = ibv_reg_mr(cl->pd, cl->ctrl, sizeof(cl->ctrl),
				 IBV_ACCESS_LOCAL_WRITE);
	if (!cl->ctrl_mr)
		return mr_fail("ibv_reg_mr(control messages)", errno);
	return recv_post_reply(cl);
}

/*
 * Resends of an unacknowledged packet before the work request fails.  The
 * verbs allow up to 7, but Soft-RoCE reads 7 as "forever", as the spec does
 * only for rnr_retry_count: 6 is the most that still ends.
 */
#define TRANSPORT_RETRIES 6
/* rnr_retry_count 7 is special: retry "receiver not ready" forever */
#define RNR_RETRY_FOREVER 7

/*
 * Connect.  The two retry counts travel in the connect request, and the
 * connection manager does not apply them where their names suggest:
 * retry_count (resends of a packet nobody acknowledged) is set on both
 * QPs, ours and the server's; rnr_retry_count crosses over, to the
 * server's QP: it is how often the server's NIC retries a reply that finds
 * no receive of ours posted (never: we post it before we send).  How
 * patient our NIC is with the server's SRQ, the server says in its accept.
 * Measured with tests/cm_probe; see docs/retry-counts.md.
 */
static int cm_connect(struct client *cl)
{
	struct rdma_conn_param param = {
		.retry_count = TRANSPORT_RETRIES,
		.rnr_retry_count = RNR_RETRY_FOREVER,
	};
	int err = ack_timeout_set(cl);

	if (err)
		return err;
	if (rdma_connect(cl->id, &param))
		return fail("rdma_connect", errno);
	err = cm_wait(cl, RDMA_CM_EVENT_ESTABLISHED);
	if (err)
		return err;
	cl->connected = true;
	printf("connect server=%s port=%u qp=0x%" PRIx32 "\n", cl->opt.server,
	       cl->opt.port, cl->id->qp->qp_num);
	return 0;
}

/* ---- asking for memory -------------------------------------------------- */

/*
 * A SEND: the NIC reads the 32 bytes from registered memory and delivers
 * them into a receive the server posted.  Signaled: it asks for a work
 * completion when the server's NIC has acknowledged it.
 */
static int request_send(struct client *cl)
{
	struct ctrl_msg req = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_REQ_ALLOC,
		.size = cl->opt.size,
	};
	struct ibv_sge sge = {
		.addr = (uintptr_t)cl->ctrl[0],
		.length = CTRL_MSG_SIZE,
		.lkey = cl->ctrl_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_REQ,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;

	msg_encode(&req, cl->ctrl[0]);
	return check("ibv_post_send(request)",
		     ibv_post_send(cl->id->qp, &wr, &bad));
}

/*
 * Busy-poll the CQ for one completion: the lowest latency there is, at the
 * price of a core while waiting.  A failed completion is reported with the
 * work request it belongs to, found by its wr_id: for a failed completion
 * only wr_id, status and qp_num are defined.
 */
static int cq_wait(struct client *cl, struct ibv_wc *wc)
{
	double deadline = now_seconds() + WAIT_TIMEOUT_MS / 1000.0;
	unsigned int spins = 0;
	int n;

	while ((n = ibv_poll_cq(cl->cq, 1, wc)) == 0) {
		if (++spins % 4096 == 0 && now_seconds() > deadline) {
			errorf("no completion within %d ms", WAIT_TIMEOUT_MS);
			return -ETIMEDOUT;
		}
	}
	if (n < 0)
		return fail("ibv_poll_cq", EIO);
	if (wc->status == IBV_WC_SUCCESS)
		return 0;

	if (wc->wr_id == WRID_REQ || wc->wr_id == WRID_REPLY)
		errorf("%s failed: %s (%s)",
		       wc->wr_id == WRID_REQ ? "request" : "reply",
		       wc_status_name(wc->status),
		       ibv_wc_status_str(wc->status));
	else
		errorf("write %" PRIu64 " failed: %s (%s)", wc->wr_id,
		       wc_status_name(wc->status),
		       ibv_wc_status_str(wc->status));
	return -EIO;
}

/*
 * SEND the request and wait for both its completion and the reply's: they
 * can come in either order, since our NIC learns that the request arrived
 * (its acknowledgement) independently of the server's answer.
 */
static int slice_request(struct client *cl)
{
	struct ctrl_msg reply;
	struct ibv_wc wc;
	uint32_t reply_len = 0;
	int err = request_send(cl);

	for (int done = 0; !err && done < 2; done++) {
		err = cq_wait(cl, &wc);
		if (!err && wc.wr_id == WRID_REPLY)
			reply_len = wc.byte_len;
	}
	if (err)
		return err;

	if (msg_decode(cl->ctrl[1], reply_len, &reply) ||
	    reply.type != CTRL_RESP_ALLOC) {
		errorf("the server's reply is not a RESP_ALLOC");
		return -EBADMSG;
	}
	if (reply.status) {
		printf("denied size=%" PRIu32 " status=%s\n", cl->opt.size,
		       errno_name((int)reply.status));
		errorf("the server denied %" PRIu32 " bytes: %s (%s)",
		       cl->opt.size, errno_name((int)reply.status),
		       strerror((int)reply.status));
		return -(int)reply.status;
	}
	if (reply.size < sizeof(uint32_t)) {
		errorf("the server granted %" PRIu32
		       " bytes, too few for one slot",
		       reply.size);
		return -EBADMSG;
	}
	cl->remote_addr = reply.addr;
	cl->rkey = reply.rkey;
	cl->slots = reply.size / sizeof(uint32_t);
	printf("granted addr=0x%" PRIx64 " rkey=0x%" PRIx32 " size=%" PRIu32
	       "\n",
	       reply.addr, reply.rkey, reply.size);
	return 0;
}

/* ---- the write stream --------------------------------------------------- */

/*
 * Writes first..last as one list of work requests, chained by .next, the
 * last of them the doorbell.  Each write names where it goes in the
 * server's memory (remote_addr) and the key that allows it there (the
 * rkey the server granted): the server's NIC checks both, and the server's
 * CPU takes no part.  Only the doorbell is signaled (asks for a
 * completion); the others complete silently, and the doorbell's completion
 * vouches for them, since a send queue completes in order.  Its immediate
 * value travels in the packet header and lands in the completion of the
 * receive it consumes on the server: no memory of the server's holds it.
 *
 * The values go inline: ibv_post_send() copies each one into the work
 * request, so the NIC need not fetch it from memory in a second step.
 * All K go to the NIC with one ibv_post_send(): one knock on the NIC's door
 * (an MMIO write on a NIC, a system call on Soft-RoCE) per K writes.
 */
static void batch_fill(struct client *cl, uint32_t first, uint32_t last,
		       struct doorbell *doorbell)
{
	/* Counted by k, not by i: with last == UINT32_MAX, i <= last would
	 * hold for ever. */
	for (uint32_t k = 0; k <= last - first; k++) {
		uint32_t i = first + k, slot = (i - 1) % cl->slots;
		bool is_doorbell = i == last;

		doorbell->values[k] = htobe32(i);
		cl->sges[k] = (struct ibv_sge){
			.addr = (uintptr_t)&doorbell->values[k],
			.length = sizeof(uint32_t),
			.lkey = cl->values_lkey,
		};
		cl->wrs[k] = (struct ibv_send_wr){
			.wr_id = i,
			.next = is_doorbell ? NULL : &cl->wrs[k + 1],
			.sg_list = &cl->sges[k],
			.num_sge = 1,
			.opcode = is_doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM
					      : IBV_WR_RDMA_WRITE,
			.send_flags = cl->send_flags |
				      (is_doorbell ? IBV_SEND_SIGNALED : 0),
			.imm_data = is_doorbell ? htobe32(i) : 0,
			.wr.rdma.remote_addr =
				cl->remote_addr +
				(uint64_t)slot * sizeof(uint32_t),
			.wr.rdma.rkey = cl->rkey,
		};
	}
	doorbell->seq = last;
}

static int batch_post(struct client *cl, uint32_t first, uint32_t last)
{
	struct doorbell *doorbell = &cl->doorbells[cl->posted % cl->opt.window];

	batch_fill(cl, first, last, doorbell);
	cl->posted++;
	return batch_send(cl, doorbell);
}

/*
 * The doorbell's completion means the server's NIC has acknowledged it, and
 * on a reliable connection that acknowledges every write before it too.
 * Doorbells complete in the order they were posted: the oldest one in
 * flight is the one to come.
 */
static int doorbell_wait(struct client *cl)
{
	struct doorbell *doorbell =
		&cl->doorbells[cl->completed % cl->opt.window];
	struct ibv_wc wc;
	int err = cq_wait(cl, &wc);

	if (err)
		return err;
	if (wc.wr_id != doorbell->seq) {
		errorf("waited for doorbell %" PRIu32 ", completion %" PRIu64
		       " came",
		       doorbell->seq, wc.wr_id);
		return -EPROTO;
	}
	cl->completed++;
	rtt_record(cl, doorbell);
	if (!cl->opt.quiet)
		printf("doorbell seq=%" PRIu32 " completed\n", doorbell->seq);
	return 0;
}

/*
 * Post a batch, wait for its doorbell, repeat.  Batches end at every
 * multiple of K, and at N.  With --window W the wait comes only once W
 * doorbells are in flight, so that the NIC has the next batch to send while
 * a doorbell makes its round trip.
 */
static int stream(struct client *cl)
{
	uint32_t n = cl->opt.writes;
	double start = now_seconds(), seconds;
	uint64_t first, last;
	int err = 0;

	for (first = 1; !err && first <= n; first = last + 1) {
		last = first - 1 + cl->opt.every;
		if (last > n)
			last = n;
		err = batch_post(cl, (uint32_t)first, (uint32_t)last);
		while (!err && cl->posted - cl->completed == cl->opt.window)
			err = doorbell_wait(cl);
	}
	while (!err && cl->posted != cl->completed)
		err = doorbell_wait(cl);
	if (err)
		return err;
	seconds = now_seconds() - start;
	printf("done writes=%" PRIu32 " doorbells=%" PRIu32 " seconds=%.3f "
	       "writes_per_s=%.0f\n",
	       n, cl->completed, seconds,
	       seconds > 0 ? (double)n / seconds : 0.0);
	return 0;
}

/* ---- the end ------------------------------------------------------------ */

/* Say goodbye properly, so that the server frees our slice at once. */
static int cm_disconnect(struct client *cl)
{
	cl->connected = false;
	if (rdma_disconnect(cl->id))
		return fail("rdma_disconnect", errno);
	return cm_wait(cl, RDMA_CM_EVENT_DISCONNECTED);
}

/*
 * Everything in reverse order of creation; safe on a half-built client.
 * rdma_disconnect() has moved our QP to the error state, so the NIC no
 * longer uses any of it.
 */
static void client_close(struct client *cl)
{
	stream_close(cl);
	if (cl->ctrl_mr)
		check("ibv_dereg_mr", ibv_dereg_mr(cl->ctrl_mr));
	if (cl->has_qp)
		rdma_destroy_qp(cl->id);
	if (cl->cq)
		check("ibv_destroy_cq", ibv_destroy_cq(cl->cq));
	if (cl->pd)
		check("ibv_dealloc_pd", ibv_dealloc_pd(cl->pd));
	if (cl->id)
		rdma_destroy_id(cl->id);
	if (cl->events)
		rdma_destroy_event_channel(cl->events);
}

int main(int argc, char **argv)
{
	struct client cl = { 0 };
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse_options(argc, argv, &cl.opt))
		return EXIT_FAILURE;
	if (cl.opt.help) {
		usage(stdout);
		return EXIT_SUCCESS;
	}

	err = devices_check();
	if (!err)
		err = cm_resolve(&cl);
	if (!err)
		err = verbs_open(&cl);
	if (!err)
		err = stream_open(&cl);
	if (!err)
		err = cm_connect(&cl);
	if (!err)
		err = slice_request(&cl);
	if (!err)
		err = stream(&cl);
	if (!err)
		rtt_report(&cl);
	if (cl.connected) {
		int ret = cm_disconnect(&cl);

		err = err ? err : ret;
	}
	client_close(&cl);
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ======================================================================== */
/*                  Beyond the core path: a first read may skip              */
/* ======================================================================== */

/* ---- the command line --------------------------------------------------- */

#define DEFAULT_WRITES 1000
#define DEFAULT_DOORBELL_EVERY 32
#define DEFAULT_WINDOW 1 /* wait for each doorbell before the next batch */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: rdma_pool_client [options] <server_ip> <alloc_size_bytes>\n"
		"  -p, --port PORT            server port (default %d)\n"
		"  -n, --writes N             RDMA WRITEs to stream (default %d)\n"
		"  -k, --doorbell-every K     a doorbell every K writes "
		"(default %d)\n"
		"  -w, --window W             up to W doorbells in flight "
		"(default %d)\n"
		"      --no-inline            values from registered memory, "
		"not inline\n"
		"      --post-each            one ibv_post_send() per write, "
		"not per batch\n"
		"  -q, --quiet                no line per doorbell\n"
		"  -h, --help                 show this text\n",
		DEFAULT_PORT, DEFAULT_WRITES, DEFAULT_DOORBELL_EVERY,
		DEFAULT_WINDOW);
}

/* Fills opt from the arguments, or says what is wrong and fails. */
static int parse_options(int argc, char **argv, struct options *opt)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "writes", required_argument, NULL, 'n' },
		{ "doorbell-every", required_argument, NULL, 'k' },
		{ "window", required_argument, NULL, 'w' },
		{ "no-inline", no_argument, NULL, 'I' },
		{ "post-each", no_argument, NULL, 'E' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, writes = DEFAULT_WRITES;
	uint64_t every = DEFAULT_DOORBELL_EVERY, size = 0;
	uint64_t window = DEFAULT_WINDOW;
	int c, err = 0;

	opt->inline_data = true;
	opterr = 0; /* our messages, not getopt's */
	while (!err && (c = getopt_long(argc, argv, "p:n:k:w:qh", longopts,
					NULL)) != -1) {
		switch (c) {
		case 'p':
			err = parse_number("port", optarg, 1, UINT16_MAX,
					   &port);
			break;
		case 'n':
			err = parse_number("number of writes", optarg, 0,
					   UINT32_MAX, &writes);
			break;
		case 'k':
			err = parse_number("doorbell interval", optarg, 1,
					   UINT32_MAX, &every);
			break;
		case 'w':
			err = parse_number("window", optarg, 1, UINT32_MAX,
					   &window);
			break;
		case 'I':
			opt->inline_data = false;
			break;
		case 'E':
			opt->post_each = true;
			break;
		case 'q':
			opt->quiet = true;
			break;
		case 'h':
			opt->help = true;
			return 0;
		default:
			/* "-5" looks like an option to getopt */
			errorf("unknown option '%s'%s", argv[optind - 1],
			       optopt >= '0' && optopt <= '9'
				       ? ": sizes and counts cannot be negative"
				       : "");
			err = -EINVAL;
		}
	}
	if (!err && argc - optind != 2) {
		errorf("want 2 arguments, <server_ip> <alloc_size_bytes>, got %d",
		       argc - optind);
		err = -EINVAL;
	}
	/* 0 is passed on: refusing it is the server's job (EINVAL). */
	if (!err)
		err = parse_number("allocation size", argv[optind + 1], 0,
				   UINT32_MAX, &size);
	if (err) {
		usage(stderr);
		return err;
	}
	opt->server = argv[optind];
	opt->port = (uint16_t)port;
	opt->writes = (uint32_t)writes;
	opt->every = (uint32_t)every;
	opt->window = (uint32_t)window;
	opt->size = (uint32_t)size;
	return 0;
}

/* ---- connection troubles ------------------------------------------------ */

/*
 * cm_wait() got another event than it expected: say what happened, then
 * acknowledge the event (a rejection's reason lives in its private data,
 * only valid until then).  A rejecting server says why in a string; a port
 * nobody listens on is rejected by the remote kernel with zeros.
 */
static int cm_unexpected(struct client *cl, struct rdma_cm_event *event,
			 enum rdma_cm_event_type expected)
{
	const char *data = event->param.conn.private_data;
	size_t len = data ? event->param.conn.private_data_len : 0;
	bool rejected = event->event == RDMA_CM_EVENT_REJECTED;

	len = len ? strnlen(data, len) : 0;
	if (rejected && len)
		errorf("%s:%u rejected the connection: %.*s", cl->opt.server,
		       cl->opt.port, (int)len, data);
	else if (rejected)
		errorf("%s:%u rejected the connection: is a server listening "
		       "there?",
		       cl->opt.server, cl->opt.port);
	else
		errorf("waiting for %s, got %s (status %d)",
		       rdma_event_str(expected), rdma_event_str(event->event),
		       event->status);
	rdma_ack_cm_event(event);
	return rejected ? -ECONNREFUSED : -EPROTO;
}

#define ACK_TIMEOUT_EXP 16 /* 4.096 us * 2^16 = 0.27 s */

/*
 * How long the NIC waits for an acknowledgement before it resends, as an
 * exponent: 4.096 us * 2^16 = 0.27 s.  With TRANSPORT_RETRIES resends, a
 * server that vanished mid-stream fails our next work request after about
 * two seconds, where RoCE's default (2^18 and more) takes many.
 */
static int ack_timeout_set(struct client *cl)
{
	uint8_t exponent = ACK_TIMEOUT_EXP;

	if (rdma_set_option(cl->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &exponent, sizeof(exponent)))
		return fail("rdma_set_option(ACK_TIMEOUT)", errno);
	return 0;
}

/* ---- the buffers of the stream ------------------------------------------ */

#define RTT_SAMPLES (1u << 20) /* round trips kept for the statistics */

/*
 * The send queue holds W batches of K work requests: a send queue retires
 * its entries in order, so a doorbell completing is what frees its own
 * entry and those of the K - 1 unsignaled writes before it.  K x W may be
 * more than the device allows: say so, with the numbers.
 */
static int send_queue_depth(struct client *cl, uint32_t *depth)
{
	uint64_t want = (uint64_t)cl->opt.every * cl->opt.window;
	struct ibv_device_attr dev;
	int ret = ibv_query_device(cl->id->verbs, &dev);

	if (ret)
		return fail("ibv_query_device", ret);
	if (want > (uint64_t)dev.max_qp_wr) {
		errorf("%" PRIu32 " doorbells in flight, one every %" PRIu32
		       " writes, need a send queue %" PRIu64
		       " deep; %s allows %d",
		       cl->opt.window, cl->opt.every, want,
		       ibv_get_device_name(cl->id->verbs->device),
		       dev.max_qp_wr);
		return -EINVAL;
	}
	*depth = (uint32_t)want;
	return 0;
}

/*
 * The device may refuse a send queue that max_qp_wr allows: mlx5, for one,
 * reserves room for a larger work request in every entry.  It says only
 * EINVAL; say which numbers made the queue that deep.
 */
static int qp_fail(struct client *cl, int err)
{
	fail("rdma_create_qp", err);
	if (err == EINVAL)
		errorf("the send queue holds %" PRIu32 " doorbells in flight "
		       "(-w) of %" PRIu32 " writes each (-k): %" PRIu64
		       " work requests; try a smaller -k or -w",
		       cl->opt.window, cl->opt.every,
		       (uint64_t)cl->opt.every * cl->opt.window);
	return -err;
}

/*
 * The work requests of one batch, and a ring of W doorbells each with the
 * K values of its batch.  Inline, a value is copied into its work request
 * by ibv_post_send(), so it needs no registration and may change at once.
 * With --no-inline the NIC fetches each value from memory when it sends
 * the write, which may be long after ibv_post_send() returned: the values
 * must then be registered, and each must stay untouched until its batch
 * has completed, hence one set per doorbell in flight.
 */
static int stream_open(struct client *cl)
{
	uint32_t k = cl->opt.every, w = cl->opt.window;
	uint64_t doorbells = (uint64_t)cl->opt.writes / k + 1;

	cl->wrs = calloc(k, sizeof(*cl->wrs));
	cl->sges = calloc(k, sizeof(*cl->sges));
	cl->values = calloc((size_t)k * w, sizeof(*cl->values));
	cl->doorbells = calloc(w, sizeof(*cl->doorbells));
	cl->max_rtts =
		doorbells < RTT_SAMPLES ? (uint32_t)doorbells : RTT_SAMPLES;
	cl->rtts = calloc(cl->max_rtts, sizeof(*cl->rtts));
	if (!cl->wrs || !cl->sges || !cl->values || !cl->doorbells || !cl->rtts)
		return fail("calloc(work requests)", ENOMEM);
	for (uint32_t i = 0; i < w; i++)
		cl->doorbells[i].values = cl->values + (size_t)i * k;

	if (cl->opt.inline_data) {
		cl->send_flags = IBV_SEND_INLINE;
		return 0;
	}
	cl->values_mr = ibv_reg_mr(cl->pd, cl->values,
				   (size_t)k * w * sizeof(*cl->values), 0);
	if (!cl->values_mr)
		return mr_fail("ibv_reg_mr(values)", errno);
	cl->values_lkey = cl->values_mr->lkey;
	return 0;
}

static void stream_close(struct client *cl)
{
	free(cl->rtts);
	if (cl->values_mr)
		check("ibv_dereg_mr(values)", ibv_dereg_mr(cl->values_mr));
	free(cl->doorbells);
	free(cl->values);
	free(cl->sges);
	free(cl->wrs);
}

/*
 * Hand the batch cl->wrs to the NIC: the whole list with one
 * ibv_post_send(), or with --post-each one call per write, to measure what
 * the list is worth.  The doorbell's round trip starts with the call that
 * carries it.
 */
static int batch_send(struct client *cl, struct doorbell *doorbell)
{
	struct ibv_send_wr *wr, *next, *bad;

	if (!cl->opt.post_each) {
		doorbell->posted = now_seconds();
		return check("ibv_post_send(writes)",
			     ibv_post_send(cl->id->qp, cl->wrs, &bad));
	}
	for (wr = cl->wrs; wr; wr = next) {
		next = wr->next;
		wr->next = NULL;
		if (!next)
			doorbell->posted = now_seconds();
		if (check("ibv_post_send(write)",
			  ibv_post_send(cl->id->qp, wr, &bad)))
			return -EIO;
	}
	return 0;
}

/* ---- round trips -------------------------------------------------------- */

static void rtt_record(struct client *cl, const struct doorbell *doorbell)
{
	if (cl->nrtts < cl->max_rtts)
		cl->rtts[cl->nrtts++] = now_seconds() - doorbell->posted;
}

static int seconds_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Each doorbell's round trip, from ibv_post_send() to its completion: the
 * write crossing to the server's NIC and the acknowledgement coming back
 * (and, with a window, the wait behind earlier batches).  The median and
 * the 99th percentile (nearest rank), in microseconds, of the first
 * RTT_SAMPLES doorbells.
 */
static void rtt_report(struct client *cl)
{
	uint32_t n = cl->nrtts;

	if (!n)
		return;
	qsort(cl->rtts, n, sizeof(*cl->rtts), seconds_cmp);
	printf("rtt doorbells=%" PRIu32 " median_us=%.1f p99_us=%.1f "
	       "max_us=%.1f\n",
	       n, cl->rtts[(n - 1) / 2] * 1e6,
	       cl->rtts[((uint64_t)n * 99 + 99) / 100 - 1] * 1e6,
	       cl->rtts[n - 1] * 1e6);
}
