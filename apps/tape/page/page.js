// The tape page's behaviour (apps/tape/page/): steps through one tape dump, or through a correct
// run and an overwrite-bug run side by side, drawing the graph as inline SVG.
//
// Rules: the page shows only what the dumps hold (docs/tape-format.md; the tape tool checked
// every field before it wrote the page); the one number it computes, the sum an overwrite threw
// away, is labelled as such. The walk is the one `tape step` prints: every value forward in record
// order, every contribution backward in engine order, then a summary. No network, no libraries.
//
// Large tapes (a GPT's): the graph is drawn only for a few dozen values; beyond that each panel
// shows an outline of the values grouped by scope (the groups come with the page, from
// apps/tape/tape_file.cpp), collapsed by default, with a search box. Only expanded groups' rows are
// in the DOM, and stepping marks the rows and the headers of the groups holding them. When the
// first render is done, the page sets the performance mark 'tape-ready' (and body[data-ready]).
//
// Real batch sizes: an embedding's backward sends one row per token, most of a model's steps. The
// "rows as one step" control (key r) walks the row contributions one visit sends to one input as
// one step. A dump's vocabulary names token ids where a value holds them, and a value no op made and
// no label names is named by the op that first reads it ("#1 input to wte (input 1)").
'use strict';

// ---- numbers and tensors ------------------------------------------------------------------------

const num = (x) => (typeof x === 'string' ? Number(x) : x);  // dumps write "NaN", "Infinity"

// 4 significant digits, as the terminal tools print them.
function fmt(x) {
  x = num(x);
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (x === 0) return '0';
  return String(Number(x.toPrecision(4)));
}

