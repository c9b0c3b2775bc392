/*
 * options.c - the servers' command line: each option, its default and its
 * bounds, and the usage text.  main() of each server calls parse_options()
 * first; the rest of common/ reads the result in srv->opt.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/server.h"

#define DEFAULT_SRQ_DEPTH 128
#define MAX_SRQ_DEPTH 65536 /* ours; the device may allow fewer */
/* Connections at once (--max-conns): it sizes the CQ, see cq_open(). */
#define DEFAULT_MAX_CONNS 64
#define MAX_MAX_CONNS 1024
/* The deadlines of conn_due(), in ms. */
#define DEFAULT_HANDSHAKE_MS 5000
#define DEFAULT_REQUEST_MS 10000
#define DEFAULT_KEEPALIVE_MS 10000
/* Connections from one address in their handshake at once, see
 * conn_refusal(). */
#define DEFAULT_HANDSHAKES_PER_SOURCE 16
/* Connections of one address that may break in a minute, breaks_count(). */
#define DEFAULT_BREAKS_PER_SOURCE 4
#define MAX_DEADLINE_MS 600000
/* Hybrid polling (--busy-poll-us), see spin_on(). */
#define DEFAULT_BUSY_POLL_US 200
#define MAX_BUSY_POLL_US 1000000

static void usage(FILE *out, bool busy_poll)
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
		"      --handshakes-per-source N\n"
		"                         connections from one address in their\n"
		"                         handshake at once; more are refused\n"
		"                         (default %d)\n"
		"      --breaks-per-source N\n"
		"                         connections from one address whose QP\n"
		"                         may break (a wrong key, say) in a\n"
		"                         minute; then it is refused for the\n"
		"                         rest of that minute (default %d)\n"
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
		DEFAULT_HANDSHAKE_MS, DEFAULT_HANDSHAKES_PER_SOURCE,
		DEFAULT_BREAKS_PER_SOURCE, DEFAULT_REQUEST_MS,
		DEFAULT_KEEPALIVE_MS);
	if (busy_poll)
		fprintf(out,
			"      --busy-poll-us N   after a wake-up, poll the CQ for up\n"
			"                         to N us between completions before\n"
			"                         sleeping again; 0: never (default %d)\n",
			DEFAULT_BUSY_POLL_US);
	fprintf(out, "  -h, --help             show this text\n");
}

static int parse_isolation(const char *arg, enum isolation *isolation)
{
	static const char *const names[] = {
		[ISOLATION_NONE] = "none",
		[ISOLATION_MR] = "mr",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(arg, names[i]) == 0) {
			*isolation = (enum isolation)i;
			return 0;
		}
	errorf("bad isolation '%s': want none or mr", arg);
	return -EINVAL;
}

/* Fills opt from the arguments, or says what is wrong and fails; --help
 * prints the usage and sets opt->help.  --busy-poll-us only if busy_poll:
 * the event-driven server sleeps, the polling one never does. */
int parse_options(int argc, char **argv, bool busy_poll, struct options *opt)
{
	struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "address", required_argument, NULL, 'a' },
		{ "pool-size", required_argument, NULL, 'P' },
		{ "srq-depth", required_argument, NULL, 'S' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "isolation", required_argument, NULL, 'I' },
		{ "handshake-timeout-ms", required_argument, NULL, 'T' },
		{ "handshakes-per-source", required_argument, NULL, 'H' },
		{ "breaks-per-source", required_argument, NULL, 'X' },
		{ "request-timeout-ms", required_argument, NULL, 'R' },
		{ "keepalive-ms", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ "busy-poll-us", required_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = DEFAULT_PORT, size = DEFAULT_POOL_SIZE;
	uint64_t srq_depth = DEFAULT_SRQ_DEPTH, max_conns = DEFAULT_MAX_CONNS;
	uint64_t handshake_ms = DEFAULT_HANDSHAKE_MS;
	uint64_t per_source = DEFAULT_HANDSHAKES_PER_SOURCE;
	uint64_t breaks = DEFAULT_BREAKS_PER_SOURCE;
	uint64_t request_ms = DEFAULT_REQUEST_MS;
	uint64_t keepalive_ms = DEFAULT_KEEPALIVE_MS;
	uint64_t busy_poll_us = DEFAULT_BUSY_POLL_US;
	int c, err = 0;

	if (!busy_poll) /* the table ends before it, the last */
		longopts[sizeof(longopts) / sizeof(longopts[0]) - 2] =
			(struct option){ NULL, 0, NULL, 0 };
	opt->address = "::";
	while ((c = getopt_long(argc, argv, "p:a:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'a':
			opt->address = optarg;
			break;
		case 'p':
			err = parse_number("port", optarg, 0, UINT16_MAX,
					   &port);
			break;
		case 'P':
			err = parse_number("pool size", optarg, POOL_CHUNK_SIZE,
					   UINT32_MAX, &size);
			if (!err && size % POOL_CHUNK_SIZE) {
				errorf("bad pool size '%s': want a multiple "
				       "of %d",
				       optarg, POOL_CHUNK_SIZE);
				err = -EINVAL;
			}
			break;
		case 'S':
			err = parse_number("SRQ depth", optarg, 1,
					   MAX_SRQ_DEPTH, &srq_depth);
			break;
		case 'C':
			err = parse_number("connection limit", optarg, 1,
					   MAX_MAX_CONNS, &max_conns);
			break;
		case 'I':
			err = parse_isolation(optarg, &opt->isolation);
			break;
		case 'T':
			err = parse_number("handshake timeout", optarg, 1,
					   MAX_DEADLINE_MS, &handshake_ms);
			break;
		case 'H':
			err = parse_number("handshakes per source", optarg, 1,
					   MAX_MAX_CONNS, &per_source);
			break;
		case 'X':
			err = parse_number("breaks per source", optarg, 1,
					   MAX_MAX_CONNS, &breaks);
			break;
		case 'R':
			err = parse_number("request timeout", optarg, 1,
					   MAX_DEADLINE_MS, &request_ms);
			break;
		case 'K':
			err = parse_number("keepalive time", optarg, 0,
					   MAX_DEADLINE_MS, &keepalive_ms);
			break;
		case 'B':
			err = parse_number("busy-poll time", optarg, 0,
					   MAX_BUSY_POLL_US, &busy_poll_us);
			break;
		case 'h':
			opt->help = true;
			usage(stdout, busy_poll);
			return 0;
		default:
			usage(stderr, busy_poll);
			return -EINVAL;
		}
		if (err)
			return err;
	}
	if (optind < argc) {
		errorf("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	opt->port = (uint16_t)port;
	opt->pool_size = (uint32_t)size;
	opt->srq_depth = (uint32_t)srq_depth;
	opt->max_conns = (uint32_t)max_conns;
	opt->handshake_ms = (uint32_t)handshake_ms;
	opt->handshakes_per_source = (uint32_t)per_source;
	opt->breaks_per_source = (uint32_t)breaks;
	opt->request_ms = (uint32_t)request_ms;
	opt->keepalive_ms = (uint32_t)keepalive_ms;
	opt->busy_poll_us = (uint32_t)busy_poll_us;
	return 0;
}
