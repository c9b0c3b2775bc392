#!/usr/bin/env bash
# What scripts/deps.sh and make doctor do on each supported system (its real /etc/os-release in
# tests/os-release/), installing and changing nothing: deps.sh --dry-run prints the command it
# would run there, and the doctor runs where rdma_rxe is missing (Ubuntu without
# linux-modules-extra, Fedora without kernel-modules, a container), to see the fix it gives each.
# Reports in TAP; each test's comment says what else it holds the scripts to.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fixtures=$top/tests/os-release
deps=$top/scripts/deps.sh
doctor=$top/scripts/doctor.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/systems.XXXXXX")
open_top=''
trap 'rm -rf "$work" "$open_top"' EXIT

# open_copy: sets open_top to a copy of the scripts and the os-release
# files that any user can read: the tests that run as nobody (NOBODY CMD)
# run them from there (a clone under /root, mode 700, is closed to others).
NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
open_copy() {
	[ -z "$open_top" ] || return 0
	open_top=$(mktemp -d /tmp/rdma-pool-open.XXXXXX)
	cp -a "$top/scripts" "$fixtures" "$open_top/"
	chmod -R a+rX "$open_top"
}

# stand_in FILE FORMAT [ARG...]: FILE, a script printf FORMAT ARG... writes,
# made executable in a folder made for it: a command the test stands in for.
stand_in() {
	mkdir -p "${1%/*}"
	# shellcheck disable=SC2059 # the format is the caller's script
	printf "${@:2}" >"$1"
	chmod +x "$1"
}
report_prefix=systems/ report_stage=systems
. "$top/tests/report-lib.sh"
. "$top/scripts/rdma-lib.sh"
. "$top/scripts/system-lib.sh"

KVER=$(uname -r)
APT="apt-get install -y --no-install-recommends"
DEBIAN_BUILD_RUN="gcc libc6-dev make pkg-config libibverbs-dev librdmacm-dev ibverbs-providers rdma-core iproute2 ibverbs-utils rdmacm-utils perftest kmod"
RH_BUILD_RUN="gcc glibc-devel make pkgconf-pkg-config rdma-core-devel libibverbs rdma-core iproute libibverbs-utils librdmacm-utils perftest kmod"

# expect_deps FIXTURE "PURPOSES" WANT [STATUS]: what deps.sh --dry-run says
# it would do for PURPOSES on that system, its lines joined by "|", and its
# exit status (0 unless given: 1 where no package can bring a need).
expect_deps() {
	local name=$1 purposes=$2 want=$3 want_status=${4:-0} got status=0
	# shellcheck disable=SC2086 # purposes are words
	got=$(OS_RELEASE=$fixtures/$name "$deps" --dry-run $purposes 2>&1 | paste -sd'|') || status=$?
	pass_if "deps/$name/${purposes// /+}" "exited $status and said [$got], want $want_status and [$want]" \
		[ "$status $got" = "$want_status $want" ]
}

test_deps() {
	local d12="Debian GNU/Linux 12 (bookworm)" d13="Debian GNU/Linux 13 (trixie)"
	local u22="Ubuntu 22.04.5 LTS" u24="Ubuntu 24.04.3 LTS"
	local f="Fedora Linux 42 (Forty Two)" r="Red Hat Enterprise Linux 9.6 (Plow)" note
	note=$(sed -n 's/^note .*# //p' "$top/scripts/packages.txt")

	expect_deps debian-12 "build run" "deps: $d12, build run: $APT $DEBIAN_BUILD_RUN"
	expect_deps debian-12 "rxe" "deps: $d12 has no package for the rdma_rxe module for the running kernel (rxe)" 1
	expect_deps debian-12 "vm vm-kernel" "deps: $d12, vm vm-kernel: $APT qemu-system-x86 busybox-static cpio xz-utils zstd linux-image-amd64"
	expect_deps debian-12 "fuzz wire bench test" "deps: $d12, fuzz wire bench test: $APT clang libclang-rt-dev tshark mscgen gnuplot-nox util-linux perl strace dnf"
	expect_deps debian-13 "build run" "deps: $d13, build run: $APT $DEBIAN_BUILD_RUN"
	expect_deps debian-13 "fuzz" "deps: $d13, fuzz: $APT clang libclang-rt-dev"

	expect_deps ubuntu-22.04 "build run" "deps: $u22, build run: $APT $DEBIAN_BUILD_RUN"
	expect_deps ubuntu-22.04 "rxe" "deps: $u22, rxe: $APT linux-modules-extra-$KVER"
	expect_deps ubuntu-22.04 "fuzz" "deps: $u22, fuzz: $APT clang libclang-common-14-dev"
	expect_deps ubuntu-22.04 "vm vm-kernel" "deps: $u22, vm vm-kernel: $APT qemu-system-x86 busybox-static cpio xz-utils zstd linux-image-generic"
	expect_deps ubuntu-24.04 "build run" "deps: $u24, build run: $APT $DEBIAN_BUILD_RUN"
	expect_deps ubuntu-24.04 "rxe" "deps: $u24, rxe: $APT linux-modules-extra-$KVER"
	expect_deps ubuntu-24.04 "fuzz" "deps: $u24, fuzz: $APT clang libclang-rt-dev"

	expect_deps fedora-42 "build run" "deps: $f, build run: dnf install -y $RH_BUILD_RUN"
	expect_deps fedora-42 "rxe" "deps: $f, rxe: dnf install -y kernel-modules-$KVER"
	expect_deps fedora-42 "vm vm-kernel fuzz wire bench" "deps: $f, vm vm-kernel fuzz wire bench: dnf install -y qemu-system-x86-core busybox cpio xz zstd kernel-core kernel-modules clang compiler-rt wireshark-cli mscgen gnuplot"
	# RHEL 9 and its rebuilds: CRB and EPEL named, never enabled; Soft-RoCE
	# is in kernel-modules since 9.3; qemu-kvm has no TCG, no VM there.
	expect_deps rhel-9.6 "build run" "deps: $note|deps: $r, build run: dnf install -y $RH_BUILD_RUN"
	expect_deps rhel-9.6 "rxe" "deps: $note|deps: $r, rxe: dnf install -y kernel-modules-$KVER"
	expect_deps rhel-9.6 "vm" "deps: $r has no package for qemu for x86-64, with TCG and 9p (vm)|deps: $note|deps: $r, vm: dnf install -y busybox cpio xz zstd" 1
	expect_deps rhel-9.6 "wire" "deps: $r has no package for mscgen, which draws make wire's picture of the session (wire): going on without it|deps: $note|deps: $r, wire: dnf install -y wireshark-cli"
	expect_deps rocky-9.3 "build run" "deps: $note|deps: Rocky Linux 9.3 (Blue Onyx), build run: dnf install -y $RH_BUILD_RUN"
	expect_deps almalinux-9.6 "build run" "deps: $note|deps: AlmaLinux 9.6 (Sage Margay), build run: dnf install -y $RH_BUILD_RUN"
}

