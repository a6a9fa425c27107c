"""Kubeflow's training-operator as a part (realparts/upstream.py): it starts once its PyTorchJob
controller runs, on a fresh cluster and a warm one, with its webhook certificate handed over as the
kubelet would and kept in step with the Secret; two started at once both start (the fixed
certificate path is held by one at a time); a start that stalls fails at once with its last lines.

The operator tests run the real binary against the session's real control plane (CI=true, or
KTO_SKIP_REAL unset); the log, projection and lock tests need nothing but the machine.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import subprocess
import time

import pytest

from realparts import caching, controllerruntime, upstream
from shared.kube import clients, resources
from tests.fixtures import tiers

ROTATOR_LINE = ('2026-11-27T02:30:01Z\tINFO\tStarting workers\t{"controller": "cert-rotator", '
                '"worker count": 1}')
JOB_LINE = ('2026-11-27T02:30:07Z\tINFO\tStarting workers\t{"controller": "pytorchjob-controller", '
            '"controllerGroup": "kubeflow.org", "controllerKind": "PyTorchJob", "worker count": 1}')
WAITING_LINE = "2026-11-27T02:30:01Z\tINFO\tsetup\tWaiting for certificate generation to complete"


@pytest.mark.parametrize(("log", "started"), [
    pytest.param(WAITING_LINE, False, id="waiting-for-its-certificate"),
    pytest.param(f"{WAITING_LINE}\n{ROTATOR_LINE}", False, id="only-the-cert-rotator-runs"),
    pytest.param(f"{WAITING_LINE}\n{ROTATOR_LINE}\n{JOB_LINE}\n", True, id="the-job-controller-runs"),
    pytest.param(JOB_LINE.replace('": "', '":"'), True, id="fields-without-spaces"),
    pytest.param(JOB_LINE[:90], False, id="a-line-cut-short"),
])
def test_the_operator_counts_as_started_only_once_its_job_controller_runs(log: str, started: bool) -> None:
    assert controllerruntime.workers_started(log, upstream.JOB_CONTROLLER) is started


def test_the_certificate_is_projected_as_the_kubelet_projects_a_secret(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "serving-certs"
    upstream.project(target, {"ca.crt": b"ca-1", "tls.crt": b"crt-1", "tls.key": b"key-1", "ca.key": b"cakey-1"})
    first = os.readlink(target / "..data")
    assert {name: (target / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key", "ca.key")} == {
        "ca.crt": b"ca-1", "tls.crt": b"crt-1", "tls.key": b"key-1", "ca.key": b"cakey-1"}
    # A later write of the Secret: the new set at once, the old directory and a dropped key gone.
    upstream.project(target, {"ca.crt": b"ca-2", "tls.crt": b"crt-2", "tls.key": b"key-2"})
    assert (target / "tls.crt").read_bytes() == b"crt-2" and (target / "tls.key").read_bytes() == b"key-2"
    assert (target / "tls.crt").is_symlink() and os.readlink(target / "tls.crt") == "..data/tls.crt"
    assert not (target / first).exists() and not (target / "ca.key").exists()
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith("..")) == ["ca.crt", "tls.crt", "tls.key"]


async def test_the_lock_lasts_as_long_as_the_operator_it_was_handed_to(tmp_path: pathlib.Path) -> None:
    lock = tmp_path / "serving-certs.lock"
    fd = await upstream._hold(lock, 1.0, None)
    child = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))
    try:
        os.close(fd)  # kto's copy gone (a kto killed mid-run): the operator still holds it
        with pytest.raises(caching.PartError, match=rf"\(pid {os.getpid()}\) has held .* for over 0.5s"):
            await upstream._hold(lock, 0.5, None)
    finally:
        child.kill()
        child.wait()
    os.close(await upstream._hold(lock, 1.0, None))


def holds_the_lock(pid: int) -> bool:
    """Whether process ``pid`` has the lock file open (another run, on another pytest worker,
    may take the lock the moment this one lets it go: whether it is free says nothing)."""
    try:
        fds = list(pathlib.Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return False
    return any(os.path.realpath(fd) == str(upstream.CERT_LOCK) for fd in fds)


async def certificate_files(cluster: tiers.RealCluster) -> dict[str, bytes]:
    """The Secret's certificate files, as the operator should find them."""
    async with await clients.KubeClient.connect(cluster.kubeconfig, tiers.CONTEXT) as client:
        secret = await client.get(resources.SECRETS, upstream.NAMESPACE, upstream.CERT_SECRET)
    return {name: base64.b64decode(secret["data"][name]) for name in upstream.CERT_FILES}


