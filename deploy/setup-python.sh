#!/usr/bin/env bash
# Creates (once) the Python virtual environment the interop tests read tables
# with: PyIceberg with its pyarrow, SQL (SQLite) and Hive extras, plus
# hdfs-native (a pure HDFS RPC client, no JVM or libhdfs) so PyIceberg can
# read an hdfs:// warehouse. Pinned from PyPI; idempotent: a complete venv
# whose pins match is left alone. Prints VENV=<dir> on stdout.
#
#   deploy/setup-python.sh          # $FLOE_CACHE/venv (default ~/.cache/floe/venv)
set -euo pipefail

FLOE_CACHE=${FLOE_CACHE:-$HOME/.cache/floe}
VENV=${FLOE_VENV:-$FLOE_CACHE/venv}
PYTHON=${PYTHON:-python3}

# One requirement a line; the stamp below records them, so changing a pin
# rebuilds the venv.
REQUIREMENTS='pyiceberg[pyarrow,sql-sqlite,hive]==0.12.0
pyarrow==26.0.1
hdfs-native==0.14.7'

# Debian's python3 has no ensurepip (so no venv) without python3-venv.
if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
	echo "setup-python: installing python3-venv" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
fi

mkdir -p "$FLOE_CACHE"
(
	flock 9
	if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.floe-requirements" 2>/dev/null)" = "$REQUIREMENTS" ]; then
		exit 0
	fi
	echo "creating the PyIceberg venv in $VENV (once)" >&2
	rm -rf "$VENV"
	if ! "$PYTHON" -m venv "$VENV" >&2; then
		echo "setup-python: '$PYTHON -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
		exit 1
	fi
	printf '%s\n' "$REQUIREMENTS" >"$VENV/requirements.txt"
	if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$VENV/requirements.txt" >&2; then
		echo "setup-python: pip install of $(echo "$REQUIREMENTS" | tr '\n' ' ') failed (see above)" >&2
		rm -rf "$VENV"
		exit 1
	fi
	printf '%s' "$REQUIREMENTS" >"$VENV/.floe-requirements"
) 9>"$FLOE_CACHE/venv.lock"
echo "VENV=$VENV"
