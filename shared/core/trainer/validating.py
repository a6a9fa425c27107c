"""Validation of Kubeflow Trainer v2's kinds with upstream's messages and field paths (v2.3.0: pkg/webhooks,
the runtime plugins' ``Validate``, and the CRDs' CEL rules).

In: a loaded :class:`trainer.TrainJob` (and the stored one on UPDATE) with the runtime its ``runtimeRef``
names as read from the API server, or a loaded (Cluster)TrainingRuntime. Out: a ``reports.Report``.

Three parts, as upstream splits them:

* :func:`check_schema_rules`: the CRDs' CEL rules (``x-kubernetes-validations``). kube-apiserver runs them
  before any webhook, so on a real cluster these never fire here; the local cluster (sim/) has no CEL,
  and kto's webhook runs them for it with kube-apiserver's words (:func:`_cel`).
* :func:`check_runtime`: upstream's TrainingRuntime and ClusterTrainingRuntime webhooks (replicated Jobs
  of an ancestor step have one replica and the step's container), and the runtime's CEL rules;
  kto adds JobSet's one CEL rule the runtime's free-form template cannot carry.
* :func:`check_against_runtime`: upstream's TrainJob webhook: the runtime must exist (the read's error
  and upstream's words, under upstream's field path: ``spec.runtimeRef`` for a TrainingRuntime,
  ``spec.RuntimeRef`` for a ClusterTrainingRuntime), then each plugin's ``Validate`` (torch, mpi,
  xgboost, flux, jobset: initializers, runtimePatches). Upstream runs its plugins from a Go map, in no fixed
  order; kto's order is fixed: the ML policy's, then jobset's.

The trainjob family's decide calls :func:`check_against_runtime` too (``Failed`` for a job that got past
admission: applied before the webhook, or its runtime deleted since). Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from shared.api import jobs, trainer
from shared.core import admitting, reports
from shared.core.reports import FieldError, Report

Runtime = trainer.TrainingRuntime | trainer.ClusterTrainingRuntime

TORCH_RESERVED_ENVS = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                                 "PET_MASTER_PORT"})
MPI_RESERVED_ENVS = frozenset({"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args",
                               "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots"})
XGBOOST_RESERVED_ENVS = frozenset({"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"})
INITIALIZER_VOLUME = "initializer"
"""The volume an initializer's container must mount (upstream's jobset plugin constants)."""
ANCESTOR_CONTAINERS = {trainer.TRAINER: trainer.NODE, trainer.MODEL_INITIALIZER: trainer.MODEL_INITIALIZER,
                       trainer.DATASET_INITIALIZER: trainer.DATASET_INITIALIZER}
"""The container a replicated Job of each ancestor step must have."""
SUPPORT_LABEL = "trainer.kubeflow.org/support"
DEPRECATED = "deprecated"
DEPRECATION_POLICY_URL = ("https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html"
                          "#runtime-deprecation-policy")
TORCHTUNE_ENTRYPOINT = ["tune", "run"]
TORCHTUNE_MODELS = frozenset({"llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B"})
TORCHTUNE_MULTI_NODE_MODEL = "llama3_3/70B"
TORCHTUNE_IMMUTABLE_CONFIGS = frozenset({"output_dir", "tokenizer.path", "checkpointer.checkpoint_dir",
                                         "tokenizer.merges_file"})
"""Config items the runtime sets in a torchtune command, which ``spec.trainer.args`` must not."""
FLUX_INSTALLER = "flux-installer"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                      "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                      "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")
_HTTP_PATH_MESSAGE = "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"


Unread = admitting.Unread
"""A runtime the API server did not give, and why."""


def not_found(kind: str, name: str) -> Unread:
    """What Kubernetes' client says when a runtime of ``kind`` named ``name`` does not exist."""
    cls = trainer.TrainingRuntime if kind == trainer.TRAINING_RUNTIME_KIND else trainer.ClusterTrainingRuntime
    return Unread(f'{cls.PLURAL}.{trainer.GROUP} "{name}" not found')


