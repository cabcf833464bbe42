// The memory mode "Allocated, incl. private pools" draws each private pool's own blocks inside
// its envelope, in shades of the pool's own hue, with what the pool reserves beyond them in a
// pale tint above (docs/pools.md, "On the timeline"). On a recording shaped as PyTorch writes
// one: a training loop in the default pool, a CUDA graph's pool (1, 1) whose blocks are made
// at its capture and again when a second graph is captured into it, and a MemPool (1, 2)
// whose buffers come and go; the pool is named on each trace entry, as PyTorch 2.10 and later
// write it. A user hovers up one column of the plot, from the bottom to the top.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { openExample, redrawn, hovered, painted, tabShown, shot, MEMSCAPE } from '../harness.js';

const DIR = mkdtempSync(join(tmpdir(), 'memscape-pools-'));
const FILE = join(DIR, 'pools.pickle');

// Standard library only, as testkit/modern_snapshots.py writes its snapshots.
const WRITER = String.raw`
import pickle, sys
MB = 1 << 20
def frame(name, line, filename="/home/user/train.py"):
    return {"name": name, "filename": filename, "line": line}
SITES = {"weights": [frame("init_model", 12)], "act": [frame("forward", 40, "/home/user/model.py")],
         "grad": [frame("backward", 58)], "graph": [frame("graph_forward", 77, "/home/user/model.py")],
         "mempool": [frame("stage_buffer", 91, "/home/user/comm.py")]}
POOLS = {"graph": (1, 1), "mempool": (1, 2)}
trace, segments, live, t = [], [], {}, [1_700_000_000_000_000]
def entry(action, addr, size, site, pool=None):
    t[0] += 50
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t[0], "frames": SITES[site]}
    if pool is not None:
        e["pool_id"] = pool
    trace.append(e)
class Segment:
    def __init__(self, base, size, pool, site):
        self.base, self.size, self.pool, self.site, self.next = base, size, pool, site, base
        if pool != (0, 0):
            entry("segment_alloc", base, size, site, pool)
    def alloc(self, size, site):
        addr = self.next
        self.next += size
        assert self.next <= self.base + self.size
        entry("alloc", addr, size, site, None if self.pool == (0, 0) else self.pool)
        live[addr] = (size, site, self)
        return addr
    def free(self, addr):
        size, site, _ = live.pop(addr)
        entry("free_requested", addr, size, site, None if self.pool == (0, 0) else self.pool)
        entry("free_completed", addr, size, site, None if self.pool == (0, 0) else self.pool)
default = Segment(0x7f0000000000, 4096 * MB, (0, 0), "weights")
graph = [Segment(0x7f1000000000, 96 * MB, POOLS["graph"], "graph")]
mempool = Segment(0x7f2000000000, 48 * MB, POOLS["mempool"], "mempool")
weights = [default.alloc(s * MB, "weights") for s in (40, 24, 24, 16)]
buffers = []
for it in range(24):
    if it == 3 or it == 14:
        # A graph captured into the pool: its intermediates freed, its outputs kept.
        if it == 14:
            graph.append(Segment(0x7f1100000000, 64 * MB, POOLS["graph"], "graph"))
        seg = graph[-1]
        made = [seg.alloc(s * MB, "graph") for s in (12, 8, 16, 6, 10, 8)]
        for a in made[1::2]:
            seg.free(a)
    acts = [default.alloc((4 + (it * 7 + k * 3) % 9) * MB, "act") for k in range(6)]
    if it % 4 == 1:
        buffers.append(mempool.alloc((6 + it % 5) * MB, "mempool"))
    if len(buffers) > 3 or (it % 6 == 5 and buffers):
        mempool.free(buffers.pop(0))
    grads = [default.alloc(3 * MB, "grad") for _ in range(3)]
    for a in reversed(acts):
        default.free(a)
    for a in grads:
        default.free(a)
def segment(seg):
    # Its blocks tile it, the free ones between them inactive, as PyTorch lists them.
    blocks, at = [], seg.base
    for a, (s, site, owner) in sorted(live.items()):
        if owner is seg:
            if a > at:
                blocks.append({"address": at, "size": a - at, "requested_size": 0, "state": "inactive", "frames": []})
            blocks.append({"address": a, "size": s, "requested_size": s, "state": "active_allocated",
                           "frames": SITES[site]})
            at = a + s
    if at < seg.base + seg.size:
        blocks.append({"address": at, "size": seg.base + seg.size - at, "requested_size": 0, "state": "inactive",
                       "frames": []})
    used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": 0, "address": seg.base, "total_size": seg.size, "allocated_size": used, "active_size": used,
            "requested_size": used, "stream": 0, "segment_type": "large", "segment_pool_id": seg.pool,
            "is_expandable": False, "frames": SITES[seg.site], "blocks": blocks}
snap = {"segments": [segment(s) for s in [default, *graph, mempool]], "device_traces": [trace],
        "allocator_settings": {"expandable_segments": False}, "external_annotations": []}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snap, f, protocol=4)
`;

let view, page;

before(async () => {
  execFileSync('python3', ['-c', WRITER, FILE]);
  view = await openExample();
  ({ page } = view);
});

after(async () => {
  await view?.close();
});

/** What the details panel shows of the allocation under the pointer. */
function details() {
  return page.evaluate(() => ({
    fields: Object.fromEntries([...document.querySelectorAll('#details tr')].map(tr => [tr.dataset.key, tr.querySelector('td').textContent])),
    stack: document.querySelector('#stack')?.textContent ?? '',
  }));
}

