# Shared by deploy/*/start.sh and stop.sh: fetching jars from Maven Central
# into a cache that survives between runs, free ports, waiting for a service.
# Source it; every function reports failures on stderr and returns non-zero.

FLOE_CACHE=${FLOE_CACHE:-$HOME/.cache/floe}

# fetch_jars NAME POM [MVN_ARGS...]: copies POM's runtime dependencies into
# $FLOE_CACHE/NAME/lib the first time (under a lock, so concurrent starts
# fetch once) and prints that directory. A jar whose checksum does not match
# the repository's fails the fetch (mvn --strict-checksums).
fetch_jars() {
	local name=$1 pom=$2
	shift 2
	local dir="$FLOE_CACHE/$name"
	mkdir -p "$dir"
	(
		flock 9
		if [ ! -f "$dir/.done" ]; then
			echo "fetching $name from Maven Central (once; cached in $dir)" >&2
			rm -rf "$dir/lib"
			if ! mvn -q -B --strict-checksums -f "$pom" "$@" dependency:copy-dependencies \
				-DincludeScope=runtime -DoutputDirectory="$dir/lib" >&2; then
				echo "fetching $name from Maven Central failed (see mvn output above)" >&2
				exit 1
			fi
			touch "$dir/.done"
		fi
	) 9>"$dir/.lock" || return 1
	echo "$dir/lib"
}

# render TEMPLATE NAME=VALUE...: prints TEMPLATE (a Hadoop or Hive site
# file) with each @NAME@ replaced by VALUE, escaped for XML. Unlike sed with
# the values in its script, a VALUE may hold any character (a directory
# named "a|b & c" among them).
render() {
	local text kv v
	text=$(<"$1") || return 1
	shift
	for kv; do
		v=${kv#*=}
		v=${v//"&"/"&amp;"}
		v=${v//"<"/"&lt;"}
		v=${v//">"/"&gt;"}
		text=${text//"@${kv%%=*}@"/"$v"}
	done
	printf '%s\n' "$text"
}

# free_port [N]: prints N (default 1) distinct TCP ports, one a line, that
# were free on 127.0.0.1 a moment ago. They are drawn below the kernel's
# ephemeral range, not from it (as binding port 0 would): a port stays
# unbound until the service starts, seconds later, and meanwhile the kernel
# hands ephemeral ports to every listener on port 0 and every outgoing
# connection, such as those of tests running beside. Each is held bound
# until all are drawn, so one call never prints a port twice.
free_port() {
	python3 - "${1:-1}" <<'PY'
import random, socket, sys
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
held = []
for _ in range(int(sys.argv[1])):
    for port in random.sample(range(10000, low), min(100, max(low - 10000, 0))) + [0]:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
        break
    else:
        sys.exit("free_port: no free port")
for s in held:
    print(s.getsockname()[1])
    s.close()
PY
}

# wait_for NAME SECONDS PID LOG COMMAND...: runs COMMAND every half second
# until it succeeds; fails with the log's tail if PID dies or time runs out.
wait_for() {
	local name=$1 secs=$2 pid=$3 log=$4
	shift 4
	local deadline=$(( $(date +%s) + secs ))
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$name exited during start-up; last lines of $log:" >&2
			tail -n 30 "$log" >&2
			return 1
		fi
		if [ "$(date +%s)" -ge "$deadline" ]; then
			echo "$name did not answer within ${secs}s; last lines of $log:" >&2
			tail -n 30 "$log" >&2
			kill "$pid" 2>/dev/null
			return 1
		fi
		sleep 0.5
	done
}

# port_open PORT: succeeds when something listens on 127.0.0.1:PORT.
port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# proc_state PID: the process's state letter (Z: a zombie), nothing when
# there is no such process. Read from /proc: procps (ps) may be missing.
proc_state() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	s=${s##*) }
	printf '%s' "${s%% *}"
}

# stop_pid PIDFILE [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 20).
stop_pid() {
	local pidfile=$1 secs=${2:-20} pid
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
	for _ in $(seq $(( secs * 2 ))); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
		sleep 0.5
	done
	kill -9 "$pid" 2>/dev/null
	rm -f "$pidfile"
}