# fails_saying T STATUS OUT GREP_ARG...: T passes if its command refused,
# exiting STATUS (not 0), and grep GREP_ARG... finds why in its output OUT.
fails_saying() {
	local why=''
	if [ "$2" = 0 ]; then
		why="it went on (exit 0): $(tail -n 3 "$3" | paste -sd'|')"
	elif ! grep -q "${@:4}" "$3"; then
		why="exited $2, with no line '${*: -1}': $(tail -n 3 "$3" | paste -sd'|')"
	fi
	pass_unless "$1" "$why"
}

test_unknown_system() {
	local t=deps/unknown_system status=0 out=$work/unknown.out why=''
	OS_RELEASE=$fixtures/arch "$deps" --dry-run build run >"$out" 2>&1 || status=$?
	if [ "$status" != 1 ]; then
		why="exited $status, not 1: $(head -c 300 "$out")"
	elif ! grep -qx 'deps: Arch Linux is not a system this script knows; install by hand:' "$out" ||
		! grep -qx '  build: libibverbs and its headers (rdma-core)' "$out" ||
		! grep -qx "  run: rping, rdma_cm's ping" "$out"; then
		why="no list of needs by purpose: $(tr '\n' '|' <"$out")"
	fi
	pass_unless "$t" "$why"
}

# build/ made by root's make: a user's make names it and its owner, at once.
test_root_build() {
	local t=make/root_owned_build dir status=0 out=$work/root-build.out
	needs_root "$t" "make a build/ that is not the user's" || return 0
	open_copy # a folder nobody can reach
	dir=$open_top/root-build
	mkdir -p "$dir/build"
	cp "$top/Makefile" "$dir/"
	chown nobody "$dir"
	"${NOBODY[@]}" make -C "$dir" build/flags >"$out" 2>&1 || status=$?
	fails_saying "$t" "$status" "$out" -F "build/ is root's, not yours to write"
}

# As an ordinary user, deps.sh installs nothing: it prints one command to
# paste, with sudo, and fails.
test_not_root() {
	local t=deps/not_root status=0 out=$work/user.out as_user=() open=$fixtures deps=$deps why=''
	if [ "$(id -u)" = 0 ]; then
		as_user=("${NOBODY[@]}")
		open_copy
		open=$open_top/os-release deps=$open_top/scripts/deps.sh
	fi
	# Without OS_RELEASE nothing may be missing here: hide a need by
	# asking for a purpose through a system whose every need is missing.
	OS_RELEASE=$open/ubuntu-24.04 "${as_user[@]}" "$deps" fuzz >"$out" 2>&1 || status=$?
	if [ "$status" != 1 ]; then
		why="exited $status, not 1: $(head -c 300 "$out")"
	elif [ "$(grep -c '^  sudo ' "$out")" != 1 ] ||
		! grep -qx "  sudo apt-get update && sudo $APT clang libclang-rt-dev" "$out"; then
		why="not one command with sudo: $(tr '\n' '|' <"$out")"
	fi
	pass_unless "$t" "$why"
}

