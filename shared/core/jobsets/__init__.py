"""JobSet ``jobset.x-k8s.io/v1alpha2`` (JobSet v0.12.0), served by kto itself: the pure core.

In: a JobSet (``shared.api.jobsets``), the batch Jobs and the headless Service observed
for it, ``now``. Out: the decision of one reconcile (Jobs to create, suspend, resume and
delete, the Service, the JobSet's status and Events, its deletion after its TTL).

* ``planning`` builds the children (upstream's ``constructJob``, the headless Service);
* ``conditions`` is upstream's condition bookkeeping and its reasons and messages;
* ``deciding`` is the reconcile as one pure ``decide``;
* ``family`` is the registry entry.
"""
