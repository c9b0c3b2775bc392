#!/usr/bin/env bash
# make doctor: can this machine run the programs?  Checks, in the order a learner meets them,
# what most often stands in the way: the Soft-RoCE module, an RDMA device and its link,
# libibverbs seeing it, an address rdma_cm can use, the device nodes, the memlock limit, and last
# a real connection (rping).  Needs no build and changes nothing.
#
# One line per check, to grep (and "note ..." lines, not counted):
#   ok   WHAT: what was found
#   FAIL WHAT: what is wrong
#        fix: one line that fixes it
#   skip WHAT: why it could not be checked (as when an earlier one failed)
# then "doctor: N checks: N ok, N failed, N skipped".  Exits 0 when nothing failed, 1 otherwise.
#
# The fixes speak this system's language: its package names and manager
# (scripts/packages.txt; OS_RELEASE=FILE reads another system's os-release),
# and in a container, what must happen on the host or where it is started.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/rdma-lib.sh"
. "$here/system-lib.sh"

SYSFS=/sys/class/infiniband
NODES=/dev/infiniband
# What ibv_reg_mr pins, in KiB: the server's pool (DEFAULT_POOL_SIZE in common/common.h, 4 MiB)
# plus its receive and reply buffers (64 and 16 KiB at the defaults, in whole pages) with room to
# spare.  Measured (VmPin in /proc/PID/status, defaults, a client connected): 4184 KiB event-driven
# server, 4164 polling, 4 client.  --isolation mr pins each granted slice instead: never more in all.
NEED_KIB=$((4096 + 128)) # the pool, and the buffers with room to spare
CAP_IPC_LOCK=14 # bit number in /proc/PID/status CapEff (linux/capability.h)
VM_HINT="make demo and make test run everything in a VM that has Soft-RoCE; scripts/soft-roce.sh CMD runs CMD there"
# In a container the kernel, its modules and its devices are the host's.
HOST_DEVICE="on the host: sudo rdma link add rxe0 type rxe netdev IFACE; start the container with --network host --device /dev/infiniband"

n_ok=0 n_failed=0 n_skipped=0

# What the checks found, for later ones (container: detect_container).
suggested_netdev='' # a netdev to suggest for "rdma link add"
user=''             # who runs this: device nodes and memlock are per user
rxe_available=false # rdma_rxe loaded, built in, loadable, or not needed
devices=()          # names under /sys/class/infiniband
link_dev='' link_port='' link_netdev='' # the first ACTIVE port, and its netdev (empty: InfiniBand)
addr=''             # the IPv4 address clients should connect to

# The lines the header shows, each counted but a note's.
ok() { printf 'ok   %s: %s\n' "$1" "$2"; n_ok=$((n_ok + 1)); }
failed() { printf 'FAIL %s: %s\n     fix: %s\n' "$1" "$2" "$3"; n_failed=$((n_failed + 1)); }
skip() { printf 'skip %s: %s\n' "$1" "$2"; n_skipped=$((n_skipped + 1)); }
note() { printf 'note %s\n' "$1"; }

# detect_container: the kind of container this runs in, if any: the
# variable "container" where set (even empty), as systemd reads it from
# PID 1; else podman's /run/.containerenv or docker's /.dockerenv.
detect_container() {
	[ -z "${container+set}" ] || return 0 # as the environment says
	if [ -e /run/.containerenv ]; then
		container=podman
	elif [ -e /.dockerenv ]; then
		container=docker
	else # PID 1's, else none but set: the checks read it under set -u
		container=$(tr '\0' '\n' 2>/dev/null </proc/1/environ | sed -n 's/^container=//p') || true
	fi
}

# install_of NEED: the line that installs NEED (a need of packages.txt)
# here; fails where no package brings it.  fix_install NEED WHAT: that
# line as a fix, or one that says to install WHAT by hand.
install_of() {
	local pkgs
	pkgs=$(packages_of "$1")
	case $pkgs in '' | - | ! | \?) return 1 ;; esac
	install_line "$pkgs"
}
fix_install() { install_of "$1" || echo "install $2 (this system has no package for it in scripts/packages.txt)"; }

check_module() {
	local what='kernel module rdma_rxe' dev found
	for dev in "${devices[@]}"; do
		# An rxe device names its netdev in "parent"; hardware has none.
		[ -e "$SYSFS/$dev/parent" ] || { rxe_available=true; ok "$what" "not needed: $dev is not Soft-RoCE"; return; }
	done
	case $(rxe_module) in
	loaded) found=loaded ;;
	builtin) found="built into the kernel" ;;
	on-disk) found="not loaded yet, but on disk ('rdma link add' loads it)" ;;
	*) failed "$what" "this kernel ($(uname -r)) has none: not loaded, and modprobe cannot find it" "$(module_fix)"; return ;;
	esac
	rxe_available=true
	ok "$what" "$found"
}

