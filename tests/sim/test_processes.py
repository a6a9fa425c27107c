"""The process runtime: pods of a process node run as real local processes (sim/node/processes.py).

Their env, args and working directory are the planned ones, their output is what `kubectl logs`
shows (`-f`, `--previous`), their exit codes are the containers' terminated states, restarts follow
restartPolicy, the cluster's names resolve to 127.0.0.1, and a command that cannot run here fails
its pod with StartError, never the kubelet.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

from sim import settings as sim_settings_module
from sim.node import nodes, processes


@pytest.fixture
def sim_settings(tmp_path: pathlib.Path) -> sim_settings_module.SimSettings:
    return sim_settings_module.SimSettings(
        kubeconfig=tmp_path / "kubeconfig", runtime="process", nodes=2, startup_delay=0.01, crash_backoff=0.2,
        pods_dir=tmp_path / "pods",
    )


def pod(name: str, script: str, *, policy: str = "Never", env: list[dict[str, Any]] | None = None,
        **container: Any) -> str:
    """A pod manifest (YAML is JSON) whose one container runs ``python3 -c script``."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "trainer"}, "annotations": {"team": "vision"}},
        "spec": {"restartPolicy": policy, "containers": [{
            "name": "main", "image": "python:3.11", "command": ["python3", "-c"], "args": [script],
            "env": env or [], **container,
        }]},
    })


async def wait_for(kubectl: Any, name: str, check: Callable[[dict[str, Any]], bool],
                   timeout: float = 20.0) -> dict[str, Any]:
    """The pod once ``check`` holds for it."""
    deadline = asyncio.get_running_loop().time() + timeout
    found: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        result = await kubectl("get", "pod", name, "-o", "json", check=False)
        if result.returncode == 0:
            found = json.loads(result.stdout)
            if check(found):
                return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {name}: the check never held; status {json.dumps(found.get('status'))}")


def phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase") or "")


def FINISHED(p: dict[str, Any]) -> bool:
    return phase(p) in ("Succeeded", "Failed")


def RUNNING(p: dict[str, Any]) -> bool:
    return phase(p) == "Running"


def SUCCEEDED(p: dict[str, Any]) -> bool:
    return phase(p) == "Succeeded"


def terminated(found: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = found["status"]["containerStatuses"][0]["state"]["terminated"]
    return state


async def test_a_pod_runs_with_its_planned_env_args_and_working_directory(kubectl: Any, tmp_path: pathlib.Path) -> None:
    await kubectl("create", "configmap", "hyper", "--from-literal=LR=0.01")
    await kubectl("create", "secret", "generic", "token", "--from-literal=TOKEN=s3cret")
    workdir = tmp_path / "project"
    workdir.mkdir()
    script = ("import os, sys; print(sys.argv[1:]); print(os.getcwd()); "
              "print(*(f'{k}={os.environ.get(k)}' for k in sys.argv[1:]), sep='\\n')")
    manifest = json.loads(pod("envs", script, workingDir=str(workdir), env=[
        {"name": "RANK", "value": "1"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "hyper", "key": "LR"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "TOKEN"}}},
        {"name": "MISSING", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "TAG", "value": "$(POD)-rank$(RANK)-$$(POD)-$(UNSET)"},
    ], resources={"limits": {"memory": "512Mi"}}))
    keys = ["RANK", "POD", "NS", "IP", "APP", "LR", "TOKEN", "MISSING", "MEM", "TAG", "HOSTNAME"]
    manifest["spec"]["containers"][0]["args"] += keys
    await kubectl("apply", "-f", "-", input=json.dumps(manifest))
    found = await wait_for(kubectl, "envs", FINISHED)
    assert found["status"]["phase"] == "Succeeded"
    assert found["status"]["podIP"] == processes.POD_IP
    assert terminated(found)["exitCode"] == 0 and terminated(found)["reason"] == "Completed"
    logs = (await kubectl("logs", "envs")).stdout.splitlines()
    assert logs[0] == str(keys)
    assert logs[1] == str(workdir)
    assert logs[2:] == ["RANK=1", "POD=envs", "NS=default", "IP=127.0.0.1", "APP=trainer", "LR=0.01",
                        "TOKEN=s3cret", "MISSING=None", "MEM=512", "TAG=envs-rank1-$(POD)-$(UNSET)", "HOSTNAME=envs"]


