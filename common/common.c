/* common.c - see common.h for what lives here and why. */
#include "common.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The wire format is the struct's layout, fields naturally aligned: no padding
 * (these checks see to it), so msg_encode() is a byte swap and a memcpy. */
_Static_assert(sizeof(struct ctrl_msg) == CTRL_MSG_SIZE, "ctrl_msg size");
_Static_assert(offsetof(struct ctrl_msg, magic) == 0, "magic offset");
_Static_assert(offsetof(struct ctrl_msg, version) == 4, "version offset");
_Static_assert(offsetof(struct ctrl_msg, type) == 6, "type offset");
_Static_assert(offsetof(struct ctrl_msg, size) == 8, "size offset");
_Static_assert(offsetof(struct ctrl_msg, reserved) == 12, "reserved offset");
_Static_assert(offsetof(struct ctrl_msg, addr) == 16, "addr offset");
_Static_assert(offsetof(struct ctrl_msg, rkey) == 24, "rkey offset");
_Static_assert(offsetof(struct ctrl_msg, status) == 28, "status offset");

void msg_encode(const struct ctrl_msg *msg, void *wire)
{
	struct ctrl_msg be = {
		.magic = htobe32(msg->magic),
		.version = htobe16(msg->version),
		.type = htobe16(msg->type),
		.size = htobe32(msg->size),
		.reserved = htobe32(msg->reserved),
		.addr = htobe64(msg->addr),
		.rkey = htobe32(msg->rkey),
		.status = htobe32(msg->status),
	};

	memcpy(wire, &be, sizeof(be));
}

/* A message is exactly one ctrl_msg: a shorter or longer one, a foreign
 * magic, another version or a type we do not know is -EBADMSG. */
int msg_decode(const void *wire, size_t len, struct ctrl_msg *msg)
{
	struct ctrl_msg be;

	if (len != sizeof(be))
		return -EBADMSG;
	memcpy(&be, wire, sizeof(be));
	*msg = (struct ctrl_msg){
		.magic = be32toh(be.magic),
		.version = be16toh(be.version),
		.type = be16toh(be.type),
		.size = be32toh(be.size),
		.reserved = be32toh(be.reserved),
		.addr = be64toh(be.addr),
		.rkey = be32toh(be.rkey),
		.status = be32toh(be.status),
	};
	if (msg->magic != CTRL_MAGIC || msg->version != CTRL_VERSION ||
	    (msg->type != CTRL_REQ_ALLOC && msg->type != CTRL_RESP_ALLOC))
		return -EBADMSG;
	return 0;
}

#define BITS_PER_WORD 64

static bool chunk_in_use(const struct pool *pool, size_t chunk)
{
	return pool->bits[chunk / BITS_PER_WORD] >> (chunk % BITS_PER_WORD) & 1;
}

static void chunk_mark(struct pool *pool, size_t chunk, bool in_use)
{
	uint64_t *word = &pool->bits[chunk / BITS_PER_WORD];
	uint64_t bit = UINT64_C(1) << (chunk % BITS_PER_WORD);

	*word = in_use ? *word | bit : *word & ~bit;
}

int pool_init(struct pool *pool, size_t bytes)
{
	if (bytes == 0 || bytes % POOL_CHUNK_SIZE)
		return -EINVAL;
	pool->nchunks = bytes / POOL_CHUNK_SIZE;
	pool->bits = calloc((pool->nchunks + BITS_PER_WORD - 1) / BITS_PER_WORD,
			    sizeof(*pool->bits));
	pool->used = 0;
	return pool->bits ? 0 : fail("calloc(pool bitmap)", ENOMEM);
}

void pool_destroy(struct pool *pool)
{
	free(pool->bits);
	*pool = (struct pool){ 0 };
}

/* First fit: the lowest run of free chunks long enough for want bytes,
 * rounded up to whole chunks.  A peer may ask again at once after a denial,
 * and a pool may have a million chunks (4 GiB): a pool without that many
 * free answers at once, and the walk passes 64 chunks in use at a time. */
