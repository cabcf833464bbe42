// torch.profiler files opened as snapshots, driven like a user: a Chrome trace of a CPU
// training run (testdata/profiler, recorded by its record.py) opens with a notice saying what
// it was, draws its timeline, shows each allocation's operators and Python lines as its
// frames, and names its device as the file does ("cpu"); the same run's raw memory timeline
// shows PyTorch's own categories, with the bytes `memscape stats --json` finds, and the trace
// shown with that timeline open puts them beside memscape's at its peak; a Kineto trace from
// before PyTorch 1.10 (no addresses) says what that costs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { openExample, openFileDrawn, statsJson, tabShown, statsOf, canvasWhen, hovered, shot, MEMSCAPE, ROOT } from '../harness.js';

const DIR = join(ROOT, 'testdata', 'profiler');
const TRACE = 'cpu-mlp-adamw.pt.trace.json.gz';
const RAW = 'cpu-mlp-adamw.raw.json.gz';
const KINETO = 'resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz';
let view, page;

before(async () => {
  view = await openExample();
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

/** Opens `path` through the file input, once its tab is in front and its first picture drawn. */
const openFile = (path, name) => openFileDrawn(view, path, name);

/** The notice once it names a profiler file. */
async function notice() {
  await page.waitForFunction(() => /^Opened from /.test(document.querySelector('#notice')?.textContent ?? ''), null, { timeout: 30000 });
  return page.locator('#notice').textContent();
}

/** The statistics' "opened from" row: `{ label, value, text }`. */
function openedFrom() {
  return page.locator('#stats-table tr[data-key="profiler"]').evaluate(tr => ({
    label: tr.querySelector('th').textContent, value: tr.dataset.value, text: tr.querySelector('td').textContent,
  }));
}

/** Moves over the timeline until the details panel shows an allocation; where it was. */
async function hoverSomething() {
  const box = await page.locator('#timeline').boundingBox();
  for (let fy = 0.9; fy > 0.3; fy -= 0.05) {
    for (let fx = 0.12; fx < 0.95; fx += 0.08) {
      await hovered(page, box.x + box.width * fx, box.y + box.height * fy);
      if (await page.locator('#details table.kv').count()) return { x: box.x + box.width * fx, y: box.y + box.height * fy };
    }
  }
  throw new Error('no allocation under the pointer anywhere');
}

/** The categories view at the peak: `{ key: bytes }`, once its chart is drawn. */
async function categoriesAtPeak() {
  await page.click('#mode-categories');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]'), null, { timeout: 30000 });
  await canvasWhen(page, 'categories', { above: 1000 });
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#breakdown tr[data-category]')]
    .map(tr => [tr.dataset.category, Number(tr.querySelector('td').textContent.match(/\((-?\d+) bytes\)/)?.[1] ?? NaN)])));
}

test('a torch.profiler trace opens with a notice, draws its timeline, shows operators and Python lines as frames, and names its device cpu', async () => {
  const want = statsJson(join(DIR, TRACE));
  assert.deepEqual(want.profiler.devices, ['cpu']);
  await openFile(join(DIR, TRACE), TRACE);
  // What it was, said once it opens, and in the statistics.
  const said = await notice();
  assert.match(said, new RegExp(`^Opened from a torch\\.profiler trace: ${want.profiler.memory_events} memory events, allocations paired by address, `
    + 'each with the operators and Python functions around it as its frames'));
  assert.ok(said.endsWith('.'), said);
  const row = await openedFrom();
  assert.equal(row.label, 'opened from');
  assert.equal(row.value, 'torch.profiler trace');
  assert.equal(`Opened from ${row.text}.`, said, 'the statistics say what the notice says');
  // The timeline is drawn.
  await canvasWhen(page, 'timeline', { above: 10000 });
  // Its device, named as the file names it, in the device menu and the statistics.
  const d = want.devices[0];
  assert.equal(await page.locator('#device option:checked').textContent(), `cpu (${d.trace_entries} events)`);
  const stats = await statsOf(page);
  assert.equal(stats.trace_entries, d.trace_entries);
  assert.equal(stats['timeline.peak_bytes'], d.timeline.peak_bytes);
  assert.equal(await page.locator('#stats-table tr[data-key="trace_entries"] th').textContent(), 'cpu events');
  assert.equal(await page.locator('#stats-table tr[data-key="reserved_bytes"] th').textContent(), 'cpu reserved');
  assert.equal(await page.locator('#stats-table').evaluate(t => /cuda:/.test(t.textContent)), false, 'no device called cuda');
  await shot(page, 'profiler-trace');

  // An allocation's frames: the aten operator that made it and the line of record.py.
  const at = await hoverSomething();
  await page.mouse.click(at.x, at.y);
  await page.waitForFunction(() => document.querySelector('#details h2')?.textContent === 'Pinned allocation');
  // PyTorch's frame filter keeps both: they are what the user wrote and what ran.
  const stack = await page.locator('#stack').textContent();
  assert.match(stack, /aten::\w+/, stack);
  assert.match(stack, /^record\.py:\d+:main$/m, stack);
  await shot(page, 'profiler-trace-details', { fullPage: true });
  await page.keyboard.press('Escape');

  // Its categories: those found from its operators, at the peak the command line finds.
  const atPeak = await categoriesAtPeak();
  const cats = want.categories[0];
  assert.equal(atPeak.total, cats.peak_bytes);
  const shown = cats.at_peak.filter(c => c.bytes > 0);
  assert.ok(shown.length >= 2, JSON.stringify(cats.at_peak));
  for (const c of shown) assert.equal(atPeak[c.category], c.bytes, c.category);
  await shot(page, 'profiler-trace-categories');
  await page.click('#mode-timeline');
});

