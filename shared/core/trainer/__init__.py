"""Kubeflow Trainer v2's TrainJob (``trainer.kubeflow.org/v1alpha1``): the pure core.

In: a TrainJob, the objects observed for it (its JobSet, PodGroup, MPI Secret and
hostfile, runtime snapshot) and the TrainingRuntime or ClusterTrainingRuntime it
names, ``now``. Out: the decision of one reconcile (objects to create or update, the
JobSet to delete past the deadline, the status, the Events).

* ``podsets`` — Trainer's names and numbers, upstream's ``runtime.Info`` and pod sets,
  the upserts every plugin makes;
* ``patching`` — the strategic merge patch of ``runtimePatches`` and ``resourcesPerNode``;
* ``planning`` — TrainJob + runtime → JobSet (and PodGroup, MPI hostfile and Secret,
  runtime snapshot);
* ``policies`` — the ML policies (torch, mpi, jax, xgboost, PlainML);
* ``scheduling`` — the pod-group policies (coscheduling, volcano);
* ``statuses`` — the conditions and jobsStatus;
* ``deciding`` — the reconcile as one pure ``decide``; ``family`` — the registry entry.
"""
