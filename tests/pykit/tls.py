"""Serving certificates for the exporter's HTTPS endpoint, issued by the test control plane's CA
(so a client verifies them with that CA), and laid out as the kubelet lays out a Secret volume:
``tls.crt`` and ``tls.key`` are symlinks into ``..data``, itself a symlink to a timestamped
directory that a rotation replaces with one atomic rename."""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import socket
import ssl
from pathlib import Path


def issue(ca_crt: Path, ca_key: Path, cn: str, sans: tuple[str, ...] = ("127.0.0.1", "localhost"),
          days: int = 2) -> tuple[bytes, bytes]:
    """A server certificate and its PKCS#8 key (PEM) for ``sans``, signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate(ca_crt.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for s in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(s)))
        except ValueError:
            names.append(x509.DNSName(s))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(signer, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


class SecretVolume:
    """A directory laid out like a kubelet-projected Secret volume holding ``tls.crt``/``tls.key``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    @property
    def cert(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key(self) -> Path:
        return self.root / "tls.key"

    def write(self, cert: bytes, key: bytes) -> None:
        """A new timestamped directory, then ``..data`` swapped to it with one rename (the
        kubelet's atomic writer), then the old directory removed."""
        self.generation += 1
        stamp = dt.datetime.now(dt.timezone.utc).strftime(f"..%Y_%m_%d_%H_%M_%S.{self.generation}")
        new = self.root / stamp
        new.mkdir()
        (new / "tls.crt").write_bytes(cert)
        (new / "tls.key").write_bytes(key)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        tmp = self.root / "..data_tmp"
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(stamp, tmp)
        os.rename(tmp, self.root / "..data")
        for name in ("tls.crt", "tls.key"):
            link = self.root / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        if old:
            for f in (self.root / old).iterdir():
                f.unlink()
            (self.root / old).rmdir()


def served_fingerprint(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> str:
    """SHA-256 of the leaf certificate a TLS handshake on ``port`` gets (no verification)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    return hashlib.sha256(der or b"").hexdigest()


def pem_fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of a PEM certificate's DER, comparable with ``served_fingerprint``."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem.decode())).hexdigest()
