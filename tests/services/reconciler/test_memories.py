"""The reconciler's per-key memory (services/reconciler/memories.py): made on first use,
forgotten whole (its timer cancelled with it), and the keys due for a check."""

from __future__ import annotations

import asyncio

from services.reconciler import memories


def fresh() -> memories.Memories:
    return memories.Memories(delete_grace=300.0, confirm_after=5.0)


def test_a_key_is_remembered_from_first_use_with_its_expectations_settings() -> None:
    kept = fresh()
    assert kept.get("c/ns/JAXJob/j") is None
    memory = kept.of("c/ns/JAXJob/j")
    assert kept.of("c/ns/JAXJob/j") is memory
    assert (memory.expected.grace, memory.expected.confirm_after) == (300.0, 5.0)


async def test_forgetting_a_key_drops_all_of_it_and_cancels_its_timer() -> None:
    kept = fresh()
    memory = kept.of("c/ns/JAXJob/j")
    memory.timer = asyncio.get_running_loop().call_later(60, lambda: None)
    memory.announced, memory.last_pass, memory.checking = ("u", "r", "m"), "pass-1", True
    memory.warned.add(("u", "r", "m"))
    memory.expected.deleted(("Pod", "j-worker-0"), "u", 0.0)
    timer = memory.timer
    kept.forget("c/ns/JAXJob/j")
    assert timer.cancelled()
    assert kept.get("c/ns/JAXJob/j") is None
    again = kept.of("c/ns/JAXJob/j")
    assert (again.announced, again.last_pass, again.checking, again.warned) == (None, None, False, set())
    assert not again.expected.going(("Pod", "j-worker-0"), {"metadata": {"uid": "u"}}, 1.0)


def test_keys_due_for_a_check_are_those_not_seen_for_long_and_not_being_checked() -> None:
    kept = fresh()
    kept.of("c/ns/A/old").job_seen = 0.0
    kept.of("c/ns/A/recent").job_seen = 250.0
    kept.of("c/ns/A/checking").job_seen = 0.0
    kept.of("c/ns/A/checking").checking = True
    kept.of("c/ns/A/never-seen")
    assert kept.due_for_check(now=300.0, check_after=100.0) == ["c/ns/A/old"]


async def test_closing_cancels_every_timer_and_keeps_the_views() -> None:
    kept = fresh()
    loop = asyncio.get_running_loop()
    timers = []
    for name in ("a", "b"):
        memory = kept.of(f"c/ns/A/{name}")
        memory.timer = loop.call_later(60, lambda: None)
        timers.append(memory.timer)
    kept.close()
    assert all(t.cancelled() for t in timers)
    assert kept.get("c/ns/A/a") is not None


def test_releasing_a_finished_jobs_memory_keeps_a_tombstone_and_drops_its_view() -> None:
    kept = fresh()
    memory = kept.of("c/ns/JAXJob/j")
    memory.view.replace_job({"metadata": {"name": "j", "uid": "u", "resourceVersion": "9"}})
    memory.view.hydrated = True
    memory.view.observe_child({"kind": "Pod", "metadata": {"name": "j-worker-0", "uid": "p"}}, deleted=False)
    memory.decided_on, memory.job_seen = memory.view.job, 10.0
    memory.announced, memory.last_pass = ("u", "r", "m"), "pass-1"
    memory.warned.add(("u", "r", "m"))
    memory.release()
    assert kept.get("c/ns/JAXJob/j") is memory
    assert (memory.view.job, memory.view.children, memory.view.hydrated) == (None, {}, False)
    assert (memory.decided_on, memory.job_seen) == (None, None)
    assert (memory.announced, memory.last_pass, memory.warned) == (("u", "r", "m"), "pass-1", {("u", "r", "m")})
    assert kept.due_for_check(now=1e6, check_after=1.0) == []
