// xdpshield workbench: plain JavaScript, no library. Live data arrives as
// Server-Sent Events (events); changes carry the session's CSRF token.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const WINDOW = 120; // seconds on the charts
  const fmt = (x) => x >= 1e6 ? (x / 1e6).toFixed(2) + "M" : x >= 1e4 ? (x / 1e3).toFixed(1) + "k" : (Math.round(x * 10) / 10).toString();
  let session = { signed_in: false };
  const traffic = { pass: [], drop: [] };
  const storm = { drop: [], p50: [], p99: [] };
  let stormStarted = 0;

  function text(id, v) { $(id).textContent = v; }

  function push(series, t, v) {
    series.push([t, v]);
    while (series.length && series[0][0] < t - WINDOW * 1000) series.shift();
  }

  // chart draws series ([{label, color, pts, right}]) on a canvas: a left
  // axis in unitL and, for series marked right, a right axis in unitR.
  function chart(canvas, series, unitL, unitR) {
    // Drawn at the size shown, so the labels stay legible on a phone.
    const cw = Math.max(280, Math.round(canvas.clientWidth || canvas.width));
    if (canvas.width !== cw) { canvas.width = cw; canvas.height = Math.max(180, Math.min(260, Math.round(cw * 0.3))); }
    const ctx = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, L = 56, R = unitR ? 56 : 12, T = 22, B = 24;
    ctx.clearRect(0, 0, W, H);
    ctx.font = "12px sans-serif";
    const now = Date.now();
    const max = (right) => {
      let m = 0;
      for (const s of series) if (!!s.right === right) for (const p of s.pts) m = Math.max(m, p[1]);
      return m > 0 ? m * 1.1 : 1;
    };
    const mL = max(false), mR = max(true);
    ctx.strokeStyle = "#999"; ctx.fillStyle = "#333";
    ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W - R, H - B); ctx.stroke();
    for (let i = 0; i <= 4; i++) {
      const y = H - B - (H - B - T) * i / 4;
      ctx.fillText(fmt(mL * i / 4), 4, y + 4);
      if (unitR) ctx.fillText(fmt(mR * i / 4), W - R + 6, y + 4);
    }
    ctx.fillText(unitL, 4, 14);
    if (unitR) ctx.fillText(unitR, W - R + 6, 14);
    ctx.fillText("-" + WINDOW + " s", L, H - 6);
    ctx.fillText("now", W - R - 24, H - 6);
    let lx = L + 10;
    for (const s of series) {
      const m = s.right ? mR : mL;
      ctx.strokeStyle = s.color; ctx.lineWidth = 2; ctx.beginPath();
      s.pts.forEach((p, i) => {
        const x = L + (W - L - R) * (1 - (now - p[0]) / (WINDOW * 1000));
        const y = H - B - (H - B - T) * p[1] / m;
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke(); ctx.lineWidth = 1;
      ctx.fillStyle = s.color; ctx.fillRect(lx + 40, 6, 10, 10);
      ctx.fillStyle = "#333"; ctx.fillText(s.label, lx + 54, 15);
      lx += 40 + ctx.measureText(s.label).width + 30;
    }
  }

  function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function rows(tbody, data) {
    tbody.replaceChildren(...data.map((cells) => {
      const tr = document.createElement("tr");
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        if (typeof c === "number" || /^[0-9.kM]+$/.test(c)) td.className = "n";
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  function onSample(s) {
    const t = s.at;
    push(traffic.pass, t, s.pps.pass || 0);
    push(traffic.drop, t, s.pps.drop || 0);
    text("pass-pps", fmt(s.pps.pass || 0));
    text("drop-pps", fmt(s.pps.drop || 0));
    text("total-pass", s.totals.pass);
    text("total-drop", s.totals.drop);
    rows($("rates").tBodies[0], s.rates.map((r) => [r.verdict, r.reason, fmt(r.pps)]));
    $("occupancy").value = s.capacity ? s.tracked / s.capacity : 0;
    text("occupancy-text", s.tracked + " of " + s.capacity + " sources (" + (s.capacity ? (100 * s.tracked / s.capacity).toFixed(1) : 0) + " %)");
    text("list-allow", s.lists.allow ?? "–");
    text("list-deny", s.lists.deny ?? "–");
    text("limits", JSON.stringify(s.limits, null, 2));
    rows($("top").tBodies[0], s.top.map((x) => [x.prefix, x.passed, x.dropped, x.limited ? "yes" : "no"]));
    chart($("chart-pps"), [
      { label: "passed", color: css("--pass"), pts: traffic.pass },
      { label: "dropped", color: css("--drop"), pts: traffic.drop },
    ], "pps");
    onStorm(s.storm, t);
    text("live", "live · " + new Date(t).toLocaleTimeString() + (s.error ? " · " + s.error : ""));
  }

  function onStorm(st, t) {
    if (!st) return;
    if (st.started && st.started !== stormStarted) {
      stormStarted = st.started;
      storm.drop.length = storm.p50.length = storm.p99.length = 0;
    }
    const ol = $("storm-phases");
    ol.replaceChildren(...st.phases.map((p, i) => {
      const li = document.createElement("li");
      li.textContent = p;
      if (st.running && i === st.phases.length - 1) { li.className = "now"; li.setAttribute("aria-current", "step"); }
      return li;
    }));
    const now = st.now;
    if (st.running && now) {
      let drop = 0;
      for (const k in now.drop_pps || {}) drop += now.drop_pps[k];
      const kind = "keep_alive";
      push(storm.drop, t, drop);
      push(storm.p50, t, (now.p50_ms || {})[kind] || 0);
      push(storm.p99, t, (now.p99_ms || {})[kind] || 0);
      text("storm-phase", now.phase + (now.shield ? "" : " (no shield)"));
      text("storm-drop", fmt(drop));
      text("storm-p50", ((now.p50_ms || {})[kind] || 0).toFixed(2));
      text("storm-p99", ((now.p99_ms || {})[kind] || 0).toFixed(2));
      text("storm-reqs", now.requests);
      text("storm-fails", now.failures);
    }
    chart($("chart-storm"), [
      { label: "dropped pps", color: css("--drop"), pts: storm.drop },
      { label: "p50 ms", color: css("--p50"), pts: storm.p50, right: true },
      { label: "p99 ms", color: css("--p99"), pts: storm.p99, right: true },
    ], "pps", "ms");
    if (st.running) text("storm-msg", "Storm running: " + st.scenario + (st.contrast ? ", with the contrast" : "") + ".");
    else if (st.done) text("storm-msg", "Storm over: " + (st.ok ? "every assertion held." : (st.error || "assertions failed: " + (st.failed || []).join("; "))));
    $("result-link").hidden = !st.has_result;
    updateStormButton(st.running);
  }

  let stormRunning = false;
  function updateStormButton(running) {
    if (running !== undefined) stormRunning = running;
    const ok = session.signed_in && !stormRunning && !session.storm_problem && session.storms_left > 0;
    $("storm-start").disabled = !ok;
    if (!session.signed_in && !stormRunning) text("storm-msg", "Sign in to start a storm.");
    else if (session.storm_problem && !stormRunning) text("storm-msg", session.storm_problem);
  }

  function setSession(s) {
    session = s;
    $("signin").hidden = s.signed_in;
    $("signedin").hidden = !s.signed_in;
    if (s.signed_in) text("session-text", "signed in until " + new Date(s.expires).toLocaleTimeString() + " · " + s.storms_left + " storms left this hour");
    updateStormButton();
  }

  async function call(method, url, body) {
    const h = { "Content-Type": "application/json" };
    if (session.csrf) h["X-CSRF-Token"] = session.csrf;
    const r = await fetch(url, { method, headers: h, body: body ? JSON.stringify(body) : undefined, credentials: "same-origin" });
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(j.error || r.statusText);
    return j;
  }

  $("signin").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      setSession(await call("POST", "signin", { token: $("signin-token").value }));
      $("signin-token").value = "";
      text("signin-msg", "");
      connect();
    } catch (err) {
      $("signin-token").value = "";
      text("signin-msg", "Sign-in refused: " + err.message);
    }
  });
  $("signout-btn").addEventListener("click", async () => {
    try { setSession(await call("POST", "signout")); } catch (err) { text("signin-msg", err.message); }
    session.csrf = undefined;
    $("signin-token").focus();
  });
  $("storm-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await call("POST", "storm", { scenario: $("storm-scenario").value, contrast: $("storm-contrast").checked });
      stormRunning = true;
      text("storm-msg", "Storm starting…");
      setSession(await call("GET", "session"));
    } catch (err) {
      text("storm-msg", "Storm refused: " + err.message);
    }
  });

  let es;
  function connect() {
    if (es) es.close();
    es = new EventSource("events");
    es.addEventListener("sample", (e) => onSample(JSON.parse(e.data)));
    es.onerror = () => text("live", session.anonymous_view || session.signed_in ? "reconnecting…" : "Sign in to see the live counters (the read-only view is off).");
  }

  fetch("session", { credentials: "same-origin" }).then((r) => r.json()).then((s) => {
    setSession(s);
    if (s.anonymous_view || s.signed_in) connect();
    else text("live", "Sign in to see the live counters (the read-only view is off).");
  });
})();
