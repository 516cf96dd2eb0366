// The Antler run inspector. Plain script, no dependencies: it reads the gateway's public
// API with the token the user gives it, and writes text only through textContent.
"use strict";

const TOKEN_KEY = "antler.token";
const THEME_KEY = "antler.theme";
const REFRESH_MS = 3000;
let stopView = () => {};

// ---- small helpers -------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + token() }, options.headers || {});
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) { showLogin("The token was refused."); throw new ApiError(401, "unauthorized"); }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, detail);
  }
  return response;
}

function fmtTime(ms) { return ms ? new Date(ms).toLocaleTimeString() : ""; }
function fmtDuration(ms) {
  if (ms == null) return "";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  return s < 120 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}
function fmtDelivery(d) {
  if (!d) return "";
  const files = d.presented + (d.presented === 1 ? " file" : " files");
  if (d.satisfied === false) return "incomplete (" + files + ")";
  return d.satisfied === true ? "delivered (" + files + ")" : files;
}
function clip(text, n) { text = String(text ?? ""); return text.length > n ? text.slice(0, n) + "…" : text; }
function setLive(text) { document.getElementById("live").textContent = text; }

// ---- sign-in, theme, routing -------------------------------------------------------

function showLogin(message) {
  stopView();
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("whoami").hidden = true;
  if (message) document.getElementById("login-title").textContent = "Sign in: " + message;
  document.getElementById("token").focus();
}

/// Says in the header which principal the token is (`GET /api/whoami`).
async function showPrincipal() {
  const who = document.getElementById("whoami");
  try {
    const me = await (await api("/api/whoami")).json();
    who.textContent = "Signed in as " + me.user + (me.operator ? " (operator)" : me.role ? " (" + me.role + ")" : "");
    who.hidden = false;
  } catch (_) { who.hidden = true; }
}

function applyTheme() {
  const theme = localStorage.getItem(THEME_KEY);
  if (theme) document.documentElement.dataset.theme = theme;
}

