// The timeline's picture of every allocation, driven like a user on the bundled example
// (pt25-cs336-fullstep): each allocation in its own colour (grey only where nothing has an
// identity), the memory axis from the baseline and zoomed, the allocation under the pointer
// outlined in place, and the plot drawn at the screen's own pixels on a 2x screen.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { openExample, painted, redrawn, hovered, tabShown, shot, needs, CORPUS } from '../harness.js';

const EXAMPLE = 'cs336-fullstep.pickle';
// Plot geometry of draw/mod.rs, CSS pixels.
const LEFT = 76, RIGHT = 14, TOP = 13 * 4 + 8, BOTTOM = 24;
const open = [];
after(async () => { for (const o of open) await o.close(); });

async function example(options) {
  const o = await openExample(EXAMPLE, options);
  open.push(o);
  // The first view drawn: its memory axis (from the baseline) and peak, and the window in
  // the URL (a loaded machine can take seconds after the canvas has its size).
  await o.page.waitForFunction(() => document.getElementById('y-range')?.textContent.includes('memory')
    && document.getElementById('timeline').dataset.peakStep && location.hash.includes('start='), null, { timeout: 30000 });
  await painted(o.page);
  return o;
}

/** Of the plot's pixels painted with something (not the background or a grid line), how
 * many are the grey of summarized bytes (the theme's --muted). */
function greyShare(page) {
  return page.evaluate(({ LEFT, RIGHT, TOP, BOTTOM }) => {
    const c = document.getElementById('timeline');
    const dpr = c.width / c.clientWidth;
    const css = getComputedStyle(document.documentElement);
    const hex = s => [1, 3, 5].map(i => parseInt(s.trim().slice(i, i + 2), 16));
    const [grey, bg, grid] = ['--muted', '--bg', '--grid'].map(v => hex(css.getPropertyValue(v)));
    const [x0, x1] = [Math.ceil(LEFT * dpr), Math.floor(c.width - RIGHT * dpr)];
    const [y0, y1] = [Math.ceil(TOP * dpr), Math.floor(c.height - BOTTOM * dpr)];
    const d = c.getContext('2d').getImageData(x0, y0, x1 - x0, y1 - y0).data;
    const near = (i, k, t) => Math.abs(d[i] - k[0]) + Math.abs(d[i + 1] - k[1]) + Math.abs(d[i + 2] - k[2]) <= t;
    let painted = 0, g = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (near(i, bg, 30) || near(i, grid, 8)) continue;
      painted++;
      if (near(i, grey, 12)) g++;
    }
    return { painted, grey: g };
  }, { LEFT, RIGHT, TOP, BOTTOM });
}

function details(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#details tr')]
    .map(tr => [tr.dataset.key, tr.querySelector('td')?.textContent])));
}

const bytesOf = text => Number(text.match(/\((\d+) bytes\)/)[1]);

/** The page loaded again from a link to the example with `y=lo-hi` (the URL keeps the memory
 * range), once the range is on screen: the axis of the picture drawn says it (to its 0.1 GiB). */
async function reopenZoomed(page, url, lo, hi) {
  await page.goto('about:blank');
  await page.goto(`${url}#file=${EXAMPLE}&y=${Math.round(lo)}-${Math.round(hi)}`);
  await tabShown(page, EXAMPLE);
  await page.waitForFunction(([lo, hi]) => {
    const m = document.getElementById('y-range')?.textContent.match(/^memory ([\d.]+)GiB to ([\d.]+)GiB \(memory zoomed\)$/);
    return m && Math.abs(m[1] - lo / 2 ** 30) <= 0.06 && Math.abs(m[2] - hi / 2 ** 30) <= 0.06;
  }, [lo, hi], { timeout: 30000 });
  await painted(page);
}

/** The x (CSS, in the canvas) of the peak's column. */
function peakX(page) {
  return page.evaluate(({ LEFT, RIGHT }) => {
    const c = document.getElementById('timeline');
    const peak = Number(c.dataset.peakStep);
    const h = Object.fromEntries(location.hash.slice(1).split('&').map(p => p.split('=')));
    const [a, b] = [Number(h.start), Number(h.end)];
    return LEFT + (peak + 0.5 - a) / (b - a) * (c.clientWidth - LEFT - RIGHT);
  }, { LEFT, RIGHT });
}

/** Hovers (x, y) of the canvas; the details shown once the hover was answered. */
async function hoverAt(page, x, y) {
  const box = await page.locator('#timeline').boundingBox();
  await hovered(page, box.x + x, box.y + y);
  return details(page);
}

