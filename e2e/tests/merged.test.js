// A snapshot merged from PyTorch's own recording and `memscape capture` of the same step
// (the H100 recordings in capture/tests/data/h100): the viewer's statistics show the memory
// outside PyTorch's allocator as its own row, and the categories view as its own category,
// with the figures `memscape stats --json` gives.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, statsOf, shot, MEMSCAPE, ROOT } from '../harness.js';

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
    // The capture's description of the device (NVML) survives the merge: its name in the
    // device picker, its memory and what the process held in the statistics.
    assert.match(await page.locator('#device option:checked').textContent(), /^cuda:0 NVIDIA H100 80GB HBM3 \(/);
    assert.equal(await page.locator('#stats-table tr[data-key="gpu.name"]').getAttribute('data-value'), 'NVIDIA H100 80GB HBM3');
    assert.equal(s['gpu.process_used_bytes'], 3760193536);
    assert.match(await page.locator('#stats-table tr[data-key="gpu.process_used_bytes"]').textContent(), /held by the process.*3\.5GiB/);

    // Its own category, in the legend and the breakdown, at the peak and at its highest as
    // the command line says; the bundled example's legend has no such entry.
    const cat = key => cli.categories[0][key].find(c => c.category === 'outside_allocator').bytes;
    assert.ok(cat('at_peak') > 0 && cat('max') >= cat('at_peak'));
    await page.click('#mode-categories');
    await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="outside_allocator"]'), null, { timeout: 30000 });
    const cells = await page.evaluate(() => [...document.querySelectorAll('#breakdown tr[data-category="outside_allocator"] td')]
      .map(td => Number((td.textContent.match(/\((\d+) bytes\)/) || [])[1])));
    assert.equal(cells[0], cat('at_peak'));
    assert.equal(cells[2], cat('max'));
    assert.match(await page.locator('#legend label[data-category="outside_allocator"]').textContent(), /outside PyTorch's allocator/);
    await shot(page, 'merged-categories');
    await page.click('.tab:not(.active) .tab-name');
    await page.waitForFunction(() => document.querySelector('#breakdown tr[data-category="total"]') && !document.querySelector('#legend label[data-category="outside_allocator"]'), null, { timeout: 30000 });
  } finally {
    await close();
  }
});
