"""A worker's view of one job: the job object and its children as last observed.

In: observations (object + event) in log order, hydration results, and the
worker's own writes. Out: the latest job manifest and children. An object
older (by resourceVersion) than what the view already holds is ignored, whatever
its uid, so a late record (of this incarnation or of a deleted one with the same
name) never rolls the view back; a deletion removes only the incarnation it
names. A record of the job that is older than the view asks for a re-read
(``reread``): the API server, not a record, settles which is right. So does
it for an annotation a worker acts on (kto's failure verdict): one the API
server has not returned is ``unconfirmed``, and is read again. Every child is held as
its kind's projection (:func:`shared.api.projections.project`: what decisions read), whether
it came in a record or from the API server, so a decision never depends on which, and is
packed (:class:`Children`): a few hundred bytes where its dicts took kilobytes. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, MutableMapping
from typing import Any

from shared.api import objects, projections

Manifest = dict[str, Any]
ChildKey = tuple[str, str]
"""(kind, name) of a child object."""


def _version(obj: Manifest) -> int | None:
    try:
        return int(objects.resource_version_of(obj))
    except (TypeError, ValueError):
        return None


def newer_or_same(incoming: Manifest, current: Manifest | None) -> bool:
    """Whether ``incoming`` is not older than ``current`` (numeric resourceVersions compared)."""
    if current is None:
        return True
    new, old = _version(incoming), _version(current)
    if new is None or old is None:
        return True
    return new >= old


def relevant_state(obj: Manifest) -> tuple[Any, ...]:
    """What of a child can change a reconcile decision or a job status.

    For a pod: its uid, labels, controller, whether it is being deleted, its phase and its
    containers' restart counts and terminated states (exit codes); a pod being
    scheduled, or getting a new condition or IP, changes none of it. For any
    other child: every change counts (its resourceVersion).
    """
    controllers = tuple(str(ref.get("uid")) for ref in objects.owner_refs_of(obj) if ref.get("controller"))
    common = (
        objects.uid_of(obj), objects.is_deleting(obj), tuple(sorted(objects.labels_of(obj).items())),
        controllers,
    )
    if obj.get("kind", "Pod") != "Pod":
        return (*common, objects.resource_version_of(obj))
    status = obj.get("status") or {}
    containers = tuple(
        (c.get("name"), c.get("restartCount"), repr((c.get("state") or {}).get("terminated")))
        for c in status.get("containerStatuses") or []
    )
    return (*common, status.get("phase"), containers)


FINISHED = frozenset({"Succeeded", "Failed", "Completed", "Complete"})
"""Condition types that, True, say a job has finished (every family's)."""


def finished(job: Manifest | None) -> bool:
    """Whether ``job`` says it finished: a ``Succeeded`` or ``Failed`` condition that is True.
    What lets a worker release its view of the job (docs/architecture.md, "Views of finished
    jobs"): a record that comes later is taken into a view read afresh from the API server."""
    status = (job or {}).get("status")
    found = status.get("conditions") if isinstance(status, dict) else None
    return any(isinstance(c, dict) and c.get("type") in FINISHED and c.get("status") == "True"
               for c in found or ())


Released = tuple[str | None, int]
"""(uid, resourceVersion) of a finished job whose view was released (:func:`released_mark`)."""


def released_mark(job: Manifest | None) -> Released | None:
    """What a worker keeps of a finished job whose view it released: its uid and version, so a
    record of the job as it was then (the watcher's resync every 30 s) is known for one that
    changes nothing and reads nothing; None when the job holds no numeric version."""
    if job is None or (version := _version(job)) is None:
        return None
    return (objects.uid_of(job), version)


def seen_before(obj: Manifest, mark: Released | None) -> bool:
    """Whether a record's job ``obj`` is the released job (``mark``) as it was, or older: the
    same uid, a version not newer. Anything else (an edit, a new incarnation) is read afresh."""
    if mark is None:
        return False
    version = _version(obj)
    return version is not None and objects.uid_of(obj) == mark[0] and version <= mark[1]


_uid = objects.uid_of
_annotations = objects.annotations_of


def child_key(obj: Manifest) -> ChildKey:
    return (str(obj.get("kind", "")), objects.name_of(obj))


class Children(MutableMapping[ChildKey, Manifest]):
    """A view's children by (kind, name), each held packed (:func:`projections.pack`) and
    unpacked afresh on every read: a view is read once per pass but held for the job's life.
    Each read gives a new copy: what a reader changes in it changes nothing held."""

    def __init__(self) -> None:
        self._held: dict[ChildKey, projections.Packed] = {}

    def __getitem__(self, key: ChildKey) -> Manifest:
        return projections.unpack(self._held[key])

    def __setitem__(self, key: ChildKey, value: Manifest) -> None:
        self._held[key] = projections.pack(value)

    def __delitem__(self, key: ChildKey) -> None:
        del self._held[key]

    def __iter__(self) -> Iterator[ChildKey]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def clear(self) -> None:
        self._held.clear()

    def __repr__(self) -> str:
        return f"Children({sorted(self._held)!r})"


@dataclasses.dataclass(frozen=True)
class _Logged:
    """``(kind, name, resourceVersion) in view.logged``."""

    versions: dict[ChildKey, str | set[str]]

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, tuple) or len(version) != 3:
            return False
        held = self.versions.get((version[0], version[1]))
        return held == version[2] if isinstance(held, str) else held is not None and version[2] in held


