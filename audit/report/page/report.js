// airlock audit report: draws the embedded aggregates and filters them.
// Everything here reads #report-data; nothing is fetched. Text from the log
// is only ever set with textContent, never parsed as markup, and always
// through shown().
(function () {
  "use strict";
  var R = JSON.parse(document.getElementById("report-data").textContent);
  var D = R.cells.dict;
  var C = R.cells.columns, T = R.timeline.columns;
  var ci = {}, ti = {};
  C.forEach(function (c, i) { ci[c] = i; });
  T.forEach(function (c, i) { ti[c] = i; });
  var topN = (R.scope.caps && R.scope.caps.top_n) || 50;
  var OTHER = "(other)";
  var state = { sandbox: "", kind: "", decision: "", from: 0, to: Math.max(R.timeline.buckets - 1, 0) };

  // shown writes text as Go's termtext.Escape does: a backslash, a control,
  // a bidi override, isolate or mark, or an invisible or unprintable
  // character becomes an escape naming it (\x1b, \u202e), so a value from
  // the log cannot reorder or hide what the page shows.
  var UNSAFE = /[\\\p{C}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu;
  function hex(n, w) { var h = n.toString(16); while (h.length < w) h = "0" + h; return h; }
  function shown(text) {
    return String(text).replace(UNSAFE, function (c) {
      var cp = c.codePointAt(0);
      if (c === "\\") return "\\\\";
      if (c === "\t") return "\\t";
      if (c === "\n") return "\\n";
      if (c === "\r") return "\\r";
      if (cp < 0x80) return "\\x" + hex(cp, 2);
      if (cp <= 0xffff) return "\\u" + hex(cp, 4);
      return "\\U" + hex(cp, 8);
    });
  }
  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) { for (var k in attrs) { if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]); } }
    if (text !== undefined && text !== null) e.textContent = shown(text);
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = shown(text);
    return e;
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function bytes(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, v = Number(n);
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return i === 0 ? v + " B" : v.toFixed(1) + " " + u[i];
  }
  function bucketTime(i) {
    var start = Date.parse(R.timeline.start);
    return new Date(start + i * R.timeline.bucket_seconds * 1000).toISOString().replace(".000Z", "Z");
  }
  function matches(row, cols) {
    return (!state.sandbox || D.sandbox[row[cols.sandbox]] === state.sandbox) &&
      (!state.kind || D.kind[row[cols.kind]] === state.kind) &&
      (!state.decision || D.decision[row[cols.decision]] === state.decision);
  }
  function timeFiltered() { return state.from > 0 || state.to < R.timeline.buckets - 1; }
  function zero() { return { allowed: 0, denied: 0, would_deny: 0, errors: 0, bytes_up: 0, bytes_down: 0 }; }
  var countFields = ["allowed", "denied", "would_deny", "errors", "bytes_up", "bytes_down"];
  function addTo(c, dec, n, up, down) {
    if (dec === "allow") c.allowed += n; else if (dec === "deny") c.denied += n; else if (dec === "would_deny") c.would_deny += n; else c.errors += n;
    c.bytes_up += up; c.bytes_down += down;
  }
  function requests(c) { return c.allowed + c.denied + c.would_deny + c.errors; }

  // groupBy sums the filtered cells (or timeline rows) by key(row).
  function groupCells(key) {
    var out = {};
    R.cells.rows.forEach(function (r) {
      if (!matches(r, ci)) return;
      var k = key(r);
      out[k] = out[k] || zero();
      addTo(out[k], D.decision[r[ci.decision]], r[ci.count], r[ci.bytes_up], r[ci.bytes_down]);
    });
    return out;
  }
  function groupTimeline(key) {
    var out = {};
    R.timeline.rows.forEach(function (r) {
      if (!matches(r, ti) || r[ti.bucket] < state.from || r[ti.bucket] > state.to) return;
      var k = key(r);
      out[k] = out[k] || zero();
      addTo(out[k], D.decision[r[ti.decision]], r[ti.count], r[ti.bytes_up], r[ti.bytes_down]);
    });
    return out;
  }
  function cmpStr(a, b) { return a < b ? -1 : a > b ? 1 : 0; }

  // table renders rows into a <table> with a header; cols: [label, field, kind].
  function table(id, cols, rows, keyOf, empty) {
    var t = $(id);
    t.textContent = "";
    var head = el("tr");
    cols.forEach(function (c) { head.appendChild(el("th", c[2] === "num" || c[2] === "bytes" ? { "class": "num" } : null, c[0])); });
    t.appendChild(el("thead")).appendChild(head);
    var body = t.appendChild(el("tbody"));
    if (rows.length === 0) {
      body.appendChild(el("tr")).appendChild(el("td", { colspan: cols.length, "class": "empty" }, empty || "none"));
      return;
    }
    rows.forEach(function (r) {
      var tr = el("tr", { "data-key": keyOf ? keyOf(r) : null });
      if (keyOf && keyOf(r) === OTHER) tr.className = "other";
      cols.forEach(function (c) {
        var v = r[c[1]], kind = c[2], td;
        if (kind === "num") td = el("td", { "class": "num" + (c[1] === "denied" && v > 0 ? " deny" : ""), "data-col": c[1], "data-v": v }, num(v));
        else if (kind === "bytes") td = el("td", { "class": "num", "data-col": c[1], "data-v": v }, bytes(v));
        else if (kind === "list") td = el("td", { "data-col": c[1] }, (v || []).join(", "));
        else if (kind === "map") td = el("td", { "data-col": c[1] }, Object.keys(v || {}).sort().map(function (k) { return k + " " + v[k]; }).join(", "));
        else td = el("td", { "data-col": c[1], "class": kind === "mono" ? "mono" : null }, v === undefined ? "" : v);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }
  var countCols = [["Allowed", "allowed", "num"], ["Denied", "denied", "num"], ["Would deny (report)", "would_deny", "num"], ["Errors", "errors", "num"], ["Bytes up", "bytes_up", "bytes"], ["Bytes down", "bytes_down", "bytes"]];
  function rowsOf(groups) {
    return Object.keys(groups).map(function (k) { var c = groups[k]; c.key = k; return c; });
  }

  function renderTotals(groups) {
    var tot = zero();
    Object.keys(groups).forEach(function (k) {
      var g = groups[k];
      countFields.forEach(function (f) { tot[f] += g[f]; });
    });
    countFields.forEach(function (f) {
      var v = document.querySelector('#totals [data-k="' + f + '"] .v');
      v.setAttribute("data-v", tot[f]);
      v.textContent = f.indexOf("bytes") === 0 ? bytes(tot[f]) : num(tot[f]);
    });
  }

  function renderSandboxes() {
    var bySb = timeFiltered() ? groupTimeline(function (r) { return D.sandbox[r[ti.sandbox]]; })
      : groupCells(function (r) { return D.sandbox[r[ci.sandbox]]; });
    var rows = rowsOf(bySb).sort(function (a, b) { return cmpStr(a.key, b.key); });
    table("t-sandboxes", [["Sandbox", "key"]].concat(countCols), rows, function (r) { return r.key; }, "no records match the filter");
    renderTotals(bySb);
  }

  function renderDestinations() {
    var rows = rowsOf(groupCells(function (r) { return D.dest[r[ci.dest]]; }));
    rows.sort(function (a, b) {
      return (requests(b) - requests(a)) || ((b.bytes_up + b.bytes_down) - (a.bytes_up + a.bytes_down)) || cmpStr(a.key, b.key);
    });
    if (rows.length > topN) {
      var other = zero(); other.key = OTHER;
      rows.slice(topN).forEach(function (r) { countFields.forEach(function (f) { other[f] += r[f]; }); });
      rows = rows.slice(0, topN).concat([other]);
    }
    table("t-destinations", [["Destination", "key", "mono"]].concat(countCols), rows, function (r) { return r.key; }, "no records match the filter");
  }

  function renderDenied() {
    var m = {};
    R.cells.rows.forEach(function (r) {
      if (!matches(r, ci) || D.decision[r[ci.decision]] === "allow" || r[ci.count] === 0) return;
      var would = D.decision[r[ci.decision]] === "would_deny";
      var outcome = would ? "would deny (report: let through)" : "deny";
      var k = r[ci.dest] + " " + r[ci.reason] + " " + outcome;
      m[k] = m[k] || { destination: D.dest[r[ci.dest]], reason: D.reason[r[ci.reason]], outcome: outcome, count: 0, sbs: {},
        samples: samplesOf[D.dest[r[ci.dest]] + "\n" + D.reason[r[ci.reason]] + "\n" + (would ? "would_deny" : "deny")] || [] };
      m[k].count += r[ci.count];
      m[k].sbs[r[ci.sandbox]] = true;
    });
    var rows = Object.keys(m).map(function (k) { var x = m[k]; x.sandboxes = Object.keys(x.sbs).length; return x; });
    rows.sort(function (a, b) { return (b.count - a.count) || cmpStr(a.destination, b.destination) || cmpStr(a.reason, b.reason); });
    if (rows.length > topN) {
      var other = { destination: OTHER, reason: OTHER, count: 0, sandboxes: "" };
      rows.slice(topN).forEach(function (r) { other.count += r.count; });
      rows = rows.slice(0, topN).concat([other]);
    }
    table("t-denied", [["Destination", "destination", "mono"], ["Reason id", "reason", "mono"], ["Outcome", "outcome"], ["Requests", "count", "num"], ["Sandboxes", "sandboxes"], ["Samples", "samples", "list"]],
      rows, function (r) { return r.destination + " " + r.reason + " " + r.outcome; }, "no denials match the filter");
  }

  function bySandbox(rows) { return rows.filter(function (r) { return !state.sandbox || r.sandbox === state.sandbox; }); }

  function renderDNS() {
    $("dns-summary").textContent = num(R.dns.queries) + " DNS questions in the selection, " + num(R.dns.flagged) +
      " logged one by one with at least one flag (high_entropy, long_label, many_unique_names, rate_limited suggest tunneling). Filtered by sandbox only.";
    table("t-dns-flags", [["Sandbox", "sandbox"], ["Flag", "flag", "mono"], ["Questions", "count", "num"], ["Of which in summaries", "summarized", "num"]],
      bySandbox(R.dns.by_flag), function (r) { return r.sandbox + " " + r.flag; }, "no flagged DNS questions");
    table("t-dns-names", [["Sandbox", "sandbox"], ["Domain", "domain", "mono"], ["Flags", "flags", "list"], ["Questions", "count", "num"], ["Refused", "denied", "num"], ["Distinct names", "distinct_names", "num"], ["Example", "example", "mono"]],
      bySandbox(R.dns.names), function (r) { return r.sandbox + " " + r.domain; }, "no flagged domains");
  }

  var samplesOf = {};
  (R.top_denied || []).forEach(function (r) { samplesOf[r.destination + "\n" + r.reason + "\n" + r.outcome] = r.samples || []; });

  function renderRest() {
    table("t-who", [["Sandbox", "sandbox"], ["Owner uid", "owner"], ["Labels", "labels", "map"], ["Pod", "pod_text"], ["Execs", "execs", "num"], ["Commands", "argv", "list"]],
      bySandbox((R.who || []).map(function (r) {
        var p = r.pod;
        r.pod_text = p ? (p.namespace || "") + "/" + (p.name || "") + (p.service_account ? " (" + p.service_account + ")" : "") : "";
        return r;
      })), function (r) { return r.sandbox; }, "no sandbox records");
    table("t-bypass", [["Sandbox", "sandbox"], ["Destination", "destination", "mono"], ["How", "how"], ["Outcome", "outcome"], ["Connections", "count", "num"]],
      bySandbox(R.bypass || []), function (r) { return r.sandbox + " " + r.destination + " " + r.how + " " + r.outcome; }, "no attempt to get around the proxy");
    table("t-findings", [["Detector", "detector", "mono"], ["Class", "class"], ["Where", "where", "mono"], ["Destination", "destination", "mono"], ["Sandbox", "sandbox"], ["Decision", "decision"], ["Requests", "count", "num"], ["Values", "values", "num"], ["First", "first"], ["Last", "last"]],
      bySandbox(R.findings || []), function (r) { return r.detector + " " + r.destination + " " + r.sandbox; }, "content inspection found nothing");
    table("t-secrets", [["Sandbox", "sandbox"], ["Secret", "id", "mono"], ["Version", "version", "mono"], ["Fingerprint", "fingerprint", "mono"], ["Where", "where"], ["Destination", "destination", "mono"], ["Decision", "decision"], ["Uses", "count", "num"], ["First", "first"], ["Last", "last"]],
      bySandbox(R.secrets), function (r) { return r.sandbox + " " + r.id + " " + r.destination; }, "no secret was injected");
    table("t-drops", [["Sandbox", "sandbox"], ["Logged", "logged", "num"], ["Summarized", "suppressed", "num"]],
      bySandbox(R.drops), function (r) { return r.sandbox; }, "no dropped packets");
    table("t-budgets", [["Sandbox", "sandbox"], ["Source", "source"], ["Summary records", "summaries", "num"], ["Events counted", "events", "num"], ["By decision", "by_decision", "map"], ["By reason", "by_reason", "map"], ["Final", "final"], ["First", "first"], ["Last", "last"]],
      bySandbox(R.budgets), function (r) { return r.sandbox + " " + r.source; }, "no sandbox went over its audit budget");
    table("t-events", [["Seq", "seq", "num"], ["Time", "ts"], ["Kind", "kind"], ["Detail", "detail", "mono"]],
      R.events, function (r) { return String(r.seq); }, "none");
  }

  function renderTimeline() {
    var box = $("timeline");
    box.textContent = "";
    var n = R.timeline.buckets;
    if (!n) { box.appendChild(el("p", { "class": "empty" }, "no timestamped decisions")); return; }
    var b = [];
    for (var i = 0; i < n; i++) b.push(zero());
    R.timeline.rows.forEach(function (r) {
      if (!matches(r, ti)) return;
      addTo(b[r[ti.bucket]], D.decision[r[ti.decision]], r[ti.count], 0, 0);
    });
    var W = 960, H = 180, L = 48, B = 34, top = 10, peak = 1;
    b.forEach(function (x) { peak = Math.max(peak, requests(x)); });
    var bw = (W - L - 8) / n, s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "decisions per bucket" });
    var plotH = H - B - top;
    s.appendChild(svg("rect", { x: L, y: top, width: W - L - 8, height: plotH, fill: "#fcfcfc" }));
    if (timeFiltered()) {
      s.appendChild(svg("rect", { x: L + state.from * bw, y: top, width: (state.to - state.from + 1) * bw, height: plotH, fill: "#e3f2fd" }));
    }
    s.appendChild(svg("text", { x: L - 4, y: top + 10, "text-anchor": "end", "font-size": 10, fill: "#666" }, num(peak)));
    s.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end", "font-size": 10, fill: "#666" }, "0"));
    b.forEach(function (x, i) {
      var y = H - B, g = svg("g", { "class": "bucket", "data-bucket": i, "data-allowed": x.allowed, "data-denied": x.denied, "data-would-deny": x.would_deny, "data-errors": x.errors });
      [["allowed", "#2e7d32"], ["would_deny", "#8e24aa"], ["errors", "#ef6c00"], ["denied", "#c62828"]].forEach(function (p) {
        if (!x[p[0]]) return;
        var h = Math.max(1, x[p[0]] / peak * plotH);
        y -= h;
        g.appendChild(svg("rect", { x: L + i * bw + 0.5, y: y, width: Math.max(1, bw - 1), height: h, fill: p[1] }));
      });
      g.appendChild(svg("title", {}, bucketTime(i) + ": " + x.allowed + " allowed, " + x.denied + " denied, " + x.would_deny + " would deny (report), " + x.errors + " errors"));
      if (x.denied > 0) {
        var cx = L + (i + 0.5) * bw;
        g.appendChild(svg("path", { "class": "deny-mark", d: "M" + cx + " " + (H - B + 3) + " l4 7 h-8 z", fill: "#c62828" }));
      }
      s.appendChild(g);
    });
    s.appendChild(svg("text", { x: L, y: H - 6, "font-size": 10, fill: "#666" }, bucketTime(0)));
    s.appendChild(svg("text", { x: W - 8, y: H - 6, "text-anchor": "end", "font-size": 10, fill: "#666" }, bucketTime(n - 1)));
    box.appendChild(s);
    $("tl-bucket").textContent = "Bucket: " + R.timeline.bucket_seconds + " s; " + n + " buckets.";
  }

  function fillSelect(id, values) {
    var s = $(id);
    values.slice().sort().forEach(function (v) { s.appendChild(el("option", { value: v }, v)); });
  }
  function fillTimes() {
    ["f-from", "f-to"].forEach(function (id) {
      var s = $(id);
      s.textContent = "";
      for (var i = 0; i < Math.max(R.timeline.buckets, 1); i++) s.appendChild(el("option", { value: i }, R.timeline.buckets ? bucketTime(i) : "-"));
    });
    $("f-to").value = String(state.to);
  }
  function describe() {
    var parts = [];
    if (state.sandbox) parts.push("sandbox " + state.sandbox);
    if (state.kind) parts.push("kind " + state.kind);
    if (state.decision) parts.push("decision " + state.decision);
    if (timeFiltered()) parts.push("time " + bucketTime(state.from) + " to the end of " + bucketTime(state.to));
    $("f-state").textContent = parts.length ? shown("Showing " + parts.join(", ") + ".") : "No filter (all records).";
  }
  function render() {
    describe();
    renderTimeline();
    renderSandboxes();
    renderDestinations();
    renderDenied();
    renderDNS();
    renderRest();
    document.body.setAttribute("data-rendered", "1");
  }
  function read() {
    state.sandbox = $("f-sandbox").value;
    state.kind = $("f-kind").value;
    state.decision = $("f-decision").value;
    state.from = Number($("f-from").value) || 0;
    state.to = Math.max(state.from, Number($("f-to").value) || 0);
    render();
  }

  fillSelect("f-sandbox", D.sandbox);
  fillSelect("f-kind", D.kind);
  fillSelect("f-decision", D.decision);
  fillTimes();
  ["f-sandbox", "f-kind", "f-decision", "f-from", "f-to"].forEach(function (id) { $(id).addEventListener("change", read); });
  $("f-reset").addEventListener("click", function () {
    ["f-sandbox", "f-kind", "f-decision"].forEach(function (id) { $(id).value = ""; });
    $("f-from").value = "0";
    $("f-to").value = String(Math.max(R.timeline.buckets - 1, 0));
    read();
  });
  render();
})();