# Where rdma_rxe comes from: a container's host, a package of its own (as
# Ubuntu's linux-modules-extra), another kernel (Debian's cloud), or a VM.
module_fix() {
	local line
	if [ -n "$container" ]; then
		echo "in a $container container the kernel is the host's: load rdma_rxe there (sudo modprobe rdma_rxe), then $HOST_DEVICE; or let make demo and make test use a VM"
	elif line=$(install_of rdma_rxe); then
		echo "$line (rdma_rxe is packaged apart from the kernel here)"
	elif [[ $(uname -r) =~ -cloud-(amd64|arm64)$ ]]; then
		# Debian's cloud kernel leaves rdma_rxe out (its drivers/infiniband has the core,
		# mlx4_ib and mlx5_ib only); the standard kernel of the same architecture has it.
		echo "this is Debian's cloud kernel, built without rdma_rxe, which Debian's standard kernel has:" \
			"$(install_line "linux-image-${BASH_REMATCH[1]}"), then boot it, for host mode; or $VM_HINT"
	else
		echo "$VM_HINT"
	fi
}

find_devices() { local dev; for dev in "$SYSFS"/*; do [ ! -e "$dev" ] || devices+=("${dev##*/}"); done; }

check_device() {
	local what='RDMA device' dev parent list='' fix
	if [ "${#devices[@]}" -eq 0 ]; then
		if [ -n "$container" ]; then
			fix="a $container container sees the host's devices: $HOST_DEVICE"
		elif [ "$rxe_available" = true ]; then
			fix="as root: rdma link add rxe0 type rxe netdev ${suggested_netdev:-NETDEV} (a netdev with an IPv4 address, not lo)"
		else
			fix="none can exist without rdma_rxe (above) or an RDMA NIC"
		fi
		failed "$what" "none in $SYSFS" "$fix"
		return
	fi
	for dev in "${devices[@]}"; do
		list+="${list:+, }$dev"
		read -r parent 2>/dev/null <"$SYSFS/$dev/parent" && list+=" (Soft-RoCE on $parent)"
	done
	ok "$what" "$list"
}

# rdma link show: a line per port (active_ports).  The port used from here
# on: the first ACTIVE one, preferring one that is not on lo (check_address).
check_link() {
	local what='link state' links dev words rest port state netdev first='' down=''
	[ "${#devices[@]}" -gt 0 ] || { skip "$what" "no RDMA device"; return; }
	command -v rdma >/dev/null || { failed "$what" "no 'rdma' command to ask" "$(fix_install rdma-tool rdma)"; return; }
	links=$(rdma link show 2>&1) || true
	for dev in "${devices[@]}"; do
		while read -ra words; do
			[[ ${words[1]:-} == "$dev/"* ]] || continue
			port=${words[1]#*/} state='' netdev='' rest=" ${words[*]:2} "
			[[ $rest =~ \ state\ ([^ ]+) ]] && state=${BASH_REMATCH[1]}
			[[ $rest =~ \ netdev\ ([^ ]+) ]] && netdev=${BASH_REMATCH[1]}
			if [ "$state" = ACTIVE ] && { [ -z "$link_dev" ] || [ "$link_netdev" = lo ]; }; then
				link_dev=$dev link_port=$port link_netdev=$netdev
			elif [ -z "$first" ] && [ "$state" != ACTIVE ]; then
				first="$dev/$port state $state${netdev:+ (netdev $netdev)}" down=$netdev
			fi
		done <<<"$links"
	done
	if [ -n "$link_dev" ]; then
		ok "$what" "$link_dev/$link_port ACTIVE${link_netdev:+ on netdev $link_netdev}"
	elif [ -z "$first" ]; then
		failed "$what" "'rdma link show' lists no port of ${devices[*]}: ${links:-nothing}" \
			"as root: rdma link delete ${devices[0]}, then add it again"
	else
		failed "$what" "no port is ACTIVE: $first" \
			"bring its netdev up with a carrier: ip link set ${down:-NETDEV} up"
	fi
}

# libibverbs finds devices through /sys/class/infiniband_verbs (made by
# ib_uverbs) and a user-space driver (rxe's is in ibverbs-providers).
check_devinfo() {
	local what='ibv_devinfo' out
	[ -n "$link_dev" ] || { skip "$what" "no ACTIVE RDMA device"; return; }
	command -v ibv_devinfo >/dev/null || { failed "$what" "not installed" "$(fix_install ibv_devinfo ibv_devinfo)"; return; }
	if out=$(ibv_devinfo -d "$link_dev" -i "$link_port" 2>&1) && grep -q "hca_id:.*$link_dev" <<<"$out"; then
		if grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$out"; then
			ok "$what" "$link_dev port $link_port PORT_ACTIVE"
		else
			failed "$what" "$link_dev port $link_port is not PORT_ACTIVE: $(grep 'state:' <<<"$out" | tr -s '\t ' ' ')" \
				"bring its netdev up with a carrier: ip link set ${link_netdev:-NETDEV} up"
		fi
	elif ! compgen -G '/sys/class/infiniband_verbs/uverbs*' >/dev/null; then
		failed "$what" "libibverbs sees no $link_dev: no /sys/class/infiniband_verbs/uverbs*" \
			"as root: modprobe ib_uverbs"
	else
		failed "$what" "libibverbs sees no $link_dev: $(head -n 1 <<<"$out")" \
			"$(fix_install rxe-provider "libibverbs' drivers") (rxe's user-space driver)"
	fi
}

