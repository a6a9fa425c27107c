"""The real JobSet controller v0.12.0 as a part (realparts/jobset.py): registered as upstream's
installation registers it (its CRD, its JobSet and pod webhooks with kto's certificates), it runs a
JobSet of two replicated jobs, the second depending on the first, to Completed on the real tier
(kube-controller-manager runs the Jobs, kto's node agent their pods), its validating webhook
refuses what upstream's refuses, and a stopped controller leaves no webhook behind.

The controller tests run the real binary against the session's real control plane (CI=true, or
KTO_SKIP_REAL unset); the log and configuration tests need nothing but the machine.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import time
from typing import Any

import pytest
import yaml

from realparts import controllerruntime, jobset
from tests.fixtures import sim as sim_fixtures
from tests.fixtures import tiers

STARTING = '2026-11-27T13:50:01Z\tINFO\tsetup\twaiting for the cert generation to complete'
JOBSET_LINE = ('2026-11-27T13:50:02Z\tINFO\tStarting workers\t{"controller": "jobset", '
               '"controllerGroup": "jobset.x-k8s.io", "controllerKind": "JobSet", "worker count": 1}')
POD_LINE = JOBSET_LINE.replace('"jobset"', '"pod"').replace('"JobSet"', '"Pod"')

DEPENDS_ON = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: depends
spec:
  replicatedJobs:
  - name: initializer
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers: [{name: initializer, image: busybox}]
  - name: trainer
    replicas: 2
    dependsOn: [{name: initializer, status: Complete}]
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers: [{name: trainer, image: busybox}]
"""


@pytest.mark.parametrize(("log", "started"), [
    pytest.param(STARTING, False, id="waiting-for-its-certificates"),
    pytest.param(f"{STARTING}\n{POD_LINE}", False, id="only-the-pod-controller-runs"),
    pytest.param(f"{STARTING}\n{POD_LINE}\n{JOBSET_LINE}\n", True, id="the-jobset-controller-runs"),
    pytest.param(JOBSET_LINE[:80], False, id="a-line-cut-short"),
])
def test_the_controller_counts_as_started_once_its_jobset_controller_runs(log: str, started: bool) -> None:
    assert controllerruntime.workers_started(log, jobset.CONTROLLER) is started


def test_its_configuration_is_upstreams_with_kto_certificates_on_loopback(tmp_path: pathlib.Path) -> None:
    config = jobset.configuration(tmp_path, 9443, 8081)
    assert config["leaderElection"] == {"leaderElect": True, "resourceNamespace": jobset.NAMESPACE}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert config["featureGates"] == {"ElasticJobSet": True}, "kto's elastic TrainJob scales JobSets in place"


@pytest.fixture
def build() -> pathlib.Path:
    tiers.require_real_tier()
    return jobset.ensure_build(quiet=True)


def test_its_webhooks_are_upstreams_pointed_at_the_local_process(build: pathlib.Path) -> None:
    made = {m["metadata"]["name"]: m for m in jobset.webhook_configurations(build, "https://127.0.0.1:1", b"CA")}
    assert sorted(made) == [jobset.MUTATING, jobset.VALIDATING]
    hooks = {w["name"]: w for m in made.values() for w in m["webhooks"]}
    assert {name: hook["clientConfig"]["url"] for name, hook in hooks.items()} == {
        "mjobset.kb.io": "https://127.0.0.1:1/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "mpod.kb.io": "https://127.0.0.1:1/mutate--v1-pod",
        "vjobset.kb.io": "https://127.0.0.1:1/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "vpod.kb.io": "https://127.0.0.1:1/validate--v1-pod",
    }
    assert all(hook["failurePolicy"] == "Fail" and hook["clientConfig"]["caBundle"] == "Q0E=" for hook in hooks.values())
    # The pod webhooks see JobSets' pods only (the kustomize patches' selector).
    for name in ("mpod.kb.io", "vpod.kb.io"):
        assert hooks[name]["objectSelector"] == {"matchExpressions": [
            {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


async def test_a_stopped_controller_leaves_no_webhook_or_lease_and_the_next_starts_at_once(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """First in the module: before the module's controller (the fixture) starts."""
    await tiers.check_restarts_at_once(
        real_cluster, lambda directory: jobset.JobSetController(real_cluster.kubeconfig, tiers.CONTEXT, directory),
        tmp_path)


@pytest.fixture
async def kubectl(real_jobset_controller: jobset.JobSetController, real_cluster: tiers.RealCluster,
                  tmp_path: pathlib.Path) -> sim_fixtures.Kubectl:
    return sim_fixtures.Kubectl(real_cluster.kubeconfig, tmp_path / "kube-cache")


@pytest.fixture
async def namespace(kubectl: sim_fixtures.Kubectl, request: pytest.FixtureRequest) -> Any:
    name = f"jobset-{request.node.name[5:40].replace('_', '-').rstrip('-')}"
    await kubectl("create", "namespace", name)
    yield name
    await kubectl("delete", "namespace", name, "--wait=false")


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_a_jobset_whose_trainers_depend_on_its_initializer_runs_to_completed(
    kubectl: sim_fixtures.Kubectl, namespace: str,
) -> None:
    await kubectl("apply", "-n", namespace, "-f", "-", input=DEPENDS_ON)
    await kubectl("wait", "-n", namespace, "--for=condition=Completed", "--timeout=120s", "jobset/depends",
                  timeout=130)
    jobs = {j["metadata"]["name"]: j for j in json.loads(
        (await kubectl("get", "jobs", "-n", namespace, "-o", "json")).stdout)["items"]}
    assert sorted(jobs) == ["depends-initializer-0", "depends-trainer-0", "depends-trainer-1"]
    initializer = jobs["depends-initializer-0"]
    for name in ("depends-trainer-0", "depends-trainer-1"):
        # dependsOn: the trainers' Jobs are made only once the initializer's is Complete.
        assert _time(jobs[name]["metadata"]["creationTimestamp"]) >= _time(initializer["status"]["completionTime"]).replace(microsecond=0)
        assert jobs[name]["status"].get("succeeded") == 2
        assert jobs[name]["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "trainer"
    stored = json.loads((await kubectl("get", "jobset", "depends", "-n", namespace, "-o", "json")).stdout)
    assert {(c["type"], c["status"]) for c in stored["status"]["conditions"]} >= {("Completed", "True")}
    assert {r["name"]: r["succeeded"] for r in stored["status"]["replicatedJobsStatus"]} == {
        "initializer": 1, "trainer": 2}
    service = json.loads((await kubectl("get", "service", "depends", "-n", namespace, "-o", "json")).stdout)
    assert service["spec"]["clusterIP"] == "None"  # the headless Service of the pods' host names


async def test_its_validating_webhook_refuses_a_first_replicated_job_with_depends_on(
    kubectl: sim_fixtures.Kubectl, namespace: str,
) -> None:
    document = yaml.safe_load(DEPENDS_ON)
    document["spec"]["replicatedJobs"].reverse()
    result = await kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(document), check=False)
    # Upstream's words, as kube-apiserver relays its webhook's Invalid answer (an aggregate of
    # plain errors, hence controller-runtime's "<nil>: Internal error" for each).
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        'The JobSet "depends" is invalid: ',
        "* <nil>: Internal error: DependsOn can't be set for the first ReplicatedJob",
        "* <nil>: Internal error: replicatedJob: trainer cannot depend on replicatedJob: initializer",
    ]

