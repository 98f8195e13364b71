"""Creates a container in the Azure Blob emulator (Azurite) listening on 127.0.0.1:<port>.

    azure_container.py <port> <container>

Azurite's well-known development account and key (public, documented by Microsoft).
"""

import sys
import time

from azure.storage.blob import BlobServiceClient

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def main() -> None:
    port, container = sys.argv[1], sys.argv[2]
    conn = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={KEY};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )
    deadline = time.time() + 30
    while True:
        try:
            BlobServiceClient.from_connection_string(conn).create_container(container)
            return
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
