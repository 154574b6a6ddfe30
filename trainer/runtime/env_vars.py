"""Every environment variable tpu-trainer reads or sets, named once.

Profiles in `env/*.yaml` may only set names listed in `KNOWN`; the profile loader
refuses anything else, so a typo in a profile is an error, not a silently ignored
setting. Imports nothing heavy: the CLI checks profiles before torch is imported.
"""

# PJRT runtime (torch_xla >= 2.0; the only runtime from 2.1 on).
PJRT_DEVICE = "PJRT_DEVICE"  # "CPU" or "TPU"; unset makes torch_xla warn and fall back to CPU.
CPU_NUM_DEVICES = "CPU_NUM_DEVICES"  # how many XLA devices PJRT CPU emulates in one process.
TPU_NUM_DEVICES = "TPU_NUM_DEVICES"  # limit the TPU devices a process sees.
TPU_VISIBLE_CHIPS = "TPU_VISIBLE_CHIPS"  # which chips of the host a process may use.
TPU_PROCESS_BOUNDS = "TPU_PROCESS_BOUNDS"
TPU_CHIPS_PER_PROCESS_BOUNDS = "TPU_CHIPS_PER_PROCESS_BOUNDS"
TPU_ACCELERATOR_TYPE = "TPU_ACCELERATOR_TYPE"  # e.g. "v3-8"; set on TPU VMs.
TPU_WORKER_ID = "TPU_WORKER_ID"  # index of this host in a pod slice.
TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"  # comma-separated hosts of a pod slice.
TPU_SKIP_MDS_QUERY = "TPU_SKIP_MDS_QUERY"  # skip the GCE metadata server (hosts we manage).

# Legacy XRT runtime (torch_xla < 2.1 only; removed in 2.1).
XRT_TPU_CONFIG = "XRT_TPU_CONFIG"
TPU_IP_ADDRESS = "TPU_IP_ADDRESS"  # a TPU node's IP, interpolated into XRT_TPU_CONFIG.

# XLA behaviour and debugging.
XLA_NO_SPECIAL_SCALARS = "XLA_NO_SPECIAL_SCALARS"  # 1: 0.0 and 1.0 reach graphs as data, not constants
XLA_USE_BF16 = "XLA_USE_BF16"  # torch_xla's global "every float is bf16" switch.
XLA_FLAGS = "XLA_FLAGS"
PT_XLA_DEBUG_LEVEL = "PT_XLA_DEBUG_LEVEL"  # 1 prints each compilation's cause; 2 also each unexpected execution.
PT_XLA_DEBUG_FILE = "PT_XLA_DEBUG_FILE"  # where PT_XLA_DEBUG_LEVEL's analysis goes instead of stderr.
XLA_IR_DEBUG = "XLA_IR_DEBUG"
XLA_HLO_DEBUG = "XLA_HLO_DEBUG"
TF_CPP_MIN_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"  # silences the XLA runtime's C++ log lines.

# tpu-trainer's own.
TPU_TRAINER_ENV_DIR = "TPU_TRAINER_ENV_DIR"  # where env/*.yaml live when not beside the package.
TPU_TRAINER_IMAGE = "TPU_TRAINER_IMAGE"  # image tag, set inside our images for run manifests.
TPU_TRAINER_IMAGE_DIGEST = "TPU_TRAINER_IMAGE_DIGEST"
TPU_TRAINER_PROCESS_INDEX = "TPU_TRAINER_PROCESS_INDEX"  # multi-host: this worker's index.
TPU_TRAINER_PROCESS_COUNT = "TPU_TRAINER_PROCESS_COUNT"  # multi-host: how many workers.

KNOWN = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)

# The variables a run records in its manifest and that `invoke run` passes into containers.
XLA_RUNTIME = tuple(
    sorted(name for name in KNOWN if not name.startswith("TPU_TRAINER_")) 
)
