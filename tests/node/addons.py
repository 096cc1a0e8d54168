"""What the node stage adds to the one-node cluster of tests/pykit/node.py to make it a user's:

- kube-router's network policy controller (v2.1.0 from Go modules, tools/node/build.sh; iptables and
  ipset from Debian), run on the host as its DaemonSet would run it, with only the firewall on: the
  chart's NetworkPolicy is enforced, not just stored;
- cert-manager's controller (v1.11.5 from Go modules) and its CRDs, from the module it was built
  from: the chart's certManager mode is issued by the real controller;
- a way into a pod's network namespace (``in_pod_netns``): a TCP connect made there leaves with the
  pod's IP, so the policy judges it as the pod's own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from pykit.controlplane import ROOT
from pykit.net import free_port, wait_for
from pykit.node import NODE_NAME, SERVICE_CIDR, Node, run
from pykit.process import ManagedProcess

KUBE_ROUTER_CHAIN = "KUBE-ROUTER-FORWARD"


class KubeRouter:
    """kube-router --run-firewall only: no routes, no service proxy, no CNI of its own."""

    def __init__(self, node: Node):
        self.node = node
        self.proc: ManagedProcess | None = None

    def start(self) -> "KubeRouter":
        health = free_port()
        self.proc = ManagedProcess("kube-router", [
            str(self.node.bins["KUBE_ROUTER"]), f"--kubeconfig={self.node.kubeconfig}",
            f"--hostname-override={NODE_NAME}", "--run-firewall=true", "--run-router=false",
            "--run-service-proxy=false", "--run-loadbalancer=false", "--enable-cni=false",
            "--enable-pod-egress=false", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--health-port={health}", "--metrics-port=0", "--iptables-sync-period=1m", "--v=1",
        ], self.node.w / "kube-router.log")
        self.proc.start()
        self.node.procs.append(self.proc)
        wait_for(lambda: self._chains_installed(), 120, "kube-router's iptables chains", interval=0.5)
        return self

    def _chains_installed(self) -> bool:
        assert self.proc is not None
        self.proc.check_alive()
        out = run(["iptables-save", "-t", "filter"], check=False).stdout
        return f"-j {KUBE_ROUTER_CHAIN}" in out

    def policy_chains(self) -> list[str]:
        """The per-policy chains (KUBE-NWPLCY-*) kube-router has written."""
        out = run(["iptables-save", "-t", "filter"], check=False).stdout
        return sorted({line.split()[0][1:] for line in out.splitlines() if line.startswith(":KUBE-NWPLCY-")})

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        remove_kube_router_rules()


#: the chains and ipsets kube-router's network policy controller makes
KUBE_ROUTER_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-", "KUBE-SRC-", "KUBE-DST-")


def remove_kube_router_rules() -> None:
    """Its jumps, chains and ipsets; kube-proxy's and the CNI's rules stay for Node.stop().
    `kube-router --cleanup-config` would do it, but v2.1.0's panics in the service proxy's cleanup
    (no IPVS here) before it reaches the firewall's."""
    import shlex
    out = run(["iptables-save", "-t", "filter"], check=False).stdout.splitlines()
    chains = [line[1:].split()[0] for line in out if line.startswith(":") and line[1:].startswith(KUBE_ROUTER_PREFIXES)]
    for line in out:
        words = shlex.split(line) if line.startswith("-A ") else []
        if words and words[1] in ("INPUT", "FORWARD", "OUTPUT") and "-j" in words and \
                words[words.index("-j") + 1].startswith(KUBE_ROUTER_PREFIXES):
            run(["iptables", "-t", "filter", "-D", *words[1:]], check=False)
    for c in chains:
        run(["iptables", "-t", "filter", "-F", c], check=False)
    for c in chains:
        run(["iptables", "-t", "filter", "-X", c], check=False)
    for name in run(["ipset", "list", "-n"], check=False).stdout.split():
        if name.startswith(KUBE_ROUTER_PREFIXES) or name.startswith("kube-router"):
            run(["ipset", "destroy", name], check=False)


