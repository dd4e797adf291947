"""Device memory: the per-chip caching allocator, through PyTorch's
device-generic torch.accelerator memory calls (one set of numbers), plus
what torch.cuda.memory adds on top: the per-process memory fraction, a
readable summary, allocation history and snapshots in the format of
PyTorch's memory visualizer, and the pinned host allocator's statistics.

A segment of more than 1 MiB is split into blocks of the sizes asked for,
as on CUDA ("inactive_split" counts the cached parts of split segments);
there is no max_split_size, so the "oversize" statistics are zero.
"small_pool" holds the blocks of segments of at most 1 MiB and
"large_pool" the others, as on CUDA."""
import contextlib
import inspect
import math
import pickle
import sys
import warnings
from collections import OrderedDict
from typing import Any, Iterator, Optional, Union

import torch
from typing_extensions import deprecated

from torch_tpu.tpu._utils import _device_t, _get_device_index
from torch_tpu.tpu.device import get_device_properties

__all__ = [
    "caching_allocator_alloc", "caching_allocator_delete", "caching_allocator_disabled", "caching_allocator_enable",
    "get_allocator_backend", "device_memory_used", "empty_cache", "get_per_process_memory_fraction", "host_memory_stats",
    "host_memory_stats_as_nested_dict", "max_memory_allocated", "max_memory_cached", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_cached", "memory_reserved", "memory_snapshot", "memory_stats",
    "memory_stats_as_nested_dict", "memory_summary", "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_peak_host_memory_stats", "reset_peak_memory_stats", "set_per_process_memory_fraction",
]


def _C():
    from torch_tpu import _C

    return _C


def _index(device: _device_t) -> int:
    return _get_device_index(device, optional=True)


# ------------------------------------------------------------- statistics


def memory_allocated(device: _device_t = None) -> int:
    """Bytes held by live tensors on the chip."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _device_t = None) -> int:
    """Bytes the caching allocator holds, cached blocks included."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


@deprecated("`torch.tpu.memory_cached` has been renamed to `torch.tpu.memory_reserved`", category=FutureWarning)
def memory_cached(device: _device_t = None) -> int:
    """Deprecated (as on CUDA): see memory_reserved."""
    return memory_reserved(device)


@deprecated("`torch.tpu.max_memory_cached` has been renamed to `torch.tpu.max_memory_reserved`",
            category=FutureWarning)
def max_memory_cached(device: _device_t = None) -> int:
    """Deprecated (as on CUDA): see max_memory_reserved."""
    return max_memory_reserved(device)


def memory_stats(device: _device_t = None) -> "OrderedDict[str, Any]":
    """Allocator statistics, keyed as torch.cuda.memory_stats
    ("allocated_bytes.all.current", "num_ooms", ...), sorted by key."""
    return torch.accelerator.memory_stats(_index(device))


