#!/usr/bin/env bash
# The VMs cut short: scripts/vm-run.sh, vm-pair.sh and wire.sh (make wire) stopped by Ctrl-C
# (SIGINT to the whole process group, as a terminal sends it) or by SIGTERM or SIGHUP to the script
# alone.  Within seconds every qemu must be gone, and the VMs' folders, and the script must end by
# that signal (so that the make or shell that started it stops too); wire.sh must publish nothing.
# A VM's kernel that oopses must stop it too.  Runs on this machine, where the VMs would; reports
# in TAP (tests/report-lib.sh).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/vm-lib.sh"
report_stage=vm_interrupt
. "$top/tests/report-lib.sh"
out=$(mktemp -d "${TMPDIR:-/tmp}/vm-interrupt.XXXXXX")
trap 'rm -rf "$out"' EXIT
# This script stopped: the job it runs is in a group of its own, and
# stops only when told; the probe test's kept KVM answer goes back.
on_signal() {
	echo "vm-interrupt: SIG$1: stopping the tests" >&2 || exec 2>/dev/null
	stop_below 20
	[ ! -e "$accel_cache.kept" ] || mv "$accel_cache.kept" "$accel_cache"
	rm -rf "$out"
}
stop_on_signals on_signal

# vm_below PID: the folder of a VM that runs below PID (vm-pair.sh's two
# have theirs, server and client, in one), once its qemu does.
vm_below() { below "$1" ' vm_job=' | sed -En '1{s/.* vm_job=([^ ]*).*/\1/; s,/(server|client)$,,; p}'; }

# qemus JOB: the qemus of the VMs in folder JOB (or JOB/server and
# JOB/client), and their timeout(1); JOB is matched as is, not as a pattern.
qemus() {
	pgrep -af qemu-system | awk -v j="vm_job=$1" '{ for (i = 2; i <= NF; i++)
		if ($i == j || index($i, j "/") == 1) { print $1; next } }'
}

# test_vm_interrupt SCRIPT NAME SIGNAL group|alone [ARGS...]: SCRIPT (vm-run or vm-pair, ARGS
# "sleep 600", the command of its VMs; or wire) gets SIGNAL once its VMs run.  A NAME that ends in
# _dead_stderr has its stderr dead (dead_stderr) when the signal comes.
test_vm_interrupt() {
	local script=$1 name=vm_interrupt/$1/$2 sig=$3 target=$4 job='' run
	local why='' want log=$out/$1-$2.log err=$out/$1-$2.log.err results reader=''
	shift 4
	results=$(stat -c %i "$top/wire-results" 2>/dev/null || true)
	[[ $name != *_dead_stderr ]] || { dead_stderr "$err"; err=$err.fifo; }
	as_job env --default-signal="$sig" "$top/scripts/$script.sh" "$@" >"$log" 2>"$err"
	run=$!
	# Until its own VM runs (not another run's): its folder, from the look
	# that found it (a second look missed it once, beside wire.sh's VMs).
	wait_until "$run" 60 vm_below "$run" >"$log.job" || true
	job=$(cat "$log.job")
	[ -z "$job" ] || sleep 2 # into the guest's boot
	end_reader
	want=$((128 + $(kill -l "$sig")))
	if [ -z "$job" ]; then
		# SIGTERM first, so that its EXIT trap removes its folders.
		signal_job "$run" group TERM 5 || true
		why="the VM did not start"
	elif ! signal_job "$run" "$target" "$sig" 20; then
		why="$script.sh still runs 20 s after SIG$sig"
	elif [ -n "$(qemus "$job")" ]; then
		why="a qemu of its still runs"
	elif [ -e "$job" ]; then
		why="its folder $job is still there"
	elif [ "$job_status" != "$want" ]; then
		why="$script.sh exited $job_status, not by SIG$sig ($want)"
	elif [ "$(stat -c %i "$top/wire-results" 2>/dev/null || true)" != "$results" ] ||
		compgen -G "$top/wire-results.run.*" >/dev/null; then
		why="wire-results/ was replaced, or this run's folder left beside it"
	fi
	pass_unless "$name" "${why:+$why: $(cat "$log" "$log.err" 2>/dev/null | tail -n 3 | tr '\n' '|')}"
	# shellcheck disable=SC2046 # PIDs, one word each
	[ -z "$why" ] || [ -z "$job" ] || kill -KILL $(qemus "$job") 2>/dev/null || true
}

# Ctrl-C while vm-run.sh's KVM probe runs (a qemu of its own, for up to
# KVM_PROBE_SECONDS where a guest hangs under KVM): the probe must stop at once
# too, and leave no answer kept for this boot (a "tcg" written after the stopped
# probe would cost every later VM its KVM); VM_ACCEL, which skips it, is unset.
test_probe_interrupt() {
	local name=vm_interrupt/vm-run/ctrl_c_in_kvm_probe run probe=() why=''
	kvm_usable || { not_here "$name" "no usable /dev/kvm, so vm-run.sh runs no KVM probe to stop"; return; }
	mv "$accel_cache" "$accel_cache.kept" 2>/dev/null || true
	as_job env -u VM_ACCEL --default-signal=INT "$top/scripts/vm-run.sh" sleep 600 >"$out/probe.log" 2>&1
	run=$!
	wait_until "$run" 60 below "$run" ' vm_probe=1' >"$out/probe.ps" || true
	mapfile -t probe < <(awk '{ print $1 }' "$out/probe.ps")
	sleep 2 # into the probe guest's boot, its qemu's handlers in place
	# Stopped even if no probe ran, lest it boot a VM for sleep 600.
	signal_job "$run" group INT 5 || why="vm-run.sh still ran 5 s after SIGINT"
	[ "${#probe[@]}" -gt 0 ] || why="no probe ran"
	[ -n "$why" ] || [ -z "$(alive "${probe[@]}")" ] || why="the probe's qemu still runs"
	[ -n "$why" ] || [ ! -e "$accel_cache" ] || why="the stopped probe's answer was kept: $(cat "$accel_cache")"
	kill -KILL "${probe[@]}" 2>/dev/null || true
	rm -f "$accel_cache"
	[ ! -e "$accel_cache.kept" ] || mv "$accel_cache.kept" "$accel_cache"
	pass_unless "$name" "${why:+$why: $(tail -n 3 "$out/probe.log" | tr '\n' '|')}"
}

# A kernel that oopses in the VM ends it (vm-lib.sh's oops=panic), as a
# panic does, rather than running on, maybe deadlocked, until VM_TIMEOUT.
test_panics_on_oops() {
	local t=vm_interrupt/vm-run/panics_on_oops status=0 value
	value=$("$top/scripts/vm-run.sh" cat /proc/sys/kernel/panic_on_oops 2>"$out/oops.err") || status=$?
	pass_if "$t" "vm-run.sh exited $status, kernel.panic_on_oops '$value': $(tail -n 2 "$out/oops.err" | tr '\n' '|')" \
		[ "$status:$value" = 0:1 ]
}

report_plan
test_probe_interrupt
test_panics_on_oops
for script in vm-run vm-pair; do
	test_vm_interrupt "$script" ctrl_c INT group sleep 600
	test_vm_interrupt "$script" sigterm TERM alone sleep 600
	test_vm_interrupt "$script" sighup HUP alone sleep 600
done
test_vm_interrupt vm-run sighup_dead_stderr HUP alone sleep 600
test_vm_interrupt wire ctrl_c INT group
test_vm_interrupt wire sigterm TERM alone
report_end
