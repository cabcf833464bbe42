// Hostile input, dropped on the page one after another: each gives a clear message naming
// the file (or opens what it can), the open file and its view survive, the page stays
// usable, and no error escapes to the console.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { serve, browser, statsOf, tabShown, painted, CORPUS } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
const PWNED = '/tmp/memscape-e2e-pwned';
let srv, ctx, page;
const escaped = [];

before(async () => {
  srv = await serve();
  ctx = await browser();
  page = await ctx.newPage();
  page.on('pageerror', e => escaped.push(`pageerror: ${e.message}`));
  page.on('console', m => { if (m.type() === 'error') escaped.push(`console: ${m.text()}`); });
  await page.goto(srv.url);
  await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
    && document.querySelector('#stats .file-line'), EXAMPLE, { timeout: 60000 });
});

after(async () => {
  await ctx?.close();
  await srv?.close();
});

const pickle = (...parts) => Buffer.concat([Buffer.from([0x80, 4]), ...parts.map(p => Buffer.from(p))]);
const repeat = (bytes, n) => Buffer.alloc(bytes.length * n, Buffer.from(bytes));

function python(code, ...args) {
  return execFileSync('python3', ['-c', code, ...args], { maxBuffer: 1 << 26 });
}

/** A snapshot as a newer PyTorch might write it: keys and an action we do not know. */
const FUTURE = String.raw`
import pickle, sys
frame = {'filename': 'train.py', 'line': 7, 'name': 'step', 'quantum_phase': 3}
seg = {'device': 0, 'address': 1 << 20, 'total_size': 2 << 20, 'allocated_size': 1 << 20,
       'active_size': 1 << 20, 'requested_size': 1 << 20, 'stream': 0, 'segment_type': 'large',
       'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': [frame], 'hologram': {'x': [1, 2]},
       'blocks': [{'address': 1 << 20, 'size': 1 << 20, 'requested_size': 1 << 20, 'state': 'active_allocated', 'frames': [frame]},
                  {'address': 3 << 19, 'size': 1 << 19, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}
trace = [{'action': 'segment_alloc', 'addr': 1 << 20, 'size': 2 << 20, 'stream': 0, 'time_us': 1, 'frames': [frame]},
         {'action': 'alloc', 'addr': 1 << 20, 'size': 1 << 20, 'stream': 0, 'time_us': 2, 'frames': [frame], 'compile_context': 'N/A'},
         {'action': 'teleport', 'addr': 1 << 20, 'size': 1 << 20, 'stream': 0, 'time_us': 3, 'frames': [frame], 'where': 'mars'}]
snap = {'segments': [seg], 'device_traces': [trace], 'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': ''},
        'external_annotations': [], 'schema_version': 99, 'telemetry': {'nested': [{'deep': [1, 2, 3]}]}}
pickle.dump(snap, open(sys.argv[1], 'wb'), protocol=4)
`;

/** How Kineto starts a trace: the events follow. */
const TRACE_HEAD = '{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [';

/** The classic: unpickling this runs a shell command. */
const GADGET = String.raw`
import os, pickle, sys
class Gadget:
    def __reduce__(self):
        return (os.system, ('touch ${PWNED}',))
pickle.dump({'segments': [], 'device_traces': [], 'x': Gadget()}, open(sys.argv[1], 'wb'), protocol=4)
`;

