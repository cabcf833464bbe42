// A recording started after a warm-up step, as PyTorch advises: the parameters and AdamW's
// state were allocated before it and are only frameless blocks of the final snapshot. The
// categories view splits them as `memscape stats --json` does and says from what; a block's
// details say its category was inferred; the doctor names them as inferred holders. A run
// with no evidence (no annotations, ended in its first forward pass) shows the memory as
// "persistent before recording" instead of calling it parameters.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, canvasWhen, tabShown, shot, MEMSCAPE } from '../harness.js';

const DIR = mkdtempSync(join(tmpdir(), 'memscape-persistent-'));
const WARM = join(DIR, 'warm-adamw.pickle');
const BLIND = join(DIR, 'no-evidence.pickle');
let view, page;

const cli = (...args) => JSON.parse(execFileSync(MEMSCAPE, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString());

async function open(path) {
  const name = path.split('/').pop();
  await page.setInputFiles('#file-input', path);
  await tabShown(page, name);
}

/** The breakdown at the peak: `{category: bytes}`. */
function atPeak() {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#breakdown tr[data-category]')].map(tr => {
    const m = tr.querySelector('td')?.textContent.match(/\((-?\d+) bytes\)/);
    return [tr.dataset.category, m ? Number(m[1]) : null];
  })));
}

async function categories() {
  await page.click('#mode-categories');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]') && document.querySelector('#budget-terms'),
    null, { timeout: 30000 });
  // Its chart, for the screenshot.
  await canvasWhen(page, 'categories', { above: 1000 });
}

before(async () => {
  const synth = ['synth', '--entries', '8000', '--layers', '6', '--seed', '3', '--warmup-steps', '1'];
  execFileSync(MEMSCAPE, [...synth, '--oom', '-o', WARM], { stdio: 'pipe' });
  execFileSync(MEMSCAPE, [...synth, '--no-annotations', '--end-in-forward', '-o', BLIND], { stdio: 'pipe' });
  view = await openExample();
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

test('a run recorded after a warm-up step: parameters and optimizer state inferred, as the CLI says, and said so', async () => {
  const want = cli('stats', '--json', WARM).categories[0];
  const byKey = Object.fromEntries(want.at_peak.map(c => [c.category, c.bytes]));
  assert.ok(byKey.optimizer_state > 0 && byKey.parameter > 0 && byKey.persistent === 0, JSON.stringify(byKey));
  await open(WARM);
  await categories();
  const b = await atPeak();
  assert.equal(b.parameter, byKey.parameter);
  assert.equal(b.optimizer_state, byKey.optimizer_state);
  assert.equal(b.persistent, undefined, 'nothing left unsplit, no legend entry for it');
  assert.equal(await page.locator('#legend label[data-category="persistent"]').count(), 0);
  const inferred = page.locator('#inferred');
  assert.equal(Number(await inferred.getAttribute('data-optimizer-state')), want.inference.optimizer_state_bytes);
  assert.match(await inferred.textContent(), /AdamW keeps 2 blocks the size of each parameter \(named by the annotation Optimizer\.(step|zero_grad)#AdamW/);
  await shot(page, '70-inferred-categories', { fullPage: true });

  // The first parameter block (the generator's first address) says how it was decided.
  await page.click('#mode-timeline');
  await page.selectOption('#search-mode', 'address');
  await page.fill('#search', '0x7f0000000000');
  await page.press('#search', 'Enter');
  await page.waitForFunction(() => document.querySelector('#details h2')?.textContent === 'Pinned allocation', null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelector('#details tr[data-key="category"]'), null, { timeout: 30000 });
  assert.match(await page.textContent('#details tr[data-key="category"] td'), /^parameter: inferred: alive before recording with no stack/);

  // The doctor's holders at the OOM name the frameless blocks by what was inferred.
  const doctor = cli('doctor', '--json', WARM);
  const holders = doctor.ooms[0].holders.map(h => h.site);
  assert.ok(holders.includes('(no frames) optimizer state, inferred'), holders.join(', '));
  await page.click('#mode-doctor');
  await page.waitForFunction(() => document.querySelector('#holders tr.holder'), null, { timeout: 30000 });
  const shown = await page.evaluate(() => [...document.querySelectorAll('#holders tr.holder')].map(tr => tr.dataset.site));
  assert.deepEqual(shown, holders);
});

test('without evidence the memory from before the recording is shown as persistent, not as parameters', async () => {
  const want = cli('stats', '--json', BLIND).categories[0];
  const persistent = want.at_peak.find(c => c.category === 'persistent').bytes;
  assert.ok(persistent > 0);
  await open(BLIND);
  await categories();
  const b = await atPeak();
  assert.equal(b.persistent, persistent);
  assert.equal(b.optimizer_state, 0);
  assert.match(await page.textContent('#legend label[data-category="persistent"]'), /persistent before recording/);
  assert.match(await page.textContent('#budget-terms'), / \+ max\(/);
  assert.equal(Number(await page.locator('#budget-terms').getAttribute('data-total')), want.budget.total);
  assert.match(await page.textContent('#budget .formula'), /persistent before recording/);
  assert.match(await page.textContent('#inferred'), /not split: no annotation or frame names the optimizer/);
  await shot(page, '71-persistent-unsplit', { fullPage: true });
});
