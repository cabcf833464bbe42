// The doctor, driven like a user: a generated run with two planted out-of-memory errors (an
// exhaustion and a fragmentation) opens with a banner that leads to the doctor, whose figures,
// verdicts, holders, advice and what-if rows must equal `memscape doctor --json` on the same
// file; a click on an OOM's mark in the timeline opens the doctor at that OOM; a ticked
// what-if prediction is drawn on the category chart. The bundled example (no OOM) shows its
// peak instead.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, pixelHash, canvasWhen, painted, shot, needs, tabShown, MEMSCAPE, ROOT, CORPUS } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
// The corpus's out-of-memory file: FlexGen's, dumped by an OOM observer (no `oom` event).
const OOM_FILE = 'pt20-flexgen-opt-oom-history.pickle';
// What a holder must never be: a destructor, the allocator, the unwinder, the interpreter or
// the dispatcher (the frames of a free, or of C++ plumbing).
const PLUMBING = /::~|intrusive_ptr|StorageImpl|CachingAllocator|unwind::unwind|CapturedTraceback|_PyEval|PyObject_|_PyRun|Py_BytesMain|PyMethod_New|PyType_GetModule|__libc|c10::impl::|c10::Dispatcher/;
const TMP = join(tmpdir(), 'memscape-doctor');
const FILE = join(TMP, 'two-ooms.pickle');
let view, page, report;

function doctorJson(path) {
  return JSON.parse(execFileSync(MEMSCAPE, ['doctor', '--json', path], { stdio: ['ignore', 'pipe', 'pipe'] }).toString());
}


/** The share of the plot's width painted near-black on the row where a line at the top of the
 * category chart's axis (its highest value, `y_max / 1.04`) is drawn: geometry of draw/charts.rs. */
function darkTopRow() {
  return page.evaluate(() => {
    const c = document.getElementById('categories');
    const dpr = c.width / c.clientWidth;
    const bottom = c.clientHeight - 24, plotH = bottom - 10;
    const row = Math.round((bottom - plotH / 1.04) * dpr);
    const d = c.getContext('2d').getImageData(0, row, c.width, 1).data;
    const [x0, x1] = [Math.ceil(76 * dpr), Math.floor(c.width - 14 * dpr)];
    let dark = 0;
    for (let x = x0; x < x1; x++) if (d[4 * x] + d[4 * x + 1] + d[4 * x + 2] < 200) dark++;
    return dark / (x1 - x0);
  });
}

const pixels = id => pixelHash(page, id);

/** What the doctor shows of the OOM on screen, in `memscape doctor --json`'s names. */
function shownOom() {
  return page.evaluate(() => {
    const num = v => (v === 'null' ? null : Number(v));
    const figures = Object.fromEntries([...document.querySelectorAll('#oom-figures tr')].map(tr => [tr.dataset.key, num(tr.dataset.value)]));
    return {
      entry: Number(document.querySelector('#oom').dataset.entry),
      verdict: document.querySelector('#verdict').dataset.verdict,
      figures,
      holders: [...document.querySelectorAll('#holders tr.holder')].map(tr => ({ site: tr.dataset.site, bytes: Number(tr.dataset.bytes) })),
      advice: [...document.querySelectorAll('#advice li.advice')].map(li => ({ setting: li.dataset.setting, effect: Number(li.dataset.effect) })),
      whatIf: [...document.querySelectorAll('#what-if tr.what-if')].map(tr => ({ key: tr.dataset.key, peak: Number(tr.dataset.peak) })),
    };
  });
}

function assertSame(shown, oom, what) {
  assert.equal(shown.entry, oom.entry, `${what}: entry`);
  assert.equal(shown.verdict, oom.verdict, `${what}: verdict`);
  for (const k of ['requested_bytes', 'device_free_bytes', 'reserved_bytes', 'allocated_bytes', 'cached_free_bytes',
    'largest_free_block_bytes', 'segment_bytes_needed', 'live_block_bytes']) {
    assert.equal(shown.figures[k], oom[k], `${what}: ${k}`);
  }
  assert.deepEqual(shown.holders, oom.holders.map(h => ({ site: h.site, bytes: h.bytes })), `${what}: holders`);
  assert.deepEqual(shown.advice, oom.advice.map(a => ({ setting: a.setting, effect: a.predicted_effect_bytes })), `${what}: advice`);
  assert.deepEqual(shown.whatIf, report.what_if.map(w => ({ key: w.key, peak: w.predicted_peak_bytes })), `${what}: what-if`);
}

