#!/usr/bin/env bash
# vm-pair.sh [--pcap FILE] CMD [ARGS...]: run CMD on two machines joined by one network cable,
# the way a server and a client run in real use, and optionally record every frame crossing it.
#
# The machines are two throw-away VMs like vm-run.sh's, each with one virtual NIC and Soft-RoCE
# (rxe0) on it. The cable between the NICs is a socket of this host, which only carries frames
# from one qemu to the other: the VMs reach each other and nothing else, and every RoCE packet
# leaves one kernel as an Ethernet frame and enters the other. (VM_CABLE may ask for a second
# cable, with a second NIC and rxe1 in each VM, to test another kind of cable in the same boot.)
# Why VMs even where this kernel has rdma_rxe, and how on two real machines: docs/wire.md.
#
# CMD runs in both VMs, with WIRE_ROLE=server in one (address 198.18.0.1) and WIRE_ROLE=client
# in the other (198.18.0.2); in both, RDMA_ADDR is the server's address, the one clients connect
# to, and RDMA_ADDR6 its IPv6 one. (On cable N, counted from 0, the addresses are 198.18.N.1 and
# .2, and fd52:444d:4200:N::1 and ::2; RDMA_ADDRS lists the server's IPv4 one on each, comma
# separated.) The two can coordinate through files in the repository, which both see. Their
# output comes out here, each line marked "[server vm]" or "[client vm]".
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
#   VM_CABLE     the qemu netdev of each cable, space separated: stream,
#                socket or auto (default: one, auto; see cable_plan); --pcap
#                records the first.  VM_KERNEL, VM_ACCEL: see vm-lib.sh
set -euo pipefail

vm_prog=vm-pair
. "$(dirname "${BASH_SOURCE[0]}")/vm-lib.sh"

VM_GRACE=${VM_GRACE:-60}
# Set in main, and read by the EXIT trap after main has returned.
pair='' cable='' server='' client='' pcap='' server_pid='' client_pid=''

usage() { echo "usage: $0 [--pcap FILE] CMD [ARGS...]" >&2; exit 2; }

# run_vm ROLE JOB HOST NETDEV...: boot one VM of the pair, HOST 1 (the server) or 2 (the client),
# with a NIC on each cable NETDEV defines (cable N is netdev "cableN"), and record qemu's exit
# status in JOB/qemu. The addresses are of RFC 2544's benchmarking range, and only ever inside the
# VMs; the MACs are locally administered ones, of qemu's own prefix.
run_vm() {
	local role=$1 job=$2 host=$3 n=0 net mac args=() macs='' addrs='' servers='' status=0
	shift 3
	for net in "$@"; do
		mac=$(printf '52:54:00:00:%02x:%02x' "$n" "$host")
		args+=(-netdev "$net" -device "virtio-net-pci,netdev=cable$n,mac=$mac")
		macs+=,$mac addrs+=,198.18.$n.$host servers+=,198.18.$n.1
		n=$((n + 1))
	done
	[ "$role" != server ] || [ -z "$pcap" ] || args+=(-object "filter-dump,id=dump,netdev=cable0,file=$pcap")
	VM_APPEND="vm_nic_macs=${macs#,} vm_nic_addrs=${addrs#,} vm_server_addrs=${servers#,}" \
		boot_vm "$job" 1024 1 "[$role vm] " "${args[@]}" || status=$?
	echo "$status" >"$job/qemu"
}

