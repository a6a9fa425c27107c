"""Kubeflow Trainer v2's kinds, ``trainer.kubeflow.org/v1alpha1``: TrainJob, TrainingRuntime and
ClusterTrainingRuntime (upstream v2.3.0, pkg/apis/trainer/v1alpha1), and how to load them.

In: a dict (one YAML document or an object read from the API server). Out: a typed
:class:`TrainJob`, :class:`TrainingRuntime` or :class:`ClusterTrainingRuntime` whose fields carry
upstream's camelCase names as aliases. Unknown fields are kept, and the runtime's JobSet template
(``spec.template.spec``), Kubernetes' own types that upstream embeds whole (volumes, affinity,
security contexts) and env vars' sources stay plain dicts, so ``obj.dump()`` gives back what was
loaded.

Each field's docstring is upstream's CRD description (``kubectl explain`` prints it). What the
kubebuilder markers say beside a field (maxLength, minimum, list types, CEL rules) rides in the
field's ``json_schema_extra``, read only by :mod:`shared.api.crds`, never enforced on load: a
wrong value is refused by the API server (the CRD) or by admission with upstream's message
(``shared.core.trainer.validating``). A field's model default is upstream's ``+kubebuilder:default``
(the CRD's ``default``), so an object read from a server that did not default it reads the same.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pydantic

from shared.api import common, jobs, limits

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

TRAINJOB_KIND = "TrainJob"
TRAINING_RUNTIME_KIND = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME_KIND = "ClusterTrainingRuntime"

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
"""Label of a runtime's replicated Job template naming the step it is (values below)."""
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
"""Label of a runtime naming its framework (torch, deepspeed, mlx, jax, xgboost, torchtune); the SDK reads it."""
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
TRAINER = "trainer"
"""The ancestor steps: the values of :data:`ANCESTOR_LABEL`."""
NODE = "node"
"""The trainer's replicated Job and main container name (upstream constants.Node)."""
LAUNCHER = "launcher"
"""The MPI launcher's replicated Job and container name."""

MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = common.MANAGED_BY_MULTIKUEUE
MANAGED_BY_VALUES = (MANAGED_BY_TRAINER, MANAGED_BY_MULTIKUEUE)

OPEN_MPI = "OpenMPI"
INTEL_MPI = "Intel"
MPICH = "MPICH"
DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 60

# Conditions of a TrainJob and their reasons (trainjob_types.go).
SUSPENDED = "Suspended"
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED_REASON = "Suspended"
RESUMED_REASON = "Resumed"
RUNTIME_NOT_SUPPORTED_REASON = "TrainingRuntimeNotSupported"
DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"

MAX_RUNTIME_PATCHES = 16

SCALE = {"specReplicasPath": ".spec.trainer.numNodes", "statusReplicasPath": ".status.numNodes",
         "labelSelectorPath": ".status.selector"}
"""The TrainJob's scale subresource (kto's extension for the elastic TrainJob: ``kubectl scale`` and an
HPA set ``spec.trainer.numNodes``; the status fields are kto's too)."""

LoadError = jobs.LoadError
"""A document that is not a loadable object; ``errors`` are ``(field path, message)`` pairs."""

_IMMUTABLE: dict[str, Any] = {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]}
_URI_RULE: dict[str, Any] = {"rule": "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
             "message": "storageUri may be empty, or it must be a valid URI (scheme://...)"}


def _map_list(key: str, max_items: int | None = None, **more: Any) -> dict[str, Any]:
    """The markers of a ``+listType=map`` list keyed by ``key``."""
    markers: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key], **more}
    if max_items is not None:
        markers["maxItems"] = max_items
    return markers


def _name(max_length: int = 253) -> dict[str, Any]:
    return {"minLength": 1, "maxLength": max_length}


class EmbeddedMeta(common.Model):
    """Metadata of an embedded template: only labels and annotations are used."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None


# --- Kubernetes types upstream embeds, as small models where their shape is small ---------------


class LocalObjectReference(common.Model):
    """LocalObjectReference contains enough information to let you locate the referenced object inside
    the same namespace."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    name: str | None = pydantic.Field(None, json_schema_extra={"default": ""})
    """Name of the referent. This field is effectively required, but due to backwards compatibility is
    allowed to be empty. Instances of this type with an empty value here are almost certainly wrong.
    More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names"""


class ConfigMapKeySelector(common.Model):
    """Selects a key of a ConfigMap."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    key: str
    """The key to select."""
    name: str | None = pydantic.Field(None, json_schema_extra={"default": ""})
    """Name of the referent. This field is effectively required, but due to backwards compatibility is
    allowed to be empty. Instances of this type with an empty value here are almost certainly wrong.
    More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names"""
    optional: bool | None = None
    """Specify whether the ConfigMap or its key must be defined"""


class SecretKeySelector(common.Model):
    """Selects a key of a secret in the pod's namespace"""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    key: str
    """The key of the secret to select from.  Must be a valid secret key."""
    name: str | None = pydantic.Field(None, json_schema_extra={"default": ""})
    """Name of the referent. This field is effectively required, but due to backwards compatibility is
    allowed to be empty. Instances of this type with an empty value here are almost certainly wrong.
    More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names"""
    optional: bool | None = None
    """Specify whether the Secret or its key must be defined"""


class FieldSelector(common.Model):
    """Selects a field of the pod: supports metadata.name, metadata.namespace, `metadata.labels['<KEY>']`,
    `metadata.annotations['<KEY>']`, spec.nodeName, spec.serviceAccountName, status.hostIP, status.podIP,
    status.podIPs."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    api_version: str | None = None
    """Version of the schema the FieldPath is written in terms of, defaults to "v1"."""
    field_path: str
    """Path of the field to select in the specified API version."""


class FileKeySelector(common.Model):
    """FileKeyRef selects a key of the env file. Requires the EnvFiles feature gate to be enabled."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    key: str
    """The key within the env file. An invalid key will prevent the pod from starting. The keys defined
    within a source may consist of any printable ASCII characters except '='. During Alpha stage of the
    EnvFiles feature gate, the key size is limited to 128 characters."""
    optional: bool | None = pydantic.Field(None, json_schema_extra={"default": False})
    """Specify whether the file or its key must be defined. If the file or key does not exist, then the env
    var is not published. If optional is set to true and the specified key does not exist, the environment
    variable will not be set in the Pod's containers.

    If optional is set to false and the specified key does not exist, an error will be returned during
    Pod creation."""
    path: str
    """The path within the volume from which to select the file. Must be relative and may not contain the
    '..' path or start with '..'."""
    volume_name: str
    """The name of the volume mount containing the env file."""


