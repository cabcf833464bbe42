// The flame graph, driven like a user on the bundled example: at the peak its root is the
// peak of `memscape stats --json`, and its lines of code are the call sites alive at the peak
// of `memscape diff --json` (the example against an empty snapshot, so that every site alive
// at its peak is a change); a click zooms, the pointer shows bytes and share, the search
// flags frames, the lifetime mode draws another picture, a click on the category chart
// moves the step, and a click on a line shows its allocations highlighted on the timeline.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { openExample, paintedPixels, pixelHash, painted, shot as shotOf, needs, MEMSCAPE, ROOT, CORPUS } from '../harness.js';

const EXAMPLE = join(ROOT, 'examples', 'cs336-fullstep.pickle');
const ROW = 18; // draw/flame.rs
let view, page;

function cli(...args) {
  return JSON.parse(execFileSync(MEMSCAPE, args, { stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 26 }).toString());
}

const pixels = () => pixelHash(page, 'flame');
const shot = name => shotOf(page, name, { fullPage: true });

// In the page: what the flame graph shows: its total, step, search hits and focused node.
// With `want`, whether it is as `want` says (`until`): each key's value equal, a `!key`'s
// different, more hits than `hitsAbove`, a total whose words start with `textStarts`; not while
// the graph is being made again, without its total.
const state = ([want]) => {
  const t = document.querySelector('#flame-total'), c = document.querySelector('#flame');
  if (want && !(t && c)) return false;
  const s = { bytes: Number(t.dataset.bytes), step: t.dataset.step, text: t.textContent, hits: Number(c.dataset.hits),
    focus: c.dataset.focus, crumbs: document.querySelectorAll('#flame-crumbs .crumb').length };
  if (!want) return s;
  return Object.entries(want).every(([k, v]) => (k === 'hitsAbove' ? s.hits > v : k === 'textStarts' ? s.text.startsWith(v)
    : k.startsWith('!') ? s[k.slice(1)] !== v : s[k] === v));
};
const shown = () => page.evaluate(state, [null]);

/** Waits until the flame graph is as `want` says (`state`), and that answer is drawn (the
 * canvas with the data it carries). */
async function until(want, what) {
  try {
    await page.waitForFunction(state, [want], { timeout: 60000 });
  } catch (e) {
    assert.fail(`waiting for ${what}: ${e.message.split('\n')[0]}; shown: ${JSON.stringify(await shown())}`);
  }
  await painted(page);
  return shown();
}

before(async () => {
  view = await openExample();
  page = view.page;
  await page.click('#mode-flame');
  await page.waitForFunction(() => document.querySelector('#flame-total')?.dataset.bytes, null, { timeout: 60000 });
  await painted(page);
});

after(async () => {
  assert.deepEqual(view.consoleErrors, []);
  await view.close();
});

test('at the peak the root is the peak bytes of memscape stats', async () => {
  const stats = cli('stats', '--json', EXAMPLE);
  const peak = stats.devices[0].timeline.peak_bytes;
  const s = await shown();
  assert.equal(s.bytes, peak);
  assert.match(s.text, new RegExp(`\\(${peak} bytes\\) alive after step ${s.step} \\(the peak\\)`));
  const peakStep = await page.evaluate(() => document.querySelector('#timeline').dataset.peakStep);
  assert.equal(s.step, peakStep);
  assert.match(s.focus, /^all: 21\.\dGiB$/);
  assert.ok(await paintedPixels(page, 'flame') > 50000, 'the flame graph is drawn');
  await shot('30-flame-peak');
});

test('the lines of your code are the call sites alive at the peak of memscape diff', async t => {
  if (!needs(t, 'pt25plus-empty-0segs.pickle')) return;
  const d = cli('diff', '--json', join(CORPUS, 'pt25plus-empty-0segs.pickle'), EXAMPLE);
  const sites = d.sites.filter(x => x.b > 0).map(x => ({ site: x.site, bytes: x.b, count: x.count_b }));
  const rows = await page.evaluate(() => [...document.querySelectorAll('#flame-lines tr.flame-line')]
    .map(tr => ({ site: tr.dataset.site, bytes: Number(tr.dataset.bytes), count: Number(tr.dataset.count), text: tr.querySelector('.site').textContent })));
  assert.ok(rows.length > 10, `${rows.length} lines`);
  for (const r of rows) assert.equal(r.text, r.site, 'the line is shown as text');
  assert.deepEqual(rows.map(({ site, bytes, count }) => ({ site, bytes, count })), sites.slice(0, rows.length));
  assert.equal(rows.length, Math.min(sites.length, 200));
  assert.match(rows[1].site, /cs336_systems\/adapters\.py:\d+:step$/);
});

