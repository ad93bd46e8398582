"""An HTTP MCP server that wants a sign-in: every MCP request is answered 401.

It publishes the RFC 9728 resource metadata and an authorization server's
metadata with dynamic registration, which is what makes the Claude Code CLI
call the server ``needs-auth`` rather than failed.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def _send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _any(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.path.startswith("/.well-known/oauth-protected-resource"):
            self._send_json(200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
        elif self.path.startswith("/.well-known/oauth-authorization-server"):
            self._send_json(
                200,
                {
                    "issuer": base,
                    "authorization_endpoint": f"{base}/authorize",
                    "token_endpoint": f"{base}/token",
                    "registration_endpoint": f"{base}/register",
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                },
            )
        elif self.path.startswith("/register"):
            self._send_json(201, {"client_id": "test-client", "redirect_uris": []})
        else:
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource"',
            )
            self.send_header("content-length", "0")
            self.end_headers()

    do_GET = do_POST = do_DELETE = _any

    def log_message(self, *args: object) -> None:
        pass


class OAuthServer:
    def __init__(self) -> None:
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/mcp"

    def start(self) -> OAuthServer:
        threading.Thread(target=self.http.serve_forever, name="oauth", daemon=True).start()
        return self

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