class ResourceFieldSelector(common.Model):
    """Selects a resource of the container: only resources limits and requests (limits.cpu,
    limits.memory, limits.ephemeral-storage, requests.cpu, requests.memory and
    requests.ephemeral-storage) are currently supported."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    container_name: str | None = None
    """Container name: required for volumes, optional for env vars"""
    divisor: str | int | None = None
    """Specifies the output format of the exposed resources, defaults to \"1\""""
    resource: str
    """Required: resource to select"""


class EnvVarSource(common.Model):
    """Source for the environment variable's value. Cannot be used if value is not empty."""

    config_map_key_ref: ConfigMapKeySelector | None = None
    """Selects a key of a ConfigMap."""
    field_ref: FieldSelector | None = None
    """Selects a field of the pod: supports metadata.name, metadata.namespace, `metadata.labels['<KEY>']`,
    `metadata.annotations['<KEY>']`, spec.nodeName, spec.serviceAccountName, status.hostIP, status.podIP,
    status.podIPs."""
    file_key_ref: FileKeySelector | None = None
    """FileKeyRef selects a key of the env file. Requires the EnvFiles feature gate to be enabled."""
    resource_field_ref: ResourceFieldSelector | None = None
    """Selects a resource of the container: only resources limits and requests (limits.cpu, limits.memory,
    limits.ephemeral-storage, requests.cpu, requests.memory and requests.ephemeral-storage) are currently
    supported."""
    secret_key_ref: SecretKeySelector | None = None
    """Selects a key of a secret in the pod's namespace"""


class EnvVar(common.Model):
    """EnvVar represents an environment variable present in a Container."""

    name: str
    """Name of the environment variable. May consist of any printable ASCII characters except '='."""
    value: str | None = None
    """Variable references $(VAR_NAME) are expanded using the previously defined environment variables in
    the container and any service environment variables. If a variable cannot be resolved, the reference
    in the input string will be unchanged. Double $$ are reduced to a single $, which allows for escaping
    the $(VAR_NAME) syntax: i.e. "$$(VAR_NAME)" will produce the string literal "$(VAR_NAME)". Escaped
    references will never be expanded, regardless of whether the variable exists or not. Defaults to ""."""
    value_from: EnvVarSource | None = None
    """Source for the environment variable's value. Cannot be used if value is not empty."""


class ResourceClaim(common.Model):
    """ResourceClaim references one entry in PodSpec.ResourceClaims."""

    name: str
    """Name must match the name of one entry in pod.spec.resourceClaims of the Pod where this field is
    used. It makes that resource available inside a container."""
    request: str | None = None
    """Request is the name chosen for a request in the referenced claim. If empty, everything from the
    claim is made available, otherwise only the result of this request."""


class ResourceRequirements(common.Model):
    """ResourceRequirements describes the compute resource requirements."""

    claims: list[ResourceClaim] | None = pydantic.Field(None, json_schema_extra=_map_list("name"))
    """Claims lists the names of resources, defined in spec.resourceClaims, that are used by this
    container.

    This field depends on the DynamicResourceAllocation feature gate.

    This field is immutable. It can only be set for containers."""
    limits: dict[str, str | int | float] | None = None
    """Limits describes the maximum amount of compute resources allowed. More info:
    https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/"""
    requests: dict[str, str | int | float] | None = None
    """Requests describes the minimum amount of compute resources required. If Requests is omitted for a
    container, it defaults to Limits if that is explicitly specified, otherwise to an implementation-defined
    value. Requests cannot exceed Limits. More info:
    https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/"""


class Toleration(common.Model):
    """The pod this Toleration is attached to tolerates any taint that matches the triple
    <key,value,effect> using the matching operator <operator>."""

    key: str | None = None
    """Key is the taint key that the toleration applies to. Empty means match all taint keys. If the key is
    empty, operator must be Exists; this combination means to match all values and all keys."""
    operator: str | None = None
    """Operator represents a key's relationship to the value. Valid operators are Exists, Equal, Lt, and
    Gt. Defaults to Equal. Exists is equivalent to wildcard for value, so that a pod can tolerate all taints
    of a particular category. Lt and Gt perform numeric comparisons (requires feature gate
    TaintTolerationComparisonOperators)."""
    value: str | None = None
    """Value is the taint value the toleration matches to. If the operator is Exists, the value should be
    empty, otherwise just a regular string."""
    effect: str | None = None
    """Effect indicates the taint effect to match. Empty means match all taint effects. When specified,
    allowed values are NoSchedule, PreferNoSchedule and NoExecute."""
    toleration_seconds: int | None = pydantic.Field(None, json_schema_extra={"format": "int64"})
    """TolerationSeconds represents the period of time the toleration (which must be of effect NoExecute,
    otherwise this field is ignored) tolerates the taint. By default, it is not set, which means tolerate
    the taint forever (do not evict). Zero and negative values will be treated as 0 (evict immediately)
    by the system."""


