// What recent PyTorch writes, on snapshots its own pickler makes (testkit/modern_snapshots.py,
// protocol 5 as Python 3.14 writes): compiled code's frames show their FX node and original
// model code, and the lines of your code name the model file; a backward allocation says
// where its tensor was created in forward; a label put on an allocation after the fact shows
// and is found; an overflowed ring buffer has a banner and each allocation without a stack
// says why; a file whose OOM is on another device than the busiest opens on that device,
// with a banner that names it and links to it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, painted, hovered, tabShown, shot, MEMSCAPE, ROOT } from '../harness.js';

const DIR = mkdtempSync(join(tmpdir(), 'memscape-modern-'));
let view, page;

async function open(name) {
  await page.setInputFiles('#file-input', join(DIR, name));
  await tabShown(page, name);
}

/** Shows `name`: its tab when it is open already, else the file opened, so that a test does
 * not depend on the one before it. */
async function show(name) {
  const tab = page.locator('.tab .tab-name').filter({ hasText: new RegExp(`^${name.replace(/\./g, '\\.')}$`) });
  if (await tab.count() > 0) {
    await tab.first().click();
    await tabShown(page, name);
  } else {
    await open(name);
  }
}

/** Searches the timeline like a user (the first match is pinned) and returns the details. */
async function find(text, mode = 'text') {
  // Unpinned first, so that the details waited for are the new match's.
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.querySelector('#details h2').textContent !== 'Pinned allocation');
  await page.selectOption('#search-mode', mode);
  await page.fill('#search', text);
  await page.press('#search', 'Enter');
  await page.waitForFunction(() => /matches/.test(document.querySelector('#search-count').textContent), null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelector('#details h2').textContent === 'Pinned allocation');
  return page.evaluate(() => ({
    count: document.querySelector('#search-count').textContent,
    fields: Object.fromEntries([...document.querySelectorAll('#details tr')].map(tr => [tr.dataset.key, tr.querySelector('td').textContent])),
    stack: document.querySelector('#stack')?.textContent ?? '',
    forward: document.querySelector('#forward-stack')?.textContent ?? null,
  }));
}

before(async () => {
  execFileSync('python3', [join(ROOT, 'testkit', 'modern_snapshots.py'), DIR, '5']);
  view = await openExample();
  ({ page } = view);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
});

after(async () => {
  await view?.close();
});

test('compiled code: its frame shows the FX node and the original code, search finds them, the lines of your code name the model', async () => {
  await open('compiled.pickle');
  const d = await find('self.net1');
  assert.equal(d.count, '1 of 1 matches');
  assert.equal(d.fields.address, '0x7f0000000000');
  const lines = d.stack.split('\n');
  const at = lines.indexOf('<eval_with_key>.3:5:forward');
  assert.ok(at >= 0, d.stack);
  assert.equal(lines[at + 1], '    FX node=addmm, op=call_function, target=aten.addmm.default');
  assert.equal(lines[at + 2], '    original code:');
  assert.ok(lines.slice(at + 3).some(l => l.trim() === 'a = self.net1(x)'), d.stack);
  // A label put on it by _annotate_memory.
  assert.equal(d.fields.labels, 'activation of net1');
  await page.locator('#copy-stack').click();
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'Stack copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), d.stack, 'Copy stack copies the node and the code too');
  await shot(page, '60-compiled-frame', { fullPage: true });

  // The label is found by search as well.
  const labelled = await find('of net1');
  assert.equal(labelled.fields.address, '0x7f0000000000');

  // The flame graph's lines of your code, as memscape diff names the call sites.
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press('Escape');
  await page.click('#mode-flame');
  await page.waitForSelector('#flame-lines tr.flame-line', { timeout: 30000 });
  const shown = await page.$$eval('#flame-lines tr.flame-line', trs => trs.map(tr => tr.dataset.site));
  assert.ok(shown.includes('/home/user/model.py:12:forward'), shown.join(', '));
  assert.ok(!shown.some(s => s.startsWith('<eval_with_key>')), shown.join(', '));
  const diff = JSON.parse(execFileSync(MEMSCAPE, ['diff', '--json', join(DIR, 'oom-cuda1.pickle'), join(DIR, 'compiled.pickle')]).toString());
  const sites = diff.sites.filter(s => s.b > 0).map(s => s.site);
  assert.ok(sites.includes('/home/user/model.py:12:forward'), sites.join(', '));
  assert.deepEqual([...shown].sort(), [...sites].sort(), 'the flame graph names the lines as the diff does');
  await page.click('#mode-timeline');
});

