// The viewer in headless Chromium, driven like a user: every check reads what is on screen
// (DOM text, canvas pixels, the URL) and compares it with PyTorch's own figures
// (../shared/corpus/expected) or with Python's reading of the same file (oracle.py).
import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, statsOf, paintedPixels, painted, redrawn, hovered, marks, tabShown, hashOf, shot as shotOf,
  pixels as pixelsOf, canvasWhen, expected, needs, CORPUS, PARTIAL, ROOT } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
// Each test opens its own page, in its own browser (`open`): none uses what another left.
let srv, ctx, page, requests;

/** `dist/` served and opened in a fresh browser at `query` (the bundled example unless it is
 * `?empty`); `requests` collects every URL asked for. With the example: once its first
 * picture is drawn. */
async function open(query = '') {
  srv = await serve();
  ctx = await browser();
  requests = [];
  ctx.on('request', r => requests.push(r.url()));
  page = await ctx.newPage();
  page.on('pageerror', e => { throw e; });
  await page.goto(srv.url + query);
  if (query === '?empty') return;
  await waitForTab(EXAMPLE);
  await firstDraw(1);
}

afterEach(async () => {
  await ctx?.close();
  await srv?.close();
  ctx = srv = page = null;
});

const shot = name => shotOf(page, name);
const pixels = id => pixelsOf(page, id);
const hash = () => hashOf(page);
const stats = () => statsOf(page);
const waitForTab = (name, timeout) => tabShown(page, name, timeout);

/** Waits until `n` files' first pictures have been drawn on `p` (its "first-draw-at" marks). */
async function firstDraw(n, p = page) {
  await p.waitForFunction(n => (window.memscapeTimings || []).filter(x => x[0] === 'first-draw-at').length >= n, n, { timeout: 60000 });
  await painted(p);
}

/** Waits until the canvas `id` has more than `min` pixels painted (its picture drawn). */
const drawn = (id, min) => canvasWhen(page, id, { above: min });

/** Opens `path` through the file input as the tab `name`, once its first picture is drawn. */
async function openFile(path, name) {
  const n = await marks(page, 'first-draw-at');
  await page.setInputFiles('#file-input', path);
  await waitForTab(name);
  await firstDraw(n + 1);
}

/** What the statistics panel must show for `name` on `device`, from PyTorch's figures. */
function expectedStats(name, device) {
  const exp = expected(name);
  const out = {};
  for (const k of ['segments', 'total_reserved', 'total_allocated', 'free_internal', 'free_external']) out[k] = exp.segsum[k];
  const dev = String(device);
  out.reserved_bytes = exp.reserved.per_device[dev] ?? 0;
  out.trace_entries = exp.raw_device_traces?.[dev]?.entries ?? 0;
  out['segment_timeline.final_bytes'] = out.reserved_bytes;
  const viz = exp.memoryviz.devices?.[dev];
  const mapUnmap = Object.values(exp.raw_device_traces || {}).some(d => d.actions?.segment_map || d.actions?.segment_unmap);
  if (viz) {
    const pairs = [['elements', 'elements'], ['peak_bytes', 'max_at_time_peak'], ['final_bytes', 'final_live_bytes'],
      ['initially_allocated', 'initially_allocated'], ['unmatched_frees', 'unmatched_frees'],
      ['snapshot_only', 'snapshot_only_elements']];
    for (const [ours, theirs] of pairs) {
      out[`timeline.${ours}`] = viz.active_memory_timeline[theirs];
      if (!mapUnmap) out[`segment_timeline.${ours}`] = viz.active_cached_segment_timeline[theirs];
    }
  }
  return out;
}

test('the bundled example opens by itself and draws its timeline', async () => {
  await open();
  const want = expectedStats('pt25-cs336-fullstep-annotations.pickle', 0);
  const got = await stats();
  for (const [k, v] of Object.entries(want)) assert.equal(got[k], v, `${k}`);
  // The tab comes with the load reply, the picture when the worker has drawn it (the panels
  // a frame after that): wait for the page's own mark, not a fixed settle (a slow moment in
  // CI once found the plot not drawn yet).
  // (`open` waits for it.) The minimap comes with an answer of its own.
  const px = await pixels('timeline');
  assert.ok(px.painted > 100000, `timeline painted ${px.painted} pixels`);
  await drawn('minimap', 1000);
  // The allocator before the first event comes once the worker has undone the trace (in the
  // background, after the first picture).
  await page.waitForFunction(() => /999 segments/.test(document.querySelector('#state-summary')?.textContent ?? ''), null, { timeout: 30000 });
  await shot('01-example');
  assert.equal(await page.locator('#stats .file-line').textContent(), `${EXAMPLE} · 3.6MiB · pickle, protocol 4`);
  // Its worker was started, and asked for its bytes, as the page was parsed, before the
  // page's own code had started (index.html's script); the bytes were fetched once.
  const started = (await page.evaluate(() => window.memscapeTimings.find(x => x[0] === 'app-start-at')))[1];
  const origin = await page.evaluate(() => performance.timeOrigin);
  const fetches = p => p.evaluate(n => [performance.timeOrigin, performance.getEntriesByType('resource')
    .filter(e => new URL(e.name).pathname.endsWith(`/${n}`)).map(e => e.startTime)], EXAMPLE);
  const seen = await Promise.all([page, ...page.workers()].map(fetches));
  const at = seen.flatMap(([o, times]) => times.map(t => o - origin + t));
  assert.equal(at.length, 1, `the example fetched ${at.length} times`);
  assert.ok(at[0] < started, `the example asked for at ${at[0]} ms, the page's code started at ${started} ms`);
  // Its first view was asked of that worker as soon as the page was laid out, before the
  // page had the bytes (the worker reads them by itself): it does not wait for the page.
  const mark = m => page.evaluate(m => window.memscapeTimings.find(x => x[0] === m)?.[1], m);
  const [asked, arrived] = [await mark('ahead-asked-at'), await mark('example-fetched-at')];
  assert.ok(asked <= arrived, `its first view asked for at ${asked} ms, its bytes on the page at ${arrived} ms`);
  assert.ok(await mark('ahead-used'), 'the first view drawn was the one asked for ahead');
});

