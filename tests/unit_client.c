/*
 * unit_client.c - unit tests of the client's batching arithmetic: which
 * work requests one batch holds, at the top of the 32-bit range of write
 * numbers too, without streaming four billion writes; and of how it takes
 * a server's status.  The client's own
 * source is compiled in here (its main renamed), so that its static
 * functions are the ones tested; nothing here needs an RDMA device.
 *
 * Reports in TAP (tests/tap.h), whose 60 s alarm ends a run that hangs:
 * the bug it guards against is a loop that never ends.
 */
int client_main(int argc, char **argv);
#define main client_main
#include "rdma_pool_client.c"
#undef main
#include "tests/tap.h"

/*
 * A client with room for one batch of k writes, granted a slice of `slots`
 * 4-byte slots at 0x1000 with rkey 0x77: what stream_open() and
 * slice_request() would have set up.
 */
static int client_for_batch(struct client *cl, uint32_t k, uint32_t slots)
{
	*cl = (struct client){ .opt = { .every = k, .window = 1 } };
	cl->wrs = calloc(k, sizeof(*cl->wrs));
	cl->sges = calloc(k, sizeof(*cl->sges));
	cl->values = calloc(k, sizeof(*cl->values));
	cl->doorbells = calloc(1, sizeof(*cl->doorbells));
	if (!cl->wrs || !cl->sges || !cl->values || !cl->doorbells)
		return -ENOMEM;
	cl->doorbells[0].values = cl->values;
	cl->remote_addr = 0x1000;
	cl->rkey = 0x77;
	cl->slots = slots;
	return 0;
}

static void client_free(struct client *cl)
{
	free(cl->wrs);
	free(cl->sges);
	free(cl->values);
	free(cl->doorbells);
}

/*
 * Write i of a batch first..last: its own work request, chained to the
 * next, to slot (i - 1) % slots with value i; the last one is the
 * doorbell, signaled, with i as its immediate value.
 */
static void expect_batch(struct client *cl, uint32_t first, uint32_t last)
{
	struct doorbell *db = &cl->doorbells[0];

	batch_fill(cl, first, last - first + 1, db);
	EXPECT(db->seq == last);
	for (uint32_t k = 0; k <= last - first; k++) {
		struct ibv_send_wr *wr = &cl->wrs[k];
		uint32_t i = first + k;
		bool is_doorbell = i == last;

		EXPECT(wr->wr_id == i);
		EXPECT(wr->next == (is_doorbell ? NULL : &cl->wrs[k + 1]));
		EXPECT(wr->opcode == (is_doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM
						  : IBV_WR_RDMA_WRITE));
		EXPECT(!!(wr->send_flags & IBV_SEND_SIGNALED) == is_doorbell);
		EXPECT(wr->imm_data == (is_doorbell ? htobe32(i) : 0));
		EXPECT(wr->wr.rdma.remote_addr ==
		       0x1000 + (uint64_t)((i - 1) % cl->slots) * 4);
		EXPECT(wr->wr.rdma.rkey == 0x77);
		EXPECT(db->values[k] == htobe32(i));
		EXPECT(wr->sg_list == &cl->sges[k] && wr->num_sge == 1);
		EXPECT(cl->sges[k].addr == (uintptr_t)&db->values[k]);
	}
}

static void test_batch_first(void)
{
	struct client cl;

	if (client_for_batch(&cl, 4, 3) == 0)
		expect_batch(&cl, 1, 4);
	client_free(&cl);
}

/* -n 4294967295 -k 4: the last batch ends at UINT32_MAX itself. */
static void test_batch_at_the_top(void)
{
	struct client cl;

	if (client_for_batch(&cl, 4, 1024) == 0)
		expect_batch(&cl, UINT32_MAX - 3, UINT32_MAX);
	client_free(&cl);
}

/* A batch of one, the doorbell alone, at UINT32_MAX. */
static void test_batch_of_one_at_the_top(void)
{
	struct client cl;

	if (client_for_batch(&cl, 1, 1) == 0)
		expect_batch(&cl, UINT32_MAX, UINT32_MAX);
	client_free(&cl);
}

/*
 * A hostile or broken server's status: only a small positive number is an
 * errno value.  The largest ones must be refused by name, not negated
 * (-(int)0x80000000 overflows: undefined, and an abort under UBSan).
 */
static void test_status_not_errno(void)
{
	static const uint32_t statuses[] = { 4096, 0x7fffffff, 0x80000000,
					     UINT32_MAX };
	struct client cl = { .opt = { .size = 4096 } };

	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
		struct ctrl_msg reply = { .type = CTRL_RESP_ALLOC,
					  .status = statuses[i] };

		EXPECT(slice_refused(&cl, &reply) == -EBADMSG);
	}
	struct ctrl_msg denial = { .type = CTRL_RESP_ALLOC, .status = ENOMEM };
	EXPECT(slice_refused(&cl, &denial) == -ENOMEM);
}

int main(void)
{
	static const struct unit_test tests[] = {
		{ "batch_first", test_batch_first },
		{ "batch_at_the_top", test_batch_at_the_top },
		{ "batch_of_one_at_the_top", test_batch_of_one_at_the_top },
		{ "status_not_errno", test_status_not_errno },
	};

	return RUN_TESTS("unit_client", tests);
}
