// The heapdump viewer: every figure comes from the JSON routes, which
// answer as the command line's --json does. Text goes into the page as
// text (never as markup): a site or type name is program data.
'use strict';

const TOKEN = document.querySelector('meta[name=heapdump-token]').content;
const HAS_BASELINE = document.querySelector('meta[name=heapdump-baseline]').content === '1';
const PAGE = 50;
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

function table(headers, rows, cls) {
  const t = el('table', { class: cls || '' });
  t.append(el('thead', {}, el('tr', {}, ...headers.map(h => el('th', { text: h })))));
  const tb = el('tbody');
  for (const r of rows) tb.append(el('tr', {}, ...r.map(c => el('td', {}, c instanceof Node ? c : String(c)))));
  t.append(tb);
  return t;
}

function facts(dl, pairs) {
  dl.replaceChildren();
  for (const [k, v, key] of pairs) dl.append(el('div', { class: 'fact' }, el('dt', { text: k }), el('dd', { text: v, 'data-key': key || k })));
}

async function header() {
  const s = await api('/api/summary');
  TOTAL_BYTES = s.bytes;
  const pairs = [
    ['program', s.cmdline.join(' ') || s.exe, 'program'],
    ['pid', String(s.pid), 'pid'],
    ['reason', s.reason, 'reason'],
    ['mode', s.mode, 'mode'],
    ['live bytes', `${human(s.bytes)} (${s.bytes})`, 'bytes'],
    ['allocations', String(s.allocations), 'allocations'],
    ['threads', String(s.threads), 'threads'],
  ];
  if (s.peak_bytes != null) pairs.push(['peak', human(s.peak_bytes), 'peak_bytes']);
  if (s.pause_us != null) pairs.push(['pause', `${(s.pause_us / 1000).toFixed(1)} ms`, 'pause_us']);
  facts(document.getElementById('summary'), pairs);
  const l = await api('/api/leaks');
  const c = k => `${l[k].bytes} bytes in ${l[k].blocks} blocks`;
  facts(document.getElementById('leak-summary'), [
    ['definitely lost', c('definitely_lost'), 'definitely_lost'],
    ['indirectly lost', c('indirectly_lost'), 'indirectly_lost'],
    ['possibly lost', c('possibly_lost'), 'possibly_lost'],
    ['still reachable', c('still_reachable'), 'still_reachable'],
  ]);
}

// --- the dominator tree --------------------------------------------------------

function nodeRow(n, depth) {
  const li = el('li', { class: 'node', 'data-address': n.address, 'data-retained': String(n.retained) });
  const toggle = el('button', { class: 'toggle', type: 'button', 'aria-expanded': 'false', text: n.children > 0 ? '▸' : '·' });
  if (n.children === 0) toggle.disabled = true;
  const bar = el('span', { class: 'bar' });
  bar.style.width = `${Math.max(1, Math.round(100 * n.retained / Math.max(1, TOTAL_BYTES)))}px`;
  const label = n.type !== 'unknown' ? n.type : n.site;
  const line = el('div', { class: 'line' }, toggle,
    el('span', { class: 'num retained', text: human(n.retained) }), el('span', { class: 'num', text: pct(n.retained) }), bar,
    el('span', { class: 'num', text: `${n.size} B` }), blockLink(n.address),
    el('span', { class: `class ${n.class}`, text: n.class.replace(/_/g, ' ') }),
    el('span', { class: 'what', text: label, title: n.site }),
    n.dominated > 1 ? el('span', { class: 'muted', text: `${n.dominated} blocks, ${n.children} children` }) : null);
  li.append(line);
  const kids = el('ul', { class: 'children' });
  li.append(kids);
  let loaded = false;
  toggle.addEventListener('click', async () => {
    const open = toggle.getAttribute('aria-expanded') === 'true';
    if (open) {
      kids.hidden = true;
      toggle.setAttribute('aria-expanded', 'false');
      toggle.textContent = '▸';
      return;
    }
    toggle.setAttribute('aria-expanded', 'true');
    toggle.textContent = '▾';
    kids.hidden = false;
    if (!loaded) {
      loaded = true;
      await loadChildren(kids, n.address, 0, depth + 1);
    }
  });
  return li;
}

async function loadChildren(ul, parent, offset, depth) {
  const busy = el('li', { class: 'muted', text: 'loading…' });
  ul.append(busy);
  try {
    const page = await api('/api/tree', { parent, offset, n: PAGE });
    busy.remove();
    for (const n of page.nodes) ul.append(nodeRow(n, depth));
    const shown = page.offset + page.nodes.length;
    if (shown < page.total) {
      const more = el('li', { class: 'more' }, el('button', { type: 'button', text: `show ${Math.min(PAGE, page.total - shown)} more of ${page.total - shown}` }));
      more.querySelector('button').addEventListener('click', async () => { more.remove(); await loadChildren(ul, parent, shown, depth); });
      ul.append(more);
    }
    ul.dataset.loaded = 'true';
  } catch (e) {
    busy.textContent = `error: ${e.message}`;
  }
}

