// gpt's loss plot (the SVG that `gpt train --log FILE.csv` writes beside its log) in headless
// Chromium (Debian's /usr/bin/chromium through playwright-core): the page loads without errors,
// asks for nothing outside its file, and draws a train line with one point per logged step and a
// validation line with one point per evaluated step, inside the picture, falling from start to end.
//
//   node plot_test.mjs PLAYWRIGHT_CORE_DIR PLOT.svg LOG.csv SCREENSHOT.png
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [playwright, svgPath, csvPath, screenshotPath] = process.argv.slice(2);
if (!screenshotPath) {
  console.error('usage: node plot_test.mjs PLAYWRIGHT_CORE_DIR PLOT.svg LOG.csv SCREENSHOT.png');
  process.exit(1);
}
const { chromium } = await import(pathToFileURL(`${playwright}/index.mjs`).href);

const rows = readFileSync(csvPath, 'utf8').trim().split('\n').slice(1).map((l) => l.split(','));
const evaluated = rows.filter((r) => r[2] !== '').length;

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 800, height: 500 } });
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => { if (!r.url().startsWith('file:')) problems.push(`request outside the file: ${r.url()}`); });
  await page.goto(pathToFileURL(svgPath).href);

  const lines = await page.evaluate(() => {
    const svg = document.querySelector('svg');
    const box = svg.viewBox.baseVal;
    const line = (id) => {
      const el = document.getElementById(id);
      if (!el) return null;
      const points = Array.from(el.points).map((p) => [p.x, p.y]);
      const r = el.getBoundingClientRect();
      return { points, width: r.width, height: r.height };
    };
    return { width: box.width, height: box.height, train: line('train'), validation: line('validation'),
      text: svg.textContent };
  });
  assert.ok(lines.train && lines.validation, 'the plot has a train and a validation line');
  assert.equal(lines.train.points.length, rows.length, 'one train point per logged step');
  assert.equal(lines.validation.points.length, evaluated, 'one validation point per evaluation');
  assert.ok(evaluated >= 1, 'the run evaluated at least once');
  for (const [x, y] of [...lines.train.points, ...lines.validation.points])
    assert.ok(x >= 0 && x <= lines.width && y >= 0 && y <= lines.height, `point (${x}, ${y}) lies inside the picture`);
  assert.ok(lines.train.width > 0.5 * lines.width, 'the train line spans the steps');
  const first = lines.train.points[0][1], last = lines.train.points[lines.train.points.length - 1][1];
  assert.ok(last > first, 'the train loss falls (its last point lies lower in the picture than its first)');
  assert.match(lines.text, /train loss/);
  assert.match(lines.text, /validation loss/);
  assert.deepEqual(problems, [], 'no console errors and no requests outside the file');
  await page.screenshot({ path: screenshotPath });
  console.log(`ok  the plot: ${rows.length} train points, ${evaluated} validation points, no errors; ` +
    `screenshot ${screenshotPath}`);
} catch (e) {
  failed = true;
  console.log(`FAIL ${e.message}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
