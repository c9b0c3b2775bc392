#!/usr/bin/env bash
# fuzz.sh [FUZZER [SECONDS]]: a short, bounded libFuzzer run of the
# control message decoder (FUZZER, or build/fuzz_ctrl_msg; SECONDS, or 20),
# starting from the seeds in tests/fuzz-corpus. New inputs it finds go to
# a scratch directory, not into the repository.  Reports in TAP: one test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fuzzer=${1:-${FUZZER:-$here/../build/fuzz_ctrl_msg}}
seconds=${2:-${FUZZ_SECONDS:-20}}
seeds=$here/fuzz-corpus
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo 1..1
status=0
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
	-artifact_prefix="$scratch/" "$scratch" "$seeds" >"$scratch/log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/log")
if [ "$status" = 0 ] && [ -n "$runs" ] && [ "$runs" -gt 0 ]; then
	echo "ok - fuzz/ctrl_msg ($runs inputs in ${seconds}s)"
else
	echo "not ok - fuzz/ctrl_msg: the fuzzer exited $status"
	tail -n 30 "$scratch/log" | sed 's/^/# /'
	for crash in "$scratch"/{crash,leak,oom,timeout}-*; do
		[ -e "$crash" ] && echo "# input that fails: $(od -An -tx1 "$crash" | tr -d '\n')"
	done
	exit 1
fi
