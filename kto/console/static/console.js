// kto console: the jobs page and a job's page, drawn from the JSON of /api/jobs… and kept up to
// date by server-sent events (/api/jobs…/stream). Plain JavaScript, no build step. Everything the
// server sends is put in the page as text, never as HTML.
"use strict";

(function () {
  const $ = (selector, root = document) => root.querySelector(selector);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (name === "className") node.className = value;
      else if (name === "dataset") Object.assign(node.dataset, value);
      // Through the CSSOM: the Content-Security-Policy refuses style attributes (setAttribute("style")).
      else if (name === "style") node.style.cssText = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(child == null ? "" : String(child)));
    }
    return node;
  }

  function when(text) {
    return text ? Date.parse(String(text).split(" ")[0]) : NaN;
  }

  // Age as kubectl prints it: 45s, 3m12s, 2h5m, 3d4h.
  function age(created) {
    const start = when(created);
    if (Number.isNaN(start)) return "";
    const s = Math.max(0, Math.floor((Date.now() - start) / 1000));
    if (s < 120) return s + "s";
    if (s < 600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }

  function refreshAges() {
    for (const node of document.querySelectorAll("[data-created]")) node.textContent = age(node.dataset.created);
  }

  // A state as a coloured badge; ``past``: a condition no longer True, greyed.
  function badge(node, state, past) {
    node.textContent = state || "";
    node.className = "state" + (state ? " state-" + state.toLowerCase() : "") + (past ? " past" : "");
    return node;
  }

  function live(on, text) {
    const node = $("#live");
    node.textContent = text;
    node.className = "live " + (on ? "on" : "off");
  }

  // One event stream; EventSource reconnects by itself after an error.
  function stream(url, draw) {
    const source = new EventSource(url);
    source.onmessage = (event) => {
      live(true, "live");
      draw(JSON.parse(event.data));
    };
    source.onerror = () => live(false, "reconnecting…");
    return source;
  }

  function jobPath(job) {
    return [job.cluster, job.namespace, job.kind, job.name].map(encodeURIComponent).join("/");
  }

  function version(apiVersion) {
    return apiVersion && apiVersion.endsWith("/v2beta1") ? " (v2beta1)" : "";
  }

  // ---------------------------------------------------------------- the jobs page

  const FILTERS = ["cluster", "namespace", "kind", "state", "q"];

  function choices(select, values) {
    const current = select.value;
    const labels = { "-": "(no condition)" };
    const wanted = current && !values.includes(current) ? [...values, current] : values;
    // Redrawn only when the choices change: a list rebuilt under a user's pointer closes it (and a click
    // between the rebuild and the pick lands on a removed option).
    const shown = Array.from(select.options, (option) => option.value);
    if (shown.length === wanted.length + 1 && shown.every((value, i) => value === (i ? wanted[i - 1] : ""))) return;
    select.replaceChildren(el("option", { value: "" }, "all"),
      ...wanted.map((value) => el("option", { value }, labels[value] || value)));
    select.value = current;
  }

  function drawJobs(doc) {
    $("#clusters").replaceChildren(...doc.clusters.map((cluster) => el("div",
      { className: "cluster" + (cluster.error ? " down" : ""), dataset: { cluster: cluster.name } },
      el("strong", {}, cluster.name), " ",
      cluster.error ? "cannot answer: " + cluster.error : cluster.jobs + (cluster.jobs === 1 ? " job" : " jobs"))));
    const form = $("#filters");
    for (const name of ["cluster", "namespace", "kind", "state"]) choices(form.elements[name], doc.choices[name]);
    $("#jobs tbody").replaceChildren(...doc.jobs.map((job) => el("tr",
      { dataset: { key: [job.cluster, job.namespace, job.kind, job.name].join("/") } },
      el("td", {}, job.cluster), el("td", {}, job.namespace), el("td", {}, job.kind + version(job.apiVersion)),
      el("td", { className: "name" }, el("a", { href: "/jobs/" + jobPath(job) }, job.name)),
      el("td", {}, badge(el("span"), job.state)),
      el("td", { className: "age", dataset: { created: job.created } }, age(job.created)))));
    $("#count").textContent = doc.jobs.length + " of " + doc.total + (doc.total === 1 ? " job" : " jobs");
    $("#empty").hidden = doc.jobs.length > 0;
  }

  function jobsPage() {
    const form = $("#filters");
    const params = new URLSearchParams(location.search);
    for (const name of FILTERS) {
      const value = params.get(name) || "";
      const field = form.elements[name];
      if (value && field.tagName === "SELECT") field.append(el("option", { value }, value));
      field.value = value;
    }
    let source = null;
    let typing = null;
    function connect() {
      const query = new URLSearchParams();
      for (const name of FILTERS) {
        const value = form.elements[name].value.trim();
        if (value) query.set(name, value);
      }
      const text = query.toString();
      history.replaceState(null, "", text ? "?" + text : location.pathname);
      if (source) source.close();
      source = stream("/api/jobs/stream" + (text ? "?" + text : ""), drawJobs);
    }
    form.addEventListener("change", connect);
    form.elements.q.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(connect, 250);
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      connect();
    });
    connect();
    setInterval(refreshAges, 1000);
  }

  // ---------------------------------------------------------------- a job's page

  function facts(dl, pairs) {
    dl.replaceChildren(...pairs.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  }

  function traceNode(id, url, short) {
    if (!id) return el("span", { className: "muted" }, "none recorded");
    const text = short ? id.slice(0, 16) : id;
    return url ? el("a", { href: url, target: "_blank", rel: "noopener", className: "code", title: id }, text)
      : el("span", { className: "code", title: id }, text);
  }

  function cells(values) {
    return values.map((value) => el("td", {}, value));
  }

  function empty(tbody, columns, text) {
    tbody.replaceChildren(el("tr", { className: "none" }, el("td", { colspan: String(columns), className: "empty" }, text)));
  }

  // One lane per pod: created → running (pending), running → finished (running), on one time axis.
  function drawChart(pods) {
    const chart = $("#chart");
    const now = Date.now();
    const spans = pods.map((pod) => {
      const created = when(pod.created);
      const running = when(pod.running);
      const finished = when(pod.finished);
      const end = Number.isNaN(finished) ? now : finished;
      return { pod, created, running, end };
    }).filter((span) => !Number.isNaN(span.created));
    if (!spans.length) {
      chart.replaceChildren(el("p", { className: "empty" }, "No pod observed yet."));
      return;
    }
    const t0 = Math.min(...spans.map((s) => s.created));
    const t1 = Math.max(...spans.map((s) => s.end), t0 + 1000);
    const at = (t) => (100 * (t - t0) / (t1 - t0)).toFixed(2) + "%";
    const width = (a, b) => (100 * Math.max(b - a, 0) / (t1 - t0)).toFixed(2) + "%";
    chart.replaceChildren(...spans.map((span) => {
      const ran = Number.isNaN(span.running) ? span.end : span.running;
      const track = el("div", { className: "track" },
        el("div", { className: "bar pending", style: "left:" + at(span.created) + ";width:" + width(span.created, ran) }));
      if (!Number.isNaN(span.running)) {
        track.append(el("div", { className: "bar running", style: "left:" + at(ran) + ";width:" + width(ran, span.end) }));
      }
      return el("div", { className: "lane", dataset: { pod: span.pod.pod } },
        el("span", { className: "label", title: span.pod.pod }, span.pod.pod + " · " + (span.pod.phase || "")), track);
    }));
    chart.append(el("p", { className: "muted" }, ((t1 - t0) / 1000).toFixed(1) + " s from the first pod created"));
  }

  function drawJob(doc) {
    document.title = doc.kind + " " + doc.namespace + "/" + doc.name + " — kto console";
    $("#where").textContent = doc.cluster + " / " + doc.namespace;
    $("#kind").textContent = doc.kind + version(doc.apiVersion);
    $("#name").textContent = doc.name;
    badge($("#state"), doc.state);
    const notes = [];
    if (doc.clusterError) notes.push("Cluster " + doc.cluster + " cannot answer: " + doc.clusterError + ".");
    else if (!doc.onCluster) notes.push("Not on the cluster any more.");
    if (!doc.onCluster) notes.push("Shown as the audit log last saw it.");
    if (doc.auditError) notes.push("The audit log cannot be read: " + doc.auditError);
    $("#banner").textContent = notes.join(" ");
    $("#banner").hidden = !notes.length;
    facts($("#facts"), [
      ["Cluster", doc.clusters.length > 1 ? doc.cluster + " (also " + doc.clusters.filter((c) => c !== doc.cluster).join(", ") + ")" : doc.cluster],
      ["Namespace", doc.namespace], ["API version", doc.apiVersion || "—"],
      ["Age", el("span", { dataset: { created: doc.created } }, age(doc.created))],
      ["Created", doc.created || "—"], ["Job key", el("span", { className: "code" }, doc.key)],
      ["Trace", el("span", { id: "trace" }, traceNode(doc.trace.id, doc.trace.url, false))],
    ]);
    const conditions = $("#conditions tbody");
    if (doc.conditions.length) {
      conditions.replaceChildren(...doc.conditions.map((c) => el("tr", { dataset: { type: c.type } },
        ...cells([badge(el("span"), c.type, c.status !== "True"), c.status, c.reason, c.message,
          c.lastTransitionTime]))));
    } else empty(conditions, 5, "No condition yet.");
    const replicas = $("#replicas tbody");
    if (doc.replicas.length) {
      replicas.replaceChildren(...doc.replicas.map((r) => el("tr", { dataset: { type: r.type } },
        ...cells([r.type, r.replicas == null ? "—" : r.replicas, r.active, r.succeeded, r.failed]))));
    } else empty(replicas, 5, "No replica.");
    facts($("#status"), Object.entries(doc.status));
    const kueue = $("#kueue tbody");
    if (doc.kueue.length) {
      kueue.replaceChildren(...doc.kueue.map((m) => el("tr", { dataset: { event: m.event } },
        ...cells([m.time, m.cluster, m.workload, m.event, m.detail]))));
    } else empty(kueue, 5, "Not under Kueue, or no Workload observed yet.");
    const timeline = $("#timeline tbody");
    if (doc.timeline.length) {
      timeline.replaceChildren(...doc.timeline.map((p) => el("tr", { dataset: { pod: p.pod } },
        ...cells([p.pod, p.created, p.scheduled, p.running, p.restarts, p.finished, p.phase, p.cluster]))));
    } else empty(timeline, 8, "No pod observed yet.");
    drawChart(doc.timeline);
    const decisions = $("#decisions tbody");
    if (doc.decisions.length) {
      decisions.replaceChildren(...doc.decisions.map((d) => el("tr", { dataset: { action: d.action } },
        ...cells([d.time, d.offset, d.source, d.action, d.object, d.reason, d.message,
          traceNode(d.traceId, d.traceUrl, true), d.cluster]))));
    } else empty(decisions, 9, "No decision yet.");
    $("#records").textContent = doc.records + (doc.records === 1 ? " record" : " records") + " of this job in the audit log"
      + (doc.undecodable ? ", " + doc.undecodable + " of them undecodable" : "") + ".";
  }

  function jobPage() {
    let last = null;
    stream("/api/jobs/" + location.pathname.replace(/^\/jobs\//, "") + "/stream", (doc) => {
      last = doc;
      drawJob(doc);
    });
    setInterval(() => {
      refreshAges();
      if (last && last.timeline.some((pod) => !pod.finished)) drawChart(last.timeline);
    }, 1000);
  }

  if (document.body.dataset.page === "jobs") jobsPage();
  else if (document.body.dataset.page === "job") jobPage();
})();
