"""The pod tasks: train on every worker of a TPU slice, and clean up what holds a TPU."""
from __future__ import annotations

import shlex

from invoke import Exit, task

from tooling.tasks.common import tooling_errors
from tooling.tasks.options import help_for


@task(
    help=help_for("pod"),
    iterable=["env", "volume", "ssh_option"],
    auto_shortflags=False,  # `-h` for --hosts or `-` for --ssh-option would only confuse
)
def pod(c, tpu="", zone="", project="", hosts="", image="", setup="",
        dry_run=False, pull=True, privileged=True, job="", entrypoint="tpu-trainer",
        env=None, volume=None, identity="", ssh_option=None, grace=10,
        workers="", accelerator_type="", shm_size="16g"):  # fmt: skip
    """Run `tpu-trainer train ARGS` on every worker: `invoke pod --tpu NAME --zone Z -- ARGS`.

    Each worker gets PJRT_DEVICE=TPU, its TPU_TRAINER_PROCESS_INDEX and the process count;
    logs stream back prefixed `[worker N]`; if one worker fails the others are stopped and
    the command exits non-zero.
    """
    from tooling.pod import launch as launcher
    from tooling.pod import transports
    from tooling.pod.commands import PodSpec
    from tooling.pod.slice_size import parse_slice_size
    from tooling.versions import default_image

    with tooling_errors():
        spec = PodSpec(
            job=job or launcher.new_job_name(), args=tuple(shlex.split(c.remainder)),
            image=None if image == "none" else image or default_image(), entrypoint=entrypoint, pull=pull,
            privileged=privileged, setup=launcher.read_setup(setup), env=launcher.parse_env(env or []),
            volumes=tuple(volume or []), grace_seconds=int(grace), shm_size=shm_size,
        )  # fmt: skip
        transport = transports.choose(tpu, zone, project, hosts, identity, ssh_option or [],
                                      parse_slice_size(workers, accelerator_type), offline=dry_run)  # fmt: skip
        launcher.launch(spec, transport, dry_run=dry_run)


@task(help=help_for("tpu-clean"), iterable=["ssh_option"], auto_shortflags=False)
def tpu_clean(c, tpu="", zone="", project="", hosts="", grace=10, list_only=False, sudo=False,
              identity="", ssh_option=None):  # fmt: skip
    """Stop leftover processes holding the TPU (/dev/accel*, /dev/vfio/<N>, libtpu.so).

    Without --tpu/--hosts it cleans this machine; with them, every worker. It lists what it
    stops and never signals a process it did not see holding the TPU.
    """
    from tooling.pod import tpu_clean as cleaner

    with tooling_errors():
        if not tpu and not hosts:
            code = cleaner.clean(grace_seconds=float(grace), list_only=list_only)
            if code:
                raise Exit("Some processes holding the TPU survived SIGKILL (listed above).", code=1)
            return
        cleaner.clean_remote(tpu, zone, project, hosts, identity, ssh_option or [],
                             float(grace), list_only, sudo)  # fmt: skip
