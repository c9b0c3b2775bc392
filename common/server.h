/*
 * server.h - what the two servers hold, and the machinery under their core
 * paths, written once in common/ by topic:
 *
 *   options.c    the command line
 *   reports.c    outputs and signals; the lines of a connection's life
 *   admission.c  the listener; who may connect: refusals, records per source
 *   device.c     what a device can take; its SRQ's limit, RNR wait; let go
 *   deadlines.c  deadlines, keepalive probes, when a closed QP is quiet
 *   keys.c       --isolation mr: a region, and its key, per slice
 *
 * The machinery answers, records, and makes calls of its own (a bind, a
 * probe, a key, a reject...); it never closes a connection, polls a CQ or
 * calls into a server: every way a connection ends is in a server's file.
 */
#ifndef RDMA_POOL_SERVER_H
#define RDMA_POOL_SERVER_H

#include <rdma/rdma_cma.h>

#include "common/common.h"

/* A reply is posted only while fewer than SEND_DEPTH sends (replies, a
 * probe) are in flight; the send queue has room for a probe beyond. */
#define SEND_DEPTH 8
#define SQ_DEPTH (SEND_DEPTH + 1)
/* wr_id is ours, handed back in the completion, failed or not: what the
 * work request was in the high 32 bits, a buffer's index below. */
#define WRID_RECV (UINT64_C(1) << 32)
#define WRID_SEND (UINT64_C(2) << 32)
#define WRID_PROBE (UINT64_C(3) << 32)
#define WRID_KIND(wr_id) ((wr_id) & ~UINT64_C(0xffffffff))
#define WRID_INDEX(wr_id) ((uint32_t)(wr_id))

#define CLOSE_TIMEOUT_MS 2000  /* waiting for LAST_WQE_REACHED at most */
#define CLOSE_GIVE_UP_MS 10000 /* a send not flushed by then never will be */

/* --isolation: what an rkey handed to a client opens (docs/design.md,
 * "Isolation", compares them). */
enum isolation {
	ISOLATION_NONE, /* the pool's: all of the pool */
	ISOLATION_MR,	/* a region registered over the slice: the slice */
};

struct options {
	uint32_t port;
	const char *address; /* -a, or "::": listener_bind() */
	uint32_t pool_size, srq_depth, max_conns;
	uint32_t handshake_ms, request_ms, keepalive_ms; /* conn_due() */
	uint32_t conns_per_source, breaks_per_source;	 /* conn_refusal() */
	enum isolation isolation; /* whose key opens what: slice_key_make() */
	bool help;
	uint32_t rearm_after_us; /* the event-driven server's cq_event() */
};

struct conn {
	struct rdma_cm_id *id;
	struct device *dev; /* the device its QP is on */
	uint32_t qp_num;
	struct slice slice;   /* this client's part of the pool */
	unsigned int sending; /* sends posted, not yet completed */
	bool closing, last_wqe, established, requested, probing;
	double accepted_at, probed_at; /* conn_due() */
	double closed_at;	       /* conn_quiet() */
	bool quiet;	  /* nothing more of it can reach the CQ ... */
	uint64_t cq_mark; /* ... and what did is out once dev->polled is this */
	struct ibv_mr *slice_mr; /* --isolation mr: slice_key_make() */
	double said_at;		 /* doorbell_print(): this second's start, */
	uint32_t said, unsaid[SLOT_MISMATCH + 1]; /* doorbells said, the rest */
	struct conn *next;
};

/* A peer address whose connections broke, and how often: breaks_count().
 * BREAK_SOURCES addresses are remembered; a new one takes the oldest. */
#define BREAK_SOURCES 64
struct breaks {
	union ibv_gid from; /* source_of() */
	double since;	    /* the first break of this minute, or the limit's */
	uint32_t n;	    /* breaks since */
};

/* What one RDMA device needs to serve clients (a QP can use only what was
 * made on its own device): a PD, the pool registered in it, an SRQ and a
 * CQ, opened by its first client (verbs_open()), let go before its last
 * client's cm_id (verbs_close()): once no cm_id uses a device gone away,
 * librdmacm closes it, taking what we made on it (remove_cma_dev(), cma.c). */