# doctor_fix NAME SYSTEM WANT [ENV...]: make doctor's fix for "FAIL kernel
# module rdma_rxe" as SYSTEM, in no container unless ENV says, must be WANT.
# This kernel's rdma_rxe, if any, is hidden in a mount namespace (root only).
doctor_fix() {
	local name=$1 system=$2 want=$3 hide=() got check='kernel module rdma_rxe'
	shift 3
	if [ "$(rxe_module)" != none ]; then
		needs_root "doctor/$name" "hide this kernel's rdma_rxe in a mount namespace" || return 0
		# This kernel's version, from here: ENV may stand uname in.
		hide=(unshare --mount sh -c 'mount -t tmpfs none /sys/module &&
			mount -t tmpfs none "/lib/modules/$1" && shift && exec "$@"' sh "$(uname -r)")
	fi
	env container= OS_RELEASE="$fixtures/$system" "$@" "${hide[@]}" "$doctor" >"$work/$name.out" 2>&1 || true
	got=$(grep -A1 "^FAIL $check: " "$work/$name.out" | sed -n 's/^     fix: //p' | head -n 1) || true
	pass_if "doctor/$name" "fix for '$check' is [$got], want [$want]" [ "$got" = "$want" ]
}

test_doctor_fixes() {
	local apart='(rdma_rxe is packaged apart from the kernel here)'
	doctor_fix ubuntu ubuntu-24.04 "sudo $APT linux-modules-extra-$KVER $apart"
	doctor_fix fedora fedora-42 "sudo dnf install -y kernel-modules-$KVER $apart"
	doctor_fix debian debian-12 "make demo and make test run everything in a VM that has Soft-RoCE; scripts/soft-roce.sh CMD runs CMD there"
	# Debian's cloud kernel (see module_fix in scripts/doctor.sh): uname -r is stood in for.
	stand_in "$work/cloud/uname" '#!/bin/sh\n[ "$1" != -r ] || { echo 6.1.0-56-cloud-amd64; exit 0; }\nexec %q "$@"\n' "$(command -v uname)"
	doctor_fix debian_cloud debian-12 "this is Debian's cloud kernel, built without rdma_rxe, which Debian's standard kernel has: sudo $APT linux-image-amd64, then boot it, for host mode; or $(sed -n 's/^VM_HINT="\(.*\)"$/\1/p' "$doctor")" \
		PATH="$work/cloud:$PATH"
	doctor_fix container ubuntu-24.04 "in a podman container the kernel is the host's: load rdma_rxe there (sudo modprobe rdma_rxe), then on the host: sudo rdma link add rxe0 type rxe netdev IFACE; start the container with --network host --device /dev/infiniband; or let make demo and make test use a VM" \
		container=podman
}

# A container's locked-memory limit is set where it starts, not in
# limits.conf: the doctor says so to an ordinary user with too low a limit.
test_doctor_container_memlock() {
	local t=doctor/container_memlock line
	needs_root "$t" "run as another user with a low ulimit -l (prlimit, setpriv)" || return 0
	open_copy
	container=docker prlimit --memlock=$((1024 * 1024)) "${NOBODY[@]}" \
		"$open_top/scripts/doctor.sh" >"$work/memlock.out" 2>&1 || true
	line=$(grep -A1 '^FAIL memlock: ' "$work/memlock.out" | sed -n 's/^     fix: //p') || true
	pass_if "$t" "fix for memlock is [$line]" \
		[ "$line" = "a docker container's limit is set where it starts: --ulimit memlock=-1 (docker, podman run), or --cap-add IPC_LOCK" ]
}

# A development package missing (pkg-config finds neither library in an
# empty directory): make names it rather than failing to link.
test_make_names_the_package() {
	local t=make/names_missing_package status=0 out=$work/make.out empty=$work/pc want
	want=$(read_os_release; echo "$(packages_of libibverbs) $(packages_of librdmacm)" |
		tr ' ' '\n' | awk '!seen[$0]++' | paste -sd' ')
	mkdir -p "$empty"
	PKG_CONFIG_LIBDIR=$empty PKG_CONFIG_PATH='' make -s -C "$top" check-build >"$out" 2>&1 || status=$?
	fails_saying "$t" "$status" "$out" "missing for build: libibverbs librdmacm; install with: sudo .* $want\$"
}

# A clone's path with a space, which make split (make bench handed bench.sh
# two arguments): make refuses it at once, naming it, whatever the target.
test_space_in_path() {
	local t=make/space_in_path dir="$work/with space" status=0 out=$work/space.out
	mkdir -p "$dir"
	cp "$top/Makefile" "$dir/"
	make -n -C "$dir" bench >"$out" 2>&1 || status=$?
	fails_saying "$t" "$status" "$out" -F "'$dir' has a space in it"
}

# flags_copy's makes take none of this make's variables, which it passes down.
plain=(env -u MAKEFLAGS -u MAKELEVEL -u SANITIZE) ours=() other=(SANITIZE=1)
[ -z "${SANITIZE:-}" ] || { ours=(SANITIZE=1) other=(); }

# make test and make test SANITIZE=1 at once in flags_copy's checkout: the
# second must not relink the programs under the first, but wait for it.
test_other_flags_wait() {
	local t=make/other_flags_wait d=$work/flags-co first second status=0 why=''
	flags_copy "$d"
	rm -f "$d/started" "$d/release"
	"${plain[@]}" make -C "$d" test "${ours[@]}" >"$d/first.out" 2>&1 &
	first=$!
	wait_until "$first" 120 test -e "$d/started" || why="the first make test did not start: $(tail -n 3 "$d/first.out" | paste -sd'|'); "
	if [ -z "$why" ]; then
		"${plain[@]}" timeout 300 make -C "$d" test "${other[@]}" >"$d/second.out" 2>&1 &
		second=$!
		wait_until "$second" 120 grep -q 'with other flags' "$d/second.out" || true
	fi
	touch "$d/release"
	wait "$first" || why+="the first make test failed: $(tail -n 2 "$d/first.out" | paste -sd'|'); "
	[ -n "$why" ] || wait "$second" || status=$?
	if [ -z "$why" ] && [ "$status" != 0 ]; then
		why="the second exited $status: $(tail -n 2 "$d/second.out" | paste -sd'|')"
	elif [ -z "$why" ] && ! grep -q 'with-build.sh: another make in this checkout uses programs built with other flags' "$d/second.out"; then
		why="the second did not say that it waits"
	fi
	pass_unless "$t" "$why"
}

# flags_copy DIR: DIR a copy of this checkout, built as this one is (once:
# two tests use it), whose tests/run.sh runs until DIR/release is there, and
# 2 s more, in which a make that did not wait would relink under it.
flags_copy() {
	[ ! -e "$1/Makefile" ] || return 0
	mkdir -p "$1/build"
	tar -C "$top" --exclude=./.git --exclude=./build -cf - . | tar -C "$1" -xf -
	cp -a "$top"/build/{flags,fuzz_ctrl_msg} "$1/build/" 2>/dev/null || true
	cat >"$1/tests/run.sh" <<'EOF'
#!/bin/sh
before=$(cat build/flags rdma_pool_client | md5sum)
touch started
timeout 120 sh -c 'until [ -e release ]; do sleep 0.1; done'
sleep 2
[ "$(cat build/flags rdma_pool_client | md5sum)" = "$before" ] || { echo "relinked under it"; exit 1; }
EOF
}

# A make waiting for the lock while one of other flags holds it whole (to rebuild) must wait on for
# the whole lock, not relink, once that one runs its programs under a shared lock.  A lock holder
# plays that make, leaving flags not ours in build/flags (300 s at most, should this stage stop).
test_flags_changed_while_waiting() {
	local t=make/flags_changed_while_waiting d=$work/flags-co holder make why=''
	flags_copy "$d"
	touch "$d/release"
	"${plain[@]}" make -s -C "$d" build/flags "${ours[@]}" >"$d/flags.out" 2>&1 ||
		{ fail "$t" "make build/flags failed: $(tail -n 2 "$d/flags.out" | paste -sd'|')"; return; }
	rm -f "$d/locked" "$d/go"
	timeout 300 bash -c 'exec 9>>"$1/build/lock" && flock -x 9 && touch "$1/locked" || exit
		while [ ! -e "$1/go" ]; do sleep 0.1; done
		echo other-flags >"$1/build/flags" && flock -s 9 && sleep 8
		[ "$(cat "$1/build/flags")" = other-flags ]' _ "$d" &
	holder=$!
	wait_until "$holder" 10 test -e "$d/locked" || true
	"${plain[@]}" timeout 300 make -C "$d" test "${ours[@]}" >"$d/third.out" 2>&1 &
	make=$!
	wait_until "$make" 120 grep -qs 'waiting for it to end' "$d/third.out" ||
		why="the make did not wait for the lock: $(tail -n 3 "$d/third.out" | paste -sd'|'); "
	touch "$d/go"
	wait "$holder" || why+="the make relinked while the other ran its programs; "
	wait "$make" || why+="the make failed: $(tail -n 2 "$d/third.out" | paste -sd'|'); "
	pass_unless "$t" "$why"
}

# No network, as on a fresh machine (no archive lists, nothing installed,
# so deps.sh build has two packages to install): deps.sh and vm-kernel.sh
# each say in one line that the archive cannot be reached, and what to do.
test_no_network() {
	local out=$work/nonet.out status=0
	[[ $(id -u) = 0 && -d /var/lib/dpkg && -n $(type -P apt-get) && -n $(type -P dnf) ]] ||
		{ skip no_network "needs root, apt and dnf, to run them with no network"; return; }
	PKG_CONFIG_LIBDIR=/nonexistent unshare --mount --net sh -c '
		mount -t tmpfs none /var/lib/apt/lists && mkdir /var/lib/apt/lists/partial &&
		mount -t tmpfs none /var/lib/dpkg && mkdir /var/lib/dpkg/info /var/lib/dpkg/updates &&
		touch /var/lib/dpkg/status && exec "$1" build' sh "$deps" >"$out" 2>&1 || status=$?
	fails_saying no_network/deps "$status" "$out" '^deps: cannot install .*libibverbs-dev.*: apt-get update could not reach the package archive (.*); give this machine the network'
	status=0
	# dnf's, as on Fedora, with a dnf.conf that would skip the repository.
	printf '[main]\nskip_if_unavailable=True\n[fedora]\nbaseurl=https://dl.fedoraproject.org/pub/\n' >"$work/dnf.conf"
	PKG_CONFIG_LIBDIR=/nonexistent unshare --mount --net sh -c 'mount --bind "$1" /etc/os-release &&
		mount --bind "$2" /etc/dnf/dnf.conf && exec "$3" build' sh "$fixtures/fedora-42" "$work/dnf.conf" \
		"$deps" >"$out" 2>&1 || status=$?
	fails_saying no_network/dnf "$status" "$out" -x "deps: cannot install rdma-core-devel: dnf could not reach the package archive (Failed to download metadata for repo 'fedora': .*); give this machine the network, or install them by hand"
	status=0
	KERNEL_CACHE=$work/nonet-kernels unshare --net "$top/scripts/vm-kernel.sh" >"$out" 2>&1 || status=$?
	fails_saying no_network/vm_kernel "$status" "$out" "^vm-kernel: cannot reach Debian's archive (.*): give this machine the network"
}

# A KERNEL_CACHE with a space cannot reach the VM's kernel command line:
# vm-run.sh must say so at once, before it installs or fetches anything.
test_space_in_kernel_cache() {
	local t=vm/space_in_kernel_cache cache="$work/kernels here" status=0 out=$work/cache.out
	KERNEL_CACHE=$cache VM_KERNEL='' timeout 20 "$top/scripts/vm-run.sh" true >"$out" 2>&1 || status=$?
	[ "$status" != 124 ] || { fail "$t" "vm-run.sh still ran after 20 s: $(tail -n 2 "$out" | paste -sd' ')"; return; }
	[ ! -e "$cache" ] || { fail "$t" "it made '$cache' first"; return; }
	fails_saying "$t" "$status" "$out" -F "KERNEL_CACHE, $cache, has spaces"
}

# vm-run.sh names to a user every package a VM needs (here all, on Debian 12): kmod among
# them, whose modprobe loads rdma_rxe in the guest (it named deps.sh vm's alone).
test_vm_names_kmod() {
	local status=0 out=$work/kmod.out as_user=()
	[ "$(id -u)" != 0 ] || as_user=("${NOBODY[@]}")
	open_copy
	OS_RELEASE=$open_top/os-release/debian-12 "${as_user[@]}" "$open_top/scripts/vm-run.sh" true >"$out" 2>&1 || status=$?
	fails_saying vm/names_missing_kmod "$status" "$out" "sudo apt-get install .* kmod"
}

# vm-run.sh stopped while it packs a new initramfs for the VM (the kernel's
# folder reached through a link): its half-made folder in build/vm goes too.
test_vm_stopped_while_packing() {
	local t=vm/stopped_while_packing bin=$work/slow-cpio cache ver run left why=''
	cache=$(bash -c '. "$1/scripts/vm-lib.sh" && echo "$KERNEL_CACHE"' _ "$top")
	ver=$("$top/scripts/vm-kernel.sh" 2>"$work/packing.err") ||
		{ fail "$t" "no kernel for the VMs: $(tail -n 2 "$work/packing.err" | paste -sd' ')"; return; }
	stand_in "$bin/cpio" '#!/bin/sh\ntouch "%s/packing"\nexec sleep 30\n' "$bin"
	ln -s "$cache" "$work/kernels-link"
	KERNEL_CACHE=$work/kernels-link VM_KERNEL=$ver PATH=$bin:$PATH \
		as_job "$top/scripts/vm-run.sh" true >"$work/packing.err" 2>&1
	run=$!
	if ! wait_until "$run" 60 test -e "$bin/packing"; then
		why="it never packed: $(tail -n 2 "$work/packing.err" | paste -sd' ')"
		signal_job "$run" group TERM 10 || true # still running after 60 s
	elif ! signal_job "$run" group TERM 10; then
		why="a process of vm-run.sh's group still ran 10 s after SIGTERM"
	elif left=$(find "$top/build/vm" -maxdepth 1 -name 'initramfs.*' -newer "$bin/cpio") && [ -n "$left" ]; then
		why="it left $left"
	fi
	pass_unless "$t" "$why"
}

# The static-busybox probe (the VM's init runs busybox before any shared
# library can be reached): a program with no loader passes, static-pie too
# (where ldd exits 0), and one with a loader fails, as does one for aarch64.
test_static_probe() {
	local t=static_busybox_probe why='' f
	echo 'int main(void) { return 0; }' >"$work/hello.c"
	{ cc -o "$work/dynamic" "$work/hello.c" && cc -static -o "$work/static" "$work/hello.c" &&
		cc -static-pie -o "$work/static-pie" "$work/hello.c"; } ||
		{ fail "$t" "cannot build the three test programs with cc"; return; }
	for f in static static-pie; do static_elf "$work/$f" || why+="$f taken for dynamic; "; done
	! static_elf "$work/dynamic" || why+="dynamic taken for static; "
	cp "$work/static" "$work/aarch64" # e_machine 183, EM_AARCH64 (elf(5))
	printf '\267' | dd of="$work/aarch64" bs=1 seek=18 conv=notrunc 2>/dev/null
	! static_elf "$work/aarch64" || why+="an aarch64 program taken for x86-64; "
	! static_elf "$top/tests/os-release/debian-12" || why+="a text file taken for a program; "
	pass_unless "$t" "$why"
}

# table_meaning TABLE: "checked NEED" for each need whose probe finds a file
# here, and a line if TABLE's package for this system does not bring it
# (have it, or depend on one that has it: gcc on gcc-12, which has cc).
table_meaning() (
	PACKAGES_TABLE=$1
	read_os_release
	local need probe f r owner pkgs brought p q
	while read -r _ need probe _; do
		case $probe in
		cmd:*) f=$(command -v "${probe#cmd:}") || continue ;;
		pc:*) f=$(pkg-config --variable=pcfiledir "${probe#pc:}" 2>/dev/null)/${probe#pc:}.pc ;;
		file:*) f=$(for p in ${probe//,/ }; do compgen -G "${p#file:}"; done | sed -n 1p) ;;
		*) continue ;;
		esac
		[[ -n $f && -e $f ]] || continue
		# dpkg knows each file by the path its package ships, which
		# may be a link's, and /bin/x rather than /usr/bin/x.
		owner='' r=$(readlink -f "$f")
		for q in "$r" "${r#/usr}" "$f" "${f#/usr}"; do
			owner=$(dpkg-query -S "$q" 2>/dev/null) && break
		done
		owner=${owner%%:*}   # "PACKAGE: PATH", the first if several
		pkgs=$(packages_of "$need")
		# shellcheck disable=SC2086 # package names are words
		brought=$(apt-cache depends --recurse --installed --no-recommends \
			--no-suggests --no-conflicts --no-breaks --no-replaces \
			--no-enhances $pkgs 2>/dev/null | grep -v '^ ')
		echo "checked $need"
		if [ -z "$owner" ]; then
			echo "$need: no package here has $f"
		elif ! grep -qxF "$owner" <<<"$brought"; then
			echo "$need: the table says $pkgs, but $f is $owner's"
		fi
	done < <(grep -v '^#' "$PACKAGES_TABLE")
)

