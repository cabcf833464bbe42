// A whole run in the Ranks view, driven like a user, with `memscape ranks --json` on the same
// files as the oracle: six generated ranks (rank 4 with an extra activation, as
// cli/tests/it/ranks.rs makes them) chosen as files and dropped; 1,000 generated profiles opened
// as a folder (one planted outlier, a damaged profile and a note that is neither).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { serve, browser, shot as shotOf, MEMSCAPE } from '../harness.js';

const TMP = join(tmpdir(), 'memscape-e2e-ranks');
const RUN = join(TMP, 'run');
const BIG = join(TMP, 'big');
const EXTRA_SITE = 'model.py:230:Head.forward';
const PLANTED = 637;
const PLANTED_SITE = 'planted.py:7:grow';
let srv, ctx, page, oracle;

function memscape(args) {
  return execFileSync(MEMSCAPE, args, { stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 28 }).toString();
}

const rankFiles = () => [0, 1, 2, 3, 4, 5].map(r => join(RUN, `rank${r}.pickle`));

const shot = name => shotOf(page, name, { fullPage: true });

/** Waits for the overview of a run of `n` files to be complete; returns the page's ms. */
async function overviewDone(n) {
  await page.waitForFunction(n => {
    const p = document.querySelector('#ranks-progress');
    return p && p.dataset.total === String(n) && p.dataset.ms !== '';
  }, n, { timeout: 120000 });
  return Number(await page.getAttribute('#ranks-progress', 'data-ms'));
}

const rows = () => page.evaluate(() => [...document.querySelectorAll('.rank-row')]
  .sort((a, b) => a.dataset.pos - b.dataset.pos)
  .map(r => ({ rank: r.dataset.rank, file: r.dataset.file, peak: Number(r.dataset.peak), outlier: r.classList.contains('outlier'),
    pos: Number(r.dataset.pos), text: r.textContent })));

const outliers = () => page.evaluate(() => [...document.querySelectorAll('#ranks-outliers .outlier')].map(li => ({
  rank: li.dataset.rank, file: li.dataset.file, excess: Number(li.dataset.excess), site: li.dataset.site,
  siteBytes: Number(li.dataset.siteBytes), text: li.textContent })));

before(async () => {
  rmSync(TMP, { recursive: true, force: true });
  mkdirSync(RUN, { recursive: true });
  for (let r = 0; r < 6; r++) {
    const extra = r === 4 ? ['--extra-activation', String(256 << 20)] : [];
    memscape(['synth', '--entries', '6000', '--layers', '4', '--seed', String(10 + r), ...extra, '-o', join(RUN, `rank${r}.pickle`)]);
  }
  oracle = JSON.parse(memscape(['ranks', '--json', ...rankFiles()]));
  srv = await serve();
  ctx = await browser();
  page = await ctx.newPage();
  page.on('pageerror', e => { throw e; });
  await page.goto(srv.url + '?empty');
});

after(async () => {
  await ctx?.close();
  await srv?.close();
});

test('six ranks chosen as files: the Ranks view names rank 4 alone, as memscape ranks does', async () => {
  assert.equal(oracle.outliers.length, 1);
  const expected = oracle.outliers[0];
  assert.equal(expected.rank, 4);
  assert.equal(expected.top_site, EXTRA_SITE);
  await page.setInputFiles('#file-input', rankFiles());
  const ms = await overviewDone(6);
  console.log(`6 ranks (${rankFiles().length} snapshots of 6,000 entries): overview in ${ms} ms`);
  assert.equal(await page.getAttribute('#ranks-rows', 'data-rows'), '6');
  assert.ok(await page.locator('#mode-ranks.active').isVisible());
  // No tab: files chosen as a run are not opened in full.
  assert.equal(await page.locator('.tab').count(), 0);
  const got = await outliers();
  assert.equal(got.length, 1);
  assert.equal(got[0].rank, '4');
  assert.equal(got[0].file, 'rank4.pickle');
  assert.equal(got[0].excess, expected.excess_bytes);
  assert.equal(got[0].site, expected.top_site);
  assert.equal(got[0].siteBytes, expected.top_site_bytes);
  assert.match(got[0].text, /rank 4 \(rank4\.pickle\): peak .*above the median; top site model\.py:230:Head\.forward holds 256\.0MiB more than in rank/);
  const summary = await page.textContent('#ranks-summary');
  assert.ok(summary.startsWith('6 ranks: median peak '), summary);
  // By rank: 0 to 5, each with the oracle's peak; rank 4's row alone marked.
  const byRank = await rows();
  assert.deepEqual(byRank.map(r => r.rank), ['0', '1', '2', '3', '4', '5']);
  assert.deepEqual(byRank.map(r => r.peak), oracle.ranks.map(r => r.peak_bytes));
  assert.deepEqual(byRank.map(r => r.outlier), [false, false, false, false, true, false]);
  assert.match(byRank[4].text, /\+256\.0MiB above the median · model\.py:230:Head\.forward/);
  // Each row's chart and category bar are drawn.
  assert.equal(await page.locator('.rank-row svg.rank-curve path[d^="M0,"]').count(), 6);
  assert.ok(await page.locator('.rank-row').first().locator('.rank-cats .cat').count() >= 3);
  await shot('40-ranks-six');
  // Sorted by peak: rank 4 first.
  await page.selectOption('#ranks-sort', 'peak');
  const byPeak = await rows();
  assert.equal(byPeak[0].rank, '4');
  assert.ok(byPeak.every((r, i) => i === 0 || byPeak[i - 1].peak >= r.peak));
  await page.selectOption('#ranks-sort', 'rank');
  // Another mode while no file of the run is open: the way to one, and the way back.
  await page.click('#mode-timeline');
  assert.ok(await page.locator('#no-tab').isVisible(), 'the hint to click a rank');
  assert.equal(await page.locator('.empty').count(), 0, 'not the empty page');
  assert.equal(await page.locator('#timeline').isVisible(), false, 'no empty plot');
  await page.click('#mode-ranks');
  assert.ok(await page.locator('#ranks-rows').isVisible());
});

