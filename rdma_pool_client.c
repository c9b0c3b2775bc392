/*
 * rdma_pool_client.c - borrows a slice of a server's memory and writes into
 * it with one-sided RDMA WRITEs, ringing a doorbell every K writes.
 *
 * The story, in the order this file tells it:
 *
 *   1. Find the server: the connection manager (librdmacm) turns an IP
 *      address into a route through an RDMA device, like connect() would.
 *   2. Build the verbs objects on that device: a protection domain, a
 *      completion queue, a reliable-connected queue pair, and a registered
 *      buffer for the two control messages.
 *   3. Connect, then ask for memory: SEND a REQ_ALLOC, RECV the RESP_ALLOC
 *      with the slice's address, its rkey (the key that lets our NIC write
 *      into the server's memory) and its size.
 *   4. Stream: write i (i = 1..N) puts the value i into slot (i-1) % slots
 *      of the slice.  The server's CPU never sees these writes, so every
 *      K-th write (and the last) is an RDMA WRITE WITH IMMEDIATE: it writes
 *      its slot like the others but also consumes a receive on the server,
 *      which completes there with imm = i.  That is the doorbell.
 *   5. Disconnect and take everything down in reverse order.
 *
 * Step 4 is where the speed is.  Each write is tiny, so what costs is the
 * work per work request, not the bytes: the values travel inline, a whole
 * batch goes to the NIC with one ibv_post_send(), and with --window W the
 * next batches are posted while earlier doorbells are still on the wire.
 * --no-inline and --post-each undo the first two, to measure what each
 * is worth (make bench does).
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
#include <time.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"

#define DEFAULT_WRITES 1000
#define DEFAULT_DOORBELL_EVERY 32
#define DEFAULT_WINDOW 1 /* wait for each doorbell before the next batch */
#define RTT_SAMPLES (1u << 20) /* round trips kept for the statistics */
#define RESOLVE_TIMEOUT_MS 2000 /* for address and route resolution */
/*
 * How long any one wait may take: a CM event, a reply, a doorbell.  A
 * server that dies mid-stream shows up sooner, as a failed completion, once
 * the NIC has given up its retries.
 */
#define WAIT_TIMEOUT_MS 10000
/*
 * Resends of an unacknowledged packet before the work request fails.  The
 * verbs allow up to 7, but Soft-RoCE reads 7 as "forever", as the spec does
 * only for rnr_retry_count: 6 is the most that still ends.
 */
#define TRANSPORT_RETRIES 6
#define ACK_TIMEOUT_EXP 16 /* see ack_timeout_set() */
/* rnr_retry_count 7 is special: the NIC retries "receiver not ready" forever */
#define RNR_RETRY_FOREVER 7

/* wr_id of the two control-message work requests; write i has wr_id i. */
#define WRID_REQ 0
#define WRID_REPLY UINT64_MAX

struct options {
	const char *server;
	uint32_t size;
	uint16_t port;
	uint32_t writes;
	uint32_t every;
	uint32_t window;
	bool inline_data;
	bool post_list;
	bool quiet;
	bool help;
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
	/* The values of the W batches that may be in flight, registered for
	 * --no-inline, where the NIC reads them from here. */
	uint32_t *values;
	struct ibv_mr *values_mr;

	/* Doorbells posted and not completed yet, oldest first (a ring of
	 * W), and the round trip of each one completed. */
	struct pending {
		uint32_t seq;
		double posted;
	} *pending;
	double *rtts;
	uint32_t nrtts, max_rtts;
};

/* ---- command line ------------------------------------------------------- */

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
	opt->post_list = true;
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
			opt->post_list = false;
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

/* ---- the connection manager --------------------------------------------- */

/*
 * A rejecting server says why in the reject message's private data (a
 * string); a port nobody listens on is rejected by the remote kernel with
 * none.  Only valid until the event is acknowledged.
 */
static void reject_reason(const struct rdma_cm_event *event, char *buf,
			  size_t len)
{
	const char *data = event->param.conn.private_data;
	size_t n = data ? event->param.conn.private_data_len : 0;

	if (n >= len)
		n = len - 1;
	if (n)
		memcpy(buf, data, n);
	buf[n] = '\0';
}

