/*
 * reports.c - the servers' outputs and signals, and the lines of a
 * connection's life: what is in use, each grant and doorbell, each failure,
 * event and destroy, and the last words.  Each server's core path calls
 * these where the thing reported happens; they print, and count what they
 * print about (doorbells held back, sends abandoned).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/server.h"

/* A terminal is the one output poll() does not keep from blocking: POLLOUT
 * there means some room (n_tty_poll() in the kernel's n_tty.c), and a write()
 * needing more sleeps until the reader makes it (a hung ssh session: never),
 * unless the file is O_NONBLOCK (n_tty_write()).  The flag is the open file's,
 * shared with the shell: the server reopens the terminal non-blocking. */
static void tty_unblock(int fd)
{
	char path[32];
	int tty;

	if (!isatty(fd))
		return;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	tty = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK);
	if (tty < 0 || dup2(tty, fd) < 0) /* another's terminal, say */
		report(path, errno);	  /* left as it is: it may block */
	if (tty >= 0)
		close(tty);
}

/* The outputs and the signals.  Signals arrive as readable data on a file
 * descriptor instead of interrupting the program: the loop checks it like any
 * other source of work, and no global flag is needed.  SIGINT and SIGTERM stop
 * the server, SIGUSR1 asks for its counters.  SIGPIPE, which would end the
 * server without its teardown when its stdout's reader goes away, is ignored:
 * say() sees EPIPE instead, and the server stops on srv->out.closed. */