function inputs() {
  const tmp = f => join(process.env.TMPDIR || '/tmp', `memscape-hostile-${f}`);
  const real = readFileSync(join(CORPUS, 'pt24-sketchkv-maxentries1.pickle'));
  let seed = 12345;
  const random = Buffer.alloc(64 << 10).map(() => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24);
  python(GADGET, tmp('gadget.pickle'));
  python(FUTURE, tmp('future.pickle'));
  python("import pickle, sys; pickle.dump({'segments': [], 'device_traces': []}, open(sys.argv[1], 'wb'))", tmp('empty-snapshot.pickle'));
  const n = 1_000_000;
  // Ints pushed after one MARK, never appended: 40 MB from a few kB of gzip.
  const stackBomb = gzipSync(pickle('](', repeat([0x4b, 0], 20_000_000), 'e.'), { level: 9 });
  // Properly batched appends into one list: 80 MB decompressed.
  const batch = Buffer.concat([Buffer.from('('), repeat([0x4b, 0], 1000), Buffer.from('e')]);
  const listBomb = gzipSync(pickle(']', repeat(batch, 40_000), '.'), { level: 9 });
  const huge = Buffer.alloc(8);
  huge.writeBigUInt64LE(1n << 60n);
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
  return [
    // [file name, bytes, what the page must say (regex) or 'opens']
    ['empty.pickle', Buffer.alloc(0), /empty/],
    ['truncated.pickle', real.subarray(0, real.length >> 1), /ended|truncat/i],
    ['random.bin', random, /not a memory snapshot|byte/],
    ['picture.png', png, /PNG image/],
    ['notes.json', Buffer.from('{"hello": [1, 2, 3], "segments": "no"}'), /segments|snapshot/],
    ['gadget.pickle', readFileSync(tmp('gadget.pickle')), /(GLOBAL|REDUCE).*at byte \d+/],
    ['future.pickle', readFileSync(tmp('future.pickle')), 'opens'],
    ['empty-snapshot.pickle', readFileSync(tmp('empty-snapshot.pickle')), 'opens'],
    ['deep.pickle', pickle(repeat([0x5d], n), repeat([0x61], n - 1), '.'), /at byte|deep|nest/],
    ['huge-string.pickle', pickle([0x8d], huge, 'abc'), /claims 1152921504606846976 bytes/],
    ['stack-bomb.pickle.gz', stackBomb, /pickle stack.*at byte \d+ of the gzip payload/],
    ['list-bomb.pickle.gz', listBomb, /more than 33554432 items.*at byte \d+ of the gzip payload/],
    // torch.profiler traces: cut short, a wrong type, nesting no trace has, a gzip of a cut one.
    ['cut.pt.trace.json', Buffer.from(TRACE_HEAD + '{"ph": "X", "name": "aten::mm"'), /truncated.*at byte \d+/],
    ['wrong-type.pt.trace.json', Buffer.from(TRACE_HEAD + '{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": "lots"}}]}'),
      /traceEvents\[0\].*invalid type.*at byte \d+/],
    ['deep.pt.trace.json', Buffer.from(TRACE_HEAD + '['.repeat(100_000) + ']'.repeat(100_000) + ']}'), /nests deeper than 128.*at byte \d+/],
    ['cut.pt.trace.json.gz', gzipSync(Buffer.from(TRACE_HEAD + '{"ph": "i", "name": "[memory]", "ts": 1.5, "args": {"Bytes": 512')),
      /truncated.*at byte \d+ of the gzip payload/],
  ];
}

async function drop(name, bytes) {
  await page.evaluate(([name, b64]) => {
    const data = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([data], name));
    document.querySelector('.app').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, [name, bytes.toString('base64')]);
}

const snapshotOf = () => page.evaluate(() => ({
  tab: document.querySelector('.tab.active .tab-name')?.textContent,
  tabs: document.querySelectorAll('.tab').length,
  stats: [...document.querySelectorAll('#stats-table tr')].map(tr => `${tr.dataset.key}=${tr.dataset.value}`).join(' '),
  hash: location.hash,
}));

async function stillUsable(before) {
  const now = await snapshotOf();
  assert.equal(now.tab, before.tab, 'the same file is shown');
  assert.equal(now.stats, before.stats, 'its statistics are unchanged');
  await page.locator('#timeline').hover();
  await page.keyboard.press('w');
  await page.waitForFunction(h => location.hash !== h, before.hash, { timeout: 10000 });
  // Back out, and wait for the hash to say so: it is written a moment after the view moves
  // (url.rs), and the next input's `before` must not catch the zoomed hash (its `w` would
  // then leave the hash as it was).
  const zoomed = await page.evaluate(() => location.hash);
  await page.keyboard.press('s');
  await page.waitForFunction(h => location.hash !== h, zoomed, { timeout: 10000 });
}

