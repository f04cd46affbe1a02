#!/usr/bin/env bash
# Creates (once) the Python virtual environment the interop tests read tables
# with: PyIceberg with its pyarrow, SQL (SQLite) and Hive extras, plus
# hdfs-native (a pure HDFS RPC client, no JVM or libhdfs) so PyIceberg can
# read an hdfs:// warehouse. Pinned from PyPI, their dependencies too (a
# pip constraints list, so a new release of one cannot change what the
# tests run on); idempotent: a complete venv whose pins match is left alone.
# Prints VENV=<dir> on stdout.
#
#   deploy/setup-python.sh          # $FLOE_CACHE/venv (default ~/.cache/floe/venv)
set -euo pipefail

FLOE_CACHE=${FLOE_CACHE:-$HOME/.cache/floe}
VENV=${FLOE_VENV:-$FLOE_CACHE/venv}
PYTHON=${PYTHON:-python3}

# One requirement a line; the stamp below records them and the constraints,
# so changing a pin rebuilds the venv.
REQUIREMENTS='pyiceberg[pyarrow,sql-sqlite,hive]==0.12.0
pyarrow==26.0.1
hdfs-native==0.14.7'
# Every package those pull in, as `pip freeze` listed them in a venv made
# from REQUIREMENTS alone (2026-12-01). A pin changed above may need these
# changed too: pip then names the conflict.
CONSTRAINTS='annotated-types==0.8.0
argcomplete==3.7.2
cachetools==8.0.2
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
fsspec==2026.9.0
idna==3.20
markdown-it-py==4.3.0
mdurl==0.1.2
mmh3==5.3.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
pyparsing==3.3.3
pyroaring==1.2.0
python-dateutil==4.0.0
requests==2.34.2
rich==15.0.0
SQLAlchemy==2.1.9
strictyaml==1.7.3
tenacity==9.2.1
thrift==0.25.0
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
zstandard==0.25.0'

# Debian's python3 has no ensurepip (so no venv) without python3-venv.
if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
	echo "setup-python: installing python3-venv" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
fi

mkdir -p "$FLOE_CACHE"
(
	flock 9
	if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.floe-requirements" 2>/dev/null)" = "$REQUIREMENTS
$CONSTRAINTS" ]; then
		exit 0
	fi
	echo "creating the PyIceberg venv in $VENV (once)" >&2
	rm -rf "$VENV"
	if ! "$PYTHON" -m venv "$VENV" >&2; then
		echo "setup-python: '$PYTHON -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
		exit 1
	fi
	printf '%s\n' "$REQUIREMENTS" >"$VENV/requirements.txt"
	printf '%s\n' "$CONSTRAINTS" >"$VENV/constraints.txt"
	if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$VENV/requirements.txt" \
		-c "$VENV/constraints.txt" >&2; then
		echo "setup-python: pip install of $(echo "$REQUIREMENTS" | tr '\n' ' ') failed (see above)" >&2
		rm -rf "$VENV"
		exit 1
	fi
	printf '%s\n%s' "$REQUIREMENTS" "$CONSTRAINTS" >"$VENV/.floe-requirements"
) 9>"$FLOE_CACHE/venv.lock"
echo "VENV=$VENV"
