/*
 * unit_common.c - unit tests of common/: the chunk pool, the control
 * message, the protocol decisions and the small parsers, and the servers'
 * machinery (common/server.h: options, deadlines).  Plain C against the
 * real code; nothing here needs an RDMA device.  It links all of common/
 * and no server: the machinery calls nothing of theirs.
 *
 * Reports in TAP (tests/tap.h).
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/server.h"
#include "tests/tap.h"

#define H2 "::ffff:198.18.0.2" /* a host's GID, of 198.18.0.2 */

#define MIB (1024u * 1024u)

/* ---- the pool ----------------------------------------------------------- */

static void test_pool_init_rejects_bad_sizes(void)
{
	struct pool pool;

	EXPECT(pool_init(&pool, 0) == -EINVAL);
	EXPECT(pool_init(&pool, 4097) == -EINVAL);
	EXPECT(pool_init(&pool, 4 * MIB) == 0);
	EXPECT(pool.nchunks == 1024 && pool.used == 0);
	pool_destroy(&pool);
}

static void test_pool_rounds_up_to_chunks(void)
{
	struct pool pool;
	size_t off = 99, granted = 0;

	pool_init(&pool, 4 * MIB);
	EXPECT(pool_alloc(&pool, 10000, &off, &granted) == 0);
	EXPECT(off == 0 && granted == 12288);
	EXPECT(pool_alloc(&pool, 1, &off, &granted) == 0);
	EXPECT(off == 12288 && granted == 4096);
	EXPECT(pool_alloc(&pool, 4096, &off, &granted) == 0);
	EXPECT(off == 16384 && granted == 4096);
	EXPECT(pool.used == 5);
	pool_destroy(&pool);
}

static void test_pool_rejects_impossible_sizes(void)
{
	struct pool pool;
	size_t off, granted;

	pool_init(&pool, 4 * MIB);
	EXPECT(pool_alloc(&pool, 0, &off, &granted) == -EINVAL);
	EXPECT(pool_alloc(&pool, 4 * MIB + 1, &off, &granted) == -EINVAL);
	EXPECT(pool_alloc(&pool, UINT32_MAX, &off, &granted) == -EINVAL);
	EXPECT(pool.used == 0);
	pool_destroy(&pool);
}

static void test_pool_first_fit(void)
{
	struct pool pool;
	size_t a, b, c, d, e, granted;

	pool_init(&pool, 64 * 1024);
	pool_alloc(&pool, 4096, &a, &granted);
	pool_alloc(&pool, 8192, &b, &granted);
	pool_alloc(&pool, 4096, &c, &granted);
	pool_free(&pool, b, 8192); /* a hole of two chunks at 4096 */

	/* Three chunks do not fit the hole: they go after c. */
	EXPECT(pool_alloc(&pool, 3 * 4096, &d, &granted) == 0);
	EXPECT(d == 4 * 4096);
	/* One chunk takes the lowest free place: the start of the hole. */
	EXPECT(pool_alloc(&pool, 1, &e, &granted) == 0);
	EXPECT(e == 4096);
	EXPECT(a == 0 && c == 3 * 4096);
	pool_destroy(&pool);
}

static void test_pool_full(void)
{
	struct pool pool;
	size_t off, granted;

	pool_init(&pool, 4 * MIB);
	EXPECT(pool_alloc(&pool, 4 * MIB, &off, &granted) == 0);
	EXPECT(off == 0 && granted == 4 * MIB && pool.used == 1024);
	EXPECT(pool_alloc(&pool, 1, &off, &granted) == -ENOMEM);
	pool_free(&pool, 0, 4 * MIB);
	EXPECT(pool.used == 0);
	EXPECT(pool_alloc(&pool, 4 * MIB, &off, &granted) == 0);
	pool_destroy(&pool);
}