def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's CRDs from the module the controller was built from, without the Helm label
    templates they carry (the labels are its chart's, the schemas are the API's)."""
    d = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager"],
                       cwd=ROOT / "tools" / "node" / "cert-manager", check=True, capture_output=True,
                       text=True).stdout.strip()
    crds = []
    for f in sorted((Path(d) / "deploy" / "crds").glob("crd-*.yaml")):
        doc = yaml.safe_load(f.read_text())
        doc["metadata"].pop("labels", None)
        crds.append(doc)
    return crds


class CertManager:
    """cert-manager's controller on the host (its Deployment's process), leader election off."""

    def __init__(self, node: Node):
        self.node = node
        self.proc: ManagedProcess | None = None

    def install_crds(self) -> None:
        self.node.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(cert_manager_crds()))
        for crd in ("issuers", "clusterissuers", "certificates", "certificaterequests"):
            self.node.kubectl("wait", "--for=condition=Established", f"crd/{crd}.cert-manager.io", "--timeout=60s")

    @property
    def controller_built(self) -> bool:
        """False when tools/node/build.sh could not build the controller (it says why)."""
        return "CERT_MANAGER" in self.node.bins

    def start(self) -> "CertManager":
        if not self.controller_built:
            return self
        self.proc = ManagedProcess("cert-manager", [
            str(self.node.bins["CERT_MANAGER"]), f"--kubeconfig={self.node.kubeconfig}", "--leader-elect=false",
            f"--metrics-listen-address=127.0.0.1:{free_port()}", "--cluster-resource-namespace=kube-system", "--v=2",
        ], self.node.w / "cert-manager.log")
        self.proc.start()
        self.node.procs.append(self.proc)
        return self

    def write_as_cert_manager(self, ns: str, certificate: str) -> None:
        """Without the controller: the Secrets the chart's self-signed chain would get from it (the
        CA's, and the serving certificate's with ca.crt), with cert-manager's annotations."""
        import base64
        import datetime as dt

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        cert = self.node.kube.get(f"/apis/cert-manager.io/v1/namespaces/{ns}/certificates/{certificate}").json()
        spec = cert["spec"]
        now = dt.datetime.now(dt.timezone.utc)

        def key_pem(k: ec.EllipticCurvePrivateKey) -> bytes:
            return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                   serialization.NoEncryption())
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{certificate}-ca")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=90))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in spec["dnsNames"]]), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        for name, data, cert_name in ((f"{certificate}-ca", {"ca.crt": pem(ca), "tls.crt": pem(ca), "tls.key": key_pem(ca_key)},
                                       f"{certificate}-ca"),
                                      (spec["secretName"], {"ca.crt": pem(ca), "tls.crt": pem(leaf), "tls.key": key_pem(key)},
                                       certificate)):
            self.node.kubectl("apply", "-f", "-", input=yaml.safe_dump({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": ns, "annotations": {
                    "cert-manager.io/certificate-name": cert_name, "cert-manager.io/issuer-kind": "Issuer",
                    "cert-manager.io/issuer-group": "cert-manager.io", "cert-manager.io/common-name": ""}},
                "data": {k: b64(v) for k, v in data.items()}}))

    def log_tail(self, n: int = 30) -> str:
        return self.proc.log_tail(n) if self.proc else "(not started)"


def pod_pid(node: Node, pod: dict[str, Any]) -> int:
    """A process of ``pod`` (any container, the sandbox included), found by the pod's UID in the
    kubelet's cgroupfs tree: nsenter needs one to reach the pod's network namespace."""
    uid = pod["metadata"]["uid"]
    for procs in Path("/sys/fs/cgroup").glob(f"*/kubepods*/**/pod{uid}/*/cgroup.procs"):
        try:
            pids = procs.read_text().split()
        except OSError:
            continue
        if pids:
            return int(pids[0])
    raise AssertionError(f"no process of pod {pod['metadata']['namespace']}/{pod['metadata']['name']} ({uid})")


CONNECT = """
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("connected", round(time.monotonic() - t, 3))
except OSError as e:
    print("refused" if isinstance(e, ConnectionRefusedError) else "failed", type(e).__name__, e, round(time.monotonic() - t, 3))
"""


def connect_from_pod(node: Node, pod: dict[str, Any], host: str, port: int, timeout: float = 3.0) -> str:
    """A TCP connect to host:port from inside ``pod``'s network namespace (the host's python3 in the
    pod's netns: the packet leaves with the pod's IP); 'connected ...', 'refused ...' or 'failed ...'."""
    pid = pod_pid(node, pod)
    r = run(["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", CONNECT, host, str(port), str(timeout)],
            timeout=timeout + 30)
    return r.stdout.strip()


def pause_pod(ns: str, name: str, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "pause", "image": image, "imagePullPolicy": "IfNotPresent"}],
                     "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False}}


def container_log(node: Node, pod: dict[str, Any], container: str) -> list[str]:
    """The lines a container wrote, read from the kubelet's log files (CRI format: time, stream,
    tag, text): the API server cannot reach this kubelet's log endpoint (no client certificate)."""
    md = pod["metadata"]
    d = node.w / "pod-logs" / f"{md['namespace']}_{md['name']}_{md['uid']}" / container
    lines = []
    for f in sorted(d.glob("*.log")):
        for line in f.read_text(errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4:
                lines.append(parts[3])
    return lines
