// floodgate's live page. It polls api/snapshot, whose counts are the
// /metrics counters, and computes rates between snapshots. Everything from
// the server is shown with textContent, never parsed as markup: rule paths
// and hot counter keys come from files and requests.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const KEEP = 60; // snapshots kept for the charts
const history = [];
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

function fmtRate(v) {
  if (!isFinite(v)) return "–";
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

// rate is the per-second increase of f between the snapshots a and b.
function rate(a, b, f) {
  const dt = (new Date(b.time) - new Date(a.time)) / 1000;
  if (!(dt > 0)) return NaN;
  return Math.max(0, f(b) - f(a)) / dt;
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

// chart draws series (arrays of numbers, oldest first) as polylines with
// the given classes, scaled to the largest value.
function chart(svg, series, classes) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = 300, h = 60;
  let top = 0;
  for (const s of series) for (const v of s) if (isFinite(v)) top = Math.max(top, v);
  if (top === 0) top = 1;
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("x1", "0"); axis.setAttribute("x2", String(w));
  axis.setAttribute("y1", String(h - 1)); axis.setAttribute("y2", String(h - 1));
  axis.setAttribute("class", "axis");
  svg.appendChild(axis);
  series.forEach((s, i) => {
    if (s.length < 2) return;
    const pts = s.map((v, j) => {
      const x = (w * (KEEP - s.length + j)) / (KEEP - 1);
      const y = h - 1 - ((isFinite(v) ? v : 0) / top) * (h - 4);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", classes[i]);
    svg.appendChild(line);
  });
  svg.setAttribute("data-top", String(top));
}

// rates returns, for consecutive snapshots, f's per-second increase.
function rates(f) {
  const out = [];
  for (let i = 1; i < history.length; i++) out.push(rate(history[i - 1], history[i], f));
  return out;
}

function buildRules(snap) {
  const main = byId("domains");
  while (main.firstChild) main.removeChild(main.firstChild);
  cells = new Map();
  if (!snap.domains || snap.domains.length === 0) {
    main.appendChild(el("p", "sub", "No rules: every request is allowed."));
    return;
  }
  for (const d of snap.domains) {
    const sec = el("section", "domain");
    sec.dataset.domain = d.name;
    sec.appendChild(el("h2", "", "domain " + d.name));
    const table = el("table");
    const head = el("tr");
    for (const [t, c] of [["rule", ""], ["limits", ""], ["ok/s", "num"], ["over/s", "num"], ["shadow/s", "num"],
      ["near limit", "num"], ["recent", ""], ["totals", ""]]) head.appendChild(el("th", c, t));
    table.appendChild(head);
    for (const r of d.rules) {
      const tr = el("tr", "rule");
      tr.dataset.rule = r.path;
      const name = el("td", "rule");
      name.style.paddingLeft = (0.5 + 1.2 * r.depth) + "rem";
      name.appendChild(el("div", "", r.name));
      const meta = el("div", "pos", r.pos);
      name.appendChild(meta);
      for (const f of r.flags || []) name.appendChild(el("span", "flag", f));
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
        c[k] = el("td", "num r-" + k + (k === "near" ? "" : " " + k), "–");
        tr.appendChild(c[k]);
      }
      const sp = el("td", "spark");
      c.chart = document.createElementNS(SVG, "svg");
      c.chart.setAttribute("viewBox", "0 0 300 60");
      c.chart.setAttribute("preserveAspectRatio", "none");
      c.chart.setAttribute("class", "chart");
      sp.appendChild(c.chart);
      tr.appendChild(sp);
      const tot = el("td", "totals");
      for (const k of ["hits", "within", "over", "shadow", "near", "not_charged"]) {
        const s = el("span", "t-" + k, "");
        c["t_" + k] = s;
        tot.appendChild(el("span", "", k.replace("_", " ") + " "));
        tot.appendChild(s);
        tot.appendChild(document.createElement("br"));
      }
      tr.appendChild(tot);
      table.appendChild(tr);
      const hot = el("tr", "hot");
      hot.dataset.rule = r.path;
      const td = el("td");
      td.colSpan = 8;
      c.hot = el("ol", "hotlist");
      td.appendChild(c.hot);
      hot.appendChild(td);
      hot.hidden = true;
      c.hotRow = hot;
      table.appendChild(hot);
      cells.set(r.path, c);
    }
    sec.appendChild(table);
    main.appendChild(sec);
  }
}

function updateRules(snap) {
  const prev = since();
  for (const d of snap.domains || []) {
    for (const r of d.rules) {
      const c = cells.get(r.path);
      if (!c) continue;
      const t = r.totals;
      for (const k of Object.keys(t)) {
        const s = c["t_" + k];
        if (s) { s.textContent = String(Math.round(t[k])); s.dataset.value = String(t[k]); }
      }
      const tot = (f) => (s) => { const x = ruleOf(s, r.path); return x ? f(x.totals) : 0; };
      const okF = tot((x) => x.within), overF = tot((x) => x.over - x.shadow), shF = tot((x) => x.shadow);
      if (prev) {
        const ok = rate(prev, snap, okF), over = rate(prev, snap, overF), sh = rate(prev, snap, shF);
        c.ok.textContent = fmtRate(ok); c.ok.dataset.value = String(ok);
        c.over.textContent = fmtRate(over); c.over.dataset.value = String(over);
        c.shadow.textContent = fmtRate(sh); c.shadow.dataset.value = String(sh);
        // The near-limit share over the last ten snapshots: charged hits
        // that left a limit near its capacity, of all charged hits.
        const old = history[Math.max(0, history.length - 11)];
        const o = ruleOf(old, r.path);
        const dw = o ? t.within - o.totals.within : t.within, dn = o ? t.near - o.totals.near : t.near;
        const share = dw > 0 ? dn / dw : NaN;
        c.near.textContent = isFinite(share) ? (100 * share).toFixed(0) + " %" : "–";
        c.near.dataset.value = String(share);
      }
      chart(c.chart, [rates(okF), rates(overF), rates(shF)], ["ok", "over", "shadow"]);
      while (c.hot.firstChild) c.hot.removeChild(c.hot.firstChild);
      for (const h of r.hot || []) {
        const li = el("li", h.hidden ? "hidden-value" : "value");
        li.appendChild(el("span", "key", h.key));
        let n = " " + h.hits + " hits";
        if (h.error > 0) n += " (±" + h.error + ")";
        if (h.over > 0) n += ", " + h.over + " over";
        li.appendChild(el("span", "n", n));
        c.hot.appendChild(li);
      }
      if (r.hot_skipped) {
        c.hot.appendChild(el("li", "n", r.hot_skipped + " hits not sampled (counted while another request updated these counters)"));
      }
      c.hotRow.hidden = !(r.hot && r.hot.length);
    }
  }
}

function updateHeader(snap) {
  const rs = snap.rules;
  // origin is the xDS version_info of the rules in force, source the state
  // of the connection to the xDS server; both absent for rule files.
  byId("rules-version").textContent = "version " + rs.version + (rs.origin ? " (xDS version_info " + rs.origin + ")" : "");
  byId("rules-detail").textContent = "loaded " + fmtTime(rs.loaded_at) + " · " + rs.reloads + " reloads, " + rs.failures + " refused" +
    (rs.source ? " · " + rs.source : "");
  const refused = byId("refused");
  refused.hidden = !(rs.errors && rs.errors.length);
  if (!refused.hidden) {
    byId("refused-at").textContent = "At " + fmtTime(rs.last_error_at) + " an edit was refused; the rules of version " +
      rs.version + " stay in force.";
    const ul = byId("refused-errors");
    while (ul.firstChild) ul.removeChild(ul.firstChild);
    for (const e of rs.errors) ul.appendChild(el("li", "", e));
  }
  const warn = byId("warnings");
  warn.hidden = !(rs.warnings && rs.warnings.length);
  const wl = byId("warning-list");
  while (wl.firstChild) wl.removeChild(wl.firstChild);
  for (const w of rs.warnings || []) wl.appendChild(el("li", "", w));

  const st = snap.store;
  const health = byId("store-health");
  health.textContent = (st.name || "store") + (st.healthy ? " healthy" : " unhealthy") + (st.reached ? "" : ", not reached yet");
  health.className = "v " + (st.healthy ? "good" : "bad");
  byId("store-detail").textContent = st.detail || "";

  const dec = (code) => (s) => s.decisions[code] || 0;
  const prev = since();
  if (prev) {
    const ok = rate(prev, snap, dec("ok")), over = rate(prev, snap, dec("over_limit"));
    byId("dec-ok").textContent = fmtRate(ok); byId("dec-ok").dataset.value = String(ok);
    byId("dec-over").textContent = fmtRate(over); byId("dec-over").dataset.value = String(over);
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
  chart(byId("dec-chart"), [rates(dec("ok")), rates(dec("over_limit"))], ["ok", "over"]);
  const lat = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1].store, b = history[i].store;
    lat.push(b.calls > a.calls ? (b.seconds - a.seconds) / (b.calls - a.calls) : NaN);
  }
  chart(byId("store-chart"), [lat], ["ok"]);
  byId("values-note").textContent = snap.show_values
    ? "This listener shows the request values of detailed_metric and value_to_metric rules' hot counters."
    : "Request values are hidden here: hot counters show the rule and a fingerprint (values: the debug listener's /ui/, loopback by default).";
}

async function poll() {
  let wait = 1000;
  try {
    const resp = await fetch("api/snapshot", { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()));
    const snap = await resp.json();
    wait = snap.interval_ms || wait;
    history.push(snap);
    if (history.length > KEEP) history.shift();
    const shape = snap.rules.version + "|" + (snap.domains || []).map((d) => d.rules.map((r) => r.path).join(",")).join(";");
    if (shape !== structure) { buildRules(snap); structure = shape; }
    updateHeader(snap);
    updateRules(snap);
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