test('a backward allocation says where its tensor was created in forward, and its C++ stack is named by its node', async () => {
  await show('compiled.pickle');
  const d = await find('SelectBackward0');
  assert.equal(d.fields.address, '0x7f0000800000');
  assert.equal(d.fields['created in forward'], 'at /home/user/model.py:14:forward');
  assert.match(d.forward, /c = b\[:, 0\]/);
  // The event list names it so too, not by the allocator's frame.
  assert.match(await page.textContent('#events .row[data-entry="5"]'), /backward: SelectBackward0, aten::zeros/);
  const stats = JSON.parse(execFileSync(MEMSCAPE, ['doctor', '--json', join(DIR, 'compiled.pickle')]).toString());
  assert.ok(stats.peak.holders.some(h => h.site === 'backward: SelectBackward0, aten::zeros'),
    JSON.stringify(stats.peak.holders));
  await shot(page, '61-forward-frames', { fullPage: true });
});

test('a ring buffer that overflowed has a banner, and each allocation without a stack says why', async () => {
  await show('compiled.pickle');
  await page.waitForSelector('#history-banner');
  assert.match(await page.textContent('#history-banner'), /kept the last 9 events \(its ring buffer overflowed\)/);
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, 'compiled.pickle')]).toString());
  assert.equal(cli.devices[0].history_overflowed, true);
  assert.equal(cli.devices[0].history_max_entries, 9);
  const threadless = await find('0x7f0000a00000', 'address');
  assert.equal(threadless.stack, '(no stack recorded)');
  assert.match(threadless.fields['no stack'], /^no Python frames: allocated on a thread without Python/);
  const evicted = await find('0x7f0001000000', 'address');
  assert.match(evicted.fields['no stack'], /evicted from the ring buffer \(the recording kept only the last 9 events\)/);
  await shot(page, '62-lost-history', { fullPage: true });
  await page.keyboard.press('Escape');
});

test('an OOM file opens on the device that ran out of memory, and the banner links to it', async () => {
  await open('oom-cuda1.pickle');
  // The device chosen comes with the tab: in the page by the next frames.
  await painted(page);
  assert.equal(await page.inputValue('#device'), '1', 'cuda:1, not the busiest cuda:0');
  await page.waitForSelector('#oom-banner');
  assert.match(await page.textContent('#oom-banner'), /cuda:1 ran out of memory once\./);
  assert.equal(await page.locator('#history-banner').count(), 0, 'this file does not say its history overflowed');
  // On another device the banner still names cuda:1; its link goes back there.
  await page.selectOption('#device', '0');
  await page.waitForFunction(() => /cuda:1 ran out of memory once\. Pick a device above/.test(document.querySelector('#oom-banner')?.textContent));
  await page.click('#oom-banner button.oom-device[data-device="1"]');
  await page.waitForFunction(() => document.querySelector('#device').value === '1');
  await page.click('#open-doctor');
  await page.waitForSelector('#verdict', { timeout: 30000 });
  assert.match(await page.textContent('#oom h2'), /Out of memory on cuda:1/);
  // The pools at the error, as memscape doctor names them.
  const doctor = JSON.parse(execFileSync(MEMSCAPE, ['doctor', '--json', join(DIR, 'oom-cuda1.pickle')]).toString());
  const pools = await page.$$eval('#oom-pools tr.oom-pool', trs => trs.map(tr => [tr.dataset.pool, Number(tr.dataset.reserved)]));
  assert.deepEqual(pools, doctor.ooms[0].free_by_pool.map(p => [`${p.pool} pool`, p.reserved_bytes]));
  await shot(page, '63-oom-device', { fullPage: true });
  await page.click('#mode-timeline');
});

test('a trace without time_us: the statistics say so once, and time is not offered as an axis', async () => {
  await open('no-time.pickle');
  await page.waitForSelector('#stats-table tr[data-key="time_axis"]');
  assert.match(await page.textContent('#stats-table tr[data-key="time_axis"] td'), /no time_us, so the axis is the event index/);
  assert.equal(await page.locator('#stats-table tr[data-key="time_axis"]').count(), 1);
  assert.equal(await page.locator('option[value="time"]').evaluate(o => o.disabled), true);
  await open('compiled.pickle');
  assert.equal(await page.locator('#stats-table tr[data-key="time_axis"]').count(), 0);
});