/*
 * Wait, at most WAIT_TIMEOUT_MS, for the next CM event and check that it is
 * the one the protocol expects now.  The event is acknowledged once what is
 * needed of it has been copied out.
 */
static int cm_wait(struct client *cl, enum rdma_cm_event_type expected)
{
	struct pollfd pfd = { .fd = cl->events->fd, .events = POLLIN };
	struct rdma_cm_event *event;
	enum rdma_cm_event_type type;
	char reason[64] = "";
	int ret, status;

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
	type = event->event;
	status = event->status;
	if (type == RDMA_CM_EVENT_REJECTED)
		reject_reason(event, reason, sizeof(reason));
	rdma_ack_cm_event(event);
	if (type == expected)
		return 0;

	if (type == RDMA_CM_EVENT_REJECTED && reason[0]) {
		errorf("%s:%u rejected the connection: %s", cl->opt.server,
		       cl->opt.port, reason);
	} else if (type == RDMA_CM_EVENT_REJECTED) {
		errorf("%s:%u rejected the connection: is a server listening "
		       "there?",
		       cl->opt.server, cl->opt.port);
	} else {
		errorf("waiting for %s, got %s (status %d)",
		       rdma_event_str(expected), rdma_event_str(type), status);
	}
	return type == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED : -EPROTO;
}

/*
 * Name to address with getaddrinfo(), as for a socket; then the connection
 * manager resolves that address to a local RDMA device and port (which
 * binds the cm_id to a device, so id->verbs is set from here on), and the
 * route to the server.
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

/* ---- verbs objects ------------------------------------------------------ */

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
 * The send queue holds W batches of K work requests: a send queue retires
 * its entries in order, so a doorbell completing is what frees its own
 * slot and those of the K - 1 unsignaled writes before it.  If the QP
 * fails, every outstanding request completes with an error, signaled or
 * not, so the CQ is as deep as both queues together.
 */
static int verbs_open(struct client *cl)
{
	uint64_t depth = (uint64_t)cl->opt.every * cl->opt.window;
	uint64_t doorbells = (uint64_t)cl->opt.writes / cl->opt.every + 1;
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap.max_send_wr = (uint32_t)depth,
		.cap.max_recv_wr = 1,
		.cap.max_send_sge = 1,
		.cap.max_recv_sge = 1,
		/* room for a 4-byte value inside each work request */
		.cap.max_inline_data =
			cl->opt.inline_data ? sizeof(uint32_t) : 0,
	};
	struct ibv_device_attr dev;
	int ret;

	ret = ibv_query_device(cl->id->verbs, &dev);
	if (ret)
		return fail("ibv_query_device", ret);
	if (depth > (uint64_t)dev.max_qp_wr) {
		errorf("%" PRIu32 " doorbells in flight, one every %" PRIu32
		       " writes, need a send queue %" PRIu64
		       " deep; %s allows %d",
		       cl->opt.window, cl->opt.every, depth,
		       ibv_get_device_name(cl->id->verbs->device),
		       dev.max_qp_wr);
		return -EINVAL;
	}

	cl->pd = ibv_alloc_pd(cl->id->verbs);
	if (!cl->pd)
		return fail("ibv_alloc_pd", errno);
	cl->cq = ibv_create_cq(cl->id->verbs, (int)depth + 1, NULL, NULL, 0);
	if (!cl->cq)
		return fail("ibv_create_cq", errno);
	attr.send_cq = cl->cq;
	attr.recv_cq = cl->cq;
	if (rdma_create_qp(cl->id, cl->pd, &attr))
		return fail("rdma_create_qp", errno);
	cl->has_qp = true;

	/* The control messages go through registered memory: the NIC reads
	 * the request from it and writes the reply into it. */
	cl->ctrl_mr = ibv_reg_mr(cl->pd, cl->ctrl, sizeof(cl->ctrl),
				 IBV_ACCESS_LOCAL_WRITE);
	if (!cl->ctrl_mr)
		return fail("ibv_reg_mr", errno);

	cl->wrs = calloc(cl->opt.every, sizeof(*cl->wrs));
	cl->sges = calloc(cl->opt.every, sizeof(*cl->sges));
	cl->values = calloc(depth, sizeof(*cl->values));
	cl->pending = calloc(cl->opt.window, sizeof(*cl->pending));
	cl->max_rtts = doorbells < RTT_SAMPLES ? (uint32_t)doorbells
					       : RTT_SAMPLES;
	cl->rtts = calloc(cl->max_rtts, sizeof(*cl->rtts));
	if (!cl->wrs || !cl->sges || !cl->values || !cl->pending || !cl->rtts)
		return fail("calloc(work requests)", ENOMEM);
	/* Without inline data the NIC fetches each value from memory when it
	 * sends the write, which may be long after ibv_post_send() returned:
	 * so the memory must be registered, and a value must stay untouched
	 * until its batch has completed. */
	if (!cl->opt.inline_data) {
		cl->values_mr = ibv_reg_mr(cl->pd, cl->values,
					   depth * sizeof(*cl->values), 0);
		if (!cl->values_mr)
			return fail("ibv_reg_mr(values)", errno);
	}

	/* Post the receive for the reply before anything can be sent: a
	 * message that finds no receive waiting is answered "receiver not
	 * ready" and has to be retried. */
	return recv_post_reply(cl);
}