class VolumeMount(common.Model):
    """VolumeMount describes a mounting of a Volume within a container."""

    name: str
    """This must match the Name of a Volume."""
    mount_path: str
    """Path within the container at which the volume should be mounted. Must not contain ':'."""
    mount_propagation: str | None = None
    """mountPropagation determines how mounts are propagated from the host to container and the other
    way around. When not set, MountPropagationNone is used. This field is beta in 1.10. When
    RecursiveReadOnly is set to IfPossible or to Enabled, MountPropagation must be None or unspecified
    (which defaults to None)."""
    read_only: bool | None = None
    """Mounted read-only if true, read-write otherwise (false or unspecified). Defaults to false."""
    recursive_read_only: str | None = None
    """RecursiveReadOnly specifies whether read-only mounts should be handled recursively.

    If ReadOnly is false, this field has no meaning and must be unspecified.

    If ReadOnly is true, and this field is set to Disabled, the mount is not made recursively read-only.
    If this field is set to IfPossible, the mount is made recursively read-only, if it is supported by the
    container runtime.  If this field is set to Enabled, the mount is made recursively read-only if it is
    supported by the container runtime, otherwise the pod will not be started and an error will be
    generated to indicate the reason.

    If this field is set to IfPossible or Enabled, MountPropagation must be set to None (or be
    unspecified, which defaults to None).

    If this field is not specified, it is treated as an equivalent of Disabled."""
    sub_path: str | None = None
    """Path within the volume from which the container's volume should be mounted. Defaults to ""
    (volume's root)."""
    sub_path_expr: str | None = None
    """Expanded path within the volume from which the container's volume should be mounted. Behaves
    similarly to SubPath but environment variable references $(VAR_NAME) are expanded using the
    container's environment. Defaults to "" (volume's root). SubPathExpr and SubPath are mutually
    exclusive."""


class SchedulingGate(common.Model):
    """PodSchedulingGate is associated to a Pod to guard its scheduling."""

    name: str
    """Name of the scheduling gate. Each scheduling gate must have a unique name field."""


# --- TrainingRuntime / ClusterTrainingRuntime -----------------------------------------------------


class EnvInjectionTarget(common.Model):
    """EnvInjectionTarget specifies a replicated job and the containers within it that should receive
    PET_* env injection."""

    job_name: str = pydantic.Field(json_schema_extra=_name())
    """jobName is the name of the target replicated job (e.g. "node"). Using "jobName" rather than
    "replicatedJobName" keeps the API future-proof for other CRD types (LWS, Grove, Slurm, etc.)."""
    container_names: list[str] = pydantic.Field(json_schema_extra={
        "x-kubernetes-list-type": "set", "minItems": 1, "maxItems": 8, "items": {"maxLength": 63},
        "x-kubernetes-validations": [{
            "rule": "!self.exists(c, c == 'node')",
            "message": "containerNames must not include the main node container because PET_* envs are "
                       "always injected into it"}]})
    """containerNames lists the container names within the target job that should receive PET_* envs.
    The item limit keeps admission checks small while covering typical preflight and sidecar use cases."""


class EnvInjection(common.Model):
    """envInjection configures which additional containers should receive the PET_* environment
    variables. By default, the PET_* variables are injected only into the main "node" container. Use
    this field to also inject them into selected sidecar or init containers. For torchtune, envInjection
    targets still receive PET_MASTER_ADDR and PET_MASTER_PORT even though the main trainer container
    uses command-line rendezvous instead. Defaults to empty (main container only)."""

    targets: list[EnvInjectionTarget] | None = pydantic.Field(None, json_schema_extra=_map_list("jobName", 16))
    """targets defines which replicated job containers receive PET_* env injection. The item limit keeps
    runtime validation bounded while allowing common multi-job runtimes to target their auxiliary
    containers."""