# The table says what each package brings; on this system, dpkg says what
# it has.  The build and run needs are always installed by make test (13
# of them): each must be checked.  A table with one wrong package is caught.
test_table_meaning() {
	local t=packages/bring_what_they_say out need why
	type -P dpkg-query apt-cache >/dev/null ||
		{ skip "$t" "asks dpkg which package has each file, and this system has none"; return; }
	out=$(table_meaning "$top/scripts/packages.txt")
	why=$(grep -v '^checked ' <<<"$out" | paste -sd';') || true
	[ -n "$out" ] || why="no need checked: no scripts/packages.txt?"
	while read -r need; do
		grep -qxF "checked $need" <<<"$out" || why+="${why:+;}$need not checked: its probe finds nothing here"
	done < <(awk '$1 == "build" || $1 == "run" { print $2 }' "$top/scripts/packages.txt")
	pass_unless "$t" "$why"
	sed 's/debian=rdmacm-utils/debian=perftest/' "$top/scripts/packages.txt" >"$work/wrong.txt"
	out=$(table_meaning "$work/wrong.txt")
	pass_if "$t/catches_a_wrong_package" "rping given perftest's package was not caught: $(grep -v '^checked ' <<<"$out" | paste -sd';')" \
		grep -qx "rping: the table says perftest, but $(command -v rping) is rdmacm-utils's" <<<"$out"
}

