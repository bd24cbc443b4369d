// The live queue dashboard: renders each scheduler snapshot pushed over the staff WebSocket as
// tables and as SVG line charts over the last few minutes. Plain DOM, SVG and textContent only
// (no innerHTML of data), no dependencies (no CDN is reachable where it runs), reconnects on loss.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  const BANDS = JSON.parse(document.getElementById("band-names").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const WINDOW_MS = 5 * 60 * 1000;  // what the charts show at most
  const MIN_SPAN_MS = 30 * 1000;  // ... and at least, while the page has seen less
  const opened = Date.now();
  const SAMPLE_MS = 1000;  // one point a second from the latest snapshot, changed or not
  const COLORS = ["#417690", "#b5525c", "#2e7d32", "#d08c1a", "#7b4fa0", "#4a8f8c", "#8a6d3b",
    "#555"];
  const MAX_SERIES = 8;  // principals beyond this are summed as "others"
  let count = 0;
  let latest = null;
  const samples = [];  // {t, snap}: wall-clock time in ms and the snapshot then current
  const ttftPoints = [];  // {t, band, mean}: first tokens seen between two updates

  function bandName(b) { return BANDS[b] || String(b); }

  function cell(row, value, cls) {
    const td = document.createElement("td");
    td.textContent = value === null || value === undefined ? "-" : String(value);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function fill(id, rows, render, empty) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    if (!rows.length) {
      const tr = body.insertRow();
      const td = cell(tr, empty);
      td.colSpan = 9;
      return;
    }
    rows.forEach(function (r) { render(body.insertRow(), r); });
  }

  function pct(x) { return x === null || x === undefined ? "-" : (x * 100).toFixed(0) + "%"; }
  function ms(x, digits) {
    return x === null || x === undefined ? "-" : (x * 1000).toFixed(digits || 0) + " ms";
  }
  function clock(t) { return new Date(t).toLocaleTimeString([], { hour12: false }); }

  // Charts ------------------------------------------------------------------------------------

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    const m = [1, 2, 5, 10].find(function (f) { return f * p >= v; });
    return m * p;
  }

  // series: [{name, points: [[t, v]], dashed}]; strips: [{name, spans: [[t0, t1, ok]]}] drawn
  // under the plot (the gate state); unit formats the y axis.
  function lineChart(id, series, strips, unit, now) {
    const svg = document.getElementById(id);
    const W = 600, H = 200, L = 48, R = 8, T = 8, stripH = 10;
    const plotB = H - 22 - strips.length * (stripH + 2) - (strips.length ? 4 : 0);
    const t0 = Math.max(now - WINDOW_MS, Math.min(opened, now - MIN_SPAN_MS));
    const span = now - t0;
    svg.replaceChildren();
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    let top = 0;
    series.forEach(function (s) { s.points.forEach(function (p) { top = Math.max(top, p[1]); }); });
    top = niceMax(top);
    const x = function (t) { return L + (W - L - R) * (t - t0) / span; };
    const y = function (v) { return plotB - (plotB - T) * v / top; };
    [0, 0.5, 1].forEach(function (f) {
      el("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: "grid" }, svg);
      el("text", { x: L - 4, y: y(top * f) + 4, "text-anchor": "end" }, svg).textContent =
        unit(top * f);
    });
    for (let m = 0; m <= 4; m++) {
      const t = t0 + m * span / 4;
      el("text", { x: x(t), y: H - 4, "text-anchor": m === 0 ? "start" : m === 4 ? "end" : "middle" },
        svg).textContent = clock(t);
    }
    series.forEach(function (s, i) {
      const pts = s.points.filter(function (p) { return p[0] >= t0; });
      if (!pts.length) return;
      const d = pts.map(function (p, j) {
        return (j ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1);
      }).join("");
      const path = el("path", { d: d, class: "series", stroke: COLORS[i % COLORS.length] }, svg);
      if (s.dashed) path.setAttribute("stroke-dasharray", "4 3");
      el("title", {}, path).textContent = s.name;
      const last = pts[pts.length - 1];  // the current value, visible from the first point on
      el("circle", { cx: x(last[0]), cy: y(last[1]), r: 2.5, fill: COLORS[i % COLORS.length] }, svg);
    });
    strips.forEach(function (s, i) {
      const yy = plotB + 8 + i * (stripH + 2);
      el("text", { x: L - 4, y: yy + stripH - 1, "text-anchor": "end", class: "strip-label" }, svg)
        .textContent = s.name;
      s.spans.forEach(function (sp) {
        const a = Math.max(x(sp[0]), L), b = x(sp[1]);
        if (b <= a) return;
        el("rect", { x: a, y: yy, width: b - a, height: stripH,
          class: sp[2] ? "strip-open" : "strip-closed" }, svg);
      });
    });
    legend(id + "-legend", series);
    svg.dataset.updates = String(Number(svg.dataset.updates || 0) + 1);
  }

  function legend(id, series) {
    const box = document.getElementById(id);
    box.replaceChildren();
    series.forEach(function (s, i) {
      const item = document.createElement("span");
      item.className = "legend-item";
      item.style.borderColor = COLORS[i % COLORS.length];
      if (s.dashed) item.style.borderLeftStyle = "dashed";
      item.textContent = s.name;
      box.appendChild(item);
    });
  }

  // One series per key, a point per sample; value(snap) maps keys to numbers for one sample.
  function seriesOf(value, order) {
    const byKey = new Map();
    samples.forEach(function (s) {
      const values = value(s.snap);
      const keys = new Set(Array.from(byKey.keys()).concat(Object.keys(values)));
      keys.forEach(function (k) {
        if (!byKey.has(k)) byKey.set(k, []);
        byKey.get(k).push([s.t, values[k] || 0]);
      });
    });
    const keys = Array.from(byKey.keys()).sort(order);
    return keys.map(function (k) { return { name: k, points: byKey.get(k) }; });
  }

  function depthPerBand(snap) {
    const out = {};
    (snap.queues || []).forEach(function (q) {
      const k = bandName(q.band);
      out[k] = (out[k] || 0) + q.depth;
    });
    return out;
  }

  function depthPerPrincipal(snap) {
    const all = {};
    (snap.queues || []).forEach(function (q) {
      const k = q.tenant + "/" + q.user;
      all[k] = (all[k] || 0) + q.depth;
    });
    const keys = Object.keys(all).sort(function (a, b) { return all[b] - all[a]; });
    const out = {};
    keys.forEach(function (k, i) {
      const name = i < MAX_SERIES - 1 ? k : "others";
      out[name] = (out[name] || 0) + all[k];
    });
    return out;
  }

  function inFlightPerBackend(snap) {
    const out = {};
    (snap.backends || []).forEach(function (b) {
      out[b.name + " in flight"] = b.in_flight;
      out[b.name + " capacity"] = b.capacity === null || b.capacity === undefined ?
        b.max_in_flight : b.capacity;
    });
    return out;
  }

  // Per band: open while at least one backend's gate for it is open.
  function gateStrips() {
    const bands = new Set();
    samples.forEach(function (s) {
      (s.snap.backends || []).forEach(function (b) {
        (b.gates || []).forEach(function (g) { bands.add(g.band); });
      });
    });
    return Array.from(bands).sort().map(function (band) {
      const spans = samples.map(function (s, i) {
        const gates = [];
        (s.snap.backends || []).forEach(function (b) {
          (b.gates || []).forEach(function (g) { if (g.band === band) gates.push(g.open); });
        });
        const end = i + 1 < samples.length ? samples[i + 1].t : s.t + SAMPLE_MS;
        return [s.t, end, gates.some(Boolean)];
      });
      return { name: bandName(band), spans: spans };
    });
  }

  function byName(a, b) { return a < b ? -1 : a > b ? 1 : 0; }

  function drawCharts(now) {
    lineChart("chart-bands", seriesOf(depthPerBand, byName), gateStrips(), String, now);
    lineChart("chart-principals", seriesOf(depthPerPrincipal, byName), [], String, now);
    const backends = seriesOf(inFlightPerBackend, byName);
    backends.forEach(function (s) { s.dashed = / capacity$/.test(s.name); });
    lineChart("chart-backends", backends, [], String, now);
    const ttft = {};
    ttftPoints.forEach(function (p) {
      const k = bandName(p.band);
      (ttft[k] = ttft[k] || []).push([p.t, p.mean]);
    });
    lineChart("chart-ttft", Object.keys(ttft).sort().map(function (k) {
      return { name: k + " (mean)", points: ttft[k] };
    }), [], function (v) { return v.toFixed(2) + " s"; }, now);
  }

  function sample() {
    const now = Date.now();
    if (latest !== null) samples.push({ t: now, snap: latest });
    while (samples.length && samples[0].t < now - WINDOW_MS) samples.shift();
    while (ttftPoints.length && ttftPoints[0].t < now - WINDOW_MS) ttftPoints.shift();
    drawCharts(now);
  }

  // Tables ------------------------------------------------------------------------------------

  function render(snap) {
    count += 1;
    latest = snap;
    const wall = snap.wall ? snap.wall * 1000 : Date.now();
    Object.keys(snap.ttft || {}).forEach(function (band) {
      ttftPoints.push({ t: wall, band: Number(band), mean: snap.ttft[band].mean });
    });
    sample();  // a point per update as well as one a second: changes show at once
    document.getElementById("dash-count").textContent = String(count);
    document.getElementById("dash-at").textContent = clock(wall);
    const t = snap.totals || {};
    fill("dash-totals", [t], function (tr, r) {
      ["queued", "in_flight", "dispatched", "completed", "cancelled", "expired", "rejected"]
        .forEach(function (k) { cell(tr, r[k]); });
    }, "");
    fill("dash-queues", snap.queues || [], function (tr, q) {
      cell(tr, q.model); cell(tr, bandName(q.band)); cell(tr, q.tenant); cell(tr, q.user);
      const d = cell(tr, q.depth + " ");
      const bar = document.createElement("span");
      bar.className = "depth-bar";
      bar.style.width = Math.min(q.depth * 6, 120) + "px";
      d.appendChild(bar);
      cell(tr, q.in_flight); cell(tr, Number(q.service).toFixed(1));
      cell(tr, q.waiting_reason || "", "why");
    }, "No queued or running requests.");
    fill("dash-backends", snap.backends || [], function (tr, b) {
      const m = b.metrics || {};
      if (b.stale) tr.className = "stale";
      cell(tr, b.name + (b.stale ? " (stale)" : ""));
      cell(tr, (b.models || []).join(", "));
      cell(tr, b.in_flight + " / " + b.max_in_flight);
      cell(tr, b.has_metrics ? m.waiting : "n/a"); cell(tr, b.has_metrics ? m.running : "n/a");
      cell(tr, pct(m.kv_cache_usage)); cell(tr, ms(m.tpot_seconds));
      cell(tr, ms(b.step_seconds)); cell(tr, ms(b.prefill_seconds_per_token, 3));
      const g = cell(tr, "", "gates");
      (b.gates || []).forEach(function (gate) {
        const s = document.createElement("span");
        s.className = gate.open ? "gate-open" : "gate-closed";
        s.title = gate.reason || "";
        s.textContent = bandName(gate.band) + (gate.open ? " open" : " closed: " + gate.reason);
        g.appendChild(s);
      });
    }, "No backends.");
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + root.dataset.wsPath);
    const conn = document.getElementById("dash-conn");
    ws.onopen = function () { conn.textContent = "live"; };
    ws.onmessage = function (ev) {
      const msg = JSON.parse(ev.data);
      if (msg.type === "snapshot") render(msg.snapshot);
    };
    ws.onclose = function (ev) {
      conn.textContent = ev.code === 4403 ? "refused (staff only)" : "reconnecting";
      if (ev.code !== 4403) setTimeout(connect, 2000);
    };
  }
  connect();
  setInterval(sample, SAMPLE_MS);
})();
