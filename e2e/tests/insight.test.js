// The category view and the comparison of files, driven like a user. Snapshots with planted
// truths come from `memscape synth` (which writes what it planted as JSON): the tables must
// show exactly those answers; the bundled example must show what docs/categories.md says.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, statsOf, painted, tabShown, canvasWhen, pixels as pixelsOf, shot as shotOf, MEMSCAPE } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
const TMP = join(tmpdir(), 'memscape-insight');
let view, page;

function synth(name, extra) {
  const file = join(TMP, `${name}.pickle`);
  const truth = join(TMP, `${name}.json`);
  execFileSync(MEMSCAPE, ['synth', '--entries', '12000', '--layers', '6', '--seed', '7', ...extra, '-o', file, '--truth', truth],
    { stdio: 'pipe' });
  return { file, name: `${name}.pickle`, truth: JSON.parse(readFileSync(truth, 'utf8')) };
}

const shot = name => shotOf(page, name, { fullPage: true });
const pixels = id => pixelsOf(page, id);

async function openFile(path, name) {
  await page.click('#mode-timeline');
  await page.setInputFiles('#file-input', path);
  await tabShown(page, name);
}

/** The words of the text in `selector`'s elements that the layout split over two lines. */
function splitWords(selector) {
  return page.evaluate(sel => {
    const split = [];
    for (const el of document.querySelectorAll(sel)) {
      const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let node = walk.nextNode(); node; node = walk.nextNode()) {
        for (const m of node.textContent.matchAll(/\S+/g)) {
          const r = document.createRange();
          r.setStart(node, m.index);
          r.setEnd(node, m.index + m[0].length);
          if (new Set([...r.getClientRects()].map(q => Math.round(q.top))).size > 1) split.push(m[0]);
        }
      }
    }
    return split;
  }, selector);
}

/** The breakdown table: `{category: [at peak, at the selected step, highest]}` in bytes. */
function breakdown() {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#breakdown tr[data-category]')].map(tr =>
    [tr.dataset.category, [...tr.querySelectorAll('td')].map(td => {
      const m = td.textContent.match(/\((-?\d+) bytes\)/);
      return m ? Number(m[1]) : null;
    })])));
}

/** Opens the category view of the active tab and waits for its answer about `name`. */
async function categories(name) {
  await page.click('#mode-categories');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]'), null, { timeout: 30000 });
  // The chart is drawn from the same answer as the table.
  await canvasWhen(page, 'categories', { above: 1000 });
  assert.equal(await page.locator('.tab.active .tab-name').textContent(), name);
}

