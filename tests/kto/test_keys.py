"""``kto keys`` as an operator runs it: a keyring made, listed and rotated, with records signed before,
during and after a rotation judged as a reader that re-reads the file judges them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.bus import records, signing

ROOT = Path(__file__).resolve().parents[2]
KEY = "kto-1/team-a/PyTorchJob/mnist"


def keys(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kto", "keys", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=False)


def sign(path: Path, role: str = "watcher") -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    record = records.Observation(key=KEY, object_kind="Pod", event="MODIFIED", object={}, source=role)
    value, tag = records.encode(record), records.type_tag(record).encode()
    return KEY.encode(), value, [(records.TYPE_HEADER, tag),
                                 *signing.Keyring([path]).signer(role).headers(KEY.encode(), tag, value)]


def test_a_rotation_refuses_no_record_until_the_old_key_is_retired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signing, "RELOAD_EVERY", 0.0)
    path = tmp_path / "keys.json"
    made = keys("init", str(path))
    assert made.returncode == 0, made.stderr
    reader = signing.Keyring([path])
    old = sign(path)
    assert reader.verify(*old).authentic
    assert keys("add", str(path), "--role", "watcher", "--id", "watcher-new").returncode == 0
    assert reader.verify(*old).authentic, "adding a key changes nothing for the records signed before"
    assert keys("activate", str(path), "watcher-new").returncode == 0
    new = sign(path)
    assert dict(new[2])[signing.KEY_ID_HEADER] == b"watcher-new"
    assert reader.verify(*new).authentic and reader.verify(*old).authentic
    [old_id] = [line.split("\t")[0] for line in keys("list", str(path)).stdout.splitlines()
                if line.startswith("watcher-") and "\ttrusted\t" in line]
    retired = keys("retire", str(path), old_id)
    assert retired.returncode == 0, retired.stderr
    assert reader.verify(*new).authentic
    verdict = reader.verify(*old)
    assert not verdict.authentic and verdict.retired


def test_public_and_private_files_split_a_keyring_for_a_deployment(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys("init", str(path))
    assert keys("public", str(path), str(tmp_path / "public.json")).returncode == 0
    assert keys("private", str(path), "status", str(tmp_path / "status.json")).returncode == 0
    document = json.loads((tmp_path / "public.json").read_text())
    public = document["keys"]
    assert len(public) == 3 and not any("private" in k for k in public)
    assert document["digest_key"] == json.loads(path.read_text())["digest_key"], "every service digests alike"
    both = signing.Keyring([tmp_path / "public.json", tmp_path / "status.json"])
    both.signer("status")
    assert len(both.digest_key) == signing.DIGEST_KEY_BYTES
    with pytest.raises(signing.KeyringError, match="role 'watcher'"):
        both.signer("watcher")
    assert "private" not in keys("list", str(path)).stdout.replace("private+public", "")
    assert (tmp_path / "status.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("args", "said"), [
    pytest.param(("list", "missing.json"), "missing.json: No such file", id="no-file"),
    pytest.param(("activate", "KEYS", "nobody"), "no key 'nobody'", id="unknown-id"),
    pytest.param(("add", "KEYS", "--role", "admin"), "no role 'admin'", id="unknown-role"),
    pytest.param(("init", "KEYS"), "exists: kto keys init makes a new keyring", id="init-twice"),
])
def test_a_mistake_is_one_line(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    path = tmp_path / "keys.json"
    keys("init", str(path))
    done = keys(*[str(path) if a == "KEYS" else str(tmp_path / a) if a.endswith(".json") else a for a in args])
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
