// A compressed file whose pickle is over what a tab reads whole, though the file itself is
// small (here 3.2 GB of pickle, 97 million events, in a 26 MB gzip): the page reads it, finds the pickle too
// large as it decompresses, and opens the window of its last 20 million events instead, in a
// fresh worker, saying why; nothing else the user had open is lost.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, tabShown, statsOf, painted, shot, MEMSCAPE } from '../harness.js';
import { writeRepetitive, BLOCK } from '../repetitive-pickle.mjs';

const NAME = 'repetitive.pickle.gz';
const WINDOW = 20_000_000;
let srv, ctx, page, dir, file, made;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'memscape-gz-'));
  file = join(dir, NAME);
  made = await writeRepetitive(file, 48_500_000);
  srv = await serve();
  ctx = await browser();
  page = await ctx.newPage();
  page.on('pageerror', e => { throw e; });
  await page.goto(srv.url);
  await tabShown(page, 'cs336-fullstep.pickle');
});

after(async () => {
  await ctx?.close();
  await srv?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a small compressed file whose pickle is too large for a tab opens as the window of its last events', async () => {
  // Over the limit only once decompressed (2.875 GiB), so the page starts a whole read.
  assert.ok(made.bytes > 2.875 * 2 ** 30 && statSync(file).size < 64 << 20, JSON.stringify(made));
  await page.setInputFiles('#file-input', file);
  await tabShown(page, NAME, 240000);
  const first = made.entries - WINDOW;
  assert.equal(await page.locator('#notice').textContent(),
    `Showing a window (its pickle, decompressed, is over what a tab reads whole): the last ${WINDOW} entries of ${NAME} `
    + `(device 0: entries ${first}..${made.entries} of ${made.entries}). Memory alive when it starts is drawn from its first step.`);
  assert.equal(await page.locator('#error').count(), 0, 'no error shown');
  // The window's figures are the command line's for the same window.
  const out = join(dir, 'slice.pickle');
  execFileSync(MEMSCAPE, ['slice', file, '-o', out, '--last', String(WINDOW)], { stdio: 'pipe' });
  const want = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', out]).toString());
  const stats = await statsOf(page);
  assert.equal(stats.trace_entries, WINDOW);
  assert.equal(stats['timeline.peak_bytes'], BLOCK);
  for (const [k, v] of [['segments', want.segments], ['total_reserved', want.total_reserved],
    ['timeline.elements', want.devices[0].timeline.elements], ['timeline.peak_bytes', want.devices[0].timeline.peak_bytes]]) {
    assert.equal(stats[k], v, k);
  }
  // The example opened before is still there.
  assert.deepEqual(await page.locator('.tab .tab-name').allTextContents(), ['cs336-fullstep.pickle', NAME]);
  await painted(page);
  await shot(page, 'window-compressed');
});