static void test_pool_fragmentation(void)
{
	struct pool pool;
	size_t off, granted;

	pool_init(&pool, 4 * MIB);
	for (int i = 0; i < 1024; i++)
		pool_alloc(&pool, 4096, &off, &granted);
	for (size_t chunk = 0; chunk < 1024; chunk += 2)
		pool_free(&pool, chunk * 4096, 4096);

	/* Half the pool is free, but no two free chunks are neighbours. */
	EXPECT(pool.used == 512);
	EXPECT(pool_alloc(&pool, 8192, &off, &granted) == -ENOMEM);
	EXPECT(pool_alloc(&pool, 4096, &off, &granted) == 0 && off == 0);
	pool_destroy(&pool);
}

/* A denied peer may ask again at once, eight asks in flight: in a pool of
 * a million chunks (4 GiB, the largest), full or with a few chunks free in
 * its last 64, 2,000 asks are answered in well under a second (#49: each
 * walked the million chunks one by one, seconds in all). */
static void test_pool_asks_again(void)
{
	struct pool pool;
	size_t off, granted, bytes = (size_t)UINT32_MAX / 4096 * 4096;
	double start;

	pool_init(&pool, bytes);
	EXPECT(pool_alloc(&pool, bytes, &off, &granted) == 0);
	start = now_seconds();
	for (int i = 0; i < 1000; i++)
		EXPECT(pool_alloc(&pool, 4096, &off, &granted) == -ENOMEM);
	for (size_t chunk = pool.nchunks - 64; chunk < pool.nchunks; chunk += 2)
		pool_free(&pool, chunk * 4096, 4096);
	for (int i = 0; i < 1000; i++)
		EXPECT(pool_alloc(&pool, 8192, &off, &granted) == -ENOMEM);
	EXPECT(now_seconds() - start < 0.5);
	pool_destroy(&pool);
}

static void test_pool_free_range(void)
{
	struct pool pool;
	size_t a, b, c, again, granted;

	pool_init(&pool, 4 * MIB);
	pool_alloc(&pool, 3 * 4096, &a, &granted);
	pool_alloc(&pool, 5 * 4096, &b, &granted);
	pool_alloc(&pool, 2 * 4096, &c, &granted);
	pool_free(&pool, b, 5 * 4096);
	EXPECT(pool.used == 5);

	/* Exactly the freed range is free again: five fit, six do not. */
	EXPECT(pool_alloc(&pool, 5 * 4096, &again, &granted) == 0);
	EXPECT(again == b);
	pool_free(&pool, again, 5 * 4096);
	EXPECT(pool_alloc(&pool, 6 * 4096, &again, &granted) == 0);
	EXPECT(again == c + 2 * 4096);
	pool_destroy(&pool);
}

/* ---- the control message ------------------------------------------------ */

static const struct ctrl_msg sample = {
	.magic = CTRL_MAGIC,
	.version = CTRL_VERSION,
	.type = CTRL_RESP_ALLOC,
	.size = 12288,
	.addr = 0x00007f3a12345000,
	.rkey = 0x1234,
	.status = 0,
};

static void test_msg_wire_layout(void)
{
	uint8_t wire[CTRL_MSG_SIZE];
	static const uint8_t expected[CTRL_MSG_SIZE] = {
		'R',  'D',  'M',  'A',
		0x00, 0x01, 0x00, 0x02, /* magic ... */
		0x00, 0x00, 0x30, 0x00,
		0x00, 0x00, 0x00, 0x00, /* size, rsvd */
		0x00, 0x00, 0x7f, 0x3a,
		0x12, 0x34, 0x50, 0x00, /* addr */
		0x00, 0x00, 0x12, 0x34,
		0x00, 0x00, 0x00, 0x00, /* rkey, status */
	};

	msg_encode(&sample, wire);
	EXPECT(memcmp(wire, expected, sizeof(wire)) == 0);
}

static void test_msg_round_trip(void)
{
	uint8_t wire[CTRL_MSG_SIZE];
	struct ctrl_msg back;
	struct ctrl_msg denied = sample;

	msg_encode(&sample, wire);
	EXPECT(msg_decode(wire, sizeof(wire), &back) == 0);
	EXPECT(memcmp(&back, &sample, sizeof(back)) == 0);

	denied.status = ENOMEM;
	denied.addr = 0;
	msg_encode(&denied, wire);
	EXPECT(msg_decode(wire, sizeof(wire), &back) == 0);
	EXPECT(back.status == ENOMEM && back.addr == 0);
}

