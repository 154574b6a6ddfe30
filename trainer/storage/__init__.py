"""Run directories on Cloud Storage (`gs://bucket/prefix`), mirrored from a local staging copy."""
