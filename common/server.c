/*
 * server.c - what the two servers share beyond their core paths, written
 * once: a first read of either server may skip it.  Options, signals and
 * reports; troubles; limits and refusals; deadlines and keepalive; the end
 * of all connections; and --isolation.  server.h lists it, and the
 * hooks: the core-path functions of each server's own file that this
 * calls back.
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/server.h"

/* ---- the command line --------------------------------------------------- */

#define DEFAULT_SRQ_DEPTH 128
#define MAX_SRQ_DEPTH 65536 /* ours; the device may allow fewer */
/* Connections at once (--max-conns): it sizes the CQ, see cq_open(). */
#define DEFAULT_MAX_CONNS 64
#define MAX_MAX_CONNS 1024
/* The deadlines of conns_watch(), in ms. */
#define DEFAULT_HANDSHAKE_MS 5000
#define DEFAULT_REQUEST_MS 10000
#define DEFAULT_KEEPALIVE_MS 10000
/* Connections from one address in their handshake at once, see
 * conn_refusal(). */
#define DEFAULT_HANDSHAKES_PER_SOURCE 16
/* Connections of one address that may break in a minute, breaks_count(). */
#define DEFAULT_BREAKS_PER_SOURCE 4
#define BREAK_WINDOW_S 60.0
#define MAX_DEADLINE_MS 600000
/* Hybrid polling (--busy-poll-us), see spin_on(). */
#define DEFAULT_BUSY_POLL_US 200
#define MAX_BUSY_POLL_US 1000000

static void usage(FILE *out, bool busy_poll)
{
	fprintf(out,
		"usage: %s [options]\n"
		"  -p, --port PORT        port to listen on, 0 for any free one\n"
		"                         (default %d)\n"
		"  -a, --address ADDR     address to listen on, IPv4 or IPv6\n"
		"                         (default ::, every address of both\n"
		"                         families)\n"
		"      --pool-size BYTES  size of each RDMA device's pool, a\n"
		"                         multiple of %d (default %u)\n"
		"      --srq-depth N      receives kept posted (default %d)\n"
		"      --max-conns N      clients at once (default %d)\n"
		"      --isolation MODE   none: every client gets the pool's\n"
		"                         rkey (default); mr: a region over its\n"
		"                         own slice\n"
		"      --handshake-timeout-ms MS\n"
		"                         close a connection not established\n"
		"                         that long after its accept (default %d)\n"
		"      --handshakes-per-source N\n"
		"                         connections from one address in their\n"
		"                         handshake at once; more are refused\n"
		"                         (default %d)\n"
		"      --breaks-per-source N\n"
		"                         connections from one address whose QP\n"
		"                         may break (a wrong key, say) in a\n"
		"                         minute; then it is refused for the\n"
		"                         rest of that minute (default %d)\n"
		"      --request-timeout-ms MS\n"
		"                         close a connection that has sent no\n"
		"                         request that long after its accept\n"
		"                         (default %d)\n"
		"      --keepalive-ms MS  probe each established connection that\n"
		"                         often, and close it if a probe is not\n"
		"                         answered as long again; 0: never\n"
		"                         (default %d)\n",
		program_invocation_short_name, DEFAULT_PORT, POOL_CHUNK_SIZE,
		DEFAULT_POOL_SIZE, DEFAULT_SRQ_DEPTH, DEFAULT_MAX_CONNS,
		DEFAULT_HANDSHAKE_MS, DEFAULT_HANDSHAKES_PER_SOURCE,
		DEFAULT_BREAKS_PER_SOURCE, DEFAULT_REQUEST_MS,
		DEFAULT_KEEPALIVE_MS);
	if (busy_poll)
		fprintf(out,
			"      --busy-poll-us N   after a wake-up, poll the CQ for up\n"
			"                         to N us between completions before\n"
			"                         sleeping again; 0: never (default %d)\n",
			DEFAULT_BUSY_POLL_US);
	fprintf(out, "  -h, --help             show this text\n");
}

static int parse_isolation(const char *arg, enum isolation *isolation)
{
	static const char *const names[] = {
		[ISOLATION_NONE] = "none",
		[ISOLATION_MR] = "mr",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(arg, names[i]) == 0) {
			*isolation = (enum isolation)i;
			return 0;
		}
	errorf("bad isolation '%s': want none or mr", arg);
	return -EINVAL;
}

