"""``kto history`` as a user runs it: a subprocess reading the real (Tansu) broker's kto.jobs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.bus import producing, records
from shared.bus.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
KEY = "kto-1/team-a/PyTorchJob/mnist"
OTHER = "kto-1/team-b/TFJob/dist"


async def kto(bus: KafkaSettings, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **bus.to_env()}

    def call() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kto", command, *args], capture_output=True, text=True,
                              cwd=ROOT, env=env, timeout=120, check=False)

    return await asyncio.get_running_loop().run_in_executor(None, call)


async def history(bus: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    return await kto(bus, "history", *args)


def pod(name: str, uid: str, phase: str, node: str = "", restarts: int = 0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "uid": uid},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "restartCount": restarts}]}}


async def publish_story(bus: KafkaSettings) -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mnist", "namespace": "team-a"},
           "spec": {}}
    async with producing.Publisher(bus, "watcher", "w-1") as pub:
        await pub.publish(records.Observation(key=KEY, object_kind="PyTorchJob", event="ADDED", object=job,
                                              source="watcher", instance="w-1"))
        await pub.publish(records.Decision(key=KEY, action="child_created", child_kind="Pod",
                                           child_name="mnist-worker-0", source="reconciler", instance="r-1"))
        for phase, node in (("Pending", ""), ("Pending", "node-1"), ("Running", "node-1"), ("Succeeded", "node-1")):
            await pub.publish(records.Observation(key=KEY, object_kind="Pod", event="MODIFIED",
                                                  object=pod("mnist-worker-0", "u-1", phase, node),
                                                  source="watcher", instance="w-1"))
        await pub.publish(records.Observation(key=OTHER, object_kind="TFJob", event="ADDED",
                                              object={**job, "kind": "TFJob"}, source="watcher", instance="w-1"))
        # Not a kto record: shown with its offset, never a traceback.
        await pub.send_raw(bus.jobs_topic, b"{not json", key=KEY.encode())


async def test_a_jobs_history_is_its_records_in_log_order_with_offsets_and_a_pod_timeline(bus: KafkaSettings) -> None:
    await publish_story(bus)
    result = await history(bus, "-n", "team-a", "pytorchjob/mnist", "--timeline")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:6] == ["KEY", "OFFSET", "TIME", "SOURCE", "EVENT", "DETAIL"]
    events = [line.split()[4] for line in lines[1:8]]
    assert events == ["ADDED", "child_created", "MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED", "UNDECODABLE"]
    offsets = [int(line.split()[1].split("/")[1]) for line in lines[1:8]]
    assert offsets == sorted(offsets)
    assert "dist" not in result.stdout, "another job's record"
    timeline = lines[lines.index("") + 1:]
    assert timeline[0].split()[:3] == ["POD", "CREATED", "SCHEDULED"]
    assert timeline[1].startswith("mnist-worker-0 (u-1)") and timeline[1].endswith("Succeeded")


async def test_json_output_holds_every_record_and_the_undecodable_one_with_why(bus: KafkaSettings) -> None:
    await publish_story(bus)
    result = await history(bus, "--cluster", "kto-1", "-n", "team-a", "PyTorchJob", "mnist", "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    kinds = [r["record"]["type"] if "record" in r else "error" for r in document["records"]]
    assert kinds == ["observation", "decision", "observation", "observation", "observation", "observation", "error"]
    assert "not JSON" in document["records"][-1]["error"] or document["records"][-1]["error"]
    assert {r["key"] for r in document["records"]} == {KEY}


async def test_every_job_of_a_namespace_and_a_time_window(bus: KafkaSettings) -> None:
    await publish_story(bus)
    everything = await history(bus, "--all", "-n", "team-b", "-o", "json")
    assert everything.returncode == 0, everything.stderr
    assert {r["key"] for r in json.loads(everything.stdout)["records"]} == {OTHER}
    later = await history(bus, "--all", "-n", "team-a", "--since", "2099-01-01T00:00:00Z")
    assert later.returncode == 1
    assert later.stderr.strip() == f"kto history: no records in {bus.jobs_topic} in that time window"


async def test_a_job_that_never_existed_or_a_bad_selection_is_one_line(bus: KafkaSettings) -> None:
    await publish_story(bus)
    missing = await history(bus, "-n", "team-a", "tfjob/never")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == f"kto history: no records of tfjob/never (namespace team-a) in {bus.jobs_topic}"
    for args, message in (
        (["deployment/x"], "'deployment' is not a job kind kto serves"),
        (["--all"], "--all needs -n NAMESPACE or --cluster"),
        (["pytorchjob/a", "--since", "yesterday"], "--since 'yesterday': neither a duration"),
    ):
        result = await history(bus, *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert message in result.stderr, result.stderr


async def test_an_unreachable_broker_is_one_line(bus: KafkaSettings) -> None:
    result = await history(bus, "--bootstrap", "127.0.0.1:9", "pytorchjob/a")
    assert result.returncode == 2
    assert result.stderr.startswith("kto history: error: cannot reach the broker at 127.0.0.1:9")
    assert "Traceback" not in result.stderr


async def export(bus: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    return await kto(bus, "export", *args)


async def test_an_exported_trail_reads_back_as_the_live_one_without_the_broker(bus: KafkaSettings, tmp_path: Path) -> None:
    await publish_story(bus)
    out = tmp_path / "trail"
    exported = await export(bus, "--out", str(out), "-n", "team-a")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("7 records of ")
    live = await history(bus, "-n", "team-a", "pytorchjob/mnist", "-o", "json")
    archived = await history(bus, "--bootstrap", "127.0.0.1:9", "--from", str(out), "-n", "team-a",
                             "pytorchjob/mnist", "-o", "json")
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout) == json.loads(live.stdout)
    # A damaged archive: the bad line is named and skipped, the rest still reads.
    [file] = list(out.glob("*.jsonl"))
    file.write_text(file.read_text() + "{truncated\n")
    damaged = await history(bus, "--from", str(out), "-n", "team-a", "pytorchjob/mnist")
    assert damaged.returncode == 0
    assert f"{file}:8: not an exported record" in damaged.stderr and "Traceback" not in damaged.stderr
