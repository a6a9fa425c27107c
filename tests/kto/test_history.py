"""``kto history`` and ``kto export`` as a user runs them: subprocesses reading the real (Tansu) broker's kto.jobs,
or an exported trail; what a record holds reaches the terminal inert, and an export only its owner."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import tempfile
import sys
from pathlib import Path
from typing import Any

import pytest

from kto.commands import history as history_command
from shared.bus import producing, records, signing
from shared.bus import reading as bus_reading
from shared.bus.settings import KafkaSettings
from tests.api import kueue_objects

ROOT = Path(__file__).resolve().parents[2]
KEY = "kto-1/team-a/PyTorchJob/mnist"
OTHER = "kto-1/team-b/TFJob/dist"


async def kto(bus: KafkaSettings, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Run where no `kto up` left its keys (.kto/keys.json), with none named: keys only where a test gives them.
    env = {**os.environ, **bus.to_env(), "PYTHONPATH": str(ROOT), "KTO_SIGNING_KEYS": ""}

    def call() -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory() as elsewhere:
            return subprocess.run([sys.executable, "-m", "kto", command, *args], capture_output=True, text=True,
                                  cwd=elsewhere, env=env, timeout=120, check=False)

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


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\x85\u202e\r\nFAKE 0/1 ROW\tx\x00\x7f"
"""Terminal escapes (OSC title, clear screen, an 8-bit CSI), NEL, a bidi override, a
line break that would forge a row, a tab, NUL and DEL."""
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What must not reach the terminal from a record, besides the output's own line ends (a
forged one is caught by counting lines) and tab (checked apart: columns use spaces)."""


def archive(directory: Path, *entries: records.Observation | records.Decision) -> Path:
    directory.mkdir()
    lines = [json.dumps({"partition": 0, "offset": offset, "timestamp_ms": 1_700_000_000_000 + offset, "key": KEY,
                         "trace_id": "", "value": records.encode(entry).decode()})
             for offset, entry in enumerate(entries)]
    (directory / "kto.jobs-0.jsonl").write_text("\n".join(lines) + "\n")
    return directory


async def offline_history(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    def call() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kto", "history", "--bootstrap", "127.0.0.1:9", "--from",
                               str(directory), "-n", "team-a", "pytorchjob/mnist", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)

    return await asyncio.get_running_loop().run_in_executor(None, call)


@pytest.mark.parametrize(("text", "shown"), [
    pytest.param("plain text, é and ✓", "plain text, é and ✓", id="printable-text-as-it-is"),
    pytest.param("a\nb\tc\rd", "a\\nb\\tc\\rd", id="newline-tab-and-return-by-name"),
    pytest.param("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m", id="esc"),
    pytest.param("\x00\x07\x7f", "\\x00\\x07\\x7f", id="nul-bell-and-del"),
    pytest.param("\x85\x9b1m", "\\x85\\x9b1m", id="c1-nel-and-csi"),
    pytest.param("\u202eevil\u2066\u2028", "\\u202eevil\\u2066\\u2028", id="bidi-and-line-separator"),
])
def test_printable_escapes_every_control_character(text: str, shown: str) -> None:
    assert history_command.printable(text) == shown


