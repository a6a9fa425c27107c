"""Issue 12: ``kto replay`` and ``kto history`` on what the pipeline really wrote, on both tiers.

Jobs run through the watcher, reconciler and status worker; then, as a user runs them:
``kto replay`` makes every recorded pass, status write and act again and finds no
divergence; ``kto history --timeline`` shows each pod's life as the API server ended it;
``kto export`` copies the log, and a divergence planted in the copy (a status that was not
computed, a pod that was not planned) is found, named by its offset: as not authentic with the
signing keys (exit 3 with ``--verify``), as a divergence without them (exit 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job

ROOT = pathlib.Path(__file__).resolve().parents[2]


async def kto(pipeline: Pipeline, *args: str, keys: bool = True) -> subprocess.CompletedProcess[str]:
    """``kto ARGS`` with the services' signing keys (``KTO_SIGNING_KEYS``), or with none at all (``keys=False``:
    none named, and run where no ``kto up`` left its own)."""
    env = {**os.environ, **pipeline.kafka.to_env(), "PYTHONPATH": str(ROOT)}
    if not keys:
        env["KTO_SIGNING_KEYS"] = ""

    def call() -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory() as elsewhere:
            return subprocess.run([sys.executable, "-m", "kto", *args], capture_output=True, text=True,
                                  cwd=ROOT if keys else elsewhere, env=env, timeout=300, check=False)

    return await asyncio.get_running_loop().run_in_executor(None, call)


def restarting(name: str) -> dict[str, Any]:
    """A JAXJob whose worker 1 exits with a retryable code twice, then succeeds (ExitCode policy)."""
    manifest = job("JAXJob", name, {"Worker": (2, "ExitCode")}, "jax")
    manifest["spec"]["runPolicy"] = {"backoffLimit": 5}
    annotations = manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    annotations["sim.kto.dev/exit-code"] = "137"
    annotations["sim.kto.dev/fail-times"] = "1"
    return manifest


async def test_replay_of_a_run_finds_no_divergence_and_history_matches_the_pods_lives(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    ns = pipeline.namespace
    await pipeline.submit(job("PyTorchJob", "steady", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")},
                              "pytorch"))
    await pipeline.submit(restarting("bumpy"))
    await pipeline.wait_for("PyTorchJob", "steady", "Succeeded", timeout=90)
    await pipeline.wait_for("JAXJob", "bumpy", "Succeeded", timeout=120)
    await asyncio.sleep(2.0)  # the last status write and its observation reach the log

    replay = await kto(pipeline, "replay", "--all", "-n", ns, "-o", "json")
    assert "Traceback" not in replay.stderr, replay.stderr
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    document = json.loads(replay.stdout)
    reports = {r["key"].split("/")[-1]: r for r in document["jobs"]}
    assert set(reports) == {"steady", "bumpy"}
    for name, report in reports.items():
        assert report["ok"] and report["divergence"] is None, report
        assert report["unverifiable"] == [], report["unverifiable"]
        assert report["passes"] >= 1 and report["statuses"] >= 2 and report["acts"] >= 3, report
    assert reports["bumpy"]["passes"] >= 2, "the restart is a pass of its own"
    assert document["summary"]["diverged"] == 0

    history = await kto(pipeline, "history", "-n", ns, "pytorchjob/steady", "--timeline", "-o", "json")
    assert history.returncode == 0, history.stderr
    timeline = {row["pod"].split(" ")[0]: row for row in json.loads(history.stdout)["timeline"]}
    pods = {p["metadata"]["name"]: p for p in await pipeline.pods("steady")}
    assert set(timeline) == set(pods) == {"steady-master-0", "steady-worker-0", "steady-worker-1"}
    for name, pod in pods.items():
        row = timeline[name]
        assert row["phase"] == pod["status"]["phase"] == "Succeeded", row
        assert row["created"] <= row["scheduled"] <= row["running"] <= row["finished"], row

    # A copy of the log with two lies planted in it: replay finds both jobs' first divergence.
    archive = tmp_path / "archive"
    exported = await kto(pipeline, "export", "--out", str(archive), "-n", ns)
    assert exported.returncode == 0, exported.stderr
    planted: dict[str, int] = {}
    for path in archive.glob("*.jsonl"):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            row = json.loads(line)
            value = json.loads(row["value"])
            name = row["key"].split("/")[-1]
            if name in planted or value.get("type") != "decision":
                continue
            if name == "steady" and value["action"] == "status_written":
                value["detail"]["conditions"][-1][1] = "False"  # a status nobody computed
            elif name == "bumpy" and value["action"] == "child_created":
                value["child_name"] = "bumpy-worker-7"  # a pod no pass planned
            else:
                continue
            planted[name] = row["offset"]
            lines[index] = json.dumps({**row, "value": json.dumps(value)})
        path.write_text("\n".join(lines) + "\n")
    assert set(planted) == {"steady", "bumpy"}
    # With the keys, an altered record is caught before it is replayed: it is not authentic.
    checked = await kto(pipeline, "replay", "--all", "-n", ns, "--from", str(archive), "--verify")
    assert checked.returncode == 3, checked.stdout + checked.stderr
    for name, offset in planted.items():
        assert any(f"/{name}  NOT AUTHENTIC offset {offset}: bad signature" in line
                   for line in checked.stdout.splitlines()), checked.stdout
    assert "0 diverged" in checked.stdout
    # Without them (an archive read where the keys are not), replay still finds the lies by deciding again.
    lied = await kto(pipeline, "replay", "--all", "-n", ns, "--from", str(archive), keys=False)
    assert lied.returncode == 1, lied.stdout + lied.stderr
    assert "Traceback" not in lied.stderr
    lines = lied.stdout.splitlines()
    steady = next(line for line in lines if "/steady  " in line)
    bumpy = next(line for line in lines if "/bumpy  " in line)
    assert f"DIVERGED at offset {planted['steady']}: status_written conditions" in steady, lied.stdout
    assert f"DIVERGED at offset {planted['bumpy']}: child_created Pod/bumpy-worker-7" in bumpy, lied.stdout
    assert "recorded:" in lied.stdout and "derived:" in lied.stdout
    assert lines[-1].startswith("replayed 2 jobs") and "2 diverged" in lines[-1]

    # A log that begins after a pass (a broker that came back empty, or retention): the acts of
    # that pass are listed as not checked, with why, and nothing diverges.
    cut = tmp_path / "cut"
    exported = await kto(pipeline, "export", "--out", str(cut), "-n", ns)
    assert exported.returncode == 0, exported.stderr
    dropped = 0
    for path in cut.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        steady = [r for r in rows if r["key"].endswith("/steady")]
        first_act = next((i for i, r in enumerate(steady) if json.loads(r["value"]).get("action") == "child_created"),
                         None)
        if first_act is None:
            continue
        gone = {id(r) for r in steady[:first_act]}
        dropped += len(gone)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows if id(r) not in gone))
    assert dropped, "the copy begins at steady's first act"
    begun = await kto(pipeline, "replay", "-n", ns, "pytorchjob/steady", "--from", str(cut), "-o", "json")
    assert begun.returncode == 0, begun.stdout[-3000:] + begun.stderr[-2000:]
    (report,) = json.loads(begun.stdout)["jobs"]
    assert report["ok"], report
    assert any("child_created Pod/steady-" in line and "is not in the log, which begins after it" in line
               for line in report["unverifiable"]), report["unverifiable"]


async def test_replay_of_a_job_that_never_existed_or_an_empty_archive_is_one_line(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    missing = await kto(pipeline, "replay", "-n", pipeline.namespace, "pytorchjob/never")
    assert missing.returncode == 1
    assert missing.stderr.strip().startswith("kto replay: no records of pytorchjob/never"), missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = await kto(pipeline, "replay", "--all", "--from", str(empty))
    assert nothing.returncode == 2
    assert nothing.stderr.strip() == f"kto replay: error: --from {empty}: no .jsonl files (written by kto export)"
    (empty / "kto.jobs-0.jsonl").write_text('{"partition": 0, "offset": 0, "timestamp_ms": 1, "key": "a/b/PyTorchJob/c", '
                                            '"value": "{\\"schema_version\\": 9}"}\n{"trunc')
    damaged = await kto(pipeline, "replay", "--all", "--from", str(empty), keys=False)
    assert "Traceback" not in damaged.stderr, damaged.stderr
    assert f"{empty / 'kto.jobs-0.jsonl'}:2: not an exported record" in damaged.stderr
    assert "not checked: offset 0: does not decode (unknown schema_version 9" in damaged.stdout
    assert damaged.returncode == 0, "nothing diverged: what could not be read is listed"
