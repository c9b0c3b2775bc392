#!/usr/bin/env bash
# make test: the unit tests of common/, the check that the two servers stay
# twins, a short fuzzing run of the message decoder, what scripts/deps.sh
# and make doctor would do on each supported system, the end-to-end tests
# on a real Soft-RoCE device (tests/host-mode.sh: make demo and tests/e2e.sh
# as on a learner's machine, or in a VM standing in for one), the VMs
# stopped by signals (tests/vm-interrupt.sh), then server and client on two
# VMs joined by one cable, with every packet checked (tests/wire.sh).
#
# Each stage reports in TAP (tests/report-lib.sh), and `prove --exec ''
# STAGE...` runs any of them alone.  Here Perl's TAP::Harness runs them
# all and checks each against its plan.  The last line is
# "N passed, N failed": a test a plan names that never reported (its
# stage stopped early) is failed, and so is a stage that exited non-zero
# with no test failed.  The Soft-RoCE tests are never skipped.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/system-lib.sh
. scripts/system-lib.sh
harness=''

# on_signal SIG: every process of the run gets SIGTERM, which its scripts
# turn into stopping their VMs and removing their devices (30 s at most).
on_signal() {
	echo "run: SIG$1: stopping the stage that runs" >&2 || exec 2>/dev/null
	[ -z "$harness" ] || stop_session "$harness" 30
}
stop_on_signals on_signal

# In the background, so that a signal's trap runs at once, and in a session
# of its own, which on_signal stops whole.  Not being a process group
# leader here, setsid makes no new process: $! is the session's ID.
# (The console's formatter, as on a terminal: the one for a file or a pipe
# holds a stage's lines back until the stage ends.)
# shellcheck disable=SC2016 # Perl's
setsid perl -MTAP::Harness -MList::Util=max -e '
	my $all = TAP::Harness->new({ verbosity => 1, exec => [],
		formatter_class => "TAP::Formatter::Console" })->runtests(@ARGV);
	my ($passed, $failed, $skipped) = (0, 0, 0);
	for my $stage ($all->parsers) {
		my $ok = $stage->passed;
		my $not_ok = max($stage->tests_planned // 0, $stage->tests_run) - $ok;
		$skipped += $stage->skipped;
		$passed += $ok - $stage->skipped;
		$failed += $not_ok || ($stage->has_problems ? 1 : 0);
	}
	print "$skipped skipped (each says why: # SKIP above)\n" if $skipped;
	print "$passed passed, $failed failed\n";
	exit($failed > 0);' \
	tests/unit_common tests/unit_client tests/twins.sh tests/fuzz.sh \
	tests/systems.sh tests/host-mode.sh tests/vm-interrupt.sh tests/wire.sh &
harness=$!
wait "$harness"