test('a click on a rank opens it as a tab; two picked open in Compare', async () => {
  await page.click('.rank-row[data-rank="4"] .rank-file');
  await page.waitForFunction(() => document.querySelector('.tab.active .tab-name')?.textContent === 'rank4.pickle', null, { timeout: 60000 });
  assert.ok(await page.locator('#mode-timeline.active').isVisible());
  await page.waitForSelector('#stats .file-line');
  await page.click('#mode-ranks');
  await page.locator('.rank-row[data-rank="0"] .rank-pick input').check();
  await page.locator('.rank-row[data-rank="4"] .rank-pick input').check();
  await page.click('#ranks-compare');
  await page.waitForSelector('#diff-summary tr[data-key="peak"]', { timeout: 60000 });
  assert.ok(await page.locator('#mode-compare.active').isVisible());
  // rank 4 was open already: one more tab, rank 0.
  assert.deepEqual(await page.locator('.tab-name').allTextContents(), ['rank4.pickle', 'rank0.pickle']);
  const delta = Number(await page.getAttribute('#diff-summary tr[data-key="peak"]', 'data-delta'));
  const peak = r => oracle.ranks.find(x => x.rank === r).peak_bytes;
  assert.equal(delta, peak(4) - peak(0));
  const top = await page.getAttribute('#diff-sites tr.site', 'data-site');
  assert.equal(top, EXTRA_SITE);
  await shot('41-ranks-compare');
});