# probe_finds PROBE PATH: true if the table's PROBE looks for a file such as
# PATH (a package's); a special probe looks for the file that brings what it
# tests (static-busybox: a static busybox, as the packaging file says).
probe_finds() {
	local glob
	case $1 in
	cmd:*) [[ $2 == */bin/"${1#cmd:}" || $2 == */sbin/"${1#cmd:}" ]] ;;
	pc:*) [[ $2 == */pkgconfig/"${1#pc:}".pc ]] ;;
	file:*)
		for glob in ${1//,/ }; do
			# shellcheck disable=SC2053 # the glob is a pattern
			[[ $2 == ${glob#file:} ]] && return 0
		done
		return 1
		;;
	rdma_rxe) [[ $2 == */rdma_rxe.ko* ]] ;;
	vm-kernel) [[ $2 == */vmlinuz* ]] ;;
	static-busybox) [[ $2 == */busybox ]] ;;
	libfuzzer) [[ $2 == */libclang_rt.fuzzer*.a ]] ;;
	*) return 1 ;;
	esac
}

# packaging_meaning TABLE SYSTEM PACKAGING: a line for each need of TABLE
# whose packages for SYSTEM ship no file its probe looks for, as PACKAGING
# says ("PACKAGE PATH" lines; package "!" is none, as is the table's "?").
packaging_meaning() (
	PACKAGES_TABLE=$1 OS_RELEASE=$fixtures/$2
	read_os_release
	local need probe pkgs pkg path found bringers shipped
	shipped=$(sed 's/#.*//; s/\$KVER/'"$KVER"'/g' "$3" 2>/dev/null | awk 'NF == 2')
	while read -r _ need probe _; do
		pkgs=$(packages_of "$need")
		[[ $probe != - && $pkgs != - ]] || continue # a note; nothing to install
		pkgs=${pkgs/#\?/!} # none either way
		found='' bringers=''
		while read -r pkg path; do
			probe_finds "$probe" "$path" || continue
			bringers+=" $pkg"
			[[ " $pkgs " != *" $pkg "* ]] || found=yes
		done <<<"$shipped"
		[ -n "$found" ] && continue
		echo "$need: the table says ${pkgs:-nothing} for $2, and $3 says${bringers:- nothing about it}"
	done < <(grep -v '^#' "$PACKAGES_TABLE")
)

# Every other system's choices, held to what its packaging says (tests/packaging/, read from
# Ubuntu's, Fedora's and RHEL's own): each need of the table, for each system the table names.
test_packaging() {
	local sys packaging out
	for sys in ubuntu-22.04 ubuntu-24.04 fedora-42 rhel-9.6 rocky-9.3 almalinux-9.6; do
		packaging=$top/tests/packaging/$sys
		# RHEL's rebuilds ship what RHEL does, under the same names.
		case $sys in rhel-9* | rocky-9* | almalinux-9*) packaging=$top/tests/packaging/rhel-9 ;; esac
		out=$(packaging_meaning "$top/scripts/packages.txt" "$sys" "$packaging")
		[ -r "$packaging" ] && grep -q '^[a-z]' "$top/scripts/packages.txt" ||
			out="no $packaging, or no row in scripts/packages.txt, to hold to each other"
		pass_unless "packages/$sys/bring_what_they_say" "$(paste -sd';' <<<"$out")"
	done
	sed 's/fedora=librdmacm-utils/fedora=perftest/' "$top/scripts/packages.txt" >"$work/wrong-fedora.txt"
	out=$(packaging_meaning "$work/wrong-fedora.txt" fedora-42 "$top/tests/packaging/fedora-42")
	pass_if packages/fedora-42/catches_a_wrong_package "rping given perftest on Fedora was not caught: $(paste -sd';' <<<"$out")" \
		grep -qx "rping: the table says perftest for fedora-42, and $top/tests/packaging/fedora-42 says librdmacm-utils" <<<"$out"
}