test('hovering shows a frame with its bytes and share; a click zooms into it and the breadcrumb goes back', async () => {
  const box = await page.locator('#flame').boundingBox();
  await page.mouse.move(box.x + 12, box.y + ROW * 1.5);
  await page.waitForFunction(() => /% of all/.test(document.querySelector('#flame-hover').textContent));
  const hover = await page.textContent('#flame-hover');
  assert.match(hover, /benchmarking_script\.py:\d+: \d+(\.\d+)?GiB \((\d+\.\d)% of all, \2% of the zoomed frame\), \d+ allocations/);
  // The hovered frame is the page's to draw (flame.rs): drawn by the next frames.
  await painted(page);
  await shot('31-flame-hover');

  await page.mouse.move(0, 0);
  await painted(page);
  const before = await shown();
  const picture = await pixels();
  await page.mouse.click(box.x + 12, box.y + ROW * 2.5);
  const zoomed = await until({ '!focus': before.focus }, 'the zoom');
  assert.equal(zoomed.crumbs, 3, 'all > the script > the frame clicked');
  assert.doesNotMatch(zoomed.focus, /^all/);
  assert.notEqual(await pixels(), picture);
  await shot('32-flame-zoomed');
  await page.click('#flame-crumbs .crumb >> nth=0');
  const back = await until({ focus: before.focus }, 'the way back');
  assert.equal(back.crumbs, 1);
  await page.mouse.move(0, 0);
  await painted(page);
  assert.equal(await pixels(), picture);
});

test('without all frames, rows are the Python frames and the operator that allocated; all frames shows the rest', async () => {
  // The names of every box drawn (data-names: flame.rs), at the peak.
  const names = () => page.evaluate(() => document.querySelector('#flame').dataset.names.split('\n'));
  const plumbing = /_PyEval|PyObject_|_PyRun|Py_BytesMain|Py_RunMain|PyMethod_New|PyType_GetModule|__libc|_start$|c10::impl::|c10::Dispatcher|CachingAllocator|unwind::unwind|CapturedTraceback|::~|wrap_kernel_functor/;
  const at = await shown();
  const plain = await names();
  assert.deepEqual(plain.filter(n => plumbing.test(n)), [], 'no interpreter, dispatcher, allocator or unwinder row');
  assert.ok(plain.some(n => /^aten::\w+$/.test(n)), 'a forward allocation\'s op under its line');
  assert.ok(plain.includes('run_benchmark_with_nvtx'), 'the user\'s frames');
  // Over the whole trace, backward's allocations too: its node and op, one row.
  await page.check('#flame-lifetime');
  await until({ textStarts: 'bytes × lifetime' }, 'the lifetime mode');
  const window = await names();
  assert.deepEqual(window.filter(n => plumbing.test(n)), [], 'no plumbing over the window');
  assert.ok(window.some(n => /^backward: \w+Backward\d, aten::\w+$/.test(n)), 'a backward allocation\'s node and op, one row');
  await page.uncheck('#flame-lifetime');
  await until({ bytes: at.bytes }, 'back to the peak');
  await page.check('#flame-all-frames');
  await page.waitForFunction(() => /_PyEval_EvalFrameDefault/.test(document.querySelector('#flame').dataset.names ?? ''), null, { timeout: 30000 });
  const all = await names();
  assert.ok(all.some(n => /CUDACachingAllocator/.test(n)), 'all frames shows the allocator\'s');
  await painted(page);
  await shot('32b-flame-all-frames');
  await page.uncheck('#flame-all-frames');
  await page.waitForFunction(() => !/_PyEval_EvalFrameDefault/.test(document.querySelector('#flame').dataset.names ?? ''), null, { timeout: 30000 });
});