class ElasticPolicy(common.Model):
    """elasticPolicy runs the trainer nodes as an elastic torchrun job (kto's extension, not in Kubeflow
    Trainer v2.3.0; the API proposed by KEP-2903, kubeflow/trainer#3654): torchrun gets
    PET_NNODES=minNodes:maxNodes and a c10d rendezvous on node 0, and a change of the TrainJob's
    spec.trainer.numNodes (its scale subresource) scales the running JobSet's node job in place."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-validations": [
        {"rule": "self.minNodes <= self.maxNodes", "message": "minNodes must be less than or equal to maxNodes"}]}

    min_nodes: int = pydantic.Field(json_schema_extra={"minimum": 1})
    """minNodes is the fewest training nodes the job runs with: the lower bound of torchrun's --nnodes and of
    the autoscaler. Must be at least 1. (kto's extension, not in Kubeflow Trainer v2.3.0.)"""
    max_nodes: int = pydantic.Field(json_schema_extra={"minimum": 1})
    """maxNodes is the most training nodes the job may scale to: the upper bound of torchrun's --nnodes and of
    the autoscaler. Must be at least minNodes. (kto's extension, not in Kubeflow Trainer v2.3.0.)"""
    max_restarts: int | None = pydantic.Field(None, json_schema_extra={"minimum": 0})
    """maxRestarts is how many times torchrun restarts the worker group before it fails (PET_MAX_RESTARTS).
    (kto's extension, not in Kubeflow Trainer v2.3.0.)"""
    metrics: list[dict[str, Any]] | None = pydantic.Field(
        None, json_schema_extra={"x-kubernetes-list-type": "atomic"})
    """metrics are autoscaling/v2 MetricSpecs: when given, a HorizontalPodAutoscaler named as the TrainJob
    scales it between minNodes and maxNodes through its scale subresource. (kto's extension, not in Kubeflow
    Trainer v2.3.0.)"""


class TorchMLPolicySource(common.Model):
    """torch defines the configuration for the PyTorch runtime."""

    elastic_policy: ElasticPolicy | None = None
    """elasticPolicy runs the trainer nodes as an elastic torchrun job (kto's extension, not in Kubeflow
    Trainer v2.3.0; the API proposed by KEP-2903, kubeflow/trainer#3654): torchrun gets
    PET_NNODES=minNodes:maxNodes and a c10d rendezvous on node 0, and a change of the TrainJob's
    spec.trainer.numNodes (its scale subresource) scales the running JobSet's node job in place."""

    env_injection: EnvInjection | None = None
    """envInjection configures which additional containers should receive the PET_* environment
    variables. By default, the PET_* variables are injected only into the main "node" container. Use
    this field to also inject them into selected sidecar or init containers. For torchtune, envInjection
    targets still receive PET_MASTER_ADDR and PET_MASTER_PORT even though the main trainer container
    uses command-line rendezvous instead. Defaults to empty (main container only)."""


class MPIMLPolicySource(common.Model):
    """mpi defines the configuration for the MPI Runtime."""

    num_proc_per_node: int | None = 1
    """numProcPerNode is the number of processes per node. This value is equal to the number of slots for
    each node in the hostfile. Defaults to 1."""
    mpi_implementation: str | None = pydantic.Field(OPEN_MPI, json_schema_extra={"enum": [OPEN_MPI, ""]})
    """mpiImplementation is the name of the MPI implementation to create the appropriate hostfile.
    Defaults to OpenMPI."""
    ssh_auth_mount_path: str | None = pydantic.Field(DEFAULT_SSH_AUTH_MOUNT_PATH,
                                                     json_schema_extra={"maxLength": 4096})
    """sshAuthMountPath is the directory where SSH keys are mounted. Defaults to /root/.ssh."""
    run_launcher_as_node: bool | None = False
    """runLauncherAsNode defines whether to run training process on the launcher Job. Defaults to false."""


class JAXMLPolicySource(common.Model):
    """jax defines the configuration for the JAX Runtime"""


class XGBoostMLPolicySource(common.Model):
    """xgboost defines the configuration for the XGBoost Runtime."""


class FluxMLPolicySource(common.Model):
    """flux defines the configuration for the Flux runtime."""

    num_proc_per_node: int | None = pydantic.Field(1, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self >= 1", "message": "NumProcPerNode in fluxPolicy must be >= 1"}]})
    """numProcPerNode is the number of processes per node."""


ONE_POLICY_RULE = {
    "rule": "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
            ".filter(x, x).size() <= 1",
    "message": "Only one of the policy can be configured",
}


class MLPolicy(common.Model):
    """mlPolicy provides the ML-specific parameters for the model training."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-validations": [ONE_POLICY_RULE]}
    """Markers of the object itself (read by shared.api.crds)."""

    num_nodes: int | None = None
    """numNodes is the number of training nodes. Defaults to 1."""
    torch: TorchMLPolicySource | None = None
    """torch defines the configuration for the PyTorch runtime."""
    mpi: MPIMLPolicySource | None = None
    """mpi defines the configuration for the MPI Runtime."""
    flux: FluxMLPolicySource | None = None
    """flux defines the configuration for the Flux runtime."""
    jax: JAXMLPolicySource | None = None
    """jax defines the configuration for the JAX Runtime"""
    xgboost: XGBoostMLPolicySource | None = None
    """xgboost defines the configuration for the XGBoost Runtime."""

    @property
    def policies(self) -> list[str]:
        """The names of the ML policies set (upstream allows at most one)."""
        return [name for name in ("torch", "mpi", "jax", "xgboost", "flux") if getattr(self, name) is not None]


class CoschedulingPodGroupPolicySource(common.Model):
    """coscheduling plugin from the Kubernetes scheduler-plugins for gang-scheduling."""

    schedule_timeout_seconds: int | None = DEFAULT_SCHEDULE_TIMEOUT_SECONDS
    """scheduleTimeoutSeconds is the maximum duration to schedule PodGroup for gang-scheduling. If the
    scheduling timeout is equal to 0, the default value is used. Defaults to 60 seconds."""


class NetworkTopology(common.Model):
    """networkTopology defines the NetworkTopology config, this field works in conjunction with network
    topology feature and hyperNode CRD."""

    mode: str | None = pydantic.Field("hard", json_schema_extra={"enum": ["hard", "soft"]})
    """Mode specifies the mode of the network topology constrain."""
    highest_tier_allowed: int | None = pydantic.Field(1, json_schema_extra={"format": None})
    """HighestTierAllowed specifies the highest tier that a job allowed to cross when scheduling."""


class VolcanoPodGroupPolicySource(common.Model):
    """volcano plugin for gang-scheduling."""

    network_topology: NetworkTopology | None = None
    """networkTopology defines the NetworkTopology config, this field works in conjunction with network
    topology feature and hyperNode CRD."""


class PodGroupPolicy(common.Model):
    """podGroupPolicy defines the configuration for the PodGroup to enable gang-scheduling via supported
    plugins."""

    coscheduling: CoschedulingPodGroupPolicySource | None = None
    """coscheduling plugin from the Kubernetes scheduler-plugins for gang-scheduling."""
    volcano: VolcanoPodGroupPolicySource | None = None
    """volcano plugin for gang-scheduling."""


class JobSetTemplateSpec(common.Model):
    """template for the JobSet which will be used by TrainJob."""

    CRD: ClassVar[dict[str, Any]] = {"minProperties": 1}

    metadata: EmbeddedMeta | None = None
    """metadata for custom JobSet's labels and annotations. JobSet name and namespace is equal to the
    TrainJob's name and namespace."""
    spec: common.Manifest = pydantic.Field(default_factory=dict)
    """spec of the desired JobSet which will be created from TrainJob."""

    @property
    def replicated_jobs(self) -> list[common.Manifest]:
        """``spec.replicatedJobs``: the JobSet's replicated Jobs, as plain dicts (entries that are not
        objects left out)."""
        found = self.spec.get("replicatedJobs")
        return [job for job in found if isinstance(job, dict)] if isinstance(found, list) else []


class TrainingRuntimeSpec(common.Model):
    """spec of the TrainingRuntime."""

    CRD: ClassVar[dict[str, Any]] = {"minProperties": 1}

    ml_policy: MLPolicy | None = None
    """mlPolicy provides the ML-specific parameters for the model training."""
    pod_group_policy: PodGroupPolicy | None = None
    """podGroupPolicy defines the configuration for the PodGroup to enable gang-scheduling via supported
    plugins."""
    template: JobSetTemplateSpec = pydantic.Field(default_factory=JobSetTemplateSpec)
    """template for the JobSet which will be used by TrainJob."""


class Runtime(common.Model):
    """What TrainingRuntime and ClusterTrainingRuntime share."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]
    NAMESPACED: ClassVar[bool]

    api_version: str = API_VERSION
    kind: str
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)
    spec: TrainingRuntimeSpec = pydantic.Field(default_factory=TrainingRuntimeSpec)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def framework(self) -> str | None:
        """The runtime's ``trainer.kubeflow.org/framework`` label."""
        return (self.metadata.labels or {}).get(FRAMEWORK_LABEL)


class TrainingRuntime(Runtime):
    """TrainingRuntime represents a training runtime which can be referenced as part of `runtimeRef` API
    in TrainJob. This resource is a namespaced-scoped and can be referenced by TrainJob that created in
    the *same* namespace as the TrainingRuntime."""

    KIND = TRAINING_RUNTIME_KIND
    PLURAL = "trainingruntimes"
    SINGULAR = "trainingruntime"
    NAMESPACED = True

    kind: str = KIND
    spec: TrainingRuntimeSpec = pydantic.Field(default_factory=TrainingRuntimeSpec)
    """spec of the TrainingRuntime."""


class ClusterTrainingRuntime(Runtime):
    """ClusterTrainingRuntime represents a training runtime which can be referenced as part of
    `runtimeRef` API in TrainJob. This resource is a cluster-scoped and can be referenced by TrainJob
    that created in *any* namespace."""

    KIND = CLUSTER_TRAINING_RUNTIME_KIND
    PLURAL = "clustertrainingruntimes"
    SINGULAR = "clustertrainingruntime"
    NAMESPACED = False

    kind: str = KIND
    spec: TrainingRuntimeSpec = pydantic.Field(default_factory=TrainingRuntimeSpec)
    """spec of the ClusterTrainingRuntime."""


# --- TrainJob ------------------------------------------------------------------------------------


class RuntimeRef(common.Model):
    """runtimeRef is the reference to the training runtime."""

    name: str = pydantic.Field(json_schema_extra=_name())
    """name of the runtime being referenced. When namespaced-scoped TrainingRuntime is used, the TrainJob
    must have the same namespace as the deployed runtime."""
    api_group: str | None = pydantic.Field(GROUP, json_schema_extra={"maxLength": 253})
    """apiGroup of the runtime being referenced. Defaults to `trainer.kubeflow.org`."""
    kind: str | None = pydantic.Field(CLUSTER_TRAINING_RUNTIME_KIND, json_schema_extra={"maxLength": 253})
    """kind of the runtime being referenced. Defaults to ClusterTrainingRuntime."""


class DatasetInitializer(common.Model):
    """dataset defines the configuration for the dataset initialization and pre-processing."""

    storage_uri: str | None = pydantic.Field(None, json_schema_extra={
        "maxLength": 2048, "x-kubernetes-validations": [_URI_RULE]})
    """storageUri is the URI for the dataset provider. If set, it may be empty, or it must be a valid URI
    format (e.g., s3://bucket/path, gs://bucket/path)."""
    env: list[EnvVar] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 128))
    """env is the list of environment variables to set in the dataset initializer container. These values
    will be merged with the TrainingRuntime's dataset initializer environments."""
    secret_ref: LocalObjectReference | None = None
    """secretRef is the reference to the secret with credentials to download dataset. Secret must be
    created in the TrainJob's namespace."""


