// The category view and a self-comparison in headless Chromium on one file, beside the time
// the same file takes to open (the baseline, same run):
//   node e2e/bench-categories.mjs /tmp/memscape-bench/synth-1G.pickle
import { serve, browser } from './harness.js';
const file = process.argv[2];
const srv = await serve(); const ctx = await browser(); const page = await ctx.newPage();
page.on('pageerror', e => console.log('pageerror', e.message));
await page.goto(srv.url + '?empty');
const t0 = Date.now();
await page.setInputFiles('#file-input', file);
await page.waitForFunction(() => document.querySelector('#stats .file-line'), null, { timeout: 300000 });
const t1 = Date.now();
await page.click('#mode-categories');
await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]') || document.querySelector('#error'), null, { timeout: 300000 });
const t2 = Date.now();
const err = await page.evaluate(() => document.querySelector('#error')?.textContent);
const box = await page.locator('#categories').boundingBox();
const t3 = Date.now();
await page.mouse.click(box.x + box.width * 0.5, box.y + 100);
await page.waitForFunction(() => /at step/.test(document.querySelector('#breakdown tr th:nth-child(3)')?.textContent));
const t4 = Date.now();
await page.click('#mode-compare');
await page.locator('.pick-a').first().check(); await page.locator('.pick-b').first().check();
await page.waitForSelector('#diff-summary', { timeout: 300000 });
const t5 = Date.now();
console.log(JSON.stringify({ open_s: (t1 - t0) / 1000, categories_ms: t2 - t1, click_ms: t4 - t3, self_diff_ms: t5 - t4, error: err ?? null }));
await ctx.close(); await srv.close();