test('a search highlights the frames it matches', async () => {
  const picture = await pixels();
  await page.fill('#flame-search', 'adapters.py');
  await page.press('#flame-search', 'Enter');
  const s = await until({ hitsAbove: 0 }, 'search hits');
  assert.ok(s.hits > 5, `${s.hits} frames`);
  assert.notEqual(await pixels(), picture);
  await shot('33-flame-search');
  await page.fill('#flame-search', '');
  await page.press('#flame-search', 'Enter');
  await until({ hits: 0 }, 'the search cleared');
});

test('the bytes x lifetime mode weighs the window and draws another picture', async () => {
  const at = await shown();
  const picture = await pixels();
  await page.check('#flame-lifetime');
  const s = await until({ textStarts: 'bytes × lifetime' }, 'the lifetime mode');
  assert.match(s.text, /over steps 0\.\.\d+: .*·steps \(on average .* alive\)/);
  assert.ok(s.bytes > at.bytes * 1000, 'byte-steps over the whole trace');
  assert.notEqual(await pixels(), picture);
  const unit = await page.textContent('#flame-lines tr:first-child th:nth-child(3)');
  assert.equal(unit, 'bytes × steps');
  await shot('34-flame-lifetime');
  await page.uncheck('#flame-lifetime');
  await until({ bytes: at.bytes }, 'back to the peak');
});

test('a click on the category chart chooses the step; Peak goes back', async () => {
  const at = await shown();
  await page.click('#mode-categories');
  await page.waitForSelector('#breakdown');
  const box = await page.locator('#categories').boundingBox();
  await page.mouse.click(box.x + 76 + (box.width - 90) * 0.3, box.y + box.height / 2);
  await page.waitForFunction(() => /at step \d+/.test(document.querySelector('#breakdown tr th:nth-child(3)').textContent));
  const step = (await page.textContent('#breakdown tr th:nth-child(3)')).match(/at step (\d+)/)[1];
  const total = await page.textContent('#breakdown tr[data-category=total] td:nth-child(3)');
  await page.click('#mode-flame');
  const s = await until({ step }, 'the chosen step');
  assert.equal(s.text.split(' alive')[0], total, 'the root is the category chart\'s total at that step');
  assert.ok(s.bytes < at.bytes);
  await shot('35-flame-chosen-step');
  await page.click('#flame-peak');
  await until({ step: at.step, bytes: at.bytes }, 'the peak again');
});

test('a click on a line of code shows its allocations highlighted on the timeline', async () => {
  const line = await page.evaluate(() => {
    const tr = [...document.querySelectorAll('#flame-lines tr.flame-line')].find(tr => /\.py:\d+:/.test(tr.dataset.site));
    return { site: tr.dataset.site, count: Number(tr.dataset.count) };
  });
  const hitColour = () => page.evaluate(() => {
    const c = document.getElementById('timeline');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0xd3) + Math.abs(d[i + 1] - 0x37) + Math.abs(d[i + 2] - 0x2c) < 24) n++;
    return n;
  });
  const before = await hitColour();
  await page.click(`#flame-lines tr.flame-line[data-site="${line.site}"]`);
  await page.waitForFunction(() => document.querySelector('#timeline-view').style.display === '');
  await page.waitForFunction(() => /of \d+ matches/.test(document.querySelector('#search-count').textContent));
  const matches = Number((await page.textContent('#search-count')).match(/of (\d+) matches/)[1]);
  assert.ok(matches >= line.count, `${matches} allocations of ${line.site}, ${line.count} alive at the peak`);
  assert.equal(await page.inputValue('#search'), line.site, 'the search box says what is highlighted');
  await page.waitForFunction(b => {
    const c = document.getElementById('timeline');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0xd3) + Math.abs(d[i + 1] - 0x37) + Math.abs(d[i + 2] - 0x2c) < 24) n++;
    return n > b + 2000;
  }, before, { timeout: 20000 });
  assert.ok(await hitColour() > before + 2000);
  await painted(page);
  await shot('36-flame-line-on-timeline');
});
