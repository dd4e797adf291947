"""torch.tpu: the tpu device module, with the names and meanings of torch.cuda."""
from torch_tpu.tpu import _utils
from torch_tpu.tpu.device import (
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from torch_tpu.tpu.memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from torch_tpu.tpu.modes import (
    fallback_stats,
    fusion_stats,
    get_fallback_error,
    get_mode,
    mode,
    reset_fallback_stats,
    reset_fusion_stats,
    set_fallback_error,
    set_mode,
)
from torch_tpu.tpu.random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_tpu.tpu.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event", "Stream", "StreamContext", "current_device", "current_stream", "default_generators",
    "default_stream", "device", "device_count", "device_of", "empty_cache", "fallback_stats", "fusion_stats",
    "get_amp_supported_dtype", "get_device_capability", "get_device_name", "get_device_properties",
    "get_fallback_error", "get_mode", "get_rng_state", "get_rng_state_all", "initial_seed",
    "is_available", "is_bf16_supported", "is_initialized", "manual_seed", "manual_seed_all",
    "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_stats", "mode", "reset_accumulated_memory_stats",
    "reset_fallback_stats", "reset_fusion_stats", "reset_peak_memory_stats", "seed", "seed_all", "set_device",
    "set_fallback_error", "set_mode", "set_rng_state", "set_rng_state_all", "set_stream", "stream",
    "synchronize",
]
