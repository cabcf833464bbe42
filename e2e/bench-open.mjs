// How fast the viewer opens the files people actually have (issue 15): real corpus snapshots
// of 0.2 to 4 MB and a generated one of 6.6 MB, chosen in the file input of a page that has
// been open a second (each file first in a page of its own, every round), then another in the
// same page a second later; and the cold page (a fresh browser profile opening the page, the
// bundled example included), in a browser that has finished starting, as a user's has, and
// (for comparison) in one launched a moment before.
//   node e2e/bench-open.mjs [--rounds 5]      (after `trunk build --release --offline`)
// Each page is a fresh browser profile. The time of a file is measured in the page, from the
// file input's change event to the moment its first timeline is drawn (the page's own
// `first-draw-at` mark). Medians over rounds, each target printed beside its figure.
import { execFileSync } from 'node:child_process';
import { statSync, existsSync } from 'node:fs';
import { join, basename } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, whenCoresIdle, ROOT, CORPUS } from './harness.js';
import { waitForMark as until, median } from './probe-page.mjs';

const args = process.argv.slice(2);
const arg = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const rounds = Number(arg('--rounds', '5'));
const memscape = join(ROOT, 'target', 'release', 'memscape');
if (!existsSync(memscape)) execFileSync('cargo', ['build', '--release', '-p', 'cli'], { cwd: ROOT, stdio: 'inherit' });

// PyTorch's viewer on the same files (issue 15's table, measured side by side on the
// project's machine kind; it cannot be run here): median ms from choosing the file to its
// first drawn timeline.
const files = [
  ['pt20-flexgen-opt1.3b-history.pickle', 121],
  ['pt21-llama-cppframes-multistream.pickle', 323],
  ['pt25-cs336-fullstep-annotations.pickle', 1021],
  ['pt210-cs336-training-usermeta.pickle', 871],
].map(([f, torch]) => ({ path: join(CORPUS, f), torch }));
const loop = join(tmpdir(), 'memscape-bench-6.6M.pickle');
if (!existsSync(loop)) execFileSync(memscape, ['synth', '--size', '6.6M', '-o', loop], { stdio: 'inherit' });
files.push({ path: loop, torch: 669 });

const fmt = x => (Number.isFinite(x) ? x.toFixed(0) : '-');
const marks = (page, what) => page.evaluate(w => (window.memscapeTimings || []).filter(x => x[0] === w).map(x => x[1]), what);

const srv = await serve();
const cold = [];
const coldParts = { load: [], wasm: [] };
const launched = [];
const first = new Map(files.map(f => [f.path, []]));
const later = new Map(files.map(f => [f.path, []]));
const parts = new Map(files.map(f => [f.path, { load: [], parse: [], read: [] }]));
for (let r = 0; r < rounds; r++) {
  // The cold page: a fresh profile (nothing cached), the page and its bundled example, in a
  // browser that has finished starting; and the same at once after the launch (which comes
  // first alternates).
  for (const wait of r % 2 ? [false, true] : [true, false]) {
    const ctx = await browser();
    const page = await ctx.newPage();
    if (wait) await whenCoresIdle(page);
    await page.goto(srv.url);
    await until(page, 'first-draw-at');
    if (await page.locator('#error').count()) throw new Error(`the cold page: ${await page.locator('#error').textContent()}`);
    const at = (await marks(page, 'first-draw-at'))[0];
    if (wait) {
      cold.push(at);
      coldParts.load.push((await marks(page, 'load'))[0]);
    } else launched.push(at);
    await ctx.close();
  }
  // Files: each file as the first of a page open a second (a fresh browser profile each),
  // then another as a later file of the same page (a different one each round).
  for (const [k, f] of files.entries()) {
    const ctx = await browser();
    const page = await ctx.newPage();
    await page.goto(srv.url + '?empty');
    await page.evaluate(() => window.addEventListener('change', e => {
      if (e.target.id === 'file-input') window.chosenAt = performance.now();
    }, true));
    await page.waitForTimeout(1000);
    const next = files[(k + 1 + (r % (files.length - 1))) % files.length];
    for (const [i, g] of [f, next].entries()) {
      await page.evaluate(() => { window.memscapeTimings = []; });
      await page.setInputFiles('#file-input', g.path);
      await until(page, 'first-draw-at');
      const err = await page.locator('#error').count() ? await page.locator('#error').textContent() : null;
      if (err) throw new Error(`${basename(g.path)}: ${err}`);
      const ms = (await marks(page, 'first-draw-at'))[0] - await page.evaluate(() => window.chosenAt);
      (i === 0 ? first : later).get(g.path).push(ms);
      parts.get(g.path).load.push((await marks(page, 'load'))[0]);
      parts.get(g.path).parse.push((await marks(page, 'parse-worker'))[0]);
      parts.get(g.path).read.push((await marks(page, 'read-worker'))[0]);
      await page.waitForTimeout(1000);
    }
    await ctx.close();
  }
}
await srv.close();

console.log(`\n== opening files (${rounds} rounds, a fresh browser profile per page; medians, ms)`);
console.log('file                                        MB   first file  later files  target  load reply  parse (reads)  PyTorch\'s viewer');
for (const f of files) {
  const mb = statSync(f.path).size / 1e6;
  const target = mb <= 5 ? '<= 60' : '  -  ';
  const p = parts.get(f.path);
  console.log(`${basename(f.path).padEnd(42)} ${mb.toFixed(1).padStart(4)}  ${fmt(median(first.get(f.path))).padStart(10)}  ${fmt(median(later.get(f.path))).padStart(11)}  ${target}  ${fmt(median(p.load)).padStart(10)}  ${fmt(median(p.parse)).padStart(5)} (${fmt(median(p.read)).padStart(5)})  ${String(f.torch).padStart(6)}`);
}
const small = files.filter(f => statSync(f.path).size <= 5e6);
const all = small.flatMap(f => [...first.get(f.path), ...later.get(f.path)]);
const firsts = small.flatMap(f => first.get(f.path));
console.log(`files <= 5 MB: median ${fmt(median(all))} ms over ${all.length} opens (first file of a page: ${fmt(median(firsts))} ms); target <= 60`);
const worst = small.map(f => [median(first.get(f.path)), basename(f.path)]).sort((x, y) => y[0] - x[0])[0];
console.log(`  each file as a page's first file: the slowest median ${fmt(worst[0])} ms (${worst[1]}, ${rounds} open${rounds === 1 ? '' : 's'}); target <= 60`);
console.log(`cold page (fresh profile, page + bundled example to its first timeline): median ${fmt(median(cold))} ms [${cold.map(fmt).join(', ')}]; its file's load ${fmt(median(coldParts.load))} ms; target <= 400`);
console.log(`  the same in a browser launched a moment before (its start shares the cores): median ${fmt(median(launched))} ms [${launched.map(fmt).join(', ')}]`);
