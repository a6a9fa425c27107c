"""The store keeps kube-apiserver semantics: versions, generation, concurrency, selectors, patches, watches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sim import errors, settings
from sim.apiserver import store as sim_store


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


TEMPLATE = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
"""A Job's pod template that validates."""


@pytest.fixture
def store() -> sim_store.Store:
    return sim_store.Store(settings.SimSettings(watch_window=50, bookmark_interval=0.05))


async def test_resource_versions_come_from_one_counter(store: sim_store.Store) -> None:
    a = await store.create("pods", pod("a"), "default")
    cm = await store.create("configmaps", {"metadata": {"name": "c"}}, "default")
    b = await store.patch("pods", "default", "a", {"metadata": {"labels": {"x": "1"}}}, "merge")
    versions = [int(o["metadata"]["resourceVersion"]) for o in (a, cm, b)]
    assert versions == sorted(versions) and len(set(versions)) == 3


async def test_create_sets_uid_timestamp_generation_and_generated_name(store: sim_store.Store) -> None:
    obj = await store.create("pods", {"metadata": {"generateName": "worker-"}, "spec": {}}, "default")
    meta = obj["metadata"]
    assert meta["name"].startswith("worker-") and len(meta["name"]) == len("worker-") + 5
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert obj["apiVersion"] == "v1" and obj["kind"] == "Pod"


async def test_generation_moves_with_spec_only(store: sim_store.Store) -> None:
    await store.create("jobs.batch", {"metadata": {"name": "j"}, "spec": {"parallelism": 1, "template": TEMPLATE}},
                       "default")
    labelled = await store.patch("jobs.batch", "default", "j", {"metadata": {"labels": {"a": "b"}}}, "merge")
    assert labelled["metadata"]["generation"] == 1
    status = await store.patch("jobs.batch", "default", "j", {"status": {"active": 1}}, "merge", "status")
    assert status["metadata"]["generation"] == 1 and status["status"] == {"active": 1}
    spec = await store.patch("jobs.batch", "default", "j", {"spec": {"parallelism": 2}}, "merge")
    assert spec["metadata"]["generation"] == 2


async def test_status_subresource_is_kept_apart(store: sim_store.Store) -> None:
    await store.create("jobs.batch", {"metadata": {"name": "j"}, "spec": {"parallelism": 1, "template": TEMPLATE},
                                      "status": {"x": 1}}, "default")
    job = await store.get("jobs.batch", "default", "j")
    assert job["status"] == {}, "status given on create is dropped"
    job["status"] = {"active": 3}
    job["spec"]["parallelism"] = 5
    updated = await store.update("jobs.batch", job)
    assert updated["status"] == {} and updated["spec"]["parallelism"] == 5
    updated["status"] = {"active": 2}
    updated["spec"]["parallelism"] = 9
    written = await store.update("jobs.batch", updated, subresource="status")
    assert written["status"] == {"active": 2} and written["spec"]["parallelism"] == 5


async def test_a_stale_update_is_a_conflict(store: sim_store.Store) -> None:
    first = await store.create("configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}}, "default")
    await store.update("configmaps", {**first, "data": {"a": "2"}})
    with pytest.raises(errors.ApiError) as caught:
        await store.update("configmaps", {**first, "data": {"a": "3"}})
    assert caught.value.code == 409 and caught.value.reason == "Conflict"
    assert caught.value.message == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


async def test_creating_an_existing_name_is_already_exists(store: sim_store.Store) -> None:
    await store.create("pods", pod("a"), "default")
    with pytest.raises(errors.ApiError) as caught:
        await store.create("pods", pod("a"), "default")
    assert (caught.value.code, caught.value.reason) == (409, "AlreadyExists")


async def test_an_unchanged_update_writes_nothing(store: sim_store.Store) -> None:
    obj = await store.create("configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}}, "default")
    again = await store.update("configmaps", obj)
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("app=web", {"a", "b"}, id="equals"),
        pytest.param("app==web", {"a", "b"}, id="double-equals"),
        pytest.param("app!=web", {"c", "d"}, id="not-equals (absent matches)"),
        pytest.param("tier in (front,back)", {"a", "c"}, id="in"),
        pytest.param("tier notin (front)", {"b", "c", "d"}, id="notin"),
        pytest.param("tier", {"a", "c"}, id="exists"),
        pytest.param("!tier", {"b", "d"}, id="does not exist"),
        pytest.param("app=web,tier=front", {"a"}, id="conjunction"),
    ],
)
async def test_label_selectors(store: sim_store.Store, selector: str, expected: set[str]) -> None:
    for name, labels in {"a": {"app": "web", "tier": "front"}, "b": {"app": "web"},
                         "c": {"app": "db", "tier": "back"}, "d": {}}.items():
        await store.create("pods", pod(name, labels), "default")
    items, _ = await store.list("pods", "default", label_selector=selector)
    assert {i["metadata"]["name"] for i in items} == expected


