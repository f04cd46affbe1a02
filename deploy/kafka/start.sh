#!/usr/bin/env bash
# start.sh DIR VERSION [--sasl-tls]: a single-node Apache Kafka in KRaft mode
# (combined broker and controller) from Maven Central jars, on 127.0.0.1,
# data and logs in DIR, as a background process (pid in DIR/kafka.pid).
#
# VERSION is a 3.x (e.g. 3.6.2) or 4.x (e.g. 4.4.0) release. --sasl-tls adds
# two TLS listeners (a CA and a broker certificate for 127.0.0.1 made with
# keytool): SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 enabled for
# one user (the SCRAM credentials created by `format --add-scram`, PLAIN's in
# the listener's JAAS config), and SSL with ssl.client.auth=required (mutual
# TLS; a client certificate and key signed by the same CA, made with openssl).
#
# Run again on the same DIR (after stop.sh or a SIGKILL) it restarts the same
# broker: same ports, same data, same credentials, no format. A first start
# that did not complete (it failed or was interrupted) is started over.
#
# Waits until the broker answers a metadata request (Admin describeCluster),
# then prints on stdout:
#   BOOTSTRAP=127.0.0.1:PORT   PLAINTEXT listener
#   VERSION=…  PID=…  LIB=<dir of the Kafka jars, for the console tools>
#   READY_CLASSES=<dir of the compiled readiness check>
# and with --sasl-tls also SASL_BOOTSTRAP, CA_FILE (PEM), SASL_MECHANISM
# (SCRAM-SHA-512), SASL_MECHANISMS (all enabled, comma-separated),
# SASL_USERNAME, SASL_PASSWORD, CLIENT_PROPERTIES (a Java client config for
# SASL_SSL), and for mutual TLS SSL_BOOTSTRAP, CLIENT_CERT_FILE and
# CLIENT_KEY_FILE (PEM) and SSL_CLIENT_PROPERTIES.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

if [ $# -lt 2 ] || { [ $# -eq 3 ] && [ "$3" != --sasl-tls ]; } || [ $# -gt 3 ]; then
	echo "usage: $0 DIR VERSION [--sasl-tls]" >&2
	exit 2
fi
dir=$1 version=$2 secure=${3:-}
case $version in
3.*) profile=kafka3 ;;
4.*) profile=kafka4 ;;
*)
	echo "kafka: unsupported version $version (want 3.x or 4.x, e.g. 3.6.2 or 4.4.0)" >&2
	exit 2
	;;
esac
tools=(java javac keytool mvn python3 flock)
[ -n "$secure" ] && tools+=(openssl)
for tool in "${tools[@]}"; do
	command -v "$tool" >/dev/null || { echo "kafka: $tool is not installed (need Java 17 JDK, Maven, python3; openssl for --sasl-tls)" >&2; exit 1; }
done

# The jar set is keyed by the POM's content, so a changed POM fetches anew.
name="kafka-$version-$(sha1sum "$here/pom.xml" | cut -c1-8)"
lib=$(fetch_jars "$name" "$here/pom.xml" "-P$profile" "-Dkafka.version=$version")
ready="$FLOE_CACHE/$name/ready"
(
	flock 9
	if [ ! -f "$ready/Ready.class" ]; then
		javac -nowarn -d "$ready" -cp "$lib/*" "$here/Ready.java" >&2
	fi
) 9>"$FLOE_CACHE/$name/.ready.lock"

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# running PID: the process exists and is not a zombie (a SIGKILLed broker
# may stay one until its new parent reaps it).
running() { local st; st=$(proc_state "$1") && [ -n "$st" ] && [ "$st" != Z ]; }
if [ -f "$dir/kafka.pid" ] && running "$(cat "$dir/kafka.pid")"; then
	echo "kafka: already running in $dir (pid $(cat "$dir/kafka.pid")); stop.sh $dir first" >&2
	exit 1
fi

random() { python3 -c 'import secrets; print(secrets.token_hex(12))'; }