test('every corpus file opens through the file input with PyTorch\'s statistics', async () => {
  await open();
  const files = readdirSync(CORPUS).filter(f => /\.(pickle|pkl|html)$/.test(f)).sort();
  // The full corpus has nineteen; the repository's part of it, eight.
  assert.ok(files.length >= (PARTIAL ? 8 : 19), `corpus has ${files.length} files`);
  for (const f of files) {
    await page.setInputFiles('#file-input', join(CORPUS, f));
    await waitForTab(f);
    const exp = expected(f);
    const hasDevice = (await page.locator('#device option').count()) > 0;
    const device = hasDevice ? Number(await page.locator('#device').inputValue()) : NaN;
    if (!hasDevice) assert.match(await page.locator('#no-devices').textContent(), /nothing was recorded/i);
    const listed = exp.memoryviz.device_list ?? [];
    if (listed.length) {
      assert.ok(listed.includes(device), `${f}: device ${device} not in ${listed}`);
      const entries = d => exp.raw_device_traces?.[String(d)]?.entries ?? 0;
      assert.equal(entries(device), Math.max(...listed.map(entries)), `${f}: default device has the most events`);
    }
    const want = expectedStats(f, Number.isNaN(device) ? 0 : device);
    const got = await stats();
    // What the file was, in words (the page once showed the reader's debug form,
    // "Pickle(Some(4))"); PyTorch's HTML export is named as such.
    const line = await (await page.waitForFunction(n => {
      const t = document.querySelector('#stats .file-line')?.textContent;
      return t?.startsWith(n + ' ') && t;
    }, f)).jsonValue();
    assert.match(line, f.endsWith('.html') ? / · pickle, protocol \d, inside a PyTorch HTML page$/ : / · pickle, protocol \d$/, `${f}: ${line}`);
    for (const [k, v] of Object.entries(want)) {
      if (!hasDevice && !['segments', 'total_reserved', 'total_allocated', 'free_internal', 'free_external'].includes(k)) continue;
      assert.equal(got[k], v, `${f}: ${k}`);
    }
    assert.equal(await page.locator('#error').count(), 0, `${f}: no error`);
  }
  assert.equal(await page.locator('.tab').count(), files.length + 1);
  // Twenty tabs wrap inside their bar: the header's buttons and note keep one line each (they
  // were squeezed into two and four).
  const heights = await page.evaluate(() => [...document.querySelectorAll('header > .button, header > .privacy, #help-button')]
    .map(e => [e.textContent.trim(), e.getBoundingClientRect().height]));
  const one = heights.find(([t]) => t === '?')[1];
  for (const [t, h] of heights) assert.ok(h <= one + 1, `${t}: ${h} px tall, one line is ${one}`);
  await shot('02-last-corpus-file');
});

test('drag and drop opens files', async () => {
  await open();
  const name = 'pt210-cs336-pyframes-usermeta.pickle';
  const b64 = readFileSync(join(CORPUS, name)).toString('base64');
  await page.evaluate(([name, b64]) => {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], 'dropped-' + name));
    document.querySelector('.app').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, [name, b64]);
  await waitForTab('dropped-' + name);
  const want = expectedStats(name, 0);
  const got = await stats();
  for (const k of ['total_reserved', 'total_allocated', 'trace_entries', 'timeline.peak_bytes']) assert.equal(got[k], want[k], k);
});

