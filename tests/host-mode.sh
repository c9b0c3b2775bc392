#!/usr/bin/env bash
# The end-to-end stage of make test, run as a learner runs it on a machine whose kernel has
# rdma_rxe, with nothing set up beforehand: `make demo`, then the end-to-end tests (tests/e2e.sh),
# each through soft-roce.sh, which must choose host mode by itself and leave behind no rdma link,
# interface or module that was not there before.  Where this machine has no RDMA device and no
# rdma_rxe (installed first where a package of this system adds it, as make demo does), a VM
# stands in for one (scripts/vm-run.sh), saying why.  Reports in TAP, e2e.sh's tests among its own.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/rdma-lib.sh"
. "$top/scripts/system-lib.sh"
no_rdma() { [ -z "$(active_ports)" ] && [ "$(rxe_module)" = none ]; }
if no_rdma && [ "$(id -u)" = 0 ]; then "$top/scripts/deps.sh" rxe >&2 || true; fi
if no_rdma; then
	echo "# in a VM: no RDMA device here, and this kernel ($(uname -r)) has no rdma_rxe module"
	# The stage took 25 minutes under TCG beside other VMs, more with the
	# sanitizers: an hour at most, not vm-run.sh's default half hour.
	exec env VM_PASS_ENV="SANITIZE CI" VM_TIMEOUT="${VM_TIMEOUT:-3600}" \
		"$top/scripts/vm-run.sh" "$top/tests/host-mode.sh"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/host-mode.XXXXXX")
trap 'rm -rf "$work"' EXIT
report_prefix=host_mode/ report_stage=e2e
. "$top/tests/report-lib.sh"

# Ctrl-C, SIGTERM or SIGHUP: what the tests started is stopped (each soft-roce.sh then removes its
# own device), then what the test that ran made, and the modules it loaded.
on_signal() {
	echo "host-mode: SIG$1: stopping the tests" >&2 || exec 2>/dev/null
	stop_below 20
	finish
	modules_restore
	rm -rf "$work"
}
stop_on_signals on_signal

# machine_state [devices|modules]: what the harness may create, and must
# remove again: its rdma links and interfaces (another run's, whose PID
# runs and not below this one, as "another run's ..."), and its modules.
machine_state() {
	local kind name mine m
	mine=" $$ $(descendants $$ | paste -sd' ') "
	[ "${1:-}" = modules ] || {
		rdma link show 2>/dev/null | awk '{ print "link", $2 }'
		ip -o link show | awk -F': ' '{ sub("@.*", "", $2); print "interface", $2 }'
	} | while read -r kind name; do
		[[ $name =~ ^rxe_(dem[o2]|chrn)([0-9]+) ]] || continue
		if [ -d "/proc/${BASH_REMATCH[2]}" ] && [[ $mine != *" ${BASH_REMATCH[2]} "* ]]; then
			echo "another run's $kind $name"
		else
			echo "$kind $name"
		fi
	done
	[ "${1:-}" != devices ] || return 0
	for m in rdma_rxe rdma_ucm dummy; do [ ! -e "/sys/module/$m/initstate" ] || echo "module $m"; done
}

# The machine's own ACTIVE ports: another run's device is none of them.
machine_ports() { active_ports | grep -Ev '^rxe_(dem[o2]|chrn)[0-9]' || true; }

# The mode line soft-roce.sh must print: its own device, unless an RDMA
# device was already there, which it must then use.
want_mode='^soft-roce: mode: host \(rxe_demo[0-9]+, made for this run'
[ -z "$(machine_ports)" ] || want_mode='^soft-roce: mode: host \([^ ]+, an existing device'

# check_run NAME LOG BEFORE: the mode soft-roce.sh chose, and the machine as it was.
check_run() {
	local name=$1 log=$2 before=$3
	pass_if "$name/chooses_host_mode" "no line matching '$want_mode': $(grep '^soft-roce:' "$log" | tr '\n' '|')" \
		grep -Eq "$want_mode" "$log"
	pass_unless "$name/leaves_nothing_behind" "$(left_behind "$before")"
}