# First start: ports, credentials, certificates, config, format. state.env,
# written last, marks it complete. Without it, whatever an earlier first
# start left behind when it failed or was interrupted half-way (certificates
# under a keystore password no longer known, a formatted data dir, config) is
# removed and the first start runs again from scratch: no broker ever ran on
# those files, as it is started only once state.env exists.
if [ ! -f "$dir/state.env" ]; then
	partial=("$dir/tls" "$dir/data" "$dir/server.properties" "$dir/client-sasl.properties"
		"$dir/client-ssl.properties" "$dir/format.log" "$dir/state.env.tmp")
	for f in "${partial[@]}"; do
		if [ -e "$f" ]; then
			echo "kafka: $dir holds an incomplete first start (no state.env); starting it over" >&2
			rm -rf "${partial[@]}"
			break
		fi
	done
	ports=$(free_port 4) # fails the script, unlike a process substitution
	{ read -r port; read -r controller_port; read -r sasl_port; read -r ssl_port; } <<<"$ports"
	if [ -z "$secure" ]; then
		sasl_port="" ssl_port=""
	else
		store_pass=$(random)
		sasl_user=floe
		sasl_password=$(random)
	fi
	mkdir -p "$dir/data" "$dir/tls"

	listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port"
	advertised="PLAINTEXT://127.0.0.1:$port"
	if [ -n "$secure" ]; then
		listeners="$listeners,SASL_SSL://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port"
		advertised="$advertised,SASL_SSL://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port"
	fi
	cat >"$dir/server.properties" <<-EOF
		process.roles=broker,controller
		node.id=1
		controller.quorum.voters=1@127.0.0.1:$controller_port
		controller.listener.names=CONTROLLER
		listeners=$listeners
		advertised.listeners=$advertised
		inter.broker.listener.name=PLAINTEXT
		listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
		log.dirs=$dir/data
		num.partitions=1
		auto.create.topics.enable=true
		offsets.topic.replication.factor=1
		offsets.topic.num.partitions=4
		transaction.state.log.replication.factor=1
		transaction.state.log.min.isr=1
		share.coordinator.state.topic.replication.factor=1
		share.coordinator.state.topic.min.isr=1
		group.initial.rebalance.delay.ms=0
		num.network.threads=2
		num.io.threads=4
		num.recovery.threads.per.data.dir=1
		log.retention.hours=24
	EOF

	format_args=()
	if [ -n "$secure" ]; then
		tls=$dir/tls
		kt() { keytool -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC "$@" >&2; }
		echo "kafka: making a CA and a broker certificate for 127.0.0.1" >&2
		kt -genkeypair -alias ca -keyalg RSA -keysize 2048 -dname "CN=floe test CA" -ext bc:c -validity 30 \
			-keystore "$tls/ca.p12" -storetype PKCS12 -storepass "$store_pass"
		kt -exportcert -rfc -alias ca -keystore "$tls/ca.p12" -storepass "$store_pass" -file "$tls/ca.pem"
		kt -genkeypair -alias broker -keyalg RSA -keysize 2048 -dname "CN=localhost" -validity 30 \
			-keystore "$tls/broker.p12" -storetype PKCS12 -storepass "$store_pass"
		kt -certreq -alias broker -keystore "$tls/broker.p12" -storepass "$store_pass" -file "$tls/broker.csr"
		kt -gencert -rfc -alias ca -keystore "$tls/ca.p12" -storepass "$store_pass" -infile "$tls/broker.csr" \
			-outfile "$tls/broker.pem" -validity 30 -ext SAN=ip:127.0.0.1,dns:localhost -ext EKU=serverAuth
		kt -importcert -noprompt -alias ca -keystore "$tls/broker.p12" -storepass "$store_pass" -file "$tls/ca.pem"
		kt -importcert -noprompt -alias broker -keystore "$tls/broker.p12" -storepass "$store_pass" -file "$tls/broker.pem"
		kt -importcert -noprompt -alias ca -keystore "$tls/truststore.p12" -storetype PKCS12 -storepass "$store_pass" -file "$tls/ca.pem"
		# The mutual-TLS client: an openssl key (PKCS#8 PEM, what Go and
		# librdkafka read), its certificate signed by the CA with keytool,
		# and the pair as PKCS12 for the Java readiness check.
		echo "kafka: making a client certificate for mutual TLS" >&2
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tls/client.key" >&2
		openssl req -new -key "$tls/client.key" -subj "/CN=floe-client" -out "$tls/client.csr"
		kt -gencert -rfc -alias ca -keystore "$tls/ca.p12" -storepass "$store_pass" -infile "$tls/client.csr" \
			-outfile "$tls/client.pem" -validity 30 -ext EKU=clientAuth
		openssl pkcs12 -export -in "$tls/client.pem" -inkey "$tls/client.key" -name client \
			-passout "pass:$store_pass" -out "$tls/client.p12"
		chmod 600 "$tls/client.key" "$tls/client.p12"
		cat >>"$dir/server.properties" <<-EOF
			sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
			listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
			listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_user="$sasl_password";
			listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
			listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
			listener.name.sasl_ssl.ssl.keystore.location=$tls/broker.p12
			listener.name.sasl_ssl.ssl.keystore.type=PKCS12
			listener.name.sasl_ssl.ssl.keystore.password=$store_pass
			listener.name.sasl_ssl.ssl.key.password=$store_pass
			listener.name.ssl.ssl.keystore.location=$tls/broker.p12
			listener.name.ssl.ssl.keystore.type=PKCS12
			listener.name.ssl.ssl.keystore.password=$store_pass
			listener.name.ssl.ssl.key.password=$store_pass
			listener.name.ssl.ssl.truststore.location=$tls/truststore.p12
			listener.name.ssl.ssl.truststore.type=PKCS12
			listener.name.ssl.ssl.truststore.password=$store_pass
			listener.name.ssl.ssl.client.auth=required
		EOF
		cat >"$dir/client-sasl.properties" <<-EOF
			security.protocol=SASL_SSL
			sasl.mechanism=SCRAM-SHA-512
			sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$sasl_user" password="$sasl_password";
			ssl.truststore.location=$tls/truststore.p12
			ssl.truststore.type=PKCS12
			ssl.truststore.password=$store_pass
		EOF
		cat >"$dir/client-ssl.properties" <<-EOF
			security.protocol=SSL
			ssl.keystore.location=$tls/client.p12
			ssl.keystore.type=PKCS12
			ssl.keystore.password=$store_pass
			ssl.key.password=$store_pass
			ssl.truststore.location=$tls/truststore.p12
			ssl.truststore.type=PKCS12
			ssl.truststore.password=$store_pass
		EOF
		chmod 600 "$dir/server.properties" "$dir/client-sasl.properties" "$dir/client-ssl.properties"
		format_args+=(--add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]"
			--add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]")
	fi

	# A cluster id is a base64url UUID. One that starts with "-" reads as an
	# option to kafka-storage, so draw again, as Kafka's Uuid.randomUuid does.
	cluster_id=$(python3 -c '
import base64, uuid
while True:
    id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not id.startswith("-"):
        print(id)
        break
')
	echo "kafka: formatting $dir/data (cluster $cluster_id)" >&2
	if ! java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null -Dlog4j2.level=WARN -cp "$lib/*" kafka.tools.StorageTool \
		format -t "$cluster_id" -c "$dir/server.properties" "${format_args[@]}" >"$dir/format.log" 2>&1; then
		echo "kafka: formatting storage failed:" >&2
		cat "$dir/format.log" >&2
		exit 1
	fi

	{
		echo "version=$version"
		echo "port=$port"
		echo "sasl_port=$sasl_port"
		echo "ssl_port=$ssl_port"
		if [ -n "$secure" ]; then
			echo "sasl_user=$sasl_user"
			echo "sasl_password=$sasl_password"
		fi
	} >"$dir/state.env.tmp"
	chmod 600 "$dir/state.env.tmp"
	mv "$dir/state.env.tmp" "$dir/state.env"
fi

# shellcheck disable=SC1091
source "$dir/state.env"
if [ "$version" != "$2" ]; then
	echo "kafka: $dir holds a $version broker, not $2" >&2
	exit 1
fi

cat >"$dir/log4j.properties" <<-EOF
	log4j.rootLogger=INFO, stdout
	log4j.appender.stdout=org.apache.log4j.ConsoleAppender
	log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
	log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
	log4j.logger.kafka.request.logger=WARN
	log4j.logger.state.change.logger=WARN
	log4j.logger.org.apache.kafka.controller=WARN
	log4j.logger.kafka.log.LogCleaner=WARN
EOF
cat >"$dir/log4j2.properties" <<-EOF
	appender.out.type=Console
	appender.out.name=out
	appender.out.layout.type=PatternLayout
	appender.out.layout.pattern=[%d] %p %m (%c)%n
	rootLogger.level=INFO
	rootLogger.appenderRef.out.ref=out
	logger.request.name=kafka.request.logger
	logger.request.level=WARN
	logger.state.name=state.change.logger
	logger.state.level=WARN
	logger.controller.name=org.apache.kafka.controller
	logger.controller.level=WARN
EOF

echo "kafka $version: starting in $dir (log $dir/kafka.log; ${SECONDS}s of set-up)" >&2
[ -f "$dir/kafka.log" ] && mv "$dir/kafka.log" "$dir/kafka.log.1"
# C1 only and the serial collector: a test broker on 2 shared cores starts
# far faster, and its throughput is still well above what the tests need.
setsid nohup java -Xms256m -Xmx768m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
	-Dlog4j.configuration="file:$dir/log4j.properties" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
	-Dkafka.logs.dir="$dir" -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
	>>"$dir/kafka.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/kafka.pid"

# The log line first (no JVM per attempt on a busy machine), then the real
# check: a metadata request through the Admin client.
started() { grep -q "Kafka Server started" "$dir/kafka.log"; }
check() { java -Xmx64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.level=OFF -Dlog4j.configuration=file:/dev/null -cp "$ready:$lib/*" Ready "$@"; }
wait_for "kafka $version" 180 "$pid" "$dir/kafka.log" started
wait_for "kafka $version" 60 "$pid" "$dir/kafka.log" check "127.0.0.1:$port"
if [ -n "$sasl_port" ]; then
	wait_for "kafka $version SASL_SSL listener" 60 "$pid" "$dir/kafka.log" check "127.0.0.1:$sasl_port" "$dir/client-sasl.properties"
	wait_for "kafka $version SSL (mutual TLS) listener" 60 "$pid" "$dir/kafka.log" check "127.0.0.1:$ssl_port" "$dir/client-ssl.properties"
fi
echo "kafka $version: ready on 127.0.0.1:$port (pid $pid; ${SECONDS}s in all)" >&2

echo "BOOTSTRAP=127.0.0.1:$port"
echo "VERSION=$version"
echo "PID=$pid"
echo "LIB=$lib"
echo "READY_CLASSES=$ready"
if [ -n "$sasl_port" ]; then
	echo "SASL_BOOTSTRAP=127.0.0.1:$sasl_port"
	echo "CA_FILE=$dir/tls/ca.pem"
	echo "SASL_MECHANISM=SCRAM-SHA-512"
	echo "SASL_MECHANISMS=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
	echo "SASL_USERNAME=$sasl_user"
	echo "SASL_PASSWORD=$sasl_password"
	echo "CLIENT_PROPERTIES=$dir/client-sasl.properties"
	echo "SSL_BOOTSTRAP=127.0.0.1:$ssl_port"
	echo "CLIENT_CERT_FILE=$dir/tls/client.pem"
	echo "CLIENT_KEY_FILE=$dir/tls/client.key"
	echo "SSL_CLIENT_PROPERTIES=$dir/client-ssl.properties"
fi
