"""Issue 19, item 4: no literal value from a spec, and no command output beyond a masked tail,
reaches a record — whatever shape carries it — and ``kto replay`` still agrees with honest
passes made from what the log keeps."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from typing import Any

import pytest

from shared.bus import reading, records, replaying
from shared.core import basis, effects, plans
from shared.core.elastic import deciding as et_deciding
from tests.core.elastic.world import KEYS, World, scaler, training_job

KEY = "c/ns/PyTorchJob/p"
DIGEST_KEY = b"the digest key of this test"
PLANTED = "pl4nted-Value-9f3b"


def planted(n: int) -> str:
    return f"{PLANTED}-{n}"


def observation(obj: dict[str, Any], kind: str = "Pod") -> records.Observation:
    return records.Observation(key=KEY, object_kind=kind, event="ADDED", object=obj)


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "busybox", **fields}


def pytorchjob(**fields: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [container(**fields)]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}}


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-master-0", "namespace": "ns"}, "spec": spec}


SHAPES = [
    pytest.param(pytorchjob(env=[{"name": "DATABASE_URL", "value": planted(1)}]), "PyTorchJob",
                 ["spec.pytorchReplicaSpecs[Master].template.spec.containers[0].env[0].value"], id="env-in-a-job-template"),
    pytest.param(pytorchjob(env=[{"name": "PGPASS", "value": planted(1)}, {"name": "MODEL", "value": planted(2)}]),
                 "PyTorchJob", [f"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].env[{i}].value"
                                for i in (0, 1)], id="env-whatever-its-name"),
    pytest.param(pytorchjob(command=["python", "-c", planted(1)], args=[f"--password={planted(2)}"]), "PyTorchJob",
                 ["spec.pytorchReplicaSpecs[Master].template.spec.containers[0].args[0]",
                  *(f"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].command[{i}]" for i in range(3))],
                 id="command-and-args-in-a-job-template"),
    pytest.param(pod({"initContainers": [container(command=["sh", "-c", planted(1)])],
                      "containers": [container(env=[{"name": "AUTH_HEADER", "value": planted(2)}])]}), "Pod",
                 ["spec.containers[0].env[0].value", "spec.initContainers[0].command[0]",
                  "spec.initContainers[0].command[1]", "spec.initContainers[0].command[2]"], id="init-container-of-a-pod"),
    pytest.param(pod({"containers": [container()], "ephemeralContainers": [container(args=[planted(1)])]}), "Pod",
                 ["spec.ephemeralContainers[0].args[0]"], id="ephemeral-container"),
    pytest.param(pod({"containers": [container(livenessProbe={"exec": {"command": ["check", planted(1)]}})]}), "Pod",
                 ["spec.containers[0].livenessProbe.exec.command[0]", "spec.containers[0].livenessProbe.exec.command[1]"],
                 id="probe-command"),
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                  "data": {"password": "cGw0bnRlZA=="}, "stringData": {"token": planted(1)}}, "Secret",
                 ["data.password", "stringData.token"], id="secret-data-and-stringData"),
    pytest.param({"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": "ScaleOut", "metadata": {"name": "out"},
                  "spec": {"script": "/s.sh", "env": [{"name": "S3_CREDENTIALS", "value": planted(1)}]}}, "ScaleOut",
                 ["spec.env[0].value"], id="scaler-env"),
    pytest.param({**pytorchjob(), "metadata": {
        "name": "p", "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"value": planted(1)}),
                        "team": "a"}}}, "PyTorchJob",
                 ["metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]", "metadata.managedFields"],
                 id="managedFields-and-last-applied-configuration"),
]


@pytest.mark.parametrize("digest_key", [pytest.param(b"", id="no-key"), pytest.param(DIGEST_KEY, id="keyed")])
@pytest.mark.parametrize(("obj", "kind", "paths"), SHAPES)
def test_an_observation_carries_no_literal_value_and_lists_the_paths_replaced(
    obj: dict[str, Any], kind: str, paths: list[str], digest_key: bytes,
) -> None:
    given = copy.deepcopy(obj)
    data = records.encode(observation(obj, kind), digest_key)
    assert PLANTED.encode() not in data and b"cGw0bnRlZA==" not in data
    decoded = records.decode(data)
    assert isinstance(decoded, records.Observation)
    assert decoded.redacted == sorted(paths)
    assert obj == given, "the caller's object is left alone"
    assert records.encode(decoded, digest_key) == data, "a record read back is written again as it was"


def test_what_is_dropped_goes_and_what_is_not_a_literal_stays() -> None:
    job = pytorchjob(env=[{"name": "E", "value": ""}, {"name": "F", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    job["metadata"] = {"name": "p", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
                       "managedFields": []}
    decoded = records.decode(records.encode(observation(job, "PyTorchJob")))
    assert isinstance(decoded, records.Observation)
    assert decoded.object["metadata"] == {"name": "p", "annotations": {"team": "a"}}
    env = decoded.object["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "E", "value": ""}, {"name": "F", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]


def test_a_value_becomes_a_keyed_digest_and_without_a_key_the_redacted_marker() -> None:
    expected = "kto-digest:" + hmac.new(DIGEST_KEY, b"hunter2", hashlib.sha256).hexdigest()[:24]
    assert records.digest("hunter2", DIGEST_KEY) == expected
    assert records.digest("hunter2", DIGEST_KEY) != records.digest("hunter3", DIGEST_KEY)
    assert records.digest("hunter2", b"another key") != expected
    assert records.digest("hunter2") == records.REDACTED
    assert records.is_replaced(expected) and records.is_replaced(records.REDACTED)
    assert not records.is_replaced("kto-digest:short")
    job = pytorchjob(env=[{"name": "A", "value": "same"}, {"name": "B", "value": "same"}])
    decoded = records.decode(records.encode(observation(job, "PyTorchJob"), DIGEST_KEY))
    assert isinstance(decoded, records.Observation)
    env = decoded.object["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["value"] == env[1]["value"] == records.digest("same", DIGEST_KEY), "equal values stay comparable"


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("export PGPASS='a b c' A=1  && timeout 30 sh /s.sh w-0:1",
                 "export PGPASS=<masked> A=<masked>  && timeout 30 sh /s.sh w-0:1", id="shell-assignments"),
    pytest.param('--db-password="x y" --user=me', "--db-password=<masked> --user=<masked>", id="flags"),
    pytest.param("Authorization: Bearer abc.def", "Authorization: Bearer <masked>", id="bearer"),
    pytest.param("got eyJhbGciOiJIUzI1NiJ9Abc123 back", "got <masked> back", id="mixed-case-token"),
    pytest.param("sha 0123456789abcdef0123456789abcdef", "sha <masked>", id="hex-token"),
    pytest.param("pod elastic-training-worker-10 (uid 6f0c4b8e-3c1e-4c55-9a3a-6b1f0d1c2a77) is Running",
                 "pod elastic-training-worker-10 (uid 6f0c4b8e-3c1e-4c55-9a3a-6b1f0d1c2a77) is Running",
                 id="names-and-uids-stay"),
])
def test_free_text_is_masked_where_it_looks_like_a_secret(text: str, expected: str) -> None:
    assert records.mask(text) == expected
    assert records.mask(expected) == expected


def test_an_output_keeps_a_masked_tail_of_256_characters() -> None:
    output = "x" * 1000 + f" API_TOKEN={PLANTED}"
    kept = records.tail(output)
    assert kept.startswith("[kto: 763 characters cut] ") and kept.endswith("API_TOKEN=<masked>")
    assert len(kept) - len("[kto: 763 characters cut] ") == records.OUTPUT_TAIL
    assert records.tail(kept) == kept and records.was_cut(kept)
    assert records.tail("done") == "done" and not records.was_cut("done")


def exec_decision(action: str, reason: str, message: str, **detail: Any) -> records.Decision:
    return records.Decision(key="c/ns/TrainingJob/t", action=action, reason=reason, message=message, detail=detail)


DECISIONS = [
    pytest.param(exec_decision("launcher_exec", "script", f"export PGPASS={PLANTED}  && timeout 30 sh /s.sh w-0:1",
                               ok=False, output="y" * 500 + f"\nPGPASS={PLANTED}\n"), id="launcher-exec"),
    pytest.param(exec_decision("step", "script-run", f"export S3_CREDENTIALS={PLANTED}  && sh /s.sh"),
                 id="script-run-step"),
    pytest.param(exec_decision("step", "scaler-phase", "ScaleFailed: execute script failed, error: "
                               + "z" * 2000 + f" token {PLANTED}Q1"), id="step-embedding-an-output"),
    pytest.param(exec_decision("child_create_failed", "", "", script=f"echo {PLANTED}",
                               command=["/bin/sh", "-c", f"echo {PLANTED}"], stdout=f"AUTH_HEADER={PLANTED}",
                               stderr="w" * 300 + PLANTED), id="detail-keys"),
    pytest.param(exec_decision("reconcile_pass", "", "", plan={"status": {"conditions": [
        {"type": "ScaleFailed", "message": f"error: DATABASE_URL={PLANTED}"}]}}, basis={
        "now": "2026-11-24T00:00:00+00:00",
        "job": {"kind": "PyTorchJob", "name": "p", "rv": "1", "uid": "u",
                "object": pytorchjob(env=[{"name": "X", "value": PLANTED}], args=[PLANTED])},
        "children": [{"kind": "Secret", "name": "s", "rv": "2", "uid": "s", "object": {
            "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": PLANTED}}}],
        "executed": [{"namespace": "ns", "pod": "t-launcher", "container": "c", "purpose": "script",
                      "command": ["/bin/sh", "-c", f"export K={PLANTED}"], "ok": True, "output": f"K={PLANTED}"}]}),
        id="basis-objects-executed-commands-and-plan"),
]


@pytest.mark.parametrize("digest_key", [pytest.param(b"", id="no-key"), pytest.param(DIGEST_KEY, id="keyed")])
@pytest.mark.parametrize("record", DECISIONS)
def test_a_decision_carries_no_literal_value_and_no_output_beyond_a_masked_tail(
    record: records.Decision, digest_key: bytes,
) -> None:
    data = records.encode(record, digest_key)
    assert PLANTED.encode() not in data
    decoded = records.decode(data)
    assert isinstance(decoded, records.Decision)
    assert records.encode(decoded, digest_key) == data, "a record read back is written again as it was"

    def outputs(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [v for k, v in node.items() if k in records.OUTPUT_DETAIL and isinstance(v, str)] + [
                o for v in node.values() for o in outputs(v)]
        return [o for v in node for o in outputs(v)] if isinstance(node, list) else []

    assert all(len(o) <= records.OUTPUT_TAIL + 40 for o in outputs(decoded.detail))
    assert len(decoded.message) <= records.MESSAGE_KEEP


def test_a_command_message_is_a_digest_of_the_command() -> None:
    script = f"export PGPASS={PLANTED}  && sh /s.sh"
    decoded = records.decode(records.encode(exec_decision("launcher_exec", "script", script), DIGEST_KEY))
    assert isinstance(decoded, records.Decision) and decoded.message == records.digest(script, DIGEST_KEY)


def test_a_recorded_command_is_matched_by_its_shape_and_digests_read_as_one() -> None:
    assert records.same_command([records.REDACTED, "-c", records.digest("x", DIGEST_KEY)], ("/bin/sh", "-c", "y"))
    assert not records.same_command([records.REDACTED], ("/bin/sh", "-c"))
    assert not records.same_command(["/bin/sh", "-c", "echo a"], ("/bin/sh", "-c", "echo b"))
    assert records.forget_digests({"a": [records.digest("x", DIGEST_KEY), "kept"]}) == {"a": [records.REDACTED, "kept"]}


def chain(world: World) -> tuple[effects.Effects, list[effects.ExecResult]]:
    """One reconcile pass of the world's job as the reconciler runs it: its commands run and fed back."""
    executed: list[effects.ExecResult] = []
    while True:
        decision = et_deciding.decide(world.job, list(world.children.values()), list(world.scalers), world.now,
                                         key_pair=lambda: KEYS, settings=world.settings, executed=executed)
        if not decision.execs:
            return decision, executed
        executed += [effects.ExecResult(c, True, "") for c in decision.execs]


