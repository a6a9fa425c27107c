"""The kto topics on any Kafka: their settings, and their creation.

In: :class:`~shared.bus.settings.KafkaSettings` (topic names, partitions, replication,
retention). Out: :func:`topic_configs`, the settings of an audit log, and
:func:`ensure_topics`, which creates the jobs and dead-letter topics on any Kafka
(Tansu, Apache Kafka, a managed one) and leaves existing ones alone. Starting a broker
is a dev tool's business (realparts/tansu.py, realparts/kafka.py), not this layer's.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from shared.bus import errors
from shared.bus.settings import KafkaSettings, client_options

log = logging.getLogger("kto.bus.topics")


def topic_configs(settings: KafkaSettings) -> dict[str, str]:
    """The topic settings of an audit log: records deleted after ``retention_ms`` (never
    compacted, never by size), acknowledged by a majority of replicas, and no replica that
    missed records ever made leader."""
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(settings.retention_ms),
        "retention.bytes": "-1",
        "segment.ms": str(settings.segment_ms),
        "min.insync.replicas": str(max(1, settings.replication_factor // 2 + 1) if settings.replication_factor > 2
                                   else 1),
        "unclean.leader.election.enable": "false",
        "message.timestamp.type": "CreateTime",
    }


async def ensure_topics(settings: KafkaSettings, *, timeout: float = 30.0) -> None:
    """Create the jobs topic (``settings.partitions`` partitions) and the
    dead-letter topic if they do not exist yet, with :func:`topic_configs`.

    Retries while the broker is not reachable, up to ``timeout`` seconds; raises
    :class:`~shared.bus.errors.BrokerError` if a topic cannot be created.
    """
    configs = topic_configs(settings)
    topics = [
        NewTopic(settings.jobs_topic, settings.partitions, settings.replication_factor, topic_configs=configs),
        NewTopic(settings.dlq_topic, settings.partitions, settings.replication_factor, topic_configs=configs),
    ]
    deadline = time.monotonic() + timeout
    while True:
        admin = AIOKafkaAdminClient(**client_options(settings))
        try:
            await admin.start()
            response = await admin.create_topics(topics)
            break
        except kafka_errors.KafkaError as exc:
            if not errors.is_retriable(exc) or time.monotonic() > deadline:
                raise errors.BrokerError(
                    f"cannot create topics on {settings.bootstrap}: {exc!r}"
                ) from exc
            await asyncio.sleep(0.2)
        finally:
            await admin.close()
    for topic, code, message in response.topic_errors:
        if code == 0:
            log.info("created topic %s", topic)
            continue
        error_type = kafka_errors.for_code(code)
        if error_type is kafka_errors.TopicAlreadyExistsError:
            continue
        raise errors.BrokerError(
            f"cannot create topic {topic} on {settings.bootstrap}: "
            f"{error_type.__name__}: {message}"
        )
