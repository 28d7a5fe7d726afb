// The heapdump viewer: every figure comes from the JSON routes, which
// answer as the command line's --json does. Text goes into the page as
// text (never as markup): a site or type name is program data.
'use strict';

const TOKEN = document.querySelector('meta[name=heapdump-token]').content;
const HAS_BASELINE = document.querySelector('meta[name=heapdump-baseline]').content === '1';
const HAS_SERIES = document.querySelector('meta[name=heapdump-series]').content === '1';
const PAGE = 50;
const POINTER_PAGE = 1000;
let TOTAL_BYTES = 1;

async function api(path, params = {}) {
  const q = new URLSearchParams(params);
  q.set('token', TOKEN);
  const r = await fetch(`${path}?${q}`);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function human(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

function pct(n) { return `${(100 * n / Math.max(1, TOTAL_BYTES)).toFixed(1)}%`; }

function blockLink(addr) {
  return el('a', { href: `#block=${addr}`, class: 'addr', text: addr });
}

// A table whose columns sort on a click (numbers by their value, largest
// first; text A to Z). A cell is text, a node, or [shown, value to sort by].
function table(headers, rows, cls) {
  const t = el('table', { class: `sortable ${cls || ''}` });
  const tb = el('tbody');
  const cell = c => Array.isArray(c) ? c : [c, c instanceof Node ? c.textContent : c];
  const data = rows.map(r => r.map(cell));
  const tr = el('tr');
  headers.forEach((h, i) => {
    const th = el('th', { text: h, title: `sort by ${h}` });
    th.addEventListener('click', () => {
      const num = data.every(r => typeof r[i][1] === 'number');
      data.sort((a, b) => num ? b[i][1] - a[i][1] : String(a[i][1]).localeCompare(String(b[i][1])));
      for (const x of t.querySelectorAll('th')) x.classList.remove('sorted');
      th.classList.add('sorted');
      fill();
    });
    tr.append(th);
  });
  t.append(el('thead', {}, tr));
  const fill = () => {
    tb.replaceChildren();
    for (const r of data) tb.append(el('tr', {}, ...r.map(([c]) => el('td', {}, c instanceof Node ? c : String(c)))));
  };
  fill();
  t.append(tb);
  return t;
}

// Bytes shown readable, sorted by their value.
const B = n => [human(n), n];
const N = n => [n.toLocaleString('en-US'), n];
const signed = (n, f) => (n >= 0 ? '+' : '−') + f(Math.abs(n));

function facts(dl, pairs) {
  dl.replaceChildren();
  for (const [k, v, key, exact] of pairs) {
    dl.append(el('div', { class: 'fact' }, el('dt', { text: k }), el('dd', { text: v, 'data-key': key || k, 'data-value': exact != null ? String(exact) : '' })));
  }
}

async function header() {
  const s = await api('/api/summary');
  TOTAL_BYTES = s.bytes;
  const pairs = [
    ['program', s.cmdline.join(' ') || s.exe, 'program'],
    ['pid', String(s.pid), 'pid'],
    ['reason', s.reason, 'reason'],
    ['mode', s.mode, 'mode'],
    ['live bytes', human(s.bytes), 'bytes', s.bytes],
    ['allocations', s.allocations.toLocaleString('en-US'), 'allocations', s.allocations],
    ['threads', String(s.threads), 'threads'],
  ];
  if (s.peak_bytes != null) pairs.push(['peak', human(s.peak_bytes), 'peak_bytes']);
  if (s.pause_us != null) pairs.push(['pause', `${(s.pause_us / 1000).toFixed(1)} ms`, 'pause_us']);
  facts(document.getElementById('summary'), pairs);
  const l = await api('/api/leaks');
  const c = k => `${human(l[k].bytes)} in ${l[k].blocks.toLocaleString('en-US')} blocks`;
  const exact = k => `${l[k].bytes} bytes in ${l[k].blocks} blocks`;
  facts(document.getElementById('leak-summary'), [
    ['definitely lost', c('definitely_lost'), 'definitely_lost', exact('definitely_lost')],
    ['indirectly lost', c('indirectly_lost'), 'indirectly_lost', exact('indirectly_lost')],
    ['possibly lost', c('possibly_lost'), 'possibly_lost', exact('possibly_lost')],
    ['still reachable', c('still_reachable'), 'still_reachable', exact('still_reachable')],
  ]);
}

// --- the dominator tree --------------------------------------------------------
// Rows come from /api/rows: a node's children grouped by site and type (a
// group's members one level down), lists collapsed into one row (their
// nodes one level down, each node's own payload below it), the root's
// children named by the roots holding them. Every list pages.

let SORT = 'retained';
const KIND_LABEL = { node: '', group: 'group', chain: 'list' };

function rowLine(r, toggle) {
  const fill = el('span', { class: 'fill' });
  fill.style.width = `${Math.max(1, Math.round(100 * r.retained / Math.max(1, TOTAL_BYTES)))}px`;
  const bar = el('span', { class: 'bar' }, fill);
  const what = el('span', { class: 'what', title: `${r.name.replace(/`/g, '')}\nsite: ${r.site}${r.type !== 'unknown' ? '\ntype: ' + r.type : ''}` });
  if (KIND_LABEL[r.kind]) what.append(el('span', { class: `kind ${r.kind}`, text: KIND_LABEL[r.kind] }), ' ');
  what.append(...named(r.name));
  const addr = r.kind === 'group' ? el('span', { class: 'addr muted', text: 'e.g. ' }, blockLink(r.address)) : blockLink(r.address);
  return el('div', { class: 'line' }, toggle,
    el('span', { class: 'num retained', text: human(r.retained) }), el('span', { class: 'num pct', text: pct(r.retained) }), bar,
    el('span', { class: 'num bytes', text: human(r.bytes) }), el('span', { class: 'num count', text: r.count.toLocaleString('en-US') }),
    what,
    r.class !== 'still_reachable' ? el('span', { class: `class ${r.class}`, text: r.class.replace(/_/g, ' ') }) : null,
    r.held_by ? el('span', { class: 'held', text: `held by ${r.held_by}` }) : null,
    addr);
}

// A name whose `quoted` parts (a type, a site, a symbol) show as code.
function named(text) {
  return text.split('`').map((part, i) => i % 2 ? el('code', { text: part }) : part);
}

// What opening a row asks for.
function below(r, parent) {
  if (r.kind === 'group') return { parent, group: r.group };
  if (r.kind === 'chain') return { chain: r.address };
  if (r.next) return { payload: r.address };
  return { parent: r.address };
}

function treeRow(r, parent) {
  const li = el('li', { class: `node ${r.kind}`, 'data-address': r.address, 'data-kind': r.kind, 'data-retained': String(r.retained), 'data-count': String(r.count) });
  const toggle = el('button', { class: 'toggle', type: 'button', 'aria-expanded': 'false', text: r.children > 0 ? '▸' : '·', title: r.children > 0 ? `${r.children.toLocaleString('en-US')} below` : '' });
  if (r.children === 0) toggle.disabled = true;
  li.append(rowLine(r, toggle));
  const kids = el('ul', { class: 'children' });
  li.append(kids);
  let loaded = false;
  toggle.addEventListener('click', async () => {
    const open = toggle.getAttribute('aria-expanded') === 'true';
    toggle.setAttribute('aria-expanded', String(!open));
    toggle.textContent = open ? '▸' : '▾';
    kids.hidden = open;
    if (!open && !loaded) {
      loaded = true;
      await loadRows(kids, below(r, parent), 0);
    }
  });
  return li;
}

// A "show more" button at the end of a cut list.
function moreButton(shown, total, page, load) {
  const left = total - shown;
  const li = el('li', { class: 'more' }, el('button', { type: 'button', text: `show ${Math.min(page, left).toLocaleString('en-US')} more of ${left.toLocaleString('en-US')}` }));
  li.querySelector('button').addEventListener('click', async () => { li.remove(); await load(shown); });
  return li;
}

async function loadRows(ul, params, offset) {
  const busy = el('li', { class: 'muted busy', text: 'loading…' });
  ul.append(busy);
  try {
    const page = await api('/api/rows', { ...params, sort: SORT, offset, n: PAGE });
    busy.remove();
    // Members of a group or a list are children of the group's parent.
    const parent = params.group != null ? params.parent : page.parent;
    for (const r of page.rows) ul.append(treeRow(r, parent));
    const shown = page.offset + page.rows.length;
    if (shown < page.total) ul.append(moreButton(shown, page.total, PAGE, o => loadRows(ul, params, o)));
    ul.dataset.loaded = 'true';
  } catch (e) {
    busy.textContent = `error: ${e.message}`;
  }
}

function columnHeads(onSort) {
  const head = el('div', { class: 'line heads' }, el('span', { class: 'toggle' }));
  const col = (key, text, cls) => {
    const b = el('button', { type: 'button', class: `sort ${cls}${SORT === key ? ' active' : ''}`, 'data-sort': key, text: text + (SORT === key ? (key === 'name' ? ' ▴' : ' ▾') : '') });
    b.addEventListener('click', () => onSort(key));
    return b;
  };
  head.append(col('retained', 'retained', 'num retained'), el('span', { class: 'num pct', text: '%' }), el('span', { class: 'bar' }),
    col('bytes', 'own bytes', 'num bytes'), col('count', 'blocks', 'num count'), col('name', 'what', 'what'));
  return head;
}

async function showTree(view) {
  view.append(el('p', { class: 'note', text: 'Each row retains what it dominates: the bytes freed if it alone were freed. Siblings of one site and type are one group, a linked list is one row; open a row to see what is below it.' }));
  const heads = el('div', { class: 'heads-wrap' });
  const ul = el('ul', { class: 'tree', id: 'tree' });
  const draw = async () => {
    delete ul.dataset.loaded;
    heads.replaceChildren(columnHeads(async key => { SORT = key; ul.replaceChildren(); await draw(); }));
    await loadRows(ul, { parent: 'root' }, 0);
  };
  view.append(heads, ul);
  await draw();
}

// --- the first screen: suspects --------------------------------------------------

const SUSPECT_VERB = { retains: 'retains', lost: 'lost', grew: 'grew by' };

function pathList(steps) {
  const ol = el('ol', { class: 'path' });
  if (steps.length === 0) return ol;
  const item = s => el('li', {}, `${s.offset ? `+${s.offset} ` : ''}→ `, blockLink(s.to), ` ${s.site || ''}`);
  ol.append(el('li', { class: 'start', text: steps[0].from }));
  // A long path keeps its two ends.
  if (steps.length <= 6) for (const s of steps) ol.append(item(s));
  else {
    for (const s of steps.slice(0, 2)) ol.append(item(s));
    ol.append(el('li', { class: 'muted', text: `… ${(steps.length - 4).toLocaleString('en-US')} more hops …` }));
    for (const s of steps.slice(-2)) ol.append(item(s));
  }
  return ol;
}

async function showSuspects(view) {
  const list = await api('/api/suspects');
  view.append(el('h2', { text: 'What to look at first' }));
  if (list.length === 0) {
    view.append(el('p', { class: 'note', text: 'Nothing stands out: no structure retains 10% of the heap, no block is lost.' }));
    return;
  }
  const box = el('div', { id: 'suspects' });
  list.forEach((s, i) => {
    const share = s.kind === 'grew' ? `${s.share.toFixed(1)}% of the growth` : `${s.share.toFixed(1)}% of the heap`;
    const head = el('h3', {}, el('span', { class: `badge ${s.kind}`, text: s.kind }), ' ',
      el('span', { class: 'big', text: `${SUSPECT_VERB[s.kind]} ${human(s.bytes)}` }), ` (${share}) `, el('span', { class: 'what' }, ...named(s.what)));
    const card = el('section', { class: `suspect ${s.kind}`, 'data-kind': s.kind, 'data-bytes': String(s.bytes) }, head);
    const facts = el('p', { class: 'facts-line' });
    if (s.held_by) facts.append(`held by ${s.held_by} · `);
    facts.append(`${s.blocks.toLocaleString('en-US')} blocks`);
    if (s.address) facts.append(' · open ', blockLink(s.address));
    card.append(facts);
    if (s.path.length) card.append(el('div', { class: 'sub', text: 'How it is reached' }), pathList(s.path));
    if (s.sites.length) {
      card.append(el('div', { class: 'sub', text: 'Allocated at' }),
        table(['bytes', 'blocks', 'site'], s.sites.map(x => [human(x.bytes), x.blocks.toLocaleString('en-US'), x.site]), 'sites'));
    }
    box.append(card);
    if (i === 0) card.classList.add('first');
  });
  view.append(box);
}

// --- search ----------------------------------------------------------------------

async function showSearch(view, q) {
  const r = await api('/api/search', { q, n: 50 });
  document.getElementById('search').value = q;
  view.append(el('h2', { text: `Search: ${q}` }));
  if (r.blocks.length === 0 && r.groups.length === 0) {
    view.append(el('p', { class: 'note', text: 'Nothing found. Search by address (0x…), a root\'s name (a static, a function\'s frame), a site or a type.' }));
    return;
  }
  if (r.blocks.length) {
    view.append(el('h3', { text: 'Blocks' }), table(['retained', 'size', 'block', 'what', 'held by'],
      r.blocks.map(b => [human(b.retained), human(b.bytes), blockLink(b.address), b.name, b.held_by || '']), 'found-blocks'));
  }
  if (r.groups.length) {
    view.append(el('h3', { text: 'Sites and types' }), table(['bytes', 'blocks', 'by', 'name'],
      r.groups.map(g => [human(g.bytes), g.blocks.toLocaleString('en-US'), g.by,
        el('a', { href: `#blocks=${g.by}:${encodeURIComponent(g.key)}`, class: 'group-link', text: g.key })]), 'found-groups'));
  }
}

// The blocks of one site or type, largest retained first.
async function showBlocksOf(view, arg) {
  const i = arg.indexOf(':');
  const by = arg.slice(0, i), key = decodeURIComponent(arg.slice(i + 1));
  view.append(el('h2', { text: `Blocks of ${by} ${key}` }));
  const ul = el('ul', { class: 'tree', id: 'blocks-of' });
  view.append(ul);
  const load = async offset => {
    const page = await api('/api/blocks', { by, key, offset, n: PAGE });
    for (const r of page.rows) ul.append(treeRow(r, null));
    const shown = page.offset + page.rows.length;
    if (shown < page.total) ul.append(moreButton(shown, page.total, PAGE, load));
  };
  await load(0);
}

// --- groups ----------------------------------------------------------------------

async function showGroups(view, by) {
  const [retained, top] = await Promise.all([api('/api/retained', { by, n: 100 }), api('/api/top', { by, n: 100 })]);
  view.append(el('h2', { text: `Retained by ${by}` }),
    el('p', { class: 'note', text: `What the ${by}'s blocks hold that no block of another ${by} dominates: each byte counted once.` }),
    table(['retained', '%', 'bytes', 'blocks', by], retained.map(r => [B(r.retained), [pct(r.retained), r.retained], B(r.bytes), N(r.blocks), groupLink(by, r.key)]), `retained-by-${by}`),
    el('h2', { text: `Live bytes by ${by}` }),
    table(['bytes', '%', 'allocations', by], top.map(r => [B(r.bytes), [pct(r.bytes), r.bytes], N(r.allocations), groupLink(by, r.key)]), `top-by-${by}`));
}

function groupLink(by, key) {
  return [el('a', { href: `#blocks=${by}:${encodeURIComponent(key)}`, text: key }), key];
}

// --- leaks -----------------------------------------------------------------------

async function showLeaks(view) {
  const l = await api('/api/leaks');
  if (l.groups.length === 0) { view.append(el('p', { text: 'No lost blocks.' })); return; }
  view.append(el('h2', { text: 'Lost and possibly lost blocks by allocation site' }));
  for (const g of l.groups) {
    const head = `${human(g.bytes)} in ${g.blocks} blocks ${g.kind.replace(/_/g, ' ')}` +
      (g.indirect_blocks > 0 ? ` (+${human(g.indirect_bytes)} in ${g.indirect_blocks} blocks indirectly lost)` : '') +
      (g.type !== 'unknown' ? `, ${g.type}` : '');
    view.append(el('section', { class: 'leak' }, el('h3', { text: head }),
      el('p', {}, 'e.g. ', blockLink(g.example)),
      el('ol', { class: 'stack' }, ...(g.stack.length ? g.stack : [g.site]).map(f => el('li', { text: f })))));
  }
}

// --- flamegraph ------------------------------------------------------------------

async function showFlame(view) {
  view.append(el('p', { class: 'note', text: 'Live bytes by allocation stack: click a frame to zoom into it, Reset Zoom to come back.' }),
    el('iframe', { class: 'flame', id: 'flame', src: `/flame.svg?token=${TOKEN}`, title: 'flamegraph' }));
}

// --- growth ----------------------------------------------------------------------

// A small chart of a structure's bytes in each dump, oldest first: one
// point a dump, heights from zero to the largest, each point titled with
// its dump and bytes.
const SVG = 'http://www.w3.org/2000/svg';
function sparkline(bytes, names) {
  const w = 160, h = 40, pad = 4;
  const max = Math.max(1, ...bytes);
  const x = i => pad + (bytes.length < 2 ? 0 : i * (w - 2 * pad) / (bytes.length - 1));
  const y = b => h - pad - b * (h - 2 * pad) / max;
  const svg = document.createElementNS(SVG, 'svg');
  for (const [k, v] of [['class', 'spark'], ['width', w], ['height', h], ['viewBox', `0 0 ${w} ${h}`], ['role', 'img']]) svg.setAttribute(k, v);
  svg.setAttribute('aria-label', `bytes in each dump: ${bytes.map(human).join(', ')}`);
  const base = document.createElementNS(SVG, 'line');
  for (const [k, v] of [['x1', pad], ['x2', w - pad], ['y1', h - pad], ['y2', h - pad], ['class', 'axis']]) base.setAttribute(k, v);
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', bytes.map((b, i) => `${x(i).toFixed(1)},${y(b).toFixed(1)}`).join(' '));
  svg.append(base, line);
  bytes.forEach((b, i) => {
    const c = document.createElementNS(SVG, 'circle');
    for (const [k, v] of [['cx', x(i).toFixed(1)], ['cy', y(b).toFixed(1)], ['r', 2.5], ['data-bytes', String(b)]]) c.setAttribute(k, v);
    const t = document.createElementNS(SVG, 'title');
    t.textContent = `${names[i] || `dump ${i + 1}`}: ${human(b)}`;
    c.append(t);
    svg.append(c);
  });
  return svg;
}

function duration(ns) {
  const s = ns / 1e9;
  if (s < 1) return `${(ns / 1e6).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// Across a series (--series): the structures that grow, most steadily
// first, each with its chart, root, path in the newest dump and the sites
// adding to it.
async function showSeries(view) {
  const g = await api('/api/growth', { n: 100 });
  view.append(el('p', { id: 'series-facts' },
    `${g.dumps.length} dumps of process ${g.pid} (${g.exe}) over ${duration(g.span_ns)}; live bytes `, sparkline(g.live, g.dumps),
    ` ${g.live.map(human).join(' → ')}`));
  if (g.rows.length === 0) {
    view.append(el('p', { class: 'note', text: 'Nothing grows: no structure held more at half the steps or more and kept what it gained.' }));
    return;
  }
  const shown = g.growing > g.rows.length ? ` (${g.rows.length} shown)` : '';
  view.append(el('h2', { text: `${g.growing.toLocaleString('en-US')} structure${g.growing === 1 ? ' grows' : 's grow'}${shown}` }));
  const box = el('div', { id: 'growing' });
  for (const r of g.rows) {
    const first = r.bytes[0], last = r.bytes[r.bytes.length - 1];
    const card = el('section', { class: 'growing', 'data-key': r.key, 'data-bytes': JSON.stringify(r.bytes) });
    const perHour = g.span_ns > 0 ? ` · ${signed(r.per_hour, human)} per hour` : '';
    card.append(el('div', { class: 'chart' }, sparkline(r.bytes, g.dumps)),
      el('div', { class: 'body' },
        el('h3', {}, el('span', { class: 'what' }, ...named(r.key))),
        el('p', { class: 'facts-line', text: `${human(first)} → ${human(last)} · ${signed(r.per_step, human)} per step${perHour} · grew at ${r.steps_grown} of ${r.steps} steps · ${r.blocks[r.blocks.length - 1].toLocaleString('en-US')} blocks now` }),
        r.root && r.root !== r.key ? el('p', { class: 'facts-line', text: `held by ${r.root}` }) : null,
        r.path.length ? el('div', { class: 'sub', text: 'How it is reached (newest dump)' }) : null,
        r.path.length ? pathList(r.path) : null,
        r.sites.length ? el('div', { class: 'sub', text: 'Added at' }) : null,
        r.sites.length ? table(['bytes added', 'blocks added', 'site'],
          r.sites.map(x => [[signed(x.bytes, human), x.bytes], [signed(x.blocks, n => n.toLocaleString('en-US')), x.blocks], x.site]), 'sites') : null));
    box.append(card);
  }
  view.append(box);
}

async function showGrowth(view) {
  if (HAS_SERIES) return showSeries(view);
  if (!HAS_BASELINE) { view.append(el('p', { text: 'No baseline: start the viewer with --baseline OLD.DUMP or --series OLDER.DUMP... to see the growth.' })); return; }
  const d = await api('/api/diff');
  view.append(el('p', { text: `live bytes: ${human(d.old_bytes)} → ${human(d.new_bytes)} (${signed(d.new_bytes - d.old_bytes, human)}); ${d.new.blocks.toLocaleString('en-US')} new blocks (${human(d.new.bytes)}), ${d.gone.blocks.toLocaleString('en-US')} gone (${human(d.gone.bytes)})` }));
  for (const [title, rows, cls] of [['Growth by site', d.by_site, 'growth-by-site'], ['Growth by type', d.by_type, 'growth-by-type']]) {
    view.append(el('h2', { text: title }), table(['Δ bytes', 'Δ blocks', 'before', 'after', 'key'],
      rows.slice(0, 100).map(r => [[signed(r.delta_bytes, human), r.delta_bytes], [signed(r.delta_allocations, n => n.toLocaleString('en-US')), r.delta_allocations], B(r.old_bytes), B(r.new_bytes), r.key]), cls));
  }
}

// --- a block ---------------------------------------------------------------------

function hexdump(hex, base) {
  const lines = [];
  for (let i = 0; i < hex.length; i += 32) {
    const chunk = hex.slice(i, i + 32);
    const bytes = chunk.match(/../g) || [];
    const ascii = bytes.map(b => { const c = parseInt(b, 16); return c >= 32 && c < 127 ? String.fromCharCode(c) : '.'; }).join('');
    lines.push(`${(i / 2).toString(16).padStart(6, '0')}  ${bytes.join(' ').padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

async function showBlock(view, addr) {
  const b = await api('/api/block', { address: addr, n: 100 });
  view.append(el('h2', { text: `Block ${b.address}` }));
  const dl = el('dl', { class: 'facts', id: 'block-facts' });
  facts(dl, [
    ['size', human(b.size), 'size', b.size], ['retained', human(b.retained), 'retained', b.retained],
    ['dominates', `${b.dominated} blocks`, 'dominated'], ['class', b.class.replace(/_/g, ' '), 'class'],
    ['type', b.type, 'type'], ['site', b.site, 'site'],
  ]);
  view.append(dl);
  view.append(el('p', {}, 'immediate dominator: ', b.dominator === 'root' ? 'the roots' : blockLink(b.dominator)));
  if (b.stack.length) view.append(el('h3', { text: 'Allocated at' }), el('ol', { class: 'stack' }, ...b.stack.map(f => el('li', { text: f }))));
  view.append(el('h3', { text: 'Contents' }));
  if (b.contents == null) view.append(el('p', { class: 'muted', text: 'A compact dump keeps only the pointers (below), not the bytes.' }));
  else view.append(el('pre', { class: 'hex', id: 'contents', text: hexdump(b.contents) + (b.contents_truncated ? `\n… (first ${b.contents.length / 2} of ${b.size} bytes)` : '') }));
  view.append(el('h3', { text: `Points to (${b.pointers_total.toLocaleString('en-US')})` }));
  const pointers = table(['offset', 'block', 'into', 'size', 'site'], [], 'pointers');
  const pointerRow = p => el('tr', {}, el('td', { text: String(p.offset) }), el('td', {}, blockLink(p.to)), el('td', { text: String(p.into) }),
    el('td', { text: human(p.size) }), el('td', { text: p.site }));
  for (const p of b.pointers) pointers.tBodies[0].append(pointerRow(p));
  view.append(pointers);
  // The rest a page at a time.
  if (b.pointers.length < b.pointers_total) {
    const more = el('button', { type: 'button', class: 'more-pointers' });
    let shown = b.pointers.length;
    const label = () => { more.textContent = `show ${Math.min(POINTER_PAGE, b.pointers_total - shown).toLocaleString('en-US')} more of ${(b.pointers_total - shown).toLocaleString('en-US')}`; };
    label();
    more.addEventListener('click', async () => {
      more.disabled = true;
      const page = await api('/api/pointers', { address: b.address, offset: shown, n: POINTER_PAGE });
      for (const p of page.pointers) pointers.tBodies[0].append(pointerRow(p));
      shown += page.pointers.length;
      more.disabled = false;
      if (shown >= page.total) more.remove(); else label();
      pointers.dataset.shown = String(shown);
    });
    view.append(el('p', { class: 'more' }, more));
  }
  pointers.dataset.shown = String(b.pointers.length);
  view.append(el('h3', { text: `Held by (${b.holders_total.toLocaleString('en-US')})` }));
  const holders = table(['from', 'offset', 'how it is reached'], [], 'holders');
  const holderRow = h => el('tr', {}, el('td', {}, h.size != null ? blockLink(h.from) : h.from), el('td', { text: h.offset + (h.interior ? ' (interior)' : '') }),
    el('td', { text: h.size == null ? 'a root' : (h.path.length ? h.path.map(s => s.from).concat([h.from]).join(' → ') : 'nothing: it heads a lost structure') }));
  for (const h of b.holders) holders.tBodies[0].append(holderRow(h));
  view.append(holders);
  if (b.holders.length < b.holders_total) {
    const more = el('button', { type: 'button', class: 'more-holders' });
    let shown = b.holders.length;
    const label = () => { more.textContent = `show ${Math.min(POINTER_PAGE, b.holders_total - shown).toLocaleString('en-US')} more of ${(b.holders_total - shown).toLocaleString('en-US')}`; };
    label();
    more.addEventListener('click', async () => {
      more.disabled = true;
      const page = await api('/api/holders', { address: b.address, offset: shown, n: POINTER_PAGE });
      for (const h of page) holders.tBodies[0].append(holderRow(h));
      shown += page.length;
      more.disabled = false;
      if (shown >= b.holders_total || page.length === 0) more.remove(); else label();
    });
    view.append(el('p', { class: 'more' }, more));
  }
  view.append(el('h3', { text: 'Path from a root' }));
  if (b.path_start == null) view.append(el('p', { text: 'Nothing points to it: it heads a lost structure.' }));
  else {
    const ol = el('ol', { class: 'path', id: 'path' }, el('li', { text: b.path_start }));
    for (const s of b.path) ol.append(el('li', {}, `at offset ${s.offset} → `, blockLink(s.to)));
    view.append(ol);
  }
}

// --- routing ---------------------------------------------------------------------

const VIEWS = {
  suspects: v => showSuspects(v),
  tree: v => showTree(v),
  search: (v, arg) => showSearch(v, decodeURIComponent(arg || '')),
  blocks: (v, arg) => showBlocksOf(v, arg),
  sites: v => showGroups(v, 'site'),
  types: v => showGroups(v, 'type'),
  leaks: v => showLeaks(v),
  flame: v => showFlame(v),
  growth: v => showGrowth(v),
  block: (v, arg) => showBlock(v, arg),
};

async function route() {
  const hash = location.hash.slice(1) || 'suspects';
  const eq = hash.indexOf('=');
  const [name, arg] = eq < 0 ? [hash, undefined] : [hash.slice(0, eq), hash.slice(eq + 1)];
  const show = VIEWS[name] || VIEWS.suspects;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.view === name);
  const view = document.getElementById('view');
  view.replaceChildren();
  view.dataset.view = name;
  view.dataset.ready = 'false';
  try {
    await show(view, arg);
  } catch (e) {
    view.append(el('p', { class: 'error', text: `error: ${e.message}` }));
  }
  view.dataset.ready = 'true';
}

document.getElementById('growth-tab').hidden = !HAS_BASELINE && !HAS_SERIES;
document.getElementById('search-form').addEventListener('submit', e => {
  e.preventDefault();
  const q = document.getElementById('search').value.trim();
  if (q) location.hash = `search=${encodeURIComponent(q)}`;
});
window.addEventListener('hashchange', route);
header().then(route, e => {
  document.getElementById('view').replaceChildren(el('p', { class: 'error', text: `error: ${e.message}` }));
});
