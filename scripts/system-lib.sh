# system-lib.sh: which system this is, its names for what the project needs
# (scripts/packages.txt), and a run's locks, folders, signals and stops.
#
#   read_os_release        sets os_id, os_like, os_version and os_name from OS_RELEASE (fails
#                          if it cannot be read), else /etc/os-release (never run: read)
#   system_keys            the table's keys for this system, most specific
#                          first: rocky-9.3, rocky-9, rocky, rhel-9.3, ...
#   manager                apt or dnf (empty if neither)
#   packages_for ENTRY...  of one row's system=packages entries, this
#                          system's packages ("-", "!", "?", or empty if none)
#   packages_of NEED       the same, looked up by the row's need
#   install_line PKG...    the command a user pastes to install them
#   static_elf FILE        true if FILE is an x86-64 program that needs no
#                          dynamic loader (no PT_INTERP program header)
#   lock_dir               where a run's lock files go (root's in a folder of /run only root
#                          can write; a user's in /run/lock, else TMPDIR or /tmp)
#   run_dir FINAL          makes and prints a folder of this run's own
#                          beside the folder FINAL (FINAL.run.XXXXXX)
#   publish_dir RUN FINAL  RUN takes FINAL's place: FINAL always holds one
#                          whole run, never two runs' files mixed
#   stop_on_signals FN     on SIGINT, SIGTERM or SIGHUP: FN SIG, then end
#                          by that signal (no EXIT trap)
#   stop_session SID [S]   SIGTERM to every process of session SID, SIGKILL
#                          to those left S (5) seconds later

PACKAGES_TABLE=$(dirname "${BASH_SOURCE[0]}")/packages.txt

read_os_release() {
	local file=${OS_RELEASE:-/etc/os-release} key value
	os_id='' os_like='' os_version='' os_name=''
	[ -z "${OS_RELEASE:-}" ] || [ -r "$file" ] || { echo "${0##*/}: cannot read OS_RELEASE=$file" >&2; return 1; }
	[ -r "$file" ] || file=/usr/lib/os-release
	[ -r "$file" ] || file=/dev/null # none: an unknown system
	while IFS='=' read -r key value; do
		value=${value#[\"\']} value=${value%[\"\']}
		case $key in
		ID) os_id=$value ;;
		ID_LIKE) os_like=$value ;;
		VERSION_ID) os_version=$value ;;
		PRETTY_NAME) os_name=$value ;;
		esac
	done <"$file"
	os_name=${os_name:-${os_id:-an unknown system}}
}

system_keys() {
	local name
	for name in $os_id $os_like; do
		[ -z "$os_version" ] || echo "$name-$os_version"
		[ "${os_version%%.*}" = "$os_version" ] || echo "$name-${os_version%%.*}"
		echo "$name"
	done
}

manager() {
	local key
	for key in $(system_keys); do
		case $key in
		debian | ubuntu) echo apt; return ;;
		fedora | rhel | centos) echo dnf; return ;;
		esac
	done
}

packages_for() {
	local key entry
	for key in $(system_keys); do
		for entry in "$@"; do
			[ "${entry%%=*}" = "$key" ] || continue
			echo "${entry#*=}" | tr ',' ' ' | sed "s/\$KVER/$(uname -r)/g"
			return
		done
	done
}

packages_of() {
	local need rest entries
	while read -r _ need _ rest; do
		[ "$need" = "$1" ] || continue
		read -ra entries <<<"${rest%%#*}"
		packages_for "${entries[@]}"
		return
	done < <(grep -v '^#' "$PACKAGES_TABLE")
}

install_line() {
	case $(manager) in
	apt) echo "sudo apt-get install -y --no-install-recommends $*" ;;
	dnf) echo "sudo dnf install -y $*" ;;
	*) echo "install $* with this system's package manager" ;;
	esac
}

# ldd cannot tell: it exits 0 on a static-pie program (measured on Debian
# 12: gcc -static-pie).  PT_INTERP, which names the loader, is 3 (elf(5)).
static_elf() {
	local f=$1 hdr phoff size num i
	[ -r "$f" ] || return 1
	# "\177ELF", 64-bit (class 2), little-endian (data 1), and e_machine
	# (2 bytes at offset 18) 62, EM_X86_64 (elf(5)).
	hdr=$(od -An -t x1 -N 20 "$f" | tr -d ' \n') || return 1
	[ "${hdr:0:12}" = 7f454c460201 ] && [ "${hdr:36:4}" = 3e00 ] || return 1
	phoff=$(od -An -t u8 -j 32 -N 8 "$f" | tr -d ' ')
	read -r size num < <(od -An -t u2 -j 54 -N 4 "$f") || return 1 # too short
	for ((i = 0; i < num; i++)); do
		[ "$(od -An -t u4 -j $((phoff + i * size)) -N 4 "$f" | tr -d ' ')" != 3 ] || return 1
	done
}

