/*
 * common.h - the little that the client and both servers share.  Everything
 * here is plain C over libibverbs types; only devices_check() talks to the
 * verbs library.  (What the two servers share besides is in server.h.)
 *
 *   - struct ctrl_msg: the 32-byte control message and its wire encoding;
 *   - the chunk pool: a bitmap that carves the server's memory into slices;
 *   - what both servers decide: a request's answer, a doorbell slot's verdict;
 *   - the names of completion statuses and async events (not the loops);
 *   - say(): a report line that never blocks;
 *   - number parsing for command lines, and the three error idioms below.
 *
 * 1. A function that can fail returns 0 or a negative errno value.  fail()
 *    reports a failed call once on stderr, naming it and the reason
 *    ("rdma_pool_server: ibv_reg_mr(pool): Cannot allocate memory"), and
 *    gives back -err for the caller to pass up or act on:
 *        if (!cq)
 *                return fail("ibv_create_cq", errno);
 *    errorf() reports what no call's errno says (a bad argument, a reply
 *    that makes no sense); the function then returns -EINVAL or the like.
 *    report() says a failure of one client alone (it is closed, or does
 *    without; the server goes on): a function that only reports is void.
 * 2. A function that counts returns the count, or a negative errno value,
 *    as read(2) does: how many completions were handled, or events taken.
 * 3. What is set up is undone in reverse order, and an undoing step never
 *    stops the rest: undo() reports a failed call and keeps the first error:
 *        err = undo(err, "ibv_destroy_cq", ibv_destroy_cq(cq));
 *    Several things set up in one function are undone by a goto ladder
 *    whose labels name what they undo (main()); an object's undoing
 *    (verbs_close()) checks each part, so a half-built one is undone too.
 */
#ifndef RDMA_POOL_COMMON_H
#define RDMA_POOL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define DEFAULT_PORT 7471
#define CTRL_MAGIC 0x52444d41u /* "RDMA" in ASCII, read big-endian */
#define CTRL_VERSION 1
#define CTRL_MSG_SIZE 32

enum ctrl_type {
	CTRL_REQ_ALLOC = 1,  /* client -> server: size = bytes wanted */
	CTRL_RESP_ALLOC = 2, /* server -> client: status, addr, rkey, size */
};

/* The fields in the order and at the offsets they have on the wire (checked
 * in common.c), in host order in memory: msg_encode() and msg_decode() turn
 * each to and from big-endian, so the ends agree whatever CPUs they run on. */
struct ctrl_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t size;
	uint32_t reserved;
	uint64_t addr;
	uint32_t rkey;
	uint32_t status; /* 0, or a positive errno value (Linux numbering) */
};

void msg_encode(const struct ctrl_msg *msg, void *wire);
int msg_decode(const void *wire, size_t len, struct ctrl_msg *msg);

#define POOL_CHUNK_SIZE 4096
#define DEFAULT_POOL_SIZE (4u << 20) /* 4 MiB = 1024 chunks */

struct pool {
	uint64_t *bits; /* a bit per chunk, set while a slice holds the chunk */
	size_t nchunks, used; /* chunks, and those in use */
};

int pool_init(struct pool *pool, size_t bytes);
void pool_destroy(struct pool *pool);
int pool_alloc(struct pool *pool, uint64_t want, size_t *offset,
	       size_t *granted);
void pool_free(struct pool *pool, size_t offset, size_t bytes);

/* A connection's slice of the pool, in bytes: len == 0 while it holds none. */
struct slice {
	size_t off, len;
};

int alloc_request(struct pool *pool, const void *wire, size_t len,
		  struct slice *slice, uint32_t *asked);

enum slot_verdict {
	SLOT_OK,       /* the slot holds seq: data arrived before doorbell */
	SLOT_LAPPED,   /* a later write of the stream already reused it */
	SLOT_MISMATCH, /* anything else: ordering or data is broken */
};

enum slot_verdict slot_check(uint32_t seq, uint32_t value, uint32_t slots);
const char *slot_verdict_name(enum slot_verdict verdict);

const char *wc_status_name(enum ibv_wc_status status);
const char *async_event_name(enum ibv_event_type type);

/* A server prints as it serves (doorbells: 10 lines a second a connection):
 * were its reader slow, a plain printf() would block the loop that serves every
 * client.  say() writes a line only if stdout can take it now, counting those
 * it drops; a reader gone (EPIPE) is noted, for the server to stop; errorf()
 * and fail() treat stderr alike. */
struct outlet {
	uint64_t dropped;
	bool closed;
};

void say(struct outlet *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

double now_seconds(void);
int parse_u64(const char *text, uint64_t max, uint64_t *value);
int parse_number(const char *what, const char *text, uint64_t min, uint64_t max,
		 uint64_t *value);
const char *errno_name(int err);
int fail(const char *what, int err);
void report(const char *what, int err);
int undo(int err, const char *what, int ret);
void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int devices_check(void);

#endif /* RDMA_POOL_COMMON_H */
