"""Issue 50 checks for check_chart.py: the serving certificate (web.tls.type) and what the
ServiceMonitor verifies.

- helm: Secrets <fullname>-ca and <fullname>-tls; openssl verifies the certificate against the
  CA for every Service DNS name; the ServiceMonitor trusts ca.crt of <fullname>-tls;
- certManager: the chart's self-signed or CA Issuer, or the user's Issuer/ClusterIssuer, and a
  Certificate for the Service names with duration/renewBefore from values;
- existingSecret: the user's Secret mounted, its caKey trusted;
- selfSigned: nothing mounted, and a ServiceMonitor only with insecureSkipVerify said by name;
- the ServiceMonitor's tlsConfig: the values' keys passed through, ca/serverName defaulted,
  insecureSkipVerify only when the values say so.
Self-tests feed each check a broken render.
"""
from __future__ import annotations

import base64
import copy
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import helm_python as helm

from chart_common import CERT_MANAGER_KINDS, Fail, Runner, by_kind, expect, ident, must_fail, one, render


def fullname_of(objs: list[dict[str, Any]]) -> str:
    return one(objs, "Service")["metadata"]["name"]


def namespace_of(objs: list[dict[str, Any]]) -> str:
    return one(objs, "Service")["metadata"]["namespace"]


def dns_names(objs: list[dict[str, Any]], merged: dict[str, Any]) -> list[str]:
    f, ns = fullname_of(objs), namespace_of(objs)
    return [f, f"{f}.{ns}", f"{f}.{ns}.svc", f"{f}.{ns}.svc.{merged['web']['tls']['clusterDomain']}"]


