// python/torch/csrc/backend.cc — ProcessGroupRemora (see backend.h): tensors to remora
// buffers and types, each c10d operation as posted remora operations, the c10d::Store
// adapter for bootstrap, and the completion thread.
#include "backend.h"

#ifdef REMORA_TORCH_WINDOWS
#include "window.h"
#endif

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <utility>

#include "remora/external_store.h"

namespace remora_torch {
namespace {

using remora::DataType;
using remora::Request;
using remora::Status;

// The coalesced op types that newer PyTorch has (2.15 does, 2.11 does not); older ones
// report such works as COALESCED. Detected, not keyed to a version number.
template <typename Op = c10d::OpType>
constexpr Op allgather_into_tensor_coalesced_op() {
  if constexpr (requires { Op::ALLGATHER_INTO_TENSOR_COALESCED; }) {
    return Op::ALLGATHER_INTO_TENSOR_COALESCED;
  } else {
    return Op::COALESCED;
  }
}

template <typename Op = c10d::OpType>
constexpr Op reduce_scatter_tensor_coalesced_op() {
  if constexpr (requires { Op::REDUCE_SCATTER_TENSOR_COALESCED; }) {
    return Op::REDUCE_SCATTER_TENSOR_COALESCED;
  } else {
    return Op::COALESCED;
  }
}

std::exception_ptr backend_error(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
}

[[noreturn]] void throw_backend_error(const std::string& msg) { std::rethrow_exception(backend_error(msg)); }

// --- c10d::Store as remora's ExternalStore -------------------------------------------

class C10dStore : public remora::ExternalStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status set(std::string_view key, std::span<const std::byte> value) override {
    try {
      const auto* p = reinterpret_cast<const uint8_t*>(value.data());
      store_->set(std::string(key), std::vector<uint8_t>(p, p + value.size()));
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(remora::StatusCode::kPeerFailed, c10::str("c10d store set(\"", key, "\"): ", e.what()));
    }
  }