before(async () => {
  mkdirSync(TMP, { recursive: true });
  view = await openExample(EXAMPLE);
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

test('the category view of the example: stacked areas, legend toggles, breakdowns, budget, hover', async () => {
  const peak = (await statsOf(page))['timeline.peak_bytes'];
  await categories(EXAMPLE);
  const b = await breakdown();
  // docs/categories.md: parameters 3.61 GiB, AdamW state twice the gradients, the previous
  // step's gradients alive in the forward pass, and the rows add up to the peak.
  assert.equal(b.parameter[0], 3877655552);
  assert.equal(b.optimizer_state[0], 7755294720);
  assert.equal(b.activation[0], 7308808196);
  assert.equal(b.total[0], peak);
  const sum = Object.entries(b).filter(([k]) => k !== 'total').reduce((a, [, v]) => a + v[0], 0);
  assert.equal(sum, peak, 'categories add up to the peak');
  assert.match(await page.locator('#iterations h2').textContent(), /Iterations: 1 \(1 complete, one per optimizer step\)/);
  const total = Number(await page.locator('#budget-terms').getAttribute('data-total'));
  assert.equal(total + b.gradient[0], peak, 'the budget leaves out the previous step\'s gradients');
  assert.match(await page.locator('#leaks h2').textContent(), /Leak suspects: 0/);

  const full = await pixels('categories');
  assert.ok(full.painted > 50000, `painted ${full.painted}`);
  await page.uncheck('#legend-optimizer_state');
  await canvasWhen(page, 'categories', { not: full.hash });
  const without = await pixels('categories');
  assert.notEqual(without.hash, full.hash, 'hiding a category changes the chart');
  assert.ok(without.painted < full.painted);
  await page.check('#legend-optimizer_state');
  await canvasWhen(page, 'categories', { is: full.hash });
  assert.equal((await pixels('categories')).hash, full.hash);

  // A click selects a step: its breakdown adds up to the total there.
  const box = await page.locator('#categories').boundingBox();
  await page.mouse.click(box.x + box.width * 0.8, box.y + box.height / 2);
  await page.waitForFunction(() => /at step \d+/.test(document.querySelector('#breakdown tr th:nth-child(3)')?.textContent));
  const at = await breakdown();
  const selSum = Object.entries(at).filter(([k]) => k !== 'total').reduce((a, [, v]) => a + (v[1] ?? 0), 0);
  assert.equal(selSum, at.total[1]);
  assert.notEqual(at.total[1], peak);
  await shot('10-categories');
  // A figure that does not fit its cell wraps between its words ("3.6GiB" / "(3877655552
  // bytes)"), never inside one ("byte" / "s").
  assert.deepEqual(await splitWords('#breakdown td'), []);

  // Hover in the timeline says what an allocation is for and which rule said so.
  await page.click('#mode-timeline');
  await page.waitForFunction(() => document.getElementById('timeline')?.clientWidth > 0);
  await painted(page);
  const tl = await page.locator('#timeline').boundingBox();
  const peakStep = Number(await page.locator('#timeline').getAttribute('data-peak-step'));
  const view = await page.evaluate(() => null);
  assert.equal(view, null);
  // The memory axis from zero: the parameters lie at the bottom (from the baseline, the
  // bottom of the plot is what lies above them).
  await page.locator('#baseline').uncheck();
  // The axis shown is the new picture's (app/src/timeline/toolbar.rs): drawn with it.
  await page.waitForFunction(() => document.getElementById('y-range').textContent === '');
  await painted(page);
  await page.mouse.move(tl.x + 76 + (tl.width - 90) * 0.3, tl.y + tl.height - 30);
  await page.waitForFunction(() => document.querySelector('#details tr[data-key="category"]'), null, { timeout: 10000 });
  // Alive before the recording with no stack: a parameter by the inference from AdamW's name,
  // the gradients and the sizes (docs/categories.md).
  assert.match(await page.locator('#details tr[data-key="category"] td').textContent(),
    /^parameter: inferred: alive before recording with no stack; one block per gradient of its size is the parameter/);
  assert.ok(peakStep > 0);
});

test('planted truths: category bytes at the peak, the leak, user rules', async () => {
  const a = synth('planted-a', ['--leak', '3M']);
  await openFile(a.file, a.name);
  await categories(a.name);
  const b = await breakdown();
  for (const [k, v] of Object.entries(a.truth.at_peak)) {
    // Memory outside PyTorch's allocator has a row only in merged files that hold some, memory
    // from before the recording left unsplit only in files that have some.
    if ((k === 'outside_allocator' || k === 'persistent') && v === 0) { assert.equal(b[k], undefined); continue; }
    assert.equal(b[k][0], v, `${k} at the peak`);
  }
  assert.equal(b.total[0], a.truth.peak_bytes);
  assert.match(await page.locator('#iterations h2').textContent(), new RegExp(`\\(${a.truth.iterations} complete`));
  const leak = page.locator('#leaks details.leak');
  assert.equal(await leak.count(), 1);
  assert.equal(await leak.getAttribute('data-site'), a.truth.leak.site);
  assert.equal(Number(await leak.getAttribute('data-growth')), a.truth.leak.bytes_per_iteration);

  // A rule: the leaked tensors become inputs, and the rule says so.
  await page.fill('#rule-pattern', 'train\\.py:318');
  await page.selectOption('#rule-category', 'input');
  await page.click('#rule-add');
  await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="input"] td')?.textContent.startsWith('0') === false);
  const r = await breakdown();
  // The tensors kept by the earlier iterations are alive at the peak: whole multiples of
  // the planted size move from activations to inputs.
  const leaked = r.input[0];
  assert.ok(leaked > 0 && leaked % a.truth.leak.bytes_per_iteration === 0, `${leaked}`);
  assert.equal(r.activation[0], b.activation[0] - leaked);
  assert.match(await page.locator('#rule-use').textContent(), /your rule 1: \/train\\\.py:318\/ on frames/);
  assert.deepEqual(JSON.parse(await page.evaluate(() => localStorage.getItem('memscape.rules'))),
    { rules: [{ pattern: 'train\\.py:318', category: 'input', on: 'frame' }] });
  // Exported, removed, imported back.
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#rules-export')]);
  const exported = readFileSync(await dl.path(), 'utf8');
  assert.deepEqual(JSON.parse(exported).rules[0], { pattern: 'train\\.py:318', category: 'input', on: 'frame' });
  await page.click('.rule-remove');
  await page.waitForFunction(() => document.querySelectorAll('#rule-list tr.rule').length === 0);
  await page.waitForFunction(v => document.querySelector('#breakdown tr[data-category="activation"] td')?.textContent.includes(`(${v} bytes)`),
    b.activation[0]);
  const file = join(TMP, 'rules.json');
  writeFileSync(file, exported);
  await page.setInputFiles('#rules-import', file);
  await page.waitForFunction(() => document.querySelectorAll('#rule-list tr.rule').length === 1);
  await page.waitForFunction(v => document.querySelector('#breakdown tr[data-category="input"] td')?.textContent.includes(`(${v} bytes)`), leaked);
  // A new page of the same browser finds the saved rule (read once the page is idle) and
  // applies it to a file opened there.
  const again = await page.context().newPage();
  await again.goto(new URL('?empty', page.url()).href);
  await again.setInputFiles('#file-input', a.file);
  await again.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n, a.name, { timeout: 60000 });
  await again.click('#mode-categories');
  await again.waitForFunction(() => document.querySelectorAll('#rule-list tr.rule').length === 1, null, { timeout: 30000 });
  assert.match(await again.locator('#rule-list tr.rule').textContent(), /train\\\.py:318/);
  await again.waitForFunction(v => document.querySelector('#breakdown tr[data-category="input"] td')?.textContent.includes(`(${v} bytes)`), leaked, { timeout: 30000 });
  await again.close();
  // A rule that is not a regular expression is refused with a message; nothing changes.
  await page.fill('#rule-pattern', '(unclosed');
  await page.click('#rule-add');
  await page.waitForSelector('#error');
  assert.match(await page.locator('#error .error-text').textContent(), /category rules: rule 2 \("\(unclosed"\)/);
  await page.click('#error button');
  assert.equal(await page.locator('#rule-list tr.rule').count(), 1);
  await page.click('.rule-remove');
  await page.waitForFunction(() => document.querySelectorAll('#rule-list tr.rule').length === 0);
  await shot('11-planted-categories');
});