def go_json(value: Any) -> str:
    """A value as Go's ``json.Marshal`` writes it (compact, ``<``, ``>`` and ``&`` escaped): how
    apimachinery shows a struct or list in an ``Invalid value``."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _shown(model: Any) -> str:
    """A model as upstream's Go struct marshals it: every field set, defaults included."""
    if isinstance(model, list):
        return go_json([item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in model])
    return go_json(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _cel(path: str, value: Any, message: str) -> FieldError:
    """A CEL rule's failure as kube-apiserver (1.37) reports it: a scalar's value shown
    (``spec.managedBy: Invalid value: "x": <message>``), an object's or a list's left out
    (``spec.mlPolicy: Invalid value: <message>``: pass None)."""
    if value is None:
        return FieldError(path, "Invalid", message)
    return FieldError(path, "Invalid", message, reports.number(value) if isinstance(value, int) else reports.quote(value))


# ---------------------------------------------------------------------------
# The CRDs' CEL rules
# ---------------------------------------------------------------------------


def _uri_errors(path: str, uri: str | None) -> list[FieldError]:
    if uri is None or uri == "" or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$", uri):
        return []
    return [_cel(path, uri, "storageUri may be empty, or it must be a valid URI (scheme://...)")]


def _trainjob_cel(job: trainer.TrainJob, old: trainer.TrainJob | None) -> list[FieldError]:
    errors: list[FieldError] = []
    name = job.name
    if name and not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", name):
        errors.append(_cel("<nil>", None, "metadata.name must match RFC 1035 DNS label format"))
    if len(name) > 63:
        errors.append(_cel("<nil>", None, "metadata.name must be no more than 63 characters"))
    spec = job.spec
    managed = job.spec.model_fields_set
    if "managed_by" in managed and spec.managed_by not in trainer.MANAGED_BY_VALUES:
        errors.append(_cel("spec.managedBy", spec.managed_by, f"ManagedBy must be {trainer.MANAGED_BY_TRAINER} or "
                                                       f"{trainer.MANAGED_BY_MULTIKUEUE} if set"))
    initializer = spec.initializer
    if initializer is not None and initializer.dataset is not None:
        errors += _uri_errors("spec.initializer.dataset.storageUri", initializer.dataset.storage_uri)
    if initializer is not None and initializer.model is not None:
        errors += _uri_errors("spec.initializer.model.storageUri", initializer.model.storage_uri)
    if old is not None:
        errors += _immutable_errors(job, old)
    return errors


def _immutable_errors(job: trainer.TrainJob, old: trainer.TrainJob) -> list[FieldError]:
    """``self == oldSelf`` on the fields set in both versions (CEL transition rules only run then)."""
    errors: list[FieldError] = []
    for name, alias in (("runtime_ref", "runtimeRef"), ("initializer", "initializer"), ("trainer", "trainer"),
                        ("active_deadline_seconds", "activeDeadlineSeconds"), ("managed_by", "managedBy")):
        before, after = getattr(old.spec, name), getattr(job.spec, name)
        if before is None or after is None:
            continue
        if _wire(before) != _wire(after):
            errors.append(_cel(f"spec.{alias}", after if isinstance(after, (int, str)) else None, "field is immutable"))
    return errors


def _wire(value: Any) -> Any:
    return value.model_dump(by_alias=True, exclude_none=True, mode="json") if hasattr(value, "model_dump") else value


def _runtime_cel(runtime: Runtime) -> list[FieldError]:
    errors: list[FieldError] = []
    policy = runtime.spec.ml_policy
    if policy is not None:
        if len(policy.policies) > 1:
            errors.append(_cel("spec.mlPolicy", None, trainer.ONE_POLICY_RULE["message"]))
        torch = policy.torch
        if torch is not None and torch.env_injection is not None:
            for index, target in enumerate(torch.env_injection.targets or []):
                if trainer.NODE in target.container_names:
                    errors.append(_cel(
                        f"spec.mlPolicy.torch.envInjection.targets[{index}].containerNames", None,
                        "containerNames must not include the main node container because PET_* envs are always "
                        "injected into it"))
        flux = policy.flux
        if flux is not None and flux.num_proc_per_node is not None and flux.num_proc_per_node < 1:
            errors.append(_cel("spec.mlPolicy.flux.numProcPerNode", flux.num_proc_per_node,
                               "NumProcPerNode in fluxPolicy must be >= 1"))
    spec = runtime.spec.template.spec
    startup = spec.get("startupPolicy")
    if (isinstance(startup, dict) and startup.get("startupPolicyOrder") == "InOrder"
            and any("dependsOn" in job for job in runtime.spec.template.replicated_jobs)):
        errors.append(_cel("spec.template.spec", None, "StartupPolicy and DependsOn APIs are mutually exclusive"))
    return errors


def check_schema_rules(obj: trainer.TrainJob | Runtime, old: trainer.TrainJob | Runtime | None = None) -> Report:
    """The CEL rules of ``obj``'s CRD (UPDATE: ``old`` for the transition rules), as kube-apiserver words them."""
    if isinstance(obj, trainer.TrainJob):
        return Report(_trainjob_cel(obj, old if isinstance(old, trainer.TrainJob) else None))
    return Report(_runtime_cel(obj))


# ---------------------------------------------------------------------------
# TrainingRuntime and ClusterTrainingRuntime (pkg/webhooks/*trainingruntime_webhook.go)
# ---------------------------------------------------------------------------


def _pod_spec(replicated_job: dict[str, Any]) -> dict[str, Any]:
    """``template.spec.template.spec`` of a replicated Job (empty where the path is missing)."""
    node: Any = replicated_job
    for key in ("template", "spec", "template", "spec"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _containers(pod_spec: dict[str, Any], key: str = "containers") -> list[dict[str, Any]]:
    found = pod_spec.get(key)
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _ancestor(replicated_job: dict[str, Any]) -> str | None:
    template = replicated_job.get("template")
    meta = template.get("metadata") if isinstance(template, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    value = labels.get(trainer.ANCESTOR_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def _replicated_job_errors(runtime: Runtime) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, job in enumerate(runtime.spec.template.replicated_jobs):
        ancestor = _ancestor(job)
        if ancestor not in ANCESTOR_CONTAINERS:
            continue
        path = f"spec.template.spec.replicatedJobs[{index}]"
        replicas = job.get("replicas", 1)  # JobSet's schema defaults it to 1
        if replicas != 1:
            errors.append(FieldError(f"{path}.replicas", "Invalid", "always must be 1", reports.quote(replicas)))
        containers = _containers(_pod_spec(job))
        if not any(c.get("name") == ANCESTOR_CONTAINERS[ancestor] for c in containers):
            errors.append(FieldError(f"{path}.template.spec.template.spec.containers", "Invalid",
                                     f"must contain the required container for the ancestor: {ancestor}",
                                     go_json(containers) if containers else "null"))
    return errors


def deprecation_warning(runtime: Runtime) -> str | None:
    """Upstream's warning for a runtime labelled ``trainer.kubeflow.org/support: deprecated``."""
    if (runtime.metadata.labels or {}).get(SUPPORT_LABEL) != DEPRECATED:
        return None
    return (f'{runtime.kind} "{runtime.name}" is deprecated and will be removed in a future release of Kubeflow '
            f"Trainer. See runtime deprecation policy: {DEPRECATION_POLICY_URL}")


def check_runtime(runtime: Runtime, old: Runtime | None = None) -> Report:
    """A (Cluster)TrainingRuntime's admission: the CEL rules (kube-apiserver refuses on them before any
    webhook is called), then upstream's webhook (on CREATE; upstream judges no UPDATE), with the
    deprecation warning of a ClusterTrainingRuntime."""
    report = Report(_runtime_cel(runtime))
    if old is None and report.ok:
        report.errors += _replicated_job_errors(runtime)
        warning = deprecation_warning(runtime) if isinstance(runtime, trainer.ClusterTrainingRuntime) else None
        if warning is not None:
            report.warnings.append(warning)
    return report


# ---------------------------------------------------------------------------
# TrainJob against its runtime (pkg/webhooks/trainjob_webhook.go, the plugins' Validate)
# ---------------------------------------------------------------------------


def _env_names(env: Sequence[trainer.EnvVar] | None) -> list[str]:
    return [var.name for var in env or []]


def _reserved(job: trainer.TrainJob, reserved: frozenset[str]) -> list[FieldError]:
    """torch's and mpi's check: one error on ``spec.trainer.env`` naming every reserved env set."""
    trainer_spec = job.spec.trainer
    if trainer_spec is None:
        return []
    found = sorted(set(_env_names(trainer_spec.env)) & reserved)
    if not found:
        return []
    return [FieldError("spec.trainer.env", "Invalid",
                       f"must not have reserved envs, invalid envs configured: [{' '.join(found)}]",
                       _shown(trainer_spec.env or []))]


def _container_names(runtime: Runtime) -> dict[str, set[str]]:
    """Each replicated Job's name → the names of its containers and init containers."""
    names: dict[str, set[str]] = {}
    for job in runtime.spec.template.replicated_jobs:
        pod = _pod_spec(job)
        names[str(job.get("name"))] = {str(c.get("name")) for c in _containers(pod) + _containers(pod, "initContainers")}
    return names


def _torch_errors(job: trainer.TrainJob, runtime: Runtime) -> list[FieldError]:
    policy = runtime.spec.ml_policy
    torch = policy.torch if policy is not None else None
    if torch is None:
        return []
    errors: list[FieldError] = []
    containers = _container_names(runtime)
    for target in (torch.env_injection.targets or []) if torch.env_injection is not None else []:
        for name in target.container_names:
            if name not in containers.get(target.job_name, set()):
                errors.append(FieldError(
                    "spec.runtimeRef", "Invalid",
                    f"envInjection target podSet {reports.quote(target.job_name)} container {reports.quote(name)} "
                    f"not found in runtime template", _shown(target)))
    errors += _reserved(job, TORCH_RESERVED_ENVS)
    spec = job.spec.trainer
    if spec is not None and spec.command == TORCHTUNE_ENTRYPOINT:
        errors += _torchtune_errors(job, spec)
    return errors


def _torchtune_model(runtime_name: str) -> str:
    fields = runtime_name.split("-")
    if len(fields) != 3:
        return ""
    return f"{fields[1].replace('.', '_')}/{fields[2].upper()}"


def _bool_arg(args: Sequence[str], item: str) -> bool:
    """Whether some ``key=value`` argument whose key contains ``item`` is true (Python's ``True`` too)."""
    for arg in args:
        name, found, value = arg.partition("=")
        if found and item in name and value.strip().lower() == "true":
            return True
    return False


def _torchtune_errors(job: trainer.TrainJob, spec: trainer.Trainer) -> list[FieldError]:
    """The torchtune checks that need no recipe: a supported model, one node (but for the 70B model), no LoRA
    across nodes, no config item the runtime sets."""
    errors: list[FieldError] = []
    model = _torchtune_model(job.spec.runtime_ref.name)
    if model not in TORCHTUNE_MODELS:
        errors.append(FieldError("spec.runtimeRef.name", "Invalid",
                                 f"must have a supported pretrained model, invalid model configured: {model}",
                                 reports.quote(job.spec.runtime_ref.name)))
    nodes = spec.num_nodes if spec.num_nodes is not None else 1
    if nodes > 1 and model != TORCHTUNE_MULTI_NODE_MODEL:
        errors.append(FieldError("spec.trainer.numNodes", "Invalid", f"must be 1 for {model} model",
                                 reports.number(nodes)))
    args = spec.args or []
    lora = any("model.lora_attn_modules" in arg for arg in args)
    qlora = not _bool_arg(args, "model.use_dora") and _bool_arg(args, "model.quantize_base")
    if nodes > 1 and (lora or qlora):
        errors.append(FieldError("spec.trainer.numNodes", "Invalid",
                                 "LoRA fine-tuning is not supported for multi-node training in TorchTune",
                                 reports.number(nodes)))
    for index, arg in enumerate(args):
        key = arg.split("=", 1)[0]
        if key in TORCHTUNE_IMMUTABLE_CONFIGS:
            errors.append(FieldError(f"spec.trainer.args[{index}]", "Invalid",
                                     f"must not set immutable config {reports.quote(key)} in trainer args; it is "
                                     "managed by the runtime", reports.quote(arg)))
    return errors


def _flux_errors(job: trainer.TrainJob, runtime: Runtime) -> list[FieldError]:
    policy = runtime.spec.ml_policy
    flux = policy.flux if policy is not None else None
    if flux is None:
        return []
    errors: list[FieldError] = []
    spec = job.spec.trainer
    procs = spec.num_proc_per_node if spec is not None and spec.num_proc_per_node is not None else (
        flux.num_proc_per_node)
    if procs is not None and procs < 1:
        errors.append(FieldError("spec.trainer.numProcPerNode", "Invalid",
                                 "must be greater than or equal to 1 for Flux TrainJob", reports.number(procs)))
    for rjob in runtime.spec.template.replicated_jobs:
        if rjob.get("name") != trainer.NODE:
            continue
        for container in _containers(_pod_spec(rjob), "initContainers"):
            if container.get("name") == FLUX_INSTALLER:
                errors.append(FieldError("spec.trainer.initContainers", "Invalid",
                                         f"InitContainer '{FLUX_INSTALLER}' is reserved", reports.quote(FLUX_INSTALLER)))
    return errors


def _mpi_errors(job: trainer.TrainJob, runtime: Runtime) -> list[FieldError]:
    policy = runtime.spec.ml_policy
    mpi = policy.mpi if policy is not None else None
    if mpi is None:
        return []
    errors: list[FieldError] = []
    spec = job.spec.trainer
    nodes = spec.num_nodes if spec is not None and spec.num_nodes is not None else 1
    if spec is not None and nodes >= 2 and mpi.run_launcher_as_node:
        names = set(_container_names(runtime))
        if trainer.LAUNCHER not in names or trainer.NODE not in names:
            errors.append(FieldError(
                "spec.trainer.numNodes", "Invalid",
                "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher "
                "and node", reports.number(nodes) if spec.num_nodes is not None else "null"))
    return errors + _reserved(job, MPI_RESERVED_ENVS)


def _xgboost_errors(job: trainer.TrainJob, runtime: Runtime) -> list[FieldError]:
    policy = runtime.spec.ml_policy
    if policy is None or policy.xgboost is None or job.spec.trainer is None:
        return []
    return [FieldError(f"spec.trainer.env[{index}]", "Forbidden", f"{name} is reserved for the XGBoost runtime")
            for index, name in enumerate(_env_names(job.spec.trainer.env)) if name in XGBOOST_RESERVED_ENVS]


def _initializer_errors(job: trainer.TrainJob, runtime: Runtime, step: str, input_name: str) -> list[FieldError]:
    containers = _container_names(runtime)
    ref = _shown(job.spec.runtime_ref)
    if step not in containers:
        detail = f"must have {step} job when trainJob is configured with input {input_name}"
    elif step not in containers[step]:
        detail = f"must have container with name - {step} in the {step} job"
    else:
        mounts = [mount.get("name") for rjob in runtime.spec.template.replicated_jobs if rjob.get("name") == step
                  for c in _containers(_pod_spec(rjob)) if c.get("name") == step
                  for mount in (c.get("volumeMounts") or []) if isinstance(mount, dict)]
        if INITIALIZER_VOLUME in mounts:
            return []
        detail = f"must have volumeMount with name - {INITIALIZER_VOLUME} in container {step} of the {step} job"
    return [FieldError("spec.runtimeRef", "Invalid", detail, ref)]


def _manager_errors(manager: str) -> list[FieldError]:
    """apimachinery IsDomainPrefixedPath on a patch's manager."""
    path = "spec.runtimePatches.manager"
    if not manager:
        return [FieldError(path, "Required", "")]
    host, _, rest = manager.partition("/")
    if not host or not rest:
        return [FieldError(path, "Invalid", 'must be a domain-prefixed path (such as "acme.io/foo")',
                           reports.quote(manager))]
    errors: list[FieldError] = []
    if len(host) > 253:
        errors.append(FieldError(path, "Invalid", "must be no more than 253 characters", reports.quote(host)))
    if not _SUBDOMAIN.match(host):
        errors.append(FieldError(path, "Invalid", _SUBDOMAIN_MESSAGE, reports.quote(host)))
    if not _HTTP_PATH.match(rest):
        return [*errors, FieldError(path, "Invalid", _HTTP_PATH_MESSAGE, reports.quote(rest))]
    return errors


def _patch_errors(job: trainer.TrainJob, runtime: Runtime, old: trainer.TrainJob | None) -> list[FieldError]:
    errors: list[FieldError] = []
    patches = job.spec.runtime_patches or []
    if old is not None and _wire_list(old.spec.runtime_patches) != _wire_list(patches) and not (
            old.suspended or job.suspended):
        errors.append(FieldError("spec.runtimePatches", "Forbidden", "RuntimePatches can only be modified when the "
                                                                     "TrainJob is suspended before or after the update"))
    containers = _container_names(runtime)
    shown = _shown(patches)
    for patch in patches:
        errors += _manager_errors(patch.manager)
        template = patch.training_runtime_spec.template if patch.training_runtime_spec is not None else None
        if template is None or template.spec is None:
            continue
        for rjob in template.spec.replicated_jobs or []:
            if rjob.name not in containers:
                errors.append(FieldError("spec.runtimePatches", "Invalid",
                                         "must not have replicated job that doesn't exist in the runtime job template",
                                         shown))
                continue
            pod = rjob.template.spec.template.spec if (
                rjob.template is not None and rjob.template.spec is not None
                and rjob.template.spec.template is not None) else None
            if pod is None:
                continue
            for container in pod.init_containers or []:
                if container.name not in containers[rjob.name]:
                    errors.append(FieldError("spec.runtimePatches", "Invalid", "must not have initContainer that "
                                             f"doesn't exist in the runtime job {rjob.name}", shown))
            for container in pod.containers or []:
                if container.name not in containers[rjob.name]:
                    errors.append(FieldError("spec.runtimePatches", "Invalid", "must not have container that "
                                             f"doesn't exist in the runtime job {rjob.name}", shown))
                elif container.env and container.name in ANCESTOR_CONTAINERS.values():
                    errors.append(FieldError("spec.runtimePatches", "Invalid", "must not have envs for the "
                                             f"{trainer.DATASET_INITIALIZER}, {trainer.MODEL_INITIALIZER}, "
                                             f"{trainer.NODE} containers", shown))
    return errors


def _wire_list(patches: Sequence[trainer.RuntimePatch] | None) -> list[Any]:
    return [_wire(patch) for patch in patches or []]


def _jobset_errors(job: trainer.TrainJob, runtime: Runtime, old: trainer.TrainJob | None) -> list[FieldError]:
    errors: list[FieldError] = []
    initializer = job.spec.initializer
    if initializer is not None and initializer.dataset is not None:
        errors += _initializer_errors(job, runtime, trainer.DATASET_INITIALIZER, "datasetConfig")
    if initializer is not None and initializer.model is not None:
        errors += _initializer_errors(job, runtime, trainer.MODEL_INITIALIZER, "modelConfig")
    return errors + _patch_errors(job, runtime, old)


def runtime_path(job: trainer.TrainJob) -> str:
    """Where upstream reports a missing runtime: ``spec.runtimeRef``, or ``spec.RuntimeRef`` (sic) for a
    ClusterTrainingRuntime."""
    return "spec.runtimeRef" if job.runtime_namespaced else "spec.RuntimeRef"


def check_against_runtime(job: trainer.TrainJob, runtime: Runtime | Unread, old: trainer.TrainJob | None = None
                          ) -> Report:
    """Upstream's TrainJob webhook: ``runtime`` is what the API server gave for ``runtimeRef`` (kind
    TrainingRuntime: in the job's namespace), or why it gave nothing."""
    ref = job.spec.runtime_ref
    if ref.api_group != trainer.GROUP or ref.kind not in (trainer.TRAINING_RUNTIME_KIND,
                                                           trainer.CLUSTER_TRAINING_RUNTIME_KIND):
        return Report([UnsupportedRuntime(f"unsupported runtime: {ref.kind}.{ref.api_group}")])
    if isinstance(runtime, Unread):
        scope = "trainingRuntime" if job.runtime_namespaced else "clusterTrainingRuntime"
        return Report([FieldError(runtime_path(job), "Invalid",
                                  f"{runtime.message}: specified {scope} must be created before the TrainJob is created",
                                  _shown(ref))])
    report = Report()
    if isinstance(runtime, trainer.ClusterTrainingRuntime):
        warning = deprecation_warning(runtime)
        if warning is not None:
            report.warnings.append(f"Referenced {warning}")
    report.errors += (_torch_errors(job, runtime) + _mpi_errors(job, runtime) + _xgboost_errors(job, runtime)
                      + _flux_errors(job, runtime))
    report.errors += _jobset_errors(job, runtime, old)
    return report


class UnsupportedRuntime(FieldError):
    """Upstream's plain error for a runtimeRef of a group or kind no runtime has (``fmt.Errorf``, no field
    path): ``unsupported runtime: <kind>.<group>``."""

    def __init__(self, message: str) -> None:
        super().__init__("", "Invalid", message)

    def __str__(self) -> str:
        return self.detail


def runtime_read(job: trainer.TrainJob) -> tuple[str, str | None, str]:
    """(kind, namespace or None, name) of the runtime ``job`` names: what the webhook reads."""
    ref = job.spec.runtime_ref
    namespace = job.namespace if job.runtime_namespaced else None
    return str(ref.kind), namespace, ref.name


# ---------------------------------------------------------------------------
# Admission targets
# ---------------------------------------------------------------------------


def _read(job: trainer.TrainJob) -> admitting.Read:
    kind, namespace, name = runtime_read(job)
    return admitting.Read(trainer.API_VERSION, kind, namespace, name)


def _against(job: trainer.TrainJob, old: trainer.TrainJob | None, found: dict[str, Any] | Unread) -> Report:
    if isinstance(found, Unread):
        return check_against_runtime(job, found, old)
    try:
        runtime = trainer.load_runtime(found)
    except jobs.LoadError as exc:
        return check_against_runtime(job, Unread(f"the runtime does not load: {exc}"), old)
    return check_against_runtime(job, runtime, old)


def _check_trainjob(job: trainer.TrainJob, old: trainer.TrainJob | None) -> Report:
    return check_schema_rules(job, old)


def _check_runtime(runtime: Runtime, old: Runtime | None) -> Report:
    return check_runtime(runtime, old)


def _target(cls: type[trainer.TrainJob] | type[trainer.TrainingRuntime] | type[trainer.ClusterTrainingRuntime],
            rules: admitting.Rules) -> admitting.Target:
    return admitting.Target(trainer.GROUP, trainer.VERSION, cls.KIND, cls.PLURAL, cls.SINGULAR, upstream=True,
                            rules=rules, cluster_scoped=cls is trainer.ClusterTrainingRuntime)


TARGETS: tuple[admitting.Target, ...] = (
    _target(trainer.TrainJob, admitting.Rules(load=trainer.load_trainjob, check=_check_trainjob,
                                              reading=admitting.Reading(read=_read, check=_against))),
    _target(trainer.TrainingRuntime, admitting.Rules(load=trainer.load_runtime, check=_check_runtime)),
    _target(trainer.ClusterTrainingRuntime, admitting.Rules(load=trainer.load_runtime, check=_check_runtime)),
)
"""The three kinds' validating webhooks, under upstream's names and paths
(``validator.trainjob.trainer.kubeflow.org`` at ``/validate-trainer-kubeflow-org-v1alpha1-trainjob`` …).
Upstream's TrainJob defaulter (it stamps each runtime patch's ``time``) has no counterpart in kto."""
