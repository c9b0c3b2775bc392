/*
 * fuzz_ctrl_msg.c - libFuzzer harness for everything a server does with the
 * bytes a peer sends it: msg_decode(), alloc_request() and the pool under
 * them.  Built by "make fuzz" with clang -fsanitize=fuzzer,address,undefined.
 *
 * The input is cut into messages of up to 32 bytes (the last one may be
 * short), each received on one of 8 connections in turn; a connection that
 * holds a slice gives it back before its next message, so the pool fills,
 * fragments and empties.  After every message the harness checks what must
 * always hold, and aborts (a crash, for libFuzzer) if it does not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#define CONNS 8
#define POOL_CHUNKS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok)
{
	if (!ok)
		abort();
}

/* Decoding then encoding a message the decoder accepts gives its bytes. */
static void check_round_trip(const uint8_t *wire, size_t len)
{
	uint8_t again[CTRL_MSG_SIZE];
	struct ctrl_msg msg;

	if (msg_decode(wire, len, &msg))
		return;
	require(len == CTRL_MSG_SIZE);
	msg_encode(&msg, again);
	require(memcmp(again, wire, CTRL_MSG_SIZE) == 0);
}

/* No two slices overlap, and the pool counts exactly their chunks. */
static void check_slices(const struct pool *pool, const struct slice *slices)
{
	size_t chunks = 0;

	for (int i = 0; i < CONNS; i++) {
		const struct slice *a = &slices[i];

		chunks += a->len / POOL_CHUNK_SIZE;
		require(a->len % POOL_CHUNK_SIZE == 0);
		require(a->off + a->len <= POOL_CHUNKS * POOL_CHUNK_SIZE);
		for (int j = i + 1; j < CONNS && a->len; j++) {
			const struct slice *b = &slices[j];

			require(!b->len || a->off + a->len <= b->off ||
				b->off + b->len <= a->off);
		}
	}
	require(pool->used == chunks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct slice slices[CONNS] = { { 0 } };
	struct pool pool;
	size_t n = 0;

	if (pool_init(&pool, POOL_CHUNKS * POOL_CHUNK_SIZE))
		return 0;
	for (size_t off = 0; off < size; off += CTRL_MSG_SIZE, n++) {
		size_t len = size - off < CTRL_MSG_SIZE ? size - off : CTRL_MSG_SIZE;
		struct slice *slice = &slices[n % CONNS];
		bool held = slice->len != 0;
		uint32_t asked;
		int err;

		check_round_trip(data + off, len);
		/* Every other time round, the connection lets its slice go. */
		if (held && (n / CONNS) % 2) {
			pool_free(&pool, slice->off, slice->len);
			*slice = (struct slice){ 0 };
			held = false;
		}
		err = alloc_request(&pool, data + off, len, slice, &asked);
		require(err == 0 || err == -EBADMSG || err == -EINVAL ||
			err == -ENOMEM || err == -EBUSY);
		require(err != -EBUSY || held);
		require(err != 0 || !held);
		if (!err)
			require(slice->len >= asked && asked > 0 &&
				slice->len - asked < POOL_CHUNK_SIZE);
		check_slices(&pool, slices);
	}
	pool_destroy(&pool);
	return 0;
}
