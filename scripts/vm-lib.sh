# shellcheck shell=bash
# vm-lib.sh: what the Soft-RoCE VMs share, sourced by vm-run.sh (one VM,
# rxe looping back inside it) and vm-pair.sh (two VMs on one virtual cable).
#
# A VM boots Debian's kernel from /boot under qemu and sees this machine's
# root file system read-only over 9p, so every program installed here is
# there too. The repository is shared writable at the same path: what the
# guest writes into it (builds, logs, results) is still here after the VM is
# gone.

# The name this script's messages start with: the caller's.
vm_prog=${vm_prog:-vm-run}
# modinfo lives in /sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin
VM_TIMEOUT=${VM_TIMEOUT:-1800}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vmdir=$repo/build/vm

# What the initramfs needs to mount the host's files: virtio PCI, then 9p
# over it. Listed in an insmod order that resolves every symbol; the guest
# loads everything else (rdma_rxe...) with the host's own modprobe.
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev
	virtio_pci netfs fscache 9pnet 9pnet_virtio 9p)

# PID 1 of the VM (busybox sh). The kernel turns the name=value words of its
# command line that it does not know (vm_repo, vm_job, vm_nic_mac...) into
# init's environment.
INIT=$(cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
H=/host                 # where the host's root file system is mounted
ADDR=198.18.0.1         # RFC 2544 benchmarking range; only in this VM

mount -t devtmpfs dev /dev
# The initramfs has no /dev/console, so the kernel started us without stdio.
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys

# Quietly: the kernel says "reboot: Power down" at its highest log level.
shutdown() {
	echo 0 >/proc/sys/kernel/printk
	sync
	poweroff -f
}
fail() {
	echo "vm-run (guest): $*" >&2
	shutdown
}
on_host() {
	chroot "$H" "$@" || fail "'$*' failed (exit $?)"
}

# Soft-RoCE on a dummy netdev with one address: clients and servers both use
# it, and rxe loops the packets back inside the kernel. (Not lo: this kernel
# adds rxe on lo, but rdma_cm then cannot route to 127.0.0.1; a 127.x address
# on the dummy fails the same way.)
rxe_on_dummy() {
	on_host modprobe -a rdma_rxe rdma_ucm dummy
	on_host ip link set lo up
	on_host ip link add rxe_t0 type dummy
	on_host ip link set rxe_t0 up
	on_host ip addr add "$ADDR/32" dev rxe_t0
	on_host rdma link add rxe0 type rxe netdev rxe_t0
}

# One VM of a pair (vm-pair.sh): Soft-RoCE on the virtio NIC that the cable
# plugs into, so that every packet really leaves this kernel. The NIC is
# the one with the MAC qemu was given; clients connect to vm_server_addr.
rxe_on_cable() {
	local nic='' d
	on_host modprobe -a rdma_rxe rdma_ucm virtio_net
	for d in /sys/class/net/*; do
		[ "$(cat "$d/address")" = "$vm_nic_mac" ] && nic=${d##*/}
	done
	[ -n "$nic" ] || fail "no network interface has the MAC $vm_nic_mac"
	# No IPv6 chatter (router solicitations...) on the cable: only ARP
	# and RoCE go over it.
	echo 1 >"/proc/sys/net/ipv6/conf/$nic/disable_ipv6"
	on_host ip link set lo up
	on_host ip link set "$nic" up
	on_host ip addr add "$vm_nic_addr/24" dev "$nic"
	on_host rdma link add rxe0 type rxe netdev "$nic"
	ADDR=$vm_server_addr
}

while read -r m; do
	insmod "/lib/modules/$m.ko" || fail "insmod $m failed"
done </modules
mkdir -p "$H"
mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot "$H" ||
	fail "cannot mount the host's root file system"
for d in proc sys dev; do
	mount --bind "/$d" "$H/$d" || fail "cannot bind /$d"
done
mkdir -p /dev/shm
for d in tmp run dev/shm; do
	mount -t tmpfs tmpfs "$H/$d" || fail "cannot mount a tmpfs on /$d"
