"""A one-node Kubernetes cluster for the node stage (tests/node), every piece built from Go modules
(tools/kube/build.sh, tools/node/build.sh) or taken from Debian (runc, iptables), started as root
on this machine and stopped by PID, leaving nothing behind:

- etcd and kube-apiserver as in controlplane.py, but with what a kubelet needs: the API server
  listens on the node's address (pods reach it at the ``kubernetes`` Service, 10.0.0.1:443, through
  kube-proxy), its endpoint reconciler and the ServiceAccount admission plugin are on (the default
  set), and its audit log records every request with the caller's token claims;
- kube-controller-manager (Deployments, ReplicaSets, StatefulSets, EndpointSlices, ServiceAccounts,
  the root CA ConfigMap a projected token needs, garbage collection), kube-scheduler, kube-proxy
  (iptables mode);
- containerd with its runc shim and Debian's runc, the CNI bridge, host-local, loopback and portmap
  plugins on a bridge of its own (``captf0``, pods in 10.88.0.0/16);
- a kubelet (cgroup v1 with the cgroupfs driver: ``failCgroupV1: false``), registered as node
  ``captf-node``.

Images come from OCI archives (``import_image``); nothing is pulled (no registry can be reached),
so every pod names an image with ``imagePullPolicy: IfNotPresent``. The components authenticate with
the admin token (system:masters): a node bootstrap (CSRs, the Node authorizer) is not what the
stage tests. ``stop()`` kills the pods' containers, unmounts what the kubelet and containerd
mounted, removes the bridge, the CNI network namespaces and kube-proxy's rules.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from pykit.controlplane import ADMIN_USER, AUDIT_POLICY, ROOT, Etcd, Kube, _write_pki, bin_cache, read_audit_log
from pykit.net import free_port, wait_for
from pykit.process import ManagedProcess

NODE_NAME = "captf-node"
POD_CIDR = "10.88.0.0/16"
SERVICE_CIDR = "10.0.0.0/24"
BRIDGE = "captf0"
KUBE_VERSION = (ROOT / "tools" / "kube" / "VERSION").read_text().strip()
ETCD_VERSION = (ROOT / "tools" / "etcd" / "VERSION").read_text().strip()


def node_binaries() -> dict[str, Path]:
    """Every binary of the node (``NODE_*`` names of tools/node/build.sh --env, plus
    KUBE_APISERVER, ETCD, KUBECTL), building what is missing (the scripts wait on a build that
    is running and do nothing for a binary that exists)."""
    subprocess.run(["bash", str(ROOT / "tools" / "kube" / "build.sh"), "all"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["bash", str(ROOT / "tools" / "kube" / "build.sh"), "kubectl"], check=True,
                   stdout=subprocess.DEVNULL)
    out = subprocess.run(["bash", str(ROOT / "tools" / "node" / "build.sh"), "--env"], check=True,
                         capture_output=True, text=True).stdout
    bins = {}
    for line in out.splitlines():
        if line.startswith("NODE_") and "=" in line:
            k, v = line.split("=", 1)
            bins[k[len("NODE_"):]] = Path(v)
    bins["KUBE_APISERVER"] = bin_cache() / f"kube-apiserver-{KUBE_VERSION}"
    bins["ETCD"] = bin_cache() / f"etcd-{ETCD_VERSION}"
    bins["KUBECTL"] = bin_cache() / f"kubectl-{KUBE_VERSION}"
    for k, p in bins.items():
        if not os.access(p, os.X_OK):
            raise AssertionError(f"{k}: {p} is not an executable")
    return bins


def node_ip() -> str:
    """The address the host sends from: pods reach the API server (and the webhook receiver) there."""
    out = subprocess.run(["ip", "-4", "-o", "route", "get", "192.0.2.200"], capture_output=True, text=True).stdout
    words = out.split()
    if "src" in words:
        return words[words.index("src") + 1]
    raise AssertionError(f"no IPv4 source address for the node (ip route get: {out!r})")


def run(argv: list[str], *, check: bool = True, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
    """Runs ``argv``; with ``check``, a non-zero exit raises with what the command printed."""
    r = subprocess.run(argv, check=False, timeout=timeout, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


class Node:
    """The cluster in ``workdir``: ``start()`` returns once the node is Ready; ``stop()`` undoes it all."""

    def __init__(self, workdir: Path, bins: dict[str, Path]):
        self.w = workdir
        self.bins = bins
        self.ip = node_ip()
        self.admin_token = secrets.token_hex(24)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca_file = self.w / "ca.crt"
        self.audit_log = self.w / "audit.log"
        self.procs: list[ManagedProcess] = []
        self.kube: Kube | None = None
        self.sock = self.w / "containerd.sock"
        self.netns_before = set(_netns())
        # the runc shim keeps its containers' state in /run/containerd/runc/<namespace> whatever
        # containerd's own state directory is
        self.runc_root_existed = Path("/run/containerd").exists()
        self.timings: dict[str, float] = {}

    # ---- files ----

    def _write_files(self) -> None:
        w = self.w
        _write_pki(w, extra_ips=[self.ip])
        (w / "tokens.csv").write_text(f"{self.admin_token},{ADMIN_USER},{uuid.uuid4()},system:masters\n")
        (w / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self.kubeconfig = self._kubeconfig(w / "admin.kubeconfig")
        (w / "cni" / "bin").mkdir(parents=True)
        (w / "cni" / "net.d").mkdir(parents=True)
        for plugin in ("bridge", "host-local", "loopback", "portmap"):
            (w / "cni" / "bin" / plugin).symlink_to(self.bins["CNI_" + plugin.upper().replace("-", "_")])
        (w / "cni" / "net.d" / "10-captf.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "captf-node",
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(w / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=1))
        # containerd finds its shim on PATH: a directory with just the shim (and ctr, for the tests)
        (w / "path").mkdir()
        (w / "path" / "containerd-shim-runc-v2").symlink_to(self.bins["CONTAINERD_SHIM_RUNC_V2"])
        runc = shutil.which("runc") or "/usr/sbin/runc"
        (w / "containerd.toml").write_text(CONTAINERD_CONFIG.format(w=w, sock=self.sock, runc=runc))
        (w / "kubelet.yaml").write_text(yaml.safe_dump(self._kubelet_config()))
        self.proxy_health = free_port()
        (w / "kube-proxy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "mode": "iptables", "clusterCIDR": POD_CIDR, "hostnameOverride": NODE_NAME,
            # leave the host's conntrack table size alone (a sysctl kube-proxy would otherwise set)
            "conntrack": {"maxPerCore": 0},
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "healthzBindAddress": f"127.0.0.1:{self.proxy_health}",
        }))

    def _kubeconfig(self, path: Path) -> Path:
        import base64
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "node", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "admin", "user": {"token": self.admin_token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "admin"}}],
            "current-context": "node"}))
        return path

    def _kubelet_config(self) -> dict[str, Any]:
        self.kubelet_health = free_port()
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1 only; kubelet 1.35+ refuses it unless told.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.ca_file)}},
            "authorization": {"mode": "Webhook"},
            "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_health,
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(self.w / "pod-logs"),
            "enforceNodeAllocatable": [],
            "protectKernelDefaults": False,
            # no CAP_SYS_RESOURCE here (see CONTAINERD_CONFIG): the kubelet keeps the score it has
            "oomScoreAdj": 0,
            # a shared test machine: never evict for disk or memory the other stages use
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 50,
            "syncFrequency": "5s",
        }

    # ---- processes ----

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ManagedProcess:
        p = ManagedProcess(name, argv, self.w / f"{name}.log", env=env)
        p.start()
        self.procs.append(p)
        return p

    def start(self) -> "Node":
        t0 = time.monotonic()
        self._write_files()
        run(["sysctl", "-w", "net.ipv4.ip_forward=1"])
        self.etcd = Etcd(self.bins["ETCD"], self.w)
        self.etcd.start()
        self.procs.append(self.etcd)
        self.etcd.wait_ready()
        w = self.w
        self.apiserver = self._start("kube-apiserver", [
            str(self.bins["KUBE_APISERVER"]), f"--etcd-servers={self.etcd.url}",
            "--bind-address=0.0.0.0", f"--advertise-address={self.ip}", f"--secure-port={self.port}",
            f"--cert-dir={w / 'certs'}", f"--tls-cert-file={w / 'apiserver.crt'}",
            f"--tls-private-key-file={w / 'apiserver.key'}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={w / 'sa.key'}", f"--service-account-signing-key-file={w / 'sa.key'}",
            f"--token-auth-file={w / 'tokens.csv'}", f"--client-ca-file={w / 'ca.crt'}",
            "--authorization-mode=RBAC", "--allow-privileged=true",
            f"--audit-policy-file={w / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-maxsize=0", "--audit-log-mode=blocking",
            "--profiling=false", "--v=1",
        ])
        self.kube = Kube(self.url, self.admin_token, self.ca_file)
        wait_for(lambda: self._alive() and self.kube.get("/readyz").status_code == 200, 120,
                 "kube-apiserver /readyz", interval=0.2)
        wait_for(lambda: self.kube.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin").ok,
                 60, "bootstrap RBAC", interval=0.2)
        self.timings["apiserver_ready_s"] = time.monotonic() - t0
        kc = str(self.kubeconfig)
        self._start("kube-controller-manager", [
            str(self.bins["KUBE_CONTROLLER_MANAGER"]), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--service-account-private-key-file={w / 'sa.key'}", f"--root-ca-file={w / 'ca.crt'}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--use-service-account-credentials=false", "--controllers=*", "--v=1",
            # a rollout test waits on ReplicaSets: do not batch their syncs
            "--concurrent-deployment-syncs=5",
        ])
        self._start("kube-scheduler", [
            str(self.bins["KUBE_SCHEDULER"]), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}", "--v=1",
        ])
        env = dict(os.environ, PATH=f"{w / 'path'}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}")
        self.containerd = self._start("containerd", [str(self.bins["CONTAINERD"]),
                                                     f"--config={w / 'containerd.toml'}"], env=env)
        wait_for(lambda: self._alive() and self.ctr("version", check=False).returncode == 0, 60,
                 "containerd answering", interval=0.2)
        self.timings["containerd_ready_s"] = time.monotonic() - t0
        self._start("kube-proxy", [str(self.bins["KUBE_PROXY"]), f"--config={w / 'kube-proxy.yaml'}", "--v=1"])
        self.kubelet = self._start("kubelet", [
            str(self.bins["KUBELET"]), f"--config={w / 'kubelet.yaml'}", f"--kubeconfig={kc}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={self.ip}", f"--root-dir={w / 'kubelet'}",
            f"--cert-dir={w / 'kubelet-pki'}", "--v=1",
        ], env=env)
        wait_for(self.node_ready, 180, f"node {NODE_NAME} Ready", interval=0.5)
        self.timings["node_ready_s"] = time.monotonic() - t0
        return self

    def _alive(self) -> bool:
        for p in self.procs:
            p.check_alive()
        return True

    def node_ready(self) -> bool:
        self._alive()
        r = self.kube.get(f"/api/v1/nodes/{NODE_NAME}")
        if r.status_code != 200:
            return False
        conds = r.json().get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    # ---- pods ----

    def pods(self, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        return self.kube.list("pods", ns, **params)["items"]

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        r = self.kube.get(self.kube.path("pods", ns, name))
        return r.json() if r.status_code == 200 else None

    @staticmethod
    def is_ready(pod: dict[str, Any] | None) -> bool:
        """Ready by the kubelet's own account (its probes), and not on its way out."""
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        conds = pod.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def pod_ready(self, ns: str, name: str) -> bool:
        self._alive()
        return self.is_ready(self.pod(ns, name))

    def pod_ip(self, ns: str, name: str) -> str:
        p = self.pod(ns, name)
        ip = (p or {}).get("status", {}).get("podIP")
        if not ip:
            raise AssertionError(f"pod {ns}/{name} has no IP yet")
        return ip

    # ---- tools ----

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        return run([str(self.bins["CTR"]), "--address", str(self.sock), "--namespace", "k8s.io", *args],
                   check=check, timeout=timeout)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
                ) -> subprocess.CompletedProcess:
        return run([str(self.bins["KUBECTL"]), f"--kubeconfig={self.kubeconfig}", *args], check=check,
                   timeout=timeout, input=input)

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), HELM_CACHE_HOME=str(self.w / "helm" / "cache"),
                   HELM_CONFIG_HOME=str(self.w / "helm" / "config"), HELM_DATA_HOME=str(self.w / "helm" / "data"))
        return run([str(self.bins["HELM"]), *args], check=check, timeout=timeout, env=env)

    def import_image(self, archive: Path) -> None:
        """Imports a docker-archive into containerd's k8s.io namespace (the kubelet's)."""
        self.ctr("images", "import", "--no-unpack=false", str(archive))

    # ---- audit log ----

    def audit_events(self) -> list[dict[str, Any]]:
        return read_audit_log(self.audit_log)

    # ---- teardown ----

    def diagnostics(self) -> str:
        parts = []
        for p in self.procs:
            parts.append(f"--- {p.name} (rc {p.returncode()}) ---\n{p.log_tail(25)}")
        return "\n".join(parts)

    def stop(self) -> None:
        # The containers outlive the kubelet and containerd: kill them through containerd first.
        if getattr(self, "containerd", None) is not None and self.containerd.returncode() is None:
            tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
            for t in tasks:
                self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False, timeout=30)
        for p in reversed(self.procs):
            if p.name == "kube-proxy":
                continue
            p.stop()
        for p in self.procs:
            if p.name == "kube-proxy":
                p.stop()
        if "KUBE_PROXY" in self.bins:
            run([str(self.bins["KUBE_PROXY"]), "--cleanup"], check=False)
        _kill_cgroup_leftovers()
        _umount_under(self.w)
        for ns in set(_netns()) - self.netns_before:
            run(["ip", "netns", "delete", ns], check=False)
        run(["ip", "link", "delete", BRIDGE], check=False)
        if not self.runc_root_existed:
            shutil.rmtree("/run/containerd", ignore_errors=True)
        if self.kube is not None:
            self.kube.close()


