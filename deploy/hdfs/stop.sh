#!/usr/bin/env bash
# stop.sh DIR: stops the DataNode and NameNode that start.sh DIR started
# (SIGTERM, SIGKILL after 20 s). The data stays in DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
stop_pid "$1/datanode.pid"
stop_pid "$1/namenode.pid"
