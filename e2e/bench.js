// The viewer's benchmark: generated snapshots opened in headless Chromium, the way a user
// opens them, with the native reader on the same files as the baseline of the same run.
//   node e2e/bench.js [--sizes 100M,1G]     (after `trunk build --release --offline`)
// Prints, per size: time from choosing the file (in a page open once the browser has finished
// starting, as a user's has) to the first complete timeline, the
// worker's parse throughput next to the native `memscape stats`, pan/zoom frame times next to
// the same keys' views natively (`bench pan`),
// hover (the first one right after the first draw included) and state-selection latencies,
// when the background analyses give the hovered allocation its category, the longest
// main-thread task during the load, and memory (worker wasm + page JS heap) against the file
// size.
import { execFileSync } from 'node:child_process';
import { statSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, whenCoresIdle, hovered, ROOT } from './harness.js';

const args = process.argv.slice(2);
const sizes = (args[args.indexOf('--sizes') + 1] && args.includes('--sizes') ? args[args.indexOf('--sizes') + 1] : '100M,1G').split(',');
const memscape = join(ROOT, 'target', 'release', 'memscape');
if (!existsSync(memscape)) execFileSync('cargo', ['build', '--release', '-p', 'cli'], { cwd: ROOT, stdio: 'inherit' });
const bench = join(ROOT, 'target', 'release', 'bench');
if (!existsSync(bench)) execFileSync('cargo', ['build', '--release', '-p', 'bench'], { cwd: ROOT, stdio: 'inherit' });

const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
const fmt = x => (Number.isFinite(x) ? x.toFixed(1) : '-');
const MB = 1e6;

