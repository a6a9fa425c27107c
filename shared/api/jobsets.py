"""JobSet, ``jobset.x-k8s.io/v1alpha2`` (JobSet v0.12.0, the version Kubeflow Trainer v2.3.0
runs on), its label and annotation keys, upstream's defaults, and how to load one.

In: a dict (one YAML document or an object read from the API server). Out: a typed
:class:`JobSet` whose fields carry upstream's camelCase names as aliases. Unknown fields
are kept and each replicated job's ``template`` (a batch/v1 JobTemplateSpec) stays a plain
dict, so ``jobset.dump()`` gives back what was loaded. :func:`set_defaults` is upstream's
defaulting webhook (with the CRD's own defaults). Pure: no I/O.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Literal

import pydantic

from shared.api import common, jobs, limits

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "JobSet"
PLURAL = "jobsets"
SINGULAR = "jobset"

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_LABEL = "jobset.sigs.k8s.io/global-replicas"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
"""The SHA-1 of ``<namespace>/<job name>``, hex."""
EXCLUSIVE_KEY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY_KEY = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB_KEY = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT_KEY = "alpha.jobset.sigs.k8s.io/no-schedule"
COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"
GROUP_NAME_LABEL = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_LABEL = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_LABEL = "jobset.sigs.k8s.io/job-group-index"
IN_PLACE_RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/in-place-restart-attempt"
DISABLE_IN_PLACE_RESTART_KEY = "jobset.sigs.k8s.io/disable-in-place-restart"
RESTARTS_KEY = "jobset.sigs.k8s.io/restart-attempt"
"""Label and annotation: the JobSet's ``status.restarts`` when the Job was made."""
JOB_RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/job-restart-attempt"
PRIORITY_KEY = "jobset.sigs.k8s.io/priority"

CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"
"""``spec.managedBy`` of a JobSet the JobSet controller (here: kto) serves; any other value is
another controller's (Kueue's MultiKueue)."""

DEFAULT_GROUP_NAME = "default"
DEFAULT_RULE_NAME = "failurePolicyRule{}"
"""The name the webhook gives an unnamed failure policy rule (its index filled in)."""

COMPLETED = "Completed"
FAILED = "Failed"
SUSPENDED = "Suspended"
RESTARTING = "RestartingJobSet"
STARTUP_IN_PROGRESS = "StartupPolicyInProgress"
STARTUP_COMPLETED = "StartupPolicyCompleted"

ALL = "All"
ANY = "Any"
ANY_ORDER = "AnyOrder"
IN_ORDER = "InOrder"
READY = "Ready"
COMPLETE = "Complete"

LoadError = jobs.LoadError
"""A document that is not a loadable JobSet; ``errors`` are ``(field path, message)`` pairs."""


class DependsOn(common.Model):
    """A replicated job this one waits for, and the state it waits for."""

    name: str
    """The replicated job waited for (declared before this one)."""
    status: Literal["Ready", "Complete"]
    """Ready: every Job of it is ready (or finished); Complete: every Job of it succeeded."""


class ReplicatedJob(common.Model):
    """A group of identical batch Jobs: replicas Jobs from one template."""

    name: str
    """Unique within the JobSet; part of each Job's name <jobset>-<name>-<index>."""
    group_name: str = DEFAULT_GROUP_NAME
    """The group this replicated job is counted in (labels group-name, group-replicas, job-group-index)."""
    template: common.Manifest = pydantic.Field(default_factory=dict)
    """The batch/v1 JobTemplateSpec of every Job of this replicated job (kept as given)."""
    replicas: int = 1
    """How many Jobs are made from the template."""
    depends_on: list[DependsOn] | None = None
    """Replicated jobs whose Jobs must reach a state before this one's are created."""


class Network(common.Model):
    """How the pods find each other."""

    enable_dns_hostnames: bool | None = pydantic.Field(default=None, alias="enableDNSHostnames")
    """Pods get the hostname <job>-<index> in the subdomain (a headless Service). Defaults to true."""
    subdomain: str | None = None
    """The headless Service's name and the pods' subdomain; the JobSet's name when unset."""
    publish_not_ready_addresses: bool | None = None
    """The headless Service publishes pods before they are ready. Defaults to true."""


