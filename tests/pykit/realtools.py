"""The real tools of the ``realtools`` stage: OpenTofu, Terraform and kubectl built from Go modules
(tools/realtools/build.sh), and what the tests do with them.

- ``tool_binaries()``: the pinned binaries, built (or waited for) on first use.
- ``IacTool``: one of tofu/terraform in its own HOME: ``init`` a root module whose only backend is
  CAPTF's ``kubernetes`` backend, and ``start_apply`` an apply that holds the state lock while a
  ``terraform_data`` ``local-exec`` provisioner sleeps. The apply runs under ``unshare --uts`` with
  the hostname a test gives, so lock-info ``Who`` is ``<user>@<hostname>`` as in a runner Job pod.
- ``Shell``: runs a command as printed (bash), with ``kubectl``, ``tofu``, ``terraform`` and
  ``captf-lock-exporter`` on PATH and HOME holding the identity's ``~/.kube/config``.
- ``printed_commands()`` / ``manual_unlock_script()`` / ``page_commands()``: the commands
  ``explain`` and the lock page print, taken from their output.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from pykit.controlplane import ROOT, bin_cache

BUILD_SCRIPT = ROOT / "tools" / "realtools" / "build.sh"
TOFU_VERSION = (ROOT / "tools" / "opentofu" / "VERSION").read_text().strip()
TERRAFORM_VERSION = (ROOT / "tools" / "terraform" / "VERSION").read_text().strip()
KUBECTL_VERSION = (ROOT / "tools" / "kube" / "VERSION").read_text().strip()

VERSIONS = {"tofu": TOFU_VERSION, "terraform": TERRAFORM_VERSION, "kubectl": KUBECTL_VERSION}


def tool_binaries(names: tuple[str, ...]) -> dict[str, Path]:
    """name -> binary for ``names`` (tofu, terraform, kubectl); runs tools/realtools/build.sh for the
    missing ones (it waits on a build already running and builds nothing that exists)."""
    paths = {n: bin_cache() / f"{n}-{VERSIONS[n]}" for n in names}
    missing = [n for n, p in paths.items() if not os.access(p, os.X_OK)]
    if missing:
        subprocess.run(["bash", str(BUILD_SCRIPT), *missing], check=True)
    return paths


#: The root module: CAPTF's partial backend, and a resource that holds the lock while it sleeps.
#: ``run`` changes on every apply, so the resource is replaced and its provisioner runs again.
ROOT_MODULE = {
    "terraform": {"backend": {"kubernetes": {}}},
    "variable": {"run": {"type": "string", "default": "0"}, "hold": {"type": "string", "default": "0"}},
    "resource": {"terraform_data": {"hold": {
        "triggers_replace": "${var.run}",
        "provisioner": [{"local-exec": {"command": "sleep ${var.hold}"}}],
    }}},
}

#: Variables of the tools and of client-go that would change what a run reads.
_DROP_ENV = ("KUBECONFIG", "KUBE_", "TF_", "CAPTF_LOCK_EXPORTER_", "KUBERNETES_")


def clean_env(home: Path, path_dirs: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV)}
    env.update(HOME=str(home), CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1", TF_INPUT="0",
               PATH=os.pathsep.join([*map(str, path_dirs), env.get("PATH", "/usr/bin:/bin")]))
    return env


@dataclass
class Apply:
    """A running ``apply``: its process (which heads its own process session) and log."""

    proc: subprocess.Popen
    log: Path
    started: float = field(default_factory=time.monotonic)

    def kill(self) -> None:
        """SIGKILL the tool and its provisioner's ``sleep`` (the whole session): a lost runner."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class IacTool:
    """``tofu`` or ``terraform`` with the binary built from its Go module."""

    name: str
    binary: Path
    home: Path

    @property
    def version(self) -> str:
        return VERSIONS[self.name].lstrip("v")

    def env(self) -> dict[str, str]:
        self.home.mkdir(parents=True, exist_ok=True)
        return clean_env(self.home, [])

    def init(self, workdir: Path, backend: Mapping[str, str]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "main.tf.json").write_text(json.dumps(ROOT_MODULE, indent=2))
        argv = [str(self.binary), "init", "-input=false", "-no-color",
                *[f"-backend-config={k}={v}" for k, v in backend.items()]]
        r = subprocess.run(argv, cwd=workdir, env=self.env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{self.name} init failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"

    def start_apply(self, workdir: Path, hostname: str, hold_seconds: int, log: Path) -> Apply:
        """``apply`` in a UTS namespace whose hostname is ``hostname``; holds the lock about
        ``hold_seconds`` (the provisioner's sleep) and then releases it, unless killed."""
        script = 'hostname "$1" && exec "$2" apply -auto-approve -input=false -no-color -lock-timeout=0s ' \
                 '-var "run=$3" -var "hold=$4"'
        argv = ["unshare", "--uts", "sh", "-c", script, "sh", hostname, str(self.binary),
                str(time.time_ns()), str(hold_seconds)]
        out = log.open("w")
        proc = subprocess.Popen(argv, cwd=workdir, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        return Apply(proc, log)


@dataclass
class Shell:
    """Runs printed commands with bash, as the identity whose kubeconfig is ``~/.kube/config``."""

    bindir: Path
    home: Path
    workdir: Path

    @classmethod
    def make(cls, base: Path, kubeconfig_text: str, binaries: Mapping[str, Path]) -> "Shell":
        bindir, home, work = base / "bin", base / "home", base / "work"
        for d in (bindir, home / ".kube", work):
            d.mkdir(parents=True, exist_ok=True)
        (home / ".kube" / "config").write_text(kubeconfig_text)
        for name, path in binaries.items():
            link = bindir / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(path)
        return cls(bindir, home, work)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = clean_env(self.home, [self.bindir])
        env.update(extra or {})
        return env

    def run(self, command: str, timeout: float = 120, env: Mapping[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=cwd or self.workdir, env=self.env(env),
                              capture_output=True, text=True, timeout=timeout)


def _join_continuations(lines: list[str]) -> list[str]:
    out: list[str] = []
    buf = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1].strip() + " "
            continue
        out.append((buf + line.strip()).strip())
        buf = ""
    if buf:
        out.append(buf.strip())
    return out


def printed_commands(text: str) -> list[str]:
    """The one-line ``kubectl`` and ``captf-lock-exporter`` commands in ``explain``'s output (or any
    plain text), continuation lines joined, in order."""
    cmds = []
    for line in _join_continuations(text.splitlines()):
        if re.match(r"^(kubectl|captf-lock-exporter) ", line):
            cmds.append(line)
    return cmds


def manual_unlock_script(explain_out: str) -> str:
    """The workstation force-unlock ``explain`` prints for a foreign or unknown lock, as a script:
    the LABELS assignment, the root module, and the ``TF=...`` block up to its closing ``)``.
    The IMAGE line and the ``docker run`` variant are left out (no container engine here)."""
    lines = explain_out.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("LABELS=") or s == "mkdir -p root" or s.startswith("echo '{}' > root/"):
            out.append(s)
        elif s.startswith("cat > root/main.tf.json <<'EOF'"):
            out.append(s)
            i += 1
            while lines[i] != "EOF":
                out.append(lines[i])
                i += 1
            out.append("EOF")
        elif re.fullmatch(r"TF=\w+", s):
            out.append(s)
            i += 1
            while True:
                out.append(lines[i].strip())
                if lines[i].rstrip().endswith(")"):
                    break
                i += 1
        i += 1
    assert any(l.startswith("TF=") for l in out), f"no TF= block in\n{explain_out}"
    return "\n".join(out) + "\n"


def page_commands(page_html: str) -> list[str]:
    """The commands of a lock page's ``<pre id="commands">``: every line that is not a comment."""
    m = re.search(r'<pre id="commands">(.*?)</pre>', page_html, re.S)
    assert m, "the lock page has no <pre id=\"commands\">"
    text = html.unescape(m.group(1))
    return [l for l in _join_continuations(text.splitlines()) if l and not l.startswith("#")]
