# shellcheck shell=bash
# rping_works ADDR: true if one rping (server and client on ADDR) gets
# through, i.e. rdma_cm can resolve ADDR, connect two QPs and pass messages.
# If not, rping_error holds what the last client said.  Sourced by
# soft-roce.sh and doctor.sh.
rping_works() {
	local addr=$1 port server
	rping_error=''
	for _ in 1 2 3; do
		# A port of its own each time: the one an earlier rping used can
		# stay bound for a moment after it exits, and then this server
		# cannot listen.
		port=$((20000 + RANDOM % 20000))
		timeout 30 rping -s -a "$addr" -p "$port" -C 1 >/dev/null 2>&1 &
		server=$!
		# The client does not wait for the server to listen: retry while
		# the server is there (a loaded machine is slow to start it).
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			if rping_error=$(timeout 10 rping -c -a "$addr" -p "$port" -C 1 2>&1 >/dev/null); then
				rping_stop "$server"
				return 0
			fi
			kill -0 "$server" 2>/dev/null || break
			sleep 0.5
		done
		rping_stop "$server"
	done
	rping_error=${rping_error:-no answer}
	return 1
}

rping_stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" || true
}
