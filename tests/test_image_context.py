"""The build context `invoke build` sends: allowlisted, reproducible, CA only where asked.

Fast, no Docker. Run: `.venv/bin/pytest tests/test_image_context.py`.
"""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time

from image_fixtures import copy_sources

from tooling.docker.image import CA_IN_CONTEXT, SOURCE_DATE_EPOCH, GitRevision, _write_context, image_tags
from tooling.versions import get_pair


def context_bytes(root, ca=None) -> bytes:
    buffer = io.BytesIO()
    _write_context(buffer, ca, root)
    return buffer.getvalue()


def test_context_is_the_allowlist_with_fixed_times_and_owners(tmp_path):
    root = copy_sources(tmp_path / "src")
    (root / ".venv").mkdir()
    (root / ".venv" / "big").write_text("x")
    (root / "runs").mkdir()
    (root / "trainer" / "__pycache__").mkdir(exist_ok=True)
    (root / "trainer" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    with tarfile.open(fileobj=io.BytesIO(context_bytes(root))) as tar:
        members = tar.getmembers()
    names = {m.name for m in members}
    assert {"Dockerfile", "pyproject.toml", "env/versions.yaml", "env/constraints-2.9.txt"} <= names
    assert any(n.startswith("trainer/") and n.endswith(".py") for n in names)
    assert not any(n.startswith((".venv", "runs", ".git")) or "__pycache__" in n for n in names)
    assert CA_IN_CONTEXT not in names
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(SOURCE_DATE_EPOCH, 0, 0, "")}


def test_same_sources_give_the_same_context_whatever_their_file_times(tmp_path):
    a = copy_sources(tmp_path / "a")
    b = copy_sources(tmp_path / "b")
    later = time.time() + 86400
    for path in b.rglob("*"):
        os.utime(path, (later, later))
    assert hashlib.sha256(context_bytes(a)).digest() == hashlib.sha256(context_bytes(b)).digest()


def test_ca_bundle_goes_only_where_the_deps_stage_reads_it(tmp_path):
    root = copy_sources(tmp_path / "src")
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
    with tarfile.open(fileobj=io.BytesIO(context_bytes(root, ca))) as tar:
        assert tar.extractfile(CA_IN_CONTEXT).read() == ca.read_bytes()
    dockerfile = (root / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime"):]
    assert "extra-ca" not in runtime and "FROM deps" not in dockerfile and "--from=deps /staging/ /" in runtime


def test_tags_are_the_version_and_an_immutable_one():
    pair = get_pair("2.9")
    assert image_tags(pair, GitRevision("f" * 40, "f" * 12, False)) == ("tpu-trainer:2.9", f"tpu-trainer:2.9-{'f' * 12}")
    assert image_tags(pair, GitRevision("f" * 40, "f" * 12, True))[1].endswith("-dirty")
