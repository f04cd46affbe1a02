#!/usr/bin/env bash
# stop.sh DIR: stops the broker start.sh started in DIR (SIGTERM, a clean
# shutdown, then SIGKILL after 20 s). Data stays in DIR; start.sh DIR VERSION
# starts it again.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"
if [ $# -ne 1 ]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
pidfile=$1/kafka.pid
[ -f "$pidfile" ] || exit 0
# A broker SIGKILLed by a test may linger as a zombie: nothing to stop.
st=$(proc_state "$(cat "$pidfile")")
if [ -z "$st" ] || [ "$st" = Z ]; then
	rm -f "$pidfile"
	exit 0
fi
stop_pid "$pidfile" 20
