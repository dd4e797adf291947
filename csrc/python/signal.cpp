// torch_tpu._C._Signal: a host signal (tpu/signal.h), the completion that
// tpu_dist's asynchronous collectives set from their communication thread
// and that the issuing stream waits for.
#include "python/signal.h"

#include <cmath>

#include "core/glue.h"

extern "C" {
#include "tpu/signal.h"
}

namespace torch_tpu {
namespace {

// Seconds (negative or infinite: no deadline) as the C API's milliseconds.
int64_t timeout_ms_of(double timeout_s, const char* op) {
  TORCH_CHECK_VALUE(!std::isnan(timeout_s), op, ": timeout_s is NaN");
  if (timeout_s < 0 || timeout_s * 1000.0 >= 9.0e18)
    return -1;  // the C side also treats deadlines past its clock as none
  return static_cast<int64_t>(timeout_s * 1000.0);
}

class Signal {
 public:
  explicit Signal(const std::string& name) { TPU_CHECK_STATUS(tpu_signal_create(name.c_str(), &signal_)); }
  ~Signal() { tpu_signal_free(signal_); }
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  // Success, or a failure whose message the failing waits report.
  void set(bool ok, const std::string& message) {
    TPU_CHECK_STATUS(tpu_signal_set(signal_, ok ? TPU_OK : TPU_ERR_EXTERNAL, message.c_str()));
  }

  bool is_set() const {
    bool done = false;
    tpu_status outcome = TPU_OK;
    TPU_CHECK_STATUS(tpu_signal_query(signal_, &done, &outcome));
    return done;
  }

  // Queues a wait on the tpu stream (id, chip); in debug mode it blocks,
  // without the GIL (the wait hooks release it).
  void wait_on(int64_t stream_id, int64_t chip, double timeout_s) {
    check_chip_index(chip, "Signal.wait_on");
    c10::Stream stream = c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(chip),
                                              c10::DeviceType::PrivateUse1);
    TPU_CHECK_STATUS(tpu_stream_wait_signal(c_stream(stream), signal_, timeout_ms_of(timeout_s, "Signal.wait_on")));
  }

  // Starts the deadline of every wait for this signal (tpu_signal_arm).
  void arm(double timeout_s) { TPU_CHECK_STATUS(tpu_signal_arm(signal_, timeout_ms_of(timeout_s, "Signal.arm"))); }

 private:
  tpu_signal* signal_ = nullptr;
};

}  // namespace

void init_signal_bindings(py::module_& m) {
  py::class_<Signal>(m, "_Signal")
      .def(py::init<const std::string&>(), py::arg("name"))
      // set and arm take the signal's lock, which a debug-mode wait may
      // hold briefly while it sleeps; they never need the GIL.
      .def("set", &Signal::set, py::arg("ok"), py::arg("message") = "", py::call_guard<py::gil_scoped_release>())
      .def("arm", &Signal::arm, py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>())
      .def("is_set", &Signal::is_set)
      .def("wait_on", &Signal::wait_on, py::arg("stream_id"), py::arg("chip"), py::arg("timeout_s"));
}

}  // namespace torch_tpu