test('every allocation is drawn in its own colour: grey is under 5% of the painted plot', async () => {
  const { page } = await example();
  const { painted, grey } = await greyShare(page);
  console.log(`grey: ${grey} of ${painted} painted plot pixels (${(100 * grey / painted).toFixed(3)}%; 24.4% before the blends)`);
  assert.ok(painted > 100000, `${painted} pixels painted`);
  assert.ok(grey / painted <= 0.05, `${grey} of ${painted}`);
  await shot(page, '15-colour-baseline');
});

test('the memory axis starts at the baseline, or at zero when it is turned off, and the URL keeps a zoomed range', async () => {
  const { page } = await example();
  const range = await page.locator('#y-range').textContent();
  const m = range.match(/memory ([\d.]+)GiB to ([\d.]+)GiB \(from the baseline\)/);
  assert.ok(m, range);
  // memviz-neo starts the same file's axis at about 11 GiB; the peak is 21.3 GiB.
  assert.ok(Number(m[1]) > 10 && Number(m[1]) < 12 && Number(m[2]) > 21.3, range);
  const based = await greyShare(page);
  // The axis is the worker's to draw (the URL does not keep it).
  await redrawn(page, () => page.locator('#baseline').uncheck(), { url: false });
  await page.waitForFunction(() => document.getElementById('y-range').textContent === '');
  const flat = await greyShare(page);
  // From zero the same memory is squeezed under a taller axis: the picture changes.
  assert.notEqual(flat.painted, based.painted);
  await page.locator('#baseline').check();
  await page.waitForFunction(() => document.getElementById('y-range').textContent.includes('baseline'));

  // A drag on the memory axis zooms to the bytes it covers; the URL keeps them; X resets.
  const box = await page.locator('#timeline').boundingBox();
  const plotH = box.height - TOP - BOTTOM;
  await page.mouse.move(box.x + 30, box.y + TOP + plotH * 0.2);
  await redrawn(page, async () => {
    await page.mouse.down();
    await page.mouse.move(box.x + 30, box.y + TOP + plotH * 0.4, { steps: 4 });
    await page.mouse.up();
  });
  await page.waitForFunction(before => {
    const t = document.getElementById('y-range').textContent;
    return t.includes('zoomed') && !t.startsWith(before);
  }, range.split(' (')[0]);
  // The URL is written just after the frame that shows the range.
  await page.waitForFunction(() => location.hash.includes('y='));
  const hash = await page.evaluate(() => location.hash);
  const y = hash.match(/y=(\d+)-(\d+)/);
  assert.ok(y, hash);
  const [lo, hi] = [Number(y[1]), Number(y[2])];
  const shown = (await page.locator('#y-range').textContent()).match(/memory ([\d.]+)GiB to ([\d.]+)GiB/);
  assert.ok(Math.abs(Number(shown[1]) - lo / 2 ** 30) < 0.06 && Math.abs(Number(shown[2]) - hi / 2 ** 30) < 0.06, `${shown[0]} vs ${lo}-${hi}`);
  // A fifth of the plot's height was picked: the range is a fifth of the axis.
  const full = (Number(m[2]) - Number(m[1])) * 2 ** 30;
  assert.ok(Math.abs((hi - lo) / full - 0.2) < 0.03, `${(hi - lo) / full}`);
  await shot(page, '16-memory-zoomed');
  await page.keyboard.press('x');
  await page.waitForFunction(() => !location.hash.includes('y=') && document.getElementById('y-range').textContent.includes('baseline'));
  assert.equal(await page.locator('#reset-y').count(), 0);
  // R zooms in by half around the middle, F back out to the whole axis.
  await page.keyboard.press('r');
  await page.waitForFunction(() => location.hash.includes('y='));
  await page.keyboard.press('f');
  await page.waitForFunction(() => !location.hash.includes('y='));
});

