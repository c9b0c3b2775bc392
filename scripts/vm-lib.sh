# vm-lib.sh: what the Soft-RoCE VMs share, sourced by vm-run.sh (one VM; its
# header says what a VM sees of this machine) and vm-pair.sh (two VMs on one
# virtual cable).  VM_KERNEL=VERSION: the kernel (find_kernel, kernel_root);
# VM_ACCEL=kvm|tcg: the accelerator, without choose_accel's probe.

. "$(dirname "${BASH_SOURCE[0]}")/system-lib.sh"

vm_prog=${vm_prog:-vm-run}
# modprobe and depmod live in /sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin
VM_TIMEOUT=${VM_TIMEOUT:-1800}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vmdir=$repo/build/vm
accel_cache=$vmdir/accel-$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
# Kernels fetched for VMs only (scripts/vm-kernel.sh), one folder each with
# boot/ and lib/modules/ as a package would install them.
KERNEL_CACHE=${KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-pool-doorbell/kernels}
# The keys Debian's archive is signed with (Debian's apt depends on them).
DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# How long a probe guest may take to say it booted under KVM.  Under TCG
# the same guest needs about 3 s here; a working KVM, well under one.
KVM_PROBE_SECONDS=15

# What the initramfs loads to reach the host's files: virtio PCI, then 9p
# over it; the guest loads the rest (rdma_rxe...) with the host's modprobe.
INITRAMFS_MODULES=(virtio_pci 9pnet_virtio 9p)

INIT=$repo/scripts/vm-init.sh # PID 1 of the VM, run by busybox sh

say() { echo "$vm_prog: $*" >&2; }
die() { say "$@"; exit 1; }

# kernel_root VERSION: the directory holding boot/vmlinuz-VERSION and lib/modules/VERSION: its
# folder in the cache, else / (the same version may be both: Debian 12 with bookworm-backports'
# kernel installed, whose modules may lack what the VM needs).  Fails if neither has it.
kernel_root() {
	local root
	for root in "$KERNEL_CACHE/$1/" /; do
		[ -e "${root}boot/vmlinuz-$1" ] && [ -d "${root}lib/modules/$1" ] && echo "$root" && return 0
	done
	return 1
}

# initramfs_modules ROOT VERSION: the module files the initramfs must load, dependencies first,
# from the kernel's own modules.dep (a built-in module needs no file).  Fails if one is missing.
initramfs_modules() {
	local m
	for m in "${INITRAMFS_MODULES[@]}"; do
		modprobe -d "$1" -S "$2" --show-depends "$m" 2>/dev/null || return 1
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'
}

# kernel_usable VERSION: true if the VM can boot it: its image readable, and rdma_rxe and every
# initramfs module among its modules, in a form this machine can unpack.  Sets why_not otherwise.
kernel_usable() {
	local ver=$1 root files f tool
	why_not=''
	if ! root=$(kernel_root "$ver"); then
		why_not="not in /boot, nor in $KERNEL_CACHE"
	elif [ ! -r "${root}boot/vmlinuz-$ver" ]; then
		why_not="${root}boot/vmlinuz-$ver is readable by root only (as on Ubuntu): run as root, or make it readable (sudo chmod 0644 ${root}boot/vmlinuz-$ver)"
	elif ! modprobe -d "$root" -S "$ver" --show-depends rdma_rxe >/dev/null 2>&1; then
		why_not="no rdma_rxe module (CONFIG_RDMA_RXE)"
	elif ! files=$(initramfs_modules "$root" "$ver"); then
		why_not="no module for ${INITRAMFS_MODULES[*]} (virtio and 9p)"
	else
		for f in $files; do
			case $f in *.ko.xz) tool=xz ;; *.ko.zst) tool=zstd ;; *) continue ;; esac
			command -v "$tool" >/dev/null || why_not="its modules are $tool-compressed, and there is no $tool"
		done
	fi
	[ -z "$why_not" ]
}

# The kernels in /boot, newest first.
boot_kernels() { compgen -G '/boot/vmlinuz-*' | sed 's,^/boot/vmlinuz-,,' | sort -rV; }

