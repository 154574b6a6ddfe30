"""The data path: batch checks and fixed shapes (`batches`), per-host sharding (`sampling`), host-to-device copies (`device_loader`)."""
