// A file too large for a tab, opened in headless Chromium the way a user opens it: it opens as
// a window of each device's last 20 million entries (or `--last N`, given as `?last=N`). Prints
// the time from choosing the file to the first complete timeline, what the page says of the
// window, the worker's wasm memory and the page's JS heap, and the browser's processes' RSS
// (the highest sum, sampled every 100 ms, and before the choice); beside them, the baseline of
// the same run: the native windowed read of the same window (`memscape slice --last N`), its
// time and peak RSS.
//   node e2e/bench-window.mjs [FILE] [--last N]   (after `trunk build --release --offline`)
// FILE defaults to a generated ~10 GB snapshot (`memscape synth --size 11450M`, 117 million
// events), made once in the temporary folder.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, statSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, whenCoresIdle, treeRss, ROOT } from './harness.js';

const arg = name => process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined;
const last = arg('--last');
const file = process.argv[2] && !process.argv[2].startsWith('--') ? process.argv[2] : join(tmpdir(), 'memscape-bench-10GB.pickle');
const memscape = join(ROOT, 'target', 'release', 'memscape');
if (!existsSync(memscape)) execFileSync('cargo', ['build', '--release', '-p', 'cli'], { cwd: ROOT, stdio: 'inherit' });
if (!existsSync(file)) execFileSync(memscape, ['synth', '--size', '11450M', '-o', file], { stdio: 'inherit' });
const bytes = statSync(file).size;
const MB = 1e6;
const window = Number(last ?? 20_000_000); // engine::protocol::WINDOW_ENTRIES


// The baseline: the same window read natively, written as a slice.
const out = join(tmpdir(), `memscape-bench-window-${process.pid}.pickle`);
const run = spawnSync('/usr/bin/time', ['-f', '%e %M', memscape, 'slice', file, '-o', out, '--last', String(window)]);
if (run.status !== 0) throw new Error(run.stderr.toString());
const timed = run.stderr.toString().trim().split('\n').pop().split(' ');
rmSync(out, { force: true });
const [nativeS, nativeKb] = timed.map(Number);

const srv = await serve();
const ctx = await browser();
const page = await ctx.newPage();
page.on('pageerror', e => console.log('pageerror', e.message));
await page.goto(srv.url + (last ? `?empty&last=${last}` : '?empty'));
await whenCoresIdle(page);
const before = treeRss();
let peak = before;
const sampler = setInterval(() => { peak = Math.max(peak, treeRss()); }, 100);
const chosenAt = await page.evaluate(() => performance.now());
await page.setInputFiles('#file-input', file);
await page.waitForFunction(() => document.querySelector('#error')
  || (window.memscapeTimings || []).some(x => x[0] === 'first-draw'), null, { timeout: 900000 });
clearInterval(sampler);
const error = await page.locator('#error').count() ? await page.locator('#error').textContent() : null;
if (error) throw new Error(error);
const timings = what => page.evaluate(w => (window.memscapeTimings || []).filter(x => x[0] === w).map(x => x[1]), what);
const first = (await timings('first-draw'))[0];
const wasm = (await timings('wasm-memory-worker'))[0];
const heap = await page.evaluate(() => performance.memory ? performance.memory.usedJSHeapSize : NaN);
const notice = await page.locator('#notice').textContent();
const entries = await page.getAttribute('#stats-table tr[data-key="trace_entries"]', 'data-value').catch(() => null);
await ctx.close();
await srv.close();

console.log(`${file}: ${(bytes / MB).toFixed(1)} MB`);
console.log(`page says                   ${notice}`);
console.log(`events in the window        ${entries}`);
console.log(`choice -> first timeline    ${((first - chosenAt) / 1000).toFixed(1)} s (${(bytes / MB / ((first - chosenAt) / 1000)).toFixed(0)} MB/s of file)`);
console.log(`native windowed read        ${nativeS.toFixed(1)} s (${(bytes / MB / nativeS).toFixed(0)} MB/s), peak RSS ${(nativeKb / 1024).toFixed(0)} MB  [memscape slice --last ${window}]`);
console.log(`worker wasm memory          ${(wasm / MB).toFixed(0)} MB; page JS heap ${(heap / MB).toFixed(0)} MB; together ${((wasm + heap) / MB).toFixed(0)} MB (target < 2000 MB)`);
console.log(`browser processes' RSS      peak ${(peak / MB).toFixed(0)} MB, ${((peak - before) / MB).toFixed(0)} MB more than before the choice (${(before / MB).toFixed(0)} MB)`);
