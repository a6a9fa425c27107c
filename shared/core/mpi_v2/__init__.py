"""mpi-operator's MPIJob ``kubeflow.org/v2beta1``: the pure core (spec Part A).

In: an MPIJob (``shared.api.mpijobs``), the objects observed for it, ``now``
and the operator settings. Out: the decision of one sync (children to
create, update and delete, the new status, the Events to record).

* ``defaulting`` (A.4) and ``validating`` (A.5) work on the job alone;
* ``planning`` builds every child (A.8–A.10): the headless Service, the
  ``<job>-config`` ConfigMap (hostfile, discover_hosts.sh), the SSH Secret,
  worker Pods and the launcher ``batch/v1`` Job;
* ``scheduling`` builds the PodGroup and decorates pods for gang scheduling (A.17);
* ``sshkeys`` derives the Secret's ECDSA P-521 key pair from a seed (A.8.3);
* ``statuses`` computes conditions and replica statuses (A.12);
* ``deciding`` is the sync algorithm (A.7, A.11, A.13–A.16) as one pure ``decide``.
"""
