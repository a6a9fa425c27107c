"""``kto keys``: the keyring the services sign records with (docs/security.md).

In: a keyring file (JSON, :mod:`shared.bus.signing`) and what to do with it:
``init`` (a new keyring: one active key per service), ``list``, ``add --role R``
(a new key, ``trusted``: verified but not yet used to sign), ``activate ID`` (the
role signs with it from now; its old active key stays ``trusted``), ``retire ID``
(no longer trusted: records signed with it are refused, and shown as such), and
``public OUT`` / ``private ROLE OUT`` (the files a deployment mounts: every public key
and the digest key literal values are digested under, for every service; one service's
private key for that service only).
Out: the file rewritten in place (0600, replaced atomically, so a service reading it
never sees half of it), and one line saying what changed. Never prints a private key.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
from typing import Any

HELP = "Make and rotate the keys services sign kto.jobs records with."

_EPILOG = """\
rotation, with no record refused on the way:
  kto keys add keys.json --role watcher            # new key, trusted by every reader
  # ... once every service has read the file (they re-read it within seconds) ...
  kto keys activate keys.json watcher-20261127     # the watcher signs with it
  # ... once the records signed with the old key are read (consumer lag 0) ...
  kto keys retire keys.json watcher-20261001
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = sub.add_parser("init", help="a new keyring with one active key per service")
    init.add_argument("file", type=pathlib.Path)
    show = sub.add_parser("list", help="the keys: id, role, state (never a private key)")
    show.add_argument("file", type=pathlib.Path)
    add = sub.add_parser("add", help="a new trusted key of a role, not yet used to sign")
    add.add_argument("file", type=pathlib.Path)
    add.add_argument("--role", required=True)
    add.add_argument("--id", default=None, help="the key id (default: ROLE-<UTC time>)")
    for name, what in (("activate", "sign with this key (the role's active key becomes trusted)"),
                       ("retire", "trust this key no more")):
        action = sub.add_parser(name, help=what)
        action.add_argument("file", type=pathlib.Path)
        action.add_argument("id")
    public = sub.add_parser("public", help="write every public key (no private one) and the digest key to OUT, "
                                           "for every service")
    public.add_argument("file", type=pathlib.Path)
    public.add_argument("out", type=pathlib.Path)
    private = sub.add_parser("private", help="write one role's private keys to OUT, for that service only")
    private.add_argument("file", type=pathlib.Path)
    private.add_argument("role")
    private.add_argument("out", type=pathlib.Path)


def _entries(path: pathlib.Path) -> tuple[list[dict[str, Any]], str | None]:
    """The file's entries and digest key, checked as a service would read them."""
    from kto.cli import UserError
    from shared.bus import signing

    try:
        signing.Keyring([path])
        document = json.loads(path.read_text(encoding="utf-8"))
    except signing.KeyringError as exc:
        raise UserError(str(exc)) from None
    return list(document["keys"]), document.get("digest_key")


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S")


def _find(entries: list[dict[str, Any]], kid: str, path: pathlib.Path) -> dict[str, Any]:
    from kto.cli import UserError

    for entry in entries:
        if entry["id"] == kid:
            return entry
    raise UserError(f"{path}: no key {kid!r} (kto keys list {path})")


def run(args: argparse.Namespace) -> int:
    from kto.cli import UserError
    from shared.bus import signing

    path: pathlib.Path = args.file
    try:
        if args.action == "init":
            if path.exists():
                raise UserError(f"{path} exists: kto keys init makes a new keyring, it never replaces one")
            signing.new_keyring(path, _stamp())
            print(f"{path}: one active key per service ({', '.join(signing.ROLES)}), readable by its owner only")
            return 0
        entries, digest_key = _entries(path)
        if args.action == "list":
            for entry in entries:
                print(f"{entry['id']}\t{entry['role']}\t{entry.get('state', 'active')}\t"
                      f"{'private+public' if entry.get('private') else 'public'}")
            return 0
        if args.action == "add":
            kid = args.id or f"{args.role}-{_stamp()}"
            if any(e["id"] == kid for e in entries):
                raise UserError(f"{path}: a key {kid!r} exists already")
            entries.append(signing.new_key(kid, args.role, "trusted"))
            said = f"{kid} added ({args.role}, trusted: verified, not yet used to sign)"
        elif args.action == "activate":
            chosen = _find(entries, args.id, path)
            if not chosen.get("private"):
                raise UserError(f"{path}: key {args.id!r} has no private part here; activate it where it has")
            for entry in entries:
                if entry["role"] == chosen["role"] and entry.get("state", "active") == "active":
                    entry["state"] = "trusted"
            chosen["state"] = "active"
            said = f"{args.id} is the active {chosen['role']} key"
        elif args.action == "retire":
            chosen = _find(entries, args.id, path)
            if chosen.get("state", "active") == "active":
                raise UserError(f"{path}: {args.id!r} is the active {chosen['role']} key; activate another first")
            chosen["state"] = "retired"
            said = f"{args.id} retired: records signed with it are refused from now"
        elif args.action == "public":
            signing.write_keyring(args.out, [{k: v for k, v in e.items() if k != "private"} for e in entries],
                                  digest_key)
            print(f"{args.out}: {len(entries)} public keys" + (" and the digest key" if digest_key else ""))
            return 0
        else:
            mine = [e for e in entries if e["role"] == args.role and e.get("private")]
            if not mine:
                raise UserError(f"{path}: no private key of role {args.role!r}")
            signing.write_keyring(args.out, mine)
            print(f"{args.out}: {len(mine)} private key(s) of {args.role}, readable by its owner only")
            return 0
        signing.write_keyring(path, entries, digest_key)
    except signing.KeyringError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{exc.filename or path}: {exc.strerror or exc}") from None
    print(f"{path}: {said}", file=sys.stdout)
    return 0