/// A link with a token signs in: `#token=T` (the runs), `#token=T&view=/runs/ID`, or
/// `#/runs/ID&token=T` (that view). The token goes to the tab's storage and leaves the URL;
/// the view it names stays.
function takeTokenFromHash() {
  const hash = location.hash.slice(1);
  const at = hash.startsWith("token=") ? 0 : hash.indexOf("&token=") + 1;
  if (at <= 0 && !hash.startsWith("token=")) return;
  const params = new URLSearchParams(hash.slice(at));
  const given = params.get("token");
  if (given) sessionStorage.setItem(TOKEN_KEY, given);
  const path = at > 0 ? hash.slice(0, at - 1) : "";
  const target = (params.get("view") || path || "/runs").replace(/^#?\/?/, "/");
  history.replaceState(null, "", location.pathname + "#" + target);
}

function route() {
  stopView();
  stopView = () => {};
  takeTokenFromHash();
  if (!token()) { showLogin(); return; }
  document.getElementById("login").hidden = true;
  document.getElementById("logout").hidden = false;
  showPrincipal();
  const hash = location.hash || "#/runs";
  const parts = hash.slice(2).split("/");
  for (const [id, name] of [["nav-runs", "runs"], ["nav-cluster", "cluster"]]) {
    const link = document.getElementById(id);
    if (parts[0] === name) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  const view = document.getElementById("view");
  if (parts[0] === "runs" && parts[1]) stopView = runView(view, decodeURIComponent(parts[1]));
  else if (parts[0] === "cluster") stopView = clusterView(view);
  else stopView = runsView(view);
}

// ---- the runs list ------------------------------------------------------------------

function runsView(view) {
  const filter = el("input", { id: "filter", type: "search", placeholder: "Filter by id, user, thread, model or task", "aria-label": "Filter runs" });
  const status = el("select", { id: "status-filter", "aria-label": "Status" },
    ["", "running", "success", "error", "interrupted"].map((s) => el("option", { value: s, text: s || "any status" })));
  const body = el("tbody");
  const table = el("table", { id: "runs", "aria-label": "Runs" },
    el("thead", {}, el("tr", {}, ["Status", "Run", "User", "Thread", "Model", "Started", "Duration", "Tokens", "Tool calls", "Delivery", "Task"]
      .map((h, i) => el("th", { scope: "col", class: i > 2 ? "wide" : null, text: h })))),
    body);
  const note = el("p", { class: "muted", id: "runs-note" });
  view.replaceChildren(el("h2", { text: "Runs" }), el("div", { class: "filters" }, filter, status), table, note);
  let runs = [];
  const render = () => {
    const q = filter.value.toLowerCase();
    const shown = runs.filter((r) => (!status.value || r.status === status.value) &&
      (!q || [r.run_id, r.user, r.thread, r.task, r.model].some((f) => String(f || "").toLowerCase().includes(q))));
    body.replaceChildren(...shown.map((r) => el("tr", { "data-run": r.run_id },
      el("td", { class: "status-" + r.status, text: r.status }),
      el("td", {}, el("a", { href: "#/runs/" + encodeURIComponent(r.run_id), text: r.run_id })),
      el("td", { text: r.user }),
      el("td", { class: "wide", text: r.thread }),
      el("td", { class: "wide", "data-col": "model", text: clip(r.model, 40) }),
      el("td", { class: "wide", text: r.started_ms ? new Date(r.started_ms).toLocaleString() : "" }),
      el("td", { class: "wide", "data-col": "duration", text: fmtDuration(r.duration_ms) }),
      el("td", { class: "wide", "data-col": "tokens", text: r.total_tokens == null ? "" : String(r.total_tokens) }),
      el("td", { class: "wide", "data-col": "tool-calls", text: String(r.tool_calls ?? "") }),
      el("td", { class: "wide", "data-col": "delivery", text: fmtDelivery(r.delivery) }),
      el("td", { class: "wide", text: clip(r.task, 80) }))));
    note.textContent = shown.length ? "" : "No runs to show.";
  };
  filter.addEventListener("input", render);
  status.addEventListener("change", render);
  let stopped = false;
  const load = async () => {
    try {
      runs = (await (await api("/api/runs?limit=200")).json()).runs;
      setLive("live");
      render();
    } catch (e) { if (e.status !== 401) setLive("offline: " + e.message); }
    if (!stopped) timer = setTimeout(load, REFRESH_MS);
  };
  let timer = null;
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

// ---- one run: the timeline ---------------------------------------------------------

function newModel() {
  return { items: [], calls: new Map(), turns: [], view: null, io: new Map(), replies: new Map(), elicitations: [], approvals: [] };
}

/// Each call's arguments and result, and each AI message's text by id, from the run's messages.
function foldMessages(model, messages) {
  model.io = new Map();
  model.replies = new Map();
  for (const m of messages) {
    if (m.role === "ai") model.replies.set(m.id, m.content);
    if (m.role === "ai") for (const c of m.tool_calls || []) model.io.set(c.id, Object.assign(model.io.get(c.id) || {}, { args: c.args }));
    if (m.role === "tool") model.io.set(m.tool_call_id, Object.assign(model.io.get(m.tool_call_id) || {}, { result: m.content, status: m.status }));
  }
}

/// Folds one run event into the timeline model.
function fold(model, ev) {
  switch (ev.event) {
    case "model_started": {
      const turn = { kind: "turn", turn: ev.turn, at: ev.at_ms };
      model.items.push(turn); model.turns[ev.turn] = turn; break;
    }
    case "model_delta": {
      // The reply as it is written; the message replaces it once the run's messages are read.
      const turn = model.turns[ev.turn];
      if (!turn) break;
      turn.messageId = ev.message_id; turn.streaming = true;
      turn.text = (turn.text || "") + (ev.text || "");
      turn.thinking = (turn.thinking || "") + (ev.reasoning || ""); break;
    }
    case "llm_retry": case "model_fallback": case "empty_reply_retried": {
      // The model starts its reply over.
      const turn = model.turns[model.turns.length - 1];
      if (turn && !turn.done) { turn.text = ""; turn.thinking = ""; }
      break;
    }
    case "model_finished": {
      const turn = model.turns[ev.turn] || {};
      turn.usage = ev.usage; turn.finish = ev.finish_reason; turn.done = ev.at_ms;
      turn.reasoning = ev.reasoning; turn.streaming = false;
      if (ev.message_id) turn.messageId = ev.message_id;
      break;
    }
    case "lifecycle": {
      if (!ev.tool_call_id) break;
      call(model, ev.tool_call_id, ev.tool).states.push({ state: ev.state, at: ev.at_ms }); break;
    }
    case "tool_started": call(model, ev.tool_call_id, ev.name).started = ev.at_ms; break;
    case "tool_finished": {
      const c = call(model, ev.tool_call_id, ev.name);
      c.finished = ev.at_ms; c.error = ev.error; c.message = ev.message; break;
    }
    case "task": call(model, ev.tool_call_id, "task").tasks.push(ev); break;
    case "warning": model.items.push({ kind: "warning", message: ev.message, at: ev.at_ms }); break;
    case "assistant_message": model.items.push({ kind: "message", content: ev.content, at: ev.at_ms }); break;
    default: break;
  }
}

function call(model, id, name) {
  let c = model.calls.get(id);
  if (!c) {
    c = { kind: "call", id, name, states: [], tasks: [] };
    model.calls.set(id, c); model.items.push(c);
  }
  return c;
}

function renderCall(c, io) {
  const states = el("ul", { class: "states", "aria-label": "Lifecycle of " + c.name },
    c.states.map((s) => el("li", { "data-state": s.state, title: fmtTime(s.at), text: s.state })));
  const tasks = c.tasks.length ? el("ol", { class: "tasks", "aria-label": "Subagent task of " + c.id },
    c.tasks.map((t) => {
      const r = t.result || {};
      const bad = t.type === "task_tool" ? t.error : ["task_failed", "task_cancelled", "task_timed_out"].includes(t.type);
      return el("li", { "data-task-event": t.type, class: bad ? "err" : null },
        el("strong", { text: t.type.replace("task_", "") }), " ",
        t.type === "task_started" ? el("span", { text: `${t.description || ""} on ${t.worker || "a worker"}` }) : null,
        t.type === "task_waiting" ? el("span", { class: "muted", text: "waiting for a free worker slot" }) : null,
        t.type === "task_running" ? el("span", { class: "muted", text: clip(t.message, 300) }) : null,
        t.type === "task_tool" ? el("span", { text: (t.error ? "✗ " : "✓ ") + t.name + (t.message ? ": " + clip(t.message, 200) : "") }) : null,
        r.result ? el("details", {}, el("summary", { text: "result" }), el("pre", { text: clip(r.result, 4000) })) : null,
        r.error ? el("span", { class: "err", text: " " + clip(r.error, 300) }) : null);
    })) : null;
  const took = c.started && c.finished ? ` (${c.finished - c.started} ms)` : "";
  return el("li", { class: "call" + (c.error ? " error" : ""), "data-call": c.id },
    el("span", { class: "name", text: (c.error ? "✗ " : c.finished ? "✓ " : "… ") + c.name }),
    el("span", { class: "muted", text: took + " " + fmtTime(c.started) }),
    c.message ? el("div", { class: "err", text: clip(c.message, 300) }) : null,
    states,
    io && io.args !== undefined ? el("details", { class: "args" }, el("summary", { text: "arguments" }), el("pre", { text: JSON.stringify(io.args, null, 2) })) : null,
    io && io.result !== undefined ? el("details", { class: "result" }, el("summary", { text: "result" }), el("pre", { text: io.result })) : null,
    tasks);
}

/// Model turns and tool calls on one time axis, as trace viewers draw them: a bar from
/// each one's start to its end, so overlap and a slow step are seen at a glance. SVG (no
/// inline style, which the page's CSP refuses).
function renderWaterfall(model) {
  const spans = [];
  for (const item of model.items) {
    if (item.kind === "turn" && item.at) spans.push({ label: "model turn " + item.turn, from: item.at, to: item.done, kind: "turn" });
    if (item.kind === "call" && item.started) spans.push({ label: item.name, from: item.started, to: item.finished, kind: item.error ? "error" : "call" });
  }
  if (!spans.length) return null;
  const now = Date.now();
  const start = Math.min(...spans.map((s) => s.from));
  const end = Math.max(...spans.map((s) => s.to || now));
  const total = Math.max(1, end - start);
  const labelW = 170, barW = 560, row = 18;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "waterfall"); svg.setAttribute("role", "img");
  svg.setAttribute("viewBox", `0 0 ${labelW + barW + 70} ${spans.length * row + 16}`);
  svg.setAttribute("aria-label", "Waterfall: " + spans.map((s) => `${s.label} ${s.to ? s.to - s.from + " ms" : "running"}`).join(", "));
  const text = (x, y, t, cls) => {
    const node = document.createElementNS(svg.namespaceURI, "text");
    node.setAttribute("x", String(x)); node.setAttribute("y", String(y));
    if (cls) node.setAttribute("class", cls);
    node.textContent = t; return node;
  };
  spans.forEach((s, i) => {
    const y = i * row;
    const x = labelW + ((s.from - start) / total) * barW;
    const w = Math.max(2, (((s.to || now) - s.from) / total) * barW);
    const bar = document.createElementNS(svg.namespaceURI, "rect");
    bar.setAttribute("x", x.toFixed(1)); bar.setAttribute("y", String(y + 3));
    bar.setAttribute("width", w.toFixed(1)); bar.setAttribute("height", String(row - 6));
    bar.setAttribute("class", "span-" + s.kind);
    const took = s.to ? (s.to - s.from) + " ms" : "…";
    const title = document.createElementNS(svg.namespaceURI, "title"); title.textContent = `${s.label}: ${took}`;
    bar.append(title);
    svg.append(text(0, y + row - 5, clip(s.label, 26)), bar, text(x + w + 4, y + row - 5, took, "took"));
  });
  svg.append(text(labelW, spans.length * row + 12, "0 ms", "axis"), text(labelW + barW - 40, spans.length * row + 12, total + " ms", "axis"));
  return svg;
}

/// DeerFlow's clarification icons (the question the model formatted starts with one), as
/// words: a machine without an emoji font draws them as empty boxes.
const QUESTION_ICONS = [["🤔", "ambiguous requirement"], ["🔀", "a choice of approach"],
  ["⚠️", "a risk to confirm"], ["💡", "a suggestion"], ["❓", ""]];
function questionKind(q) {
  const hit = QUESTION_ICONS.find(([icon]) => String(q).startsWith(icon));
  return hit && hit[1] ? " (" + hit[1] + ")" : "";
}
function withoutIcon(q) {
  const hit = QUESTION_ICONS.find(([icon]) => String(q).startsWith(icon));
  return hit ? String(q).slice(hit[0].length).trimStart() : q;
}

function renderChart(turns) {
  const usage = turns.filter(Boolean).map((t) => (t.usage && t.usage.total_tokens) || 0);
  if (!usage.some((u) => u > 0)) return null;
  const max = Math.max(...usage), w = 24, h = 60;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart"); svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Tokens per model turn: " + usage.join(", "));
  svg.setAttribute("width", String(usage.length * w)); svg.setAttribute("height", String(h + 14));
  usage.forEach((u, i) => {
    const bar = document.createElementNS(svg.namespaceURI, "rect");
    const bh = max ? Math.max(1, Math.round((u / max) * h)) : 1;
    bar.setAttribute("x", String(i * w + 4)); bar.setAttribute("y", String(h - bh));
    bar.setAttribute("width", String(w - 8)); bar.setAttribute("height", String(bh));
    const label = document.createElementNS(svg.namespaceURI, "text");
    label.setAttribute("x", String(i * w + 4)); label.setAttribute("y", String(h + 12));
    label.textContent = String(u);
    svg.append(bar, label);
  });
  return svg;
}

/// The fields of an elicitation's requested schema as form controls, each with a reader
/// of its answer: `[name, control, read]`, `read()` giving `undefined` for no answer.
function elicitationFields(e) {
  const schema = e.requested_schema || {};
  const required = new Set(schema.required || []);
  const fields = [];
  for (const [name, p] of Object.entries(schema.properties || {})) {
    const id = "elicit-" + e.id + "-" + name;
    const must = required.has(name);
    const label = el("label", { for: id }, p.title || name, must ? el("span", { class: "required", "aria-hidden": "true", text: " *" }) : null);
    const hint = p.description ? el("span", { class: "muted", id: id + "-hint", text: " " + p.description }) : null;
    // No `name` attribute: a control named like a form property (`addEventListener`,
    // `submit`) would shadow it on the form. Each answer is read through its closure.
    const common = { id, required: must, "aria-required": must ? "true" : null, "aria-describedby": hint ? id + "-hint" : null };
    const choices = (schema) => (schema.enum || []).map((v, i) => [v, (schema.enumNames || [])[i] || v])
      .concat((schema.oneOf || schema.anyOf || []).map((o) => [o.const, o.title || o.const]));
    let control, read;
    if (p.type === "boolean") {
      control = el("input", Object.assign({ type: "checkbox", checked: p.default === true }, common, { required: false }));
      read = () => control.checked;
    } else if (p.type === "array") {
      const boxes = choices(p.items || {}).map(([v, t], i) => {
        const box = el("input", { type: "checkbox", id: id + "-" + i, value: v, checked: (p.default || []).includes(v) });
        return [box, el("label", { for: id + "-" + i, text: t })];
      });
      control = el("fieldset", { id, "aria-describedby": hint ? id + "-hint" : null },
        el("legend", {}, p.title || name, must ? el("span", { class: "required", "aria-hidden": "true", text: " *" }) : null),
        boxes.map(([b, l]) => el("span", { class: "choice" }, b, l)), hint);
      read = () => { const v = boxes.filter(([b]) => b.checked).map(([b]) => b.value); return v.length || must ? v : undefined; };
      fields.push([name, el("div", { class: "field" }, control), read]);
      continue;
    } else if (choices(p).length) {
      control = el("select", common, must ? null : el("option", { value: "", text: "—" }),
        choices(p).map(([v, t]) => el("option", { value: v, selected: p.default === v, text: t })));
      read = () => control.value === "" ? undefined : control.value;
    } else if (p.type === "number" || p.type === "integer") {
      control = el("input", Object.assign({ type: "number", step: p.type === "integer" ? "1" : "any", min: p.minimum, max: p.maximum, value: p.default }, common));
      read = () => control.value === "" ? undefined : Number(control.value);
    } else if (p.type === "string") {
      const type = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[p.format] || "text";
      control = el("input", Object.assign({ type, minlength: p.minLength, maxlength: p.maxLength, value: p.default }, common));
      read = () => control.value === "" ? undefined : control.value;
    } else {
      continue; // not a field the form can ask for
    }
    fields.push([name, el("div", { class: "field" }, label, " ", control, hint), read]);
  }
  return fields;
}

/// A card asking for one pending elicitation: its fields, Accept and Decline; `done` is
/// called once it was answered.
function elicitationForm(runId, e, done) {
  const fields = elicitationFields(e);
  const note = el("p", { class: "muted", role: "status" });
  const send = async (action) => {
    // Own data properties only (a field named `__proto__` is a field, not the prototype).
    const content = Object.fromEntries(fields.map(([name, , read]) => [name, read()]).filter(([, v]) => v !== undefined));
    try {
      await api(`/api/runs/${encodeURIComponent(runId)}/elicitations/${encodeURIComponent(e.id)}`,
        { method: "POST", body: JSON.stringify(action === "accept" ? { action, content } : { action }) });
      note.textContent = action === "accept" ? "Answer sent." : "Declined.";
      done();
    } catch (err) { note.textContent = "Not sent: " + err.message; }
  };
  const form = el("form", { class: "card elicitation", "data-elicitation": e.id, "aria-labelledby": "elicit-" + e.id + "-title" },
    el("p", { id: "elicit-" + e.id + "-title" }, el("strong", { text: "MCP server " + e.server + " asks: " }), e.message),
    fields.map(([, row]) => row),
    el("p", {}, el("button", { type: "submit", text: "Accept" }), " ",
      el("button", { type: "button", "data-action": "decline", onclick: () => send("decline"), text: "Decline" })),
    note);
  EventTarget.prototype.addEventListener.call(form, "submit", (ev) => { ev.preventDefault(); send("accept"); });
  return form;
}

/// What a call waiting for approval would do, on one line: bash's command, else its
/// arguments as JSON.
function approvalCall(a) {
  const args = a.args || {};
  return a.tool + " " + (typeof args.command === "string" ? args.command : JSON.stringify(args));
}

/// A card asking about one call the run waits on for approval: Approve, Approve for this
/// thread, Deny (with an optional reason); `done` is called once it was answered.
function approvalForm(runId, a, done) {
  const note = el("p", { class: "muted", role: "status" });
  const reason = el("input", { type: "text", "data-reason": a.tool_call_id, "aria-label": "Reason for a denial (optional)", placeholder: "reason (optional, for a denial)" });
  const send = async (decision) => {
    const body = decision === "deny" && reason.value ? { decision, reason: reason.value } : { decision };
    try {
      await api(`/api/runs/${encodeURIComponent(runId)}/approvals/${encodeURIComponent(a.tool_call_id)}`,
        { method: "POST", body: JSON.stringify(body) });
      note.textContent = decision === "deny" ? "Denied." : "Approved.";
      done();
    } catch (err) { note.textContent = "Not sent: " + err.message; }
  };
  const button = (decision, text) => el("button", { type: "button", "data-decision": decision, onclick: () => send(decision), text });
  return el("div", { class: "card approval", "data-approval": a.tool_call_id, role: "group", "aria-labelledby": "approve-" + a.tool_call_id },
    el("p", { id: "approve-" + a.tool_call_id }, el("strong", { text: a.subagent ? "Approve this call of the " + a.subagent.subagent_type + " subagent? " : "Approve this call? " }), el("code", { text: clip(approvalCall(a), 500) })),
    el("p", { class: "muted", text: "Rule " + (a.rule || "?") + (a.origin ? " (" + a.origin + ")" : "") + ": " + (a.justification || "this call needs approval") +
      " · unanswered by " + new Date(a.deadline_at).toLocaleString() + " it is denied" }),
    el("p", {}, button("approve", "Approve"), " ", button("approve_for_thread", "Approve for this thread"), " ",
      reason, " ", button("deny", "Deny")),
    note);
}

function runView(view, runId) {
  const model = newModel();
  const summary = el("div", { id: "summary" });
  const timeline = el("ol", { class: "timeline", id: "timeline", "aria-label": "Run timeline" });
  const chart = el("div", { id: "chart" });
  const waterfall = el("div", { id: "waterfall" });
  const catalogBox = el("details", { id: "catalog" }, el("summary", { text: "Catalog the run sees" }));
  api(`/api/runs/${encodeURIComponent(runId)}/catalog`).then((r) => r.json()).then((c) => {
    const rows = c.tools.map((t) => el("tr", { "data-tool": t.name },
      el("td", { text: t.name }), el("td", { text: t.source + (t.server ? " (" + t.server + ")" : "") }),
      el("td", { text: t.deferred ? "deferred" : "visible" })));
    const denied = (c.authorization && c.authorization.denied) || [];
    const policy = c.skill_policy || {};
    catalogBox.append(el("p", { id: "catalog-denied", text: "Removed by authorization: " + (denied.length ? denied.join(", ") : "none") }),
      el("p", { id: "catalog-skill-policy", text: "Skill policy: " + (policy.allowed_tools
        ? "only " + policy.allowed_tools.join(", ") + " (active: " + (policy.active_skills || []).join(", ") + ")"
        : "every tool" + ((policy.active_skills || []).length ? " (active: " + policy.active_skills.join(", ") + ")" : " (no skill active)")) }));
    catalogBox.append(el("p", { class: "muted", text: "Hash: " + (c.hash || "none (nothing deferred)") }),
      el("table", { "aria-label": "Catalog" }, el("thead", {}, el("tr", {}, ["Tool", "Source", "Offered"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, rows)));
  }).catch(() => catalogBox.append(el("p", { class: "muted", text: "The lead no longer holds this run's catalog." })));
  view.replaceChildren(el("p", {}, el("a", { href: "#/runs", text: "← Runs" })),
    el("h2", { text: "Run " + runId }), summary, el("h3", { text: "Timeline" }), timeline,
    el("h3", { text: "Waterfall" }), waterfall, el("h3", { text: "Tokens per turn" }), chart, catalogBox);
  let stopped = false, controller = null, poller = null, retry = 1000, refreshing = null;

  const render = () => {
    timeline.replaceChildren(...model.items.map((item) => {
      if (item.kind === "turn") {
        const u = item.usage ? ` · ${item.usage.input_tokens} in / ${item.usage.output_tokens} out` : "";
        const reasoning = item.reasoning || (item.streaming ? item.thinking : "");
        const thought = reasoning
          ? el("details", { class: "reasoning" }, el("summary", { text: item.streaming ? "Thinking…" : "Thinking" }), el("pre", { text: clip(reasoning, 4000) }))
          : null;
        // The reply: its message once read, else the text streamed so far.
        const final = item.messageId !== undefined && model.replies.has(item.messageId);
        const text = final ? model.replies.get(item.messageId) : item.text;
        const reply = text
          ? el("pre", { class: "reply" + (item.streaming ? " streaming" : ""), "data-message-id": item.messageId || "",
              "aria-busy": item.streaming ? "true" : "false", text: clip(text, 8000) })
          : null;
        return el("li", { class: "turn", "data-turn": item.turn },
          el("strong", { text: "Model turn " + item.turn }),
          el("span", { class: "muted", text: " " + fmtTime(item.at) + u + (item.finish ? " · " + item.finish : "") }),
          thought, reply);
      }
      if (item.kind === "warning") return el("li", { class: "warning", text: "⚠ " + item.message });
      if (item.kind === "message") return el("li", {}, el("pre", { text: clip(item.content, 4000) }));
      return renderCall(item, model.io.get(item.id));
    }));
    chart.replaceChildren(renderChart(model.turns) || el("p", { class: "muted", text: "No token usage reported." }));
    waterfall.replaceChildren(renderWaterfall(model) || el("p", { class: "muted", text: "Nothing has run yet." }));
    renderSummary();
  };

  // A running run's pending approvals (its subagents' asks: the run itself goes on), each
  // card kept across renders.
  const approvalCards = new Map();
  const approvalParts = () => {
    const pending = model.approvals || [];
    for (const id of approvalCards.keys()) if (!pending.some((a) => a.tool_call_id === id)) approvalCards.delete(id);
    return pending.map((a) => {
      if (!approvalCards.has(a.tool_call_id)) approvalCards.set(a.tool_call_id, approvalForm(runId, a, () => setTimeout(loadElicitations, 300)));
      return approvalCards.get(a.tool_call_id);
    });
  };

  // The forms of pending elicitations, kept across renders so what is typed stays.
  const forms = new Map();
  const elicitationParts = () => {
    const pending = model.elicitations || [];
    for (const id of forms.keys()) if (!pending.some((e) => e.id === id)) forms.delete(id);
    return pending.map((e) => {
      if (!forms.has(e.id)) forms.set(e.id, elicitationForm(runId, e, () => setTimeout(loadElicitations, 300)));
      return forms.get(e.id);
    });
  };
  const loadElicitations = async () => {
    try {
      const v = await (await api(`/api/runs/${encodeURIComponent(runId)}`)).json();
      model.elicitations = v.elicitations || [];
      model.approvals = v.status === "running" ? (v.approvals || []) : [];
      renderSummary();
    } catch (_) { /* the next event or poll tries again */ }
  };

  const renderSummary = () => {
    const v = model.view;
    if (!v) { summary.replaceChildren(el("p", { class: "status-running", text: "running" }), ...approvalParts(), ...elicitationParts()); return; }
    const parts = [el("p", {}, "Status: ", el("strong", { class: "status-" + v.status, id: "run-status", text: v.status }),
      ` · user ${v.user} · thread ${v.thread}`)];
    parts.push(el("p", { class: "muted", text: "Task: " + clip(v.task, 500) }));
    if (v.error) parts.push(el("p", { class: "err", role: "alert", text: "Error: " + v.error }));
    if (v.promoted && v.promoted.names && v.promoted.names.length) {
      parts.push(el("p", { id: "promoted", text: "Promoted by tool_search: " + v.promoted.names.join(", ") }));
    }
    if (v.final_answer) parts.push(el("div", { class: "card" }, el("strong", { text: "Final answer" }), el("pre", { text: v.final_answer })));
    const approvals = v.status === "interrupted" ? (v.approvals || []) : [];
    if (approvals.length) {
      parts.push(...approvals.map((a) => approvalForm(runId, a, () => { model.view = null; follow(); })));
    } else if (v.status === "running" && model.approvals.length) {
      parts.push(...approvalParts());
    } else if (v.status === "interrupted" && v.question) parts.push(answerBox(v.question));
    parts.push(...elicitationParts());
    if (v.artifacts && v.artifacts.length) {
      parts.push(el("div", { class: "card", id: "artifacts" }, el("strong", { text: "Artifacts" }),
        el("ul", {}, v.artifacts.map((p) => el("li", {},
          el("button", { type: "button", "data-artifact": p, onclick: () => download(p), text: "Download " + p.split("/").pop() }))))));
    }
    if (v.delivery) parts.push(el("details", { id: "delivery" }, el("summary", { text: "Delivery receipt" }), el("pre", { text: JSON.stringify(v.delivery, null, 2) })));
    summary.replaceChildren(...parts);
  };

  const answerBox = (question) => {
    const input = el("textarea", { id: "answer", rows: 3, "aria-label": "Your answer" });
    const note = el("span", { class: "muted", role: "status" });
    const form = el("form", { class: "card", id: "answer-form" },
      el("p", {}, el("strong", { text: "The run asks" + questionKind(question) + ": " }), withoutIcon(question)), input, " ",
      el("button", { type: "submit", text: "Send answer" }), " ", note);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        await api(`/api/runs/${encodeURIComponent(runId)}/answer`, { method: "POST", body: JSON.stringify({ answer: input.value }) });
        note.textContent = "Answer sent.";
        model.view = null;
        follow();
      } catch (err) { note.textContent = "Not sent: " + err.message; }
    });
    return form;
  };

  const download = async (path) => {
    try {
      const response = await api(`/api/runs/${encodeURIComponent(runId)}/artifact?path=${encodeURIComponent(path)}`);
      const url = URL.createObjectURL(await response.blob());
      const a = el("a", { href: url, download: path.split("/").pop() });
      document.body.append(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) { setLive("download failed: " + err.message); }
  };

  const loadMessages = async () => {
    try {
      foldMessages(model, (await (await api(`/api/runs/${encodeURIComponent(runId)}/messages`)).json()).messages);
    } catch (_) { /* the timeline stands without them */ }
  };

  const poll = async () => {
    try {
      model.view = await (await api(`/api/runs/${encodeURIComponent(runId)}`)).json();
      model.elicitations = model.view.elicitations || [];
      model.approvals = model.view.status === "running" ? (model.view.approvals || []) : [];
      await loadMessages();
      render();
    } catch (err) {
      if (err.status === 404) { summary.replaceChildren(el("p", { class: "err", role: "alert", text: err.message })); return; }
    }
    if (!stopped && (!model.view || model.view.status === "running")) poller = setTimeout(poll, REFRESH_MS);
  };

  // The event stream, read with fetch (EventSource cannot send the token). A reconnect
  // sends the last event id it got and goes on from there (any lead serves it).
  let lastId = null;
  const follow = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    if (lastId === null) { model.items = []; model.calls = new Map(); model.turns = []; }
    try {
      const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
      const response = await api(`/api/runs/${encodeURIComponent(runId)}/events`, { signal: controller.signal, headers });
      setLive("live");
      retry = 1000;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          const name = (block.match(/^event: (.*)$/m) || [])[1];
          const data = (block.match(/^data: (.*)$/m) || [])[1];
          const id = (block.match(/^id: (.*)$/m) || [])[1];
          if (id) lastId = id;
          if (!data) continue;
          const json = JSON.parse(data);
          if (name === "end") { model.view = json; model.elicitations = json.elicitations || []; } else fold(model, json);
          // A turn ended: its message (what middlewares made of the reply) replaces the stream.
          if (json.event === "model_finished" && !refreshing) {
            refreshing = setTimeout(() => { refreshing = null; loadMessages().then(render); }, 300);
          }
          // A call asks the user, or a call that asked ended: the view says what is pending.
          if (json.event === "elicitation" || (json.event === "tool_finished" && model.elicitations.length)) loadElicitations();
          // A subagent's call waits for approval, or was decided: so does the parent's view.
          if (json.event === "approval_requested" || json.event === "approval_decided") loadElicitations();
        }
        render();
      }
      await loadMessages();
      render();
      setLive(model.view ? "ended" : "");
    } catch (err) {
      if (stopped || err.name === "AbortError") return;
      if (err.status === 404) { summary.replaceChildren(el("p", { class: "err", role: "alert", text: err.message })); return; }
      // The stream was cut: poll the view, and reconnect with backoff.
      setLive("polling");
      poll();
      setTimeout(() => { if (!stopped) follow(); }, retry);
      retry = Math.min(retry * 2, 30000);
    }
  };
  render();
  follow();
  return () => { stopped = true; if (controller) controller.abort(); clearTimeout(poller); clearTimeout(refreshing); };
}

