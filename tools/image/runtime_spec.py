"""The chart's pod as an OCI runtime bundle: a rendered Deployment's container (args, probes,
securityContext, resources) translated to a runc ``config.json`` the way a kubelet and containerd
would run it, and the kubelet's projected ServiceAccount volume (atomic-writer layout).

What is translated, and how (docs/decisions/image.md):

- command/args: the image's Entrypoint (the container sets no ``command``) then the container's
  ``args``; Env: the image's, then what the kubelet adds (HOSTNAME, KUBERNETES_SERVICE_HOST/PORT;
  ``enableServiceLinks: false`` adds no other service variables).
- securityContext: runAsUser/runAsGroup as the process user (runAsNonRoot refuses uid 0, as the
  kubelet does), ``capabilities.drop: [ALL]`` as empty capability sets,
  ``allowPrivilegeEscalation: false`` as noNewPrivileges, ``readOnlyRootFilesystem`` as a read-only
  root, ``seccompProfile: RuntimeDefault`` as the runtime's default profile: the containers-common
  profile (CRI-O's and podman's RuntimeDefault; containerd's is generated from the same Moby
  profile), filtered for this architecture and the (empty) capability set as the runtimes do.
- resources: limits.memory as the memory cgroup limit, requests.cpu as CPU shares
  (milliCPU * 1024 / 1000, at least 2: the kubelet's formula), limits.cpu (none in the chart) as a
  CFS quota over a 100 ms period.
- namespaces: pid, ipc, uts, mount of its own; the host's network namespace (the test's
  kube-apiserver listens on the host's loopback), no user namespace (the pod's default).
- mounts: /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys (read-only) and its cgroup, as the
  runtimes mount them; /etc/hosts, /etc/hostname, /etc/resolv.conf as the kubelet does; the
  ServiceAccount volume read-only at /var/run/secrets/kubernetes.io/serviceaccount; the
  termination log at the container's terminationMessagePath.
"""

from __future__ import annotations

import base64

import json
import os
import platform
import re
import secrets
import time
from pathlib import Path
from typing import Any

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTAINERS_SECCOMP = Path("/usr/share/containers/seccomp.json")

_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def quantity_bytes(q: str | int) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(q))
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"unsupported quantity {q!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def quantity_millicpu(q: str | int) -> int:
    s = str(q)
    return int(s[:-1]) if s.endswith("m") else int(float(s) * 1000)


