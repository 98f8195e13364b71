"""An S3-compatible server for the tests: moto, on 127.0.0.1, on a free port.

Prints `PORT <n>` once it listens, then serves until killed. Requests are served one at a
time (moto's own server is threaded, and its conditional puts are not atomic then).

`--ignore-conditions` drops `If-None-Match` and `If-Match` from requests: a store that does
not honour conditional writes, as some S3-compatible servers do not.

`--check-keys` checks every request's credentials as AWS does (moto's IAM
authentication): the test keys are unknown to it, so every request but the bucket's creation
is refused with 403 `InvalidAccessKeyId`, as wrong credentials are.

`--count-requests` counts requests by kind (GET, PUT, HEAD, DELETE, POST, and LIST for
listings): `GET /__requests` returns the counts as JSON, `DELETE /__requests` resets them
(for the benchmark's request counts).
"""

import collections
import json
import os
import sys


def ignoring_conditions(app):
    def wrapped(environ, start_response):
        environ.pop("HTTP_IF_NONE_MATCH", None)
        environ.pop("HTTP_IF_MATCH", None)
        return app(environ, start_response)

    return wrapped


def counting_requests(app):
    counts = collections.Counter()

    def wrapped(environ, start_response):
        method = environ["REQUEST_METHOD"]
        if environ.get("PATH_INFO") == "/__requests":
            if method == "DELETE":
                counts.clear()
            body = json.dumps(counts).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        query = environ.get("QUERY_STRING", "")
        counts["LIST" if method == "GET" and "list-type" in query else method] += 1
        return app(environ, start_response)

    return wrapped


def main() -> None:
    if "--check-keys" in sys.argv[1:]:
        # Read by moto when it is imported: actions after the first are authenticated.
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "1"
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    if "--ignore-conditions" in sys.argv[1:]:
        app = ignoring_conditions(app)
    if "--count-requests" in sys.argv[1:]:
        app = counting_requests(app)
    server = make_server("127.0.0.1", 0, app, threaded=False)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