# find_kernel: sets vm_ver and vm_root to the first kernel that can boot: VM_KERNEL, else each
# kernel in /boot in turn.  Says on stderr why each one before it could not; fails if none can.
find_kernel() {
	local ver
	vm_ver=${VM_KERNEL:-}
	if [ -n "$vm_ver" ]; then
		kernel_usable "$vm_ver" || die "VM_KERNEL=$VM_KERNEL cannot boot the VM: $why_not"
	else
		for ver in $(boot_kernels); do
			kernel_usable "$ver" && vm_ver=$ver && break
			say "kernel $ver cannot boot the VM: $why_not"
		done
		[ -n "$vm_ver" ] || return 1
	fi
	vm_root=$(kernel_root "$vm_ver")
}

# kernel_for_vms: where /boot has no kernel the VM can boot (Debian's cloud kernel has no
# rdma_rxe, a container has no kernel at all), one for the VMs alone: with apt and Debian's
# archive keys, Debian's, fetched into the cache, not installed (this machine boots the kernel it
# had); elsewhere, this system's package (deps.sh vm-kernel).  Sets vm_ver and vm_root, or dies.
kernel_for_vms() {
	local none="no kernel in /boot can boot the Soft-RoCE VM" why="each one's reason is above"
	[ -n "$(boot_kernels)" ] || why="/boot has none"
	if command -v apt-get >/dev/null && command -v dpkg >/dev/null && [ -r "$DEBIAN_KEYRING" ]; then
		say "$none ($why): fetching Debian's into $KERNEL_CACHE, for the" \
			"VMs alone (scripts/vm-kernel.sh; nothing is installed)"
		VM_KERNEL=$("$repo/scripts/vm-kernel.sh") ||
			die "cannot fetch a kernel for the VMs (scripts/vm-kernel.sh, above)"
	else
		"$repo/scripts/deps.sh" vm-kernel || die "$none ($why), and none could be installed (above)"
	fi
	find_kernel || die "$none: each one's reason is above"
}

# Builds the initramfs once per kernel and init script, in build/vm/, and
# prints its path.  In a command substitution, where set -e does not hold,
# each step says itself when it fails, so that no broken image is cached;
# it is packed in a folder of this run's, lest two runs at once write one file.
build_initramfs() {
	local ver=$1 root=$2 key image tmp stage files path name
	files=$(initramfs_modules "$root" "$ver")
	key=$(printf '%s\n' "$ver" "$root" "$files" "$(cat "$INIT")" | sha256sum | cut -c1-12)
	image=$vmdir/initramfs-$ver-$key.cpio.gz
	[ ! -e "$image" ] || { echo "$image"; return; }

	tmp=$(mktemp -d "$vmdir/initramfs.XXXXXX") || die "cannot make a folder in $vmdir"
	stage=$tmp/root
	# This subshell's own: a failed step (die) or a signal leaves nothing.
	# The image is packed inside the same folder: a packer that opens it
	# after this rm (it was stopped too, a moment later) finds no folder.
	# shellcheck disable=SC2064 # the path, now
	trap "rm -rf '$tmp'" EXIT
	mkdir -p "$stage"/{bin,dev,proc,sys,lib/modules} || die "cannot fill $stage"
	cp /bin/busybox "$stage/bin/busybox" || die "cannot copy /bin/busybox"
	install -m 0755 "$INIT" "$stage/init" || die "cannot write $stage/init"
	for path in $files; do
		name=${path##*/} name=${name%%.ko*}
		# busybox insmod wants plain .ko files.
		case $path in
		*.ko) cp "$path" "$stage/lib/modules/$name.ko" ;;
		*.ko.xz) xz -dc "$path" >"$stage/lib/modules/$name.ko" ;;
		*.ko.zst) zstd -qdc "$path" >"$stage/lib/modules/$name.ko" ;;
		*.ko.gz) gzip -dc "$path" >"$stage/lib/modules/$name.ko" ;;
		*) false ;;
		esac || die "kernel $ver: cannot unpack module $path"
		echo "$name" || die "cannot write $stage/modules"
	done >"$stage/modules" || die "cannot write $stage/modules"

	(set -o pipefail && cd "$stage" && find . | cpio -o -H newc -R 0:0 --quiet | gzip -1) \
		>"$tmp/image.cpio.gz" || die "cannot pack the initramfs for $ver"
	rm -f "$vmdir"/initramfs-"$ver"-*.cpio.gz
	mv "$tmp/image.cpio.gz" "$image" || die "cannot move the initramfs to $image"
	echo "$image"
}