int pool_alloc(struct pool *pool, uint64_t want, size_t *offset,
	       size_t *granted)
{
	size_t need, run = 0, chunk;

	if (want == 0 || want > (uint64_t)pool->nchunks * POOL_CHUNK_SIZE)
		return -EINVAL;
	need = (want + POOL_CHUNK_SIZE - 1) / POOL_CHUNK_SIZE;
	if (need > pool->nchunks - pool->used)
		return -ENOMEM;

	for (chunk = 0; chunk < pool->nchunks && run < need; chunk++) {
		if (chunk % BITS_PER_WORD == 0 &&
		    pool->bits[chunk / BITS_PER_WORD] == UINT64_MAX)
			chunk += BITS_PER_WORD - 1; /* all 64 in use */
		run = chunk_in_use(pool, chunk) ? 0 : run + 1;
	}
	if (run < need)
		return -ENOMEM;

	for (size_t first = chunk - need; first < chunk; first++)
		chunk_mark(pool, first, true);
	pool->used += need;
	*offset = (chunk - need) * POOL_CHUNK_SIZE;
	*granted = need * POOL_CHUNK_SIZE;
	return 0;
}

/* Give back a range that pool_alloc() handed out. */
void pool_free(struct pool *pool, size_t offset, size_t bytes)
{
	size_t first = offset / POOL_CHUNK_SIZE;
	size_t count = bytes / POOL_CHUNK_SIZE;

	for (size_t chunk = first; chunk < first + count; chunk++)
		chunk_mark(pool, chunk, false);
	pool->used -= count;
}

/* What a server answers a control message, in the order the protocol checks:
 * is it a well-formed REQ_ALLOC (-EBADMSG), does the connection already hold a
 * slice (-EBUSY), is the size possible at all (-EINVAL), is there room
 * (-ENOMEM).  *asked: the size asked for, 0 for an unreadable message. */
int alloc_request(struct pool *pool, const void *wire, size_t len,
		  struct slice *slice, uint32_t *asked)
{
	struct ctrl_msg req;

	*asked = 0;
	if (msg_decode(wire, len, &req) || req.type != CTRL_REQ_ALLOC)
		return -EBADMSG;
	*asked = req.size;
	if (slice->len)
		return -EBUSY;
	return pool_alloc(pool, req.size, &slice->off, &slice->len);
}

/* The client writes value i into slot (i - 1) mod slots and, with its last
 * write, rings doorbell seq = i: when the doorbell completes, seq's slot holds
 * seq, or, if the client has since lapped its slice, seq plus a multiple of
 * slots (late, not wrong).  With no slice (slots 0): no slot, never ok. */
enum slot_verdict slot_check(uint32_t seq, uint32_t value, uint32_t slots)
{
	if (slots && value == seq)
		return SLOT_OK;
	if (slots && value > seq && (value - seq) % slots == 0)
		return SLOT_LAPPED;
	return SLOT_MISMATCH;
}

const char *slot_verdict_name(enum slot_verdict verdict)
{
	return verdict == SLOT_OK	? "ok"
	       : verdict == SLOT_LAPPED ? "lapped"
					: "MISMATCH";
}

#define NAME(x) [x] = #x /* NAME(X) is [X] = "X": each name written once */

/* ibv_wc_status_str() gives a sentence; these are the names a reader can
 * look up in <infiniband/verbs.h> and the verbs manual. */
