"""trainer.diagnostics on real XLA (one PJRT CPU device, in process): metrics, guard, host reads, cache.

`pytest tests/test_diagnostics.py` (about half a minute). Each behaviour is checked with a
positive and a negative control, so a detector that always (or never) fires fails.
"""
import logging

import pytest
import torch

from diag_helpers import batches, run_steps
from trainer.config import DiagnosticsConfig
from trainer.diagnostics import compile_cache, xla_metrics
from trainer.errors import UserError


def test_snapshot_diff_names_each_cpu_fallback_and_the_report_file_has_it(xla_device, tmp_path):
    import torch_xla

    before = xla_metrics.snapshot()
    x = torch.randn(8, 8).to(xla_device)
    torch.nonzero(x > 0)  # no XLA lowering with a static shape: runs on the CPU
    torch.nonzero(x < 0)
    (x * 2).sum().item()
    torch_xla.sync()
    delta = xla_metrics.snapshot() - before
    assert delta.fallback_ops == {"nonzero": 2}
    assert delta.scalar_reads == 1 and delta.host_reads >= 3
    text = "\n".join(xla_metrics.summary_lines(delta))
    assert "nonzero x2" in text and "_local_scalar_dense" not in text
    quiet = xla_metrics.snapshot()
    (x + 1).sum()
    torch_xla.sync()
    assert (xla_metrics.snapshot() - quiet).fallback_ops == {}  # negative control
    report = xla_metrics.write_report(tmp_path / "xla_metrics.txt")
    assert "aten::nonzero" in report.read_text() and "CompileTime" in report.read_text()


def test_guard_names_the_key_old_and_new_shape_and_the_step(xla_device, caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.diagnostics"):
        diag, rows = run_steps(xla_device, batches(8, shapes={6: 8}, seed=1))
    warnings = [r.getMessage() for r in caplog.records if "after warm-up" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("step 6:")
    assert "batch[0]: (16, 32) float32 -> (8, 32) float32" in warnings[0]
    assert "batch[1]: (16,) int64 -> (8,) int64" in warnings[0]
    assert rows[0]["compiles_after_warmup"] >= 1
    assert diag.guard.events[0]["step"] == 6


def test_guard_stays_silent_when_shapes_never_change(xla_device, caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.diagnostics"):
        diag, rows = run_steps(xla_device, batches(8, seed=2))
    assert not [r for r in caplog.records if "after warm-up" in r.getMessage()]
    assert rows[0]["compiles_after_warmup"] == 0 and diag.guard.events == []


def test_guard_says_the_graph_changed_when_no_input_did(xla_device, caplog):
    _step = [0]

    def user_step(loss, logits):  # a Python int baked into the graph, changing at step 5
        _step[0] += 1
        return logits[:, : (2 if _step[0] >= 5 else 3)].mean() + loss

    with caplog.at_level(logging.WARNING, logger="trainer.diagnostics"):
        run_steps(xla_device, batches(7, seed=3), user_step=user_step)
    warnings = [r.getMessage() for r in caplog.records if "after warm-up" in r.getMessage()]
    assert warnings and warnings[0].startswith("step 5:") and "no input changed" in warnings[0]


def test_strict_compile_raises_a_user_error_at_the_step(xla_device):
    with pytest.raises(UserError, match=r"step 7: .*batch\[0\]: \(16, 32\) float32 -> \(4, 32\) float32.*--strict-compile"):
        run_steps(xla_device, batches(8, shapes={7: 4}, seed=4), DiagnosticsConfig(strict_compile=True, quiet_xla_logs=False))


def test_host_read_counter_sees_an_item_in_the_training_step(xla_device, caplog):
    def reads_the_loss(loss, logits):
        if loss.item() > 1e6:  # the classic: a host read in the step
            raise AssertionError("unreachable")
        return loss

    with caplog.at_level(logging.WARNING, logger="trainer.diagnostics"):
        diag, rows = run_steps(xla_device, batches(10, seed=5), user_step=reads_the_loss)
    assert rows[0]["host_transfers_per_step_outside_logging"] == pytest.approx(1.0, abs=0.1)
    first = diag.named[0]
    assert first["step"] == 1 and first["item_reads"] == 1
    assert any("step 1: 1 device->host read(s)" in r.getMessage() and ".item()/bool() x1" in r.getMessage()
               for r in caplog.records)


def test_host_read_counter_reads_zero_with_only_the_engines_logging_reads(xla_device):
    diag, rows = run_steps(xla_device, batches(10, seed=6), log_every=2)  # 5 asynchronous loss reads
    assert rows[0]["host_transfers_per_step_outside_logging"] == 0
    assert rows[0]["cpu_fallback_ops"] == 0
    assert diag.named == []


def test_a_cpu_fallback_in_the_step_is_counted_and_named(xla_device):
    def with_fallback(loss, logits):
        return loss + torch.nonzero(logits > 0).shape[0] * 0.0

    diag, rows = run_steps(xla_device, batches(4, seed=7), user_step=with_fallback)
    assert rows[0]["cpu_fallback_ops"] == 4
    assert diag.named[0]["cpu_fallback_ops"] == {"nonzero": 1}


def test_compile_cache_is_switched_off_on_pjrt_cpu_with_one_line_saying_why(xla_device, tmp_path, caplog):
    decision = compile_cache.decide(str(tmp_path / "cache"), "CPU", "2.9.0")
    assert not decision.enabled and "cannot deserialize" in decision.reason
    assert compile_cache.decide(str(tmp_path / "cache"), "TPU", "2.9.0").enabled  # the other branch exists
    assert not compile_cache.decide("", "TPU", "2.9.0").enabled
    import torch_xla

    with caplog.at_level(logging.INFO, logger="trainer.diagnostics"):
        diag, _ = run_steps(xla_device, batches(3, seed=8),
                            DiagnosticsConfig(compile_cache=str(tmp_path / "cache"), quiet_xla_logs=False))
    lines = [r.getMessage() for r in caplog.records if "persistent compilation cache" in r.getMessage()]
    assert len(lines) == 1 and "off" in lines[0] and "PJRT CPU" in lines[0]
    assert not (tmp_path / "cache").exists()
    summary = diag.finish(tmp_path)
    assert summary["compile_cache_hits"] == summary["compile_cache_failures"] == 0
    assert summary["seconds_to_first_step"] > 0 and "off" in summary["compile_cache"]
    assert torch_xla.__version__.startswith("2.9")


def test_debug_finish_writes_the_report_and_returns_summary_keys(xla_device, tmp_path):
    diag, _ = run_steps(xla_device, batches(3, seed=9), DiagnosticsConfig(debug=True, quiet_xla_logs=False))
    summary = diag.finish(tmp_path)
    assert (tmp_path / "xla_metrics.txt").read_text().startswith("Metric:")
    assert summary["xla_compiles"] >= 0 and summary["xla_executions"] >= 3
