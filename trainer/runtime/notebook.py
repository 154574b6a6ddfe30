"""`notebook_launch(fn, args)`: train from a Jupyter kernel, in a fresh child process.

    model = DigitsClassifier()                       # built once, in the kernel
    def train(module, epochs):
        return Trainer(devices=8, max_epochs=epochs).fit(module).metrics
    metrics = notebook_launch(train, (model, 3))     # again and again, same kernel

Why a child process and not the kernel itself: XLA's device count (`CPU_NUM_DEVICES`,
the TPU topology) and SPMD mode are fixed once PJRT starts in a process, and torch_xla
cannot shut its runtime down. Training in the kernel would pin the kernel to the first
call's devices: a later `devices=1` after `devices=8`, or a precision or profile change
applied through the environment, would silently train on the wrong setup until a restart.
A child per call starts XLA from scratch each time; the kernel never imports torch_xla.

Why fork: the model is built once in the kernel and reaches the child through fork's
copy-on-write memory, without pickling (no second copy of the weights in host memory,
the advice Accelerate gives for low-memory hosts; lambdas and notebook-defined classes
work, which spawn's pickling would refuse). Fork is safe only if the kernel has not
started PJRT (its threads and device handles do not survive a fork): we refuse then,
with the fix. The child trains its own copy: return what you need (metrics, a CPU
state_dict) from `fn`; the return value is pickled back. The child's stdout/stderr are
relayed into the cell's output.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import traceback
from typing import Any, Callable, Sequence

from trainer.errors import UserError


def notebook_launch(fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float | None = None) -> Any:
    """Run `fn(*args)` in a forked child process; return its result or raise its error here."""
    _refuse_if_xla_started()
    context = multiprocessing.get_context("fork")
    results, sender = context.Pipe(duplex=False)
    out_read, out_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = context.Process(target=_child, args=(fn, tuple(args), sender, out_write), name="notebook-launch")
    child.start()
    os.close(out_write)
    sender.close()
    relay = threading.Thread(target=_relay, args=(out_read,), daemon=True)
    relay.start()
    try:
        outcome = results.recv() if results.poll(timeout) else ("error", None, f"no result within {timeout} s")
    except EOFError:
        outcome = ("error", None, "")
    child.join(timeout=30)
    relay.join(timeout=10)
    if outcome[0] == "ok":
        return outcome[1]
    _, error, text = outcome
    if isinstance(error, UserError):
        raise error
    code = child.exitcode
    raise RuntimeError(f"the training function failed in the child process (exit code {code}):\n{text}") from error


def _refuse_if_xla_started() -> None:
    xla = sys.modules.get("torch_xla")
    started = xla is not None and xla._XLAC._xla_runtime_is_initialized()
    if started:
        raise UserError(
            "this kernel has already started the XLA runtime (a tensor was put on an XLA device here), "
            "and a forked child cannot use it or start its own safely. notebook_launch needs the kernel "
            "to stay free of XLA: build the model on the CPU and move nothing to the device outside the "
            "launched function. Fix: restart the kernel and keep XLA work inside `fn`."
        )


def _child(fn: Callable[..., Any], args: tuple, sender: Any, out_fd: int) -> None:
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    # The kernel's sys.stdout talks to its own (parent) I/O thread; write to the relayed fds instead.
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    try:
        outcome = ("ok", fn(*args))
    except BaseException as exc:  # shown in the kernel, with the child's traceback
        outcome = ("error", _picklable(exc), traceback.format_exc())
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        sender.send(outcome)
    except Exception as exc:  # an unpicklable result
        sender.send(("error", None, f"the result of the training function could not be sent back: {exc!r}"))
    finally:
        sender.close()
    os._exit(0)  # skip the kernel's atexit handlers, inherited through fork


def _picklable(exc: BaseException) -> BaseException | None:
    import pickle

    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return None


def _relay(fd: int) -> None:
    with open(fd, "rb", closefd=True) as pipe:
        for line in iter(pipe.readline, b""):
            sys.stdout.write(line.decode(errors="replace"))
    sys.stdout.flush()
