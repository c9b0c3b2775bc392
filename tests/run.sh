#!/usr/bin/env bash
# make test: the stages named at the end, in order (docs/design.md, "Tests, sanitizers and
# fuzzing", says what each tests).  Each reports in TAP (tests/report-lib.sh), and
# `prove --exec '' STAGE...` runs any of them alone.  Here Perl's TAP::Harness runs them all and
# checks each against its plan.  The last line is "N passed, N failed": a test a plan names that
# never reported (its stage stopped early) is failed, and so is a stage that exited non-zero with
# no test failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/system-lib.sh
harness=''

# on_signal SIG: every process of the run gets SIGTERM, which its scripts
# turn into stopping their VMs and removing their devices (30 s at most).
on_signal() {
	echo "run: SIG$1: stopping the stage that runs" >&2 || exec 2>/dev/null
	[ -z "$harness" ] || stop_session "$harness" 30
}
stop_on_signals on_signal

# In the background, so that a signal's trap runs at once, and in a session of
# its own, which on_signal stops whole (not a process group leader here, setsid
# makes no new process: $! is the session's ID).  The console's formatter, as
# on a terminal: a file's or a pipe's holds a stage's lines back until it ends.
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
	exit($failed > 0);' tests/unit_common tests/unit_client tests/twins.sh tests/fuzz.sh \
	tests/systems.sh tests/host-mode.sh tests/vm-interrupt.sh tests/wire.sh &
harness=$!
wait "$harness"