before(async () => {
  mkdirSync(TMP, { recursive: true });
  execFileSync(MEMSCAPE, ['synth', '--entries', '6000', '--fragmentation-oom', '--oom', '--seed', '7', '-o', FILE], { stdio: 'pipe' });
  report = doctorJson(FILE);
  assert.deepEqual(report.ooms.map(o => o.verdict), ['exhausted', 'fragmentation'], 'the planted errors');
  view = await openExample(EXAMPLE);
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

test('a file without an OOM: no banner, and the doctor shows its peak', async () => {
  // The banner comes with the tab (the load's figures: doctor.rs), which is open.
  assert.equal(await page.locator('#oom-banner').count(), 0);
  await page.click('#mode-doctor');
  await page.waitForSelector('#peak-health', { timeout: 30000 });
  const example = doctorJson(join(ROOT, 'examples', EXAMPLE));
  assert.equal(Number(await page.locator('#peak-health').getAttribute('data-peak')), example.peak.peak_bytes);
  assert.match(await page.locator('#headroom').textContent(), /headroom is unknown/);
  const sites = await page.locator('#peak-health tr.holder').evaluateAll(trs => trs.map(tr => [tr.dataset.site, Number(tr.dataset.bytes)]));
  assert.deepEqual(sites, example.peak.holders.map(h => [h.site, h.bytes]));
  // A training step recorded with C++ stacks: the holders are the user's lines, never a frame
  // of a free (the tensor's destructor) or of the interpreter.
  assert.deepEqual(sites.filter(([s]) => PLUMBING.test(s)), [], 'no holder is plumbing');
  assert.ok(sites.filter(([s]) => /cs336_systems\/adapters\.py:\d+:\w+$/.test(s)).length >= 5, JSON.stringify(sites));
  assert.ok(sites.some(([s]) => /^allocated before recording; freed at .*benchmarking_script\.py:\d+:\w+$/.test(s)),
    'what was allocated before the recording is named by where it went');
  // A run that ended well is not described as a failure.
  const atEnd = await page.locator('#at-end').textContent();
  assert.match(atEnd, /^At the end of the trace: [\d.]+GiB reserved, [\d.]+GiB of it free in the cache \([\d.]+%\) in \d+ blocks/);
  const ifError = await page.locator('#at-end-if').textContent();
  assert.match(ifError, /^If it was dumped at an out-of-memory error: fragmentation, a request between /);
  const panel = await page.locator('#peak-health').textContent();
  assert.doesNotMatch(panel, /fails for fragmentation|dumped when an allocation failed/);
  await shot(page, '12-doctor-peak', { fullPage: true });
  await page.click('#mode-timeline');
});

test('a file with OOMs: the banner opens the doctor, whose figures equal memscape doctor --json', async () => {
  await page.setInputFiles('#file-input', FILE);
  await page.waitForFunction(() => document.querySelector('.tab.active .tab-name')?.textContent === 'two-ooms.pickle', null, { timeout: 60000 });
  await page.waitForSelector('#oom-banner');
  assert.match(await page.locator('#oom-banner').textContent(), /cuda:0 ran out of memory 2 times/);
  await page.click('#open-doctor');
  await page.waitForSelector('#verdict', { timeout: 30000 });
  assert.equal(await page.locator('#oom-banner').count(), 0, 'no banner over the doctor');
  assertSame(await shownOom(), report.ooms[0], 'first OOM');
  assert.match(await page.locator('#verdict').textContent(), /exhausted/i);
  // Where in the step it happened, in the same words as memscape doctor's text.
  const said = execFileSync(MEMSCAPE, ['doctor', FILE]).toString();
  const o = report.ooms[0];
  const where = said.match(new RegExp(`^OOM at entry ${o.entry} \\(step ${o.step}, ([a-z_ ,]+)\\): `, 'm'))?.[1];
  assert.match(where ?? '', /^(in |outside )/, 'the command line says where in words');
  assert.equal(await page.locator('#oom h2').first().textContent(), `Out of memory on cuda:0 at event ${o.entry}, ${where}`);
  await page.click('.oom-pick:nth-child(2)');
  await page.waitForFunction(e => document.querySelector('#oom')?.dataset.entry === String(e), report.ooms[1].entry);
  assertSame(await shownOom(), report.ooms[1], 'second OOM');
  assert.ok(report.ooms[1].advice.some(a => a.setting.startsWith('expandable_segments')), 'the fragmentation advice');
  await shot(page, '13-doctor', { fullPage: true });
});

/** Back to the timeline, once its plot is laid out again and drawn. */
async function timeline() {
  await page.click('#mode-timeline');
  await page.waitForFunction(() => document.getElementById('timeline')?.clientWidth > 0);
  await painted(page);
}

test('a click on an OOM mark in the timeline opens the doctor at that OOM', async () => {
  // The file as it opened, whole: its window in the URL.
  await timeline();
  await page.waitForFunction(() => /[#&]file=two-ooms\.pickle(&|$)/.test(location.hash) && /[#&]start=/.test(location.hash));
  const hash = new URLSearchParams((await page.evaluate(() => location.hash)).slice(1));
  const [start, end] = [Number(hash.get('start')), Number(hash.get('end'))];
  const box = await page.locator('#timeline').boundingBox();
  for (const k of [0, 1]) {
    const x = 76 + (report.ooms[k].step + 0.5 - start) / (end - start) * (box.width - 76 - 14);
    await page.mouse.click(box.x + x, box.y + 6);
    await page.waitForFunction(e => document.querySelector('#oom')?.dataset.entry === String(e), report.ooms[k].entry, { timeout: 30000 });
    assert.equal(await page.locator('#mode-doctor').getAttribute('class'), 'active');
    await timeline();
  }
});

test('a ticked what-if prediction is drawn on the category chart', async () => {
  await page.click('#mode-categories');
  await page.waitForFunction(p => document.querySelector('#breakdown tr[data-category="total"] td')?.textContent.includes(`(${p} bytes)`),
    report.peak.peak_bytes, { timeout: 30000 });
  await canvasWhen(page, 'categories', { above: 1000 });
  const plain = await pixels('categories');
  await page.click('#mode-doctor');
  await page.waitForSelector('#what-if tr.what-if');
  const row = page.locator('#what-if tr.what-if[data-key="batch:x2"]');
  assert.equal(Number(await row.getAttribute('data-peak')), report.what_if.find(w => w.key === 'batch:x2').predicted_peak_bytes);
  await row.locator('input').check();
  await page.click('#mode-categories');
  await canvasWhen(page, 'categories', { not: plain });
  const withLine = await pixels('categories');
  assert.notEqual(withLine, plain, 'the predicted peak is drawn');
  // batch x 2 predicts more than the peak: the axis now ends above it, and the line (dashed,
  // 6 on, 4 off) runs along the top of the axis.
  assert.ok(await darkTopRow() > 0.5, `the dashed line: ${await darkTopRow()}`);
  await shot(page, '14-what-if-line', { fullPage: true });
  await page.click('#mode-doctor');
  await page.locator('#what-if tr.what-if[data-key="batch:x2"] input').uncheck();
  await page.click('#mode-categories');
  await canvasWhen(page, 'categories', { not: withLine });
  assert.ok(await darkTopRow() < 0.05, `no line once unticked: ${await darkTopRow()}`);
});

test('the corpus out-of-memory file: the doctor names the line that allocated the memory', async t => {
  if (!needs(t, OOM_FILE)) return;
  const path = join(CORPUS, OOM_FILE);
  const r = doctorJson(path);
  await page.setInputFiles('#file-input', path);
  await tabShown(page, OOM_FILE);
  await page.click('#mode-doctor');
  await page.waitForSelector('#peak-health tr.holder', { timeout: 30000 });
  const sites = await page.locator('#peak-health tr.holder').evaluateAll(trs => trs.map(tr => [tr.dataset.site, Number(tr.dataset.bytes)]));
  assert.deepEqual(sites, r.peak.holders.map(h => [h.site, h.bytes]));
  assert.match(sites[0][0], /\/FlexGen\/flexgen\/pytorch_backend\.py:190:allocate$/);
  assert.ok(sites[0][1] > 10 * 2 ** 30, 'the cache FlexGen allocated holds the memory');
  assert.equal(await page.locator('#at-end').getAttribute('data-verdict'), 'exhausted');
  await shot(page, '15-doctor-corpus-oom', { fullPage: true });
});

test('nothing left the page, and the console is clean', () => {
  const origin = new URL(view.url).origin;
  assert.deepEqual(view.requests.filter(u => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:')), []);
  assert.deepEqual(view.consoleErrors, []);
});