def memory_stats_as_nested_dict(device: _device_t = None) -> dict[str, Any]:
    """memory_stats as nested dictionaries: stats["allocated_bytes"]["all"]["current"]."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        level = nested
        for part in path:
            level = level.setdefault(part, {})
        level[last] = value
    return nested


def reset_peak_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device: _device_t = None) -> None:
    """Resets every peak statistic (as on CUDA, where it now calls reset_peak_memory_stats)."""
    warnings.warn(
        "torch.tpu.reset_max_memory_allocated now calls torch.tpu.reset_peak_memory_stats, which resets "
        "/all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: _device_t = None) -> None:
    """Resets every peak statistic (as on CUDA, where it now calls reset_peak_memory_stats)."""
    warnings.warn(
        "torch.tpu.reset_max_memory_cached now calls torch.tpu.reset_peak_memory_stats, which resets "
        "/all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Releases every cached, unused block of every chip."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _device_t = None) -> tuple[int, int]:
    """(free, total) bytes of the chip: capacity minus reserved, and capacity.
    As cudaMemGetInfo, it ignores the per-process memory fraction."""
    return torch.accelerator.get_memory_info(_index(device))


def device_memory_used(device: _device_t = None) -> int:
    """Bytes in use on the chip. CUDA reports what the driver says the whole
    device uses; the virtual TPU's memory is exactly what this process's
    allocator has reserved (cached blocks included), so that is the number:
    memory_reserved(device)."""
    return memory_reserved(device)


# ------------------------------------------------------- the allocator


def caching_allocator_alloc(size: int, device: _device_t = None, stream: Union[torch.Stream, int, None] = None) -> int:
    """Allocates ``size`` bytes on the chip for work on ``stream`` (a tpu
    stream or its index on the chip; default the chip's current stream) and
    returns the address, as torch.cuda.caching_allocator_alloc. Free it
    with caching_allocator_delete. 0 bytes give address 0."""
    index = _index(device)
    if stream is None:
        stream = torch.accelerator.current_stream(index)
    if isinstance(stream, torch.Stream):
        if stream.device.type != "tpu" or stream.device_index != index:
            raise ValueError(f"torch.tpu.caching_allocator_alloc: stream {stream} is not a stream of tpu:{index}")
        stream = stream.stream_id
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(
            "torch.tpu.caching_allocator_alloc: invalid type for stream argument, must be `torch.tpu.Stream` or "
            f"`int` (a stream index on the chip), got {type(stream).__name__}"
        )
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"torch.tpu.caching_allocator_alloc: size must be an int, got {type(size).__name__} {size!r}")
    if size >= 2**63:
        raise OverflowError(f"torch.tpu.caching_allocator_alloc: size {size} is too large (at most 2**63 - 1 bytes)")
    if not -(2**63) <= stream < 2**63:
        raise ValueError(f"torch.tpu.caching_allocator_alloc: stream {stream} is not a stream of tpu:{index}")
    return _C()._caching_allocator_alloc(size, index, stream)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees an address from caching_allocator_alloc (its chip and stream
    are known to the allocator). 0 is a no-op; any other address the
    allocator did not hand out raises RuntimeError."""
    if isinstance(mem_ptr, bool) or not isinstance(mem_ptr, int):
        raise TypeError(f"torch.tpu.caching_allocator_delete: mem_ptr must be an int, got {type(mem_ptr).__name__}")
    if not 0 <= mem_ptr < 2**64:
        raise RuntimeError(f"torch.tpu.caching_allocator_delete: {mem_ptr} is not an address")
    _C()._caching_allocator_delete(mem_ptr)


def caching_allocator_enable(value: bool = True) -> None:
    """Turns block caching on (the default) or off for every chip. Off, no
    freed block is reused: its memory goes back as soon as no queued work
    can use it (what is cached already stays until empty_cache). Useful to
    find use-after-free bugs; slower."""
    if not isinstance(value, bool):
        raise RuntimeError(
            f"torch.tpu.caching_allocator_enable expects a bool, but got {type(value).__name__} {value!r}"
        )
    _C()._caching_allocator_enable(value)


@contextlib.contextmanager
def caching_allocator_disabled() -> Iterator[None]:
    """Turns caching off inside the with block, then back to what it was."""
    previous = _C()._caching_allocator_is_enabled()
    caching_allocator_enable(False)
    try:
        yield
    finally:
        caching_allocator_enable(previous)


def get_allocator_backend() -> str:
    """"native": the tpu caching allocator (there is no other backend)."""
    return "native"


# ------------------------------------------------------ memory fraction


def set_per_process_memory_fraction(fraction: float, device: _device_t = None) -> None:
    """Limits the chip's reserved memory to fraction * total capacity (CUDA's
    meaning): an allocation that would need more first releases cached
    blocks, then raises torch.OutOfMemoryError naming the limit. Cached
    blocks are still reused within what is reserved; mem_get_info does not
    change. fraction must be a float in [0, 1]."""
    index = _index(device)
    if not isinstance(fraction, float):
        raise TypeError(
            f"torch.tpu.set_per_process_memory_fraction: invalid type for fraction, must be `float`, got "
            f"{type(fraction).__name__} {fraction!r}"
        )
    if math.isnan(fraction) or fraction < 0 or fraction > 1:
        raise ValueError(
            f"torch.tpu.set_per_process_memory_fraction: invalid fraction value: {fraction}. Allowed range: 0~1"
        )
    _C()._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device: _device_t = None) -> float:
    """The chip's memory fraction (1.0 unless set)."""
    return _C()._get_memory_fraction(_index(device))


# -------------------------------------------------------------- summary