test('zoomed to 1/100 of the height, allocations under 1 MiB can be hovered, and each is outlined where it is drawn', async () => {
  const { page, url } = await example();
  const x = await peakX(page);
  const box = await page.locator('#timeline').boundingBox();
  const plotH = box.height - TOP - BOTTOM;
  const m = (await page.locator('#y-range').textContent()).match(/memory ([\d.]+)GiB to ([\d.]+)GiB/);
  const [lo, top] = [Number(m[1]) * 2 ** 30, Number(m[2]) * 2 ** 30];
  // Rows of the peak's column at full height: what a pointer finds in each pixel row of the
  // upper half, where the activations are.
  const sizesAt = async () => {
    const found = new Map();
    for (let y = Math.round(TOP + 2); y < TOP + plotH - 2; y += 1) {
      const d = await hoverAt(page, x, y);
      if (d.address) found.set(d.address, bytesOf(d.size));
    }
    return found;
  };
  const full = await sizesAt();
  const smallFull = [...full.values()].filter(s => s < 2 ** 20).length;
  // The same column at 1/100 of the height, a window at a time through the upper half.
  const span = Math.round((top - lo) / 100);
  let zoomed = new Map(), at = null;
  for (const frac of [0.55, 0.65, 0.75, 0.85, 0.45]) {
    const centre = Math.round(lo + (top - lo) * frac);
    await reopenZoomed(page, url, centre - span / 2, centre + span / 2);
    const sizes = await sizesAt();
    zoomed = sizes;
    const small = [...sizes.entries()].filter(([, s]) => s < 2 ** 20);
    if (small.length > 0) { at = { centre, small }; break; }
  }
  assert.ok(at, `no allocation under 1 MiB found in five windows of 1/100 of the height; at full height ${smallFull}`);
  console.log(`at 1/100 of the height: ${zoomed.size} allocations under the pointer in one column, ${at.small.length} under 1 MiB (${at.small.map(s => s[1]).join(', ')} bytes); the whole column at full height: ${full.size}`);
  assert.ok(zoomed.size >= 5, `${zoomed.size} allocations in a hundredth of the height`);

  // Hover the first small one again: its details, and its outline around its band.
  const want = at.small[0][0];
  let hit = null;
  for (let y = Math.round(TOP + 2); y < TOP + plotH - 2 && !hit; y += 1) {
    const d = await hoverAt(page, x, y);
    if (d.address === want) hit = y;
  }
  assert.ok(hit, 'the small allocation is found again');
  // Its outline is drawn around it: the pixels near the pointer change when the pointer
  // leaves (the outline goes) and come back when it returns.
  const near = () => page.evaluate(({ x, y }) => {
    const c = document.getElementById('timeline');
    const dpr = c.width / c.clientWidth;
    return Array.from(c.getContext('2d').getImageData(Math.round((x - 30) * dpr), Math.round((y - 6) * dpr), Math.round(60 * dpr), Math.round(12 * dpr)).data);
  }, { x, y: hit });
  const withOutline = await near();
  // Above the plot: the worker finds nothing there, and the outline goes.
  await hoverAt(page, (await page.locator('#timeline').boundingBox()).width / 2, 4);
  const without = await near();
  let changed = 0;
  for (let i = 0; i < withOutline.length; i += 4) if (Math.abs(withOutline[i] - without[i]) + Math.abs(withOutline[i + 1] - without[i + 1]) + Math.abs(withOutline[i + 2] - without[i + 2]) > 60) changed++;
  assert.ok(changed >= 20, `${changed} pixels near the hovered allocation change when the pointer leaves`);
  await hoverAt(page, x, hit);
  await shot(page, '17-small-allocation-outlined');
});

