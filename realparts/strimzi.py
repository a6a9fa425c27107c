"""Strimzi's CRDs, for checking deploy/'s KafkaTopics, KafkaUsers and Kafka cluster against a real API server.

In: Maven Central (Strimzi publishes its API model, ``io.strimzi:api``, and the generator that
makes its CRDs from that model, ``io.strimzi:crd-generator``; neither jar holds the CRD YAML
itself). Out: ``<cache>/strimzi-crds-<version>-r2/<plural>.kafka.strimzi.io.yaml`` for each kind
of :data:`CRDS` (KafkaTopic, KafkaUser, Kafka, KafkaNodePool), made once per machine by running
Strimzi's generator over Strimzi's model with the arguments of Strimzi's own build
(``api/pom.xml``, execution ``generate-crd-co-install-v1``), for the versions Strimzi 0.51
serves: ``v1`` and ``v1beta2`` (stored). (``-r2``: the first cache held the KafkaTopic CRD only.)

Versions: the model is Strimzi 0.51.0's. The generator is 0.45.0, the newest on Maven Central
that runs on Java 17 (1.2.0's needs Java 21); it reads the model's annotations, so its output is
the model's CRD. Nothing fetched here is committed: it lives in the per-machine cache.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

from realparts import caching, kafka

STRIMZI_API_VERSION = "0.51.0"
"""The Strimzi release whose API model (``io.strimzi:api``) the CRD is made from."""

CRD_GENERATOR_VERSION = "0.45.0"
"""``io.strimzi:crd-generator``: the newest published that runs on Java 17."""

CRDS = {
    "KafkaTopic": ("kafkatopics.kafka.strimzi.io.yaml", "io.strimzi.api.kafka.model.topic.KafkaTopic"),
    "KafkaUser": ("kafkausers.kafka.strimzi.io.yaml", "io.strimzi.api.kafka.model.user.KafkaUser"),
    "Kafka": ("kafkas.kafka.strimzi.io.yaml", "io.strimzi.api.kafka.model.kafka.Kafka"),
    "KafkaNodePool": ("kafkanodepools.kafka.strimzi.io.yaml", "io.strimzi.api.kafka.model.nodepool.KafkaNodePool"),
}
"""Kind → (CRD file, model class): what deploy/ makes (topics, users) and the cluster it expects."""

CRD_FILE = CRDS["KafkaTopic"][0]

_CACHE_NAME = f"strimzi-crds-{STRIMZI_API_VERSION}-r2"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kto</groupId>
  <artifactId>kto-strimzi-crds</artifactId>
  <version>{STRIMZI_API_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.strimzi</groupId><artifactId>api</artifactId><version>{STRIMZI_API_VERSION}</version></dependency>
    <dependency><groupId>io.strimzi</groupId><artifactId>crd-generator</artifactId><version>{CRD_GENERATOR_VERSION}</version></dependency>
  </dependencies>
</project>
"""

GENERATOR_ARGUMENTS = (
    "--label", "app:strimzi", "--label", "strimzi.io/crd-install:true",
    "--target-kube", "1.16+", "--crd-api-version", "v1",
    "--api-versions", "v1beta2,v1", "--storage-version", "v1beta2", "--yaml",
)
"""Strimzi's build's arguments (api/pom.xml), with the versions 0.51 serves."""


def ensure_crd_directory() -> pathlib.Path:
    """The directory of Strimzi's CRDs (YAML), made the first time on this machine; PartError
    naming what is missing if they cannot be."""
    return caching.cached(_CACHE_NAME, _build)


def ensure_crds() -> dict[str, pathlib.Path]:
    """Kind → path of Strimzi's CRD of that kind (:func:`ensure_crd_directory`)."""
    directory = ensure_crd_directory()
    return {kind: directory / file for kind, (file, _) in CRDS.items()}


def ensure_kafkatopic_crd() -> pathlib.Path:
    """The path of Strimzi's KafkaTopic CRD (YAML), made with the others (:func:`ensure_crds`)."""
    return ensure_crds()["KafkaTopic"]


def _run(command: list[str], directory: pathlib.Path, what: str) -> None:
    try:
        done = subprocess.run(command, cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              check=False, timeout=900)
    except subprocess.TimeoutExpired:
        raise caching.PartError(f"{what} did not finish within 15 minutes") from None
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).strip().splitlines() if line.strip()][-8:]
        raise caching.PartError(f"{what} failed (exit {done.returncode}): {' | '.join(lines)}")


def _build(directory: pathlib.Path) -> None:
    java = kafka.java_binary()
    mvn = caching.require_tool("mvn", "install Maven (apt-get install maven); it fetches Strimzi's jars once")
    (directory / "pom.xml").write_text(_POM)
    _run([mvn, "-q", "-B", "dependency:copy-dependencies", "-DoutputDirectory=libs", "-DincludeScope=runtime"],
         directory, f"mvn fetching io.strimzi:api:{STRIMZI_API_VERSION} and its CRD generator")
    _run([java, "-cp", str(directory / "libs" / "*"), "io.strimzi.crdgenerator.CrdGenerator", *GENERATOR_ARGUMENTS,
          *(f"{model}={directory / file}" for file, model in CRDS.values())], directory, "Strimzi's CRD generator")
    for kind, (file, _) in CRDS.items():
        target = directory / file
        if not target.is_file() or f"kind: {kind}\n" not in target.read_text():
            raise caching.PartError(f"Strimzi's CRD generator left no {kind} CRD in {target}")
    shutil.rmtree(directory / "libs")  # 40 MB of jars, needed only to make the file