test('a CUDA graph\'s private pools: the statistics list each with its reserved peak, and the peak with pools', async () => {
  await open('graph-pool.pickle');
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, 'graph-pool.pickle')]).toString()).devices[0];
  await page.waitForSelector('#stats-table tr[data-key="timeline_incl_private_pools.peak_bytes"]');
  const rows = await page.$$eval('#stats-table tr', trs => Object.fromEntries(trs.map(tr => [tr.dataset.key, [tr.dataset.value, tr.querySelector('td').textContent]])));
  assert.equal(Number(rows['timeline_incl_private_pools.peak_bytes'][0]), cli.timeline_incl_private_pools.peak_bytes);
  assert.equal(Number(rows['timeline_incl_private_pools.final_bytes'][0]), cli.timeline_incl_private_pools.final_bytes);
  assert.ok(cli.timeline_incl_private_pools.peak_bytes > cli.timeline.peak_bytes, 'graph pools hold more than their live tensors');
  for (const p of cli.private_pools) {
    const [value, text] = rows[`private_pool.${p.pool_id[0]}.${p.pool_id[1]}.${p.stream}`];
    assert.equal(Number(value), p.reserved_peak_bytes);
    assert.match(text, /^reserved peak [\d.]+MiB, [\d.]+(MiB|B) at the end; its allocations at most [\d.]+MiB$/);
  }
  await shot(page, '64-private-pools', { fullPage: true });
});

test('pinned host memory is a device of its own: timeline, statistics, events, allocator state and flame graph; no categories', async () => {
  await open('pinned-host.pickle');
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, 'pinned-host.pickle')]).toString());
  const host = await page.$eval('#device', s => [...s.options].map(o => [o.value, o.textContent]).find(([, t]) => t.startsWith('host')));
  assert.ok(host, 'the device picker offers the host');
  assert.equal(host[1], `host (pinned memory) (${cli.host.trace_entries} events)`);
  assert.equal(await page.inputValue('#device'), '0', 'a GPU first');
  await page.selectOption('#device', host[0]);
  await page.waitForFunction(() => document.querySelector('#stats-table tr[data-key="trace_entries"] th')?.textContent === 'host events');
  const rows = await page.$$eval('#stats-table tr', trs => Object.fromEntries(trs.map(tr => [tr.dataset.key, tr.dataset.value])));
  assert.equal(Number(rows.trace_entries), cli.host.trace_entries);
  assert.equal(Number(rows.reserved_bytes), cli.host.reserved_bytes);
  assert.equal(Number(rows['timeline.peak_bytes']), cli.host.timeline.peak_bytes);
  // The events and the allocator after the last one: every pinned buffer's segment.
  await page.waitForSelector(`#events .row[data-entry="${cli.host.trace_entries - 1}"]`);
  assert.equal(await page.locator('#events .row').count(), cli.host.trace_entries);
  await page.locator(`#events .row[data-entry="${cli.host.trace_entries - 1}"]`).click();
  await page.waitForFunction(n => document.querySelector('#state h2').textContent === `Allocator after event ${n}`, cli.host.trace_entries - 1);
  await page.waitForFunction(() => /^3 segments · reserved 28\.0MiB/.test(document.querySelector('#state-summary').textContent));
  await shot(page, '65-pinned-host', { fullPage: true });
  // The flame graph of the host at its peak.
  await page.click('#mode-flame');
  await page.waitForFunction(b => Number(document.querySelector('#flame-total')?.dataset.bytes) === b, cli.host.timeline.peak_bytes, { timeout: 30000 });
  // Categories and the doctor stay per GPU.
  await page.click('#mode-categories');
  await page.waitForSelector('#per-gpu');
  assert.match(await page.textContent('#per-gpu'), /per GPU/);
  await page.click('#mode-timeline');
  await page.selectOption('#device', '0');
  await page.waitForFunction(() => document.querySelector('#stats-table tr[data-key="trace_entries"] th')?.textContent === 'cuda:0 events');
});

