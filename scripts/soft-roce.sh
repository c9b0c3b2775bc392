#!/usr/bin/env bash
# soft-roce.sh CMD [ARGS...]: run CMD, and exit with its status, where an RDMA device works, with
# RDMA_ADDR set to the IPv4 address clients should connect to (servers listen on 0.0.0.0) and
# RDMA_DEV to the device's name.
#
# Soft-RoCE (the rdma_rxe kernel module, "rxe") makes an RDMA device out of an ordinary network
# interface: the same verbs and rdma_cm calls as with a RoCE NIC, carried out by the kernel in
# software. Where CMD runs, the first of these that works (each one tried says in a line why it
# would not do):
#   1. RDMA_ADDR already set: on the device you set up yourself.
#   2. An existing RDMA device of any kind (Soft-RoCE, a RoCE or InfiniBand NIC): an ACTIVE port
#      whose netdev has an IPv4 address rping reaches.
#   3. As root, on this machine's kernel: a Soft-RoCE device and a dummy interface of its own,
#      both named rxe_demo<PID> after this script's process (two runs at once each have their
#      own), with two addresses from 198.18.0.0/15, the benchmarking range (a /32 on a dummy:
#      packets to it never leave this machine), RDMA_ADDR and RDMA_ADDR2 (for tests that need a
#      second peer address), and an IPv6 one, RDMA_ADDR6.  Never lo: rdma_cm on Debian 12's 6.1
#      cannot route to 127.0.0.1.  With SOFT_ROCE_DEVICES=2, a second device and interface,
#      rxe_dem2<PID>, with an address of its own (RDMA_DEV2, RDMA_ADDR_DEV2) for tests of a
#      server that serves every device.
#   4. Where this kernel has no rdma_rxe: a VM whose kernel has it (scripts/vm-run.sh), in which
#      this script runs again and takes 3.
# SOFT_ROCE_MODE=host stops before 4; SOFT_ROCE_MODE=vm goes to 4 at once.
#
# CMD runs in a session of its own. When it ends, or this script gets SIGINT (Ctrl-C), SIGTERM or
# SIGHUP (the terminal closed), every process left in that session is stopped, then the device,
# the interface and the modules this run loaded are removed, and on a signal it ends by that
# signal. What a path needs and lacks, scripts/deps.sh installs (as root) or names.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/rdma-lib.sh"
. "$here/system-lib.sh"

# This run's interface and device name: 15 characters at most, "rxe_demo" and a PID of up to 7.
PREFIX=rxe_demo PREFIX2=rxe_dem2 OWN=$PREFIX$$ OWN2=$PREFIX2$$
# What the traps undo: the modules this run loaded, CMD's session.
loaded_modules=() cmd_sid='' cmd_name=''

say() { echo "soft-roce: $*" >&2; }

