// V8's optimising (TurboFan) wasm compiles while a page's first file loads: Chromium started
// with `--js-flags=--trace-wasm-compilation-times`, which prints a line per compiled function
// on the browser's stdout; each line is stamped as it arrives and counted in the window from
// the file input's `change` event to the file's first drawn timeline (`first-draw-at`). The
// rest of the page's life (the spare worker's warm-up, engine/src/warm.rs) is counted apart.
//   node e2e/bench-tierlog.mjs [--rounds 5] [--files pt25,pt210]   (after `trunk build --release --offline`)
// Names show only in a build that keeps them; the counts and times do not need them.
import { spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, basename } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';
import { serve } from './harness.js';
import { arg, corpusFile, firstFile, median, fmt } from './probe-page.mjs';

const rounds = Number(arg('--rounds', '5'));
const files = arg('--files', 'pt25,pt210').split(',').map(corpusFile);

/** Chromium with the flag, as harness.js launches it otherwise; `lines` collects its stdout. */
async function tracedBrowser() {
  const dir = await mkdtemp(join(tmpdir(), 'memscape-chromium-'));
  const proc = spawn(process.env.CHROMIUM || '/usr/bin/chromium', ['--headless', '--no-sandbox', '--disable-gpu',
    '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--window-size=1400,1000', `--user-data-dir=${dir}`, '--remote-debugging-port=0',
    '--js-flags=--trace-wasm-compilation-times', 'about:blank']);
  const lines = [];
  createInterface({ input: proc.stdout }).on('line', text => lines.push({ at: performance.timeOrigin + performance.now(), text }));
  const ws = await new Promise((done, fail) => {
    createInterface({ input: proc.stderr }).on('line', l => { const m = l.match(/DevTools listening on (ws:\S+)/); if (m) done(m[1]); });
    proc.on('exit', code => fail(new Error(`chromium exited (${code})`)));
  });
  const cdp = await chromium.connectOverCDP(ws);
  return { cdp, lines, close: async () => { await cdp.close(); proc.kill(); } };
}

// "Compiled function 0x…#123 using TurboFan, took 412 μs and …" (V8's wording; Liftoff lines
// say "using Liftoff").
const compile = text => {
  const m = text.match(/using (\w+), took ([\d.]+) (μs|ms)/);
  return m && { tier: m[1], ms: Number(m[2]) / (m[3] === 'μs' ? 1000 : 1) };
};
const srv = await serve();
const out = new Map(files.map(f => [f, { inWindow: [], count: [], before: [], lastBefore: [], fileMs: [] }]));
let sample = null;
for (let r = 0; r < rounds; r++) {
  for (const f of files) {
    const b = await tracedBrowser();
    const page = await b.cdp.contexts()[0].newPage();
    await page.setViewportSize({ width: 1400, height: 1000 });
    const { chosenAt, marks, ms } = await firstFile(page, srv.url, f);
    const origin = await page.evaluate(() => performance.timeOrigin);
    await page.waitForTimeout(300); // lets the window's last lines arrive
    const [from, to] = [origin + chosenAt, origin + marks['first-draw-at']];
    const turbo = b.lines.map(l => ({ ...l, c: compile(l.text) })).filter(l => l.c && l.c.tier === 'TurboFan');
    sample ??= turbo[0]?.text;
    const inside = turbo.filter(l => l.at >= from && l.at <= to);
    const o = out.get(f);
    o.inWindow.push(inside.reduce((a, l) => a + l.c.ms, 0));
    o.count.push(inside.length);
    const before = turbo.filter(l => l.at < from);
    o.before.push(before.reduce((a, l) => a + l.c.ms, 0));
    // When the warm-up's optimising compiles end: its last one, in ms since navigation.
    if (before.length) o.lastBefore.push(before[before.length - 1].at - origin);
    o.fileMs.push(ms);
    await b.close();
  }
}
await srv.close();
if (!sample) throw new Error('no TurboFan line on stdout: does this Chromium print --trace-wasm-compilation-times?');
console.log(`== V8's optimising wasm compiles around a page's first file (${rounds} rounds; medians)`);
console.log(`a line: ${sample.slice(0, 120)}`);
for (const f of files) {
  const o = out.get(f);
  console.log(`${basename(f).padEnd(42)} in the file's window: ${fmt(median(o.inWindow), 1)} ms in ${median(o.count)} compiles`
    + ` [${o.inWindow.map(x => fmt(x, 1)).join(', ')}]; before the choice: ${fmt(median(o.before))} ms, the last at`
    + ` ${fmt(Math.min(...o.lastBefore))} to ${fmt(Math.max(...o.lastBefore))} ms after navigation; the file: ${fmt(median(o.fileMs))} ms`);
}
