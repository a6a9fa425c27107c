"""The ML policies of a TrainJob's runtime: Trainer v2.3's Torch, MPI, JAX, XGBoost and
PlainML plugins (pkg/runtime/framework/plugins/*), one function each.

In: the :class:`~shared.core.trainer.podsets.Info` being built (the runtime's
``mlPolicy``, the TrainJob's ``trainer``, the pod sets). Out: the same info, its
pod counts, env, ports, volumes and mounts set as upstream sets them (and, for
MPI, the hostfile ConfigMap: :func:`hostfile`); :class:`~shared.core.errors.PlanError`
for a policy kto does not run (``flux``) or an MPI implementation upstream rejects.
Pure: no I/O.

The env of the trainer's ``node`` container, in order: the runtime template's,
the TrainJob's ``trainer.env``, then the policy's (``PET_*``, ``JAX_*``, ``DMLC_*``,
``OMPI_MCA_*``), each upserted by name as ``pkg/apply`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.api import objects
from shared.core import errors
from shared.core.trainer import podsets

Manifest = dict[str, Any]

TORCH_NUM_NODES = "PET_NNODES"
TORCH_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
TORCH_NODE_RANK = "PET_NODE_RANK"
TORCH_MASTER_ADDR = "PET_MASTER_ADDR"
TORCH_MASTER_PORT = "PET_MASTER_PORT"
TORCH_RESERVED = frozenset({TORCH_NUM_NODES, TORCH_NPROC_PER_NODE, TORCH_NODE_RANK, TORCH_MASTER_ADDR,
                            TORCH_MASTER_PORT})
TORCHTUNE_ENTRYPOINT = ["tune", "run"]

OPENMPI = "OpenMPI"
MPI_DEFAULTS: Mapping[str, Any] = {"numProcPerNode": 1, "mpiImplementation": OPENMPI,
                                    "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": False}
"""The CRD's defaults of ``mlPolicy.mpi`` (a runtime read as stored has them; one given to
``kto plan`` may not)."""
MPI_SSH_VOLUME = "mpi-ssh-auth"
MPI_HOSTFILE_VOLUME = "mpi-hostfile"
OMPI_HOSTFILE = "OMPI_MCA_orte_default_hostfile"
OMPI_RSH_ARGS = "OMPI_MCA_plm_rsh_args"
OMPI_RSH_ARGS_VALUE = "-o ConnectionAttempts=10"
OMPI_KEEP_FQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"
OMPI_DEFAULT_SLOTS = "OMPI_MCA_orte_set_default_slots"

XGBOOST_TRACKER_URI = "DMLC_TRACKER_URI"
XGBOOST_TRACKER_PORT = "DMLC_TRACKER_PORT"
XGBOOST_TASK_ID = "DMLC_TASK_ID"
XGBOOST_NUM_WORKER = "DMLC_NUM_WORKER"


def _num_nodes(info: podsets.Info) -> int | None:
    trainer = info.trainer or {}
    value = trainer.get("numNodes")
    return None if value is None else int(value)


def _trainer_count(info: podsets.Info) -> int:
    """The trainer step's pod count after ``trainer.numNodes``."""
    pod_set = info.by_ancestor(podsets.ANCESTOR_TRAINER)
    given = _num_nodes(info)
    if pod_set is not None and given is not None:
        pod_set.count = given
    return pod_set.count if pod_set is not None else 1


def _first_address(info: podsets.Info) -> str:
    """The DNS name of the trainer's first pod, ``<job>-node-0-0.<job>``."""
    return f"{info.name}-{podsets.NODE}-0-0.{info.name}"


def _with_trainer_env(info: podsets.Info) -> Manifest | None:
    container = info.trainer_container()
    if container is not None:
        podsets.upsert_env(container, *((info.trainer or {}).get("env") or []))
    return container


