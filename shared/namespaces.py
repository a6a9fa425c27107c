"""The namespaces one kto installation serves, as controller-runtime's watch namespaces.

In: the text of ``KTO_NAMESPACES`` (or of the watcher's ``--namespace``): namespace names
separated by commas; empty or unset means every namespace. Out: the names as a tuple (``()``
for every namespace), or a one-line ``NamespacesError`` naming the variable and the bad
entry; and, for a job key's namespace, why a worker must not act on it (None when it may).

The watcher lists and watches each served namespace; the reconciler and the status worker
refuse a job key outside them, so a record that reached the topic from elsewhere never
makes them act where deploy/overlays/namespaced binds them no role.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ENV = "KTO_NAMESPACES"

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A namespace name: an RFC 1123 label (at most 63 characters)."""


class NamespacesError(ValueError):
    """A served-namespaces value that is not a comma-separated list of namespace names."""


def parse(text: str | None, source: str = ENV) -> tuple[str, ...]:
    """The namespaces ``text`` names, in order, each once; ``()`` for none (every namespace)."""
    if text is None or not text.strip():
        return ()
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if len(name) > 63 or not _NAME.fullmatch(name):
            shown = repr(name[:70]) if name else "an empty entry"
            raise NamespacesError(f"{source}: {shown} is not a namespace name (a comma-separated list of "
                                  "lowercase letters, digits and '-', at most 63 characters each)")
    return tuple(dict.fromkeys(names))


def from_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    return parse(environ.get(ENV), ENV)


def refusal(served: tuple[str, ...], namespace: str) -> str | None:
    """Why a job key of ``namespace`` is not this installation's (None: it is)."""
    if not served or namespace in served:
        return None
    return f"namespace {namespace!r} is not served ({ENV}: {','.join(served)})"
