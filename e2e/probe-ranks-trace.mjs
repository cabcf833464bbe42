// Where the time of a run's overview goes: the Ranks view reads FOLDER (picked as a user does,
// a second after the click) under Chrome's tracing, then prints, for each thread of the
// page's renderer (the page's main thread, each pool worker), how long it was busy (top-level
// tasks) between the pick and the complete overview, and the overview's own figure.
//   node e2e/probe-ranks-trace.mjs FOLDER
import { serve, browser } from './harness.js';

const folder = process.argv[2];
if (!folder) throw new Error('usage: node e2e/probe-ranks-trace.mjs FOLDER');
const srv = await serve();
const ctx = await browser();
const page = await ctx.newPage();
await page.goto(srv.url + '?empty');
await page.waitForSelector('#run-input', { state: 'attached' });
const cdp = await ctx.newCDPSession(page);
const events = [];
cdp.on('Tracing.dataCollected', e => events.push(...e.value));
const done = new Promise(r => cdp.once('Tracing.tracingComplete', r));
const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.click('label:has(#run-input)')]);
await new Promise(r => setTimeout(r, 1000));
// Traced from the pick: the workers started by the click are ready by then.
await cdp.send('Tracing.start', { categories: 'toplevel,v8.execute,devtools.timeline', transferMode: 'ReportEvents' });
await chooser.setFiles(folder);
await page.waitForFunction(() => document.querySelector('#ranks-progress')?.dataset.ms, null, { timeout: 600000 });
const ms = Number(await page.getAttribute('#ranks-progress', 'data-ms'));
await cdp.send('Tracing.end');
await done;
const names = new Map();
for (const e of events) if (e.ph === 'M' && e.name === 'thread_name') names.set(`${e.pid}:${e.tid}`, e.args.name);
const tasks = events.filter(e => e.ph === 'X' && (e.name === 'ThreadControllerImpl::RunTask' || e.name === 'RunTask') && e.dur);
const busy = new Map();
let first = Infinity, last = 0;
for (const e of tasks) {
  const k = `${e.pid}:${e.tid}`;
  const name = names.get(k) || k;
  if (!/CrRendererMain|DedicatedWorker/.test(name)) continue;
  busy.set(k, (busy.get(k) || 0) + e.dur / 1000);
  first = Math.min(first, e.ts); last = Math.max(last, e.ts + e.dur);
}
const rows = [...busy].map(([k, b]) => ({ thread: names.get(k) || k, busy_ms: Math.round(b) })).sort((a, b) => b.busy_ms - a.busy_ms);
console.log(JSON.stringify({ folder, overview_ms: ms, traced_span_ms: Math.round((last - first) / 1000), threads: rows }));
await ctx.close();
await srv.close();
