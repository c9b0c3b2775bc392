#!/usr/bin/env bash
# deps.sh [--dry-run | --check] [PURPOSE...]: install what PURPOSE needs
# and this machine lacks, with this system's own package manager and names
# (scripts/packages.txt).  Quick and silent when nothing is missing.
#
# Purposes, each installed only by the path that needs it:
#   build      compile the programs (make)          [the default, with run]
#   run        run them on an RDMA device, and the tools to check one
#   rxe        the rdma_rxe module for this kernel (Ubuntu keeps it in
#              linux-modules-extra-$(uname -r)); soft-roce.sh asks for it
#   vm         boot a VM where this kernel has no rdma_rxe (soft-roce.sh)
#   vm-kernel  a kernel for that VM to boot, if /boot has none (on
#              Debian the VM fetches one for itself instead, vm-lib.sh)
#   fuzz       libFuzzer (make test, make fuzz)
#   wire       tshark, and mscgen where the system has it (make wire, make test)
#   bench      gnuplot (make bench, make test)
#   test       setpriv, prlimit, unshare, prove, strace; dnf on Debian and Ubuntu (make test)
#
# As root it installs what is missing (apt-get or dnf; it never adds package sources, and never a
# kernel unless asked for vm-kernel); as anyone else it prints the one command to paste, with sudo,
# and fails.  On a system it does not know, it lists what is needed, by purpose, and fails.
#   --dry-run  print the command it would run, run nothing
#   --check    say what is missing and how to install it; never install
# OS_RELEASE=FILE reads FILE instead of /etc/os-release, to see what would
# be done on that system; every need then counts as missing (with --dry-run
# nothing runs).  Exits 0 when nothing is missing (or was installed).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/rdma-lib.sh"
. "$here/system-lib.sh"
PURPOSES=(build run rxe vm vm-kernel fuzz wire bench test)

say() { echo "deps: $*" >&2; }

# has PROBE: true if this machine already has what the probe looks for.
has() {
	local globs=${1#file:} glob
	case $1 in
	cmd:*) command -v "${1#cmd:}" >/dev/null ;;
	pc:*) command -v pkg-config >/dev/null && pkg-config --exists "${1#pc:}" ;;
	file:*)
		# Unquoted: the globs expand to whatever files match them.
		for glob in ${globs//,/ }; do [ -e "$glob" ] && return 0; done
		return 1
		;;
	static-busybox) [ -x /bin/busybox ] && static_elf /bin/busybox ;;
	rdma_rxe) [ "$(rxe_module)" != none ] ;;
	vm-kernel)
		# A kernel this user cannot read counts as there: another package would not help
		# (vm-run.sh says what would). (In a subshell: what vm-lib.sh sets stays there.)
		# shellcheck source=/dev/null
		(. "$here/vm-lib.sh" && VM_KERNEL='' find_kernel 2>/dev/null) && return 0
		for glob in /boot/vmlinuz-*; do [ -e "$glob" ] && [ ! -r "$glob" ] && return 0; done
		return 1
		;;
	libfuzzer)
		command -v clang >/dev/null &&
			echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' |
			clang -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1
		;;
	*) return 1 ;;
	esac
}

usage() { echo "usage: $0 [--dry-run | --check] [PURPOSE...]; purposes: ${PURPOSES[*]}" >&2; exit 2; }

