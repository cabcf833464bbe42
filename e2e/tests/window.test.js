// A file opened as a window of its last entries (what a file too large for a tab gets; here
// forced with `?last=N` on a small one): the page says so, and the statistics, categories,
// events and allocator state are those of the same window cut by `memscape slice`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, tabShown, statsOf, painted, canvasWhen, shot, needs, CORPUS, MEMSCAPE } from '../harness.js';

const NAME = 'pt25-cs336-fullstep-annotations.pickle';
const LAST = 2000;
let srv, ctx, page;

before(async () => {
  srv = await serve();
  ctx = await browser();
  page = await ctx.newPage();
  page.on('pageerror', e => { throw e; });
  await page.goto(`${srv.url}?last=${LAST}`);
  await tabShown(page, 'cs336-fullstep.pickle');
});

after(async () => {
  await ctx?.close();
  await srv?.close();
});

/** `memscape slice WINDOW...` then `memscape stats --json` on the slice. */
function sliced(...window) {
  const out = join(mkdtempSync(join(tmpdir(), 'memscape-window-')), 'slice.pickle');
  execFileSync(MEMSCAPE, ['slice', join(CORPUS, NAME), '-o', out, ...window], { stdio: 'pipe' });
  return JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', out], { maxBuffer: 1 << 26 }).toString());
}

test('a file forced into window mode shows its last entries, and every view works on the window', async t => {
  if (!needs(t, NAME)) return;
  await page.setInputFiles('#file-input', join(CORPUS, NAME));
  await tabShown(page, NAME);
  const notice = await page.locator('#notice').textContent();
  assert.equal(notice, `Showing a window: the last ${LAST} entries of ${NAME} (device 0: entries 17464..19464 of 19464). `
    + 'Memory alive when it starts is drawn from its first step.');
  await painted(page);
  // Statistics: a window of which file, and the figures of the slice.
  const want = sliced('--last', String(LAST));
  const stats = await statsOf(page);
  const row = await page.locator('#stats-table tr[data-key="window"] td').textContent();
  assert.match(row, new RegExp(`^the last ${LAST} entries of ${NAME.replace(/\./g, '\\.')} `));
  const d = want.devices[0];
  assert.equal(stats.trace_entries, LAST);
  for (const [k, v] of [['segments', want.segments], ['total_reserved', want.total_reserved],
    ['total_allocated', want.total_allocated], ['timeline.peak_bytes', d.timeline.peak_bytes],
    ['timeline.elements', d.timeline.elements], ['timeline.initially_allocated', d.timeline.initially_allocated]]) {
    assert.equal(stats[k], v, k);
  }
  // Categories at the window's peak: the slice's.
  await page.click('#mode-categories');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]'), null, { timeout: 30000 });
  await canvasWhen(page, 'categories', { above: 1000 });
  const atPeak = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#breakdown tr[data-category]')]
    .map(tr => [tr.dataset.category, Number(tr.querySelector('td').textContent.match(/\((-?\d+) bytes\)/)?.[1] ?? NaN)])));
  const cats = want.categories[0];
  assert.equal(atPeak.total, cats.peak_bytes);
  for (const c of cats.at_peak.filter(c => c.bytes > 0)) {
    const key = Object.keys(atPeak).find(k => k.replace(/[-_ ]/g, '') === c.category.replace(/[-_ ]/g, ''));
    assert.ok(key, `category ${c.category} is in the breakdown: ${Object.keys(atPeak)}`);
    assert.equal(atPeak[key], c.bytes, c.category);
  }
  await shot(page, 'window-categories');
  // Events and the allocator state: the window's own, numbered from its start.
  await page.click('#mode-timeline');
  await page.locator('#events').evaluate(el => { el.scrollTop = el.scrollHeight; });
  await page.waitForFunction(n => document.querySelector(`#events .row[data-entry="${n - 1}"]`), LAST);
  assert.equal(await page.locator(`#events .row[data-entry="${LAST}"]`).count(), 0);
  await page.locator(`#events .row[data-entry="${LAST - 1}"]`).click();
  await page.waitForFunction(n => document.querySelector('#state h2').textContent === `Allocator after event ${n - 1}`, LAST);
  const summary = await page.locator('#state-summary').textContent();
  assert.match(summary, new RegExp(`^${want.segments} segments`), summary);
  await shot(page, 'window');
});

test('another window of the same file, picked on the page, opens in a tab of its own with the figures of that slice', async t => {
  if (!needs(t, NAME)) return;
  if (!await page.locator('#window-picker').count()) {
    await page.setInputFiles('#file-input', join(CORPUS, NAME));
    await tabShown(page, NAME);
  }
  assert.match(await page.locator('#window-held').textContent(), /^A window of the last 2000 entries of /);
  const tabs = await page.locator('.tab').count();
  await page.selectOption('#window-kind', 'range');
  // A range that ends before it starts is refused, saying so; nothing opens.
  await page.fill('#window-from', '18000');
  await page.fill('#window-to', '17000');
  await page.click('#window-open');
  await page.waitForSelector('#error');
  assert.equal(await page.locator('#error .error-text').textContent(), `${NAME}: events 18000 to 17000: the end must come after the start`);
  await page.locator('#error button').click();
  assert.equal(await page.locator('.tab').count(), tabs);
  await page.fill('#window-from', '17000');
  await page.fill('#window-to', '18000');
  await page.click('#window-open');
  await page.waitForFunction(n => document.querySelectorAll('.tab').length === n + 1, tabs);
  await page.waitForFunction(() => /entries 17000\.\.18000 of /.test(document.querySelector('#notice')?.textContent ?? ''), null, { timeout: 30000 });
  assert.equal(await page.locator('#notice').textContent(), `Showing a window: entries 17000..18000 of ${NAME} (device 0: entries 17000..18000 of 19464). `
    + 'Memory alive when it starts is drawn from its first step.');
  await painted(page);
  await page.waitForFunction(() => /17000\.\.18000/.test(document.querySelector('#stats-table tr[data-key="window"] td')?.textContent ?? ''));
  const want = sliced('--entries', '17000..18000');
  const stats = await statsOf(page);
  assert.equal(stats.trace_entries, 1000);
  for (const [k, v] of [['segments', want.segments], ['total_reserved', want.total_reserved],
    ['total_allocated', want.total_allocated], ['timeline.peak_bytes', want.devices[0].timeline.peak_bytes],
    ['timeline.final_bytes', want.devices[0].timeline.final_bytes]]) {
    assert.equal(stats[k], v, k);
  }
  await shot(page, 'window-range');
});
