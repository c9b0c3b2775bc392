/*
 * rdma_pool_client.c - borrows a slice of a server's memory and writes into
 * it with one-sided RDMA WRITEs, ringing a doorbell every K writes.  Read
 * this file first.  The core path, in the order main runs it:
 *
 *   cm_resolve      find the server (cm_wait: the CM's next event)
 *   verbs_open      PD, CQ, QP, registered memory, a receive for the reply
 *   stream_open     the work requests of one batch, the doorbells' ring
 *   cm_connect      connect our queue pair to one on the server
 *   slice_request   SEND a REQ_ALLOC; the RESP_ALLOC holds addr, rkey, size
 *                   (cq_wait: the next work completion)
 *   stream          write i = 1..N into slot (i-1) % slots of the slice:
 *                   batch_fill, batch_post: K writes at once, the last one
 *                   the doorbell (RDMA WRITE WITH IMMEDIATE); doorbell_wait
 *   cm_disconnect   say goodbye, so that the server frees the slice;
 *                   main then undoes the setup, in reverse
 *
 * The server's NIC (on Soft-RoCE, its kernel) places a plain RDMA WRITE in
 * memory and the server program never hears of it; the doorbell takes a
 * receive there, whose completion the server program does see.  After the
 * banner: options; errors; --step, limits; --no-inline, --post-each; RTTs.
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

#define WAIT_TIMEOUT_MS 10000	/* for a CM event, a reply, a doorbell */
#define RESOLVE_TIMEOUT_MS 2000 /* for address and route resolution */
#define RTT_SAMPLES (1u << 20)	/* round trips kept for the statistics */
/* wr_id is ours: the completion hands it back.  Write i has wr_id i. */
#define WRID_REQ 0
#define WRID_REPLY UINT64_MAX

struct options {
	const char *server;
	uint16_t port;
	uint32_t size, writes;
	uint32_t every;	 /* K: a doorbell every K writes */
	uint32_t window; /* W: doorbells in flight at most */
	bool inline_data, post_each, quiet, step, help;
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
	uint8_t ctrl[2][CTRL_MSG_SIZE]; /* [0] request out, [1] reply in */
	struct ibv_mr *ctrl_mr;
	uint64_t remote_addr; /* the slice the server granted */
	uint32_t rkey, slots;
	struct ibv_send_wr *wrs; /* one batch: K - 1 writes and a doorbell */
	struct ibv_sge *sges;
	struct doorbell *doorbells; /* in flight: a ring of W, oldest first */
	uint32_t *values;	    /* the W sets of K values */
	uint32_t posted, completed;
	struct ibv_mr *values_mr; /* --no-inline */
	double *rtts;		  /* round-trip statistics */
	uint32_t nrtts, max_rtts;
};

/* Beyond the core path: after the banner below. */
static int parse_options(int argc, char **argv, struct options *opt);
static int server_addr(struct client *cl, struct sockaddr_storage *addr);
static int cm_unexpected(struct client *cl, struct rdma_cm_event *event,
			 enum rdma_cm_event_type expected);
static int send_queue_depth(struct client *cl, uint32_t *depth);
static int qp_fail(struct client *cl, int err);
static int values_register(struct client *cl);
static int step_pause(struct client *cl, const char *after);
static int wc_failed(const struct ibv_wc *wc);
static int slice_refused(struct client *cl, const struct ctrl_msg *reply);
static int batch_post_each(struct client *cl, struct doorbell *doorbell);
static void stream_report(struct client *cl, double seconds);

/* The connection manager (librdmacm, "CM") reports a connection's progress
 * as events on a channel: wait for the next one, check that the protocol
 * expects it, acknowledge it.  What an event points to is valid only until
 * its ack, and rdma_destroy_id() waits for the acks of its id's events. */