  remora::Result<std::vector<std::byte>> get(std::string_view key, remora::Duration timeout) override {
    const std::string k(key);
    try {
      store_->wait({k}, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
    } catch (const std::exception& e) {
      return Status(remora::StatusCode::kTimeout, c10::str("c10d store wait(\"", key, "\"): ", e.what()));
    }
    try {
      const std::vector<uint8_t> v = store_->get(k);
      std::vector<std::byte> out(v.size());
      std::memcpy(out.data(), v.data(), v.size());
      return out;
    } catch (const std::exception& e) {
      return Status(remora::StatusCode::kPeerFailed, c10::str("c10d store get(\"", key, "\"): ", e.what()));
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// --- tensors and types ---------------------------------------------------------------

/// The remora type a reduction runs on, or nothing (the caller refuses it).
std::optional<DataType> reduce_type(at::ScalarType t) {
  switch (t) {
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kUInt32: return DataType::kUint32;
    case at::kLong: return DataType::kInt64;
    case at::kUInt64: return DataType::kUint64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    default: return std::nullopt;
  }
}

struct Reduction {
  DataType type;
  remora::ReduceOp op;
};

/// The remora type and op of a reduction over `t`; NotImplementedError for the rest.
Reduction reduction(const char* what, const at::Tensor& t, const c10d::ReduceOp& op) {
  const auto type = reduce_type(t.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(type.has_value(), "remora backend: ", what, " does not support dtype ", t.scalar_type(),
                              " (reductions run on int8, uint8, bool, int32, uint32, int64, uint64, float16, "
                              "bfloat16, float32, float64)");
  remora::ReduceOp r{};
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r = remora::ReduceOp::kSum; break;
    case c10d::ReduceOp::PRODUCT: r = remora::ReduceOp::kProd; break;
    case c10d::ReduceOp::MIN: r = remora::ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r = remora::ReduceOp::kMax; break;
    case c10d::ReduceOp::AVG: r = remora::ReduceOp::kAvg; break;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "remora backend: ", what, " does not support ReduceOp ",
                                  static_cast<int>(op.op_), " (SUM, PRODUCT, MIN, MAX and AVG are supported)");
  }
  TORCH_CHECK_NOT_IMPLEMENTED(r != remora::ReduceOp::kAvg || remora::is_floating(*type), "remora backend: ", what,
                              " with ReduceOp.AVG needs a floating dtype, not ", t.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() != at::kBool || r == remora::ReduceOp::kMin ||
                                  r == remora::ReduceOp::kMax || r == remora::ReduceOp::kProd,
                              "remora backend: ", what, " on bool tensors supports MIN, MAX and PRODUCT only");
  return {*type, r};
}

void check_cpu(const char* what, const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "remora backend: ", what, " takes CPU tensors (got one on ", t.device(), ")");
  TORCH_CHECK(t.layout() == at::kStrided, "remora backend: ", what, " takes dense tensors (got ", t.layout(), ")");
}

void check_one(const char* what, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "remora backend: ", what, " takes exactly one tensor per rank (got ",
              tensors.size(), ")");
  check_cpu(what, tensors[0]);
}

/// A contiguous tensor with `t`'s contents: `t` itself when it is contiguous.
at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

/// When `staging` is not `t`, copies it back into `t` after the operation.
std::function<void()> copy_back(at::Tensor t, at::Tensor staging) {
  if (t.is_same(staging)) return {};
  return [t, staging]() mutable { t.copy_(staging); };
}

size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

void check_rank(const char* what, const char* name, int64_t r, int size) {
  TORCH_CHECK(r >= 0 && r < size, "remora backend: ", what, ": ", name, " ", r, " is not a rank of this group (size ",
              size, ")");
}

/// Element counts of `splits` rows of `t` (rows: along dim 0), as bytes; empty splits: equal blocks.
std::vector<size_t> split_bytes(const char* what, const at::Tensor& t, const std::vector<int64_t>& splits, int size) {
  std::vector<size_t> out(static_cast<size_t>(size));
  if (splits.empty()) {
    TORCH_CHECK(t.numel() % size == 0, "remora backend: ", what, ": ", t.numel(),
                " elements do not split into ", size, " equal blocks");
    std::fill(out.begin(), out.end(), nbytes(t) / static_cast<size_t>(size));
    return out;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "remora backend: ", what, ": ", splits.size(),
              " split sizes for ", size, " ranks");
  const size_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : nbytes(t) / static_cast<size_t>(t.size(0));
  int64_t rows = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    TORCH_CHECK(splits[i] >= 0, "remora backend: ", what, ": negative split size");
    out[i] = static_cast<size_t>(splits[i]) * row;
    rows += splits[i];
  }
  TORCH_CHECK(t.dim() > 0 && rows == t.size(0), "remora backend: ", what, ": split sizes add up to ", rows,
              " rows, the tensor has ", t.dim() > 0 ? t.size(0) : 0);
  return out;
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = at;
    at += counts[i];
  }
  return d;
}

/// Flattens `tensors` (one dtype) into one contiguous 1-D tensor.
at::Tensor flat_cat(const char* what, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "remora backend: ", what, " got no tensors");
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) {
    check_cpu(what, t);
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "remora backend: ", what,
                " takes tensors of one dtype (got ", tensors[0].scalar_type(), " and ", t.scalar_type(), ")");
    flat.push_back(t.reshape({-1}));
  }
  return at::cat(flat);
}

/// Copies consecutive slices of the 1-D `flat` into `tensors`.
void flat_split(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t at = 0;
  for (auto& t : tensors) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

std::shared_ptr<remora::Context> shared_context() {
  static std::mutex mu;
  static std::weak_ptr<remora::Context> weak;
  std::lock_guard lock(mu);
  if (auto ctx = weak.lock()) return ctx;
  auto ctx = remora::Context::create();
  if (!ctx) throw_backend_error("remora backend: Context::create: " + ctx.status().to_string());
  std::shared_ptr<remora::Context> shared(std::move(*ctx));
  weak = shared;
  return shared;
}

}  // namespace

// --- WorkRemora ------------------------------------------------------------------------

