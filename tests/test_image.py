"""The training image on a real Docker daemon: tags, labels, user, CA hygiene, cached and
reproducible rebuilds, runs that write host-owned outputs, and the CPU-XLA smoke cells.

Run: `make test-image` (builds the default pair's image, then `pytest -m docker`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from image_fixtures import CA_BUNDLE, base_image, client, copy_sources, image, pair  # noqa: F401

from tooling.docker.container import RunSpec, run_container
from tooling.docker.image import LABEL_PREFIX, BuildOptions, build_image
from tooling.docker.matrix import MIN_VAL_ACCURACY, Cell, run_cell
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parent.parent


def in_image(client, image, script: str, user: str = "1000:1000") -> str:
    """Run a shell script in the image (entrypoint replaced) and return its stdout."""
    out = client.containers.run(image.id, ["-c", script], entrypoint=["/bin/bash"], user=user,
                                remove=True, network_disabled=True)
    return out.decode()


def test_tags_and_labels_record_the_pair_and_revision(image, pair):
    assert f"tpu-trainer:{pair.key}" in image.tags
    assert any(re.fullmatch(rf"tpu-trainer:{re.escape(pair.key)}-[0-9a-z]+(-dirty)?", t) for t in image.tags)
    labels = image.labels
    assert labels[f"{LABEL_PREFIX}.torch"] == pair.torch
    assert labels[f"{LABEL_PREFIX}.torch_xla"] == pair.torch_xla
    assert labels[f"{LABEL_PREFIX}.python"] == pair.python
    assert labels["org.opencontainers.image.revision"]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", labels["org.opencontainers.image.created"])


def test_entrypoint_is_the_cli_and_user_is_not_root(image):
    config = image.attrs["Config"]
    assert config["Entrypoint"] == ["python", "-m", "trainer"]
    assert config["User"] == "1000:1000"
    assert not config.get("Healthcheck")
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["TPU_TRAINER_IMAGE"] in image.tags
    assert env["TPU_TRAINER_ENV_DIR"] == "/opt/tpu-trainer/env"


def test_matched_pair_imports_inside_the_image(client, image, pair):
    out = in_image(client, image, "id -u; python -c 'import torch, torch_xla; "
                   "print(torch.__version__.split(\"+\")[0], torch_xla.__version__.split(\"+\")[0])'")
    uid, versions = out.split("\n")[:2]
    assert uid == "1000"
    assert versions.split() == [pair.torch, pair.torch_xla]


def test_build_ca_bundle_is_not_in_the_image(client, image, base_image):
    """The proxy's CA (in the host bundle, not the base image's) must appear nowhere in the image."""
    assert not any("extra-ca" in (h.get("CreatedBy") or "") for h in image.history())
    host = set(_pem_blocks(CA_BUNDLE.read_text()))
    base = set(_pem_blocks(client.containers.run(
        base_image, ["cat", "/etc/ssl/certs/ca-certificates.crt"], remove=True).decode()))
    extra = host - base
    if not extra or not image.labels.get(f"{LABEL_PREFIX}.build-ca-sha256"):
        pytest.skip("this image was built without an extra CA bundle")
    # One base64 line from the middle of each extra certificate is specific enough to grep for.
    needles = [block.splitlines()[len(block.splitlines()) // 2] for block in extra]
    script = ("grep -rlIF " + " ".join(f"-e '{n}'" for n in needles)
              + " / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev || true; "
              "ls /tmp/build 2>&1 || true")
    out = in_image(client, image, script, user="0:0")
    assert "No such file or directory" in out  # /tmp/build (the deps stage's inputs) is absent
    assert out.strip().endswith("No such file or directory"), out


def test_trainer_change_rebuilds_in_seconds_and_reproducibly(client, image, pair, base_image, tmp_path):
    """Changing one line in trainer/ rebuilds only the top layers; the same sources with other
    file times give the same layer digests."""
    ca_hash = image.labels.get(f"{LABEL_PREFIX}.build-ca-sha256")
    ca = CA_BUNDLE if ca_hash and hashlib.sha256(CA_BUNDLE.read_bytes()).hexdigest() == ca_hash else None
    probe = f"# rebuild probe {uuid.uuid4().hex}\n"
    contexts = []
    for name in ("a", "b"):
        root = copy_sources(tmp_path / name)
        target = sorted((root / "trainer").glob("*.py"))[0]
        target.write_text(target.read_text() + probe)
        contexts.append(root)
    later = time.time() + 3600  # b's files get other mtimes than a's; layers must not care
    for path in contexts[1].rglob("*"):
        os.utime(path, (later, later), follow_symlinks=False)
    options = dict(base_image=base_image, ca_bundle=ca, repository="tpu-trainer-probe",
                   index_url=image.labels[f"{LABEL_PREFIX}.index-url"])
    layers = []
    try:
        for root in contexts:
            started = time.monotonic()
            built = build_image(pair, BuildOptions(context_root=root, **options), log=lambda _: None)
            seconds = time.monotonic() - started
            print(f"rebuild after a one-line change in trainer/: {seconds:.1f} s")
            layers.append(client.images.get(built.id).attrs["RootFS"]["Layers"])
            for tag in built.tags:  # removing it also drops its cached top layers for build b
                client.images.remove(tag, force=True)
            if root is contexts[0]:
                assert seconds < 90, f"a one-line trainer/ change took {seconds:.0f} s to rebuild"
    finally:
        for found in client.images.list(name="tpu-trainer-probe"):
            client.images.remove(found.id, force=True)
    ours = image.attrs["RootFS"]["Layers"]
    assert layers[0] == layers[1]
    assert len(layers[0]) == len(ours)
    changed = [i for i, (x, y) in enumerate(zip(ours, layers[0])) if x != y]
    # Only the trainer/ COPY layer differs (the verification RUN writes nothing).
    assert len(changed) == 1 and changed[0] >= len(ours) - 3, changed


def test_run_writes_outputs_owned_by_the_invoking_user(image, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    code = run_container(RunSpec(image.tags[0], ("train", "--cores", "1", "--precision", "fp32",
                                                 "--max-epochs", "1", "--env-profile", "cpu",
                                                 "--no-progress", "--run-dir", "/work/runs/one"),
                                 runs, user="4321:4321"))
    assert code == 0
    run_dir = runs / "one"
    for name in ("config.yaml", "metrics.csv", "summary.json", "metrics.png", "tb", "checkpoints"):
        assert (run_dir / name).exists(), name
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [run_dir, *run_dir.rglob("*")]}
    assert owners == {(4321, 4321)}
    recorded = json.loads((run_dir / RUN_MANIFEST).read_text())["image"]
    assert recorded["tag"] in image.tags
    assert recorded["digest"] in (image.attrs.get("RepoDigests") or []) + [image.id]


def test_invoke_run_returns_the_container_exit_code(tmp_path):
    done = subprocess.run([sys.executable, "-m", "invoke", "run", "--cpu", "--run-root", str(tmp_path),
                           "--", "train", "--cores", "0"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr  # the engine's user-error code


@pytest.mark.parametrize("cores,precision", [("1", "fp32"), ("8", "bf16")])
def test_smoke_cell_in_image(pair, cores, precision, tmp_path):
    result = run_cell(Cell(pair, cores, precision), tmp_path, max_epochs=None)
    assert result.exit_code == 0
    summary = result.summary
    assert summary["val_accuracy"] >= MIN_VAL_ACCURACY
    assert summary["compiles_after_first_epoch"] == 0
    assert summary["devices"] == int(cores)
    assert summary["precision"].startswith(precision)  # e.g. "bf16" runs as "bf16-mixed"
    assert (summary["torch"], summary["torch_xla"]) == (pair.torch, pair.torch_xla)
    assert result.passed, result.problem


def _pem_blocks(text: str) -> list[str]:
    return re.findall(r"-----BEGIN CERTIFICATE-----\n.*?-----END CERTIFICATE-----", text, re.S)


def test_failed_verification_fails_the_build_and_leaves_no_tag_or_container(client, image, pair,
                                                                            base_image, tmp_path):
    """An engine that cannot start must stop the build (the Dockerfile's preflight step)."""
    from tooling.errors import ToolingError

    ca_hash = image.labels.get(f"{LABEL_PREFIX}.build-ca-sha256")
    ca = CA_BUNDLE if ca_hash and hashlib.sha256(CA_BUNDLE.read_bytes()).hexdigest() == ca_hash else None
    root = copy_sources(tmp_path / "broken")
    (root / "trainer" / "cli.py").write_text("this is not python\n")
    def leftovers():  # other sessions may share the daemon: look only for our build's containers
        return [c.id for c in client.containers.list(all=True) if "preflight" in str(c.attrs["Config"]["Cmd"])]

    before = leftovers()
    with pytest.raises(ToolingError) as err:
        build_image(pair, BuildOptions(base_image=base_image, ca_bundle=ca, repository="tpu-trainer-broken",
                                       context_root=root,
                                       index_url=image.labels[f"{LABEL_PREFIX}.index-url"]),
                    log=lambda _: None)
    assert "Building tpu-trainer-broken:" in str(err.value) and "returned a non-zero code" in str(err.value)
    assert client.images.list(name="tpu-trainer-broken") == []
    assert leftovers() == before
