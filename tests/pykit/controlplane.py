"""A real Kubernetes control plane for tests: etcd and kube-apiserver built from Go modules
(tools/kube/build.sh), started on 127.0.0.1 with free ports, stopped by PID.

- etcd: one member, plain HTTP on loopback, ``--unsafe-no-fsync``, a temporary data dir.
- kube-apiserver: TLS with a serving certificate from a CA of its own (``ca.crt``), an admin token
  (``system:masters``) in ``--token-auth-file``, a ServiceAccount issuer with one RSA key for both
  signing and verifying, ``--authorization-mode=RBAC``, the ServiceAccount admission plugin off (no
  controller creates default ServiceAccounts), ``--endpoint-reconciler-type=none``, and an audit log
  (level Metadata, every request) that ``audit_events()`` reads back.
- ``restart_apiserver()``, ``restart_etcd()`` and ``compact_etcd()`` (the etcd v3 JSON gateway,
  ``POST /v3/kv/compaction``) for the watch tests.

``Kube`` is a small admin client over HTTPS (requests, CA verified): create/get/patch/delete,
the pods/status subresource, TokenRequest, namespaces, CRDs, manifests.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import requests
import yaml

from pykit.net import free_port, wait_for
from pykit.process import ManagedProcess

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "tools" / "kube" / "build.sh"
#: CAPTF_KUBE=old runs the suite on the oldest kube-apiserver minor the newest Cluster API release
#: supports for a management cluster (tools/kube-old); default: the newest (tools/kube).
KUBE_FLAVOUR = "old" if os.environ.get("CAPTF_KUBE", "") == "old" else "new"
KUBE_DIR = ROOT / "tools" / ("kube-old" if KUBE_FLAVOUR == "old" else "kube")
KUBE_VERSION = (KUBE_DIR / "VERSION").read_text().strip()
#: minor of the server under test, for tests whose expectation depends on it
KUBE_MINOR = int(KUBE_VERSION.split(".")[1])
ETCD_VERSION = (ROOT / "tools" / "etcd" / "VERSION").read_text().strip()
ADMIN_USER = "captf-test-admin"


def bin_cache() -> Path:
    if os.environ.get("CAPTF_BIN_CACHE"):
        return Path(os.environ["CAPTF_BIN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "captf-lock-exporter" / "bin"


def binaries(build: bool = True) -> tuple[Path, Path]:
    """(kube-apiserver, etcd) of the pinned versions; runs tools/kube/build.sh when one is missing
    (it waits on a build already running and does nothing for a binary that exists)."""
    kas = bin_cache() / f"kube-apiserver-{KUBE_VERSION}"
    etcd = bin_cache() / f"etcd-{ETCD_VERSION}"
    if build and not (os.access(kas, os.X_OK) and os.access(etcd, os.X_OK)):
        subprocess.run(["bash", str(BUILD_SCRIPT), "all"], check=True)
        if KUBE_FLAVOUR == "old":
            subprocess.run(["bash", str(BUILD_SCRIPT), "old"], check=True)
    return kas, etcd


# --------------------------------------------------------------------------------------------
# Certificates and keys (cryptography)
# --------------------------------------------------------------------------------------------


def _write_pki(d: Path, extra_ips: Iterable[str] = ()) -> None:
    """CA, serving certificate (loopback, the in-cluster names, 10.0.0.1 and ``extra_ips``), SA key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=2)
    pem = serialization.Encoding.PEM
    pk = dict(encoding=pem, format=serialization.PrivateFormat.PKCS8,
              encryption_algorithm=serialization.NoEncryption())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "captf-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
            x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"), x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(later)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (d / "ca.crt").write_bytes(ca.public_bytes(pem))
    # kept so the tests can issue client certificates (--client-ca-file is this CA)
    (d / "ca.key").write_bytes(ca_key.private_bytes(**pk))
    (d / "apiserver.crt").write_bytes(cert.public_bytes(pem))
    (d / "apiserver.key").write_bytes(key.private_bytes(**pk))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (d / "sa.key").write_bytes(sa.private_bytes(encoding=pem, format=serialization.PrivateFormat.TraditionalOpenSSL,
                                                encryption_algorithm=serialization.NoEncryption()))


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # RequestReceived adds nothing a test reads; ResponseStarted marks a watch that opened.
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


