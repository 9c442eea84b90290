// The dashboard in a real browser: Debian's Chromium, driven by playwright-core.
//
//   node tests/browser/dashboard.mjs BASE_URL JOB_ID PAIR_ID SCREENSHOT.png
//
// BASE_URL is the dashboard's address (with ?token=T when the server wants one); JOB_ID a job
// that is running and will stay so for a while; PAIR_ID a pair the server reports. Checks:
//   1. the job's row shows live progress: `.progress[data-done]` grows while `.state` says
//      running, and the page follows the job on /jobs/JOB_ID/events;
//   2. the pair's row has text in its .lag, .backlog, .health and .freshness cells, and the
//      freshness cell its chart of the last hour;
//   3. the form, sent with a bad source (nope://x), shows the API's error in #new-job-error,
//      next to the field the API names;
//   4. the page logs no console error and throws nothing (only the 400 of check 3 is expected).
// A screenshot goes to SCREENSHOT.png (also when a check fails). Exit 0 when every check
// passes, else 1 with one line saying why.
//
// Environment (scripts/services.sh env prints both; scripts/services.sh browser installs them):
//   SLATE_TEST_CHROMIUM     Chromium binary                    (default /usr/bin/chromium)
//   SLATE_TEST_PLAYWRIGHT   the playwright-core package folder (required)
//   SLATE_DASHBOARD_TIMEOUT seconds for the whole run          (default 90)

import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [base, jobId, pairId, shot] = process.argv.slice(2);
if (!base || !jobId || !pairId || !shot) {
  console.error("usage: node dashboard.mjs BASE_URL JOB_ID PAIR_ID SCREENSHOT.png");
  process.exit(2);
}
const chromiumPath = process.env.SLATE_TEST_CHROMIUM || "/usr/bin/chromium";
const playwrightDir = process.env.SLATE_TEST_PLAYWRIGHT;
const budgetMs = 1000 * Number(process.env.SLATE_DASHBOARD_TIMEOUT || 90);
const deadline = Date.now() + budgetMs;

