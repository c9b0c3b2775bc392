# rdma-lib.sh: what this machine's RDMA offers, asked the same way by
# soft-roce.sh, doctor.sh and tests/run.sh.  Sourced; changes nothing.
#
#   active_ports           "DEVICE PORT NETDEV" per ACTIVE port (NETDEV "-"
#                          if it has none, as on InfiniBand without IPoIB)
#   ipv4_addrs NETDEV      its IPv4 addresses, 127/8 left out
#   rxe_module             how this kernel has rdma_rxe: loaded, builtin, on-disk or none
#   suggest_netdev         an interface to put Soft-RoCE on by hand: the default route's, else the
#                          first with an IPv4 address ("eth0" if none)
#   rping_works ADDR       true if an rping (server and client on ADDR) gets
#                          through: rdma_cm resolves ADDR, connects two QPs
#                          and passes messages; else rping_error says why

# modprobe, ip and rdma live in /sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

# Per port: "link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0".
# An rxe port is ACTIVE when its netdev is up with a carrier.
active_ports() {
	command -v rdma >/dev/null || return 0
	rdma link show 2>/dev/null | awk '
		{ state = ""; netdev = "-"
		  for (i = 3; i < NF; i++) {
			if ($i == "state") state = $(i + 1)
			if ($i == "netdev") netdev = $(i + 1)
		  }
		  split($2, p, "/")
		  if (state == "ACTIVE") print p[1], p[2], netdev }'
}

ipv4_addrs() {
	ip -4 -o addr show dev "$1" 2>/dev/null | awk '{ sub("/.*", "", $4); if ($4 !~ /^127\./) print $4 }'
}

# "rdma link add ... type rxe" loads rdma_rxe by itself, so a module on
# disk is as good as a loaded one.
rxe_module() {
	[ ! -d /sys/module/rdma_rxe ] || { echo loaded; return; }
	case $(modprobe --show-depends rdma_rxe 2>/dev/null | tail -n 1) in
	builtin*) echo builtin ;;
	insmod*) echo on-disk ;;
	*) echo none ;;
	esac
}

suggest_netdev() {
	local dev
	dev=$(ip -4 route show default 2>/dev/null |
		awk '{ for (i = 1; i < NF; i++) if ($i == "dev" && d == "") d = $(i + 1) } END { print d }')
	[ -n "$dev" ] || dev=$(ip -4 -o addr show 2>/dev/null |
		awk '$4 !~ /^127\./ && d == "" { d = $2 } END { print d }')
	echo "${dev:-eth0}"
}

rping_works() {
	local addr=$1 port server ok=''
	rping_error=''
	command -v rping >/dev/null ||
		{ rping_error="no rping to check with (scripts/deps.sh run installs it)"; return 1; }
	for _ in 1 2 3; do
		# A port of its own each time: an earlier rping's can stay bound for a moment after
		# it exits.  Below 32768, where the kernel's local port range starts by default,
		# from which the CM gives ports to binds on port 0, as the tests' servers make.
		port=$((20000 + RANDOM % 12768))
		# --foreground: in our process group, which a Ctrl-C reaches.
		timeout --foreground 30 rping -s -a "$addr" -p "$port" -C 1 >/dev/null 2>&1 &
		server=$!
		# The client does not wait for the server to listen: retry while
		# the server is there (a loaded machine is slow to start it).
		for _ in {1..10}; do
			rping_error=$(timeout --foreground 10 rping -c -a "$addr" -p "$port" -C 1 2>&1 >/dev/null) &&
				{ ok=1; break; }
			kill -0 "$server" 2>/dev/null || break
			sleep 0.5
		done
		kill "$server" 2>/dev/null || true
		wait "$server" || true
		[ -z "$ok" ] || return 0
	done
	rping_error=${rping_error:-no answer}
	return 1
}
