// The job page's script (aka/service/page.py inlines it; the CSP allows it by its SHA-256).
// It takes the token from ?access_token=, removes it from the address bar, and reads the JSON API
// with `Authorization: Bearer`. Every text from the server goes in with textContent, never as HTML.
"use strict";
(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const FINAL = new Set(["succeeded", "failed", "cancelled"]);
  const STATUSES = new Set(["queued", "running", ...FINAL]);
  const jobId = document.body.dataset.jobId;
  const apiBase = new URL("../../v1/jobs/" + encodeURIComponent(jobId), location.href);
  const $ = (id) => document.getElementById(id);

  // The token: taken once from the query, then kept in this closure only (not in storage).
  const params = new URLSearchParams(location.search);
  const token = params.get("access_token");
  params.delete("access_token");
  const query = params.toString();
  history.replaceState(null, "", location.pathname + (query ? "?" + query : "") + location.hash);

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, headers = {}) {
    const url = path ? apiBase.href + path : apiBase.href;
    const auth = token ? { Authorization: "Bearer " + token } : {};
    const response = await fetch(url, { headers: { ...auth, ...headers }, cache: "no-store" });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        const body = await response.json();
        message = body.code + ": " + body.message;
      } catch (_) {
        // not JSON: keep the status line
      }
      throw new ApiError(response.status, message);
    }
    return response;
  }

  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

  function text(id, value) {
    $(id).textContent = value === null || value === undefined || value === "" ? "—" : String(value);
  }

  function showStatus(status) {
    const el = $("status");
    el.textContent = status;
    el.className = "status" + (STATUSES.has(status) ? " status-" + status : "");
    text("job-status", status);
  }

  // ---------------------------------------------------------------------------------------
  // The job view: GET /v1/jobs/{id}
  // ---------------------------------------------------------------------------------------

  let job = null;

  async function refreshJob() {
    job = await (await api("")).json();
    text("job-kind", job.kind);
    showStatus(job.status);
    text("job-attempts", job.attempts);
    text("job-created", job.created_at);
    text("job-started", job.started_at);
    text("job-finished", job.finished_at);
    text("job-cancel", job.cancel_requested ? "requested" : "no");
    $("job-error-row").hidden = !job.error;
    text("job-error", job.error);
    return job;
  }

  // ---------------------------------------------------------------------------------------
  // Live events: GET /v1/jobs/{id}/events read through fetch (EventSource cannot send headers)
  // ---------------------------------------------------------------------------------------

  let lastId = null;
  let ended = false;

  function describe(kind, data) {
    if (kind === "status") {
      let line = "status " + data.status;
      if (data.attempt !== undefined) line += " (attempt " + data.attempt + ")";
      if (data.error) line += ": " + data.error;
      return line;
    }
    let line = [data.source, data.stage].filter((x) => x !== undefined).join("/");
    if (data.message !== undefined) line += ": " + data.message;
    if (data.done !== undefined && data.total !== undefined) {
      line += " [" + data.done + "/" + data.total + "]";
    }
    return line;
  }

  function logEvent(id, kind, data) {
    const log = $("events");
    const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    const li = document.createElement("li");
    li.dataset.seq = String(id);
    li.dataset.kind = kind;
    li.className = "kind-" + kind.replace(/[^a-z_-]/gi, "");
    const seq = document.createElement("span");
    seq.className = "seq";
    seq.textContent = "#" + id + " " + (data.at || "") + " ";
    const body = document.createElement("span");
    body.className = "text";
    body.textContent = describe(kind, data);
    li.append(seq, body);
    log.append(li);
    if (stick) log.scrollTop = log.scrollHeight;
  }

  function handleFrame(frame) {
    let id = null;
    let kind = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = Number(value);
      else if (field === "event") kind = value;
      else if (field === "data") data.push(value);
    }
    if (kind === "end") {
      ended = true;
      return;
    }
    if (id === null || !Number.isFinite(id) || (lastId !== null && id <= lastId)) return;
    lastId = id;
    let payload = {};
    try {
      payload = JSON.parse(data.join("\n"));
    } catch (_) {
      payload = { message: data.join("\n") };
    }
    logEvent(id, kind, payload);
    if (kind === "status" && typeof payload.status === "string") {
      showStatus(payload.status);
      refreshJob().catch(() => {});
    }
  }

  async function readStream() {
    const headers = lastId === null ? {} : { "Last-Event-ID": String(lastId) };
    const response = await api("/events", headers);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    $("stream-state").textContent = "following live";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        handleFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  }

  async function follow() {
    let delayMs = 500;
    while (!ended) {
      try {
        await readStream();
        delayMs = 500;
      } catch (err) {
        if (err instanceof ApiError && [401, 403, 404].includes(err.status)) {
          $("stream-state").textContent = "stopped: " + err.message;
          return false;
        }
      }
      if (ended) break;
      // The stream closed before its `end` event: reconnect from the last event seen.
      $("stream-state").textContent = "connection lost; reconnecting after event #" + lastId;
      await sleep(delayMs);
      delayMs = Math.min(delayMs * 2, 10000);
    }
    $("stream-state").textContent = "the job has ended";
    return true;
  }

  // ---------------------------------------------------------------------------------------
  // The result: summary, downloads, SOL chart
  // ---------------------------------------------------------------------------------------

  function formatValue(value) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(4);
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function showResult(result) {
    const list = $("result");
    list.replaceChildren();
    for (const [key, value] of Object.entries(result || {})) {
      if (key === "shapes") continue; // an evaluation's shapes are in the chart
      const dt = document.createElement("dt");
      dt.textContent = key;
      const dd = document.createElement("dd");
      dd.textContent = formatValue(value);
      list.append(dt, dd);
    }
    $("result-section").hidden = false;
  }

  async function download(path, name) {
    const state = $("download-state");
    try {
      const blob = await (await api(path)).blob();
      const url = URL.createObjectURL(blob);
      const a = document.createElement("a");
      a.href = url;
      a.download = name;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      state.textContent = "";
    } catch (err) {
      state.textContent = "download failed: " + err.message;
    }
  }

  function offerDownloads() {
    const files = [
      ["download-kernel", "/kernel", jobId + "-kernel.py"],
      ["download-report-md", "/report?format=md", jobId + "-report.md"],
      ["download-report-html", "/report?format=html", jobId + "-report.html"],
      ["download-run-json", "/report?format=json", jobId + "-run.json"],
    ];
    for (const [id, path, name] of files) $(id).onclick = () => download(path, name);
    $("downloads").hidden = false;
  }

  function shapesOfRecord(record) {
    const shapes = [];
    for (const key of ["final_tune", "final_holdout"]) {
      const evaluation = record[key];
      if (!evaluation || !Array.isArray(evaluation.shapes)) continue;
      for (const s of evaluation.shapes) {
        shapes.push({ id: String(s.shape_id), split: String(s.split || ""), sol: s.sol_fraction });
      }
    }
    return shapes;
  }

  function svgEl(name, attrs, content) {
    const el = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
    if (content !== undefined) el.textContent = content;
    return el;
  }

  function drawChart(shapes) {
    const left = 190, barW = 360, row = 22, top = 24, width = left + barW + 80;
    const height = top + row * shapes.length + 8;
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": "SOL fraction S per shape" });
    for (const pct of [0, 25, 50, 75, 100]) {
      const x = left + (barW * pct) / 100;
      svg.append(svgEl("line", { class: "grid", x1: x, x2: x, y1: top - 6, y2: height - 4 }));
      svg.append(svgEl("text", { class: "tick", x, y: top - 10, "text-anchor": "middle" }, pct + "%"));
    }
    shapes.forEach((s, i) => {
      const y = top + i * row;
      const sol = typeof s.sol === "number" && Number.isFinite(s.sol) ? s.sol : null;
      const g = svgEl("g", { class: "shape", "data-shape": s.id, "data-split": s.split,
        "data-sol": sol === null ? "" : sol });
      g.append(svgEl("title", {}, `${s.id} (${s.split}): S = ${sol === null ? "not measured" : sol.toFixed(4)}`));
      g.append(svgEl("text", { class: "label", x: left - 6, y: y + row / 2 + 4, "text-anchor": "end" }, s.id));
      const split = ["tune", "holdout"].includes(s.split) ? s.split : "other";
      const w = sol === null ? 0 : barW * Math.min(Math.max(sol, 0), 1);
      g.append(svgEl("rect", { class: "bar bar-" + split, x: left, y: y + 3, width: w, height: row - 6 }));
      g.append(svgEl("text", { class: "value", x: left + w + 4, y: y + row / 2 + 4 },
        sol === null ? "—" : (sol * 100).toFixed(1) + "%"));
      svg.append(g);
    });
    $("sol-chart").replaceChildren(svg);
  }

  function showChart(shapes, whyNone) {
    $("sol-section").hidden = false;
    const note = $("sol-note");
    if (whyNone) {
      $("sol-chart").replaceChildren();
      note.textContent = whyNone;
      return;
    }
    if (shapes.length === 0) {
      note.textContent = "no final evaluation: no shapes to chart";
      return;
    }
    if (!shapes.some((s) => typeof s.sol === "number")) {
      note.textContent = "no timings: performance was not measured";
      return;
    }
    drawChart(shapes);
    note.textContent = "S = t_sol / t (the share of the roofline reached) of the final kernel, " +
      "per shape; blue: tune shapes, purple: holdout shapes.";
  }

  async function showOptimization() {
    let record;
    try {
      record = await (await api("/report?format=json")).json();
    } catch (err) {
      showChart([], "no run record: " + err.message);
      return;
    }
    offerDownloads();
    showChart(shapesOfRecord(record), record.mode === "cpu_interpreter"
      ? "no timings: CPU interpreter" : null);
  }

  function showEvaluation(result) {
    const shapes = (result.shapes || []).map((s) => ({ id: String(s.shape), split: "", sol: s.sol_fraction }));
    showChart(shapes, result.performance_measured ? null : "no timings: performance was not measured");
  }

  async function finish() {
    await refreshJob();
    if (job.result) showResult(job.result);
    if (job.status !== "succeeded") return;
    if (job.kind === "optimize") await showOptimization();
    else if (job.result) showEvaluation(job.result);
  }

  async function main() {
    try {
      await refreshJob();
    } catch (err) {
      $("stream-state").textContent = "cannot read the job: " + err.message;
      return;
    }
    if (await follow()) await finish();
    document.body.dataset.ready = "true";
  }

  main().catch((err) => {
    $("stream-state").textContent = "page error: " + err.message;
  });
})();