class ModelInitializer(common.Model):
    """model defines the configuration for the pre-trained model initialization"""

    storage_uri: str | None = pydantic.Field(None, json_schema_extra={
        "maxLength": 2048, "x-kubernetes-validations": [_URI_RULE]})
    """storageUri is the URI for the model provider. If set, it may be empty, or it must be a valid URI
    format (e.g., s3://bucket/path, gs://bucket/path)."""
    env: list[EnvVar] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 128))
    """env is the list of environment variables to set in the model initializer container. These values
    will be merged with the TrainingRuntime's model initializer environments."""
    secret_ref: LocalObjectReference | None = None
    """secretRef is the reference to the secret with credentials to download model. Secret must be
    created in the TrainJob's namespace."""


class Initializer(common.Model):
    """initializer defines the configuration of the initializer."""

    dataset: DatasetInitializer | None = None
    """dataset defines the configuration for the dataset initialization and pre-processing."""
    model: ModelInitializer | None = None
    """model defines the configuration for the pre-trained model initialization"""


_COMMAND: dict[str, Any] = {"x-kubernetes-list-type": "atomic", "maxItems": 128, "items": {"maxLength": 1048576}}


class Trainer(common.Model):
    """trainer defines the configuration of the trainer."""

    image: str | None = pydantic.Field(None, json_schema_extra={"maxLength": 500})
    """image is the container image for the training container."""
    command: list[str] | None = pydantic.Field(None, json_schema_extra=_COMMAND)
    """command for the entrypoint of the training container."""
    args: list[str] | None = pydantic.Field(None, json_schema_extra=_COMMAND)
    """args for the entrypoint for the training container."""
    env: list[EnvVar] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 128))
    """env is the list of environment variables to set in the training container. These values will be
    merged with the TrainingRuntime's trainer environments."""
    num_nodes: int | None = None
    """numNodes is the number of training nodes."""
    resources_per_node: ResourceRequirements | None = None
    """resourcesPerNode defines the compute resources for each training node."""
    num_proc_per_node: int | None = None
    """numProcPerNode is the number of processes/workers/slots on every training node. For the MPI runtime
    only int value can be set to represent number of slots per node. For the Torch runtime the value
    defaults to `auto` and can be overridden with an int."""


class ContainerPatch(common.Model):
    """ContainerPatch represents parameters that can be patched using PodSpecPatch."""

    name: str = pydantic.Field(json_schema_extra=_name())
    """name for the container. Runtime must have this container."""
    env: list[EnvVar] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 128))
    """env is the list of environment variables to set in the container. These values will be merged with
    the Runtime's environments. These values can't be set for container with the name: `node`,
    `dataset-initializer`, or `model-initializer`. For those containers the envs can only be set via
    Trainer or Initializer APIs."""
    volume_mounts: list[VolumeMount] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 128))
    """volumeMounts are the volumes to mount into the container's filesystem."""
    security_context: common.Manifest | None = None
    """securityContext patches the container's security context. More info:
    https://kubernetes.io/docs/tasks/configure-pod-container/security-context/"""