// A row or token name as it can be seen: control characters escaped ("\\n"), spaces at either end
// shown as "␣", as the terminal tools show them (apps/tape/text.cpp).
function visible(name) {
  const named = { '\n': '\\n', '\t': '\\t', '\r': '\\r' };
  const s = String(name).replace(/[\x00-\x1f\x7f]/g, (c) => named[c] || `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return s.replace(/^ +| +$/g, (m) => '␣'.repeat(m.length));
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

// "[0.02365, 0.08215]" or "[[-0.18, -0.35], [0.15, -0.43], …]"; at most `max` elements, each
// written by `cell` (a token for a value of token ids).
function inline(t, max = 8, cell = fmt) {
  const v = t.values.map(cell);
  if (t.truncated) return `[${v.slice(0, max).join(', ')}, …] (first ${Math.min(v.length, max)} of ${t.count})`;
  if (t.shape.length === 0) return v[0];
  if (t.shape.length !== 2) return `[${v.slice(0, max).join(', ')}${v.length > max ? ', …' : ''}]`;
  const cols = t.shape[1], rows = [];
  for (let r = 0; r * cols < Math.min(v.length, max); r++) rows.push(`[${v.slice(r * cols, (r + 1) * cols).join(', ')}]`);
  return `[${rows.join(', ')}${rows.length * cols < v.length ? ', …' : ''}]`;
}

// A tensor as an HTML table, rows named when names are known; rowClass(r) may mark a row; `cell`
// writes an element (a token for a value of token ids).
function tensorTable(t, names = [], rowClass = () => '', cell = fmt) {
  if (!t) return '<span class="missing">none</span>';
  if (t.truncated)
    return `<code>${esc(inline(t, 8, cell))}</code> <small>min ${fmt(t.min)}, max ${fmt(t.max)}, mean ${fmt(t.mean)}, std ${fmt(t.std)}</small>`;
  const td = (x) => `<td>${esc(cell(x))}</td>`;
  if (t.shape.length === 0) return `<code class="num">${esc(cell(t.values[0]))}</code>`;
  if (t.shape.length === 1) {
    const head = names.length ? `<tr>${names.map((n) => `<th>${esc(visible(n))}</th>`).join('')}</tr>` : '';
    return `<table class="tensor">${head}<tr>${t.values.map(td).join('')}</tr></table>`;
  }
  if (t.shape.length !== 2) return `<code>${esc(inline(t, 8, cell))}</code>`;
  const cols = t.shape[1];
  let html = '<table class="tensor">';
  for (let r = 0; r < t.shape[0]; r++) {
    const cls = rowClass(r) ? ` class="${rowClass(r)}"` : '';
    const name = names.length ? `<th>${esc(visible(names[r]))}</th>` : '';
    html += `<tr${cls}>${name}${t.values.slice(r * cols, (r + 1) * cols).map(td).join('')}</tr>`;
  }
  return html + '</table>';
}

// How a value's elements are written: as tokens of the dump's vocabulary when it holds token ids
// ("tokens": true), an id outside the vocabulary as its number; else as numbers.
function cellOf(t, v) {
  if (!v.tokens || !t.vocabulary) return fmt;
  return (x) => {
    const id = num(x);
    return Number.isInteger(id) && id >= 0 && id < t.vocabulary.length ? visible(t.vocabulary[id]) : fmt(x);
  };
}

const valueTable = (t, v) => tensorTable(v.value, v.rows || [], () => '', cellOf(t, v));

const shapeStr = (s) => `(${s.join(', ')}${s.length === 1 ? ',' : ''})`;

// ---- one tape: its values, its walk, its layout --------------------------------------------------

function prepare(source, key) {
  const d = source.dump;
  const t = {
    key, file: source.file, title: d.title, mode: d.mode, values: d.values, check: d.gradient_check,
    rules: d.ops || {},  // the derivatives table's rows for the ops in this tape (docs/ops.md)
    visits: d.backward ? d.backward.visits : [], events: d.backward ? d.backward.events : [],
    vocabulary: d.vocabulary || null,  // token names, when the dump has them
    byId: new Map(), byNode: new Map(), readerOf: new Map(),
  };
  for (const v of t.values) {
    t.byId.set(v.id, v);
    if (v.node !== null) t.byNode.set(v.node, v);
    v.inputs.forEach((id, k) => { if (!t.readerOf.has(id)) t.readerOf.set(id, [v, k]); });
  }
  t.hasRows = t.events.some((e) => e.row !== null);
  t.steps = walk(t, false);
  t.drawGraph = t.values.length <= GRAPH_LIMIT;
  t.layout = t.drawGraph ? layout(t) : null;
  prepareGroups(t, source.groups);
  return t;
}

// A value's name: its label; else "#5 matmul"; a value no op made (an input, a parameter) and no
// label names is named by the op that first reads it too, so that two of them are told apart:
// "#1 input to wte (input 1)", "#60 input to loss (input 1)", or by its shape and dtype when no op
// on the tape reads it ("#2 input (64,) i64"). The same names as apps/tape's Tape::name.
function nameOf(t, v) {
  if (v.label) return v.label;
  const base = `#${v.index} ${v.op || v.kind}`;
  if (v.op) return base;
  const read = t.readerOf.get(v.id);
  if (!read) return `${base} ${shapeStr(v.shape)} ${v.dtype}`;
  const [reader, slot] = read;
  return `${base} to ${reader.label || `#${reader.index} ${reader.op}`}${reader.inputs.length > 1 ? ` (input ${slot})` : ''}`;
}

// "#4 x = gather(embedding, input_ids)", "#5 matmul(x, weights)", "#0 embedding".
function signature(t, v) {
  if (!v.op) return v.label ? `#${v.index} ${v.label}` : nameOf(t, v);
  const head = v.label ? `#${v.index} ${v.label} = ` : `#${v.index} `;
  return `${head}${v.op}(${v.inputs.map((id) => nameOf(t, t.byId.get(id))).join(', ')})`;
}

// "row 17 (e)", or "row 17" where the row has no name ("": a vocabulary's padding)
const rowName = (v, row) => `row ${row}${v.rows && v.rows[row] ? ` (${visible(v.rows[row])})` : ''}`;

// The part of `to` an event went to: "row 0 (red)", a region "[:, 3:4, :]", or '' for all of it.
const partName = (to, ev) => (ev.row !== null ? rowName(to, ev.row) : ev.region ? ev.region.index : '');

function slotName(t, ev) {
  const to = t.byId.get(ev.to), part = partName(to, ev);
  return `d ${nameOf(t, to)}${part ? `, ${part}` : ''}`;
}

// Where element j of an event's contribution lies in its value: all of it, a row, or a region's walk.
function elementOf(to, ev, j, n) {
  if (ev.region) {
    const { shape, strides, offset } = ev.region;
    let at = offset;
    for (let d = shape.length - 1; d >= 0; d--) {
      at += (j % shape[d]) * strides[d];
      j = Math.floor(j / shape[d]);
    }
    return at;
  }
  return ev.row !== null ? ev.row * n + j : j;
}

// Forward value by value, backward contribution by contribution (a visit that sent nothing is a
// step of its own), then the summary: the same walk as apps/tape/walk.cpp. With rowsAsOne, the row
// contributions one visit sends to one input in a row (an embedding's, one per token) are one step:
// events `event` to `last`. `done` counts the contributions made by the end of the step.
function walk(t, rowsAsOne) {
  const steps = t.values.map((v, i) => ({ phase: 'forward', entry: i, event: -1, last: -1, done: 0 }));
  const sameRows = (a, b) => b.node === a.node && b.row !== null && b.to === a.to && b.input === a.input;
  let next = 0;
  t.visits.forEach((node, visit) => {
    const first = next;
    while (next < t.events.length && t.events[next].node === node) {
      let last = next;
      if (rowsAsOne && t.events[next].row !== null)
        while (last + 1 < t.events.length && sameRows(t.events[next], t.events[last + 1])) last++;
      steps.push({ phase: 'backward', visit, event: next, last, done: last + 1 });
      next = last + 1;
    }
    if (next === first) steps.push({ phase: 'backward', visit, event: -1, last: -1, done: next });
  });
  steps.push({ phase: 'summary', event: -1, last: -1, done: t.events.length });
  return steps;
}

// The events a step shows (none for a forward step, a summary or a visit that sent nothing).
const eventsOf = (t, step) => (step && step.event >= 0 ? t.events.slice(step.event, step.last + 1) : []);
const lostIn = (t, step) => eventsOf(t, step).some((e) => e.kind === 'overwritten');

// Layered layout, top to bottom: an op sits one layer below its deepest input; a parameter or an
// input sits just above its first reader, so it is drawn next to where it is used. Within a layer,
// a few barycentre sweeps order the nodes to keep edges short.
const NODE_W = 156, NODE_H = 48, GAP_X = 26, GAP_Y = 58, MARGIN = 14;
const GRAPH_LIMIT = 40;  // values: a larger tape gets the outline instead of the graph

function layout(t) {
  if (!t.values.length) return { at: new Map(), width: 0, height: 0 };
  const layer = new Map(), readers = new Map();
  for (const v of t.values) readers.set(v.id, []);
  for (const v of t.values) for (const id of v.inputs) readers.get(id).push(v.id);
  for (const v of t.values) if (v.inputs.length) layer.set(v.id, 1 + Math.max(...v.inputs.map((id) => layer.get(id) ?? 0)));
  for (const v of t.values) {
    if (v.inputs.length) continue;
    const below = readers.get(v.id).map((id) => layer.get(id));
    layer.set(v.id, below.length ? Math.max(0, Math.min(...below) - 1) : 0);
  }
  const depth = Math.max(...layer.values()) + 1;
  const rows = Array.from({ length: depth }, () => []);
  for (const v of t.values) rows[layer.get(v.id)].push(v.id);

  const neighbours = (id) => [...t.byId.get(id).inputs, ...readers.get(id)];
  const sweep = (l, towards) => {
    const pos = new Map(rows[towards].map((id, i) => [id, i]));
    const key = new Map(rows[l].map((id, i) => {
      const near = neighbours(id).filter((n) => pos.has(n)).map((n) => pos.get(n));
      return [id, near.length ? near.reduce((a, b) => a + b, 0) / near.length : i];
    }));
    rows[l].sort((a, b) => key.get(a) - key.get(b));
  };
  for (let pass = 0; pass < 2; pass++) {
    for (let l = 1; l < depth; l++) sweep(l, l - 1);
    for (let l = depth - 2; l >= 0; l--) sweep(l, l + 1);
  }

  const widest = Math.max(...rows.map((r) => r.length));
  const width = widest * (NODE_W + GAP_X) - GAP_X + 2 * MARGIN;
  const height = depth * (NODE_H + GAP_Y) - GAP_Y + 2 * MARGIN;
  const at = new Map();
  rows.forEach((r, l) => {
    const x0 = (width - (r.length * (NODE_W + GAP_X) - GAP_X)) / 2;
    r.forEach((id, i) => at.set(id, { x: x0 + i * (NODE_W + GAP_X), y: MARGIN + l * (NODE_H + GAP_Y) }));
  });
  return { at, width, height };
}

// Where an edge leaves its input (bottom centre) and enters slot k of its reader (spread on top).
function edgeEnds(t, from, to, slot) {
  const a = t.layout.at.get(from), b = t.layout.at.get(to);
  const n = t.byId.get(to).inputs.length;
  return { x1: a.x + NODE_W / 2, y1: a.y + NODE_H, x2: b.x + NODE_W / 2 + (slot - (n - 1) / 2) * 30, y2: b.y };
}

function curve(x1, y1, x2, y2) {
  const bend = Math.max(24, Math.abs(y2 - y1) / 2);
  return `M${x1},${y1} C${x1},${y1 + Math.sign(y2 - y1) * bend} ${x2},${y2 - Math.sign(y2 - y1) * bend} ${x2},${y2}`;
}

// ---- drawing one tape at one step ---------------------------------------------------------------

function graphSvg(t, step) {
  const { width, height } = t.layout;
  const current = step && step.phase === 'forward' ? t.values[step.entry] : null;
  const event = step && step.phase === 'backward' && step.event >= 0 ? t.events[step.event] : null;
  const visiting = step && step.phase === 'backward' ? t.byNode.get(t.visits[step.visit]) : null;

  let edges = '', flows = '', nodes = '';
  for (const v of t.values) {
    v.inputs.forEach((from, slot) => {
      const { x1, y1, x2, y2 } = edgeEnds(t, from, v.id, slot);
      const cls = current && v.index > current.index ? ' future' : current && v.id === current.id ? ' reads' : '';
      edges += `<path class="edge${cls}" d="${curve(x1, y1, x2, y2)}" marker-end="url(#${t.key}-${cls === ' reads' ? 'forward' : 'arrow'})"/>`;
    });
  }
  for (let i = 0; i < (step ? step.done : 0); i++) {
    const ev = t.events[i], reader = t.byNode.get(ev.node);
    const { x1, y1, x2, y2 } = edgeEnds(t, ev.to, reader.id, ev.input);
    const lost = ev.kind === 'overwritten' ? ' lost' : '';
    const now = event !== null && i >= step.event && i <= step.last;
    flows += `<path class="flow${now ? ' now' : ' done'}${lost}" d="${curve(x2, y2, x1, y1)}" marker-end="url(#${t.key}-${lost ? 'lost' : 'gradient'})"/>`;
    if (now && i === step.last) {  // one chip, on the step's last contribution
      const part = step.last > step.event ? `${step.last - step.event + 1} rows` : partName(t.byId.get(ev.to), ev);
      const chipLost = lostIn(t, step) ? ' lost' : '';
      const label = chipLost ? `LOST · ${part || 'overwritten'}` : part || `d ${nameOf(t, t.byId.get(ev.to))}`;
      const w = 12 + label.length * 7, cx = (x1 + x2) / 2, cy = (y1 + y2) / 2;
      flows += `<g class="chip${chipLost}"><rect x="${cx - w / 2}" y="${cy - 11}" width="${w}" height="22" rx="11"/>` +
        `<text x="${cx}" y="${cy + 4}" text-anchor="middle">${esc(label)}</text></g>`;
    }
  }
  for (const v of t.values) {
    const { x, y } = t.layout.at.get(v.id);
    let cls = v.kind;
    if (current && v.index > current.index) cls += ' future';
    if (current && v.id === current.id) cls += ' current';
    if (visiting && v.id === visiting.id) cls += ' visiting';
    if (event && v.id === event.to) cls += ` receiving${lostIn(t, step) ? ' lost' : ''}`;
    const sub = v.op ? `${v.op} ${shapeStr(v.shape)}` : `${v.kind} ${shapeStr(v.shape)}`;
    nodes += `<g class="node ${cls}" data-id="${v.id}"><title>${esc(signature(t, v))}</title>` +
      `<rect class="halo" x="${x - 4}" y="${y - 4}" width="${NODE_W + 8}" height="${NODE_H + 8}" rx="11"/>` +
      `<rect class="box" x="${x}" y="${y}" width="${NODE_W}" height="${NODE_H}" rx="8"/>` +
      `<text class="name" x="${x + NODE_W / 2}" y="${y + 20}" text-anchor="middle">${esc(nameOf(t, v))}</text>` +
      `<text class="sub" x="${x + NODE_W / 2}" y="${y + 37}" text-anchor="middle">${esc(sub)}</text></g>`;
  }
  const marker = (name, colour) => `<marker id="${t.key}-${name}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="11" markerHeight="11" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="${colour}"/></marker>`;
  return `<svg class="graph" viewBox="0 0 ${width} ${height}" style="max-width:${width * 1.15}px" role="img" aria-label="the graph of ${esc(t.file)}">` +
    `<defs>${marker('arrow', '#94a3b8')}${marker('forward', '#2563eb')}${marker('gradient', '#ea580c')}${marker('lost', '#dc2626')}</defs>` +
    `${edges}${flows}${nodes}</svg>`;
}

// An op's rule from the dump's own table ("ops": the derivatives table's rows), when it has one.
const ruleLine = (t, op, which) => {
  const rule = t.rules[op];
  return rule ? `<p class="rule">${which === 0 ? 'forward' : 'backward rule'}: <code>${esc(which === 0 ? rule.forward : rule.backward)}</code></p>` : '';
};

function forwardDetail(t, v) {
  const where = `${v.kind} ${shapeStr(v.shape)} ${v.dtype} on ${v.device}`;
  if (!v.op) {
    const what = v.kind === 'parameter' ? 'a <b>parameter</b>: it is trained, so the backward pass will give it a gradient'
      : v.kind === 'input' ? 'an <b>input</b>: data, it gets no gradient'
        : 'computed without a node on the tape: no gradient flows through it';
    const read = t.readerOf.get(v.id);
    const readBy = read ? ` First read by <code>${esc(signature(t, read[0]))}</code>, as its input ${read[1]}.` : '';
    return `<h3><code>${esc(signature(t, v))}</code></h3><p class="note">${what}.${readBy} <small>${esc(where)}</small></p>` +
      `<h4>value</h4>${valueTable(t, v)}`;
  }
  const inputs = v.inputs.map((id, k) => {
    const x = t.byId.get(id);
    return `<div><h4>input ${k} · ${esc(nameOf(t, x))} <small>${x.kind} ${shapeStr(x.shape)}</small></h4>${valueTable(t, x)}</div>`;
  }).join('');
  return `<h3><code>${esc(signature(t, v))}</code></h3>${ruleLine(t, v.op, 0)}` +
    `<div class="io">${inputs}<div><h4>output · ${esc(nameOf(t, v))} <small>${shapeStr(v.shape)}</small></h4>${valueTable(t, v)}</div></div>`;
}

// The receiving gradient as it stands after event i, rebuilt from the "after" slices of the
// events into it; null when part of it is unknown (a gradient from before this pass) or too large
// to list. A first row or region event that sets means the engine started from zeros.
function gradientSoFar(t, i) {
  const target = t.events[i].to, to = t.byId.get(target);
  if (to.value.truncated) return null;
  const mine = t.events.slice(0, i + 1).filter((e) => e.to === target);
  const fromZeros = (mine[0].row !== null || Boolean(mine[0].region)) && mine[0].kind === 'set';
  const values = new Array(to.value.count).fill(0), known = new Array(to.value.count).fill(fromZeros);
  for (const e of mine) {
    if (!e.after || e.after.truncated) return null;
    e.after.values.forEach((x, j) => {
      const at = elementOf(to, e, j, e.after.count);
      values[at] = num(x);
      known[at] = true;
    });
  }
  return known.every(Boolean) ? { ...to.value, values } : null;
}

function backwardDetail(t, step) {
  const reader = t.byNode.get(t.visits[step.visit]);
  let html = `<h3>backward of <code>${esc(signature(t, reader))}</code></h3>${ruleLine(t, reader.op, 1)}`;
  const incoming = `<div><h4>incoming gradient · d ${esc(nameOf(t, reader))} <small>${shapeStr(reader.shape)}</small></h4>${tensorTable(reader.grad, reader.rows || [])}</div>`;
  if (step.event < 0) return `${html}<div class="io">${incoming}</div><div class="verdict none">It sends nothing: none of its inputs needs a gradient.</div>`;

  if (step.last > step.event) return html + rowsDetail(t, step, incoming);
  const ev = t.events[step.event], to = t.byId.get(ev.to), slot = slotName(t, ev);
  html += `<div class="io">${incoming}<div><h4>flows to · ${esc(slot)} <small>input ${ev.input} of ${esc(ev.op)}</small></h4>${tensorTable(ev.contribution)}</div></div>`;
  if (ev.kind === 'overwritten') {
    const d = ev.discarded, c = ev.contribution;
    const sum = !d.truncated && !c.truncated ? inline({ ...c, values: c.values.map((x, j) => num(x) + num(d.values[j])) }) : null;
    html += `<div class="verdict lost"><b class="kind">LOST</b> overwritten: ${esc(slot)} held <code>${esc(inline(d))}</code>; ` +
      `it is thrown away and replaced by this contribution.${sum ? ` Adding would have kept both: <code>${esc(sum)}</code>.` : ''}</div>`;
  } else if (ev.kind === 'added') {
    html += `<div class="verdict added"><b class="kind">ADDED</b> ${esc(slot)} ` +
      (ev.after ? `now holds <code>${esc(inline(ev.after))}</code>: what it held plus this contribution.</div>`
        : 'adds this contribution to the gradient it held from before this pass.</div>');
  } else {
    html += `<div class="verdict set"><b class="kind">SET</b> ${esc(slot)} had no gradient yet; it now holds this contribution.</div>`;
  }
  const sofar = gradientSoFar(t, step.event);
  if (sofar && (ev.row !== null || to.shape.length > 0))
    html += `<h4>d ${esc(nameOf(t, to))} so far <small>${shapeStr(to.shape)}</small></h4>` +
      tensorTable(sofar, to.rows || [], (r) => (r === ev.row ? (ev.kind === 'overwritten' ? 'hit lost' : 'hit') : ''));
  return html;
}

// A step of several row contributions (rows as one step): how many went where, each row's in a
// table (the first LIST_LIMIT), what was lost, and the receiving gradient after the last.
function rowsDetail(t, step, incoming) {
  const events = eventsOf(t, step), first = events[0], to = t.byId.get(first.to);
  const rows = new Set(events.map((e) => e.row));
  const count = (kind) => events.filter((e) => e.kind === kind).length;
  const lost = count('overwritten');
  let html = `<div class="io">${incoming}<div><h4>flows to · d ${esc(nameOf(t, to))}, ${events.length} rows ` +
    `<small>input ${first.input} of ${esc(first.op)}</small></h4>` +
    `<p class="note">${events.length} row contributions to ${rows.size} distinct row${rows.size === 1 ? '' : 's'}, one step ` +
    `(<b>r</b> or <b>rows as one step</b> walks them one by one).</p></div></div>`;
  html += '<table class="rows"><tr><th>#</th><th>row</th><th>kind</th><th>contribution</th><th>after</th></tr>' +
    events.slice(0, LIST_LIMIT).map((e, j) => `<tr class="${e.kind}"><td>${step.event + j}</td><td>${esc(rowName(to, e.row))}</td>` +
      `<td>${e.kind === 'overwritten' ? 'LOST' : e.kind}</td><td><code>${esc(inline(e.contribution, 4))}</code></td>` +
      `<td><code>${e.after ? esc(inline(e.after, 4)) : ''}</code></td></tr>`).join('') + '</table>' +
    (events.length > LIST_LIMIT ? `<p class="note">… and ${events.length - LIST_LIMIT} more rows</p>` : '');
  html += lost
    ? `<div class="verdict lost"><b class="kind">LOST</b> ${lost} of these ${events.length} contributions overwrote a row that ` +
      'already held one: each of those earlier contributions is thrown away.</div>'
    : `<div class="verdict added"><b class="kind">ROWS</b> ${count('set')} set a row that held no gradient, ${count('added')} ` +
      'added to a row that did: rows picked more than once sum their contributions.</div>';
  const sofar = gradientSoFar(t, step.last);
  if (sofar)
    html += `<h4>d ${esc(nameOf(t, to))} so far <small>${shapeStr(to.shape)}</small></h4>` +
      tensorTable(sofar, to.rows || [], (r) => (rows.has(r) ? 'hit' : ''));
  return html;
}

function checkLine(t) {
  const c = t.check;
  if (!c) return '<p class="note">gradient check: not run for this dump</p>';
  const failed = c.parameters.filter((p) => !p.passed).map((p) => `${esc(p.label || p.id)} (max error ${fmt(p.max_error)})`);
  return `<p class="note">gradient check <small>(central differences, epsilon ${fmt(c.epsilon)}, tolerance ${fmt(c.tolerance)})</small>: ` +
    (c.passed ? `<span class="badge ok">passed</span> max error ${fmt(c.max_error)}` : `<span class="badge fail">failed</span> ${failed.join(', ')}`) + '</p>';
}

function summaryDetail(t) {
  let html = '<h3>done: the final gradients</h3>';
  const params = t.values.filter((v) => v.kind === 'parameter');
  html += '<div class="io">' + params.slice(0, LIST_LIMIT).map((v) =>
    `<div><h4>d ${esc(nameOf(t, v))} <small>${shapeStr(v.shape)}</small></h4>${tensorTable(v.grad, v.rows || [])}</div>`).join('') + '</div>';
  if (params.length > LIST_LIMIT) html += `<p class="note">… and ${params.length - LIST_LIMIT} more parameters: see <b>Final gradients</b> below.</p>`;
  html += checkLine(t);
  const lost = [];
  t.steps.forEach((s, i) => eventsOf(t, s).forEach((e) => { if (e.kind === 'overwritten') lost.push([e, i]); }));
  html += lost.length
    ? `<div class="verdict lost"><b class="kind">LOST</b> ${lost.length} contribution${lost.length > 1 ? 's' : ''} overwritten: ` +
      lost.slice(0, LIST_LIMIT).map(([e, i]) => `step ${i + 1}, ${esc(slotName(t, e))}`).join('; ') +
      (lost.length > LIST_LIMIT ? `; … and ${lost.length - LIST_LIMIT} more` : '') + '</div>'
    : `<div class="verdict none">No contribution was lost${t.mode === 'accumulate' ? ': contributions that meet are added.' : '.'}</div>`;
  return html;
}

function detail(t, step) {
  if (!step) return `<p class="missing">this run has no step here</p>`;
  if (step.phase === 'forward') return forwardDetail(t, t.values[step.entry]);
  if (step.phase === 'backward') return backwardDetail(t, step);
  return summaryDetail(t);
}

// ---- the outline: values grouped by scope ------------------------------------------------------

const OPEN_LIMIT = 60;  // values: a larger tape's outline starts with every group collapsed
const LIST_LIMIT = 40;  // items of a list (losses, parameters) shown before "… and N more"

// The groups as page.cpp wrote them (a tree by the dots of the scopes: tape_file.hpp's Group), each
// value's group, and each group's ops counted over it and every group inside it.
function prepareGroups(t, groups) {
  t.groups = groups;
  t.groupOf = new Int32Array(t.values.length);
  const ops = groups.map(() => new Map());
  groups.forEach((g, k) => g.entries.forEach((i) => {
    t.groupOf[i] = k;
    const op = t.values[i].op;
    if (op) for (let up = k; up > 0; up = groups[up].parent) ops[up].set(op, (ops[up].get(op) || 0) + 1);
  }));
  t.opsText = ops.map((m) => {
    const sorted = [...m].sort((a, b) => b[1] - a[1]);
    return sorted.slice(0, 4).map(([op, n]) => `${op} ${n}`).join(', ') + (sorted.length > 4 ? ', …' : '');
  });
  t.outline = groups.length > 1 || !t.drawGraph;
  t.open = new Set(t.values.length <= OPEN_LIMIT ? groups.map((_, k) => k) : []);
  t.filter = null;  // while searching: { entries, groups } that match
  t.marked = [];    // [element, classes] marked for the current step
}

// A group's own values and child groups, merged in tape order.
function itemsOf(t, g) {
  const { entries, children } = t.groups[g], out = [];
  for (let i = 0, j = 0; i < entries.length || j < children.length;) {
    if (j >= children.length || (i < entries.length && entries[i] < t.groups[children[j]].first)) out.push({ entry: entries[i++] });
    else out.push({ group: children[j++] });
  }
  return out;
}

function rowHtml(t, i) {
  const v = t.values[i];
  const name = v.label || v.op || nameOf(t, v).replace(/^#\d+ /, '');
  const what = v.op && v.label ? `${v.op} ` : v.op || !v.label ? '' : `${v.kind} `;
  return `<li class="row ${v.kind}" data-index="${i}" title="${esc(signature(t, v))}"><span class="idx">#${i}</span> ` +
    `<span class="rname">${esc(name)}</span> <small>${esc(what)}${shapeStr(v.shape)}</small></li>`;
}

function groupHtml(t, g) {
  const group = t.groups[g], open = t.open.has(g);
  const dot = group.name.lastIndexOf('.');
  return `<li class="group${open ? ' open' : ''}" data-group="${g}" data-name="${esc(group.name)}">` +
    `<div class="ghead" role="button" tabindex="0" aria-expanded="${open}" title="${esc(group.name)}: ${group.values} values, ${group.nodes} nodes">` +
    `<span class="gname"><span class="gprefix">${esc(group.name.slice(0, dot + 1))}</span>${esc(group.name.slice(dot + 1))}</span>` +
    `<small class="gcount">${group.nodes} node${group.nodes === 1 ? '' : 's'}</small><small class="gops">${esc(t.opsText[g])}</small></div>` +
    `<ul class="members">${open ? membersHtml(t, g) : ''}</ul></li>`;
}

function membersHtml(t, g) {
  const f = t.filter;
  return itemsOf(t, g).map((it) => (it.group !== undefined
    ? (!f || f.groups.has(it.group) ? groupHtml(t, it.group) : '')
    : (!f || f.entries.has(it.entry) ? rowHtml(t, it.entry) : ''))).join('');
}

function renderOutline(t) {
  t.tree.innerHTML = membersHtml(t, 0);
  t.marked = [];
  markOutline(t, t.steps[at]);
}

function toggleGroup(t, g) {
  const li = t.tree.querySelector(`li.group[data-group="${g}"]`);
  const open = !t.open.has(g);
  if (open) t.open.add(g); else t.open.delete(g);
  li.classList.toggle('open', open);
  li.querySelector(':scope > .ghead').setAttribute('aria-expanded', String(open));
  li.querySelector(':scope > .members').innerHTML = open ? membersHtml(t, g) : '';
  markOutline(t, t.steps[at]);
}

// Shows the values whose label, op or group holds the text (or "#N": value N), with the groups
// holding them expanded; an empty text brings back the groups as they were.
function search(t, text) {
  const q = text.trim().toLowerCase();
  if (!q) {
    if (t.filter) t.open = t.saved;
    t.filter = null;
    t.found.textContent = '';
  } else {
    if (!t.filter) t.saved = new Set(t.open);
    const entries = new Set(), groups = new Set();
    t.values.forEach((v, i) => {
      const match = q[0] === '#' ? q === `#${i}`
        : [v.label, v.op || '', t.groups[t.groupOf[i]].name].some((field) => field.toLowerCase().includes(q));
      if (!match) return;
      entries.add(i);
      for (let g = t.groupOf[i]; g > 0 && !groups.has(g); g = t.groups[g].parent) groups.add(g);
    });
    t.filter = { entries, groups };
    t.open = new Set(groups);
    t.found.textContent = `${entries.size} value${entries.size === 1 ? '' : 's'} match`;
  }
  renderOutline(t);
}

// Marks the step's values in the outline: the row when its group is expanded, and the header of
// every group holding it, so a step inside a collapsed group still shows where it is.
function markOutline(t, step) {
  if (!t.outline) return;
  for (const [el, cls] of t.marked) el.classList.remove(...cls);
  t.marked = [];
  if (!step) return;
  const marks = [];
  if (step.phase === 'forward') marks.push([step.entry, ['current']]);
  if (step.phase === 'backward') {
    marks.push([t.byNode.get(t.visits[step.visit]).index, ['visiting']]);
    if (step.event >= 0) {
      const ev = t.events[step.event];
      marks.push([t.byId.get(ev.to).index, lostIn(t, step) ? ['receiving', 'lost'] : ['receiving']]);
    }
  }
  let first = null;
  for (const [i, cls] of marks) {
    const mark = (el) => {
      if (!el) return;
      el.classList.add(...cls);
      t.marked.push([el, cls]);
      first = first || el;
    };
    mark(t.tree.querySelector(`li.row[data-index="${i}"]`));
    for (let g = t.groupOf[i]; g > 0; g = t.groups[g].parent) mark(t.tree.querySelector(`li.group[data-group="${g}"] > .ghead`));
  }
  // keep the first mark in view inside the outline's own scroll box (the window stays put)
  const box = t.tree.parentElement;
  if (first && (first.offsetTop < box.scrollTop || first.offsetTop + first.offsetHeight > box.scrollTop + box.clientHeight))
    box.scrollTop = Math.max(0, first.offsetTop - box.clientHeight / 3);
}

function setupOutline(t, panel) {
  const box = panel.querySelector('.outline');
  box.innerHTML = `<div class="outline-tools"><input type="search" class="find" placeholder="find: name, op or scope" aria-label="find values">` +
    `<span class="found" aria-live="polite"></span><button class="expand-all" title="expand every group">expand all</button>` +
    `<button class="collapse-all" title="collapse every group">collapse all</button></div><div class="outline-box"><ul class="tree"></ul></div>`;
  t.tree = box.querySelector('.tree');
  t.found = box.querySelector('.found');
  box.querySelector('.find').addEventListener('input', (e) => search(t, e.target.value));
  box.querySelector('.expand-all').addEventListener('click', () => { t.open = new Set(t.groups.map((_, k) => k)); renderOutline(t); });
  box.querySelector('.collapse-all').addEventListener('click', () => { t.open = new Set(); renderOutline(t); });
  t.tree.addEventListener('click', (e) => {
    const head = e.target.closest('.ghead');
    if (head) return toggleGroup(t, Number(head.parentElement.dataset.group));
    const row = e.target.closest('li.row');
    if (row) go(Number(row.dataset.index));  // a value's forward step is its index
  });
  t.tree.addEventListener('keydown', (e) => {
    const head = e.target.closest('.ghead');
    if (!head || (e.key !== 'Enter' && e.key !== ' ')) return;
    e.preventDefault();
    e.stopPropagation();
    toggleGroup(t, Number(head.parentElement.dataset.group));
  });
  renderOutline(t);
}

// ---- the page -----------------------------------------------------------------------------------

const tapes = JSON.parse(document.getElementById('tapes').textContent).map((source, i) => prepare(source, `tape${i}`));
let count = Math.max(...tapes.map((t) => t.steps.length));
let at = 0;
let rowsAsOne = false;  // the control "rows as one step" (key r)

const MODE_NOTE = {
  accumulate: 'correct: contributions that meet are added',
  'overwrite-bug': 'the bug: each contribution is written over the last one',
};

function phaseText(t, step) {
  if (!step) return '';
  if (step.phase === 'forward') return `forward · value ${step.entry + 1} of ${t.values.length}`;
  if (step.phase === 'backward') return `backward · visit ${step.visit + 1} of ${t.visits.length} (${t.byNode.get(t.visits[step.visit]).op})`;
  return 'summary';
}

function setup() {
  document.getElementById('title').textContent = tapes[0].title;
  const panels = document.getElementById('panels');
  panels.style.setProperty('--panels', tapes.length);
  panels.classList.toggle('single', tapes.length === 1);
  panels.innerHTML = tapes.map((t, i) => `<article class="panel" id="panel-${i}">` +
    `<h2><span class="badge ${t.mode}">${t.mode}</span> ${esc(t.file)}</h2><p class="mode-note">${MODE_NOTE[t.mode]}</p>` +
    `<div class="body"><div class="graph-box">${t.outline ? '<div class="outline"></div>' : ''}<div class="graph-view"></div></div>` +
    `<div class="detail"></div></div></article>`).join('');
  tapes.forEach((t, i) => { if (t.outline) setupOutline(t, document.getElementById(`panel-${i}`)); });

  renderTimeline();
  document.getElementById('timeline').addEventListener('click', (e) => {
    if (e.target.dataset.step !== undefined) go(Number(e.target.dataset.step));
  });
  const rowsControl = document.getElementById('rows-as-one');
  rowsControl.parentElement.hidden = !tapes.some((t) => t.hasRows);
  rowsControl.addEventListener('change', () => setRowsAsOne(rowsControl.checked));

  renderLosses();
  document.getElementById('losses').addEventListener('click', (e) => {
    if (e.target.dataset.step !== undefined) go(Number(e.target.dataset.step));
  });

  document.getElementById('finals').innerHTML = finals();
  const more = document.getElementById('all-finals');
  if (more) more.addEventListener('toggle', () => {
    if (more.open && !more.querySelector('.grid')) more.insertAdjacentHTML('beforeend', finalsGrid(tapes[0].values.filter((v) => v.kind === 'parameter')));
  });
  document.getElementById('first').addEventListener('click', () => go(0));
  document.getElementById('back').addEventListener('click', () => go(at - 1));
  document.getElementById('next').addEventListener('click', () => go(at + 1));
  document.getElementById('last').addEventListener('click', () => go(count - 1));
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.target.matches('input')) return;  // typing a search, or the slider's own keys
    if (e.key === 'r' && !rowsControl.parentElement.hidden) {
      e.preventDefault();
      setRowsAsOne(!rowsAsOne);
      return;
    }
    const moves = { ArrowRight: at + 1, ' ': at + 1, n: at + 1, ArrowLeft: at - 1, b: at - 1, Home: 0, End: count - 1 };
    if (!(e.key in moves)) return;
    e.preventDefault();
    go(moves[e.key]);
  });
  // #step=N in the address opens step N (and follows edits of the address); #rows&step=N with the
  // rows as one step
  const fromHash = () => {
    const hash = /^#(rows&)?step=(\d+)$/.exec(location.hash);
    if (hash && Boolean(hash[1]) !== rowsAsOne) setRowsAsOne(Boolean(hash[1]), false);
    go(hash ? Number(hash[2]) - 1 : 0);
  };
  window.addEventListener('hashchange', fromHash);
  fromHash();
}