static void test_msg_rejects_bad_messages(void)
{
	uint8_t wire[CTRL_MSG_SIZE + 1] = { 0 };
	struct ctrl_msg msg = sample, out;

	msg_encode(&msg, wire);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE - 1, &out) == -EBADMSG);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE + 1, &out) == -EBADMSG);
	EXPECT(msg_decode(wire, 0, &out) == -EBADMSG);

	msg.magic = 0x41444d52; /* "ADMR": the magic byte-swapped */
	msg_encode(&msg, wire);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE, &out) == -EBADMSG);

	msg = sample;
	msg.version = 2;
	msg_encode(&msg, wire);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE, &out) == -EBADMSG);

	msg = sample;
	msg.type = 3;
	msg_encode(&msg, wire);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE, &out) == -EBADMSG);
	msg.type = 0;
	msg_encode(&msg, wire);
	EXPECT(msg_decode(wire, CTRL_MSG_SIZE, &out) == -EBADMSG);
}

/* ---- protocol decisions ------------------------------------------------- */

static void request_encode(uint32_t size, uint16_t type, uint8_t *wire)
{
	struct ctrl_msg req = {
		.magic = CTRL_MAGIC,
		.version = CTRL_VERSION,
		.type = type,
		.size = size,
	};

	msg_encode(&req, wire);
}

static void test_alloc_request_statuses(void)
{
	uint8_t wire[CTRL_MSG_SIZE];
	struct pool pool;
	struct slice mine = { 0 }, other = { 0 }, third = { 0 };
	uint32_t asked;

	pool_init(&pool, 16 * 4096);

	request_encode(10000, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, 20, &mine, &asked) == -EBADMSG);
	EXPECT(asked == 0 && mine.len == 0);

	request_encode(10000, CTRL_RESP_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &mine, &asked) ==
	       -EBADMSG);

	request_encode(0, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &mine, &asked) ==
	       -EINVAL);
	request_encode(16 * 4096 + 1, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &mine, &asked) ==
	       -EINVAL);
	EXPECT(asked == 16 * 4096 + 1);

	request_encode(10000, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &mine, &asked) == 0);
	EXPECT(mine.off == 0 && mine.len == 12288 && asked == 10000);
	/* A second request on the same connection, however small. */
	request_encode(1, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &mine, &asked) ==
	       -EBUSY);
	EXPECT(mine.off == 0 && mine.len == 12288);

	request_encode(13 * 4096, CTRL_REQ_ALLOC, wire);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &other, &asked) == 0);
	EXPECT(alloc_request(&pool, wire, sizeof(wire), &third, &asked) ==
	       -ENOMEM);
	EXPECT(third.len == 0 && pool.used == 16);
	pool_destroy(&pool);
}

static void test_slot_check(void)
{
	EXPECT(slot_check(16, 16, 1024) == SLOT_OK);
	EXPECT(slot_check(16, 16 + 1024, 1024) == SLOT_LAPPED);
	EXPECT(slot_check(16, 16 + 3 * 1024, 1024) == SLOT_LAPPED);
	EXPECT(slot_check(16, 17, 1024) == SLOT_MISMATCH);
	EXPECT(slot_check(16, 0, 1024) == SLOT_MISMATCH);
	EXPECT(slot_check(1040, 16, 1024) == SLOT_MISMATCH);
	EXPECT(slot_check(0, 0, 0) == SLOT_MISMATCH); /* no slice, no slot */
	EXPECT(strcmp(slot_verdict_name(SLOT_OK), "ok") == 0);
	EXPECT(strcmp(slot_verdict_name(SLOT_MISMATCH), "MISMATCH") == 0);
}

/* ---- small utilities ---------------------------------------------------- */