done
# Last, so that the tmpfs mounts cannot hide it.
mkdir -p "$H$vm_repo"
mount -t 9p -o trans=virtio,version=9p2000.L repo "$H$vm_repo" ||
	fail "cannot mount the repository on $vm_repo"

# Adding an rxe link makes the kernel load crc32 helpers by itself, with the
# program named in /proc/sys/kernel/modprobe. It would look for it in this
# initramfs, which has none, and "rdma link add" would fail with ENOENT.
cat >/bin/modprobe-host <<'EOT'
#!/bin/sh
exec chroot /host /sbin/modprobe "$@"
EOT
chmod +x /bin/modprobe-host
echo /bin/modprobe-host >/proc/sys/kernel/modprobe

if [ -n "${vm_nic_mac:-}" ]; then
	rxe_on_cable
else
	rxe_on_dummy
fi

# ttyS0 is the host's stdout; ttyS1, the console, is its stderr.
chroot "$H" /usr/bin/env -i HOME=/root RDMA_ADDR="$ADDR" RDMA_DEV=rxe0 \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/bash "$vm_job/job.sh" </dev/null >/dev/ttyS0 2>/dev/ttyS1
# qemu cannot hand the guest's exit status to the host: a file can.
echo $? >"$H$vm_job/status"
shutdown
EOF
)

die() {
	echo "$vm_prog: $*" >&2
	exit 1
}

# Newest kernel in /boot that has rdma_rxe; empty if none.
find_kernel() {
	local image ver
	for image in /boot/vmlinuz-*; do
		ver=${image#/boot/vmlinuz-}
		if modinfo -k "$ver" -n rdma_rxe >/dev/null 2>&1; then
			echo "$ver"
		fi
	done | sort -V | tail -n 1
}

# Everything a VM needs, with the package that brings each.
check_prereqs() {
	local ver=$1 missing=()
	command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
	command -v modinfo >/dev/null || missing+=(kmod)
	command -v cpio >/dev/null || missing+=(cpio)
	# The guest runs busybox before it can reach any shared library.
	if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
		missing+=(busybox-static)
	fi
	if [ -z "$ver" ]; then
		echo "$vm_prog: no kernel in /boot has the rdma_rxe module" >&2
		missing+=(linux-image-amd64)
	elif [ ! -r "/boot/vmlinuz-$ver" ]; then
		die "cannot read /boot/vmlinuz-$ver: run as root"
	fi
	if [ "${#missing[@]}" -gt 0 ]; then
		die "cannot boot the Soft-RoCE VM; install what is missing with:" \
			"apt-get install ${missing[*]} (or run scripts/deps.sh)"
	fi
	# The path goes on the kernel command line (split at spaces) and into
	# qemu options (split at commas).
	if [[ ! $repo =~ ^[A-Za-z0-9/._+-]+$ ]]; then
		die "the repository path '$repo' has spaces or other" \
			"characters qemu options cannot carry: move it"
	fi
}

# Builds the initramfs once per kernel version and init script, in
# build/vm/, and prints its path.
build_initramfs() {
	local ver=$1 key image stage m path
	key=$(printf '%s\n' "$ver" "${MODULES[*]}" "$INIT" |
		sha256sum | cut -c1-12)
	image=$vmdir/initramfs-$ver-$key.cpio.gz
	if [ -e "$image" ]; then
		echo "$image"
		return
	fi

	stage=$(mktemp -d "$vmdir/initramfs.XXXXXX")
	mkdir -p "$stage/bin" "$stage/dev" "$stage/proc" "$stage/sys" \
		"$stage/lib/modules"
	cp /bin/busybox "$stage/bin/busybox"
	printf '%s\n' "$INIT" >"$stage/init"
	chmod +x "$stage/init"
	for m in "${MODULES[@]}"; do
		path=$(modinfo -k "$ver" -n "$m") ||
			die "kernel $ver has no module $m"
		# busybox insmod wants plain .ko files.
		case $path in
		*.ko) cp "$path" "$stage/lib/modules/$m.ko" ;;
		*.ko.xz) xz -dc "$path" >"$stage/lib/modules/$m.ko" ;;
		*.ko.zst) zstd -qdc "$path" >"$stage/lib/modules/$m.ko" ;;
		*) continue ;; # built into the kernel: nothing to load
		esac
		echo "$m" >>"$stage/modules"
	done

	rm -f "$vmdir"/initramfs-*.cpio.gz
	(cd "$stage" && find . | cpio -o -H newc -R 0:0 --quiet | gzip -1) \
		>"$image.tmp"
	mv "$image.tmp" "$image"
	rm -rf "$stage"
	echo "$image"
}

