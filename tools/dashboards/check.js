#!/usr/bin/env node
// Validates every dashboards/*.json. Run through check.sh (which installs the
// pinned dependencies first). Exits 1 on any failure, printing every problem.
//
//  schema     JSON Schema generated now from @grafana/schema's own Dashboard
//             type (ts-json-schema-generator), validated with ajv, all errors.
//  lint       what the schema cannot say: stable uid, schemaVersion of the
//             installed @grafana/schema, datasource variable first and used by
//             every panel/target/variable, multi+All filter variables,
//             unique panel ids and refIds, no overlapping panels, transformations
//             naming existing "Value #<refId>" fields, /d/<uid> links resolving.
//  promql     every expression parses with @prometheus-io/lezer-promql (the
//             parser of Prometheus's own UI), exactly as queries.py hands it to
//             the end-to-end test, and with promtool (Prometheus 2.42's parser)
//             through a temporary rule file.
//  semantics  on the expression as written (Grafana variables stay inside
//             their label strings): metric names are in metrics.txt, label
//             matchers / by / on / legend labels exist on those metrics, every
//             range is $__rate_interval ($__range in instant queries), every
//             selector filters by the dashboard's cluster variable, and every
//             selector of a metric that has namespace/kind(/name) by that
//             variable with the right operator (=~ for multi/All, = for
//             single values), or says =~".*" to span every value on purpose.
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");

const HERE = __dirname;
const ROOT = path.resolve(HERE, "..", "..");
const DASH_DIR = path.join(ROOT, "dashboards");
const DS_REF = { type: "prometheus", uid: "${datasource}" };
const RATE_SENTINEL = "17m17s"; // stands for $__rate_interval while checking
const RANGE_SENTINEL = "19m19s"; // stands for $__range while checking
const INTERVAL_SENTINEL = "13m13s"; // stands for $__interval (the step) while checking
// A query may return at most this many series per object (topk(N, ...)): at
// 100k objects an unbounded per-object query returns ~10k rows (held locks)
// or 100k (known objects) to the browser.
const MAX_ROWS = 500;
// What identifies one exporter installation (its replicas share all three):
// the fleet's cluster, the namespace a ServiceMonitor's target carries (the
// exporter's own series without a namespace label keep it under honorLabels)
// and the scrape job. The alerts group by the same labels.
const INSTALLATION = ["cluster", "namespace", "job"];
// Aggregated across replicas with max only, as the alerts do (a watch is down
// when no replica has it; data is as old as the freshest replica's).
const MAX_ACROSS_REPLICAS = new Set(["captf_lock_exporter_watch_up", "captf_lock_exporter_watch_last_success_timestamp_seconds", "up"]);
// Labels every series may carry whatever its metric: the scrape target's, and
// `cluster`, the external label a fleet's Prometheus servers add.
const TARGET_LABELS = new Set(["job", "instance", "cluster"]);
// `cluster` filters every selector (every series can carry it); the others
// only the selectors of metrics that have the label.
const FILTER_LABELS = ["cluster", "namespace", "kind", "name"];
const EVERY_METRIC = new Set(["cluster"]);
const EXPORT_ONLY = ["__inputs", "__requires", "__elements"];

class CheckError extends Error {}

// One run's results; check.js can be required (selftest.js) and run many times.
let state = null;
function out(line) {
  state.log.push(line);
  if (!state.quiet) console.log(line);
}
function check(ok, what, problems) {
  if (ok) {
    state.passes++;
    return;
  }
  state.failures.push({ what, problems });
  out(`FAIL ${what}`);
  for (const p of problems) out(`  - ${p}`);
}
function runCheck(what, fn) {
  const problems = [];
  try {
    fn(problems);
  } catch (e) {
    problems.push(e instanceof CheckError ? e.message : `exception: ${e.stack || e}`);
  }
  check(problems.length === 0, what, problems);
}

// ---------------------------------------------------------------- inputs

