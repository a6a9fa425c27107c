"""Ownership of children, the same for every job family (spec §4.3, A.8, B.6).

In: a job of any family (an :class:`Owner`) and objects as plain dicts. Out:
the controller owner reference each child carries (and a child's metadata
around it), and whether an object is
controlled by the job, by upstream's one rule (``metav1.IsControlledBy``):
the object's controller reference — the first reference with
``controller: true`` — has the job's uid; while the job has no uid yet (a
dry run) it names the job's kind and name. What differs per upstream project
is only the reference's ``apiVersion`` and ``kind``: they come from the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from shared.api import common, objects

Child = TypeVar("Child", bound=Mapping[str, Any])


class Owner(Protocol):
    """A job of any family: kubeflow.org/v1, MPIJob v2beta1, TrainingJob."""

    KIND: ClassVar[str]
    api_version: str
    metadata: common.ObjectMeta

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...


def reference(owner: Owner) -> dict[str, Any]:
    """The single controller owner reference every child carries; uid "" when unknown."""
    return {
        "apiVersion": owner.api_version,
        "kind": owner.KIND,
        "name": owner.name,
        "uid": owner.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(owner: Owner, name: str, **fields: Any) -> dict[str, Any]:
    """A child's metadata: its name, the owner's namespace, the ``fields`` that are set
    (labels, annotations, finalizers, in the order given), and the owner reference last."""
    metadata: dict[str, Any] = {"name": name, "namespace": owner.namespace}
    metadata.update({key: value for key, value in fields.items() if value})
    metadata["ownerReferences"] = [reference(owner)]
    return metadata


def controller_of(obj: object) -> Mapping[str, Any] | None:
    """The object's controller reference (``metav1.GetControllerOf``); None for an orphan."""
    for ref in objects.owner_refs_of(obj):
        if ref.get("controller"):
            return ref
    return None


def is_controlled_by(obj: object, kind: str, name: str, uid: str | None) -> bool:
    """Whether ``obj``'s controller is that owner: by uid, by kind and name when the
    owner's uid is not known."""
    ref = controller_of(obj)
    if ref is None:
        return False
    return bool(ref.get("uid") == uid) if uid else (ref.get("kind"), ref.get("name")) == (kind, name)


def controls(owner: Owner, obj: object) -> bool:
    """Whether ``owner`` is ``obj``'s controller (:func:`is_controlled_by`)."""
    return is_controlled_by(obj, owner.KIND, owner.name, owner.metadata.uid)


def owned(owner: Owner, children: Iterable[Child]) -> list[Child]:
    """The ``children`` that ``owner`` controls, in their order."""
    return [child for child in children if controls(owner, child)]


def claims(owner: Owner, obj: object) -> bool:
    """Upstream's claim of a selected object (``ClaimPods``): one ``owner`` controls, or an
    orphan it would adopt; while the owner has no uid yet, every selected object."""
    ref = controller_of(obj)
    return ref is None or not owner.metadata.uid or ref.get("uid") == owner.metadata.uid
