"""Where a run's outputs live: a local directory, or a Cloud Storage URL and its staging copy.

Every writer of the engine (CSV files, TensorBoard, torch.save, torch.distributed.checkpoint)
writes local files with the whole-or-absent rules of `trainer.outputs.atomic_files`. A `gs://` run
directory keeps those rules: the engine writes into a local staging directory and
`trainer.storage.mirror` publishes it to the bucket (checkpoints with their own commit
rule). The staging copy is a cache: a resumed run refills it from the bucket. Imports no
torch and no gcsfs, so bad input is refused before anything heavy loads.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import UserError

SCHEME = "gs://"
STAGING_ENV = "TPU_TRAINER_STAGING_DIR"
"""Overrides where staging copies of gs:// run directories go (default: the user's cache dir)."""

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def is_remote(run_dir: str | os.PathLike | None) -> bool:
    return str(run_dir or "").startswith(SCHEME)


@dataclass(frozen=True)
class RemoteRunDir:
    """`gs://bucket/prefix`, parsed, with the local directory that stages it."""

    bucket: str
    prefix: str
    """The object-name prefix of the run, without leading or trailing '/' ("runs/exp1")."""

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"

    def object_path(self, relative: str) -> str:
        """'bucket/prefix/relative', the form fsspec takes."""
        return f"{self.bucket}/{self.prefix}/{relative}"

    @property
    def staging(self) -> Path:
        root = os.environ.get(STAGING_ENV) or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tpu-trainer", "staging")
        # The URL's own path keeps the staging copy findable; the hash keeps two URLs that
        # differ only in characters a file name cannot hold apart.
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:8]
        return Path(root) / self.bucket / f"{self.prefix.replace('/', '__')}-{digest}"


def parse_remote(run_dir: str, said: str) -> RemoteRunDir:
    """Parse `gs://bucket/prefix`; a UserError quotes `said`, the setting as the user wrote it."""
    rest = run_dir[len(SCHEME):]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not _BUCKET_NAME.match(bucket) or not prefix:
        raise UserError(
            f"{said} is not a usable Cloud Storage run directory: it must be gs://BUCKET/PATH, "
            "with a bucket name of 3-222 lowercase letters, digits, '-', '_' or '.', and a path inside the "
            "bucket (a run never writes to a bucket's root). Fix: e.g. gs://my-bucket/runs/exp1."
        )
    return RemoteRunDir(bucket, prefix)
