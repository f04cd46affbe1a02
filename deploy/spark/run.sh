#!/usr/bin/env bash
# Spark reads what floe wrote: runs `floe demo` (embedded broker, reference
# enrichment server, SQLite catalog, local warehouse) and then pyspark with
# Iceberg's Spark runtime on the same catalog and warehouse, running the
# analyst queries of deploy/spark/queries.py. Exits non-zero if Spark cannot
# read the table or a check fails.
#
#   deploy/spark/run.sh [RECORDS]       (make interop-spark; default 200000)
#
# pyspark goes into a virtual environment under $FLOE_CACHE (default
# ~/.cache/floe), the jars come from Maven Central (deploy/spark/pom.xml);
# both are fetched once. Needs Java 17, python3 and mvn.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"

records=${1:-200000}
# Spark's driver and executor talk over loopback only.
export SPARK_LOCAL_IP=127.0.0.1
pyspark_version=3.5.8

for tool in java python3 mvn go; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 2; }
done

venv="$FLOE_CACHE/spark-venv-$pyspark_version"
mkdir -p "$FLOE_CACHE"
(
	flock 9
	if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import pyspark" 2>/dev/null; then
		echo "installing pyspark $pyspark_version into $venv (once)" >&2
		rm -rf "$venv"
		python3 -m venv "$venv"
		"$venv/bin/pip" install --quiet --disable-pip-version-check "pyspark==$pyspark_version"
	fi
) 9>"$FLOE_CACHE/spark-venv.lock"

# The jar set is keyed by the POM's content, so a changed POM fetches anew.
name="spark-jars-$(sha1sum "$here/pom.xml" | cut -c1-8)"
jars=$(fetch_jars "$name" "$here/pom.xml")
classpath=$(find "$jars" -name '*.jar' | sort | paste -sd, -)

work=$(mktemp -d "${TMPDIR:-/tmp}/floe-spark.XXXXXX")
trap 'rm -rf "$work"' EXIT

(cd "$root" && go build -o "$work/floe" ./cmd/floe)
echo "== floe demo --records $records" >&2
"$work/floe" demo --records "$records" --rate 0 --dir "$work/demo" --json >"$work/verify.json"

echo "== Spark $pyspark_version with $(basename "$(find "$jars" -name 'iceberg-spark-runtime*.jar')") reads floe.demo.clicks" >&2
"$venv/bin/python" "$here/queries.py" \
	--jars "$classpath" \
	--catalog-uri "jdbc:sqlite:$work/demo/catalog.db" \
	--warehouse "file://$work/demo/warehouse" \
	--table demo.clicks \
	--group floe-demo \
	--verify "$work/verify.json"
