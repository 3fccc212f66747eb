// groupsgd._core: the worker client library for Python. Tensors cross as buffers (numpy
// arrays, or anything with the buffer protocol) shared with C++, never copied; every call
// that waits on the network releases the GIL. torch is not linked: groupsgd.torch wraps
// these buffers with torch.from_numpy.
#include <cstring>
#include <stdexcept>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "background_zero.h"
#include "groupsgd/common/log.h"
#include "session.h"

namespace py = pybind11;
using namespace groupsgd;

namespace {

// A writable (or readable) C-contiguous float32 buffer of exactly n values, seen in place.
std::span<float> floatSpan(const py::buffer& b, std::size_t n, bool writable, const char* what) {
  py::buffer_info info = b.request(writable);
  if (info.itemsize != 4 || (info.format != "f" && info.format != "<f" && info.format != "=f")) {
    throw py::type_error(std::string(what) + " must be float32 (got format '" + info.format + "')");
  }
  std::size_t count = 1;
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect) {
      throw py::value_error(std::string(what) + " must be contiguous");
    }
    expect *= info.shape[d];
    count *= static_cast<std::size_t>(info.shape[d]);
  }
  if (count != n) {
    throw py::value_error(std::string(what) + " has " + std::to_string(count) +
                          " values, the model " + std::to_string(n));
  }
  return {static_cast<float*>(info.ptr), count};
}

// A wait cut short by Ctrl-C: the check below ran Python's signal handler, whose
// exception (KeyboardInterrupt) is pending; raised here, the GIL held again.
void raiseIfInterrupted(const python::Session& session) {
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (session.interrupted()) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
}

// The session's interrupt check: runs Python's signal handlers (the main thread only),
// taking the GIL for it; true when one raised.
bool pythonSignalRaised() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

[[noreturn]] void raise(const Status& s) {
  if (s.code() == Code::kInvalidArgument) throw py::value_error(s.toString());
  throw std::runtime_error(s.toString());
}

client::Role parseRole(const std::string& role) {
  if (role == "trainer") return client::Role::kTrainer;
  if (role == "evaluator") return client::Role::kEvaluator;
  throw py::value_error("role must be 'trainer' or 'evaluator', not '" + role + "'");
}

// The session plus the gradient buffer it sends without copying.
class PySession {
 public:
  PySession(const std::vector<std::string>& args, const std::string& role,
            std::uint64_t param_count, const std::string& fingerprint, const py::buffer& initial,
            const std::string& layout, bool optimizer, std::uint64_t buffer_count)
      : param_count_(param_count) {
    if (param_count == 0) throw py::value_error("the model has no parameters");
    if (buffer_count >= param_count) {
      throw py::value_error("buffer_count " + std::to_string(buffer_count) +
                            " leaves no parameters of " + std::to_string(param_count));
    }
    auto opts = worker::parseWorkerOptions(args);
    if (!opts) throw py::value_error(opts.status().message());
    log::Level level;
    if (!log::parseLevel(opts->log_level, &level)) {
      throw py::value_error("bad log level '" + opts->log_level + "'");
    }
    log::setLevel(level);  // the process-wide level, as groupsgd-worker sets it
    client::ModelDescription model;
    model.param_count = param_count;
    model.fingerprint = fingerprint;
    model.layout = layout;
    model.buffer_count = buffer_count;  // the flat vector's tail: averaged, not stepped
    auto init = std::make_shared<std::vector<float>>(param_count);
    const std::span<float> src = floatSpan(initial, param_count, false, "initial parameters");
    std::memcpy(init->data(), src.data(), src.size_bytes());  // once, at construction
    model.initial = std::move(init);
    grad_ = std::make_shared<std::vector<float>>(param_count, 0.0f);
    // Optimizer on the workers: mean gradient replies land in the gradient buffer.
    if (optimizer) correction_ = std::make_shared<std::vector<float>>(param_count, 0.0f);
    session_ = std::make_unique<python::Session>(
        std::move(*opts), parseRole(role), std::move(model), optimizer,
        optimizer ? std::span<float>(*grad_) : std::span<float>(),
        optimizer ? std::span<float>(*correction_) : std::span<float>());
    session_->setInterruptCheck(pythonSignalRaised);
  }

