// Shared by the browser tests and the benchmark: a static server for dist/ that records
// every request, and a Chromium launched the way this machine allows (no downloads).
import { createServer } from 'node:http';
import { readFile, mkdtemp } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join, extname, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';

export const ROOT = resolve(import.meta.dirname, '..');
export const DIST = process.env.MEMSCAPE_DIST || join(ROOT, 'dist');
export const CORPUS = resolve(ROOT, process.env.MEMSCAPE_CORPUS || '../shared/corpus');

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css',
  '.pickle': 'application/octet-stream', '.png': 'image/png' };

/** Serves `dir` under the URL path `prefix` (e.g. `/team/tools/memscape/`), as a static host would. */
export async function serve(dir = DIST, prefix = '/') {
  const server = createServer(async (req, res) => {
    const full = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (!full.startsWith(prefix)) { res.writeHead(404); res.end('not found'); return; }
    const path = '/' + full.slice(prefix.length);
    const file = join(dir, path === '/' ? 'index.html' : path);
    if (!file.startsWith(dir)) { res.writeHead(403); res.end(); return; }
    try {
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': TYPES[extname(file)] || 'application/octet-stream', 'cache-control': 'no-store' });
      res.end(body);
    } catch { res.writeHead(404); res.end('not found'); }
  });
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}${prefix}`;
  return { url, close: () => new Promise(r => server.close(r)) };
}

/** A fresh Chromium profile; `options` adds to (or replaces) the context's, e.g.
 * `{ deviceScaleFactor: 2 }` for a HiDPI screen. */
export async function browser(options = {}) {
  const dir = await mkdtemp(join(tmpdir(), 'memscape-chromium-'));
  return chromium.launchPersistentContext(dir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 1000 },
    ...options,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** The statistics panel as `{key: number}` (each row carries `data-key` and `data-value`). */
export async function statsOf(page) {
  // The panels are made once the file's first picture is on screen: wait for the table.
  await page.waitForSelector('#stats-table tr', { state: 'attached', timeout: 30000 });
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#stats-table tr')]
    .map(tr => [tr.dataset.key, Number(tr.dataset.value)])));
}

/** How many pixels of the canvas `id` differ from its background (its top-left pixel). */
export function paintedPixels(page, id = 'timeline') {
  return page.evaluate(id => {
    const c = document.getElementById(id);
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 30) n++;
    return n;
  }, id);
}

/** Chromium goes on starting after Playwright's launch returns: on two cores, both were 70 to
 * 90% busy for 400 ms after the launch and its first page, idle from about 600 ms (three
 * launches; docs/benchmarks.md, "How the figures are taken"), and a file chosen at once shared the cores with
 * that. Waits until the machine's cores have been idle (under 10% busy) for 200 ms, at least
 * a second after it is called and at most five; where /proc/stat cannot be read, a second. */
export async function whenCoresIdle(page) {
  const busy = () => {
    try {
      const t = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
      return [t.reduce((a, b) => a + b, 0), t[3] + t[4]];
    } catch { return null; }
  };
  const since = Date.now();
  await page.waitForTimeout(1000);
  let last = busy();
  while (last && Date.now() - since < 5000) {
    await page.waitForTimeout(200);
    const now = busy();
    const total = now[0] - last[0];
    if (total > 0 && 1 - (now[1] - last[1]) / total < 0.1) return;
    last = now;
  }
}

/** Lets the page answer and draw: a short wait, then two animation frames. */
export async function settle(page) {
  await page.waitForTimeout(150);
  await page.evaluate(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))));
}

/** A hash of the canvas `id`'s pixels (to tell whether its picture changed). */
export function pixelHash(page, id) {
  return page.evaluate(id => {
    const c = document.getElementById(id);
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 2166136261;
    for (let i = 0; i < d.length; i += 4) h = Math.imul(h ^ (d[i] | d[i + 1] << 8 | d[i + 2] << 16 | d[i + 3] << 24), 16777619) >>> 0;
    return h;
  }, id);
}

/** `dist/` served and opened in a fresh browser, once the bundled example is its active tab
 * and its panels are there:
 * `requests` collects every URL the page asks for, `consoleErrors` what it logs as errors,
 * and an uncaught page error fails the test. `close()` ends both. */
export async function openExample(example = 'cs336-fullstep.pickle', options = {}) {
  const srv = await serve();
  const ctx = await browser(options);
  const requests = [];
  const consoleErrors = [];
  ctx.on('request', r => requests.push(r.url()));
  const page = await ctx.newPage();
  page.on('pageerror', e => { throw e; });
  page.on('console', m => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  await page.goto(srv.url);
  // Open: its tab in front, and its panels (made once its first picture is on screen) there.
  await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
    && document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), example, { timeout: 60000 });
  return { url: srv.url, page, requests, consoleErrors, close: async () => { await ctx.close(); await srv.close(); } };
}