async def test_a_selected_list_follows_labels_changed_and_objects_deleted(store: sim_store.Store) -> None:
    for name in ("a", "b", "c"):
        await store.create("pods", pod(name, {"app": "web"}), "default")
    first, _ = await store.list("pods", "default", label_selector="app=web")
    b = await store.get("pods", "default", "b")
    b["metadata"]["labels"] = {"app": "db"}
    await store.update("pods", b)
    await store.delete("pods", "default", "c")
    await store.create("pods", pod("d", {"app": "web"}), "default")
    web, _ = await store.list("pods", "default", label_selector="app=web")
    db, _ = await store.list("pods", None, label_selector="app in (db)")
    assert ([i["metadata"]["name"] for i in first], [i["metadata"]["name"] for i in web],
            [i["metadata"]["name"] for i in db]) == (["a", "b", "c"], ["a", "d"], ["b"])


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("metadata.name=a", {"a"}, id="name"),
        pytest.param("metadata.namespace=default", {"a", "b"}, id="namespace"),
        pytest.param("spec.nodeName=node-1", {"a"}, id="node name"),
        pytest.param("spec.nodeName!=node-1", {"b"}, id="node name differs"),
        pytest.param("status.phase=Pending", {"a", "b"}, id="phase"),
    ],
)
async def test_field_selectors(store: sim_store.Store, selector: str, expected: set[str]) -> None:
    await store.create("pods", pod("a", nodeName="node-1"), "default")
    await store.create("pods", pod("b"), "default")
    items, _ = await store.list("pods", field_selector=selector)
    assert {i["metadata"]["name"] for i in items} == expected


@pytest.mark.parametrize("selector", ["a in (b", "=x", "a==b==c", "a in (b c)", "!"])
async def test_unparseable_selectors_are_bad_requests(store: sim_store.Store, selector: str) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await store.list("pods", label_selector=selector)
    assert caught.value.code == 400


async def test_pages_continue_where_they_stopped(store: sim_store.Store) -> None:
    for i in range(5):
        await store.create("configmaps", {"metadata": {"name": f"c{i}"}}, "default")
    first, rv, token, remaining = store.list_page("configmaps", "default", limit=2)
    assert [o["metadata"]["name"] for o in first] == ["c0", "c1"] and token and remaining == 3
    second, _, token2, _ = store.list_page("configmaps", "default", limit=2, continue_token=token)
    third, _, token3, _ = store.list_page("configmaps", "default", limit=2, continue_token=token2)
    assert [o["metadata"]["name"] for o in second + third] == ["c2", "c3", "c4"] and token3 is None


async def test_pages_of_one_namespace_read_none_of_the_others_and_see_objects_added_between(
    store: sim_store.Store,
) -> None:
    for namespace in ("a", "default-x", "zz"):
        await store.create("namespaces", {"metadata": {"name": namespace}})
    for namespace in ("a", "default", "default-x", "zz"):
        for i in range(3):
            await store.create("configmaps", {"metadata": {"name": f"{namespace}-c{i}"}}, namespace)
    first, _, token, remaining = store.list_page("configmaps", "default", limit=2)
    await store.create("configmaps", {"metadata": {"name": "default-c9"}}, "default")
    await store.delete("configmaps", "default", "default-c2")
    second, _, token2, _ = store.list_page("configmaps", "default", limit=2, continue_token=token)
    every, _, _, _ = store.list_page("configmaps", None)
    assert ([o["metadata"]["name"] for o in first], remaining, [o["metadata"]["name"] for o in second], token2) == (
        ["default-c0", "default-c1"], 1, ["default-c9"], None)
    assert len(every) == 12


