// What the page benchmarks and probes (bench-open.mjs, bench-first.mjs, bench-cold.mjs,
// bench-tierlog.mjs) share: the page's own marks (`window.memscapeTimings`, recorded by
// app/src/dom.rs), a file chosen as the first file of a `?empty` page, and medians.
import { join } from 'node:path';
import { CORPUS } from './harness.js';

export const median = v => { const s = [...v].sort((a, b) => a - b); return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN; };
export const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
export const arg = (name, dflt) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : dflt);

/** The corpus files the probes open, by their short names. */
export const FILES = {
  pt20: 'pt20-flexgen-opt1.3b-history.pickle',
  pt21: 'pt21-llama-cppframes-multistream.pickle',
  pt25: 'pt25-cs336-fullstep-annotations.pickle',
  pt210: 'pt210-cs336-training-usermeta.pickle',
};
export const corpusFile = short => join(CORPUS, FILES[short] || short);

/** Waits in the page for the mark `m` (or an error) by looking every 5 ms. Not
 * `waitForFunction`: its first call has Playwright put its own script into the page, 12 ms of
 * the main thread's time while the file loads (seen in a trace), which the first file and the
 * cold page would otherwise be charged with. */
export const waitForMark = (page, mark) => page.evaluate(m => new Promise((done, fail) => {
  const since = performance.now();
  const look = () => {
    if (document.querySelector('#error') || (window.memscapeTimings || []).some(x => x[0] === m)) done();
    else if (performance.now() - since > 60000) fail(new Error(`no ${m} mark in 60 s`));
    else setTimeout(look, 5);
  };
  look();
}), mark);

/** Every mark of the page as `{name: first value}`. */
export const marksOf = page => page.evaluate(() => Object.fromEntries([...(window.memscapeTimings || [])].reverse()));

/** Opens `url + '?empty'`, waits `settleMs`, chooses `path` in the file input and waits for
 * its first timeline. Returns the page's clock at the choice (`chosenAt`), the time to the
 * first drawn timeline (`ms`) and the page's marks. */
export async function firstFile(page, url, path, settleMs = 1000) {
  await page.goto(url + '?empty');
  await page.evaluate(() => window.addEventListener('change', e => {
    if (e.target.id === 'file-input') window.chosenAt = performance.now();
  }, true));
  await page.waitForTimeout(settleMs);
  await page.evaluate(() => { window.memscapeTimings = []; });
  await page.setInputFiles('#file-input', path);
  await waitForMark(page, 'first-draw-at');
  if (await page.locator('#error').count()) throw new Error(`${path}: ${await page.locator('#error').textContent()}`);
  const marks = await marksOf(page);
  const chosenAt = await page.evaluate(() => window.chosenAt);
  return { chosenAt, ms: marks['first-draw-at'] - chosenAt, marks };
}