WorkRemora::WorkRemora(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                       std::chrono::milliseconds timeout, std::shared_ptr<remora::Communicator> comm)
    : c10d::Work(rank, type),
      name_(name),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      started_(std::chrono::steady_clock::now()),
      comm_(std::move(comm)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

WorkRemora::~WorkRemora() = default;

bool WorkRemora::drive(std::chrono::milliseconds timeout) {
  using std::chrono::steady_clock;
  {
    std::lock_guard lock(mutex_);
    if (completed_) return true;
  }
  const auto deadline = timeout == kNoTimeout ? steady_clock::time_point::max() : steady_clock::now() + timeout;
  if (step) return drive_step(deadline);
  Status status;
  for (const auto& r : requests) {
    // Bounded slices: remora bounds collectives itself, this loop bounds send/recv by
    // the group's timeout (and the caller's wait by its own).
    for (;;) {
      const auto now = steady_clock::now();
      const auto slice = std::min<steady_clock::duration>(std::chrono::milliseconds(100), deadline - now);
      Status s = r.wait(std::chrono::duration_cast<remora::Duration>(std::max(slice, steady_clock::duration::zero())));
      if (!r.done() && is_p2p && steady_clock::now() - started_ >= timeout_) {
        // Past the group's timeout: break the communicator so that the buffer is
        // released (the request fails at once) and every rank learns of it. Another
        // thread driving this work sees the abort's status: timed_out_ names the cause.
        timed_out_.store(true);
        comm_->abort();
        (void)r.wait(remora::kForever);
      }
      if (r.done()) {
        // The final status: a slice that ran out just before the request completed
        // returned kTimeout although the request then succeeded (or failed otherwise).
        s = r.test();
        if (timed_out_.load()) {
          s = Status(remora::StatusCode::kTimeout, c10::str(name_, " did not complete within the process group's timeout of ",
                                                            timeout_.count(), " ms"));
        }
        if (status.is_ok() && !s.is_ok()) status = s;
        break;
      }
      if (steady_clock::now() >= deadline) return false;
    }
  }
  finish_once(status);
  return true;
}

bool WorkRemora::drive_step(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::steady_clock;
  // The step takes what it waits for: a second thread must not take another.
  std::lock_guard once(step_mu_);
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (completed_) return true;
    }
    const auto now = steady_clock::now();
    if (now - started_ >= timeout_) {
      finish_once(Status(remora::StatusCode::kTimeout,
                         c10::str(name_, " did not complete within its timeout of ", timeout_.count(), " ms")));
      return true;
    }
    const auto left = std::min<steady_clock::duration>(deadline - now, started_ + timeout_ - now);
    const auto slice = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::clamp<steady_clock::duration>(left, steady_clock::duration::zero(), std::chrono::milliseconds(100)));
    Status s = step(slice);
    if (s.code() != remora::StatusCode::kTimeout) {
      finish_once(s);
      return true;
    }
    if (steady_clock::now() >= deadline) return false;
  }
}