test('on a 2x screen the plot is drawn at device pixels: a band edge is one device pixel wide', async () => {
  const { page, url } = await example({ deviceScaleFactor: 2 });
  // Zoomed to 1/40 of the memory below the peak, so that bands are many pixels tall.
  const m = (await page.locator('#y-range').textContent()).match(/memory ([\d.]+)GiB to ([\d.]+)GiB/);
  const [lo, top] = [Number(m[1]) * 2 ** 30, Number(m[2]) * 2 ** 30];
  await reopenZoomed(page, url, lo + (top - lo) * 0.3, lo + (top - lo) * 0.325);
  const r = await page.evaluate(({ LEFT, RIGHT, TOP, BOTTOM }) => {
    const c = document.getElementById('timeline');
    const dpr = c.width / c.clientWidth;
    // Down one device-pixel column a third of the way along, count the colour steps and the
    // pixels between two flat runs.
    const x = Math.round(LEFT * dpr + (c.width - (LEFT + RIGHT) * dpr) * 0.33);
    const d = c.getContext('2d').getImageData(x, Math.ceil(TOP * dpr), 1, Math.floor(c.height - (TOP + BOTTOM) * dpr)).data;
    const px = i => [d[4 * i], d[4 * i + 1], d[4 * i + 2]];
    const same = (a, b) => Math.abs(a[0] - b[0]) + Math.abs(a[1] - b[1]) + Math.abs(a[2] - b[2]) <= 6;
    const n = d.length / 4;
    // Between two runs of at least 4 equal pixels: a sharp edge has at most one pixel
    // between them (where the edge falls inside a pixel, that pixel mixes both); a blurred
    // one has two or more, each a mix of the two colours. Anything else between two runs is
    // thin allocations of their own colours, not an edge.
    const between = (p, a, b) => [0, 1, 2].every(k => p[k] >= Math.min(a[k], b[k]) - 6 && p[k] <= Math.max(a[k], b[k]) + 6);
    let edges = 0, blurred = 0;
    let i = 0;
    const runEnd = s => { let e = s; while (e + 1 < n && same(px(e + 1), px(s))) e++; return e; };
    while (i < n) {
      const e = runEnd(i);
      if (e - i + 1 >= 4) {
        let j = e + 1;
        while (j < n && runEnd(j) - j + 1 < 4) j = runEnd(j) + 1;
        if (j < n && !same(px(j), px(e))) {
          const k = j - e - 1;
          const mixes = Array.from({ length: k }, (_, m) => between(px(e + 1 + m), px(e), px(j))).every(Boolean);
          if (k <= 1) edges++;
          else if (mixes) { edges++; blurred++; }
        }
        i = j;
      } else i = e + 1;
    }
    return { dpr, width: c.width, cssWidth: c.clientWidth, edges, blurred };
  }, { LEFT, RIGHT, TOP, BOTTOM });
  console.log(`2x screen: canvas ${r.width} device pixels for ${r.cssWidth} CSS; ${r.edges} band edges down one column, ${r.blurred} wider than one device pixel`);
  assert.equal(r.dpr, 2);
  assert.ok(r.edges >= 20, `${r.edges} edges`);
  // Scaled up from CSS pixels every edge would be spread over two; a thin allocation of a
  // colour between its neighbours' can still look like one.
  assert.ok(r.blurred <= r.edges / 10, `${r.blurred} of ${r.edges} edges are spread over more than one device pixel`);
  await shot(page, '18-hidpi', { clip: { x: 0, y: 120, width: 700, height: 360 } });
});

test('moving the window to a 2x screen draws the plot again at the new ratio', async () => {
  const { page } = await example();
  const width = () => page.evaluate(() => document.getElementById('timeline').width);
  const css = await page.evaluate(() => document.getElementById('timeline').clientWidth);
  assert.equal(await width(), css);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Emulation.setDeviceMetricsOverride', { width: 1400, height: 1000, deviceScaleFactor: 2, mobile: false });
  await page.waitForFunction(w => document.getElementById('timeline').width === 2 * w, css, { timeout: 5000 });
  // The worker's picture follows: as many pixel columns as device pixels.
  await page.waitForFunction(() => {
    const c = document.getElementById('timeline');
    const d = c.getContext('2d').getImageData(Math.round(c.width * 0.3), 0, 1, c.height).data;
    let runs = 0;
    for (let i = 4; i < d.length; i += 4) if (d[i] !== d[i - 4] || d[i + 1] !== d[i - 3]) runs++;
    return runs > 100;
  }, null, { timeout: 5000 });
});

test('a dump with no history (one step) is drawn, its axis from zero, with the baseline on', async t => {
  // Every byte of a one-step trace is "stable": an axis from the baseline would start at the
  // peak and show nothing (9 corpus files drew a blank plot so).
  if (!needs(t, 'pt22-layoutedit-2traces-cuda1.pickle')) return;
  const o = await openExample(EXAMPLE);
  open.push(o);
  const { page } = o;
  await page.setInputFiles('#file-input', join(CORPUS, 'pt22-layoutedit-2traces-cuda1.pickle'));
  await page.waitForFunction(() => document.querySelector('.tab.active .tab-name')?.textContent === 'pt22-layoutedit-2traces-cuda1.pickle');
  await page.waitForFunction(() => document.getElementById('timeline').dataset.peakStep !== undefined
    && (window.memscapeTimings || []).filter(x => x[0] === 'first-draw').length >= 2, null, { timeout: 30000 });
  await painted(page);
  assert.ok(await page.locator('#baseline').isChecked());
  assert.equal(await page.locator('#y-range').textContent(), '', 'the axis starts at zero');
  const { painted: drawn } = await greyShare(page);
  const plot = await page.evaluate(({ LEFT, RIGHT, TOP, BOTTOM }) => {
    const c = document.getElementById('timeline');
    return (c.clientWidth - LEFT - RIGHT) * (c.clientHeight - TOP - BOTTOM) * (c.width / c.clientWidth) ** 2;
  }, { LEFT, RIGHT, TOP, BOTTOM });
  // The trace's one step holds its 10.6 GB across the whole width, under a 5% headroom.
  assert.ok(drawn > plot * 0.8, `${drawn} of ${plot} plot pixels painted`);
  await shot(page, '17-one-step-dump');
});