# RoCE finds its peer by IP address: each address of the netdev is in the
# port's GID table as an IPv4-mapped GID (::ffff:a.b.c.d).  Prints its
# index at the first match (of a thousand entries, most empty), or fails.
gid_index() {
	local a b c d want gid file
	IFS=. read -r a b c d <<<"$1"
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
	for file in "$SYSFS/$link_dev/ports/$link_port/gids/"*; do
		read -r gid 2>/dev/null <"$file" || continue
		[ "$gid" != "$want" ] || { echo "${file##*/}"; return 0; }
	done
	return 1
}

LO_WHY="rdma_cm cannot route to 127.0.0.1 / lo on Debian 12's 6.1 kernel (rdma_resolve_route: No such device)"

check_address() {
	local what='IPv4 address' addrs a index type
	[ -n "$link_dev" ] || { skip "$what" "no ACTIVE RDMA device"; return; }
	[ -n "$link_netdev" ] || { skip "$what" "$link_dev has no netdev (InfiniBand, not RoCE): use its IPoIB address"; return; }
	addrs=$(ip -4 -o addr show dev "$link_netdev" | awk '{ sub("/.*", "", $4); print $4 }') || true
	for a in $addrs; do
		[[ $a == 127.* ]] && continue
		index=$(gid_index "$a") || continue
		addr=$a
		read -r type 2>/dev/null <"$SYSFS/$link_dev/ports/$link_port/gid_attrs/types/$index" || type='type unknown'
		ok "$what" "$addr on $link_netdev (GID index $index, $type): connect clients to $addr"
		note "127.0.0.1 will not do: $LO_WHY"
		return
	done
	a=$(head -n 1 <<<"$addrs")
	if [ -z "$addrs" ]; then
		failed "$what" "none on $link_netdev, the netdev under $link_dev" \
			"as root: ip addr add ADDRESS/PREFIX dev $link_netdev"
	elif grep -qv '^127\.' <<<"$addrs"; then
		failed "$what" "no GID of $link_dev/$link_port holds $(grep -v '^127\.' <<<"$addrs" | head -n 1) (rxe fills the table from the netdev's addresses)" \
			"as root: rdma link delete $link_dev; rdma link add $link_dev type rxe netdev $link_netdev"
	# Only a loopback address (rxe on lo, or 127.x on its netdev): newer
	# kernels route rdma_cm to it, Debian 12's 6.1 does not; rping tells.
	elif rping_works "$a"; then
		addr=$a
		ok "$what" "$a on $link_netdev: rdma_cm reaches it on this kernel (not on Debian 12's 6.1)"
	else
		failed "$what" "only $a on $link_netdev: $LO_WHY" \
			"put rxe on a netdev with a real address: as root: rdma link delete $link_dev; rdma link add rxe0 type rxe netdev ${suggested_netdev:-eth0}"
	fi
}

# check_node WHAT PATH FIX: a device node this user can read and write.
check_node() {
	local what=$1 path=$2 fix=$3
	if [ -n "$container" ] && { [ ! -e "$path" ] || [ ! -r "$path" ] || [ ! -w "$path" ]; }; then
		failed "$what" "no read-write $path in this $container container" \
			"start the container with --device $path (or --device /dev/infiniband)"
	elif [ ! -e "$path" ]; then
		failed "$what" "no $path" "$fix"
	elif [ ! -r "$path" ] || [ ! -w "$path" ]; then
		failed "$what" "$path is not read-write for $user: $(stat -c '%A %U:%G' "$path")" \
			"rdma-core's udev rules make it so ($(fix_install rdma-core rdma-core)), or as root: chmod 0666 $path"
	else
		ok "$what" "$path is read-write for $user"
	fi
}

