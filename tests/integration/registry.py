"""A tiny Confluent schema registry for the integration tests (real HTTP, in the test's process): ``GET
/schemas/ids/<id>`` answers the schemas it was given or registered, ``POST /subjects/<subject>/versions`` registers
a schema (``{"schema": "<json>"}``) and answers its id -- the same id for the same schema, as Confluent's does."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Registry:
    """``schemas``: id -> schema known from the start; registered ones get ids from 100 on; ``subjects`` records
    which subject each registration named."""

    def __init__(self, schemas: dict[int, dict[str, Any]]) -> None:
        self.schemas: dict[int, str] = {i: json.dumps(s) for i, s in schemas.items()}
        self.subjects: dict[str, list[int]] = {}
        lock = threading.Lock()
        reg = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _answer(self, code: int, body: bytes = b"") -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                try:
                    text = reg.schemas[int(self.path.rstrip("/").rsplit("/", 1)[1])]
                except (KeyError, ValueError):
                    self._answer(404)
                    return
                self._answer(200, json.dumps({"schema": text}).encode())

            def do_POST(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
                    self._answer(404)
                    return
                text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["schema"]
                canonical = json.dumps(json.loads(text), sort_keys=True)
                with lock:
                    known = [i for i, t in reg.schemas.items()
                             if json.dumps(json.loads(t), sort_keys=True) == canonical]
                    sid = known[0] if known else max([99, *reg.schemas]) + 1
                    reg.schemas[sid] = text
                    reg.subjects.setdefault(parts[1], []).append(sid)
                self._answer(200, json.dumps({"id": sid}).encode())
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
