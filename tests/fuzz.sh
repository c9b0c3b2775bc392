#!/usr/bin/env bash
# fuzz.sh FUZZER SECONDS: a short, bounded libFuzzer run of the control
# message decoder, starting from the seeds in tests/fuzz-corpus. New inputs
# it finds go to a scratch directory, not into the repository.
# Prints "PASS fuzz/ctrl_msg" or "FAIL fuzz/ctrl_msg: why", then the
# summary "fuzz: N passed, N failed".
set -euo pipefail

fuzzer=$1
seconds=$2
seeds=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fuzz-corpus
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

status=0
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
	-artifact_prefix="$scratch/" "$scratch" "$seeds" >"$scratch/log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/log")
if [ "$status" = 0 ] && [ -n "$runs" ] && [ "$runs" -gt 0 ]; then
	echo "PASS fuzz/ctrl_msg ($runs inputs in ${seconds}s)"
	echo "fuzz: 1 passed, 0 failed"
else
	tail -n 30 "$scratch/log"
	for crash in "$scratch"/crash-* "$scratch"/leak-*; do
		[ -e "$crash" ] && echo "input that fails: $(od -An -tx1 "$crash" | tr -d '\n')"
	done
	echo "FAIL fuzz/ctrl_msg: the fuzzer exited $status"
	echo "fuzz: 0 passed, 1 failed"
	exit 1
fi
