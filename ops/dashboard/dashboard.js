// The groupsgd dashboard: polls api/state (docs/operations.md "Watching a run") twice a
// second and redraws the page: the workers' table, the groups over time, the run's
// curves (plain SVG, drawn here) and the events. With no answer the page says
// "disconnected" and keeps the last figures it had, greyed, while it retries.
'use strict';

const POLL_MS = 500;
const TIMEOUT_MS = 2000;
const COLORS = ['#1565c0', '#2e7d32', '#ef6c00', '#6a1b9a', '#c62828', '#00838f', '#9e9d24',
  '#4e342e', '#ad1457', '#283593'];
const SVG_NS = 'http://www.w3.org/2000/svg';

let lastOk = null;     // Date of the last good answer
let chosenJob = null;  // the job shown (a multi-job daemon: picked in the header)

const $ = (id) => document.getElementById(id);

function dash(v) { return v === null || v === undefined ? '-' : v; }
function fixed(v, digits) { return v === null || v === undefined ? '-' : Number(v).toFixed(digits); }
function seconds(v) {
  if (v === null || v === undefined) return '-';
  if (v < 120) return v.toFixed(1) + ' s';
  return Math.floor(v / 60) + ' min ' + Math.round(v % 60) + ' s';
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function cell(tr, text, cls) {
  const td = el('td', cls ? { class: cls } : {}, String(text));
  tr.appendChild(td);
  return td;
}

// ---- connection state --------------------------------------------------------------

function setConnected(ok, why) {
  document.body.dataset.connection = ok ? 'live' : 'disconnected';
  const c = $('connection');
  $('disconnected').hidden = ok;
  if (ok) {
    c.className = 'live';
    c.textContent = 'live';
    return;
  }
  c.className = 'down';
  c.textContent = 'disconnected';
  const since = lastOk ? ' Last update ' + ((Date.now() - lastOk) / 1000).toFixed(0) +
      ' s ago; the figures below are from then.' : ' Nothing was received yet.';
  $('disconnected-text').textContent = 'The daemon at ' + location.host + ' does not answer (' +
      why + '); retrying.' + since;
}

async function poll() {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
  try {
    const res = await fetch('api/state', { cache: 'no-store', signal: abort.signal });
    if (!res.ok) throw new Error('HTTP ' + res.status);
    const state = await res.json();
    lastOk = Date.now();
    setConnected(true);
    render(state);
    // From navigation start to the first page drawn with data (docs/benchmarks.md).
    if (!document.body.dataset.firstRenderMs) {
      document.body.dataset.firstRenderMs = performance.now().toFixed(1);
    }
  } catch (e) {
    setConnected(false, e.name === 'AbortError' ? 'timed out' : String(e.message || e));
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

// ---- rendering ---------------------------------------------------------------------

function render(state) {
  renderJobs(state.job_table, state.jobs || {});
  const names = Object.keys(state.jobs || {});
  if (!chosenJob || !names.includes(chosenJob)) chosenJob = names[0] || null;
  renderJobChoice(names);
  const job = chosenJob ? state.jobs[chosenJob] : null;
  $('footer').textContent = 'groupsgdd ' + state.daemon.version + ', pid ' + state.daemon.pid +
      ', up ' + seconds(state.daemon.uptime_s) + ' — read-only; data from ' + location.host +
      '/api/state';
  if (!job) {
    $('summary').replaceChildren(el('p', { class: 'empty' },
        state.daemon.serve ? 'no job has run yet' : 'the run has not started yet'));
    return;
  }
  $('job-title').textContent = 'Run: job ' + job.job;
  renderSummary(job);
  renderWorkers(job.workers);
  renderGroups(job);
  renderCharts(job);
  renderEvents(job.events);
}

function renderJobChoice(names) {
  const holder = $('job-choice');
  if (names.length < 2) { holder.replaceChildren(); return; }
  let select = holder.querySelector('select');
  if (!select || select.options.length !== names.length) {
    select = el('select', { id: 'job-select' });
    for (const n of names) select.appendChild(el('option', { value: n }, n));
    select.onchange = () => { chosenJob = select.value; };
    holder.replaceChildren(select);
  }
  select.value = chosenJob;
}

// A running job's progress from its own view: accuracy against its target, samples, time.
function progressText(view) {
  if (!view || !view.status) return '-';
  const s = view.status;
  const known = (v) => v !== null && v !== undefined;
  const acc = known(s.test_acc) ? 'acc ' + fixed(s.test_acc, 4) +
      (view.target_acc ? ' / ' + view.target_acc : '') : null;
  return [acc, known(s.samples_trained) ? s.samples_trained + ' samples' : null,
    known(s.elapsed_s) ? seconds(s.elapsed_s) : null].filter((x) => x).join(', ') || '-';
}

function renderJobs(table, views) {
  $('jobs-section').hidden = !table;
  if (!table) return;
  const body = $('jobs').tBodies[0];
  body.replaceChildren();
  for (const j of table.jobs) {
    const tr = el('tr', { 'data-job': j.name, 'data-state': j.state });
    cell(tr, j.name);
    cell(tr, j.state + (j.awaiting_model ? ' (awaiting model)' : ''));
    cell(tr, progressText(views[j.name]), 'text');
    cell(tr, dash(j.mode));
    cell(tr, dash(j.groups));
    cell(tr, dash(j.node_slots));
    cell(tr, j.error ? 'error: ' + j.error :
        j.stop_reason ? j.stop_reason + ', acc ' + fixed(j.final_test_acc, 4) : '-', 'text');
    body.appendChild(tr);
  }
  const s = table.group_slots || {};
  const nodes = (s.nodes || []).map((n) => 'node ' + n.id + ' (' + n.host + '): ' + n.in_use +
      '/' + n.slots).join(', ');
  $('slots').textContent = 'group PS slots: ' + dash(s.in_use) + ' of ' + dash(s.max) +
      ' in use' + (nodes ? '; ' + nodes : '');
  renderDevices(table.arbiter);
}

// ["a", "a", "b"] -> "a ×2, b": a device may have two holders (one granted ahead).
function countedNames(names) {
  const counts = new Map();
  for (const n of names) counts.set(n, (counts.get(n) || 0) + 1);
  return [...counts].map(([n, k]) => (k > 1 ? n + ' \u00d7' + k : n)).join(', ');
}

// The daemon's device arbiter (arbiter_listen): each shared device and each job's waits.
function renderDevices(arbiter) {
  $('devices-section').hidden = !arbiter;
  if (!arbiter) return;
  $('arbiter').textContent = 'device arbiter, policy ' + arbiter.policy + ': ' + arbiter.grants +
      ' leases granted' + (arbiter.expired ? ', ' + arbiter.expired + ' taken back' : '');
  const body = $('devices').tBodies[0];
  body.replaceChildren();
  for (const d of arbiter.devices) {
    const tr = el('tr', { 'data-device': d.device, 'data-holders': d.holders.join(',') });
    cell(tr, d.device);
    cell(tr, d.holders.length ? countedNames(d.holders) : 'idle', 'text');
    cell(tr, d.waiting);
    cell(tr, d.grants);
    cell(tr, fixed(d.mean_wait_ms, 1));
    cell(tr, fixed(d.held_s, 1));
    cell(tr, d.expired);
    body.appendChild(tr);
  }
  const jobs = $('lease-jobs').tBodies[0];
  jobs.replaceChildren();
  for (const j of arbiter.jobs) {
    const tr = el('tr', { 'data-lease-job': j.job });
    cell(tr, j.job);
    cell(tr, j.grants);
    cell(tr, fixed(j.mean_wait_ms, 1));
    cell(tr, fixed(j.wait_s, 1));
    cell(tr, fixed(j.held_s, 1));
    jobs.appendChild(tr);
  }
}

function renderSummary(job) {
  const s = job.status;
  const w = s.workers || {};
  const ev = s.evaluation || {};
  const cards = [
    ['state', s.state], ['mode', s.mode], ['stage', s.stage],
    ['training', seconds(s.elapsed_s)], ['trainers', (w.active || 0) + ' active' +
      (w.dead ? ', ' + w.dead + ' dead' : '') + (w.quarantined ? ', ' + w.quarantined +
      ' quarantined' : '') + (w.draining ? ', ' + w.draining + ' draining' : '')],
    ['groups', s.groups], ['regroups', s.regroups], ['samples trained', s.samples_trained],
    ['central version', s.central_version], ['test accuracy', fixed(s.test_acc, 4) +
      (job.target_acc ? ' / ' + job.target_acc : '')],
    ['test loss', fixed(s.test_loss, 4)],
    ['failed groups', (s.failed_groups || []).length ? s.failed_groups.join(', ') : 'none'],
    ['evaluator', dash(ev.state) + (ev.unmeasured_for_s !== null &&
      ev.unmeasured_for_s !== undefined ? ', no accuracy for ' + seconds(ev.unmeasured_for_s) :
      '') + (ev.evaluators_lost ? ', ' + ev.evaluators_lost + ' lost' : '')],
  ];
  $('summary').replaceChildren(...cards.map(([k, v]) => {
    const c = el('div', { class: 'card', 'data-key': k });
    c.appendChild(el('div', { class: 'k' }, k));
    c.appendChild(el('div', { class: 'v' }, String(dash(v))));
    return c;
  }));
}

function renderWorkers(workers) {
  const body = $('workers').tBodies[0];
  body.replaceChildren();
  for (const w of workers) {
    const st = w.straggler;
    const tr = el('tr', { 'data-worker': w.name, 'data-role': w.role, 'data-state': w.state,
      'data-straggler': st ? st.state : 'no' });
    cell(tr, w.name);
    cell(tr, w.role);
    cell(tr, w.state);
    cell(tr, dash(w.group));
    cell(tr, dash(w.batch));
    cell(tr, fixed(w.step_ms, 1));
    cell(tr, w.role === 'evaluator' ? '-' : fixed(w.speed_sps, 0));
    const s = cell(tr, st ? st.state : '-', 'text');
    if (st) {
      s.className = 'text ' + (st.state === 'flagged' ? 'flag' : 'recovered');
      s.title = st.reason;
      s.textContent = st.state + ' at ' + seconds(st.t_s) + ': ' + st.reason;
    }
    cell(tr, w.role === 'evaluator' ? 'acc ' + fixed(w.test_acc, 4) : dash(w.samples_trained));
    cell(tr, seconds(w.last_heartbeat_s) + ' ago');
    body.appendChild(tr);
  }
}

function renderGroups(job) {
  const body = $('groups').tBodies[0];
  body.replaceChildren();
  const names = new Map(job.workers.map((w) => [w.id, w.name]));
  for (const g of job.groups) {
    const tr = el('tr', { 'data-group': g.group });
    cell(tr, g.group);
    cell(tr, g.workers.map((id) => names.get(id) || id).join(', ') || '-', 'text');
    cell(tr, g.batch);
    cell(tr, g.exchange_period);
    cell(tr, fixed(g.lr, 4));
    cell(tr, g.failed ? 'failed' : g.members ? 'ok' : 'idle');
    body.appendChild(tr);
  }
  groupTimeline($('chart-groups'), job);
}

function renderEvents(events) {
  const list = $('events');
  list.replaceChildren();
  for (const e of events.slice().reverse()) {
    list.appendChild(el('li', { 'data-kind': e.kind },
        '[' + e.t_s.toFixed(1) + ' s] ' + e.kind + ': ' + e.text));
  }
  if (!events.length) list.appendChild(el('li', { class: 'empty' }, 'no events yet'));
}

// ---- charts ------------------------------------------------------------------------

function niceTicks(lo, hi, n) {
  const span = hi - lo || 1;
  const step0 = Math.pow(10, Math.floor(Math.log10(span / n)));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => span / s <= n) || step0 * 10;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
  return ticks;
}
function fmtTick(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + 'k';
  return a >= 10 || v === 0 ? String(Math.round(v)) : v.toFixed(a >= 1 ? 1 : 2);
}

// Series: [{name, xs, ys, color}]; null values are gaps. markers: [{x, kind, text}].
function lineChart(svg, series, opts) {
  const W = svg.viewBox.baseVal.width, H = svg.viewBox.baseVal.height;
  const L = 46, R = 10, T = 16, B = 28;
  svg.replaceChildren();
  const pts = [];
  for (const s of series) {
    s.xs.forEach((x, i) => { if (x !== null && s.ys[i] !== null) pts.push([x, s.ys[i]]); });
  }
  if (pts.length < 2) {
    svg.appendChild(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle',
      class: 'nodata' }, 'no data yet'));
    svg.dataset.points = String(pts.length);
    return;
  }
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (opts.yZero) y0 = Math.min(0, y0);
  if (y1 === y0) { y1 += 1; }
  if (x1 === x0) { x1 += 1; }
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  for (const t of niceTicks(y0, y1, 5)) {
    svg.appendChild(svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: sy(t), y2: sy(t) }));
    svg.appendChild(svgEl('text', { x: L - 4, y: sy(t) + 3, 'text-anchor': 'end' }, fmtTick(t)));
  }
  for (const t of niceTicks(x0, x1, 6)) {
    svg.appendChild(svgEl('text', { x: sx(t), y: H - B + 13, 'text-anchor': 'middle' },
        fmtTick(t)));
  }
  svg.appendChild(svgEl('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
  svg.appendChild(svgEl('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.appendChild(svgEl('text', { x: W - R, y: H - 3, 'text-anchor': 'end' }, opts.xLabel));
  for (const m of opts.markers || []) {
    if (m.x < x0 || m.x > x1) continue;
    const line = svgEl('line', { class: 'marker ' + m.kind, x1: sx(m.x), x2: sx(m.x), y1: T,
      y2: H - B });
    line.appendChild(svgEl('title', {}, m.kind + ': ' + m.text));
    svg.appendChild(line);
  }
  let total = 0;
  series.forEach((s, k) => {
    let d = '', n = 0, pen = false;
    s.xs.forEach((x, i) => {
      const y = s.ys[i];
      if (x === null || y === null) { pen = false; return; }
      d += (pen ? 'L' : 'M') + sx(x).toFixed(1) + ',' + sy(y).toFixed(1);
      pen = true;
      n++;
    });
    total += n;
    svg.appendChild(svgEl('path', { class: 'series', d: d, stroke: s.color, 'data-points': n,
      'data-series': s.name }));
    svg.appendChild(svgEl('text', { x: L + 6 + k * 110, y: T - 4, fill: s.color }, s.name));
  });
  svg.dataset.points = String(total);
}

function markersOf(job) {
  return job.events.filter((e) => e.kind === 'regroup' || e.kind === 'stage')
      .map((e) => ({ x: e.t_s, kind: e.kind, text: e.text }));
}

function renderCharts(job) {
  const h = job.history;
  const markers = markersOf(job);
  lineChart($('chart-rate'), [{ name: 'samples/s', xs: h.t_s, ys: h.samples_per_s,
    color: COLORS[0] }], { xLabel: 'training time (s)', yZero: true, markers });
  lineChart($('chart-acc'), [
    { name: 'test accuracy', xs: h.t_s, ys: h.test_acc, color: COLORS[1] },
    { name: 'test loss', xs: h.t_s, ys: h.test_loss, color: COLORS[4] }],
  { xLabel: 'training time (s)', markers });
  lineChart($('chart-acc-samples'), [{ name: 'test accuracy', xs: h.samples, ys: h.test_acc,
    color: COLORS[1] }], { xLabel: 'samples trained' });
  lineChart($('chart-staleness'), [
    { name: 'mean', xs: h.t_s, ys: h.staleness_mean, color: COLORS[3] },
    { name: 'max', xs: h.t_s, ys: h.staleness_max, color: COLORS[2] }],
  { xLabel: 'training time (s)', yZero: true, markers });
}

// Membership as a timeline: a row per worker, its group as the colour of each stretch,
// the regroups and stage changes as dashed lines (their text in the tooltip and below).
function groupTimeline(svg, job) {
  const W = svg.viewBox.baseVal.width;
  const L = 70, R = 10, T = 14, B = 24;
  svg.replaceChildren();
  const changes = job.membership;
  if (!changes.length) {
    svg.appendChild(svgEl('text', { x: W / 2, y: 60, 'text-anchor': 'middle', class: 'nodata' },
        'no trainers yet'));
    svg.dataset.points = '0';
    return;
  }
  const workers = [...new Set(changes.flatMap((c) => Object.keys(c.groups)))].sort(
      (a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const rowH = Math.max(6, Math.min(18, 160 / workers.length));
  const H = T + B + rowH * workers.length;
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  svg.style.height = H + 'px';
  const tEnd = Math.max(job.t_s, changes[changes.length - 1].t_s + 1e-3);
  const t0 = changes[0].t_s;
  const sx = (t) => L + (t - t0) / Math.max(tEnd - t0, 1e-3) * (W - L - R);
  let segments = 0;
  workers.forEach((name, r) => {
    const y = T + r * rowH;
    svg.appendChild(svgEl('text', { x: L - 4, y: y + rowH * 0.75, 'text-anchor': 'end' }, name));
    changes.forEach((c, i) => {
      const g = c.groups[name];
      if (g === undefined) return;
      const end = i + 1 < changes.length ? changes[i + 1].t_s : tEnd;
      const rect = svgEl('rect', { x: sx(c.t_s), y: y + 1, width: Math.max(sx(end) - sx(c.t_s), 1),
        height: rowH - 2, fill: COLORS[g % COLORS.length], 'data-group': g });
      rect.appendChild(svgEl('title', {}, name + ': group ' + g));
      svg.appendChild(rect);
      segments++;
    });
  });
  for (const t of niceTicks(t0, tEnd, 8)) {
    svg.appendChild(svgEl('text', { x: sx(t), y: H - B + 13, 'text-anchor': 'middle' },
        fmtTick(t)));
  }
  svg.appendChild(svgEl('text', { x: W - R, y: H - 3, 'text-anchor': 'end' },
      'training time (s); colour = group'));
  for (const m of markersOf(job)) {
    if (m.x < t0) continue;
    const line = svgEl('line', { class: 'marker ' + m.kind, x1: sx(m.x), x2: sx(m.x), y1: 2,
      y2: H - B });
    line.appendChild(svgEl('title', {}, m.kind + ': ' + m.text));
    svg.appendChild(line);
  }
  svg.dataset.points = String(segments);
}

poll();