async def test_an_expired_continue_is_gone(store: sim_store.Store) -> None:
    for i in range(3):
        await store.create("configmaps", {"metadata": {"name": f"c{i}"}}, "default")
    _, _, token, _ = store.list_page("configmaps", "default", limit=1)
    for i in range(60):
        await store.create("secrets", {"metadata": {"name": f"s{i}"}}, "default")
    with pytest.raises(errors.ApiError) as caught:
        store.list_page("configmaps", "default", limit=1, continue_token=token)
    assert (caught.value.code, caught.value.reason) == (410, "Expired")


def container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


@pytest.mark.parametrize(
    ("patch_type", "patch", "check"),
    [
        pytest.param("merge", {"metadata": {"labels": {"a": None, "b": "2"}}},
                     lambda o: o["metadata"]["labels"] == {"b": "2"}, id="merge patch removes with null"),
        pytest.param("merge", {"spec": {"containers": [container("new", "x")]}},
                     lambda o: [c["name"] for c in o["spec"]["containers"]] == ["new"], id="merge patch replaces lists"),
        pytest.param("json", [{"op": "add", "path": "/metadata/labels/c", "value": "3"},
                              {"op": "replace", "path": "/spec/containers/0/image", "value": "y"},
                              {"op": "remove", "path": "/metadata/labels/a"}],
                     lambda o: o["metadata"]["labels"] == {"c": "3"} and o["spec"]["containers"][0]["image"] == "y",
                     id="json patch"),
        pytest.param("strategic", {"spec": {"containers": [container("side", "s")]}},
                     lambda o: [c["name"] for c in o["spec"]["containers"]] == ["main", "side"],
                     id="strategic merges containers by name"),
        pytest.param("strategic", {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
                     lambda o: o["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     id="strategic merges env by name"),
        pytest.param("strategic", {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "name": "web"}]}]}},
                     lambda o: o["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "name": "web"}, {"containerPort": 90}],
                     id="strategic merges ports by containerPort"),
        pytest.param("strategic", {"spec": {"containers": [{"name": "main", "$patch": "delete"}]}},
                     lambda o: o["spec"]["containers"] == [], id="strategic $patch delete"),
        pytest.param("strategic", {"spec": {"tolerations": [{"key": "z"}]}},
                     lambda o: o["spec"]["tolerations"] == [{"key": "z"}], id="strategic replaces tolerations"),
        pytest.param("strategic", {"metadata": {"finalizers": ["b"]}},
                     lambda o: o["metadata"]["finalizers"] == ["a", "b"], id="strategic unions finalizers"),
    ],
)
async def test_patch_types(store: sim_store.Store, patch_type: str, patch: Any, check: Any) -> None:
    base = pod("p", {"a": "1"}, tolerations=[{"key": "t"}])
    base["metadata"]["finalizers"] = ["a"]
    base["spec"]["containers"][0].update(env=[{"name": "A", "value": "1"}], ports=[{"containerPort": 80}, {"containerPort": 90}])
    await store.create("pods", base, "default")
    assert check(await store.patch("pods", "default", "p", patch, patch_type))


async def test_a_failed_json_patch_test_is_invalid(store: sim_store.Store) -> None:
    await store.create("pods", pod("p"), "default")
    with pytest.raises(errors.ApiError) as caught:
        await store.patch("pods", "default", "p", [{"op": "test", "path": "/metadata/name", "value": "q"}], "json")
    assert caught.value.code == 422


async def test_finalizers_hold_a_deletion_until_the_last_goes(store: sim_store.Store) -> None:
    obj = pod("p")
    obj["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    await store.create("pods", obj, "default")
    marked = await store.delete("pods", "default", "p")
    assert marked["metadata"]["deletionTimestamp"]
    await store.patch("pods", "default", "p", {"metadata": {"finalizers": ["example.com/b"]}}, "merge")
    assert (await store.get("pods", "default", "p"))["metadata"]["deletionTimestamp"]
    await store.patch("pods", "default", "p", {"metadata": {"finalizers": None}}, "merge")
    with pytest.raises(errors.ApiError) as caught:
        await store.get("pods", "default", "p")
    assert caught.value.code == 404


async def test_delete_preconditions(store: sim_store.Store) -> None:
    await store.create("pods", pod("p"), "default")
    with pytest.raises(errors.ApiError) as caught:
        await store.delete("pods", "default", "p", preconditions={"uid": "other"})
    assert caught.value.code == 409 and "the UID in the precondition (other) does not match" in caught.value.message


async def test_watch_resumes_from_a_resource_version(store: sim_store.Store) -> None:
    a = await store.create("pods", pod("a"), "default")
    await store.create("pods", pod("b"), "default")
    await store.delete("pods", "default", "a")
    watch = store.watch("pods", resource_version=a["metadata"]["resourceVersion"])
    events = [await anext(watch), await anext(watch)]
    watch.close()
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("DELETED", "a")]