/* Fills opt from the arguments, or says what is wrong and fails; --help
 * prints the usage and sets opt->help.  --busy-poll-us only if busy_poll:
 * the event-driven server sleeps, the polling one never does. */
int parse_options(int argc, char **argv, bool busy_poll, struct options *opt)
{
	struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "address", required_argument, NULL, 'a' },
		{ "pool-size", required_argument, NULL, 'P' },
		{ "srq-depth", required_argument, NULL, 'S' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "isolation", required_argument, NULL, 'I' },
		{ "handshake-timeout-ms", required_argument, NULL, 'T' },
		{ "handshakes-per-source", required_argument, NULL, 'H' },
		{ "breaks-per-source", required_argument, NULL, 'X' },
		{ "request-timeout-ms", required_argument, NULL, 'R' },
		{ "keepalive-ms", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ "busy-poll-us", required_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, size = DEFAULT_POOL_SIZE;
	uint64_t srq_depth = DEFAULT_SRQ_DEPTH, max_conns = DEFAULT_MAX_CONNS;
	uint64_t handshake_ms = DEFAULT_HANDSHAKE_MS;
	uint64_t per_source = DEFAULT_HANDSHAKES_PER_SOURCE;
	uint64_t breaks = DEFAULT_BREAKS_PER_SOURCE;
	uint64_t request_ms = DEFAULT_REQUEST_MS;
	uint64_t keepalive_ms = DEFAULT_KEEPALIVE_MS;
	uint64_t busy_poll_us = DEFAULT_BUSY_POLL_US;
	int c, err = 0;

	if (!busy_poll) /* the table ends before it, the last */
		longopts[sizeof(longopts) / sizeof(longopts[0]) - 2] =
			(struct option){ NULL, 0, NULL, 0 };
	opt->address = "::";
	while ((c = getopt_long(argc, argv, "p:a:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'a':
			opt->address = optarg;
			break;
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
			err = parse_isolation(optarg, &opt->isolation);
			break;
		case 'T':
			err = parse_number("handshake timeout", optarg, 1,
					   MAX_DEADLINE_MS, &handshake_ms);
			break;
		case 'H':
			err = parse_number("handshakes per source", optarg, 1,
					   MAX_MAX_CONNS, &per_source);
			break;
		case 'X':
			err = parse_number("breaks per source", optarg, 1,
					   MAX_MAX_CONNS, &breaks);
			break;
		case 'R':
			err = parse_number("request timeout", optarg, 1,
					   MAX_DEADLINE_MS, &request_ms);
			break;
		case 'K':
			err = parse_number("keepalive time", optarg, 0,
					   MAX_DEADLINE_MS, &keepalive_ms);
			break;
		case 'B':
			err = parse_number("busy-poll time", optarg, 0,
					   MAX_BUSY_POLL_US, &busy_poll_us);
			break;
		case 'h':
			opt->help = true;
			usage(stdout, busy_poll);
			return 0;
		default:
			usage(stderr, busy_poll);
			return -EINVAL;
		}
		if (err)
			return err;
	}
	if (optind < argc) {
		errorf("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	opt->port = (uint16_t)port;
	opt->pool_size = (uint32_t)size;
	opt->srq_depth = (uint32_t)srq_depth;
	opt->max_conns = (uint32_t)max_conns;
	opt->handshake_ms = (uint32_t)handshake_ms;
	opt->handshakes_per_source = (uint32_t)per_source;
	opt->breaks_per_source = (uint32_t)breaks;
	opt->request_ms = (uint32_t)request_ms;
	opt->keepalive_ms = (uint32_t)keepalive_ms;
	opt->busy_poll_us = (uint32_t)busy_poll_us;
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
int signals_open(struct server *srv)
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
 * What is in use right now on one device, or on all (dev NULL).  Once
 * every client has gone, and its QP with it: 0 connections, 0 closing, 0
 * chunks, every receive posted and, in the event-driven server, every
 * reply buffer free; anything else was lost.
 */
static void stats_line(struct server *srv, const char *what,
		       const struct device *dev)
{
	unsigned int live = 0, closing = 0;
	uint32_t posted = 0, depth = 0, unused = 0, replies = 0;
	uint64_t doorbells = 0;
	size_t chunks = 0;
	char name[80] = "", buffers[64] = "";

	for (const struct conn *conn = srv->conns; conn; conn = conn->next) {
		if (dev && conn->dev != dev)
			continue;
		live += !conn->closing;
		closing += conn->closing;
	}
	for (unsigned int i = 0; i < srv->ndevices; i++) {
		const struct device *d = &srv->devices[i];

		if (dev && d != dev)
			continue;
		chunks += d->pool.used;
		doorbells += d->doorbells;
		posted += d->recvs_posted;
		depth += srv->opt.srq_depth;
		unused += d->nsend_free;
		replies += srv->opt.max_conns * SEND_DEPTH;
	}
	if (dev)
		snprintf(name, sizeof(name), " device=%s",
			 ibv_get_device_name(dev->verbs->device));
	if (srv->reply_buffer_put) /* the event-driven server's */
		snprintf(buffers, sizeof(buffers),
			 " replies_free=%" PRIu32 "/%" PRIu32, unused, replies);
	say(&srv->out,
	    "%s%s connections=%u chunks_in_use=%zu doorbells=%" PRIu64
	    " closing=%u recvs_posted=%" PRIu32 "/%" PRIu32 "%s\n",
	    what, name, live, chunks, doorbells, closing, posted, depth,
	    buffers);
}

/* A line for each device in use, then the sums of them all. */
static void stats_print(struct server *srv, const char *what)
{
	for (unsigned int i = 0; i < srv->ndevices; i++)
		stats_line(srv, what, &srv->devices[i]);
	stats_line(srv, what, NULL);
}

/*
 * Take a pending signal, if any.  SIGUSR1 prints the counters; SIGINT and
 * SIGTERM return their number, which ends the loop.  0: go on.
 */
int signal_take(struct server *srv)
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

/* 0.0.0.0 or ::, every address of its family. */
static bool any_address(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
	       htonl(INADDR_ANY);
}

/* The bind failed.  The wildcard is always there: the port is taken.  A
 * given address may be no address of this machine as well: rdma_cm says
 * EADDRNOTAVAIL for either. */
static int listen_fail(struct server *srv, bool wildcard, int err)
{
	if (err != EADDRINUSE && err != EADDRNOTAVAIL)
		return fail("rdma_bind_addr", err);
	if (wildcard)
		errorf("port %u is already in use (rdma_bind_addr: %s)",
		       srv->opt.port, strerror(err));
	else
		errorf("cannot listen on %s port %u: the port is in use, or "
		       "%s is no address of this machine (rdma_bind_addr: %s)",
		       srv->opt.address, srv->opt.port, srv->opt.address,
		       strerror(err));
	return -err;
}

/*
 * Bind the listener to -a ADDR (an address of either family, or a name:
 * its first address) and --port.  The default, "::", is every address of
 * both families: an IPv6 wildcard hears IPv4 connect requests too once
 * RDMA_OPTION_ID_AFONLY is 0, set here rather than left to the sysctl
 * net.ipv6.bindv6only, which rdma_bind_addr() follows otherwise (the
 * kernel's cma.c: rdma_bind_addr(), cma_match_private_data()).
 */
int listener_bind(struct server *srv)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM },
			*ai;
	char port[8];
	int afonly = 0, ret;
	bool wildcard;

	snprintf(port, sizeof(port), "%u", srv->opt.port);
	ret = getaddrinfo(srv->opt.address, port, &hints, &ai);
	if (ret) {
		errorf("cannot listen on '%s': %s", srv->opt.address,
		       gai_strerror(ret));
		return -EINVAL;
	}
	wildcard = any_address(ai->ai_addr);
	if (wildcard && ai->ai_family == AF_INET6 &&
	    rdma_set_option(srv->listener, RDMA_OPTION_ID,
			    RDMA_OPTION_ID_AFONLY, &afonly, sizeof(afonly)))
		ret = fail("rdma_set_option(AFONLY)", errno);
	else if (rdma_bind_addr(srv->listener, ai->ai_addr))
		ret = listen_fail(srv, wildcard, errno);
	freeaddrinfo(ai);
	return ret;
}

/* Refuse a connect request; the reason goes to the client as private
 * data.  A failure here concerns that client alone: said, not passed up. */
void conn_reject(struct server *srv, struct rdma_cm_id *id, const char *reason)
{
	say(&srv->out, "reject reason=%s\n", reason);
	if (rdma_reject(id, reason, (uint8_t)(strlen(reason) + 1)))
		report("rdma_reject", errno);
	if (rdma_destroy_id(id))
		report("rdma_destroy_id", errno);
}

/* The grant or denial on_request() sends. */
void reply_print(struct server *srv, const struct conn *conn,
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

/* A doorbell's verdict, decided by on_doorbell(): ok, lapped, or a
 * MISMATCH (ordering or data broke), which stderr hears of too. */
/* The MISMATCH lines of a connection not said: one line for all. */
static void unsaid_print(struct conn *conn)
{
	if (conn->unsaid)
		errorf("MISMATCH qp=0x%" PRIx32 ": %" PRIu32
		       " more, not printed",
		       conn->qp_num, conn->unsaid);
	conn->unsaid = 0;
}

/*
 * Whether a MISMATCH line of this connection may be said: at most
 * MISMATCH_LINES_PER_S a second.  A peer that rings doorbells over slots it
 * never wrote would otherwise have the server write a line per doorbell, as
 * fast as its NIC takes them: a full disk, or a terminal that shows nothing
 * else.  The rest are counted, and said in one line when the next second's
 * first one comes, or the connection goes (destroy_print()).
 */
#define MISMATCH_LINES_PER_S 10
static bool mismatch_room(struct conn *conn)
{
	double now = now_seconds();

	if (now - conn->said_at >= 1) {
		unsaid_print(conn);
		conn->said_at = now;
		conn->said = 0;
	}
	if (conn->said < MISMATCH_LINES_PER_S) {
		conn->said++;
		return true;
	}
	conn->unsaid++;
	return false;
}

void doorbell_print(struct server *srv, struct conn *conn, uint32_t seq,
		    uint32_t value, enum slot_verdict verdict)
{
	say(&srv->out,
	    "doorbell qp=0x%" PRIx32 " seq=%" PRIu32 " value=%" PRIu32 " %s\n",
	    conn->qp_num, seq, value, slot_verdict_name(verdict));
	if (verdict == SLOT_MISMATCH && mismatch_room(conn))
		errorf("MISMATCH qp=0x%" PRIx32 ": doorbell %" PRIu32
		       " found %" PRIu32 " in its slot%s",
		       conn->qp_num, seq, value,
		       conn->slice.len ? "" : " (it holds no slice)");
}

/* The CM's other events: nothing to do, or no device any more. */
int cm_other(enum rdma_cm_event_type type)
{
	if (type != RDMA_CM_EVENT_DEVICE_REMOVAL)
		return 0;
	errorf("the RDMA device went away");
	return -ENODEV;
}

/*
 * A completion the server cannot take as it comes.  A work request failed,
 * and its QP is now in the error state: end the connection.  Only wr_id,
 * status and qp_num are set (not opcode).  A flush (IBV_WC_WR_FLUSH_ERR)
 * is only the echo of an error state reported before, or of a close.  A
 * completion of no connection of ours is said.
 */
void on_trouble(struct server *srv, struct conn *conn, const struct ibv_wc *wc)
{
	const char *what = "reply";

	if (!conn) {
		errorf("a completion for qp=0x%" PRIx32 ", which is no "
		       "connection of ours",
		       wc->qp_num);
		return;
	}
	if (WRID_KIND(wc->wr_id) == WRID_RECV)
		what = "receive";
	else if (WRID_KIND(wc->wr_id) == WRID_PROBE)
		what = "keepalive probe";
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		errorf("%s qp=0x%" PRIx32 " failed: %s", what, wc->qp_num,
		       wc_status_name(wc->status));
	if (WRID_KIND(wc->wr_id) == WRID_PROBE)
		conn_drop(srv, conn, "qp_error");
	conn_close(srv, conn);
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

/* Any other asynchronous event: named.  A QP that broke is closed; a CQ,
 * an SRQ or a device that broke stops the server (-EIO); a connection
 * that receives before its RTU came is established (handshake_finish()). */
int async_other(struct server *srv, struct device *dev,
		const struct ibv_async_event *event)
{
	const char *name = async_event_name(event->event_type);
	struct conn *conn;

	switch (event->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		say(&srv->out, "async event=%s qp=0x%" PRIx32 "\n", name,
		    event->element.qp->qp_num);
		conn = conn_find(srv, dev, event->element.qp->qp_num);
		if (conn)
			conn_close(srv, conn);
		return 1;
	case IBV_EVENT_COMM_EST:
		say(&srv->out, "async event=%s qp=0x%" PRIx32 "\n", name,
		    event->element.qp->qp_num);
		conn = conn_find(srv, dev, event->element.qp->qp_num);
		if (conn && !conn->established)
			handshake_finish(conn);
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
 * Whether every completion of quiet conn's QP has been taken from the CQ,
 * before its destroy: the last pass emptied the CQ or, under a flood that
 * keeps it from emptying (cq_drain() stops at its bound), as many
 * completions as the CQ holds have been taken since conn was found quiet.
 * A CQ is first in, first out: what it held then has come out by now.
 */
bool cq_past(struct conn *conn)
{
	struct device *dev = conn->dev;

	if (!dev->cq_more)
		return true;
	if (!conn->quiet_mark)
		conn->quiet_mark = dev->polled + (uint64_t)dev->cq->cqe;
	return dev->polled >= conn->quiet_mark;
}

/* Every device's CQ drained (cq_drain()): how many completions, or the
 * first error. */
int devices_drain(struct server *srv)
{
	int total = 0;

	for (unsigned int i = 0; i < srv->ndevices; i++) {
		int n = cq_drain(srv, &srv->devices[i]);

		if (n < 0)
			return n;
		total += n;
	}
	return total;
}

/*
 * conn_quiet() gave up waiting for a send: a device that flushes nothing
 * (never seen).  Destroying the QP takes its sends with it: they are
 * counted, and nothing of theirs is waited for any more.  Their
 * completions, should one come after all, find no connection: conn_find()
 * looks for a QP number, and rxe gives a number again only after about a
 * million QPs (docs/design.md).  The event-driven server's reply buffers
 * they held are free again.
 */
static void sends_abandon(struct server *srv, struct conn *conn)
{
	uint32_t count = srv->opt.max_conns * SEND_DEPTH;

	for (uint32_t i = 0; srv->reply_buffer_put && i < count; i++)
		srv->reply_buffer_put(conn, WRID_SEND | i); /* given back */
	srv->sends_abandoned += conn->sending;
	errorf("qp=0x%" PRIx32 ": %u sends still outstanding after %d ms: "
	       "destroying it anyway",
	       conn->qp_num, conn->sending, CLOSE_GIVE_UP_MS);
}

/* A QP is gone, its slice back; what ended the wait (conn_quiet()). */
void destroy_print(struct server *srv, struct conn *conn, double now)
{
	if (conn->sending)
		sends_abandon(srv, conn);
	unsaid_print(conn);
	say(&srv->out,
	    "destroy qp=0x%" PRIx32 " after_ms=%.0f ended_by=%s freed=%zu\n",
	    conn->qp_num, (now - conn->closed_at) * 1000,
	    conn->last_wqe ? "last_wqe" : "timer", conn->slice.len);
}

/* ---- limits and tuning -------------------------------------------------- */

/*
 * Why a device cannot take this server's settings, or NULL if it can: an
 * SRQ of --srq-depth, a CQ for it and --max-conns send queues (cq_open()),
 * a QP per connection and, under --isolation mr, a region per slice.
 * Says which limit a setting passes (the device's attribute,
 * ibv_query_device(3)), if say_why.
 */
static const char *device_refusal(struct server *srv, struct ibv_context *verbs,
				  bool say_why)
{
	uint64_t cqe =
		srv->opt.srq_depth + (uint64_t)srv->opt.max_conns * SQ_DEPTH;
	const char *name = ibv_get_device_name(verbs->device);
	struct ibv_device_attr attr;
	int ret = ibv_query_device(verbs, &attr);

	if (ret) {
		report("ibv_query_device", ret);
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
	if (srv->opt.isolation == ISOLATION_NONE)
		return NULL;
	if (srv->opt.max_conns + 2 > (uint32_t)attr.max_mr) {
		if (say_why)
			errorf("--isolation: %s allows %d memory regions "
			       "(max_mr), fewer than one per slice of "
			       "--max-conns %" PRIu32
			       " and two of the server's",
			       name, attr.max_mr, srv->opt.max_conns);
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
int devices_fit(struct server *srv)
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
			report("ibv_open_device", errno);
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
int srq_limit_arm(struct server *srv, struct device *dev)
{
	struct ibv_srq_attr attr = { .srq_limit = srv->opt.srq_depth / 8 };
	int ret;

	if (!attr.srq_limit)
		return 0;
	ret = ibv_modify_srq(dev->srq, &attr, IBV_SRQ_LIMIT);
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
void rnr_timer_shorten(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .min_rnr_timer = MIN_RNR_TIMER };
	int ret = ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER);

	if (ret)
		report("ibv_modify_qp(min_rnr_timer)", ret);
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

/* Whether two socket addresses are one host's, the port aside.  Only IPv4
 * and IPv6 addresses are compared; any other (AF_IB) is no one's. */
static bool same_host(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}

/* Connections from id's peer address still in their handshake. */
static uint32_t handshakes_from(const struct server *srv, struct rdma_cm_id *id)
{
	const struct sockaddr *from = rdma_get_peer_addr(id);
	uint32_t n = 0;

	for (const struct conn *conn = srv->conns; conn; conn = conn->next)
		n += !conn->closing && !conn->established &&
		     same_host(rdma_get_peer_addr(conn->id), from);
	return n;
}

/* The record of from's breaks, if any; else, with make, the oldest record
 * made anew for it (one never used is the oldest of all), n 0. */
static struct breaks *breaks_of(struct server *srv, const struct sockaddr *from,
				bool make)
{
	struct breaks *b, *oldest = srv->breaks;

	for (b = srv->breaks; b < srv->breaks + BREAK_SOURCES; b++) {
		if (b->n && same_host((const struct sockaddr *)&b->from, from))
			return b;
		if (b->since < oldest->since)
			oldest = b;
	}
	if (!make)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	memcpy(&oldest->from, from, sizeof(oldest->from));
	return oldest;
}

/*
 * A connection whose QP the server finds in the error state before it put
 * it there broke for its peer's reasons: a write with a key that does not
 * open where it points (a guessed key: under --isolation mr, 1 in 256 is
 * right), a message too long, an invalidation the device refuses, a peer
 * that stopped acknowledging.  Whatever event, or none (rxe before 6.5
 * raises none: the QP is found broken when the peer leaves, or by the
 * keepalive), it comes through conn_close(), which calls this first.  One
 * break more for the peer's address; --breaks-per-source of them within a
 * minute, and the address is refused until that minute is over
 * (conn_refusal()): a guesser gets that many tries a minute per address.
 * Cost: a query of the QP per close, and BREAK_SOURCES records, whose
 * oldest a new address takes: a peer with as many addresses escapes.
 */
void breaks_count(struct server *srv, struct conn *conn)
{
	const struct sockaddr *from = rdma_get_peer_addr(conn->id);
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct breaks *b;
	double now = now_seconds();

	if (ibv_query_qp(conn->id->qp, &attr, IBV_QP_STATE, &init) ||
	    attr.qp_state != IBV_QPS_ERR)
		return;
	b = breaks_of(srv, from, true);
	if (!b->n || now - b->since >= BREAK_WINDOW_S) { /* a new minute */
		b->since = now;
		b->n = 0;
	}
	b->n++;
}

/* Whether id's peer address broke --breaks-per-source connections this
 * minute. */
static bool source_penalized(struct server *srv, struct rdma_cm_id *id)
{
	const struct breaks *b = breaks_of(srv, rdma_get_peer_addr(id), false);

	return b && b->n >= srv->opt.breaks_per_source &&
	       now_seconds() - b->since < BREAK_WINDOW_S;
}

/*
 * Why a connect request must be refused, in *refusal, or NULL: it came
 * through a device not in use yet that cannot take the settings
 * (device_refusal()), or MAX_DEVICES are in use already; or its address
 * has --handshakes-per-source connections in their handshake already, or
 * broke too many (breaks_count()); or the server is full.  The handshake
 * deadline frees a place a half-open peer took, but such a peer can take
 * it again at once: the limit per address keeps one host from holding
 * every place that way (a peer with many addresses still can).  At the
 * limit, drain the CQs first: a flushed send may have freed a place.
 * Returns the drain's error, if it failed.
 */
int conn_refusal(struct server *srv, struct rdma_cm_id *id,
		 const char **refusal)
{
	int n = 0;

	*refusal = NULL;
	if (!device_find(srv, id->verbs)) /* a device not in use yet */
		*refusal = srv->ndevices < MAX_DEVICES
				   ? device_refusal(srv, id->verbs, false)
				   : "too-many-devices";
	if (*refusal)
		return 0;
	if (handshakes_from(srv, id) >= srv->opt.handshakes_per_source)
		*refusal = "source-busy";
	else if (source_penalized(srv, id))
		*refusal = "source-penalized";
	else if (conns_sending(srv) >= srv->opt.max_conns)
		n = devices_drain(srv);
	if (!*refusal && (n < 0 || conns_sending(srv) >= srv->opt.max_conns))
		*refusal = "server-full";
	return n < 0 ? n : 0;
}

/* The device in use whose context is verbs, or NULL: librdmacm opens each
 * device once and gives every cm_id on it that one context
 * (ucma_get_device() in its cma.c). */
struct device *device_find(struct server *srv, struct ibv_context *verbs)
{
	for (unsigned int i = 0; i < srv->ndevices; i++)
		if (srv->devices[i].verbs == verbs)
			return &srv->devices[i];
	return NULL;
}

/*
 * Room for a reply: 0, or -ENOBUFS once the connection is closed.  A
 * connection may have SEND_DEPTH sends in flight: the protocol is request
 * and reply, so a client that asks faster than it takes its replies is
 * disconnected.  So is one that finds none of the event-driven server's
 * reply buffers free, which the accounting of --max-conns rules out.
 */
int reply_room(struct server *srv, struct conn *conn)
{
	if (srv->reply_buffer_put && !conn->dev->nsend_free) {
		errorf("no reply buffer is free (all %u are in flight): "
		       "qp=0x%" PRIx32 " gets no reply and is disconnected",
		       srv->opt.max_conns * SEND_DEPTH, conn->qp_num);
		conn_close(srv, conn);
		return -ENOBUFS;
	}
	if (conn->sending < SEND_DEPTH)
		return 0;
	errorf("qp=0x%" PRIx32 " sent more than it takes replies for: %d "
	       "sends in flight (replies, a probe, a bind): disconnecting it",
	       conn->qp_num, SEND_DEPTH);
	conn_close(srv, conn);
	return -ENOBUFS;
}

/* ---- deadlines: no peer holds a place it does not use ------------------ */

/* The server ends a connection itself, and says why. */
void conn_drop(struct server *srv, struct conn *conn, const char *reason)
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
		report("ibv_post_send(keepalive probe)", ret);
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
 * the RTU; the CM would resend its REP for a minute or more) is closed, and
 * so is one that sent no request --request-timeout-ms after it (a client
 * asks for its slice at once; a peer that never asks would hold its place
 * for ever).  Then a connection gets a probe every --keepalive-ms: a client
 * that only writes is quiet to the server program, which is no reason to close
 * it, but RC has no keepalive of its own, and a peer that vanished without a
 * disconnect (its machine died, its cable was pulled) would hold its place
 * for ever.  The probe is answered once nothing is outstanding on the send
 * queue (sends complete in order); one still outstanding --keepalive-ms
 * later closes the connection: the peer is gone, or it leaves our replies
 * unreceived.  The cost: a look at each connection per loop, and a packet
 * and its acknowledgement per connection every --keepalive-ms.  Returns the
 * ms until the next deadline (idiom 2 of common.h: a count), INT_MAX if
 * there is none.
 */
int conns_watch(struct server *srv)
{
	double now = now_seconds(), next = 0, due; /* next: 0, none yet */
	double keepalive = srv->opt.keepalive_ms / 1e3;

	for (struct conn *conn = srv->conns; conn; conn = conn->next) {
		if (conn->probing && !conn->sending)
			conn->probing = false; /* answered */
		if (conn->closing ||
		    (conn->established && conn->requested && !keepalive))
			continue;
		if (!conn->established) {
			due = conn->accepted_at + srv->opt.handshake_ms / 1e3;
			if (now >= due)
				conn_drop(srv, conn, "handshake_timeout");
		} else if (!conn->requested) {
			due = conn->accepted_at + srv->opt.request_ms / 1e3;
			if (now >= due)
				conn_drop(srv, conn, "request_timeout");
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
		if (!conn->closing && (!next || due < next))
			next = due;
	}
	return next ? (int)((next - now) * 1e3) + 1 : INT_MAX;
}

/* ---- the end of all connections ----------------------------------------- */

/*
 * At the end: close every connection, then take events and completions
 * until each QP is quiet and destroyed (CLOSE_TIMEOUT_MS at most, unless
 * sends are still outstanding); after a signal, a last count.
 */
int conns_close_all(struct server *srv)
{
	const struct timespec pause = { .tv_nsec = 1000000 };
	int ret = 0;

	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		conn_close(srv, conn);
	while (srv->conns && ret >= 0) {
		for (unsigned int i = 0; i < srv->ndevices && ret >= 0; i++)
			while ((ret = async_handle(srv, &srv->devices[i])) > 0)
				;
		if (ret >= 0)
			ret = conns_reap(srv); /* which drains every CQ first */
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

/* ---- isolation: a key per slice (--isolation mr) ---------------------- */

/*
 * The pool's rkey opens all of the pool to whoever holds it.  Under
 * --isolation mr the pool has no rkey at all, and each client gets the
 * rkey of a region registered over its own slice, which opens that slice
 * only.  Under --isolation none, each of these functions does nothing.
 */
struct slice_key {
	struct ibv_mr *mr; /* a region over the slice alone */
};

/* The pool is not registered as a whole: no key to all of it exists to
 * be printed, leaked or guessed. */
int pool_keyless(struct server *srv, struct device *dev)
{
	say(&srv->out,
	    "pool device=%s addr=0x%" PRIxPTR " size=%" PRIu32 " rkey=none\n",
	    ibv_get_device_name(dev->verbs->device), (uintptr_t)dev->pool_mem,
	    srv->opt.pool_size);
	return 0;
}

/*
 * A key to the slice just granted (and zeroed), in *rkey.
 *
 * The region is registered over this slice alone, the only pin of these
 * pages; it lets remote writes in (REMOTE_WRITE needs LOCAL_WRITE) and its
 * rkey is the key.  A region's rkey works from every QP of its PD, and
 * every client's QP is in the server's one PD (the SRQ's): a client that
 * learns or guesses a neighbour's key can write there.  A wrong guess
 * costs the guesser its connection: the write is refused, which breaks its
 * QP, and the server closes it.  (Memory windows, which could tie a key to
 * one QP, are not used: docs/design.md says why.)
 *
 * If no key can be made, the slice goes back to the pool and the client is
 * denied with the errno of the failure (ENOMEM when the region cannot be
 * pinned: fail() says whether the locked-memory limit is why).
 */
int slice_key_make(struct server *srv, struct conn *conn, uint32_t *rkey)
{
	uint8_t *slice = conn->dev->pool_mem + conn->slice.off;
	struct slice_key *key;
	int err;

	if (srv->opt.isolation == ISOLATION_NONE)
		return 0;
	key = calloc(1, sizeof(*key));
	if (!key) {
		err = fail("calloc(slice key)", ENOMEM);
		goto out_free_slice;
	}
	key->mr = ibv_reg_mr(conn->dev->pd, slice, conn->slice.len,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!key->mr) {
		err = fail("ibv_reg_mr(slice)", errno);
		goto out_free_key;
	}
	conn->key = key;
	*rkey = key->mr->rkey;
	return 0;

out_free_key:
	free(key);
out_free_slice:
	pool_free(&conn->dev->pool, conn->slice.off, conn->slice.len);
	conn->slice = (struct slice){ 0 };
	return err;
}

/*
 * The client is gone and its QP quiet: deregistering its region revokes
 * its key before its slice goes back to the pool.
 */
int slice_key_drop(struct conn *conn)
{
	struct slice_key *key = conn->key;
	int err;

	if (!key)
		return 0;
	err = undo(0, "ibv_dereg_mr(slice)", ibv_dereg_mr(key->mr));
	free(key);
	conn->key = NULL;
	return err;
}