test('comparing files: overview per file, the diff of two, alignment and call-site keys', async () => {
  const a = synth('planted-a', ['--leak', '3M']);
  const bb = synth('planted-b', ['--leak', '3M', '--extra-activation', '24M']);
  await openFile(bb.file, bb.name);
  await page.click('#mode-compare');
  const rows = page.locator('#files tr.file');
  await page.waitForFunction(() => document.querySelectorAll('#files tr.file').length === 3);
  const names = await rows.evaluateAll(r => r.map(x => x.dataset.name));
  assert.deepEqual(names, [EXAMPLE, a.name, bb.name]);
  for (const [name, truth] of [[a.name, a.truth], [bb.name, bb.truth]]) {
    const row = page.locator(`#files tr.file[data-name="${name}"]`);
    assert.equal(Number(await row.getAttribute('data-peak')), truth.peak_bytes, `${name} peak`);
  }
  assert.equal(await page.locator('#diff-hint').count(), 1);
  await page.locator(`#files tr.file[data-name="${a.name}"] .pick-a`).check();
  await page.locator(`#files tr.file[data-name="${bb.name}"] .pick-b`).check();
  await page.waitForSelector('#diff-sites tr.site', { timeout: 30000 });
  const extra = bb.truth.extra_activation;
  const top = page.locator('#diff-sites tr.site').first();
  assert.equal(await top.getAttribute('data-site'), extra.site);
  assert.equal(Number(await top.getAttribute('data-delta')), extra.bytes);
  assert.equal(await page.locator('#diff-sites tr.site').count(), 1, 'nothing else changed at the peak');
  assert.equal(Number(await page.locator('#diff-summary tr[data-key="peak"]').getAttribute('data-delta')), extra.bytes);
  const alloc = page.locator('#diff-allocs tr.alloc').first();
  assert.deepEqual(await alloc.evaluate(r => [r.dataset.site, Number(r.dataset.size), Number(r.dataset.a), Number(r.dataset.b)]),
    [extra.site, extra.bytes, 0, bb.truth.iterations]);
  assert.match(await page.locator('#diff-segments h2').textContent(), /only in A: 0, only in B: 1/);
  const byIteration = await pixels('diff-chart');
  assert.ok(byIteration.painted > 5000, `diff chart painted ${byIteration.painted}`);
  assert.equal(await page.locator('#diff-axis').getAttribute('data-align'), 'iteration');
  await shot('12-compare');

  for (const align of ['time', 'event', 'annotation']) {
    await page.selectOption('#align', align);
    await page.waitForFunction(al => document.querySelector('#diff-axis')?.dataset.align === al, align);
    await canvasWhen(page, 'diff-chart', { not: byIteration.hash });
    const px = await pixels('diff-chart');
    assert.notEqual(px.hash, byIteration.hash, `aligned by ${align}, the chart changes`);
    assert.equal(await top.getAttribute('data-site'), extra.site);
  }
  await page.selectOption('#sites-by', 'stack');
  await page.waitForFunction(s => document.querySelector('#diff-sites tr.site')?.dataset.site.includes('\n')
    && document.querySelector('#diff-sites tr.site').dataset.site.includes(s), extra.site);
  assert.equal(Number(await page.locator('#diff-sites tr.site').first().getAttribute('data-delta')), extra.bytes);

  // Open one from the overview.
  await page.locator(`#files tr.file[data-name="${a.name}"] .open-file`).click();
  await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
    && getComputedStyle(document.getElementById('timeline-view')).display !== 'none', a.name);

  // Nothing left the page; nothing complained.
  const foreign = view.requests.filter(u => !u.startsWith(view.url) && !u.startsWith('blob:') && !u.startsWith('data:'));
  assert.deepEqual(foreign, []);
  assert.deepEqual(view.consoleErrors, []);
});
