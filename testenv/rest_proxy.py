"""A proxy in front of an Iceberg REST catalog that answers commits with 500 after
forwarding them: the catalog applies the commit, its client is told it failed (the REST
protocol's "commit state unknown"). For the tests of what a writer does then.

`python rest_proxy.py <upstream-url> <commits-to-fail>` prints `PORT <n>` once it listens,
then serves until killed. A commit is a POST to `/v1/[prefix/]namespaces/<ns>/tables/<t>`;
the first `<commits-to-fail>` of them are answered 500, every other request is passed on
as it is.
"""

import re
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = re.compile(r"^/v1/(.+/)?namespaces/[^/]+/tables/[^/?]+$")


def main() -> None:
    upstream = sys.argv[1].rstrip("/")
    left = [int(sys.argv[2])]

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("host", "content-length", "connection")
            }
            request = urllib.request.Request(
                upstream + self.path, data=body, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(request) as r:
                    status, answer, kind = r.status, r.read(), r.headers.get("Content-Type")
            except urllib.error.HTTPError as e:
                status, answer, kind = e.code, e.read(), e.headers.get("Content-Type")
            path = self.path.split("?")[0]
            if self.command == "POST" and COMMIT.match(path) and status == 200 and left[0] > 0:
                left[0] -= 1
                status, answer, kind = 500, b'{"error": {"message": "injected", "type": "InternalServerError", "code": 500}}', "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