# demo_why LOG STATUS: nothing if the make demo that exited STATUS and
# wrote LOG showed the session of the README's excerpt, else why not.
demo_why() {
	if [ "$2" != 0 ]; then
		echo "make demo exited $2: $(tail -n 5 "$1" | tr '\n' '|')"
	elif [ "$(grep -c '^doorbell qp=0x[0-9a-f]* seq=[0-9]* value=[0-9]* ok$' "$1")" != 10 ] ||
		! grep -q '^done writes=1000 doorbells=10 ' "$1"; then
		echo "not the README's session (10 doorbells ok, done writes=1000): $(tail -n 5 "$1" | tr '\n' '|')"
	fi
}

# make demo, as the README tells a newcomer: it must run, and show the
# session of the README's excerpt.
test_demo() {
	local before status=0 log=$work/demo.log why
	before=$(machine_state)
	make -s -C "$top" demo SANITIZE="${SANITIZE:-}" >"$log" 2>&1 || status=$?
	why=$(demo_why "$log" "$status")
	pass_unless demo/runs "$why"
	[ -n "$why" ] || test_demo_kernel_view "$log"
	check_run demo "$log" "$before"
}

# block LOG TITLE: the rows of the demo's kernel view headed TITLE.
block() {
	awk -v t="$2" 'index($0, "== the kernel, " t) == 1 { on = 1; next }
		on && /^  [a-z_]+ / { print; next } on && /^[^ ]/ { on = 0 }' "$1"
}

