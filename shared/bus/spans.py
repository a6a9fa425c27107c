"""Names and attributes of the bus's spans, after OpenTelemetry's messaging
semantic conventions (the names of ``opentelemetry-semantic-conventions``).

In: a topic and a record being published, or a Kafka record being consumed.
Out: span names — ``publish <topic>`` (PRODUCER, one per record, or per batch
of ``publish_many``) and ``process <topic>`` (CONSUMER, one per record taken
in, a child of the context its producer sent) — and their attributes:
``messaging.system=kafka``, ``messaging.destination.name``,
``messaging.operation.type`` (``send`` / ``process``) and ``.name``
(``publish`` / ``process``), ``messaging.kafka.message.key``,
``messaging.destination.partition.id``, ``messaging.kafka.offset``,
``messaging.consumer.group.name``, ``messaging.message.body.size``, plus kto's
``kto.job_key``, ``kto.record.id`` and ``kto.record.type``.

kto does not use ``opentelemetry-instrumentation-aiokafka``: it wraps
``getmany`` in spans that end when the fetch returns, before any record is
processed (kto processes a record later, in its key's worker, and a settle
acts once for several records), and its ``send`` wrapper appends a second
``traceparent`` to headers that already carry one and ends its span before
the broker's acknowledgement, which kto's producer span waits for.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.semconv._incubating.attributes import messaging_attributes as semconv

from shared.bus import records

SYSTEM = semconv.MessagingSystemValues.KAFKA.value

PUBLISH = "publish"
"""``messaging.operation.name`` of a producer span (its ``messaging.operation.type`` is ``send``)."""

PROCESS = "process"
"""``messaging.operation.name`` and ``.type`` of a consumer's per-record span."""


def publish_name(topic: str) -> str:
    return f"{PUBLISH} {topic}"


def process_name(topic: str) -> str:
    return f"{PROCESS} {topic}"


def publishing(topic: str, record: records.Record | None = None, *, count: int | None = None,
               size: int | None = None, key: str | None = None) -> dict[str, Any]:
    """Attributes of a producer span: of one record, or of a batch of ``count``
    (with the ``key`` its records share, if they do)."""
    attributes: dict[str, Any] = {
        semconv.MESSAGING_SYSTEM: SYSTEM,
        semconv.MESSAGING_DESTINATION_NAME: topic,
        semconv.MESSAGING_OPERATION_TYPE: semconv.MessagingOperationTypeValues.SEND.value,
        semconv.MESSAGING_OPERATION_NAME: PUBLISH,
    }
    if record is not None:
        attributes[semconv.MESSAGING_KAFKA_MESSAGE_KEY] = record.key
        attributes.update(decoded(record))
    elif key is not None:
        attributes[semconv.MESSAGING_KAFKA_MESSAGE_KEY] = key
        attributes["kto.job_key"] = key
    if count is not None:
        attributes[semconv.MESSAGING_BATCH_MESSAGE_COUNT] = count
    if size is not None:
        attributes[semconv.MESSAGING_MESSAGE_BODY_SIZE] = size
    return attributes


def written(partition: int, offset: int) -> dict[str, Any]:
    """Attributes a producer span gets once the broker acknowledged the record."""
    return {semconv.MESSAGING_DESTINATION_PARTITION_ID: str(partition), semconv.MESSAGING_KAFKA_OFFSET: offset}


def processing(message: Any, group: str) -> dict[str, Any]:
    """Attributes of the span a consumed Kafka record (aiokafka's ``ConsumerRecord``) is processed in."""
    attributes: dict[str, Any] = {
        semconv.MESSAGING_SYSTEM: SYSTEM,
        semconv.MESSAGING_DESTINATION_NAME: message.topic,
        semconv.MESSAGING_OPERATION_TYPE: semconv.MessagingOperationTypeValues.PROCESS.value,
        semconv.MESSAGING_OPERATION_NAME: PROCESS,
        semconv.MESSAGING_DESTINATION_PARTITION_ID: str(message.partition),
        semconv.MESSAGING_KAFKA_OFFSET: message.offset,
        semconv.MESSAGING_CONSUMER_GROUP_NAME: group,
    }
    if message.key is not None:
        attributes[semconv.MESSAGING_KAFKA_MESSAGE_KEY] = message.key.decode(errors="replace")
    if message.value is not None:
        attributes[semconv.MESSAGING_MESSAGE_BODY_SIZE] = len(message.value)
    return attributes


def decoded(record: records.Record) -> dict[str, Any]:
    """kto's attributes of a record, once its value decoded."""
    return {"kto.job_key": record.key, "kto.record.id": record.id, "kto.record.type": record.type}