async def test_without_a_working_directory_a_pod_gets_a_scratch_directory_of_its_own(
        kubectl: Any, tmp_path: pathlib.Path) -> None:
    await kubectl("apply", "-f", "-", input=pod("scratch", "import os; open('out.txt', 'w').write('x'); "
                                                           "print(os.getcwd(), os.environ['HOME'])"))
    await wait_for(kubectl, "scratch", FINISHED)
    cwd, home = (await kubectl("logs", "scratch")).stdout.split()
    assert cwd == home and pathlib.Path(cwd).parent.parent == tmp_path / "pods"
    assert pathlib.Path(cwd).name == "work" and pathlib.Path(cwd, "out.txt").read_text() == "x"


@pytest.mark.parametrize("code, phase, reason", [
    pytest.param(0, "Succeeded", "Completed", id="exit-0-succeeds"),
    pytest.param(3, "Failed", "Error", id="exit-3-fails"),
])
async def test_the_exit_code_is_the_containers_terminated_state(kubectl: Any, code: int, phase: str,
                                                                reason: str) -> None:
    await kubectl("apply", "-f", "-", input=pod("exits", f"import sys; print('bye'); sys.exit({code})"))
    found = await wait_for(kubectl, "exits", FINISHED)
    assert found["status"]["phase"] == phase
    assert terminated(found)["exitCode"] == code and terminated(found)["reason"] == reason
    assert found["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_on_failure_restarts_in_place_and_logs_previous_shows_the_failed_run(kubectl: Any) -> None:
    script = ("import pathlib, sys; f = pathlib.Path('runs'); n = int(f.read_text()) if f.exists() else 0; "
              "f.write_text(str(n + 1)); print(f'run {n}'); sys.exit(0 if n == 2 else 7)")
    await kubectl("apply", "-f", "-", input=pod("flaky", script, policy="OnFailure"))
    found = await wait_for(kubectl, "flaky", FINISHED)
    status = found["status"]["containerStatuses"][0]
    assert found["status"]["phase"] == "Succeeded" and status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 7
    assert (await kubectl("logs", "flaky")).stdout == "run 2\n"
    assert (await kubectl("logs", "flaky", "--previous")).stdout == "run 1\n"


async def test_logs_previous_of_a_container_that_never_restarted_is_refused(kubectl: Any) -> None:
    await kubectl("apply", "-f", "-", input=pod("once", "print('only run')"))
    await wait_for(kubectl, "once", FINISHED)
    result = await kubectl("logs", "once", "--previous", check=False)
    assert result.returncode != 0
    assert 'previous terminated container "main" in pod "once" not found' in result.stderr


async def test_logs_follow_streams_a_running_process_until_it_exits(kubectl: Any) -> None:
    script = "import time\nfor i in range(5):\n    print(f'step {i}', flush=True); time.sleep(0.3)"
    await kubectl("apply", "-f", "-", input=pod("steps", script))
    await wait_for(kubectl, "steps", RUNNING)
    result = await kubectl("logs", "-f", "steps", timeout=30)
    assert result.stdout.splitlines() == [f"step {i}" for i in range(5)]


async def test_logs_follow_reads_its_flag_as_the_api_server_does_so_the_python_client_follows(
        kubectl: Any, tmp_path: pathlib.Path) -> None:
    """The ``kubernetes`` Python client (the kubeflow SDK's get_job_logs(follow=True)) sends ``follow=True``:
    kube-apiserver reads it with Go's strconv.ParseBool, and so does the sim."""
    from kubernetes import client, config, watch

    script = "import time\nfor i in range(5):\n    print(f'step {i}', flush=True); time.sleep(0.3)"
    await kubectl("apply", "-f", "-", input=pod("steps", script))
    await wait_for(kubectl, "steps", RUNNING)

    def follow() -> list[str]:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubectl.kubeconfig)))
        return list(watch.Watch().stream(api.read_namespaced_pod_log, name="steps", namespace="default",
                                         follow=True))

    assert await asyncio.to_thread(follow) == [f"step {i}" for i in range(5)]