function loadMetrics() {
  const metrics = new Map(); // name -> Set(labels)
  metrics.sections = new Map(); // name -> section
  let section = null;
  const file = path.join(HERE, "metrics.txt");
  fs.readFileSync(file, "utf8").split("\n").forEach((line, i) => {
    line = line.replace(/#.*/, "").trim();
    if (!line) return;
    const sec = line.match(/^\[(\w+)\]$/);
    if (sec) {
      section = sec[1];
      return;
    }
    if (!section) throw new Error(`${file}:${i + 1}: metric before any [section]`);
    const [name, ...labels] = line.split(/\s+/);
    if (metrics.has(name)) throw new Error(`${file}:${i + 1}: ${name} listed twice`);
    metrics.set(name, new Set(labels));
    metrics.sections.set(name, section);
  });
  return metrics;
}

function loadDashboards(dir) {
  const files = fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
  return files.map((f) => {
    const abs = path.join(dir, f);
    const file = path.relative(ROOT, abs);
    const text = fs.readFileSync(abs, "utf8");
    let json = null;
    let error = null;
    try {
      json = JSON.parse(text);
    } catch (e) {
      error = e.message;
    }
    return { file, abs, text, json, error };
  });
}

function* walkPanels(panels, parentRow = null) {
  for (const p of panels || []) {
    yield { panel: p, row: parentRow };
    if (Array.isArray(p.panels)) yield* walkPanels(p.panels, p);
  }
}

const varsOf = (d) => ((d.templating || {}).list || []);
const isDeepEqual = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// ---------------------------------------------------------------- schema

let compiled = null; // the generated schema, compiled once per process
function buildSchema() {
  const tsj = require("ts-json-schema-generator");
  const pkgDir = path.dirname(require.resolve("@grafana/schema/package.json"));
  const typesFile = path.join(pkgDir, "dist/types/raw/dashboard/x/types.gen.d.ts");
  if (!fs.existsSync(typesFile)) throw new Error(`not found: ${typesFile}`);
  const t0 = Date.now();
  const schema = tsj
    .createGenerator({ path: typesFile, type: "Dashboard", skipTypeCheck: true, additionalProperties: false })
    .createSchema("Dashboard");
  const version = require("@grafana/schema/package.json").version;
  out(`schema: generated from @grafana/schema ${version} ${path.relative(HERE, typesFile)} type Dashboard in ${Date.now() - t0} ms`);
  return schema;
}

function schemaChecks(dashboards) {
  runCheck("schema: generate JSON Schema from @grafana/schema", () => {
    if (compiled) return;
    const Ajv = require("ajv");
    const addFormats = require("ajv-formats");
    const ajv = new Ajv({ allErrors: true, strict: false });
    addFormats(ajv);
    const schema = buildSchema();
    // The whole dashboard decides; Panel and RowPanel alone only make the
    // messages readable (a failing panel otherwise reports both anyOf branches).
    const part = (def) => ajv.compile({ definitions: schema.definitions, $ref: `#/definitions/${def}` });
    compiled = { dashboard: ajv.compile(schema), Panel: part("Panel"), RowPanel: part("RowPanel") };
  });
  if (!compiled) return;
  const fmt = (prefix, e) => {
    const extra = e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : "";
    return `${prefix}${e.instancePath || (prefix ? "" : "/")}: ${e.message}${extra}`;
  };
  for (const d of dashboards) {
    runCheck(`schema: ${d.file}`, (problems) => {
      if (compiled.dashboard(d.json)) return;
      const panelErr = /^\/panels\/(\d+)(\/|$)/;
      for (const e of compiled.dashboard.errors) if (!panelErr.test(e.instancePath)) problems.push(fmt("", e));
      (d.json.panels || []).forEach((p, i) => {
        const v = p && p.type === "row" ? compiled.RowPanel : compiled.Panel;
        if (v(p)) return;
        const label = `/panels/${i} (${p && p.type === "row" ? "RowPanel" : "Panel"} ${p && p.id} ${JSON.stringify(p && p.title)})`;
        for (const e of v.errors) problems.push(fmt(label, e));
      });
      if (!problems.length) problems.push(...compiled.dashboard.errors.map((e) => fmt("", e)));
    });
  }
}

// ---------------------------------------------------------------- lint

function lintDashboard(d, allUids, problems) {
  const j = d.json;
  const { defaultDashboard } = require("@grafana/schema");
  if (typeof j.uid !== "string" || !/^[a-z0-9][a-z0-9-]{0,39}$/.test(j.uid)) problems.push(`uid ${JSON.stringify(j.uid)} must be a stable lower-case slug of at most 40 characters`);
  if (allUids.filter((u) => u === j.uid).length > 1) problems.push(`uid ${j.uid} is used by more than one dashboard`);
  if (path.basename(d.file, ".json") !== j.uid) problems.push(`file name should be <uid>.json (${j.uid}.json)`);
  if (j.schemaVersion !== defaultDashboard.schemaVersion) problems.push(`schemaVersion ${j.schemaVersion}, installed @grafana/schema says ${defaultDashboard.schemaVersion}`);
  for (const k of EXPORT_ONLY) if (k in j) problems.push(`export-only key ${k}`);
  if (j.id !== undefined && j.id !== null) problems.push(`id must be null or absent (instance-specific), is ${j.id}`);
  if (!j.title) problems.push("no title");

  // templating
  const vars = varsOf(j);
  const byName = new Map(vars.map((v) => [v.name, v]));
  if (byName.size !== vars.length) problems.push("duplicate variable names");
  const first = vars[0];
  if (!first || first.type !== "datasource" || first.query !== "prometheus" || first.name !== "datasource") {
    problems.push('the first variable must be {"name":"datasource","type":"datasource","query":"prometheus"}');
  }
  vars.forEach((v) => {
    if (v.type === "query") {
      if (!isDeepEqual(v.datasource, DS_REF)) problems.push(`variable ${v.name}: datasource must be ${JSON.stringify(DS_REF)}, is ${JSON.stringify(v.datasource)}`);
      if (v.includeAll && v.allValue !== ".*") problems.push(`variable ${v.name}: includeAll needs allValue ".*" (else "All" is the regex of the values listed, which misses locks whose object is unknown)`);
    }
  });
  for (const n of ["namespace", "kind"]) {
    const v = byName.get(n);
    if (v && v.type === "query" && (v.multi || v.includeAll) && !(v.multi && v.includeAll)) problems.push(`variable ${n}: multi and includeAll go together`);
  }

  // panels
  const ids = new Map();
  const boxes = [];
  for (const { panel: p, row } of walkPanels(j.panels)) {
    const where = `panel ${p.id} ${JSON.stringify(p.title)}`;
    if (typeof p.id !== "number") problems.push(`${where}: no numeric id`);
    else if (ids.has(p.id)) problems.push(`${where}: id also used by ${JSON.stringify(ids.get(p.id))}`);
    else ids.set(p.id, p.title);
    if (!p.title) problems.push(`${where}: no title`);
    if (!p.gridPos) problems.push(`${where}: no gridPos`);
    else if (!row || !row.collapsed) boxes.push({ where, ...p.gridPos });
    if (p.type === "row") {
      if (p.datasource !== undefined && !isDeepEqual(p.datasource, DS_REF)) problems.push(`${where}: row datasource must be ${JSON.stringify(DS_REF)} or absent`);
      if (!p.collapsed && (p.panels || []).length) problems.push(`${where}: an expanded row keeps its panels at top level, not in row.panels`);
      continue;
    }
    if (!isDeepEqual(p.datasource, DS_REF)) problems.push(`${where}: datasource must be ${JSON.stringify(DS_REF)}, is ${JSON.stringify(p.datasource)}`);
    const targets = p.targets || [];
    if (!targets.length && p.type !== "text") problems.push(`${where}: no queries`);
    const refIds = new Set();
    for (const t of targets) {
      if (!t.refId) problems.push(`${where}: a target without refId`);
      if (refIds.has(t.refId)) problems.push(`${where}: refId ${t.refId} twice`);
      refIds.add(t.refId);
      if (t.datasource !== undefined && !isDeepEqual(t.datasource, DS_REF)) problems.push(`${where} ${t.refId}: target datasource must be ${JSON.stringify(DS_REF)}`);
      if (typeof t.expr !== "string" || !t.expr.trim()) problems.push(`${where} ${t.refId}: no expr`);
      if (p.type === "table" && t.format !== "table") problems.push(`${where} ${t.refId}: a table panel's queries use format "table"`);
      if (["stat", "table", "gauge", "bargauge"].includes(p.type) && !(t.instant === true && t.range === false)) problems.push(`${where} ${t.refId}: ${p.type} panels use instant queries (instant: true, range: false)`);
      if (["timeseries", "state-timeline"].includes(p.type) && !(t.range === true && t.instant === false)) problems.push(`${where} ${t.refId}: ${p.type} panels use range queries (range: true, instant: false)`);
    }
    // transformations may only name Value #<refId> fields that exist
    const txt = JSON.stringify(p.transformations || []) + JSON.stringify(p.fieldConfig || {}) + JSON.stringify(p.options || {});
    for (const m of txt.matchAll(/Value #(\w+)/g)) {
      if (!refIds.has(m[1])) problems.push(`${where}: refers to field "Value #${m[1]}" but has no query ${m[1]}`);
    }
    if (refIds.size > 1 && p.type === "table" && (p.transformations || []).length && !(p.transformations || []).some((t) => t.id === "merge")) {
      problems.push(`${where}: a table of several queries needs a merge transformation`);
    }
  }
  // overlapping panels (expanded layout)
  for (let a = 0; a < boxes.length; a++) {
    for (let b = a + 1; b < boxes.length; b++) {
      const A = boxes[a], B = boxes[b];
      if (A.x < B.x + B.w && B.x < A.x + A.w && A.y < B.y + B.h && B.y < A.y + A.h) problems.push(`${A.where} overlaps ${B.where}`);
    }
  }
  for (const bx of boxes) if (bx.x + bx.w > 24) problems.push(`${bx.where}: wider than the 24-column grid`);

  // links to other dashboards must resolve
  for (const m of d.text.matchAll(/\/d\/([A-Za-z0-9_-]+)/g)) {
    if (!allUids.includes(m[1])) problems.push(`link to /d/${m[1]}: no dashboard with that uid in dashboards/`);
  }
}

// ---------------------------------------------------------------- PromQL

const { parser } = require("@prometheus-io/lezer-promql");
const lezerVersion = () =>
  JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve("@prometheus-io/lezer-promql")), "..", "package.json"), "utf8")).version;

