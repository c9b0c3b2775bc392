#!/usr/bin/env bash
# make demo: one server and one client on Soft-RoCE, and what each says.
# Run it through scripts/soft-roce.sh, which sets RDMA_ADDR.
#   DEMO_SERVER  rdma_srq_pool_server_ev (default) or rdma_pool_server
set -euo pipefail

: "${RDMA_ADDR:?run this through scripts/soft-roce.sh, which sets RDMA_ADDR}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
server=${DEMO_SERVER:-rdma_srq_pool_server_ev}
client_args=("$RDMA_ADDR" 10000 --writes 1000 --doorbell-every 100)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$top/$server" >"$out/server" 2>&1 &
pid=$!
for _ in $(seq 100); do
	grep -q '^listen ' "$out/server" && break
	sleep 0.1
done

echo "== client: rdma_pool_client ${client_args[*]}"
status=0
"$top/rdma_pool_client" "${client_args[@]}" || status=$?

kill -INT "$pid"
wait "$pid" || status=$?
echo
echo "== server: $server (stopped with SIGINT)"
cat "$out/server"
exit "$status"