def torch(info: podsets.Info, policy: Mapping[str, Any]) -> None:
    """torchrun's ``PET_*`` env (``PET_NPROC_PER_NODE``: ``trainer.numProcPerNode``, else
    ``auto`` with GPUs and the CPU count without), the rendezvous port, and the env of
    ``envInjection`` targets; torchtune's command (``tune run``) is completed as upstream."""
    num_nodes = _trainer_count(info)
    trainer = info.trainer or {}
    resources = info.resources_per_node()
    gpus = podsets.gpus(resources)
    nproc: str = str(trainer["numProcPerNode"]) if trainer.get("numProcPerNode") is not None else "auto"
    if nproc == "auto" and gpus == 0:
        nproc = str(max(1, podsets.cpus(resources)))
    container = _with_trainer_env(info)
    pet = [podsets.value_env(TORCH_NUM_NODES, str(num_nodes)), podsets.value_env(TORCH_NPROC_PER_NODE, nproc),
           podsets.index_env(TORCH_NODE_RANK)]
    master = [podsets.value_env(TORCH_MASTER_ADDR, _first_address(info)),
              podsets.value_env(TORCH_MASTER_PORT, str(podsets.CONTAINER_TRAINER_PORT))]
    if container is not None:
        podsets.upsert_env(container, *pet)
        if trainer.get("command") != TORCHTUNE_ENTRYPOINT:
            podsets.upsert_env(container, *master)
        else:
            _torchtune(info, num_nodes, nproc, gpus)
        podsets.upsert_port(container, podsets.CONTAINER_TRAINER_PORT)
    for index, target in enumerate(((policy.get("envInjection") or {}).get("targets")) or []):
        for name in target.get("containerNames") or []:
            pod_set = info.by_name(str(target.get("jobName")))
            injected = pod_set.container(str(name), init=True) if pod_set is not None else None
            if injected is None:
                raise errors.PlanError(f"spec.mlPolicy.torch.envInjection.targets[{index}]", (
                    f'envInjection target podSet "{target.get("jobName")}" container "{name}" not found in '
                    "runtime template"))
            podsets.upsert_env(injected, *pet, *master)


def _torchtune(info: podsets.Info, num_nodes: int, nproc: str, gpus: int) -> None:
    """torchtune's ``tune run`` completed: the rendezvous endpoint for more than one
    process, the recipe and config for the runtime's model, the runtime's immutable
    overrides (upstream's getRecipeAndConfig)."""
    trainer = info.trainer or {}
    args = [str(a) for a in trainer.get("args") or []]
    multi = num_nodes > 1 or (nproc.isdigit() and int(nproc) > 1) or (not nproc.isdigit() and gpus > 1)
    command = list(trainer.get("command") or [])
    if multi:
        command.append(f"--rdzv_endpoint={_first_address(info)}:{podsets.CONTAINER_TRAINER_PORT}")

    def enabled(item: str) -> bool:
        return any(name.find(item) >= 0 and value.strip().lower() == "true"
                   for name, sep, value in (a.partition("=") for a in args) if sep)

    qlora = enabled("model.quantize_base") and not enabled("model.use_dora")
    lora = any("model.lora_attn_modules" in a for a in args)
    recipe, suffix = "full_finetune_distributed", "_full"
    if num_nodes == 1 and ((nproc.isdigit() and int(nproc) == 1) or gpus == 1):
        recipe = "lora_finetune_single_device" if qlora or lora else "full_finetune_single_device"
        suffix = "_qlora_single_device" if qlora else "_lora_single_device" if lora else "_full_single_device"
    elif num_nodes == 1 and qlora:
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif num_nodes == 1 and lora:
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif num_nodes > 1:
        suffix = "_full_multinode"
    runtime_name = str((objects.spec_of(info.job).get("runtimeRef") or {}).get("name") or "")
    fields = runtime_name.split("-")
    model = f"{fields[1].replace('.', '_')}/{fields[2].upper()}" if len(fields) == 3 else ""
    command += [recipe, "--config", model + suffix]
    immutable = ("output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file")
    pod_set = info.by_ancestor(podsets.ANCESTOR_TRAINER)
    node = pod_set.container(podsets.NODE) if pod_set is not None else None
    command += [c for c in (node or {}).get("command") or [] if str(c).split("=")[0] in immutable]
    trainer["command"] = command


