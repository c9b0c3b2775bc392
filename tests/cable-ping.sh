#!/usr/bin/env bash
# cable-ping.sh: three rpings from the client VM of scripts/vm-pair.sh to
# the server VM, across the last of its cables (in tests/wire.sh, the
# second, of qemu's socket netdev).  The client retries until the server
# VM's rping listens; it prints "rping: 3 pings over ADDRESS" on success.
set -euo pipefail

: "${RDMA_ADDRS:?run this through scripts/vm-pair.sh}" "${WIRE_ROLE:?run this through scripts/vm-pair.sh}"
RDMA_ADDR=${RDMA_ADDRS##*,}
PORT=7474

if [ "$WIRE_ROLE" = server ]; then
	exec timeout 120 rping -s -a "$RDMA_ADDR" -p "$PORT" -C 3
fi
for _ in $(seq 120); do
	timeout 20 rping -c -a "$RDMA_ADDR" -p "$PORT" -C 3 >/dev/null 2>&1 &&
		{ echo "rping: 3 pings over $RDMA_ADDR"; exit 0; }
	sleep 0.5
done
echo "rping: no answer from $RDMA_ADDR" >&2
exit 1