# A kernel fetch for the VMs that fails half way (a package that will not
# unpack, from a stand-in apt-get and apt-cache, so nothing is downloaded)
# says what failed, exits non-zero and leaves no staging folder behind.
test_vm_kernel_failed_fetch() {
	local t=vm_kernel/failed_fetch_leaves_nothing bin=$work/fake-apt cache=$work/kernels status=0 left
	stand_in "$bin/apt-cache" '#!/bin/sh\necho "Depends: linux-image-0.0-fake"\n'
	stand_in "$bin/apt-get" '#!/bin/sh\ncase " $* " in *" download "*) echo not-a-deb >linux-image-0.0-fake_1_amd64.deb ;; esac\n'
	KERNEL_CACHE=$cache PATH=$bin:$PATH "$top/scripts/vm-kernel.sh" >/dev/null 2>"$work/vm-kernel.err" || status=$?
	left=$(find "$cache" -mindepth 1 -maxdepth 1 -name 'fetch.*' 2>/dev/null) || true
	[ -z "$left" ] || { fail "$t" "it left $left behind"; return; }
	fails_saying "$t" "$status" "$work/vm-kernel.err" 'cannot unpack linux-image-0.0-fake'
}

# Two vm-kernel.sh at once (two make test) take turns: apt-get (here one
# that takes 2 s and notes, by mkdir, if another runs) never runs in both.
test_vm_kernel_two_at_once() {
	local t=vm_kernel/two_at_once_take_turns bin=$work/slow-apt cache=$work/kernels2 i pids=() why=''
	stand_in "$bin/apt-get" '#!/bin/sh\nb=%q\nmkdir "$b/busy" 2>/dev/null || echo overlap >>"$b/overlaps"\nsleep 2; rmdir "$b/busy"\n' "$bin"
	stand_in "$bin/apt-cache" '#!/bin/sh\necho "Depends: linux-image-0.0-fake"\n'
	for i in 1 2; do
		KERNEL_CACHE=$cache PATH=$bin:$PATH "$top/scripts/vm-kernel.sh" >/dev/null 2>"$work/two$i.err" &
		pids+=($!)
	done
	wait "${pids[@]}" || true
	if [ -e "$bin/overlaps" ]; then
		why="two apt-get ran at once on one cache"
	elif ! grep -q 'cannot unpack' "$work/two1.err" || ! grep -q 'cannot unpack' "$work/two2.err"; then
		why="not both went on to the download: $(cat "$work"/two[12].err | paste -sd'|')"
	fi
	pass_unless "$t" "$why"
}