def tls_secret_name(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """The Secret the pod must mount, worked out from the values alone ("" for none)."""
    tls = merged["web"]["tls"]
    if not tls["enabled"] or tls["type"] == "selfSigned":
        return ""
    if tls["type"] == "existingSecret":
        return tls["existingSecret"]["name"]
    return f"{fullname_of(objs)}-tls"


def expected_ca(objs: list[dict[str, Any]], merged: dict[str, Any]) -> dict[str, Any] | None:
    tls = merged["web"]["tls"]
    if tls["type"] in ("helm", "certManager"):
        return {"secret": {"name": f"{fullname_of(objs)}-tls", "key": "ca.crt"}}
    if tls["type"] == "existingSecret" and tls["existingSecret"]["caKey"]:
        return {"secret": {"name": tls["existingSecret"]["name"], "key": tls["existingSecret"]["caKey"]}}
    return None


def check_service_monitor_tls(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """tlsConfig = the values' tlsConfig, plus the mode's CA and the Service name when not given;
    insecureSkipVerify only when the values say it."""
    sms = by_kind(objs, "ServiceMonitor")
    if not sms or not merged["web"]["tls"]["enabled"]:
        return "no https ServiceMonitor"
    ep = one(sms, "ServiceMonitor")["spec"]["endpoints"][0]
    given = copy.deepcopy(merged["serviceMonitor"]["tlsConfig"])
    got = ep.get("tlsConfig")
    if given.get("insecureSkipVerify") is True:
        expect(got == given, f"tlsConfig {got} != the values' {given} (insecureSkipVerify asked for by name)")
        return "insecureSkipVerify: true, as the values say by name"
    given.pop("insecureSkipVerify", None)
    want = dict(given)
    want.setdefault("ca", expected_ca(objs, merged))
    want.setdefault("serverName", f"{fullname_of(objs)}.{namespace_of(objs)}.svc")
    expect(want["ca"], "no CA to verify with, yet the render did not fail")
    expect(got == want, f"tlsConfig {got} != {want}")
    expect("insecureSkipVerify" not in got, f"insecureSkipVerify rendered unasked: {got}")
    return f"verifies: ca {want['ca']}, serverName {want['serverName']}" + (
        f", passed through {sorted(set(given) - {'ca', 'serverName'})}" if set(given) - {"ca", "serverName"} else "")


def _pem(secret: dict[str, Any], key: str) -> bytes:
    data = secret.get("data") or {}
    expect(key in data, f"{ident(secret)} has no {key}")
    return base64.b64decode(data[key])


def check_helm_certificate(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """type helm: the CA and the certificate Secrets, and openssl verifies the certificate for each Service name."""
    tls = merged["web"]["tls"]
    secrets = {s["metadata"]["name"]: s for s in by_kind(objs, "Secret")}
    if not tls["enabled"] or tls["type"] != "helm":
        expect(not secrets, f"web.tls.type={tls['type']} but Secrets {sorted(secrets)} rendered")
        return "no Helm-made certificate"
    f = fullname_of(objs)
    expect(sorted(secrets) == [f"{f}-ca", f"{f}-tls"], f"Secrets {sorted(secrets)} != [{f}-ca, {f}-tls]")
    ca, leaf = secrets[f"{f}-ca"], secrets[f"{f}-tls"]
    for s in (ca, leaf):
        expect(s["type"] == "kubernetes.io/tls", f"{ident(s)} type {s.get('type')}")
    expect(_pem(leaf, "ca.crt") == _pem(ca, "tls.crt"), f"{ident(leaf)} ca.crt is not {ident(ca)}'s certificate")
    names = dns_names(objs, merged)
    ann = leaf["metadata"].get("annotations", {})
    expect(ann.get("captf-lock-exporter.io/dns-names") == ",".join(names), f"dns-names annotation {ann}")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d)
        for k in ("ca.crt", "tls.crt", "tls.key"):
            (p / k).write_bytes(_pem(leaf, k))
        for n in names:
            r = subprocess.run(["openssl", "verify", "-CAfile", str(p / "ca.crt"), "-purpose", "sslserver",
                                "-verify_hostname", n, str(p / "tls.crt")], capture_output=True, text=True)
            expect(r.returncode == 0, f"openssl verify for {n}: {r.stdout}{r.stderr}")
        bad = subprocess.run(["openssl", "verify", "-CAfile", str(p / "ca.crt"), "-verify_hostname",
                              "impostor.example", str(p / "tls.crt")], capture_output=True, text=True)
        expect(bad.returncode != 0, "openssl accepted the certificate for a name it does not carry")
        pub = [subprocess.run(["openssl", *a], capture_output=True, check=True).stdout for a in
               (["x509", "-in", str(p / "tls.crt"), "-noout", "-pubkey"], ["pkey", "-in", str(p / "tls.key"), "-pubout"])]
        expect(pub[0] == pub[1], "tls.key is not the certificate's key")
    return f"CA {f}-ca signs {f}-tls for {', '.join(names)} (openssl verify, server purpose)"


def check_cert_manager(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """type certManager: the Issuer chain of the values and a Certificate for the Service names."""
    tls = merged["web"]["tls"]
    cm_objs = [o for o in objs if o["kind"] in CERT_MANAGER_KINDS]
    if not tls["enabled"] or tls["type"] != "certManager":
        expect(not cm_objs, f"web.tls.type={tls['type']} but {[ident(o) for o in cm_objs]} rendered")
        return "no cert-manager objects"
    cm = tls["certManager"]
    f = fullname_of(objs)
    for o in cm_objs:
        expect(o["apiVersion"] == "cert-manager.io/v1", f"{ident(o)} apiVersion {o['apiVersion']}")
    certs = {o["metadata"]["name"]: o for o in by_kind(objs, "Certificate")}
    issuers = {o["metadata"]["name"]: o for o in by_kind(objs, "Issuer")}
    expect(not by_kind(objs, "ClusterIssuer"), "the chart made a ClusterIssuer")
    serving = certs.get(f)
    expect(serving is not None, f"no Certificate {f}")
    spec = serving["spec"]
    expect(spec["secretName"] == f"{f}-tls", f"secretName {spec['secretName']}")
    expect(spec["dnsNames"] == dns_names(objs, merged), f"dnsNames {spec['dnsNames']}")
    expect(spec["duration"] == cm["duration"] and spec["renewBefore"] == cm["renewBefore"],
           f"duration/renewBefore {spec['duration']}/{spec['renewBefore']} != values")
    expect("server auth" in spec.get("usages", []), f"usages {spec.get('usages')} lack server auth")
    if cm["existingIssuer"]["name"]:
        ei = cm["existingIssuer"]
        expect(spec["issuerRef"] == {"name": ei["name"], "kind": ei["kind"], "group": ei["group"]}, f"issuerRef {spec['issuerRef']}")
        expect(not issuers and list(certs) == [f], f"own issuers {sorted(issuers)} / certificates {sorted(certs)} beside an existing issuer")
        return f"Certificate {f} from {ei['kind']} {ei['name']}"
    expect(spec["issuerRef"] == {"name": f"{f}-ca", "kind": "Issuer", "group": "cert-manager.io"}, f"issuerRef {spec['issuerRef']}")
    ca_issuer = issuers.get(f"{f}-ca")
    expect(ca_issuer is not None, f"no Issuer {f}-ca")
    if cm["issuer"] == "selfSigned":
        expect(sorted(issuers) == sorted([f"{f}-ca", f"{f}-selfsigned"]), f"issuers {sorted(issuers)}")
        expect(issuers[f"{f}-selfsigned"]["spec"] == {"selfSigned": {}}, "the self-signed Issuer's spec")
        ca_cert = certs.get(f"{f}-ca")
        expect(ca_cert is not None and ca_cert["spec"].get("isCA") is True, f"no CA Certificate {f}-ca")
        expect(ca_cert["spec"]["issuerRef"]["name"] == f"{f}-selfsigned" and ca_cert["spec"]["duration"] == cm["caDuration"],
               f"CA Certificate {ca_cert['spec']}")
        expect(ca_issuer["spec"] == {"ca": {"secretName": ca_cert["spec"]["secretName"]}}, f"CA Issuer {ca_issuer['spec']}")
        return f"self-signed Issuer -> CA {f}-ca ({cm['caDuration']}) -> Certificate {f} ({cm['duration']}, renew {cm['renewBefore']} before)"
    expect(sorted(issuers) == [f"{f}-ca"] and list(certs) == [f], f"issuers {sorted(issuers)}, certificates {sorted(certs)}")
    expect(ca_issuer["spec"] == {"ca": {"secretName": cm["caSecretName"]}}, f"CA Issuer {ca_issuer['spec']}")
    return f"CA Issuer of Secret {cm['caSecretName']} -> Certificate {f}"


def check_verified_by_default(chart_dir: Path) -> str:
    """The default install, with a ServiceMonitor switched on as a Prometheus Operator user does:
    no insecureSkipVerify anywhere, a CA and the Service's name in tlsConfig."""
    plain = render(chart_dir, {})
    expect(not any("insecureSkipVerify" in v for v in plain.values()), "the default render mentions insecureSkipVerify")
    out = render(chart_dir, {"serviceMonitor": {"enabled": True}})
    expect(not any("insecureSkipVerify" in v for v in out.values()),
           "the default render with serviceMonitor.enabled has insecureSkipVerify")
    from chart_common import objects_of
    objs = objects_of(out)
    tlsc = one(objs, "ServiceMonitor")["spec"]["endpoints"][0].get("tlsConfig") or {}
    f, ns = fullname_of(objs), namespace_of(objs)
    expect(tlsc.get("ca") == {"secret": {"name": f"{f}-tls", "key": "ca.crt"}}, f"default tlsConfig.ca {tlsc.get('ca')}")
    expect(tlsc.get("serverName") == f"{f}.{ns}.svc", f"default tlsConfig.serverName {tlsc.get('serverName')}")
    return f"ca {f}-tls/ca.crt, serverName {f}.{ns}.svc, no insecureSkipVerify"


def check_unverifiable_fails(chart_dir: Path) -> str:
    """A ServiceMonitor that could not verify fails the install, naming insecureSkipVerify; said by name it renders."""
    cases = {
        "selfSigned": {"web": {"tls": {"type": "selfSigned"}}, "serviceMonitor": {"enabled": True}},
        "existingSecret without caKey": {"web": {"tls": {"type": "existingSecret", "existingSecret": {"name": "x", "caKey": ""}}},
                                         "serviceMonitor": {"enabled": True}},
    }
    for label, v in cases.items():
        try:
            render(chart_dir, v)
        except helm.HelmError as e:
            expect("insecureSkipVerify" in str(e) and "tlsConfig.ca" in str(e), f"{label}: failed without naming the way out: {e}")
        else:
            raise Fail(f"{label}: a ServiceMonitor with no CA rendered")
    try:
        render(chart_dir, {"web": {"tls": {"type": "certManager", "certManager": {"issuer": "ca"}}}})
    except helm.HelmError as e:
        expect("caSecretName" in str(e), f"certManager issuer ca without caSecretName failed, but not naming it: {e}")
    else:
        raise Fail("certManager issuer ca without caSecretName rendered")
    return "selfSigned / existingSecret without a CA: install fails naming tlsConfig.ca and insecureSkipVerify; issuer ca needs caSecretName"


def check_fresh_certificates(chart_dir: Path) -> str:
    """Without a cluster (lookup empty) each render makes a new CA: nothing is baked into the chart."""
    def ca_of(out: dict[str, str]) -> str:
        from chart_common import objects_of
        return [s for s in by_kind(objects_of(out), "Secret") if s["metadata"]["name"].endswith("-ca")][0]["data"]["tls.crt"]
    a, b = ca_of(render(chart_dir, {})), ca_of(render(chart_dir, {}))
    expect(a != b, "two renders gave the same CA: a key baked into the chart")
    return "two renders, two CAs"


TLS_OBJECT_CHECKS: dict[str, Callable[[list[dict[str, Any]], dict[str, Any]], str]] = {
    "ServiceMonitor tlsConfig: values passed through, CA and serverName defaulted, insecureSkipVerify only by name":
        check_service_monitor_tls,
    "web.tls.type helm: CA and certificate Secrets, openssl verifies every Service name": check_helm_certificate,
    "web.tls.type certManager: Issuer chain and Certificate from values": check_cert_manager,
}


def tls_self_tests(rendered: dict[str, tuple[list[dict[str, Any]], dict[str, Any], Path]], r: Runner) -> None:
    """Each check above must reject a broken render of the variant it is about."""
    def mutate(objs: list[dict[str, Any]], f: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
        o = copy.deepcopy(objs)
        f(o)
        return o

    def ep(o: list[dict[str, Any]]) -> dict[str, Any]:
        return one(o, "ServiceMonitor")["spec"]["endpoints"][0]

    def secret(o: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
        return [s for s in by_kind(o, "Secret") if s["metadata"]["name"].endswith(suffix)][0]

    def cert(o: list[dict[str, Any]], name: str) -> dict[str, Any]:
        return [c for c in by_kind(o, "Certificate") if c["metadata"]["name"] == name][0]

    def run() -> str:
        mon, mon_m, _ = rendered["monitored"]
        cm, cm_m, _ = rendered["cert-manager"]
        other, _, _ = rendered["misc"]
        for objs, m in ((mon, mon_m), (cm, cm_m)):
            for fn in TLS_OBJECT_CHECKS.values():
                fn(objs, m)
        f = fullname_of(cm)
        cases: dict[str, Callable[[], Any]] = {
            "insecureSkipVerify added": lambda: check_service_monitor_tls(mutate(mon, lambda o: ep(o)["tlsConfig"].update(insecureSkipVerify=True)), mon_m),
            "no ca": lambda: check_service_monitor_tls(mutate(mon, lambda o: ep(o)["tlsConfig"].pop("ca")), mon_m),
            "no serverName": lambda: check_service_monitor_tls(mutate(mon, lambda o: ep(o)["tlsConfig"].pop("serverName")), mon_m),
            "serverName a pod's": lambda: check_service_monitor_tls(mutate(mon, lambda o: ep(o)["tlsConfig"].update(serverName="localhost")), mon_m),
            "ca of another Secret": lambda: check_service_monitor_tls(mutate(mon, lambda o: ep(o)["tlsConfig"]["ca"]["secret"].update(name="x")), mon_m),
            "certificate of another CA": lambda: check_helm_certificate(mutate(mon, lambda o: secret(o, "-tls")["data"].update(
                {"tls.crt": secret(other, "-tls")["data"]["tls.crt"], "tls.key": secret(other, "-tls")["data"]["tls.key"]})), mon_m),
            "key of another certificate": lambda: check_helm_certificate(mutate(mon, lambda o: secret(o, "-tls")["data"].update(
                {"tls.key": secret(other, "-tls")["data"]["tls.key"]})), mon_m),
            "leaf's ca.crt not the CA": lambda: check_helm_certificate(mutate(mon, lambda o: secret(o, "-tls")["data"].update(
                {"ca.crt": secret(o, "-tls")["data"]["tls.crt"]})), mon_m),
            "Certificate without the .svc name": lambda: check_cert_manager(mutate(cm, lambda o: cert(o, f)["spec"]["dnsNames"].remove(
                f"{f}.{namespace_of(o)}.svc")), cm_m),
            "Certificate renewBefore not from values": lambda: check_cert_manager(mutate(cm, lambda o: cert(o, f)["spec"].update(renewBefore="1h")), cm_m),
            "Certificate from the self-signed Issuer": lambda: check_cert_manager(mutate(cm, lambda o: cert(o, f)["spec"]["issuerRef"].update(
                name=f"{f}-selfsigned")), cm_m),
            "CA not isCA": lambda: check_cert_manager(mutate(cm, lambda o: cert(o, f"{f}-ca")["spec"].pop("isCA")), cm_m),
        }
        failed = [n for n, fn in cases.items() if not must_fail(fn)]
        expect(not failed, f"checks accepted broken input: {failed}")
        return f"{len(cases)} broken inputs rejected"
    r.run("self-test: the issue 50 TLS checks reject broken input", run)
