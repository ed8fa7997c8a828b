"""A small OAuth 2.1 authorization server for the walkthroughs and the Python interop tests.

It holds one RSA key (generated with the `openssl` command, so nothing beyond the standard
library and a stock system is needed), publishes its RFC 8414 metadata and its JWKS, and
answers the client-credentials grant with RS256 JWT access tokens whose audience is the
RFC 8707 `resource` the client asked for. Registered clients carry the claims their tokens
get (a tenant claim such as `org_id`) and the scopes they may be granted.
"""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Client:
    def __init__(self, secret, claims=None, scopes=None):
        self.secret = secret
        self.claims = claims or {}
        # None: any scope asked for is granted; else only these.
        self.scopes = scopes


class IdentityProvider:
    """Serves on a free loopback port until `close()`."""

    def __init__(self, clients):
        self.clients = clients
        self.kid = "walkthrough-1"
        # (client_id, resource, scope asked for, scope granted) of every token handed out.
        self.issued = []
        self.dir = tempfile.mkdtemp(prefix="snodo-idp-")
        self.key = os.path.join(self.dir, "key.pem")
        subprocess.run(
            ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.key],
            check=True, capture_output=True,
        )
        out = subprocess.run(
            ["openssl", "rsa", "-in", self.key, "-noout", "-modulus"],
            check=True, capture_output=True, text=True,
        ).stdout
        modulus = bytes.fromhex(out.strip().split("=", 1)[1])
        self.jwk = {
            "kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
            "n": b64url(modulus), "e": b64url((65537).to_bytes(3, "big")),
        }
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("cache-control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = urllib.parse.urlparse(self.path).path
                if path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
                    self.reply(200, provider.metadata())
                elif path == "/jwks":
                    self.reply(200, {"keys": [provider.jwk]})
                else:
                    self.reply(404, {"error": "not_found"})

            def do_POST(self):
                if urllib.parse.urlparse(self.path).path != "/token":
                    return self.reply(404, {"error": "not_found"})
                length = int(self.headers.get("content-length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                status, body = provider.grant(form, self.headers.get("authorization"))
                self.reply(status, body)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def trusted_as(self, tenant_claim):
        """The TOML of a Snodo configuration's entry trusting this issuer, the tenant read
        from the claim `tenant_claim`."""
        return f"""[[auth.oauth.issuers]]
issuer = "{self.issuer}"
tenant_claim = "{tenant_claim}"
"""

    @property
    def issuer(self):
        return f"http://127.0.0.1:{self.port}"

    def metadata(self):
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
        }

    def grant(self, form, authorization):
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.lower().startswith("basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            client_id, secret = (urllib.parse.unquote(p) for p in decoded.split(":", 1))
        client = self.clients.get(client_id)
        if client is None or client.secret != secret:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        resource = form.get("resource")
        if not resource:
            return 400, {"error": "invalid_target", "error_description": "a resource is required"}
        # A client is granted what it asked for within what it may hold (RFC 6749 3.3
        # lets the server grant less; the answer's `scope` says what was granted).
        asked = form.get("scope", "").split()
        scope = " ".join(s for s in asked if client.scopes is None or s in client.scopes)
        self.issued.append((client_id, resource, " ".join(asked), scope))
        token = self.sign({"sub": client_id, "aud": resource, "scope": scope, **client.claims})
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 600, "scope": scope}

    def sign(self, claims, ttl=600):
        """An RS256 access token from this issuer with `claims` over the usual ones."""
        now = int(time.time())
        body = {"iss": self.issuer, "iat": now, "exp": now + ttl, "jti": b64url(os.urandom(12)), **claims}
        header = {"alg": "RS256", "typ": "at+jwt", "kid": self.kid}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(body).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", self.key],
            input=signing_input.encode(), check=True, capture_output=True,
        ).stdout
        return f"{signing_input}.{b64url(signature)}"

    def close(self):
        self.http.shutdown()
        self.http.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)