struct device {
	struct ibv_context *verbs; /* librdmacm's: one a device, for its ids */
	struct ibv_pd *pd;
	struct pool pool; /* --pool-size of this device's own */
	uint8_t *pool_mem, *recv_bufs;
	struct ibv_mr *pool_mr, *recv_mr;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	bool cq_more;	 /* cq_drain() hit its bound */
	uint64_t polled; /* completions cq_drain() has taken */
	uint32_t recvs_posted; /* receives on the SRQ now */
	uint64_t doorbells;
	unsigned int nconns; /* connections on it */

	/* The event-driven server's own: its completion channel, deferred
	 * re-arming (cq_event()), and its reply buffers (replies_open()). */
	struct ibv_comp_channel *comp;
	bool unarmed, look_again; /* not waited on; unarmed, found some */
	double last_completion; /* while unarmed */
	uint8_t *send_bufs;
	struct ibv_mr *send_mr;
	uint32_t *send_free, nsend_free; /* a stack of free reply buffers */
	struct conn **send_owner;	 /* whose reply each buffer holds */
};

#define MAX_DEVICES 16 /* served at once; a client of one more is refused */

struct server {
	struct options opt;
	struct rdma_event_channel *events;
	struct rdma_cm_id *listener;
	struct device devices[MAX_DEVICES]; /* the first ndevices are open */
	unsigned int ndevices;
	uint64_t doorbells; /* of the devices let go: device_forget() */
	double looked_at;   /* devices_look(), and how many devices it saw */
	int nseen;
	struct conn *conns;
	struct breaks breaks[BREAK_SOURCES];
	unsigned int nclosing; /* connections closing */
	uint64_t sends_abandoned;
	int sigfd, stopped_by; /* signals; the one that ended serve() */
	struct outlet out;     /* say(): reports that never block */
};

/* options.c */
int parse_options(int argc, char **argv, bool rearm, struct options *opt);

/* reports.c */
int reports_open(struct server *srv);
int signal_take(struct server *srv);
void stats_line(struct server *srv, int signo, const struct device *dev,
		const char *tail);
void reply_print(struct server *srv, const struct conn *conn,
		 const struct ctrl_msg *reply, uint32_t asked);
void doorbell_print(struct server *srv, struct conn *conn, uint32_t seq,
		    uint32_t value, enum slot_verdict verdict);
void failure_print(const struct conn *conn, const struct ibv_wc *wc);
void async_print(struct server *srv, const struct ibv_async_event *event);
void destroy_print(struct server *srv, struct conn *conn, double now);
void end_print(const struct server *srv);

/* admission.c */
int listener_bind(struct server *srv);
const char *conn_refusal(struct server *srv, struct rdma_cm_id *id);
void conn_reject(struct server *srv, struct rdma_cm_id *id, const char *reason);
void breaks_count(struct server *srv, struct conn *conn);
void break_add(struct breaks *b, double now, uint32_t limit);
int reply_room(const struct conn *conn);

/* device.c */
int devices_fit(struct server *srv);
const char *device_refusal(struct server *srv, struct ibv_context *verbs,
			   bool say_why);
struct device *device_find(struct server *srv, struct ibv_context *verbs);
void device_forget(struct server *srv, struct device *dev);
void devices_look(struct server *srv, double *next);
int srq_limit_arm(struct server *srv, struct device *dev);
void rnr_timer_shorten(struct ibv_qp *qp);

/* deadlines.c */
enum deadline {
	DEADLINE_NONE,	    /* none to come: closing, or no keepalive */
	DEADLINE_HANDSHAKE, /* no RTU yet: close */
	DEADLINE_REQUEST,   /* no request yet: close */
	DEADLINE_PROBE,	    /* a keepalive probe to send */
	DEADLINE_SILENT,    /* the last probe unanswered: close */
};
struct due {
	enum deadline what;
	double at; /* now_seconds() when it falls; INFINITY for none */
};
struct due conn_due(const struct options *opt, const struct conn *conn);
const char *deadline_name(enum deadline what);
int probe_send(struct conn *conn, double now);
void handshake_finish(struct conn *conn);
bool conn_quiet(const struct conn *conn, double now);

/* keys.c */
int pool_keyless(struct server *srv, struct device *dev);
int slice_key_make(struct server *srv, struct conn *conn, uint32_t *rkey);
int slice_key_drop(struct conn *conn);

#endif /* RDMA_POOL_SERVER_H */