def deployment_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, the one container) of the rendered chart's Deployment."""
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def effective_security(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The container's securityContext over the pod's, as the kubelet merges them."""
    out = dict(pod.get("securityContext") or {})
    out.update(container.get("securityContext") or {})
    return out


# ---- seccomp: the runtime default profile ----

_OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def seccomp_runtime_default(caps: set[str], profile: Path = CONTAINERS_SECCOMP) -> dict[str, Any]:
    """The containers-common default profile as an OCI runtime-spec ``linux.seccomp``, with the
    entries kept that apply to this architecture, this kernel and ``caps`` (what runc's callers do
    before handing it over)."""
    doc = json.loads(profile.read_text())
    arch = _OCI_ARCH.get(platform.machine(), platform.machine())
    scmp = {"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}[arch]
    archs: list[str] = []
    for a in doc.get("archMap", []):
        if a["architecture"] == scmp:
            archs = [a["architecture"], *a.get("subArchitectures", [])]
    kernel = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
    syscalls = []
    for s in doc["syscalls"]:
        inc, exc = s.get("includes") or {}, s.get("excludes") or {}
        if inc.get("arches") and arch not in inc["arches"]:
            continue
        if inc.get("caps") and not set(inc["caps"]) <= caps:
            continue
        if inc.get("minKernel") and kernel < tuple(int(x) for x in inc["minKernel"].split(".")[:2]):
            continue
        if exc.get("arches") and arch in exc["arches"]:
            continue
        if exc.get("caps") and set(exc["caps"]) & caps:
            continue
        entry: dict[str, Any] = {"names": s["names"], "action": s["action"]}
        if s.get("errnoRet") is not None:
            entry["errnoRet"] = s["errnoRet"]
        if s.get("args"):
            entry["args"] = [{k: v for k, v in a.items() if k in ("index", "value", "valueTwo", "op")}
                             for a in s["args"]]
        syscalls.append(entry)
    out: dict[str, Any] = {"defaultAction": doc["defaultAction"], "architectures": archs, "syscalls": syscalls}
    if doc.get("defaultErrnoRet") is not None:
        out["defaultErrnoRet"] = doc["defaultErrnoRet"]
    return out


# ---- the kubelet's projected ServiceAccount volume ----

class ProjectedVolume:
    """A directory laid out as the kubelet's atomic writer lays out a projected volume:
    ``..<timestamp>.<random>/`` holds the files, ``..data`` links to it, and each file name at the
    top links to ``..data/<name>``. ``update`` writes a new timestamped directory, points a
    ``..data_tmp`` link at it, renames that over ``..data`` (the one atomic step) and removes the
    old directory, as ``AtomicWriter.Write`` does."""

    def __init__(self, path: Path, mode: int = 0o644):
        self.path = path
        self.mode = mode
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o1777)  # the volume's root as the kubelet's tmpfs: world-searchable

    def _ts_dir(self) -> Path:
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
        return self.path / f"..{stamp}.{secrets.randbelow(10**9):09d}"

    def update(self, files: dict[str, bytes]) -> Path:
        new = self._ts_dir()
        new.mkdir(mode=0o755)
        for name, data in files.items():
            (new / name).write_bytes(data)
            os.chmod(new / name, self.mode)
        data_link = self.path / "..data"
        old = Path(os.readlink(data_link)) if data_link.is_symlink() else None
        tmp = self.path / "..data_tmp"
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(new.name, tmp)
        os.rename(tmp, data_link)
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        if old is not None:
            for f in (self.path / old).iterdir():
                f.unlink()
            (self.path / old).rmdir()
        return new


# ---- the runtime spec ----

def burstable_oom_score_adj(memory_request: str | None) -> int:
    """The kubelet's oom_score_adj for a Burstable pod: 1000 - 1000 * request / node memory,
    kept within 2..999 (the chart's pod has requests below its limits: Burstable)."""
    total = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    req = quantity_bytes(memory_request) if memory_request else 0
    return min(999, max(2, 1000 - (1000 * req) // total)) if total else 999


def runtime_spec(objects: list[dict[str, Any]], image_config: dict[str, Any], *, hostname: str,
                 sa_volume: Path, etc_dir: Path, termination_log: Path, env: dict[str, str],
                 cgroups_path: str) -> dict[str, Any]:
    pod, c = deployment_container(objects)
    sec = effective_security(pod, c)
    cfg = image_config.get("config", {})
    uid, gid = int(sec.get("runAsUser", -1)), int(sec.get("runAsGroup", -1))
    if uid < 0 or gid < 0:
        user = cfg.get("User", "")
        u, _, g = user.partition(":")
        uid = uid if uid >= 0 else int(u)
        gid = gid if gid >= 0 else int(g or 0)
    if sec.get("runAsNonRoot") and uid == 0:
        raise ValueError("runAsNonRoot with uid 0: the kubelet would refuse to start the container")
    drop = set((sec.get("capabilities") or {}).get("drop") or [])
    add = set((sec.get("capabilities") or {}).get("add") or [])
    # containerd's default set, less what is dropped, plus what is added
    default_caps = {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
                    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
    caps = set() if "ALL" in drop else default_caps - {f"CAP_{d}" for d in drop}
    caps |= {f"CAP_{a}" for a in add}
    if c.get("command"):
        argv = list(c["command"]) + list(c.get("args") or [])
    else:
        argv = list(cfg.get("Entrypoint") or []) + list(c.get("args") or cfg.get("Cmd") or [])
    envs = list(cfg.get("Env") or []) + [f"HOSTNAME={hostname}"] + [f"{k}={v}" for k, v in env.items()]
    envs += [f"{e['name']}={e.get('value', '')}" for e in c.get("env") or []]

    resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    limits = (c.get("resources") or {}).get("limits") or {}
    requests = (c.get("resources") or {}).get("requests") or {}
    if "memory" in limits:
        resources["memory"] = {"limit": quantity_bytes(limits["memory"])}
    cpu: dict[str, Any] = {}
    if "cpu" in requests or "cpu" in limits:
        milli = quantity_millicpu(requests.get("cpu", limits.get("cpu")))
        cpu["shares"] = max(2, milli * 1024 // 1000)
    if "cpu" in limits:
        cpu["quota"], cpu["period"] = max(1000, quantity_millicpu(limits["cpu"]) * 100), 100000
    if cpu:
        resources["cpu"] = cpu

    seccomp_type = (sec.get("seccompProfile") or {}).get("type", "Unconfined")
    linux: dict[str, Any] = {
        "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
        "resources": resources,
        "cgroupsPath": cgroups_path,
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                        "/sys/firmware", "/sys/devices/virtual/powercap"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    }
    if seccomp_type == "RuntimeDefault":
        linux["seccomp"] = seccomp_runtime_default(caps)
    elif seccomp_type != "Unconfined":
        raise ValueError(f"seccompProfile {seccomp_type} is not translated")

    ro = ["nosuid", "noexec", "nodev", "ro"]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ro},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ro + ["relatime"]},
        {"destination": "/etc/hosts", "type": "bind", "source": str(etc_dir / "hosts"), "options": ["rbind", "rw"]},
        {"destination": "/etc/hostname", "type": "bind", "source": str(etc_dir / "hostname"), "options": ["rbind", "rw"]},
        {"destination": "/etc/resolv.conf", "type": "bind", "source": str(etc_dir / "resolv.conf"),
         "options": ["rbind", "rw"]},
        {"destination": c.get("terminationMessagePath", "/dev/termination-log"), "type": "bind",
         "source": str(termination_log), "options": ["rbind", "rw"]},
    ]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for vm in c.get("volumeMounts") or []:
        v = volumes[vm["name"]]
        if "emptyDir" in v:
            size = (v["emptyDir"] or {}).get("sizeLimit")
            opts = ["nosuid", "nodev", "mode=1777"] + ([f"size={quantity_bytes(size)}"] if size else [])
            mounts.append({"destination": vm["mountPath"], "type": "tmpfs", "source": "tmpfs",
                           "options": opts + (["ro"] if vm.get("readOnly") else [])})
        elif "secret" in v:
            # The kubelet writes a Secret's keys as files: the rendered Secret (the chart's
            # helm-made certificate, by default) is written next to etc_dir and bound read-only.
            name = v["secret"]["secretName"]
            found = [o for o in objects if o.get("kind") == "Secret" and o["metadata"]["name"] == name]
            if not found:
                raise ValueError(f"volume {vm['name']}: Secret {name} is not among the rendered objects")
            src = etc_dir.parent / f"secret-{vm['name']}"
            src.mkdir(parents=True, exist_ok=True)
            for key, value in (found[0].get("data") or {}).items():
                (src / key).write_bytes(base64.b64decode(value))
            for key, value in (found[0].get("stringData") or {}).items():
                (src / key).write_text(value)
            mounts.append({"destination": vm["mountPath"], "type": "bind", "source": str(src),
                           "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})
        else:
            raise ValueError(f"volume {vm['name']} ({sorted(v)}) is not translated: extend runtime_spec")
    if pod.get("automountServiceAccountToken", True):
        mounts.append({"destination": SA_DIR, "type": "bind", "source": str(sa_volume),
                       "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, "additionalGids": [gid]},
            "args": argv,
            "env": envs,
            "cwd": cfg.get("WorkingDir") or "/",
            "capabilities": {k: sorted(caps) for k in ("bounding", "effective", "permitted")},
            "noNewPrivileges": sec.get("allowPrivilegeEscalation") is False,
            "oomScoreAdj": burstable_oom_score_adj(requests.get("memory")),
        },
        "root": {"path": "rootfs", "readonly": bool(sec.get("readOnlyRootFilesystem"))},
        "hostname": hostname,
        "mounts": mounts,
        "linux": linux,
    }