test('a snapshot memscape capture wrote on an H100 opens with its device named', async () => {
  const file = join(ROOT, 'capture', 'tests', 'data', 'h100', 'ours.pickle');
  // Python's reading of the same file: segments, trace, the reserved peak, NVML's entry.
  const want = JSON.parse(execFileSync('python3', ['-c', `
import json, pickle, sys
s = pickle.load(open(sys.argv[1], 'rb')); t = s['device_traces'][0]
final = sum(g['total_size'] for g in s['segments'])
steps = [e['size'] if e['action'] == 'segment_alloc' else -e['size'] for e in t if e['action'] in ('segment_alloc', 'segment_free')]
live = final - sum(steps); peak = live
for d in steps: live += d; peak = max(peak, live)
print(json.dumps({'reserved_bytes': final, 'trace_entries': len(t), 'segment_timeline.peak_bytes': peak, 'gpu': s['memscape_devices'][0]}))
`, file]).toString());
  await open();
  await openFile(file, 'ours.pickle');
  const got = await stats();
  for (const k of ['reserved_bytes', 'trace_entries', 'segment_timeline.peak_bytes']) assert.equal(got[k], want[k], k);
  const name = await page.locator('#stats-table tr[data-key="gpu.name"]').getAttribute('data-value');
  assert.equal(name, 'NVIDIA H100 80GB HBM3');
  assert.equal(name, want.gpu.name);
  assert.equal(got['gpu.total_bytes'], want.gpu.total_bytes);
  assert.equal(got['gpu.process_used_bytes'], want.gpu.process_used_bytes);
  assert.match(await page.locator('#stats-table tr[data-key="gpu.process_used_bytes"]').textContent(), /held by the process.*3\.5GiB/);
  assert.match(await page.locator('#device option:checked').textContent(), /^cuda:0 NVIDIA H100 80GB HBM3 \(114 events\)$/);
  assert.equal(await page.locator('#error').count(), 0);
  // Every driver allocation is its own block: the active memory timeline has the same peak,
  // and every allocation alive at the end was seen in the trace.
  assert.equal(await page.locator('#kind').inputValue(), 'blocks');
  assert.equal(got['timeline.peak_bytes'], want['segment_timeline.peak_bytes']);
  assert.equal(got['timeline.initially_allocated'], 0);
  assert.ok((await pixels('timeline')).painted > 1000, 'the timeline is drawn');
  await shot('03-captured-h100');
});

test('a file opened while the bundled example still loads keeps the focus', async () => {
  await open('?empty');
  const p2 = page;
  // Hold the example back so that it finishes after the user's file.
  let release, routed = 0;
  const held = new Promise(r => { release = r; });
  // (Fetched by the page's first worker: a dedicated worker's requests are routed too.)
  await p2.route(`**/${EXAMPLE}`, async route => { routed++; await held; await route.continue(); });
  await p2.goto(srv.url);
  const mine = 'pt24-sketchkv-maxentries1.pickle';
  await p2.setInputFiles('#file-input', join(CORPUS, mine));
  await p2.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n, mine);
  assert.equal(routed, 1, 'the example was held back');
  release();
  // The example's tab is added, and whether it comes to the front decided, in the task that
  // hears its load end (open.rs, `open_as`; its "loaded-at" mark): two frames after both
  // loads' marks, a focus it would take has been taken.
  await p2.waitForFunction(() => document.querySelectorAll('.tab').length === 2
    && (window.memscapeTimings || []).filter(x => x[0] === 'loaded-at').length === 2, null, { timeout: 60000 });
  await painted(p2);
  assert.equal(await p2.locator('.tab.active .tab-name').textContent(), mine);
  assert.match(await p2.locator('#stats .file-line').textContent(), new RegExp(`^${mine.replaceAll('.', '\\.')} `));
});

test('the views are laid out, hidden, before the first file is chosen, and its first picture is drawn by its worker as soon as it is read', async () => {
  await open('?empty');
  const p2 = page;
  await p2.waitForSelector('.empty');
  // The plot is in the page with its size, and nothing of it is seen before a file is chosen.
  const plotWidth = () => p2.evaluate(() => document.getElementById('timeline').clientWidth);
  const before = await plotWidth();
  assert.ok(before > 100, `the plot has its width before any file: ${before}`);
  assert.equal(await p2.locator('#timeline').isVisible(), false, 'no plot is seen before a file is chosen');
  assert.equal(await p2.locator('#stats').isVisible(), false, 'nor any panel');
  assert.equal(await p2.evaluate(() => document.documentElement.scrollHeight <= innerHeight), true, 'and the hidden views take no room');
  const choose = async file => {
    await p2.evaluate(() => { window.memscapeTimings = []; });
    await p2.setInputFiles('#file-input', join(CORPUS, file));
    await p2.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'first-draw-at'), null, { timeout: 60000 });
    const marks = await p2.evaluate(() => Object.fromEntries(window.memscapeTimings));
    // The page asked for the first view while the file was read, and the tab's first
    // request was answered by that: the page did not ask for it again.
    assert.ok(marks['ahead-asked-at'] < marks['loaded-at'], `${file}: asked for while read: ${JSON.stringify(marks)}`);
    assert.ok('ahead-used' in marks, `${file}: the tab's first view is the one asked for ahead: ${JSON.stringify(marks)}`);
    assert.ok(marks['view-ahead'] <= marks['first-draw-at'], `${file}: the first picture drawn was that one: ${JSON.stringify(marks)}`);
    assert.equal(await p2.locator('.tab.active .tab-name').textContent(), file);
    assert.ok(await paintedPixels(p2) > 1000, `${file}: and it is drawn`);
    return marks;
  };
  // A task queued as the file is chosen: the first view is asked for before it runs, in the
  // choice's own task, not once the worker reports progress.
  await p2.evaluate(() => window.addEventListener('change', () => {
    setTimeout(() => { window.afterChoice = performance.now(); }, 0);
  }, { capture: true, once: true }));
  const marks = await choose('pt25-cs336-fullstep-annotations.pickle');
  assert.ok(marks['ahead-asked-at'] < await p2.evaluate(() => window.afterChoice), `asked for as the file was chosen: ${JSON.stringify(marks)}`);
  assert.equal(await plotWidth(), before, 'the plot kept its width as the file\'s views were shown');
  // A later file, with the plot on screen: asked for as soon as it is chosen.
  await choose('pt210-cs336-training-usermeta.pickle');
  // Two files chosen together: each one's worker draws its own first view, used by its tab.
  await p2.evaluate(() => { window.memscapeTimings = []; });
  const two = ['pt20-flexgen-opt1.3b-history.pickle', 'pt25-cs336-bf16-forward.pickle'];
  await p2.setInputFiles('#file-input', two.map(f => join(CORPUS, f)));
  const count = m => p2.evaluate(m => (window.memscapeTimings || []).filter(x => x[0] === m).length, m);
  await p2.waitForFunction(() => (window.memscapeTimings || []).filter(x => x[0] === 'loaded-at').length === 2, null, { timeout: 60000 });
  assert.equal(await count('ahead-asked-at'), 2, 'both asked for while read');
  assert.equal(await count('ahead-used'), 2, 'both tabs took the view drawn ahead');
  assert.equal(await p2.locator('.tab-name').filter({ hasText: two[0] }).count(), 1);
  await p2.waitForFunction(() => (window.memscapeTimings || []).some(x => x[0] === 'first-draw-at'), null, { timeout: 60000 });
  assert.ok(await paintedPixels(p2) > 1000, 'the tab in front is drawn');
});

