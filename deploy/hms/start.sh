#!/usr/bin/env bash
# start.sh DIR [WAREHOUSE]: runs a Hive standalone metastore (Hive 3.1.3 from
# Maven Central) on embedded Derby in DIR/metastore_db, its Thrift port on
# 127.0.0.1 (no SASL), default warehouse WAREHOUSE (default
# file://DIR/warehouse; hdfs://host:port/path works, written as the user
# HADOOP_USER_NAME, default the current user). The schema is created with
# MetastoreSchemaTool -initSchema -dbType derby on first start. Waits until
# the metastore answers a get_all_databases call, and prints
#   URI=thrift://127.0.0.1:PORT
#   WAREHOUSE=...
# A DIR that was started before is started again with its data and port.
# Stop with stop.sh DIR. Progress and errors go to stderr, logs to DIR/*.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DIR [WAREHOUSE]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
case $dir in
*";"*) echo "hms: DIR $dir: Derby's database URL cannot hold a ';'" >&2; exit 2 ;;
esac
warehouse=${2:-file://$dir/warehouse}
case $warehouse in
file://*) mkdir -p "${warehouse#file://}"; default_fs=file:/// ;;
hdfs://*) default_fs=$(echo "$warehouse" | sed -E 's|^(hdfs://[^/]+).*|\1|') ;;
*) echo "hms: warehouse $warehouse: want file:///path or hdfs://host:port/path" >&2; exit 2 ;;
esac
command -v java >/dev/null || { echo "hms: java not found (Java 17 is needed)" >&2; exit 1; }
command -v javac >/dev/null || { echo "hms: javac not found (a Java 17 JDK is needed)" >&2; exit 1; }
hive_version=$(sed -n 's:.*<hive.version>\(.*\)</hive.version>.*:\1:p' "$here/pom.xml")
# The cache is keyed by the pom's content, so a changed pom fetches anew.
name="hive-metastore-$hive_version-$(sha1sum "$here/pom.xml" | cut -c1-8)"
lib=$(fetch_jars "$name" "$here/pom.xml")
home="$FLOE_CACHE/$name/home"
(
	flock 9
	if [ ! -d "$home/scripts/metastore/upgrade/derby" ]; then
		mkdir -p "$home"
		tar xzf "$lib/hive-standalone-metastore-$hive_version-bin.tar.gz" -C "$home" --strip-components=1 \
			--wildcards '*/scripts/metastore/upgrade/derby/*'
	fi
	if [ ! -f "$home/ready/Ready.class" ]; then
		mkdir -p "$home/ready"
		javac -nowarn -d "$home/ready" -cp "$lib/*" "$here/Ready.java" >&2
	fi
) 9>"$FLOE_CACHE/$name/.home.lock"

if [ -f "$dir/hms.pid" ] && kill -0 "$(cat "$dir/hms.pid")" 2>/dev/null; then
	echo "hms: already running in $dir (pid $(cat "$dir/hms.pid"))" >&2
	exit 1
fi
[ -f "$dir/port" ] || free_port >"$dir/port"
port=$(cat "$dir/port")
mkdir -p "$dir/conf"
render "$here/metastore-site.xml.in" DIR="$dir" PORT="$port" WAREHOUSE="$warehouse" DEFAULT_FS="$default_fs" \
	>"$dir/conf/metastore-site.xml"
cp "$here/log4j2.properties" "$dir/conf/"

export HADOOP_USER_NAME=${HADOOP_USER_NAME:-$(id -un)}
export METASTORE_HOME=$home
# Hive 3 on Java 17: open the JDK internals it (and DataNucleus) reflect into.
jvm=(java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
	--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
	--add-opens=java.sql/java.sql=ALL-UNNAMED
	-Dlog4j.configurationFile="$dir/conf/log4j2.properties" -Dderby.stream.error.file="$dir/derby.log"
	-Dmetastore.home="$home" -cp "$dir/conf:$lib/*")

if [ ! -d "$dir/metastore_db" ]; then
	echo "hms: creating the metastore schema in $dir/metastore_db" >&2
	if ! "${jvm[@]}" org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool \
		-initSchema -dbType derby -userName APP -passWord mine >"$dir/schematool.log" 2>&1; then
		echo "hms: schematool -initSchema failed; last lines of $dir/schematool.log:" >&2
		tail -n 30 "$dir/schematool.log" >&2
		rm -rf "$dir/metastore_db"
		exit 1
	fi
fi

touch "$dir/hms.log"
log_from=$(( $(stat -c %s "$dir/hms.log") + 1 ))
setsid nohup "${jvm[@]}" org.apache.hadoop.hive.metastore.HiveMetaStore -p "$port" \
	>>"$dir/hms.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/hms.pid"
# ready: the metastore answers; a start-up that failed in main (the JVM lingers
# on its other threads) is killed, so wait_for reports it at once.
ready() {
	if tail -c "+$log_from" "$dir/hms.log" | grep -q 'Exception in thread "main"'; then
		kill "$pid" 2>/dev/null
		return 1
	fi
	java -Xmx64m -XX:TieredStopAtLevel=1 -cp "$home/ready:$lib/*" Ready "$port"
}
if ! wait_for "Hive Metastore" 120 "$pid" "$dir/hms.log" ready; then
	rm -f "$dir/hms.pid"
	exit 1
fi
echo "hms: Hive Metastore $hive_version on 127.0.0.1:$port (pid $pid, warehouse $warehouse)" >&2
echo "URI=thrift://127.0.0.1:$port"
echo "WAREHOUSE=$warehouse"