function parseErrors(expr) {
  const tree = parser.parse(expr);
  const errs = [];
  tree.iterate({
    enter(n) {
      if (n.type.isError) errs.push(`syntax error at ${n.from}: …${expr.slice(Math.max(0, n.from - 20), n.from)}⟦${expr.slice(n.from, n.from + 20)}⟧`);
    },
  });
  return { tree, errs };
}

const unquote = (s) => JSON.parse(s.startsWith("'") ? `"${s.slice(1, -1).replace(/"/g, '\\"')}"` : s.startsWith("`") ? JSON.stringify(s.slice(1, -1)) : s);

// Semantic facts of a parsed expression.
function analyse(expr, tree) {
  const text = (n) => expr.slice(n.from, n.to);
  const selectors = []; // {metric, matchers: [{label, op, value}]}
  const grouping = []; // label names in by/without/on/ignoring/group_x
  const ranges = []; // duration text of range and subquery selectors
  const created = new Set(); // labels made by label_replace / label_join / count_values
  const aggregates = []; // {op, modifier: "by"|"without"|null, labels, metrics: selectors directly inside}
  const offsets = []; // duration text of offset modifiers
  const problems = [];
  const visit = (node) => {
    const n = node;
    if (n.name === "AggregateExpr") {
      const mod = n.getChild("AggregateModifier");
      const labels = [];
      if (mod) for (let c = mod.getChild("GroupingLabels") && mod.getChild("GroupingLabels").firstChild; c; c = c.nextSibling) if (c.name === "LabelName") labels.push(text(c));
      aggregates.push({
        op: text(n.getChild("AggregateOp")),
        modifier: mod ? (mod.getChild("By") ? "by" : "without") : null,
        labels,
        metrics: directMetrics(expr, n.getChild("FunctionCallBody")),
      });
    } else if (n.name === "OffsetExpr") {
      const dur = n.getChild("OffsetDurationExpr");
      if (dur) offsets.push(text(dur));
    }
    if (n.name === "VectorSelector") {
      const sel = { metric: null, matchers: [] };
      for (let c = n.firstChild; c; c = c.nextSibling) {
        if (c.name === "Identifier") sel.metric = text(c);
        if (c.name === "LabelMatchers") {
          for (let m = c.firstChild; m; m = m.nextSibling) {
            if (m.name === "UnquotedLabelMatcher") {
              const label = text(m.getChild("LabelName"));
              const op = text(m.getChild("MatchOp"));
              const value = unquote(text(m.getChild("StringLiteral")));
              if (label === "__name__") {
                if (op !== "=") problems.push(`__name__${op}: metric names must be literal`);
                else sel.metric = value;
              } else sel.matchers.push({ label, op, value });
            } else if (m.name === "QuotedLabelMatcher" || m.name === "QuotedLabelName") {
              problems.push(`quoted (UTF-8) label or metric name ${text(m)}: Prometheus 2.x cannot parse it`);
            }
          }
        }
      }
      if (!sel.metric) problems.push(`selector ${text(n)} names no metric`);
      selectors.push(sel);
    } else if (n.name === "GroupingLabels") {
      for (let c = n.firstChild; c; c = c.nextSibling) if (c.name === "LabelName") grouping.push(text(c));
    } else if (n.name === "MatrixSelector" || n.name === "SubqueryExpr") {
      for (let c = n.firstChild; c; c = c.nextSibling) if (c.name === "DurationExpr") ranges.push(text(c));
    } else if (n.name === "FunctionCall") {
      const fn = text(n.getChild("FunctionIdentifier"));
      if (fn === "label_replace" || fn === "label_join") {
        const body = n.getChild("FunctionCallBody");
        const args = [];
        for (let c = body.firstChild; c; c = c.nextSibling) if (!["(", ")", ","].includes(c.name)) args.push(c);
        if (args[1] && args[1].name === "StringLiteral") created.add(unquote(text(args[1])));
      }
    } else if (n.name === "AggregateExpr") {
      const op = n.getChild("AggregateOp");
      if (op && text(op) === "count_values") {
        const body = n.getChild("FunctionCallBody");
        const s = body && body.getChild("StringLiteral");
        if (s) created.add(unquote(text(s)));
      }
    }
    for (let c = n.firstChild; c; c = c.nextSibling) visit(c);
  };
  visit(tree.topNode);
  return { selectors, grouping, ranges, created, aggregates, offsets, problems };
}

