#!/usr/bin/env bash
# stop.sh DIR: stops the Hive Metastore that start.sh DIR started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
stop_pid "$1/hms.pid" 20
