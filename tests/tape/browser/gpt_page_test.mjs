// The tape page of a GPT in headless Chromium (harness.mjs): one training step of the tiny config
// from tapegrad::nn (tests/tape/gpt_dump.cpp) and a GPT of 500 blocks (over 5,000 nodes). Each page
// becomes ready (its 'tape-ready' mark, set after the first frame) with a few hundred elements in
// the DOM whatever the tape's size, which is what keeps it quick; the time from navigation start is
// printed, never asserted (a test's wall clock says more about the machine's load than the page).
// On the tiny GPT: the outline groups values by scope, collapsed,
// groups expand and collapse (their rows enter and leave the DOM), the search finds values by name
// and expands their groups, and stepping marks the groups that hold the step's values; the dump's
// vocabulary shows the batch as tokens, and "rows as one step" folds the embeddings' rows.
//
//   node gpt_page_test.mjs GPT.html BIG.html SCREENSHOT.png
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { check, checksPassed, launch, open, text } from './harness.mjs';

const [gptPath, bigPath, screenshotPath] = process.argv.slice(2);
if (!screenshotPath) {
  console.error('usage: node gpt_page_test.mjs GPT.html BIG.html SCREENSHOT.png');
  process.exit(1);
}
// the page draws what is open, not what the tape holds: a bound on its elements at any size
const MAX_ELEMENTS = 400;
const browser = await launch();

// Waits for the page's ready mark; returns milliseconds from navigation start, and what it holds.
async function readiness(page, path, name) {
  await page.waitForSelector('body[data-ready]', { timeout: 30000 });
  const figures = await page.evaluate(() => ({
    ms: performance.getEntriesByName('tape-ready')[0].startTime,
    values: tapes[0].values.length,
    nodes: tapes[0].byNode.size,
    steps: count,
    elements: document.getElementsByTagName('*').length,
  }));
  const mb = (statSync(path).size / 1048576).toFixed(1);
  console.log(`${name}: ready ${figures.ms.toFixed(0)} ms after navigation start (${figures.values} values, ` +
    `${figures.nodes} nodes, ${figures.steps} steps, ${mb} MiB page, ${figures.elements} elements)`);
  return figures;
}

const group = (name) => `#panel-0 li.group[data-name="${name}"]`;
const head = (name) => `${group(name)} > .ghead`;
const topGroups = (page) => page.locator('#panel-0 .tree > li.group').evaluateAll((els) => els.map((e) => e.dataset.name));
const classesOf = (page, selector) => page.locator(selector).evaluate((e) => [...e.classList]);