// The metric a VectorSelector names (Identifier or __name__="...").
function selectorMetric(expr, n) {
  const id = n.getChild("Identifier");
  if (id) return expr.slice(id.from, id.to);
  let found = null;
  const ms = n.getChild("LabelMatchers");
  for (let m = ms && ms.firstChild; m; m = m.nextSibling) {
    if (m.name !== "UnquotedLabelMatcher") continue;
    const l = m.getChild("LabelName");
    if (l && expr.slice(l.from, l.to) === "__name__") {
      const v = m.getChild("StringLiteral");
      found = unquote(expr.slice(v.from, v.to));
    }
  }
  return found;
}

// Metrics selected inside `node` without crossing another aggregation: the
// series an aggregation combines itself.
function directMetrics(expr, node) {
  const out = [];
  const walk = (n) => {
    if (!n) return;
    if (n.name === "AggregateExpr") return;
    if (n.name === "VectorSelector") {
      const m = selectorMetric(expr, n);
      if (m) out.push(m);
      return;
    }
    for (let c = n.firstChild; c; c = c.nextSibling) walk(c);
  };
  for (let c = node && node.firstChild; c; c = c.nextSibling) walk(c);
  return out;
}

const EXPR_NODES = new Set(["AggregateExpr", "BinaryExpr", "FunctionCall", "MatrixSelector", "NumberDurationLiteral", "OffsetExpr",
  "ParenExpr", "StringLiteral", "SubqueryExpr", "UnaryExpr", "VectorSelector", "StepInvariantExpr"]);
