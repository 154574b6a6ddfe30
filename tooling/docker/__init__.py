"""Images and containers through the Docker SDK: build, base image, registry push, run, the CPU-XLA matrix."""