@pytest.mark.parametrize("command, message", [
    pytest.param(["nosuch-trainer", "--epochs", "3"], 'exec: "nosuch-trainer": executable file not found in $PATH',
                 id="not-on-path"),
    pytest.param(["/opt/missing/train.sh"],
                 'exec: "/opt/missing/train.sh": stat /opt/missing/train.sh: no such file or directory',
                 id="no-such-path"),
])
async def test_a_command_that_cannot_run_here_fails_its_pod_with_start_error(
        kubectl: Any, command: list[str], message: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cannot"},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x", "command": command}]}}
    await kubectl("apply", "-f", "-", input=json.dumps(manifest))
    found = await wait_for(kubectl, "cannot", FINISHED)
    assert found["status"]["phase"] == "Failed" and found["status"]["reason"] == "StartError"
    assert found["status"]["message"] == f"container main: {message}"
    state = terminated(found)
    assert (state["exitCode"], state["reason"], state["message"]) == (128, "StartError", message)
    # The kubelet goes on: the next pod runs.
    await kubectl("apply", "-f", "-", input=pod("after", "print('still here')"))
    await wait_for(kubectl, "after", SUCCEEDED)


async def test_a_working_directory_that_does_not_exist_is_a_start_error(kubectl: Any) -> None:
    await kubectl("apply", "-f", "-", input=pod("nowd", "print(1)", workingDir="/nonexistent/workspace"))
    found = await wait_for(kubectl, "nowd", FINISHED)
    assert found["status"]["reason"] == "StartError"
    assert '"/nonexistent/workspace"' in terminated(found)["message"]