test('once the last tab is closed, nothing of its file stays for the next file\'s views to show while it loads', async () => {
  await open('?empty');
  const p3 = page;
  const shown = async file => {
    await openFile(join(CORPUS, file), file);
    assert.ok(await paintedPixels(p3) > 1000, `${file}: its plot is drawn`);
    // The minimap comes with an answer of its own.
    await drawn('minimap', 100);
  };
  await shown('pt20-flexgen-opt1.3b-history.pickle');
  await p3.click('.tab-close');
  await p3.waitForSelector('.empty');
  // The canvases are cleared by the effects that hide the closed file's views: drawn by the
  // next frame.
  await painted(p3);
  // The views stay in the page, hidden; they are shown again as soon as the next file loads.
  assert.equal(await paintedPixels(p3), 0, 'the plot holds nothing of the closed file');
  assert.equal(await paintedPixels(p3, 'minimap'), 0, 'nor does the minimap');
  await shown('pt25-cs336-bf16-forward.pickle');
});

/** Moves over the timeline until the details panel shows an allocation. */
async function hoverSomething() {
  const box = await page.locator('#timeline').boundingBox();
  for (let fy = 0.9; fy > 0.35; fy -= 0.05) {
    for (let fx = 0.15; fx < 0.95; fx += 0.1) {
      await hovered(page, box.x + box.width * fx, box.y + box.height * fy);
      if (await page.locator('#details table.kv').count()) return { x: box.x + box.width * fx, y: box.y + box.height * fy };
    }
  }
  throw new Error('no allocation under the pointer anywhere');
}

async function shownDetails() {
  return page.evaluate(() => ({
    title: document.querySelector('#details h2').textContent,
    fields: Object.fromEntries([...document.querySelectorAll('#details tr')].map(tr => [tr.dataset.key, tr.querySelector('td').textContent])),
    stack: document.querySelector('#stack')?.textContent ?? '',
  }));
}