test('a raw memory timeline shows PyTorch\'s categories with their bytes', async () => {
  const want = statsJson(join(DIR, RAW));
  await openFile(join(DIR, RAW), RAW);
  const said = await notice();
  assert.match(said, /^Opened from a torch\.profiler memory timeline \(raw\): PyTorch's categories on every allocation; /);
  assert.equal((await openedFrom()).value, 'torch.profiler memory timeline (raw)');
  await canvasWhen(page, 'timeline', { above: 10000 });
  const atPeak = await categoriesAtPeak();
  const cats = want.categories[0];
  assert.equal(atPeak.total, cats.peak_bytes);
  // PyTorch's own categories, each with bytes at the peak.
  for (const k of ['parameter', 'optimizer_state', 'gradient', 'input', 'activation']) {
    assert.ok(atPeak[k] > 0, `${k} at the peak: ${JSON.stringify(atPeak)}`);
  }
  for (const c of cats.at_peak.filter(c => c.bytes > 0)) assert.equal(atPeak[c.category], c.bytes, c.category);
  const labels = await page.locator('#breakdown tr[data-category] th').allTextContents();
  for (const l of ['parameter', 'optimizer state', 'gradient', 'input', 'activation']) assert.ok(labels.includes(l), `${l} in ${labels}`);
  await shot(page, 'profiler-raw-categories');
  await page.click('#mode-timeline');
});

/** Closes every tab named `name` (a test opens what it uses), once its tab is gone. */
async function closeTabs(name) {
  const tabs = () => page.locator('.tab').filter({ has: page.locator('.tab-name', { hasText: new RegExp(`^${name.replace(/\./g, '\\.')}$`) }) });
  while (await tabs().count()) {
    const n = await page.locator('.tab').count();
    await tabs().first().locator('.tab-close').click();
    await page.waitForFunction(n => document.querySelectorAll('.tab').length < n, n);
  }
}

test('a trace with its raw memory timeline open shows PyTorch\'s categories beside memscape\'s, with the bytes `memscape stats --pytorch-categories` finds', async () => {
  const out = execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, TRACE), '--pytorch-categories', join(DIR, RAW)],
    { maxBuffer: 1 << 26, stdio: ['ignore', 'pipe', 'pipe'] });
  const want = JSON.parse(out.toString()).pytorch_categories[0][1];
  assert.ok(want.at_peak.some(([ours, theirs]) => ours !== theirs), 'the two disagree somewhere on this run');
  for (const name of [TRACE, RAW]) await closeTabs(name);
  await openFile(join(DIR, TRACE), TRACE);
  await openFile(join(DIR, RAW), RAW);
  // The timeline alone shows no such section: it is the trace's.
  await page.click('#mode-categories');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]'), null, { timeout: 30000 });
  assert.equal(await page.locator('#pytorch-categories').count(), 0, 'a timeline is not compared with itself');
  // The trace's tab: the one timeline open is taken without asking.
  assert.match(await notice(), /^Opened from a torch\.profiler memory timeline \(raw\)/, 'the notice is the tab shown\'s');
  await page.locator('.tab-name', { hasText: TRACE }).click();
  await tabShown(page, TRACE);
  await page.waitForFunction(() => /^Opened from a torch\.profiler trace: /.test(document.querySelector('#notice')?.textContent ?? ''),
    null, { timeout: 30000 });
  await page.waitForSelector('#pytorch-table tr.beside', { timeout: 60000 });
  assert.equal(await page.locator('#pytorch-categories h2').textContent(), "PyTorch's categories");
  assert.match(await page.locator('#pytorch-timeline-name').textContent(), new RegExp(RAW.replace(/\./g, '\\.')));
  const rows = await page.locator('#pytorch-table tr.beside').evaluateAll(trs => trs.map(tr => ({
    bytes: Number(tr.dataset.bytes), ours: tr.dataset.ours, theirs: tr.dataset.theirs || null,
    differs: tr.classList.contains('differs'), mark: tr.querySelector('td:last-child').textContent,
    text: tr.querySelector('td').textContent,
  })));
  assert.deepEqual(rows.map(r => [r.ours, r.theirs, r.bytes]), want.at_peak);
  for (const r of rows) {
    assert.equal(r.differs, r.ours !== r.theirs, JSON.stringify(r));
    assert.equal(r.mark, r.differs ? 'differs' : '', JSON.stringify(r));
    assert.match(r.text, new RegExp(`\\(${r.bytes} bytes\\)$`));
  }
  assert.ok(rows.some(r => r.differs), 'a row marked as differing');
  // The agreement line: every allocation of the same run is in its timeline.
  const line = await page.locator('#pytorch-agreement').textContent();
  const [same, all] = want.at_peak.reduce(([s, a], [o, t, b]) => [s + (o === t ? b : 0), a + b], [0, 0]);
  assert.equal(want.matched, want.allocations);
  assert.match(line, new RegExp(`^${want.matched} of ${want.allocations} allocations found in the timeline; they agree on .+ \\(${Math.round(same * 100 / all)}%\\) of the peak's `));
  assert.equal(Number(await page.locator('#pytorch-agreement').getAttribute('data-same')), same);
  assert.equal(Number(await page.locator('#pytorch-agreement').getAttribute('data-all')), all);
  assert.equal(await page.locator('#pytorch-other-run').count(), 0, 'the same run: no doubt said');
  await page.locator('#pytorch-categories').scrollIntoViewIfNeeded();
  await shot(page, 'profiler-pytorch-categories');
  await page.click('#mode-timeline');
});

