#!/usr/bin/env bash
# vm-run.sh CMD [ARGS...]: run CMD, as root, in a throw-away VM whose kernel
# has Soft-RoCE (rdma_rxe): a stand-in for a machine that can run Soft-RoCE
# itself, for when this one cannot.  Nothing is set up for CMD: run
# scripts/soft-roce.sh CMD to have it bring a device up, as on any machine.
#
# The VM boots a kernel from /boot (or VM_KERNEL) under qemu and sees this machine's root file
# system read-only over 9p, so every program installed here is there too. The repository is shared
# writable at the same path: what CMD writes into it (builds, logs, results) is still here after
# the VM is gone. The VM has no network card: nothing in it can reach another machine.
#
# CMD's stdout and stderr come out here as it runs; CMD gets no stdin.
# The exit status is CMD's (or 1, with a message, if the VM itself failed).
#
# Environment:
#   VM_TIMEOUT   seconds the whole run may take (default 1800)
#   VM_PASS_ENV  names of variables to pass to CMD, space separated
#   VM_KERNEL    the kernel version to boot; VM_ACCEL kvm or tcg
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/vm-lib.sh"

# Set in main, and read by the EXIT trap after main has returned.
job='' vm_pid=''

cleanup() {
	[ -n "$job" ] || return 0
	stop_qemu "$job" "$vm_pid"
	wait
	rm -rf "$job"
}

main() {
	local status=0 rc try
	[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
	vm_prepare

	trap cleanup EXIT
	stop_on_signals on_signal
	job=$(mktemp -d "$vmdir/job.XXXXXX")
	write_job "$@" >"$job/job.sh"

	# In the background, so that a signal stops the VM at once.  A guest
	# that stops before CMD starts has run nothing of it: it boots once
	# more (seen on 6.12, with a host thread per vCPU: qemu_cmd).
	for try in 1 2; do
		status=0
		boot_vm "$job" 2048 2 '' &
		vm_pid=$!
		wait "$vm_pid" || status=$?
		[ "$try" = 2 ] || [ "$status" = 124 ] || [ -e "$job/started" ] && break
		say "the VM stopped before '$*' started (qemu exit $status): booting it once more"
	done

	rc=$(job_status "$job" "$status" "the VM" "$*") || exit 1
	exit "$rc"
}

main "$@"
