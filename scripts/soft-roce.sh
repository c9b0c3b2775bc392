#!/usr/bin/env bash
# soft-roce.sh CMD [ARGS...]: run CMD where an RDMA device works, with
# RDMA_ADDR set to the IPv4 address clients should connect to (servers
# listen on 0.0.0.0) and RDMA_DEV to the device's name. Exits with CMD's
# status.
#
# Soft-RoCE (the rdma_rxe kernel module, "rxe") makes an RDMA device out of
# an ordinary network interface: the same verbs and rdma_cm calls as with a
# RoCE NIC, carried out by the kernel in software. Where CMD runs, the first
# of these that works (each one tried says in a line why it would not do):
#   1. RDMA_ADDR already set: on the device you set up yourself.
#   2. An existing RDMA device of any kind (Soft-RoCE, a RoCE or InfiniBand
#      NIC): an ACTIVE port whose netdev has an IPv4 address that an rping
#      reaches.
#   3. As root, on this machine's kernel: Soft-RoCE on an interface of its
#      own, a dummy with one address from 198.18.0.0/15, the benchmarking
#      range (a /32 on a dummy: packets to it never leave this machine).
#      The device, the interface and the modules loaded for it go away when
#      CMD ends, also after a failure or Ctrl-C.  Never lo: rdma_cm cannot
#      route to 127.0.0.1 on any kernel.
#   4. Where this kernel has no rdma_rxe: a VM whose kernel has it
#      (scripts/vm-run.sh), in which this script runs again and takes 3.
# SOFT_ROCE_MODE=host stops before 4; SOFT_ROCE_MODE=vm goes to 4 at once.
# What a path needs and lacks, scripts/deps.sh installs (as root) or names.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/rdma-lib.sh
. "$here/rdma-lib.sh"

# Soft-RoCE's own interface and device: the same name for both.
OWN=rxe_demo0
# Set once we have made them: the EXIT trap removes them again.
own_link=false own_if=false loaded_modules=()

say() {
	echo "soft-roce: $*" >&2
}

# try_existing: step 2.  Sets RDMA_ADDR, RDMA_DEV and how, or why_not.
try_existing() {
	local dev port netdev addr addrs ports tried=()
	ports=$(active_ports)
	if [ -z "$ports" ]; then
		why_not="no RDMA device has an ACTIVE port"
		return 1
	fi
	while read -r dev port netdev; do
		if [ "$netdev" = lo ]; then
			tried+=("$dev/$port is on lo")
			continue
		fi
		addrs=$(ipv4_addrs "$netdev")
		[ -n "$addrs" ] || tried+=("$dev/$port: $netdev has no IPv4 address")
		for addr in $addrs; do
			if rping_works "$addr"; then
				RDMA_ADDR=$addr RDMA_DEV=$dev
				how="$dev, an existing device: port $port on $netdev"
				return 0
			fi
			tried+=("$dev/$port: rping to $addr fails: ${rping_error%%$'\n'*}")
		done
	done <<<"$ports"
	why_not=$(IFS=';'; echo "${tried[*]}")
	return 1
}

# own_address: an address of 198.18.0.0/15 that this machine neither has
# nor routes anywhere but by its default route, so that taking it hides
# nothing.
own_address() {
	local i a
	for i in $(seq 1 254); do
		a=198.18.0.$i
		ip -4 -o addr show | grep -q " $a/" && continue
		ip -4 route show match "$a" | grep -qv '^default' && continue
		echo "$a"
		return 0
	done
	return 1
}

# load MODULE: modprobe it, and remember to remove it at the end if it was
# not loaded before.
load() {
	local err
	[ -d "/sys/module/$1" ] && return 0
	err=$(modprobe "$1" 2>&1) || { why_not="modprobe $1: ${err:-failed}"; return 1; }
	# Built into the kernel: nothing to unload.
	[ -e "/sys/module/$1/initstate" ] && loaded_modules=("$1" "${loaded_modules[@]}")
	return 0
}

cleanup() {
	local m
	if [ "$own_link" = true ]; then
		rdma link delete "$OWN" || say "could not remove the rdma link $OWN"
	fi
	if [ "$own_if" = true ]; then
		ip link delete "$OWN" || say "could not remove the interface $OWN"
	fi
	for m in "${loaded_modules[@]}"; do
		modprobe -r "$m" 2>/dev/null || true
	done
}

