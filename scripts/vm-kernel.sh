#!/usr/bin/env bash
# vm-kernel.sh [SUITE]: fetch the newest Debian kernel of SUITE (default bookworm-backports, where
# Debian 12 gets Debian 13's kernel) for the VMs alone, and print its version; then
# VM_KERNEL=that-version boots it (scripts/vm-run.sh, vm-pair.sh, make test).
#
# Nothing is installed and this system's package sources stay as they are: apt reads a list of its
# own, kept with the unpacked kernel in the VMs' cache ($KERNEL_CACHE,
# ~/.cache/rdma-pool-doorbell/kernels).  A second call with the newest version already there only
# checks.  The kernels differ where the programs must cope: rxe on Debian 13's 6.12 raises
# IBV_EVENT_QP_LAST_WQE_REACHED, which Debian 12's 6.1 never does.
#   MIRROR  the Debian mirror (default: the one this system's sources use)
set -euo pipefail

vm_prog=vm-kernel
. "$(dirname "${BASH_SOURCE[0]}")/vm-lib.sh"

# The Debian mirror this system already uses, else Debian's own.
mirror() {
	local uri
	uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
		/etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "URIs:" { print $2 } $1 == "deb" { print ($2 ~ /^\[/ ? $3 : $2) }' |
		grep -E '/debian/?$' | head -n 1) || true
	echo "${MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

# A staging folder of the cache takes the kernel's place only once whole: a
# fetch that fails or is cut short removes it (the trap is set first).
stage=''
trap '[ -z "$stage" ] || rm -rf "$stage"' EXIT

main() {
	local suite=${1:-bookworm-backports} apt dir opts pkg ver warned
	{ command -v apt-get && command -v dpkg; } >/dev/null ||
		die "this fetches Debian's kernels with apt-get and dpkg; on" \
			"this system, set VM_KERNEL to a kernel in /boot instead"
	[[ $suite =~ ^[a-z-]+$ ]] || die "bad suite '$suite'"
	# A bare system may lack kmod: deps.sh installs it as root, or names it.
	command -v depmod >/dev/null || "$(dirname "$0")/deps.sh" run >&2 ||
		die "depmod (kmod) is needed to index the kernel's modules"
	apt=$KERNEL_CACHE/apt-$suite
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
	# Two runs at once (two make test) share the lists and the kernel's
	# folder: one fetches while the other waits, then finds the kernel.
	exec 8>"$apt/lock"
	flock 8
	# Debian's signatures, checked with Debian's keys alone: apt on
	# another system (Ubuntu) trusts its own archive's keys, not these.
	[ -r "$DEBIAN_KEYRING" ] || die "this fetches from Debian's archive," \
		"whose keys ($DEBIAN_KEYRING) this system lacks: install the" \
		"package debian-archive-keyring, or set VM_KERNEL to a kernel in /boot"
	echo "deb [signed-by=$DEBIAN_KEYRING] $(mirror) $suite main" >"$apt/sources.list"
	: >"$apt/status"
	# Only our list, and no installed packages: what the suite holds.
	opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status"
		-o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
	# Unreachable, the archive gets a warning and exit status 0: kept,
	# to name the cause if no list was fetched, now or before.
	warned=$(apt-get -qq "${opts[@]}" update 2>&1) || die "apt-get update of $suite from $(mirror) failed: $warned"
	warned=$(grep -m 1 '^W: ' <<<"$warned") || true
	# linux-image-amd64 depends on the suite's newest kernel package.
	pkg=$(apt-cache "${opts[@]}" show linux-image-amd64 2>/dev/null |
		sed -n 's/^Depends: \(linux-image-[0-9][^ ,]*\).*/\1/p' | head -n 1) || true
	[ -n "$pkg" ] || [ -z "$warned" ] || die "cannot reach Debian's archive" \
		"(${warned#W: }): give this machine the network, or set VM_KERNEL" \
		"to a kernel in /boot"
	[ -n "$pkg" ] || die "$suite has no linux-image-amd64"
	ver=${pkg#linux-image-}
	dir=$KERNEL_CACHE/$ver
	if [ ! -e "$dir/boot/vmlinuz-$ver" ]; then
		say "fetching $pkg from $suite"
		stage=$(mktemp -d "$KERNEL_CACHE/fetch.XXXXXX")
		(cd "$stage" && apt-get -qq "${opts[@]}" download "$pkg") || die "apt-get download $pkg failed"
		dpkg -x "$stage"/*.deb "$stage/root" || die "cannot unpack $pkg"
		depmod -b "$stage/root" "$ver" || die "cannot index the modules of $pkg (depmod)"
		rm -rf "$dir"
		mv "$stage/root" "$dir"
	fi
	kernel_usable "$ver" || die "kernel $ver cannot boot the VM: $why_not"
	echo "$ver"
}

main "$@"
