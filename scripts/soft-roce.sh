#!/usr/bin/env bash
# soft-roce.sh CMD [ARGS...]: run CMD where a Soft-RoCE device works, with
# RDMA_ADDR set to the IPv4 address clients should connect to (servers
# listen on 0.0.0.0). Exits with CMD's status.
#
# Soft-RoCE (the rdma_rxe kernel module, "rxe") makes an RDMA device out of
# an ordinary network interface: the same verbs and rdma_cm calls as with a
# RoCE NIC, carried out by the kernel in software. Where CMD runs:
#   RDMA_ADDR already set   on the device you set up yourself
#   SOFT_ROCE_MODE=host     on this machine's kernel (root, rdma_rxe needed)
#   SOFT_ROCE_MODE=vm       in a VM with Debian's kernel (see vm-run.sh)
#   neither (auto)          host if this kernel can, else vm
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() {
	echo "soft-roce: $*" >&2
}

# Prints the IPv4 address of the netdev under an existing rxe device.
existing_rxe_addr() {
	local parent netdev addr
	# Only rxe devices have a "parent" file: the netdev they run on.
	for parent in /sys/class/infiniband/*/parent; do
		[ -r "$parent" ] || continue
		netdev=$(cat "$parent")
		addr=$(ip -4 -o addr show dev "$netdev" |
			awk '{ sub("/.*", "", $4); print $4; exit }')
		if [ -n "$addr" ]; then
			echo "$addr"
			return 0
		fi
	done
	return 1
}

# Gets this kernel a usable rxe device: sets RDMA_ADDR and host_how, or
# sets why_not and fails.
try_host() {
	local addr err
	if addr=$(existing_rxe_addr); then
		RDMA_ADDR=$addr
		host_how="an existing rxe device"
		return 0
	fi
	if ! err=$(modprobe rdma_rxe 2>&1); then
		why_not="modprobe rdma_rxe: ${err:-failed}"
		return 1
	fi
	# rxe on lo needs a recent kernel: 6.1 refuses it ("failed to add lo").
	if ! err=$(rdma link add rxe_lo type rxe netdev lo 2>&1); then
		why_not="rdma link add rxe_lo type rxe netdev lo: ${err:-failed}"
		return 1
	fi
	trap 'rdma link delete rxe_lo' EXIT
	RDMA_ADDR=127.0.0.1
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
			say "use SOFT_ROCE_MODE=vm (needs: scripts/deps.sh)," \
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

	say "mode: host ($host_how, RDMA_ADDR=$RDMA_ADDR)"
	export RDMA_ADDR
	# Not exec: the EXIT trap may have an rxe link to remove afterwards.
	"$@" || status=$?
	exit "$status"
}

main "$@"
