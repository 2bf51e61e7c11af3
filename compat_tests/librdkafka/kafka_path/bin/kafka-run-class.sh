#!/usr/bin/env bash
# kafka-run-class.sh for librdkafka's tests: 0098_consumer_txn runs its Java transactional producer
# (tests/java/TransactionProducerCli, compiled by the suite's `make java` against KAFKA_JARS) with
# `java/run-class.sh`, which calls this. Kafka's own script from the JVM distribution beside the
# project (../shared/jvm, or $KAFKA_HOME) with the classes in CLASSPATH.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kafka_home=${KAFKA_HOME:-$here/../../../../../shared/jvm/kafka-4.0.0}
if [[ ! -x $kafka_home/bin/kafka-run-class.sh ]]; then
    echo "kafka-run-class.sh: Kafka's distribution is not at $kafka_home (set KAFKA_HOME)" >&2
    exit 127
fi
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx256m}
# a short-lived client: start fast rather than run fast
export KAFKA_JVM_PERFORMANCE_OPTS=${KAFKA_JVM_PERFORMANCE_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}
exec "$kafka_home/bin/kafka-run-class.sh" "$@"
