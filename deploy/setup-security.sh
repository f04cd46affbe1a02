#!/usr/bin/env bash
# setup-security.sh: installs what the secure test services need beyond
# setup-hdfs.sh on a fresh Debian machine, with apt-get; does nothing when
# they are present: openssl (deploy/kafka/start.sh --sasl-tls makes the
# mutual-TLS client key with it) and a Java 17 JDK (keytool for the brokers'
# and DataNode's certificates, javac for deploy/hdfs/Probe.java). The KDC
# (deploy/kdc, Hadoop's MiniKdc) comes from Maven Central in its start.sh.
set -euo pipefail
need=()
command -v openssl >/dev/null || need+=(openssl)
{ command -v javac >/dev/null && command -v keytool >/dev/null; } || need+=(openjdk-17-jdk-headless)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "setup-security: missing ${need[*]}; run as root or install them" >&2
	exit 1
fi
echo "setup-security: installing ${need[*]}" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
