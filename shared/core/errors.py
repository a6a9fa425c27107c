"""Errors of the pure core that both the planner and the framework plugins raise.

In: nothing. Out: exception types. Kept in a module of its own so that
``planning`` and ``frameworks.*`` can both import it without a cycle.
"""

from __future__ import annotations


class PlanError(ValueError):
    """A defaulted, validated job whose children cannot be planned.

    Upstream reports these as reconcile errors (the job is retried, no child is
    created); they are not retriable without a change to the job, since the
    planner is a pure function of it. ``field`` is a Kubernetes-style field
    path (``spec.jaxReplicaSpecs[Worker].template.spec.containers``).
    """

    retriable = False

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