async def test_a_missing_config_map_keeps_the_container_waiting_until_it_exists(kubectl: Any) -> None:
    await kubectl("apply", "-f", "-", input=pod("needs", "import os; print(os.environ['LR'])", env=[
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "LR"}}}]))
    found = await wait_for(kubectl, "needs", lambda p: any(
        s["state"].get("waiting", {}).get("reason") == "CreateContainerConfigError"
        for s in (p.get("status") or {}).get("containerStatuses") or []))
    assert found["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == 'configmap "later" not found'
    await kubectl("create", "configmap", "later", "--from-literal=LR=0.5")
    await wait_for(kubectl, "needs", SUCCEEDED)
    assert (await kubectl("logs", "needs")).stdout == "0.5\n"


def service(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                       "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 23456}]}})


async def test_service_and_pod_names_of_the_namespace_resolve_to_loopback(kubectl: Any) -> None:
    await kubectl("apply", "-f", "-", input=service("job-master-0"))
    names = ["job-master-0", "job-master-0.default.svc.cluster.local", "late", "late.default"]
    script = ("import socket, sys, time\n"
              "time.sleep(1.0)\n"  # the second service is created meanwhile
              "for name in sys.argv[1:]:\n"
              "    print(name, socket.gethostbyname(name))\n")
    manifest = json.loads(pod("resolver", script))
    manifest["spec"]["containers"][0]["args"] += names
    await kubectl("apply", "-f", "-", input=json.dumps(manifest))
    await wait_for(kubectl, "resolver", RUNNING)
    await kubectl("apply", "-f", "-", input=service("late"))
    found = await wait_for(kubectl, "resolver", FINISHED)
    logs = (await kubectl("logs", "resolver")).stdout
    assert found["status"]["phase"] == "Succeeded", logs
    assert logs.splitlines() == [f"{name} 127.0.0.1" for name in names]
    # The machine's own /etc/hosts is left alone.
    assert "job-master-0" not in pathlib.Path("/etc/hosts").read_text()


async def test_a_deleted_pod_stops_its_process(kubectl: Any, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "pid"
    script = (f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); print('up', flush=True); "
              "time.sleep(600)")
    await kubectl("apply", "-f", "-", input=pod("server", script))
    await wait_for(kubectl, "server", RUNNING)
    for _ in range(100):
        if marker.exists() and marker.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(marker.read_text())
    await kubectl("delete", "pod", "server", "--wait=true", timeout=40)
    # sim's store removes a pod without finalizers at once (kube keeps it until the kubelet is done), so
    # the node agent stops the process when the deletion reaches its watch: soon, not before kubectl returns.
    deadline = asyncio.get_running_loop().time() + 10
    while _running(pid) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert not _running(pid), f"process {pid} of the deleted pod still runs 10 s after the pod was deleted"


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie); it may go while being read."""
    try:
        return "Z" not in pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:  # gone (FileNotFoundError, or ProcessLookupError mid-read)
        return False


async def test_a_pod_without_a_command_is_simulated_and_says_why(kubectl: Any) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "imageonly", "annotations": {"sim.kto.dev/duration": "100ms"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1"}]}}
    await kubectl("apply", "-f", "-", input=json.dumps(manifest))
    await wait_for(kubectl, "imageonly", SUCCEEDED)
    logs = (await kubectl("logs", "imageonly")).stdout
    assert ("runs processes, but container main has no command (the entrypoint of image 'trainer:1' is not "
            "known here): simulated") in logs


async def test_a_node_labelled_simulated_simulates_even_a_pod_with_a_command(kubectl: Any) -> None:
    for index in range(2):
        await kubectl("label", "node", nodes.node_name(index), f"{nodes.RUNTIME_LABEL}=simulated", "--overwrite")
    await asyncio.sleep(0.3)  # the kubelet's node watch
    await kubectl("apply", "-f", "-", input=pod("simulated", "import sys; sys.exit(5)"))
    found = await wait_for(kubectl, "simulated", FINISHED)
    assert found["status"]["phase"] == "Succeeded"  # the sim's default exit code, not the script's
    assert "process://" not in json.dumps(found["status"])


@pytest.mark.parametrize("text, env, expanded", [
    pytest.param("$(A)-$(B)", {"A": "1", "B": "2"}, "1-2", id="defined"),
    pytest.param("$(NOPE)", {}, "$(NOPE)", id="undefined-stays"),
    pytest.param("$$(A)", {"A": "1"}, "$(A)", id="escaped"),
    pytest.param("$$$(A)", {"A": "1"}, "$1", id="escape-then-reference"),
    pytest.param("a $ b", {}, "a $ b", id="lone-dollar"),
])
def test_references_expand_as_the_kubelet_expands_them(text: str, env: dict[str, str], expanded: str) -> None:
    assert processes.expand(text, env) == expanded


def test_the_hosts_file_keeps_the_machines_entries_and_adds_the_pods_names() -> None:
    the_pod = {"metadata": {"name": "job-worker-0", "namespace": "team"},
               "spec": {"hostname": "w0", "subdomain": "job", "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db"]}]}}
    names = processes.cluster_names("team", ["job-master-0"], [("w1", "job")])
    text = processes.hosts_text("127.0.0.1\tlocalhost\n", the_pod, names)
    lines = text.splitlines()
    assert lines[0] == "127.0.0.1\tlocalhost"
    assert "127.0.0.1\tw0.job.team.svc.cluster.local\tw0" in lines
    for name in ("job-master-0", "job-master-0.team", "job-master-0.team.svc", "job-master-0.team.svc.cluster.local",
                 "w1.job", "w1.job.team.svc.cluster.local"):
        assert f"127.0.0.1\t{name}" in lines
    assert lines[-1] == "10.1.2.3\tdb"


@pytest.mark.parametrize("restarts, delay", [
    pytest.param(0, 0.0, id="first-start"), pytest.param(1, 10.0, id="first-restart"),
    pytest.param(3, 40.0, id="doubling"), pytest.param(12, 300.0, id="capped"),
])
def test_crash_loop_back_off_doubles_up_to_five_minutes(restarts: int, delay: float) -> None:
    assert processes.backoff(restarts, 10.0) == delay


def test_the_python_of_a_pod_is_a_layer_over_kto_s_environment(tmp_path: pathlib.Path) -> None:
    """``python`` sees kto's packages, and what ``pip install`` adds in a pod stays in the pod's layer."""
    import subprocess

    layer = tmp_path / "layer"
    processes._python_layer(layer)
    python = layer / "bin" / "python"
    out = subprocess.run([str(python), "-c", "import sys, yaml, pydantic; print(sys.prefix)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(layer)
    assert pathlib.Path(sys.prefix) != layer
    script = layer / "bin" / "pip"
    if script.exists():  # a console script of kto's environment, bound to the layer's python
        assert script.read_text().splitlines()[0] == f"#!{python}"