test('hover shows the allocation and the stack PyTorch recorded for it; pin and copy work', async () => {
  await open();
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: srv.url.slice(0, -1) });
  const at = await hoverSomething();
  const d = await shownDetails();
  assert.equal(d.title, 'Allocation under the pointer');
  const addr = BigInt(d.fields.address);
  const size = Number(d.fields.size.match(/\((\d+) bytes\)/)[1]);
  // One allocated before recording and freed in it is known by its free's stack.
  const how = d.fields.origin.includes('its allocation was never recorded') ? 'free-stacks' : 'stacks';
  const oracle = JSON.parse(execFileSync('python3', [join(ROOT, 'e2e', 'oracle.py'), join(CORPUS, 'pt25-cs336-fullstep-annotations.pickle'),
    how, '0', addr.toString(), String(size)], { maxBuffer: 1 << 26 }).toString());
  assert.ok(oracle.length > 0, `Python finds an allocation at ${d.fields.address} of ${size} bytes`);
  const shown = d.stack === '(no stack recorded)' ? [] : d.stack.split('\n');
  const elide = ls => { const o = []; let i = 0; while (i < ls.length) { let j = i; while (j < ls.length && ls[j] === ls[i]) j++; const k = j - i; if (k >= 3) o.push(ls[i], `<repeats ${k - 1} times>`); else for (let m = 0; m < k; m++) o.push(ls[i]); i = j; } return o; };
  assert.ok(oracle.some(st => JSON.stringify(elide(st)) === JSON.stringify(shown)), `the stack shown is one Python reads for ${d.fields.address}`);
  await shot('03-hover');

  // A pin is part of the picture (drawn outlined) and of the URL.
  await redrawn(page, () => page.mouse.click(at.x, at.y));
  await page.waitForFunction(() => document.querySelector('#details h2').textContent === 'Pinned allocation');
  // Off the plot, a move asks the worker nothing: its handler clears the hover at once, drawn
  // by the next frames.
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + 5, box.y + 5);
  await painted(page);
  const pinned = await shownDetails();
  assert.equal(pinned.fields.address, d.fields.address, 'the pinned allocation stays while the pointer moves away');
  assert.equal((await hash()).pin !== undefined, true, 'the pin is in the URL');

  await page.locator('#copy-stack').click();
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'Stack copied');
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  assert.equal(clip, pinned.stack === '(no stack recorded)' ? '' : pinned.stack);

  const filtered = pinned.stack.split('\n').length;
  // The frames shown are the page's to choose (details.rs): redrawn by the next frames.
  await page.locator('#all-frames').check();
  await painted(page);
  const all = (await shownDetails()).stack.split('\n').length;
  assert.ok(all >= filtered, `all frames (${all}) include the filtered ones (${filtered})`);
  await page.locator('#all-frames').uncheck();
  await page.keyboard.press('Escape');
});

