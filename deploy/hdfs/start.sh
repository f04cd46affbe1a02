#!/usr/bin/env bash
# start.sh DIR: runs an HDFS NameNode and DataNode (Hadoop's Maven jars, two
# JVMs) on 127.0.0.1 with data, config and logs under DIR, waits until the
# DataNode is registered and a file can be written and read back, and prints
#   NAMENODE=127.0.0.1:PORT   the NameNode RPC address (fs.defaultFS hdfs://NAMENODE)
#   NAMENODE_HTTP=127.0.0.1:PORT
#   USER=NAME                 the HDFS superuser (the user running the daemons)
#   CONF_DIR=DIR/conf         core-site.xml and hdfs-site.xml for Hadoop clients
# A DIR that was started before is started again with its data and ports.
# Stop with stop.sh DIR. Progress and errors go to stderr, logs to DIR/*.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
hadoop_version=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$here/pom.xml")
command -v java >/dev/null || { echo "hdfs: java not found (Java 17 is needed)" >&2; exit 1; }
command -v curl >/dev/null || { echo "hdfs: curl not found" >&2; exit 1; }
# The cache is keyed by the pom's content, so a changed pom fetches anew.
lib=$(fetch_jars "hadoop-$hadoop_version-$(sha1sum "$here/pom.xml" | cut -c1-8)" "$here/pom.xml")

user=$(id -un)
if [ ! -f "$dir/ports.env" ]; then
	{
		echo "NN_PORT=$(free_port)"
		echo "NN_HTTP_PORT=$(free_port)"
		echo "NN_HTTPS_PORT=$(free_port)"
		echo "DN_PORT=$(free_port)"
		echo "DN_HTTP_PORT=$(free_port)"
		echo "DN_HTTPS_PORT=$(free_port)"
		echo "DN_IPC_PORT=$(free_port)"
	} >"$dir/ports.env"
fi
. "$dir/ports.env"

mkdir -p "$dir/conf" "$dir/tmp"
for f in core-site.xml hdfs-site.xml; do
	sed -e "s|@DIR@|$dir|g" -e "s|@USER@|$user|g" \
		-e "s|@NN_PORT@|$NN_PORT|g" -e "s|@NN_HTTP_PORT@|$NN_HTTP_PORT|g" \
		-e "s|@NN_HTTPS_PORT@|$NN_HTTPS_PORT|g" -e "s|@DN_PORT@|$DN_PORT|g" \
		-e "s|@DN_HTTP_PORT@|$DN_HTTP_PORT|g" -e "s|@DN_HTTPS_PORT@|$DN_HTTPS_PORT|g" \
		-e "s|@DN_IPC_PORT@|$DN_IPC_PORT|g" "$here/$f.in" >"$dir/conf/$f"
done
cp "$here/log4j.properties" "$dir/conf/"
# The Maven jars carry no web UI, but the daemons' HTTP servers (which serve
# /jmx, used below) insist on finding webapps/<name> on the classpath.
mkdir -p "$dir/web/webapps/hdfs" "$dir/web/webapps/datanode" "$dir/web/webapps/static"

# Hadoop 3.4 on Java 17: open the JDK internals it reflects into; small heaps
# and the C1 compiler only, so two daemons start fast on a shared 2-core box.
jvm=(java -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
	--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
	--add-opens=java.base/sun.net.dns=ALL-UNNAMED --add-opens=java.base/sun.net.util=ALL-UNNAMED
	--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED
	-Dhadoop.log.dir="$dir" -Dhadoop.home.dir="$dir" -Dhadoop.security.logger=WARN,console
	-cp "$dir/conf:$dir/web:$lib/*")

if [ ! -d "$dir/name/current" ]; then
	echo "hdfs: formatting the NameNode in $dir/name" >&2
	if ! "${jvm[@]}" org.apache.hadoop.hdfs.server.namenode.NameNode -format -force -nonInteractive \
		>"$dir/format.log" 2>&1; then
		echo "hdfs: namenode -format failed; last lines of $dir/format.log:" >&2
		tail -n 30 "$dir/format.log" >&2
		exit 1
	fi
fi

# daemon NAME CLASS: starts CLASS in the background with its pid in DIR/NAME.pid.
daemon() {
	local name=$1 class=$2
	if [ -f "$dir/$name.pid" ] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
		echo "hdfs: $name already running (pid $(cat "$dir/$name.pid"))" >&2
		return 0
	fi
	setsid nohup "${jvm[@]}" "$class" >>"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

# live_datanodes_is N: the NameNode's JMX reports N live DataNodes (it answers
# only once its RPC server and namesystem are up).
live_datanodes_is() {
	curl -sf "http://127.0.0.1:$NN_HTTP_PORT/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState" |
		grep -q "\"NumLiveDataNodes\" : $1\b"
}

# write_works: a file is written through the DataNode, read back and deleted
# (WebHDFS: the NameNode redirects to the DataNode, as an RPC client's write
# goes to the DataNode the NameNode names).
write_works() {
	local url="http://127.0.0.1:$NN_HTTP_PORT/webhdfs/v1/.floe-start-probe"
	echo "floe start probe" >"$dir/tmp/probe"
	curl -sf -L -X PUT -T "$dir/tmp/probe" "$url?op=CREATE&overwrite=true&user.name=$user" &&
		[ "$(curl -sf -L "$url?op=OPEN&user.name=$user")" = "floe start probe" ] &&
		curl -sf -X DELETE "$url?op=DELETE&user.name=$user" | grep -q true
}

echo "hdfs: starting NameNode on 127.0.0.1:$NN_PORT" >&2
daemon namenode org.apache.hadoop.hdfs.server.namenode.NameNode
wait_for "HDFS NameNode" 90 "$(cat "$dir/namenode.pid")" "$dir/namenode.log" live_datanodes_is 0

echo "hdfs: starting DataNode on 127.0.0.1:$DN_PORT" >&2
daemon datanode org.apache.hadoop.hdfs.server.datanode.DataNode
wait_for "HDFS DataNode" 90 "$(cat "$dir/datanode.pid")" "$dir/datanode.log" live_datanodes_is 1
wait_for "HDFS write check" 60 "$(cat "$dir/datanode.pid")" "$dir/datanode.log" write_works

echo "NAMENODE=127.0.0.1:$NN_PORT"
echo "NAMENODE_HTTP=127.0.0.1:$NN_HTTP_PORT"
echo "USER=$user"
echo "CONF_DIR=$dir/conf"