test('six ranks dropped on the page open as a run', async () => {
  const files = rankFiles().map(f => ({ name: f.split('/').pop(), b64: readFileSync(f).toString('base64') }));
  await page.evaluate(files => {
    const dt = new DataTransfer();
    for (const f of files) dt.items.add(new File([Uint8Array.from(atob(f.b64), c => c.charCodeAt(0))], 'dropped-' + f.name));
    document.querySelector('.app').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, files);
  await page.waitForFunction(() => document.querySelector('.rank-row')?.dataset.file?.startsWith('dropped-'), null, { timeout: 60000 });
  await overviewDone(6);
  const got = await outliers();
  assert.deepEqual(got.map(o => [o.rank, o.file, o.excess, o.site]),
    [['4', 'dropped-rank4.pickle', oracle.outliers[0].excess_bytes, EXTRA_SITE]]);
});

/** 1,000 rank profiles from one real `memscape profile` output: peaks spread by a few percent,
 * rank PLANTED 40% higher with a call site of its own; a damaged profile and a note beside. */
function thousandProfiles() {
  mkdirSync(BIG, { recursive: true });
  const made = join(TMP, 'rank0.pickle.profile');
  memscape(['profile', rankFiles()[0], '-o', made]);
  const text = readFileSync(made, 'utf8');
  const nl = text.indexOf('\n');
  const header = text.slice(0, nl);
  const base = JSON.parse(text.slice(nl + 1));
  const peak = base.profile.peak_bytes;
  for (let r = 0; r < 1000; r++) {
    const p = structuredClone(base);
    p.source = `run/rank${r}.pickle`;
    p.profile.peak_bytes = peak + ((r * 7919) % 41) * (peak / 1000 | 0);
    if (r === PLANTED) {
      const extra = Math.round(peak * 0.4);
      p.profile.peak_bytes = peak + extra;
      p.profile.sites.unshift({ site: PLANTED_SITE, bytes: extra, count: 1 });
    }
    writeFileSync(join(BIG, `rank${r}.pickle.profile`), header + '\n' + JSON.stringify(p) + '\n');
  }
  writeFileSync(join(BIG, 'rank1000.pickle.profile'), header + '\n{"source": "run/rank1000.pickle", "profile": {');
  writeFileSync(join(BIG, 'NOTES.txt'), 'not a snapshot');
}

test('1,000 profiles opened as a folder: every row, the planted outlier, the damaged file named', async () => {
  thousandProfiles();
  const good = join(TMP, 'good');
  mkdirSync(good, { recursive: true });
  const big = JSON.parse(memscape(['ranks', '--json', ...Array.from({ length: 1000 }, (_, r) => join(BIG, `rank${r}.pickle.profile`))]));
  assert.deepEqual(big.outliers.map(o => o.rank), [PLANTED]);
  await page.click('#mode-ranks');
  const t0 = Date.now();
  await page.setInputFiles('#run-input', BIG);
  const ms = await overviewDone(1001);
  console.log(`1,000 profiles (a folder of ${1002} files): complete overview in ${ms} ms in the page, ${Date.now() - t0} ms from the file input`);
  assert.equal(await page.getAttribute('#ranks-rows', 'data-rows'), '1000');
  const got = await outliers();
  assert.equal(got.length, 1);
  assert.equal(got[0].rank, String(PLANTED));
  assert.equal(got[0].file, `big/rank${PLANTED}.pickle.profile`);
  assert.equal(got[0].excess, big.outliers[0].excess_bytes);
  assert.equal(got[0].site, PLANTED_SITE);
  assert.equal(await page.textContent('#ranks-summary'),
    `1000 ranks: median peak ${fmt(big.median_peak_bytes)} (median deviation ${fmt(big.mad_bytes)}); outliers peak above ${fmt(big.threshold_bytes)}`);
  const failed = await page.locator('#ranks-failed .failed').allTextContents();
  assert.equal(failed.length, 1);
  assert.match(failed[0], /^big\/rank1000\.pickle\.profile could not be read: big\/rank1000\.pickle\.profile: a damaged memscape profile/);
  assert.match(await page.textContent('#ranks-skipped'), /Skipped 1 file\(s\) that are neither snapshots nor profiles by name: big\/NOTES\.txt/);
  // Only the rows in sight are in the page; scrolling to the end shows the last ranks.
  const inPage = await page.locator('.rank-row').count();
  assert.ok(inPage > 10 && inPage < 60, `${inPage} rows in the page`);
  await page.selectOption('#ranks-sort', 'peak');
  assert.equal((await rows())[0].rank, String(PLANTED));
  await shot('42-ranks-thousand');
  await page.selectOption('#ranks-sort', 'rank');
  // Scrolling from top to bottom in 20 steps, each drawn before the next (two frames).
  const scrollMs = await page.locator('#ranks-rows').evaluate(async el => {
    const t0 = performance.now();
    for (let k = 1; k <= 20; k++) {
      el.scrollTop = el.scrollHeight * k / 20;
      await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    }
    return performance.now() - t0;
  });
  console.log(`1,000 rows scrolled top to bottom in 20 steps: ${scrollMs.toFixed(0)} ms (${(scrollMs / 20).toFixed(1)} ms a step, two frames each)`);
  await page.waitForFunction(() => document.querySelector('.rank-row[data-rank="999"]'));
  const last = await rows();
  assert.equal(last[last.length - 1].rank, '999');
  assert.equal(last[last.length - 1].pos, 999);
  // A profile cannot be opened in full: it says so, and the run stays.
  await page.click('.rank-row[data-rank="999"] .rank-file');
  assert.match(await page.textContent('#error .error-text'), /big\/rank999\.pickle\.profile is a profile: .*cannot be opened in full/);
  assert.ok(await page.locator('#mode-ranks.active').isVisible());
  await page.selectOption('#ranks-sort', 'peak');
  await page.click('#mode-timeline');
  await page.click('#mode-ranks');
  assert.equal(await page.getAttribute('#ranks-rows', 'data-rows'), '1000');
  // The sort is kept while another view was shown.
  assert.equal(await page.inputValue('#ranks-sort'), 'peak');
  assert.equal((await rows())[0].rank, String(PLANTED));
  await shot('43-ranks-thousand-end');
});

/** `format_size` as the page writes it. */
function fmt(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = b, u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return `${v.toFixed(1)}${units[u]}`;
}