async def test_control_characters_in_records_are_escaped_in_the_table_and_timeline(tmp_path: Path) -> None:
    trail = archive(
        tmp_path / "trail",
        records.Decision(key=KEY, action="child_created", child_kind="Pod", child_name="mnist-worker-0",
                         reason=HOSTILE, message=HOSTILE, source="reconciler", instance=HOSTILE),
        records.Observation(key=KEY, object_kind="Pod", event="MODIFIED", source="watcher", instance="w-1",
                            object=pod(f"mnist-{HOSTILE}", "u-1", HOSTILE)),
    )
    table = await offline_history(trail, "--timeline")
    assert table.returncode == 0, table.stderr
    assert not UNSAFE.search(table.stdout) and "\t" not in table.stdout, repr(table.stdout)
    lines = table.stdout.splitlines()
    assert len(lines) == 1 + 2 + 1 + 2, "header, two records, a blank line, the timeline: no forged row"
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x85\\u202e\\r\\nFAKE 0/1 ROW\\tx\\x00\\x7f" in lines[1]
    assert lines[-1].startswith("mnist-\\x1b]0;owned")
    for output in ("json", "yaml"):
        structured = await offline_history(trail, "-o", output)
        assert structured.returncode == 0, structured.stderr
        assert not UNSAFE.search(structured.stdout) and "\t" not in structured.stdout, repr(structured.stdout)
    document = json.loads((await offline_history(trail, "-o", "json")).stdout)
    assert document["records"][0]["record"]["message"] == HOSTILE, "escaped on the wire, the same text"


async def test_a_damaged_archive_line_is_reported_without_its_control_characters(tmp_path: Path) -> None:
    trail = tmp_path / "trail"
    trail.mkdir()
    (trail / "kto.jobs-0.jsonl").write_text(json.dumps({"partition": "\x1b[2J", "offset": 0}) + "\n")
    damaged = await offline_history(trail)
    assert damaged.returncode == 1 and "not an exported record" in damaged.stderr
    assert not UNSAFE.search(damaged.stderr) and "\\x1b[2J" in damaged.stderr


