#!/usr/bin/env bash
# stop.sh DIR: stops the KDC start.sh started in DIR (SIGTERM, SIGKILL after
# 10 s). The keytab and krb5.conf stay in DIR but name a KDC that is gone.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"
if [ $# -ne 1 ]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
stop_pid "$1/kdc.pid" 10
