// floodgate's live page. It polls api/snapshot, whose counts are the
// /metrics counters, and computes rates between snapshots. The first
// snapshot carries the samples the server kept (history), so that the
// charts show the last minutes from the first paint. Everything from the
// server is shown with textContent, never parsed as markup: rule paths and
// hot counter keys come from files and requests.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const KEEP = 60; // snapshots kept for the live figures
const history = []; // the last snapshots, for the figures of the last seconds
let samples = []; // the server's samples, then one per step from the snapshots: the charts
let tail = null; // the newest snapshot's sample while it is less than a step after the last one
let step = 5000, span = 300000; // the server's sampling step and the charts' width, in ms
let polls = 0;
let structure = ""; // what the rule table was built for
let cells = new Map(); // rule path -> its cells

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function byId(id) { return document.getElementById(id); }

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }

function fmtRate(v) {
  if (!isFinite(v)) return "–";
  if (v === 0) return "0";
  if (v >= 100) return v.toFixed(0);
  if (v >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function fmtSeconds(s) {
  if (!isFinite(s)) return "–";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(2) + " ms";
  return s.toFixed(2) + " s";
}

function fmtTime(t) {
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString();
}

function fmtSpan(ms) {
  return ms >= 120000 ? Math.round(ms / 60000) + " min" : Math.round(ms / 1000) + " s";
}

// setRate shows v in e, in its colour (cls) only when it is not zero:
// idle figures stay grey.
function setRate(e, v, cls, base) {
  e.textContent = fmtRate(v);
  e.dataset.value = String(v);
  e.className = base + " " + (v > 0 ? cls : "zero");
}

// rate is the per-second increase of f between the samples or snapshots
// a and b; NaN when f is unknown in either.
function rate(a, b, f) {
  const dt = (new Date(b.time) - new Date(a.time)) / 1000;
  const x = f(a), y = f(b);
  if (!(dt > 0) || x === undefined || y === undefined) return NaN;
  return Math.max(0, y - x) / dt;
}

// since is the snapshot the shown rates start from: the oldest of the
// last two seconds (at least the one before the last), so that figures do
// not jump with each fixed window when the page polls fast.
function since() {
  const last = history[history.length - 1];
  let i = history.length - 2;
  while (i > 0 && new Date(last.time) - new Date(history[i - 1].time) <= 2000) i--;
  return i >= 0 ? history[i] : null;
}

function ruleOf(snap, path) {
  for (const d of snap.domains || []) {
    for (const r of d.rules) if (r.path === path) return r;
  }
  return null;
}

// sampleOf is what the server's history keeps of a snapshot (ui.Sample).
function sampleOf(snap) {
  const s = { time: snap.time, ok: snap.decisions.ok || 0, over_limit: snap.decisions.over_limit || 0,
    store_calls: snap.store.calls, store_seconds: snap.store.seconds, rules: {} };
  for (const d of snap.domains || []) {
    for (const r of d.rules) s.rules[r.path] = [r.totals.hits, r.totals.within, r.totals.over, r.totals.shadow];
  }
  return s;
}

// addSample keeps snap for the charts: a new point once a step has passed
// since the last one, else the moving end of the charts.
function addSample(snap) {
  if (snap.history_step_ms) step = snap.history_step_ms;
  if (snap.history_length) span = step * snap.history_length;
  if (snap.history) samples = snap.history.slice();
  const s = sampleOf(snap);
  const last = samples[samples.length - 1];
  if (!last || new Date(s.time) - new Date(last.time) >= step) {
    samples.push(s);
    tail = null;
  } else {
    tail = s;
  }
  const newest = new Date(s.time);
  while (samples.length > 1 && newest - new Date(samples[0].time) > span) samples.shift();
}

// series returns f's per-second increase between consecutive samples, the
// moving end included, as [time, rate] points.
function series(f) {
  const pts = tail ? samples.concat([tail]) : samples;
  const out = [];
  for (let i = 1; i < pts.length; i++) out.push([new Date(pts[i].time), rate(pts[i - 1], pts[i], f)]);
  return out;
}

// recent is the last point of f's series: the rate since the last
// sample; NaN without one.
function recent(f) {
  const s = series(f);
  return s.length ? s[s.length - 1][1] : NaN;
}

// chart draws series of [time, value] points as polylines with the given
// classes over the last span, scaled to the largest value, which it
// returns.
function chart(svg, lines, classes) {
  clear(svg);
  const w = 300, h = 60;
  let top = 0, end = 0;
  for (const s of lines) {
    for (const [t, v] of s) {
      if (isFinite(v)) top = Math.max(top, v);
      end = Math.max(end, t.getTime());
    }
  }
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("x1", "0"); axis.setAttribute("x2", String(w));
  axis.setAttribute("y1", String(h - 1)); axis.setAttribute("y2", String(h - 1));
  axis.setAttribute("class", "axis");
  svg.appendChild(axis);
  const scale = top || 1;
  lines.forEach((s, i) => {
    const pts = s.filter(([, v]) => isFinite(v)).map(([t, v]) => {
      const x = w * (1 - (end - t.getTime()) / span);
      const y = h - 1 - (v / scale) * (h - 4);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    if (pts.length < 2) return;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", classes[i]);
    svg.appendChild(line);
  });
  svg.setAttribute("data-top", String(top));
  svg.setAttribute("data-points", String(Math.max(0, ...lines.map((s) => s.length))));
  return top;
}

// scaleText says what a chart spans: its top and its width in time.
function scaleText(top, unit) {
  return (top > 0 ? "peak " + unit(top) : "idle") + " · last " + fmtSpan(span);
}

// ruleName shows a rule's name, breakable only after ".", "_" and "/",
// never inside a word.
function ruleName(name) {
  const d = el("div", "name");
  for (const part of name.split(/(?<=[._/])/)) {
    d.appendChild(document.createTextNode(part));
    d.appendChild(document.createElement("wbr"));
  }
  return d;
}

function buildRules(snap) {
  const main = byId("domains");
  clear(main);
  cells = new Map();
  if (!snap.domains || snap.domains.length === 0) {
    main.appendChild(el("p", "sub", "No rules: every request is allowed."));
    return;
  }
  for (const d of snap.domains) {
    const sec = el("section", "domain");
    sec.dataset.domain = d.name;
    sec.appendChild(el("h2", "", "domain " + d.name));
    const table = el("table", "rules");
    const head = el("tr");
    for (const [t, c] of [["rule", ""], ["limits", ""], ["ok/s", "num"], ["refused/s", "num"], ["shadow/s", "num"],
      ["near limit", "num"], ["last " + fmtSpan(span), "spark"]]) head.appendChild(el("th", c, t));
    table.appendChild(head);
    for (const r of d.rules) {
      const c = buildRule(r);
      table.appendChild(c.row);
      table.appendChild(c.hotRow);
      cells.set(r.path, c);
    }
    sec.appendChild(table);
    main.appendChild(sec);
  }
}

// buildRule makes a rule's two rows: its figures, then its totals and
// hot counters across the table but for the chart.
function buildRule(r) {
  const tr = el("tr", "rule");
  tr.dataset.rule = r.path;
  const name = el("td", "rule");
  name.style.paddingLeft = (0.5 + 1.2 * r.depth) + "rem";
  name.appendChild(ruleName(r.name));
  const meta = el("div", "pos", r.pos);
  for (const f of r.flags || []) meta.appendChild(el("span", "flag", f));
  name.appendChild(meta);
  tr.appendChild(name);
  const lims = el("td", "limits");
  if (!r.limits || r.limits.length === 0) lims.appendChild(el("div", "sub", "no limit"));
  for (const l of r.limits || []) {
    const li = el("div", "limit", l.text);
    li.dataset.algorithm = l.algorithm || "";
    li.dataset.limit = String(l.limit);
    li.dataset.window = String(l.window_seconds);
    lims.appendChild(li);
  }
  tr.appendChild(lims);
  const c = { row: tr };
  for (const k of ["ok", "over", "shadow", "near"]) {
    c[k] = el("td", "num r-" + k + " zero", "–");
    tr.appendChild(c[k]);
  }
  // The chart spans both rows, beside the figures and the totals.
  const sp = el("td", "spark");
  sp.rowSpan = 2;
  c.chart = document.createElementNS(SVG, "svg");
  c.chart.setAttribute("viewBox", "0 0 300 60");
  c.chart.setAttribute("preserveAspectRatio", "none");
  c.chart.setAttribute("class", "chart");
  sp.appendChild(c.chart);
  c.scale = el("div", "scale");
  sp.appendChild(c.scale);
  tr.appendChild(sp);
  const hot = el("tr", "hot");
  hot.dataset.rule = r.path;
  const td = el("td");
  td.colSpan = 6;
  const tot = el("div", "totals");
  // charged: the usage a budget was charged after the fact (tokens,
  // bytes), shown for the rules that have any.
  for (const k of ["hits", "within", "over", "shadow", "near", "not_charged", "charged"]) {
    const item = el("span", "total", k.replace("_", " ") + " ");
    if (k === "charged") item.hidden = true;
    const s = el("span", "t-" + k, "");
    c["t_" + k] = s;
    item.appendChild(s);
    tot.appendChild(item);
  }
  td.appendChild(tot);
  c.hot = el("ol", "hotlist");
  td.appendChild(c.hot);
  hot.appendChild(td);
  c.hotRow = hot;
  return c;
}

function updateRules(snap) {
  const prev = since();
  for (const d of snap.domains || []) {
    for (const r of d.rules) {
      const c = cells.get(r.path);
      if (c) updateRule(c, r, snap, prev);
    }
  }
}

const idleTotals = [0, 0, 0, 0];

function updateRule(c, r, snap, prev) {
  const t = r.totals;
  for (const k of Object.keys(t)) {
    const s = c["t_" + k];
    if (s) { s.textContent = String(Math.round(t[k])); s.dataset.value = String(t[k]); }
    if (s && k === "charged") s.parentElement.hidden = !(t[k] > 0);
  }
  const tot = (f) => (s) => { const x = ruleOf(s, r.path); return x ? f(x.totals) : 0; };
  // A sample leaves out the rules without any hit yet: zeros.
  const at = (i) => (s) => (s.rules[r.path] || idleTotals)[i];
  const refusedAt = (s) => { const x = s.rules[r.path] || idleTotals; return x[2] - x[3]; };
  // Until the page has two snapshots, the rates are the chart's last.
  const okR = prev ? rate(prev, snap, tot((x) => x.within)) : recent(at(1));
  const overR = prev ? rate(prev, snap, tot((x) => x.over - x.shadow)) : recent(refusedAt);
  const shR = prev ? rate(prev, snap, tot((x) => x.shadow)) : recent(at(3));
  if (isFinite(okR)) {
    setRate(c.ok, okR, "ok", "num r-ok");
    setRate(c.over, overR, "over", "num r-over");
    setRate(c.shadow, shR, "shadow", "num r-shadow");
  }
  if (prev) {
    // The near-limit share over the last ten snapshots: charged hits
    // that left a limit near its capacity, of all charged hits.
    const old = history[Math.max(0, history.length - 11)];
    const o = ruleOf(old, r.path);
    const dw = o ? t.within - o.totals.within : t.within, dn = o ? t.near - o.totals.near : t.near;
    const share = dw > 0 ? dn / dw : NaN;
    c.near.textContent = isFinite(share) ? (100 * share).toFixed(0) + " %" : "–";
    c.near.dataset.value = String(share);
    c.near.className = "num r-near" + (share > 0 ? " shadow" : " zero");
  }
  const top = chart(c.chart, [series(at(1)), series(refusedAt), series(at(3))], ["ok", "over", "shadow"]);
  c.scale.textContent = scaleText(top, (v) => fmtRate(v) + "/s");
  clear(c.hot);
  for (const h of r.hot || []) {
    const li = el("li", h.hidden ? "hidden-value" : "value");
    li.appendChild(el("span", "key", h.key));
    let n = " " + plural(h.hits, "hit", "hits");
    if (h.error > 0) n += " (±" + h.error + ")";
    if (h.over > 0) n += ", " + h.over + " over";
    li.appendChild(el("span", "n" + (h.over > 0 ? " over" : ""), n));
    c.hot.appendChild(li);
  }
  if (r.hot_skipped) {
    c.hot.appendChild(el("li", "n", plural(r.hot_skipped, "hit", "hits") + " not sampled (counted while another request updated these counters)"));
  }
}

// updateRefusing lists the rules refusing now, most refused first, with
// their most refused counters.
function updateRefusing(snap) {
  const rows = byId("refusing-rows");
  clear(rows);
  const list = snap.refusing || [];
  byId("refusing-table").hidden = list.length === 0;
  const none = byId("refusing-none");
  none.hidden = list.length > 0;
  none.textContent = "No rule refused a hit in the last " + fmtSpan(3 * step) + ".";
  for (const f of list) {
    const tr = el("tr", "refusal");
    tr.dataset.rule = f.path;
    tr.dataset.refused = String(f.refused);
    const name = el("td", "rule");
    const a = el("a", "", f.path);
    a.href = "#";
    a.addEventListener("click", (e) => {
      e.preventDefault();
      const c = cells.get(f.path);
      if (c) c.row.scrollIntoView({ block: "center" });
    });
    name.appendChild(a);
    tr.appendChild(name);
    const per = f.seconds > 0 ? fmtRate(f.refused / f.seconds) : Math.round(f.refused) + " since start";
    tr.appendChild(el("td", "num over", per));
    tr.appendChild(el("td", "num", f.hits > 0 ? (100 * f.refused / f.hits).toFixed(0) + " %" : "–"));
    const top = el("td", "top");
    for (const h of f.top || []) {
      const s = el("span", "counter");
      s.appendChild(el("span", "key", h.key));
      s.appendChild(el("span", "n", " " + h.over + " over"));
      top.appendChild(s);
    }
    if (!(f.top && f.top.length)) top.appendChild(el("span", "sub", "no counter tracked"));
    tr.appendChild(top);
    rows.appendChild(tr);
  }
}

function updateHeader(snap) {
  const rs = snap.rules;
  // origin is the xDS version_info of the rules in force, source the state
  // of the connection to the xDS server; both absent for rule files.
  byId("rules-version").textContent = "version " + rs.version + (rs.origin ? " (xDS version_info " + rs.origin + ")" : "");
  byId("rules-detail").textContent = "loaded " + fmtTime(rs.loaded_at) + " · " + plural(rs.reloads, "reload", "reloads") + ", " +
    rs.failures + " refused" + (rs.source ? " · " + rs.source : "");
  const refused = byId("refused");
  refused.hidden = !(rs.errors && rs.errors.length);
  if (!refused.hidden) {
    byId("refused-at").textContent = "At " + fmtTime(rs.last_error_at) + " an edit was refused; the rules of version " +
      rs.version + " stay in force.";
    const ul = byId("refused-errors");
    clear(ul);
    for (const e of rs.errors) ul.appendChild(el("li", "", e));
  }
  const warn = byId("warnings");
  warn.hidden = !(rs.warnings && rs.warnings.length);
  const wl = byId("warning-list");
  clear(wl);
  for (const w of rs.warnings || []) wl.appendChild(el("li", "", w));

  const st = snap.store;
  const health = byId("store-health");
  health.textContent = (st.name || "store") + (st.healthy ? " healthy" : " unhealthy") + (st.reached ? "" : ", not reached yet");
  health.className = "v " + (st.healthy ? "good" : "bad");
  byId("store-detail").textContent = st.detail || "";
  updateFigures(snap);
  updateValuesNote(snap.values);
}

// updateFigures shows the decisions and the store's round trip.
function updateFigures(snap) {
  const st = snap.store;
  const dec = (code) => (s) => s.decisions[code] || 0;
  const prev = since();
  const okR = prev ? rate(prev, snap, dec("ok")) : recent((s) => s.ok);
  if (isFinite(okR)) {
    setRate(byId("dec-ok"), okR, "ok", "");
    setRate(byId("dec-over"), prev ? rate(prev, snap, dec("over_limit")) : recent((s) => s.over_limit), "over", "");
  }
  if (prev) {
    const calls = st.calls - prev.store.calls;
    const mean = calls > 0 ? (st.seconds - prev.store.seconds) / calls : NaN;
    let p99 = NaN;
    if (calls > 0) {
      const before = new Map((prev.store.buckets || []).map((b) => [b[0], b[1]]));
      for (const b of st.buckets || []) {
        if (b[1] - (before.get(b[0]) || 0) >= 0.99 * calls) { p99 = b[0]; break; }
      }
    }
    const lat = byId("store-latency");
    lat.textContent = calls > 0 ? "mean " + fmtSeconds(mean) + ", p99 ≤ " + fmtSeconds(p99) : "no calls";
    lat.dataset.value = String(mean);
    byId("store-calls").textContent = fmtRate(rate(prev, snap, (s) => s.store.calls)) + " calls/s, " +
      fmtRate(rate(prev, snap, (s) => s.store.errors)) + " errors/s";
  }
  const top = chart(byId("dec-chart"), [series((s) => s.ok), series((s) => s.over_limit)], ["ok", "over"]);
  byId("dec-scale").textContent = scaleText(top, (v) => fmtRate(v) + "/s");
  const calls = series((s) => s.store_calls);
  const lat = series((s) => s.store_seconds).map(([t, secs], i) => [t, calls[i][1] > 0 ? secs / calls[i][1] : NaN]);
  byId("store-scale").textContent = scaleText(chart(byId("store-chart"), [lat], ["ok"]), fmtSeconds);
}

// updateValuesNote says whose request values this listener shows, and why.
function updateValuesNote(values) {
  const note = byId("values-note"), badge = byId("listener");
  badge.hidden = values !== "all";
  badge.textContent = "debug listener: every rule's request values shown";
  if (values === "all") {
    note.textContent = "This is the debug listener: hot counters show the request values of every rule " +
      "(client addresses, API keys, users). It listens on loopback unless -debug-addr (DEBUG_HOST) says otherwise, " +
      "as pprof does, because those values are not for the network. The HTTP listener's page shows only those " +
      "of detailed_metric and value_to_metric rules.";
  } else if (values === "opted_in") {
    note.textContent = "Hot counters show request values only for detailed_metric and value_to_metric rules, as /metrics " +
      "names them; the other rules' counters read the rule and a fingerprint (a hash keyed per process). " +
      "Every rule's values: this page on the debug listener (-debug-addr, loopback by default).";
  } else {
    note.textContent = "Request values are hidden here: hot counters read the rule and a fingerprint (a hash keyed per process).";
  }
}

async function poll() {
  let wait = 1000;
  try {
    const resp = await fetch(samples.length ? "api/snapshot" : "api/snapshot?history=1", { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()));
    const snap = await resp.json();
    wait = snap.interval_ms || wait;
    history.push(snap);
    if (history.length > KEEP) history.shift();
    addSample(snap);
    const shape = snap.rules.version + "|" + (snap.domains || []).map((d) => d.rules.map((r) => r.path).join(",")).join(";");
    if (shape !== structure) { buildRules(snap); structure = shape; }
    updateHeader(snap);
    updateRules(snap);
    updateRefusing(snap);
    polls++;
    document.body.dataset.polls = String(polls);
    const s = byId("status");
    s.className = "status";
    s.textContent = "live · updated " + new Date(snap.time).toLocaleTimeString() + " every " + (wait / 1000) + " s";
  } catch (e) {
    const s = byId("status");
    s.className = "status stale";
    s.textContent = "not updating: " + e.message;
  }
  setTimeout(poll, wait);
}

poll();