def mounted() -> dict[str, bytes]:
    return {name: (upstream.CERT_DIR / name).read_bytes() for name in upstream.CERT_FILES
            if (upstream.CERT_DIR / name).exists()}


async def test_the_operator_starts_its_job_controller_with_the_secret_mounted(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    log = tmp_path / "training-operator.log"
    async with upstream.TrainingOperator(real_cluster.kubeconfig, tiers.CONTEXT, log) as operator:
        assert controllerruntime.workers_started(log.read_text(), upstream.JOB_CONTROLLER)
        pid = operator.pid
        assert pid is not None and holds_the_lock(pid) and holds_the_lock(os.getpid())
        assert mounted() == await certificate_files(real_cluster)
        # The rotator writes the Secret again (here: its server certificate found missing):
        # the files follow, as a kubelet's mount of the Secret would.
        first = mounted()["tls.crt"]
        async with await clients.KubeClient.connect(real_cluster.kubeconfig, tiers.CONTEXT) as client:
            await client.patch(resources.SECRETS, upstream.NAMESPACE, upstream.CERT_SECRET,
                               [{"op": "remove", "path": "/data/tls.crt"}], patch_type="json")
        deadline = time.monotonic() + 30
        while mounted().get("tls.crt", first) == first and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert mounted()["tls.crt"] != first
        assert mounted() == await certificate_files(real_cluster)
        assert "refreshing server certs" in log.read_text()
    assert not holds_the_lock(os.getpid()) and not holds_the_lock(pid)


async def test_two_operators_started_at_once_both_start_one_after_the_other(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """As two pytest-xdist workers (or a test and ``kto bench``) would: the fixed certificate path
    is held by one run at a time, so the second starts once the first has stopped."""
    spans: dict[str, tuple[float, float]] = {}
    said: list[str] = []

    async def run(name: str) -> None:
        log = tmp_path / f"{name}.log"
        async with upstream.TrainingOperator(real_cluster.kubeconfig, tiers.CONTEXT, log,
                                             progress=said.append):
            began = time.monotonic()
            assert controllerruntime.workers_started(log.read_text(), upstream.JOB_CONTROLLER)
            assert mounted() == await certificate_files(real_cluster)
            await asyncio.sleep(1.0)
        spans[name] = (began, time.monotonic())

    await asyncio.gather(run("first"), run("second"))
    (a_start, a_end), (b_start, b_end) = sorted(spans.values())
    assert a_end <= b_start, spans
    assert said and all(line.startswith("waiting for the training-operator run of pid ") for line in said), said
    assert not holds_the_lock(os.getpid())


async def test_an_operator_that_does_not_start_its_job_controller_in_time_fails_with_its_last_lines(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """Its fastest start measured is 0.6 s (the rotator waits at least one back-off step of 1 s for
    the files unless they are in place when it first looks): 0.2 s is a start that stalls."""
    log = tmp_path / "training-operator.log"
    operator = upstream.TrainingOperator(real_cluster.kubeconfig, tiers.CONTEXT, log, start_timeout=0.2)
    began = time.monotonic()
    with pytest.raises(caching.PartError, match="did not start its pytorchjob-controller within 0.2s; "
                                                f"last lines of {log}: "):
        async with operator:
            pytest.fail("started")
    assert time.monotonic() - began < 10
    assert operator.pid is None and not holds_the_lock(os.getpid())
