#!/usr/bin/env bash
# start.sh DIR PRINCIPAL...: a Kerberos KDC (Hadoop's MiniKdc, an Apache Kerby
# KDC, from Maven Central jars) on 127.0.0.1 over TCP, realm EXAMPLE.COM, as a
# background process (pid in DIR/kdc.pid) with its data and log in DIR. Each
# PRINCIPAL ("name" or "name/host", without the realm) is created with a
# random key, and all their keys are written to one keytab.
#
# Waits until the KDC has written the keytab and krb5.conf and listens, then
# prints on stdout:
#   REALM=EXAMPLE.COM
#   KDC=127.0.0.1:PORT
#   KRB5_CONF=DIR/krb5.conf   (for Java: -Djava.security.krb5.conf; Go: gokrb5)
#   KEYTAB=DIR/all.keytab     (every PRINCIPAL@REALM)
#   PRINCIPALS=p1,p2,...      (with the realm)
# and writes the same lines to DIR/kdc.env (what deploy/hdfs/start.sh
# --kerberos DIR reads). The KDC keeps its principals in memory: starting it
# again makes new keys, so it is started once per DIR. Stop with stop.sh DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

if [ $# -lt 2 ]; then
	echo "usage: $0 DIR PRINCIPAL..." >&2
	exit 2
fi
mkdir -p "$1"
dir=$(cd "$1" && pwd)
shift
for p in "$@"; do
	case $p in
	*@* | "" | */*/*) echo "kdc: principal \"$p\": want name or name/host, without @REALM" >&2; exit 2 ;;
	esac
done
for tool in java mvn python3 flock; do
	command -v "$tool" >/dev/null || { echo "kdc: $tool is not installed (need Java 17, Maven, python3)" >&2; exit 1; }
done
if [ -f "$dir/kdc.pid" ] && kill -0 "$(cat "$dir/kdc.pid")" 2>/dev/null; then
	echo "kdc: already running in $dir (pid $(cat "$dir/kdc.pid")); stop.sh $dir first" >&2
	exit 1
fi

hadoop_version=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$here/pom.xml")
# The cache is keyed by the pom's content, so a changed pom fetches anew.
lib=$(fetch_jars "minikdc-$hadoop_version-$(sha1sum "$here/pom.xml" | cut -c1-8)" "$here/pom.xml")

realm=EXAMPLE.COM
port=$(free_port)
rm -rf "$dir/work" "$dir/krb5.conf" "$dir/all.keytab" "$dir/kdc.env"
mkdir -p "$dir/work"
# MiniKdc's keys: org.name + org.domain make the realm; the KDC binds
# 127.0.0.1:port over TCP (krb5.conf gets udp_preference_limit = 1).
cat >"$dir/kdc.properties" <<-EOF2
	org.name=EXAMPLE
	org.domain=COM
	kdc.bind.address=127.0.0.1
	kdc.port=$port
	transport=TCP
	max.ticket.lifetime=86400000
	max.renewable.lifetime=604800000
	debug=false
EOF2
cat >"$dir/log4j.properties" <<-EOF2
	log4j.rootLogger=WARN, stdout
	log4j.appender.stdout=org.apache.log4j.ConsoleAppender
	log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
	log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
	log4j.logger.org.apache.hadoop.minikdc=INFO
EOF2

echo "kdc: starting MiniKdc $hadoop_version for $realm on 127.0.0.1:$port (log $dir/kdc.log)" >&2
setsid nohup java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true \
	-Dlog4j.configuration="file:$dir/log4j.properties" -cp "$lib/*" \
	org.apache.hadoop.minikdc.MiniKdc "$dir/work" "$dir/kdc.properties" "$dir/all.keytab" "$@" \
	>"$dir/kdc.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/kdc.pid"

# MiniKdc prints its banner once the KDC runs and the keytab is written.
ready() { grep -q "Standalone MiniKdc Running" "$dir/kdc.log" && [ -s "$dir/all.keytab" ] && [ -f "$dir/work/krb5.conf" ] && port_open "$port"; }
wait_for "kdc" 60 "$pid" "$dir/kdc.log" ready
# Its krb5.conf names the KDC "localhost", which may resolve to ::1 first.
sed "s/kdc = localhost:/kdc = 127.0.0.1:/" "$dir/work/krb5.conf" >"$dir/krb5.conf"
principals=$(printf '%s@'"$realm"',' "$@")
{
	echo "REALM=$realm"
	echo "KDC=127.0.0.1:$port"
	echo "KRB5_CONF=$dir/krb5.conf"
	echo "KEYTAB=$dir/all.keytab"
	echo "PRINCIPALS=${principals%,}"
} >"$dir/kdc.env"
echo "kdc: ready on 127.0.0.1:$port (pid $pid; ${SECONDS}s)" >&2
cat "$dir/kdc.env"
