"""Developer and user tasks for tpu-trainer (`invoke --list`; `make help` shows the same).

The tasks live in `tooling/tasks/` by group: engine (train, env, tokenize, test, reproduce, settings),
images (build, base-image, push, run, matrix, test-image), pods (pod, tpu-clean) and bench
(bench, bench-storage, bench-data). Their names, flags and make variables come from one table
(`trainer/settings.py` for the engine's settings, `tooling/tasks/options.py` for the tasks'
own), which `invoke settings` prints. Every make target is `invoke from-make TASK`. The engine
is only ever driven through its CLI.
"""
from tooling.tasks.bench import bench, bench_data, bench_storage
from tooling.tasks.engine import env, reproduce, settings, test, tokenize, train
from tooling.tasks.images import image_base, image_build, image_matrix, image_push, image_run, image_test
from tooling.tasks.make import from_make
from tooling.tasks.pods import pod, tpu_clean

__all__ = ["bench", "bench_data", "bench_storage", "env", "reproduce", "settings", "test", "tokenize", "train",
           "image_base", "image_build", "image_matrix", "image_push", "image_run", "image_test", "from_make", "pod",
           "tpu_clean"]
