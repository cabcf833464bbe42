// A snapshot that gzips to almost nothing however large its pickle: one segment and one
// device trace of the same 1 MiB block allocated and freed again and again, in the layout
// Python's pickler gives PyTorch's `_dump_snapshot` (protocol 4: each dict memoized with
// MEMOIZE, strings memoized once and then fetched with BINGET, lists appended in batches of
// 1,000), so every batch after the first is the same bytes and the reader takes its fast path.
// `writeRepetitive(path, pairs)` gzips it to `path`: what the page must open when a compressed
// file's pickle is over what a tab reads whole.
import { createGzip } from 'node:zlib';
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';

export const ADDR = 0x10000000;
export const SEGMENT = 4 << 20;
export const BLOCK = 1 << 20;
const BATCH = 1000;
const op = { MEMOIZE: 0x94, MARK: 0x28, DICT: 0x7d, LIST: 0x5d, SETITEMS: 0x75, APPENDS: 0x65, APPEND: 0x61,
  BINGET: 0x68, BININT: 0x4a, BININT1: 0x4b, STR: 0x8c, STOP: 0x2e };

/** A pickle writer with Python's memo: each string written once, then fetched. */
class Writer {
  constructor() { this.memo = 0; this.strings = new Map(); this.out = []; }
  bytes(...b) { this.out.push(Buffer.from(b)); }
  memoize() { this.bytes(op.MEMOIZE); return this.memo++; }
  str(s) {
    const at = this.strings.get(s);
    if (at !== undefined) { if (at > 255) throw new Error('memo slot over 255'); this.bytes(op.BINGET, at); return; }
    const b = Buffer.from(s);
    this.bytes(op.STR, b.length); this.out.push(b);
    this.strings.set(s, this.memoize());
  }
  int(n) {
    if (n < 256) { this.bytes(op.BININT1, n); return; }
    const b = Buffer.alloc(5); b[0] = op.BININT; b.writeInt32LE(n, 1); this.out.push(b);
  }
  dict(pairs) {
    this.bytes(op.DICT); this.memoize(); this.bytes(op.MARK);
    for (const [k, v] of pairs) { this.str(k); v(); }
    this.bytes(op.SETITEMS);
  }
  take() { const b = Buffer.concat(this.out); this.out = []; return b; }
}

/** Writes the snapshot of `pairs` allocations and frees (a whole number of batches of 500),
 * gzip-compressed, to `path`; returns its pickle's size and number of trace entries. */
export async function writeRepetitive(path, pairs) {
  const w = new Writer();
  const entry = action => w.dict([['action', () => w.str(action)], ['addr', () => w.int(ADDR)],
    ['size', () => w.int(BLOCK)], ['stream', () => w.int(0)], ['time_us', () => w.int(1000000)]]);
  // {'segments': [segment], 'device_traces': [[entries...]]}
  w.bytes(0x80, 4); w.bytes(op.DICT); w.memoize(); w.bytes(op.MARK);
  w.str('segments'); w.bytes(op.LIST); w.memoize();
  w.dict([['device', () => w.int(0)], ['address', () => w.int(ADDR)], ['total_size', () => w.int(SEGMENT)],
    ['allocated_size', () => w.int(0)], ['active_size', () => w.int(0)], ['requested_size', () => w.int(0)],
    ['stream', () => w.int(0)], ['segment_type', () => w.str('large')], ['blocks', () => {
      w.bytes(op.LIST); w.memoize();
      w.dict([['size', () => w.int(SEGMENT)], ['requested_size', () => w.int(0)], ['state', () => w.str('inactive')]]);
      w.bytes(op.APPEND);
    }]]);
  w.bytes(op.APPEND);
  w.str('device_traces'); w.bytes(op.LIST); w.memoize(); w.bytes(op.LIST); w.memoize();
  // The first batch memoizes the entries' strings; every later one is the same bytes.
  const batch = () => { w.bytes(op.MARK); for (let i = 0; i < BATCH / 2; i++) { entry('alloc'); entry('free'); } w.bytes(op.APPENDS); };
  batch();
  const head = w.take();
  batch();
  const repeated = w.take();
  const tail = Buffer.from([op.APPEND, op.SETITEMS, op.STOP]);
  const more = Math.ceil(pairs / (BATCH / 2)) - 1;
  async function* chunks() { yield head; for (let i = 0; i < more; i++) yield repeated; yield tail; }
  await pipeline(Readable.from(chunks()), createGzip({ level: 1 }), createWriteStream(path));
  return { bytes: head.length + more * repeated.length + tail.length, entries: (more + 1) * BATCH };
}
