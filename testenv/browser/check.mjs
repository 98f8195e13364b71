// Opens a `smelt docs` page in headless Chromium (Debian's, driven by playwright-core) and
// prints what a person would see, as JSON: the console's errors and failed requests, the
// DAG's nodes (flows with their state, tables), each flow's charts with their points, and
// the sections the nodes link to; a screenshot of the page is written to the second path.
// Usage: node check.mjs PAGE.html SCREENSHOT.png [--strict]
// With --strict it also fails (exit 1, saying why) on a console error, a request, a DAG
// without nodes or a node that links nowhere (CI's check of every example's page).
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const [page_path, shot, mode] = process.argv.slice(2);
const executablePath = process.env.SMELT_CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  const requests = [];
  page.on("request", (r) => { if (!r.url().startsWith("file:") && !r.url().startsWith("data:")) requests.push(r.url()); });
  await page.goto(pathToFileURL(page_path).href, { waitUntil: "load" });
  const seen = await page.evaluate(() => {
    const nodes = [...document.querySelectorAll("svg.dag g.node")].map((g) => {
      const a = g.closest("a");
      const href = a ? a.getAttribute("href") : null;
      const box = g.getBoundingClientRect();
      return {
        name: g.dataset.name,
        classes: [...g.classList],
        href,
        target: href ? !!document.getElementById(href.slice(1)) : false,
        visible: box.width > 0 && box.height > 0,
      };
    });
    const flows = [...document.querySelectorAll("article.flow")].map((f) => ({
      name: f.dataset.name,
      classes: [...f.classList],
      charts: [...f.querySelectorAll("figure.chart")].map((c) => ({
        metric: c.dataset.metric,
        points: c.querySelectorAll(".point").length,
      })),
      samples: f.querySelectorAll("table.samples tr").length,
      error: (f.querySelector("pre.error") || {}).textContent || null,
    }));
    const tables = [...document.querySelectorAll("article.table")].map((t) => t.dataset.name);
    const svg = document.querySelector("svg.dag");
    const size = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
    return { title: document.title, nodes, flows, tables, dag: { width: size.width, height: size.height } };
  });
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify({ errors, requests, ...seen }));
  if (mode === "--strict") {
    const wrong = [
      ...errors.map((e) => `console error: ${e}`),
      ...requests.map((r) => `the page fetched ${r}`),
      ...(seen.nodes.length === 0 ? ["the DAG has no nodes"] : []),
      ...seen.nodes.filter((n) => !n.target || !n.visible).map((n) => `node ${n.name} links nowhere or is hidden`),
    ];
    if (wrong.length > 0) {
      console.error(wrong.join("\n"));
      process.exitCode = 1;
    }
  }
} finally {
  await browser.close();
}
