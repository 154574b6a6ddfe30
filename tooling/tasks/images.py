"""The image tasks: build, base-image, push, run, matrix, test-image.

Tooling imports stay inside the tasks: `invoke --list` must not need the Docker SDK.
"""
from __future__ import annotations

import shlex

from invoke import Exit, task

from tooling.tasks.common import pytest, tooling_errors
from tooling.tasks.options import help_for


def _image_options(base_image: str, ca_bundle: str, index_url: str, no_cache: bool = False):
    from pathlib import Path

    from tooling.docker.image import DEFAULT_INDEX_URL, BuildOptions

    return BuildOptions(base_image=base_image or None,
                        ca_bundle=Path(ca_bundle) if ca_bundle else None,
                        index_url=index_url or DEFAULT_INDEX_URL, no_cache=no_cache)


@task(name="build", help=help_for("build"))
def image_build(c, version="", base_image="", ca_bundle="", index_url="", no_cache=False):
    """Build tpu-trainer:<version> (and an immutable <version>-<git sha> tag) via the Docker SDK."""
    from tooling.docker.image import build_image
    from tooling.versions import get_pair

    with tooling_errors():
        build_image(get_pair(version or None), _image_options(base_image, ca_bundle, index_url, no_cache))


@task(name="base-image", help=help_for("base-image"))
def image_base(c, tag="tpu-trainer-base:3.11-bookworm", mirror="http://deb.debian.org/debian", force=False):
    """Make an offline equivalent of python:3.11-slim-bookworm (debootstrap + import; needs root)."""
    from tooling.docker.base_image import make_base_image

    with tooling_errors():
        make_base_image(tag, mirror=mirror, force=force)


@task(name="push", help=help_for("push"))
def image_push(c, registry, version="", username=""):
    """Push tpu-trainer:<version> and its immutable tag; verify each digest by pulling it back."""
    import os

    from tooling.docker.image import git_revision, image_tags
    from tooling.docker.registry import push_image
    from tooling.versions import get_pair

    auth = None
    if username:
        if "REGISTRY_PASSWORD" not in os.environ:
            raise Exit(f"--username {username} needs the password in $REGISTRY_PASSWORD "
                       "(kept out of the command line and shell history).", code=1)
        auth = {"username": username, "password": os.environ["REGISTRY_PASSWORD"]}
    with tooling_errors():
        pair = get_pair(version or None)
        push_image(image_tags(pair, git_revision()), registry, auth)


@task(name="run", help=help_for("run"))
def image_run(c, version="", run_root="runs", tpu=False, cpu=False, shm_size="16g"):
    """Run `tpu-trainer ARGS` in the image: `invoke run -- train --devices 8 --precision bf16`.

    Runs as you (uid:gid), with ./runs mounted at /work/runs (use `--run-dir runs/NAME`),
    and exits with the container's exit code.
    """
    from pathlib import Path

    from tooling.docker.container import RunSpec, image_reference, run_container, tpu_host, with_profile
    from tooling.versions import get_pair

    args = shlex.split(c.remainder) or ["--help"]
    on_tpu = (tpu or tpu_host()) and not cpu
    with tooling_errors():
        pair = get_pair(version or None)
        spec = RunSpec(image_reference(pair.key), with_profile(args, on_tpu), Path(run_root), tpu=on_tpu,
                       shm_size=shm_size)  # fmt: skip
        code = run_container(spec)
    if code != 0:
        raise Exit(code=code)


@task(name="matrix", help=help_for("matrix"))
def image_matrix(c, versions="", max_epochs=0, run_root="runs/matrix"):
    """Every pair x DEVICES {1,8} x PRECISION {fp32,bf16} in its image on CPU-XLA; a pass/fail table."""
    import time
    from pathlib import Path

    from tooling.docker.matrix import cells, run_cell, table
    from tooling.versions import get_pair, load_pairs

    with tooling_errors():
        pairs = [get_pair(k) for k in versions.split(",")] if versions else list(load_pairs().values())
        root = Path(run_root) / time.strftime("%Y%m%d-%H%M%S", time.gmtime())  # the engine never overwrites a run
        results = []
        for cell in cells(pairs):
            print(f"=== {cell.name} -> {root / cell.name}", flush=True)
            results.append(run_cell(cell, root, max_epochs or None))
    print(table(results))
    failed = [r.cell.name for r in results if not r.passed]
    if failed:
        raise Exit(f"{len(failed)} of {len(results)} matrix cells failed: {', '.join(failed)}.", code=1)


@task(name="test-image", help=help_for("test-image"))
def image_test(c, base_image="", ca_bundle="", index_url=""):
    """Build the default pair's image, then run the Docker-marked tests against it."""
    from tooling.docker.image import build_image
    from tooling.versions import get_pair

    with tooling_errors():
        build_image(get_pair(), _image_options(base_image, ca_bundle, index_url))
    pytest(c, "docker", [])
