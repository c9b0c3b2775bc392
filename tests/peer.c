/* peer.c - see peer.h. */
#include <errno.h>
#include <poll.h>
#include <time.h>

#include "common/common.h"
#include "tests/peer.h"

int peer_event(struct rdma_event_channel *events,
	       enum rdma_cm_event_type *type, struct rdma_cm_id **id,
	       int *status)
{
	struct pollfd pfd = { .fd = events->fd, .events = POLLIN };
	struct rdma_cm_event *event;

	if (poll(&pfd, 1, PEER_TIMEOUT_MS) != 1) {
		errorf("no CM event within %d ms", PEER_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	if (rdma_get_cm_event(events, &event))
		return fail("rdma_get_cm_event", errno);
	*type = event->event;
	*id = event->id;
	*status = event->status;
	rdma_ack_cm_event(event);
	return 0;
}

int peer_expect(struct rdma_event_channel *events,
		enum rdma_cm_event_type expected)
{
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	int status, err;

	err = peer_event(events, &type, &id, &status);
	if (err)
		return err;
	if (type != expected) {
		errorf("got %s (status %d), not %s", rdma_event_str(type),
		       status, rdma_event_str(expected));
		return -EPROTO;
	}
	return 0;
}

int peer_resolve(struct rdma_event_channel *events, struct rdma_cm_id *id,
		 struct sockaddr *src, struct sockaddr *addr)
{
	int err;

	if (rdma_resolve_addr(id, src, addr, PEER_TIMEOUT_MS))
		return fail("rdma_resolve_addr", errno);
	err = peer_expect(events, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (err)
		return err;
	if (rdma_resolve_route(id, PEER_TIMEOUT_MS))
		return fail("rdma_resolve_route", errno);
	return peer_expect(events, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int peer_cq_wait(struct ibv_cq *cq, int ms, struct ibv_wc *wc)
{
	double deadline = now_ms() + ms;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? fail("ibv_poll_cq", EIO) : 1;
	} while (now_ms() < deadline);
	return 0;
}
