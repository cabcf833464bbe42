// A run in the Ranks view in headless Chromium: a folder opened with *Open run…*, the time from
// the file input to the complete overview (the page's own figure and the wall clock), and the
// memory of the browser's processes (the highest sum of their RSS, sampled every 100 ms, and
// the page's JS heap at the end). Median of `--repeat N` runs (default 3), each in a fresh page.
// The folder is chosen as a user does: a click on *Open run…*, the file chooser, and the folder
// picked `--pick-ms` later (default 1000: the seconds a person takes to find it; the page
// starts its workers meanwhile). `--pick-ms 0` picks at once; `--direct` sets the input without
// the click (no workers started ahead).
//   node e2e/bench-ranks.mjs FOLDER [--repeat N] [--pick-ms MS] [--direct]
// docs/ranks.md has the folders measured and how they were made.
import { readdirSync } from 'node:fs';
import { serve, browser, treeRss } from './harness.js';

const folder = process.argv[2];
const repeat = Number(process.argv[process.argv.indexOf('--repeat') + 1]) || 3;
if (!folder) throw new Error('usage: node e2e/bench-ranks.mjs FOLDER [--repeat N]');
const files = readdirSync(folder).length;
const arg = (name, dflt) => process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : dflt;
const pickMs = arg('--pick-ms', 1000);
const direct = process.argv.includes('--direct');


const runs = [];
const srv = await serve();
for (let i = 0; i < repeat; i++) {
  const ctx = await browser();
  const page = await ctx.newPage();
  page.on('pageerror', e => console.log('pageerror', e.message));
  await page.goto(srv.url + '?empty');
  await page.waitForSelector('#run-input', { state: 'attached' });
  const base = treeRss();
  let peak = base;
  const sampler = setInterval(() => { peak = Math.max(peak, treeRss()); }, 100);
  let t0;
  if (direct) {
    t0 = Date.now();
    await page.setInputFiles('#run-input', folder);
  } else {
    const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.click('label:has(#run-input)')]);
    await page.waitForTimeout(pickMs);
    t0 = Date.now();
    await chooser.setFiles(folder);
  }
  await page.waitForFunction(() => document.querySelector('#ranks-progress')?.dataset.ms || document.querySelector('#error'), null, { timeout: 600000 });
  const error = await page.evaluate(() => document.querySelector('#error')?.textContent);
  if (error) throw new Error(error);
  const wall = Date.now() - t0;
  clearInterval(sampler);
  const ms = Number(await page.getAttribute('#ranks-progress', 'data-ms'));
  const cdp = await ctx.newCDPSession(page);
  await cdp.send('Performance.enable');
  const { metrics } = await cdp.send('Performance.getMetrics');
  const heap = metrics.find(m => m.name === 'JSHeapUsedSize').value;
  const rows = await page.getAttribute('#ranks-rows', 'data-rows');
  const failed = await page.locator('#ranks-failed .failed').count();
  const outliers = await page.locator('#ranks-outliers .outlier').evaluateAll(l => l.map(x => x.dataset.rank));
  runs.push({ overview_ms: ms, wall_ms: wall, peak_rss_mb: Math.round(peak / 2 ** 20), before_rss_mb: Math.round(base / 2 ** 20),
    page_js_heap_mb: Math.round(heap / 2 ** 20), rows: Number(rows), failed, outliers });
  console.log(JSON.stringify(runs[runs.length - 1]));
  await ctx.close();
}
await srv.close();
const med = k => runs.map(r => r[k]).sort((a, b) => a - b)[(runs.length - 1) >> 1];
console.log(JSON.stringify({ folder, files, pick_ms: direct ? null : pickMs, runs: runs.length, median_overview_ms: med('overview_ms'), median_wall_ms: med('wall_ms'),
  median_peak_rss_mb: med('peak_rss_mb') }));