const char *wc_status_name(enum ibv_wc_status status)
{
	static const char *const names[] = {
		NAME(IBV_WC_SUCCESS),		NAME(IBV_WC_LOC_LEN_ERR),
		NAME(IBV_WC_LOC_QP_OP_ERR),	NAME(IBV_WC_LOC_EEC_OP_ERR),
		NAME(IBV_WC_LOC_PROT_ERR),	NAME(IBV_WC_WR_FLUSH_ERR),
		NAME(IBV_WC_MW_BIND_ERR),	NAME(IBV_WC_BAD_RESP_ERR),
		NAME(IBV_WC_LOC_ACCESS_ERR),	NAME(IBV_WC_REM_INV_REQ_ERR),
		NAME(IBV_WC_REM_ACCESS_ERR),	NAME(IBV_WC_REM_OP_ERR),
		NAME(IBV_WC_RETRY_EXC_ERR),	NAME(IBV_WC_RNR_RETRY_EXC_ERR),
		NAME(IBV_WC_LOC_RDD_VIOL_ERR),	NAME(IBV_WC_REM_INV_RD_REQ_ERR),
		NAME(IBV_WC_REM_ABORT_ERR),	NAME(IBV_WC_INV_EECN_ERR),
		NAME(IBV_WC_INV_EEC_STATE_ERR), NAME(IBV_WC_FATAL_ERR),
		NAME(IBV_WC_RESP_TIMEOUT_ERR),	NAME(IBV_WC_GENERAL_ERR)
	};

	if ((size_t)status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "IBV_WC_(unknown)";
}

const char *async_event_name(enum ibv_event_type type)
{
	static const char *const names[] = {
		NAME(IBV_EVENT_CQ_ERR),
		NAME(IBV_EVENT_QP_FATAL),
		NAME(IBV_EVENT_QP_REQ_ERR),
		NAME(IBV_EVENT_QP_ACCESS_ERR),
		NAME(IBV_EVENT_COMM_EST),
		NAME(IBV_EVENT_SQ_DRAINED),
		NAME(IBV_EVENT_PATH_MIG),
		NAME(IBV_EVENT_PATH_MIG_ERR),
		NAME(IBV_EVENT_DEVICE_FATAL),
		NAME(IBV_EVENT_PORT_ACTIVE),
		NAME(IBV_EVENT_PORT_ERR),
		NAME(IBV_EVENT_LID_CHANGE),
		NAME(IBV_EVENT_PKEY_CHANGE),
		NAME(IBV_EVENT_SM_CHANGE),
		NAME(IBV_EVENT_SRQ_ERR),
		NAME(IBV_EVENT_SRQ_LIMIT_REACHED),
		NAME(IBV_EVENT_QP_LAST_WQE_REACHED),
		NAME(IBV_EVENT_CLIENT_REREGISTER),
		NAME(IBV_EVENT_GID_CHANGE),
		NAME(IBV_EVENT_WQ_FATAL),
	};

	if ((size_t)type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "IBV_EVENT_(unknown)";
}

#undef NAME

#define SAY_LINE_MAX 512 /* a report line is far shorter */

/* poll() says whether fd takes more without blocking: a pipe with room for a
 * line (a line of at most PIPE_BUF bytes goes in whole), a file, a terminal
 * that is not stopped.  If not, -1 with errno EAGAIN.  A pipe whose reader has
 * gone polls as an error, and write() then fails with EPIPE (the servers
 * ignore SIGPIPE, which would otherwise end them). */
static ssize_t line_put(int fd, const char *line, size_t len)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };

	if (poll(&pfd, 1, 0) != 1 || !(pfd.revents & (POLLOUT | POLLERR))) {
		errno = EAGAIN;
		return -1;
	}
	return write(fd, line, len);
}

void say(struct outlet *out, const char *fmt, ...)
{
	char line[SAY_LINE_MAX];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (len >= (int)sizeof(line))
		len = sizeof(line) - 1;
	if (len < 0 || line_put(STDOUT_FILENO, line, (size_t)len) != len) {
		out->closed = out->closed || errno == EPIPE;
		out->dropped++;
	}
}

/* A monotonic clock in seconds, for timeouts and round trips. */
double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A whole decimal number, nothing before or after it, at most max.
 * strtoull() alone would take " 12", "+12", "-12" (as a huge value) and
 * "12abc"; a command line should take none of them. */
int parse_u64(const char *text, uint64_t max, uint64_t *value)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (text[0] < '0' || text[0] > '9' || *end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*value = v;
	return 0;
}

