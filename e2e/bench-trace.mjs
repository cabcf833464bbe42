// A large torch.profiler trace opened in the viewer beside a pickle snapshot of the same size
// (issue 57: within 3x its time, memory within its budget). `bench trace --keep DIR` writes
// both (a Kineto-shaped GPU trace of a generated run, and a generated snapshot grown to the
// trace's size); each is chosen in the file input of a fresh page open a second, and timed
// from the input's change event to the first drawn timeline (`first-draw-at`), with the
// worker's parse time and wasm memory after the load.
//   node e2e/bench-trace.mjs [--mb 500] [--rounds 3]      (after `trunk build --release --offline`)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, ROOT } from './harness.js';
import { firstFile, median, fmt, arg } from './probe-page.mjs';

const mb = Number(arg('--mb', '500'));
const rounds = Number(arg('--rounds', '3'));
const dir = join(tmpdir(), `memscape-bench-trace-${mb}`);
const find = suffix => (existsSync(dir) ? readdirSync(dir).find(f => f.endsWith(suffix)) : undefined);
if (!find('.pt.trace.json') || !find('.same-size.pickle')) {
  mkdirSync(dir, { recursive: true });
  execFileSync('cargo', ['run', '--release', '-p', 'bench', '--', 'trace', '--mb', String(mb), '--keep', dir], { cwd: ROOT, stdio: 'inherit' });
}
const files = [['profiler trace', find('.pt.trace.json')], ['snapshot of the same size', find('.same-size.pickle')]]
  .map(([what, f]) => ({ what, path: join(dir, f), ms: [], parse: [], heap: [] }));

const srv = await serve();
for (let r = 0; r < rounds; r++) {
  for (const f of r % 2 ? [...files].reverse() : files) {
    const ctx = await browser();
    const page = await ctx.newPage();
    const { ms, marks } = await firstFile(page, srv.url, f.path);
    f.ms.push(ms);
    f.parse.push(marks['parse-worker']);
    f.heap.push(marks['wasm-memory-worker'] / 1e6);
    await ctx.close();
  }
}
await srv.close();

console.log(`\n== a ${mb} MB profiler trace beside a snapshot of the same size (${rounds} rounds, a fresh profile per page; medians)`);
console.log('file                           MB   to first timeline (ms)   worker parse (ms)   wasm memory (MB)');
for (const f of files) {
  const size = statSync(f.path).size / 1e6;
  console.log(`${f.what.padEnd(28)} ${fmt(size).padStart(5)}   ${fmt(median(f.ms)).padStart(20)}   ${fmt(median(f.parse)).padStart(17)}   ${fmt(median(f.heap)).padStart(16)}`);
}
const ratio = median(files[0].ms) / median(files[1].ms);
console.log(`trace / snapshot of the same size: ${ratio.toFixed(2)}x (target: within 3x)`);
