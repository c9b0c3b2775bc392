/*
 * options.c - the servers' command line: each option, its default and its
 * bounds, and the usage text.  main() of each server calls parse_options()
 * first; the rest of common/ reads the result in srv->opt.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/server.h"

#define DEFAULT_SRQ_DEPTH 1024 /* what comes while we are away: design.md */
#define MAX_SRQ_DEPTH 65536    /* ours; the device may allow fewer */
#define DEFAULT_MAX_CONNS 64   /* --max-conns: it sizes the CQ, see cq_open() */
#define MAX_MAX_CONNS 1024
/* The deadlines of conn_due(), in ms. */
#define DEFAULT_HANDSHAKE_MS 5000
#define DEFAULT_REQUEST_MS 10000
#define DEFAULT_KEEPALIVE_MS 10000
#define MAX_DEADLINE_MS 600000
#define DEFAULT_BREAKS_PER_SOURCE 4 /* per source address: conn_refusal() */
#define DEFAULT_REARM_AFTER_US 2000 /* deferred re-arming: cq_event() */
#define MAX_REARM_AFTER_US 1000000

static void usage(FILE *out, bool rearm)
{
	fprintf(out,
		"usage: %s [options]\n"
		"  -p, --port PORT        port to listen on, 0 for any free one\n"
		"                         (default %d)\n"
		"  -a, --address ADDR     address to listen on, IPv4 or IPv6\n"
		"                         (default ::, every address of both\n"
		"                         families)\n"
		"      --pool-size BYTES  size of each RDMA device's pool, a\n"
		"                         multiple of %d (default %u)\n"
		"      --srq-depth N      receives kept posted (default %d)\n"
		"      --max-conns N      clients at once (default %d)\n"
		"      --isolation MODE   none: every client gets the pool's\n"
		"                         rkey (default); mr: a region over its\n"
		"                         own slice\n"
		"      --handshake-timeout-ms MS\n"
		"                         close a connection not established\n"
		"                         that long after its accept (default %d)\n"
		"      --conns-per-source N\n"
		"                         places one address may hold at once,\n"
		"                         half-open or not; more are refused\n"
		"                         (default: half of --max-conns)\n"
		"      --breaks-per-source N\n"
		"                         connections from one address whose QP\n"
		"                         may break (a wrong key, say) in a\n"
		"                         minute; then it is refused for the\n"
		"                         minute after that (default %d)\n"
		"      --request-timeout-ms MS\n"
		"                         close a connection that has sent no\n"
		"                         request that long after its accept\n"
		"                         (default %d)\n"
		"      --keepalive-ms MS  probe each established connection that\n"
		"                         often, and close it if a probe is not\n"
		"                         answered as long again; 0: never\n"
		"                         (default %d)\n",
		program_invocation_short_name, DEFAULT_PORT, POOL_CHUNK_SIZE,
		DEFAULT_POOL_SIZE, DEFAULT_SRQ_DEPTH, DEFAULT_MAX_CONNS,
		DEFAULT_HANDSHAKE_MS, DEFAULT_BREAKS_PER_SOURCE,
		DEFAULT_REQUEST_MS, DEFAULT_KEEPALIVE_MS);
	if (rearm)
		fprintf(out,
			"      --rearm-after-us N after a wake-up, look at the CQ unarmed,\n"
			"                         again at once while looks find some, else\n"
			"                         every ms; re-arm it once N us pass with\n"
			"                         none, 0: after the first look (default %d)\n",
			DEFAULT_REARM_AFTER_US);
	fprintf(out, "  -h, --help             show this text\n");
}

/* Fills opt from the arguments, or says what is wrong and fails; --help
 * prints the usage and sets opt->help.  --rearm-after-us only if rearm:
 * the event-driven server waits on its CQs, the polling one never does. */
