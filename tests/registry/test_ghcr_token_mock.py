"""Anonymous pull through the bearer-token flow, mocking ghcr.io's token service.

docker-registry runs with its real `auth: token` (JWTs checked against a certificate
made here) over the same storage as the session registry; a small loopback token
service issues anonymous pull-only tokens, as ghcr.io does for public images.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from pipeline.errors import RegistryError
from pipeline.registry import local as localregistry
from pipeline.registry.client import RegistryClient
from pipeline.registry.pull import pull
from pipeline.registry.push import push_layout

SERVICE, ISSUER = "mock-ghcr.io", "mock-ghcr-token-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class MockGhcrTokenService:
    """Issues ES256 JWTs granting `pull` (never `push`) to anyone, like ghcr.io for public images."""

    def __init__(self, tmp_path):
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.now(UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(hours=1))
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = tmp_path / "token-root.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.scopes: list[str] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                query = parse_qs(urlsplit(self.path).query)
                scope = query.get("scope", [""])[0]
                service.scopes.append(scope)
                body = json.dumps({"token": service.token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, scope: str) -> str:
        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":")
            granted = [a for a in actions.split(",") if a == "pull"]
            access.append({"type": "repository", "name": name, "actions": granted})
        now = int(time.time())
        header = {
            "typ": "JWT",
            "alg": "ES256",
            "x5c": [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()],
        }
        claims = {
            "iss": ISSUER,
            "sub": "",
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ghcr_like(local_registry, tmp_path):
    """(token service, registry demanding its tokens) over the session registry's storage."""
    tokens = MockGhcrTokenService(tmp_path)
    root = tmp_path / "token-registry"
    state = localregistry.start(
        root,
        storage=local_registry.storage,
        token_auth=localregistry.TokenAuth(
            realm=tokens.realm, service=SERVICE, issuer=ISSUER, rootcertbundle=tokens.cert_path
        ),
    )
    try:
        yield tokens, state
    finally:
        localregistry.stop(root)
        tokens.close()


def test_anonymous_pull_via_mocked_ghcr_token_service(
    ghcr_like, local_registry, repo_name, tmp_path, build_image, writer
):
    tokens, token_registry = ghcr_like
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")

    bare = requests.get(f"http://{token_registry.address}/v2/{repo_name}/manifests/{img.manifest_digest}")
    assert bare.status_code == 401
    assert bare.headers["WWW-Authenticate"].startswith(f'Bearer realm="{tokens.realm}"')

    pulled = pull(f"{token_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
    assert pulled.manifest_digest == img.manifest_digest
    assert pulled.compressed_size == img.manifest.compressed_size
    assert f"repository:{repo_name}:pull" in tokens.scopes


def test_pull_only_token_cannot_push(ghcr_like, repo_name, tmp_path, build_image):
    _, token_registry = ghcr_like
    build_image(tmp_path / "src")
    with pytest.raises(RegistryError, match="HTTP 401"):
        push_layout(RegistryClient(token_registry.address), repo_name, tmp_path / "src")


def test_token_signed_by_another_key_is_refused(ghcr_like, local_registry, repo_name, tmp_path, build_image, writer):
    tokens, token_registry = ghcr_like
    img = build_image(tmp_path / "src")
    push_layout(writer(local_registry), repo_name, tmp_path / "src")
    tokens.key = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(RegistryError, match="HTTP 401"):
        pull(f"{token_registry.address}/{repo_name}@{img.manifest_digest}", tmp_path / "dst")
