// The live queue dashboard: renders each scheduler snapshot pushed over the staff WebSocket.
// Plain DOM and textContent only (no innerHTML of data), no dependencies, reconnects on loss.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  const BANDS = JSON.parse(document.getElementById("band-names").textContent);
  let count = 0;

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
      td.colSpan = 8;
      return;
    }
    rows.forEach(function (r) { render(body.insertRow(), r); });
  }

  function pct(x) { return x === null || x === undefined ? "-" : (x * 100).toFixed(0) + "%"; }
  function ms(x) { return x === null || x === undefined ? "-" : (x * 1000).toFixed(0) + " ms"; }

  function render(snap) {
    count += 1;
    document.getElementById("dash-count").textContent = String(count);
    document.getElementById("dash-at").textContent = new Date(snap.at * 1000).toLocaleTimeString();
    const t = snap.totals || {};
    fill("dash-totals", [t], function (tr, r) {
      ["queued", "in_flight", "dispatched", "completed", "cancelled", "expired", "rejected"]
        .forEach(function (k) { cell(tr, r[k]); });
    }, "");
    fill("dash-queues", snap.queues || [], function (tr, q) {
      cell(tr, q.model); cell(tr, BANDS[q.band] || q.band); cell(tr, q.tenant); cell(tr, q.user);
      const d = cell(tr, q.depth + " ");
      const bar = document.createElement("span");
      bar.className = "depth-bar";
      bar.style.width = Math.min(q.depth * 6, 120) + "px";
      d.appendChild(bar);
      cell(tr, q.in_flight); cell(tr, Number(q.service).toFixed(1));
    }, "No queued or running requests.");
    fill("dash-backends", snap.backends || [], function (tr, b) {
      const m = b.metrics || {};
      if (b.stale) tr.className = "stale";
      cell(tr, b.name + (b.stale ? " (stale)" : ""));
      cell(tr, (b.models || []).join(", "));
      cell(tr, b.in_flight + " / " + b.max_in_flight);
      cell(tr, b.has_metrics ? m.waiting : "n/a"); cell(tr, b.has_metrics ? m.running : "n/a");
      cell(tr, pct(m.kv_cache_usage)); cell(tr, ms(m.tpot_seconds));
      const g = cell(tr, "");
      (b.gates || []).forEach(function (gate) {
        const s = document.createElement("span");
        s.className = gate.open ? "gate-open" : "gate-closed";
        s.title = gate.reason || "";
        s.textContent = (BANDS[gate.band] || gate.band) + (gate.open ? " open " : " closed ");
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
})();
