// The notebook viewer in JupyterLab, as a PyTorch user meets it: JupyterLab served from the
// environment the wheel is installed in (target/python/test, made by scripts/test), the
// example notebook opened in headless Chromium and run from the Run menu. Each
// `memscape.show` output must be the viewer, drawing its timeline with PyTorch's figures in its
// statistics, and nothing may be requested outside the page's origin.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import { browser, statsOf, paintedPixels, CORPUS, ROOT } from '../harness.js';

const VENV = process.env.MEMSCAPE_TEST_VENV || join(ROOT, 'target', 'python', 'test');
const SHOTS = join(ROOT, 'e2e', 'screenshots');
// examples/cs336-fullstep.pickle is byte-for-byte this corpus file.
const EXPECTED = JSON.parse(readFileSync(join(CORPUS, 'expected', 'pt25-cs336-fullstep-annotations.pickle.json'), 'utf8'));

let lab, base, token, ctx, labLog = '';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

before(async () => {
  const root = mkdtempSync(join(tmpdir(), 'memscape-lab-'));
  copyFileSync(join(ROOT, 'examples', 'notebook.ipynb'), join(root, 'notebook.ipynb'));
  copyFileSync(join(ROOT, 'examples', 'cs336-fullstep.pickle'), join(root, 'cs336-fullstep.pickle'));
  // Jupyter's own settings, kernels and runtime files in a fresh place: only this
  // environment's kernel (its python3), nothing from the user's ~/.jupyter.
  const home = mkdtempSync(join(tmpdir(), 'memscape-lab-home-'));
  for (const d of ['config', 'data', 'runtime', 'ipython']) mkdirSync(join(home, d));
  const port = await freePort();
  token = randomBytes(16).toString('hex');
  base = `http://127.0.0.1:${port}`;
  lab = spawn(join(VENV, 'bin', 'jupyter'), ['lab', '--no-browser', '--ServerApp.ip=127.0.0.1', `--ServerApp.port=${port}`,
    '--ServerApp.port_retries=0', `--ServerApp.root_dir=${root}`, `--IdentityProvider.token=${token}`,
    '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate', '--LabApp.extension_manager=readonly', '--allow-root'], {
    env: { ...process.env, PATH: `${join(VENV, 'bin')}:${process.env.PATH}`, JUPYTER_CONFIG_DIR: join(home, 'config'),
      JUPYTER_DATA_DIR: join(home, 'data'), JUPYTER_RUNTIME_DIR: join(home, 'runtime'), IPYTHONDIR: join(home, 'ipython'),
      JUPYTER_PLATFORM_DIRS: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  lab.stdout.on('data', d => { labLog += d; });
  lab.stderr.on('data', d => { labLog += d; });
  const deadline = Date.now() + 120000;
  for (;;) {
    assert.equal(lab.exitCode, null, `jupyter lab exited:\n${labLog}`);
    const up = await fetch(`${base}/api/status?token=${token}`).then(r => r.ok, () => false);
    if (up) break;
    assert.ok(Date.now() < deadline, `jupyter lab did not start:\n${labLog}`);
    await new Promise(r => setTimeout(r, 500));
  }
});

after(async () => {
  await ctx?.close();
  if (lab && lab.exitCode === null) {
    const done = new Promise(r => lab.on('exit', r));
    lab.kill('SIGTERM');
    await done;
  }
});

/** The viewer in the `i`th `memscape.show` output, once it shows `name`'s statistics. */
async function viewer(page, i, name) {
  const el = page.locator('.jp-OutputArea-output iframe.memscape').nth(i);
  await el.scrollIntoViewIfNeeded();
  const frame = await (await el.elementHandle()).contentFrame();
  await frame.waitForFunction(n => document.querySelector('#stats .file-line')?.textContent.startsWith(n + ' '), name, { timeout: 120000 });
  await frame.waitForTimeout(300);
  return frame;
}

async function checkFigures(frame) {
  const got = await statsOf(frame);
  for (const k of ['segments', 'total_reserved', 'total_allocated', 'free_internal', 'free_external']) assert.equal(got[k], EXPECTED.segsum[k], k);
  const amt = EXPECTED.memoryviz.devices['0'].active_memory_timeline;
  assert.equal(got['timeline.peak_bytes'], amt.max_at_time_peak);
  assert.equal(got['timeline.elements'], amt.elements);
  assert.equal(got['timeline.final_bytes'], amt.final_live_bytes);
  const painted = await paintedPixels(frame);
  assert.ok(painted > 10000, `timeline drawn (${painted} pixels)`);
}

test('JupyterLab runs the example notebook and shows the viewer inline with PyTorch\'s figures, offline', async () => {
  ctx = await browser();
  const requests = [], sockets = [], errors = [];
  ctx.on('request', r => requests.push({ url: r.url(), frame: r.frame()?.url() }));
  const page = await ctx.newPage();
  page.on('websocket', ws => sockets.push(ws.url()));
  page.on('pageerror', e => errors.push(e.message));
  try {
    mkdirSync(SHOTS, { recursive: true });
    // The notebook's kernel (its kernelspec: this environment's Python 3), started as
    // JupyterLab starts one, so that opening the notebook asks nothing.
    const api = (path, init) => fetch(`${base}/api/${path}`, { ...init, headers: { Authorization: `token ${token}` } })
      .then(r => { assert.ok(r.ok, `${path}: ${r.status}`); return r.json(); });
    const session = await api('sessions', { method: 'POST',
      body: JSON.stringify({ path: 'notebook.ipynb', name: 'notebook.ipynb', type: 'notebook', kernel: { name: 'python3' } }) });
    await page.goto(`${base}/lab/tree/notebook.ipynb?token=${token}`);
    await page.locator('.jp-Notebook .jp-Cell').first().waitFor({ timeout: 120000 });
    // Once the page is connected to the kernel and it is idle: Run > Run All Cells, as a user would.
    for (const deadline = Date.now() + 120000; ;) {
      const k = await api(`kernels/${session.kernel.id}`);
      if (k.connections > 0 && k.execution_state === 'idle') break;
      assert.ok(Date.now() < deadline, `the kernel did not become ready: ${JSON.stringify(k)}`);
      await page.waitForTimeout(250);
    }
    await page.locator('.lm-MenuBar-itemLabel', { hasText: /^Run$/ }).click();
    await page.locator('.lm-Menu-itemLabel', { hasText: /^Run All Cells$/ }).click();

    const first = await viewer(page, 0, 'cs336-fullstep.pickle');
    await checkFigures(first);
    // Jupyter asks whether it may fetch its news: no.
    const noNews = page.locator('.jp-toast-button', { hasText: /^No$/ });
    if (await noNews.isVisible()) await noNews.dispatchEvent('click');
    await page.screenshot({ path: join(SHOTS, '30-jupyterlab.png') });
    await first.locator('#stats').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SHOTS, '32-jupyterlab-statistics.png') });
    // The sandbox lets the viewer save its offline page.
    const [saved] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), first.locator('#save-html').click()]);
    assert.equal(saved.suggestedFilename(), 'cs336-fullstep.pickle.html');
    assert.match(readFileSync(await saved.path(), 'utf8'), /connect-src 'none'/);
    const second = await viewer(page, 1, 'from-a-dict.pickle');
    await checkFigures(second);
    const amt = EXPECTED.memoryviz.devices['0'].active_memory_timeline;
    await page.locator('.jp-OutputArea-output pre', { hasText: /^peak / }).waitFor({ timeout: 60000 });
    const printed = await page.locator('.jp-OutputArea-output pre', { hasText: /^peak / }).textContent();
    assert.equal(printed.trim(), `peak ${amt.max_at_time_peak.toLocaleString('en-US')} bytes allocated, ${EXPECTED.segsum.total_reserved.toLocaleString('en-US')} reserved`);
    await page.screenshot({ path: join(SHOTS, '31-jupyterlab-dict.png') });

    // The viewers fetched nothing over the network (their scripts, wasm and snapshot are
    // blob:/data: from the page itself), and nothing at all left the page's origin.
    const origin = new URL(base).origin;
    const fromViewers = requests.filter(r => r.frame === 'about:srcdoc');
    assert.ok(fromViewers.length >= 2, `the viewers' own blob: loads are seen (${JSON.stringify(fromViewers)})`);
    assert.deepEqual(fromViewers.filter(r => !/^(blob|data):/.test(r.url)), [], 'the viewers made no request');
    const outside = [...requests.map(r => r.url), ...sockets]
      .filter(u => !/^(blob|data|about):/.test(u))
      .filter(u => new URL(u.replace(/^ws/, 'http')).origin !== origin);
    assert.deepEqual(outside, [], 'no request outside the page\'s origin');
    assert.ok(requests.length > 10, `JupyterLab's own requests were seen (${requests.length})`);
  } catch (e) {
    await page.screenshot({ path: join(SHOTS, '30-jupyterlab-failed.png') });
    console.log(`jupyter lab said:\n${labLog}`);
    throw e;
  }
  assert.deepEqual(errors, []);
});