# --------------------------------------------------------------------------------------------
# The processes
# --------------------------------------------------------------------------------------------


class Etcd(ManagedProcess):
    stop_timeout = 20.0

    def __init__(self, binary: Path, workdir: Path):
        self.data_dir = workdir / "etcd-data"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        super().__init__("etcd", [
            str(binary), "--name=default", f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.url}", f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync", "--log-level=warn",
            "--quota-backend-bytes=4294967296",
        ], workdir / "etcd.log")

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ok() -> bool:
            self.check_alive()
            r = requests.get(self.url + "/health", timeout=2)
            return r.status_code == 200 and r.json().get("health") == "true"
        wait_for(ok, timeout, "etcd /health", interval=0.1)

    def revision(self) -> int:
        r = requests.post(self.url + "/v3/kv/range", json={"key": base64.b64encode(b"/").decode()}, timeout=5)
        r.raise_for_status()
        return int(r.json()["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        """Compacts the history up to ``revision`` (default: the current one); returns it."""
        rev = revision if revision is not None else self.revision()
        r = requests.post(self.url + "/v3/kv/compaction", json={"revision": str(rev), "physical": True}, timeout=30)
        r.raise_for_status()
        return rev


class KubeApiserver(ManagedProcess):
    stop_timeout = 30.0

    def __init__(self, binary: Path, workdir: Path, etcd_url: str, port: int | None = None,
                 extra_args: Iterable[str] = ()):
        self.port = port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.audit_log = workdir / "audit.log"
        w = workdir
        super().__init__("kube-apiserver", [
            str(binary),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={w / 'certs'}",
            f"--tls-cert-file={w / 'apiserver.crt'}", f"--tls-private-key-file={w / 'apiserver.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--service-account-issuer=https://127.0.0.1:{self.port}",
            f"--service-account-key-file={w / 'sa.key'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            f"--client-ca-file={w / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={w / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json", "--audit-log-maxsize=0",
            "--audit-log-mode=blocking",
            # only the tests compact etcd (compact_etcd); the server's own 5-minute compaction is off
            "--etcd-compaction-interval=0",
            "--profiling=false", "--v=1",
            *extra_args,
        ], w / "kube-apiserver.log")


class ControlPlane:
    """etcd + kube-apiserver in ``workdir``.  ``start()`` returns when /readyz answers 200 and
    the default RBAC roles exist; ``stop()`` stops both by PID."""

    def __init__(self, workdir: Path, apiserver_args: Iterable[str] = ()):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.kas_bin, self.etcd_bin = binaries()
        self.apiserver_args = list(apiserver_args)
        self.admin_token = secrets.token_hex(24)
        _write_pki(workdir)
        (workdir / "tokens.csv").write_text(f"{self.admin_token},{ADMIN_USER},{uuid.uuid4()},system:masters\n")
        (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self.ca_file = workdir / "ca.crt"
        self.etcd = Etcd(self.etcd_bin, workdir)
        self.apiserver: KubeApiserver | None = None
        self.kube: Kube | None = None
        #: seconds each start took: [("etcd", s), ("kube-apiserver", s), ...]
        self.start_times: list[tuple[str, float]] = []

    @property
    def url(self) -> str:
        assert self.apiserver is not None
        return self.apiserver.url

    def start(self) -> "ControlPlane":
        self._start_etcd()
        self._start_apiserver(None)
        self.kube = Kube(self.url, self.admin_token, self.ca_file)
        # the bootstrap RBAC (cluster-admin, system:* roles) is written by a post-start hook
        wait_for(lambda: self.kube.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin").ok,
                 60, "bootstrap ClusterRole cluster-admin", interval=0.2)
        return self

    def _start_etcd(self) -> None:
        t = time.monotonic()
        self.etcd.start()
        self.etcd.wait_ready()
        self.start_times.append(("etcd", time.monotonic() - t))

    def _start_apiserver(self, port: int | None) -> None:
        t = time.monotonic()
        self.apiserver = KubeApiserver(self.kas_bin, self.workdir, self.etcd.url, port, self.apiserver_args)
        self.apiserver.start()
        self.wait_ready()
        self.start_times.append(("kube-apiserver", time.monotonic() - t))

    def wait_ready(self, timeout: float = 90.0) -> None:
        s = requests.Session()
        s.verify = str(self.ca_file)
        s.trust_env = False  # REQUESTS_CA_BUNDLE in the environment would replace verify
        s.headers["Authorization"] = f"Bearer {self.admin_token}"
        assert self.apiserver is not None

        def ok() -> bool:
            self.apiserver.check_alive()
            return s.get(self.apiserver.url + "/readyz", timeout=3).status_code == 200
        try:
            wait_for(ok, timeout, "kube-apiserver /readyz", interval=0.2)
        finally:
            s.close()

    def wait_other_ready(self, b: KubeApiserver, what: str, timeout: float = 90.0) -> None:
        """Waits until another kube-apiserver ``b`` with this plane's certificates and admin token
        answers /readyz; raises when ``b`` exits."""
        probe = Kube(b.url, self.admin_token, self.ca_file)

        def ready() -> bool:
            b.check_alive()
            try:
                return probe.get("/readyz").status_code == 200
            except requests.RequestException:
                return False  # not listening yet
        try:
            wait_for(ready, timeout, f"{what} /readyz", interval=0.2)
        finally:
            probe.close()

    def stop_apiserver(self) -> None:
        if self.apiserver is not None:
            self.apiserver.stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on its port (after ``stop_apiserver``)."""
        assert self.apiserver is not None
        self._start_apiserver(self.apiserver.port)

    def restart_apiserver(self) -> None:
        self.stop_apiserver()
        self.start_apiserver()

    def stop_etcd(self) -> None:
        self.etcd.stop()

    def start_etcd(self) -> None:
        """Start etcd again on the same ports and data dir (after ``stop_etcd``)."""
        self._start_etcd()

    def restart_etcd(self) -> None:
        self.stop_etcd()
        self.start_etcd()

    def compact_etcd(self) -> int:
        return self.etcd.compact()

    def stop(self) -> None:
        if self.apiserver is not None:
            self.apiserver.stop()
        self.etcd.stop()
        if self.kube is not None:
            self.kube.close()

    # ---- audit log ----

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event written so far (all restarts of kube-apiserver append to one file)."""
        assert self.apiserver is not None
        return read_audit_log(self.apiserver.audit_log)

    def requests_of(self, user: str, since: float | None = None) -> list[dict[str, Any]]:
        """One entry per request (by auditID) of ``user``: its last stage's event (ResponseComplete,
        or ResponseStarted for a watch still open).  ``since``: Unix time, requests received after."""
        by_id: dict[str, dict[str, Any]] = {}
        for ev in self.audit_events():
            if ev.get("user", {}).get("username") != user:
                continue
            if since is not None and audit_time(ev["requestReceivedTimestamp"]) < since:
                continue
            prev = by_id.get(ev["auditID"])
            if prev is None or ev["stage"] == "ResponseComplete":
                by_id[ev["auditID"]] = ev
        return sorted(by_id.values(), key=lambda e: e["requestReceivedTimestamp"])

    def kubeconfig(self, path: Path, token: str, namespace: str = "default", user: str = "user") -> Path:
        """A kubeconfig for this server with ``token`` and the CA (TLS verified)."""
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        cfg = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "realkube", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "realkube", "context": {"cluster": "realkube", "user": user, "namespace": namespace}}],
            "current-context": "realkube",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path


def read_audit_log(path: Path) -> list[dict[str, Any]]:
    """Every event of a JSON audit log so far (none when it does not exist yet)."""
    out = []
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
    return out


def audit_time(s: str) -> float:
    """An audit event's RFC 3339 timestamp as Unix seconds."""
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def rss_kib(pid: int | None) -> int | None:
    """VmRSS of a process in KiB (None when it is gone)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except FileNotFoundError:
        return None
    return None


# --------------------------------------------------------------------------------------------
# An admin client
# --------------------------------------------------------------------------------------------

# plural -> (API prefix, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "namespaces": ("/api/v1", False),
    "nodes": ("/api/v1", False),
    "pods": ("/api/v1", True),
    "secrets": ("/api/v1", True),
    "serviceaccounts": ("/api/v1", True),
    "leases": ("/apis/coordination.k8s.io/v1", True),
    "events": ("/apis/events.k8s.io/v1", True),
    "terraformclusters": ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", True),
    "terraformmachines": ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", True),
    "terraformmachinepools": ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", True),
    "terraformplans": ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", True),
    "clusters": ("/apis/cluster.x-k8s.io/v1beta2", True),
    "clusters.v1beta1": ("/apis/cluster.x-k8s.io/v1beta1", True),
    "customresourcedefinitions": ("/apis/apiextensions.k8s.io/v1", False),
    "clusterroles": ("/apis/rbac.authorization.k8s.io/v1", False),
    "clusterrolebindings": ("/apis/rbac.authorization.k8s.io/v1", False),
    "roles": ("/apis/rbac.authorization.k8s.io/v1", True),
    "rolebindings": ("/apis/rbac.authorization.k8s.io/v1", True),
}

KIND_TO_RESOURCE = {
    "Namespace": "namespaces", "Node": "nodes", "Pod": "pods", "Secret": "secrets", "ServiceAccount": "serviceaccounts",
    "Lease": "leases", "Event": "events", "TerraformCluster": "terraformclusters",
    "TerraformMachine": "terraformmachines", "TerraformMachinePool": "terraformmachinepools",
    "TerraformPlan": "terraformplans",
    "CustomResourceDefinition": "customresourcedefinitions", "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
}


class ApiError(AssertionError):
    pass


class Kube:
    """Admin requests to the API server (token of ``system:masters``), JSON, CA verified."""

    def __init__(self, url: str, token: str, ca_file: Path):
        self.url = url
        self.s = requests.Session()
        self.s.verify = str(ca_file)
        self.s.trust_env = False  # REQUESTS_CA_BUNDLE in the environment would replace verify
        self.s.headers["Authorization"] = f"Bearer {token}"
        self.s.headers["User-Agent"] = "captf-realkube-tests"

    def close(self) -> None:
        self.s.close()

    def path(self, resource: str, ns: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        prefix, namespaced = RESOURCES[resource]
        plural = resource.split(".")[0]
        p = prefix + (f"/namespaces/{ns}" if namespaced and ns else "") + f"/{plural}"
        if name:
            p += f"/{name}"
        if sub:
            p += f"/{sub}"
        return p

    def request(self, method: str, path: str, *, ok: Iterable[int] = (200, 201), **kw: Any) -> requests.Response:
        kw.setdefault("timeout", 30)
        r = self.s.request(method, self.url + path, **kw)
        if r.status_code not in tuple(ok):
            raise ApiError(f"{method} {path} -> {r.status_code}: {r.text[:2000]}")
        return r

    def get(self, path: str, **kw: Any) -> requests.Response:
        kw.setdefault("timeout", 30)
        return self.s.get(self.url + path, **kw)

    # ---- objects ----

    @staticmethod
    def resource_of(obj: Mapping[str, Any]) -> str:
        kind = obj["kind"]
        if kind == "Cluster":
            return "clusters" if obj["apiVersion"].endswith("/v1beta2") else "clusters.v1beta1"
        return KIND_TO_RESOURCE[kind]

    @staticmethod
    def _for_create(obj: Mapping[str, Any]) -> dict[str, Any]:
        """What a client may send on create: no uid, creationTimestamp, resourceVersion,
        deletionTimestamp (the server assigns or refuses those); status is dropped by the server
        for kinds with a status subresource, so phases are set through it afterwards."""
        o = json.loads(json.dumps(obj))
        for k in ("uid", "creationTimestamp", "resourceVersion", "deletionTimestamp",
                  "deletionGracePeriodSeconds"):
            o.get("metadata", {}).pop(k, None)
        return o

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST the object; for a Pod with ``status.phase`` other than Pending, then PATCH
        pods/status to that phase; for a Pod built with ``deleting`` (deletionTimestamp and a
        finalizer), then DELETE it so that it stays terminating."""
        res = self.resource_of(obj)
        ns = obj["metadata"].get("namespace")
        body = self._for_create(obj)
        out = self.request("POST", self.path(res, ns), json=body).json()
        name = out["metadata"]["name"]
        if res == "pods":
            phase = (obj.get("status") or {}).get("phase")
            if phase and phase != "Pending":
                out = self.set_pod_phase(ns, name, phase)
            if obj["metadata"].get("deletionTimestamp"):
                self.delete("pods", ns, name, grace_period=600)
                out = self.get_obj("pods", ns, name)
        return out

    def create_all(self, objs: Iterable[Mapping[str, Any]]) -> None:
        for o in objs:
            self.create(o)

    def get_obj(self, resource: str, ns: str | None, name: str) -> dict[str, Any]:
        return self.request("GET", self.path(resource, ns, name)).json()

    def list(self, resource: str, ns: str | None = None, **params: Any) -> dict[str, Any]:
        return self.request("GET", self.path(resource, ns), params=params).json()

    def patch(self, resource: str, ns: str | None, name: str, patch: Mapping[str, Any],
              sub: str | None = None) -> dict[str, Any]:
        return self.request("PATCH", self.path(resource, ns, name, sub), data=json.dumps(patch),
                            headers={"Content-Type": "application/merge-patch+json"}).json()

    def delete(self, resource: str, ns: str | None, name: str, grace_period: int | None = None,
               missing_ok: bool = False) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        self.request("DELETE", self.path(resource, ns, name), json=body,
                     ok=(200, 202, 404) if missing_ok else (200, 202))

    def set_pod_phase(self, ns: str, name: str, phase: str) -> dict[str, Any]:
        return self.patch("pods", ns, name, {"status": {"phase": phase}}, sub="status")

    def release_lock(self, ns: str, lease: str) -> dict[str, Any]:
        """What the backend does on unlock: holderIdentity emptied, lock-info removed."""
        return self.patch("leases", ns, lease, {"metadata": {"annotations": {"app.terraform.io/lock-info": None}},
                                                "spec": {"holderIdentity": None}})

    def namespace(self, name: str) -> str:
        self.request("POST", "/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": name}})
        return name

    def token(self, ns: str, sa: str, seconds: int = 7200) -> str:
        r = self.request("POST", self.path("serviceaccounts", ns, sa, "token"), json={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}})
        return r.json()["status"]["token"]

    def apply_crds(self, files: Iterable[Path], timeout: float = 60) -> None:
        """Create or replace the CRDs in ``files`` and wait until each is Established and served."""
        names = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if not doc:
                    continue
                name = doc["metadata"]["name"]
                names.append(doc)
                r = self.get(self.path("customresourcedefinitions", None, name))
                if r.status_code == 404:
                    self.request("POST", self.path("customresourcedefinitions"), json=doc)
                else:
                    cur = r.json()
                    doc = dict(doc, metadata=dict(doc["metadata"], resourceVersion=cur["metadata"]["resourceVersion"]))
                    self.request("PUT", self.path("customresourcedefinitions", None, name), json=doc)
        for doc in names:
            name = doc["metadata"]["name"]

            def established() -> bool:
                st = self.get_obj("customresourcedefinitions", None, name).get("status", {})
                return any(c["type"] == "Established" and c["status"] == "True" for c in st.get("conditions", []))
            wait_for(established, timeout, f"CRD {name} Established", interval=0.1)
            group, plural = doc["spec"]["group"], doc["spec"]["names"]["plural"]
            for v in doc["spec"]["versions"]:
                path = f"/apis/{group}/{v['name']}"

                def served(path: str = path, want: bool = v["served"]) -> bool:
                    r = self.get(path)
                    has = r.status_code == 200 and any(x["name"] == plural for x in r.json().get("resources", []))
                    return has == want
                wait_for(served, timeout, f"{plural} {'served' if v['served'] else 'not served'} at {path}",
                         interval=0.1)

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create, or replace an existing object (used for chart-rendered RBAC)."""
        res = self.resource_of(obj)
        ns = obj["metadata"].get("namespace")
        name = obj["metadata"]["name"]
        r = self.get(self.path(res, ns, name))
        if r.status_code == 404:
            return self.request("POST", self.path(res, ns), json=obj).json()
        cur = r.json()
        body = json.loads(json.dumps(obj))
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.request("PUT", self.path(res, ns, name), json=body).json()


def client_certificate(workdir: Path, user: str, groups: Iterable[str] = ()) -> tuple[Path, Path]:
    """A client certificate for ``user`` (CN) in ``groups`` (O), signed by the control plane's CA
    (its --client-ca-file): (cert, key) files in ``workdir``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate((workdir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((workdir / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]
                     + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, pkey = workdir / f"{user}.crt", workdir / f"{user}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pkey.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return crt, pkey
