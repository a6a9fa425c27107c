"""The pure core of et-operator's kinds (``kai.alibabacloud.com/v1alpha1``, spec Part B).

In: a TrainingJob, the children observed for it, its ScaleIns and ScaleOuts,
the results of commands already run on its launcher, and ``now``. Out: a
``effects.Effects``. Modules: ``naming`` (names, labels, B.5),
``defaulting`` and ``validating`` (B.2, kto's own rules), ``planning``
(children and scripts, B.6, B.9), ``statuses`` (conditions and counts,
B.3, B.16), ``scaling`` (scalers, B.11–B.14) and ``deciding``
(``decide``: B.7, B.8, B.10, B.15). docs/elastic-core.md tells the story.
"""
