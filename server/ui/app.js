// kolo's dashboard: three views on one page, chosen by the URL's hash — #/ (every job, by
// phase), #/jobs/<id> (one job: spec, live curves with re-form markers, rings per epoch, events,
// Cancel and Scale, logs) and #/workers (Drain, Undrain). Each view follows one server-sent event
// stream (api.js) and redraws from what it last received. Text from the server is only ever set
// as text, never parsed as HTML.
import { ApiError, follow, request, stream } from "./api.js";
import { drawChart, formatNumber } from "./chart.js";

const PHASES = ["PENDING", "RUNNING", "RECONFIGURING", "SUCCEEDED", "FAILED", "CANCELLED"];
const FINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const main = document.getElementById("main");
let stopView = () => {};

// ---- small helpers ----

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

export function duration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return "";
  const s = Math.round(seconds);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}

function clock(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

function badge(phase) {
  return h("span", { class: "badge " + (phase || "").toLowerCase() }, phase || "?");
}

// Seconds left, from the recent points' rate (or the average since the start); null if unknown.
export function etaSeconds(status, points) {
  const p = status.progress || {};
  if (!p.total_steps || !p.step || p.step >= p.total_steps) return null;
  if (status.phase !== "RUNNING" && status.phase !== "RECONFIGURING") return null;
  let rate = 0;
  if (points && points.length >= 2) {
    const a = points[Math.max(0, points.length - 20)], b = points[points.length - 1];
    if (b.step > a.step && b.time_unix_ms > a.time_unix_ms) rate = (b.step - a.step) / ((b.time_unix_ms - a.time_unix_ms) / 1000);
  }
  if (!rate && status.started_unix_ms) {
    const elapsed = (Date.now() - status.started_unix_ms) / 1000;
    if (elapsed > 0) rate = p.step / elapsed;
  }
  return rate > 0 ? (p.total_steps - p.step) / rate : null;
}

// "waiting for workers: have 1, need 2 (since 12 s)" for a job held below min_workers, else "".
export function waitingText(status) {
  const w = status.waiting;
  if (!w) return "";
  const since = Math.max(0, Math.floor((Date.now() - Number(w.since_unix_ms || Date.now())) / 1000));
  return `waiting for workers: have ${w.have || 0}, need ${w.need || 0} (since ${since} s)`;
}

function progressCell(status, points) {
  const p = status.progress || {};
  const cell = h("div", { class: "progress" });
  const waiting = waitingText(status);
  if (waiting) cell.append(h("span", { class: "waiting" }, waiting));
  if (p.total_steps > 0) {
    const pct = Math.min(100, (100 * (p.step || 0)) / p.total_steps);
    const fill = h("span", {});
    fill.style.width = pct.toFixed(1) + "%"; // through the CSSOM: the CSP refuses inline style attributes
    cell.append(h("div", { class: "bar", title: pct.toFixed(1) + "%" }, fill));
    cell.append(h("span", { class: "steps" }, `${p.step || 0} / ${p.total_steps}`));
  } else {
    cell.append(h("span", { class: "steps" }, p.step ? "step " + p.step : ""));
  }
  const eta = etaSeconds(status, points);
  return { cell, eta: eta === null ? (status.phase === "SUCCEEDED" ? "done" : "") : duration(eta) };
}

function setLive(state) {
  const live = document.getElementById("live");
  live.textContent = state === "live" ? "live" : state === "reconnecting" ? "reconnecting…" : state;
  live.className = "live " + state;
}

function showError(where, err) {
  where.replaceChildren(h("p", { class: "error" }, err instanceof ApiError ? `${err.code}: ${err.message}` : String(err)));
}

function navigate(active) {
  for (const id of ["nav-jobs", "nav-workers"]) document.getElementById(id).classList.toggle("on", id === active);
}

// ---- #/ : the jobs ----

function jobsView(query) {
  navigate("nav-jobs");
  let filter = query.get("phase") || "";
  let jobs = [];
  let more = false;
  const filters = h("div", { id: "phase-filter", class: "filters" });
  const body = h("tbody");
  const table = h("table", { id: "jobs-table" },
    h("thead", {}, h("tr", {}, ["Name", "Id", "Phase", "Workers", "Progress", "ETA", "Age"].map((t) => h("th", {}, t)))), body);
  const note = h("p", { class: "muted", id: "jobs-note" });
  main.replaceChildren(h("h1", {}, "Jobs"), filters, table, note);

  function render() {
    const counts = {};
    for (const j of jobs) counts[j.status.phase] = (counts[j.status.phase] || 0) + 1;
    filters.replaceChildren(...["", ...PHASES].map((ph) =>
      h("button", {
        class: ph === filter ? "on" : "", dataset: { phase: ph },
        onclick: () => { location.hash = ph ? "#/?phase=" + ph : "#/"; },
      }, (ph || "All") + " " + (ph ? counts[ph] || 0 : jobs.length))));
    const shown = jobs.filter((j) => !filter || j.status.phase === filter)
      .sort((a, b) => (b.status.created_unix_ms || 0) - (a.status.created_unix_ms || 0) || a.id.localeCompare(b.id));
    body.replaceChildren(...shown.map((j) => {
      const st = j.status;
      const { cell, eta } = progressCell(st);
      const members = (st.members || []).length;
      return h("tr", { class: "job", dataset: { id: j.id, phase: st.phase } },
        h("td", { class: "name" }, h("a", { href: "#/jobs/" + encodeURIComponent(j.id) }, j.spec.name || j.id)),
        h("td", { class: "id mono" }, j.id),
        h("td", { class: "phase" }, badge(st.phase)),
        h("td", { class: "workers", title: `min ${st.min_workers || j.spec.min_workers}, max ${st.max_workers || j.spec.max_workers}` },
          `${members} (${st.min_workers || j.spec.min_workers}–${st.max_workers || j.spec.max_workers})`),
        h("td", {}, cell),
        h("td", { class: "eta" }, eta),
        h("td", { class: "age" }, duration((Date.now() - (st.created_unix_ms || Date.now())) / 1000)));
    }));
    note.textContent = shown.length === 0 ? (jobs.length === 0 ? "No jobs yet: submit one with `kolo submit` or POST /v1/jobs." : "No job in this phase.")
      : more ? "Showing the first 1000 jobs by id." : "";
  }
  render();
  const ticker = setInterval(render, 5000);
  const stop = stream("jobs=1", {
    jobs: (list) => { jobs = list.jobs || []; more = !!list.next_page_token; render(); },
    jobs_changed: (list) => { // only the jobs whose spec or status changed
      const byId = new Map(jobs.map((j) => [j.id, j]));
      for (const j of list.jobs || []) byId.set(j.id, j);
      jobs = [...byId.values()];
      render();
    },
  }, setLive);
  return () => { clearInterval(ticker); stop(); };
}

// ---- #/jobs/<id> : one job ----

function jobView(id) {
  navigate("nav-jobs");
  let job = null;
  let points = []; // by step, merged from "metrics" events
  let rings = [];
  const title = h("h1", { id: "job-title" }, id);
  const actions = h("div", { class: "actions", id: "job-actions" });
  const message = h("p", { id: "job-message", class: "muted" });
  const summary = h("dl", { id: "job-summary", class: "summary" });
  const chart = (name) => {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg"); // SVG needs its namespace
    svg.id = "chart-" + name;
    svg.setAttribute("class", "chart");
    return svg;
  };
  const charts = { loss: chart("loss"), accuracy: chart("accuracy"), throughput: chart("throughput") };
  const ringBody = h("tbody");
  const eventBody = h("tbody");
  const spec = h("pre", { class: "mono" });
  const logs = h("div", { id: "logs" });
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← Jobs")),
    h("div", { class: "title" }, title, h("span", { id: "job-phase" })), actions, message, summary,
    h("section", { class: "charts" },
      h("figure", {}, h("figcaption", {}, "Loss"), charts.loss),
      h("figure", {}, h("figcaption", {}, "Accuracy"), charts.accuracy),
      h("figure", {}, h("figcaption", {}, "Throughput (samples/s)"), charts.throughput)),
    h("section", {}, h("h2", {}, "Ring members per epoch"),
      h("table", { id: "rings" }, h("thead", {}, h("tr", {}, h("th", {}, "Epoch"), h("th", {}, "Members (rank: worker @ host)"))), ringBody)),
    h("section", {}, h("h2", {}, "Events"),
      h("table", { id: "events" }, h("thead", {}, h("tr", {}, ["#", "Time", "Type", "Epoch", "Message"].map((t) => h("th", {}, t)))), eventBody)),
    h("section", {}, h("h2", {}, "Logs"), logs),
    h("section", {}, h("details", { id: "spec", open: true }, h("summary", {}, "Spec"), spec)));

  // Built once (so that live updates never reset what is being typed); hidden once the job ended.
  let actionsBuilt = false;
  function renderActions() {
    actions.hidden = !job || FINAL.has(job.status.phase);
    if (actions.hidden) actions.replaceChildren();
    if (actions.hidden || actionsBuilt) return;
    actionsBuilt = true;
    const reason = h("input", { id: "cancel-reason", placeholder: "reason (optional)", maxlength: 256 });
    const cancelForm = h("span", { id: "cancel-form", hidden: true }, reason,
      h("button", { id: "cancel-confirm", class: "danger", onclick: () => act("cancel", { reason: reason.value }) }, "Cancel the job"),
      h("button", { onclick: () => { cancelForm.hidden = true; } }, "Keep it"));
    const min = h("input", { id: "scale-min", type: "number", min: 1, value: job.status.min_workers || job.spec.min_workers });
    const max = h("input", { id: "scale-max", type: "number", min: 0, value: job.status.max_workers || job.spec.max_workers });
    const scaleForm = h("span", { id: "scale-form", hidden: true }, "min ", min, " max ", max,
      h("button", { id: "scale-apply", class: "primary", onclick: () => act("scale", { min_workers: +min.value, max_workers: +max.value }) }, "Apply"));
    actions.append(
      h("button", { id: "btn-cancel", class: "danger", onclick: () => { cancelForm.hidden = false; scaleForm.hidden = true; } }, "Cancel…"),
      h("button", { id: "btn-scale", onclick: () => { scaleForm.hidden = false; cancelForm.hidden = true; } }, "Scale…"),
      cancelForm, scaleForm);
  }

  async function act(verb, body) {
    message.className = "muted";
    message.textContent = verb === "cancel" ? "Cancelling…" : "Scaling…";
    try {
      job = await request("POST", `/v1/jobs/${encodeURIComponent(id)}:${verb}`, body);
      message.textContent = verb === "cancel" ? "Cancelled." : `Scaled to ${job.status.min_workers}–${job.status.max_workers} workers.`;
      render();
    } catch (e) {
      message.className = "error";
      message.textContent = e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
    }
  }

  function renderSummary() {
    const st = job.status;
    const p = st.progress || {};
    const { cell, eta } = progressCell(st, points);
    const rows = [
      ["Phase", badge(st.phase)],
      ["Workers", `${(st.members || []).length} in ring epoch ${st.epoch || 0} (min ${st.min_workers}, max ${st.max_workers})`],
      ...(st.waiting ? [["Waiting", h("span", { class: "waiting" }, waitingText(st))]] : []),
      ["Progress", cell],
      ["ETA", eta || "—"],
      ["Loss", p.loss ? formatNumber(p.loss) : "—"],
      ["Accuracy", p.test_accuracy || p.train_accuracy
        ? [p.test_accuracy ? `test ${(100 * p.test_accuracy).toFixed(2)}%` : "", p.train_accuracy ? `train ${(100 * p.train_accuracy).toFixed(2)}%` : ""].filter(Boolean).join(" · ")
        : p.accuracy ? (100 * p.accuracy).toFixed(2) + "%" : "—"],
      ["Throughput", p.samples_per_sec ? formatNumber(p.samples_per_sec) + " samples/s" : "—"],
      ["Re-formed", (st.reconfigurations || 0) === 1 ? "once" : (st.reconfigurations || 0) + " times"],
      ["Created", clock(st.created_unix_ms)],
      ["Started", clock(st.started_unix_ms) || "—"],
      ["Finished", clock(st.finished_unix_ms) || "—"],
    ];
    if (st.error) rows.push(["Error", h("span", { class: "error" }, st.error)]);
    summary.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function render() {
    if (!job) return;
    title.textContent = job.spec.name ? `${job.spec.name} (${job.id})` : job.id;
    document.getElementById("job-phase").replaceChildren(badge(job.status.phase));
    document.title = "kolo · " + (job.spec.name || job.id);
    renderSummary();
    renderActions();
    const events = (job.events || []).slice().reverse();
    eventBody.replaceChildren(...events.map((e) =>
      h("tr", { class: "event", dataset: { type: e.type, seq: e.seq } },
        h("td", {}, e.seq), h("td", {}, clock(e.time_unix_ms)), h("td", {}, h("span", { class: "etype " + e.type.toLowerCase() }, e.type)),
        h("td", {}, e.epoch || ""), h("td", { class: "msg" }, e.message))));
    spec.textContent = JSON.stringify(job.spec, null, 2);
  }

  function renderHistory() {
    drawChart(charts.loss, points, "loss", { positive: true });
    // train and test accuracy when the program reports them apart (kolo-train does), else its accuracy
    const split = points.some((p) => p.train_accuracy > 0 || p.test_accuracy > 0);
    drawChart(charts.accuracy, points, split
      ? [{ field: "test_accuracy", label: "test" }, { field: "train_accuracy", label: "train" }]
      : [{ field: "accuracy" }], { positive: true });
    drawChart(charts.throughput, points, "samples_per_sec", { positive: true, zero: true });
    ringBody.replaceChildren(...rings.slice().reverse().map((r) =>
      h("tr", { dataset: { epoch: r.epoch } }, h("td", {}, r.epoch),
        h("td", {}, (r.members || []).map((m) => `${m.rank}: ${m.worker_id} @ ${m.host || m.address}`).join(", ")))));
    if (job) renderSummary();
  }

  // Logs: the last lines of every rank (or one), followed while the job runs.
  const logRank = h("select", { id: "logs-rank", onchange: () => followLogs() }, h("option", { value: "" }, "all ranks"));
  const logText = h("pre", { id: "logs-text", class: "mono logs" });
  const logNote = h("p", { id: "logs-note", class: "muted" });
  logs.append(h("div", { class: "actions" }, logRank, h("button", { id: "logs-reload", onclick: () => followLogs() }, "Reload")),
    logText, logNote);
  let logAbort = null;
  function rankOptions() {
    const size = Math.max(0, ...rings.map((r) => (r.members || []).length));
    if (logRank.options.length - 1 === size) return;
    const chosen = logRank.value;
    logRank.replaceChildren(h("option", { value: "" }, "all ranks"),
      ...Array.from({ length: size }, (_, i) => h("option", { value: String(i) }, "rank " + i)));
    logRank.value = chosen !== "" && +chosen < size ? chosen : "";
  }
  async function followLogs() {
    if (logAbort) logAbort.abort();
    const mine = (logAbort = new AbortController());
    logText.textContent = "";
    logNote.className = "muted";
    logNote.textContent = "following…";
    const rank = logRank.value;
    const path = `/v1/jobs/${encodeURIComponent(id)}/logs?tail=200&follow=1` + (rank !== "" ? "&rank=" + rank : "");
    try {
      await follow(path, (text) => {
        let all = logText.textContent + text;
        if (all.length > 200000) all = all.slice(all.length - 150000); // keep the page light
        const atBottom = logText.scrollTop + logText.clientHeight >= logText.scrollHeight - 4;
        logText.textContent = all;
        if (atBottom) logText.scrollTop = logText.scrollHeight;
      }, mine.signal);
      if (mine === logAbort) logNote.textContent = logText.textContent ? "end of the logs" : "no output";
    } catch (e) {
      if (e.name === "AbortError") return;
      logNote.className = e instanceof ApiError && e.status === 404 && /no route/.test(e.message) ? "muted" : "error";
      logNote.textContent = logNote.className === "muted" ? "This kolo-server does not serve job logs."
        : e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
    }
  }

  renderHistory();
  followLogs();
  let stop = () => {};
  stop = stream("job=" + encodeURIComponent(id), {
    job: (j) => { job = j; render(); },
    metrics: (m) => {
      const byStep = new Map(points.map((p) => [p.step, p]));
      for (const p of m.points || []) byStep.set(p.step, p);
      points = [...byStep.values()].sort((a, b) => a.step - b.step);
      rings = m.rings || [];
      renderHistory();
      rankOptions();
    },
    error: (e) => { stop(); showError(main, new ApiError(404, e.error.code, e.error.message)); },
  }, setLive);
  const ticker = setInterval(() => job && renderSummary(), 5000);
  return () => { clearInterval(ticker); stop(); if (logAbort) logAbort.abort(); };
}

// ---- #/workers ----

function workersView() {
  navigate("nav-workers");
  let workers = [];
  const confirming = new Set();
  const body = h("tbody");
  const message = h("p", { id: "workers-message", class: "muted" });
  main.replaceChildren(h("h1", {}, "Workers"), message,
    h("table", { id: "workers-table" },
      h("thead", {}, h("tr", {}, ["Id", "Host", "Address", "Slots", "GPUs", "State", "Job", "Draining", ""].map((t) => h("th", {}, t)))), body));

  async function act(w, verb) {
    message.className = "muted";
    message.textContent = `${verb === "drain" ? "Draining" : "Undraining"} ${w.id}…`;
    try {
      await request("POST", `/v1/workers/${encodeURIComponent(w.id)}:${verb}`);
      message.textContent = `${w.id}: ${verb === "drain" ? "drained" : "undrained"}.`;
    } catch (e) {
      message.className = "error";
      message.textContent = e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
    }
  }

  function render() {
    body.replaceChildren(...workers.slice().sort((a, b) => a.id.localeCompare(b.id)).map((w) => {
      // the confirmation survives redraws (live updates) until it is used
      const confirm = h("span", { hidden: !confirming.has(w.id) },
        h("button", { class: "danger confirm", onclick: () => { confirming.delete(w.id); act(w, "drain"); } }, "Drain " + w.id));
      return h("tr", { class: "worker", dataset: { id: w.id, state: w.state } },
        h("td", { class: "mono" }, w.id), h("td", {}, w.host), h("td", { class: "mono" }, w.address),
        h("td", {}, w.slots), h("td", {}, w.gpus || ""), h("td", { class: "state" }, w.state),
        h("td", { class: "job" }, w.job_id ? h("a", { href: "#/jobs/" + encodeURIComponent(w.job_id) }, w.job_id) : ""),
        h("td", { class: "draining" }, w.draining ? "yes" : "no"),
        h("td", {}, w.draining
          ? h("button", { class: "undrain", onclick: () => act(w, "undrain") }, "Undrain")
          : [h("button", { class: "drain", onclick: () => { confirming.add(w.id); confirm.hidden = false; } }, "Drain…"), confirm]));
    }));
    if (workers.length === 0) message.textContent = "No worker is registered.";
  }
  const stop = stream("workers=1", { workers: (list) => { workers = list.workers || []; render(); } }, setLive);
  return stop;
}

// ---- the router ----

function route() {
  stopView();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, q] = hash.split("?");
  const query = new URLSearchParams(q || "");
  const job = path.match(/^\/jobs\/([^/]+)$/);
  if (job) stopView = jobView(decodeURIComponent(job[1]));
  else if (path === "/workers") stopView = workersView();
  else stopView = jobsView(query);
}

window.addEventListener("hashchange", route);
route();
