#!/bin/busybox sh
# shellcheck shell=dash disable=SC2154 # vm_*: from the kernel command line
# PID 1 of the VM (vm-lib.sh packs it into the initramfs as /init): busybox sh, before any shared
# library can be reached.  The kernel turns the name=value words of its command line that it does
# not know (vm_repo, vm_job, vm_nic_macs...) into init's environment.
/bin/busybox --install -s /bin
export PATH=/bin
H=/host                 # where the host's root file system is mounted

mount -t devtmpfs dev /dev
# What udev adds on any machine: bash's <(...) opens /dev/fd/N.
ln -s /proc/self/fd /dev/fd
# The initramfs has no /dev/console, so the kernel started us without stdio.
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys

# Quietly: the kernel says "reboot: Power down" at its highest log level.
shutdown() { echo 0 >/proc/sys/kernel/printk; sync; poweroff -f; }
fail() { echo "vm-run (guest): $*" >&2; shutdown; }
on_host() { chroot "$H" "$@" || fail "'$*' failed (exit $?)"; }

# A probe boot (is KVM usable?) only says that it got this far.
[ -z "${vm_probe:-}" ] || { echo "vm-probe: booted" >/dev/ttyS0; shutdown; }

# One VM of a pair (vm-pair.sh): Soft-RoCE on each cable's virtio NIC, found
# by the MAC qemu was given, so that every packet really leaves this kernel;
# vm_nic_macs, vm_nic_addrs and vm_server_addrs list one per cable, with commas.
rxe_on_cables() {
	local i=1 mac addr nic
	on_host modprobe -a rdma_rxe rdma_ucm virtio_net
	for mac in $(echo "$vm_nic_macs" | tr , ' '); do
		addr=$(echo "$vm_nic_addrs" | cut -d, -f"$i")
		nic=$(grep -lxF "$mac" /sys/class/net/*/address) || fail "no network interface has the MAC $mac"
		nic=${nic%/address}; nic=${nic##*/}
		# IPv6 with no router solicitation and no duplicate address detection: on the
		# cable, besides what a session asks for, only multicast listener reports, which
		# the trace leaves out.  The link-local address stays: the kernel sends a neighbour
		# solicitation that no packet of ours caused (rdma_cm's address resolution) only
		# from it (ndisc_solicit() in ndisc.c).
		echo 0 >"/proc/sys/net/ipv6/conf/$nic/accept_dad"
		echo 0 >"/proc/sys/net/ipv6/conf/$nic/router_solicitations"
		on_host ip link set "$nic" up
		on_host ip addr add "$addr/24" dev "$nic"
		on_host ip -6 addr add "$(ipv6_of "$addr")/64" dev "$nic"
		on_host rdma link add "rxe$((i - 1))" type rxe netdev "$nic"
		i=$((i + 1))
	done
	addr=${vm_server_addrs%%,*}
	RDMA_ENV="$RDMA_ENV RDMA_ADDR=$addr RDMA_ADDR6=$(ipv6_of "$addr") RDMA_ADDRS=$vm_server_addrs RDMA_DEV=rxe0"
}

# ipv6_of 198.18.N.HOST: the same host's IPv6 address on cable N, a unique
# local one, fd52:444d:4200:N::HOST.
ipv6_of() { local cable_host=${1#198.18.}; echo "fd52:444d:4200:${cable_host%.*}::${cable_host#*.}"; }

while read -r m; do insmod "/lib/modules/$m.ko" || fail "insmod $m failed"; done </modules
mkdir -p "$H" /dev/shm
# The host's files read-only, and cached here (cache=loose: not kept in step with the host, the
# kernel's Documentation/filesystems/9p.rst): the guest needs none of the host's changes while it
# runs; what it writes goes to the tmpfs mounts and the repository, uncached.  Without the cache
# each exec read its program and libraries over 9p again: under TCG on 6.1 a check of a client's
# session (tests/lib.sh's check_session) took 2.9 s, now 1.55.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot "$H" ||
	fail "cannot mount the host's root file system"
for d in proc sys dev; do mount --bind "/$d" "$H/$d" || fail "cannot bind /$d"; done
# Terminals, as on any machine (tests/hostile.sh runs a server on one).
{ mkdir -p /dev/pts && mount -t devpts devpts "$H/dev/pts"; } || fail "cannot mount devpts"
for d in tmp run dev/shm; do mount -t tmpfs tmpfs "$H/$d" || fail "cannot mount a tmpfs on /$d"; done
# A kernel from the cache keeps its modules there: show them where modprobe
# looks, /lib/modules/VERSION (a tmpfs over the host's own, in this VM only).
if [ -n "${vm_modules:-}" ] && ! { mount -t tmpfs tmpfs "$H/lib/modules" &&
	mkdir "$H/lib/modules/$(uname -r)" &&
	mount --bind "$H$vm_modules" "$H/lib/modules/$(uname -r)"; }; then
	fail "cannot show the modules of $vm_modules in /lib/modules"
fi
# Last, so that the tmpfs mounts cannot hide it.
mkdir -p "$H$vm_repo"
mount -t 9p -o trans=virtio,version=9p2000.L repo "$H$vm_repo" || fail "cannot mount the repository on $vm_repo"

# Adding an rxe link makes the kernel load crc32 helpers by itself, with the
# program named in /proc/sys/kernel/modprobe. It would look for it in this
# initramfs, which has none, and "rdma link add" would fail with ENOENT.
printf '#!/bin/sh\nexec chroot /host /sbin/modprobe "$@"\n' >/bin/modprobe-host
chmod +x /bin/modprobe-host
echo /bin/modprobe-host >/proc/sys/kernel/modprobe

# A VM alone is a machine like any other whose kernel has rdma_rxe: the job
# brings Soft-RoCE up itself (scripts/soft-roce.sh), not in a VM inside this
# one (SOFT_ROCE_IN_VM), and this is no container, whatever /.dockerenv says.
RDMA_ENV="SOFT_ROCE_IN_VM=1 container="
on_host ip link set lo up
[ -z "${vm_nic_macs:-}" ] || rxe_on_cables

# ttyS0 is the host's stdout; ttyS1, the console, is its stderr.  From
# here on the job has run (vm-run.sh boots again a VM that stops before).
: >"$H$vm_job/started"
# shellcheck disable=SC2086 # RDMA_ENV is words
chroot "$H" /usr/bin/env -i HOME=/root $RDMA_ENV \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/bash "$vm_job/job.sh" </dev/null >/dev/ttyS0 2>/dev/ttyS1
# qemu cannot hand the guest's exit status to the host: a file can.
echo $? >"$H$vm_job/status"
shutdown