def _netns() -> list[str]:
    d = Path("/run/netns")
    return [p.name for p in d.iterdir()] if d.is_dir() else []


def _umount_under(root: Path) -> None:
    """Lazily unmounts every mount point under ``root``, deepest first."""
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mp = line.split()[1].replace("\\040", " ")
        if mp == str(root) or mp.startswith(str(root) + "/"):
            mounts.append(mp)
    for mp in sorted(mounts, key=len, reverse=True):
        run(["umount", "-l", mp], check=False)


def _kill_cgroup_leftovers() -> None:
    """SIGKILLs any process still in the kubelet's pod cgroups (a container whose shim died)."""
    for procs in Path("/sys/fs/cgroup").glob("*/kubepods*/**/cgroup.procs"):
        try:
            pids = procs.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError, PermissionError):
                pass


CONTAINERD_CONFIG = """\
# containerd for the node stage (tests/pykit/node.py): everything under the test's directory.
version = 3
root = "{w}/containerd/root"
state = "{w}/containerd/state"

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "captf.local/pause:v1"

[plugins."io.containerd.cri.v1.runtime"]
  # This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its OOM score: the
  # sandbox's -998 (and a Guaranteed pod's -997) would fail in runc ("failed to update
  # /proc/self/oom_score_adj"). Bounded to containerd's own score (0) instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{w}/cni/bin"]
    conf_dir = "{w}/cni/net.d"
"""