_VOLUME: dict[str, Any] = {
    "description": "Volume represents a named volume in a pod that may be accessed by any container in the pod.",
    "properties": {"name": {
        "description": "name of the volume. Must be a DNS_LABEL and unique within the pod. More info: "
                       "https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names",
        "type": "string"}},
    "required": ["name"],
}
"""What kto's schema keeps of a Volume (any object with a name; upstream's schema is Kubernetes' whole one)."""


class PodSpecPatch(common.Model):
    """spec patches the Pod spec with the fields managers are permitted to set."""

    service_account_name: str | None = pydantic.Field(None, json_schema_extra={"maxLength": 253, **_IMMUTABLE})
    """serviceAccountName patches the service account for the Pods in the target job templates."""
    volumes: list[common.Manifest] | None = pydantic.Field(
        None, json_schema_extra=_map_list("name", 128, items=_VOLUME, **_IMMUTABLE))
    """volumes patches the Pod's volumes."""
    init_containers: list[ContainerPatch] | None = pydantic.Field(
        None, json_schema_extra=_map_list("name", 64, **_IMMUTABLE))
    """initContainers patches the init containers in the target job templates."""
    containers: list[ContainerPatch] | None = pydantic.Field(
        None, json_schema_extra=_map_list("name", 64, **_IMMUTABLE))
    """containers patches specific containers in the target job templates."""
    image_pull_secrets: list[LocalObjectReference] | None = pydantic.Field(
        None, json_schema_extra=_map_list("name", 64, **_IMMUTABLE))
    """imagePullSecrets patches the image pull secrets for the Pods in the target job templates."""
    security_context: common.Manifest | None = pydantic.Field(None, json_schema_extra=_IMMUTABLE)
    """securityContext patches the Pod's security context. More info:
    https://kubernetes.io/docs/tasks/configure-pod-container/security-context/"""
    node_selector: dict[str, str] | None = None
    """nodeSelector patches the node selector to place Pods on specific nodes."""
    affinity: common.Manifest | None = None
    """affinity patches the Pod's scheduling affinity."""
    tolerations: list[Toleration] | None = pydantic.Field(
        None, json_schema_extra={"x-kubernetes-list-type": "atomic", "maxItems": 128})
    """tolerations patches the Pod's tolerations."""
    scheduling_gates: list[SchedulingGate] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 16))
    """schedulingGates patches the scheduling gates for the Pods in the target job templates. More info:
    https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/"""
    termination_grace_period_seconds: int | None = pydantic.Field(
        None, json_schema_extra={"format": "int64", "minimum": 0, **_IMMUTABLE})
    """terminationGracePeriodSeconds patches the termination grace period for Pods in the target job
    templates."""


class PodTemplatePatch(common.Model):
    """template patches the Pod template for this Job."""

    metadata: EmbeddedMeta | None = None
    """metadata patches the Pod template metadata. Only labels and annotations are allowed."""
    spec: PodSpecPatch | None = None
    """spec patches the Pod spec with the fields managers are permitted to set."""


class JobSpecPatch(common.Model):
    """spec patches the Job spec with restricted fields."""

    template: PodTemplatePatch | None = None
    """template patches the Pod template for this Job."""


class JobTemplatePatch(common.Model):
    """template patches the Job template for this replicated job."""

    metadata: EmbeddedMeta | None = None
    """metadata patches the Job template metadata. Only labels and annotations are allowed."""
    spec: JobSpecPatch | None = None
    """spec patches the Job spec with restricted fields."""


class ReplicatedJobPatch(common.Model):
    """ReplicatedJobPatch defines patches for a specific replicated job within the JobSet."""

    name: str = pydantic.Field(json_schema_extra=_name())
    """name is the name of the replicated job to patch."""
    template: JobTemplatePatch | None = None
    """template patches the Job template for this replicated job."""


class JobSetSpecPatch(common.Model):
    """spec patches the JobSet spec with restricted fields."""

    replicated_jobs: list[ReplicatedJobPatch] | None = pydantic.Field(
        None, json_schema_extra=_map_list("name", 100))
    """replicatedJobs defines per-job patches, keyed by job name."""


class JobSetTemplatePatch(common.Model):
    """template patches the JobSet template."""

    metadata: EmbeddedMeta | None = None
    """metadata patches the JobSet object metadata. Only labels and annotations are allowed."""
    spec: JobSetSpecPatch | None = None
    """spec patches the JobSet spec with restricted fields."""


class TrainingRuntimeSpecPatch(common.Model):
    """trainingRuntimeSpec defines allowed patches for ClusterTrainingRuntime or TrainingRuntime-based
    jobs."""

    template: JobSetTemplatePatch | None = None
    """template patches the JobSet template."""


class RuntimePatch(common.Model):
    """RuntimePatch represents a custom patch applied to the TrainJob's training runtime template. Patches
    are keyed by manager to provide clear ownership and avoid conflicts between controllers."""

    manager: str = pydantic.Field(json_schema_extra={**_name(), **_IMMUTABLE})
    """manager indicates who owns this patch entry. It can be set by the user, external controllers, or
    admission webhooks to track ownership and avoid conflicts. For example, Kueue sets this field to
    "kueue.x-k8s.io/manager"."""
    time: common.Time | None = None
    """time is the timestamp of when this patch was last written. Set by the Trainer admission webhook on
    each create or update. Used for observability only, not used as a list map key."""
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None
    """trainingRuntimeSpec defines allowed patches for ClusterTrainingRuntime or TrainingRuntime-based
    jobs."""


def _immutable_except(model: type[common.Model], mutable: str) -> dict[str, Any]:
    """Upstream's ``self == oldSelf`` on a whole object, but for one field: every other field is present in
    both or in neither, and equal."""
    fields = sorted(field.alias or name for name, field in model.model_fields.items() if name != mutable)
    rule = " && ".join(f"has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f})"
                       for f in fields)
    return {"x-kubernetes-validations": [{"rule": rule, "message": "field is immutable except numNodes"}]}


