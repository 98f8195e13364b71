"""An S3-compatible server for the tests: moto, on 127.0.0.1, on a free port.

Prints `PORT <n>` once it listens, then serves until killed. Requests are served one at a
time (moto's own server is threaded, and its conditional puts are not atomic then).

`--ignore-conditions` drops `If-None-Match` and `If-Match` from requests: a store that does
not honour conditional writes, as some S3-compatible servers do not.
"""

import sys

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def ignoring_conditions(app):
    def wrapped(environ, start_response):
        environ.pop("HTTP_IF_NONE_MATCH", None)
        environ.pop("HTTP_IF_MATCH", None)
        return app(environ, start_response)

    return wrapped


def main() -> None:
    app = DomainDispatcherApplication(create_backend_app)
    if "--ignore-conditions" in sys.argv[1:]:
        app = ignoring_conditions(app)
    server = make_server("127.0.0.1", 0, app, threaded=False)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
