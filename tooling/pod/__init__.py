"""Pods: one job on every worker of a TPU slice or host list (launch, per-worker commands, transports, fan-out), and tpu-clean."""
