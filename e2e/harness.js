// Shared by the browser tests and the benchmark: a static server for dist/ that records
// every request, and a Chromium launched the way this machine allows (no downloads).
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { readFile, mkdtemp } from 'node:fs/promises';
import { readFileSync, existsSync, mkdirSync } from 'node:fs';
import { join, extname, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';

export const ROOT = resolve(import.meta.dirname, '..');
export const DIST = process.env.MEMSCAPE_DIST || join(ROOT, 'dist');
export const SHOTS = join(ROOT, 'e2e', 'screenshots');
export const MEMSCAPE = join(ROOT, 'target', 'debug', 'memscape');

// The snapshot corpus: MEMSCAPE_CORPUS, else the full one beside the checkout, else the eight
// files the repository may carry (testdata/corpus/SOURCES.md).
const FULL = resolve(ROOT, '../shared/corpus');
const COMMITTED = join(ROOT, 'testdata', 'corpus');
export const CORPUS = process.env.MEMSCAPE_CORPUS ? resolve(ROOT, process.env.MEMSCAPE_CORPUS)
  : existsSync(FULL) ? FULL : COMMITTED;
/** Whether the corpus may lack files of the full one (a test that needs one then skips). */
export const PARTIAL = process.env.MEMSCAPE_CORPUS_PARTIAL === '1' || CORPUS === COMMITTED;

/** Whether the corpus holds every file of `names`. Where it is partial and one is missing,
 * the test `t` is marked skipped, naming it, and the caller returns; in the full corpus a
 * missing file is left to fail where it is read. */
export function needs(t, ...names) {
  const missing = names.filter(n => !existsSync(join(CORPUS, n)));
  if (!PARTIAL || missing.length === 0) return true;
  t.skip(`needs ${missing.join(', ')} from the full corpus (../shared/corpus; see testdata/corpus/SOURCES.md)`);
  return false;
}

/** PyTorch's figures for the corpus file `name` (its `expected/` JSON). */
export function expected(name) {
  return JSON.parse(readFileSync(join(CORPUS, 'expected', `${name}.json`), 'utf8'));
}

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

// In the page: the canvas `id`'s pixels, `{ hash, painted }` (a hash of them, and how many
// differ from its background, its top-left pixel); with `want`, whether they are as it says
// (`canvasWhen`).
const readCanvas = ([id, want]) => {
  const c = document.getElementById(id);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let hash = 2166136261, painted = 0;
  for (let i = 0; i < d.length; i += 4) {
    hash = Math.imul(hash ^ (d[i] | d[i + 1] << 8 | d[i + 2] << 16 | d[i + 3] << 24), 16777619) >>> 0;
    if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 30) painted++;
  }
  if (!want) return { hash, painted };
  return (want.above === undefined || painted > want.above) && (want.not === undefined || hash !== want.not)
    && (want.is === undefined || hash === want.is);
};

/** The canvas `id`'s pixels: `{ hash, painted }`, a fingerprint (to tell whether its
 * picture changed) and how many differ from its background. */
export function pixels(page, id) {
  return page.evaluate(readCanvas, [id, null]);
}

/** How many pixels of the canvas `id` differ from its background (its top-left pixel). */
export async function paintedPixels(page, id = 'timeline') {
  return (await pixels(page, id)).painted;
}

/** A hash of the canvas `id`'s pixels (to tell whether its picture changed). */
export async function pixelHash(page, id) {
  return (await pixels(page, id)).hash;
}

/** Waits until the canvas `id`'s picture is as `want` says: more than `above` pixels painted,
 * a hash `not` the one given (changed) or that `is` it. (A function, not a string: the page's
 * CSP forbids the `eval` that a string would be polled with.) */
export async function canvasWhen(page, id, want) {
  await page.waitForFunction(readCanvas, [id, want], { timeout: 30000, polling: 100 });
}

/** Two animation frames: what the page drew before this is on screen. */
export function painted(page) {
  return page.evaluate(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))));
}

/** How many marks named `what` the page has recorded (`window.memscapeTimings`). */
export function marks(page, what) {
  return page.evaluate(w => (window.memscapeTimings || []).filter(x => x[0] === w).length, what);
}

