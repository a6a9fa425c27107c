"""``kto console`` end to end: the pipeline running (sim + Tansu, and the real tier), the console
started as a user starts it, and its pages read in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium; ``make test`` installs them, see realparts/browser.py).

Selenium's calls block, so they run in threads: the pipeline's services run in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import io
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
import yaml
from PIL import Image, ImageStat
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kto.commands import history
from kto.console import reading as console_reading
from kto.console import summaries
from realparts import browser as realparts_browser
from realparts import caching, ports
from shared.bus import reading as bus_reading
from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from shared.kube import resources
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.kto import test_history

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_URL = "http://jaeger.test:16686/trace/{trace_id}"
DEAD = "kto-2"
"""A second context of the console's kubeconfig, whose API server is not there."""
WIDTH, HEIGHT = 1280, 1000

T = TypeVar("T")


def pytorchjob(name: str, seconds: int) -> dict[str, Any]:
    """A PyTorchJob (a Master and a Worker) whose pods run ``seconds``, with a trace of its own."""
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": f"{seconds}s"}},
                "spec": {"containers": [{"name": "pytorch", "image": "pytorch"}]}}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": {"kto.dev/traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}},
        "spec": {"pytorchReplicaSpecs": {
            replica: {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
            for replica in ("Master", "Worker")}},
    }


def tfjob(name: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": "1s"}},
                "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": template}}}}


