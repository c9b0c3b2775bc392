# shellcheck shell=bash disable=SC2154,SC2153 # e2e.sh and lib.sh, which come first, set top, work, the peers and RDMA_*
# make doctor (scripts/doctor.sh) on the real device: it passes where the
# programs work, and where something is missing names the failed check and
# its fix.  Sourced by e2e.sh after lib.sh; run once, not per server.

doctor=$top/scripts/doctor.sh
# The checks, in the order doctor.sh runs them.
DOCTOR_CHECKS=('kernel module rdma_rxe' 'RDMA device' 'link state' 'ibv_devinfo'
	'IPv4 address' 'rdma_cm device node' 'uverbs device node' 'memlock' 'rping')
doctor_need_kib='' # what the doctor says the server pins, once it has said

# doctor_run NAME [CMD...]: doctor.sh (through CMD, if any) into $work/NAME.out.
doctor_run() { "${@:2}" timeout 120 "$doctor" >"$work/$1.out" 2>"$work/$1.err"; }

# Every check ok, in order, and the address it found is one the tests
# connect to (with a second device, the doctor may take that one; beside
# another run, that run's device, if first in the list).
test_doctor_passes() {
	local t=doctor/passes status=0 want got dev why=''
	doctor_run doctor || status=$?
	want=$(printf '%s\n' "${DOCTOR_CHECKS[@]}")
	got=$(sed -n 's/^ok   \([^:]*\):.*/\1/p' "$work/doctor.out")
	dev=$(sed -n 's/^ok   link state: \([^/]*\)\/.*/\1/p' "$work/doctor.out")
	if [ "$status" != 0 ]; then
		why="exited $status: $(grep -A1 '^FAIL' "$work/doctor.out" | tr '\n' '|' || true)"
	elif [ "$want" != "$got" ]; then
		why="ok lines for [$(echo "$got" | tr '\n' '|')], want [$(echo "$want" | tr '\n' '|')]"
	elif [[ $dev =~ ^rxe_dem[o2][0-9]+$ && $dev != "$RDMA_DEV" && $dev != "${RDMA_DEV2:-}" ]]; then
		: # another run's device
	elif ! grep -Eq "^ok   IPv4 address: ($RDMA_ADDR|${RDMA_ADDR_DEV2:-$RDMA_ADDR}) on " "$work/doctor.out"; then
		why="the address found is not RDMA_ADDR=$RDMA_ADDR${RDMA_ADDR_DEV2:+ nor RDMA_ADDR_DEV2=$RDMA_ADDR_DEV2}"
	elif [ "$(tail -n 1 "$work/doctor.out")" != "doctor: ${#DOCTOR_CHECKS[@]} checks: ${#DOCTOR_CHECKS[@]} ok, 0 failed, 0 skipped" ]; then
		why="last line: $(tail -n 1 "$work/doctor.out")"
	fi
	pass_unless "$t" "$why"
}

# No device: the sysfs device lists and device nodes hidden by empty mounts,
# in a private mount namespace.  The module is still loaded, so the fix is
# to add a link; what needs a device is skipped.
test_doctor_no_device() {
	local t=doctor/no_device status=0 out=$work/nodev.out why=''
	needs_root "$t" "hide the device in a mount namespace" || return 0
	doctor_run nodev unshare --mount sh -c \
		'for d in /sys/class/infiniband /sys/class/infiniband_verbs /dev/infiniband; do
			mount -t tmpfs none "$d" || exit 1
		 done
		 exec "$@"' sh || status=$?
	if [ "$status" != 1 ]; then
		why="exited $status, not 1: $(head -c 300 "$work/nodev.err")"
	elif ! grep -qx 'FAIL RDMA device: none in /sys/class/infiniband' "$out"; then
		why="no line 'FAIL RDMA device: none in /sys/class/infiniband'"
	elif ! grep -A1 -x 'FAIL RDMA device: .*' "$out" | tail -n 1 |
		grep -q '^     fix: as root: rdma link add rxe0 type rxe netdev [a-z0-9_]'; then
		why="no 'fix: as root: rdma link add rxe0 type rxe netdev ...' after it"
	elif ! grep -qx 'skip link state: no RDMA device' "$out"; then
		why="the link check was not skipped"
	elif ! grep -qx "doctor: ${#DOCTOR_CHECKS[@]} checks: 2 ok, 2 failed, 5 skipped" "$out"; then
		why="last line: $(tail -n 1 "$out")"
	fi
	pass_unless "$t" "$why"
}

