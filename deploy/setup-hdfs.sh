#!/usr/bin/env bash
# setup-hdfs.sh: installs what deploy/hdfs/start.sh needs on a fresh Debian
# machine (Java 17, Maven, curl, python3) with apt-get; does nothing when they
# are present. Hadoop's jars themselves are fetched by start.sh (cached).
set -euo pipefail
need=()
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
command -v setsid >/dev/null || need+=(util-linux)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "setup-hdfs: missing ${need[*]}; run as root or install them" >&2
	exit 1
fi
echo "setup-hdfs: installing ${need[*]}" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