// Walks every tape again with the rows as one step or one by one, staying at the same place: the
// step showing the same value, or the step holding the same contribution.
function setRowsAsOne(on, stay = true) {
  const lead = tapes.find((t) => t.steps[at]) || tapes[0];
  const was = lead.steps[at];
  rowsAsOne = on;
  document.getElementById('rows-as-one').checked = on;
  for (const t of tapes) t.steps = walk(t, on);
  count = Math.max(...tapes.map((t) => t.steps.length));
  renderTimeline();
  renderLosses();
  if (!stay) return;
  const steps = lead.steps;
  const found = was.phase === 'summary' ? steps.length - 1
    : was.event >= 0 ? steps.findIndex((s) => s.event >= 0 && s.event <= was.event && was.event <= s.last)
      : was.phase === 'backward' ? steps.findIndex((s) => s.phase === 'backward' && s.visit === was.visit) : at;
  go(found < 0 ? at : found);
}

// Whether any tape's step i shows a contribution that was lost.
const lostAt = (i) => tapes.some((t) => lostIn(t, t.steps[i]));

// A button per step, or for a long walk the phases as bands, losses as ticks, and a slider.
function renderTimeline() {
  const timeline = document.getElementById('timeline');
  timeline.classList.remove('scrub');
  if (count <= TIMELINE_BUTTONS) {
    timeline.innerHTML = Array.from({ length: count }, (_, i) => {
      const step = tapes.map((t) => t.steps[i]).find((s) => s);
      const lost = lostAt(i);
      return `<button class="${lost ? 'lost' : step.phase}" data-step="${i}" title="step ${i + 1}${lost ? ': gradient lost' : ''}" aria-label="step ${i + 1}"></button>`;
    }).join('');
  } else {  // too many steps for a button each: the phases as bands, losses as ticks, and a slider
    const lead = tapes.find((t) => t.steps.length === count);
    const forward = lead.values.length, pct = (n) => `${(100 * n) / count}%`;
    const ticks = [];
    for (let i = 0; i < count && ticks.length < 500; i++)
      if (lostAt(i)) ticks.push(`<button class="tick lost" data-step="${i}" style="left:${pct(i)}" title="step ${i + 1}: gradient lost" aria-label="step ${i + 1}"></button>`);
    timeline.classList.add('scrub');
    timeline.innerHTML = `<div class="bands"><span class="forward" style="width:${pct(forward)}"></span>` +
      `<span class="backward" style="width:${pct(count - forward - 1)}"></span><span class="summary" style="width:${pct(1)}"></span>${ticks.join('')}</div>` +
      `<input type="range" id="scrub" min="0" max="${count - 1}" value="0" aria-label="step">`;
    document.getElementById('scrub').addEventListener('input', (e) => go(Number(e.target.value)));
  }
}

