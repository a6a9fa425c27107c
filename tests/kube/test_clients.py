"""Issue 19, item 4: the command of an exec (in its URL's query string) is in no error a caller
sees, logs or records on a span — against the local cluster (sim/), and one gone away."""

from __future__ import annotations

import pathlib
import traceback

import aiohttp
import multidict
import pytest
import yarl

from shared.kube import clients
from sim import cluster as sim_cluster
from sim.settings import SimSettings

COMMAND = ["/bin/sh", "-c", "export PGPASS=pl4nted-exec-value && sh /s.sh"]


def said(exc: BaseException) -> str:
    """Everything an exception shows: its message and the traceback a log line or a span event prints."""
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize("cluster_gone", [pytest.param(False, id="pod-missing"), pytest.param(True, id="cluster-gone")])
async def test_an_exec_that_fails_names_the_pod_never_the_command(tmp_path: pathlib.Path, cluster_gone: bool) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    async with sim_cluster.Cluster(SimSettings(kubeconfig=kubeconfig, nodes=1)):
        client = await clients.KubeClient.connect(kubeconfig)
        if not cluster_gone:
            with pytest.raises(clients.ApiError) as refused:
                await client.exec("default", "missing", "main", COMMAND, timeout=10)
    if cluster_gone:
        with pytest.raises(clients.ApiError) as refused:
            await client.exec("default", "missing", "main", COMMAND, timeout=10)
    await client.close()
    assert refused.value.code == (0 if cluster_gone else 404)
    assert "pl4nted" not in said(refused.value) and "command=" not in said(refused.value), said(refused.value)


def test_a_response_error_is_told_without_its_url() -> None:
    url = yarl.URL("https://api:6443/api/v1/namespaces/ns/pods/p/exec").with_query(command="pl4nted")
    info = aiohttp.RequestInfo(url, "GET", multidict.CIMultiDictProxy(multidict.CIMultiDict()), url)
    error = aiohttp.ClientResponseError(info, (), status=403, message="Forbidden")
    assert "pl4nted" in str(error), "aiohttp prints the URL"
    assert clients._without_url(error) == "ClientResponseError: 403 Forbidden"