static int cm_wait(struct client *cl, enum rdma_cm_event_type expected)
{
	struct pollfd pfd = { .fd = cl->events->fd, .events = POLLIN };
	struct rdma_cm_event *event;
	int ret = poll(&pfd, 1, WAIT_TIMEOUT_MS);

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

/* A cm_id: what a socket is to TCP.  Resolving the address binds it to
 * the device that reaches the server (cl->id->verbs); then a route. */
static int cm_resolve(struct client *cl)
{
	struct sockaddr_storage addr;
	int err = server_addr(cl, &addr);

	if (err)
		return err;
	cl->events = rdma_create_event_channel();
	if (!cl->events)
		return fail("rdma_create_event_channel", errno);
	if (rdma_create_id(cl->events, &cl->id, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id", errno);
	if (rdma_resolve_addr(cl->id, NULL, (struct sockaddr *)&addr,
			      RESOLVE_TIMEOUT_MS))
		return fail("rdma_resolve_addr", errno);
	err = cm_wait(cl, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (err)
		return err;
	if (rdma_resolve_route(cl->id, RESOLVE_TIMEOUT_MS))
		return fail("rdma_resolve_route", errno);
	return cm_wait(cl, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

/* A protection domain (PD: a QP may only use memory registered in its
 * own), a completion queue (CQ), a reliable-connected (RC) queue pair, a
 * memory region (MR) for the control messages, and the reply's receive,
 * posted before we send, lest the reply meet "receiver not ready". */
static int verbs_open(struct client *cl)
{
	/* the reply's buffer, a scatter/gather element (SGE) */
	struct ibv_sge sge = {
		.addr = (uintptr_t)cl->ctrl[1],
		.length = CTRL_MSG_SIZE,
	};
	struct ibv_recv_wr rwr = {
		.wr_id = WRID_REPLY,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap.max_recv_wr = 1,
		.cap.max_send_sge = 1,
		.cap.max_recv_sge = 1,
		/* inline: ibv_post_send() copies each value into its entry */
		.cap.max_inline_data =
			cl->opt.inline_data ? sizeof(uint32_t) : 0,
	};
	int ret = send_queue_depth(cl, &attr.cap.max_send_wr);

	if (ret)
		return ret;
	cl->pd = ibv_alloc_pd(cl->id->verbs);
	if (!cl->pd)
		return fail("ibv_alloc_pd", errno);
	/* room for every send, and the reply: on an error, all complete */
	cl->cq = ibv_create_cq(cl->id->verbs, (int)attr.cap.max_send_wr + 1,
			       NULL, NULL, 0);
	if (!cl->cq)
		return fail("ibv_create_cq", errno);
	attr.send_cq = attr.recv_cq = cl->cq;
	/* Created in RESET, moved to INIT (bound to the port) by librdmacm:
	 * it takes receives now, but sends nothing before RTS. */
	if (rdma_create_qp(cl->id, cl->pd, &attr))
		return qp_fail(cl, errno);
	/* Pinned, and translated for the NIC; LOCAL_WRITE: the reply lands. */
	cl->ctrl_mr = ibv_reg_mr(cl->pd, cl->ctrl, sizeof(cl->ctrl),
				 IBV_ACCESS_LOCAL_WRITE);
	if (!cl->ctrl_mr)
		return fail("ibv_reg_mr(control messages)", errno);
	sge.lkey = cl->ctrl_mr->lkey;
	ret = ibv_post_recv(cl->id->qp, &rwr, &bad);
	return ret ? fail("ibv_post_recv", ret) : 0;
}

/* One batch's work requests, a ring of W doorbells' values, round trips. */
static int stream_open(struct client *cl)
{
	uint32_t k = cl->opt.every, w = cl->opt.window;
	uint64_t doorbells = (uint64_t)cl->opt.writes / k + 1;
	int err;

	cl->wrs = calloc(k, sizeof(*cl->wrs));
	cl->sges = calloc(k, sizeof(*cl->sges));
	cl->values = calloc((size_t)k * w, sizeof(*cl->values));
	cl->doorbells = calloc(w, sizeof(*cl->doorbells));
	if (!cl->wrs || !cl->sges || !cl->values || !cl->doorbells)
		return fail("calloc(work requests)", ENOMEM);
	for (uint32_t i = 0; i < w; i++)
		cl->doorbells[i].values = cl->values + (size_t)i * k;
	err = values_register(cl); /* --no-inline */
	if (err)
		return err;
	cl->max_rtts =
		doorbells < RTT_SAMPLES ? (uint32_t)doorbells : RTT_SAMPLES;
	cl->rtts = calloc(cl->max_rtts, sizeof(*cl->rtts));
	return cl->rtts ? 0 : fail("calloc(round trips)", ENOMEM);
}

#define TRANSPORT_RETRIES 6 /* resends; 7 is "forever" on Soft-RoCE */
#define RNR_RETRY_FOREVER 7 /* 7: retry "receiver not ready" forever */
/* How long the NIC waits for an acknowledgement before it resends, as an
 * exponent: 4.096 us * 2^16 = 0.27 s; with TRANSPORT_RETRIES resends, a
 * server gone mid-stream fails our next work request in about 2 s.  Unset,
 * it comes from the kernel CM and varies by kernel (docs/retry-counts.md). */
#define ACK_TIMEOUT_EXP 16

/* rdma_connect() sends a connect request (CM REQ).  When the reply (REP)
 * comes, rdma_get_cm_event() moves our QP to RTR (ready to receive) and
 * RTS (ready to send), sends the RTU and reports ESTABLISHED.  Of the
 * counts, retry is both QPs', rnr_retry the server's (retry-counts.md). */
static int cm_connect(struct client *cl)
{
	struct rdma_conn_param param = {
		.retry_count = TRANSPORT_RETRIES,
		.rnr_retry_count = RNR_RETRY_FOREVER,
	};
	uint8_t ack_timeout = ACK_TIMEOUT_EXP;
	int err;

	if (rdma_set_option(cl->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &ack_timeout, sizeof(ack_timeout)))
		return fail("rdma_set_option(ACK_TIMEOUT)", errno);
	if (rdma_connect(cl->id, &param))
		return fail("rdma_connect", errno);
	err = cm_wait(cl, RDMA_CM_EVENT_ESTABLISHED);
	if (!err)
		printf("connect server=%s port=%u qp=0x%" PRIx32 "\n",
		       cl->opt.server, cl->opt.port, cl->id->qp->qp_num);
	return err;
}

/* Busy-poll the CQ for one completion: the fastest wait, a core's price. */
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
	return wc->status == IBV_WC_SUCCESS ? 0 : wc_failed(wc);
}

/* A SEND into a receive the server posted; signaled: a work completion
 * (WC) once acknowledged.  It and the reply's come in either order. */
static int slice_request(struct client *cl)
{
	struct ctrl_msg req = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = CTRL_REQ_ALLOC,
		.size = cl->opt.size,
	}, reply;
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
	}, *bad;
	struct ibv_wc wc;
	uint32_t reply_len = 0;
	int ret;

	msg_encode(&req, cl->ctrl[0]);
	ret = ibv_post_send(cl->id->qp, &wr, &bad);
	if (ret)
		return fail("ibv_post_send(request)", ret);
	for (int done = 0; done < 2; done++) {
		ret = cq_wait(cl, &wc);
		if (ret)
			return ret;
		/* a reply is a SEND; anything else in its receive is none */
		if (wc.wr_id == WRID_REPLY && wc.opcode == IBV_WC_RECV)
			reply_len = wc.byte_len;
	}
	if (msg_decode(cl->ctrl[1], reply_len, &reply) ||
	    reply.type != CTRL_RESP_ALLOC)
		return slice_refused(cl, NULL);
	if (reply.status || reply.size < sizeof(uint32_t))
		return slice_refused(cl, &reply);
	cl->remote_addr = reply.addr;
	cl->rkey = reply.rkey;
	cl->slots = reply.size / sizeof(uint32_t);
	printf("granted addr=0x%" PRIx64 " rkey=0x%" PRIx32 " size=%" PRIu32
	       "\n",
	       reply.addr, reply.rkey, reply.size);
	return 0;
}

/* count writes from first on, chained by .next; the server's NIC checks
 * each remote_addr against the rkey.  The last is the doorbell: signaled,
 * and its immediate value lands in the completion of a server receive. */
static void batch_fill(struct client *cl, uint32_t first, uint32_t count,
		       struct doorbell *doorbell)
{
	for (uint32_t k = 0; k < count; k++) {
		uint32_t i = first + k, slot = (i - 1) % cl->slots;
		bool is_doorbell = k == count - 1;

		doorbell->values[k] = htobe32(i);
		cl->sges[k] = (struct ibv_sge){
			.addr = (uintptr_t)&doorbell->values[k],
			.length = sizeof(uint32_t),
			.lkey = cl->values_mr ? cl->values_mr->lkey : 0,
		};
		cl->wrs[k] = (struct ibv_send_wr){
			.wr_id = i,
			.next = is_doorbell ? NULL : &cl->wrs[k + 1],
			.sg_list = &cl->sges[k],
			.num_sge = 1,
			.opcode = is_doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM
					      : IBV_WR_RDMA_WRITE,
			.send_flags =
				(cl->opt.inline_data ? IBV_SEND_INLINE : 0) |
				(is_doorbell ? IBV_SEND_SIGNALED : 0),
			.imm_data = is_doorbell ? htobe32(i) : 0,
			.wr.rdma.remote_addr =
				cl->remote_addr +
				(uint64_t)slot * sizeof(uint32_t),
			.wr.rdma.rkey = cl->rkey,
		};
	}
	doorbell->seq = first + (count - 1);
}

/* All K with one ibv_post_send(): one notice to the NIC (a register write
 * on hardware; a system call on Soft-RoCE) for the whole batch. */
static int batch_post(struct client *cl, uint32_t first, uint32_t count)
{
	struct doorbell *doorbell = &cl->doorbells[cl->posted % cl->opt.window];
	struct ibv_send_wr *bad;
	int ret;

	batch_fill(cl, first, count, doorbell);
	cl->posted++;
	if (cl->opt.post_each)
		return batch_post_each(cl, doorbell);
	doorbell->posted = now_seconds();
	ret = ibv_post_send(cl->id->qp, cl->wrs, &bad);
	return ret ? fail("ibv_post_send(writes)", ret) : 0;
}

/* The doorbell's completion: it and every write before it acknowledged.
 * Completions come in order: the oldest doorbell in flight is next. */
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
	if (cl->nrtts < cl->max_rtts)
		cl->rtts[cl->nrtts++] = now_seconds() - doorbell->posted;
	if (!cl->opt.quiet)
		printf("doorbell seq=%" PRIu32 " completed\n", doorbell->seq);
	return 0;
}

/* Post a batch (ending at each multiple of K, and at N), wait for its
 * doorbell once W are in flight (--window), repeat. */
static int stream(struct client *cl)
{
	uint64_t n = cl->opt.writes, first, count;
	double start = now_seconds();
	int err = 0;

	for (first = 1; !err && first <= n; first += count) {
		count = n - first + 1 < cl->opt.every ? n - first + 1
						      : cl->opt.every;
		err = batch_post(cl, (uint32_t)first, (uint32_t)count);
		while (!err && cl->posted - cl->completed == cl->opt.window)
			err = doorbell_wait(cl);
	}
	while (!err && cl->posted != cl->completed)
		err = doorbell_wait(cl);
	if (!err)
		stream_report(cl, now_seconds() - start);
	return err;
}

/* Goodbye: our QP to the error state (what is left in it completes with a
 * flush error), a disconnect request (CM DREQ) out. */
static int cm_disconnect(struct client *cl)
{
	if (rdma_disconnect(cl->id))
		return fail("rdma_disconnect", errno);
	return cm_wait(cl, RDMA_CM_EVENT_DISCONNECTED);
}

/* The lesson's steps, in order; then a goto ladder undoes them in reverse
 * (common.h): a failed step jumps to the label that names what it must
 * undo, and each undoing step copes with a step half done. */
int main(int argc, char **argv)
{
	struct client cl = { 0 };
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	err = parse_options(argc, argv, &cl.opt);
	if (err || cl.opt.help)
		goto out;
	err = devices_check();
	if (err)
		goto out;
	err = cm_resolve(&cl);
	if (err)
		goto out_destroy_id;
	err = verbs_open(&cl);
	if (err)
		goto out_destroy_verbs;
	err = stream_open(&cl);
	if (!err)
		err = cm_connect(&cl);
	if (err)
		goto out_free_stream;
	err = slice_request(&cl);
	if (!err)
		err = step_pause(&cl, "granted"); /* --step: for make demo */
	if (!err)
		err = stream(&cl);
	if (!err)
		err = step_pause(&cl, "streamed");
	err = undo(err, NULL, cm_disconnect(&cl));
out_free_stream:
	if (cl.values_mr)
		err = undo(err, "ibv_dereg_mr", ibv_dereg_mr(cl.values_mr));
	free(cl.rtts);
	free(cl.doorbells);
	free(cl.values);
	free(cl.sges);
	free(cl.wrs);
out_destroy_verbs: /* the QP first: its CQ and PD are in use till then */
	if (cl.id && cl.id->qp)
		rdma_destroy_qp(cl.id);
	if (cl.ctrl_mr)
		err = undo(err, "ibv_dereg_mr", ibv_dereg_mr(cl.ctrl_mr));
	if (cl.cq)
		err = undo(err, "ibv_destroy_cq", ibv_destroy_cq(cl.cq));
	if (cl.pd)
		err = undo(err, "ibv_dealloc_pd", ibv_dealloc_pd(cl.pd));
out_destroy_id:
	if (cl.id && rdma_destroy_id(cl.id))
		err = undo(err, "rdma_destroy_id", errno);
	if (cl.events)
		rdma_destroy_event_channel(cl.events);
out:
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ==== Beyond the core path: a first read may skip ======================= */

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
		"      --step                 once granted, and once streamed, "
		"print\n"
		"                             'pause after=...' and wait for a "
		"line on stdin\n"
		"  -h, --help                 show this text\n",
		DEFAULT_PORT, DEFAULT_WRITES, DEFAULT_DOORBELL_EVERY,
		DEFAULT_WINDOW);
}

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
		{ "step", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, writes = DEFAULT_WRITES, size = 0;
	uint64_t every = DEFAULT_DOORBELL_EVERY, window = DEFAULT_WINDOW;
	const struct {
		int key;
		const char *what;
		uint64_t min, max, *value;
	} numbers[] = {
		{ 'p', "port", 1, UINT16_MAX, &port },
		{ 'n', "number of writes", 0, UINT32_MAX, &writes },
		{ 'k', "doorbell interval", 1, UINT32_MAX, &every },
		{ 'w', "window", 1, UINT32_MAX, &window },
	};
	size_t i, n = sizeof(numbers) / sizeof(numbers[0]);
	int c, err = 0;

	opt->inline_data = true;
	opterr = 0; /* our messages, not getopt's */
	while (!err && (c = getopt_long(argc, argv, "p:n:k:w:qh", longopts,
					NULL)) != -1) {
		for (i = 0; i < n && numbers[i].key != c; i++)
			;
		if (i < n) {
			err = parse_number(numbers[i].what, optarg,
					   numbers[i].min, numbers[i].max,
					   numbers[i].value);
		} else if (c == 'I') {
			opt->inline_data = false;
		} else if (c == 'E') {
			opt->post_each = true;
		} else if (c == 'q') {
			opt->quiet = true;
		} else if (c == 'S') {
			opt->step = true;
		} else if (c == 'h') {
			opt->help = true;
			usage(stdout);
			return 0;
		} else {
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

/* The server's address, with our port, as for a socket. */
static int server_addr(struct client *cl, struct sockaddr_storage *addr)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC }, *ai;
	int ret = getaddrinfo(cl->opt.server, NULL, &hints, &ai);

	if (ret) {
		errorf("cannot resolve '%s': %s", cl->opt.server,
		       gai_strerror(ret));
		return -EINVAL;
	}
	memcpy(addr, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (addr->ss_family == AF_INET)
		((struct sockaddr_in *)addr)->sin_port = htons(cl->opt.port);
	else
		((struct sockaddr_in6 *)addr)->sin6_port = htons(cl->opt.port);
	return 0;
}

/* Text from the network, for a terminal: a byte outside printable ASCII, or
 * a backslash, as \xNN: an escape sequence could retitle or rewrite it. */
static const char *shown(const char *text, size_t len, char *out, size_t size)
{
	size_t n = 0;

	for (size_t i = 0; i < len && n + 5 <= size; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			out[n++] = (char)c;
		else
			n += (size_t)snprintf(out + n, size - n, "\\x%02x", c);
	}
	out[n] = '\0';
	return out;
}

/* cm_wait() got another event: say which, then ack it (a rejection's reason
 * is in its private data, valid only until the ack).  A rejecting server
 * says why in a string, shown escaped: anyone on the network may be that
 * server.  A port nobody listens on is rejected by its kernel with zeros. */
static int cm_unexpected(struct client *cl, struct rdma_cm_event *event,
			 enum rdma_cm_event_type expected)
{
	const char *data = event->param.conn.private_data;
	size_t len =
		data ? strnlen(data, event->param.conn.private_data_len) : 0;
	bool rejected = event->event == RDMA_CM_EVENT_REJECTED;
	char reason[4 * UINT8_MAX + 1]; /* private_data_len is a u8 */
	char where[320];		/* IPv6: [ADDR]:PORT, as in URLs */

	snprintf(where, sizeof(where),
		 strchr(cl->opt.server, ':') ? "[%s]:%u" : "%s:%u",
		 cl->opt.server, cl->opt.port);
	if (rejected)
		errorf("%s rejected the connection: %s", where,
		       len ? shown(data, len, reason, sizeof(reason))
			   : "is a server listening there?");
	else
		errorf("waiting for %s, got %s (status %d)",
		       rdma_event_str(expected), rdma_event_str(event->event),
		       event->status);
	rdma_ack_cm_event(event);
	return rejected ? -ECONNREFUSED : -EPROTO;
}

/* A work request failed, named by its wr_id: for a failed completion only
 * wr_id, status and qp_num are defined. */
static int wc_failed(const struct ibv_wc *wc)
{
	char what[32]; /* "write " and a 64-bit number */

	if (wc->wr_id == WRID_REQ || wc->wr_id == WRID_REPLY)
		strcpy(what, wc->wr_id == WRID_REQ ? "request" : "reply");
	else
		snprintf(what, sizeof(what), "write %" PRIu64, wc->wr_id);
	errorf("%s failed: %s (%s)", what, wc_status_name(wc->status),
	       ibv_wc_status_str(wc->status));
	return -EIO;
}

/* No grant: not a RESP_ALLOC, a denial (printed; we fail with its status),
 * or too small for one slot.  The status comes from the server: only a
 * small positive one is an errno value (Linux's are below 4096). */
#define MAX_ERRNO 4095

static int slice_refused(struct client *cl, const struct ctrl_msg *reply)
{
	if (reply && reply->status && reply->status <= MAX_ERRNO) {
		int status = (int)reply->status;

		printf("denied size=%" PRIu32 " status=%s\n", cl->opt.size,
		       errno_name(status));
		errorf("the server denied %" PRIu32 " bytes: %s (%s)",
		       cl->opt.size, errno_name(status), strerror(status));
		return -status;
	}
	if (!reply)
		errorf("the server's reply is not a RESP_ALLOC");
	else if (reply->status)
		errorf("the server's reply has status %" PRIu32
		       ", which is no errno value",
		       reply->status);
	else
		errorf("the server granted %" PRIu32
		       " bytes, too few for one slot",
		       reply->size);
	return -EBADMSG;
}

/* --step: while we wait, the QP, the slice and the server's view of them
 * stay as they are, and make demo shows what the kernel holds for both. */
static int step_pause(struct client *cl, const char *after)
{
	char line[64];

	if (!cl->opt.step)
		return 0;
	printf("pause after=%s\n", after);
	if (!fgets(line, sizeof(line), stdin) && ferror(stdin))
		return fail("reading stdin (--step)", EIO);
	return 0;
}

/* The send queue holds W batches of K, and retires its entries in order: a
 * doorbell's completion also frees those of its batch's unsignaled writes. */
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

/* The device may refuse a depth max_qp_wr allows (mlx5 reserves room for a
 * larger work request in every entry), saying only EINVAL: say what made it. */
static int qp_fail(struct client *cl, int err)
{
	report("rdma_create_qp", err);
	if (err == EINVAL)
		errorf("the send queue holds %" PRIu32 " doorbells in flight "
		       "(-w) of %" PRIu32 " writes each (-k): %" PRIu64
		       " work requests; try a smaller -k or -w",
		       cl->opt.window, cl->opt.every,
		       (uint64_t)cl->opt.every * cl->opt.window);
	return -err;
}

/* --no-inline: the NIC fetches each value from memory when it sends the
 * write, maybe long after ibv_post_send() returned: so the values must be
 * registered, and each set untouched till its doorbell completes (the ring). */
static int values_register(struct client *cl)
{
	size_t n = (size_t)cl->opt.every * cl->opt.window;

	if (cl->opt.inline_data)
		return 0;
	cl->values_mr =
		ibv_reg_mr(cl->pd, cl->values, n * sizeof(*cl->values), 0);
	return cl->values_mr ? 0 : fail("ibv_reg_mr(values)", errno);
}

/* --post-each: one ibv_post_send() per write, to measure what the list is
 * worth; the doorbell's round trip starts with the call that carries it. */
static int batch_post_each(struct client *cl, struct doorbell *doorbell)
{
	struct ibv_send_wr *wr, *next, *bad;
	int ret;

	for (wr = cl->wrs; wr; wr = next) {
		next = wr->next;
		wr->next = NULL;
		if (!next)
			doorbell->posted = now_seconds();
		ret = ibv_post_send(cl->id->qp, wr, &bad);
		if (ret)
			return fail("ibv_post_send(write)", ret);
	}
	return 0;
}

static int seconds_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The summary, then the round trips, from ibv_post_send() to a doorbell's
 * completion: the write crossing to the server's NIC and the
 * acknowledgement coming back (with a window, also the wait behind earlier
 * batches); median and p99 (nearest rank) of the first RTT_SAMPLES. */
static void stream_report(struct client *cl, double seconds)
{
	uint32_t n = cl->nrtts;

	printf("done writes=%" PRIu32 " doorbells=%" PRIu32 " seconds=%.3f "
	       "writes_per_s=%.0f\n",
	       cl->opt.writes, cl->completed, seconds,
	       seconds > 0 ? (double)cl->opt.writes / seconds : 0.0);
	if (!n)
		return;
	qsort(cl->rtts, n, sizeof(*cl->rtts), seconds_cmp);
	printf("rtt doorbells=%" PRIu32 " median_us=%.1f p99_us=%.1f "
	       "max_us=%.1f\n",
	       n, cl->rtts[(n - 1) / 2] * 1e6,
	       cl->rtts[((uint64_t)n * 99 + 99) / 100 - 1] * 1e6,
	       cl->rtts[n - 1] * 1e6);
}
