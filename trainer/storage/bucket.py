"""The one module that talks to Cloud Storage, through gcsfs (pinned).

gcsfs retries what the Cloud Storage documentation calls transient (408, 429, 5xx,
dropped connections) six times with exponential backoff (1, 2, 4, 8, 16 s plus jitter);
we keep its retry policy and make each retry visible as a warning. Everything else
(no bucket, no permission, no credentials) is permanent: `check_writable` turns it into
one paragraph at start-up, before any XLA work. Set `STORAGE_EMULATOR_HOST` to talk to
a local Cloud Storage server (anonymous access, as for the real emulators).
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.storage.location import RemoteRunDir

log = logging.getLogger(__name__)

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
PROBE_PREFIX = ".write-probe-"
"""Name prefix of the start-up probe object (a listing of the run skips it)."""


def filesystem() -> Any:
    """A gcsfs filesystem: the emulator's when STORAGE_EMULATOR_HOST is set, else Google's
    default credentials (a TPU VM's service account, or `gcloud auth application-default login`)."""
    # gcsfs 2026.x first asks a gRPC control plane whether the bucket is zonal/hierarchical;
    # we use neither, and against an emulator that query hangs for a minute per bucket.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    _surface_retries()
    token = "anon" if os.environ.get(EMULATOR_ENV) else None
    return gcsfs.GCSFileSystem(token=token, use_listings_cache=False, skip_instance_cache=True)


def check_writable(fs: Any, remote: RemoteRunDir, said: str) -> None:
    """Write and delete one small object under the run's prefix; a UserError says what failed.

    A write is the only check that needs no bucket-level permission (roles/storage.objectUser
    cannot read bucket metadata, and may still write a run)."""
    probe = remote.object_path(f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        fs.pipe_file(probe, b"tpu-trainer write probe\n")
        fs.rm_file(probe)
    except Exception as exc:  # noqa: BLE001 - every failure here is reported as one paragraph
        raise UserError(_explain(exc, remote, said)) from exc


def storage_error(exc: BaseException) -> bool:
    """Whether `exc` came from talking to Cloud Storage (after gcsfs's retries)."""
    import aiohttp
    import gcsfs.retry
    import google.auth.exceptions
    import requests

    return isinstance(exc, (OSError, gcsfs.retry.HttpError, aiohttp.ClientError, requests.RequestException,
                            google.auth.exceptions.GoogleAuthError, gcsfs.retry.ChecksumError))


def _explain(exc: BaseException, remote: RemoteRunDir, where: str) -> str:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if type(exc).__name__ == "DefaultCredentialsError":
        return (f"{where}: no Google credentials were found to write to Cloud Storage ({detail}). Fix: on a TPU VM, "
                "give its service account access to the bucket; elsewhere run `gcloud auth application-default "
                "login`; or use a local run directory.")
    if isinstance(exc, FileNotFoundError):
        return (f"{where}: the bucket gs://{remote.bucket} does not exist, or this account cannot see it. Nothing "
                f"was written and no XLA work started. Fix: create it (`gcloud storage buckets create "
                f"gs://{remote.bucket} --location=REGION`, in the TPU's region) or correct the bucket name.")
    if "Forbidden" in detail or getattr(exc, "code", None) in (401, 403):
        return (f"{where}: this account may not write objects under gs://{remote.bucket}/{remote.prefix} "
                f"({detail}). Nothing was written and no XLA work started. Fix: grant the account (a TPU VM's "
                f"service account) roles/storage.objectUser on gs://{remote.bucket}, or use another bucket.")
    return (f"{where}: cannot write to Cloud Storage ({type(exc).__name__}: {detail}), even after retrying with "
            f"backoff. Nothing was written and no XLA work started. Fix: check the network (or "
            f"{EMULATOR_ENV} when using a local server), then run again.")


def md5_base64(path: Path) -> str:
    """A local file's MD5 in the form Cloud Storage reports it (`md5Hash`, base64)."""
    from trainer.checkpoint.io import file_digest

    md5 = hashlib.md5()  # noqa: S324 - the service's integrity hash, not a security one
    return base64.b64encode(file_digest(path, md5).digest()).decode()


def upload_if_generation(fs: Any, path: str, data: bytes, generation: int) -> int:
    """Write `data` to `path` only if its live generation is `generation` (0: only if absent).

    Returns the new generation. A concurrent writer makes this raise FileExistsError (HTTP
    412), never overwrite. gcsfs has no public call for a generation precondition other
    than "must not exist", so this uses its authenticated, retrying request method."""
    bucket, _, name = path.partition("/")
    from gcsfs.core import quote

    out = fs.call("POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o", uploadType="media",
                  name=name, ifGenerationMatch=str(generation), data=data,
                  headers={"Content-Type": "application/octet-stream"}, json_out=True)
    fs.invalidate_cache(path)
    return int(out["generation"])


_RETRY_WORDS = "retrying after exception"


class _RetriesAsWarnings(logging.Filter):
    """gcsfs logs each retry at DEBUG and its final failure with a traceback; we show the
    retries as one warning line each and report the failure ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _RETRY_WORDS in message:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = f"Cloud Storage: transient error, retrying with backoff: {message}", ()
            return True
        return record.levelno >= logging.WARNING and "retries on exception" not in message \
            and "non-retriable exception" not in message


def _surface_retries() -> None:
    gcsfs_log = logging.getLogger("gcsfs")
    if not any(isinstance(f, _RetriesAsWarnings) for f in gcsfs_log.filters):
        gcsfs_log.addFilter(_RetriesAsWarnings())
        gcsfs_log.setLevel(logging.DEBUG)  # the filter, not the level, decides what is shown