def mpi(info: podsets.Info, policy: Manifest) -> None:
    """The node count (one fewer when the launcher runs as a node), ``numProcPerNode``
    (``trainer.numProcPerNode``, else the GPUs when the runtime says 1), the SSH Secret
    and hostfile volumes and mounts, and OpenMPI's env on the launcher."""
    for field, value in MPI_DEFAULTS.items():
        policy.setdefault(field, value)
    launcher_as_node = bool(policy["runLauncherAsNode"])
    given = _num_nodes(info)
    node = info.by_name(podsets.NODE)
    if given is not None and node is not None:
        node.count = max(given - 1, 1) if launcher_as_node else given
    trainer = info.trainer or {}
    if trainer.get("numProcPerNode") is not None:
        policy["numProcPerNode"] = int(trainer["numProcPerNode"])
    elif int(policy["numProcPerNode"]) == 1 and (gpus := podsets.gpus(info.resources_per_node())) > 1:
        policy["numProcPerNode"] = gpus
    secret = {"name": MPI_SSH_VOLUME, "secret": {
        "secretName": info.name + podsets.MPI_SECRET_SUFFIX, "defaultMode": 0o400, "items": [
            {"key": podsets.MPI_PRIVATE_KEY, "path": "id_rsa", "mode": 0o640},
            {"key": podsets.MPI_PUBLIC_KEY, "path": "id_rsa.pub", "mode": 0o644},
            {"key": podsets.MPI_PUBLIC_KEY, "path": "authorized_keys", "mode": 0o644}]}}
    hostfile_volume = {"name": MPI_HOSTFILE_VOLUME, "configMap": {
        "name": info.name + podsets.MPI_HOSTFILE_SUFFIX,
        "items": [{"key": podsets.MPI_HOSTFILE_NAME, "path": podsets.MPI_HOSTFILE_NAME, "mode": 0o444}]}}
    for pod_set in info.pod_sets:
        if pod_set.name not in (podsets.NODE, podsets.LAUNCHER):
            continue
        podsets.upsert_volume(pod_set.pod_spec, secret)
        if pod_set.name == podsets.LAUNCHER:
            podsets.upsert_volume(pod_set.pod_spec, hostfile_volume)
        for container in pod_set.pod_spec.get("containers") or []:
            if container.get("name") != podsets.NODE:
                continue
            podsets.upsert_mount(container, {"name": MPI_SSH_VOLUME, "mountPath": policy["sshAuthMountPath"]})
            if pod_set.name != podsets.LAUNCHER:
                continue
            podsets.upsert_mount(container, {"name": MPI_HOSTFILE_VOLUME, "mountPath": podsets.MPI_HOSTFILE_DIR})
            if policy["mpiImplementation"] != OPENMPI:
                raise errors.PlanError("spec.mlPolicy.mpi.mpiImplementation",
                                       f"MPI implementation for {policy['mpiImplementation']} doesn't supported")
            podsets.upsert_env(container,
                               podsets.value_env(OMPI_HOSTFILE, f"{podsets.MPI_HOSTFILE_DIR}/{podsets.MPI_HOSTFILE_NAME}"),
                               podsets.value_env(OMPI_KEEP_FQDN, "true"),
                               podsets.value_env(OMPI_DEFAULT_SLOTS, str(policy["numProcPerNode"])),
                               podsets.value_env(OMPI_RSH_ARGS, OMPI_RSH_ARGS_VALUE))


