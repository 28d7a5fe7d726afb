// Drives the viewer in headless Chromium (puppeteer-core) as a person
// would: waits for the tree, opens three levels, opens a block, follows a
// retainer, clicks into the flamegraph. Prints what the page showed as
// JSON for the Rust test to check against the command line.
const puppeteer = require('puppeteer-core');

(async () => {
  const [chromium, url, profile, shots, start] = process.argv.slice(2);
  require('fs').mkdirSync(shots, { recursive: true });
  const browser = await puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--user-data-dir=' + profile],
  });
  const out = { errors: [] };
  try {
    const page = await browser.newPage();
    page.on('pageerror', e => out.errors.push(String(e)));
    page.on('console', m => { if (m.type() === 'error') out.errors.push(m.text()); });
    page.on('requestfailed', r => out.errors.push(`request failed: ${r.url()}`));
    page.setDefaultTimeout(60000);
    await page.setViewport({ width: 1400, height: 900 });
    await page.goto(`${url}#tree`, { waitUntil: 'load' });
    await page.waitForSelector('#view[data-ready=true] #tree > li.node');
    await page.waitForFunction(() => !document.querySelector('#tree li.busy'));
    await page.waitForSelector('#leak-summary dd');
    out.header = await page.evaluate(() =>
      Object.fromEntries([...document.querySelectorAll('header dd[data-key]')].map(d => [d.dataset.key, { text: d.textContent, value: d.dataset.value }])));
    const rows = sel => page.evaluate(sel => [...document.querySelectorAll(sel)]
      .map(li => ({ address: li.dataset.address, retained: Number(li.dataset.retained), kind: li.dataset.kind })), sel);
    out.top = await rows('#tree > li.node');

    // Three levels opened below the roots: three rows, each with rows
    // below it (a lost structure's first: `start`, the head of one),
    // found through the viewer's own routes, then opened by clicking as
    // a person would. Lists are left to viewer_shapes.js (their nodes
    // come in list order, not largest first).
    const chain = await page.evaluate(async start => {
      const token = document.querySelector('meta[name=heapdump-token]').content;
      // The rows the page shows (siblings of one site and type grouped,
      // lists as one row), and what opening one asks for.
      const rows = async q => (await (await fetch(`/api/rows?${new URLSearchParams({ ...q, n: 100, token })}`)).json());
      const below = (r, parent) => r.kind === 'group' ? { parent, group: r.group } : r.kind === 'chain' ? { chain: r.address } : r.next ? { payload: r.address } : { parent: r.address };
      const find = async (q, depth) => {
        const page = await rows(q);
        // The deepest level shows a single block to open.
        if (depth === 0) return page.rows.some(r => r.kind === 'node') ? [] : null;
        const parent = q.group != null ? q.parent : page.parent;
        // The lost structure first, when it is among them.
        const open = page.rows.filter(r => r.children > 0 && r.kind !== 'chain').sort((a, b) => (b.address === start) - (a.address === start));
        for (const r of open) {
          const rest = await find(below(r, parent), depth - 1);
          if (rest) return [{ address: r.address, kind: r.kind }, ...rest];
        }
        return null;
      };
      return find({ parent: 'root' }, 3);
    }, start);
    out.levels = [];
    let scope = '#tree';
    for (const { address: addr, kind } of chain || []) {
      const node = `${scope} > li.node[data-address="${addr}"][data-kind="${kind}"]`;
      // Not among the first children shown: "show more" until it is.
      while (!(await page.$(node))) {
        const more = await page.$(`${scope} > li.more > button`);
        if (!more) throw new Error(`${addr} is not among the children of ${scope}`);
        await more.click();
        await page.waitForFunction(sel => !document.querySelector(sel + ' > li.muted'), {}, scope);
      }
      await page.click(`${node} > .line > .toggle`);
      await page.waitForSelector(`${node} > ul.children[data-loaded=true]`);
      out.levels.push({ address: addr, children: await rows(`${node} > ul.children > li.node`) });
      scope = `${node} > ul.children`;
    }
    await page.screenshot({ path: `${shots}/tree.png` });

    // Open the deepest level's first block.
    const last = out.levels[out.levels.length - 1];
    const target = last.children.find(c => c.kind === 'node').address;
    await page.click(`${scope} > li.node[data-address="${target}"][data-kind=node] > .line > a.addr`);
    await page.waitForFunction(() => document.querySelector('#view').dataset.view === 'block' && document.querySelector('#view').dataset.ready === 'true');
    const blockPage = () => page.evaluate(() => ({
      address: document.querySelector('#view h2').textContent.replace('Block ', ''),
      facts: Object.fromEntries([...document.querySelectorAll('#block-facts dd')].map(d => [d.dataset.key, d.dataset.value || d.textContent])),
      contents: !!document.querySelector('#contents'),
      holders: [...document.querySelectorAll('table.holders tbody tr td:first-child a.addr')].map(a => a.textContent),
      pointsTo: [...document.querySelectorAll('table.pointers a.addr')].map(a => a.textContent),
    }));
    out.block = await blockPage();
    await page.screenshot({ path: `${shots}/block.png` });

    // Follow a retainer.
    if (out.block.holders.length > 0) {
      const h = out.block.holders[0];
      await page.click('table.holders tbody tr td:first-child a.addr');
      await page.waitForFunction(h => document.querySelector('#view').dataset.ready === 'true'
        && document.querySelector('#view h2') && document.querySelector('#view h2').textContent === `Block ${h}`, {}, h);
      out.retainer = await blockPage();
    }

    // The flamegraph: the root frame, then a click into the widest other.
    await page.click('#tabs a[data-view=flame]');
    await page.waitForSelector('#flame');
    const frame = await (await page.$('#flame')).contentFrame();
    await frame.waitForSelector('#frames > g');
    out.flameRoot = await frame.evaluate(() =>
      [...document.querySelectorAll('#frames > g > title')].map(t => t.textContent).find(t => t.startsWith('all ')));
    const widest = await frame.evaluate(() => {
      let best = -1, width = -1;
      document.querySelectorAll('#frames > g').forEach((g, i) => {
        const w = parseInt(g.querySelector('rect').getAttribute('fg:w'), 10);
        if (!g.querySelector('title').textContent.startsWith('all ') && w > width) { width = w; best = i; }
      });
      return best;
    });
    const frames = await frame.$$('#frames > g');
    const before = await frames[widest].evaluate(g => parseFloat(g.querySelector('rect').getAttribute('width')));
    await frames[widest].click();
    await frame.waitForFunction(() => !document.getElementById('unzoom').classList.contains('hide'));
    const after = await frames[widest].evaluate(g => parseFloat(g.querySelector('rect').getAttribute('width')));
    out.zoomed = after > before;
    await page.screenshot({ path: `${shots}/flame.png` });
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