# rdma_cm's node belongs to the rdma_ucm module; a device's verbs node to
# ib_uverbs, found through /sys/class/infiniband_verbs/uverbsN/ibdev.
check_nodes() {
	local what='uverbs device node' v ibdev node=''
	if [ "$rxe_available" = false ] && [ ! -d /sys/module/rdma_ucm ]; then
		skip 'rdma_cm device node' "no RDMA in this kernel"
	else
		check_node 'rdma_cm device node' "$NODES/rdma_cm" "as root: modprobe rdma_ucm"
	fi
	[ -n "$link_dev" ] || { skip "$what" "no ACTIVE RDMA device"; return; }
	for v in /sys/class/infiniband_verbs/uverbs*; do
		read -r ibdev 2>/dev/null <"$v/ibdev" || continue
		[ "$ibdev" = "$link_dev" ] && node=$NODES/${v##*/}
	done
	[ -n "$node" ] || { failed "$what" "none for $link_dev in /sys/class/infiniband_verbs" "as root: modprobe ib_uverbs"; return; }
	check_node "$what" "$node" "as root: modprobe ib_uverbs"
}

# ibv_reg_mr pins memory, and the kernel (ib_umem_get) counts every pinned
# page against RLIMIT_MEMLOCK (ulimit -l) unless the process has CAP_IPC_LOCK.
check_memlock() {
	local what=memlock limit hard cap fix limits
	limit=$(ulimit -S -l) hard=$(ulimit -H -l)
	cap=$(awk '$1 == "CapEff:" { print $2 }' "/proc/$$/status")
	if ((0x${cap:-0} >> CAP_IPC_LOCK & 1)); then
		ok "$what" "exempt: $user has CAP_IPC_LOCK (as root does, unless its container drops it), which lifts ulimit -l ($limit KiB) for ibv_reg_mr; other users need $NEED_KIB KiB"
	elif [ "$limit" = unlimited ]; then
		ok "$what" "ulimit -l unlimited"
	elif ((limit >= NEED_KIB)); then
		ok "$what" "ulimit -l $limit KiB >= $NEED_KIB KiB, what the server pins (its 4 MiB pool and buffers)"
	else
		limits="a memlock line in /etc/security/limits.conf ('$user - memlock unlimited', then log in again) or LimitMEMLOCK=infinity in a systemd unit"
		if [ -n "$container" ]; then
			fix="a $container container's limit is set where it starts: --ulimit memlock=-1 (docker, podman run), or --cap-add IPC_LOCK"
		elif [ "$hard" = unlimited ] || ((hard >= NEED_KIB)); then
			fix="ulimit -l $NEED_KIB (your hard limit allows it); to keep it: $limits"
		else
			fix="only root can raise the hard limit ($hard KiB): $limits, or ulimit -l unlimited in a root shell"
		fi
		failed "$what" "ulimit -l is $limit KiB but the server pins $NEED_KIB KiB (its 4 MiB pool and buffers): ibv_reg_mr would fail with ENOMEM" "$fix"
	fi
}

# The whole path at once: rdma_cm resolves, connects, passes messages.
check_rping() {
	local what=rping
	if [ -z "$addr" ]; then
		skip "$what" "no usable address"
	elif ! command -v rping >/dev/null; then
		skip "$what" "not installed ($(fix_install rping rping))"
	elif rping_works "$addr"; then
		ok "$what" "a connection to $addr went through"
	else
		failed "$what" "no connection to $addr: $(head -n 1 <<<"$rping_error")" \
			"see why: rping -s -v -a $addr -C 1 & rping -c -v -a $addr -C 1"
	fi
}

main() {
	read_os_release
	detect_container
	# A uid with no name (docker run --user 1234) is named by its number.
	user=$(id -un 2>/dev/null) || user="uid $(id -u)"
	suggested_netdev=$(suggest_netdev)
	find_devices
	check_module
	check_device
	check_link
	check_devinfo
	check_address
	check_nodes
	check_memlock
	check_rping
	[ "$rxe_available" = true ] ||
		note "no Soft-RoCE here; to see these checks pass in the VM: scripts/soft-roce.sh scripts/doctor.sh"
	echo "doctor: $((n_ok + n_failed + n_skipped)) checks: $n_ok ok, $n_failed failed, $n_skipped skipped"
	[ "$n_failed" = 0 ]
}

main "$@"
