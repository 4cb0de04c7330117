"""Certificates and TLS contexts for agents on separate hosts.

Every connection between parties (the job's owner and each DC's agent) is TLS
1.3 with both sides presenting a certificate signed by the CA the parties
agreed on. A certificate's subject common name names its party: a DC's name,
or :data:`OWNER`. Identity is the party, not the host: the owner finds an agent
at the address the AGENTS file gives and then requires the certificate of that
DC; hostnames are not checked (:func:`party_of`).

:func:`make_certs` writes a development CA and one key and certificate per
party (``chainpipe split --certs``), with the ``cryptography`` library. In a
real deployment each party makes its own key and has the agreed CA sign it;
nothing else changes.
"""

from __future__ import annotations

import datetime
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ...instance import InstanceError
from ...io import atomic_write

#: the party name of the job's owner (a DC may not take it)
OWNER = "owner"
#: how long development certificates are valid
VALID_DAYS = 365


def make_certs(outdir, parties: list[str]) -> list[Path]:
    """A development CA and a key and certificate for each party, under ``outdir``.

    Parameters
    ----------
    outdir : path
        The directory (made if missing): ``ca.pem``, then ``<party>.pem`` and
        ``<party>.key`` for each party. Keys are written readable by their owner only.
    parties : list of str
        The parties' names (each DC's name and :data:`OWNER`).

    Returns
    -------
    list of Path
        The files written, the CA's certificate first.
    """
    outdir = Path(outdir)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chainpipe development CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    written = [_write(outdir / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))]
    for party in parties:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)]))
                .issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        written.append(_write(outdir / f"{party}.pem",
                              cert.public_bytes(serialization.Encoding.PEM)))
        written.append(_write(outdir / f"{party}.key", key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()), private=True))
    return written


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    def write(tmp: Path) -> None:
        tmp.write_bytes(data)
        if private:
            os.chmod(tmp, 0o600)

    return atomic_write(path, write)


def context(side: str, ca, cert, key) -> ssl.SSLContext:
    """A TLS 1.3 context that presents ``cert`` and requires a peer certificate that
    ``ca`` signed.

    Parameters
    ----------
    side : {"server", "client"}
        An agent's listening side, or the side that connects.
    ca, cert, key : path
        PEM files: the agreed CA's certificate, this party's certificate and key.

    Raises
    ------
    InstanceError
        A file that cannot be read or does not hold what it should (one line naming
        the option and the file).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if side == "server"
                         else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = False  # the party is checked by name (party_of), not the host
    try:
        ctx.load_verify_locations(cafile=os.fspath(ca))
    except (OSError, ssl.SSLError) as exc:
        raise InstanceError([f"--tls-ca: {ca}: not a readable PEM CA certificate "
                             f"({_reason(exc)})"]) from None
    try:
        ctx.load_cert_chain(os.fspath(cert), os.fspath(key))
    except (OSError, ssl.SSLError) as exc:
        raise InstanceError([f"--tls-cert/--tls-key: {cert}, {key}: not a readable PEM "
                             f"certificate and its key ({_reason(exc)})"]) from None
    return ctx


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def party_of_file(path) -> str | None:
    """The party a PEM certificate file names (its subject's common name, the first one,
    as :func:`party_of` reads a peer's).

    Raises
    ------
    InstanceError
        The file cannot be read or holds no PEM certificate (one line naming
        ``--tls-cert`` and the file).
    """
    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise InstanceError([f"--tls-cert: {path}: not a readable PEM certificate "
                             f"({_reason(exc)})"]) from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def party_of(sock: ssl.SSLSocket) -> str | None:
    """The party a verified peer certificate names (its subject's common name)."""
    cert = sock.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None
