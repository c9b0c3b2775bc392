/*
 * peer.h - what the two test peers (ctrl_peer.c, cm_probe.c) share: the
 * CM's events with a deadline, an active side's way to a route, and a
 * completion with a deadline.  A peer that waits forever for an event that
 * never comes would hang the test that runs it; each wait here ends.
 */
#ifndef PEER_H
#define PEER_H

#include <rdma/rdma_cma.h>

#define PEER_TIMEOUT_MS 10000 /* for any one CM event */

/* The next event on the channel within PEER_TIMEOUT_MS, its type, cm_id
 * and status copied out and the event acked. */
int peer_event(struct rdma_event_channel *events,
	       enum rdma_cm_event_type *type, struct rdma_cm_id **id,
	       int *status);

/* The next event, which must be EXPECTED (while one cm_id is busy, events
 * come one at a time). */
int peer_expect(struct rdma_event_channel *events,
		enum rdma_cm_event_type expected);

/* An active cm_id from nothing to a route to ADDR, from SRC (NULL: the
 * address the route picks): resolving the address binds it to the RDMA
 * device that reaches ADDR, resolving the route finds the path; the QP
 * comes after, on that device. */
int peer_resolve(struct rdma_event_channel *events, struct rdma_cm_id *id,
		 struct sockaddr *src, struct sockaddr *addr);

/* 1 and the first completion of CQ within MS milliseconds (busy-polled),
 * 0 if none came, < 0 if polling failed. */
int peer_cq_wait(struct ibv_cq *cq, int ms, struct ibv_wc *wc);

#endif