@pytest.mark.parametrize("digest_key", [pytest.param(b"", id="no-key"), pytest.param(DIGEST_KEY, id="keyed")])
def test_replay_agrees_with_a_training_job_pass_whose_script_is_digested_on_the_log(digest_key: bytes) -> None:
    world = World(training_job())
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}, script="/s.sh", timeout=30,
                     env=[{"name": "S3_CREDENTIALS", "value": PLANTED}]))
    for _ in range(8):
        decision, executed = chain(world)
        if any(r.exec.purpose == "script" for r in executed):
            break
        world.apply(decision)
        world.run_all()
    else:
        raise AssertionError("the scaler's script never ran")
    every = [*world.children.values(), *(s.dump() for s in world.scalers)]
    the_basis = basis.describe(world.job.dump(), every, world.now, logged=lambda version: False,
                               settings=dict(vars(world.settings)), executed=[r.dump() for r in executed])
    record = records.Decision(key="c/default/TrainingJob/elastic-training", action=plans.PASS_ACTION,
                              source="reconciler", instance="r",
                              detail={"plan": decision.plan(), "basis": the_basis})
    data = records.encode(record, digest_key)
    assert PLANTED.encode() not in data
    entry = reading.Entry(0, 0, 0, record.key, records.decode(data))
    report = replaying.replay_job(record.key, [entry])
    assert report.passes == 1 and report.ok and report.unverifiable == [], report
