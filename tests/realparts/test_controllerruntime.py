"""What realparts/controllerruntime.py reads of a manager and gives it: when it leads, and a
kubeconfig of one cluster for a binary that takes no context."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from realparts import controllerruntime

KLOG_LEADING = 'I1127 17:11:34.862972   18700 leaderelection.go:272] "Successfully acquired lease" lock="ns/name"'
KLOG_TRYING = 'I1127 17:12:18.600421   19229 leaderelection.go:258] "Attempting to acquire leader lease..." lock="ns/x"'


@pytest.mark.parametrize(("log", "leading"), [
    pytest.param(KLOG_TRYING, False, id="still-trying"),
    pytest.param(f"{KLOG_TRYING}\n{KLOG_LEADING}\n", True, id="won-the-lease"),
    pytest.param("I1127 leaderelection.go:253] successfully acquired lease ns/name", True, id="older-client-go"),
])
def test_a_manager_leads_once_client_go_says_it_won_the_lease(log: str, leading: bool) -> None:
    assert controllerruntime.leads(log) is leading


def test_a_kubeconfig_of_several_clusters_is_given_with_the_context_current(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a").mkdir()
    merged = tmp_path / "a" / "kubeconfig"
    merged.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kto-1",
        "clusters": [{"name": c, "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": "ca.crt"}}
                     for c, port in (("kto-1", 1), ("kto-2", 2))],
        "users": [{"name": "kto-2", "user": {"token": "t"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in ("kto-1", "kto-2")],
    }))
    written = controllerruntime.context_kubeconfig(merged, "kto-2", tmp_path / "kubeconfig")
    config = yaml.safe_load(written.read_text())
    assert config["current-context"] == "kto-2"
    assert {c["cluster"]["certificate-authority"] for c in config["clusters"]} == {str(tmp_path / "a" / "ca.crt")}
    assert written.stat().st_mode & 0o777 == 0o600, "it holds the credentials"