// The list of lost contributions, each with the step that shows it and what the other run did there.
function renderLosses() {
  let items = [];
  tapes.forEach((t) => t.steps.forEach((s, i) => eventsOf(t, s).forEach((ev, j) => {
    if (ev.kind !== 'overwritten') return;
    const others = tapes.filter((o) => o !== t && o.steps[i] && o.steps[i].event >= 0).map((o) => {
      const oe = o.events[o.steps[i].event + j];
      return oe && oe.to === ev.to && oe.row === ev.row && (oe.region || {}).index === (ev.region || {}).index && oe.after
        ? ` In ${esc(o.file)} (${o.mode}) the same contribution is ${oe.kind}: ${esc(slotName(o, oe))} becomes <code>${esc(inline(oe.after))}</code>.` : '';
    }).join('');
    items.push(`<li><button data-step="${i}">step ${i + 1}</button><b>${esc(t.file)}</b>: the backward of ${esc(ev.op)} writes ` +
      `<code>${esc(inline(ev.contribution))}</code> over ${esc(slotName(t, ev))}, which held <code>${esc(inline(ev.discarded))}</code>: that gradient is lost.${others}</li>`);
  })));
  const losses = document.getElementById('losses');
  if (items.length > LIST_LIMIT)
    items = [...items.slice(0, LIST_LIMIT), `<li>… and ${items.length - LIST_LIMIT} more (the red ticks of the timeline)</li>`];
  losses.hidden = !items.length;
  losses.innerHTML = items.length ? `<h2>Where gradient is lost</h2><ul>${items.join('')}</ul>` : '';
}