static void test_parse_u64(void)
{
	uint64_t v = 0;

	EXPECT(parse_u64("10000", UINT32_MAX, &v) == 0 && v == 10000);
	EXPECT(parse_u64("0", UINT32_MAX, &v) == 0 && v == 0);
	EXPECT(parse_u64("4294967295", UINT32_MAX, &v) == 0 && v == UINT32_MAX);
	EXPECT(parse_u64("4294967296", UINT32_MAX, &v) == -ERANGE);
	EXPECT(parse_u64("99999999999999999999999", UINT64_MAX, &v) == -ERANGE);
	EXPECT(parse_u64("", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64("abc", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64("-1", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64("+1", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64(" 1", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64("12abc", UINT32_MAX, &v) == -EINVAL);
	EXPECT(parse_u64("0x10", UINT32_MAX, &v) == -EINVAL);
}

static void test_parse_number(void)
{
	uint64_t v = 0;

	EXPECT(parse_number("port", "7471", 1, 65535, &v) == 0 && v == 7471);
	EXPECT(parse_number("port", "1", 1, 65535, &v) == 0 && v == 1);
	EXPECT(parse_number("port", "65535", 1, 65535, &v) == 0);
	EXPECT(parse_number("port", "0", 1, 65535, &v) == -EINVAL);
	EXPECT(parse_number("port", "65536", 1, 65535, &v) == -EINVAL);
	EXPECT(parse_number("port", "port", 1, 65535, &v) == -EINVAL);
}

static void test_names(void)
{
	EXPECT(strcmp(errno_name(EINVAL), "EINVAL") == 0);
	EXPECT(strcmp(errno_name(EBADMSG), "EBADMSG") == 0);
	EXPECT(strcmp(wc_status_name(IBV_WC_REM_ACCESS_ERR),
		      "IBV_WC_REM_ACCESS_ERR") == 0);
	EXPECT(strcmp(wc_status_name(IBV_WC_RETRY_EXC_ERR),
		      "IBV_WC_RETRY_EXC_ERR") == 0);
	EXPECT(strcmp(wc_status_name((enum ibv_wc_status)999),
		      "IBV_WC_(unknown)") == 0);
	EXPECT(strcmp(async_event_name(IBV_EVENT_QP_LAST_WQE_REACHED),
		      "IBV_EVENT_QP_LAST_WQE_REACHED") == 0);
}

/*
 * A call that fails with errno 0 (a library that forgot to set it) still
 * fails: fail() must not give back 0, which every caller takes for
 * success (slice_key_make() would grant a slice with no key).
 */
static void test_fail_never_returns_success(void)
{
	EXPECT(fail("ibv_reg_mr(slice)", 0) < 0);
	EXPECT(fail("ibv_reg_mr(slice)", ENOMEM) == -ENOMEM);
}

/* ---- reports that never block ------------------------------------------- */

/*
 * say() into a pipe that nobody reads: once the pipe is full, lines are
 * dropped and counted, and the call returns at once; once the reader is
 * gone, it notes EPIPE (with SIGPIPE ignored, as the servers do).  A
 * blocking write would hang this test: run it under a timeout.
 */
static void test_say_never_blocks(void)
{
	struct outlet out = { 0 };
	int fds[2], saved = dup(STDOUT_FILENO);
	char junk[4096] = { 0 };

	fflush(stdout);
	if (saved < 0 || pipe(fds)) {
		EXPECT(!"pipe");
		return;
	}
	signal(SIGPIPE, SIG_IGN);
	dup2(fds[1], STDOUT_FILENO);
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	while (write(fds[1], junk, sizeof(junk)) > 0) /* fill it */
		;
	fcntl(fds[1], F_SETFL, 0); /* blocking again, as stdout would be */
	for (int i = 0; i < 100; i++)
		say(&out, "doorbell %d\n", i);
	EXPECT(out.dropped == 100 && !out.closed);
	close(fds[0]); /* the reader goes away */
	say(&out, "one more\n");
	EXPECT(out.closed && out.dropped == 101);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	close(fds[1]);
	signal(SIGPIPE, SIG_DFL);
}

/* ---- the servers' machinery -------------------------------------------- */

static int parse(struct options *opt, const char *a, const char *b)
{
	char *argv[] = { "server", (char *)a, (char *)b, NULL };

	optind = 0; /* getopt_long() starts afresh */
	*opt = (struct options){ 0 };
	return parse_options(b ? 3 : 2, argv, false, opt);
}

static void test_parse_options(void)
{
	struct options opt;

	EXPECT(parse(&opt, "--port", "0") == 0 && opt.port == 0 &&
	       opt.srq_depth == 1024 && opt.max_conns == 64 &&
	       opt.conns_per_source == 32 && opt.isolation == ISOLATION_NONE &&
	       !strcmp(opt.address, "::"));
	EXPECT(parse(&opt, "--max-conns", "5") == 0 &&
	       opt.conns_per_source == 3);
	EXPECT(parse(&opt, "--isolation", "mr") == 0 &&
	       opt.isolation == ISOLATION_MR);
	EXPECT(parse(&opt, "--isolation", "mw") == -EINVAL);
	EXPECT(parse(&opt, "--pool-size", "4097") == -EINVAL);
	EXPECT(parse(&opt, "--rearm-after-us", "5") == -EINVAL); /* not ours */
	EXPECT(parse(&opt, "--keepalive-ms", "0") == 0 && !opt.keepalive_ms);
}

/* Each deadline in its turn, and the time it falls: the handshake's, the
 * first request's, then a probe every --keepalive-ms, and the close of a
 * connection whose probe is unanswered when the next one is due. */
static void test_conn_due(void)
{
	struct options opt = { .handshake_ms = 5000,
			       .request_ms = 10000,
			       .keepalive_ms = 2000 };
	struct conn conn = { .accepted_at = 100, .probed_at = 100 };
	struct due due = conn_due(&opt, &conn);

	EXPECT(due.what == DEADLINE_HANDSHAKE && due.at == 105);
	conn.established = true;
	due = conn_due(&opt, &conn);
	EXPECT(due.what == DEADLINE_REQUEST && due.at == 110);
	conn.requested = true;
	due = conn_due(&opt, &conn);
	EXPECT(due.what == DEADLINE_PROBE && due.at == 102);
	conn.probing = true;
	conn.probed_at = 103;
	due = conn_due(&opt, &conn);
	EXPECT(due.what == DEADLINE_SILENT && due.at == 105);
	EXPECT(!strcmp(deadline_name(due.what), "peer_silent"));
	opt.keepalive_ms = 0;
	EXPECT(conn_due(&opt, &conn).what == DEADLINE_NONE);
	conn.closing = true;
	opt.keepalive_ms = 2000;
	due = conn_due(&opt, &conn);
	EXPECT(due.what == DEADLINE_NONE && isinf(due.at));
}

/* id as a connect request from gid, the GID of its REQ's path (where its
 * packets come from), whose private data names claim as its address. */
static void request_from(struct rdma_cm_id *id, struct ibv_sa_path_rec *path,
			 const char *gid, const char *claim)
{
	*path = (struct ibv_sa_path_rec){ 0 };
	EXPECT(inet_pton(AF_INET6, gid, &path->dgid) == 1);
	id->route.path_rec = path;
	id->route.num_paths = 1;
	id->route.addr.dst_sin6.sin6_family = AF_INET6;
	EXPECT(inet_pton(AF_INET6, claim, &id->route.addr.dst_sin6.sin6_addr) ==
	       1);
}

/*
 * Who may connect through a device in use: not a fourth connection of an
 * address that holds three places, half-open or established
 * (--conns-per-source 3), nor an address whose connections broke too often
 * this minute, nor anyone once --max-conns can still send; and no one
 * through a device more than MAX_DEVICES.  (A device not in use yet is asked
 * for its limits first, which needs a real one: the end-to-end tests.)
 */
static void test_conn_refusal(void)
{
	static struct server srv;
	struct ibv_context *verbs = (struct ibv_context *)&srv; /* a name */
	struct rdma_cm_id ids[4] = { 0 }, other = { .verbs = verbs };
	struct ibv_sa_path_rec paths[5];
	struct conn conns[3] = { 0 };

	srv.opt = (struct options){ .conns_per_source = 3,
				    .breaks_per_source = 1,
				    .max_conns = 4 };
	srv.devices[0].verbs = verbs;
	srv.ndevices = 1;
	for (int i = 0; i < 4; i++) {
		ids[i].verbs = verbs;
		request_from(&ids[i], &paths[i], H2, H2);
	}
	request_from(&other, &paths[4], "::ffff:198.18.0.3",
		     "::ffff:198.18.0.3");
	EXPECT(conn_refusal(&srv, &ids[3]) == NULL);
	for (int i = 0; i < 3; i++) { /* three handshakes from one address */
		conns[i] = (struct conn){ .id = &ids[i], .next = srv.conns };
		srv.conns = &conns[i];
	}
	EXPECT(conn_refusal(&srv, &ids[3]) &&
	       !strcmp(conn_refusal(&srv, &ids[3]), "source-full"));
	EXPECT(conn_refusal(&srv, &other) == NULL);
	for (int i = 0; i < 3; i++)
		conns[i].established = true;
	EXPECT(conn_refusal(&srv, &ids[3]) &&
	       !strcmp(conn_refusal(&srv, &ids[3]), "source-full"));
	conns[2].closing = true; /* all its sends completed: a place again */
	EXPECT(conn_refusal(&srv, &ids[3]) == NULL);
	conns[2].closing = false;
	srv.opt.conns_per_source = 4;
	srv.breaks[0] = (struct breaks){ .from = paths[0].dgid,
					 .since = now_seconds(),
					 .n = 1 };
	EXPECT(conn_refusal(&srv, &ids[3]) &&
	       !strcmp(conn_refusal(&srv, &ids[3]), "source-penalized"));
	srv.opt.max_conns = 3;
	EXPECT(conn_refusal(&srv, &other) &&
	       !strcmp(conn_refusal(&srv, &other), "server-full"));
	conns[0].closing = true; /* all its sends completed: a place again */
	EXPECT(conn_refusal(&srv, &other) == NULL);
	srv.ndevices = MAX_DEVICES;
	other.verbs = (struct ibv_context *)&other; /* a device not in use */
	EXPECT(conn_refusal(&srv, &other) &&
	       !strcmp(conn_refusal(&srv, &other), "too-many-devices"));
}

/* An honest host starts its 32 clients at once, with the defaults: all of
 * them may be in their handshake together (#49: 16 were the most), and
 * the 33rd from that host is refused. */
static void test_honest_burst(void)
{
	static struct server srv;
	static struct rdma_cm_id ids[33];
	static struct ibv_sa_path_rec paths[33];
	static struct conn conns[32];

	EXPECT(parse(&srv.opt, "--port", "0") == 0);
	srv.devices[0].verbs = (struct ibv_context *)&srv;
	srv.ndevices = 1;
	for (int i = 0; i < 33; i++) {
		ids[i].verbs = srv.devices[0].verbs;
		request_from(&ids[i], &paths[i], H2, H2);
	}
	for (int i = 0; i < 32; i++) {
		EXPECT(conn_refusal(&srv, &ids[i]) == NULL);
		conns[i] = (struct conn){ .id = &ids[i], .next = srv.conns };
		srv.conns = &conns[i];
	}
	EXPECT(conn_refusal(&srv, &ids[32]) &&
	       !strcmp(conn_refusal(&srv, &ids[32]), "source-full"));
}

/* The minute an address is refused for starts at the break that reaches
 * --breaks-per-source (4): the first 90 s ago, three more 31 s ago, and it
 * is refused still (#49: it was for the first break's minute, then over);
 * a minute after, no more. */
static void test_penalty_minute(void)
{
	static struct server srv;
	static struct rdma_cm_id id;
	static struct ibv_sa_path_rec path;
	struct breaks *b = &srv.breaks[0];
	double now = now_seconds();
	const char *why;

	EXPECT(parse(&srv.opt, "--port", "0") == 0);
	srv.devices[0].verbs = id.verbs = (struct ibv_context *)&srv;
	srv.ndevices = 1;
	request_from(&id, &path, H2, H2);
	b->from = path.dgid;
	break_add(b, now - 90, 4);
	for (int i = 0; i < 3; i++)
		break_add(b, now - 31, 4);
	why = conn_refusal(&srv, &id);
	EXPECT(why && !strcmp(why, "source-penalized"));
	b->n = 0; /* a record anew: four breaks, the last 61 s ago */
	for (int i = 0; i < 4; i++)
		break_add(b, now - 61, 4);
	EXPECT(conn_refusal(&srv, &id) == NULL);
}

/* A source is the GID its packets come from, not the address its REQ's
 * private data claims (#49: a peer claiming H had H refused); IPv4 as
 * ::ffff:a.b.c.d, its one form in a GID; two addresses of one IPv6 /64
 * are two (a LAN's /64 is every host's on it). */
static void test_source_is_host(void)
{
	static struct server srv;
	static struct rdma_cm_id held, asks;
	static struct ibv_sa_path_rec held_path, asks_path;
	static struct conn conn = { .id = &held };
	const struct {
		const char *held_gid, *held_claim, *asks_gid;
		bool refused;
	} cases[] = {
		{ H2, "::ffff:198.18.0.9", H2, true },
		{ "::ffff:198.18.0.9", H2, H2, false },
		{ "2001:db8::1", "2001:db8::1", "2001:db8::2:3", false },
		{ "2001:db8::1", "2001:db8::1", "2001:db8:0:1::1", false },
		{ H2, H2, "::ffff:198.18.0.3", false },
	};

	srv.opt = (struct options){ .conns_per_source = 1, .max_conns = 4 };
	srv.devices[0].verbs = held.verbs = asks.verbs =
		(struct ibv_context *)&srv;
	srv.ndevices = 1;
	srv.conns = &conn;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *why;

		request_from(&held, &held_path, cases[i].held_gid,
			     cases[i].held_claim);
		request_from(&asks, &asks_path, cases[i].asks_gid, H2);
		why = conn_refusal(&srv, &asks);
		EXPECT(cases[i].refused ? why && !strcmp(why, "source-full")
					: why == NULL);
	}
}

/* A client may have SEND_DEPTH sends in flight, and no more. */
static void test_reply_room(void)
{
	struct conn conn = { .sending = SEND_DEPTH - 1 };

	EXPECT(reply_room(&conn) == 0);
	conn.sending = SEND_DEPTH;
	EXPECT(reply_room(&conn) == -ENOBUFS);
}

/* ---- runner ------------------------------------------------------------- */

static const struct unit_test tests[] = {
	{ "pool_init_rejects_bad_sizes", test_pool_init_rejects_bad_sizes },
	{ "pool_rounds_up_to_chunks", test_pool_rounds_up_to_chunks },
	{ "pool_rejects_impossible_sizes", test_pool_rejects_impossible_sizes },
	{ "pool_asks_again", test_pool_asks_again },
	{ "pool_first_fit", test_pool_first_fit },
	{ "pool_full", test_pool_full },
	{ "pool_fragmentation", test_pool_fragmentation },
	{ "pool_free_range", test_pool_free_range },
	{ "msg_wire_layout", test_msg_wire_layout },
	{ "msg_round_trip", test_msg_round_trip },
	{ "msg_rejects_bad_messages", test_msg_rejects_bad_messages },
	{ "alloc_request_statuses", test_alloc_request_statuses },
	{ "slot_check", test_slot_check },
	{ "penalty_minute", test_penalty_minute },
	{ "parse_u64", test_parse_u64 },
	{ "parse_number", test_parse_number },
	{ "names", test_names },
	{ "fail_never_returns_success", test_fail_never_returns_success },
	{ "say_never_blocks", test_say_never_blocks },
	{ "parse_options", test_parse_options },
	{ "conn_due", test_conn_due },
	{ "conn_refusal", test_conn_refusal },
	{ "honest_burst", test_honest_burst },
	{ "source_is_host", test_source_is_host },
	{ "reply_room", test_reply_room },
};

int main(void)
{
	return RUN_TESTS("unit", tests);
}