test('a Kineto trace without addresses says so, and names its devices cuda:0 and cpu', async () => {
  const want = statsJson(join(DIR, 'kineto', KINETO));
  assert.deepEqual(want.profiler.devices, ['cuda:0', 'cpu']);
  await openFile(join(DIR, 'kineto', KINETO), KINETO);
  const said = await notice();
  assert.match(said, new RegExp(`^Opened from a torch\\.profiler trace without addresses \\(PyTorch before 1\\.10\\): ${want.profiler.memory_events} memory events; `
    + 'the totals curve is exact, but which allocation a free ends is a guess'));
  assert.equal((await openedFrom()).text, said.replace(/^Opened from /, '').replace(/\.$/, ''));
  await canvasWhen(page, 'timeline', { above: 10000 });
  // Each device by its name in the file (the GPU's model beside it, from the trace's
  // deviceProperties), with its events.
  const options = await page.locator('#device option').allTextContents();
  assert.deepEqual(options, want.devices.map(d => `${want.profiler.devices[d.device]}${d.gpu ? ` ${d.gpu.name}` : ''} (${d.trace_entries} events)`));
  assert.match(options[0], /^cuda:0 Tesla V100/);
  assert.match(options[1], /^cpu \(/);
  await shot(page, 'profiler-kineto');
  // The second device is the host's memory the trace recorded: its statistics say "cpu".
  await page.selectOption('#device', '1');
  await page.waitForFunction(() => document.querySelector('#stats-table tr[data-key="trace_entries"] th')?.textContent === 'cpu events', null, { timeout: 30000 });
  assert.equal((await statsOf(page)).trace_entries, want.devices[1].trace_entries);
});

test('nothing left the page, and the console is clean', () => {
  const origin = new URL(view.url).origin;
  assert.deepEqual(view.requests.filter(u => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:')), []);
  assert.deepEqual(view.consoleErrors, []);
});
