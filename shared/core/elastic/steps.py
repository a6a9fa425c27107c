"""The kinds of steps a TrainingJob pass says (``Step.kind`` of
:class:`shared.core.effects.Step`, the ``reason`` of its ``step`` records).

A TrainingJob's pass is an :class:`shared.core.effects.Effects` like every
family's (that module says the order it is carried out in). Commands it asks
for are run in the launcher's first container; a chain asks for at most two (a
hostfile rewrite or a scaler's script, then the ``ps`` probe of a scale-in).
Anything that must be recorded before a child is touched (the workers a
scale-in removes, those a scale-out adds) is decided in an earlier pass that
only writes it.
"""

from __future__ import annotations


STEP_WORKER_ADDED = "worker-added"
STEP_WORKER_REMOVED = "worker-removed"
STEP_HOSTFILE_REWRITTEN = "hostfile-rewritten"
STEP_SCRIPT_RUN = "script-run"
STEP_SCALER_PHASE = "scaler-phase"
STEP_SCALER_BOUND = "scaler-bound"
STEP_SCALER_WAITING = "scaler-waiting"
STEP_SCALER_TARGETS = "scaler-targets"
STEP_JOB_PHASE = "job-phase"
STEP_CHILD_CREATED = "child-created"
STEP_WAITING = "waiting"
STEP_BELOW_MINIMUM = "workers-below-minimum"
STEP_ROLE_FOLLOWS = "launcher-role-follows"
