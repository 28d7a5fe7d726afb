// Drives the viewer in headless Chromium on tests/c/viewer_shapes.c's dump:
// the first screen (suspects), the tree's groups and collapsed list opened,
// a sort by column, a search, and "show more" on a block of 100,000
// pointers. Prints what the page showed as JSON for the Rust test.
const puppeteer = require('puppeteer-core');

(async () => {
  const [chromium, url, profile, shots] = process.argv.slice(2);
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
    const ready = () => page.waitForFunction(() => document.querySelector('#view').dataset.ready === 'true');
    const settled = sel => page.waitForFunction(sel => !document.querySelector(`${sel} li.busy`), {}, sel);

    // The first screen: the suspects.
    await page.goto(url, { waitUntil: 'load' });
    await ready();
    await page.waitForSelector('#leak-summary dd');
    out.view = await page.evaluate(() => document.querySelector('#view').dataset.view);
    out.suspects = await page.evaluate(() => [...document.querySelectorAll('#suspects .suspect')].map(s => ({
      kind: s.dataset.kind, bytes: Number(s.dataset.bytes), text: s.textContent,
      path: s.querySelectorAll('.path li').length, sites: s.querySelectorAll('table.sites tbody tr').length,
    })));
    out.header = await page.evaluate(() =>
      Object.fromEntries([...document.querySelectorAll('header dd[data-key]')].map(d => [d.dataset.key, { text: d.textContent, value: d.dataset.value }])));
    await page.screenshot({ path: `${shots}/first-screen.png` });

    // The tree: the root's rows.
    await page.click('#tabs a[data-view=tree]');
    await ready();
    await settled('#tree');
    const rows = sel => page.evaluate(sel => [...document.querySelectorAll(sel)].map(li => ({
      kind: li.dataset.kind, address: li.dataset.address, retained: Number(li.dataset.retained), count: Number(li.dataset.count),
      what: li.querySelector(':scope > .line .what').textContent,
      held: (li.querySelector(':scope > .line .held') || {}).textContent || null,
    })), sel);
    out.root = await rows('#tree > li.node');

    // The group of 400 opened: 50 members, then 50 more.
    const group = '#tree > li.group';
    await page.click(`${group} > .line > .toggle`);
    await page.waitForSelector(`${group} > ul.children[data-loaded=true]`);
    out.groupFirst = await rows(`${group} > ul.children > li.node`);
    await page.screenshot({ path: `${shots}/grouped-node.png` });
    await page.click(`${group} > ul.children > li.more > button`);
    await page.waitForFunction(sel => document.querySelectorAll(sel).length > 50, {}, `${group} > ul.children > li.node`);
    out.groupMore = await rows(`${group} > ul.children > li.node`);
    await page.click(`${group} > .line > .toggle`);

    // The list opened: its nodes, then the first node's own payload.
    const list = '#tree > li.chain';
    await page.click(`${list} > .line > .toggle`);
    await page.waitForSelector(`${list} > ul.children[data-loaded=true]`);
    out.listNodes = await rows(`${list} > ul.children > li.node`);
    out.listMore = await page.evaluate(sel => (document.querySelector(sel) || {}).textContent || null, `${list} > ul.children > li.more > button`);
    const node = `${list} > ul.children > li.node:first-child`;
    await page.click(`${node} > .line > .toggle`);
    await page.waitForSelector(`${node} > ul.children[data-loaded=true]`);
    out.payload = await rows(`${node} > ul.children > li.node`);
    await page.screenshot({ path: `${shots}/list-opened.png` });

    // Sorted by the blocks column.
    await page.click('.heads button[data-sort=count]');
    await page.waitForSelector('#tree[data-loaded=true] > li.node');
    await settled('#tree');
    out.byCount = await rows('#tree > li.node');

    // A search by a static's name, then by a site.
    const search = async q => {
      await page.click('#search', { clickCount: 3 });
      await page.type('#search', q);
      await page.keyboard.press('Enter');
      await page.waitForFunction(q => document.querySelector('#view').dataset.view === 'search' &&
        document.querySelector('#view').dataset.ready === 'true' && document.querySelector('#view h2').textContent === `Search: ${q}`, {}, q);
      return page.evaluate(() => ({
        blocks: [...document.querySelectorAll('table.found-blocks tbody tr')].map(tr => [...tr.children].map(td => td.textContent)),
        groups: [...document.querySelectorAll('table.found-groups tbody tr')].map(tr => [...tr.children].map(td => td.textContent)),
      }));
    };
    out.searchStatic = await search('cache_head');
    out.searchFrame = await search('handle_request');
    out.searchSite = await search('table_put');
    await page.click('table.found-groups a.group-link');
    await ready();
    await page.waitForSelector('#blocks-of > li.node');
    out.blocksOf = (await rows('#blocks-of > li.node')).length;

    // The block of 100,000 pointers: 100 rows, then a page more twice.
    const fan = out.root.find(r => r.kind === 'node' && r.held === 'held by static fanout');
    await page.goto(`${url}#block=${fan.address}`, { waitUntil: 'load' });
    await ready();
    const pointers = () => page.evaluate(() => ({
      title: [...document.querySelectorAll('#view h3')].map(h => h.textContent).find(t => t.startsWith('Points to')),
      rows: document.querySelectorAll('table.pointers tbody tr').length,
      last: (document.querySelector('table.pointers tbody tr:last-child td') || {}).textContent,
      more: (document.querySelector('button.more-pointers') || {}).textContent || null,
    }));
    out.pointers = [await pointers()];
    for (let i = 0; i < 2; i++) {
      const before = out.pointers[out.pointers.length - 1].rows;
      await page.click('button.more-pointers');
      await page.waitForFunction(n => document.querySelectorAll('table.pointers tbody tr').length > n, {}, before);
      out.pointers.push(await pointers());
    }

    // The block the 400 entries share: 100 of its holders, then the rest.
    const shared = out.root.find(r => r.kind === 'node' && r.held === 'held by static owner');
    await page.goto(`${url}#block=${shared.address}`, { waitUntil: 'load' });
    await ready();
    const holders = () => page.evaluate(() => document.querySelectorAll('table.holders tbody tr').length);
    out.holders = [await holders()];
    await page.click('button.more-holders');
    await page.waitForFunction(() => !document.querySelector('button.more-holders'));
    out.holders.push(await holders());
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