# qemu_cmd ACCEL APPEND MEGABYTES CPUS: sets the array qemu to the command line every boot of vm_ver
# shares, for the caller to add devices to.  Only panics reach the console (loglevel=1); panic=-1
# reboots at once, and -no-reboot turns that into qemu exiting.  oops=panic: an oops otherwise kills
# only the task, and may leave the machine deadlocked (kernel-parameters.txt; seen: a task that
# oopsed hung in exit_mmap()).  tsc=reliable skips the TSC's checks at boot and at run time
# (kernel-parameters.txt): under TCG, 6.1 guessed its TSCs unsynchronized and read the emulated
# HPET; now it reads the TSC, as 6.12 does.  TCG keeps a host thread per vCPU, though a vCPU now and
# then runs an int3 the kernel's code patching has already replaced ("Oops: int3": 6.12, 1 boot in
# 40; vm-run.sh retries); on one thread (thread=single) none in 40, but a busy vCPU holds it up to
# 100 ms (QEMU's TCG_KICK_PERIOD): make test ran slower and failed.  Not -nographic: with it, the
# BIOS draws on the first serial port, the guest job's stdout.  -nic none: only the caller's NICs.
qemu_cmd() {
	qemu=(qemu-system-x86_64 -accel "$1" -m "$3" -kernel "${vm_root}boot/vmlinuz-$vm_ver"
		-smp "$4" -initrd "$vm_initramfs" -display none -no-reboot -nic none -monitor none
		-append "console=ttyS1 quiet loglevel=1 panic=-1 oops=panic tsc=reliable $2")
}

kvm_usable() { [ -r /dev/kvm ] && [ -w /dev/kvm ]; }

# KVM runs a guest many times faster than TCG, where it works; on some machines /dev/kvm is there
# but a guest hangs under it.  So a probe guest decides, once per boot here (build/vm/accel-*).
choose_accel() {
	local out
	case ${VM_ACCEL:-} in
	'') ;;
	kvm | tcg) vm_accel=$VM_ACCEL; say "accelerator: $vm_accel (VM_ACCEL)"; return ;;
	*) die "VM_ACCEL must be kvm or tcg, not '$VM_ACCEL'" ;;
	esac
	kvm_usable || { vm_accel=tcg; say "accelerator: TCG, software emulation (no usable /dev/kvm)"; return; }
	if [ ! -s "$accel_cache" ]; then
		qemu_cmd kvm vm_probe=1 256 1
		# --foreground: in our process group, which a Ctrl-C reaches.
		out=$(timeout --foreground --kill-after=5 "$KVM_PROBE_SECONDS" "${qemu[@]}" \
			-serial file:/dev/stdout -serial null </dev/null 2>/dev/null) || true
		# Replaced whole: a run reading it meanwhile never finds it empty.
		if [[ $out == *"vm-probe: booted"* ]]; then echo kvm; else echo tcg; fi >"$accel_cache.$$"
		mv "$accel_cache.$$" "$accel_cache"
	fi
	vm_accel=$(cat "$accel_cache")
	if [ "$vm_accel" = kvm ]; then
		say "accelerator: KVM (a probe guest booted under it)"
	else
		say "accelerator: TCG, software emulation (/dev/kvm is there," \
			"but a probe guest did not boot under it within" \
			"${KVM_PROBE_SECONDS}s; this boot's answer, kept in $accel_cache:" \
			"delete it to probe again, or set VM_ACCEL)"
	fi
}

