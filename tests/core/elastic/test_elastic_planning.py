"""The children of a TrainingJob and the launcher scripts, as upstream builds them (spec B.6, B.9)."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest

from shared.api import elastic
from shared.core import owners
from shared.core.elastic import defaulting, naming, planning
from shared.core.elastic.settings import ElasticSettings
from tests.core.elastic.world import scaler, training_job

JOB = "elastic-training"
KTO = {"training.kubeflow.org/job-name": JOB}
"""kto's own label beside upstream's (its watcher selects every child by it)."""


def job(**spec: Any) -> elastic.TrainingJob:
    return defaulting.set_defaults(training_job(**spec))


def limits(value: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [{"name": "w", "image": "i", "resources": {"limits": value}}]}}}


@pytest.mark.parametrize(
    ("spec", "slots"),
    [
        pytest.param({"worker": limits({"nvidia.com/gpu": "4"})}, 4, id="the-gpu-limit-of-the-first-worker-container"),
        pytest.param({"worker": limits({"cpu": "2"})}, 1, id="one-without-a-gpu-limit"),
        pytest.param({"worker": limits({"nvidia.com/gpu": 4}), "slotsPerWorker": 2}, 2, id="slotsPerWorker-wins"),
    ],
)
def test_slots_per_worker_fall_back_to_the_gpu_limit_then_one(spec: dict[str, Any], slots: int) -> None:
    trained = job(**spec)
    assert planning.slots(trained) == slots
    assert planning.hostfile([f"{JOB}-worker-0"], planning.slots(trained)) == f"{JOB}-worker-0:{slots}\n"


@pytest.mark.parametrize(
    ("mode", "command"),
    [
        pytest.param("ssh", ["sh", "-c", "/usr/sbin/sshd  && sleep 365d"], id="ssh-starts-sshd"),
        pytest.param("kubexec", ["sh", "-c", "sleep 365d"], id="kubexec-only-sleeps"),
    ],
)
def test_a_worker_without_a_command_gets_upstreams(mode: str, command: list[str]) -> None:
    pod = planning.worker_pod(job(launcherAttachMode=mode), f"{JOB}-worker-3")
    assert pod["spec"]["containers"][0]["command"] == command
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"] == {"group-name": "kai.alibabacloud.com", "training-job-name": JOB,
                                         "training-job-role": "worker", "replica-index": "3", **KTO}
    assert pod["metadata"]["ownerReferences"] == [owners.reference(job())]
    mounted = any(v.get("secret", {}).get("secretName") == JOB for v in pod["spec"].get("volumes", []))
    assert mounted == (mode == "ssh")


def test_the_ssh_secret_is_mounted_into_every_container_under_root_ssh() -> None:
    pod = planning.worker_pod(job(), f"{JOB}-worker-0")
    [volume] = pod["spec"]["volumes"]
    assert volume["secret"]["defaultMode"] == 0o600
    assert [i["path"] for i in volume["secret"]["items"]] == [".ssh/id_rsa", ".ssh/id_rsa.pub", ".ssh/authorized_keys",
                                                              ".ssh/config"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": JOB, "mountPath": "/root/.ssh", "subPath": ".ssh"}]


def test_the_secret_annotation_names_the_mounted_secret() -> None:
    document = training_job().dump()
    document["metadata"]["annotations"] = {"arena.kubeflow.org/ssh-secret": "shared-keys"}
    pod = planning.worker_pod(defaulting.set_defaults(elastic.load_training_job(document)), f"{JOB}-worker-0")
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "shared-keys"


def test_a_scale_out_worker_is_labelled_with_its_scaler() -> None:
    assert planning.worker_pod(job(), f"{JOB}-worker-2", "so")["metadata"]["labels"]["scaleout-name"] == "so"


def test_each_worker_has_a_headless_service_of_its_name() -> None:
    service = planning.worker_service(job(), f"{JOB}-worker-1")
    assert service["metadata"]["name"] == f"{JOB}-worker-1"
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": naming.worker_labels(job(), 1),
        "ports": [{"name": "ssh-port", "port": 22}, {"name": "kubeai-service-port", "port": 9009}],
    }


def test_the_config_map_holds_both_hostfiles_and_the_scripts() -> None:
    config = planning.config_map(job(), [f"{JOB}-worker-0", f"{JOB}-worker-1"])
    assert config["metadata"]["labels"] == {"app": JOB, **KTO}
    assert config["data"] == {
        "hostfile": f"{JOB}-worker-0:1\n{JOB}-worker-1:1\n",
        "deepspeed-hostfile": f"{JOB}-worker-0 slots=1\n{JOB}-worker-1 slots=1\n",
        "discover_hosts.sh": "#!/bin/bash\nwhile read line\ndo\necho $line\ndone < /etc/edl/hostfile\n",
        "kubexec.sh": '#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n/opt/kube/kubectl exec ${POD_NAME} '
                      '--container mnist-elastic -- /bin/sh -c "$*"',
    }


def test_the_launcher_copies_the_hostfile_somewhere_writable_and_mounts_the_config() -> None:
    pod = planning.launcher_pod(job(), ElasticSettings(init_container_image="busybox:1"))
    spec = pod["spec"]
    assert (spec["serviceAccountName"], spec["restartPolicy"]) == (f"{JOB}-launcher", "Never")
    assert pod["metadata"]["labels"] == {"group-name": "kai.alibabacloud.com", "training-job-name": JOB,
                                         "training-job-role": "launcher", **KTO}
    [init] = spec["initContainers"]
    assert (init["name"], init["image"], init["imagePullPolicy"]) == ("init-hostfile", "busybox:1", "IfNotPresent")
    assert init["command"][2] == (
        "cp /etc/mpi/hostfile /etc/edl/hostfile && chmod 600 /etc/edl/hostfile && "
        "cp /etc/mpi/discover_hosts.sh /etc/edl/discover_hosts.sh && chmod +x /etc/edl/discover_hosts.sh && "
        "cp /etc/mpi/deepspeed-hostfile /job/hostfile && chmod 600 /job/hostfile")
    assert init["resources"]["limits"] == {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    mounts = [(m["name"], m["mountPath"]) for m in spec["containers"][0]["volumeMounts"]]
    assert mounts == [("training-job-hostfile", "/etc/edl"), ("training-job-config", "/etc/mpi"),
                      ("training-job-kubectl", "/opt/kube"), ("deepspeed-hostfile", "/job"), (JOB, "/root/.ssh")]
    config = next(v for v in spec["volumes"] if v["name"] == "training-job-config")
    assert [(i["key"], i["mode"]) for i in config["configMap"]["items"]] == [
        ("hostfile", 0o444), ("discover_hosts.sh", 0o444), ("kubexec.sh", 0o555), ("deepspeed-hostfile", 0o444)]


def test_a_kubexec_launcher_uses_the_kubexec_script_as_its_rsh_agent() -> None:
    pod = planning.launcher_pod(job(launcherAttachMode="kubexec"), ElasticSettings())
    assert pod["spec"]["containers"][0]["env"] == [{"name": "OMPI_MCA_plm_rsh_agent", "value": "/etc/mpi/kubexec.sh"}]


READ_PODS = {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}
READ_CONFIG = {"verbs": ["get"], "apiGroups": [""], "resources": ["configmap"], "resourceNames": [f"{JOB}-config"]}


@pytest.mark.parametrize(
    ("workers", "rules"),
    [
        pytest.param([f"{JOB}-worker-10", f"{JOB}-worker-2"],
                     [READ_PODS, {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["pods/exec"],
                                  "resourceNames": [f"{JOB}-worker-2", f"{JOB}-worker-10"]}, READ_CONFIG],
                     id="exec-into-each-worker-named-in-index-order"),
        # Upstream's exec rule names no pod: exec into every pod of the namespace.
        pytest.param([], [READ_PODS, READ_CONFIG], id="no-worker-no-exec-rule"),
    ],
)
def test_the_launcher_role_names_every_pod_it_may_exec_into(workers: list[str], rules: list[dict[str, Any]]) -> None:
    role = planning.role(job(), workers)
    assert role["rules"] == rules
    assert planning.exec_allowed(role) == frozenset(workers)


def test_an_exec_rule_without_names_as_upstream_writes_it_allows_every_pod() -> None:
    upstream = {"rules": [READ_PODS, {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]}]}
    assert planning.exec_allowed(upstream) is None


def test_the_launcher_role_binding_is_upstreams() -> None:
    binding = planning.role_binding(job())
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{JOB}-launcher", "namespace": "default"}]


@pytest.mark.parametrize(
    ("env", "command"),
    [
        pytest.param([{"name": "A", "value": "1"}], "export A=1  && timeout 30 sh /s.sh job-worker-2:1,job-worker-3:1",
                     id="env-exported-before-two-spaces-and-&&"),
        pytest.param([], " timeout 30 sh /s.sh job-worker-2:1,job-worker-3:1", id="no-env-leaves-a-leading-space"),
    ],
)
def test_a_custom_script_command_is_built_exactly_as_upstream(env: list[dict[str, str]], command: str) -> None:
    custom = scaler("ScaleOut", "so", job="job", script="/s.sh", timeout=30, env=env)
    assert planning.scaler_script(custom, ["job-worker-2", "job-worker-3"], 1) == command


@pytest.mark.parametrize(
    ("mode", "attached"),
    [pytest.param("ssh", "ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no", id="ssh"),
     pytest.param("kubexec", "/etc/mpi/kubexec.sh", id="kubexec")],
)
def test_a_worker_counts_as_shut_down_when_no_launcher_process_is_attached(mode: str, attached: str) -> None:
    trained = job(launcherAttachMode=mode)
    assert planning.probe_script(trained) == f"ps -ef | grep '{attached}'"
    output = f"root 10 1 0 12:00 ? 00:00:00 {attached} {JOB}-worker-1 orted\n"
    assert planning.shut_down(trained, output, [f"{JOB}-worker-1", f"{JOB}-worker-2"]) == [f"{JOB}-worker-2"]


@pytest.mark.parametrize(
    ("names", "sorted_names", "max_index"),
    [
        pytest.param([f"{JOB}-worker-10", f"{JOB}-worker-9", f"{JOB}-worker-2"],
                     [f"{JOB}-worker-2", f"{JOB}-worker-9", f"{JOB}-worker-10"], 10, id="by-number-not-by-text"),
        pytest.param([], [], -1, id="none"),
    ],
)
def test_workers_sort_by_index(names: list[str], sorted_names: list[str], max_index: int) -> None:
    assert naming.sorted_workers(JOB, names) == sorted_names
    assert naming.max_index(names) == max_index


HOSTILE = [
    pytest.param("1; touch {marker} #", id="a-semicolon-and-a-comment"),
    pytest.param("$(touch {marker})", id="a-command-substitution"),
    pytest.param("`touch {marker}`", id="backticks"),
    pytest.param("'; touch {marker}; '", id="a-closing-single-quote"),
    pytest.param("x\ntouch {marker}", id="a-newline"),
    pytest.param("x && touch {marker} || touch {marker}", id="and-or-lists"),
    pytest.param("x | touch {marker}", id="a-pipe"),
]


def run_sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_env_value_is_exported_as_text_and_runs_nothing(value: str, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "pwned"
    hostile = value.format(marker=marker)
    echo = tmp_path / "echo.sh"
    echo.write_text('printf "%s|%s" "$A" "$1"\n')
    custom = scaler("ScaleOut", "so", job="job", script=str(echo), timeout=30,
                    env=[{"name": "A", "value": hostile}, {"name": "B_2", "value": hostile}])
    ran = run_sh(planning.scaler_script(custom, ["job-worker-2", "job-worker-3"], 1))
    assert not marker.exists(), "the value ran as a command"
    assert (ran.returncode, ran.stdout) == (0, f"{hostile}|job-worker-2:1,job-worker-3:1")


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_script_path_is_one_word_and_runs_nothing(value: str, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "pwned"
    custom = scaler("ScaleOut", "so", job="job", script=value.format(marker=marker), timeout=30)
    run_sh(planning.scaler_script(custom, ["job-worker-2"], 1))
    assert not marker.exists(), "the script path ran as a command"


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_worker_name_reaches_the_hostfile_as_text(
    value: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker, hostfile = tmp_path / "pwned", tmp_path / "hostfile"
    monkeypatch.setattr(planning, "HOSTFILE_PATH", str(hostfile))
    name = value.format(marker=marker)
    ran = run_sh(planning.hostfile_script(["job-worker-0", name], 2))
    assert not marker.exists(), "the worker name ran as a command"
    assert (ran.returncode, hostfile.read_text()) == (0, f"job-worker-0:2\n{name}:2\n\n")


@pytest.mark.parametrize("name", [
    pytest.param("A;touch x", id="a-semicolon"), pytest.param("1A", id="a-leading-digit"),
    pytest.param("A-B", id="a-dash"), pytest.param("", id="empty"),
])
def test_a_script_is_not_built_with_an_env_name_that_is_not_a_shell_identifier(name: str) -> None:
    custom = scaler("ScaleOut", "so", job="job", script="/s.sh", env=[{"name": name, "value": "1"}])
    with pytest.raises(ValueError, match="shell identifier"):
        planning.scaler_script(custom, ["job-worker-2"], 1)


def test_a_kubexec_container_name_is_quoted_in_the_script() -> None:
    trained = job(launcherAttachMode="kubexec", worker={"template": {"spec": {"containers": [
        {"name": "w; touch /tmp/x", "image": "i"}]}}})
    assert planning.kubexec_script(trained).endswith(
        "kubectl exec ${POD_NAME} --container 'w; touch /tmp/x' -- /bin/sh -c \"$*\"")