// ---- the cluster -------------------------------------------------------------------

function clusterView(view) {
  const out = el("div", { id: "cluster" });
  view.replaceChildren(el("h2", { text: "Cluster" }), out);
  const table = (label, headers, rows) => el("table", { "aria-label": label },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", { text: c ?? "" }))))));
  let stopped = false, timer = null;
  const load = async () => {
    try {
      const c = await (await api("/api/cluster")).json();
      const parts = [el("h3", { text: "Processes" }), table("Processes",
        ["Role", "PID", "Healthy", "Restarts", "Heartbeat", "State", "Slots"],
        c.processes.map((p) => [p.role + (p.role === "subagent" ? "-" + p.index : ""), p.pid, p.healthy ? "yes" : "no",
          p.restarts, p.last_heartbeat_ms == null ? "never" : p.last_heartbeat_ms + " ms", p.state,
          p.slots == null ? "" : `${p.in_use ?? "-"}/${p.slots}`]))];
      if (c.sandboxes) {
        parts.push(el("h3", { text: `Sandboxes (${c.sandboxes.provider}, ${c.sandboxes.sandboxes.length} of ${c.sandboxes.capacity})` }),
          table("Sandboxes", ["Id", "State", "User", "Thread", "Holders", "Age"],
            c.sandboxes.sandboxes.map((s) => [s.sandbox_id, s.state, s.user_id, s.thread_id, s.holders,
              Math.round(s.age_ms / 1000) + " s"])));
      }
      if (c.mcp_servers) {
        parts.push(el("h3", { text: "MCP servers" }), table("MCP servers",
          ["Server", "Transport", "State", "Tools", "Reconnects", "Version", "Auth", "Last error"],
          c.mcp_servers.map((m) => [m.name, m.transport, m.state, m.tools, m.reconnects, m.protocol_version, m.auth, m.last_error])));
      }
      for (const e of c.errors) parts.push(el("p", { class: "err", text: e }));
      out.replaceChildren(...parts);
      setLive("live");
    } catch (err) {
      if (err.status === 403) { out.replaceChildren(el("p", { role: "alert", text: "The cluster view needs the operator role." })); return; }
      if (err.status !== 401) setLive("offline: " + err.message);
    }
    if (!stopped) timer = setTimeout(load, REFRESH_MS + 2000);
  };
  load();
  return () => { stopped = true; clearTimeout(timer); };
}

// ---- start --------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  applyTheme();
  document.getElementById("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    document.getElementById("token").value = "";
    route();
  });
  document.getElementById("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(); });
  document.getElementById("theme").addEventListener("click", () => {
    const dark = document.documentElement.dataset.theme === "dark" ||
      (!document.documentElement.dataset.theme && matchMedia("(prefers-color-scheme: dark)").matches);
    const next = dark ? "light" : "dark";
    localStorage.setItem(THEME_KEY, next);
    document.documentElement.dataset.theme = next;
  });
  window.addEventListener("hashchange", route);
  route();
});
