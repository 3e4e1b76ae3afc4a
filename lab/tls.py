#!/usr/bin/env python
"""Lab only: the CA and the server certificate the lab's GPUStack serves HTTPS with.

A real site brings its own certificate (its CA, or a public one) in pairserve_gpustack_tls_cert / _key /
_ca_file; the lab makes a private CA per lab (`python -m lab start`), so the tests cover the road a private CA
takes: the workers trust it through the nodes' trust store, the verify and bench plays and the tests verify
against it, and a client with another CA is refused. The lab's nodes share the host's network, so the server
certificate names 127.0.0.1, localhost, node-a and every IPv4 address of this machine (an outsider on the LAN
reaches the server at the host's address).

    python -m lab.tls DIR          write DIR/ca.crt, DIR/gpustack.crt, DIR/gpustack.key (0600), once per DIR
    python -m lab.tls --ca DIR     write a CA of its own (DIR/ca.crt, DIR/ca.key): the "unknown CA" of the tests
    python -m lab.tls --renew DIR  a new server certificate and key from DIR's CA (the rotation scenario, same CA)
    python -m lab.tls --next-ca DIR   a new CA and a server certificate from it in DIR/next/ (rotation, new CA)

Written atomically; nothing is replaced when the files are there (a lab that is up keeps its certificate).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAYS = 30


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(common_name: str):
    """(certificate, key) of a self-signed CA valid for DAYS days."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_server(ca_cert, ca_key, dns: list[str], ips: list[str]):
    """(certificate, key) of a TLS server certificate for those names, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pairserve lab GPUStack server")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def host_addresses() -> list[str]:
    """Every IPv4 address of this machine (`ip -4 -o addr`), loopback first."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], check=True, capture_output=True, text=True).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    return ["127.0.0.1"] + sorted(set(found) - {"127.0.0.1"})


def write_server_material(directory: Path) -> None:
    if all((directory / n).exists() for n in ("ca.crt", "gpustack.crt", "gpustack.key")):
        return
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = make_ca("pairserve lab CA")
    cert, key = make_server(ca_cert, ca_key, ["localhost", "node-a"], host_addresses())
    # Kept for the rotation scenario's certificate from the same CA (--renew).
    _write(directory / "ca.key", _key_pem(ca_key), 0o600)
    _write(directory / "gpustack.key", _key_pem(key), 0o600)
    _write(directory / "gpustack.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(directory / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)


def write_other_ca(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = make_ca("pairserve lab: a CA nobody trusts")
    _write(directory / "ca.key", _key_pem(key), 0o600)
    _write(directory / "ca.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)


def renew_server(directory: Path) -> None:
    """A new server certificate and key signed by DIR/ca.crt with DIR/ca.key, over DIR/gpustack.crt and .key."""
    ca_cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    cert, key = make_server(ca_cert, ca_key, ["localhost", "node-a"], host_addresses())
    _write(directory / "gpustack.key", _key_pem(key), 0o600)
    _write(directory / "gpustack.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)


def write_next_ca(directory: Path) -> None:
    """A new CA and a server certificate from it in DIR/next/, for the rotation to a new CA."""
    target = directory / "next"
    target.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = make_ca("pairserve lab CA (next)")
    cert, key = make_server(ca_cert, ca_key, ["localhost", "node-a"], host_addresses())
    _write(target / "ca.key", _key_pem(ca_key), 0o600)
    _write(target / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(target / "gpustack.key", _key_pem(key), 0o600)
    _write(target / "gpustack.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--ca", action="store_true", help="write a CA of its own only")
    mode.add_argument("--renew", action="store_true", help="a new server certificate from DIR's CA")
    mode.add_argument("--next-ca", action="store_true", help="a new CA and a server certificate from it in DIR/next/")
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.ca:
        write_other_ca(args.directory)
    elif args.renew:
        renew_server(args.directory)
    elif args.next_ca:
        write_next_ca(args.directory)
    else:
        write_server_material(args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