# Checks the prerequisites and sets what every boot needs: vm_ver and
# vm_root (the kernel), vm_initramfs and vm_accel.
vm_prepare() {
	local path from
	# These paths go on the kernel command line (split at spaces) and into
	# qemu options (split at commas): checked before installing or fetching.
	for path in "the repository, $repo," "KERNEL_CACHE, $KERNEL_CACHE,"; do
		[[ ${path#*, } =~ ^[A-Za-z0-9/._+-]+,$ ]] ||
			die "$path has spaces or other characters qemu options" \
				"cannot carry: move it"
	done
	# What a VM needs and this machine lacks, installed now as root, else
	# named: qemu, a static busybox (run before any shared library can be
	# reached), modprobe, and what soft-roce.sh runs in the guest from this
	# machine's files (rping, rdma...).  A kernel, if need be, after those.
	"$repo/scripts/deps.sh" run vm || die "cannot boot a VM without what deps.sh named above"
	find_kernel || kernel_for_vms
	# A kernel from the cache has its modules shown in the guest over the
	# host's /lib/modules, which the guest cannot make (the host's root is
	# read-only to it); a machine with no kernel (a container) has none.
	[ "$vm_root" = / ] || [ -d /lib/modules ] || mkdir /lib/modules 2>/dev/null ||
		die "this machine has no /lib/modules, which the VM's kernel" \
			"needs to show its modules: sudo mkdir /lib/modules"
	mkdir -p "$vmdir"
	vm_initramfs=$(build_initramfs "$vm_ver" "$vm_root")
	choose_accel
	from=${vm_root%/}
	say "kernel $vm_ver, from ${from:-/boot}"
}

# write_job CMD...: the script the guest runs; printf %q quotes for bash.
write_job() {
	local names name
	read -ra names <<<"${VM_PASS_ENV:-}"
	# The VM has its own, empty /tmp and /run: a cwd there is not in it.
	printf 'cd %q || exit 1\n' "$PWD"
	for name in "${names[@]}"; do
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "VM_PASS_ENV: '$name' is not a variable name"
		[ -z "${!name+set}" ] || printf 'export %s=%q\n' "$name" "${!name}"
	done
	printf 'exec%s\n' "$(printf ' %q' "$@")"
}

# boot_vm JOB MEGABYTES CPUS MARK [QEMU_ARGS...]: one VM, until its guest powers off; qemu's exit
# status (124: VM_TIMEOUT ran out).  JOB, the folder of job.sh, gets qemu.pid (stop_qemu);
# QEMU_ARGS add devices; name=value words in VM_APPEND reach the guest's init.  The job's stdout
# is qemu's, and its stderr, with the kernel's messages, qemu's stderr: "2>&1 >&3" swaps the two
# so that both pass through sed and come out here as they went in, each line after MARK and
# without the \r that ends serial lines.
boot_vm() {
	local job=$1 mem=$2 cpus=$3 edit="s/\r//g; s/^/$4/" share=security_model=none,multidevs=remap
	local append="vm_repo=$repo vm_job=$job ${VM_APPEND:-}"
	[ "$vm_root" = / ] || append+=" vm_modules=${vm_root}lib/modules/$vm_ver"
	shift 4
	qemu_cmd "$vm_accel" "$append" "$mem" "$cpus"
	{ timeout --foreground --kill-after=10 "$VM_TIMEOUT" "${qemu[@]}" \
		-serial file:/dev/stdout -serial file:/dev/stderr \
		-virtfs "local,path=/,mount_tag=hostroot,readonly=on,$share" \
		-virtfs "local,path=$repo,mount_tag=repo,$share" \
		-pidfile "$job/qemu.pid" "$@" </dev/null 2>&1 >&3 3>&- |
		sed -u "$edit" >&2; } 3>&1 | sed -u "$edit"
}

# stop_qemu JOB [PID]: end the qemu that boot_vm started for JOB, if it still
# runs (the PID in JOB/qemu.pid is still a qemu).  A signal can come before
# qemu wrote that file: given PID (boot_vm's job), wait for it while PID runs.
stop_qemu() {
	local pid comm
	while [ -n "${2:-}" ] && [ ! -s "$1/qemu.pid" ] && kill -0 "$2" 2>/dev/null; do sleep 0.05; done
	read -r pid 2>/dev/null <"$1/qemu.pid" || return 0
	read -r comm 2>/dev/null <"/proc/$pid/comm" || return 0
	[[ $comm != qemu* ]] || kill "$pid" 2>/dev/null || true
}

# on_signal SIG: the caller's cleanup (its EXIT trap), at once
# (stop_on_signals; the caller waits for qemu in the background).
on_signal() { echo "$vm_prog: SIG$1: stopping the VM" >&2 || exec 2>/dev/null; cleanup; }

# job_status JOB QEMU_STATUS WHAT CMD: prints the exit status that the
# guest's job (CMD) wrote into JOB; if there is none, says on stderr why
# the VM (WHAT: "the VM", "the server VM") did not get that far, and fails.
job_status() {
	local job=$1 status=$2 what=$3 cmd=$4
	[ ! -s "$job/status" ] || { head -n 1 "$job/status"; return 0; }
	if [ "$status" -eq 124 ]; then
		say "$what timed out after ${VM_TIMEOUT}s (VM_TIMEOUT)"
	else
		say "$what stopped without reporting the exit status of" \
			"'$cmd' (qemu exit $status: setup failed, the kernel" \
			"crashed or qemu was stopped; see the messages above)"
	fi
	return 1
}