test('zoom, pan, minimap and jump to peak change the window and the picture', async () => {
  await open();
  const h0 = await hash();
  const p0 = await pixels('timeline');
  await page.locator('#timeline').hover();
  const key = k => redrawn(page, () => page.keyboard.press(k));
  await key('w');
  await key('w');
  const h1 = await hash();
  assert.ok(Number(h1.end) - Number(h1.start) < (Number(h0.end) - Number(h0.start)) * 0.7, 'W zooms in');
  const p1 = await pixels('timeline');
  assert.notEqual(p1.hash, p0.hash, 'zooming redraws');
  await key('d');
  const h2 = await hash();
  assert.ok(Number(h2.start) > Number(h1.start), 'D pans right');
  await key('a');
  await key('a');
  assert.ok(Number((await hash()).start) < Number(h2.start), 'A pans left');
  await key('s');
  const h3 = await hash();
  assert.ok(Number(h3.end) - Number(h3.start) > Number(h2.end) - Number(h2.start), 'S zooms out');

  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await redrawn(page, () => page.mouse.wheel(0, -400));
  const h4 = await hash();
  assert.ok(Number(h4.end) - Number(h4.start) < Number(h3.end) - Number(h3.start), 'the wheel zooms');

  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await redrawn(page, async () => {
    await page.mouse.down();
    await page.mouse.move(box.x + box.width / 2 - 200, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
  });
  assert.ok(Number((await hash()).start) > Number(h4.start), 'dragging left moves later in time');

  const mini = await page.locator('#minimap').boundingBox();
  const m0 = await pixels('minimap');
  await page.mouse.move(mini.x + 76 + (mini.width - 90) * 0.1, mini.y + mini.height / 2);
  await redrawn(page, async () => {
    await page.mouse.down();
    await page.mouse.move(mini.x + 76 + (mini.width - 90) * 0.3, mini.y + mini.height / 2, { steps: 4 });
    await page.mouse.up();
  });
  const n = expected('pt25-cs336-fullstep-annotations.pickle').memoryviz.devices['0'].active_memory_timeline.actions;
  // The drag's last move decides the window, but a frame and a (throttled) URL of a move
  // before it can end the wait above: wait for the URL to hold the last one (the assertion
  // below says what it holds if it never does).
  await page.waitForFunction(n => Math.abs(Number(new URLSearchParams(location.hash.slice(1)).get('end')) / n - 0.3) < 0.02,
    n, { timeout: 10000 }).catch(() => {});
  const h5 = await hash();
  assert.ok(Math.abs(Number(h5.start) / n - 0.1) < 0.02 && Math.abs(Number(h5.end) / n - 0.3) < 0.02, `the minimap brush selects 10%..30%: ${h5.start}..${h5.end}`);
  assert.notEqual((await pixels('minimap')).hash, m0.hash, 'the brush moved');
  await shot('04-brushed');

  await redrawn(page, () => page.locator('#whole').click());
  await redrawn(page, () => page.locator('#peak').click());
  const h6 = await hash();
  const peakStep = Number(await page.locator('#timeline').getAttribute('data-peak-step'));
  assert.ok(peakStep > 0);
  assert.ok(Number(h6.start) < peakStep && peakStep < Number(h6.end), `the window ${h6.start}..${h6.end} holds the peak at ${peakStep}`);
  assert.ok(Number(h6.end) - Number(h6.start) < n / 2, 'and zooms in on it');
});

test('a pan shows the last picture moved at once, then the exact one, and the URL follows after', async () => {
  await open();
  await page.locator('#timeline').hover();
  const key = k => redrawn(page, () => page.keyboard.press(k));
  await key('w');
  await key('w');
  // Painted pixels in the plot's rightmost 8%, below the lanes (the plot's margins in CSS
  // pixels, app/src/draw/mod.rs: LEFT 76, RIGHT 14, TOP 60, BOTTOM 24).
  const strip = () => {
    const c = document.getElementById('timeline');
    const r = devicePixelRatio;
    const x1 = Math.floor(c.width - 14 * r), x0 = Math.floor(x1 - (x1 - 76 * r) * 0.08);
    const d = c.getContext('2d').getImageData(x0, 60 * r, x1 - x0, c.height - 84 * r).data;
    const bg = c.getContext('2d').getImageData(1, 1, 1, 1).data;
    let painted = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1]) + Math.abs(d[i + 2] - bg[2]) > 30) painted++;
    }
    return painted;
  };
  const before = await page.evaluate(`(${strip})()`);
  assert.ok(before > 100, `the zoomed picture reaches the plot's right edge (${before} pixels)`);
  // D pans by a tenth of the window. The worker's answer comes as a message (a task of its
  // own), so nothing but the preview can be drawn while the page only runs microtasks.
  const h0 = await hash();
  const caught = await page.evaluate(async s => {
    window.memscapeTimings = [];
    const marks = () => window.memscapeTimings.map(x => x[0]);
    window.dispatchEvent(new KeyboardEvent('keydown', { key: 'd' }));
    for (let i = 0; i < 100000 && !marks().includes('preview'); i++) await Promise.resolve();
    return { marks: marks(), strip: eval(`(${s})()`), hash: location.hash };
  }, strip.toString());
  assert.ok(caught.marks.includes('preview'), `a preview is drawn before the worker answers: ${caught.marks}`);
  assert.ok(!caught.marks.includes('frame'), 'and before the exact picture');
  assert.ok(caught.strip < before * 0.05, `the steps the last picture did not show are empty in the preview (${caught.strip} of ${before} pixels)`);
  // The URL is written after that frame, not before the preview is drawn.
  const said = Object.fromEntries(caught.hash.slice(1).split('&').map(kv => kv.split('=').map(decodeURIComponent)));
  assert.equal(said.start, h0.start, 'the URL is not written while the preview is drawn');
  // The exact picture follows, then the URL.
  await page.waitForFunction(h => window.memscapeTimings.some(x => x[0] === 'frame') && location.hash !== h, caught.hash, { timeout: 30000 });
  await painted(page);
  const after = await page.evaluate(`(${strip})()`);
  assert.ok(after > 100, `the exact picture fills them (${after} pixels)`);
  assert.ok(Number((await hash()).start) > Number(h0.start), 'then the URL follows the pan');

  // Twenty moves, one every 10 ms (as a wheel or a held key makes them), each to a window
  // none before it showed: the URL is written a few times, not twenty (Chromium ignores a
  // page's history changes past 200 in 10 s), at most one write per 60 ms, and ends at the
  // last window.
  await redrawn(page, () => page.locator('#whole').click());
  const n = Number((await hash()).end);
  for (let i = 0; i < 6; i++) await key('w');
  const hb = await hash();
  // Each D moves a tenth of the window's width; the window stays inside the trace.
  const w = Number(hb.end) - Number(hb.start);
  const want = Math.min(Number(hb.start) + 2 * w, n - w);
  assert.ok(want > Number(hb.start) + w, 'the moves go past every window shown before them');
  const burst = await page.evaluate(async want => {
    let writes = 0;
    const replace = History.prototype.replaceState;
    History.prototype.replaceState = function (...a) { writes++; return replace.apply(this, a); };
    const frame = () => new Promise(r => requestAnimationFrame(r));
    const t0 = performance.now();
    // One move a frame, as Chromium hands a page a wheel's or a held key's.
    for (let i = 0; i < 20; i++) {
      window.dispatchEvent(new KeyboardEvent('keydown', { key: 'd' }));
      await frame();
    }
    const took = performance.now() - t0;
    // Until the URL holds the last window (the last write), or 10 s.
    const start = () => Number(new URLSearchParams(location.hash.slice(1)).get('start'));
    while (Math.abs(start() - want) >= 0.05 && performance.now() - t0 < 10000) await frame();
    History.prototype.replaceState = replace;
    return { writes, took, start: start() };
  }, want);
  assert.ok(burst.writes >= 1 && burst.writes < 20 && burst.writes <= burst.took / 60 + 2,
    `20 moves in ${burst.took.toFixed(0)} ms wrote the URL ${burst.writes} times`);
  const h1 = await hash();
  assert.equal(Number(h1.start), burst.start);
  assert.ok(Math.abs(Number(h1.start) - want) < 0.05, `the URL ends at the last window: start ${h1.start}, expected ${want.toFixed(2)}`);

  // A move not yet written is written at once when the page is hidden (a tab switched away
  // from, or closed, may never run the timer).
  const onHide = await page.evaluate(async () => {
    window.memscapeTimings = [];
    window.dispatchEvent(new KeyboardEvent('keydown', { key: 'a' }));
    for (let i = 0; i < 100000 && !window.memscapeTimings.some(x => x[0] === 'preview'); i++) await Promise.resolve();
    // The other effects of the move (the URL's among them) run in the same turn.
    for (let i = 0; i < 1000; i++) await Promise.resolve();
    const before = location.hash;
    Object.defineProperty(document, 'hidden', { value: true, configurable: true });
    document.dispatchEvent(new Event('visibilitychange', { bubbles: true }));
    const after = location.hash;
    delete document.hidden;
    return { before, after };
  });
  assert.notEqual(onHide.after, onHide.before, 'hiding the page writes the move at once');
  const hidden = Object.fromEntries(onHide.after.slice(1).split('&').map(kv => kv.split('=').map(decodeURIComponent)));
  assert.ok(Number(hidden.start) < Number(h1.start), `the move written is the last one: ${hidden.start} < ${h1.start}`);
  await redrawn(page, () => page.locator('#whole').click());
  const whole = await hash();
  assert.equal(Number(whole.start), 0, `and follows the next move: ${JSON.stringify(whole)}`);
});