# A machine whose kernel has no rdma_rxe, as Debian's cloud kernel: the VM boots a kernel fetched
# for it alone, and vm-run.sh installs nothing, above all no kernel package, which would change what
# this machine boots next.
test_vm_kernel_no_rxe_in_boot() {
	local t=vm_kernel/no_rxe_in_boot_fetches_installs_nothing ver fetched
	needs_root "$t" "hide /boot in a mount namespace" ||
		{ skip vm_kernel/fetched_version_in_boot_too "needs root, as above"; return; }
	# A kernel whose modules are here; else /boot is empty, as in a
	# container (which may have no /lib/modules at all: find fails).
	ver=$(find /lib/modules -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null |
		sort -V | tail -n 1) || true
	no_rxe_in_boot "$t" "$ver"
	# Debian 12 with bookworm-backports' kernel: /boot's is the very version
	# fetched for the VMs, and the VM boots the fetched copy, with rdma_rxe.
	t=vm_kernel/fetched_version_in_boot_too
	fetched=$("$top/scripts/vm-kernel.sh" 2>"$work/fetch.err") ||
		{ fail "$t" "vm-kernel.sh failed: $(tail -n 2 "$work/fetch.err" | paste -sd' ')"; return; }
	no_rxe_in_boot "$t" "$fetched"
}

# no_rxe_in_boot T VERSION: what every VM needs installed first (deps.sh run vm), vm-run.sh uname -r
# with kernel VERSION alone in /boot, its modules without rdma_rxe (a mount namespace: root only),
# and an apt-get that refuses to install and passes on the rest (update, download).
no_rxe_in_boot() {
	local t=$1 ver=$2 bin=$work/refuse-install apt status=0 booted from got why=''
	apt=$(command -v apt-get) || apt=/usr/bin/apt-get
	"$top/scripts/deps.sh" run vm >"$work/deps-vm" 2>&1 || { fail "$t" "deps.sh run vm: $(tail -n 1 "$work/deps-vm")"; return; }
	rm -f "$work/installs"
	stand_in "$bin/apt-get" '#!/bin/sh\nfor a; do [ "$a" != install ] || { echo "apt-get $*" >>%q; exit 1; }; done\nexec %q "$@"\n' \
		"$work/installs" "$apt"
	unshare --mount sh -c 'ver=$1; shift
		mkdir -p /lib/modules && mount -t tmpfs none /boot &&
			mount -t tmpfs none /lib/modules || exit
		[ -z "$ver" ] || { : >"/boot/vmlinuz-$ver" && mkdir "/lib/modules/$ver" &&
			: >"/lib/modules/$ver/modules.dep"; } || exit
		exec "$@"' sh "$ver" \
		env PATH="$bin:$PATH" VM_KERNEL= "$top/scripts/vm-run.sh" uname -r \
		>"$work/no-rxe.out" 2>"$work/no-rxe.err" || status=$?
	booted=$(sed -n 's/^vm-run: kernel \(.*\), from .*/\1/p' "$work/no-rxe.err")
	from=$(sed -n 's/^vm-run: kernel .*, from \(.*\)/\1/p' "$work/no-rxe.err")
	got=$(tail -n 1 "$work/no-rxe.out")
	if [ -s "$work/installs" ]; then
		why="it installed a package: $(head -n 1 "$work/installs")"
	elif [ "$status" != 0 ]; then
		why="vm-run.sh exited $status: $(grep -m 1 -E 'Kernel panic|BUG:|Oops' "$work/no-rxe.err" || true) $(tail -n 2 "$work/no-rxe.err" | paste -sd' ')"
	elif [ -z "$booted" ] || [ "$got" != "$booted" ] || [ "$from" = /boot ]; then
		why="the VM ran kernel '$got', and vm-run.sh named '$booted' from '$from', not a fetched kernel"
	elif [ "$booted" != "$ver" ] && [ -n "$ver" ] &&
		! grep -qF "kernel $ver cannot boot the VM: no rdma_rxe module" "$work/no-rxe.err"; then
		why="no word on why $ver cannot boot the VM: $(head -n 3 "$work/no-rxe.err" | paste -sd' ')"
	fi
	pass_unless "$t" "$why"
}