class FailurePolicyRule(common.Model):
    """What to do when a Job fails in a given way."""

    name: str = ""
    """The rule's name (failurePolicyRule<index> when unset)."""
    action: Literal["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                    "RestartJobAndIgnoreMaxRestarts"]
    """What is done when the rule matches a failed Job."""
    on_job_failure_reasons: list[str] | None = None
    """The Job failure condition's reasons the rule applies to (any when empty)."""
    on_job_failure_message_patterns: list[str] | None = None
    """Regular expressions on the Job failure condition's message (any when empty)."""
    target_replicated_jobs: list[str] | None = None
    """The replicated jobs the rule applies to (all when empty)."""


class FailurePolicy(common.Model):
    """How the JobSet answers a failed Job."""

    max_restarts: int = 0
    """How many times the whole JobSet is recreated before it fails."""
    restart_strategy: Literal["Recreate", "BlockingRecreate", "InPlaceRestart"] = "Recreate"
    """Recreate: Jobs are recreated as the old ones go; BlockingRecreate: only once every old Job is gone."""
    rules: list[FailurePolicyRule] | None = None
    """Rules tried in order; the first matching a failed Job decides (else RestartJobSet)."""


class SuccessPolicy(common.Model):
    """When the JobSet is complete."""

    operator: Literal["All", "Any"]
    """All: every Job of the target replicated jobs succeeded; Any: one did."""
    target_replicated_jobs: list[str] | None = None
    """The replicated jobs counted (all when empty)."""


class StartupPolicy(common.Model):
    """The order replicated jobs start in."""

    startup_policy_order: Literal["AnyOrder", "InOrder"]
    """InOrder: a replicated job is started once the one before it is ready."""


class Coordinator(common.Model):
    """The pod whose stable endpoint every Job is labelled with."""

    replicated_job: str
    """The coordinator's replicated job."""
    job_index: int = 0
    """The coordinator's Job index within it."""
    pod_index: int = 0
    """The coordinator's pod index within that Job."""


class JobSetSpec(common.Model):
    """What the JobSet runs."""

    replicated_jobs: list[ReplicatedJob] | None = None
    """The groups of Jobs, in the order they are created."""
    network: Network | None = None
    """Pod DNS names."""
    success_policy: SuccessPolicy | None = None
    """When the JobSet is complete (All by default)."""
    failure_policy: FailurePolicy | None = None
    """What a failed Job leads to (the JobSet fails at once when unset)."""
    startup_policy: StartupPolicy | None = None
    """The order replicated jobs start in (AnyOrder by default)."""
    suspend: bool | None = None
    """Suspends every Job (they are made suspended, and resumed when this turns false)."""
    coordinator: Coordinator | None = None
    """A pod every Job is labelled with the endpoint of."""
    managed_by: str | None = None
    """The controller that serves the JobSet (jobset.sigs.k8s.io/jobset-controller by default)."""
    ttl_seconds_after_finished: int | None = None
    """Seconds after the JobSet finished before it is deleted."""
    volume_claim_policies: list[common.Manifest] | None = None
    """PersistentVolumeClaim templates (kept, not acted on by kto)."""


class ReplicatedJobStatus(common.Model):
    """How many Jobs of one replicated job are in each state."""

    name: str
    """The replicated job."""
    ready: int = 0
    """Active Jobs whose ready and succeeded pods reach their parallelism (or completions)."""
    succeeded: int = 0
    """Jobs complete."""
    failed: int = 0
    """Jobs failed."""
    active: int = 0
    """Jobs with an active pod."""
    suspended: int = 0
    """Jobs suspended."""
    job_restarts: list[int] | None = None
    """Per Job index, its own restarts (the RestartJob action; not used by kto)."""
    job_restarts_count_towards_max: list[int] | None = None
    """Per Job index, its restarts that count towards maxRestarts (not used by kto)."""


class Condition(common.Model):
    """A metav1.Condition."""

    type: str
    """Completed, Failed, Suspended, RestartingJobSet, StartupPolicyInProgress or StartupPolicyCompleted."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str
    """Why, in one CamelCase word."""
    message: str = ""
    """Why, in words."""
    last_transition_time: common.Time | None = None
    """When the status last changed."""
    observed_generation: int | None = None
    """The JobSet generation the condition was set on."""


class JobSetStatus(common.Model):
    """What the controller saw."""

    conditions: list[Condition] | None = None
    """The JobSet's conditions, each type once."""
    restarts: int = 0
    """How many times the JobSet was recreated."""
    restarts_count_towards_max: int | None = None
    """The restarts that count towards failurePolicy.maxRestarts."""
    terminal_state: str | None = None
    """Completed or Failed, once the JobSet is finished."""
    replicated_jobs_status: list[ReplicatedJobStatus] | None = None
    """Per replicated job, its Jobs counted by state."""


class JobSet(common.Named, common.Model):
    """A group of batch Jobs run as one workload (jobset.x-k8s.io/v1alpha2)."""

    KIND: ClassVar[str] = KIND
    PLURAL: ClassVar[str] = PLURAL
    SINGULAR: ClassVar[str] = SINGULAR
    CONTROLLER_NAME: ClassVar[str] = "jobset"
    """The component of its Events (JobSet's controller records as ``jobset``)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)
    spec: JobSetSpec = pydantic.Field(default_factory=JobSetSpec)
    """What the JobSet runs."""
    status: JobSetStatus | None = None
    """What the controller saw."""

    @property
    def uid(self) -> str:
        return self.metadata.uid or ""

    @property
    def replicated_jobs(self) -> list[ReplicatedJob]:
        return self.spec.replicated_jobs or []

    @property
    def suspended(self) -> bool:
        return bool(self.spec.suspend)

    @property
    def subdomain(self) -> str:
        """The headless Service's name (upstream's GetSubdomain)."""
        network = self.spec.network
        return network.subdomain if network is not None and network.subdomain else self.name

    @property
    def dns_hostnames(self) -> bool:
        network = self.spec.network
        return network is not None and bool(network.enable_dns_hostnames)

    def replicated_job(self, name: str) -> ReplicatedJob | None:
        return next((r for r in self.replicated_jobs if r.name == name), None)


def set_defaults(jobset: JobSet) -> JobSet:
    """Upstream's defaulting webhook and the CRD's defaults, on a copy: successPolicy All,
    startupPolicy AnyOrder, network with DNS hostnames and not-ready addresses published,
    each Job template Indexed with restartPolicy OnFailure, failure policy rules named."""
    out = jobset.model_copy(deep=True)
    spec = out.spec
    if spec.success_policy is None:
        spec.success_policy = SuccessPolicy(operator=ALL)
    if spec.startup_policy is None:
        spec.startup_policy = StartupPolicy(startup_policy_order=ANY_ORDER)
    for rjob in spec.replicated_jobs or []:
        template = copy.deepcopy(rjob.template)
        job_spec = template.setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
        rjob.template = template
    if spec.network is None:
        spec.network = Network()
    if spec.network.enable_dns_hostnames is None:
        spec.network.enable_dns_hostnames = True
    if spec.network.publish_not_ready_addresses is None:
        spec.network.publish_not_ready_addresses = True
    if spec.failure_policy is not None:
        for index, rule in enumerate(spec.failure_policy.rules or []):
            if not rule.name:
                rule.name = DEFAULT_RULE_NAME.format(index)
    return out


def load(document: Any) -> JobSet:
    """Load one JobSet document; raise :data:`LoadError` naming every bad field."""
    errors = jobs.identity_errors(document, API_VERSION, (KIND,))
    if errors:
        raise LoadError(errors)
    deep = limits.depth_error(document)
    if deep is not None:
        raise LoadError([deep])
    try:
        return JobSet.model_validate(document)
    except pydantic.ValidationError as exc:
        raise LoadError([(limits.shorten(".".join(str(part) for part in err["loc"])), err["msg"])
                         for err in exc.errors()]) from None
