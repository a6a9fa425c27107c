"""Workers started by hand: ``kto watcher``, ``kto reconciler`` and ``kto status-service`` as processes,
told only where the broker is (``KTO_KAFKA_BOOTSTRAP``, and this test's topics), not whether their
producer may be idempotent (no ``KTO_KAFKA_IDEMPOTENCE``).

On Tansu, which grants no producer id, each says so in one line and runs a job as ``kto up`` does; on
Kafka, which grants one, none says anything. Asking for idempotence outright on Tansu stops each at
start with one line naming the variable, never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys

import pytest

from shared.bus.settings import KafkaSettings
from tests.fixtures.broker import topics_of_this_test
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.pipeline.test_otlp_traces import services_as_processes
from tests.pipeline.test_pipeline import job

FALLBACK = "grants no producer id (InitProducerId answered UnknownError): publishing without idempotence"
"""The one line a producer logs when the broker refused it a producer id."""


def by_hand(kafka: KafkaSettings, **variables: str) -> dict[str, str]:
    """The environment of a user who exported the bootstrap address and the topics, and nothing else of Kafka."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KTO_KAFKA_", "KTO_METRICS", "KTO_HEALTH"))}
    env.update(KTO_KAFKA_BOOTSTRAP=kafka.bootstrap, KTO_KAFKA_JOBS_TOPIC=kafka.jobs_topic,
               KTO_KAFKA_DLQ_TOPIC=kafka.dlq_topic, **variables)
    return env


async def test_workers_told_only_the_bootstrap_run_a_job_and_say_once_when_the_broker_grants_no_producer_id(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    async with services_as_processes(pipeline, by_hand(pipeline.kafka), tmp_path) as logs:
        await pipeline.submit(job("PyTorchJob", "by-hand", {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")},
                                  "pytorch"))
        await pipeline.wait_for("PyTorchJob", "by-hand", "Succeeded", timeout=90)
        assert len(await pipeline.pods("by-hand")) == 2
    texts = {name: log.read_text() for name, log in logs.items()}
    expected = 1 if pipeline.tier == "sim" else 0  # Tansu refuses InitProducerId; Kafka grants it
    for name, text in texts.items():
        said = [line for line in text.splitlines() if FALLBACK in line]
        assert len(said) == expected, (name, said)
        assert all("WARNING kto.bus: the broker at " + pipeline.kafka.bootstrap in line for line in said), said
        assert "Traceback" not in text and "InitProducerIdRequest" not in text, (name, text)


@pytest.mark.parametrize("command", [
    pytest.param(["watcher", "--cluster", CLUSTER, "--context", CLUSTER], id="watcher"),
    pytest.param(["reconciler"], id="reconciler"),
    pytest.param(["status-service"], id="status-service"),
])
async def test_a_worker_asked_for_idempotence_on_tansu_stops_in_one_line_naming_the_variable(
    command: list[str], broker: KafkaSettings, tmp_path: pathlib.Path,
) -> None:
    kafka = await topics_of_this_test(broker)
    kubeconfig = tmp_path / "kubeconfig"  # its cluster never answers: the producer's start comes first
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: {CLUSTER}, cluster: {{server: "http://127.0.0.1:9"}}}}]
users: [{{name: {CLUSTER}, user: {{}}}}]
contexts: [{{name: {CLUSTER}, context: {{cluster: {CLUSTER}, user: {CLUSTER}}}}}]
current-context: {CLUSTER}
""")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", *command, "--kubeconfig", str(kubeconfig),
        env=by_hand(kafka, KTO_KAFKA_IDEMPOTENCE="true"),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    stderr = err.decode()
    assert process.returncode == 2 and out == b"", stderr
    errors = [line for line in stderr.splitlines() if line.startswith("kto ")]
    assert errors == [stderr.splitlines()[-1]], stderr
    assert errors[0].startswith(f"kto {command[0]}: error: cannot start an idempotent producer on {kafka.bootstrap}")
    assert "KTO_KAFKA_IDEMPOTENCE=true asks for one" in errors[0] and "KTO_KAFKA_IDEMPOTENCE=false" in errors[0]
    assert "Traceback" not in stderr and "InitProducerIdRequest" not in stderr, stderr
