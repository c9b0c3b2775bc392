#!/usr/bin/env bash
# soft-roce.sh CMD [ARGS...]: run CMD where a Soft-RoCE device works, with
# RDMA_ADDR set to the IPv4 address clients should connect to (servers
# listen on 0.0.0.0) and RDMA_DEV to the device's name. Exits with CMD's
# status.
#
# Soft-RoCE (the rdma_rxe kernel module, "rxe") makes an RDMA device out of
# an ordinary network interface: the same verbs and rdma_cm calls as with a
# RoCE NIC, carried out by the kernel in software. Where CMD runs:
#   RDMA_ADDR already set   on the device you set up yourself (RDMA_DEV
#                           names it; tests look it up if not)
#   SOFT_ROCE_MODE=host     on this machine's kernel (root, rdma_rxe needed)
#   SOFT_ROCE_MODE=vm       in a VM with Debian's kernel (see vm-run.sh)
#   neither (auto)          host if this kernel can, else vm
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# modprobe and ip live in /sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin
# shellcheck source=scripts/rping.sh
. "$here/rping.sh"

say() {
	echo "soft-roce: $*" >&2
}

# Prints the name of an existing rxe device and the IPv4 address of the
# netdev under it.
existing_rxe() {
	local parent netdev addr
	# An rxe device has a "parent" file: the netdev it runs on.
	for parent in /sys/class/infiniband/*/parent; do
		[ -r "$parent" ] || continue
		netdev=$(cat "$parent")
		addr=$(ip -4 -o addr show dev "$netdev" |
			awk '{ sub("/.*", "", $4); print $4; exit }')
		if [ -n "$addr" ]; then
			parent=${parent%/parent}
			echo "${parent##*/} $addr"
			return 0
		fi
	done
	return 1
}

# Gets this kernel a working rxe device: sets RDMA_ADDR and host_how, or
# sets why_not and fails. "Working" means an rping gets through: a kernel
# can accept an rxe link that rdma_cm then cannot use (Debian's 6.1 adds
# rxe on lo, but rdma_resolve_route to 127.0.0.1 fails: No such device).
try_host() {
	local addr dev_addr err
	if ! command -v rping >/dev/null; then
		why_not="no rping to check the device with (rdmacm-utils)"
		return 1
	fi
	if dev_addr=$(existing_rxe); then
		addr=${dev_addr#* }
		if ! rping_works "$addr"; then
			why_not="an rxe device exists, but rping to $addr fails"
			return 1
		fi
		RDMA_ADDR=$addr
		RDMA_DEV=${dev_addr%% *}
		host_how="an existing rxe device"
		return 0
	fi
	if ! err=$(modprobe rdma_rxe 2>&1); then
		why_not="modprobe rdma_rxe: ${err:-failed}"
		return 1
	fi
	if ! err=$(rdma link add rxe_lo type rxe netdev lo 2>&1); then
		why_not="rdma link add rxe_lo type rxe netdev lo: ${err:-failed}"
		return 1
	fi
	if ! rping_works 127.0.0.1; then
		rdma link delete rxe_lo
		why_not="rxe_lo on lo was added, but rping to 127.0.0.1 fails"
		return 1
	fi
	trap 'rdma link delete rxe_lo' EXIT
	RDMA_ADDR=127.0.0.1
	RDMA_DEV=rxe_lo
	host_how="rxe_lo, made on lo for this run"
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
	host)
		if ! try_host; then
			say "mode host impossible: this kernel ($(uname -r))" \
				"cannot run Soft-RoCE: $why_not"
			say "use SOFT_ROCE_MODE=vm (scripts/deps.sh installs its needs)," \
				"or run as root on a kernel with rdma_rxe"
			exit 1
		fi
		;;
	vm)
		say "mode: vm (SOFT_ROCE_MODE=vm)"
		exec "$here/vm-run.sh" "$@"
		;;
	auto)
		if ! try_host; then
			say "mode: vm (this kernel, $(uname -r), cannot:" \
				"$why_not)"
			exec "$here/vm-run.sh" "$@"
		fi
		;;
	*)
		say "SOFT_ROCE_MODE must be host, vm or auto, not '$mode'"
		exit 2
		;;
	esac

	say "mode: host ($host_how, RDMA_ADDR=$RDMA_ADDR, RDMA_DEV=$RDMA_DEV)"
	export RDMA_ADDR RDMA_DEV
	# Not exec: the EXIT trap may have an rxe link to remove afterwards.
	"$@" || status=$?
	exit "$status"
}

main "$@"
