"""``kto plan`` as a user runs it: a subprocess, files or stdin, stdout and stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "kubeflow").rglob("*.yaml"))


def kto_plan(*args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kto", "plan", *map(str, args)],
        input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )


def assert_rejected(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    return result.stderr.splitlines()


VALID_PYTORCH = textwrap.dedent(
    """\
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {name: ok}
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          template: {spec: {containers: [{name: pytorch, image: busybox}]}}
    """
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a: [\n", ["<stdin>: document 0: line 2, column 1: invalid YAML: while parsing a flow node: "
                                "expected the node content, but found '<stream end>'"], id="malformed-yaml"),
        pytest.param("key: value\n  bad: indent\n", ["<stdin>: document 0: line 2, column 6: invalid YAML: "
                                                     "mapping values are not allowed here"], id="bad-indentation"),
        pytest.param("apiVersion: v1\nkind: Pod\nspec: {}\n",
                     ["<stdin>: document 0: apiVersion: Unsupported value: 'v1': supported values: 'kubeflow.org/v1'",
                      "<stdin>: document 0: kind: Unsupported value: 'Pod': supported values: 'PyTorchJob', 'TFJob', "
                      "'XGBoostJob', 'MPIJob', 'PaddleJob', 'JAXJob'"], id="unknown-kind"),
        pytest.param("- 1\n- 2\n", ["<stdin>: document 0: <document>: expected a mapping (a Kubernetes object), got list"],
                     id="not-a-mapping"),
        pytest.param("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec: {tfReplicaSpecs: {Worker: {replicas: many}}}\n",
                     ["<stdin>: document 0: spec.tfReplicaSpecs[Worker].replicas: "
                      "Input should be a valid integer, unable to parse string as an integer"], id="pydantic-load-error"),
        pytest.param(VALID_PYTORCH.replace("name: ok", "name: 0-test").replace("replicas: 1", "replicas: 2"),
                     ["<stdin>: document 0: metadata.name: Invalid value: \"0-test\": should match: a DNS-1035 label must consist "
                      "of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
                      "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                      "'[a-z]([-a-z0-9]*[a-z0-9])?')",
                      "<stdin>: document 0: spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"],
                     id="validation-errors"),
        pytest.param("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec: {mpiReplicaSpecs: {Launcher: null}}\n",
                     ["<stdin>: document 0: spec.mpiReplicaSpecs[Launcher]: Required value: "
                      "MPIReplicaSpecs is not valid: containers definition expected in Launcher"], id="null-replica-spec"),
    ],
)
def test_broken_input_exits_2_with_field_paths_and_nothing_on_stdout(text: str, expected: list[str]) -> None:
    assert assert_rejected(kto_plan("-", stdin=text)) == expected


def test_every_error_of_every_document_and_file_is_reported(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text(
        "---\n"
        + VALID_PYTORCH
        + "---\n"  # document 1: empty, skipped but counted
        + "---\n"
        + VALID_PYTORCH.replace("image: busybox", "image: ''")
        + "---\n"
        + "kind: TFJob\n"
    )
    second = tmp_path / "second.yaml"
    second.write_text("x: [")
    lines = assert_rejected(kto_plan(first, tmp_path / "missing.yaml", second))
    assert lines == [
        f"{first}: document 2: spec.pytorchReplicaSpecs[Master].template.spec.containers[0].image: Required value: must be required",
        f"{first}: document 3: apiVersion: Required value",
        f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory",
        f"{second}: document 0: line 1, column 5: invalid YAML: while parsing a flow node: "
        "expected the node content, but found '<stream end>'",
    ]


def test_help_says_documents_are_numbered_from_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "kto", "plan", "--help"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0
    assert "numbered from 0" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("output", "expected"),
    [pytest.param("yaml", "", id="yaml"), pytest.param("json", "[]\n", id="json")],
)
def test_only_empty_documents_plan_to_nothing(output: str, expected: str) -> None:
    result = kto_plan("-o", output, "-", stdin="---\n---\n# just a comment\n")
    assert (result.returncode, result.stdout, result.stderr) == (0, expected, "")


# ---------------------------------------------------------------------------
# Happy path (needs shared/core/planning.py)
# ---------------------------------------------------------------------------


def children_of(*args: str | Path, output: str = "yaml", stdin: str = "") -> list[dict[str, Any]]:
    result = kto_plan("-o", output, *args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if output == "json":
        children: list[dict[str, Any]] = json.loads(result.stdout)
    else:
        children = [doc for doc in yaml.safe_load_all(result.stdout)]
    return children


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(ROOT / "examples" / "kubeflow"))) for p in EXAMPLES])
def test_every_example_plans_to_kubernetes_objects(path: Path) -> None:
    children = children_of(path)
    assert children
    for child in children:
        assert {"apiVersion", "kind", "metadata"} <= set(child)
        assert child["metadata"]["name"]


def test_json_and_yaml_outputs_hold_the_same_children_in_order() -> None:
    assert children_of(*EXAMPLES, output="json") == children_of(*EXAMPLES, output="yaml")


def test_children_of_several_files_are_concatenated_in_order() -> None:
    first, second = EXAMPLES[0], EXAMPLES[-1]
    assert children_of(first, second) == children_of(first) + children_of(second)


def test_stdin_and_multi_document_input_plan_like_files() -> None:
    first, second = EXAMPLES[0], EXAMPLES[-1]
    stream = first.read_text() + "---\n" + second.read_text()
    assert children_of("-", stdin=stream) == children_of(first, second)


def test_deprecated_nproc_per_node_warns_without_failing() -> None:
    document = yaml.safe_load(VALID_PYTORCH)
    document["spec"]["elasticPolicy"] = {"nProcPerNode": 2}
    document["spec"]["pytorchReplicaSpecs"]["Worker"] = {
        "replicas": 1,
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}},
    }
    result = kto_plan("-", stdin=yaml.safe_dump(document))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: <stdin>: document 0: spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
    ]
    assert result.stdout


def test_operator_flags_reach_the_planner() -> None:
    pytorch = ROOT / "examples" / "kubeflow" / "pytorch" / "simple.yaml"
    kinds = [child["kind"] for child in children_of(pytorch, "--gang-scheduler-name", "volcano")]
    assert "PodGroup" in kinds
    assert "PodGroup" not in [child["kind"] for child in children_of(pytorch)]
    tensorflow = ROOT / "examples" / "kubeflow" / "tensorflow" / "simple.yaml"
    text = json.dumps(children_of(tensorflow, "--cluster-domain", "cluster.example", output="json"))
    assert ".svc.cluster.example:2222" in text


def names_of(children: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(child["kind"], child["metadata"]["name"]) for child in children]


def test_an_mpijob_v2beta1_plans_its_service_config_secret_workers_and_launcher_job() -> None:
    children = children_of(ROOT / "examples" / "mpi-operator" / "pi.yaml")
    assert names_of(children) == [("Service", "pi"), ("ConfigMap", "pi-config"), ("Secret", "pi-ssh"),
                                  ("Pod", "pi-worker-0"), ("Pod", "pi-worker-1"), ("Job", "pi-launcher")]
    assert children[-1]["apiVersion"] == "batch/v1"
    assert children[1]["data"]["hostfile"] == "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n"


def test_a_training_job_plans_its_children_in_et_operators_creation_order() -> None:
    children = children_of(ROOT / "examples" / "et-operator" / "training_job.yaml")
    job = "elastic-training"
    assert names_of(children) == [
        ("Secret", job), ("Pod", f"{job}-worker-0"), ("Service", f"{job}-worker-0"), ("Pod", f"{job}-worker-1"),
        ("Service", f"{job}-worker-1"), ("ServiceAccount", f"{job}-launcher"), ("Role", f"{job}-launcher"),
        ("RoleBinding", f"{job}-launcher"), ("ConfigMap", f"{job}-config"), ("Pod", f"{job}-launcher"),
    ]
    assert children[8]["data"]["hostfile"] == f"{job}-worker-0:1\n{job}-worker-1:1\n"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*-operator/*.yaml")), ids=lambda p: p.name)
def test_every_mpi_operator_and_et_operator_example_is_accepted(path: Path) -> None:
    result = kto_plan(path)
    assert result.returncode == 0, result.stderr


def test_a_scale_in_that_names_no_job_is_refused_with_its_field_path() -> None:
    result = kto_plan("-", stdin=textwrap.dedent("""\
        apiVersion: kai.alibabacloud.com/v1alpha1
        kind: ScaleIn
        metadata: {name: s}
        spec: {toDelete: {count: 1}}
        """))
    lines = assert_rejected(result)
    assert any("spec.selector" in line for line in lines), lines


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    # `kto plan … | head -1`: the pipe closes while kto still writes; no traceback.
    import glob
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = sorted(glob.glob(os.path.join(root, "examples", "kubeflow", "**", "*.yaml"), recursive=True)) * 20
    process = subprocess.Popen([sys.executable, "-m", "kto", "plan", *files], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=root)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()
    error = process.stderr.read().decode()
    process.wait(timeout=120)
    assert "Traceback" not in error and "BrokenPipeError" not in error, error


def test_plan_of_an_upstream_trainjob_with_its_runtime_in_the_same_or_another_file_prints_the_jobset(tmp_path: Path) -> None:
    from realparts import trainer as upstream

    example = next(p for p in upstream.example_files() if p.name == "05-multi-step.yaml")
    result = kto_plan(example, "-o", "json")
    assert result.returncode == 0, result.stderr
    (jobset,) = json.loads(result.stdout)
    assert (jobset["kind"], jobset["metadata"]["name"]) == ("JobSet", "multi-step-example")
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["dataset-initializer", "node"]
    alone = tmp_path / "job.yaml"
    alone.write_text(yaml.safe_dump(list(yaml.safe_load_all(example.read_text()))[1]))
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(yaml.safe_dump(list(yaml.safe_load_all(example.read_text()))[0]))
    beside = kto_plan(runtime, alone, "-o", "json")
    assert beside.returncode == 0 and [o["kind"] for o in json.loads(beside.stdout)] == ["JobSet"], beside.stderr
    assert assert_rejected(kto_plan(alone)) == [
        f"{alone}: document 0: spec.runtimeRef: TrainingRuntime 'torch-with-dataset-init' is not among the "
        "documents given"]


def test_a_jobset_plans_its_headless_service_and_the_jobs_it_starts_with() -> None:
    children = children_of(ROOT / "examples" / "jobset" / "depends-on.yaml")
    assert names_of(children) == [("Service", "depends-on"), ("Job", "depends-on-prepare-0")], \
        "the train Jobs wait for prepare to complete"
    job = children[1]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["template"]["spec"]["subdomain"] == "depends-on"
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "prepare"
