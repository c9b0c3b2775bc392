/*
 * tap.h - what the two unit tests share: checks that record a failure and
 * carry on (so one run shows every failure), and a runner that reports in
 * TAP, the Test Anything Protocol that prove and tests/run.sh read: the
 * plan "1..N" first, then "ok - NAME" or "not ok - NAME" per test, each
 * failed check a "#" comment above it.  Exits non-zero if a test failed.
 */
#ifndef TAP_H
#define TAP_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct unit_test {
	const char *name;
	void (*run)(void);
};

static int failed_checks;

static void expect(bool ok, const char *what, int line)
{
	if (!ok) {
		printf("# check failed at line %d: %s\n", line, what);
		failed_checks++;
	}
}

#define EXPECT(cond) expect((cond), #cond, __LINE__)

/* A test that never returns would hang make test: SIGALRM ends the run
 * after 60 s, and the harness counts every test not reported as failed. */
static int run_tests(const char *prefix, const struct unit_test *tests,
		     size_t n)
{
	int failed = 0;

	alarm(60);
	printf("1..%zu\n", n);
	for (size_t i = 0; i < n; i++) {
		int before = failed_checks;

		tests[i].run();
		failed += failed_checks != before;
		printf("%s - %s/%s\n", failed_checks == before ? "ok" : "not ok",
		       prefix, tests[i].name);
		fflush(stdout);
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define RUN_TESTS(prefix, tests) \
	run_tests((prefix), (tests), sizeof(tests) / sizeof((tests)[0]))

#endif
