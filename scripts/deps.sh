#!/usr/bin/env bash
# Install what `make`, `make test`, `make demo`, `make bench` and
# `make wire` need on Debian 12.
# Quick and silent when everything is already there.
set -euo pipefail

packages=(
	# build (libc6-dev too: gcc only recommends it, and we skip recommends)
	gcc libc6-dev make pkg-config libibverbs-dev librdmacm-dev
	# run: rxe provider, rdma tool, rping, perftest, ip, modprobe
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
	iproute2 kmod
	# a VM with Debian's kernel, for hosts whose kernel has no Soft-RoCE
	qemu-system-x86 linux-image-amd64 busybox-static cpio
	# tests: libFuzzer (clang's), and mounts for the no-device test
	clang libclang-rt-dev util-linux
	# make bench (and its smoke run in make test): the plot
	gnuplot-nox
	# make wire (and its tests in make test): the RoCE v2 decoder
	tshark
)

missing=()
for pkg in "${packages[@]}"; do
	# shellcheck disable=SC2016 # ${Status} is dpkg-query's, not ours
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		missing+=("$pkg")
	fi
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "deps: all ${#packages[@]} packages already installed"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${missing[*]}; as root, run:" >&2
	echo "  apt-get update && DEBIAN_FRONTEND=noninteractive" \
		"apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

apt-get update -qq
DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"
