// Validate rendered Prometheus Operator objects with the schemas of npm
// @kubernetes-models/prometheus-operator:
//   node validate-crs.mjs objects.json
// objects.json is a JSON array of {source, object}. For each object:
//   1. new PrometheusRule(obj).validate() / new ServiceMonitor(obj).validate()
//      (throws on a wrong type, pattern or missing required field);
//   2. a strict pass the package does not make: every key of spec, of each
//      ServiceMonitor endpoint (and its tlsConfig, tlsConfig.ca, authorization
//      and their key selectors), each rule group and each rule must be a
//      property of the package's type (its .d.ts, following `extends`), so a
//      misspelt field that the operator would silently drop fails here.
// Prints one line per object and exits 1 when any object fails.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { AlertmanagerConfig } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1alpha1/AlertmanagerConfig";

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve("@kubernetes-models/prometheus-operator/package.json"));
const v1Dir = join(pkgDir, "monitoring.coreos.com", "v1");

// Property names of `export interface I<name> { ... }` in v1/<file>.d.ts,
// with those of the interfaces it extends (an Endpoint's authorization and
// tlsConfig come from HTTPConfigWithProxyAndTLSFiles, which extends further).
function interfaceKeys(file, iface) {
  const text = readFileSync(join(v1Dir, file), "utf8");
  const start = text.indexOf(`export interface ${iface} `);
  if (start < 0) throw new Error(`interface ${iface} not found in ${file}`);
  const open = text.indexOf("{", start);
  const keys = new Set();
  const ext = text.slice(start, open).match(/\sextends\s+([\s\S]+)$/);
  for (const alias of ext ? ext[1].split(",").map((a) => a.trim()).filter(Boolean) : []) {
    const imp = text.match(new RegExp(`import \\{ ${alias} \\} from "\\./([A-Za-z0-9]+)\\.js"`));
    if (!imp) throw new Error(`${iface} in ${file} extends ${alias}, not imported from a file of v1/`);
    for (const k of interfaceKeys(`${imp[1]}.d.ts`, `I${imp[1]}`)) keys.add(k);
  }
  const body = text.slice(open + 1);
  let depth = 0;
  for (const line of body.split("\n")) {
    if (depth === 0) {
      const m = line.match(/^\s*"([^"]+)"\??:/);
      if (m) keys.add(m[1]);
      if (/^\}/.test(line)) break;
    }
    depth += (line.match(/\{/g) || []).length - (line.match(/\}/g) || []).length;
    if (depth < 0) break;
  }
  if (keys.size === 0) throw new Error(`no properties read from ${iface} in ${file}`);
  return keys;
}

const KEYS = {
  amcSpec: interfaceKeys("../v1alpha1/AlertmanagerConfigSpec.d.ts", "IAlertmanagerConfigSpec"),
  inhibitRule: interfaceKeys("../v1alpha1/InhibitRule.d.ts", "IInhibitRule"),
  matcher: interfaceKeys("../v1alpha1/Matcher.d.ts", "IMatcher"),
  smSpec: interfaceKeys("ServiceMonitorSpec.d.ts", "IServiceMonitorSpec"),
  endpoint: interfaceKeys("Endpoint.d.ts", "IEndpoint"),
  tlsConfig: interfaceKeys("TLSConfig.d.ts", "ITLSConfig"),
  authorization: interfaceKeys("SafeAuthorization.d.ts", "ISafeAuthorization"),
  secretOrConfigMap: interfaceKeys("SecretOrConfigMap.d.ts", "ISecretOrConfigMap"),
  prSpec: interfaceKeys("PrometheusRuleSpec.d.ts", "IPrometheusRuleSpec"),
  group: interfaceKeys("RuleGroup.d.ts", "IRuleGroup"),
  rule: interfaceKeys("Rule.d.ts", "IRule"),
};
// core/v1 SecretKeySelector and ConfigMapKeySelector (kubernetes-models).
const KEY_SELECTOR = new Set(["name", "key", "optional"]);

function unknownKeys(obj, allowed, path, out) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return;
  for (const k of Object.keys(obj)) if (!allowed.has(k)) out.push(`${path}.${k}`);
}

function strict(obj) {
  const bad = [];
  const spec = obj.spec || {};
  if (obj.kind === "ServiceMonitor") {
    unknownKeys(spec, KEYS.smSpec, "spec", bad);
    (spec.endpoints || []).forEach((e, i) => {
      const at = `spec.endpoints[${i}]`;
      unknownKeys(e, KEYS.endpoint, at, bad);
      const tls = e.tlsConfig || {};
      unknownKeys(tls, KEYS.tlsConfig, `${at}.tlsConfig`, bad);
      for (const k of ["ca", "cert"]) {
        unknownKeys(tls[k], KEYS.secretOrConfigMap, `${at}.tlsConfig.${k}`, bad);
        for (const s of ["secret", "configMap"]) unknownKeys((tls[k] || {})[s], KEY_SELECTOR, `${at}.tlsConfig.${k}.${s}`, bad);
      }
      unknownKeys(tls.keySecret, KEY_SELECTOR, `${at}.tlsConfig.keySecret`, bad);
      unknownKeys(e.authorization, KEYS.authorization, `${at}.authorization`, bad);
      unknownKeys((e.authorization || {}).credentials, KEY_SELECTOR, `${at}.authorization.credentials`, bad);
    });
  } else if (obj.kind === "AlertmanagerConfig") {
    unknownKeys(spec, KEYS.amcSpec, "spec", bad);
    (spec.inhibitRules || []).forEach((r, i) => {
      unknownKeys(r, KEYS.inhibitRule, `spec.inhibitRules[${i}]`, bad);
      for (const side of ["sourceMatch", "targetMatch"]) {
        (r[side] || []).forEach((m, j) => unknownKeys(m, KEYS.matcher, `spec.inhibitRules[${i}].${side}[${j}]`, bad));
      }
    });
  } else if (obj.kind === "PrometheusRule") {
    unknownKeys(spec, KEYS.prSpec, "spec", bad);
    (spec.groups || []).forEach((g, i) => {
      unknownKeys(g, KEYS.group, `spec.groups[${i}]`, bad);
      (g.rules || []).forEach((r, j) => unknownKeys(r, KEYS.rule, `spec.groups[${i}].rules[${j}]`, bad));
    });
  }
  return bad;
}

const MODELS = { PrometheusRule, ServiceMonitor, AlertmanagerConfig };
const API_VERSIONS = { AlertmanagerConfig: "monitoring.coreos.com/v1alpha1" };
const items = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const { source, object } of items) {
  const label = `${source}: ${object.kind}/${object.metadata && object.metadata.name}`;
  const Model = MODELS[object.kind];
  if (!Model || object.apiVersion !== (API_VERSIONS[object.kind] || "monitoring.coreos.com/v1")) {
    console.log(`FAIL ${label}: not a monitoring.coreos.com/v1 ServiceMonitor or PrometheusRule, or v1alpha1 AlertmanagerConfig`);
    failed++;
    continue;
  }
  try {
    new Model(object).validate();
  } catch (e) {
    console.log(`FAIL ${label}: ${String(e.message).replace(/\s+/g, " ")}`);
    failed++;
    continue;
  }
  const bad = strict(object);
  if (bad.length) {
    console.log(`FAIL ${label}: fields the type does not have: ${bad.join(", ")}`);
    failed++;
    continue;
  }
  console.log(`ok ${label}`);
}
process.exit(failed ? 1 : 0);
