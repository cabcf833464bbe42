// The single offline HTML file, made by the app's button and by `memscape html`: opened from
// file:// with every network request blocked, it shows the snapshot with PyTorch's figures,
// attempts no request, and can open other files itself.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, copyFileSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, statsOf, paintedPixels, painted, canvasWhen, expected, shot, MEMSCAPE, CORPUS, ROOT, DIST } from '../harness.js';

let srv;

before(async () => { srv = await serve(); });
after(async () => { await srv?.close(); });



/** Opens `file` from disk with the network cut off; returns the page and what it tried to fetch. */
async function openOffline(file, shownName) {
  const ctx = await browser();
  const attempts = [], errors = [];
  await ctx.route('**/*', route => {
    const url = route.request().url();
    if (url.startsWith('file:') || url.startsWith('blob:') || url.startsWith('data:')) return route.continue();
    attempts.push(url);
    return route.abort();
  });
  await ctx.setOffline(true);
  ctx.on('request', r => { if (!/^(file|blob|data):/.test(r.url())) attempts.push(r.url()); });
  const page = await ctx.newPage();
  page.on('pageerror', e => errors.push(e.message));
  page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto('file://' + file);
  await page.waitForFunction(n => document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), shownName, { timeout: 60000 });
  // Its first picture drawn: what the page fetches to show a file (its code, its bytes) it has
  // asked for by then, and `attempts` holds any that left the file.
  await page.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'first-draw-at'), null, { timeout: 60000 });
  await painted(page);
  return { ctx, page, attempts, errors };
}

async function checkFigures(page, corpusName, device = 0) {
  const exp = expected(corpusName);
  const got = await statsOf(page);
  for (const k of ['segments', 'total_reserved', 'total_allocated', 'free_internal', 'free_external']) assert.equal(got[k], exp.segsum[k], k);
  const viz = exp.memoryviz.devices?.[String(device)];
  if (viz) {
    assert.equal(got['timeline.peak_bytes'], viz.active_memory_timeline.max_at_time_peak);
    assert.equal(got['timeline.elements'], viz.active_memory_timeline.elements);
  }
  // The file's picture (a file opened after the first is drawn when its worker answers).
  await canvasWhen(page, 'timeline', { above: 10000 });
  const drawn = await paintedPixels(page);
  assert.ok(drawn > 10000, `timeline drawn (${drawn} pixels)`);
}

test('the app\'s Save offline HTML makes a file that works from disk with no network', async () => {
  const ctx = await browser();
  const page = await ctx.newPage();
  await page.goto(srv.url);
  await page.waitForFunction(() => document.querySelector('#stats .file-line')?.textContent.startsWith('cs336-fullstep.pickle '), null, { timeout: 60000 });
  const [download] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.locator('#save-html').click()]);
  assert.equal(download.suggestedFilename(), 'cs336-fullstep.pickle.html');
  const file = join(tmpdir(), 'memscape-offline-app.html');
  copyFileSync(await download.path(), file);
  await ctx.close();
  // About the app bundle plus the compressed snapshot (base64 adds a third).
  const bundle = readdirSync(DIST).filter(f => /\.(js|wasm|css)$/.test(f)).reduce((a, f) => a + statSync(join(DIST, f)).size, 0);
  const packed = gzipSync(readFileSync(join(ROOT, 'examples', 'cs336-fullstep.pickle'))).length;
  const size = statSync(file).size;
  assert.ok(size < (bundle + packed) * 1.4 && size > (bundle + packed) * 1.2, `offline file ${size} bytes, bundle ${bundle}, snapshot gzipped ${packed}`);

  const off = await openOffline(file, 'cs336-fullstep.pickle');
  await checkFigures(off.page, 'pt25-cs336-fullstep-annotations.pickle');
  // Views work: zoom changes the window.
  // The hash of the view shown (written just after the frame that shows it), then a zoom's.
  await off.page.waitForFunction(() => location.hash.includes('start='));
  const h = await off.page.evaluate(() => location.hash);
  await off.page.locator('#timeline').hover();
  await off.page.keyboard.press('w');
  await off.page.waitForFunction(h => location.hash !== h, h);
  // The offline page opens other files too.
  const other = 'pt210-cs336-pyframes-usermeta.pickle';
  await off.page.setInputFiles('#file-input', join(CORPUS, other));
  await off.page.waitForFunction(n => document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), other, { timeout: 60000 });
  await checkFigures(off.page, other);
  // And saves another offline page from itself.
  const [again] = await Promise.all([off.page.waitForEvent('download', { timeout: 60000 }), off.page.locator('#save-html').click()]);
  assert.equal(again.suggestedFilename(), `${other}.html`);
  await shot(off.page, '20-offline');
  assert.deepEqual(off.attempts, [], 'no request was attempted');
  assert.deepEqual(off.errors, []);
  const again2 = join(tmpdir(), 'memscape-offline-again.html');
  copyFileSync(await again.path(), again2);
  await off.ctx.close();
  const off2 = await openOffline(again2, other);
  await checkFigures(off2.page, other);
  assert.deepEqual(off2.attempts, []);
  await off2.ctx.close();
});

test('a Save offline HTML that fails says what failed, in words, and the file stays open', async () => {
  const ctx = await browser();
  const page = await ctx.newPage();
  await page.goto(srv.url);
  await page.waitForFunction(() => document.querySelector('#stats .file-line')?.textContent.startsWith('cs336-fullstep.pickle '), null, { timeout: 60000 });
  // The page's own code can no longer be fetched (a server gone, a connection lost): the
  // offline page cannot be made of it.
  await page.route('**/app-*_bg.wasm', route => route.abort());
  await page.locator('#save-html').click();
  await page.waitForSelector('#error', { timeout: 30000 });
  const said = await page.locator('#error').textContent();
  assert.match(said, /cs336-fullstep\.pickle: could not make the offline page: the browser could not fetch \S*app-[0-9a-f]+_bg\.wasm \(Failed to fetch\)/);
  // Not the bindings' debug form, nor a stack.
  assert.doesNotMatch(said, /JsValue|    at /);
  // Nothing says it is still being made.
  assert.equal(await page.locator('#status').textContent(), '');
  await shot(page, '21-offline-save-failed');
  assert.equal(await page.locator('.tab.active .tab-name').textContent(), 'cs336-fullstep.pickle');
  await ctx.close();
});

test('memscape html makes the same file natively, from a pickle and from _memory_viz.py\'s HTML page', async () => {
  for (const [input, shown, corpusName] of [
    [join(CORPUS, 'pt25-cs336-fullstep-annotations.pickle'), 'pt25-cs336-fullstep-annotations.pickle', 'pt25-cs336-fullstep-annotations.pickle'],
    [join(CORPUS, 'pt25-cs336-bf16-forward.html'), 'pt25-cs336-bf16-forward', 'pt25-cs336-bf16-forward.html'],
  ]) {
    const out = join(tmpdir(), `memscape-offline-cli-${shown}.html`);
    execFileSync(MEMSCAPE, ['html', input, '-o', out]);
    const html = readFileSync(out, 'utf8');
    assert.match(html, /connect-src 'none'/);
    assert.doesNotMatch(html, /https?:\/\//, 'no URL to any host in the file');
    const off = await openOffline(out, shown);
    await checkFigures(off.page, corpusName);
    assert.deepEqual(off.attempts, [], 'no request was attempted');
    assert.deepEqual(off.errors, []);
    await off.ctx.close();
  }
});
