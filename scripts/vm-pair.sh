#!/usr/bin/env bash
# vm-pair.sh [--pcap FILE] CMD [ARGS...]: run CMD on two machines joined by
# one network cable, the way a server and a client run in real use, and
# optionally record every frame that crosses the cable.
#
# The machines are two throw-away VMs like vm-run.sh's (a kernel with
# rdma_rxe under qemu, this machine's files over 9p, the repository
# writable), each with one virtual NIC and Soft-RoCE (rxe0) on it. The cable
# between the NICs is a socket of this host: the VMs reach each other and
# nothing else, and this host only carries their frames from one qemu to
# the other.
# Unlike the single VM, where rxe hands packets from one QP to the other
# inside one kernel, here every RoCE packet leaves one kernel as an
# Ethernet frame and enters the other.
#
# Why VMs even on a host whose kernel has rdma_rxe: two rxe devices in one
# kernel still loop their traffic back internally, and rxe only learned
# network namespaces after Linux 6.1. Two real machines do not need this
# script: see docs/wire.md.
#
# CMD runs in both VMs, with WIRE_ROLE=server in one (address 198.18.0.1)
# and WIRE_ROLE=client in the other (198.18.0.2); in both, RDMA_ADDR is the
# server's address, the one clients connect to. The two can coordinate
# through files in the repository, which both see. Their output comes out
# here, each line marked "[server vm]" or "[client vm]".
#
#   --pcap FILE  write the cable's frames to FILE (pcap, as qemu's
#                filter-dump records them at the server VM's NIC)
#
# Exits 0 if CMD exits 0 in both VMs; otherwise 1, saying which failed.
#
# Environment:
#   VM_TIMEOUT   seconds each VM may run (default 1800)
#   VM_PASS_ENV  names of variables to pass to CMD, space separated
#   VM_GRACE     seconds one VM may go on after the other ended (default 60)
#   VM_CABLE     stream or socket: the qemu netdev of the cable (see
#                cable_plan); VM_KERNEL, VM_ACCEL: see vm-lib.sh
set -euo pipefail

vm_prog=vm-pair
# shellcheck source=scripts/vm-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/vm-lib.sh"

VM_GRACE=${VM_GRACE:-60}
# Set in main, and read by the EXIT trap after main has returned.
pair='' cable='' server='' client=''
SERVER_ADDR=198.18.0.1 # RFC 2544 benchmarking range; only inside the VMs
CLIENT_ADDR=198.18.0.2
# Locally administered MACs (qemu's own prefix), one per NIC.
SERVER_MAC=52:54:00:00:00:01
CLIENT_MAC=52:54:00:00:00:02

usage() {
	echo "usage: $0 [--pcap FILE] CMD [ARGS...]" >&2
	exit 2
}

# label ROLE: the guest's serial output, one marked line per line.
label() {
	sed -u "s/\r//g; s/^/[$1 vm] /"
}

# run_vm ROLE JOB ADDR MAC [QEMU_ARGS...]: boot one VM of the pair, with
# its NIC on the cable that QEMU_ARGS define (as netdev "cable"), and
# record qemu's exit status in JOB/qemu.
run_vm() {
	local role=$1 job=$2 addr=$3 mac=$4 status=0
	shift 4
	VM_APPEND="vm_nic_mac=$mac vm_nic_addr=$addr vm_server_addr=$SERVER_ADDR"
	# The same swap of stdout and stderr as in vm-run.sh.
	{ VM_APPEND=$VM_APPEND boot_vm "$job" 1024 1 -pidfile "$job/qemu.pid" "$@" \
		-device "virtio-net-pci,netdev=cable,mac=$mac" \
		2>&1 >&3 3>&- | label "$role" >&2; } 3>&1 | label "$role" ||
		status=$?
	echo "$status" >"$job/qemu"
}

# The cable: a "stream" netdev over a Unix socket of this host where qemu
# has one (7.2 and later), else the older "socket" netdev over TCP on
# 127.0.0.1 (qemu 6.2, Ubuntu 22.04's).  VM_CABLE=stream|socket chooses.
# Sets server_net and client_net (each VM's -netdev) and cable_up, a
# command that is true once the server VM's qemu listens.
cable_plan() {
	local kind=${VM_CABLE:-} port
	if [ -z "$kind" ]; then
		kind=socket
		qemu-system-x86_64 -netdev help 2>/dev/null | grep -qx stream &&
			kind=stream
	fi
	case $kind in
	stream)
		# The socket's path must be short (108 bytes): not in the
		# repository.
		server_net="stream,id=cable,server=on,addr.type=unix,addr.path=$cable/sock"
		client_net="stream,id=cable,server=off,addr.type=unix,addr.path=$cable/sock"
		cable_up=(test -S "$cable/sock")
		;;
	socket)
		# A port nobody listens on; only this host can reach 127.0.0.1.
		port=$((20000 + RANDOM % 20000))
		while ss -Htln "sport = :$port" | grep -q .; do
			port=$((20000 + RANDOM % 20000))
		done
		server_net="socket,id=cable,listen=127.0.0.1:$port"
		client_net="socket,id=cable,connect=127.0.0.1:$port"
		cable_up=(sh -c "ss -Htln 'sport = :$port' | grep -q .")
		;;
	*) die "VM_CABLE must be stream or socket, not '$kind'" ;;
	esac
	say "cable: qemu's $kind netdev"
}

