// The master's web console in a real headless browser (Debian's chromium through
// playwright-core): every page loads without console errors, the numbers shown equal
// `cv report --json`, and a walk from the overview reaches a file's block locations.
//
//   MINI_CLUSTER=.../examples/mini_cluster CV=.../cv node console.test.mjs
//   SCREENSHOTS=docs/ also saves one PNG of each page there.
// Run by bin/browser-test.sh, which builds both binaries first.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const MINI = process.env.MINI_CLUSTER;
const CV = process.env.CV;
const BROWSER = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOTS || '';
const DEADLINE_MS = 120_000;

let passed = 0;
let failed = 0;
function check(name, ok, detail = '') {
  if (ok) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name} ${detail}`);
  }
}

function startCluster() {
  const child = spawn(MINI, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the MiniCluster did not start in 60 s')), 60_000);
    child.on('exit', (code) => reject(new Error(`mini_cluster exited with ${code}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      resolve({ child, info: JSON.parse(line) });
    });
  });
}

// every element of `page` with data-key=`key` inside `scope`: [{value, text}]
async function cells(page, scope, key) {
  return page.$$eval(`${scope} [data-key="${key}"]`, (els) =>
    els.map((e) => ({ value: e.getAttribute('data-value'), text: e.textContent.trim() })));
}

async function one(page, scope, key) {
  const c = await cells(page, scope, key);
  return c.length ? c[0] : null;
}

async function main() {
  const { child, info } = await startCluster();
  const base = `http://${info.web}`;
  const userData = mkdtempSync(join(tmpdir(), 'curvine-chromium-'));
  let ctx;
  try {
    const report = JSON.parse(execFileSync(CV, ['--conf', info.conf, 'report', '--json'], { encoding: 'utf8' }));
    ctx = await chromium.launchPersistentContext(userData, {
      executablePath: BROWSER,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1200, height: 800 },
    });
    const page = ctx.pages()[0] || (await ctx.newPage());
    page.setDefaultTimeout(20_000);
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(`${page.url()}: ${m.text()}`); });
    page.on('pageerror', (e) => errors.push(`${page.url()}: ${e.message}`));
    const shot = async (name) => {
      if (SHOTS) await page.screenshot({ path: join(SHOTS, `console-${name}.png`), fullPage: true });
    };
    const visit = async (what, action) => {
      const resp = await action();
      check(`${what} loads`, !resp || resp.status() === 200, resp ? `status ${resp.status()}` : '');
    };

    // overview: the report's numbers
    await visit('overview', () => page.goto(`${base}/`));
    for (const k of ['files', 'dirs', 'blocks', 'capacity', 'used', 'workers_live', 'workers_lost']) {
      const c = await one(page, '', k);
      check(`overview ${k} = cv report`, c && Number(c.value) === Number(report[k]), `${c && c.value} vs ${report[k]}`);
    }
    for (const k of ['under_replicated', 'missing_blocks', 'copies_in_flight']) {
      const c = await one(page, '#replication', `replication.${k}`);
      check(`overview replication ${k} = cv report`, c && Number(c.value) === report.replication[k]);
    }
    const cid = await one(page, '#cluster', 'cluster_id');
    check('overview cluster id = cv report', cid && cid.text === report.cluster_id);
    for (const t of report.tiers) {
      const cap = await one(page, `#capacity tr[data-tier="${t.tier}"]`, 'tier.capacity');
      const used = await one(page, `#capacity tr[data-tier="${t.tier}"]`, 'tier.used');
      check(`overview ${t.tier} capacity and used = cv report`,
        cap && used && Number(cap.value) === t.capacity && Number(used.value) === t.used);
    }
    const taskNames = async (scope) =>
      page.$$eval(`${scope} tr[data-task]`, (els) => els.map((e) => e.getAttribute('data-task')));
    check('overview lists the master tasks of cv report',
      JSON.stringify(await taskNames('#tasks')) === JSON.stringify(report.tasks.map((t) => t.name)),
      JSON.stringify(report.tasks.map((t) => t.name)));
    await shot('overview');

    // workers: one row group per worker, its numbers
    await visit('workers', () => Promise.all([page.waitForNavigation(), page.click('#to-workers')]).then(([r]) => r));
    check('workers page reached from the overview', page.url().endsWith('/workers'));
    for (const w of report.workers) {
      const scope = `#workers tr[data-worker="${w.id}"]`;
      const addr = await one(page, scope, 'address');
      const state = await one(page, scope, 'state');
      check(`worker ${w.id} address and state = cv report`,
        addr && addr.text === w.address && state && state.text === w.state);
      const caps = (await cells(page, scope, 'tier.capacity')).map((c) => Number(c.value));
      check(`worker ${w.id} tier capacities = cv report`,
        JSON.stringify(caps) === JSON.stringify(w.tiers.map((t) => t.capacity)));
      const names = await taskNames(`#tasks-${w.id}`);
      check(`worker ${w.id} tasks = cv report`,
        names.length > 0 && JSON.stringify(names) === JSON.stringify(w.tasks.map((t) => t.name)),
        JSON.stringify(names));
    }
    await shot('workers');

    // browse: overview -> / -> console -> data -> big.bin, then its blocks
    await page.goto(`${base}/`);
    await Promise.all([page.waitForNavigation(), page.click('#to-browse')]);
    await Promise.all([page.waitForNavigation(), page.click('#entries a:text-is("console")')]);
    check('browse reaches /console', (await page.title()).includes('/console'));
    await Promise.all([page.waitForNavigation(), page.click('#entries a:text-is("data")')]);
    await shot('browse');
    await Promise.all([page.waitForNavigation(), page.click('#entries a:text-is("big.bin")')]);
    check('browse reaches the file', (await page.title()).includes('/console/data/big.bin'));
    const len = await one(page, '#file', 'len');
    check('file size shown', len && Number(len.value) === 20 << 20, len && len.value);
    const blockIds = [...new Set((await cells(page, '#blocks', 'block_id')).map((c) => c.text))];
    check('file shows its three blocks', blockIds.length === 3, JSON.stringify(blockIds));
    const known = new Set(report.workers.map((w) => w.address));
    const addrs = (await cells(page, '#blocks', 'address')).map((c) => c.text);
    check('every block on two workers of the report',
      addrs.length === 6 && addrs.every((a) => known.has(a)), JSON.stringify(addrs));
    const tiers = (await cells(page, '#blocks', 'tier')).map((c) => c.text);
    check('every replica names its tier', tiers.every((t) => ['MEM', 'SSD', 'HDD'].includes(t)));
    await shot('file');

    // configuration
    await visit('configuration', () => Promise.all([page.waitForNavigation(), page.click('#nav-conf')]).then(([r]) => r));
    const conf = await page.textContent('#conf');
    check('configuration shows the master section', conf.includes('rpc_port'));
    await shot('conf');

    // the API behind it is what cv prints
    const api = await (await page.request.get(`${base}/api/report`)).json();
    check('/api/report = cv report --json (counts)',
      ['files', 'dirs', 'blocks', 'capacity', 'cluster_id'].every((k) => api[k] === report[k]));

    check('no console errors', errors.length === 0, JSON.stringify(errors));
  } finally {
    if (ctx) await ctx.close();
    rmSync(userData, { recursive: true, force: true });
    child.stdin.end();
    await new Promise((r) => { child.on('exit', r); setTimeout(r, 20_000); });
  }
}

const timer = setTimeout(() => { console.log('FAIL deadline passed'); process.exit(1); }, DEADLINE_MS);
try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL ${e.stack || e}`);
}
clearTimeout(timer);
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
