#!/usr/bin/env bash
# start.sh DIR [WAREHOUSE]: runs Iceberg's REST catalog test fixture
# (org.apache.iceberg.rest.RESTCatalogServer, the server of the
# apache/iceberg-rest-fixture image, through LoopbackServer.java so it
# listens on 127.0.0.1 only) with a JdbcCatalog on SQLite in
# DIR/cat.db, the warehouse WAREHOUSE (default file://DIR/warehouse; an
# hdfs://host:port/path warehouse works through HadoopFileIO, written as the
# user HADOOP_USER_NAME, default the current user), waits until GET /v1/config
# answers, and prints
#   URI=http://127.0.0.1:PORT   the catalog's base URI (catalog property uri)
#   WAREHOUSE=...               the warehouse it writes new tables to
# Stop with stop.sh DIR. Progress and errors go to stderr, the log to DIR/rest.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DIR [WAREHOUSE]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
warehouse=${2:-file://$dir/warehouse}
case $warehouse in
file://*) mkdir -p "${warehouse#file://}" ;;
hdfs://*) ;;
*) echo "rest: warehouse $warehouse: want file:///path or hdfs://host:port/path" >&2; exit 2 ;;
esac
command -v java >/dev/null || { echo "rest: java not found (Java 17 is needed)" >&2; exit 1; }
command -v javac >/dev/null || { echo "rest: javac not found (a Java 17 JDK is needed)" >&2; exit 1; }
command -v curl >/dev/null || { echo "rest: curl not found" >&2; exit 1; }
iceberg_version=$(sed -n 's:.*<iceberg.version>\(.*\)</iceberg.version>.*:\1:p' "$here/pom.xml")
# The cache is keyed by the pom's content, so a changed pom fetches anew.
name="iceberg-rest-$iceberg_version-$(sha1sum "$here/pom.xml" | cut -c1-8)"
lib=$(fetch_jars "$name" "$here/pom.xml")
# LoopbackServer: the fixture on 127.0.0.1 only, compiled once per source.
launcher="$FLOE_CACHE/$name/loopback-$(sha1sum "$here/LoopbackServer.java" | cut -c1-8)"
(
	flock 9
	if [ ! -d "$launcher" ]; then
		javac -nowarn -d "$launcher.tmp" -cp "$lib/*" "$here/LoopbackServer.java" >&2 && mv "$launcher.tmp" "$launcher"
	fi
) 9>"$FLOE_CACHE/$name/.launcher.lock"

if [ -f "$dir/rest.pid" ] && kill -0 "$(cat "$dir/rest.pid")" 2>/dev/null; then
	echo "rest: already running in $dir (pid $(cat "$dir/rest.pid"))" >&2
	exit 1
fi
port=$(free_port)

# RESTCatalogServer turns CATALOG_FOO__BAR_BAZ into the catalog property
# foo-bar.baz; rest.port is read from the same properties.
env \
	CATALOG_REST_PORT="$port" \
	CATALOG_WAREHOUSE="$warehouse" \
	CATALOG_URI="jdbc:sqlite:file:$dir/cat.db" \
	CATALOG_JDBC_SCHEMA__VERSION=V1 \
	CATALOG_IO__IMPL=org.apache.iceberg.hadoop.HadoopFileIO \
	HADOOP_USER_NAME="${HADOOP_USER_NAME:-$(id -un)}" \
	setsid nohup java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true \
	--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED \
	--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
	-Dorg.slf4j.simpleLogger.defaultLogLevel=info \
	-cp "$launcher:$lib/*" org.apache.iceberg.rest.LoopbackServer >>"$dir/rest.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/rest.pid"

if ! wait_for "Iceberg REST catalog" 90 "$pid" "$dir/rest.log" \
	curl -fsS --max-time 2 "http://127.0.0.1:$port/v1/config"; then
	rm -f "$dir/rest.pid"
	exit 1
fi
echo "rest: Iceberg REST catalog $iceberg_version on 127.0.0.1:$port (pid $pid, warehouse $warehouse)" >&2
echo "URI=http://127.0.0.1:$port"
echo "WAREHOUSE=$warehouse"
