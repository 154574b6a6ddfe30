"""The checkpoint index: which checkpoints of a run count, one entry each.

    RUN_DIR/checkpoints/index.json   {"format": 1, "checkpoints": [entry, ... oldest first]}
    entry: file, sha256, bytes, global_step, epoch, position, reason, saved_at
           (a directory of shards also: files {name: {sha256, bytes}})

Runs written before the index had its own name kept it as `checkpoints/manifest.json`
(beside the run's own `manifest.json`, now `run.json`): it is still read, and the next
commit writes `index.json`. Entries are built here only (`new_entry`), for local and
gs:// run directories alike.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

CHECKPOINT_DIR = "checkpoints"
"""Where a run directory keeps its checkpoints."""
INDEX = "index.json"
LEGACY_INDEX = "manifest.json"
"""The index's name before 2026-11 (read on resume, never written)."""
FORMAT = 1


def new_entry(name: str, written: dict, meta: dict) -> dict:
    """The entry for a checkpoint just written as `name`: `written` holds what the writer measured
    (sha256, bytes, and files for a directory), `meta` where the run was (global_step, position, ...)."""
    return {"file": name, **written, **meta, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def document(entries: list[dict]) -> dict:
    """The index file's content for `entries`."""
    return {"format": FORMAT, "checkpoints": entries}


def entries_of(text: str) -> list[dict]:
    """The entries of an index file's text (ValueError/KeyError/TypeError when it is not one)."""
    return list(json.loads(text)["checkpoints"])


def index_path(directory: Path) -> Path:
    """The index of a checkpoint directory: `index.json`, or an older run's `manifest.json`."""
    current = directory / INDEX
    legacy = directory / LEGACY_INDEX
    return legacy if not current.exists() and legacy.exists() else current


def entry_files(entry: dict) -> dict[str, str]:
    """Every file a committed entry stands for, relative to the checkpoint directory -> SHA-256."""
    if "files" in entry:  # a directory of shards
        return {f"{entry['file']}/{name}": recorded["sha256"] for name, recorded in entry["files"].items()}
    return {entry["file"]: entry["sha256"]}