# try_own: step 3.  Sets RDMA_ADDR, RDMA_DEV and how, or why_not.
try_own() {
	local addr err
	if [ "$(id -u)" != 0 ]; then
		why_not="only root can make one (rdma link add)"
		return 1
	fi
	# Ubuntu keeps rdma_rxe in a package of its own for each kernel.
	if [ "$(rxe_module)" = none ]; then
		if ! err=$("$here/deps.sh" rxe 2>&1); then
			why_not="this kernel ($(uname -r)) has no rdma_rxe module, and no package of this system adds it"
			return 1
		fi
		[ -z "$err" ] || echo "$err" >&2
	fi
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	load rdma_rxe && load rdma_ucm && load dummy || return 1
	if ! addr=$(own_address); then
		why_not="no free address in 198.18.0.0/24"
		return 1
	fi
	if ! err=$(ip link add "$OWN" type dummy 2>&1); then
		why_not="ip link add $OWN type dummy: $err"
		return 1
	fi
	own_if=true
	ip link set "$OWN" up
	ip addr add "$addr/32" dev "$OWN"
	if ! err=$(rdma link add "$OWN" type rxe netdev "$OWN" 2>&1); then
		why_not="rdma link add $OWN type rxe netdev $OWN: $err"
		return 1
	fi
	own_link=true
	if ! rping_works "$addr"; then
		why_not="$OWN is up on $addr, but rping to it fails: ${rping_error%%$'\n'*}"
		return 1
	fi
	RDMA_ADDR=$addr RDMA_DEV=$OWN
	how="$OWN, made for this run on a dummy interface of its own"
}

# try_host: steps 2 and 3, saying why each would not do.
try_host() {
	if try_existing; then
		return 0
	fi
	say "tried an existing device: $why_not"
	if try_own; then
		return 0
	fi
	say "tried a device of its own: $why_not"
	cleanup
	own_link=false own_if=false loaded_modules=()
	return 1
}

# vm_possible: step 4 may be taken: not inside a VM already, and this
# kernel cannot do Soft-RoCE itself (where it can, a VM proves nothing a
# root shell here would not).  Sets why_not.
vm_possible() {
	if [ -n "${SOFT_ROCE_IN_VM:-}" ]; then
		why_not="this is the VM already"
		return 1
	fi
	if [ "${SOFT_ROCE_MODE:-auto}" != vm ] && [ "$(rxe_module)" != none ]; then
		why_not="this kernel has rdma_rxe: as root, $0 makes a device"
		return 1
	fi
}

# Step 4.  Inside the VM this script runs again (SOFT_ROCE_IN_VM) and makes
# a device of its own, as on any machine whose kernel has rdma_rxe.
run_in_vm() {
	exec "$here/vm-run.sh" "$here/soft-roce.sh" "$@"
}

main() {
	local mode status=0
	if [ $# -eq 0 ]; then
		echo "usage: $0 CMD [ARGS...]" >&2
		exit 2
	fi
	if [ -n "${RDMA_ADDR:-}" ]; then
		say "mode: given (RDMA_ADDR=$RDMA_ADDR was already set)"
		exec "$@"
	fi

	mode=${SOFT_ROCE_MODE:-auto}
	case $mode in
	host | auto) ;;
	vm)
		say "mode: vm (SOFT_ROCE_MODE=vm)"
		run_in_vm "$@"
		;;
	*)
		say "SOFT_ROCE_MODE must be host, vm or auto, not '$mode'"
		exit 2
		;;
	esac

	if ! try_host; then
		if [ "$mode" = auto ] && vm_possible; then
			say "mode: vm (this kernel, $(uname -r), has no rdma_rxe)"
			run_in_vm "$@"
		fi
		if [ "$(id -u)" != 0 ] && [ "$(rxe_module)" != none ]; then
			say "no usable RDMA device: run this as root, or once as" \
				"root: rdma link add rxe0 type rxe netdev" \
				"$(suggest_netdev) (then this finds it)"
		else
			say "no RDMA device can run here (${why_not:-SOFT_ROCE_MODE=host})"
		fi
		exit 1
	fi

	say "mode: host ($how; RDMA_ADDR=$RDMA_ADDR RDMA_DEV=$RDMA_DEV)"
	export RDMA_ADDR RDMA_DEV
	# Not exec: the EXIT trap may have a device to remove afterwards.
	"$@" || status=$?
	exit "$status"
}

main "$@"