# sweep_leftovers: say so of each rxe_demo or rxe_dem2 device or interface whose run has ended
# (SIGKILL, lost power) and, as root, remove it.
sweep_leftovers() {
	local name pid
	for name in $( (rdma link show 2>/dev/null | awk '{ sub("/.*", "", $2); print $2 }'
		ip -o link show 2>/dev/null | awk -F': ' '{ sub("@.*", "", $2); print $2 }') |
		grep -E "^($PREFIX|$PREFIX2)" | sort -u); do
		# Not while its run (the soft-roce.sh whose PID ends NAME) runs.
		pid=${name#"$PREFIX"} pid=${pid#"$PREFIX2"}
		if [[ $pid =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ] &&
			grep -q 'soft-roce\.sh' "/proc/$pid/cmdline" 2>/dev/null; then continue; fi
		if [ "$(id -u)" != 0 ]; then
			say "$name was left by a run that has ended; as root:" \
				"rdma link delete $name; ip link delete $name"
		else
			say "removing $name, left by a run that has ended"
			remove_own "$name"
		fi
	done
}

# try_existing: step 2.  Sets RDMA_ADDR, RDMA_DEV and how, or why_not.
try_existing() {
	local dev port netdev addr addrs ports tried=()
	ports=$(active_ports)
	[ -n "$ports" ] || { why_not="no RDMA device has an ACTIVE port"; return 1; }
	while read -r dev port netdev; do
		case $dev,$netdev in
		"$PREFIX"* | "$PREFIX2"*) tried+=("$dev is another run's"); continue ;;
		*,lo) tried+=("$dev/$port is on lo"); continue ;;
		esac
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

# own_address: a 198.18.0.0/15 address this machine neither has nor routes but by its default
# route, so that taking it hides nothing.  Listings are read whole: a reader that quits at the
# first match (grep -q) fails ip's next write, which pipefail turns into "not there" (two make
# demo at once took one address so).
own_address() {
	local a have
	have=$(ip -4 -o addr show)
	for a in 198.18.0.{1..254}; do
		[[ $have != *" $a/"* ]] || continue
		[ -z "$(ip -4 route show match "$a" | awk '$1 != "default"')" ] || continue
		echo "$a"
		return 0
	done
	return 1
}

# load MODULE: modprobe it, to be removed at the end if it was not loaded.
load() {
	local err
	[ -d "/sys/module/$1" ] && return 0
	err=$(modprobe "$1" 2>&1) || { why_not="modprobe $1: ${err:-failed}"; return 1; }
	# Built into the kernel: nothing to unload.
	[ ! -e "/sys/module/$1/initstate" ] || loaded_modules=("$1" "${loaded_modules[@]}")
}

# remove_own NAME...: the rdma link and the interface of each NAME, if any.
remove_own() {
	local name
	for name; do
		! rdma link show "$name/1" >/dev/null 2>&1 ||
			rdma link delete "$name" || say "could not remove the rdma link $name"
		[ ! -e "/sys/class/net/$name" ] || ip link delete "$name" || say "could not remove the interface $name"
	done
}

# The EXIT trap: what this run made, then the modules it loaded, but none that another run may
# still use: removing a module takes every device of its kind with it, in use or not
# (drivers/net/dummy.c deletes every dummy interface, drivers/infiniband/sw/rxe/rxe.c every rxe
# device).  rdma_ucm a program loads again: librdmacm asks the kernel for its device node, and
# ib_get_client_nl_info() in drivers/infiniband/core/device.c loads it. Under the lock (try_own
# says why).
cleanup() {
	local m user
	remove_own "$OWN" "$OWN2"
	[ "${#loaded_modules[@]}" = 0 ] || take_lock || true
	for m in "${loaded_modules[@]}"; do
		user=''
		case $m in
		rdma_rxe) [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || user="another RDMA device" ;;
		dummy) [ -z "$(ip -o link show type dummy 2>/dev/null)" ] || user="another dummy interface" ;;
		esac
		[ -z "$user" ] || { say "leaving $m loaded: $user needs it"; continue; }
		modprobe -r "$m" 2>/dev/null || true
	done
}

# on_signal SIG: stop CMD's session and remove what this run made.
on_signal() {
	say "SIG$1: stopping${cmd_sid:+ what '$cmd_name' started}, then removing what this run made" || exec 2>/dev/null
	[ -z "$cmd_sid" ] || stop_session "$cmd_sid"
	cleanup
}

# take_lock: this machine's Soft-RoCE lock, held on fd $lock (kept open by a run that holds it
# already: cleanup from a signal mid-try_own).
lock=''
take_lock() {
	local dir
	[ -n "$lock" ] || {
		dir=$(lock_dir 2>&1) || { why_not=$dir; return 1; }
		exec {lock}>"$dir/rdma-pool-doorbell-soft-roce.lock"
	}
	flock "$lock"
}

# try_own: step 3.  Sets the RDMA_* variables of step 3 and how, or why_not.
try_own() {
	local addr addr2 addr6 err='' name names=("$OWN") addrs=() i status=0
	[ "$(id -u)" = 0 ] || { why_not="only root can make one (rdma link add)"; return 1; }
	# Ubuntu keeps rdma_rxe in a package of its own for each kernel.
	if [ "$(rxe_module)" = none ] && ! err=$("$here/deps.sh" rxe 2>&1); then
		# deps.sh's last line says why (no package, no network, a lock).
		why_not="this kernel ($(uname -r)) has no rdma_rxe module: ${err##*$'\n'}"
		return 1
	fi
	[ -z "$err" ] || echo "$err" >&2
	# One run at a time, from the modules to its devices: two runs must not take one address,
	# nor one ending remove a module between another's load and its device.
	take_lock || return 1
	make_own || status=$?
	exec {lock}>&-
	lock=''
	[ "$status" = 0 ] || return 1
	for i in "${!names[@]}"; do
		name=${names[i]} addr=${addrs[i]}
		rping_works "$addr" ||
			{ why_not="$name is up on $addr, but rping to it fails: ${rping_error%%$'\n'*}"; return 1; }
	done
	RDMA_ADDR=${addrs[0]} RDMA_ADDR2=${addr2:-} RDMA_ADDR6=$addr6 RDMA_DEV=$OWN
	[ "${#names[@]}" = 1 ] || RDMA_DEV2=$OWN2 RDMA_ADDR_DEV2=${addrs[1]}
	how="$OWN, made for this run on a dummy interface of its own"
}