@dataclasses.dataclass
class JobView:
    """What one worker knows about one job key."""

    job: Manifest | None = None
    children: Children = dataclasses.field(default_factory=Children)
    hydrated: bool = False
    gone: bool = False
    """The job was deleted: nothing more to do for this key until it is created again."""
    confirmed: bool = False
    """The job held was read from (or written to) the API server, not taken from a record."""
    read_back: bool = False
    """Nothing in the view came from a record since the job and its children were last read
    from the API server: a worker acts on the view only then (docs/security.md)."""
    reread: bool = False
    """A record of the job older than the one held came: read the job afresh before acting."""
    vanished: bool = False
    """A child went that this worker did not delete (the garbage collector after the job's
    deletion, or a user): read the job afresh before making it again. The job's own
    deletion may not be in the view yet: its record and the children's come on separate
    watches, and a child's DELETED can come first."""
    from_server: tuple[str | None, dict[str, Any]] | None = None
    """(uid, annotations) of the job as the API server last returned it."""
    logged_versions: dict[ChildKey, str | set[str]] = dataclasses.field(default_factory=dict)
    """(kind, name) → resourceVersions of it taken from records (every version of the job, a
    set; the newest of each child, a string): what a decision's basis can name without carrying it."""

    def note_logged(self, obj: Manifest, is_job: bool) -> None:
        """``obj`` came in a record: a basis may name this version of it by reference."""
        version = objects.resource_version_of(obj)
        if not version:
            return
        key = child_key(obj)
        if is_job:
            held = self.logged_versions.get(key)
            if isinstance(held, set):
                held.add(version)
            else:
                self.logged_versions[key] = {version}
        else:
            self.logged_versions[key] = version  # a child's newest only: a string, not a set of one

    @property
    def logged(self) -> _Logged:
        return _Logged(self.logged_versions)

    def observe_job(self, obj: Manifest, deleted: bool) -> None:
        """Take in an observation of the job. One older than the job held (by
        resourceVersion, whatever its uid: a late record of a previous incarnation, or
        a redelivered one) is not taken, and sets :attr:`reread`: if the view is
        ahead of the cluster because a record lied about its version, only reading
        the API server can tell."""
        obj = projections.project(obj)
        uid = _uid(obj)
        if deleted:
            if self.job is None or _uid(self.job) == uid:
                self.job, self.gone, self.confirmed = None, True, False
                self.children.clear()
            return
        if not newer_or_same(obj, self.job):
            self.reread = True
            return
        if self.job is not None and _uid(self.job) != uid:
            # A new job with the same name: what was known of the old one is void.
            self.children.clear()
        self.job, self.gone, self.confirmed = obj, False, False

    def replace_job(self, obj: Manifest | None) -> None:
        """The job as just read from (or written to) the API server: the truth,
        whatever version the view held."""
        if obj is None:
            self.job, self.gone, self.confirmed, self.from_server = None, True, False, None
            self.children.clear()
            return
        obj = projections.project(obj)
        if self.job is not None and _uid(self.job) != _uid(obj):
            self.children.clear()
        self.job, self.gone, self.confirmed, self.reread = obj, False, True, False
        self.from_server = (_uid(obj), dict(_annotations(obj)))

    def drop_children(self, keys: set[ChildKey]) -> None:
        """Forget children the API server no longer has (a hydration listed the job's
        children and these were not among them): their DELETED observation may never
        come, e.g. when the watcher that would have published it died first."""
        for key in keys:
            self.children.pop(key, None)

    def replace_children(self, listed: list[Manifest], held: set[ChildKey]) -> None:
        """The job's children as just listed from the API server: the truth, whatever versions the
        view held (a record may have claimed a later one). Of the children held before the list was
        read (``held``), those it lacks are gone; children first observed meanwhile are kept."""
        self.drop_children(held - {child_key(c) for c in listed})
        for child in listed:
            self.children[child_key(child)] = projections.project(child)

    def observe_child(self, obj: Manifest, deleted: bool) -> bool:
        """Take in a child; True if what decisions and statuses look at changed
        (:func:`relevant_state`), False for a change nothing depends on."""
        obj = projections.project(obj)
        key = child_key(obj)
        current = self.children.get(key)
        if deleted:
            if current is None or _uid(current) == _uid(obj):
                return self.children.pop(key, None) is not None
            return False
        if not newer_or_same(obj, current):
            return False  # older, whatever its uid: a late record of this or a previous incarnation
        if current is not None and _uid(current) != _uid(obj):
            # A re-created child with the same name: the newer incarnation wins.
            self.children[key] = obj
            return True
        self.children[key] = obj
        return current is None or relevant_state(obj) != relevant_state(current)

    def unconfirmed(self, annotation: str) -> bool:
        """Whether the job held carries ``annotation`` with a value the API server
        has not returned for this uid: it came in a record only, which anyone who
        can write to the topic could forge. Read the job before acting on it."""
        if self.job is None:
            return False
        value = _annotations(self.job).get(annotation)
        if value is None:
            return False
        if self.from_server is None:
            return True
        uid, seen = self.from_server
        return uid != _uid(self.job) or seen.get(annotation) != value
