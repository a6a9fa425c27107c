"""Who may see what in ``kto console``, on both tiers (sim + Tansu, kube-apiserver + Kafka).

A ServiceAccount's token (from a TokenRequest) is reviewed by the cluster's API
server and shows only the namespaces and kinds its Role lets it list; a console
off loopback refuses a request without a token (401); on loopback such a request
is the kubeconfig's own user. The Host header is checked (DNS rebinding) and
every response carries the security headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from kto.console import authenticating, serving
from realparts import ports
from shared.kube import clients, resources
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.kto.test_console import DEAD, kubeconfig_with_a_dead_cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def console(pipeline: Pipeline, directory: pathlib.Path, *args: str,
                  kubeconfig: pathlib.Path | None = None) -> AsyncIterator[str]:
    """``kto console ARGS`` as a subprocess on a free port (of the pipeline's kubeconfig unless another
    is given): its URL on 127.0.0.1 once it printed ready."""
    port = ports.free()
    log = (directory / f"console-{port}.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", "console", "--kubeconfig", str(kubeconfig or pipeline.kubeconfig), "--bootstrap",
        pipeline.kafka.bootstrap, "--port", str(port), "--refresh", "0.5", *args,
        stdout=asyncio.subprocess.PIPE, stderr=log, cwd=ROOT, env={**os.environ, **pipeline.kafka.to_env()})
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode().strip()
        assert line.startswith("ready http://") and line.endswith(f":{port}/"), (line, log.name)
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
        log.close()


async def get(url: str, token: str | None = None, **headers: str) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
    """(status, the JSON or the page's text, the headers)."""
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        body = await (response.json() if response.content_type == "application/json" else response.text())
        return response.status, body, response.headers


def kubeconfig_token(kubeconfig: pathlib.Path) -> str:
    """The token of the kubeconfig's user of ``CLUSTER`` (both tiers' kubeconfigs use tokens)."""
    config = yaml.safe_load(kubeconfig.read_text())
    user = next(c for c in config["contexts"] if c["name"] == CLUSTER)["context"]["user"]
    return str(next(u for u in config["users"] if u["name"] == user)["user"]["token"])


def job(kind: str, name: str) -> dict[str, Any]:
    replicas = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}[kind]
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": "600s"}},
                "spec": {"containers": [{"name": "pytorch" if kind == "PyTorchJob" else "tensorflow",
                                         "image": "trainer"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name},
            "spec": {replicas: {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": template}}}}


async def a_viewer_of_pytorchjobs_in(client: clients.KubeClient, namespace: str) -> str:
    """A ServiceAccount allowed to list PyTorchJobs in ``namespace`` only; a token of it."""
    await client.create(resources.SERVICEACCOUNTS, namespace, {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer"}})
    await client.create(resources.ROLES, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pytorchjob-viewer"},
        "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list", "watch"]}]})
    await client.create(resources.ROLEBINDINGS, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pytorchjob-viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}]})
    made = await client.request("POST", resources.SERVICEACCOUNTS.path(namespace, "viewer", "token"), body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    return str(made["status"]["token"])


@pytest.fixture
async def namespaces(pipeline: Pipeline) -> AsyncIterator[tuple[str, str]]:
    """Two namespaces of this test, ``a`` (where the viewer may list PyTorchJobs) and ``b``, each with
    a PyTorchJob; ``a`` with a TFJob too."""
    made = tuple(f"auth-{which}-{uuid.uuid4().hex[:8]}" for which in "ab")
    for namespace in made:
        await pipeline.client.create(resources.NAMESPACES, None, {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    a, b = made
    for namespace, kind, name in ((a, "PyTorchJob", "seen"), (a, "TFJob", "other-kind"), (b, "PyTorchJob", "elsewhere")):
        await pipeline.client.create(resources.JOB_TYPES[kind], namespace, job(kind, name))
    try:
        yield a, b
    finally:
        for namespace in made:
            with contextlib.suppress(clients.ApiError):
                await pipeline.client.delete(resources.NAMESPACES, None, namespace)


async def listed(url: str, token: str | None, namespaces: tuple[str, str]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of the jobs of ``namespaces`` the console lists for ``token``."""
    for _ in range(100):  # the listing is refreshed every 0.5 s: the jobs made just now come within it
        status, listing, _ = await get(f"{url}/api/jobs", token)
        assert status == 200, listing
        found = {(j["namespace"], j["kind"], j["name"]) for j in listing["jobs"] if j["namespace"] in namespaces}
        if any(namespace == namespaces[0] for namespace, _, _ in found):
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no job of {namespaces[0]} was ever listed")


def secured(headers: Any) -> bool:
    return all(headers.get(name) == value for name, value in serving.SECURITY_HEADERS.items())


async def test_off_loopback_a_token_is_required_and_shows_only_what_its_user_may_list(
        pipeline: Pipeline, namespaces: tuple[str, str], tmp_path: pathlib.Path) -> None:
    a, b = namespaces
    viewer = await a_viewer_of_pytorchjobs_in(pipeline.client, a)
    admin = kubeconfig_token(pipeline.kubeconfig)
    async with console(pipeline, tmp_path, "--host", "0.0.0.0", "--allowed-host", "console.test") as url:
        # No token, a token no API server accepts, another scheme: 401 saying what to send.
        for token, headers, message in (
            (None, {}, "this console needs a bearer token: send 'Authorization: Bearer TOKEN'"),
            ("not-a-token", {}, "the bearer token was not accepted by the API server of any cluster"),
            (None, {"Authorization": "Basic dXNlcjpwYXNz"}, "the Authorization header must be 'Bearer TOKEN'"),
        ):
            status, body, answered = await get(f"{url}/api/jobs", token, **headers)
            assert (status, body) == (401, {"error": body["error"]}) and body["error"].startswith(message), body
            assert answered["WWW-Authenticate"] == 'Bearer realm="kto console"' and secured(answered)
            status, page, answered = await get(f"{url}/", token, **headers)
            assert status == 401 and message in page.replace("&#x27;", "'") and "Traceback" not in page
            assert secured(answered)

        # The viewer's token: PyTorchJobs of namespace a only, none of b, no TFJob.
        assert await listed(url, viewer, namespaces) == {(a, "PyTorchJob", "seen")}
        status, listing, _ = await get(f"{url}/api/jobs", viewer)
        assert {j["namespace"] for j in listing["jobs"]} == {a} and listing["choices"]["namespace"] == [a]
        for path, code in ((f"{a}/PyTorchJob/seen", 200), (f"{a}/TFJob/other-kind", 403),
                           (f"{b}/PyTorchJob/elsewhere", 403), (f"{b}/PyTorchJob/never", 403)):
            status, body, answered = await get(f"{url}/api/jobs/{CLUSTER}/{path}", viewer)
            assert status == code and secured(answered), (path, body)
            if code == 403:
                namespace, kind, _ = path.split("/")
                assert body == {"error": f"you may not list {kind}s in namespace {namespace} of cluster {CLUSTER}"}
        status, page, _ = await get(f"{url}/jobs/{CLUSTER}/{b}/PyTorchJob/elsewhere", viewer)
        assert status == 403 and f"you may not list PyTorchJobs in namespace {b}" in page
        status, _, _ = await get(f"{url}/api/jobs/{CLUSTER}/{b}/PyTorchJob/elsewhere/stream", viewer)
        assert status == 403

        # The kubeconfig's own token (a cluster admin's) sees both namespaces, every kind.
        assert await listed(url, admin, namespaces) == {
            (a, "PyTorchJob", "seen"), (a, "TFJob", "other-kind"), (b, "PyTorchJob", "elsewhere")}

        # The Host header: loopback names, --host and --allowed-host only.
        port = url.rsplit(":", 1)[1]
        for host, code in ((f"localhost:{port}", 200), (f"127.0.0.1:{port}", 200), (f"[::1]:{port}", 200),
                           (f"console.test:{port}", 200), ("console.test", 200),
                           (f"evil.example:{port}", 421), (f"127.0.0.1.evil.example:{port}", 421),
                           ("console.test:http", 400), ("a b", 400)):
            status, body, answered = await get(f"{url}/api/jobs", viewer, Host=host)
            assert status == code and secured(answered), (host, body)
            if code == 421:
                assert body["error"].startswith(f"this console does not serve the host {host.split(':')[0]!r}")
        reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
        writer.write(b"GET /api/jobs HTTP/1.0\r\nAuthorization: Bearer " + viewer.encode() + b"\r\n\r\n")
        answer = (await reader.read()).decode()
        writer.close()
        assert answer.startswith("HTTP/1.0 400") and "the request has no Host header" in answer, answer


async def test_on_loopback_a_request_without_a_token_is_the_kubeconfigs_user(
        pipeline: Pipeline, namespaces: tuple[str, str], tmp_path: pathlib.Path) -> None:
    a, b = namespaces
    viewer = await a_viewer_of_pytorchjobs_in(pipeline.client, a)
    kubeconfig = kubeconfig_with_a_dead_cluster(pipeline.kubeconfig, tmp_path)
    async with console(pipeline, tmp_path, kubeconfig=kubeconfig) as url:
        assert await listed(url, None, namespaces) == {
            (a, "PyTorchJob", "seen"), (a, "TFJob", "other-kind"), (b, "PyTorchJob", "elsewhere")}
        assert await listed(url, viewer, namespaces) == {(a, "PyTorchJob", "seen")}, "a token still counts"
        for path in ("/", f"/jobs/{CLUSTER}/{a}/PyTorchJob/seen", "/api/jobs", "/static/console.css",
                     "/no/such/page"):
            status, _, answered = await get(url + path)
            assert status == (404 if path == "/no/such/page" else 200) and secured(answered), path
        status, body, _ = await get(f"{url}/api/jobs", Host="attacker.example")
        assert status == 421 and "attacker.example" in body["error"]
        # A token no answering cluster accepts while another cluster cannot be asked: try again later.
        status, body, _ = await get(f"{url}/api/jobs", "not-a-token")
        assert (status, body) == (503, {"error": "the bearer token could not be reviewed: a cluster's API server "
                                                 "did not answer (try again)"})
        status, listing, _ = await get(f"{url}/api/jobs", viewer)
        errors = {c["name"]: c["error"] for c in listing["clusters"]}
        assert errors[CLUSTER] == "" and errors[DEAD] and "does not accept" not in errors[DEAD], errors


@pytest.mark.parametrize(("header", "refusal"), [
    pytest.param("127.0.0.1:8080", None, id="loopback-address"),
    pytest.param("LOCALHOST", None, id="localhost-any-case"),
    pytest.param("[::1]:8080", None, id="ipv6-loopback"),
    pytest.param("127.9.9.9", None, id="all-of-127/8"),
    pytest.param("console.test.:8080", None, id="an-allowed-name-with-a-trailing-dot"),
    pytest.param("10.0.0.5:8080", None, id="the-address-listened-on"),
    pytest.param(None, (400, "the request has no Host header"), id="missing"),
    pytest.param("[::1", (400, "the Host header '[::1' is not a host name"), id="unclosed-bracket"),
    pytest.param("user@evil.example", (400, "the Host header 'user@evil.example' is not a host name"),
                 id="userinfo"),
    pytest.param("rebound.evil.example:8080", (421, "this console does not serve the host 'rebound.evil.example' "
                                                    "(start it with `--allowed-host rebound.evil.example` if that "
                                                    "is its name)"), id="dns-rebinding"),
    pytest.param("localhost.evil.example", (421, "this console does not serve the host 'localhost.evil.example' "
                                                 "(start it with `--allowed-host localhost.evil.example` if that "
                                                 "is its name)"), id="a-name-that-starts-like-localhost"),
])
def test_the_host_header_names_loopback_the_address_listened_on_or_an_allowed_host(
        header: str | None, refusal: tuple[int, str] | None) -> None:
    assert authenticating.host_refusal(header, "10.0.0.5", ("console.test",)) == refusal