/*
 * Connect.  retry_count is how often our NIC resends a packet the server's
 * NIC did not acknowledge before failing the work request; rnr_retry_count
 * how often it retries when the server had no receive posted.  The server's
 * SRQ can run dry for a moment under load, and waiting is the right answer
 * then, so: forever.
 */
static int cm_connect(struct client *cl)
{
	struct rdma_conn_param param = {
		.retry_count = TRANSPORT_RETRIES,
		.rnr_retry_count = RNR_RETRY_FOREVER,
	};
	int err;

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

/* ---- completions -------------------------------------------------------- */

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Busy-poll the CQ for one completion: the lowest latency there is, at the
 * price of a core while waiting.  A failed completion is reported with the
 * work request it belongs to.
 */
static int cq_wait(struct client *cl, struct ibv_wc *wc)
{
	double deadline = now_seconds() + WAIT_TIMEOUT_MS / 1000.0;
	unsigned int spins = 0;
	int n;

	while ((n = ibv_poll_cq(cl->cq, 1, wc)) == 0) {
		if (++spins % 4096 == 0 && now_seconds() > deadline) {
			errorf("no completion "
			       "within %d ms",
			       WAIT_TIMEOUT_MS);
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
		errorf("write %" PRIu64 " failed: "
		       "%s (%s)",
		       wc->wr_id, wc_status_name(wc->status),
		       ibv_wc_status_str(wc->status));
	return -EIO;
}

/* ---- asking for memory -------------------------------------------------- */

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
		errorf("the server's reply is not "
		       "a RESP_ALLOC");
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
 * Writes first..last as one list of work requests, the last of them the
 * doorbell: only it asks for a completion (IBV_SEND_SIGNALED) and carries
 * an immediate value; the others complete silently.
 *
 * Each work request costs the NIC (and Soft-RoCE, a system call per
 * ibv_post_send()) more than its 4 bytes do, hence two things:
 *   - IBV_SEND_INLINE: the library copies the value into the work request
 *     itself, so the NIC need not fetch it from memory in a second step;
 *     the value's memory needs no registration and may be reused at once.
 *   - one ibv_post_send() for the whole list: one doorbell ring of our own
 *     (the MMIO write or system call that tells the NIC to look at its
 *     queue) per K writes instead of one per write.
 * --no-inline and --post-each turn these off, to measure them.
 */
static int batch_post(struct client *cl, uint32_t first, uint32_t last)
{
	uint32_t batch = (first - 1) / cl->opt.every;
	uint32_t *values =
		cl->values + (size_t)(batch % cl->opt.window) * cl->opt.every;
	struct pending *doorbell = &cl->pending[batch % cl->opt.window];
	unsigned int flags = cl->opt.inline_data ? IBV_SEND_INLINE : 0;
	struct ibv_send_wr *wr, *next, *bad;
	uint32_t count = last - first + 1;

	for (uint32_t k = 0; k < count; k++) {
		uint32_t i = first + k;
		bool is_doorbell = i == last;

		values[k] = htobe32(i);
		cl->sges[k] = (struct ibv_sge){
			.addr = (uintptr_t)&values[k],
			.length = sizeof(values[k]),
			.lkey = cl->values_mr ? cl->values_mr->lkey : 0,
		};
		cl->wrs[k] = (struct ibv_send_wr){
			.wr_id = i,
			.next = is_doorbell ? NULL : &cl->wrs[k + 1],
			.sg_list = &cl->sges[k],
			.num_sge = 1,
			.opcode = is_doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM
					      : IBV_WR_RDMA_WRITE,
			.send_flags = flags |
				      (is_doorbell ? IBV_SEND_SIGNALED : 0),
			.imm_data = is_doorbell ? htobe32(i) : 0,
			.wr.rdma.remote_addr =
				cl->remote_addr +
				(uint64_t)((i - 1) % cl->slots) *
					sizeof(uint32_t),
			.wr.rdma.rkey = cl->rkey,
		};
	}

	doorbell->seq = last;
	if (cl->opt.post_list) {
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

/*
 * The doorbell's completion means the server's NIC has acknowledged it, and
 * on a reliable connection that acknowledges every write before it too.
 * Doorbells complete in the order they were posted: the oldest one pending
 * is the one to come.
 */
static int doorbell_wait(struct client *cl, const struct pending *doorbell)
{
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
	if (cl->nrtts < cl->max_rtts)
		cl->rtts[cl->nrtts++] = now_seconds() - doorbell->posted;
	if (!cl->opt.quiet)
		printf("doorbell seq=%" PRIu32 " completed\n", doorbell->seq);
	return 0;
}

/*
 * Batches end at every multiple of K, and at N.  Up to W of them are in
 * flight: with W = 1 the send queue runs empty while each doorbell makes
 * its round trip; with more, the NIC always has the next batch to send.
 */
static int stream(struct client *cl)
{
	uint64_t n = cl->opt.writes, next = 1; /* the next write to post */
	uint32_t posted = 0, completed = 0;    /* batches */
	double start = now_seconds(), seconds;
	int err = 0;

	while (!err && (next <= n || completed < posted)) {
		if (next <= n && posted - completed < cl->opt.window) {
			uint64_t last = next - 1 + cl->opt.every;

			if (last > n)
				last = n;
			err = batch_post(cl, (uint32_t)next, (uint32_t)last);
			next = last + 1;
			posted++;
		} else {
			err = doorbell_wait(
				cl, &cl->pending[completed % cl->opt.window]);
			completed++;
		}
	}
	if (err)
		return err;
	seconds = now_seconds() - start;
	printf("done writes=%" PRIu64 " doorbells=%" PRIu32 " seconds=%.3f "
	       "writes_per_s=%.0f\n",
	       n, completed, seconds, seconds > 0 ? (double)n / seconds : 0.0);
	return 0;
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

/* ---- the end ------------------------------------------------------------ */

/* Say goodbye properly, so that the server frees our slice at once. */
static int cm_disconnect(struct client *cl)
{
	cl->connected = false;
	if (rdma_disconnect(cl->id))
		return fail("rdma_disconnect", errno);
	return cm_wait(cl, RDMA_CM_EVENT_DISCONNECTED);
}

/* Everything in reverse order of creation; safe on a half-built client. */
static void client_close(struct client *cl)
{
	free(cl->rtts);
	free(cl->pending);
	if (cl->values_mr)
		check("ibv_dereg_mr", ibv_dereg_mr(cl->values_mr));
	free(cl->values);
	free(cl->sges);
	free(cl->wrs);
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
		err = ack_timeout_set(&cl);
	if (!err)
		err = verbs_open(&cl);
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
