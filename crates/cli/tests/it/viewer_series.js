// Drives the viewer in headless Chromium on tests/c/growing_service.c's
// four dumps (`serve NEWEST --series OLDER...`): the first screen's
// suspects, the Growth tab's structures with their charts, and a click on
// the first structure's path to its block. Prints what the page showed as
// JSON for the Rust test.
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
    await page.setViewport({ width: 1300, height: 900 });
    const ready = () => page.waitForFunction(() => document.querySelector('#view').dataset.ready === 'true');

    // The first screen.
    await page.goto(url, { waitUntil: 'load' });
    await ready();
    out.suspects = await page.evaluate(() => [...document.querySelectorAll('#suspects .suspect')].map(s => ({
      kind: s.dataset.kind, bytes: Number(s.dataset.bytes), text: s.textContent,
    })));
    out.growthTabHidden = await page.evaluate(() => document.getElementById('growth-tab').hidden);
    await page.screenshot({ path: `${shots}/series-suspects.png` });

    // The Growth tab.
    await page.click('#tabs a[data-view=growth]');
    await ready();
    out.facts = await page.evaluate(() => (document.getElementById('series-facts') || {}).textContent || null);
    out.rows = await page.evaluate(() => [...document.querySelectorAll('#growing .growing')].map(c => {
      const svg = c.querySelector('.chart svg.spark');
      return {
        key: c.dataset.key,
        text: c.textContent,
        // Where each point is drawn: SVG's y grows downwards.
        points: svg ? [...svg.querySelectorAll('circle')].map(p => ({ cy: Number(p.getAttribute('cy')), bytes: Number(p.dataset.bytes), title: p.textContent })) : [],
        chartHeight: svg ? Number(svg.getAttribute('height')) : 0,
        pathLinks: [...c.querySelectorAll('.path a.addr')].map(a => a.textContent),
        sites: [...c.querySelectorAll('table.sites tbody tr')].map(tr => [...tr.cells].map(td => td.textContent)),
      };
    }));
    await page.screenshot({ path: `${shots}/growth-series.png`, fullPage: true });

    // The first structure's path, followed to its head's block page.
    const links = await page.$$('#growing .growing:first-child .path a.addr');
    if (links.length) {
      await links[links.length - 1].click();
      await page.waitForFunction(() => document.querySelector('#view').dataset.view === 'block');
      await ready();
      out.block = await page.evaluate(() => ({
        hash: location.hash,
        heading: document.querySelector('#view h2').textContent,
        site: (document.querySelector('#block-facts [data-key=site]') || {}).textContent || null,
      }));
    }
  } catch (e) {
    out.errors.push(String(e && e.stack || e));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})();
