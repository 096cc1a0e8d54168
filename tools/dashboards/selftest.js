#!/usr/bin/env node
// Proves that check.js fails on the mistakes it exists to catch: each case
// copies dashboards/ to a temporary folder, breaks one thing, runs the
// checks and requires a failure of the expected check with the expected
// message. A checker that quietly passes everything fails here.
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const { run } = require("./check.js");

const DASH_DIR = path.resolve(__dirname, "..", "..", "dashboards");
const MAIN = "captf-state-locks";
const DRILL = "captf-state-lock-object";

const panel = (d, id) => {
  const stack = [...d.panels];
  while (stack.length) {
    const p = stack.shift();
    if (p.id === id) return p;
    stack.push(...(p.panels || []));
  }
  throw new Error(`no panel ${id}`);
};
const firstExprPanel = (d) => d.panels.find((p) => (p.targets || []).length);
const setExpr = (d, fn) => {
  const t = firstExprPanel(d).targets[0];
  t.expr = fn(t.expr);
};

// [name, dashboard uid, mutate(dashboard), expected check prefix, expected problem substring]
const CASES = [
  ["export-only __inputs", MAIN, (d) => { d.__inputs = [{ name: "DS_PROMETHEUS", type: "datasource" }]; }, "schema:", "must NOT have additional properties (__inputs)"],
  ["export-only __requires", DRILL, (d) => { d.__requires = []; }, "lint:", "export-only key __requires"],
  ["misspelt panel key", MAIN, (d) => { const p = firstExprPanel(d); p.gridpos = p.gridPos; }, "schema:", "(gridpos)"],
  ["variable current without text/value", MAIN, (d) => { d.templating.list[0].current = {}; }, "schema:", "must have required property 'text'"],
  ["threshold value as string", MAIN, (d) => { panel(d, 2).fieldConfig.defaults.thresholds.steps[1].value = "1"; }, "schema:", "/thresholds/steps/1/value"],
  ["stale schemaVersion", MAIN, (d) => { d.schemaVersion = 39; }, "lint:", "schemaVersion 39"],
  ["hard-coded datasource", MAIN, (d) => { firstExprPanel(d).datasource = { type: "prometheus", uid: "prometheus" }; }, "lint:", "datasource must be"],
  ["datasource variable not first", MAIN, (d) => { d.templating.list.push(d.templating.list.shift()); }, "lint:", "the first variable must be"],
  ["All without allValue", MAIN, (d) => { delete d.templating.list[1].allValue; }, "lint:", "includeAll needs allValue"],
  ["transformation names a missing query", MAIN, (d) => { panel(d, 4).transformations[2].options.renameByName["Value #F"] = "x"; }, "lint:", 'field "Value #F"'],
  ["overlapping panels", MAIN, (d) => { panel(d, 5).gridPos.y = 6; }, "lint:", "overlaps"],
  ["link to a missing dashboard", MAIN, (d) => { d.description += " see /d/no-such-dashboard"; }, "lint:", "/d/no-such-dashboard"],
  ["range query in a stat", MAIN, (d) => { Object.assign(panel(d, 2).targets[0], { instant: false, range: true }); }, "lint:", "instant queries"],
  ["unbalanced parenthesis", MAIN, (d) => setExpr(d, (e) => e.replace(/\)$/, "")), "promql (lezer-promql", "syntax error"],
  ["unbalanced parenthesis (promtool)", MAIN, (d) => setExpr(d, (e) => e.replace(/\)$/, "")), "promql (promtool", "could not parse"],
  ["metric name typo", MAIN, (d) => { panel(d, 5).targets[0].expr = "max by (class) (captf_state_lock_helds)"; }, "semantics:", "captf_state_lock_helds is not in metrics.txt"],
  ["hard-coded range", MAIN, (d) => { panel(d, 10).targets[0].expr = panel(d, 10).targets[0].expr.replace("$__rate_interval", "5m"); }, "semantics:", "range [5m] must be [$__rate_interval]"],
  ["missing namespace filter", MAIN, (d) => { panel(d, 2).targets[0].expr = "count(captf_state_lock_overdue{kind=~\"$kind\"} == 1)"; }, "semantics:", 'must filter namespace=~"$namespace"'],
  ["= with a multi-value variable", MAIN, (d) => { panel(d, 2).targets[0].expr = "count(captf_state_lock_overdue{namespace=\"$namespace\", kind=~\"$kind\"} == 1)"; }, "semantics:", "needs =~"],
  ["=~ with a single-value variable", DRILL, (d) => { panel(d, 1).targets[0].expr = panel(d, 1).targets[0].expr.replace('name="$name"', 'name=~"$name"'); }, "semantics:", 'must filter name="$name"'],
  ["label the metric lacks", MAIN, (d) => { panel(d, 5).targets[0].expr = 'max by (class) (captf_state_locks_held{namespace=~"$namespace"})'; }, "semantics:", "captf_state_locks_held has no label namespace"],
  ["by label typo", MAIN, (d) => { panel(d, 11).targets[0].expr = panel(d, 11).targets[0].expr.replace("by (resource)", "by (resorce)"); }, "semantics:", "by/on label resorce"],
  ["legend label typo", MAIN, (d) => { panel(d, 5).targets[0].legendFormat = "{{clas}}"; }, "semantics:", "legend {{clas}}"],
  ["variable label typo", MAIN, (d) => { d.templating.list[2].query = 'label_values(captf_state_lock_held{namespace=~"$namespace"}, kinds)'; }, "semantics:", "has no label kinds"],
  ["undefined variable", MAIN, (d) => { panel(d, 2).targets[0].expr = panel(d, 2).targets[0].expr.replace('"$kind"', '"$knd"'); }, "queries.py", "unknown variable $knd"],
  ["missing cluster filter", MAIN, (d) => { panel(d, 2).targets[0].expr = 'count(captf_state_lock_overdue{namespace=~"$namespace", kind=~"$kind"} == 1)'; }, "semantics:", 'must filter cluster=~"$cluster"'],
  ["missing cluster filter on a Prometheus series", MAIN, (d) => { panel(d, 13).targets[0].expr = 'up{job="$job"}'; }, "semantics:", 'up must filter cluster=~"$cluster"'],
  ["missing cluster filter in a variable", MAIN, (d) => { d.templating.list[2].query = "label_values(captf_state_lock_held, namespace)"; }, "semantics:", 'must filter cluster=~"$cluster"'],
  ["cluster spanned with .*", DRILL, (d) => { panel(d, 1).targets[0].expr = panel(d, 1).targets[0].expr.replace('cluster=~"$cluster"', 'cluster=~".*"'); }, "semantics:", 'must filter cluster=~"$cluster"'],
  ["$__range in a range query", MAIN, (d) => { panel(d, 10).targets[0].expr = panel(d, 10).targets[0].expr.replace("$__rate_interval", "$__range"); }, "semantics:", "range [$__range] only in instant queries"],
  // The age family exists only behind --export-lock-age: a panel must compute time() - acquired.
  ["age family that is off by default", DRILL, (d) => { panel(d, 3).targets[0].expr = 'max(captf_state_lock_age_seconds{cluster=~"$cluster", namespace="$namespace", kind="$kind", name="$name"})'; }, "semantics:", "captf_state_lock_age_seconds is not in metrics.txt"],
  // issue 18
  ["unbounded per-object table query", MAIN, (d) => { const t = panel(d, 4).targets[4]; t.expr = t.expr.replace(/^topk\(100, (.*)\)$/, "$1"); }, "semantics:", "returns one series per object with no bound"],
  ["topk over the row limit", MAIN, (d) => { const t = panel(d, 7).targets[0]; t.expr = t.expr.replace("topk(100,", "topk(100000,"); }, "semantics:", "returns one series per object with no bound"],
  ["held per class maxed across installations", MAIN, (d) => { panel(d, 5).targets[0].expr = 'sum by (class) (max by (cluster, class) (captf_state_locks_held{cluster=~"$cluster"}))'; }, "semantics:", "must keep each installation apart"],
  ["watch_up: min across replicas", MAIN, (d) => { const t = panel(d, 9).targets[0]; t.expr = t.expr.replace("max by", "min by"); }, "semantics:", "the alerts take max"],
  ["bars of increase over $__rate_interval", DRILL, (d) => { panel(d, 10).targets[0].expr = 'max(increase(captf_state_lock_force_unlocks_total{cluster=~"$cluster", namespace="$namespace", kind="$kind", name="$name"}[$__rate_interval]))'; }, "semantics:", "a bars panel must not use a range selector"],
  ["offset other than $__interval", DRILL, (d) => { const t = panel(d, 10).targets[0]; t.expr = t.expr.replace("offset $__interval", "offset 5m"); }, "semantics:", "offset 5m"],
  ["no data-age panel", MAIN, (d) => { d.panels = d.panels.filter((p) => !JSON.stringify(p.targets || []).includes("watch_last_success")); }, "semantics:", "no panel shows the data age"],
  ["UTF-8 quoted metric name", MAIN, (d) => { panel(d, 5).targets[0].expr = 'max by (class) ({"captf_state_locks_held"})'; }, "promql (promtool", "could not parse"],
];

