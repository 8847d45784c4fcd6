#!/usr/bin/env bash
# Start a throwaway Kafka broker for the tests and print its address; idempotent.
# `kafka.sh status` prints up or down (changes nothing); `kafka.sh stop` stops the broker
# this script started (scripts/test.sh does, at its end, when it started it).
#
# Apache Kafka in KRaft mode (one process, controller and broker, on 127.0.0.1 only) from
# Maven Central's org.apache.kafka:kafka_2.13 jars, fetched once with `mvn` into
# THRESHER_KAFKA_JARS (a tiny pom, dependency:copy-dependencies), heap 512 MiB, its log
# under /tmp. Where no Maven repository can be reached (no jars, and mvn fails), it says
# so and starts librdkafka's mock cluster instead (scripts/kafka_mock.py: the Kafka
# protocol served in memory by the client library, from confluent-kafka's wheel): the
# same address line, the same status and stop (THRESHER_KAFKA_MOCK=1 asks for it). Settings:
# THRESHER_KAFKA_PORT, THRESHER_KAFKA_DIR, THRESHER_KAFKA_VERSION, THRESHER_KAFKA_JARS,
# THRESHER_KAFKA_MOCK, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${THRESHER_KAFKA_PORT:-59092}"
DIR="${THRESHER_KAFKA_DIR:-/tmp/thresher-kafka}"
VERSION="${THRESHER_KAFKA_VERSION:-3.9.1}"
JARS="${THRESHER_KAFKA_JARS:-$HOME/.cache/thresher-kafka/$VERSION}"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PIDFILE="$DIR/broker.pid"
ADDRFILE="$DIR/address"

alive() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

MODE="${1:-start}"
case "$MODE" in
  status)
    if alive; then echo up; else echo down; fi
    exit 0
    ;;
  stop)
    if alive; then
      echo "kafka.sh: stopping the broker (pid $(cat "$PIDFILE"))" >&2
      pid="$(cat "$PIDFILE")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$ADDRFILE"
    exit 0
    ;;
  start) ;;
  *) echo "kafka.sh: unknown mode $MODE (start, status, stop)" >&2; exit 2 ;;
esac

if alive && [ -s "$ADDRFILE" ]; then
  cat "$ADDRFILE"
  exit 0
fi
mkdir -p "$DIR"

fetch_jars() {
  # Kafka's jars and their dependencies, once, with Maven's own client.
  [ -n "$(ls "$JARS"/kafka_2.13-*.jar 2>/dev/null)" ] && return 0
  command -v mvn >/dev/null || return 1
  local pom="$DIR/pom"
  mkdir -p "$pom"
  cat >"$pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>thresher</groupId><artifactId>kafka-broker</artifactId><version>1</version>
<dependencies>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
</dependencies></project>
POM
  echo "kafka.sh: fetching Apache Kafka $VERSION's jars with mvn into $JARS" >&2
  mvn -q -B -f "$pom/pom.xml" dependency:copy-dependencies -DoutputDirectory="$JARS" \
    >"$DIR/mvn.log" 2>&1 || { rm -rf "$JARS"; return 1; }
}

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

start_kafka() {
  local data="$DIR/data" props="$DIR/server.properties"
  cat >"$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$((PORT + 1))
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$((PORT + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
  printf 'log4j.rootLogger=WARN, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.Target=System.err\n' >"$DIR/log4j.properties"
  local java=(java -Xmx512m -Xms128m -Dlog4j.configuration="file:$DIR/log4j.properties" -cp "$JARS/*")
  if [ ! -s "$data/meta.properties" ]; then
    local cluster
    cluster="$("${java[@]}" kafka.tools.StorageTool random-uuid)"
    "${java[@]}" kafka.tools.StorageTool format -t "$cluster" -c "$props" \
      >"$DIR/format.log" 2>&1 || { cat "$DIR/format.log" >&2; return 1; }
  fi
  echo "kafka.sh: starting Apache Kafka $VERSION (KRaft) on 127.0.0.1:$PORT, data in $data" >&2
  nohup "${java[@]}" kafka.Kafka "$props" >"$DIR/server.log" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 120); do
    answers && { echo "127.0.0.1:$PORT" >"$ADDRFILE"; return 0; }
    alive || break
    sleep 0.5
  done
  tail -20 "$DIR/server.log" >&2
  return 1
}

start_mock() {
  local why="no Apache Kafka jars (mvn reached no Maven repository: $DIR/mvn.log)"
  [ "${THRESHER_KAFKA_MOCK:-}" != 1 ] || why="THRESHER_KAFKA_MOCK=1"
  echo "kafka.sh: $why; starting librdkafka's mock cluster instead (scripts/kafka_mock.py)" >&2
  rm -f "$ADDRFILE"
  nohup "$PY" scripts/kafka_mock.py >"$DIR/address.tmp" 2>"$DIR/server.log" &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    [ -s "$DIR/address.tmp" ] && { mv "$DIR/address.tmp" "$ADDRFILE"; return 0; }
    alive || break
    sleep 0.25
  done
  cat "$DIR/server.log" >&2
  return 1
}

if [ "${THRESHER_KAFKA_MOCK:-}" != 1 ] && fetch_jars; then
  start_kafka || { echo "kafka.sh: the broker did not start ($DIR/server.log)" >&2; exit 1; }
else
  start_mock || { echo "kafka.sh: the mock cluster did not start" >&2; exit 1; }
fi
cat "$ADDRFILE"