_TRAINER_IMMUTABLE = _immutable_except(Trainer, "num_nodes")
"""kto's extension: ``trainer.numNodes`` may change (the scale subresource writes it, for an elastic
TrainJob), the rest of ``trainer`` is immutable as upstream's whole ``trainer`` is."""


class TrainJobSpec(common.Model):
    """spec of the TrainJob."""

    runtime_ref: RuntimeRef = pydantic.Field(json_schema_extra=_IMMUTABLE)
    """runtimeRef is the reference to the training runtime."""
    initializer: Initializer | None = pydantic.Field(None, json_schema_extra=_IMMUTABLE)
    """initializer defines the configuration of the initializer."""
    trainer: Trainer | None = pydantic.Field(None, json_schema_extra=_TRAINER_IMMUTABLE)
    """trainer defines the configuration of the trainer."""
    runtime_patches: list[RuntimePatch] | None = pydantic.Field(
        None, json_schema_extra=_map_list("manager", MAX_RUNTIME_PATCHES))
    """runtimePatches defines custom patches applied to the TrainJob's Runtime. Patches are keyed by
    manager to provide clear ownership and avoid conflicts between controllers."""
    suspend: bool | None = False
    """suspend defines whether to suspend the running TrainJob."""
    active_deadline_seconds: int | None = pydantic.Field(None, json_schema_extra={
        "format": "int64", "minimum": 1, **_IMMUTABLE})
    """activeDeadlineSeconds specifies the duration in seconds relative to the TrainJob start time (which
    resets on resume from suspension) that the TrainJob may be active before the system tries to
    terminate it. Value must be a positive integer. Once reached, all running Pods are terminated and the
    TrainJob status becomes Failed with reason: DeadlineExceeded."""
    managed_by: str | None = pydantic.Field(MANAGED_BY_TRAINER, json_schema_extra={
        "maxLength": 253, "x-kubernetes-validations": [
            {"rule": f"self in ['{MANAGED_BY_TRAINER}', '{MANAGED_BY_MULTIKUEUE}']",
             "message": f"ManagedBy must be {MANAGED_BY_TRAINER} or {MANAGED_BY_MULTIKUEUE} if set"},
            {"rule": "self == oldSelf", "message": "field is immutable"}]})
    """managedBy is used to indicate the controller or entity that manages a TrainJob. The value must be
    either an empty, `trainer.kubeflow.org/trainjob-controller` or `kueue.x-k8s.io/multikueue`. The
    built-in TrainJob controller reconciles TrainJob which don't have this field at all or the field value
    is the reserved string `trainer.kubeflow.org/trainjob-controller`, but delegates reconciling TrainJobs
    with a 'kueue.x-k8s.io/multikueue' to the Kueue. The field is immutable."""


class Condition(common.Model):
    """Condition contains details for one aspect of the current state of this API Resource."""

    type: str = pydantic.Field(json_schema_extra={
        "maxLength": 316,
        "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                   r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"})
    """type of condition in CamelCase or in foo.example.com/CamelCase."""
    status: common.ConditionStatus
    """status of the condition, one of True, False, Unknown."""
    observed_generation: int | None = pydantic.Field(None, json_schema_extra={"format": "int64", "minimum": 0})
    """observedGeneration represents the .metadata.generation that the condition was set based upon. For
    instance, if .metadata.generation is currently 12, but the .status.conditions[x].observedGeneration is
    9, the condition is out of date with respect to the current state of the instance."""
    last_transition_time: common.Time
    """lastTransitionTime is the last time the condition transitioned from one status to another. This
    should be when the underlying condition changed.  If that is not known, then using the time when the
    API field changed is acceptable."""
    reason: str = pydantic.Field(json_schema_extra={
        "minLength": 1, "maxLength": 1024, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"})
    """reason contains a programmatic identifier indicating the reason for the condition's last
    transition. Producers of specific condition types may define expected values and meanings for this
    field, and whether the values are considered a guaranteed API. The value should be a CamelCase string.
    This field may not be empty."""
    message: str = pydantic.Field(json_schema_extra={"maxLength": 32768})
    """message is a human readable message indicating details about the transition. This may be an empty
    string."""


class JobStatus(common.Model):
    # No class docstring: it would describe each item of jobsStatus, which upstream leaves undescribed.

    _COUNT: ClassVar[dict[str, Any]] = {"minimum": 0}

    name: str = pydantic.Field(json_schema_extra=_name())
    """name of the child Job."""
    ready: int = pydantic.Field(json_schema_extra=_COUNT)
    """ready is the number of child Jobs where the number of ready pods and completed pods is greater than
    or equal to the total expected pod count for the child Job."""
    succeeded: int = pydantic.Field(json_schema_extra=_COUNT)
    """succeeded is the number of successfully completed child Jobs."""
    failed: int = pydantic.Field(json_schema_extra=_COUNT)
    """failed is the number of failed child Jobs."""
    active: int = pydantic.Field(json_schema_extra=_COUNT)
    """active is the number of child Jobs with at least 1 pod in a running or pending state which are not
    marked for deletion."""
    suspended: int = pydantic.Field(json_schema_extra=_COUNT)
    """suspended is the number of child Jobs which are in a suspended state."""


class Metric(common.Model):
    # No class docstring: it would describe each item of metrics, which upstream leaves undescribed.

    name: str = pydantic.Field(json_schema_extra=_name(64))
    """name is a user-defined label for the metric, e.g. "loss", "eval_accuracy"."""
    value: str = pydantic.Field(json_schema_extra=_name(64))
    """value of the metric. Values must be serialized as a string."""


class TrainerStatus(common.Model):
    """trainerStatus contains the latest observed runtime status of the Trainer step of the TrainJob. It
    reflects progress, remaining time, metrics, and the last update timestamp.

    This field is nil if the TrainJob does not report trainer-level status, or if no status has been
    observed yet (for example, immediately after the TrainJob is created).

    This is an alpha feature and requires enabling the TrainJobStatus feature gate."""

    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-validations": [
        {"rule": "has(self.lastUpdatedTime)", "message": "lastUpdatedTime is required when trainerStatus is present"}]}

    progress_percentage: int | None = pydantic.Field(None, json_schema_extra={"minimum": 0, "maximum": 100})
    """progressPercentage gives an estimate of how complete the TrainJob is as a percentage. The value will
    be between 0 and 100, or empty if unknown."""
    estimated_remaining_seconds: int | None = pydantic.Field(None, json_schema_extra={"minimum": 0})
    """estimatedRemainingSeconds gives the estimated remaining training time in seconds before the train
    job is completed. The value will be empty if it is unknown."""
    metrics: list[Metric] | None = pydantic.Field(
        None, json_schema_extra={"x-kubernetes-list-type": "atomic", "maxItems": 256})
    """metrics contains the current metrics for the model."""
    last_updated_time: common.Time | None = None
    """lastUpdatedTime is the timestamp when the runtime status was observed."""


