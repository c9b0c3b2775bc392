/*
 * device.c - what an RDMA device can take: its limits against the settings at
 * start (devices_fit(), from main()) and at a first client (device_refusal(),
 * from conn_refusal()); which device a client came through (device_find());
 * the SRQ's limit event (srq_limit_arm(), from srq_open()); each QP's RNR wait
 * (rnr_timer_shorten(), from conn_create()).
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
 * can take the settings; a setting none can take is refused now, by name,
 * not at the first client.  A device that cannot, when another can, is
 * named, and a client that comes through it refused (conn_refusal()). */
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

/* Ask the device to raise IBV_EVENT_SRQ_LIMIT_REACHED once, when fewer than
 * an eighth of the SRQ's receives are left: a sign that the server is not
 * keeping up and clients are about to hear "receiver not ready".  The limit
 * disarms itself when it fires; we do not re-arm it, one line is enough. */
int srq_limit_arm(struct server *srv, struct device *dev)
{
	struct ibv_srq_attr attr = { .srq_limit = srv->opt.srq_depth / 8 };
	int ret = 0;

	if (attr.srq_limit) /* under 8 receives, an eighth is 0 */
		ret = ibv_modify_srq(dev->srq, &attr, IBV_SRQ_LIMIT);
	return ret ? fail("ibv_modify_srq(srq_limit)", ret) : 0;
}

#define MIN_RNR_TIMER 12 /* wait 0.64 ms; rxe: at least a kernel tick */

/* When a message finds the SRQ empty, our NIC answers "receiver not ready"
 * and names the wait before a retry: the QP's min_rnr_timer, a 5-bit code.
 * rdma_accept() sets it to 0: not "no wait" but the longest, 655 ms.  Once
 * accepted, the QP takes a shorter one (a change in RTS); if it will not,
 * the connection still works, slowly under load: a warning, not an error. */
void rnr_timer_shorten(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .min_rnr_timer = MIN_RNR_TIMER };
	int ret = ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER);

	if (ret)
		report("ibv_modify_qp(min_rnr_timer)", ret);
}

/* The device in use whose context is verbs, or NULL: librdmacm opens each
 * device once and gives every cm_id on it that one context
 * (ucma_get_device() in its cma.c). */
struct device *device_find(struct server *srv, struct ibv_context *verbs)
{
	for (unsigned int i = 0; i < srv->ndevices; i++)
		if (srv->devices[i].verbs == verbs)
			return &srv->devices[i];
	return NULL;
}
