// A corpus file as the first file of a page, over more rounds than bench-open.mjs: each round
// a fresh browser profile per file, a `?empty` page open a second, the file chosen in the file
// input, the time from its `change` event to the page's `first-draw-at` mark.
//   node e2e/bench-first.mjs [--rounds 20] [--files pt25,pt210]   (after `trunk build --release --offline`)
// Files are the corpus's short names (pt20, pt21, pt25, pt210) or file names in MEMSCAPE_CORPUS.
import { basename } from 'node:path';
import { serve, browser } from './harness.js';
import { arg, corpusFile, firstFile, median, fmt } from './probe-page.mjs';

const rounds = Number(arg('--rounds', '20'));
const files = arg('--files', 'pt25,pt210').split(',').map(corpusFile);
const srv = await serve();
const times = new Map(files.map(f => [f, []]));
for (let r = 0; r < rounds; r++) {
  for (const f of files) {
    const ctx = await browser();
    const page = await ctx.newPage();
    times.get(f).push((await firstFile(page, srv.url, f)).ms);
    await ctx.close();
  }
}
await srv.close();
console.log(`== a corpus file as the first file of a page (${rounds} rounds, a fresh profile each; ms)`);
for (const f of files) {
  const t = times.get(f);
  console.log(`${basename(f).padEnd(42)} median ${fmt(median(t), 1).padStart(6)}  range ${fmt(Math.min(...t))} to ${fmt(Math.max(...t))}  target <= 60`);
}