# The cables, one kind each in VM_CABLE: a "stream" netdev over a Unix socket of this host where
# qemu has one (7.2 and later; "auto" takes it there), or the older "socket" netdev over TCP on
# 127.0.0.1 (qemu 6.2, Ubuntu 22.04's). Sets server_nets and client_nets (each VM's -netdev per
# cable) and cables_up (a shell command, true once the server VM's qemu listens on all).
cable_plan() {
	local kinds kind n=0 port ports=' ' auto=socket
	read -ra kinds <<<"${VM_CABLE:-auto}"
	grep -qx stream <<<"$(qemu-system-x86_64 -netdev help 2>/dev/null)" && auto=stream
	server_nets=() client_nets=() cables_up=true
	for kind in "${kinds[@]}"; do
		[ "$kind" != auto ] || kind=$auto
		case $kind in
		stream)
			# The socket's path must be short (108 bytes): not in the repository.
			server_nets+=("stream,id=cable$n,server=on,addr.type=unix,addr.path=$cable/sock$n")
			client_nets+=("stream,id=cable$n,server=off,addr.type=unix,addr.path=$cable/sock$n")
			cables_up+=" && test -S '$cable/sock$n'"
			;;
		socket)
			# A port nobody listens on, nor another cable of
			# ours; only this host can reach 127.0.0.1.
			until port=$((20000 + RANDOM % 20000)) && [[ $ports != *" $port "* ]] &&
				[ -z "$(ss -Htln "sport = :$port")" ]; do :; done
			ports+="$port "
			server_nets+=("socket,id=cable$n,listen=127.0.0.1:$port")
			client_nets+=("socket,id=cable$n,connect=127.0.0.1:$port")
			cables_up+=" && [ -n \"\$(ss -Htln 'sport = :$port')\" ]"
			;;
		*) die "VM_CABLE: a cable is stream, socket or auto, not '$kind'" ;;
		esac
		say "cable $n: qemu's $kind netdev"
		n=$((n + 1))
	done
	[ "$n" -gt 0 ] || die "VM_CABLE names no cable"
}

# grace PID JOB: a guest whose job has died must not leave its peer waiting for news that never
# comes: once one VM is gone, the other (background job PID) gets VM_GRACE s, then qemu is stopped.
grace() {
	local pid=$1 job=$2 end=$((SECONDS + VM_GRACE))
	while ((SECONDS < end)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	say "one VM ended ${VM_GRACE}s ago and the other still runs: stopping it (VM_GRACE)"
	stop_qemu "$job"
}

# outcome JOB WHAT CMD: "exited N" with CMD's status in that VM, or "did not finish" (why: stderr).
outcome() {
	local rc
	rc=$(job_status "$1" "$(cat "$1/qemu")" "$2" "$3") || { echo "did not finish"; return; }
	echo "exited $rc"
}

cleanup() {
	[ -z "$server" ] || { stop_qemu "$server" "$server_pid"; stop_qemu "$client" "$client_pid"; }
	wait
	rm -rf "$pair" "$cable"
}

main() {
	local server_rc client_rc role end
	if [ "${1:-}" = --pcap ]; then
		[ $# -ge 2 ] || usage
		pcap=$(realpath -m -- "$2")
		shift 2
		# qemu options cannot carry commas in a value.
		[[ $pcap =~ ^[A-Za-z0-9/._+-]+$ ]] || die "--pcap '$pcap': use a path of letters, digits and /._+-"
		[ -d "${pcap%/*}" ] || die "--pcap: no directory ${pcap%/*}"
		rm -f "$pcap"
	fi
	[ $# -gt 0 ] || usage
	vm_prepare

	trap cleanup EXIT
	stop_on_signals on_signal
	pair=$(mktemp -d "$vmdir/pair.XXXXXX")
	cable=$(mktemp -d "${TMPDIR:-/tmp}/vm-pair.XXXXXX")
	cable_plan
	server=$pair/server client=$pair/client
	for role in server client; do
		mkdir "$pair/$role"
		WIRE_ROLE=$role VM_PASS_ENV="${VM_PASS_ENV:-} WIRE_ROLE" \
			write_job "$@" >"$pair/$role/job.sh"
	done
	# The server VM holds the listening end of each cable (and the recorder); the client VM can
	# plug in only once it listens, which it must do within 30 s and before its qemu ends.
	run_vm server "$server" 1 "${server_nets[@]}" &
	server_pid=$!
	end=$((SECONDS + 30))
	until sh -c "$cables_up"; do
		if ! kill -0 "$server_pid" 2>/dev/null || ((SECONDS >= end)); then
			stop_qemu "$server"
			wait "$server_pid" || true
			die "the server VM did not start listening on the cables" \
				"(${server_nets[*]}); see the messages above"
		fi
		sleep 0.1
	done
	run_vm client "$client" 2 "${client_nets[@]}" &
	client_pid=$!

	wait -n "$server_pid" "$client_pid" || true
	grace "$server_pid" "$server"
	grace "$client_pid" "$client"
	wait

	server_rc=$(outcome "$server" "the server VM" "$*")
	client_rc=$(outcome "$client" "the client VM" "$*")
	[ "$server_rc/$client_rc" = "exited 0/exited 0" ] || die "'$*' failed:" \
		"in the server VM it $server_rc, in the client VM it $client_rc"
}

main "$@"