int parse_options(int argc, char **argv, bool rearm, struct options *opt)
{
	struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "address", required_argument, NULL, 'a' },
		{ "pool-size", required_argument, NULL, 'P' },
		{ "srq-depth", required_argument, NULL, 'S' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "isolation", required_argument, NULL, 'I' },
		{ "handshake-timeout-ms", required_argument, NULL, 'T' },
		{ "conns-per-source", required_argument, NULL, 'H' },
		{ "breaks-per-source", required_argument, NULL, 'X' },
		{ "request-timeout-ms", required_argument, NULL, 'R' },
		{ "keepalive-ms", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ "rearm-after-us", required_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 },
	};
	/* Options that take a number: name in messages, default, bounds. */
	const struct {
		int key;
		const char *what;
		uint32_t init;
		uint64_t min, max;
		uint32_t *value;
	} numbers[] = {
		{ 'p', "port", DEFAULT_PORT, 0, UINT16_MAX, &opt->port },
		{ 'P', "pool size", DEFAULT_POOL_SIZE, POOL_CHUNK_SIZE,
		  UINT32_MAX, &opt->pool_size },
		{ 'S', "SRQ depth", DEFAULT_SRQ_DEPTH, 1, MAX_SRQ_DEPTH,
		  &opt->srq_depth },
		{ 'C', "connection limit", DEFAULT_MAX_CONNS, 1, MAX_MAX_CONNS,
		  &opt->max_conns },
		{ 'T', "handshake timeout", DEFAULT_HANDSHAKE_MS, 1,
		  MAX_DEADLINE_MS, &opt->handshake_ms },
		{ 'H', "connections per source", 0, /* half of --max-conns */
		  1, MAX_MAX_CONNS, &opt->conns_per_source },
		{ 'X', "breaks per source", DEFAULT_BREAKS_PER_SOURCE, 1,
		  MAX_MAX_CONNS, &opt->breaks_per_source },
		{ 'R', "request timeout", DEFAULT_REQUEST_MS, 1,
		  MAX_DEADLINE_MS, &opt->request_ms },
		{ 'K', "keepalive time", DEFAULT_KEEPALIVE_MS, 0,
		  MAX_DEADLINE_MS, &opt->keepalive_ms },
		{ 'B', "re-arm delay", DEFAULT_REARM_AFTER_US, 0,
		  MAX_REARM_AFTER_US, &opt->rearm_after_us },
	};
	size_t i, n = sizeof(numbers) / sizeof(numbers[0]);
	uint64_t value;
	int c, err = 0;

	*opt = (struct options){ .address = "::" };
	for (i = 0; i < n; i++)
		*numbers[i].value = numbers[i].init;
	if (!rearm) /* the table ends before it, the last */
		longopts[sizeof(longopts) / sizeof(longopts[0]) - 2] =
			(struct option){ NULL, 0, NULL, 0 };
	while (!err &&
	       (c = getopt_long(argc, argv, "p:a:h", longopts, NULL)) != -1) {
		for (i = 0; i < n && numbers[i].key != c; i++)
			;
		if (i < n) {
			err = parse_number(numbers[i].what, optarg,
					   numbers[i].min, numbers[i].max,
					   &value);
			if (!err)
				*numbers[i].value = (uint32_t)value;
		} else if (c == 'a') {
			opt->address = optarg;
		} else if (c == 'I' && !strcmp(optarg, "none")) {
			opt->isolation = ISOLATION_NONE;
		} else if (c == 'I' && !strcmp(optarg, "mr")) {
			opt->isolation = ISOLATION_MR;
		} else if (c == 'I') {
			errorf("bad isolation '%s': want none or mr", optarg);
			err = -EINVAL;
		} else { /* -h, or one getopt_long() has said is wrong */
			opt->help = c == 'h';
			usage(opt->help ? stdout : stderr, rearm);
			return opt->help ? 0 : -EINVAL;
		}
	}
	if (!opt->conns_per_source) /* not given: half of the places */
		opt->conns_per_source = (opt->max_conns + 1) / 2;
	if (!err && opt->pool_size % POOL_CHUNK_SIZE) {
		errorf("bad pool size '%" PRIu32 "': want a multiple of %d",
		       opt->pool_size, POOL_CHUNK_SIZE);
		err = -EINVAL;
	} else if (!err && optind < argc) {
		errorf("unexpected argument '%s'", argv[optind]);
		err = -EINVAL;
	}
	return err;
}