int reports_open(struct server *srv)
{
	sigset_t mask;

	tty_unblock(STDOUT_FILENO);
	tty_unblock(STDERR_FILENO);
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

/* The number of a pending signal, 0 if none. */
int signal_take(struct server *srv)
{
	struct signalfd_siginfo info;

	if (read(srv->sigfd, &info, sizeof(info)) != sizeof(info))
		return 0;
	return (int)info.ssi_signo;
}

/* What is in use on one device, or on all (dev NULL), after SIGUSR1 ("stats")
 * or at the end, after the signal signo ("shutdown signal=SIGINT"); tail: the
 * server's own counts.  A device's clients and QPs gone: 0 connections, 0
 * closing, 0 chunks, every receive posted (then it is let go: device_forget()
 * says any not).  The doorbells of all count those of devices let go. */
void stats_line(struct server *srv, int signo, const struct device *dev,
		const char *tail)
{
	unsigned int live = 0, closing = 0;
	uint32_t posted = 0, depth = 0;
	uint64_t doorbells = dev ? 0 : srv->doorbells;
	size_t chunks = 0;
	char what[48] = "stats", name[80] = "";

	for (const struct conn *conn = srv->conns; conn; conn = conn->next) {
		live += (!dev || conn->dev == dev) && !conn->closing;
		closing += (!dev || conn->dev == dev) && conn->closing;
	}
	for (unsigned int i = 0; i < srv->ndevices; i++) {
		const struct device *d = &srv->devices[i];

		if (dev && d != dev)
			continue;
		chunks += d->pool.used;
		doorbells += d->doorbells;
		posted += d->recvs_posted;
		depth += srv->opt.srq_depth;
	}
	if (signo != SIGUSR1)
		snprintf(what, sizeof(what), "shutdown signal=SIG%s",
			 sigabbrev_np(signo));
	if (dev)
		snprintf(name, sizeof(name), " device=%s",
			 ibv_get_device_name(dev->verbs->device));
	say(&srv->out,
	    "%s%s connections=%u chunks_in_use=%zu doorbells=%" PRIu64
	    " closing=%u recvs_posted=%" PRIu32 "/%" PRIu32 "%s\n",
	    what, name, live, chunks, doorbells, closing, posted, depth, tail);
}

/* The grant or denial on_request() sends.  The pool's key is said (every
 * client holds it); a slice's own, under --isolation mr, is its secret:
 * not in a log that others may read. */
void reply_print(struct server *srv, const struct conn *conn,
		 const struct ctrl_msg *reply, uint32_t asked)
{
	char key[24] = "";

	if (srv->opt.isolation == ISOLATION_NONE)
		snprintf(key, sizeof(key), " rkey=0x%" PRIx32, reply->rkey);
	if (reply->status)
		say(&srv->out,
		    "deny qp=0x%" PRIx32 " size=%" PRIu32 " status=%s\n",
		    conn->qp_num, asked, errno_name((int)reply->status));
	else
		say(&srv->out,
		    "grant qp=0x%" PRIx32 " addr=0x%" PRIx64 "%s size=%" PRIu32
		    "\n",
		    conn->qp_num, reply->addr, key, reply->size);
}

/* The doorbells of a connection not said this second, in one line each on
 * stdout and, for the MISMATCHes among them, on stderr. */
static void unsaid_print(struct server *srv, struct conn *conn)
{
	const uint32_t *n = conn->unsaid;

	if (n[SLOT_OK] || n[SLOT_LAPPED] || n[SLOT_MISMATCH])
		say(&srv->out,
		    "doorbells qp=0x%" PRIx32 " not_printed=%" PRIu32
		    " ok=%" PRIu32 " lapped=%" PRIu32 " MISMATCH=%" PRIu32 "\n",
		    conn->qp_num,
		    n[SLOT_OK] + n[SLOT_LAPPED] + n[SLOT_MISMATCH], n[SLOT_OK],
		    n[SLOT_LAPPED], n[SLOT_MISMATCH]);
	if (n[SLOT_MISMATCH])
		errorf("MISMATCH qp=0x%" PRIx32 ": %" PRIu32
		       " more, not printed",
		       conn->qp_num, n[SLOT_MISMATCH]);
	memset(conn->unsaid, 0, sizeof(conn->unsaid));
}

/* A doorbell's verdict (on_doorbell()): ok, lapped, or a MISMATCH (ordering or
 * data broke; no slice to hold it), which stderr hears of too.  A
 * WRITE_WITH_IMM of no bytes needs no key and no slice (rxe's check_rkey(),
 * the IB spec's C9-88): a peer may ring at its NIC's rate, and a line each
 * would fill a disk, or a terminal.  So at most DOORBELL_LINES_PER_S a second
 * are said per connection; the rest are counted by verdict, said in one line
 * at the next second's first or when the connection goes (destroy_print()). */
#define DOORBELL_LINES_PER_S 10
void doorbell_print(struct server *srv, struct conn *conn, uint32_t seq,
		    uint32_t value, enum slot_verdict verdict)
{
	double now = now_seconds();

	if (now - conn->said_at >= 1) {
		unsaid_print(srv, conn);
		conn->said_at = now;
		conn->said = 0;
	}
	if (conn->said == DOORBELL_LINES_PER_S) {
		conn->unsaid[verdict]++;
		return;
	}
	conn->said++;
	say(&srv->out,
	    "doorbell qp=0x%" PRIx32 " seq=%" PRIu32 " value=%" PRIu32 " %s\n",
	    conn->qp_num, seq, value, slot_verdict_name(verdict));
	if (verdict == SLOT_MISMATCH)
		errorf("MISMATCH qp=0x%" PRIx32 ": doorbell %" PRIu32
		       " found %" PRIu32 " in its slot%s",
		       conn->qp_num, seq, value,
		       conn->slice.len ? "" : " (it holds no slice)");
}

/* A work request failed, and its QP is now in the error state, or a
 * completion came for no QP of ours; only wr_id, status and qp_num are set
 * (not opcode).  A flush (IBV_WC_WR_FLUSH_ERR) only follows an error state
 * (a close, or a break the close line reports): not said. */
void failure_print(const struct conn *conn, const struct ibv_wc *wc)
{
	uint64_t kind = WRID_KIND(wc->wr_id);
	const char *what = kind == WRID_RECV	? "receive"
			   : kind == WRID_PROBE ? "keepalive probe"
						: "reply";

	if (!conn)
		errorf("a completion for qp=0x%" PRIx32 ", which is no "
		       "connection of ours",
		       wc->qp_num);
	else if (wc->status != IBV_WC_WR_FLUSH_ERR)
		errorf("%s qp=0x%" PRIx32 " failed: %s", what, wc->qp_num,
		       wc_status_name(wc->status));
}

/* An asynchronous event, named, with its QP's number for a QP's error or
 * COMM_EST, and why the server stops if it does (a broken CQ, SRQ or device).
 * Not LAST_WQE_REACHED, each closing QP's last event on kernels raising it. */
void async_print(struct server *srv, const struct ibv_async_event *event)
{
	enum ibv_event_type type = event->event_type;
	const char *name = async_event_name(type);

	if (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
	    type == IBV_EVENT_QP_ACCESS_ERR || type == IBV_EVENT_COMM_EST)
		say(&srv->out, "async event=%s qp=0x%" PRIx32 "\n", name,
		    event->element.qp->qp_num);
	else if (type != IBV_EVENT_QP_LAST_WQE_REACHED)
		say(&srv->out, "async event=%s\n", name);
	if (type == IBV_EVENT_CQ_ERR || type == IBV_EVENT_SRQ_ERR ||
	    type == IBV_EVENT_DEVICE_FATAL)
		errorf("%s: completions can no longer be trusted: stopping",
		       name);
}

/* A QP is being destroyed, its slice back; what ended the wait (conn_quiet()).
 * A send still outstanding was abandoned (a device that flushes nothing: never
 * seen): counted, and said.  A late completion of it finds no connection: rxe
 * reuses a QP number only after about a million QPs (docs/design.md). */
void destroy_print(struct server *srv, struct conn *conn, double now)
{
	if (conn->sending)
		errorf("qp=0x%" PRIx32 ": %u sends still outstanding after "
		       "%d ms: destroying it anyway",
		       conn->qp_num, conn->sending, CLOSE_GIVE_UP_MS);
	srv->sends_abandoned += conn->sending;
	unsaid_print(srv, conn);
	say(&srv->out,
	    "destroy qp=0x%" PRIx32 " after_ms=%.0f ended_by=%s freed=%zu\n",
	    conn->qp_num, (now - conn->closed_at) * 1000,
	    conn->last_wqe ? "last_wqe" : "timer", conn->slice.len);
}

/* The last words, on stderr: what was lost on the way. */
void end_print(const struct server *srv)
{
	if (srv->out.dropped)
		errorf("%" PRIu64 " lines of output dropped: stdout was not "
		       "read fast enough",
		       srv->out.dropped);
	if (srv->sends_abandoned)
		errorf("%" PRIu64 " sends abandoned with their QPs",
		       srv->sends_abandoned);
}