# wait_for_cable PID: true once the server VM's qemu listens on the cable;
# false if that qemu (background job PID) ended first or 30 s went by.
wait_for_cable() {
	local end=$((SECONDS + 30))
	while ((SECONDS < end)); do
		"${cable_up[@]}" && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# grace PID JOB: a guest whose job has died must not leave its peer
# waiting for news that never comes: once one VM is gone, the other (the
# background job PID) gets VM_GRACE seconds, then its qemu is stopped.
grace() {
	local pid=$1 job=$2 end=$((SECONDS + VM_GRACE))
	while ((SECONDS < end)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "$vm_prog: one VM ended ${VM_GRACE}s ago and the other still" \
		"runs: stopping it (VM_GRACE)" >&2
	stop_qemu "$job"
}

# outcome JOB WHAT CMD: "exited N" with CMD's exit status in that VM, or
# "did not finish" (and why, on stderr).
outcome() {
	local rc
	if rc=$(job_status "$1" "$(cat "$1/qemu")" "$2" "$3"); then
		echo "exited $rc"
	else
		echo "did not finish"
	fi
}

cleanup() {
	[ -z "$server" ] || stop_qemu "$server"
	[ -z "$client" ] || stop_qemu "$client"
	wait
	rm -rf "$pair" "$cable"
}

main() {
	local pcap='' server_pid client_pid dump=() server_rc client_rc
	if [ "${1:-}" = --pcap ]; then
		[ $# -ge 2 ] || usage
		pcap=$(realpath -m -- "$2")
		shift 2
		# qemu options cannot carry commas in a value.
		[[ $pcap =~ ^[A-Za-z0-9/._+-]+$ ]] ||
			die "--pcap '$pcap': use a path of letters, digits and /._+-"
		[ -d "${pcap%/*}" ] || die "--pcap: no directory ${pcap%/*}"
		rm -f "$pcap"
	fi
	[ $# -gt 0 ] || usage
	vm_prepare

	trap cleanup EXIT
	trap_signals
	pair=$(mktemp -d "$vmdir/pair.XXXXXX")
	cable=$(mktemp -d "${TMPDIR:-/tmp}/vm-pair.XXXXXX")
	cable_plan
	server=$pair/server
	client=$pair/client
	mkdir "$server" "$client"
	WIRE_ROLE=server VM_PASS_ENV="${VM_PASS_ENV:-} WIRE_ROLE" \
		write_job "$@" >"$server/job.sh"
	WIRE_ROLE=client VM_PASS_ENV="${VM_PASS_ENV:-} WIRE_ROLE" \
		write_job "$@" >"$client/job.sh"

	# The server VM holds the listening end of the cable (and the
	# recorder); the client VM can plug in only once it listens.
	[ -n "$pcap" ] && dump=(-object "filter-dump,id=dump,netdev=cable,file=$pcap")
	run_vm server "$server" "$SERVER_ADDR" "$SERVER_MAC" \
		-netdev "$server_net" "${dump[@]}" &
	server_pid=$!
	if ! wait_for_cable "$server_pid"; then
		stop_qemu "$server"
		wait "$server_pid" || true
		die "the server VM did not start listening on the cable" \
			"($server_net); see the messages above"
	fi
	run_vm client "$client" "$CLIENT_ADDR" "$CLIENT_MAC" \
		-netdev "$client_net" &
	client_pid=$!

	# Normally the client's job finishes first, and the server's right
	# after it; either way, the first to end starts the grace period.
	wait -n "$server_pid" "$client_pid" || true
	grace "$server_pid" "$server"
	grace "$client_pid" "$client"
	wait

	server_rc=$(outcome "$server" "the server VM" "$*")
	client_rc=$(outcome "$client" "the client VM" "$*")
	if [ "$server_rc" != "exited 0" ] || [ "$client_rc" != "exited 0" ]; then
		die "'$*' failed: in the server VM it $server_rc, in the" \
			"client VM it $client_rc"
	fi
}

main "$@"
