// The doctor's allocator what-ifs, driven like a user: a generated run whose out-of-memory
// error is fragmentation opens in the doctor with a section of allocator settings simulated on
// its trace (docs/doctor.md, "Allocator what-ifs"), each setting's figures and sentence those
// of `memscape doctor --json`'s `allocator_what_if`; its chart draws the reserved bytes the
// recording had and those simulated under the setting picked, the first by default, and a
// click on another setting draws that one instead.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, canvasWhen, pixels, painted, shot, MEMSCAPE, SHOTS } from '../harness.js';

const DIR = mkdtempSync(join(tmpdir(), 'memscape-allocator-whatif-'));
const FILE = join(DIR, 'fragmented.pickle');
// The chart's colours (app/src/draw/tuning.rs): the recording's curve and the simulated one.
const RECORDED = [0x3b, 0x6e, 0xa5];
const SIMULATED = [0xe0, 0x66, 0x3a];
let view, page, report;
const section = () => page.locator('#allocator-what-if');

/** How many pixels of the tuning chart are near each of `colours` (antialiased edges aside). */
function colourCounts(colours) {
  return page.evaluate(colours => {
    const c = document.getElementById('tuning-chart');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const counts = colours.map(() => 0);
    for (let i = 0; i < d.length; i += 4) {
      colours.forEach(([r, g, b], k) => {
        if (Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) < 40) counts[k]++;
      });
    }
    return counts;
  }, colours);
}

/** The settings as the section shows them, in `allocator_what_if`'s names. */
function shownTunings() {
  return page.locator('#allocator-what-if tbody.tuning').evaluateAll(rows => rows.map(tb => ({
    conf: tb.dataset.conf,
    peak_reserved_bytes: Number(tb.dataset.peak),
    baseline_peak_reserved_bytes: Number(tb.dataset.baselinePeak),
    recorded_ooms: Number(tb.dataset.recordedOoms),
    recorded_ooms_avoided: Number(tb.dataset.avoided),
    ooms: Number(tb.dataset.ooms),
    sentence: tb.querySelector('.tuning-sentence').textContent,
    active: tb.classList.contains('active'),
    checked: tb.querySelector('input.tuning-pick').checked,
  })));
}

/** The report's sentence as the page writes it: a capital first, a full stop last. */
const asShown = s => s[0].toUpperCase() + s.slice(1) + (s.endsWith('.') ? '' : '.');