test('every hostile input gives a message naming the file or opens, and the page survives', async () => {
  rmSync(PWNED, { force: true });
  for (const [name, bytes, want] of inputs()) {
    const before = await snapshotOf();
    await drop(name, bytes);
    if (want === 'opens') {
      await page.waitForFunction(n => document.querySelector('.tab.active .tab-name')?.textContent === n
        && document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), name, { timeout: 60000 });
      assert.equal((await snapshotOf()).tabs, before.tabs + 1, `${name}: a new tab`);
      assert.equal(await page.locator('#error').count(), 0, `${name}: no error`);
      // Back to the example for the next input.
      await page.locator('.tab-name', { hasText: EXAMPLE }).first().click();
      await tabShown(page, EXAMPLE);
      await painted(page);
      continue;
    }
    await page.waitForSelector('#error', { timeout: 60000 });
    const msg = await page.locator('#error .error-text').textContent();
    assert.ok(msg.startsWith(name + ': '), `${name}: the message names the file: ${msg}`);
    assert.match(msg, want, name);
    if (!['empty.pickle'].includes(name)) assert.match(msg, /byte \d+|segments/, `${name}: says where`);
    if (/bomb|huge/.test(name)) assert.doesNotMatch(msg, /memscape stats/, `${name}: no size advice for a hostile shape`);
    console.log(`  ${msg}`);
    assert.equal((await snapshotOf()).tabs, before.tabs, `${name}: no tab added`);
    await stillUsable(before);
    await page.locator('#error button').click();
  }
  assert.ok(!existsSync(PWNED), 'the gadget did not run');
  assert.deepEqual(escaped, [], 'no error reached the console');
});

test('a snapshot with unknown keys and actions shows what it could read and warns', async () => {
  await page.locator('.tab-name', { hasText: 'future.pickle' }).click();
  await page.waitForFunction(() => document.querySelector('#stats .file-line')?.textContent.startsWith('future.pickle '));
  const stats = await statsOf(page);
  assert.equal(stats.segments, 1);
  assert.equal(stats.total_reserved, 2 << 20);
  assert.equal(stats.total_allocated, 1 << 20);
  assert.equal(stats.trace_entries, 3);
  const warnings = await page.locator('#stats details').textContent();
  assert.match(warnings, /teleport/);
  assert.match(warnings, /hologram|quantum_phase|telemetry/);
  // The empty snapshot says there is nothing to draw.
  await page.locator('.tab-name', { hasText: 'empty-snapshot.pickle' }).click();
  await page.waitForSelector('#no-devices');
  assert.match(await page.locator('#no-devices').textContent(), /nothing was recorded/i);
  assert.deepEqual(escaped, []);
});

test('a file too large for a tab is read as a window, not refused: a bad one fails on its first bytes, naming them', async () => {
  // A sparse file of 3 GiB that starts like a pickle and then holds zeros: over what a tab
  // reads whole, so it is read as a window of its last entries (memory follows the window),
  // and the zero after the header is refused at once rather than after 3 GiB.
  const path = join(process.env.TMPDIR || '/tmp', 'memscape-hostile-3GiB.pickle');
  execFileSync('python3', ['-c', `
import sys
with open(sys.argv[1], 'wb') as f:
    f.write(b'\\x80\\x04}')
    f.truncate(3 << 30)
`, path]);
  const before = await snapshotOf();
  await page.setInputFiles('#file-input', path);
  await page.waitForSelector('#error', { timeout: 30000 });
  const msg = await page.locator('#error .error-text').textContent();
  rmSync(path, { force: true });
  assert.equal(msg, 'memscape-hostile-3GiB.pickle: unknown pickle opcode 0x00 at byte 3');
  assert.equal((await snapshotOf()).tabs, before.tabs);
  await page.locator('#error button').click();
  assert.deepEqual(escaped, []);
});
