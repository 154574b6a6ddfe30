"""A local Cloud Storage server for benchmarks and tests: `gcp-storage-emulator` (PyPI),
the JSON API over HTTP on 127.0.0.1, objects on disk under `data_dir` (so it can be killed
and restarted with its objects). Point the engine at it with STORAGE_EMULATOR_HOST."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_emulator(data_dir: Path, bucket: str, port: int, timeout: float = 30) -> subprocess.Popen:
    """Start the server with `bucket` created, and wait until it accepts connections."""
    data_dir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
         "--default-bucket", bucket, "--quiet"],
        env={**os.environ, "STORAGE_BASE": str(data_dir), "STORAGE_DIR": "store"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"gcp-storage-emulator did not start on 127.0.0.1:{port}")