before(async () => {
  execFileSync(MEMSCAPE, ['synth', '--entries', '20000', '--fragmentation-oom', '-o', FILE], { stdio: 'pipe' });
  report = JSON.parse(execFileSync(MEMSCAPE, ['doctor', '--json', FILE], { stdio: ['ignore', 'pipe', 'pipe'] }).toString());
  assert.ok(report.ooms.some(o => o.verdict === 'fragmentation'), 'the planted fragmentation OOM');
  assert.ok(report.allocator_what_if.length >= 2, 'settings tried on the trace');
  view = await openExample();
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

test('the doctor lists the allocator settings simulated on the trace, as memscape doctor --json has them', async () => {
  await page.setInputFiles('#file-input', FILE);
  await page.waitForFunction(() => document.querySelector('.tab.active .tab-name')?.textContent === 'fragmented.pickle', null, { timeout: 60000 });
  await page.click('#open-doctor');
  await page.waitForSelector('#allocator-what-if tbody.tuning', { timeout: 30000 });
  assert.equal(await section().locator('h2').textContent(), 'Allocator settings, simulated on this trace');
  // Between the OOM (its verdict and advice) and the what-if budgets.
  const order = await page.evaluate(() => {
    const [oom, tunings, whatIf] = ['#oom', '#allocator-what-if', '#what-if'].map(s => document.querySelector(s));
    return [oom.compareDocumentPosition(tunings), tunings.compareDocumentPosition(whatIf)].map(p => (p & Node.DOCUMENT_POSITION_FOLLOWING) !== 0);
  });
  assert.deepEqual(order, [true, true], 'after the OOM panel, before the what-if table');
  const basis = await page.locator('#tuning-basis').textContent();
  assert.match(basis, /^Not a run of your program: .*simulation of PyTorch's caching allocator/);
  const first = report.allocator_what_if[0];
  assert.equal(await page.locator('#tuning-basis').getAttribute('data-capacity'), String(first.capacity_bytes));

  const shown = await shownTunings();
  assert.deepEqual(shown.map(({ active, checked, sentence, ...figures }) => figures), report.allocator_what_if.map(t => ({
    conf: t.conf, peak_reserved_bytes: t.peak_reserved_bytes, baseline_peak_reserved_bytes: t.baseline_peak_reserved_bytes,
    recorded_ooms: t.recorded_ooms, recorded_ooms_avoided: t.recorded_ooms_avoided, ooms: t.ooms,
  })));
  assert.deepEqual(shown.map(t => t.sentence), report.allocator_what_if.map(t => asShown(t.sentence)), 'each sentence as the report says it');
  for (const t of shown) assert.match(t.sentence, /a simulation of this trace/, `${t.conf} is labelled a simulation`);
  // The planted truth (docs/doctor.md): expandable segments avoid the error.
  const expandable = shown.find(t => t.conf === 'expandable_segments:True');
  assert.ok(expandable, 'expandable_segments:True is tried');
  assert.match(expandable.sentence, /^With expandable_segments:True the peak reserved would be .* and this out-of-memory error would not happen/);
  assert.equal(expandable.recorded_ooms_avoided, expandable.recorded_ooms);
  const row = section().locator('tbody.tuning[data-conf="expandable_segments:True"]');
  assert.match(await row.locator('td.avoided').textContent(), /^1 of 1$/);
  // Green only where every recorded error is avoided and no other request fails instead.
  const marks = await section().locator('td.avoided').evaluateAll(tds => tds.map(td => ['ok', 'some', 'bad'].find(c => td.classList.contains(c))));
  assert.deepEqual(marks, report.allocator_what_if.map(t => (t.recorded_ooms_avoided === t.recorded_ooms && t.ooms === 0 ? 'ok'
    : t.recorded_ooms_avoided === 0 ? 'bad' : 'some')));
  assert.equal(marks[report.allocator_what_if.findIndex(t => t.conf === 'expandable_segments:True')], 'ok');
  // The first setting is the one drawn, until another is picked.
  assert.deepEqual(shown.map(t => [t.active, t.checked]), shown.map((_, k) => [k === 0, k === 0]));
  assert.equal(await page.locator('#tuning-chart').getAttribute('data-conf'), first.conf);
  assert.equal(await page.locator('#tuning-legend-simulated code').textContent(), first.conf);
  const legend = await page.locator('#tuning-legend').textContent();
  assert.match(legend, /recorded \(what the recording reserved\)/);
  assert.match(legend, /device capacity, 80\.0GiB/);
  // The first request the simulation could not hold is marked only where there is one.
  assert.equal(await page.locator('#tuning-legend-failed').count(), first.first_oom_entry === null ? 0 : 1);

  // Two curves: the recording's and the simulation's, each drawn in its own colour.
  await canvasWhen(page, 'tuning-chart', { above: 1000 });
  const [recorded, simulated] = await colourCounts([RECORDED, SIMULATED]);
  assert.ok(recorded > 300, `the recorded curve: ${recorded} pixels`);
  assert.ok(simulated > 300, `the simulated curve: ${simulated} pixels`);
  // Pointing at the chart's last run reads both curves there: the recording reached its peak.
  const box = await page.locator('#tuning-chart').boundingBox();
  const inner = await page.locator('#tuning-chart').evaluate(c => c.clientWidth);
  await page.mouse.move(box.x + 1 + inner - 14 - 2, box.y + box.height / 2);
  await page.waitForFunction(b => document.getElementById('tuning-caption').textContent.includes(`(${b} bytes), simulated`),
    first.recorded_peak_reserved_bytes);
  assert.match(await page.locator('#tuning-caption').textContent(), /^events \d+ to \d+: recorded .*, simulated .* \(highest in the run\)$/);
  await section().scrollIntoViewIfNeeded();
  await painted(page);
  await shot(page, '80-allocator-what-if', { fullPage: true });
  await section().screenshot({ path: join(SHOTS, '80-allocator-what-if-section.png') });
});

test('a click on another setting draws its simulation', async () => {
  const before = await pixels(page, 'tuning-chart');
  // The setting whose peak is furthest from the first's: its curve cannot be drawn the same.
  const first = report.allocator_what_if[0];
  const other = report.allocator_what_if.slice(1)
    .reduce((a, b) => (Math.abs(b.peak_reserved_bytes - first.peak_reserved_bytes) > Math.abs(a.peak_reserved_bytes - first.peak_reserved_bytes) ? b : a));
  await page.click(`#allocator-what-if tbody.tuning[data-conf="${other.conf}"] .tuning-sentence`);
  await canvasWhen(page, 'tuning-chart', { not: before.hash });
  assert.equal(await page.locator('#tuning-chart').getAttribute('data-conf'), other.conf);
  assert.equal(await page.locator('#tuning-legend-simulated code').textContent(), other.conf);
  assert.equal(await page.locator('#tuning-legend-failed').count(), other.first_oom_entry === null ? 0 : 1);
  const shown = await shownTunings();
  assert.deepEqual(shown.filter(t => t.active).map(t => t.conf), [other.conf], 'the row clicked is the one picked');
  assert.deepEqual(shown.filter(t => t.checked).map(t => t.conf), [other.conf]);
  const [recorded, simulated] = await colourCounts([RECORDED, SIMULATED]);
  assert.ok(recorded > 300 && simulated > 300, `both curves: ${recorded}, ${simulated} pixels`);
  await section().screenshot({ path: join(SHOTS, '81-allocator-what-if-other.png') });

  // The pick stays while the user looks elsewhere and comes back.
  await page.click('#mode-timeline');
  await page.click('#mode-doctor');
  await page.waitForSelector('#allocator-what-if tbody.tuning');
  assert.equal(await page.locator('#tuning-chart').getAttribute('data-conf'), other.conf);
  await canvasWhen(page, 'tuning-chart', { above: 1000 });
});

test('nothing left the page, and the console is clean', () => {
  const origin = new URL(view.url).origin;
  assert.deepEqual(view.requests.filter(u => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:')), []);
  assert.deepEqual(view.consoleErrors, []);
});