const TIMELINE_BUTTONS = 300;  // steps: a longer walk gets a slider instead of a button per step

// Every parameter's final gradient, one column per run; rows that differ between runs marked. Many
// parameters (a GPT's) go in a closed <details>, filled when it is first opened.
function finals() {
  const params = tapes[0].values.filter((v) => v.kind === 'parameter');
  const checks = '<div class="checks">' + tapes.map((t) => `<p><b>${esc(t.file)}</b></p>${checkLine(t)}`).join('') + '</div>';
  const note = tapes.length > 1 ? '<p class="note"><small>Rows marked yellow differ between the runs.</small></p>' : '';
  if (params.length <= LIST_LIMIT) return `<h2>Final gradients</h2>${finalsGrid(params)}${checks}${note}`;
  return `<h2>Final gradients</h2>${checks}<details id="all-finals"><summary>every parameter's gradient (${params.length})</summary>${note}</details>`;
}

function finalsGrid(params) {
  let html = `<div class="grid" style="grid-template-columns: repeat(${tapes.length}, minmax(0, max-content))">`;
  for (const p of params) {
    tapes.forEach((t) => {
      const v = t.byId.get(p.id), g = v && v.grad;
      const other = tapes.find((o) => o !== t), og = other && other.byId.get(p.id) && other.byId.get(p.id).grad;
      const comparable = g && og && g.shape.length === 2 && !g.truncated && !og.truncated && g.count === og.count;
      const cols = comparable ? g.shape[1] : 0;
      const differs = (r) => comparable &&
        g.values.slice(r * cols, (r + 1) * cols).some((x, j) => num(x) !== num(og.values[r * cols + j]));
      html += `<div><h4>d ${esc(nameOf(tapes[0], p))} · ${esc(t.file)}</h4>` +
        `${tensorTable(g, (v && v.rows) || [], (r) => (differs(r) ? 'differs' : ''))}</div>`;
    });
  }
  return `${html}</div>`;
}