function main() {
  const t0 = Date.now();
  const base = Object.fromEntries(
    fs.readdirSync(DASH_DIR).filter((f) => f.endsWith(".json")).map((f) => [path.basename(f, ".json"), JSON.parse(fs.readFileSync(path.join(DASH_DIR, f), "utf8"))]),
  );
  let passed = 0;
  const failed = [];
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "dash-selftest-"));
  try {
    // The unmodified copy must pass, or every case below proves nothing.
    const write = (docs) => {
      for (const f of fs.readdirSync(tmp)) fs.rmSync(path.join(tmp, f));
      for (const [uid, d] of Object.entries(docs)) fs.writeFileSync(path.join(tmp, `${uid}.json`), JSON.stringify(d, null, 2));
    };
    write(base);
    const clean = run({ dir: tmp, quiet: true });
    if (clean.failures.length) failed.push(`unmodified dashboards fail:\n${clean.log.join("\n")}`);
    else passed++;
    for (const [name, uid, mutate, prefix, needle] of CASES) {
      const docs = JSON.parse(JSON.stringify(base));
      mutate(docs[uid]);
      write(docs);
      const r = run({ dir: tmp, quiet: true });
      const hit = r.failures.some((f) => f.what.startsWith(prefix) && f.problems.some((p) => p.includes(needle)));
      if (hit) passed++;
      else failed.push(`${name}: expected a "${prefix}" failure mentioning ${JSON.stringify(needle)}; got:\n    ${r.log.filter((l) => !l.startsWith("schema: generated")).join("\n    ")}`);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  for (const f of failed) console.log(`FAIL selftest ${f}`);
  console.log(`selftest: ${CASES.length + 1} cases in ${Date.now() - t0} ms`);
  console.log(`selftest: ${passed} passed, ${failed.length} failed`);
  return failed.length ? 1 : 0;
}

process.exit(main());
