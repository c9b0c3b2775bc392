/*
 * device.c - what an RDMA device can take (devices_fit(), device_refusal());
 * which device a client came through (device_find()); the SRQ's limit event
 * (srq_limit_arm()); each QP's RNR wait (rnr_timer_shorten()); a device let go
 * with its last client (device_forget()), and by librdmacm (devices_look()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/server.h"

/* Why a device cannot take this server's settings, or NULL if it can: an
 * SRQ of --srq-depth, a CQ for it and --max-conns send queues (cq_open()),
 * a QP per connection and, under --isolation mr, a region per slice.  If
 * say_why, names the ibv_query_device(3) attribute a setting passes. */
const char *device_refusal(struct server *srv, struct ibv_context *verbs,
			   bool say_why)
{
	const struct options *opt = &srv->opt;
	uint64_t cqe = opt->srq_depth + (uint64_t)opt->max_conns * SQ_DEPTH;
	const char *name = ibv_get_device_name(verbs->device);
	struct ibv_device_attr attr;
	int ret = ibv_query_device(verbs, &attr);
	char why[256] = "";

	if (ret)
		report("ibv_query_device", ret);
	else if (opt->srq_depth > (uint32_t)attr.max_srq_wr)
		snprintf(why, sizeof(why),
			 "--srq-depth %" PRIu32 ": %s allows %d receives on an "
			 "SRQ (max_srq_wr)",
			 opt->srq_depth, name, attr.max_srq_wr);
	else if (cqe > (uint64_t)attr.max_cqe)
		snprintf(why, sizeof(why),
			 "--srq-depth %" PRIu32 " and --max-conns %" PRIu32
			 " need a CQ of %" PRIu64 " entries: %s allows %d "
			 "(max_cqe)",
			 opt->srq_depth, opt->max_conns, cqe, name,
			 attr.max_cqe);
	else if (opt->max_conns > (uint32_t)attr.max_qp)
		snprintf(why, sizeof(why),
			 "--max-conns %" PRIu32 ": %s allows %d QPs (max_qp)",
			 opt->max_conns, name, attr.max_qp);
	else if (opt->isolation != ISOLATION_NONE &&
		 opt->max_conns + 2 > (uint32_t)attr.max_mr)
		snprintf(why, sizeof(why),
			 "--isolation: %s allows %d memory regions (max_mr), "
			 "fewer than one per slice of --max-conns %" PRIu32
			 " and two of the server's",
			 name, attr.max_mr, opt->max_conns);
	if (why[0] && say_why)
		errorf("%s", why);
	return ret || why[0] ? "device-limits" : NULL;
}

/* At start: an RDMA device at all (devices_check()), and one at least that
 * can take the settings, else refused now, by name; a device that cannot,
 * when another can, is named, and its clients refused (conn_refusal()). */
int devices_fit(struct server *srv)
{
	struct ibv_device **list;
	int n, fits = 0, err = devices_check();

	if (err)
		return err;
	list = ibv_get_device_list(&n);
	if (!list)
		return fail("ibv_get_device_list", errno);
	for (int i = 0; i < n; i++) {
		struct ibv_context *verbs = ibv_open_device(list[i]);

		if (!verbs) {
			report("ibv_open_device", errno);
			continue;
		}
		fits += !device_refusal(srv, verbs, true);
		err = undo(err, "ibv_close_device", ibv_close_device(verbs));
	}
	ibv_free_device_list(list);
	return err ? err : (fits ? 0 : -EINVAL);
}

/* IBV_EVENT_SRQ_LIMIT_REACHED once fewer than an eighth of the SRQ's receives
 * are left: the server is not keeping up, and clients are about to hear
 * "receiver not ready".  It disarms itself when it fires: one line will do. */
int srq_limit_arm(struct server *srv, struct device *dev)
{
	struct ibv_srq_attr attr = { .srq_limit = srv->opt.srq_depth / 8 };
	int ret = 0;

	if (attr.srq_limit) /* under 8 receives, an eighth is 0 */
		ret = ibv_modify_srq(dev->srq, &attr, IBV_SRQ_LIMIT);
	return ret ? fail("ibv_modify_srq(srq_limit)", ret) : 0;
}

#define MIN_RNR_TIMER 12 /* wait 0.64 ms; rxe: till a kernel tick */

/* When a message finds the SRQ empty, our NIC answers "receiver not ready"
 * and names the wait before a retry: the QP's min_rnr_timer, a 5-bit code.
 * rdma_accept() sets 0: not "no wait" but the longest, 655 ms.  Once accepted
 * the QP takes a shorter one (in RTS); if not, it works, slowly under load. */
void rnr_timer_shorten(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .min_rnr_timer = MIN_RNR_TIMER };
	int ret = ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER);

	if (ret)
		report("ibv_modify_qp(min_rnr_timer)", ret);
}

/* The device in use whose context is verbs, or NULL: librdmacm gives every
 * cm_id on a device its one context (ucma_get_device() in its cma.c). */
struct device *device_find(struct server *srv, struct ibv_context *verbs)
{
	for (unsigned int i = 0; i < srv->ndevices; i++)
		if (srv->devices[i].verbs == verbs)
			return &srv->devices[i];
	return NULL;
}

/* After verbs_close(dev), which stats no longer show: a receive or reply
 * buffer not back is said.  The last device in use takes dev's place. */
void device_forget(struct server *srv, struct device *dev)
{
	struct device *last = &srv->devices[--srv->ndevices];

	if ((dev->cq && dev->recvs_posted != srv->opt.srq_depth) ||
	    (dev->send_mr &&
	     dev->nsend_free != srv->opt.max_conns * SEND_DEPTH))
		errorf("%s let go with receives or reply buffers not back",
		       ibv_get_device_name(dev->verbs->device));
	srv->doorbells += dev->doorbells; /* for the totals: stats_line() */
	*dev = *last;
	for (struct conn *conn = srv->conns; conn; conn = conn->next)
		if (conn->dev == last)
			conn->dev = dev;
	*last = (struct device){ 0 };
}

/* rdma link delete waits until every open of the device is closed (rxe has
 * no disassociate_ucontext: ib_uverbs_remove_one()), librdmacm's too: it
 * closes a device it saw go (sync_devices_list(), from rdma_get_devices())
 * once no cm_id uses it.  So once a second, if the list holds fewer devices
 * than before, librdmacm reads it too: only then, for rdma_get_devices()
 * opens every device.  *next: by the next look. */
void devices_look(struct server *srv, double *next)
{
	struct ibv_context **all = NULL;
	struct ibv_device **list;
	int n = 0;

	if (now_seconds() >= srv->looked_at + 1) {
		srv->looked_at = now_seconds();
		list = ibv_get_device_list(&n);
		if (list && n < srv->nseen)
			all = rdma_get_devices(NULL);
		if (all) /* NULL: none was read, or no device is left */
			rdma_free_devices(all);
		if (list)
			ibv_free_device_list(list);
		srv->nseen = list ? n : srv->nseen;
	}
	if (srv->looked_at + 1 < *next)
		*next = srv->looked_at + 1;
}