def _size_text(n: int) -> str:
    """Bytes in the unit that keeps at most four digits before the point."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _count_text(n: int) -> str:
    return f"{n:,}"


_SUMMARY_ROWS = (
    ("allocated_bytes", "Allocated memory", _size_text),
    ("active_bytes", "Active memory", _size_text),
    ("requested_bytes", "Requested memory", _size_text),
    ("reserved_bytes", "Reserved memory", _size_text),
    ("inactive_split_bytes", "Non-releasable memory", _size_text),
    ("allocation", "Allocations", _count_text),
    ("active", "Active allocations", _count_text),
    ("segment", "Reserved segments", _count_text),
    ("inactive_split", "Non-releasable allocations", _count_text),
)


def memory_summary(device: _device_t = None, abbreviated: bool = False) -> str:
    """A readable table of the chip's allocator statistics (from
    memory_stats), as torch.cuda.memory_summary prints them: current, peak,
    total allocated and total freed of each quantity, split into small
    (<= 1 MiB blocks) and large pools unless ``abbreviated``."""
    index = _index(device)
    stats = memory_stats(index)
    props = get_device_properties(index)
    columns = ("Current", "Peak", "Tot. alloc", "Tot. freed")
    label_width, cell_width = 28, 12
    width = label_width + len(columns) * (cell_width + 3)

    def rule(char: str) -> str:
        return "|" + char * (width - 2) + "|"

    def line(text: str) -> str:
        return "| " + text.ljust(width - 4) + " |"

    def row(label: str, cells: list[str]) -> str:
        return "| " + label.ljust(label_width - 2) + "".join(f" | {c:>{cell_width}}" for c in cells) + " |"

    out = [
        rule("="),
        line(f"torch-tpu memory summary, device tpu:{index} ({props.name})".center(width - 4)),
        rule("-"),
        line(
            f"capacity {_size_text(props.total_memory)}, memory fraction "
            f"{get_per_process_memory_fraction(index):g}; OOMs: {stats['num_ooms']}, "
            f"cache flushes (retries): {stats['num_alloc_retries']}"
        ),
        rule("="),
        row("Metric", list(columns)),
    ]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "  from large pool"),
                                               ("small_pool", "  from small pool")]
    for key, name, fmt in _SUMMARY_ROWS:
        out.append(rule("-"))
        for pool, suffix in pools:
            values = [stats[f"{key}.{pool}.{field}"] for field in ("current", "peak", "allocated", "freed")]
            out.append(row(suffix or name, [fmt(v) for v in values]))
    for key, name in (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize segments")):
        out.append(rule("-"))
        out.append(row(name, [_count_text(stats[f"{key}.{f}"]) for f in ("current", "peak", "allocated", "freed")]))
    out.append(rule("="))
    return "\n".join(out) + "\n"


# ----------------------------------------------------- history, snapshots

_CONTEXT_LEVELS = {None: 0, "state": 1, "alloc": 2, "all": 3}


def _record_memory_history(enabled: Union[str, bool, None] = "all", *args: Any, **kwargs: Any) -> None:
    """Records allocations with their stack traces so that _snapshot() can
    tell what holds each block, and (with enabled="all") a history of
    every alloc and free, as torch.cuda.memory._record_memory_history.

    enabled: None turns recording off (and forgets the history); "state"
        keeps stack traces of what is allocated now; "all" also keeps the
        last ``max_entries`` allocator events per chip.
    context: which stacks are kept: None, "state" (allocated blocks),
        "alloc" (also allocation events), "all" (also free events).
    stacks: "python" (Python and TorchScript frames) or "all" (C++ frames
        too, slower to capture and to symbolize).
    max_entries: events kept per chip (a ring: the oldest go first).
    clear_history: forget earlier events first.
    skip_actions: event kinds not to record ("alloc", "free_requested",
        "free_completed", "segment_alloc", "segment_free", "oom",
        "snapshot").
    device, compile_context, global_record_annotations: accepted for
        CUDA's signature; history covers every chip, and torch.compile
        contexts and record_function annotations are not recorded.

    A bool ``enabled`` selects CUDA's legacy signature (record_context,
    trace_alloc_max_entries, trace_alloc_record_context, device,
    record_context_cpp). When off, allocation costs one flag check."""
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: _device_t = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: Optional[list[str]] = None,
) -> None:
    call = "torch.tpu.memory._record_memory_history"
    if enabled not in (None, "state", "all"):
        raise RuntimeError(f"{call}: expected enabled to be 'state', 'all', or None, got {enabled!r}")
    if context not in _CONTEXT_LEVELS:
        raise RuntimeError(f"{call}: expected context to be 'state', 'alloc', 'all', or None, got {context!r}")
    if stacks not in ("python", "all"):
        raise RuntimeError(f"{call}: expected stacks to be 'python', or 'all', got {stacks!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"{call}: max_entries must be an int, got {type(max_entries).__name__} {max_entries!r}")
    if max_entries < 0:
        raise ValueError(f"{call}: max_entries must be non-negative, got {max_entries}")
    if skip_actions is not None and (
        isinstance(skip_actions, str) or not all(isinstance(a, str) for a in skip_actions)
    ):
        raise TypeError(f"{call}: skip_actions must be a list of action names, got {skip_actions!r}")
    if device is not None:
        _index(device)  # checked, though history covers every chip (as on CUDA)
    if compile_context or global_record_annotations:
        warnings.warn(f"{call}: compile_context and global_record_annotations are not recorded on tpu",
                      stacklevel=3)
    on = enabled is not None
    _C()._record_memory_history(
        enabled == "all",
        min(max(max_entries, 1), 2**64 - 1),  # CUDA keeps at least one entry
        _CONTEXT_LEVELS[context] if on else 0,
        on and context is not None and stacks == "all",
        list(skip_actions or []),
        bool(clear_history),
    )


_record_memory_history.__signature__ = inspect.signature(_record_memory_history_impl)  # as on CUDA


def _record_memory_history_legacy(
    enabled: bool,
    record_context: bool = True,
    trace_alloc_max_entries: int = 1,
    trace_alloc_record_context: bool = False,
    device: _device_t = None,
    record_context_cpp: bool = False,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: Optional[list[str]] = None,
) -> None:
    """CUDA's legacy form: stacks of live blocks (record_context), a trace
    of trace_alloc_max_entries events, with stacks when
    trace_alloc_record_context."""
    if not enabled:
        return _record_memory_history_impl(None)
    context = "alloc" if trace_alloc_record_context else ("state" if record_context else None)
    return _record_memory_history_impl(
        "all" if trace_alloc_max_entries > 1 else "state",
        context,
        "all" if record_context_cpp else "python",
        trace_alloc_max_entries,
        device,
        clear_history,
        compile_context,
        global_record_annotations,
        skip_actions,
    )


def _snapshot(device: _device_t = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """Every chip's allocator state, in the format of torch.cuda.memory._snapshot:

    {"segments": [{"device", "address", "total_size", "allocated_size",
                   "active_size", "requested_size", "stream", "segment_type",
                   "segment_pool_id", "is_expandable", "frames",
                   "blocks": [{"address", "size", "requested_size",
                               "state", "frames"}]}],
     "device_traces": [[{"action", "addr" (or "device_free" for "oom"),
                         "size", "stream", "time_us", "frames"}] per chip]}

    Block states are "active_allocated", "active_pending_free" (freed but
    still used by another stream's recorded work) and "inactive" (cached).
    "stream" is the stream's index on its chip (0 = default stream). Frames
    (innermost first) are where the block was allocated, while
    _record_memory_history was on. ``device`` is checked but, as on CUDA,
    every chip is included. Load the pickle of _dump_snapshot at
    https://pytorch.org/memory_viz."""
    if device is not None:
        _index(device)
    snapshot = _C()._memory_snapshot()
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces

        snapshot = _augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles _snapshot() to ``filename``, the file pytorch.org/memory_viz
    (or ``python -m torch.cuda._memory_viz``) reads."""
    snapshot = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


def memory_snapshot(mempool_id: Optional[tuple[int, int]] = None, include_traces: bool = True) -> list:
    """The segments of _snapshot() (every chip's). The tpu allocator has one
    pool, (0, 0)."""
    if mempool_id is not None and tuple(mempool_id) != (0, 0):
        raise ValueError(f"torch.tpu.memory_snapshot: unknown memory pool {mempool_id!r} (tpu has only (0, 0))")
    return _snapshot()["segments"]


# ------------------------------------------------------ pinned host memory


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """Statistics of the pinned host allocator (Tensor.pin_memory()), under
    torch.cuda.host_memory_stats' keys: "allocations", "allocated_bytes",
    "active_requests", "active_bytes" ({current, peak, allocated, freed}),
    "num_host_alloc", "num_host_free", and "host_alloc_time" /
    "host_free_time" ({total, max, min, count, avg}, microseconds). Pinned
    blocks are not cached: each is allocated for its request and freed
    once its owner and the copies queued on it are done, so allocations
    and active requests count the same blocks (page-rounded bytes)."""
    return _C()._host_memory_stats()


def host_memory_stats() -> "OrderedDict[str, Any]":
    """host_memory_stats_as_nested_dict flattened to "allocations.current"
    style keys, sorted."""
    flat = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, value))

    walk("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(flat))


def reset_accumulated_host_memory_stats() -> None:
    """Zeroes the pinned allocator's "allocated"/"freed" totals, call counts and time totals."""
    _C()._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    """Sets the pinned allocator's peaks to their current values (and the times' max and min to 0)."""
    _C()._reset_peak_host_memory_stats()