void WorkRemora::finish_once(const Status& status) {
  std::lock_guard once(finish_mu_);
  if (finished_) return;
  finished_ = true;
  std::exception_ptr error;
  if (status.is_ok()) {
    try {
      if (on_success) on_success();
    } catch (...) {
      error = std::current_exception();
    }
  } else {
    error = backend_error(c10::str("remora backend: ", name_, " failed: ", status.to_string()));
  }
  keep_alive.clear();
  on_success = nullptr;
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool WorkRemora::isCompleted() {
  std::lock_guard lock(mutex_);
  return completed_;
}

bool WorkRemora::isSuccess() const {
  std::lock_guard lock(mutex_);
  return completed_ && !exception_;
}

bool WorkRemora::wait(std::chrono::milliseconds timeout) {
  if (!drive(timeout == kNoTimeout ? kNoTimeout : timeout)) {
    throw_backend_error(c10::str("remora backend: ", name_, ": Work.wait timed out after ", timeout.count(), " ms"));
  }
  std::lock_guard lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> WorkRemora::result() { return outputs_; }

int WorkRemora::sourceRank() const {
  if (!any_source) return c10d::Work::sourceRank();  // c10d's "only for recv" refusal
  std::lock_guard lock(mutex_);
  TORCH_CHECK(completed_ && !exception_, "remora backend: sourceRank() of a receive from any rank that ",
              completed_ ? "failed" : "has not completed");
  return *any_source;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkRemora::getFuture() { return future_; }

// --- ProcessGroupRemora ------------------------------------------------------------------

ProcessGroupRemora::ProcessGroupRemora(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& host, int local_size)
    : c10d::Backend(rank, size), timeout_(timeout), ctx_(shared_context()) {
  C10dStore adapter(store);
  remora::ExternalBootstrap boot{.rank = rank, .size = size, .local_size = local_size, .host = host};
  auto comm = remora::init_communicator(*ctx_, adapter, boot, {.timeout = timeout});
  if (!comm) throw_backend_error("remora backend: " + comm.status().to_string());
  comm_ = std::shared_ptr<remora::Communicator>(std::move(*comm));
  completer_ = std::thread([this] { completion_loop(); });
}

ProcessGroupRemora::~ProcessGroupRemora() {
  shutdown();
  comm_.reset();  // waits for posted operations, up to the timeout
}

void ProcessGroupRemora::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();
}

void ProcessGroupRemora::abort() {
  comm_->abort();
  shutdown();
}

remora::ConnectionStats ProcessGroupRemora::connections() const { return comm_->connections(); }

std::string ProcessGroupRemora::allreduce_algorithm(size_t bytes) const {
  const auto choice = comm_->algorithm(remora::CollectiveKind::kAllreduce, bytes);
  return std::string(choice.name);
}

void ProcessGroupRemora::completion_loop() {
  for (;;) {
    c10::intrusive_ptr<WorkRemora> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      work = queue_.front();
    }
    // Bounded waits, so that a point-to-point work past its timeout is acted on.
    while (!work->drive(std::chrono::milliseconds(100))) {
    }
    std::lock_guard lock(mu_);
    queue_.pop_front();
  }
}

remora::CollectiveOptions ProcessGroupRemora::coll_options(std::chrono::milliseconds op_timeout) const {
  // A call's own timeout (c10d's kUnsetTimeout: none) overrides the group's.
  const auto t = op_timeout.count() > 0 ? op_timeout : timeout_;
  return {.timeout = std::chrono::duration_cast<remora::Duration>(t)};
}

std::chrono::milliseconds ProcessGroupRemora::op_timeout(std::chrono::milliseconds requested) const {
  return requested.count() > 0 ? requested : timeout_;
}

c10::intrusive_ptr<WorkRemora> ProcessGroupRemora::make_work(c10d::OpType type, const char* name,
                                                             std::vector<at::Tensor> outputs,
                                                             std::shared_ptr<remora::Communicator> comm,
                                                             std::chrono::milliseconds timeout) {
  if (!c10d::isP2POp(type) && type != c10d::OpType::UNKNOWN) ++seq_;  // a collective (windows: UNKNOWN)
  return c10::make_intrusive<WorkRemora>(rank_, type, name, std::move(outputs), op_timeout(timeout),
                                         comm ? std::move(comm) : comm_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::enqueue(c10::intrusive_ptr<WorkRemora> work) {
  {
    std::lock_guard lock(mu_);
    TORCH_CHECK(!stop_, "remora backend: the process group was shut down");
    queue_.push_back(work);
  }
  cv_.notify_one();
  return work;
}

// --- operations ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  check_one("broadcast", tensors);
  check_rank("broadcast", "root", opts.rootRank, size_);
  auto work = make_work(c10d::OpType::BROADCAST, "broadcast", tensors);
  at::Tensor buf = dense(tensors[0]);
  work->requests.push_back(comm_->ibroadcast(buf.data_ptr(), nbytes(buf), DataType::kUint8,
                                             static_cast<int>(opts.rootRank), coll_options(opts.timeout)));
  work->keep_alive = {buf};
  work->on_success = copy_back(tensors[0], buf);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  check_one("allreduce", tensors);
  const auto red = reduction("allreduce", tensors[0], opts.reduceOp);
  auto work = make_work(c10d::OpType::ALLREDUCE, "allreduce", tensors);
  at::Tensor buf = dense(tensors[0]);
  work->requests.push_back(comm_->iallreduce(remora::kInPlace, buf.data_ptr(), static_cast<size_t>(buf.numel()),
                                             red.type, red.op, coll_options(opts.timeout)));
  work->keep_alive = {buf};
  work->on_success = copy_back(tensors[0], buf);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  at::Tensor flat = flat_cat("allreduce_coalesced", tensors);
  const auto red = reduction("allreduce_coalesced", flat, opts.reduceOp);
  auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors);
  work->requests.push_back(comm_->iallreduce(remora::kInPlace, flat.data_ptr(), static_cast<size_t>(flat.numel()),
                                             red.type, red.op, coll_options(opts.timeout)));
  work->keep_alive = {flat};
  work->on_success = [flat, tensors]() mutable { flat_split(flat, tensors); };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  check_one("reduce", tensors);
  check_rank("reduce", "root", opts.rootRank, size_);
  const auto red = reduction("reduce", tensors[0], opts.reduceOp);
  auto work = make_work(c10d::OpType::REDUCE, "reduce", tensors);
  at::Tensor buf = dense(tensors[0]);
  const bool root = opts.rootRank == rank_;
  work->requests.push_back(comm_->ireduce(root ? remora::kInPlace : buf.data_ptr(), buf.data_ptr(),
                                          static_cast<size_t>(buf.numel()), red.type, red.op,
                                          static_cast<int>(opts.rootRank), coll_options(opts.timeout)));
  work->keep_alive = {buf};
  if (root) work->on_success = copy_back(tensors[0], buf);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  check_one("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "remora backend: allgather takes ",
              size_, " output tensors (one list)");
  for (const auto& o : outputs[0]) {
    check_cpu("allgather", o);
    TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                "remora backend: allgather: every output tensor must have the input's size and dtype");
  }
  at::Tensor in = dense(inputs[0]);
  at::Tensor staging = at::empty({size_ * in.numel()}, in.options());
  auto work = make_work(c10d::OpType::ALLGATHER, "allgather", outputs[0]);
  work->requests.push_back(comm_->iallgather(in.data_ptr(), staging.data_ptr(), nbytes(in), DataType::kUint8,
                                             coll_options(opts.timeout)));
  work->keep_alive = {in, staging};
  std::vector<at::Tensor> outs = outputs[0];
  work->on_success = [staging, outs]() mutable { flat_split(staging, outs); };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions& opts) {
  check_cpu("allgather_into_tensor", input);
  check_cpu("allgather_into_tensor", output);
  TORCH_CHECK(output.numel() == size_ * input.numel() && output.scalar_type() == input.scalar_type(),
              "remora backend: allgather_into_tensor: the output must hold world_size x the input (", size_, " x ",
              input.numel(), " elements of ", input.scalar_type(), "), got ", output.numel(), " of ",
              output.scalar_type());
  at::Tensor in = dense(input);
  at::Tensor out = dense(output);
  auto work = make_work(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", {output});
  work->requests.push_back(
      comm_->iallgather(in.data_ptr(), out.data_ptr(), nbytes(in), DataType::kUint8, coll_options(opts.timeout)));
  work->keep_alive = {in, out};
  work->on_success = copy_back(output, out);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "remora backend: allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  auto work = make_work(allgather_into_tensor_coalesced_op(), "allgather_into_tensor_coalesced", outputs);
  std::vector<std::function<void()>> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu("allgather_into_tensor_coalesced", inputs[i]);
    check_cpu("allgather_into_tensor_coalesced", outputs[i]);
    TORCH_CHECK(outputs[i].numel() == size_ * inputs[i].numel() && outputs[i].scalar_type() == inputs[i].scalar_type(),
                "remora backend: allgather_into_tensor_coalesced: output ", i, " must hold world_size x input ", i);
    at::Tensor in = dense(inputs[i]);
    at::Tensor out = dense(outputs[i]);
    work->requests.push_back(
        comm_->iallgather(in.data_ptr(), out.data_ptr(), nbytes(in), DataType::kUint8, coll_options(opts.timeout)));
    work->keep_alive.push_back(in);
    work->keep_alive.push_back(out);
    if (auto f = copy_back(outputs[i], out)) copies.push_back(std::move(f));
  }
  work->on_success = [copies] {
    for (const auto& f : copies) f();
  };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                       std::vector<at::Tensor>& inputs,
                                                                       const c10d::AllgatherOptions& opts) {
  // One allgather of every input's bytes back to back; each rank's block is then cut
  // into the outputs. Dtypes may differ between the tensors of the list, not between
  // ranks: every rank passes the same shapes and dtypes.
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "remora backend: allgather_coalesced takes ", size_,
              " output lists (one per rank), got ", outputs.size());
  std::vector<size_t> offsets;
  size_t block = 0;
  std::vector<at::Tensor> bytes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu("allgather_coalesced", inputs[i]);
    offsets.push_back(block);
    block += nbytes(inputs[i]);
    bytes.push_back(dense(inputs[i]).reshape({-1}).view(at::kByte));
  }
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK(outputs[r].size() == inputs.size(), "remora backend: allgather_coalesced: output list ", r, " has ",
                outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_cpu("allgather_coalesced", outputs[r][i]);
      TORCH_CHECK(outputs[r][i].numel() == inputs[i].numel() && outputs[r][i].scalar_type() == inputs[i].scalar_type(),
                  "remora backend: allgather_coalesced: output ", i, " of list ", r, " (", outputs[r][i].numel(),
                  " elements of ", outputs[r][i].scalar_type(), ") does not match input ", i, " (", inputs[i].numel(),
                  " elements of ", inputs[i].scalar_type(), ")");
    }
  }
  at::Tensor flat = bytes.empty() ? at::empty({0}, at::kByte) : at::cat(bytes);
  at::Tensor staging = at::empty({static_cast<int64_t>(block) * size_}, at::kByte);
  std::vector<at::Tensor> outs;
  for (const auto& list : outputs) outs.insert(outs.end(), list.begin(), list.end());
  auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", outs);
  work->requests.push_back(
      comm_->iallgather(flat.data_ptr(), staging.data_ptr(), block, DataType::kUint8, coll_options(opts.timeout)));
  work->keep_alive = {flat, staging};
  const int64_t per_rank = static_cast<int64_t>(block);
  work->on_success = [staging, outs, offsets, per_rank, n = inputs.size()]() mutable {
    for (size_t k = 0; k < outs.size(); ++k) {
      at::Tensor& out = outs[k];
      const int64_t pos = static_cast<int64_t>(k / n) * per_rank + static_cast<int64_t>(offsets[k % n]);
      at::Tensor src = staging.narrow(0, pos, static_cast<int64_t>(nbytes(out)));
      if (out.is_contiguous()) {
        out.reshape({-1}).view(at::kByte).copy_(src);
      } else {
        at::Tensor tmp = at::empty(out.sizes(), out.options());
        tmp.reshape({-1}).view(at::kByte).copy_(src);
        out.copy_(tmp);
      }
    }
  };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  check_one("gather", inputs);
  check_rank("gather", "root", opts.rootRank, size_);
  const bool root = opts.rootRank == rank_;
  at::Tensor in = dense(inputs[0]);
  at::Tensor staging;
  std::vector<at::Tensor> outs;
  if (root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "remora backend: gather takes ",
                size_, " output tensors at the root (one list)");
    for (const auto& o : outputs[0]) {
      check_cpu("gather", o);
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "remora backend: gather: every output tensor must have the input's size and dtype");
    }
    outs = outputs[0];
    staging = at::empty({size_ * in.numel()}, in.options());
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "remora backend: gather: only the root passes output tensors");
  }
  auto work = make_work(c10d::OpType::GATHER, "gather", outs);
  work->requests.push_back(comm_->igather(in.data_ptr(), root ? staging.data_ptr() : nullptr, nbytes(in),
                                          DataType::kUint8, static_cast<int>(opts.rootRank), coll_options(opts.timeout)));
  work->keep_alive = {in};
  if (root) {
    work->keep_alive.push_back(staging);
    work->on_success = [staging, outs]() mutable { flat_split(staging, outs); };
  }
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  check_one("scatter", outputs);
  check_rank("scatter", "root", opts.rootRank, size_);
  const bool root = opts.rootRank == rank_;
  at::Tensor staging;
  if (root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "remora backend: scatter takes ",
                size_, " input tensors at the root (one list)");
    for (const auto& i : inputs[0]) {
      TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type(),
                  "remora backend: scatter: every input tensor must have the output's size and dtype");
    }
    staging = flat_cat("scatter", inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "remora backend: scatter: only the root passes input tensors");
  }
  at::Tensor out = dense(outputs[0]);
  auto work = make_work(c10d::OpType::SCATTER, "scatter", outputs);
  work->requests.push_back(comm_->iscatter(root ? staging.data_ptr() : nullptr, out.data_ptr(), nbytes(out),
                                           DataType::kUint8, static_cast<int>(opts.rootRank), coll_options(opts.timeout)));
  work->keep_alive = {out};
  if (root) work->keep_alive.push_back(staging);
  work->on_success = copy_back(outputs[0], out);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  check_one("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "remora backend: reduce_scatter takes ", size_, " input tensors (one list)");
  for (const auto& i : inputs[0]) {
    TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type(),
                "remora backend: reduce_scatter: every input tensor must have the output's size and dtype");
  }
  const auto red = reduction("reduce_scatter", outputs[0], opts.reduceOp);
  at::Tensor staging = flat_cat("reduce_scatter", inputs[0]);
  at::Tensor out = dense(outputs[0]);
  auto work = make_work(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  work->requests.push_back(comm_->ireduce_scatter(staging.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                                  red.type, red.op, coll_options(opts.timeout)));
  work->keep_alive = {staging, out};
  work->on_success = copy_back(outputs[0], out);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output};
  std::vector<at::Tensor> ins{input};
  auto work = reduce_scatter_tensor_coalesced(outs, ins, opts);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "remora backend: reduce_scatter_tensor: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  auto work = make_work(outputs.size() == 1 ? c10d::OpType::_REDUCE_SCATTER_BASE : reduce_scatter_tensor_coalesced_op(),
                        "reduce_scatter_tensor", outputs);
  std::vector<std::function<void()>> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu("reduce_scatter_tensor", inputs[i]);
    check_cpu("reduce_scatter_tensor", outputs[i]);
    TORCH_CHECK(inputs[i].numel() == size_ * outputs[i].numel() && outputs[i].scalar_type() == inputs[i].scalar_type(),
                "remora backend: reduce_scatter_tensor: the input must hold world_size x the output (", size_, " x ",
                outputs[i].numel(), " elements of ", outputs[i].scalar_type(), "), got ", inputs[i].numel(), " of ",
                inputs[i].scalar_type());
    const auto red = reduction("reduce_scatter_tensor", outputs[i], opts.reduceOp);
    at::Tensor in = dense(inputs[i]);
    at::Tensor out = dense(outputs[i]);
    work->requests.push_back(comm_->ireduce_scatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                                    red.type, red.op, coll_options(opts.timeout)));
    work->keep_alive.push_back(in);
    work->keep_alive.push_back(out);
    if (auto f = copy_back(outputs[i], out)) copies.push_back(std::move(f));
  }
  work->on_success = [copies] {
    for (const auto& f : copies) f();
  };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& output_splits,
                                                                 std::vector<int64_t>& input_splits,
                                                                 const c10d::AllToAllOptions& opts) {
  check_cpu("all_to_all_single", input);
  check_cpu("all_to_all_single", output);
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "remora backend: all_to_all_single: input ",
              input.scalar_type(), " and output ", output.scalar_type(), " differ");
  at::Tensor in = dense(input);
  at::Tensor out = dense(output);
  auto work = make_work(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output});
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0, "remora backend: all_to_all_single: ",
                in.numel(), " input and ", out.numel(), " output elements do not split into ", size_,
                " equal blocks");
    work->requests.push_back(comm_->ialltoall(in.data_ptr(), out.data_ptr(), nbytes(in) / static_cast<size_t>(size_),
                                              DataType::kUint8, coll_options(opts.timeout)));
    work->keep_alive = {in, out};
  } else {
    auto send_counts = std::make_shared<std::vector<size_t>>(split_bytes("all_to_all_single", in, input_splits, size_));
    auto recv_counts =
        std::make_shared<std::vector<size_t>>(split_bytes("all_to_all_single", out, output_splits, size_));
    auto send_displs = std::make_shared<std::vector<size_t>>(displacements(*send_counts));
    auto recv_displs = std::make_shared<std::vector<size_t>>(displacements(*recv_counts));
    work->requests.push_back(comm_->ialltoallv(in.data_ptr(), *send_counts, *send_displs, out.data_ptr(), *recv_counts,
                                               *recv_displs, DataType::kUint8, coll_options(opts.timeout)));
    work->keep_alive = {in, out};
    // The count arrays must outlive the operation: the completion closure holds them.
    auto f = copy_back(output, out);
    work->on_success = [f, send_counts, recv_counts, send_displs, recv_displs] {
      if (f) f();
    };
    return enqueue(work);
  }
  work->on_success = copy_back(output, out);
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "remora backend: all_to_all takes ", size_, " input and ", size_, " output tensors");
  at::Tensor send = flat_cat("all_to_all", inputs);
  at::Tensor recv = flat_cat("all_to_all", outputs);  // shape only: overwritten
  TORCH_CHECK(send.scalar_type() == recv.scalar_type(), "remora backend: all_to_all: input and output dtypes differ");
  auto send_counts = std::make_shared<std::vector<size_t>>();
  auto recv_counts = std::make_shared<std::vector<size_t>>();
  for (int r = 0; r < size_; ++r) {
    send_counts->push_back(nbytes(inputs[static_cast<size_t>(r)]));
    recv_counts->push_back(nbytes(outputs[static_cast<size_t>(r)]));
  }
  auto send_displs = std::make_shared<std::vector<size_t>>(displacements(*send_counts));
  auto recv_displs = std::make_shared<std::vector<size_t>>(displacements(*recv_counts));
  auto work = make_work(c10d::OpType::ALLTOALL, "all_to_all", outputs);
  work->requests.push_back(comm_->ialltoallv(send.data_ptr(), *send_counts, *send_displs, recv.data_ptr(),
                                             *recv_counts, *recv_displs, DataType::kUint8, coll_options(opts.timeout)));
  work->keep_alive = {send, recv};
  std::vector<at::Tensor> outs = outputs;
  work->on_success = [recv, outs, send_counts, recv_counts, send_displs, recv_displs]() mutable {
    flat_split(recv, outs);
  };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::barrier(const c10d::BarrierOptions& opts) {
  auto work = make_work(c10d::OpType::BARRIER, "barrier", {});
  work->requests.push_back(comm_->ibarrier(coll_options(opts.timeout)));
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_one("send", tensors);
  check_rank("send", "destination", dst, size_);
  TORCH_CHECK(dst != rank_, "remora backend: send to this rank itself");
  TORCH_CHECK(tag >= 0, "remora backend: send: negative tag ", tag);
  at::Tensor buf = dense(tensors[0]);
  auto work = make_work(c10d::OpType::SEND, "send", tensors);
  work->is_p2p = true;
  work->requests.push_back(comm_->isend(buf.data_ptr(), nbytes(buf), DataType::kUint8, dst,
                                        static_cast<remora::Tag>(tag)));
  work->keep_alive = {buf};
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_one("recv", tensors);
  check_rank("recv", "source", src, size_);
  TORCH_CHECK(src != rank_, "remora backend: recv from this rank itself");
  TORCH_CHECK(tag >= 0, "remora backend: recv: negative tag ", tag);
  at::Tensor buf = dense(tensors[0]);
  auto work = make_work(c10d::OpType::RECV, "recv", tensors);
  work->is_p2p = true;
  Request r = comm_->irecv(buf.data_ptr(), nbytes(buf), DataType::kUint8, src, static_cast<remora::Tag>(tag));
  work->requests.push_back(r);
  work->keep_alive = {buf};
  const size_t want = nbytes(buf);
  auto back = copy_back(tensors[0], buf);
  work->on_success = [r, want, back, src] {
    TORCH_CHECK(r.bytes() == want, "remora backend: recv from rank ", src, ": got ", r.bytes(), " bytes, expected ",
                want);
    if (back) back();
  };
  return enqueue(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRemora::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_one("recv from any rank", tensors);
  TORCH_CHECK(tag >= 0, "remora backend: recv: negative tag ", tag);
  at::Tensor buf = dense(tensors[0]);
  auto work = make_work(c10d::OpType::RECVANYSOURCE, "recv from any rank", tensors);
  work->is_p2p = true;
  auto source = std::make_shared<int>(-1);
  Request r =
      comm_->irecv_any(buf.data_ptr(), nbytes(buf), DataType::kUint8, static_cast<remora::Tag>(tag), source.get());
  work->requests.push_back(r);
  work->keep_alive = {buf};
  work->any_source = source;
  const size_t want = nbytes(buf);
  auto back = copy_back(tensors[0], buf);
  work->on_success = [r, want, back, source] {
    TORCH_CHECK(r.bytes() == want, "remora backend: recv from any rank (rank ", *source, " sent): got ", r.bytes(),
                " bytes, expected ", want);
    if (back) back();
  };
  return enqueue(work);
}

#ifdef REMORA_TORCH_WINDOWS
c10::intrusive_ptr<c10d::Window> ProcessGroupRemora::new_window(const std::optional<at::Tensor>& tensor) {
  auto window = c10::make_intrusive<WindowRemora>(c10::intrusive_ptr<ProcessGroupRemora>::reclaim_copy(this));
  if (tensor.has_value()) window->tensor_register(*tensor, /*owning=*/true);
  return window;
}
#endif

}  // namespace remora_torch
