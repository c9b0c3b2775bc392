#!/usr/bin/env bash
# End-to-end tests of the three programs on a real Soft-RoCE device.  Run it
# through scripts/soft-roce.sh, which brings the device up (here or in a VM)
# and sets RDMA_ADDR and RDMA_DEV (SOFT_ROCE_DEVICES=2: a second device, for
# the two-device tests).  Reports in TAP (tests/report-lib.sh), without the plan:
# it is part of the e2e stage, whose plan tests/host-mode.sh gives.
set -euo pipefail

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh, which sets RDMA_ADDR}"
: "${RDMA_DEV:?run this through scripts/soft-roce.sh, which sets RDMA_DEV}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/e2e.XXXXXX")
report_stage=e2e
. "$top/tests/lib.sh"
. "$top/tests/basic.sh"
. "$top/tests/robust.sh"
. "$top/tests/hostile.sh"
. "$top/tests/doctor.sh"
. "$top/tests/cm_retry.sh"
trap cleanup EXIT

test_lib
test_doctor_passes
test_doctor_no_device
test_doctor_memlock_too_low
test_doctor_memlock_enough
test_cm_retry

for server in rdma_pool_server rdma_srq_pool_server_ev; do
	# The protocol, as it should go.
	if own_server "$server/starts" "$server"; then
		test_one_client "$server" "$server_port"
		test_eight_clients "$server" "$server_port"
		test_deny "$server/deny_size_0" "$server_port" 0 EINVAL
		test_deny "$server/deny_larger_than_pool" "$server_port" $((server_pool + 1)) EINVAL
		client_session "$server/serves_after_deny" after "$server_port" 4096 100 10 4096
		test_client_modes "$server" "$server_port"
		test_lapping "$server" "$server_port"
		test_client_quiet "$server" "$server_port"
		test_sigint "$server"
	fi

	# Bad input and misbehaving peers, against one server that must
	# survive all of it with nothing leaked.
	if own_server "$server/starts" "$server"; then
		test_server_args "$server" "$server_port"
		test_bad_messages "$server" "$server_port"
		test_size_edges "$server" "$server_port"
		test_oversized_message "$server" "$server_port"
		test_client_killed "$server" "$server_port"
		test_cycles "$server" "$server_port"
		stop_server || fail "$server/survives_everything" "exit status $?"
	fi

	# Each with a server of its own.
	test_server_dies "$server" killed
	test_server_dies "$server" stopped
	test_max_conns "$server"
	test_load "$server"
	test_stuck_replies "$server"
	test_closed_before_established "$server"
	test_burst_at_the_limit "$server"
	test_addresses "$server"
	test_two_devices "$server"
	test_device_unopenable "$server"
	test_isolation "$server" none
	test_isolation "$server" mr
	test_isolation_unprivileged "$server"
	test_handshake_deadline "$server"
	test_lost_rtu "$server"
	test_notify_once "$server"
	test_away_no_rnr "$server"
	test_source_limits "$server"
	test_request_deadline "$server"
	test_keepalive "$server"
	test_broken_qp "$server"
	test_key_guesses "$server"
	test_guesses_at_once "$server"
	test_invalidate "$server"
	test_device_limits "$server"
	test_output_stalled "$server"
	test_tty_stalled "$server"
	test_output_gone "$server"
	mismatch_flood_case "$server/mismatch_flood" "$server" req:4096
	mismatch_flood_case "$server/mismatch_flood/no_slice" "$server"
	test_stderr_stalled "$server"
	test_device_removed "$server"
done
test_looks_again
test_client_args
test_client_rejection_escaped
test_bench_args
test_bench_smoke
test_bench_interrupted

report_end