/* A number from min to max, or a message naming what is wrong and -EINVAL. */
int parse_number(const char *what, const char *text, uint64_t min, uint64_t max,
		 uint64_t *value)
{
	if (parse_u64(text, max, value) == 0 && *value >= min)
		return 0;
	errorf("bad %s '%s': want a whole number from %" PRIu64 " to %" PRIu64,
	       what, text, min, max);
	return -EINVAL;
}

/* "EINVAL" for EINVAL: the status names the protocol speaks in. */
const char *errno_name(int err)
{
	const char *name = strerrorname_np(err);

	return name ? name : "E(unknown)";
}

static void devices_hint(void)
{
	errorf("no RDMA device found.  Bring up Soft-RoCE on a network "
	       "interface: 'rdma link add rxe0 type rxe netdev eth0' (as "
	       "root, kernel module rdma_rxe), or run through "
	       "scripts/soft-roce.sh, which does it for you");
}

/* Registering memory pins its pages in RAM (the NIC may access them at any
 * moment: never swapped out or moved); an unprivileged process may pin at most
 * RLIMIT_MEMLOCK bytes, past which ibv_reg_mr() fails with ENOMEM.  A process
 * with CAP_IPC_LOCK (root's, unless a container drops it) is exempt. */
static void memlock_hint(void)
{
	struct rlimit lim;

	if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 &&
	    lim.rlim_cur != RLIM_INFINITY)
		errorf("registered memory is pinned, and this process may pin "
		       "only %llu KiB (ulimit -l).  Raise the limit: "
		       "'ulimit -l unlimited' in this shell (as root), a "
		       "'memlock' line in /etc/security/limits.conf, or "
		       "LimitMEMLOCK= for a systemd service",
		       (unsigned long long)lim.rlim_cur / 1024);
}

/* Idiom 1 (common.h).  The errno value is an argument, taken before anything
 * can overwrite it.  Two failures get a line of advice: no RDMA stack (no
 * /dev/infiniband/rdma_cm: rdma_create_event_channel() says ENODEV or ENOENT),
 * and a locked-memory limit too low to register memory.  A call that failed
 * with errno 0 still failed: -EIO, never 0, which callers read as success. */
int fail(const char *what, int err)
{
	if (!err) {
		errorf("%s: failed, and errno says nothing", what);
		return -EIO;
	}
	errorf("%s: %s", what, strerror(err));
	if ((err == ENODEV || err == ENOENT) &&
	    strcmp(what, "rdma_create_event_channel") == 0)
		devices_hint();
	if (err == ENOMEM && strncmp(what, "ibv_reg_mr", 10) == 0)
		memlock_hint();
	return -err;
}

/* Idiom 1's report-and-go-on (common.h): fail() with nothing to return. */
void report(const char *what, int err)
{
	fail(what, err);
}

/* Idiom 3 (common.h): one step of a teardown returned ret, and err is the
 * first error of the run so far.  ret is 0, an errno value (what failed:
 * reported here), or a negative errno value (reported where it happened). */
int undo(int err, const char *what, int ret)
{
	if (ret > 0)
		ret = fail(what, ret);
	return err ? err : ret;
}

/* Without an RDMA device the connection manager fails with a bare "No such
 * device", or worse, a server listens happily and never hears a thing. */
int devices_check(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (list)
		ibv_free_device_list(list);
	if (n > 0)
		return 0;
	devices_hint();
	return -ENODEV;
}

/* Any other error: "program: message" on stderr, written as say() writes. */
void errorf(const char *fmt, ...)
{
	char line[SAY_LINE_MAX];
	size_t room = sizeof(line) - 1; /* for the newline */
	int head, len;
	va_list ap;

	head = snprintf(line, room, "%s: ", program_invocation_short_name);
	if (head < 0 || (size_t)head >= room)
		return;
	va_start(ap, fmt);
	len = vsnprintf(line + head, room - (size_t)head, fmt, ap);
	va_end(ap);
	if (len < 0)
		return;
	len = head + len < (int)room ? head + len : (int)room - 1;
	line[len++] = '\n';
	line_put(STDERR_FILENO, line, (size_t)len);
}
