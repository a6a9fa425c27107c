"""kto's elastic TrainJob on the real tier with the real JobSet controller v0.12.0 (its ElasticJobSet
feature gate on, realparts/jobset.py) serving the JobSets, kto's watcher leaving them to it
(``serve_jobsets`` false): kube-controller-manager's HPA scales the TrainJob 2→3, kto scales the
JobSet's node job in place, the real JobSet controller its Indexed Job, kube-controller-manager's
Job controller adds index 2 and leaves 0 and 1 running."""

from __future__ import annotations

import pytest

from realparts import jobset
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_trainjob_elastic import scaled_by_an_hpa

pytestmark = pytest.mark.parametrize("tier", ["kube"], indirect=True)


async def test_the_hpa_scales_an_elastic_trainjob_whose_jobset_the_real_controller_serves(
        real_jobset_controller: jobset.JobSetController, pipeline: Pipeline) -> None:
    await pipeline.stop("watcher")
    pipeline.start_watcher(serve_jobsets=False)
    await scaled_by_an_hpa(pipeline)
    job = await pipeline.client.get(resources.BATCH_JOBS, pipeline.namespace, "scaled-node-0")
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 3), "the one Job, scaled in place"
