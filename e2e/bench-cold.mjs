// The cold page, step by step: a fresh browser profile opens the page (and its bundled
// example) once the browser has finished starting (`whenCoresIdle`), and the page's marks give
// when its code started, when the example's bytes came, the worker's read, when the
// load's reply reached the page, when the first view was asked for and when it was drawn
// (ms since navigation, medians over the rounds).
//   node e2e/bench-cold.mjs [--rounds 16]   (after `trunk build --release --offline`)
import { serve, browser, whenCoresIdle } from './harness.js';
import { arg, waitForMark, marksOf, median, fmt } from './probe-page.mjs';

const rounds = Number(arg('--rounds', '16'));
// [mark, what it is] in the order they happen; `-at` marks are the page's clock, the others durations.
const STEPS = [
  ['app-wasm-at', 'the page\'s wasm fetched (resource timing)'],
  ['app-start-at', 'the page\'s code starts'],
  ['ahead-asked-at', 'the example\'s first view asked for, before its bytes'],
  ['example-fetched-at', 'the example\'s bytes handed to the page'],
  ['parse-worker', 'the worker\'s read of the example, from its start (ms)'],
  ['read-worker', 'of which waiting for the browser\'s bytes (ms)'],
  ['loaded-at', 'the load\'s reply reaches the page'],
  ['first-draw-at', 'the first view drawn (the cold page\'s figure)'],
];
const srv = await serve();
const seen = new Map(STEPS.map(([m]) => [m, []]));
for (let r = 0; r < rounds; r++) {
  const ctx = await browser();
  const page = await ctx.newPage();
  await whenCoresIdle(page);
  await page.goto(srv.url);
  await waitForMark(page, 'first-draw-at');
  if (await page.locator('#error').count()) throw new Error(`the cold page: ${await page.locator('#error').textContent()}`);
  const marks = await marksOf(page);
  marks['app-wasm-at'] = await page.evaluate(() => performance.getEntriesByType('resource')
    .find(e => /\/app-[^/]*_bg\.wasm$/.test(e.name))?.responseEnd);
  for (const [m] of STEPS) if (marks[m] !== undefined) seen.get(m).push(marks[m]);
  await ctx.close();
}
await srv.close();
console.log(`== the cold page (${rounds} rounds, a fresh profile each, opened once the cores are idle; medians, ms)`);
for (const [m, what] of STEPS) {
  const v = seen.get(m);
  console.log(`${m.padEnd(20)} ${fmt(median(v)).padStart(5)}  [${fmt(Math.min(...v))} to ${fmt(Math.max(...v))}]  ${what}`);
}
console.log('target for first-draw-at: <= 400');
