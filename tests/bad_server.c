/*
 * bad_server.c - a server that misbehaves on purpose, for the tests of the
 * client: it listens, and refuses the first connect request with a reason
 * of its choosing, as any machine on the network may.
 *
 *   usage: bad_server ADDR REASON
 *
 * Listens on ADDR, on a port the CM picks, and prints "listen port=N
 * reason_bytes=N" (as the servers print "listen port=N ...").
 * The first connect request is rejected with REASON's bytes (and a NUL)
 * as the REJ's private data: whatever they are, terminal escape sequences
 * included.  Exits 0 once it has rejected one, 1 on any failure or after
 * PEER_TIMEOUT_MS without a request.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "common/common.h"
#include "tests/peer.h"

static int reject_first(struct rdma_event_channel *events, const char *reason)
{
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	int status, err = peer_event(events, &type, &id, &status);

	if (err)
		return err;
	if (type != RDMA_CM_EVENT_CONNECT_REQUEST) {
		errorf("waiting for a connect request, got %s",
		       rdma_event_str(type));
		return -EPROTO;
	}
	if (rdma_reject(id, reason, (uint8_t)(strlen(reason) + 1)))
		err = fail("rdma_reject", errno);
	rdma_destroy_id(id);
	return err;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *ai;
	struct rdma_event_channel *events;
	struct rdma_cm_id *listener;
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3 || strlen(argv[2]) > 100) {
		errorf("usage: bad_server ADDR REASON (100 bytes at most)");
		return EXIT_FAILURE;
	}
	if (getaddrinfo(argv[1], "0", &hints, &ai)) {
		errorf("cannot resolve %s", argv[1]);
		return EXIT_FAILURE;
	}
	events = rdma_create_event_channel();
	if (!events || rdma_create_id(events, &listener, NULL, RDMA_PS_TCP)) {
		fail("rdma_create_id", errno);
		return EXIT_FAILURE;
	}
	err = 0;
	if (rdma_bind_addr(listener, ai->ai_addr) || rdma_listen(listener, 1))
		err = fail("rdma_bind_addr/rdma_listen", errno);
	freeaddrinfo(ai);
	if (!err) {
		printf("listen port=%u reason_bytes=%zu\n",
		       ntohs(rdma_get_src_port(listener)), strlen(argv[2]));
		err = reject_first(events, argv[2]);
	}
	rdma_destroy_id(listener);
	rdma_destroy_event_channel(events);
	return err ? EXIT_FAILURE : EXIT_SUCCESS;
}