lock_dir() {
	local own=/run/rdma-pool-doorbell
	if [ "$(id -u)" != 0 ]; then
		if [ -d /run/lock ] && [ -w /run/lock ]; then echo /run/lock; else echo "${TMPDIR:-/tmp}"; fi
		return 0
	fi
	# Root's in a folder only root can write: in /run/lock (mode 1777)
	# any user could make root's lock file first, or hold its lock.
	[ -e "$own" ] || mkdir -m 700 "$own" 2>/dev/null || true
	{ [ -d "$own" ] && [ ! -L "$own" ] && [ "$(stat -c %u "$own")" = 0 ]; } ||
		{ echo "cannot make $own, a folder for root's locks" >&2; return 1; }
	echo "$own"
}

# Two runs at once (two make bench, each in its own VM, on one clone) each
# write into their own folder; FINAL holds the last to finish.
run_dir() {
	local dir
	mkdir -p "$(dirname "$1")" && dir=$(mktemp -d "$1.run.XXXXXX") && chmod 755 "$dir" && echo "$dir"
}

publish_dir() {
	rm -rf "$1.old"
	[ ! -e "$2" ] || mv -T "$2" "$1.old" || return 1
	mv -T "$1" "$2" && rm -rf "$1.old"
}

# stop_on_signals FN (see the header): the script ends by the signal, its EXIT trap undone, so
# that the shell or make that started it stops too. FN runs at once only while the script waits
# ("wait") for a command in the background: bash holds a trap until the command in the foreground
# ends. Meanwhile more signals are ignored, SIGPIPE too: a closed terminal (EIO) or a pipe whose
# reader is gone (EPIPE) fails every write to stderr, so FN writes its first line with
# "|| exec 2>/dev/null", lest set -e end it there.
stop_on_signals() {
	local sig
	for sig in INT TERM HUP; do
		# shellcheck disable=SC2064 # FN and the signal, now
		trap "trap '' INT TERM HUP PIPE; $1 $sig; trap - EXIT $sig; kill -s $sig \$\$" "$sig"
	done
}

# session_pids SID: the processes of session SID (the fourth field of
# /proc/PID/stat after the ")" that ends the command's name), but zombies
# (state Z, the first field): ended, they wait only for a parent to reap them.
session_pids() {
	local stat line fields
	for stat in /proc/[0-9]*/stat; do
		read -r line 2>/dev/null <"$stat" || continue
		read -r -a fields <<<"${line##*) }"
		[ "${fields[3]:-}" = "$1" ] && [ "${fields[0]}" != Z ] && echo "${stat//[^0-9]/}"
	done
	return 0
}

# stop_session SID [SECONDS]: by session, not by process group: timeout(1)
# moves itself and its command into a group of their own.
stop_session() { stop_all "${2:-5}" session_pids "$1"; }

# stop_below SECONDS: the same for every process this script started, and
# theirs: the background jobs of a script are not stopped with it (bash
# starts them with SIGINT ignored), and may be in groups of their own.
# shellcheck disable=SC2046 # PIDs, one word each
stop_below() { stop_all "$1" alive $(descendants $$); }

# stop_all SECONDS CMD...: SIGTERM to the PIDs CMD lists, SIGKILL to those left SECONDS later.
# shellcheck disable=SC2086 # PIDs, one word each
stop_all() {
	local secs=$1 pids i
	shift
	pids=$("$@")
	[ -n "$pids" ] || return 0
	kill -TERM $pids 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		pids=$("$@")
		[ -n "$pids" ] || return 0
		sleep 0.1
	done
	echo "${0##*/}: still running $secs s after SIGTERM, killed: ${pids//$'\n'/ }" >&2
	kill -KILL $pids 2>/dev/null || true
}

# descendants PID: the processes below PID now (an orphan belongs to init, no longer below it).
descendants() {
	ps -e -o pid=,ppid= | awk -v top="$1" '{ kids[$2] = kids[$2] " " $1 }
		END { n = split(kids[top], q, " ")
			for (i = 1; i <= n; i++) {
				print q[i]
				m = split(kids[q[i]], more, " ")
				for (j = 1; j <= m; j++) q[++n] = more[j]
			} }'
}

# alive PID...: those of them that still run (not ended, nor a zombie).
alive() {
	local pid stat
	for pid; do
		read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
		stat=${stat##*) }
		[ "${stat%% *}" = Z ] || echo "$pid"
	done
}
