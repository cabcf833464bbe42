// A snapshot `memscape predict` made on a CPU (testdata/predict/mlp.pickle, from
// testdata/predict/models/mlp.py) opens with a warning of its own that it was predicted, not
// recorded, naming the GPU and the PyTorch it is for, above the views and hiding none of them;
// a prediction whose program stopped says INCOMPLETE and why; the file's command and reason
// are shown as text, never as HTML; and recordings (the bundled example, a corpus file) show
// no such warning, nor does a predicted file's warning follow the user to another tab.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openExample, openFileDrawn, statsJson, tabShown, canvasWhen, shot, needs, CORPUS, ROOT } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
const MLP = join(ROOT, 'testdata', 'predict', 'mlp.pickle');
const GPU = 'NVIDIA H100 80GB HBM3';
const BANNER = '[data-testid="predicted-banner"]';
let view, page, tmp;

before(async () => {
  view = await openExample();
  ({ page } = view);
  tmp = mkdtempSync(join(tmpdir(), 'memscape-predicted-'));
});

after(async () => {
  await view?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Opens `path` through the file input, once its tab is in front and its first picture drawn. */
const openFile = (path, name) => openFileDrawn(view, path, name);

/** Shows the tab `name` again. */
async function showTab(name) {
  await page.locator('.tab-name', { hasText: name }).first().click();
  await tabShown(page, name);
}

/** The banner's text once it is on screen. */
async function banner() {
  await page.waitForSelector(BANNER, { state: 'visible', timeout: 30000 });
  return page.locator(BANNER).textContent();
}

/** Whether any predicted banner is in the page. */
const noBanner = async () => (await page.locator(BANNER).count()) === 0 && (await page.locator('#predicted, .predicted').count()) === 0;

/** `a` and `b`'s boxes do not overlap. */
function apart(a, b) {
  return a.y + a.height <= b.y || b.y + b.height <= a.y || a.x + a.width <= b.x || b.x + b.width <= a.x;
}

test('a recording shows no predicted banner', async () => {
  assert.ok(await noBanner(), 'the bundled example was recorded');
});

test('a predicted snapshot opens with a warning naming its GPU and torch, above the toolbar and the timeline', async () => {
  const want = statsJson(MLP).prediction;
  assert.equal(want.gpu, GPU);
  await openFile(MLP, 'mlp.pickle');
  const said = await banner();
  assert.ok(said.startsWith('Predicted, not recorded: '), said);
  assert.ok(said.includes(`would record on ${GPU} (torch ${want.torch}), `), said);
  assert.ok(said.includes(`\`${want.command.join(' ')}\``), `the command, as text: ${said}`);
  assert.match(said, /memscape predict on a CPU\.$/);
  assert.ok(!said.includes('INCOMPLETE'), 'the program ran to its end');
  // The assumptions are in its tooltip.
  const title = await page.locator(BANNER).getAttribute('title');
  for (const a of want.assumptions) assert.ok(title.includes(`Assumed: ${a}`), title);
  // One warning, visibly not the plain notice: its own colours.
  assert.equal(await page.locator(BANNER).count(), 1);
  const look = await page.locator(BANNER).evaluate(el => {
    const s = getComputedStyle(el);
    return { bg: s.backgroundColor, position: s.position };
  });
  assert.notEqual(look.bg, 'rgba(0, 0, 0, 0)', 'a background of its own');
  assert.equal(look.position, 'static', 'in the flow of the page, over nothing');
  // It hides neither the toolbar nor the timeline, which is drawn.
  await canvasWhen(page, 'timeline', { above: 1000 });
  const box = await page.locator(BANNER).boundingBox();
  for (const sel of ['.toolbar:has(#device)', '#timeline', '#minimap', 'header']) {
    const other = await page.locator(sel).boundingBox();
    assert.ok(other && apart(box, other), `${sel} is clear of the banner: ${JSON.stringify([box, other])}`);
  }
  assert.ok(box.y + box.height <= (await page.locator('#timeline').boundingBox()).y, 'above the timeline');
  await shot(page, 'predicted');

  // Its tab's: another tab shows none, and coming back shows it again.
  await showTab(EXAMPLE);
  await page.waitForFunction(sel => !document.querySelector(sel), BANNER, { timeout: 30000 });
  assert.ok(await noBanner());
  await showTab('mlp.pickle');
  assert.equal(await banner(), said);
});

test('a prediction that stopped says INCOMPLETE and why, and its data is shown as text', async () => {
  // mlp.pickle as a prediction whose program stopped, its command and reason with markup in.
  const path = join(tmp, 'stopped.pickle');
  execFileSync('python3', ['-c', `
import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
p = d['memscape_prediction']
p['command'] = ['train.py', '--tag', '<img src=x onerror="window.pwned=1">']
p['incomplete'] = 'OutOfMemoryError: <b>CUDA out of memory</b> in aten::mm at model.py:12'
pickle.dump(d, open(sys.argv[2], 'wb'), protocol=4)
`, MLP, path]);
  await openFile(path, 'stopped.pickle');
  const said = await banner();
  assert.ok(said.startsWith('Predicted, not recorded: '), said);
  assert.ok(said.includes('`train.py --tag <img src=x onerror="window.pwned=1">`'), said);
  assert.ok(said.includes(GPU), said);
  assert.ok(said.includes(' INCOMPLETE: the program stopped (OutOfMemoryError: <b>CUDA out of memory</b> in aten::mm at model.py:12), '
    + 'so this is what was predicted up to there.'), said);
  // Visibly: INCOMPLETE in a mark of its own.
  assert.equal(await page.locator(`${BANNER} .predicted-incomplete`).textContent(), 'INCOMPLETE:');
  assert.equal(await page.locator(`${BANNER} img, ${BANNER} b`).count(), 0, 'no markup from the file');
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await shot(page, 'predicted-incomplete');
});

test('a corpus recording shows no predicted banner', async t => {
  const name = 'pt25-cs336-fullstep-annotations.pickle';
  if (!needs(t, name)) return;
  await openFile(join(CORPUS, name), name);
  await canvasWhen(page, 'timeline', { above: 1000 });
  assert.ok(await noBanner(), `${name} was recorded`);
});
