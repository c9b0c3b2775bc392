/*
 * admission.c - who may connect, and on what terms: the listener's address
 * (listener_bind(), from listen_open()); a connect request's refusal
 * (conn_refusal(), conn_reject(), from on_connect_request()); the record of
 * each source whose connections broke (breaks_count(), from conn_close());
 * room for one more reply in flight (reply_room(), from reply_send()).
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "common/server.h"

/* A source's breaks are counted over a minute: breaks_count(). */
#define BREAK_WINDOW_S 60.0

/* 0.0.0.0 or ::, every address of its family. */
static bool any_address(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
	       htonl(INADDR_ANY);
}

/* The bind failed: the port is taken, or a given address is not this machine's
 * (the wildcard always is); rdma_cm says EADDRNOTAVAIL for either. */
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

/* Bind the listener to -a ADDR (either family, or a name: its first address)
 * and --port.  The default "::" is every address of both families: an IPv6
 * wildcard hears IPv4 connect requests too with RDMA_OPTION_ID_AFONLY 0, set
 * here, not left to the sysctl net.ipv6.bindv6only as rdma_bind_addr() would
 * (the kernel's cma.c: rdma_bind_addr(), cma_match_private_data()). */
int listener_bind(struct server *srv)
{
	struct addrinfo *ai, hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				       .ai_socktype = SOCK_STREAM };
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

/* Who a connection comes from: the GID of its CM REQ's primary path, which
 * its QP's address vector gets (cm_format_paths_from_req(),
 * cm_init_qp_rtr_attr() in the kernel's cm.c); rxe drops any packet for the
 * QP from another address (check_addr() in rxe_recv.c).  Not
 * rdma_get_peer_addr(): the address the REQ's private data names
 * (cma_save_ip_info() in cma.c), which a peer writes as it likes.  A RoCEv2
 * GID is an IPv6 address, IPv4 as ::ffff:a.b.c.d: one form a host.  IPv6 by
 * the whole address: a /64 is a link's (RFC 4291), every host's on it;
 * counted by it, a LAN would be one source. */
static const union ibv_gid *source_of(const struct rdma_cm_id *id)
{
	static const union ibv_gid none; /* no path: the CM gives one */

	return id->route.num_paths > 0 ? &id->route.path_rec[0].dgid : &none;
}

/* The places taken: each connection that can still complete a send (an
 * open one, or a closing one until its last send completes; then only
 * receives it took from the SRQ, which the SRQ's share of the CQ covers):
 * --max-conns at most, what the CQ is sized for (cq_open()); *mine: from's
 * host's. */
static unsigned int places(const struct server *srv, const union ibv_gid *from,
			   unsigned int *mine)
{
	unsigned int n = 0;

	*mine = 0;
	for (const struct conn *conn = srv->conns; conn; conn = conn->next) {
		bool taken = !conn->closing || conn->sending;

		n += taken;
		*mine += taken && !memcmp(source_of(conn->id), from, 16);
	}
	return n;
}

/* The record of from's breaks, if any; else, with make, the oldest record
 * made anew for it (one never used is the oldest of all), n 0. */
static struct breaks *breaks_of(struct server *srv, const union ibv_gid *from,
				bool make)
{
	struct breaks *b, *oldest = srv->breaks;

	for (b = srv->breaks; b < srv->breaks + BREAK_SOURCES; b++) {
		if (b->n && !memcmp(&b->from, from, 16))
			return b;
		if (b->since < oldest->since)
			oldest = b;
	}
	if (!make)
		return NULL;
	*oldest = (struct breaks){ .from = *from };
	return oldest;
}

/* A QP in the error state before the server put it there broke for its peer's
 * reasons: a write with a key that does not open where it points (a guessed
 * key: under --isolation mr, 1 in 256 is right), a message too long, a peer
 * that stopped acknowledging.  Every close comes through conn_close(), which
 * calls this first.  One break more for the peer's address;
 * --breaks-per-source of them within a minute, and it is refused for a minute
 * from the one that reached the limit (conn_refusal()).  Cost: a QP query per
 * close, and BREAK_SOURCES records, whose oldest a new address takes. */
void breaks_count(struct server *srv, struct conn *conn)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	if (!ibv_query_qp(conn->id->qp, &attr, IBV_QP_STATE, &init) &&
	    attr.qp_state == IBV_QPS_ERR)
		break_add(breaks_of(srv, source_of(conn->id), true),
			  now_seconds(), srv->opt.breaks_per_source);
}

/* One break more in b, at now: a new minute if b's began a minute ago; the
 * break that reaches limit starts the minute its address is refused for
 * (conn_refusal()), wherever in the first that break falls. */
void break_add(struct breaks *b, double now, uint32_t limit)
{
	if (!b->n || now - b->since >= BREAK_WINDOW_S) { /* a new minute */
		b->since = now;
		b->n = 0;
	}
	if (++b->n == limit)
		b->since = now;
}

/* Why a connect request must be refused, or NULL if it may come in: it came
 * through a device not in use yet that cannot take the settings
 * (device_refusal()), or MAX_DEVICES are in use already; or its address holds
 * --conns-per-source places already, established or half-open (one host must
 * not take every place), or broke too many, the one that reached the limit
 * less than a minute ago (breaks_count()); or the server is full. */
const char *conn_refusal(struct server *srv, struct rdma_cm_id *id)
{
	unsigned int mine, all = places(srv, source_of(id), &mine);
	const char *why = NULL;
	const struct breaks *b;

	if (!device_find(srv, id->verbs)) /* a device not in use yet */
		why = srv->ndevices < MAX_DEVICES
			      ? device_refusal(srv, id->verbs, false)
			      : "too-many-devices";
	if (why)
		return why;
	if (mine >= srv->opt.conns_per_source)
		return "source-full";
	b = breaks_of(srv, source_of(id), false);
	if (b && b->n >= srv->opt.breaks_per_source &&
	    now_seconds() - b->since < BREAK_WINDOW_S)
		return "source-penalized";
	return all >= srv->opt.max_conns ? "server-full" : NULL;
}

/* Room for a reply: 0 while fewer than SEND_DEPTH sends are in flight,
 * else -ENOBUFS, said.  The protocol is request and reply: a client that
 * asks faster than it takes its replies is disconnected. */
int reply_room(const struct conn *conn)
{
	if (conn->sending < SEND_DEPTH)
		return 0;
	errorf("qp=0x%" PRIx32 " sent more than it takes replies for: %u "
	       "sends in flight (replies, a probe): disconnecting it",
	       conn->qp_num, conn->sending);
	return -ENOBUFS;
}