/** Does `action`, one change of what the timeline shows (a move of its window, its kind or
 * device, a pin), and waits until the picture the page asked its worker for is drawn: a new
 * "frame" mark with no move's "preview" after it (a move's exact picture follows its
 * preview; an answer overtaken by a later move is not drawn). Unless `url` is false, waits
 * too for the URL to be written for it (a frame or more after the picture). */
export async function redrawn(page, action, { url = true } = {}) {
  const [n, hash] = await page.evaluate(() => [(window.memscapeTimings || []).filter(x => x[0] === 'frame').length, location.hash]);
  await action();
  await page.waitForFunction(([n, hash, url]) => {
    const m = (window.memscapeTimings || []).map(x => x[0]).filter(x => x === 'frame' || x === 'preview');
    return m.filter(x => x === 'frame').length > n && m.at(-1) === 'frame' && (!url || location.hash !== hash);
  }, [n, hash, url], { timeout: 30000 });
  await painted(page);
}

/** Moves the pointer to (x, y) of the page over the timeline, and waits until what is there is
 * shown and drawn. Over the plot's columns, down to its bottom axis, a move asks the worker
 * (app/src/timeline/plot.rs, `Hits::ask`): its answer (a "details" mark) is waited for;
 * elsewhere the page clears the hover at once. (Plot margins of draw/mod.rs: LEFT 76,
 * RIGHT 14, BOTTOM 24 CSS pixels.) */
export async function hovered(page, x, y) {
  const box = await page.locator('#timeline').boundingBox();
  const asks = x >= box.x + 76 && x < box.x + box.width - 14 && y <= box.y + box.height - 24;
  const n = await marks(page, 'details');
  await page.mouse.move(x, y);
  if (asks) {
    await page.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'details').length > n, n, { timeout: 30000 });
  }
  await painted(page);
}

/** Waits until `name` is the active tab and its statistics are shown. */
export async function tabShown(page, name, timeout = 60000) {
  await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
    && document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), name, { timeout });
}

/** The URL's hash as `{key: value}`. */
export function hashOf(page) {
  return page.evaluate(() => Object.fromEntries(location.hash.slice(1).split('&').filter(Boolean)
    .map(kv => kv.split('=').map(decodeURIComponent))));
}

/** A screenshot of `page` in e2e/screenshots/`name`.png. */
export async function shot(page, name, options = {}) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), ...options });
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
  await tabShown(page, example);
  return { url: srv.url, page, requests, consoleErrors, close: async () => { await ctx.close(); await srv.close(); } };
}

/** Chooses `path` in the file input of `view` (from `openExample`) and waits until its tab,
 * `name`, is in front and its first picture drawn; a file the page cannot take fails with the
 * error it shows or logs, not by waiting out the time. */
export async function openFileDrawn(view, path, name) {
  const { page } = view;
  const n = await marks(page, 'first-draw-at');
  await page.setInputFiles('#file-input', path);
  await tabShown(page, name).catch(async e => {
    const error = await page.locator('#error').count() ? await page.locator('#error .error-text').textContent() : '';
    throw new Error(`${name} did not open: ${error} ${view.consoleErrors.join('; ')} (${e.message})`);
  });
  await page.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'first-draw-at').length > n, n, { timeout: 60000 });
  await painted(page);
}

/** `memscape stats --json` of `path` (the debug build the tests run). */
export function statsJson(path) {
  return JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', path], { maxBuffer: 1 << 26, stdio: ['ignore', 'pipe', 'pipe'] }).toString());
}

/** RSS (bytes) of every process under this one: the browser and its renderers and workers. */
export function treeRss() {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,rss=']).toString().trim().split('\n').map(l => l.trim().split(/\s+/).map(Number));
  const kids = new Map();
  for (const [pid, ppid, rss] of rows) kids.set(ppid, [...(kids.get(ppid) || []), [pid, rss]]);
  let sum = 0;
  const todo = [process.pid];
  while (todo.length) for (const [pid, rss] of kids.get(todo.pop()) || []) { sum += rss * 1024; todo.push(pid); }
  return sum;
}
