// The tape page in headless Chromium (harness.mjs: Debian's chromium through playwright-core): step
// with key presses and clicks, assert what the page shows, and that it logs no console error and
// asks for nothing outside its own file.
//
//   node page_test.mjs PAIR.html SINGLE.html SCREENSHOT.png
//
// PAIR.html is `tape html good.json bad.json` of tiny_step (correct run, overwrite-bug run),
// SINGLE.html `tape html good.json`. The screenshot shows the pair at the step where the gradient
// of the repeated token "red" is lost. The control "rows as one step" (key r) folds the gather's
// row contributions into one step, and back. Exit 0 when every check passes, 1 otherwise.
import assert from 'node:assert/strict';
import { check, checksPassed, launch, open as openIn, text } from './harness.mjs';

const [pairPath, singlePath, screenshotPath] = process.argv.slice(2);
if (!screenshotPath) {
  console.error('usage: node page_test.mjs PAIR.html SINGLE.html SCREENSHOT.png');
  process.exit(1);
}

const browser = await launch();
const open = (path) => openIn(browser, path);

try {
  // ---- the pair: correct run and overwrite-bug run side by side
  const { page, problems } = await open(pairPath);
  await check('opens at step 1 of 18 with both runs', async () => {
    assert.equal(await text(page, '#step-label'), 'Step 1 of 18');
    assert.match(await text(page, '#panel-0 h2'), /accumulate\s+good\.json/i);
    assert.match(await text(page, '#panel-1 h2'), /overwrite-bug\s+bad\.json/i);
    assert.equal(await page.locator('#panel-0 svg g.node').count(), 9);
    assert.equal(await page.locator('#panel-1 svg g.node').count(), 9);
    assert.equal(await page.locator('#first').isDisabled(), true);
  });
  await check('names the loss before any stepping', async () => {
    const losses = await text(page, '#losses');
    assert.match(losses, /Where gradient is lost/);
    assert.match(losses, /step 17.*bad\.json.*gather.*d embedding, row 0 \(red\)/s);
    assert.match(losses, /good\.json \(accumulate\).*added.*\[0\.04729, 0\.1643\]/s);
  });
  await check('right arrow steps forward: step 5 is the gather, reading embedding and input_ids', async () => {
    for (let i = 0; i < 4; i++) await page.keyboard.press('ArrowRight');
    assert.equal(await text(page, '#step-label'), 'Step 5 of 18');
    assert.match(await text(page, '#phase'), /forward · value 5 of 9/);
    assert.match(await text(page, '#panel-0 .detail h3'), /#4 x = gather\(embedding, input_ids\)/);
    assert.equal(await page.locator('#panel-0 svg g.node.current').getAttribute('data-id'), '1');
    assert.equal(await page.locator('#panel-0 svg path.edge.reads').count(), 2);
    assert.equal(await page.locator('#panel-0 svg g.node.future').count(), 4);
  });
  await check('End goes to the summary: the correct run passes the gradient check, the bug fails it', async () => {
    await page.keyboard.press('End');
    assert.equal(await text(page, '#step-label'), 'Step 18 of 18');
    assert.match(await text(page, '#panel-0 .detail'), /gradient check.*PASSED/is);
    assert.match(await text(page, '#panel-1 .detail'), /gradient check.*FAILED.*embedding \(max error 0\.08215\)/is);
    assert.equal(await page.locator('#next').isDisabled(), true);
  });
  await check('left arrow steps back to step 17: the overwrite is shown as a loss with what was discarded', async () => {
    await page.keyboard.press('ArrowLeft');
    assert.equal(await text(page, '#step-label'), 'Step 17 of 18');
    assert.match(await text(page, '#phase'), /backward · visit 4 of 4 \(gather\)/);
    const bad = await text(page, '#panel-1 .verdict');
    assert.match(bad, /LOST/);
    assert.match(bad, /d embedding, row 0 \(red\) held \[0\.02365, 0\.08215\]/);
    assert.match(bad, /Adding would have kept both: \[0\.04729, 0\.1643\]/);
    assert.match(await text(page, '#panel-0 .verdict'), /ADDED.*now holds \[0\.04729, 0\.1643\]/s);
    assert.equal(await page.locator('#panel-1 svg path.flow.now.lost').count(), 1);
    assert.equal(await page.locator('#panel-1 svg g.node.receiving.lost').getAttribute('data-id'), '-1');
    assert.equal(await page.locator('#panel-1 .detail tr.hit.lost th').innerText(), 'red');
  });
  await check('Home, the loss button and space move as labelled', async () => {
    await page.keyboard.press('Home');
    assert.equal(await text(page, '#step-label'), 'Step 1 of 18');
    await page.locator('#losses button[data-step="16"]').click();
    assert.equal(await text(page, '#step-label'), 'Step 17 of 18');
    await page.keyboard.press(' ');
    assert.equal(await text(page, '#step-label'), 'Step 18 of 18');
    await page.locator('#back').click();
    assert.equal(await text(page, '#step-label'), 'Step 17 of 18');
  });
  await check('final gradients mark the rows that differ between the runs', async () => {
    assert.deepEqual(await page.locator('#finals tr.differs th').allInnerTexts(), ['red', 'red']);
  });
  await page.screenshot({ path: screenshotPath, fullPage: true });
  await check('rows as one step (r): the gather\'s three rows are one step, the loss among them', async () => {
    assert.equal(await page.locator('#rows-as-one').isVisible(), true);
    await page.keyboard.press('Home');
    await page.keyboard.press('r');
    assert.equal(await text(page, '#step-label'), 'Step 1 of 16');
    assert.equal(await page.locator('#rows-as-one').isChecked(), true);
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowLeft');
    assert.equal(await text(page, '#step-label'), 'Step 15 of 16');
    assert.match(await text(page, '#phase'), /backward · visit 4 of 4 \(gather\)/);
    assert.match(await text(page, '#panel-1 .detail'), /flows to · d embedding, 3 rows/);
    assert.deepEqual(await page.locator('#panel-1 .detail table.rows td:nth-child(2)').allInnerTexts(),
      ['row 0 (red)', 'row 1 (green)', 'row 0 (red)']);
    assert.match(await text(page, '#panel-1 .verdict'), /LOST 1 of these 3 contributions overwrote a row/);
    assert.match(await text(page, '#panel-0 .verdict'), /ROWS 2 set a row that held no gradient, 1 added to a row that did/);
    assert.equal(await page.locator('#panel-1 svg g.node.receiving.lost').getAttribute('data-id'), '-1');
    assert.match(await text(page, '#losses'), /step 15.*bad\.json.*gather.*d embedding, row 0 \(red\)/s);
    assert.equal(new URL(page.url()).hash, '#rows&step=15');
  });
  await check('unticking it walks the rows one by one again, at the first of them', async () => {
    await page.locator('#rows-as-one').click();
    assert.equal(await text(page, '#step-label'), 'Step 15 of 18');
    assert.match(await text(page, '#panel-0 .detail'), /flows to · d embedding, row 0 \(red\)/);
    assert.equal(new URL(page.url()).hash, '#step=15');
  });
  await check('#rows&step=N opens a page with the rows as one step', async () => {
    await page.goto(`${page.url().split('#')[0]}#rows&step=15`);
    await page.reload();
    assert.equal(await text(page, '#step-label'), 'Step 15 of 16');
    assert.equal(await page.locator('#rows-as-one').isChecked(), true);
  });
  await check('no console errors and no requests outside the page', () => assert.deepEqual(problems, []));

  // ---- one run alone
  const single = await open(singlePath);
  await check('a single dump: one panel, no loss list, n steps forward', async () => {
    assert.equal(await single.page.locator('.panel').count(), 1);
    assert.equal(await single.page.locator('#losses').isHidden(), true);
    await single.page.keyboard.press('n');
    assert.equal(await text(single.page, '#step-label'), 'Step 2 of 18');
    assert.deepEqual(single.problems, []);
  });
  console.log(`page test: ${checksPassed()} checks passed; screenshot ${screenshotPath}`);
} catch (e) {
  console.error(`FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