async def test_export_writes_owner_only_files_and_a_new_owner_only_directory(bus: KafkaSettings, tmp_path: Path) -> None:
    await publish_story(bus)
    out = tmp_path / "new" / "trail"
    exported = await export(bus, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    files = list(out.glob("*.jsonl"))
    assert files and {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    # A file already there, world-readable, is replaced and made owner-only too; an existing
    # directory keeps its mode (the user chose it).
    out.chmod(0o755)
    files[0].chmod(0o644)
    again = await export(bus, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600 and stat.S_IMODE(out.stat().st_mode) == 0o755


async def test_export_refuses_a_planted_symlink_and_writes_nothing_through_it(bus: KafkaSettings, tmp_path: Path) -> None:
    await publish_story(bus)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "trail"
    out.mkdir()
    planted = out / f"{bus.jobs_topic}-0.jsonl"
    planted.symlink_to(victim)
    refused = await export(bus, "--out", str(out))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == f"kto export: error: {planted}: is a symlink; refusing to write through it\n"
    assert victim.read_text() == "precious\n" and list(out.iterdir()) == [planted]


async def test_export_refuses_an_out_directory_that_is_a_symlink(bus: KafkaSettings, tmp_path: Path) -> None:
    await publish_story(bus)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "trail"
    link.symlink_to(elsewhere)
    refused = await export(bus, "--out", str(link))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == f"kto export: error: {link}: is a symlink; refusing to write through it\n"
    assert list(elsewhere.iterdir()) == []


async def signed_story(bus: KafkaSettings, keys: Path) -> None:
    """Two authentic records of the watcher, one unsigned, one authentic record altered on the way, and a
    record of the reconciler's key pretending to be an observation."""
    keyring = signing.Keyring([keys])
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mnist", "namespace": "team-a"},
           "spec": {}}
    async with producing.Publisher(bus, "watcher", "w-1", signer=keyring.signer("watcher")) as watcher, \
            producing.Publisher(bus, "reconciler", "r-1", signer=keyring.signer("reconciler")) as reconciler, \
            producing.Publisher(bus, "watcher", "forger") as forger:
        await watcher.publish(records.Observation(key=KEY, object_kind="PyTorchJob", event="ADDED", object=job))
        await watcher.publish(records.Observation(key=KEY, object_kind="Pod", event="MODIFIED",
                                                  object=pod("mnist-worker-0", "u-1", "Running", "node-1")))
        await forger.publish(records.Observation(key=KEY, object_kind="Pod", event="MODIFIED",
                                                 object=pod("mnist-worker-0", "u-1", "Succeeded", "node-1")))
        real = records.Observation(key=KEY, object_kind="Pod", event="MODIFIED", source="watcher", instance="w-1",
                                   object=pod("mnist-worker-0", "u-1", "Failed", "node-1"))
        value, tag = records.encode(real), records.type_tag(real).encode()
        headers = [(records.TYPE_HEADER, tag), *keyring.signer("watcher").headers(KEY.encode(), tag, value)]
        await forger.send_raw(bus.jobs_topic, value.replace(b"Failed", b"Pending"), key=KEY.encode(),
                              headers=headers)
        await reconciler.publish(records.Observation(key=KEY, object_kind="Pod", event="MODIFIED",
                                                     object=pod("mnist-worker-0", "u-1", "Succeeded")))


async def test_history_and_replay_say_which_records_are_authentic_live_and_archived(
    bus: KafkaSettings, tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.json"
    signing.new_keyring(keys, "t")
    await signed_story(bus, keys)
    plain = await history(bus, "-n", "team-a", "pytorchjob/mnist", "--keys", str(keys))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.count("REJECTED ") == 3, plain.stdout
    verified = await history(bus, "-n", "team-a", "pytorchjob/mnist", "--keys", str(keys), "--verify", "-o", "json")
    assert verified.returncode == 3, verified.stderr
    assert "2 of 5 records authentic, 3 not" in verified.stderr
    rows = json.loads(verified.stdout)["records"]
    assert [r["authentic"] for r in rows] == [True, True, False, False, False]
    assert rows[2]["rejected"].startswith("unsigned") and rows[3]["rejected"].startswith("bad signature")
    assert "may not write observations" in rows[4]["rejected"]
    out = tmp_path / "trail"
    assert (await export(bus, "--out", str(out), "-n", "team-a")).returncode == 0
    archived = await history(bus, "--from", str(out), "-n", "team-a", "pytorchjob/mnist", "--keys", str(keys),
                             "--verify", "-o", "json")
    assert archived.returncode == 3 and json.loads(archived.stdout) == json.loads(verified.stdout)
    replayed = await kto(bus, "replay", "-n", "team-a", "pytorchjob/mnist", "--keys", str(keys), "--verify")
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr
    assert replayed.stdout.count("NOT AUTHENTIC offset") == 3, replayed.stdout
    assert "2 records authentic, 3 not (never acted on)" in replayed.stdout
    without = await history(bus, "-n", "team-a", "pytorchjob/mnist", "--verify")
    assert without.returncode == 2 and "--verify needs the signing keys" in without.stderr
    assert "Traceback" not in without.stderr


# -- a job under Kueue, and under MultiKueue across a manager and a worker ------------------------------------

MANAGER_KEY = "manager/team-a/PyTorchJob/mnist"
WORKER_KEY = "worker-1/team-a/PyTorchJob/mnist"
STRANGER_KEY = "worker-2/team-a/PyTorchJob/mnist"
"""A job of the same name in another cluster that is no copy of the manager's."""


def multikueue_story() -> list[records.Observation]:
    """What the watchers of a manager and two workers publish of one MultiKueue run (Workloads and jobs as
    Kueue v0.17.0 writes them), in log order."""
    manager, worker = kueue_objects.manager_run(), kueue_objects.worker_run()
    stranger = {**kueue_objects.WORKER_COPY, "metadata": {**kueue_objects.WORKER_COPY["metadata"], "labels": {}}}

    def seen(key: str, kind: str, obj: dict[str, Any], event: str = "MODIFIED") -> records.Observation:
        return records.Observation(key=key, object_kind=kind, event=event, object=obj, source="watcher",
                                   instance=key.split("/")[0])

    return [
        seen(MANAGER_KEY, "PyTorchJob", kueue_objects.MANAGER_JOB, "ADDED"),
        seen(MANAGER_KEY, "Workload", manager[0], "ADDED"),
        seen(STRANGER_KEY, "PyTorchJob", stranger, "ADDED"),
        seen(MANAGER_KEY, "Workload", manager[1]),
        seen(WORKER_KEY, "PyTorchJob", kueue_objects.WORKER_COPY, "ADDED"),
        seen(WORKER_KEY, "Workload", worker[0]),
        seen(MANAGER_KEY, "Workload", manager[2]),
        seen(WORKER_KEY, "Pod", pod("mnist-worker-0", "u-1", "Running", "node-1")),
        seen(WORKER_KEY, "Workload", worker[1]),
        seen(MANAGER_KEY, "Workload", manager[3]),
    ]


def test_a_manager_job_is_joined_with_its_worker_copy_and_not_with_a_stranger_of_its_name() -> None:
    entries = [bus_reading.Entry(0, offset, 1_000 + offset, record.key, record, "", "")
               for offset, record in enumerate(multikueue_story())]
    assert {e.key for e in history_command.joined(entries, MANAGER_KEY)} == {MANAGER_KEY, WORKER_KEY}
    assert {e.key for e in history_command.joined(entries, STRANGER_KEY)} == {STRANGER_KEY}
    moments = history_command.kueue_moments(history_command.joined(entries, MANAGER_KEY))
    assert [(m["cluster"], m["event"]) for m in moments] == [
        ("manager", "queued"), ("manager", "quota-reserved"), ("manager", "check"), ("worker-1", "quota-reserved"),
        ("worker-1", "admitted"), ("manager", "check"), ("manager", "dispatched"), ("manager", "admitted"),
        ("worker-1", "finished"), ("manager", "finished")]


async def test_history_of_a_multikueue_job_on_its_manager_is_one_timeline_across_clusters(bus: KafkaSettings) -> None:
    async with producing.Publisher(bus, "watcher", "w-1") as pub:
        for record in multikueue_story():
            await pub.publish(record)
    result = await history(bus, "--cluster", "manager", "-n", "team-a", "pytorchjob/mnist", "--timeline")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["KEY", "OFFSET"], "each line says its cluster"
    keys = {line.split()[0] for line in lines[1:lines.index("")]}
    assert keys == {MANAGER_KEY, WORKER_KEY}, "the worker's copy joined, the stranger of the same name not"
    kueue = lines[lines.index("") + 1:]
    assert kueue[0].split() == ["KUEUE", "TIME", "CLUSTER", "WORKLOAD", "EVENT", "DETAIL"]
    said = [line.split()[1:4] for line in kueue[1:kueue.index("")]]
    assert ["manager", kueue_objects.WORKLOAD, "queued"] in said
    assert ["manager", kueue_objects.WORKLOAD, "dispatched"] in said
    assert ["worker-1", kueue_objects.WORKLOAD, "admitted"] in said
    assert said[-1] == ["manager", kueue_objects.WORKLOAD, "finished"]
    assert "to worker cluster worker1 (MultiKueue)" in result.stdout
    assert "by ClusterQueue cluster-queue with flavours master: cpu=default-flavor" in result.stdout
    pods = kueue[kueue.index("") + 1:]
    assert pods[0].split()[-1] == "CLUSTER" and pods[1].startswith("mnist-worker-0 (u-1)")
    assert pods[1].split()[-1] == "worker-1"

    document = json.loads((await history(bus, "--cluster", "manager", "-n", "team-a", "pytorchjob/mnist",
                                         "-o", "json")).stdout)
    assert {r["key"] for r in document["records"]} == {MANAGER_KEY, WORKER_KEY}
    assert [m["event"] for m in document["kueue"]][-1] == "finished"
    alone = await history(bus, "--cluster", "worker-2", "-n", "team-a", "pytorchjob/mnist")
    assert alone.returncode == 0 and "KUEUE" not in alone.stdout and MANAGER_KEY not in alone.stdout