# stopped_by SIG group|alone T SCRIPT CHILD BODY [ENV...]: test T, SCRIPT (a copy) with ENV stopped
# by SIG (to it alone, or its group: Ctrl-C) while CHILD (sh BODY, a printf format, %s its folder)
# sleeps: SCRIPT ends by SIG within seconds, and so does the sleep, and TMPDIR is left empty.
stopped_by() {
	local sig=$1 target=$2 t=$3 d=$work/${3//\//-} job why=''
	mkdir -p "$d/tmp" "$d/scripts" "$d/${4%/*}"
	cp "$top"/scripts/*-lib.sh "$d/scripts/" && cp "$top/$4" "$d/$4"
	stand_in "$d/$5" "#!/bin/sh\n$6" "$d"
	as_job env --default-signal="$sig" TMPDIR="$d/tmp" "${@:7}" "$d/$4" >"$d/log" 2>&1
	job=$!
	wait_until "$job" 10 test -s "$d/sleep.pid" || why="$5 did not start: $(head -c 300 "$d/log")"
	signal_job "$job" "$target" "$sig" 10 || why=${why:-"$4 or its child still ran 10 s after SIG$sig"}
	if [ -z "$why" ] && [ -n "$(alive "$(cat "$d/sleep.pid")")" ]; then
		why="$5 still runs"
	elif [ -z "$why" ] && [ "$job_status" != $((128 + $(kill -l "$sig"))) ]; then
		why="$4 exited $job_status, not by SIG$sig"
	elif [ -z "$why" ] && [ -n "$(ls -A "$d/tmp")" ]; then
		why="left in its TMPDIR: $(ls "$d/tmp")"
	fi
	[ ! -s "$d/sleep.pid" ] || kill "$(cat "$d/sleep.pid")" 2>/dev/null || true
	pass_unless "$t" "$why"
}

# A failure whose reason holds a "#" (a program's output may) is a failure
# still (see report in tests/report-lib.sh).
test_reason_with_hash() {
	stand_in "$work/hash.t" '#!/usr/bin/env bash\n. "%s"\necho 1..1\nfail x "rpc#todo"\n' \
		"$top/tests/report-lib.sh"
	local out status=0
	out=$(prove --exec '' "$work/hash.t" 2>&1) || status=$?
	pass_if report/reason_with_hash "prove exited $status, not 1 ending 'Result: FAIL': $(paste -sd'|' <<<"$out")" \
		[ "$status $(tail -n 1 <<<"$out")" = "1 Result: FAIL" ]
}

report_plan
test_reason_with_hash
# run.sh by SIGTERM, SIGHUP (to it alone: make passes SIGTERM to its child only) or Ctrl-C while
# its stage's own sleep runs; demo.sh run alone by Ctrl-C while its server ignores SIGINT as bash
# started it (a real server blocks it within milliseconds; the stand-in never does).
stage='sleep 600 &\necho $! >"%s/sleep.pid"\nwait\n'
stopped_by TERM alone run/sigterm_stops_the_stage tests/run.sh tests/unit_common "$stage"
stopped_by HUP alone run/sighup_stops_the_stage tests/run.sh tests/unit_common "$stage"
stopped_by INT group run/ctrl_c_stops_the_stage tests/run.sh tests/unit_common "$stage"
stopped_by INT group demo/stopped_before_its_server_handles_signals scripts/demo.sh \
	rdma_srq_pool_server_ev 'echo $$ >"%s/sleep.pid"\nexec sleep 600\n' RDMA_ADDR=x RDMA_DEV=x
test_deps
test_table_meaning
test_packaging
test_vm_kernel_no_rxe_in_boot
test_vm_kernel_failed_fetch
test_vm_kernel_two_at_once
test_static_probe
test_make_names_the_package
test_space_in_path
test_other_flags_wait
test_flags_changed_while_waiting
test_space_in_kernel_cache
test_vm_names_kmod
test_vm_stopped_while_packing
test_no_network
test_root_build
test_unknown_system
test_not_root
test_doctor_fixes
test_doctor_container_memlock
report_end