async function showTree(view) {
  view.append(el('p', { class: 'note', text: 'Each block retains what it dominates: the bytes freed if it alone were freed. Roots and the heads of lost structures hang below the top; children load as you open a node, largest first.' }));
  const ul = el('ul', { class: 'tree', id: 'tree' });
  view.append(ul);
  await loadChildren(ul, 'root', 0, 0);
}

// --- groups ----------------------------------------------------------------------

async function showGroups(view, by) {
  const [retained, top] = await Promise.all([api('/api/retained', { by, n: 100 }), api('/api/top', { by, n: 100 })]);
  view.append(el('h2', { text: `Retained by ${by}` }),
    el('p', { class: 'note', text: `What the ${by}'s blocks hold that no block of another ${by} dominates: each byte counted once.` }),
    table(['retained', '%', 'bytes', 'blocks', by], retained.map(r => [human(r.retained), pct(r.retained), human(r.bytes), r.blocks, r.key]), `retained-by-${by}`),
    el('h2', { text: `Live bytes by ${by}` }),
    table(['bytes', '%', 'allocations', by], top.map(r => [human(r.bytes), pct(r.bytes), r.allocations, r.key]), `top-by-${by}`));
}

// --- leaks -----------------------------------------------------------------------

async function showLeaks(view) {
  const l = await api('/api/leaks');
  if (l.groups.length === 0) { view.append(el('p', { text: 'No lost blocks.' })); return; }
  view.append(el('h2', { text: 'Lost and possibly lost blocks by allocation site' }));
  for (const g of l.groups) {
    const head = `${g.bytes} bytes in ${g.blocks} blocks ${g.kind.replace(/_/g, ' ')}` +
      (g.indirect_blocks > 0 ? ` (+${g.indirect_bytes} bytes in ${g.indirect_blocks} blocks indirectly lost)` : '') +
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

async function showGrowth(view) {
  if (!HAS_BASELINE) { view.append(el('p', { text: 'No baseline: start the viewer with --baseline OLD.DUMP to see the growth.' })); return; }
  const d = await api('/api/diff');
  view.append(el('p', { text: `live bytes: ${human(d.old_bytes)} → ${human(d.new_bytes)} (${d.new_bytes - d.old_bytes >= 0 ? '+' : ''}${d.new_bytes - d.old_bytes}); ${d.new.blocks} new blocks, ${d.gone.blocks} gone` }));
  for (const [title, rows] of [['Growth by site', d.by_site], ['Growth by type', d.by_type]]) {
    view.append(el('h2', { text: title }), table(['Δ bytes', 'Δ blocks', 'old bytes', 'new bytes', 'key'],
      rows.slice(0, 100).map(r => [(r.delta_bytes >= 0 ? '+' : '') + r.delta_bytes, (r.delta_allocations >= 0 ? '+' : '') + r.delta_allocations, r.old_bytes, r.new_bytes, r.key])));
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
    ['size', `${b.size} B`, 'size'], ['retained', `${human(b.retained)} (${b.retained})`, 'retained'],
    ['dominates', `${b.dominated} blocks`, 'dominated'], ['class', b.class.replace(/_/g, ' '), 'class'],
    ['type', b.type, 'type'], ['site', b.site, 'site'],
  ]);
  view.append(dl);
  view.append(el('p', {}, 'immediate dominator: ', b.dominator === 'root' ? 'the roots' : blockLink(b.dominator)));
  if (b.stack.length) view.append(el('h3', { text: 'Allocated at' }), el('ol', { class: 'stack' }, ...b.stack.map(f => el('li', { text: f }))));
  view.append(el('h3', { text: 'Contents' }));
  if (b.contents == null) view.append(el('p', { class: 'muted', text: 'A compact dump keeps only the pointers (below), not the bytes.' }));
  else view.append(el('pre', { class: 'hex', id: 'contents', text: hexdump(b.contents) + (b.contents_truncated ? `\n… (first ${b.contents.length / 2} of ${b.size} bytes)` : '') }));
  view.append(el('h3', { text: `Points to (${b.pointers_total})` }),
    table(['offset', 'block', 'into', 'size', 'site'], b.pointers.map(p => [p.offset, blockLink(p.to), p.into, p.size, p.site]), 'pointers'));
  view.append(el('h3', { text: `Held by (${b.holders_total})` }),
    table(['from', 'offset', 'how it is reached'], b.holders.map(h => [
      h.size != null ? blockLink(h.from) : h.from, h.offset + (h.interior ? ' (interior)' : ''),
      h.size == null ? 'a root' : (h.path.length ? h.path.map(s => s.from).concat([h.from]).join(' → ') : 'nothing: it heads a lost structure'),
    ]), 'holders'));
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
  tree: v => showTree(v),
  sites: v => showGroups(v, 'site'),
  types: v => showGroups(v, 'type'),
  leaks: v => showLeaks(v),
  flame: v => showFlame(v),
  growth: v => showGrowth(v),
  block: (v, arg) => showBlock(v, arg),
};

async function route() {
  const [name, arg] = (location.hash.slice(1) || 'tree').split('=');
  const show = VIEWS[name] || VIEWS.tree;
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

document.getElementById('growth-tab').hidden = !HAS_BASELINE;
window.addEventListener('hashchange', route);
header().then(route, e => {
  document.getElementById('view').replaceChildren(el('p', { class: 'error', text: `error: ${e.message}` }));
});