const exprChildren = (n) => {
  const out = [];
  for (let c = n.firstChild; c; c = c.nextSibling) {
    if (EXPR_NODES.has(c.name)) out.push(c);
    else if (c.name === "FunctionCallBody") out.push(...exprChildren(c));
  }
  return out;
};

// Whether an expression returns a bounded number of series whatever the
// fleet's size: not one per object, unless cut by topk/bottomk/limitk or by
// a filter on one object (name="..."), or joined with `and` to such a set.
// Series per installation, per class, per kind or per namespace are bounded.
function isBounded(expr, node, metrics) {
  const text = (n) => expr.slice(n.from, n.to);
  const isScalar = (n) => {
    if (n.name === "NumberDurationLiteral") return true;
    if (n.name === "FunctionCall") return ["time", "scalar", "pi"].includes(text(n.getChild("FunctionIdentifier")));
    if (["ParenExpr", "UnaryExpr", "BinaryExpr"].includes(n.name)) return exprChildren(n).every(isScalar);
    return false;
  };
  const rec = (n) => {
    switch (n.name) {
      case "PromQL":
      case "ParenExpr":
      case "UnaryExpr":
      case "OffsetExpr":
      case "MatrixSelector":
      case "SubqueryExpr":
      case "StepInvariantExpr":
        return exprChildren(n).every(rec);
      case "NumberDurationLiteral":
      case "StringLiteral":
        return true;
      case "VectorSelector": {
        const m = selectorMetric(expr, n);
        if (!m || !metrics.has(m) || !metrics.get(m).has("name")) return true;
        const ms = n.getChild("LabelMatchers");
        for (let c = ms && ms.firstChild; c; c = c.nextSibling) {
          if (c.name !== "UnquotedLabelMatcher") continue;
          if (text(c.getChild("LabelName")) === "name" && text(c.getChild("MatchOp")) === "=") return true;
        }
        return false;
      }
      case "AggregateExpr": {
        const op = text(n.getChild("AggregateOp"));
        const args = exprChildren(n);
        if (["topk", "bottomk", "limitk"].includes(op)) {
          const k = args[0] && args[0].name === "NumberDurationLiteral" ? Number(text(args[0])) : NaN;
          return (k > 0 && k <= MAX_ROWS) || args.slice(1).every(rec);
        }
        const mod = n.getChild("AggregateModifier");
        if (!mod) return true; // one series (count_values aside)
        if (mod.getChild("Without")) return args.every(rec);
        const labels = [];
        for (let c = mod.getChild("GroupingLabels").firstChild; c; c = c.nextSibling) if (c.name === "LabelName") labels.push(text(c));
        return !labels.includes("name") || args.every(rec);
      }
      case "BinaryExpr": {
        const [l, r] = exprChildren(n);
        const op = ["And", "Or", "Unless"].find((o) => n.getChild(o));
        if (op === "And") return rec(l) || rec(r);
        if (op === "Or") return rec(l) && rec(r);
        if (op === "Unless") return rec(l);
        // With a scalar side the result has the other side's series.
        if (isScalar(l)) return rec(r);
        if (isScalar(r)) return rec(l);
        const mm = n.getChild("MatchingModifierClause");
        if (mm && mm.getChild("GroupLeft")) return rec(l);
        if (mm && mm.getChild("GroupRight")) return rec(r);
        return rec(l) || rec(r); // one-to-one: at most the smaller side
      }
      case "FunctionCall": {
        const fn = text(n.getChild("FunctionIdentifier"));
        if (["vector", "time", "scalar", "absent", "absent_over_time"].includes(fn)) return true;
        return exprChildren(n).every(rec);
      }
      default:
        return exprChildren(n).every(rec);
    }
  };
  return rec(node);
}