@pytest.fixture(scope="module")
def chromium() -> Iterator[WebDriver]:
    """Headless Chromium through chromedriver; missing browser: a failure under CI=true, else a skip."""
    try:
        found = realparts_browser.find()
    except caching.PartError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the console's browser tests need Chromium: {exc}", pytrace=False)
        pytest.skip(str(exc))
    options = webdriver.ChromeOptions()
    options.binary_location = found.chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=found.chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser, from the test's event loop: every selenium call in a thread."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver = driver
        self.base = base.rstrip("/")

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(function, *args)

    async def open(self, path: str) -> None:
        await self.call(self.driver.get, self.base + path)

    def _texts(self, css: str) -> list[str]:
        return [element.text for element in self.driver.find_elements(By.CSS_SELECTOR, css)]

    async def texts(self, css: str) -> list[str]:
        return await self.call(self._texts, css)

    async def until(self, check: Callable[[], T], what: str, timeout: float = 40.0) -> T:
        """``check()``'s first true result (run in a thread, again and again); fails naming ``what``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                result = await self.call(check)
            except (StaleElementReferenceException, WebDriverException):  # the page redrew meanwhile
                result = None  # type: ignore[assignment]
            if result:
                return result
            if asyncio.get_running_loop().time() > deadline:
                body = await self.texts("main")
                raise AssertionError(f"timed out waiting for {what}; the page shows:\n{body[0] if body else ''}")
            await asyncio.sleep(0.2)

    def _row(self, key: str) -> dict[str, str] | None:
        rows = self.driver.find_elements(By.CSS_SELECTOR, f'#jobs tbody tr[data-key="{key}"]')
        if not rows:
            return None
        cells = [cell.text for cell in rows[0].find_elements(By.TAG_NAME, "td")]
        return dict(zip(["cluster", "namespace", "kind", "name", "state", "age"], cells))

    async def row(self, key: str, state: str | None = None) -> dict[str, str]:
        """The jobs table's row of ``key`` (once its state is ``state``, when given)."""
        return await self.until(lambda: (row := self._row(key)) and (state is None or row["state"] == state) and row,
                                f"the row of {key}" + (f" in state {state}" if state else ""))

    async def keys(self) -> list[str]:
        return await self.call(lambda: [row.get_attribute("data-key") or "" for row in
                                        self.driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")])

    async def choose(self, name: str, value: str) -> None:
        """Picks ``value`` in the filter ``name``; again if the choices were redrawn under the click."""
        def picked() -> bool:
            select = Select(self.driver.find_element(By.NAME, name))
            select.select_by_value(value)
            return select.first_selected_option.get_attribute("value") == value
        await self.until(picked, f"{value} chosen in the {name} filter")

    async def search(self, text: str) -> None:
        def typed() -> None:
            field = self.driver.find_element(By.NAME, "q")
            field.clear()
            field.send_keys(text)
        await self.call(typed)

    async def mark(self) -> None:
        """A mark in the page's window: gone after any reload."""
        await self.call(self.driver.execute_script, "window.ktoTestMark = 'not reloaded';")

    async def still_marked(self) -> bool:
        return bool(await self.call(self.driver.execute_script, "return window.ktoTestMark === 'not reloaded';"))

    async def screenshot(self, path: pathlib.Path) -> None:
        """Saved under ``path`` and checked: a PNG of the viewport's size, not a blank page."""
        png: bytes = await self.call(self.driver.get_screenshot_as_png)
        path.write_bytes(png)
        width, height, ratio = await self.call(self.driver.execute_script,
                                               "return [innerWidth, innerHeight, devicePixelRatio];")
        assert width == WIDTH and 0.7 * HEIGHT < height <= HEIGHT, (width, height)  # the window less its frame
        check_screenshot(png, (round(width * ratio), round(height * ratio)))


def check_screenshot(png: bytes, size: tuple[int, int]) -> None:
    """A PNG of the page's viewport ``size`` that is not a blank page."""
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000, f"{len(png)} bytes"
    image = Image.open(io.BytesIO(png)).convert("L")
    assert image.size == size, (image.size, size)
    assert ImageStat.Stat(image).stddev[0] > 10, "a blank page"
    assert len(image.getcolors(256) or ()) > 20, "hardly any shade: no text or tables drawn"


def kubeconfig_with_a_dead_cluster(kubeconfig: pathlib.Path, directory: pathlib.Path) -> pathlib.Path:
    """The pipeline's kubeconfig plus a context ``kto-2`` whose API server does not listen."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == CLUSTER)["context"]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    config["clusters"].append({"name": DEAD, "cluster": {**cluster, "server": f"https://127.0.0.1:{ports.free()}"}})
    config["contexts"].append({"name": DEAD, "context": {**context, "cluster": DEAD}})
    path = directory / "console-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.asynccontextmanager
async def console(kubeconfig: pathlib.Path, bus: KafkaSettings, directory: pathlib.Path,
                  *args: str) -> AsyncIterator[str]:
    """``kto console`` as a subprocess on a free port; its URL once it printed ready."""
    port = ports.free()
    log = (directory / "console.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", "console", "--kubeconfig", str(kubeconfig), "--bootstrap", bus.bootstrap,
        "--port", str(port), "--refresh", "0.5", *args,
        stdout=asyncio.subprocess.PIPE, stderr=log, cwd=ROOT, env={**os.environ, **bus.to_env()})
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode().strip()
        assert line == f"ready http://127.0.0.1:{port}/", (line, (directory / "console.log").read_text())
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 20)
        log.close()
    assert process.returncode == 0, (directory / "console.log").read_text()
    assert "Traceback" not in (directory / "console.log").read_text()


async def get(url: str) -> tuple[int, str, Any]:
    """(status, content type, the JSON or the page's text unescaped)."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        if response.content_type == "application/json":
            return response.status, response.content_type, await response.json()
        return response.status, response.content_type, html.unescape(await response.text())


async def test_the_console_shows_a_pytorchjob_live_from_submission_to_succeeded(
        pipeline: Pipeline, chromium: WebDriver, tmp_path: pathlib.Path) -> None:
    ns = pipeline.namespace
    key = f"{CLUSTER}/{ns}/PyTorchJob/console-demo"
    kubeconfig = kubeconfig_with_a_dead_cluster(pipeline.kubeconfig, tmp_path)
    async with console(kubeconfig, pipeline.kafka, tmp_path, "--trace-url", TRACE_URL) as url:
        page = Page(chromium, url)
        await page.open("/")
        await page.until(lambda: page._texts("#clusters .cluster.down"), "the dead cluster's badge")
        await page.mark()
        down = await page.texts(f'#clusters [data-cluster="{DEAD}"]')
        assert down[0].startswith(f"{DEAD} cannot answer: "), down
        assert await page.texts(f'#clusters [data-cluster="{CLUSTER}"].down') == []

        # Submitted while the page is open: the row comes without a reload, and moves to Running. Its pods
        # run 15 s, three times what the checks of the running job below take (under load too).
        await pipeline.submit(pytorchjob("console-demo", 15))
        await pipeline.submit(tfjob("other-tf"))
        row = await page.row(key)
        assert row["cluster"] == CLUSTER and row["namespace"] == ns and row["kind"] == "PyTorchJob"
        await page.row(key, "Running")
        assert await page.still_marked()

        # Filters and search: the choices come from the jobs seen; the URL keeps them.
        await page.choose("namespace", ns)
        await page.choose("kind", "TFJob")
        await page.until(lambda: [r.get_attribute("data-key") for r in chromium.find_elements(
            By.CSS_SELECTOR, "#jobs tbody tr")] == [f"{CLUSTER}/{ns}/TFJob/other-tf"], "only the TFJob")
        await page.choose("kind", "")
        await page.search("console-dem")
        await page.until(lambda: page._texts("#jobs tbody td.name") == ["console-demo"], "only the searched job")
        assert "q=console-dem" in await page.call(lambda: chromium.current_url)
        await page.search("running console")  # every word, in any field (the state too)
        await page.until(lambda: page._texts("#jobs tbody td.name") == ["console-demo"], "a search by state")
        await page.search("no-such-job")
        await page.until(lambda: chromium.find_element(By.ID, "empty").is_displayed(), "the no-match line")
        await page.search("")
        await page.choose("state", "Running")
        await page.until(lambda: page._texts("#jobs tbody td.name") == ["console-demo"], "the Running filter")
        await page.screenshot(tmp_path / "jobs.png")
        assert await page.still_marked()

        # The job's page, while the job runs.
        await page.call(lambda: chromium.find_element(By.LINK_TEXT, "console-demo").click())
        await page.until(lambda: page._texts("#name") == ["console-demo"], "the job page")
        await page.mark()
        state = (await page.texts("#state"))[0]
        assert state == "Running", f"the job page opened in state {state!r}: the pods run 15 s"
        await page.until(lambda: {"Created", "Running"} <= set(page._texts("#conditions tbody tr td:first-child")),
                         "the conditions")
        replicas = await page.until(lambda: page._texts("#replicas tbody tr"), "the replica statuses")
        assert [r.split()[0] for r in replicas] == ["Master", "Worker"], replicas
        pods = await page.until(lambda: len(page._texts("#timeline tbody tr[data-pod]")) == 2 and
                                page._texts("#timeline tbody tr[data-pod] td:first-child"), "the timeline")
        assert sorted(p.split()[0] for p in pods) == ["console-demo-master-0", "console-demo-worker-0"], pods
        assert len(await page.texts("#chart .lane")) == 2
        actions = await page.until(lambda: page._texts("#decisions tbody tr[data-action] td:nth-child(4)"),
                                   "the decisions")
        assert "child_created" in actions, actions
        created = await page.texts('#decisions tbody tr[data-action="child_created"] td:nth-child(5)')
        assert {"Pod console-demo-master-0", "Pod console-demo-worker-0"} <= set(created), created
        trace = await page.call(lambda: chromium.find_element(By.CSS_SELECTOR, "#trace a").get_attribute("href"))
        assert trace == TRACE_URL.format(trace_id=TRACE_ID)
        await page.screenshot(tmp_path / "job-running.png")

        # It finishes while the page is open: the page follows without a reload.
        await page.until(lambda: page._texts("#state") == ["Succeeded"], "Succeeded on the job page", timeout=90)
        assert await page.still_marked()
        await page.until(lambda: "Succeeded" in page._texts("#conditions tbody tr td:first-child"),
                         "the Succeeded condition")
        await page.until(lambda: all(page._texts("#timeline tbody tr[data-pod] td:nth-child(6)")),
                         "every pod finished in the timeline")
        decided = await page.texts("#decisions tbody tr[data-action] td:nth-child(4)")
        assert "status_written" in decided, decided
        await page.screenshot(tmp_path / "job-succeeded.png")

        # The JSON behind the pages.
        # The jobs list is cached per cluster for a moment: it reaches Succeeded within it.
        for _ in range(100):
            status, _, listing = await get(f"{url}/api/jobs?namespace={ns}&kind=PyTorchJob")
            assert status == 200 and [j["name"] for j in listing["jobs"]] == ["console-demo"]
            if listing["jobs"][0]["state"] == "Succeeded":
                break
            await asyncio.sleep(0.1)
        assert listing["jobs"][0]["state"] == "Succeeded"
        assert {c["name"]: bool(c["error"]) for c in listing["clusters"]} == {CLUSTER: False, DEAD: True}
        status, _, job = await get(f"{url}/api/jobs/{CLUSTER}/{ns}/PyTorchJob/console-demo")
        assert status == 200 and job["onCluster"] and job["trace"]["id"] == TRACE_ID
        assert job["timeline"] and all(p["finished"] for p in job["timeline"])

        # Deleted, it is still shown as the audit log last saw it.
        await pipeline.client.delete(resources.JOB_TYPES["PyTorchJob"], ns, "console-demo")
        await page.until(lambda: "Not on the cluster any more" in (page._texts("#banner") or [""])[0],
                         "the deleted job's banner")
        status, _, job = await get(f"{url}/api/jobs/{CLUSTER}/{ns}/PyTorchJob/console-demo")
        assert status == 200 and not job["onCluster"] and job["state"] == "Succeeded"


async def test_a_missing_job_cluster_or_kind_is_a_404_page_saying_so(
        pipeline: Pipeline, chromium: WebDriver, tmp_path: pathlib.Path) -> None:
    ns = pipeline.namespace
    topic = pipeline.kafka.jobs_topic
    kubeconfig = kubeconfig_with_a_dead_cluster(pipeline.kubeconfig, tmp_path)
    async with console(kubeconfig, pipeline.kafka, tmp_path) as url:
        page = Page(chromium, url)
        await page.open(f"/jobs/{CLUSTER}/{ns}/PyTorchJob/never")
        assert await page.texts("h1") == ["404 Not Found"]
        assert await page.texts("#message") == [f"no PyTorchJob {ns}/never in cluster {CLUSTER}, "
                                                 f"and no record of it in {topic}"]
        await page.screenshot(tmp_path / "missing.png")
        for path, status, message in (
            (f"/jobs/{CLUSTER}/{ns}/PyTorchJob/never", 404, f"no PyTorchJob {ns}/never in cluster {CLUSTER}"),
            (f"/jobs/{CLUSTER}/{ns}/Deployment/web", 404, "'Deployment' is not a job kind kto serves"),
            (f"/jobs/nowhere/{ns}/PyTorchJob/never", 404, "no cluster 'nowhere' in"),
            (f"/jobs/{DEAD}/{ns}/PyTorchJob/never", 503, f"cluster {DEAD} cannot answer"),
            ("/no/such/page", 404, "no page at "),
        ):
            got, content_type, body = await get(url + path)
            assert (got, content_type) == (status, "text/html") and message in body, (path, got, body)
            assert "Traceback" not in body
            got, content_type, body = await get(url + "/api" + path)
            assert (got, content_type) == (status, "application/json") and message in body["error"], (path, body)


def kto_console(*args: str, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "kto", "console", *args], capture_output=True, text=True,
                          cwd=cwd, env={**env, "HOME": str(cwd)}, timeout=60, check=False)


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "kubeconfig"
    good.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "a",
                                    "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1"}}],
                                    "users": [{"name": "a", "user": {}}],
                                    "contexts": [{"name": "a", "context": {"cluster": "a", "user": "a"}}]}))
    (tmp_path / "broken").write_text("contexts: [")
    (tmp_path / "empty").write_text("apiVersion: v1\nkind: Config\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, message in (
            (["--kubeconfig", str(tmp_path / "nope")], f"--kubeconfig {tmp_path / 'nope'}: no such file"),
            (["--kubeconfig", str(tmp_path / "broken")], f"cannot read the kubeconfig {tmp_path / 'broken'}"),
            (["--kubeconfig", str(tmp_path / "empty")], f"the kubeconfig {tmp_path / 'empty'} has no context"),
            (["--state-dir", str(tmp_path / "none")], "no kubeconfig: none of"),
            (["--kubeconfig", str(good), "--port", "70000"], "--port 70000: not a port"),
            (["--kubeconfig", str(good), "--port", "http"], "argument --port: invalid int value: 'http'"),
            (["--kubeconfig", str(good), "--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
            (["--kubeconfig", str(good), "--trace-url", "http://jaeger/{id}"], "only {trace_id} may stand"),
            (["--kubeconfig", str(good), "--trace-url", "http://jaeger/"], "has no {trace_id}"),
            (["--kubeconfig", str(good), "--allowed-host", "http://console.test/"],
             "--allowed-host 'http://console.test/': not a host name (no scheme, path or spaces)"),
        ):
            result = kto_console(*args, cwd=tmp_path)
            assert result.returncode == 2, (args, result)
            assert "Traceback" not in result.stderr
            lines = [line for line in result.stderr.splitlines() if line.startswith("kto console: error:")]
            assert len(lines) == 1 and message in lines[0], (args, result.stderr)


# ---------------------------------------------------------------------------- what the pages show

def job_object(kind: str, name: str, *conditions: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-01-02T03:04:05Z"},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}, **extra}


@pytest.mark.parametrize(("job", "state", "api_version"), [
    pytest.param(job_object("TFJob", "a"), "", "kubeflow.org/v1", id="no-condition-yet"),
    pytest.param(job_object("TFJob", "a", "Created", "Running", "Restarting"), "Restarting", "kubeflow.org/v1",
                 id="the-last-condition"),
    pytest.param(job_object("MPIJob", "pi", "Created", spec={"mpiImplementation": "OpenMPI"}), "Created",
                 "kubeflow.org/v2beta1", id="an-mpijob-written-in-v2beta1"),
    pytest.param(job_object("MPIJob", "pi", "Suspended", spec={}), "Suspended", "kubeflow.org/v1",
                 id="an-mpijob-of-v1"),
])
def test_a_row_shows_the_last_condition_and_the_version_written(job: dict[str, Any], state: str,
                                                               api_version: str) -> None:
    row = summaries.row("kto-1", job)
    assert (row["state"], row["apiVersion"], row["created"]) == (state, api_version, "2026-01-02T03:04:05Z")


ROWS = [summaries.row("kto-1", job_object("PyTorchJob", "mnist", "Running")),
        summaries.row("kto-2", job_object("TFJob", "resnet", "Succeeded")),
        summaries.row("kto-2", job_object("PyTorchJob", "fresh"))]


@pytest.mark.parametrize(("filters", "names"), [
    pytest.param(summaries.Filters(), ["mnist", "resnet", "fresh"], id="none"),
    pytest.param(summaries.Filters(cluster="kto-2"), ["resnet", "fresh"], id="cluster"),
    pytest.param(summaries.Filters(kind="PyTorchJob", state="Running"), ["mnist"], id="kind-and-state"),
    pytest.param(summaries.Filters(state="-"), ["fresh"], id="no-condition"),
    pytest.param(summaries.Filters(text="RES succ"), ["resnet"], id="every-word-any-case"),
    pytest.param(summaries.Filters(text="team-a kto-1"), ["mnist"], id="namespace-and-cluster-words"),
    pytest.param(summaries.Filters(namespace="team-b"), [], id="nothing"),
])
def test_filters(filters: summaries.Filters, names: list[str]) -> None:
    assert [r["name"] for r in ROWS if filters.accepts(r)] == names


def test_the_listing_offers_every_cluster_even_one_that_did_not_answer() -> None:
    jobs = {"kto-1": [job_object("PyTorchJob", "mnist", "Running")]}
    listing = summaries.listing(["kto-1", "kto-2"], jobs, {"kto-2": "no answer in 5s"},
                                summaries.Filters.from_query({"q": " mnist ", "kind": "PyTorchJob"}))
    assert [j["name"] for j in listing["jobs"]] == ["mnist"] and listing["total"] == 1
    assert listing["choices"]["cluster"] == ["kto-1", "kto-2"]
    assert listing["choices"]["kind"] == ["PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "PaddleJob", "JAXJob",
                                          "TrainingJob", "JobSet", "TrainJob"]
    assert listing["clusters"] == [{"name": "kto-1", "error": "", "jobs": 1},
                                   {"name": "kto-2", "error": "no answer in 5s", "jobs": 0}]


def test_a_job_gone_from_its_cluster_is_shown_as_the_audit_log_last_saw_it() -> None:
    key = records.JobKey.parse("kto-1/team-a/PyTorchJob/mnist")
    seen = job_object("PyTorchJob", "mnist", "Created", "Succeeded",
                      spec={"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}})
    seen["status"].update(replicaStatuses={"Worker": {"succeeded": 2}}, completionTime="2026-01-02T03:09:00Z")
    pod = {"metadata": {"name": "mnist-worker-0", "uid": "u-1"}, "spec": {"nodeName": "n-1"},
           "status": {"phase": "Running"}}
    entries = [
        bus_reading.Entry(3, 0, 1_000, str(key), records.Observation(
            key=str(key), object_kind="PyTorchJob", event="ADDED", object=seen, source="watcher"), "", "a" * 32),
        bus_reading.Entry(3, 1, 2_000, str(key), records.Decision(
            key=str(key), action="child_created", child_kind="Pod", child_name="mnist-worker-0",
            reason="SuccessfulCreatePod", source="reconciler", instance="r-1"), "", "b" * 32),
        bus_reading.Entry(3, 2, 3_000, str(key), records.Observation(
            key=str(key), object_kind="Pod", event="MODIFIED", object=pod, source="watcher"), "", ""),
        bus_reading.Entry(3, 3, 4_000, str(key), None, "not JSON", ""),
    ]
    page = summaries.page(key, None, entries, trace_url=TRACE_URL)
    assert (page["onCluster"], page["state"], page["records"], page["undecodable"]) == (False, "Succeeded", 4, 1)
    assert page["replicas"] == [{"type": "Worker", "replicas": 2, "active": 0, "succeeded": 2, "failed": 0}]
    assert page["status"] == {"completionTime": "2026-01-02T03:09:00Z"}
    assert page["timeline"][0]["pod"] == "mnist-worker-0 (u-1)" and page["timeline"][0]["running"]
    assert page["decisions"] == [{
        "time": "1970-01-01T00:00:02.000Z", "cluster": "kto-1", "offset": "3/1", "source": "reconciler/r-1",
        "action": "child_created",
        "object": "Pod mnist-worker-0", "reason": "SuccessfulCreatePod", "message": "",
        "traceId": "b" * 32, "traceUrl": TRACE_URL.format(trace_id="b" * 32)}]
    assert page["trace"] == {"id": "a" * 32, "url": TRACE_URL.format(trace_id="a" * 32)}, "the first record's"
    assert summaries.page(key, None, [], trace_url="")["trace"] == {"id": "", "url": ""}


def test_a_multikueue_jobs_page_shows_its_kueue_steps_and_the_clusters_it_went_through() -> None:
    key = records.JobKey.parse(test_history.MANAGER_KEY)
    entries = [bus_reading.Entry(0, offset, 1_000 + offset, record.key, record, "", "")
               for offset, record in enumerate(test_history.multikueue_story())]
    page = summaries.page(key, None, history.joined(entries, str(key)), trace_url="")
    assert page["clusters"] == ["manager", "worker-1"], "not worker-2's stranger of the same name"
    assert [(m["cluster"], m["event"]) for m in page["kueue"]][-2:] == [("worker-1", "finished"),
                                                                       ("manager", "finished")]
    assert page["timeline"][0]["cluster"] == "worker-1", "the pods ran in the worker"


async def test_the_console_reads_a_multikueue_jobs_worker_copy_with_it(bus: KafkaSettings) -> None:
    async with producing.Publisher(bus, "watcher", "w-1") as pub:
        for record in test_history.multikueue_story():
            await pub.publish(record)
    key = records.JobKey.parse(test_history.MANAGER_KEY)
    found = await console_reading.joined_entries(bus, key, ["manager", "worker-1", "worker-2"])
    assert {e.key for e in found} == {test_history.MANAGER_KEY, test_history.WORKER_KEY}
    assert [e.timestamp_ms for e in found] == sorted(e.timestamp_ms for e in found)
    alone = await console_reading.joined_entries(bus, records.JobKey.parse(test_history.STRANGER_KEY),
                                                 ["manager", "worker-1", "worker-2"])
    assert {e.key for e in alone} == {test_history.STRANGER_KEY}