const srv = await serve();
for (const size of sizes) {
  const file = join(tmpdir(), `memscape-bench-${size}.pickle`);
  if (!existsSync(file)) execFileSync(memscape, ['synth', '--size', size, '-o', file], { stdio: 'inherit' });
  const bytes = statSync(file).size;
  const t0 = process.hrtime.bigint();
  const stats = JSON.parse(execFileSync(memscape, ['stats', '--json', file], { maxBuffer: 1 << 26 }).toString());
  const nativeMs = Number(process.hrtime.bigint() - t0) / 1e6;
  // The same keys' views natively: what of the frame is the view itself.
  const panRow = JSON.parse(execFileSync(bench, ['pan', '--json', file]).toString().trim().split('\n').pop());
  const nativePan = `median ${fmt(panRow.median_ms)} ms, p95 ${fmt(panRow.p95_ms)} ms`;
  const allocs = stats.devices.reduce((a, d) => a + d.timeline.elements, 0);

  const ctx = await browser();
  const page = await ctx.newPage();
  await page.goto(srv.url + '?empty');
  await page.evaluate(() => {
    window.longTasks = [];
    // Buffered: the page's own start is in them too; only the tasks from the choice on count.
    new PerformanceObserver(l => l.getEntries().forEach(e => window.longTasks.push([e.startTime, e.duration]))).observe({ type: 'longtask', buffered: true });
  });
  const timings = async what => page.evaluate(w => (window.memscapeTimings || []).filter(x => x[0] === w).map(x => x[1]), what);
  // The file is chosen in a page that is open and a browser that has started, as a user's.
  await whenCoresIdle(page);
  const chosenAt = await page.evaluate(() => performance.now());
  await page.setInputFiles('#file-input', file);
  await page.waitForFunction(() => document.querySelector('#error')
    || (window.memscapeTimings || []).some(x => x[0] === 'first-draw' || x[0] === 'load'), null, { timeout: 600000 });
  const err = await page.locator('#error').count() ? await page.locator('#error').textContent() : null;
  if (err) { console.log(`\n== ${size}: ${(bytes / MB).toFixed(1)} MB: refused: ${err}`); await ctx.close(); continue; }
  await page.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'first-draw'), null, { timeout: 600000 });
  const first = (await timings('first-draw'))[0];
  const parse = (await timings('parse-worker'))[0];
  const layout = (await timings('layout-worker'))[0];
  const waited = (await timings('read-worker'))[0];
  const wasmMem = (await timings('wasm-memory-worker'))[0];
  const longest = Math.max(0, ...(await page.evaluate(t => window.longTasks.filter(([at]) => at >= t).map(([, ms]) => ms), chosenAt)));
  const jsHeap = await page.evaluate(() => performance.memory ? performance.memory.usedJSHeapSize : NaN);

  // The first hover, right after the first draw (the worker is then busy with the background
  // analyses: the answer must not wait for them), and when its category line fills in.
  const box = await page.locator('#timeline').boundingBox();
  const drawnAt = await page.evaluate(() => performance.now());
  await page.mouse.move(box.x + box.width / 2, box.y + box.height - 45);
  await page.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'details'), null, { timeout: 600000 });
  const firstHover = (await timings('details'))[0];
  await page.waitForFunction(() => document.querySelector('#details tr[data-key="category"]'), null, { timeout: 600000 });
  const categoryAfter = await page.evaluate(t => performance.now() - t, drawnAt);

  // Pan and zoom: each key press is one new view, drawn.
  await page.locator('#timeline').hover();
  await page.evaluate(() => { window.memscapeTimings = []; });
  // Three zooms first, so that every later key moves the window (none hits an edge).
  const keys = ['w', 'w', 'w', ...Array.from({ length: 40 }, (_, i) => ['d', 'w', 'a', 's'][i % 4])];
  for (const key of keys) {
    const n = (await timings('frame')).length;
    await page.keyboard.press(key);
    await page.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'frame').length > n, n, { timeout: 120000 });
  }
  const frames = await timings('frame');
  const previews = await timings('preview');

  // Hover: the details of what is under the pointer (hit test here, details from the worker).
  {
    const n = (await timings('frame')).length;
    await page.locator('#whole').click();
    await page.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'frame').length > n, n, { timeout: 120000 });
  }
  await page.evaluate(() => { window.memscapeTimings = []; });
  // Sixty places over the plot, each answered before the next.
  for (let i = 0; i < 60; i++) {
    await hovered(page, box.x + 90 + (box.width - 110) * ((i * 37) % 60) / 60, box.y + 80 + (box.height - 120) * ((i * 17) % 60) / 60);
  }
  const details = [firstHover, ...(await timings('details'))];

  // Selecting events anywhere in the trace.
  const total = Number((await page.locator('#events-panel h2').textContent()).match(/\d+/)[0]);
  for (let i = 1; i <= 12; i++) {
    // The rows of the place scrolled to, once the worker has sent them (a new first row).
    const first = await page.locator('#events .row').first().getAttribute('data-entry');
    await page.locator('#events').evaluate((el, f) => { el.scrollTop = (el.scrollHeight - el.clientHeight) * f; }, i / 13);
    await page.waitForFunction(f => document.querySelector('#events .row')?.dataset.entry !== f, first, { timeout: 120000 });
    await page.locator('#events .row').nth(3).click();
    await page.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'state').length >= n, i);
  }
  const state = await timings('state');
  await ctx.close();

  console.log(`\n== ${size}: ${(bytes / MB).toFixed(1)} MB, ${allocs} allocations, ${total} events`);
  console.log(`first complete timeline     ${fmt(first)} ms   (target <= 700 at 100 MB, <= 5000 at 1 GB)`);
  console.log(`parse in the worker         ${fmt(parse)} ms = ${fmt(bytes / MB / (parse / 1000))} MB/s (target >= 250 at 1 GB)   | native memscape stats (read + all analyses, one process): ${fmt(nativeMs)} ms = ${fmt(bytes / MB / (nativeMs / 1000))} MB/s`);
  console.log(`  of which waiting on bytes ${fmt(waited)} ms: the browser reading the file, the rest is the reader`);
  console.log(`layout in the worker        ${fmt(layout)} ms`);
  // The browser reports tasks of 50 ms or more only.
  console.log(`longest main-thread task    ${longest ? `${fmt(longest)} ms` : 'none of 50 ms or more'} from the choice to the first timeline (target <= 100)`);
  console.log(`memory                      worker wasm ${fmt(wasmMem / MB)} MB + page JS heap ${fmt(jsHeap / MB)} MB = ${fmt((wasmMem + jsHeap) / bytes)}x the file (target <= 1.5x)`);
  console.log(`pan/zoom exact frame        median ${fmt(pct(frames, 0.5))} ms, p95 ${fmt(pct(frames, 0.95))} ms over ${frames.length}: the exact picture, after the preview below   | native views of the same keys (\`bench pan\`: Engine::handle alone): ${nativePan}`);
  console.log(`pan/zoom preview            median ${fmt(pct(previews, 0.5))} ms, p95 ${fmt(pct(previews, 0.95))} ms over ${previews.length}: from the key to the last picture moved at once, before the exact one (target p95 <= 16)`);
  console.log(`hover details               median ${fmt(pct(details, 0.5))} ms, p95 ${fmt(pct(details, 0.95))} ms over ${details.length}, the first after load included (target p95 <= 16)`);
  console.log(`first hover after load      ${fmt(firstHover)} ms; its category line ${fmt(categoryAfter)} ms after the pointer moved (what was left of the background analyses)`);
  console.log(`select an event (state)     median ${fmt(pct(state, 0.5))} ms, max ${fmt(Math.max(...state))} ms over ${state.length} (target <= 50)`);
}
await srv.close();