class TrainJobStatus(common.Model):
    """status of TrainJob."""

    CRD: ClassVar[dict[str, Any]] = {"minProperties": 1}

    conditions: list[Condition] | None = pydantic.Field(None, json_schema_extra=_map_list("type", 8))
    """conditions for the TrainJob."""
    jobs_status: list[JobStatus] | None = pydantic.Field(None, json_schema_extra=_map_list("name", 100))
    """jobsStatus tracks the child Jobs in TrainJob."""
    trainer_status: TrainerStatus | None = None
    """trainerStatus contains the latest observed runtime status of the Trainer step of the TrainJob. It
    reflects progress, remaining time, metrics, and the last update timestamp.

    This field is nil if the TrainJob does not report trainer-level status, or if no status has been
    observed yet (for example, immediately after the TrainJob is created).

    This is an alpha feature and requires enabling the TrainJobStatus feature gate."""
    num_nodes: int | None = pydantic.Field(None, json_schema_extra={"minimum": 0})
    """numNodes is the number of training nodes the JobSet's node job runs now: the scale subresource's
    status replicas. (kto's extension, not in Kubeflow Trainer v2.3.0.)"""
    selector: str | None = None
    """selector is the label selector of the training nodes' pods: the scale subresource's label selector.
    (kto's extension, not in Kubeflow Trainer v2.3.0.)"""
    kto_conditions: list[Condition] | None = pydantic.Field(None, json_schema_extra=_map_list("type", 8))
    """ktoConditions are what kto says of the TrainJob beyond upstream's conditions: ``Running`` (True while
    every training node runs) and ``ResourcesCreated`` (False, reason TrainJobResourcesCreationFailed, with
    the API server's error, while a child cannot be made). Kept out of ``conditions``, which stay upstream's:
    the kubeflow SDK reads any condition there as "not running". (kto's extension, not in Kubeflow Trainer
    v2.3.0.)"""

    def condition(self, condition_type: str) -> Condition | None:
        return next((c for c in self.conditions or [] if c.type == condition_type), None)


class TrainJob(common.Named, common.Model):
    """TrainJob represents configuration of a training job."""

    KIND: ClassVar[str] = TRAINJOB_KIND
    PLURAL: ClassVar[str] = "trainjobs"
    SINGULAR: ClassVar[str] = "trainjob"
    CRD: ClassVar[dict[str, Any]] = {"x-kubernetes-validations": [
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
         "message": "metadata.name must match RFC 1035 DNS label format"},
        {"rule": "size(self.metadata.name) <= 63", "message": "metadata.name must be no more than 63 characters"},
    ]}

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)
    spec: TrainJobSpec
    """spec of the TrainJob."""
    status: TrainJobStatus | None = None
    """status of TrainJob."""

    @property
    def suspended(self) -> bool:
        return bool(self.spec.suspend)

    @property
    def managed_by(self) -> str:
        """``spec.managedBy``, upstream's default when unset."""
        return self.spec.managed_by or MANAGED_BY_TRAINER

    @property
    def runtime_namespaced(self) -> bool:
        """Whether ``runtimeRef`` names a (namespaced) TrainingRuntime rather than a ClusterTrainingRuntime."""
        return self.spec.runtime_ref.kind == TRAINING_RUNTIME_KIND


KINDS: dict[str, type[TrainJob] | type[TrainingRuntime] | type[ClusterTrainingRuntime]] = {
    TRAINJOB_KIND: TrainJob,
    TRAINING_RUNTIME_KIND: TrainingRuntime,
    CLUSTER_TRAINING_RUNTIME_KIND: ClusterTrainingRuntime,
}

Loaded = TrainJob | TrainingRuntime | ClusterTrainingRuntime


def load(document: Any) -> Loaded:
    """Load one ``trainer.kubeflow.org/v1alpha1`` document of any of the three kinds; raise
    :data:`LoadError` naming every bad field (a document nested deeper than
    ``limits.MAX_OBJECT_DEPTH`` is refused before pydantic sees it)."""
    errors = jobs.identity_errors(document, API_VERSION, tuple(KINDS))
    if errors:
        raise LoadError(errors)
    deep = limits.too_deep({key: value for key, value in document.items() if key != "status"})
    if deep is not None:
        path, depth = deep
        raise LoadError([(limits.shorten(path), f"nested {depth} levels deep; kto's limit is "
                                                f"{limits.MAX_OBJECT_DEPTH} levels")])
    cls = KINDS[document["kind"]]
    try:
        return cls.model_validate(document)
    except pydantic.ValidationError as exc:
        raise LoadError([(limits.field_path(tuple(err["loc"])), err["msg"]) for err in exc.errors()]) from None


def load_trainjob(document: Any) -> TrainJob:
    loaded = load(document)
    if not isinstance(loaded, TrainJob):
        raise LoadError([("kind", f"Unsupported value: {loaded.kind!r}: supported values: {TRAINJOB_KIND!r}")])
    return loaded


def load_runtime(document: Any) -> TrainingRuntime | ClusterTrainingRuntime:
    loaded = load(document)
    if isinstance(loaded, TrainJob):
        raise LoadError([("kind", f"Unsupported value: {TRAINJOB_KIND!r}: supported values: "
                                  f"{TRAINING_RUNTIME_KIND!r}, {CLUSTER_TRAINING_RUNTIME_KIND!r}")])
    return loaded
