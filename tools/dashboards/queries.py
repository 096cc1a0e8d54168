#!/usr/bin/env python3
"""Print every panel query of every dashboard as JSON lines.

Each line is one PromQL expression a dashboard panel sends, with Grafana's
variables substituted so that a real Prometheus can run it:

  {"dashboard": uid, "file": "dashboards/x.json", "panel": title,
   "panel_id": id, "refId": "A", "instant": bool, "expr": "...",
   "expr_raw": "... as written in the dashboard ..."}

Substitution:
  $__rate_interval              -> --rate-interval (default 5m)
  $__interval                   -> --interval (the step; default: the rate interval)
  $__range                      -> --range (default 1h)
  a multi-value / include-all variable -> its allValue (".*" when unset),
                                  i.e. what "All" means
  any other query variable      -> with --prometheus URL: the first value
                                  Prometheus returns for its label_values()
                                  query (resolved in dashboard order, so
                                  chained variables see earlier ones);
                                  without: the saved current value, else
                                  the placeholder "example"
  --var NAME=VALUE              -> overrides any of the above
  ${datasource}                 -> not used in expressions (panel datasource)

A reference to a variable the dashboard does not define is an error (exit 1).

--variables also prints each query variable's label_values() query
(panel "templating", refId = variable name, "kind": "variable") so the
checker can validate the metric and label they name.

Standard library only: the end-to-end test runs it with plain python3.
"""

import argparse
import json
import pathlib
import re
import signal
import sys
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / "dashboards"

VAR_RE = re.compile(r"\$(\w+)|\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]")
LABEL_VALUES_RE = re.compile(r"^\s*label_values\(\s*(?:(?P<sel>.*)\s*,\s*)?(?P<label>\w+)\s*\)\s*$", re.S)
BUILTIN = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s", "__range_ms"}


class Error(Exception):
    pass


def walk_panels(panels):
    for p in panels or []:
        yield p
        # Collapsed rows keep their panels inside the row.
        yield from walk_panels(p.get("panels"))


def var_query_string(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or ""


def substitute(text, values, where):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(4)
        if name not in values:
            raise Error(f"{where}: unknown variable ${name} in {text!r}")
        return values[name]

    return VAR_RE.sub(repl, text)


def prom_label_values(base, selector, label):
    params = {}
    if selector:
        params["match[]"] = selector
    url = f"{base.rstrip('/')}/api/v1/label/{urllib.parse.quote(label)}/values"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise Error(f"Prometheus answered {body!r} for {url}")
    return body.get("data") or []


def resolve_variables(dash, where, args):
    values = {
        "__rate_interval": args.rate_interval,
        "__interval": args.interval or args.rate_interval,
        "__range": args.range,
    }
    overrides = dict(args.var)
    for v in (dash.get("templating") or {}).get("list") or []:
        name, typ = v.get("name"), v.get("type")
        if name in overrides:
            values[name] = overrides[name]
            continue
        if typ == "datasource":
            # Only ever used as a panel datasource uid, never in PromQL.
            values[name] = "${" + name + "}"
            continue
        if v.get("multi") or v.get("includeAll"):
            values[name] = v.get("allValue") or ".*"
            continue
        if typ == "query" and args.prometheus:
            m = LABEL_VALUES_RE.match(var_query_string(v))
            if not m:
                raise Error(f"{where}: variable {name}: cannot resolve query {var_query_string(v)!r}")
            sel = substitute(m.group("sel") or "", values, f"{where}: variable {name}").strip()
            found = sorted(prom_label_values(args.prometheus, sel, m.group("label")))
            if not found:
                raise Error(f"{where}: variable {name}: {var_query_string(v)!r} has no values in Prometheus")
            values[name] = found[0]
            continue
        cur = (v.get("current") or {}).get("value")
        if isinstance(cur, list):
            cur = cur[0] if cur else None
        if typ in ("constant", "textbox", "custom") and not cur:
            cur = var_query_string(v).split(",")[0].strip() or None
        values[name] = cur if cur not in (None, "", "$__all") else "example"
    return values


def dashboard_queries(path, args):
    dash = json.loads(path.read_text())
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    uid = dash.get("uid") or rel
    values = resolve_variables(dash, rel, args)
    out = []
    if args.variables:
        for v in (dash.get("templating") or {}).get("list") or []:
            if v.get("type") != "query":
                continue
            raw = var_query_string(v)
            out.append({
                "dashboard": uid, "file": rel, "panel": "templating", "panel_id": None,
                "refId": v.get("name"), "kind": "variable", "instant": True,
                "expr": substitute(raw, {**values, v["name"]: ".*"}, f"{rel}: variable {v.get('name')}"),
                "expr_raw": raw,
            })
    for p in walk_panels(dash.get("panels")):
        for t in p.get("targets") or []:
            raw = t.get("expr")
            if raw is None:
                continue
            where = f"{rel}: panel {p.get('id')} {p.get('title')!r} refId {t.get('refId')}"
            out.append({
                "dashboard": uid, "file": rel, "panel": p.get("title"), "panel_id": p.get("id"),
                "refId": t.get("refId"), "kind": "panel",
                "instant": bool(t.get("instant")) and not t.get("range", False),
                "expr": substitute(raw, values, where), "expr_raw": raw,
            })
    return out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `queries.py | head` is fine
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="dashboard JSON files (default: every dashboards/*.json)")
    ap.add_argument("--rate-interval", default="5m")
    ap.add_argument("--interval", help="$__interval, Grafana's step (default: --rate-interval)")
    ap.add_argument("--range", default="1h")
    ap.add_argument("--prometheus", help="base URL of a Prometheus to resolve single-value query variables")
    ap.add_argument("--var", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                    metavar="NAME=VALUE", help="force a variable's value (repeatable)")
    ap.add_argument("--variables", action="store_true", help="also print variable label_values() queries")
    args = ap.parse_args()
    for k in args.var:
        if len(k) != 2:
            ap.error("--var takes NAME=VALUE")
    files = [pathlib.Path(f).resolve() for f in args.files] or sorted(DEFAULT_DIR.glob("*.json"))
    if not files:
        print(f"no dashboards in {DEFAULT_DIR}", file=sys.stderr)
        return 1
    try:
        for f in files:
            for q in dashboard_queries(f, args):
                print(json.dumps(q, ensure_ascii=False))
    except (Error, OSError, ValueError) as e:
        print(f"queries.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