// Replace Grafana's built-in interval variables; dashboard variables stay
// (they may only appear inside label strings, where they parse as text).
const withBuiltins = (raw) =>
  raw
    .replace(/\$__rate_interval|\$\{__rate_interval\}/g, RATE_SENTINEL)
    .replace(/\$__range\b|\$\{__range\}/g, RANGE_SENTINEL)
    .replace(/\$__interval\b|\$\{__interval\}/g, INTERVAL_SENTINEL);

// Series of one installation that carry no namespace of their own: under
// honorLabels they keep the scrape target's namespace, the installation's.
const installationLevel = (metrics, m) =>
  metrics.has(m) && ["exporter", "prometheus"].includes(metrics.sections.get(m)) && !metrics.get(m).has("namespace");

function semanticChecks(d, metrics, problems) {
  const j = d.json;
  const vars = new Map(varsOf(j).map((v) => [v.name, v]));
  const varIndex = new Map(varsOf(j).map((v, i) => [v.name, i]));
  // A variable query filters by the filter variables defined before it only.
  const item = (where, raw, legendFormat, onlyVarsBefore, instant, bars) => {
    const expr = withBuiltins(raw);
    const { tree, errs } = parseErrors(expr);
    if (errs.length) {
      problems.push(`${where}: does not parse with Grafana variables left in place (use them only inside label strings): ${errs[0]}`);
      return;
    }
    const a = analyse(expr, tree);
    a.problems.forEach((p) => problems.push(`${where}: ${p}`));
    const known = new Set(TARGET_LABELS);
    a.created.forEach((l) => known.add(l));
    for (const s of a.selectors) {
      if (!s.metric) continue;
      if (!metrics.has(s.metric)) {
        problems.push(`${where}: metric ${s.metric} is not in metrics.txt (not served by the exporter)`);
        continue;
      }
      const labels = metrics.get(s.metric);
      labels.forEach((l) => known.add(l));
      if (installationLevel(metrics, s.metric)) known.add("namespace");
      for (const m of s.matchers) {
        if (!labels.has(m.label) && !TARGET_LABELS.has(m.label)) problems.push(`${where}: ${s.metric} has no label ${m.label}`);
      }
      for (const l of FILTER_LABELS) {
        const v = vars.get(l);
        if (!v || !(labels.has(l) || EVERY_METRIC.has(l))) continue;
        if (onlyVarsBefore !== undefined && varIndex.get(l) >= onlyVarsBefore) continue;
        const multi = !!(v.multi || v.includeAll);
        const want = { op: multi ? "=~" : "=", value: `$${l}` };
        const got = s.matchers.filter((m) => m.label === l);
        // =~".*" spans every object on purpose (a fleet-wide count on the
        // object dashboard); never for cluster, whose series must not mix.
        const spans = !EVERY_METRIC.has(l) && got.some((m) => m.op === "=~" && m.value === ".*");
        if (!spans && !got.some((m) => m.op === want.op && m.value === want.value)) {
          problems.push(`${where}: ${s.metric} must filter ${l}${want.op}"${want.value}"` + (got.length ? ` (has ${got.map((m) => m.label + m.op + JSON.stringify(m.value)).join(", ")})` : ""));
        }
      }
      for (const m of s.matchers) {
        for (const vm of m.value.matchAll(/\$\{?(\w+)/g)) {
          const v = vars.get(vm[1]);
          if (v && (v.multi || v.includeAll) && m.op !== "=~" && m.op !== "!~") problems.push(`${where}: multi-value variable $${vm[1]} needs =~, not ${m.op}`);
        }
      }
    }
    // Bars: a window longer than the step overlaps the next bar's, so one
    // event is counted in every bar whose window holds it (increase over
    // $__rate_interval: in about $__rate_interval / step bars).
    if (bars && a.ranges.length) {
      problems.push(`${where}: a bars panel must not use a range selector ([${a.ranges.join("], [")}]): windows longer than the step count one event in several bars; show the growth since the previous bar (x - x offset $__interval)`);
    }
    for (const o of a.offsets) {
      if (o !== INTERVAL_SENTINEL) problems.push(`${where}: offset ${o}: only offset $__interval (the previous bar) is used`);
    }
    if (onlyVarsBefore === undefined && !isBounded(expr, tree.topNode, metrics)) {
      problems.push(`${where}: returns one series per object with no bound: cut it with topk(N, ...) (N <= ${MAX_ROWS}), or join it with "and on (...)" to such a set`);
    }
    for (const g of a.aggregates) {
      const inst = g.metrics.filter((m) => installationLevel(metrics, m));
      if (!inst.length) continue;
      if ((g.op === "max" || g.op === "min") && !(g.modifier === "by" && INSTALLATION.every((l) => g.labels.includes(l)))) {
        problems.push(`${where}: ${g.op} over the replicas of ${inst[0]} must keep each installation apart: ${g.op} by (${INSTALLATION.join(", ")}, ...), then sum or compare the installations`);
      }
      const maxOnly = inst.filter((m) => MAX_ACROSS_REPLICAS.has(m));
      if (maxOnly.length && g.op !== "max" && !(g.op === "sum" && maxOnly.every((m) => m === "up")) && g.op !== "count") {
        problems.push(`${where}: ${g.op} across the replicas of ${maxOnly[0]}: the alerts take max (a watch is down when no replica has it), so must the panel`);
      }
    }
    for (const r of a.ranges) {
      if (r === RANGE_SENTINEL && instant) continue; // a count over the dashboard's time range
      if (r === RANGE_SENTINEL) problems.push(`${where}: range [$__range] only in instant queries (a count over the time range)`);
      else if (r !== RATE_SENTINEL) problems.push(`${where}: range [${r}] must be [$__rate_interval]`);
    }
    for (const g of a.grouping) {
      if (!known.has(g)) problems.push(`${where}: by/on label ${g} is on none of the metrics it groups`);
    }
    for (const m of (legendFormat || "").matchAll(/\{\{\s*(\w+)\s*\}\}/g)) {
      if (!known.has(m[1])) problems.push(`${where}: legend {{${m[1]}}} is a label of none of the metrics queried`);
    }
    return a;
  };
  for (const v of varsOf(j)) {
    if (v.type !== "query") continue;
    const q = typeof v.query === "object" ? v.query.query : v.query;
    const m = /^\s*label_values\(\s*(.*)\s*,\s*(\w+)\s*\)\s*$/s.exec(q || "");
    if (!m) {
      problems.push(`variable ${v.name}: query must be label_values(<selector>, <label>), is ${JSON.stringify(q)}`);
      continue;
    }
    const a = item(`variable ${v.name}`, m[1], "", varIndex.get(v.name));
    if (a) {
      for (const s of a.selectors) {
        if (metrics.has(s.metric) && !metrics.get(s.metric).has(m[2]) && !TARGET_LABELS.has(m[2])) problems.push(`variable ${v.name}: ${s.metric} has no label ${m[2]}`);
      }
    }
  }
  // The overview says how old its data is (watch_last_success as an age).
  if (j.uid === "captf-state-locks") {
    const ages = [];
    for (const { panel: p } of walkPanels(j.panels)) for (const t of p.targets || []) {
      if (/time\(\)\s*-[^]*captf_lock_exporter_watch_last_success_timestamp_seconds/.test(t.expr || "")) ages.push(p.id);
    }
    if (!ages.length) problems.push("no panel shows the data age: time() - captf_lock_exporter_watch_last_success_timestamp_seconds");
  }
  for (const { panel: p } of walkPanels(j.panels)) {
    for (const t of p.targets || []) {
      const bars = ((((p.fieldConfig || {}).defaults || {}).custom || {}).drawStyle) === "bars";
      if (typeof t.expr === "string") item(`panel ${p.id} ${JSON.stringify(p.title)} ${t.refId}`, t.expr, t.legendFormat, undefined, t.instant === true, bars);
    }
  }
}

// queries.py output: the exact expressions the end-to-end test runs.
function e2eQueries(files) {
  const r = spawnSync("python3", [path.join(HERE, "queries.py"), "--variables", ...files], { encoding: "utf8" });
  if (r.status !== 0) throw new CheckError(`queries.py failed (exit ${r.status}): ${r.stderr.trim()}`);
  return r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

function promtoolCheck(queries, problems) {
  if (!queries.length) return; // queries.py failed, reported already
  const promtool = spawnSync("promtool", ["--version"], { encoding: "utf8" });
  if (promtool.error) {
    if (process.env.DASHBOARDS_SKIP_PROMTOOL === "1") {
      out("promtool: not installed, skipped because DASHBOARDS_SKIP_PROMTOOL=1");
      return;
    }
    problems.push("promtool not found: apt-get install --no-install-recommends prometheus (or DASHBOARDS_SKIP_PROMTOOL=1 to skip on a workstation)");
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dash-promtool-"));
  try {
    const file = path.join(dir, "queries.rules.json");
    // A rule file is YAML, and JSON is YAML: one group per query, named after it.
    const groups = queries.map((q, i) => ({
      name: `${q.file} | ${q.panel} | ${q.refId} | #${i}`,
      rules: [{ record: `dashboard_query_${i}`, expr: q.kind === "variable" ? varSelector(q.expr) : q.expr }],
    }));
    fs.writeFileSync(file, JSON.stringify({ groups }, null, 1));
    const r = spawnSync("promtool", ["check", "rules", file], { encoding: "utf8" });
    if (r.status !== 0) {
      problems.push(`promtool check rules failed:\n${(r.stdout + r.stderr).trim().split("\n").map((l) => "      " + l).join("\n")}`);
    } else {
      out(`promtool: ${(promtool.stdout || promtool.stderr).split("\n")[0]}: ${queries.length} expressions parse`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const varSelector = (q) => /^\s*label_values\(\s*(.*)\s*,\s*\w+\s*\)\s*$/s.exec(q)[1];

// ---------------------------------------------------------------- main

function run({ dir = DASH_DIR, quiet = false } = {}) {
  state = { passes: 0, failures: [], log: [], quiet };
  const t0 = Date.now();
  let metrics;
  runCheck("metrics.txt loads", () => {
    metrics = loadMetrics();
  });
  const dashboards = loadDashboards(dir);
  runCheck("dashboards/ has dashboards", (p) => {
    if (!dashboards.length) p.push("no *.json in dashboards/");
  });
  for (const d of dashboards) {
    check(!d.error, `json: ${d.file}`, [d.error]);
  }
  const ok = dashboards.filter((d) => d.json);
  const uids = ok.map((d) => d.json.uid);

  schemaChecks(ok);
  for (const d of ok) runCheck(`lint: ${d.file}`, (p) => lintDashboard(d, uids, p));
  if (metrics) for (const d of ok) runCheck(`semantics: ${d.file}`, (p) => semanticChecks(d, metrics, p));

  let queries = [];
  runCheck("queries.py: every variable resolves", () => {
    queries = e2eQueries(ok.map((d) => d.abs));
  });
  runCheck(`promql (lezer-promql ${lezerVersion()}): e2e expressions parse`, (p) => {
    for (const q of queries) {
      const expr = q.kind === "variable" ? varSelector(q.expr) : q.expr;
      const { errs } = parseErrors(expr);
      errs.forEach((e) => p.push(`${q.file} ${JSON.stringify(q.panel)} ${q.refId}: ${e}\n      ${expr}`));
    }
  });
  runCheck("promql (promtool check rules): e2e expressions parse", (p) => promtoolCheck(queries, p));
  runCheck("queries.py: every panel query is listed", (p) => {
    let n = 0;
    for (const d of ok) for (const { panel } of walkPanels(d.json.panels)) n += (panel.targets || []).filter((t) => t.expr).length;
    const m = queries.filter((q) => q.kind === "panel").length;
    if (n !== m) p.push(`dashboards have ${n} panel queries, queries.py printed ${m}`);
  });

  out(`${queries.filter((q) => q.kind === "panel").length} panel queries, ${queries.filter((q) => q.kind === "variable").length} variable queries in ${ok.length} dashboards; ${Date.now() - t0} ms`);
  out(`dashboards: ${state.passes} passed, ${state.failures.length} failed`);
  return state;
}

module.exports = { run };

if (require.main === module) {
  process.exit(run().failures.length ? 1 : 0);
}