try {
  const { page, problems } = await open(browser, gptPath);
  const tiny = await readiness(page, gptPath, 'tiny GPT page');
  await check(`the tiny GPT's page is ready with at most ${MAX_ELEMENTS} elements`,
    () => assert.ok(tiny.elements <= MAX_ELEMENTS, `${tiny.elements} elements`));
  await check('the outline starts collapsed: the model\'s layers at the top, no block\'s rows in the DOM', async () => {
    assert.deepEqual(await topGroups(page), ['wpe', 'wte', 'h', 'ln_f', 'lm_head']);
    assert.equal(await page.locator('#panel-0 svg.graph').count(), 0);
    assert.equal(await page.locator('#panel-0 .tree li.row').count(), 5);  // outside every scope: ids, positions, the sum, targets, loss
    assert.equal(await page.locator(group('h.0')).count(), 0);
    assert.match(await text(page, head('h')), /h\s*20 nodes\s*linear 8, add 4, layer_norm 4, qkv_attention 2, …/);
  });
  await check('groups expand and collapse; a collapsed group\'s rows leave the DOM', async () => {
    await page.locator(head('h')).click();
    assert.deepEqual(await page.locator(`${group('h')} > .members > li.group`).evaluateAll((els) => els.map((e) => e.dataset.name)), ['h.0', 'h.1']);
    await page.locator(head('h.0')).click();
    await page.locator(head('h.0.attn')).click();
    assert.deepEqual(await page.locator(`${group('h.0.attn')} > .members > li.group`).evaluateAll((els) => els.map((e) => e.dataset.name)),
      ['h.0.attn.c_attn', 'h.0.attn.c_proj']);
    assert.match(await text(page, `${group('h.0.attn')} > .members`), /qkv_attention/);
    assert.equal(await page.locator(head('h.0.attn')).getAttribute('aria-expanded'), 'true');
    await page.locator(head('h')).click();
    assert.equal(await page.locator(`${group('h')} > .members > *`).count(), 0);
    assert.equal(await page.locator(group('h.0.attn')).count(), 0);
    await page.locator(head('h')).press('Enter');  // keys too; the step stays where it was
    assert.equal(await page.locator(group('h.0.attn')).count(), 1);  // expanded groups below stay expanded
    assert.equal(await text(page, '#step-label'), `Step 1 of ${tiny.steps}`);
    await page.locator('#panel-0 .collapse-all').click();
    assert.equal(await page.locator(group('h.0')).count(), 0);
  });
  await check('the search shows the values whose name holds the text, their groups expanded; clearing it collapses them again', async () => {
    await page.locator('#panel-0 .find').fill('c_fc');
    assert.equal(await text(page, '#panel-0 .found'), '6 values match');
    const rows = await page.locator('#panel-0 .tree li.row').allInnerTexts();
    assert.equal(rows.length, 6);
    assert.deepEqual(await topGroups(page), ['h']);
    assert.equal(await page.locator(group('h.1.mlp.c_fc')).count(), 1);
    assert.equal(await page.locator(group('h.1.attn')).count(), 0);
    await page.locator('#panel-0 .find').press('n');  // typing does not step
    assert.equal(await text(page, '#step-label'), `Step 1 of ${tiny.steps}`);
    await page.locator('#panel-0 .find').fill('');
    assert.deepEqual(await topGroups(page), ['wpe', 'wte', 'h', 'ln_f', 'lm_head']);
    assert.equal(await page.locator(group('h.0')).count(), 0);
  });
  await check('a found row opens its forward step; the step stays marked on the groups once they collapse', async () => {
    await page.locator('#panel-0 .find').fill('qkv_att');
    assert.equal(await text(page, '#panel-0 .found'), '2 values match');
    await page.locator('#panel-0 .tree li.row').first().click();
    assert.match(await text(page, '#phase'), /^forward · value \d+ of 62$/);
    assert.match(await text(page, '#panel-0 .detail h3'), /qkv_attention\(/);
    assert.ok((await classesOf(page, '#panel-0 .tree li.row.current')).length);
    for (const name of ['h', 'h.0', 'h.0.attn']) assert.ok((await classesOf(page, head(name))).includes('current'), name);
    await page.locator('#panel-0 .find').fill('');
    assert.equal(await page.locator('#panel-0 .tree li.row.current').count(), 0);  // its row left the DOM with h
    assert.ok((await classesOf(page, head('h'))).includes('current'));
    assert.match(await text(page, head('h')), /forward here|h/);
  });
  await check('the slider and the keys step through the backward; a step in a collapsed group marks its header', async () => {
    await page.locator('#scrub').fill('62');  // the first backward step: the loss's
    assert.equal(await text(page, '#step-label'), `Step 63 of ${tiny.steps}`);
    assert.match(await text(page, '#phase'), /backward · visit 1 of 28 \(cross_entropy\)/);
    assert.ok((await classesOf(page, '#panel-0 .tree li.row[data-index="61"]')).includes('visiting'));
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowLeft');  // the last contribution: a row of an embedding table
    assert.match(await text(page, '#phase'), /backward · visit 28 of 28 \(gather\)/);
    const marked = [];
    for (const name of ['wpe', 'wte']) if ((await classesOf(page, head(name))).includes('visiting')) marked.push(name);
    assert.equal(marked.length, 1);
    assert.ok((await classesOf(page, head(marked[0]))).includes('receiving'));
    assert.match(await text(page, '#panel-0 .detail'), new RegExp(`flows to · d ${marked[0]}\\.weight, row \\d+`));
  });
  await check('the vocabulary names the batch\'s tokens and the table\'s rows; an unlabelled input is named by its reader', async () => {
    await page.locator('#panel-0 .find').fill('ids');
    await page.locator('#panel-0 .tree li.row').first().click();
    assert.match(await text(page, '#panel-0 .detail h3'), /#\d+ ids/);
    assert.match(await text(page, '#panel-0 .detail'), /\[\\n, n, c, b, E, \?, t, r, …\] \(first 8 of 1024\)/);
    await page.locator('#panel-0 .find').fill('');
    // the positions: an input no label names and no op on the tape reads (the embedding reshapes it
    // with no node), named by shape; its reshape, by the gather that reads it
    const [positions, reshaped] = await page.evaluate(() => [
      tapes[0].values.findIndex((v) => v.kind === 'input' && !v.label),
      tapes[0].values.findIndex((v) => v.kind === 'activation' && !v.op && v.shape.length === 1 && v.shape[0] === 64)]);
    await page.locator('#scrub').fill(String(positions));
    assert.equal(await text(page, '#panel-0 .detail h3'), `#${positions} input (64,) i64`);
    await page.locator('#scrub').fill(String(reshaped));
    assert.match(await text(page, '#panel-0 .detail h3'), new RegExp(`^#${reshaped} activation to #\\d+ gather \\(input 1\\)$`));
    assert.match(await text(page, '#panel-0 .detail'), /First read by #\d+ gather\(wpe\.weight, #\d+ activation to #\d+ gather \(input 1\)\), as its input 1/);
  });
  await check(`rows as one step: the embeddings' rows fold, ${tiny.steps} steps become far fewer`, async () => {
    await page.evaluate(() => document.activeElement.blur());  // the keys are the slider's while it has the focus
    await page.keyboard.press('r');
    const folded = await page.evaluate(() => count);
    assert.equal(folded, tiny.steps - 1024 - 64 + 2);
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowLeft');
    assert.equal(await text(page, '#step-label'), `Step ${folded - 1} of ${folded}`);
    const detail = await text(page, '#panel-0 .detail');
    assert.match(detail, /flows to · d w[tp]e\.weight, (1024|64) rows/);
    assert.match(detail, /row contributions to \d+ distinct rows, one step/);
    assert.match(detail, /… and \d+ more rows/);
    await page.keyboard.press('r');
    assert.equal(await text(page, '#step-label'), `Step ${tiny.steps - (detail.includes('1024 rows') ? 1024 : 64)} of ${tiny.steps}`);
  });
  await page.locator(head('h')).click();
  await page.locator(head('h.0')).click();
  await page.locator(head('h.0.attn')).click();
  await page.locator('#scrub').fill(String(tiny.values + 40));
  await page.screenshot({ path: screenshotPath });
  await check('no console errors and no requests outside the page', () => assert.deepEqual(problems, []));

  // ---- thousands of nodes
  const big = await open(browser, bigPath);
  const many = await readiness(big.page, bigPath, 'GPT of 500 blocks page');
  await check(`a page of ${many.nodes} nodes is ready with at most ${MAX_ELEMENTS} elements, a few rows in the DOM`, async () => {
    assert.ok(many.nodes >= 5000, `${many.nodes} nodes`);
    assert.ok(many.elements <= MAX_ELEMENTS, `${many.elements} elements`);
    assert.ok(await big.page.locator('#panel-0 .tree li').count() < 20);
  });
  await check('its blocks expand, its search finds one layer, and it steps to the end', async () => {
    await big.page.locator(head('h')).click();
    assert.equal(await big.page.locator(`${group('h')} > .members > li.group`).count(), 500);
    await big.page.locator('#panel-0 .find').fill('h.239.mlp.c_fc');
    assert.equal(await text(big.page, '#panel-0 .found'), '3 values match');
    await big.page.locator('#last').click();  // the keys are the search box's while it has the focus
    assert.equal(await text(big.page, '#step-label'), `Step ${many.steps} of ${many.steps}`);
    assert.deepEqual(big.problems, []);
  });
  console.log(`gpt page test: ${checksPassed()} checks passed; screenshot ${screenshotPath}`);
} catch (e) {
  console.error(`FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
