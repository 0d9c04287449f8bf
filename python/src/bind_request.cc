// python/src/bind_request.cc — remora.Request and remora.wait_all: posting an operation
// with the GIL released, holding the objects whose memory it touches until it completes
// (KeepAlive), waiting, and waking asyncio loops on completion (_Completions, used by
// remora/_aio.py).
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

/// Wakes an asyncio loop when requests complete (remora/_aio.py): Request::on_done
/// notes the token and writes an eventfd, without the GIL; the loop reads it.
class Completions {
 public:
  Completions() : inner_(std::make_shared<Inner>()) {
    inner_->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (inner_->fd < 0) raise(Status(StatusCode::kNoResource, std::string("eventfd: ") + std::strerror(errno)));
  }
  int fileno() const { return inner_->fd; }
  void watch(const RequestObj& r, uint64_t token) {
    auto inner = inner_;
    check(r.req.on_done([inner, token] {
      {
        std::lock_guard lock(inner->mutex);
        inner->ready.push_back(token);
      }
      const uint64_t one = 1;
      ssize_t n = ::write(inner->fd, &one, sizeof one);
      (void)n;  // EAGAIN: the counter is already raised
    }));
  }
  std::vector<uint64_t> drain() {
    uint64_t count = 0;
    ssize_t n = ::read(inner_->fd, &count, sizeof count);
    (void)n;
    std::vector<uint64_t> out;
    std::lock_guard lock(inner_->mutex);
    out.swap(inner_->ready);
    return out;
  }

 private:
  struct Inner {
    int fd = -1;
    std::mutex mutex;
    std::vector<uint64_t> ready;
    ~Inner() {
      if (fd >= 0) ::close(fd);
    }
  };
  std::shared_ptr<Inner> inner_;
};

void bind_request_class(nb::module_& m) {
  nb::class_<RequestObj>(m, "Request",
                         "Handle to one asynchronous operation. Dropping it does not cancel the operation; the "
                         "package keeps the operation's buffers alive until it completes. Awaitable from asyncio "
                         "(no thread per request: completion writes an eventfd the event loop watches).")
      .def("wait", &wait_request, "timeout"_a = nb::none(),
           "Waits up to `timeout` seconds (spinning briefly, then blocking in the kernel), GIL released. "
           "Returns None when the operation succeeded, raises its error otherwise, or remora.Timeout (the "
           "operation goes on; wait again or close the endpoint to abort it). None: the context's default "
           "bound (REMORA_WAIT_TIMEOUT_MS, 5 min); remora.FOREVER: no deadline.")
      .def(
          "test",
          [](const RequestObj& r) {
            Status s;
            {
              nb::gil_scoped_release unlocked;
              s = r.req.test();
            }
            KeepAlive::instance().sweep();
            if (s.code() == StatusCode::kInProgress) return false;
            check(s);
            return true;
          },
          "Drives progress once. False while running, True when it succeeded; raises its error if it failed.")
      .def_prop_ro(
          "done", [](const RequestObj& r) { return r.req.done(); }, "True once the operation completed.")
      .def_prop_ro(
          "bytes", [](const RequestObj& r) { return r.req.bytes(); },
          "Bytes sent or received (a recv: the message's length; a batch: the sum). Valid once done.")
      .def_prop_ro(
          "tag", [](const RequestObj& r) { return static_cast<uint64_t>(r.req.tag()); },
          "Tag of the matched message (recv) or the sent one.")
      .def_prop_ro(
          "value",
          [](const RequestObj& r) -> std::optional<uint64_t> {
            if (!r.value || !r.req.done()) return std::nullopt;
            return *r.value;
          },
          "fetch_add / compare_swap: the word's previous value once done (None before, or for other "
          "operations).")
      .def(
          "__await__",
          [](nb::handle self) {
            return nb::module_::import_("remora._aio").attr("wait_for")(self).attr("__await__")();
          },
          "`await request`: completes when the operation does (raising its error) and returns the request.");
}

void bind_wait_all(nb::module_& m) {
  m.def(
      "wait_all",
      [](std::vector<RequestObj*> requests, std::optional<double> timeout) {
        std::vector<Request> list;
        list.reserve(requests.size());
        for (RequestObj* r : requests) {
          if (!r) raise(Status(StatusCode::kInvalidArgument, "wait_all takes remora.Request objects"));
          list.push_back(r->req);
        }
        const Duration d = to_duration(timeout);
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = wait_all(list, d);
        }
        KeepAlive::instance().sweep();
        check(s);
      },
      "requests"_a, "timeout"_a = nb::none(),
      "Waits for all requests (up to `timeout` seconds in total; GIL released). First error wins; "
      "remora.Timeout if any is still running at the deadline. None: the default bound of the context "
      "of the first request still running (REMORA_WAIT_TIMEOUT_MS); remora.FOREVER: none.");
}

void bind_completions(nb::module_& m) {
  nb::class_<Completions>(m, "_Completions", "Completion eventfd for asyncio (remora/_aio.py).")
      .def(nb::init<>())
      .def("fileno", &Completions::fileno)
      .def("watch", &Completions::watch, "request"_a, "token"_a)
      .def("drain", &Completions::drain);
}

}  // namespace

KeepAlive& KeepAlive::instance() {
  static auto* k = new KeepAlive();  // never destroyed: what it holds at exit stays held
  return *k;
}

void KeepAlive::hold(const Request& r, Holders holders) {
  if (holders.empty()) return;
  const uint64_t token = next_++;
  held_.emplace(token, std::move(holders));
  // Runs on whichever thread completes the operation, without the GIL: only note it.
  (void)r.on_done([this, token] {
    std::lock_guard lock(mutex_);
    released_.push_back(token);
  });
}

void KeepAlive::sweep() {
  std::vector<uint64_t> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(released_);
  }
  for (uint64_t t : done) held_.erase(t);
}

size_t KeepAlive::pending() {
  sweep();
  return held_.size();
}

RequestObj post(const std::function<Request()>& fn, Holders holders, std::shared_ptr<uint64_t> value) {
  KeepAlive::instance().sweep();
  Request r;
  {
    nb::gil_scoped_release unlocked;
    r = fn();
  }
  if (value) {
    auto h = std::make_shared<Holder>();
    h->extra = value;
    holders.push_back(std::move(h));
  }
  KeepAlive::instance().hold(r, std::move(holders));
  return RequestObj{std::move(r), std::move(value)};
}

void wait_request(const RequestObj& r, std::optional<double> timeout) {
  const Duration d = to_duration(timeout);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = r.req.wait(d);
  }
  KeepAlive::instance().sweep();
  check(s);
}

void bind_request(nb::module_& m) {
  bind_request_class(m);
  bind_wait_all(m);
  bind_completions(m);
  m.def(
      "_pending_keepalive", [] { return KeepAlive::instance().pending(); },
      "Operations whose buffers the package still holds (tests).");
}

}  // namespace remora::python