  void start(const py::buffer& params) {
    const std::span<float> p = floatSpan(params, param_count_, true, "params");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = session_->start(p);
    }
    raiseIfInterrupted(*session_);
    if (!s) raise(s);
  }

  // The flat gradient buffer as a numpy array sharing its memory (kept alive by the array).
  py::array_t<float> gradientBuffer() { return shared(grad_); }

  // A second gradient buffer, zeroed, made on the first call: step(buffer=1) sends it.
  // (A CPU trainer without an optimizer alternates: zero_later() clears the one just sent
  // while it computes into the other.)
  py::array_t<float> spareGradientBuffer() {
    if (!spare_) spare_ = std::make_shared<std::vector<float>>(param_count_, 0.0f);
    return shared(spare_);
  }

  // Zeroes gradient buffer `buffer` (0 or 1) on a thread of its own, after the zeroing
  // started last has ended; step() and destroy() wait for it too.
  void zeroLater(int buffer) {
    auto buf = gradient(buffer);
    py::gil_scoped_release nogil;
    zero_.start(std::move(buf));
  }

  // A numpy array over `buf`'s memory, keeping it alive.
  py::array_t<float> shared(const std::shared_ptr<std::vector<float>>& buf) {
    auto* keep = new std::shared_ptr<std::vector<float>>(buf);
    py::capsule owner(keep,
                      [](void* p) { delete static_cast<std::shared_ptr<std::vector<float>>*>(p); });
    return py::array_t<float>({static_cast<py::ssize_t>(param_count_)}, {sizeof(float)},
                              buf->data(), owner);
  }

  py::dict step(std::uint32_t batch, float loss, const py::buffer& params, bool skipped,
                int buffer) {
    const std::span<float> p = floatSpan(params, param_count_, true, "params");
    const auto grad = gradient(buffer);
    Result<python::StepResult> r = internalError("not run");
    {
      py::gil_scoped_release nogil;
      zero_.await();  // never send a buffer still being zeroed
      r = session_->step(grad, batch, loss, p, skipped);
    }
    raiseIfInterrupted(*session_);
    if (!r) raise(r.status());
    py::dict d;
    d["pushed"] = r->pushed;
    d["skipped"] = r->skipped;
    d["accepted"] = r->accepted;
    d["step"] = r->step;
    d["model_version"] = r->model_version;
    d["wait_ms"] = r->wait_ms;
    d["mean_gradient"] = r->mean_gradient;
    d["correction"] = r->correction;
    d["reset_optimizer"] = r->reset_optimizer;
    d["parameters_loaded"] = r->parameters_loaded;
    return d;
  }

  // The correction a step asked to add (optimizer on the workers), shared, not copied.
  py::array_t<float> correctionBuffer() {
    if (!correction_) throw std::runtime_error("no correction buffer: the worker has no optimizer");
    return shared(correction_);
  }

  // data_allocation ranges: the next batch's sample indices (claims ranges as needed).
  py::array_t<std::uint32_t> nextRangeBatch(std::uint64_t dataset_size, std::uint32_t batch) {
    Result<std::vector<std::uint32_t>> r = internalError("not run");
    {
      py::gil_scoped_release nogil;
      r = session_->nextRangeBatch(dataset_size, batch);
    }
    raiseIfInterrupted(*session_);
    if (!r) raise(r.status());
    return py::array_t<std::uint32_t>(static_cast<py::ssize_t>(r->size()), r->data());
  }

  std::uint64_t fetchCentral(const py::buffer& params) {
    const std::span<float> p = floatSpan(params, param_count_, true, "params");
    Result<std::uint64_t> v = internalError("not run");
    {
      py::gil_scoped_release nogil;
      v = session_->fetchCentral(p);
    }
    raiseIfInterrupted(*session_);
    if (!v) raise(v.status());
    return *v;
  }

  void close() {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = session_->close();
    }
    raiseIfInterrupted(*session_);
    if (!s) PyErr_WarnEx(PyExc_RuntimeWarning, ("leave: " + s.toString()).c_str(), 1);
  }

  // --shared-device: waits (GIL released) for the arbiter's lease and the device lock.
  double acquireDevice() {
    python::Session& session = s();
    double waited = 0;
    {
      py::gil_scoped_release nogil;
      waited = session.acquireDevice();
    }
    raiseIfInterrupted(session);
    return waited;
  }

  void releaseDevice() {
    python::Session& session = s();
    py::gil_scoped_release nogil;
    session.releaseDevice();
  }

  // Stops the heartbeat thread and closes the sockets (without leaving).
  void destroy() {
    py::gil_scoped_release nogil;
    zero_.await();
    session_.reset();
  }

  python::Session& s() {
    if (!session_) throw std::runtime_error("the session was destroyed");
    return *session_;
  }

 private:
  std::uint64_t param_count_;
  std::unique_ptr<python::Session> session_;
  std::shared_ptr<std::vector<float>> gradient(int buffer) {
    if (buffer == 0) return grad_;
    if (buffer == 1 && spare_) return spare_;
    throw py::value_error("gradient buffer " + std::to_string(buffer) +
                          " does not exist (0, or 1 after spare_gradient_buffer())");
  }

  std::shared_ptr<std::vector<float>> grad_;
  std::shared_ptr<std::vector<float>> spare_;       // spareGradientBuffer(), else null
  python::BackgroundZero zero_;                     // joined before the buffers go
  std::shared_ptr<std::vector<float>> correction_;  // optimizer on the workers only
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "groupsgd worker client library (C++), for groupsgd.torch";
  m.def("set_log_level", [](const std::string& level) {
    log::Level l;
    if (!log::parseLevel(level, &l)) throw py::value_error("bad log level '" + level + "'");
    log::setLevel(l);
  });
  m.def("worker_usage", [] { return std::string(worker::workerUsage()); });
  // data_allocation ranges: epoch e's order of a training set of n samples, as every
  // process of the run computes it (docs/protocol.md, "Sample ranges").
  m.def(
      "epoch_permutation",
      [](std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
        if (n > (std::uint64_t{1} << 32)) throw std::invalid_argument("n must be <= 2^32");
        const auto p = dataset::epochPermutation(n, seed, epoch);
        return py::array_t<std::uint32_t>(static_cast<py::ssize_t>(p.size()), p.data());
      },
      py::arg("n"), py::arg("seed"), py::arg("epoch"));
  py::class_<PySession>(m, "Session")
      .def(py::init<const std::vector<std::string>&, const std::string&, std::uint64_t,
                    const std::string&, const py::buffer&, const std::string&, bool,
                    std::uint64_t>(),
           py::arg("args"), py::arg("role"), py::arg("param_count"), py::arg("fingerprint"),
           py::arg("initial"), py::arg("layout") = "", py::arg("optimizer") = false,
           py::arg("buffer_count") = 0)
      .def("start", &PySession::start, py::arg("params"))
      .def("gradient_buffer", &PySession::gradientBuffer)
      .def("spare_gradient_buffer", &PySession::spareGradientBuffer)
      .def("zero_later", &PySession::zeroLater, py::arg("buffer"))
      .def("correction_buffer", &PySession::correctionBuffer)
      .def_property_readonly("group_step", [](PySession& p) { return p.s().groupStep(); })
      .def_property_readonly("wants_parameters",
                             [](PySession& p) { return p.s().wantsParameters(); })
      .def("step", &PySession::step, py::arg("batch"), py::arg("loss"), py::arg("params"),
           py::arg("skipped") = false, py::arg("buffer") = 0)
      .def("fetch_central", &PySession::fetchCentral, py::arg("params"))
      .def(
          "report",
          [](PySession& p, float acc, std::uint64_t version, float loss) {
            p.s().report(acc, version, loss);
          },
          py::arg("accuracy"), py::arg("version"), py::arg("loss") = -1.0f)
      .def("close", &PySession::close)
      .def("acquire_device", &PySession::acquireDevice)
      .def("release_device", &PySession::releaseDevice)
      .def_property_readonly("shares_device", [](PySession& p) { return p.s().sharesDevice(); })
      .def_property_readonly("holds_device", [](PySession& p) { return p.s().holdsDevice(); })
      .def("destroy", &PySession::destroy)
      .def_property_readonly("should_stop", [](PySession& p) { return p.s().shouldStop(); })
      .def_property_readonly("measure_now", [](PySession& p) { return p.s().measureNow(); })
      .def_property_readonly("quarantined", [](PySession& p) { return p.s().quarantined(); })
      .def_property_readonly("batch_size", [](PySession& p) { return p.s().batchSize(); })
      .def_property_readonly("compression", [](PySession& p) { return p.s().compression(); })
      .def_property_readonly("worker_id", [](PySession& p) { return p.s().assignment().worker_id; })
      .def_property_readonly("group_id", [](PySession& p) { return p.s().assignment().group_id; })
      .def_property_readonly("shard_index",
                             [](PySession& p) { return p.s().assignment().shard_index; })
      .def_property_readonly("shard_count",
                             [](PySession& p) { return p.s().assignment().shard_count; })
      .def_property_readonly("seed", [](PySession& p) { return p.s().assignment().seed; })
      .def_property_readonly("data_ranges",
                             [](PySession& p) { return p.s().assignment().data_ranges; })
      .def("next_range_batch", &PySession::nextRangeBatch, py::arg("dataset_size"),
           py::arg("batch"))
      .def_property_readonly("model", [](PySession& p) { return p.s().assignment().model; })
      .def_property_readonly("heartbeat_ms",
                             [](PySession& p) { return p.s().assignment().heartbeat_ms; })
      .def_property_readonly("total_steps", [](PySession& p) { return p.s().totalSteps(); })
      .def_property_readonly("heartbeats_sent", [](PySession& p) { return p.s().heartbeatsSent(); })
      .def_property_readonly("registrations", [](PySession& p) { return p.s().registrations(); });
}
