/*
 * keys.c - --isolation mr: a key per slice.  The pool's rkey opens all of the
 * pool to whoever holds it.  Under --isolation mr the pool is not registered
 * as a whole: no key to all of it exists to be printed, leaked or guessed
 * (pool_keyless(), from pool_register()).  Each client gets the rkey of a
 * region over its own slice (slice_key_make(), from on_request()),
 * deregistered once its QP is quiet (slice_key_drop(), from conn_destroy()).
 * Under --isolation none, those two do nothing.
 */
#include <errno.h>
#include <inttypes.h>

#include "common/server.h"

int pool_keyless(struct server *srv, struct device *dev)
{
	say(&srv->out,
	    "pool device=%s addr=0x%" PRIxPTR " size=%" PRIu32 " rkey=none\n",
	    ibv_get_device_name(dev->verbs->device), (uintptr_t)dev->pool_mem,
	    srv->opt.pool_size);
	return 0;
}

/* A key to the slice just granted (and zeroed), in *rkey: a region over
 * this slice alone, the only pin of these pages, that lets remote writes in
 * (REMOTE_WRITE needs LOCAL_WRITE).  Its rkey works from every QP of its PD,
 * and every client's QP is in its device's one PD: a client that learns or
 * guesses a neighbour's key can write there; a wrong guess breaks its QP,
 * and the server closes it.  (Memory windows, which could tie a key to one
 * QP, are not used: docs/design.md says why.)  If none can be made, the
 * slice goes back to the pool and the client is denied with the errno. */
int slice_key_make(struct server *srv, struct conn *conn, uint32_t *rkey)
{
	if (srv->opt.isolation == ISOLATION_NONE)
		return 0;
	conn->slice_mr =
		ibv_reg_mr(conn->dev->pd, conn->dev->pool_mem + conn->slice.off,
			   conn->slice.len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!conn->slice_mr) {
		int err = fail("ibv_reg_mr(slice)", errno);

		pool_free(&conn->dev->pool, conn->slice.off, conn->slice.len);
		conn->slice = (struct slice){ 0 };
		return err;
	}
	*rkey = conn->slice_mr->rkey;
	return 0;
}

/* The client is gone and its QP quiet: deregistering its region revokes
 * its key before its slice goes back to the pool. */
int slice_key_drop(struct conn *conn)
{
	struct ibv_mr *mr = conn->slice_mr;

	conn->slice_mr = NULL;
	return mr ? undo(0, "ibv_dereg_mr(slice)", ibv_dereg_mr(mr)) : 0;
}