def hostfile(info: podsets.Info) -> Manifest:
    """The ``<job>-mpi-hostfile`` ConfigMap: a ``<pod DNS name> slots=<numProcPerNode>`` line
    per node pod (the launcher's first when it runs as a node)."""
    policy = (info.ml_policy or {}).get("mpi") or {}
    launcher_as_node = bool(policy.get("runLauncherAsNode"))
    slots = int(policy.get("numProcPerNode") or 1)
    lines = [f"{endpoint} slots={slots}\n" for pod_set in info.pod_sets
             if pod_set.name == podsets.NODE or (launcher_as_node and pod_set.name == podsets.LAUNCHER)
             for endpoint in pod_set.endpoints]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": info.name + podsets.MPI_HOSTFILE_SUFFIX, "namespace": info.namespace,
                         "ownerReferences": [info.owner_reference()]},
            "data": {podsets.MPI_HOSTFILE_NAME: "".join(lines)}}


def jax(info: podsets.Info, policy: Mapping[str, Any]) -> None:
    """``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (the completion index) and
    ``JAX_COORDINATOR_ADDRESS`` on the trainer, and the coordinator's port."""
    num_nodes = _trainer_count(info)
    container = info.trainer_container()
    if container is None:
        return
    podsets.upsert_env(container, podsets.value_env("JAX_NUM_PROCESSES", str(num_nodes)),
                       podsets.index_env("JAX_PROCESS_ID"),
                       podsets.value_env("JAX_COORDINATOR_ADDRESS",
                                         f"{_first_address(info)}:{podsets.CONTAINER_TRAINER_PORT}"))
    podsets.upsert_port(container, podsets.CONTAINER_TRAINER_PORT)


def xgboost(info: podsets.Info, policy: Mapping[str, Any]) -> None:
    """The Rabit tracker's ``DMLC_*`` env on the trainer: workers = nodes × GPUs per node
    (at least one per node)."""
    if info.by_ancestor(podsets.ANCESTOR_TRAINER) is None:
        return
    num_nodes = _trainer_count(info)
    container = info.trainer_container()
    if container is None:
        return
    workers = num_nodes * max(1, podsets.gpus(info.resources_per_node()))
    podsets.upsert_env(container, podsets.value_env(XGBOOST_TRACKER_URI, _first_address(info)),
                       podsets.value_env(XGBOOST_TRACKER_PORT, str(podsets.CONTAINER_TRAINER_PORT)),
                       podsets.index_env(XGBOOST_TASK_ID), podsets.value_env(XGBOOST_NUM_WORKER, str(workers)))
    podsets.upsert_port(container, podsets.CONTAINER_TRAINER_PORT)


def plain(info: podsets.Info) -> None:
    """PlainML (no torch, mpi or jax policy): the node count and the trainer's env."""
    _trainer_count(info)
    _with_trainer_env(info)


def _flux(info: podsets.Info, policy: Mapping[str, Any]) -> None:
    raise errors.PlanError("spec.mlPolicy.flux", "kto does not run the flux ML policy yet")


POLICIES: Mapping[str, Callable[[podsets.Info, Any], None]] = {
    "torch": torch, "mpi": mpi, "jax": jax, "xgboost": xgboost, "flux": _flux,
}
"""``mlPolicy`` field → its plugin, in upstream's registry."""


def chosen(ml_policy: Mapping[str, Any] | None) -> list[str]:
    """The ML policies a runtime's ``mlPolicy`` sets (at most one is valid)."""
    return [name for name in POLICIES if isinstance((ml_policy or {}).get(name), dict)]


def enforce(info: podsets.Info) -> None:
    """Run the runtime's ML policy (and PlainML unless it is torch, mpi or jax), as upstream's
    EnforceMLPolicy plugins do; :class:`errors.PlanError` for two policies at once."""
    names = chosen(info.ml_policy)
    if len(names) > 1:
        raise errors.PlanError("spec.mlPolicy", f"must not have more than one of {', '.join(names)}")
    if not any(name in names for name in ("torch", "mpi", "jax")):
        plain(info)
    for name in names:
        POLICIES[name](info, (info.ml_policy or {})[name])
