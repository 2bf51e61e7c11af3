#!/usr/bin/env bash
# kafka-topics.sh for librdkafka's tests (KAFKA_PATH points at the folder above bin/):
# the Kafka distribution's command line, answered by Strom's own admin tool
# (`strom topics ACTION ...`, CreateTopics/DeleteTopics/... against the broker under test).
# Accepts the form the tests use: --bootstrap-server B --create --topic T [--partitions N]
# [--replication-factor N] [--config k=v ...].
set -euo pipefail
action=
args=()
while (($#)); do
    case $1 in
        --create | --alter | --delete | --describe | --list) action=${1#--} ;;
        *) args+=("$1") ;;
    esac
    shift
done
if [[ -z $action ]]; then
    echo "kafka-topics.sh: one of --create, --alter, --delete, --describe, --list is required" >&2
    exit 2
fi
exec "${STROM_PYTHON:-python3}" -m strom.broker topics "$action" "${args[@]}"