# Checks the prerequisites and sets vm_ver (the kernel's version) and
# vm_initramfs: what every boot needs.
vm_prepare() {
	vm_ver=$(find_kernel)
	check_prereqs "$vm_ver"
	mkdir -p "$vmdir"
	# shellcheck disable=SC2034 # for the scripts that source this one
	vm_initramfs=$(build_initramfs "$vm_ver")
}

# The script the guest runs: cd to the caller's directory, set the passed
# variables, exec CMD. printf %q quotes each word for bash.
write_job() {
	local names name
	read -ra names <<<"${VM_PASS_ENV:-}"
	# The VM has its own, empty /tmp and /run: a cwd there is not in it.
	printf 'cd %q || exit 1\n' "$PWD"
	for name in "${names[@]}"; do
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] ||
			die "VM_PASS_ENV: '$name' is not a variable name"
		if [ -n "${!name+set}" ]; then
			printf 'export %s=%q\n' "$name" "${!name}"
		fi
	done
	printf 'exec'
	printf ' %q' "$@"
	printf '\n'
}

# boot_vm KERNEL_VERSION INITRAMFS JOB MEGABYTES CPUS [QEMU_ARGS...]: one
# VM, until its guest powers off. The guest's job writes its stdout to
# qemu's stdout and its stderr, with the kernel's messages, to qemu's
# stderr. JOB is the directory with job.sh; the extra QEMU_ARGS add
# devices, and name=value words in VM_APPEND reach the guest's init.
boot_vm() {
	local ver=$1 initramfs=$2 job=$3 mem=$4 cpus=$5
	local share=security_model=none,multidevs=remap
	# Kernel messages go to ttyS1 (our stderr), and only panics (loglevel=1);
	# panic=-1 reboots at once, and -no-reboot turns that into qemu exiting.
	local append="console=ttyS1 quiet loglevel=1 panic=-1"
	append+=" vm_repo=$repo vm_job=$job ${VM_APPEND:-}"
	shift 5

	# /dev/kvm exists here but guests hang under it: emulate (TCG).
	# Not -nographic: with it, the BIOS draws its screen on the first serial
	# port, CMD's stdout. --foreground lets Ctrl-C reach qemu. -nic none:
	# no network but what QEMU_ARGS plug in.
	timeout --foreground --kill-after=10 "$VM_TIMEOUT" \
		qemu-system-x86_64 -accel tcg -m "$mem" -smp "$cpus" \
		-display none -no-reboot -nic none -monitor none \
		-kernel "/boot/vmlinuz-$ver" -initrd "$initramfs" \
		-append "$append" \
		-serial file:/dev/stdout -serial file:/dev/stderr \
		-virtfs "local,path=/,mount_tag=hostroot,readonly=on,$share" \
		-virtfs "local,path=$repo,mount_tag=repo,$share" \
		"$@" </dev/null
}

# Serial lines end in \r\n.
strip_cr() {
	sed -u 's/\r//g'
}

# job_status JOB QEMU_STATUS WHAT CMD: prints the exit status that the
# guest's job (CMD) wrote into JOB; if there is none, says on stderr why
# the VM (WHAT: "the VM", "the server VM") did not get that far, and fails.
job_status() {
	local job=$1 status=$2 what=$3 cmd=$4 rc
	if [ -s "$job/status" ]; then
		read -r rc <"$job/status"
		echo "$rc"
		return 0
	fi
	if [ "$status" -eq 124 ]; then
		echo "$vm_prog: $what timed out after ${VM_TIMEOUT}s" \
			"(VM_TIMEOUT)" >&2
	else
		echo "$vm_prog: $what stopped without reporting the exit" \
			"status of '$cmd' (qemu exit $status: setup failed, the" \
			"kernel crashed or qemu was stopped; see the messages" \
			"above)" >&2
	fi
	return 1
}