# Too little: just under the pool's 4 MiB, where the server fails to register
# its pool (tests/robust.sh test_memlock).  The doctor says so, with what the
# server needs (kept in doctor_need_kib for the next test) and the fix.
test_doctor_memlock_too_low() {
	local t=doctor/memlock_too_low kib=$((4096 - 4)) status=0 line why=''
	local want="^FAIL memlock: ulimit -l is $kib KiB but the server pins ([0-9]+) KiB \\(its 4 MiB pool and buffers\\): ibv_reg_mr would fail with ENOMEM\$"
	needs_root "$t" "run as another user (setpriv)" || return 0
	as_user "$kib"
	doctor=$open_top/scripts/doctor.sh doctor_run lowdoc "${nobody_cmd[@]}" || status=$?
	line=$(grep '^FAIL memlock: ' "$work/lowdoc.out" || true)
	if [ "$status" != 1 ]; then
		why="doctor exited $status, not 1"
	elif [[ ! $line =~ $want ]]; then
		why="memlock line '$line' does not match '$want'"
	elif ! grep -A1 -xF "$line" "$work/lowdoc.out" | tail -n 1 |
		grep -q '^     fix: .*/etc/security/limits.conf.*LimitMEMLOCK='; then
		why="the fix does not name limits.conf and LimitMEMLOCK="
	elif [ "$(grep -c '^FAIL ' "$work/lowdoc.out")" != 1 ]; then
		why="more than the memlock check failed: $(grep -A1 '^FAIL ' "$work/lowdoc.out" | tr '\n' '|')"
	fi
	[ -n "$why" ] || doctor_need_kib=${BASH_REMATCH[1]} # the figure the =~ above matched
	pass_unless "$t" "$why"
}

# Enough: exactly what the doctor said the server needs.  It says ok, and
# the server really serves a client.
test_doctor_memlock_enough() {
	local t=doctor/memlock_enough kib=${doctor_need_kib:-} status=0 cstatus=0 why
	needs_root "$t" "run as another user (setpriv)" || return 0
	[ -n "$kib" ] || { fail "$t" "the doctor named no figure in doctor/memlock_too_low"; return; }
	as_user "$kib"
	doctor=$open_top/scripts/doctor.sh doctor_run enoughdoc "${nobody_cmd[@]}" || status=$?
	[ "$status" = 0 ] ||
		{ fail "$t" "doctor exited $status: $(grep -A1 '^FAIL' "$work/enoughdoc.out" | tr '\n' '|')"; return; }
	grep -q "^ok   memlock: ulimit -l $kib KiB >= $kib KiB" "$work/enoughdoc.out" ||
		{ fail "$t" "no 'ok   memlock: ulimit -l $kib KiB >= $kib KiB' line"; return; }
	# The event-driven server (it pins the most: the pool, receive and reply
	# buffers) as nobody, and one client: it registers its memory only then.
	start_server --as-nobody "$kib" rdma_srq_pool_server_ev || cstatus=200
	[ "$cstatus" = 200 ] || run_client memlock "$server_port" "$RDMA_ADDR" 4096 -n 100 -k 10 || cstatus=$?
	if [ "$cstatus" = 200 ]; then
		fail "$t" "the server did not listen: $(head -c 300 "$work/server.err")"
	elif [ "$cstatus" != 0 ]; then
		fail "$t" "with ulimit -l $kib, client exited $cstatus: $(head -c 300 "$work/memlock.err")"
	elif ! why=$(check_session memlock 100 10 4096); then
		fail "$t" "$why"
	elif ! stop_server; then
		fail "$t" "the server did not exit 0 after SIGINT"
	else
		pass "$t"
	fi
	# Reap a server that failed on its own (one still running is killed).
	[ -z "$server_pid" ] || await_exit "$server_pid" 0 || true
	server_pid=
}