# make_own: try_own's modules, interfaces and devices, under the lock (variables: try_own's).
make_own() {
	load rdma_rxe && load rdma_ucm && load dummy || return 1
	[ "${SOFT_ROCE_DEVICES:-1}" != 2 ] || names+=("$OWN2")
	for name in "${names[@]}"; do
		addr=$(own_address) || { err="no free address in 198.18.0.0/24"; break; }
		err=$(ip link add "$name" type dummy 2>&1 && ip link set "$name" up 2>&1 &&
			ip addr add "$addr/32" dev "$name" 2>&1) || true
		[ -z "$err" ] || { err="$name, a dummy interface on $addr: $err"; break; }
		addrs+=("$addr")
	done
	addr=${addrs[0]:-}
	# RDMA_ADDR2, and RDMA_ADDR6 where IPv6 is on, go on $OWN.
	if [ -z "$err" ] && addr2=$(own_address); then
		err=$(ip addr add "$addr2/32" dev "$OWN" 2>&1) || true
		err=${err:+"$OWN, a second address $addr2: $err"}
	fi
	addr6=fd52:444d:4100::${addr##*.}
	ip -6 addr add "$addr6/128" dev "$OWN" nodad 2>/dev/null || addr6=
	[ -z "$err" ] || { why_not=$err; return 1; }
	for name in "${names[@]}"; do
		err=$(rdma link add "$name" type rxe netdev "$name" 2>&1) ||
			{ why_not="rdma link add $name type rxe netdev $name: $err"; return 1; }
	done
}

# try_host: steps 2 and 3, saying why each would not do.
try_host() {
	try_existing && return 0
	say "tried an existing device: $why_not"
	try_own && return 0
	say "tried a device of its own: $why_not"
	cleanup
	loaded_modules=()
	return 1
}

# vm_possible: step 4 may be taken: not inside a VM already, and this kernel cannot do Soft-RoCE
# itself (where it can, a VM proves nothing a root shell here would not).  Sets why_no_vm.
vm_possible() {
	[ -z "${SOFT_ROCE_IN_VM:-}" ] || { why_no_vm="this is the VM already"; return 1; }
	[ "$(rxe_module)" = none ] || { why_no_vm="this kernel has rdma_rxe"; return 1; }
}

# Step 4: this script runs again in the VM, SOFT_ROCE_DEVICES passed on.
run_in_vm() {
	VM_PASS_ENV="${VM_PASS_ENV:-} SOFT_ROCE_DEVICES" exec "$here/vm-run.sh" "$here/soft-roce.sh" "$@"
}

main() {
	local mode status=0
	[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
	[ -z "${RDMA_ADDR:-}" ] || { say "mode: given (RDMA_ADDR=$RDMA_ADDR was already set)"; exec "$@"; }

	[[ ${SOFT_ROCE_DEVICES:-1} == [12] ]] ||
		{ say "SOFT_ROCE_DEVICES must be 1 or 2, not '$SOFT_ROCE_DEVICES'"; exit 2; }
	mode=${SOFT_ROCE_MODE:-auto}
	case $mode in
	host | auto) ;;
	vm) say "mode: vm (SOFT_ROCE_MODE=vm)"; run_in_vm "$@" ;;
	*) say "SOFT_ROCE_MODE must be host, vm or auto, not '$mode'"; exit 2 ;;
	esac
	# From here on a device may be made: first the traps that remove it.
	trap cleanup EXIT
	stop_on_signals on_signal
	sweep_leftovers
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
			say "no RDMA device can run here: $why_not${why_no_vm:+; no VM: $why_no_vm}"
		fi
		exit 1
	fi

	say "mode: host ($how; RDMA_ADDR=$RDMA_ADDR RDMA_DEV=$RDMA_DEV${RDMA_DEV2:+ RDMA_ADDR_DEV2=$RDMA_ADDR_DEV2 RDMA_DEV2=$RDMA_DEV2})"
	export RDMA_ADDR RDMA_ADDR2 RDMA_ADDR6 RDMA_DEV RDMA_DEV2 RDMA_ADDR_DEV2
	# Not exec: the EXIT trap may have a device to remove.  CMD in the background, so that a
	# signal's trap runs at once, with our stdin (bash gives background commands /dev/null).
	# Not being a process group leader here, setsid does not fork: $! is the new session's ID.
	# shellcheck disable=SC2034 # read by on_signal, which a trap calls
	cmd_name=$1
	setsid "$@" <&0 &
	cmd_sid=$!
	wait "$cmd_sid" || status=$?
	stop_session "$cmd_sid"
	exit "$status"
}

main "$@"