# What the demo shows of the kernel is what the programs said.
test_demo_kernel_view() {
	local log=$1 cqp sqp rkey pool rows why=''
	cqp=$(sed -n 's/^connect server=.* qp=\(0x[0-9a-f]*\)$/\1/p' "$log")
	sqp=$(sed -n 's/^connect qp=\(0x[0-9a-f]*\) device=.*/\1/p' "$log")
	rkey=$(sed -n 's/^grant .* rkey=\(0x[0-9a-f]*\) .*/\1/p' "$log")
	pool=$(sed -n 's/^listen .* pool_size=\([0-9]*\)$/\1/p' "$log")
	rows=$(block "$log" 'once the client holds its slice')
	if [ -z "$cqp" ] || [ -z "$sqp" ] || [ -z "$rkey" ] || [ -z "$pool" ]; then
		why="the programs' qp=, rkey= or pool_size= lines are missing"
	elif ! grep -Eq "^  qp +lqpn $((cqp)) rqpn $((sqp)) type RC state RTS comm rdma_pool_clien" <<<"$rows"; then
		why="no client QP $((cqp)) in RTS with peer $((sqp))"
	elif ! grep -Eq "^  qp +lqpn $((sqp)) rqpn $((cqp)) type RC state RTS comm rdma_" <<<"$rows"; then
		why="no server QP $((sqp)) in RTS with peer $((cqp))"
	elif ! grep -Eq "^  mr +rkey $rkey mrlen $pool comm rdma_" <<<"$rows"; then
		why="no MR with the grant's rkey $rkey and the pool's $pool bytes"
	elif [ "$(block "$log" "after the server's exit")" != "$(printf '  %-6s (none of theirs)\n' cm_id qp mr)" ]; then
		why="something of theirs was left: $(block "$log" "after the server's exit" | tr '\n' '|')"
	fi
	pass_unless demo/kernel_view "${why:+$why: $(echo "$rows" | tr '\n' '|')}"
}

# The end-to-end tests, with a second device (SOFT_ROCE_DEVICES=2) for the
# tests of a server on two devices; their lines come out as they run.
test_e2e() {
	local before status=0 log=$work/e2e.log
	before=$(machine_state)
	SOFT_ROCE_DEVICES=2 "$top/scripts/soft-roce.sh" "$top/tests/e2e.sh" 2>&1 | tee "$log" || status=$?
	[ "$status" = 0 ] || grep -q '^not ok ' "$log" || fail e2e/runs "exited $status before its tests reported"
	check_run e2e "$log" "$before"
}

# left_behind BEFORE [devices]: nothing if machine_state [devices] is as
# BEFORE, else both (another run's devices aside).
left_behind() {
	local before=$1 after skip="^another run's "
	after=$(machine_state "${2:-}")
	# Beside another run, the modules aside: it loads them, and keeps them.
	[[ $before$after != *"another run's "* ]] || skip+="|^module "
	before=$(grep -Ev "$skip" <<<"$before" || true)
	after=$(grep -Ev "$skip" <<<"$after" || true)
	[ "$after" = "$before" ] || echo "before: $(echo "$before" | tr '\n' ' '); after: $(echo "$after" | tr '\n' ' ')"
}

# The interrupted run: a server, and a client that streams longer than the
# test waits, under timeout(1) as stage scripts run theirs (see stop_session).
cat >"$work/long-run.sh" <<'EOF'
#!/usr/bin/env bash
dir=$1 top=$2
. "$top/scripts/program-lib.sh"
while [ -n "${3:-}" ] && [ ! -e "$3" ]; do sleep 0.1; done
"$top/rdma_pool_server" --port 0 >"$dir/server" 2>&1 &
echo $! >"$dir/server.pid"
port=$(listen_port "$dir/server" "$!") || exit 1
echo "$port" >"$dir/port"
timeout 300 "$top/rdma_pool_client" "$RDMA_ADDR" 4096 --port "$port" --writes 2000000000 >"$dir/client" 2>&1
wait
EOF
chmod +x "$work/long-run.sh"

# ours DIR: the processes of an interrupted run still there, "PID COMMAND" each: its server
# (DIR/server.pid), and those whose command lines name DIR or the port the CM gave the server.
ours() {
	local port pid
	port=$(cat "$1/port" 2>/dev/null) || true
	pid=$(cat "$1/server.pid" 2>/dev/null) || true
	{
		pgrep -af -- "$1${port:+|--port $port( |\$)}" | grep -v pgrep
		[ -z "$pid" ] || ps -o pid=,args= -p "$pid"
	} | sed 's/^ *//' | awk '!seen[$1]++' || true
}

# test_interrupt NAME SIGNAL group|harness [dead-stderr]: soft-roce.sh gets SIGNAL mid-stream, as
# Ctrl-C to its group (its command runs in a session of its own) or as kill or a closed
# terminal's SIGHUP to it alone: it must end by that signal, leaving no process, device,
# interface or module.
test_interrupt() {
	local name=$1 sig=$2 target=$3 dir=$work/${1//\//_} before
	local harness left why='' want reader='' err=$dir/log
	mkdir "$dir"
	before=$(machine_state)
	[ "${4:-}" != dead-stderr ] || { dead_stderr "$dir/err"; err=$dir/err.fifo; }
	# Both appending: stdout and stderr may open one file twice, and each
	# open would write from its start over the other.
	as_job env --default-signal="$sig" "$top/scripts/soft-roce.sh" "$work/long-run.sh" \
		"$dir" "$top" >>"$dir/log" 2>>"$err"
	harness=$!
	if ! wait_until "$harness" 60 grep -qs '^granted ' "$dir/client"; then
		signal_job "$harness" alone TERM 20 || true
		why="the client never streamed"
	else
		end_reader
		signal_job "$harness" "$target" "$sig" 20 || why="the harness still runs 20 s after SIG$sig"
	fi
	want=$((128 + $(kill -l "$sig")))
	left=$(ours "$dir")
	[ -n "$why" ] || [ -z "$left" ] || why="still running: $(echo "$left" | tr '\n' '|')"
	[ -n "$why" ] || why=$(left_behind "$before")
	[ -n "$why" ] || [ "$job_status" = "$want" ] || why="the harness exited $job_status, not by SIG$sig ($want)"
	pass_unless "$name" "${why:+$why: $(tail -n 5 "$dir/log" | tr '\n' '|')}"
	# Whatever the outcome, the next test starts clean.
	# shellcheck disable=SC2046 # PIDs, one word each
	[ -z "$left" ] || kill -KILL $(cut -d' ' -f1 <<<"$left") 2>/dev/null || true
}

# Two make demo at once, as two people on one machine would: each makes
# its own device and server port, and both show the README's session.
test_two_demos() {
	local before i status pids=() why='' one
	before=$(machine_state devices)
	for i in 1 2; do
		make -s -C "$top" demo SANITIZE="${SANITIZE:-}" >"$work/demo$i.log" 2>&1 &
		pids+=($!)
	done
	for i in 1 2; do
		status=0
		wait "${pids[i - 1]}" || status=$?
		one=$(demo_why "$work/demo$i.log" "$status")
		why+=${one:+demo $i: $one; }
	done
	[ -n "$why" ] || [ "$(grep -ho 'rxe_demo[0-9]*, made' "$work"/demo[12].log | sort -u | wc -l)" = 2 ] ||
		why="not two devices of their own: $(grep -h '^soft-roce: mode' "$work"/demo[12].log | tr '\n' '|')"
	# The modules may stay loaded (the first run to end leaves rdma_rxe to
	# the other's device): the links and interfaces must be gone.
	[ -n "$why" ] || why=$(left_behind "$before" devices)
	pass_unless two_demos_at_once "$why"
	modules_restore
}

# make demo while another device comes and goes, as another run's does: "rdma resource show"
# fails now and then while a device is added or removed, and the demo's views of the kernel must
# ask again, not end the demo (two_demos_at_once met it once, on 6.12 under SANITIZE=1).
test_demo_beside_churn() {
	local t=demo/kernel_view_beside_another_device dir=$work/churn churn status=0 why=''
	local before dev=rxe_chrn$$
	mkdir "$dir"
	before=$(machine_state devices)
	modprobe -a rdma_rxe dummy
	# Down: a device on it is no ACTIVE port a run could take for its own.
	ip link add "$dev" type dummy
	when_finished "ip link delete $dev"
	sh -c 'while :; do rdma link add "$1" type rxe netdev "$1" && echo added
		sleep 0.1; rdma link delete "$1"; sleep 0.1; done' sh "$dev" >"$dir/adds" 2>&1 &
	churn=$!
	when_finished "kill $churn 2>/dev/null; wait $churn; rdma link delete $dev 2>/dev/null"
	make -s -C "$top" demo SANITIZE="${SANITIZE:-}" >"$dir/log" 2>&1 || status=$?
	finish
	why=$(demo_why "$dir/log" "$status")
	if [ -z "$why" ] && grep -q 'rdma resource show failed' "$dir/log"; then
		why="a view of the kernel failed: $(grep -m 1 'rdma resource show failed' "$dir/log")"
	elif [ -z "$why" ] && [ "$(grep -cx added "$dir/adds")" -lt 2 ]; then
		why="no churn: the other device was added fewer than twice: $(sort "$dir/adds" | uniq -c | tr '\n' ' ')"
	fi
	[ -n "$why" ] || why=$(left_behind "$before" devices)
	pass_unless "$t" "$why"
	modules_restore
}

# Two runs that overlap: the first, which loaded the modules, ends first and must leave the
# second's device, interface and programs working.  It ends as the second starts: its modprobe -r
# rdma_rxe, once it has found no device, waits (10 s at most) for the second's device to be made.
test_overlapping_runs() {
	local t=overlapping_runs dir=$work/overlap before first second why=''
	mkdir -p "$dir/bin"
	cat >"$dir/bin/modprobe" <<-EOF
	#!/bin/sh
	[ "\$*" != "-r rdma_rxe" ] || { touch "$dir/removing"; timeout 10 sh -c 'until
		[ -e "/sys/class/infiniband/rxe_demo\$(cat "$dir/second" 2>/dev/null)" ]; do sleep 0.1; done'; }
	exec $(type -P modprobe) "\$@"
	EOF
	chmod +x "$dir/bin/modprobe"
	modules_restore
	before=$(machine_state)
	PATH=$dir/bin:$PATH "$top/scripts/soft-roce.sh" sh -c 'touch "$1/up"
		while [ ! -e "$1/end" ]; do sleep 0.1; done' sh "$dir" >"$dir/first.log" 2>&1 &
	first=$!
	wait_until "$first" 60 test -e "$dir/up" ||
		why="the first run did not come up: $(tail -n 3 "$dir/first.log" | tr '\n' '|')"
	touch "$dir/end"
	wait_until "$first" 60 test -e "$dir/removing" || why+="the first run never removed rdma_rxe; "
	# The second's programs start once the first has ended and removed the
	# modules it loaded that no device needs: they must find all they need.
	"$top/scripts/soft-roce.sh" "$work/long-run.sh" "$dir" "$top" "$dir/go" >"$dir/log" 2>&1 &
	second=$!
	echo "$second" >"$dir/second"
	wait "$first" || why+="the first run failed: $(tail -n 3 "$dir/first.log" | tr '\n' '|')"
	touch "$dir/go"
	wait_until "$second" 60 grep -qs '^granted ' "$dir/client" ||
		why+="the second run's client never streamed: $(tail -n 3 "$dir/log" "$dir/server" 2>&1 | tr '\n' '|' || true)"
	sleep 1
	if [ -z "$why" ]; then
		if ! grep -q '^soft-roce: mode: host (rxe_demo' "$dir/log"; then
			why="the second run has no device of its own: $(grep '^soft-roce' "$dir/log" | tr '\n' '|' || true)"
		elif ! rdma link show "rxe_demo$second/1" >/dev/null 2>&1; then
			why="the first run's end took the second's device: $(grep -h '^soft-roce' "$dir/first.log" "$dir/log" | tr '\n' '|')"
		elif grep -q 'device_removed\|No such device\|error' "$dir/server" "$dir/client"; then
			why="the second run's programs failed: $(cat "$dir/server" "$dir/client" | tr '\n' '|')"
		fi
	fi
	kill -TERM "$second" 2>/dev/null || true
	wait "$second" 2>/dev/null || true
	modules_restore
	why+=$(left_behind "$before")
	pass_unless "$t" "$why"
}

# test_stopped NAME TEST READY: Ctrl-C to this stage while it runs TEST
# alone, once READY (shell, run in the stage's folder) is true: it must end
# by SIGINT, leaving no process, device, interface, module or folder of its own.
test_stopped() {
	local t=stopped/$1 dir=$work/stopped-$1 stage before pids=() why=''
	mkdir "$dir"
	before=$(machine_state)
	HOST_MODE_TESTS=$2 TMPDIR=$dir as_job env --default-signal=INT "$top/tests/host-mode.sh" \
		>"$dir/log" 2>&1
	stage=$!
	wait_until "$stage" 90 in_stage "$dir" "$3" || why="never got to '$3'"
	mapfile -t pids < <(descendants "$stage")
	signal_job "$stage" group INT 30 || why=${why:-"it still ran 30 s after SIGINT"}
	[ -n "$why" ] || [ "$job_status" = 130 ] || why="it exited $job_status, not by SIGINT (130)"
	sleep 1
	mapfile -t pids < <(alive "${pids[@]}")
	[ -n "$why" ] || [ "${#pids[@]}" = 0 ] ||
		why="still running: $(ps -o args= -p "${pids[*]}" | tr '\n' '|' || true)"
	stop_all 10 alive "${pids[@]}" # the next test starts clean
	[ -n "$why" ] || why=$(left_behind "$before")
	[ -n "$why" ] || [ -z "$(find "$dir" -mindepth 1 ! -name log)" ] ||
		why="left in its TMPDIR: $(find "$dir" -mindepth 1 -maxdepth 1 ! -name log | tr '\n' ' ')"
	pass_unless "$t" "${why:+$why: $(tail -n 3 "$dir/log" | tr '\n' '|')}"
}

# This stage beside another make test or make demo as root, which starts
# once the stage's demo has its device, loading no module then and keeping
# the ones it needs: the stage must not count its device or those as its own.
test_beside_another_run() {
	local t=beside_another_run dir=$work/beside other stage status=0 why=''
	mkdir "$dir"
	HOST_MODE_TESTS=test_demo TMPDIR=$dir "$top/tests/host-mode.sh" >"$dir/log" 2>&1 &
	stage=$!
	wait_until "$stage" 120 in_stage "$dir" "grep -q '^soft-roce: mode' demo.log" || why="the demo never began; "
	"$top/scripts/soft-roce.sh" sh -c 'touch "$1/up"
		while [ ! -e "$1/end" ]; do sleep 0.1; done' sh "$dir" >"$dir/other.log" 2>&1 &
	other=$!
	when_finished "touch '$dir/end'; wait $other"
	wait_until "$other" 60 test -e "$dir/up" ||
		why+="the other run did not come up: $(tail -n 3 "$dir/other.log" | tr '\n' '|')"
	wait "$stage" || status=$?
	[ "$status" = 0 ] || why+="the stage beside it exited $status: $(grep -m 2 '^not ok ' "$dir/log" | tr '\n' '|' || true)"
	finish
	pass_unless "$t" "$why"
	modules_restore
}

# in_stage DIR CMD: CMD, in the folder of the stage run with TMPDIR=DIR.
in_stage() { (cd "$1"/host-mode.* && eval "$2") 2>/dev/null; }

# modules_restore: the modules as they were for the tests that follow, if
# no RDMA device needs them.
modules_restore() {
	local m lock
	# Under soft-roce.sh's lock: no run is between its modules and devices.
	exec {lock}>"$(lock_dir)/rdma-pool-doorbell-soft-roce.lock"
	flock "$lock"
	for m in rdma_ucm rdma_rxe dummy; do
		[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || break
		# (Removing dummy deletes every dummy interface: another run's
		# too, before it has a device on it.)
		[ "$m" != dummy ] || [ -z "$(ip -o link show type dummy)" ] || continue
		grep -qx "module $m" <<<"$modules_before" || modprobe -r "$m" 2>/dev/null || true
	done
	exec {lock}>&-
}

# Devices and interfaces named as the harness names its own, left by a run
# that ended without its cleanup (SIGKILL): the next run says so, removes
# them and makes its own, rather than taking them for the machine's.
test_leftover() {
	local log=$work/leftover.log before why='' name i=200 ended names
	before=$(machine_state devices)
	modprobe -a rdma_rxe rdma_ucm dummy
	# Named by the PID of a process that has ended, as such a run's are.
	sh -c : &
	ended=$!
	wait "$ended"
	names="rxe_demo$ended rxe_dem2$ended"
	for name in $names; do
		when_finished "rdma link delete $name 2>/dev/null; ip link delete $name 2>/dev/null"
		ip link add "$name" type dummy && ip link set "$name" up &&
			ip addr add "198.18.0.$((i++))/32" dev "$name" &&
			rdma link add "$name" type rxe netdev "$name" || why+="could not make $name; "
	done
	"$top/scripts/soft-roce.sh" true >"$log" 2>&1 || why+="soft-roce.sh true failed; "
	for name in $names; do
		grep -q "^soft-roce: removing $name, left by a run that has ended\$" "$log" ||
			why+="it did not say it removed $name; "
	done
	grep -Eq "$want_mode" "$log" || why+="it did not make a device of its own; "
	why+=$(left_behind "$before" devices)
	finish # (gone already if it passed)
	pass_unless leftover_removed "${why:+$why: $(tr '\n' '|' <"$log")}"
	modules_restore
}

# A user who makes root's lock file in /run/lock and holds its lock must
# not stall root's runs (see lock_dir).
test_lock_not_users() {
	local lock=/run/lock/rdma-pool-doorbell-soft-roce.lock holder status=0 why=''
	[ -d /run/lock ] || { mkdir -m 1777 /run/lock && when_finished "rmdir /run/lock"; }
	rm -f "$lock" "$lock.held"
	# Each step only once the last worked: .held must mean the lock is held.
	# (nobody's own group, by number, whatever this system calls it.)
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups bash -c \
		': >>"$1" && exec 9<"$1" && flock 9 && : >"$1.held" && exec sleep 600' _ "$lock" 2>"$work/holder.err" &
	holder=$!
	when_finished "kill $holder 2>/dev/null; wait $holder 2>/dev/null; rm -f $lock $lock.held"
	if ! wait_until "$holder" 30 test -e "$lock.held"; then
		why="the user nobody never held $lock: $(tr '\n' '|' <"$work/holder.err")"
	else
		timeout 240 "$top/scripts/soft-roce.sh" true >"$work/lock.log" 2>&1 || status=$?
		[ "$status" = 0 ] ||
			why="soft-roce.sh true exited $status (124: it waited 240 s, for the user's lock?): $(tail -n 3 "$work/lock.log" | tr '\n' '|')"
	fi
	finish
	pass_unless lock_not_users "$why"
}

# In a network namespace, which the machine's own runs never see, every address soft-roce.sh
# could take is already there: it takes none (two make demo at once took one before own_address
# read ip's list whole), and its last line names that as the cause.
test_no_free_address() {
	local t=soft_roce/no_free_address status=0 last before why
	before=$(machine_state)
	unshare -n bash -c 'seq -f "addr add 198.18.0.%g/32 dev lo" 254 | ip -batch - &&
		exec "$1" true' _ "$top/scripts/soft-roce.sh" >"$work/nofree.log" 2>&1 || status=$?
	last=$(tail -n 1 "$work/nofree.log")
	if [ "$status" != 1 ] || [[ $last != "soft-roce: no RDMA device can run here: no free address in 198.18.0.0/24"* ]]; then
		why="exited $status: $(grep '^soft-roce: tried a device of its own' "$work/nofree.log" || true)|$last"
	else
		why=$(left_behind "$before")
	fi
	pass_unless "$t" "$why"
}

# The demo's client dies mid-session: the demo fails, and its cleanup still
# stops the server and removes its folder (its kill of the gone client must
# not end it under set -e); another run's stand-ins, same names, live on.
test_demo_client_dies() {
	local dir=$work/dies before status=0 left why='' k p pid others=() server=()
	mkdir -p "$dir/tmp"
	mkfifo "$dir/keys"
	before=$(machine_state)
	for p in rdma_pool_client rdma_srq_pool_server_ev; do (exec -a "$top/$p" sleep 300) & others+=($!); done
	DEMO_STEP=1 TMPDIR=$dir/tmp make -s -C "$top" demo SANITIZE="${SANITIZE:-}" \
		<"$dir/keys" >"$dir/log" 2>&1 &
	pid=$!
	# Read-write, as demo.sh holds its FIFO: a write to a FIFO nobody reads
	# (the demo ended early) would end this stage by SIGPIPE.
	exec {k}<>"$dir/keys"
	echo >&"$k" # past the view before the client
	wait_until "$pid" 60 grep -q '^== the kernel, once the client holds' "$dir/log" || true
	sleep 2 # the view's rows, then the demo waits for a key
	# make demo's own, by argv[0]:
	mapfile -t server < <(below "$pid" '^ *[0-9]+ [^ ]*/rdma_srq_pool_server_ev( |$)' | awk '{ print $1 }')
	# shellcheck disable=SC2046 # PIDs
	kill -KILL $(below "$pid" '^ *[0-9]+ [^ ]*/rdma_pool_client( |$)' | awk '{ print $1 }') 2>/dev/null ||
		why="no client to kill; "
	echo >&"$k"
	exec {k}>&-
	# Up to 30 s for make demo to end: demo.sh's cleanup stops the server
	# (SIGTERM) and waits, soft-roce.sh then stops what is left.
	wait_until "$pid" 30 false || true
	left=$(alive "${server[@]}")
	[ "${#server[@]}" -gt 0 ] || why+="no server of make demo's; "
	# shellcheck disable=SC2086 # PIDs
	[ -z "$left" ] || { why+="the server outlived make demo; "; kill -KILL $left; }
	wait "$pid" || status=$?
	[ "$status" != 0 ] || why+="make demo exited 0; "
	[ "$(alive "${others[@]}" | wc -l)" = 2 ] || why+="another run's program of the same name was killed; "
	kill "${others[@]}"
	left=$(find "$dir/tmp" -mindepth 1 -maxdepth 1)
	[ -z "$left" ] || why+="left in TMPDIR: $(echo "$left" | tr '\n' ' '); "
	left=$(left_behind "$before")
	why+=${left:+$left; }
	pass_unless demo/client_dies "${why:+$why$(tail -n 3 "$dir/log" | tr '\n' '|')}"
}

if [ "$(id -u)" != 0 ] && [ -z "$(machine_ports)" ]; then
	# The Soft-RoCE tests are never skipped: a run without them is no pass.
	echo "not ok - host_mode/soft_roce: no RDMA device, and only root can make one: run make test as root, which brings Soft-RoCE up itself"
	exit 1
fi
modules_before=$(machine_state modules)
if [ -n "${HOST_MODE_TESTS:-}" ]; then # a part of the stage, for the tests of it
	eval "$HOST_MODE_TESTS"
	report_end
	exit
fi
report_plan
test_demo
if [ -z "$(machine_ports)" ]; then
	test_interrupt interrupt/ctrl_c INT group
	test_interrupt interrupt/sigterm TERM harness
	test_interrupt interrupt/sighup HUP harness
	test_interrupt interrupt/sighup_dead_stderr HUP harness dead-stderr
	test_two_demos
	test_demo_beside_churn
	test_overlapping_runs
	test_leftover
	test_lock_not_users
	test_no_free_address
	test_demo_client_dies
	test_stopped during_churn test_demo_beside_churn "grep -q '^soft-roce: mode' churn/log"
	test_stopped during_overlapping_runs test_overlapping_runs "grep -q '^granted ' overlap/client"
	test_beside_another_run
else
	for t in interrupt stopped beside_another_run two_demos_at_once demo/kernel_view_beside_another_device overlapping_runs leftover_removed lock_not_users soft_roce/no_free_address demo/client_dies; do
		skip "$t" "an RDMA device is already here, and these tests make and remove devices of their own"
	done
fi
test_e2e
report_end