function go(i) {
  at = Math.max(0, Math.min(count - 1, i));
  document.getElementById('step-label').textContent = `Step ${at + 1} of ${count}`;
  const lead = tapes.find((t) => t.steps[at]);
  const phase = document.getElementById('phase');
  phase.className = lead.steps[at].phase;
  phase.textContent = phaseText(lead, lead.steps[at]);
  document.getElementById('first').disabled = document.getElementById('back').disabled = at === 0;
  document.getElementById('next').disabled = document.getElementById('last').disabled = at === count - 1;
  tapes.forEach((t, k) => {
    const panel = document.getElementById(`panel-${k}`);
    if (t.drawGraph) panel.querySelector('.graph-view').innerHTML = graphSvg(t, t.steps[at]);
    panel.querySelector('.detail').innerHTML = detail(t, t.steps[at]);
    markOutline(t, t.steps[at]);
  });
  const scrub = document.getElementById('scrub');
  if (scrub) scrub.value = String(at);
  else for (const b of document.querySelectorAll('#timeline button')) b.classList.toggle('current', Number(b.dataset.step) === at);
  history.replaceState(null, '', `#${rowsAsOne ? 'rows&' : ''}step=${at + 1}`);
}

setup();
// ready after the first frame is drawn: what tests/tape's page test times from navigation start
requestAnimationFrame(() => requestAnimationFrame(() => {
  performance.mark('tape-ready');
  document.body.dataset.ready = 'true';
}));
