// What the page tests share: Debian's /usr/bin/chromium driven by playwright-core (no browser
// download), a page opener that records every console error, page error and request leaving the
// file, and numbered checks that print as they pass.
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';

export async function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

let passed = 0;
export const checksPassed = () => passed;
export function check(what, fn) {
  return Promise.resolve(fn()).then(() => {
    passed++;
    console.log(`ok  ${what}`);
  });
}

// Opens a page; `problems` collects console errors, page errors and requests outside the page.
export async function open(browser, path) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    if (!r.url().startsWith('file:') && !r.url().startsWith('data:')) problems.push(`request outside the page: ${r.url()}`);
  });
  await page.goto(pathToFileURL(path).href);
  return { page, problems };
}

export const text = (page, selector) => page.locator(selector).innerText();
