// A snapshot merged from PyTorch's own recording and `memscape capture` of the same step
// (the H100 recordings in capture/tests/data/h100): the viewer's statistics show the memory
// outside PyTorch's allocator as its own row, with the figure `memscape stats --json` gives.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, statsOf, ROOT } from '../harness.js';

const MEMSCAPE = join(ROOT, 'target', 'debug', 'memscape');
const H100 = join(ROOT, 'capture', 'tests', 'data', 'h100');

test('a merged snapshot shows what lies outside PyTorch\'s allocator in its statistics', async () => {
  const file = join(mkdtempSync(join(tmpdir(), 'memscape-merged-')), 'step.merged.pickle');
  execFileSync(MEMSCAPE, ['merge', join(H100, 'torch.pickle.gz'), join(H100, 'ours.pickle'), '-o', file]);
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', file]).toString());
  assert.equal(cli.devices[0].outside_allocator_bytes, 201590784);
  const { page, close } = await openExample();
  try {
    // The bundled example has no such memory: no row.
    assert.equal((await statsOf(page)).outside_allocator_bytes, undefined);
    await page.setInputFiles('#file-input', file);
    await page.waitForFunction(() => document.querySelector('.tab.active .tab-name')?.textContent === 'step.merged.pickle', null, { timeout: 30000 });
    await page.waitForFunction(() => document.querySelector('#stats-table tr[data-key="outside_allocator_bytes"]'));
    const s = await statsOf(page);
    assert.equal(s.outside_allocator_bytes, 201590784);
    assert.equal(s.reserved_bytes, cli.devices[0].reserved_bytes);
    const label = await page.locator('#stats-table tr[data-key="outside_allocator_bytes"]').textContent();
    assert.match(label, /cuda:0 outside PyTorch's allocator/);
  } finally {
    await close();
  }
});
