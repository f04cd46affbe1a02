#!/usr/bin/env bash
# start.sh DIR [--kerberos KDC_DIR]: runs an HDFS NameNode and DataNode
# (Hadoop's Maven jars, two JVMs) on 127.0.0.1 with data, config and logs
# under DIR, waits until the DataNode is registered and a file can be written
# and read back, and prints
#   NAMENODE=127.0.0.1:PORT   the NameNode RPC address (fs.defaultFS hdfs://NAMENODE)
#   NAMENODE_HTTP=127.0.0.1:PORT   (NAMENODE_HTTPS with --kerberos)
#   USER=NAME                 the HDFS superuser (the user running the daemons)
#   CONF_DIR=DIR/conf         core-site.xml and hdfs-site.xml for Hadoop clients
#
# --kerberos KDC_DIR: a secure cluster against the KDC deploy/kdc/start.sh
# started in KDC_DIR (its kdc.env; it must hold the principals nn/localhost,
# dn/localhost and HTTP/localhost): hadoop.security.authentication=kerberos,
# RPC protection "authentication", block access tokens, the DataNode on
# unprivileged ports with SASL data transfer protection "authentication"
# (dfs.data.transfer.protection) and both daemons' web servers HTTPS only (a
# keystore made with keytool; no jsvc). The superuser is then "nn" (the
# NameNode's principal), and the principal floe@REALM is mapped into the
# superuser group (hadoop.user.group.static.mapping.overrides). Also printed:
#   REALM=…  KRB5_CONF=…  KEYTAB=…  (from kdc.env)
#   NAMENODE_PRINCIPAL=nn/localhost@REALM   (dfs.namenode.kerberos.principal)
#   DATA_TRANSFER_PROTECTION=authentication
# The start check is then a Hadoop client (Probe.java) logged in from the
# keytab writing, reading and deleting a file.
#
# A DIR that was started before is started again with its data and ports.
# Stop with stop.sh DIR. Progress and errors go to stderr, logs to DIR/*.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

usage() { echo "usage: $0 DIR [--kerberos KDC_DIR]" >&2; exit 2; }
[ $# -eq 1 ] || { [ $# -eq 3 ] && [ "$2" = --kerberos ]; } || usage
mkdir -p "$1"
dir=$(cd "$1" && pwd)
case $dir in
*,*) echo "hdfs: DIR $dir: Hadoop reads its storage directories as comma-separated lists; want a DIR without ','" >&2; exit 2 ;;
esac
kdc_dir=${3:-}
if [ -n "$kdc_dir" ]; then
	[ -f "$kdc_dir/kdc.env" ] || { echo "hdfs: --kerberos $kdc_dir: no kdc.env there (start deploy/kdc/start.sh $kdc_dir first)" >&2; exit 2; }
	# shellcheck disable=SC1091
	. "$kdc_dir/kdc.env"
	for p in nn/localhost dn/localhost HTTP/localhost; do
		case ",$PRINCIPALS," in
		*",$p@$REALM,"*) ;;
		*) echo "hdfs: --kerberos: the KDC in $kdc_dir has no principal $p@$REALM (it has $PRINCIPALS)" >&2; exit 2 ;;
		esac
	done
	command -v keytool >/dev/null || { echo "hdfs: keytool not found (a Java 17 JDK is needed for --kerberos)" >&2; exit 1; }
	command -v javac >/dev/null || { echo "hdfs: javac not found (a Java 17 JDK is needed for --kerberos)" >&2; exit 1; }