async def test_watch_from_before_the_window_is_gone(store: sim_store.Store) -> None:
    first = await store.create("pods", pod("a"), "default")
    for i in range(60):
        await store.patch("pods", "default", "a", {"metadata": {"labels": {"n": str(i)}}}, "merge")
    with pytest.raises(errors.ApiError) as caught:
        store.watch("pods", resource_version=first["metadata"]["resourceVersion"])
    assert (caught.value.code, caught.value.reason) == (410, "Expired")


async def test_watch_turns_selector_transitions_into_added_and_deleted(store: sim_store.Store) -> None:
    await store.create("pods", pod("a", {"run": "no"}), "default")
    watch = store.watch("pods", resource_version=store.resource_version, label_selector="run=yes")
    await store.patch("pods", "default", "a", {"metadata": {"labels": {"run": "yes"}}}, "merge")
    await store.patch("pods", "default", "a", {"metadata": {"labels": {"run": "no"}}}, "merge")
    assert [(await anext(watch)).type, (await anext(watch)).type] == ["ADDED", "DELETED"]
    watch.close()


async def test_watch_sends_bookmarks_when_asked(store: sim_store.Store) -> None:
    watch = store.watch("pods", resource_version=store.resource_version, bookmarks=True)
    event = await asyncio.wait_for(anext(watch), 2)
    watch.close()
    assert event.type == "BOOKMARK" and event.object["metadata"]["resourceVersion"] == store.resource_version


@pytest.mark.parametrize(
    ("resource", "name", "field"),
    [
        pytest.param("pods", "Bad_Name", "metadata.name", id="pod name not a subdomain"),
        pytest.param("services", "a.b", "metadata.name", id="service name not a label"),
        pytest.param("namespaces", "x" * 64, "metadata.name", id="namespace name too long"),
    ],
)
async def test_invalid_names_are_invalid_with_field_causes(store: sim_store.Store, resource: str, name: str,
                                                          field: str) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await store.create(resource, {"metadata": {"name": name}}, None if resource == "namespaces" else "default")
    assert caught.value.code == 422 and caught.value.reason == "Invalid"
    assert caught.value.causes and caught.value.causes[0]["field"] == field


async def test_services_get_a_cluster_ip_unless_headless(store: sim_store.Store) -> None:
    svc = await store.create("services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}, "default")
    headless = await store.create("services", {"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}, "default")
    assert svc["spec"]["clusterIP"].startswith("10.96.") and headless["spec"]["clusterIP"] == "None"


async def test_creating_in_a_missing_namespace_is_not_found(store: sim_store.Store) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await store.create("pods", pod("a"), "nowhere")
    assert caught.value.code == 404 and caught.value.message == 'namespaces "nowhere" not found'


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        pytest.param({"name": "a", "labels": {"app": 1}}, "metadata.labels", id="label value not a string"),
        pytest.param({"name": "a", "labels": {"bad key!": "x"}}, "metadata.labels", id="label key invalid"),
        pytest.param({"name": "a", "labels": {"app": "-x-"}}, "metadata.labels", id="label value invalid"),
        pytest.param({"name": "a", "annotations": ["x"]}, "metadata.annotations", id="annotations not a map"),
        pytest.param({"name": "a", "finalizers": "x"}, "metadata.finalizers", id="finalizers not a list"),
        pytest.param({"name": "a", "ownerReferences": [{"name": "o"}]}, "metadata.ownerReferences[0].apiVersion",
                     id="owner reference incomplete"),
        pytest.param({"name": 7}, "metadata.name", id="name not a string"),
    ],
)
async def test_malformed_metadata_is_invalid(store: sim_store.Store, metadata: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await store.create("configmaps", {"metadata": metadata}, "default")
    assert caught.value.code == 422 and caught.value.causes and caught.value.causes[0]["field"] == field


async def test_a_pod_spec_of_the_wrong_shape_is_invalid(store: sim_store.Store) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await store.create("pods", {"metadata": {"name": "p"}, "spec": {"containers": "main"}}, "default")
    assert caught.value.code == 422 and caught.value.causes[0]["field"] == "spec.containers"
