// The release build in dist/ is a static site that works from any path on any host: here it is
// served under a sub-path, and everything (page, workers, wasm, the example) loads from there.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync, cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, statsOf, expected, CORPUS, DIST } from '../harness.js';

test('dist/ served under a sub-path opens the example with PyTorch\'s figures', async () => {
  const prefix = '/team/tools/memscape/';
  const html = readFileSync(join(DIST, 'index.html'), 'utf8');
  assert.doesNotMatch(html, /(src|href)="\/(?!\/)/, 'no root-absolute URLs in index.html');
  const srv = await serve(DIST, prefix);
  const ctx = await browser();
  const requests = [], errors = [];
  ctx.on('request', r => requests.push(r.url()));
  const page = await ctx.newPage();
  page.on('pageerror', e => errors.push(e.message));
  page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
  try {
    await page.goto(srv.url);
    await page.waitForFunction(() => document.querySelector('#stats .file-line')?.textContent.startsWith('cs336-fullstep.pickle '), null, { timeout: 60000 });
    const exp = expected('pt25-cs336-fullstep-annotations.pickle');
    const stats = await statsOf(page);
    assert.equal(stats.total_reserved, exp.segsum.total_reserved);
    assert.equal(stats['timeline.peak_bytes'], exp.memoryviz.devices['0'].active_memory_timeline.max_at_time_peak);
    const http = requests.filter(u => u.startsWith('http'));
    assert.ok(http.some(u => u.endsWith('.wasm')), 'the wasm came from the sub-path');
    assert.deepEqual(http.filter(u => !u.startsWith(srv.url)), [], 'every request stays under the sub-path');
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
    await srv.close();
  }
});

test('a host without the bundled example: the page opens empty, and its early worker reads the first file', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'memscape-no-example-'));
  cpSync(DIST, dir, { recursive: true, filter: f => !f.endsWith('cs336-fullstep.pickle') });
  const srv = await serve(dir);
  const ctx = await browser();
  const errors = [];
  const page = await ctx.newPage();
  page.on('pageerror', e => errors.push(e.message));
  try {
    await page.goto(srv.url);
    await page.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'worker-ready'), null, { timeout: 60000 });
    assert.match(await page.locator('.empty').textContent(), /Drop PyTorch memory snapshots/);
    assert.equal(await page.locator('.tab').count(), 0);
    // The worker started for the example (before the page's code) is the spare: no other
    // was started for the first file.
    assert.equal(page.workers().length, 1, `${page.workers().length} workers before the first file`);
    const f = 'pt20-flexgen-opt1.3b-history.pickle';
    await page.setInputFiles('#file-input', join(CORPUS, f));
    await page.waitForFunction(n => document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), f, { timeout: 60000 });
    const exp = expected(f);
    assert.equal((await statsOf(page)).total_reserved, exp.segsum.total_reserved);
    assert.equal(await page.locator('#error').count(), 0);
    assert.deepEqual(errors, []);
  } finally {
    await ctx.close();
    await srv.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a worker whose wasm cannot start says so on the page, instead of leaving a file loading', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'memscape-bad-worker-'));
  cpSync(DIST, dir, { recursive: true });
  writeFileSync(join(dir, 'worker_bg.wasm'), Buffer.from('not wasm at all'));
  const srv = await serve(dir);
  try {
    // The bundled example fails (its load, or, if the worker failed before the example's
    // bytes came, its opening) and the page says why; then a file chosen says why it cannot
    // be read (chosen once the example's message is there, which it then replaces). Either
    // may come first; the second round holds the example back until the page has said the
    // worker failed, so that it fails before its bytes come.
    for (const held of [false, true]) {
      const ctx = await browser();
      let release = () => {};
      try {
        const holding = new Promise(r => { release = r; });
        if (held) await ctx.route('**/cs336-fullstep.pickle', async r => { await holding; await r.continue(); });
        const page = await ctx.newPage();
        await page.goto(srv.url);
        await page.waitForFunction(() => document.querySelector('#error')?.textContent.includes('cs336-fullstep.pickle'), null, { timeout: 60000 });
        assert.match(await page.locator('#error').textContent(), /cs336-fullstep\.pickle: the viewer's worker for this file stopped \(.*CompileError/);
        if (held) assert.equal(await page.evaluate(() => window.memscapeEarly.blob), null, 'the worker failed before the example came');
        release();
        const f = 'pt20-flexgen-opt1.3b-history.pickle';
        await page.setInputFiles('#file-input', join(CORPUS, f));
        await page.waitForFunction(n => document.querySelector('#error')?.textContent.includes(n), f, { timeout: 60000 });
        const said = await page.locator('#error').textContent();
        assert.match(said, new RegExp(`${f.replace(/\./g, '\\.')}: the viewer's worker for this file stopped \\(.*CompileError`));
        assert.equal(await page.locator('.tab').count(), 0);
      } finally {
        release();
        await ctx.close();
      }
    }
  } finally {
    await srv.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
