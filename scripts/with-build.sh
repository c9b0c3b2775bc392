#!/usr/bin/env bash
# with-build.sh "TARGETS" CMD...: make TARGETS, then CMD, which uses what was built, while no make
# of other flags in this checkout (make test and make test SANITIZE=1 at once) relinks the programs
# under it: makes of the same flags share a flock on build/lock; one of other flags takes it whole
# to rebuild, waiting (and saying so) for the others to end.  In a recipe, make passes its
# variables (SANITIZE=1) on to the makes here in MAKEFLAGS.  In a VM, build/ is the host's over
# qemu's 9p, whose flocks hold among the VM's processes alone (measured: a host's lock does not
# stop one in the VM): there, the lock that counts is held by the host's make that started the VM.
set -euo pipefail

mkdir -p build
# A build/ this user cannot write: make says whose it is.
[ -w build ] || exec make build/flags
exec 9>>build/lock
want=$(make -s --no-print-directory flags)

# lock -s|-x: the lock, shared or whole; if another make holds it, say what this one waits for.
lock() {
	flock -n "$1" 9 && return
	echo "${0##*/}: another make in this checkout uses programs built with other flags (SANITIZE=1 or not): waiting for it to end" >&2
	flock "$1" 9
}

ours() { [ "$(cat build/flags 2>/dev/null)" = "$want" ]; }

while :; do
	if ours; then how=-s; else how=-x; fi
	lock "$how"
	# Shared, it serves only flags still ours: a make of other flags may
	# have rebuilt while this one waited, and now runs its programs.
	if [ "$how" = -x ] || ours; then
		# shellcheck disable=SC2086 # the targets, one word each
		make $1
		flock -s 9 # (whole to shared: another make may take it in between)
		ours && break
	fi
	flock -u 9
done
exec "${@:2}"
