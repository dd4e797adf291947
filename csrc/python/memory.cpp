// Bindings behind torch.tpu.memory's snapshot, history, memory fraction
// and host statistics, and torch.tpu's sync debug mode. The C allocator
// owns every number and block; this file only turns them into the Python
// objects CUDA's bindings return, under the same keys.
#include "python/memory.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/glue.h"
#include "core/mem_history.h"
#include "core/sync_debug.h"

extern "C" {
#include "tpu/host_mem.h"
}

namespace torch {
// Declared in torch/csrc/profiler/python/combined_traceback.h (and exported
// by libtorch_python), a header the wheel cannot compile: it includes
// nlohmann/json.hpp, which the wheel does not ship. Symbolizes tracebacks
// into lists of {"name", "filename", "line"} dicts, innermost frame first.
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace torch_tpu {
namespace {

namespace py = pybind11;

// The C arrays of one snapshot, released (with their context references)
// when the snapshot has been built and symbolized.
struct BlockArray {
  tpu_mem_block_info* blocks = nullptr;
  size_t count = 0;
  ~BlockArray() { tpu_mem_blocks_free(blocks, count); }
};

struct EventArray {
  tpu_mem_event* events = nullptr;
  size_t count = 0;
  ~EventArray() { tpu_mem_events_free(events, count); }
};

// Collects the dicts that get a "frames" list, to symbolize them all in one
// batch at the end (frames shared between tracebacks are built once).
struct FrameQueue {
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<py::dict> dests;

  void add(const py::dict& d, void* context) {
    auto* c = static_cast<MemContext*>(context);
    if (c && c->traceback) {
      tracebacks.push_back(c->traceback.get());
      dests.push_back(d);
    } else {
      d["frames"] = py::list();
    }
  }

  void symbolize() {
    std::vector<py::object> frames = torch::py_symbolize(tracebacks);
    for (size_t i = 0; i < frames.size(); i++) dests[i]["frames"] = frames[i];
  }
};

const char* block_state_name(tpu_mem_block_state state) {
  static const char* const names[] = {"active_allocated", "active_pending_free", "inactive"};
  static_assert(sizeof names / sizeof names[0] == TPU_MEM_BLOCK_STATE_COUNT, "one name per state");
  return names[state];
}

// Segments of one chip, CUDA's layout: blocks in address order inside
// each, their sizes summing to the segment's.
void add_segments(py::list& segments, const BlockArray& a, FrameQueue& frames) {
  for (size_t i = 0; i < a.count;) {
    const tpu_mem_block_info& first = a.blocks[i];
    py::dict seg;
    seg["device"] = first.chip;
    seg["address"] = first.segment_address;
    seg["total_size"] = first.segment_size;
    seg["stream"] = first.stream;
    seg["segment_type"] = first.segment_size <= (1u << 20) ? "small" : "large";
    seg["segment_pool_id"] = py::make_tuple(0, 0);
    seg["is_expandable"] = false;
    frames.add(seg, first.segment_context);
    uint64_t allocated = 0, active = 0, requested = 0;
    py::list blocks;
    for (; i < a.count && a.blocks[i].segment_address == first.segment_address; i++) {
      const tpu_mem_block_info& b = a.blocks[i];
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.requested_size;
      block["state"] = block_state_name(b.state);
      frames.add(block, b.context);
      blocks.append(block);
      if (b.state == TPU_MEM_BLOCK_ACTIVE_ALLOCATED) allocated += b.size;
      if (b.state != TPU_MEM_BLOCK_INACTIVE) {
        active += b.size;
        requested += b.requested_size;
      }
    }
    seg["allocated_size"] = allocated;
    seg["active_size"] = active;
    seg["requested_size"] = requested;
    seg["blocks"] = blocks;
    segments.append(seg);
  }
}

py::list trace_of(const EventArray& a, FrameQueue& frames) {
  py::list trace;
  for (size_t i = 0; i < a.count; i++) {
    const tpu_mem_event& e = a.events[i];
    py::dict entry;
    entry["action"] = tpu_mem_action_name(e.action);
    if (e.action == TPU_MEM_ACTION_OOM)
      entry["device_free"] = e.device_free;
    else
      entry["addr"] = e.addr;
    entry["size"] = e.size;
    entry["stream"] = e.stream;
    entry["time_us"] = e.time_us;
    if (e.context) frames.add(entry, e.context);  // CUDA leaves "frames" out without one
    trace.append(entry);
  }
  return trace;
}

// {"segments": [...every chip's...], "device_traces": [[...] per chip]}.
py::dict memory_snapshot() {
  const int chips = chip_count();
  std::vector<BlockArray> blocks(chips);
  std::vector<EventArray> events(chips);
  for (int c = 0; c < chips; c++) {
    TPU_CHECK_STATUS(tpu_mem_snapshot(c, &blocks[c].blocks, &blocks[c].count));
    TPU_CHECK_STATUS(tpu_mem_history_events(c, &events[c].events, &events[c].count));
  }
  FrameQueue frames;
  py::list segments, traces;
  for (int c = 0; c < chips; c++) {
    add_segments(segments, blocks[c], frames);
    traces.append(trace_of(events[c], frames));
  }
  frames.symbolize();
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = traces;
  return result;
}

py::dict stat_dict(const tpu_mem_stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict duration_dict(const tpu_duration_stat& s) {
  py::dict d;
  d["total"] = s.total_us;
  d["max"] = s.max_us;
  d["min"] = s.min_us;
  d["count"] = s.count;
  d["avg"] = s.count == 0 ? 0 : s.total_us / s.count;
  return d;
}

// CUDA's torch.cuda.host_memory_stats_as_nested_dict keys.
py::dict host_memory_stats() {
  tpu_host_stats h{};
  tpu_host_get_stats(&h);
  py::dict d;
  d["allocations"] = stat_dict(h.allocations);
  d["allocated_bytes"] = stat_dict(h.allocated_bytes);
  d["active_requests"] = stat_dict(h.active_requests);
  d["active_bytes"] = stat_dict(h.active_bytes);
  d["num_host_alloc"] = h.num_host_alloc;
  d["num_host_free"] = h.num_host_free;
  d["host_alloc_time"] = duration_dict(h.host_alloc_time);
  d["host_free_time"] = duration_dict(h.host_free_time);
  return d;
}

}  // namespace

void init_memory_bindings(py::module_& m) {
  install_mem_context_ops();
  m.def("_memory_snapshot", &memory_snapshot);
  m.def("_record_memory_history",
        [](bool trace, uint64_t max_entries, int level, bool cpp_frames, const std::vector<std::string>& skip,
           bool clear) {
          TORCH_CHECK_VALUE(level >= 0 && level < TPU_MEM_CONTEXT_COUNT, "_record_memory_history: context level ",
                            level, " is out of range");
          configure_mem_history(trace, max_entries, static_cast<tpu_mem_context_level>(level), cpp_frames, skip,
                                clear);
        });
  m.def("_set_memory_fraction", [](double fraction, int64_t index) {
    check_chip_index(index, "set_per_process_memory_fraction");
    TPU_CHECK_STATUS(tpu_mem_set_fraction(static_cast<int>(index), fraction));
  });
  m.def("_get_memory_fraction", [](int64_t index) {
    check_chip_index(index, "get_per_process_memory_fraction");
    double fraction = 1.0;
    TPU_CHECK_STATUS(tpu_mem_get_fraction(static_cast<int>(index), &fraction));
    return fraction;
  });
  // torch.tpu.caching_allocator_alloc/delete: raw blocks, with the same
  // history contexts as a tensor's storage. Only addresses that alloc
  // handed out may be deleted: the allocator alone would also free a live
  // tensor's block given its data_ptr(), and the tensor would then write
  // into memory handed to someone else.
  static std::mutex raw_lock;
  static std::unordered_set<uintptr_t> raw_blocks;
  m.def("_caching_allocator_alloc", [](int64_t size, int64_t index, int64_t stream_index) {
    check_chip_index(index, "caching_allocator_alloc");
    TORCH_CHECK_VALUE(size >= 0, "caching_allocator_alloc: size must be non-negative, got ", size);
    TORCH_CHECK_VALUE(stream_index >= 0 && stream_index < TPU_STREAMS_MAX, "caching_allocator_alloc: stream ",
                      stream_index, " is not a stream of tpu:", index, " (streams are 0 .. ", TPU_STREAMS_MAX - 1,
                      ")");
    tpu_stream* stream = nullptr;
    TPU_CHECK_STATUS(tpu_stream_get(static_cast<int>(index), static_cast<int>(stream_index), &stream));
    MemContext* context = maybe_capture_mem_context(TPU_MEM_CONTEXT_STATE);
    void* ptr = nullptr;
    const tpu_status st = tpu_mem_alloc_ctx(static_cast<int>(index), static_cast<size_t>(size), stream, context, &ptr);
    release_mem_context(context);
    TPU_CHECK_STATUS(st);
    if (ptr) {
      std::lock_guard<std::mutex> guard(raw_lock);
      raw_blocks.insert(reinterpret_cast<uintptr_t>(ptr));
    }
    return reinterpret_cast<uintptr_t>(ptr);
  });
  m.def("_caching_allocator_delete", [](uintptr_t address) {
    if (address == 0) return;  // what a 0-byte alloc returned
    {
      std::lock_guard<std::mutex> guard(raw_lock);
      TORCH_CHECK(raw_blocks.erase(address) == 1, "caching_allocator_delete: 0x", std::hex, address,
                  " was not returned by caching_allocator_alloc, or was deleted already (a tensor's memory is "
                  "freed when the tensor is)");
    }
    MemContext* context = maybe_capture_mem_context(TPU_MEM_CONTEXT_ALL);
    const tpu_status st = tpu_mem_free_ctx(reinterpret_cast<void*>(address), context);
    release_mem_context(context);
    if (st != TPU_OK) {
      // CUDA raises a RuntimeError for a pointer it did not hand out.
      const std::string msg = tpu_last_error_message();
      tpu_clear_error();
      TORCH_CHECK(false, "caching_allocator_delete: ", msg);
    }
  });
  m.def("_caching_allocator_enable", [](bool on) { tpu_mem_set_caching(on); });
  m.def("_caching_allocator_is_enabled", []() { return tpu_mem_caching_enabled(); });
  m.def("_host_memory_stats", &host_memory_stats);
  m.def("_reset_accumulated_host_memory_stats", []() { tpu_host_reset_accumulated_stats(); });
  m.def("_reset_peak_host_memory_stats", []() { tpu_host_reset_peak_stats(); });
  m.def("_set_sync_debug_mode", [](int64_t mode) { set_sync_debug_mode(mode); });
  m.def("_get_sync_debug_mode", []() { return sync_debug_mode(); });
}

}  // namespace torch_tpu