/** The hue (degrees) and lightness (0 to 1) of the timeline's pixel at (x, y) of the page. */
async function colourAt(x, y) {
  return page.evaluate(([x, y]) => {
    const c = document.getElementById('timeline');
    const r = c.getBoundingClientRect();
    const [R, G, B] = c.getContext('2d').getImageData(Math.round((x - r.left) * c.width / r.width),
      Math.round((y - r.top) * c.height / r.height), 1, 1).data;
    const max = Math.max(R, G, B), min = Math.min(R, G, B), d = max - min;
    const hue = d === 0 ? 0 : max === R ? 60 * (((G - B) / d + 6) % 6) : max === G ? 60 * ((B - R) / d + 2) : 60 * ((R - G) / d + 4);
    return { hue, lightness: (max + min) / 510, rgb: [R, G, B] };
  }, [x, y]);
}

// The hue of each pool's family, as core/replay/src/timeline/inside.rs works it out
// (`family`): golden-angle steps from an azure, the pools in order of their ids.
const FAMILY = k => ((0.58 + k * 0.618033988749895) % 1) * 360;

test('the private pools view draws each pool\'s blocks inside its envelope, and a hover names them', async () => {
  await page.setInputFiles('#file-input', FILE);
  await tabShown(page, 'pools.pickle');
  const cli = JSON.parse(execFileSync(MEMSCAPE, ['stats', '--json', FILE]).toString()).devices[0];
  assert.deepEqual(cli.private_pools.map(p => p.pool_id), [[1, 1], [1, 2]]);
  await redrawn(page, () => page.selectOption('#kind', 'pools'));
  await page.waitForFunction(b => Number(document.querySelector('#timeline').dataset.peakBytes) === b,
    cli.timeline_incl_private_pools.peak_bytes);
  // Up one column near the end, where both pools hold blocks: bottom to top, every
  // allocation and envelope the pointer meets, with the run of heights it met it over.
  const box = await page.locator('#timeline').boundingBox();
  const x = box.x + 76 + (box.width - 90) * 0.9;
  const met = [];
  for (let y = box.y + box.height - 26; y > box.y + 4; y -= 2) {
    await hovered(page, x, y);
    const d = await details();
    if (d.fields.origin === undefined) continue;
    const key = `${d.fields.origin}|${d.fields.size}|${d.stack}`;
    if (met.at(-1)?.key === key) met.at(-1).top = y;
    else met.push({ key, d, bottom: y, top: y });
  }
  await page.mouse.move(box.x + 2, box.y + 2);
  await painted(page);
  const names = met.map(m => `${m.d.fields.pool ?? '-'} ${m.d.fields.size} ${m.d.fields.origin.slice(0, 40)}`);
  // The colour in the middle of what the pointer met over two heights or more.
  const middle = m => m.bottom - m.top >= 2 ? colourAt(x, (m.bottom + m.top) / 2) : null;
  for (const [k, [pool, site]] of [['(1, 1)', 'graph_forward'], ['(1, 2)', 'stage_buffer']].entries()) {
    // A block of the pool: its own size, its call site, its pool.
    const blocks = met.filter(m => m.d.fields.pool === pool && m.d.fields.origin.startsWith('allocated at event'));
    assert.ok(blocks.length > 0, `no block of pool ${pool} under the pointer: ${names.join('; ')}`);
    for (const b of blocks) {
      // Its own size (the envelope timeline holds it at 0 bytes): whole MiB, as written.
      const bytes = Number(b.d.fields.size.match(/^\d+\.\dMiB \((\d+) bytes\)$/)?.[1]);
      assert.ok(bytes > 0 && bytes % (1 << 20) === 0, b.d.fields.size);
      assert.ok(b.d.stack.includes(site), b.d.stack);
    }
    // Above its blocks, the rest of its envelope, which names the pool.
    const envelope = met.findIndex(m => m.d.fields.origin.startsWith(`private pool ${pool}, stream 0: its envelope`));
    assert.ok(envelope > met.indexOf(blocks.at(-1)), `pool ${pool}'s envelope above its blocks: ${names.join('; ')}`);
    // Drawn in the pool's own hue: deep shades for its blocks, a pale tint for the rest.
    let checked = 0;
    for (const b of blocks) {
      const c = await middle(b);
      if (c === null) continue;
      assert.ok(Math.abs(c.hue - FAMILY(k)) < 6 && c.lightness < 0.6, `pool ${pool}'s block ${b.bottom}..${b.top}: ${JSON.stringify(c)}`);
      checked++;
    }
    assert.ok(checked > 0, `pool ${pool}: no block tall enough to look at`);
    const c = await middle(met[envelope]);
    assert.ok(c && Math.abs(c.hue - FAMILY(k)) < 6 && c.lightness > 0.75, `pool ${pool}'s envelope: ${JSON.stringify(c)}`);
  }
  // The default pool's allocations are there too, below and between the envelopes.
  assert.ok(met.some(m => m.d.fields.pool === undefined && m.d.stack.includes('init_model')), names.join('; '));
  // As a user sees it: the pointer on a block of the graph's pool.
  const block = met.find(m => m.d.fields.pool === '(1, 1)' && m.d.fields.origin.startsWith('allocated at event'));
  await hovered(page, x, (block.bottom + block.top) / 2);
  // The plot first: a full-page capture resizes the page, and the outline goes with the redraw.
  await shot(page, '67-pool-blocks-inside-plot', { clip: box });
  await shot(page, '67-pool-blocks-inside', { fullPage: true });
});