test('the memory mode "Allocated, incl. private pools" draws each pool as its envelope', async () => {
  await open('graph-pool.pickle');
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, 'graph-pool.pickle')]).toString()).devices[0];
  await page.waitForFunction(b => Number(document.querySelector('#timeline').dataset.peakBytes) === b, cli.timeline.peak_bytes);
  await page.selectOption('#kind', 'pools');
  await page.waitForFunction(b => Number(document.querySelector('#timeline').dataset.peakBytes) === b, cli.timeline_incl_private_pools.peak_bytes);
  // The link keeps the mode (the hash is written a frame after the view shows it).
  await page.waitForFunction(() => new URLSearchParams(location.hash.slice(1)).get('kind') === 'pools');
  // Over the last steps, the envelope of pool (1, 2): 20 MiB reserved, drawn whole.
  // (The file opened whole: then the click moves nothing.) The whole window's picture is the
  // last drawn: its start in the URL, and no move's preview after the last frame.
  await page.locator('#whole').click();
  await page.waitForFunction(() => new URLSearchParams(location.hash.slice(1)).get('start') === '0.00'
    && (window.memscapeTimings || []).map(x => x[0]).filter(x => x === 'frame' || x === 'preview').at(-1) === 'frame');
  await painted(page);
  const box = await page.locator('#timeline').boundingBox();
  let origin = null;
  for (let fy = 0.95; fy > 0.1 && !origin?.startsWith('private pool (1, 2)'); fy -= 0.03) {
    await hovered(page, box.x + box.width * 0.97, box.y + box.height * fy);
    origin = await page.evaluate(() => document.querySelector('#details tr[data-key="origin"] td')?.textContent ?? null);
  }
  assert.match(origin ?? '', /^private pool \(1, 2\), stream 0: its envelope grew here/);
  assert.match(await page.textContent('#details tr[data-key="size"] td'), /^20\.0MiB/);
  await shot(page, '66-pool-envelopes', { fullPage: true });
  // The allocator after the last event names each private pool with its segments.
  await page.locator('#events .row[data-entry="12"]').click();
  await page.waitForFunction(() => document.querySelector('#state h2').textContent === 'Allocator after event 12');
  await page.waitForSelector('#state-pools li.state-pool');
  assert.deepEqual(await page.$$eval('#state-pools li.state-pool', lis => lis.map(li => li.textContent)),
    ['private pool (1, 2), stream 0: 1 segments, 20.0MiB reserved, 4.0MiB allocated']);
  await page.locator('#events .row[data-entry="8"]').click();
  await page.waitForFunction(() => document.querySelectorAll('#state-pools li.state-pool').length === 2);
  // A file without private pools does not offer the mode.
  await open('compiled.pickle');
  assert.equal(await page.locator('#kind option[value="pools"]').count(), 0);
  const plain = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', join(DIR, 'compiled.pickle')]).toString()).devices[0];
  await page.waitForFunction(b => Number(document.querySelector('#timeline').dataset.peakBytes) === b, plain.timeline.peak_bytes);
});

test('files named like the worker\'s own messages, and a file with no name, open as files', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'memscape-names-'));
  for (const name of ['run', 'rank', '1']) {
    copyFileSync(join(DIR, 'oom-cuda1.pickle'), join(dir, name));
    await page.setInputFiles('#file-input', join(dir, name));
    await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
      && document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), name, { timeout: 30000 });
    assert.equal(await page.inputValue('#device'), '1', `${name}: read, on its OOM device`);
  }
  // A file with no name at all (a drop from another program can give one).
  const tabs = await page.locator('.tab').count();
  await page.setInputFiles('#file-input', { name: '', mimeType: 'application/octet-stream',
    buffer: readFileSync(join(DIR, 'oom-cuda1.pickle')) });
  await page.waitForFunction(n => document.querySelectorAll('.tab').length === n + 1
    && document.querySelector('.tab.active .tab-name')?.textContent === 'unnamed file'
    && document.querySelector('#stats .file-line')?.textContent.startsWith('unnamed file · '), tabs, { timeout: 30000 });
  assert.equal(await page.inputValue('#device'), '1', 'the nameless file: read, on its OOM device');
});

test('nothing left the page, and the console is clean', () => {
  const origin = new URL(view.url).origin;
  assert.deepEqual(view.requests.filter(u => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:')), []);
  assert.deepEqual(view.consoleErrors, []);
});