fi
hadoop_version=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$here/pom.xml")
command -v java >/dev/null || { echo "hdfs: java not found (Java 17 is needed)" >&2; exit 1; }
command -v curl >/dev/null || { echo "hdfs: curl not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "hdfs: python3 not found" >&2; exit 1; }
# The cache is keyed by the pom's content, so a changed pom fetches anew.
name="hadoop-$hadoop_version-$(sha1sum "$here/pom.xml" | cut -c1-8)"
lib=$(fetch_jars "$name" "$here/pom.xml")

user=$(id -un)
if [ ! -f "$dir/ports.env" ]; then
	free_port 7 | paste -d= <(printf '%s\n' NN_PORT NN_HTTP_PORT NN_HTTPS_PORT DN_PORT DN_HTTP_PORT DN_HTTPS_PORT DN_IPC_PORT) - >"$dir/ports.env"
fi
. "$dir/ports.env"

mkdir -p "$dir/conf" "$dir/tmp"
# DIR as a file URI (file:///a%20b for /a b), for the properties Hadoop reads as URIs.
dir_uri=$(python3 -c 'import pathlib, sys; print(pathlib.Path(sys.argv[1]).as_uri())' "$dir")
for f in core-site.xml hdfs-site.xml; do
	render "$here/$f.in" DIR_URI="$dir_uri" DIR="$dir" USER="$user" NN_PORT="$NN_PORT" \
		NN_HTTP_PORT="$NN_HTTP_PORT" NN_HTTPS_PORT="$NN_HTTPS_PORT" DN_PORT="$DN_PORT" \
		DN_HTTP_PORT="$DN_HTTP_PORT" DN_HTTPS_PORT="$DN_HTTPS_PORT" DN_IPC_PORT="$DN_IPC_PORT" >"$dir/conf/$f"
done
cp "$here/log4j.properties" "$dir/conf/"
krb_jvm=()
if [ -n "$kdc_dir" ]; then
	# A keystore for both daemons' HTTPS servers (DataNode security without
	# privileged ports requires dfs.http.policy=HTTPS_ONLY).
	if [ ! -f "$dir/conf/keystore.p12" ]; then
		store_pass=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
		echo "$store_pass" >"$dir/conf/.store-pass"
		keytool -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -genkeypair -alias hdfs -keyalg RSA -keysize 2048 \
			-dname "CN=localhost" -ext SAN=ip:127.0.0.1,dns:localhost -validity 30 \
			-keystore "$dir/conf/keystore.p12" -storetype PKCS12 -storepass "$store_pass" >&2
	fi
	store_pass=$(cat "$dir/conf/.store-pass")
	cat >"$dir/conf/ssl-server.xml" <<-EOF
		<?xml version="1.0"?>
		<configuration>
		  <property><name>ssl.server.keystore.location</name><value>$dir/conf/keystore.p12</value></property>
		  <property><name>ssl.server.keystore.type</name><value>pkcs12</value></property>
		  <property><name>ssl.server.keystore.password</name><value>$store_pass</value></property>
		  <property><name>ssl.server.keystore.keypassword</name><value>$store_pass</value></property>
		</configuration>
	EOF
	chmod 600 "$dir/conf/ssl-server.xml" "$dir/conf/.store-pass"
	prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }
	# insert FILE: the properties on stdin go before FILE's </configuration>.
	insert() { local extra; extra=$(cat); python3 -c 'import sys; p=sys.argv[1]; s=open(p).read(); open(p,"w").write(s.replace("</configuration>", sys.argv[2]+"\n</configuration>"))' "$1" "$extra"; }
	sed -i 's|<value>simple</value>|<value>kerberos</value>|' "$dir/conf/core-site.xml"
	{
		prop hadoop.rpc.protection authentication
		prop hadoop.user.group.static.mapping.overrides "dr.who=;floe=$user"
	} | insert "$dir/conf/core-site.xml"
	sed -i 's|<name>dfs.http.policy</name><value>HTTP_ONLY</value>|<name>dfs.http.policy</name><value>HTTPS_ONLY</value>|' "$dir/conf/hdfs-site.xml"
	{
		prop dfs.block.access.token.enable true
		prop dfs.namenode.kerberos.principal "nn/localhost@$REALM"
		prop dfs.namenode.keytab.file "$KEYTAB"
		prop dfs.datanode.kerberos.principal "dn/localhost@$REALM"
		prop dfs.datanode.keytab.file "$KEYTAB"
		prop dfs.web.authentication.kerberos.principal "HTTP/localhost@$REALM"
		prop dfs.web.authentication.kerberos.keytab "$KEYTAB"
		prop dfs.data.transfer.protection authentication
	} | insert "$dir/conf/hdfs-site.xml"
	grep -q HTTPS_ONLY "$dir/conf/hdfs-site.xml" || { echo "hdfs: could not set dfs.http.policy=HTTPS_ONLY in hdfs-site.xml" >&2; exit 1; }
	krb_jvm=(-Djava.security.krb5.conf="$KRB5_CONF")
fi
# The Maven jars carry no web UI, but the daemons' HTTP servers (which serve
# /jmx, used below) insist on finding webapps/<name> on the classpath.
mkdir -p "$dir/web/webapps/hdfs" "$dir/web/webapps/datanode" "$dir/web/webapps/static"

# Hadoop 3.4 on Java 17: open the JDK internals it reflects into; small heaps
# and the C1 compiler only, so two daemons start fast on a shared 2-core box.
jvm_opts=(java -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
	--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
	--add-opens=java.base/sun.net.dns=ALL-UNNAMED --add-opens=java.base/sun.net.util=ALL-UNNAMED
	--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED
	-Dhadoop.log.dir="$dir" -Dhadoop.home.dir="$dir" -Dhadoop.security.logger=WARN,console
	"${krb_jvm[@]}")
jvm=("${jvm_opts[@]}" -cp "$dir/conf:$dir/web:$lib/*")

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
	local url="http://127.0.0.1:$NN_HTTP_PORT"
	[ -n "$kdc_dir" ] && url="https://127.0.0.1:$NN_HTTPS_PORT"
	curl -sfk "$url/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState" |
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
if [ -z "$kdc_dir" ]; then
	wait_for "HDFS write check" 60 "$(cat "$dir/datanode.pid")" "$dir/datanode.log" write_works
else
	probe="$FLOE_CACHE/$name/probe"
	(
		flock 9
		if [ ! -f "$probe/Probe.class" ]; then
			javac -nowarn -d "$probe" -cp "$lib/*" "$here/Probe.java" >&2
		fi
	) 9>"$FLOE_CACHE/$name/.probe.lock"
	# One attempt is a JVM: retry a few times while the DataNode settles.
	probe_works() { "${jvm_opts[@]}" -Xmx192m -cp "$probe:$dir/conf:$lib/*" Probe "nn/localhost@$REALM" "$KEYTAB" >>"$dir/probe.log" 2>&1; }
	wait_for "HDFS Kerberos write check" 120 "$(cat "$dir/datanode.pid")" "$dir/probe.log" probe_works
fi

echo "NAMENODE=127.0.0.1:$NN_PORT"
if [ -z "$kdc_dir" ]; then
	echo "NAMENODE_HTTP=127.0.0.1:$NN_HTTP_PORT"
	echo "USER=$user"
else
	echo "NAMENODE_HTTPS=127.0.0.1:$NN_HTTPS_PORT"
	echo "USER=nn"
	echo "REALM=$REALM"
	echo "KRB5_CONF=$KRB5_CONF"
	echo "KEYTAB=$KEYTAB"
	echo "NAMENODE_PRINCIPAL=nn/localhost@$REALM"
	echo "DATA_TRANSFER_PROTECTION=authentication"
fi
echo "CONF_DIR=$dir/conf"
