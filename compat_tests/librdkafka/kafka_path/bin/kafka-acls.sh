#!/usr/bin/env bash
# kafka-acls.sh for librdkafka's tests (0109, 0115, 0119 deny or allow topics with it): Kafka's own
# command line from the JVM distribution beside the project (../shared/jvm, or $KAFKA_HOME),
# talking CreateAcls/DescribeAcls/DeleteAcls to the broker under test.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kafka_home=${KAFKA_HOME:-$here/../../../../../shared/jvm/kafka-4.0.0}
if [[ ! -x $kafka_home/bin/kafka-acls.sh ]]; then
    echo "kafka-acls.sh: Kafka's distribution is not at $kafka_home (set KAFKA_HOME)" >&2
    exit 127
fi
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx256m}
exec "$kafka_home/bin/kafka-acls.sh" "$@"