class Fail extends Error {}
const fail = (why) => { throw new Fail(why); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const left = () => Math.max(1000, deadline - Date.now());

if (!playwrightDir || !fs.existsSync(path.join(playwrightDir, "package.json"))) {
  console.error(`dashboard: FAIL: playwright-core not found (SLATE_TEST_PLAYWRIGHT=${playwrightDir || ""}); ` +
    "run scripts/services.sh browser, then eval \"$(scripts/services.sh env)\"");
  process.exit(1);
}
if (!fs.existsSync(chromiumPath)) {
  console.error(`dashboard: FAIL: no Chromium at ${chromiumPath}; run scripts/services.sh browser`);
  process.exit(1);
}
const { chromium } = createRequire(import.meta.url)(playwrightDir);

const consoleErrors = [];
const eventStreams = new Set();
let badPost = null; // the POST /jobs this script makes on purpose, answered 400

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "slate-dashboard-chromium-"));
let context;
let page;
let code = 0;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
    timeout: left(),
  });
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(left());
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const url = msg.location() && msg.location().url ? msg.location().url : "";
    // Chromium logs every 4xx answer; the one check 3 asks for is expected.
    if (badPost && /status of 400/.test(msg.text()) && new URL(url, base).pathname.endsWith("/jobs")) return;
    consoleErrors.push(msg.text() + (url ? ` (${url})` : ""));
  });
  page.on("pageerror", (err) => consoleErrors.push("uncaught: " + err.message));
  // the job's event stream, answered as one (a token refused here would leave only polling)
  page.on("response", (res) => {
    const m = new URL(res.url()).pathname.match(/\/jobs\/(\d+)\/events$/);
    if (m && res.status() === 200 && /^text\/event-stream/.test(res.headers()["content-type"] || "")) {
      eventStreams.add(m[1]);
    }
  });

  const resp = await page.goto(base, { waitUntil: "domcontentloaded" });
  if (!resp || !resp.ok()) fail(`GET ${base} answered ${resp ? resp.status() : "nothing"}`);
  if ((await page.title()) !== "slate") fail(`unexpected page title ${JSON.stringify(await page.title())}`);

  // 1. live progress of the running job
  const row = `#jobs tr[data-job-id="${jobId}"]`;
  await page.waitForSelector(row, { timeout: Math.min(left(), 20000) }).catch(async () => {
    const banner = await page.$eval("#auth", (e) => (e.hidden ? "" : e.textContent.trim())).catch(() => "");
    const status = await page.$eval("#status", (e) => e.textContent.trim()).catch(() => "");
    fail(`no row ${row} within 20 s` + (banner ? `; the page says: ${banner}` : status ? `; status: ${status}` : ""));
  });
  const read = () => page.$eval(row, (tr) => {
    const p = tr.querySelector(".progress");
    const s = tr.querySelector(".state");
    return {
      done: p && p.hasAttribute("data-done") ? Number(p.getAttribute("data-done")) : NaN,
      state: s ? s.textContent.trim() : "",
    };
  });
  let first = null;
  let seen = [];
  for (;;) {
    const r = await read();
    if (!Number.isFinite(r.done)) fail(`${row} .progress has no numeric data-done`);
    seen.push(`${r.state}:${r.done}`);
    if (r.state.startsWith("running")) {
      if (first === null) first = r.done;
      else if (r.done > first) break;
    } else if (/^(succeeded|failed|cancelled|interrupted)/.test(r.state)) {
      fail(`job ${jobId} ended (${r.state}) before its progress was seen to grow: ${seen.slice(-8).join(" ")}`);
    }
    if (Date.now() > deadline - 15000) {
      fail(`job ${jobId}: data-done never grew while running: ${seen.slice(-8).join(" ")}`);
    }
    await sleep(100);
  }
  if (!eventStreams.has(String(jobId))) fail(`the page never opened /jobs/${jobId}/events (200, text/event-stream)`);

  // 2. the pair's row
  const prow = `#pairs tr[data-pair-id="${pairId}"]`;
  await page.waitForSelector(prow, { timeout: Math.min(left(), 10000) }).catch(() =>
    fail(`no row ${prow} within 10 s`));
  for (const cell of [".lag", ".backlog", ".health", ".freshness"]) {
    const text = await page.$eval(prow, (tr, c) => {
      const td = tr.querySelector(c);
      return td ? td.textContent.trim() : null;
    }, cell);
    if (text === null) fail(`${prow} has no ${cell} cell`);
    if (!text) fail(`${prow} ${cell} is empty`);
  }
  // the freshness chart of the last hour: an SVG with the target's line
  const chart = await page.$eval(prow, (tr) => {
    const svg = tr.querySelector(".freshness svg.chart");
    return svg ? svg.querySelectorAll("line").length : -1;
  });
  if (chart < 1) fail(`${prow} .freshness has no chart with its target line`);

  // 3. the form with a bad source
  await page.selectOption('#new-job [name="kind"]', "copy");
  await page.fill('#new-job [name="src"]', "nope://x");
  await page.fill('#new-job [name="dst"]', path.join(os.tmpdir(), "slate-dashboard-never-written"));
  const answer = page.waitForResponse((r) => r.request().method() === "POST" &&
    new URL(r.url()).pathname.endsWith("/jobs"));
  badPost = true;
  await page.click('#new-job [type="submit"]');
  const res = await answer;
  if (res.status() !== 400) fail(`POST /jobs with src nope://x answered ${res.status()}, not 400`);
  let body = {};
  try { body = await res.json(); } catch (_) { fail("the 400 of POST /jobs is not JSON"); }
  await page.waitForFunction(() => {
    const e = document.querySelector("#new-job-error");
    return e && e.textContent.trim().length > 0;
  }, null, { timeout: Math.min(left(), 5000) }).catch(() => fail("#new-job-error stayed empty after a 400"));
  const shown = await page.$eval("#new-job-error", (e) => ({
    text: e.textContent.trim(),
    field: e.closest("[data-field]") ? e.closest("[data-field]").getAttribute("data-field") : null,
    visible: !!(e.offsetWidth || e.offsetHeight),
  }));
  if (!shown.visible) fail("#new-job-error has text but is not visible");
  if (body.error && shown.text !== body.error) {
    fail(`#new-job-error says ${JSON.stringify(shown.text)}, the API said ${JSON.stringify(body.error)}`);
  }
  if (body.field && shown.field !== body.field) {
    fail(`the error names field ${body.field} but is shown by ${shown.field || "no field"}`);
  }

  // a few more samples for the chart, then the picture
  await sleep(Math.min(4500, Math.max(0, deadline - Date.now() - 5000)));
  if (consoleErrors.length) fail(`console error: ${consoleErrors[0]}` +
    (consoleErrors.length > 1 ? ` (and ${consoleErrors.length - 1} more)` : ""));
  console.log(`dashboard: ok: job ${jobId} advanced live from ${first}; pair ${pairId} shown; ` +
    `form error ${JSON.stringify(shown.text)}`);
} catch (e) {
  code = 1;
  const why = e instanceof Fail ? e.message : `${e.name}: ${String(e.message).split("\n")[0]}`;
  console.error(`dashboard: FAIL: ${why}`);
} finally {
  if (page) {
    try {
      fs.mkdirSync(path.dirname(path.resolve(shot)), { recursive: true });
      await page.screenshot({ path: shot, fullPage: true, timeout: 15000 });
    } catch (e) {
      console.error(`dashboard: screenshot failed: ${String(e.message).split("\n")[0]}`);
      code = 1;
    }
  }
  if (context) await context.close().catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