test('the device selector switches devices', async t => {
  const name = 'pt25plus-expandable-2gpu-tiny-nohistory.pickle';
  if (!needs(t, name)) return;
  await open();
  await openFile(join(CORPUS, name), name);
  const before = await stats();
  const dev = Number(await page.locator('#device').inputValue());
  const other = dev === 0 ? 1 : 0;
  const p0 = await pixels('timeline');
  await redrawn(page, () => page.locator('#device').selectOption(String(other)));
  // The statistics are the device's once they differ from the other's.
  await page.waitForFunction(b => [...document.querySelectorAll('#stats-table tr')]
    .some(tr => tr.dataset.value !== b[tr.dataset.key]), Object.fromEntries(Object.entries(before).map(([k, v]) => [k, String(v)])));
  const after = await stats();
  const want = expectedStats(name, other);
  for (const k of ['reserved_bytes', 'trace_entries', 'timeline.peak_bytes', 'timeline.elements']) assert.equal(after[k], want[k], k);
  assert.notDeepEqual(after, before);
  assert.equal((await hash()).device, String(other));
  assert.notEqual((await pixels('timeline')).hash, p0.hash, 'the picture changes');
  await shot('05-device');
});

test('selecting an event shows the allocator after it, and arrow keys step through events', async () => {
  await open();
  const s0 = await pixels('state-map');
  await page.locator('#events .row[data-entry="3"]').click();
  await page.waitForFunction(() => document.querySelector('#state h2').textContent === 'Allocator after event 3');
  await page.locator('#events').focus();
  await page.keyboard.press('ArrowDown');
  await page.waitForFunction(() => document.querySelector('#state h2').textContent === 'Allocator after event 4');
  // The URL follows a frame or more after.
  await page.waitForFunction(() => /[#&]event=4(&|$)/.test(location.hash));
  await painted(page);
  assert.equal((await hash()).event, '4');
  assert.equal(await page.locator('#events .row.selected').getAttribute('data-entry'), '4');
  const summary = await page.locator('#state-summary').textContent();
  assert.match(summary, /segments · reserved .* · allocated /);
  assert.notEqual((await pixels('state-map')).hash, s0.hash);
  // Far away: the list scrolls and the state after the last event opens at once.
  await page.locator('#events').evaluate(el => { el.scrollTop = el.scrollHeight; });
  await page.waitForFunction(() => document.querySelector('#events .row[data-entry="19463"]'));
  await page.locator('#events .row[data-entry="19463"]').click();
  await page.waitForFunction(() => document.querySelector('#state h2').textContent === 'Allocator after event 19463');
  await shot('06-state');
});

test('search by frame text and by address highlights matches and steps through them', async () => {
  await open();
  const p0 = await pixels('timeline');
  await page.locator('#search').fill('optimizer');
  // The matches are drawn in a picture of their own (the URL stays).
  await redrawn(page, () => page.locator('#search').press('Enter'), { url: false });
  await page.waitForFunction(() => /matches$/.test(document.querySelector('#search-count').textContent));
  const text = await page.locator('#search-count').textContent();
  const count = Number(text.match(/of (\d+) matches/)[1]);
  assert.ok(count > 0, text);
  assert.notEqual((await pixels('timeline')).hash, p0.hash, 'matches are highlighted');
  const first = (await shownDetails()).fields.address;
  assert.match((await shownDetails()).stack.toLowerCase(), /optimizer/);
  // Each match shown is pinned: a picture of its own.
  await redrawn(page, () => page.locator('#search-next').click(), { url: false });
  await page.waitForFunction(() => /^2 of/.test(document.querySelector('#search-count').textContent));
  await shot('07-search');
  // By address: the pinned allocation's address finds it again.
  await page.locator('#search-mode').selectOption('address');
  await page.locator('#search').fill(first);
  await redrawn(page, () => page.locator('#search-go').click(), { url: false });
  await page.waitForFunction(() => /of \d+ matches$/.test(document.querySelector('#search-count').textContent));
  assert.equal((await shownDetails()).fields.address, first);
});

test('a broken file shows what and where, and the previous view stays usable', async () => {
  await open();
  const before = await stats();
  const bytes = readFileSync(join(CORPUS, 'pt24-sketchkv-maxentries1.pickle'));
  const broken = join(tmpdir(), 'broken-sketchkv.pickle');
  writeFileSync(broken, bytes.subarray(0, Math.floor(bytes.length / 2)));
  await page.setInputFiles('#file-input', broken);
  await page.waitForSelector('#error', { timeout: 30000 });
  const msg = await page.locator('#error .error-text').textContent();
  assert.match(msg, /broken-sketchkv\.pickle/);
  assert.match(msg, /offset|byte/);
  assert.equal(await page.locator('.tab.active .tab-name').textContent(), EXAMPLE);
  assert.deepEqual(await stats(), before);
  const h0 = await hash();
  await page.locator('#timeline').hover();
  await redrawn(page, () => page.keyboard.press('w'));
  assert.notEqual((await hash()).end, h0.end, 'still zooms');
  await shot('08-error');
  await page.locator('#error button').click();
  // Not a snapshot at all.
  const junk = join(tmpdir(), 'notes.txt');
  writeFileSync(junk, 'hello, this is not a snapshot');
  await page.setInputFiles('#file-input', junk);
  await page.waitForSelector('#error');
  assert.match(await page.locator('#error .error-text').textContent(), /notes\.txt/);
  await page.locator('#error button').click();
});

test('a load shows progress and can be cancelled', async () => {
  await open();
  const big = join(tmpdir(), 'memscape-e2e-synth.pickle');
  execFileSync(join(ROOT, 'target', 'debug', 'memscape'), ['synth', '--size', '250M', '-o', big]);
  const tabs = await page.locator('.tab').count();
  await page.setInputFiles('#file-input', big);
  await page.waitForSelector('#loads .load progress');
  const figures = await page.locator('#loads .load-figures').textContent();
  assert.match(figures, /MiB \(\d+%\)/);
  await page.locator('#loads .cancel').click();
  await page.waitForFunction(() => !document.querySelector('#loads .load'));
  // The worker's word that the load was cancelled (open.rs: its status line) ends the load:
  // no tab can come for it after that.
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'Cancelled loading memscape-e2e-synth.pickle');
  await painted(page);
  assert.equal(await page.locator('.tab').count(), tabs, 'a cancelled load adds no tab');
});

test('shortcuts overlay, PNG export, segment view and the URL restore the view', async () => {
  await open();
  await page.keyboard.press('?');
  await page.waitForSelector('#help');
  assert.match(await page.locator('#help').textContent(), /zoom in/);
  await shot('09-help');
  await page.keyboard.press('?');
  const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#png').click()]);
  assert.match(download.suggestedFilename(), /\.png$/);
  const png = readFileSync(await download.path());
  assert.equal(png.subarray(1, 4).toString(), 'PNG');

  // Themes follow the system.
  const corner = () => page.evaluate(() => [...document.getElementById('timeline').getContext('2d').getImageData(2, 2, 1, 1).data].slice(0, 3));
  assert.ok((await corner()).every(v => v > 200), 'light background');
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForFunction(() => document.getElementById('timeline').getContext('2d').getImageData(2, 2, 1, 1).data[0] < 60);
  await shot('11-dark');
  await page.emulateMedia({ colorScheme: 'light' });
  await page.waitForFunction(() => document.getElementById('timeline').getContext('2d').getImageData(2, 2, 1, 1).data[0] > 200);

  // The segments' picture, and their totals in the minimap (an answer of its own).
  const m0 = await pixels('minimap');
  await redrawn(page, () => page.locator('#kind').selectOption('segments'));
  await canvasWhen(page, 'minimap', { not: m0.hash });
  await shot('10-segments');
  assert.equal((await hash()).kind, 'segments');
  await redrawn(page, () => page.locator('#kind').selectOption('blocks'));

  await page.locator('#timeline').hover();
  await redrawn(page, () => page.keyboard.press('w'));
  await redrawn(page, () => page.keyboard.press('d'));
  const h = await hash();
  await page.reload();
  await waitForTab(EXAMPLE);
  await firstDraw(1);
  // The restored window's URL is written a frame or more after its picture: `pagehide` (as
  // when the page is left) writes a change still waiting at once (url.rs, `follow`).
  await page.evaluate(() => window.dispatchEvent(new Event('pagehide')));
  const r = await hash();
  assert.equal(Number(r.start).toFixed(1), Number(h.start).toFixed(1));
  assert.equal(Number(r.end).toFixed(1), Number(h.end).toFixed(1));
});

test('no request leaves the page\'s origin', async () => {
  // The example, and a file from the disk, each shown.
  await open();
  const file = 'pt25-cs336-bf16-forward.pickle';
  await openFile(join(CORPUS, file), file);
  assert.ok(requests.length > 5);
  const origin = srv.url.slice(0, -1);
  const foreign = requests.filter(u => !(u.startsWith(origin + '/') || u.startsWith('blob:' + origin) || u.startsWith('data:')));
  assert.deepEqual(foreign, []);
});