main() {
	local mode=install arg purpose need probe rest entries desc pkgs p cmd note='' update out refresh='' cause='' who
	local wanted=() missing=() unavailable=() unknown=() all='' seen=' '
	for arg; do
		case $arg in
		--dry-run) mode=dry-run ;;
		--check) mode=check ;;
		-*) usage ;;
		*) [[ " ${PURPOSES[*]} " == *" $arg "* ]] || usage; wanted+=("$arg") ;;
		esac
	done
	[ "${#wanted[@]}" -gt 0 ] || wanted=(build run)
	if [ -n "${OS_RELEASE:-}" ] && [ "$mode" = install ] && [ "$(id -u)" = 0 ]; then
		say "OS_RELEASE describes another system: as root, use it only with --dry-run or --check"
		return 2
	fi
	read_os_release
	# Each wanted need this machine lacks (all, for another system's
	# os-release) and its packages here; and this system's notes.
	while read -r purpose need probe rest; do
		[[ $purpose == \#* || -z $purpose ]] && continue
		desc=${rest#*# }
		read -ra entries <<<"${rest%%#*}"
		if [ "$purpose" = note ]; then
			[ -z "$(packages_for "${entries[@]}")" ] || note+=${note:+$'\n'}$desc
			continue
		fi
		[[ " ${wanted[*]} " == *" $purpose "* ]] || continue
		[ -z "${OS_RELEASE:-}" ] && has "$probe" && continue
		pkgs=$(packages_for "${entries[@]}")
		case $pkgs in
		'') unknown+=("$purpose: $desc") ;;
		-) ;;
		!) unavailable+=("$desc ($purpose)") ;;
		\?) say "$os_name has no package for $desc ($purpose): going on without it" ;;
		*) missing+=("$need") all+=" $pkgs" ;;
		esac
	done <"$PACKAGES_TABLE"
	for p in $all; do [[ $seen == *" $p "* ]] || seen+="$p "; done
	read -ra pkgs <<<"$seen"

	if [ "${#unknown[@]}" -gt 0 ]; then
		say "$os_name is not a system this script knows; install by hand:"
		printf '  %s\n' "${unknown[@]}" >&2
		return 1
	fi
	for p in "${unavailable[@]}"; do say "$os_name has no package for $p"; done
	if [ "${#pkgs[@]}" -eq 0 ]; then
		[ "${#unavailable[@]}" -eq 0 ] || return 1
		[ "$mode" != dry-run ] || say "${wanted[*]}: nothing missing"
		return 0
	fi

	[ -z "$note" ] || say "$note"
	case $(manager) in
	apt) cmd=(apt-get install -y --no-install-recommends "${pkgs[@]}") refresh='sudo apt-get update && ' ;;
	dnf) cmd=(dnf install -y "${pkgs[@]}") ;;
	esac
	case $mode in
	dry-run) say "$os_name, ${wanted[*]}: ${cmd[*]}"; [ "${#unavailable[@]}" -eq 0 ]; return ;;
	check) say "missing for ${wanted[*]}: ${missing[*]}; install with: ${refresh}sudo ${cmd[*]}"; return 1 ;;
	esac
	if [ "$(id -u)" != 0 ]; then
		say "missing for ${wanted[*]}: ${missing[*]}; as root, run:"
		echo "  ${refresh}sudo ${cmd[*]}" >&2
		return 1
	fi
	say "installing for ${wanted[*]}: ${pkgs[*]}"
	# A source out of reach: apt-get update warns and exits 0 (measured, apt
	# 2.6), its first "Failed to fetch" the cause if the install then fails;
	# dnf, told not to skip such a repository, fails "Failed to download
	# metadata ..." (measured offline, dnf 4.14; dnf5's words begin so too).
	if [ "${cmd[0]}" = apt-get ]; then
		update=$(apt-get update -qq 2>&1) || true
		update=$(grep -m 1 '^[WE]: Failed to fetch' <<<"$update") || true
		cmd+=(-qq) cause=${update#?: } who='apt-get update'
	else
		cmd=(dnf -q --setopt=skip_if_unavailable=False "${cmd[@]:1}") who=dnf
	fi
	if ! out=$(DEBIAN_FRONTEND=noninteractive "${cmd[@]}" 2>&1 >/dev/null); then
		[ -n "${cause:=$(grep -m 1 -o 'Failed to download metadata.*' <<<"$out")}" ] ||
			{ echo "$out" >&2 && return 1; }
		say "cannot install ${pkgs[*]}: $who could not reach the package archive" \
			"($cause); give this machine the network, or install them by hand"
		return 1
	fi
	[ "${#unavailable[@]}" -eq 0 ]
}

main "$@"
