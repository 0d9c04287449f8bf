// coll/rendezvous.cc — the listener a rank keeps for its job and the thread that takes
// every connection arriving there (rendezvous.h).
#include "coll/rendezvous.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "coll/world.h"
#include "core/little_endian.h"
#include "core/log.h"

namespace remora::coll {
namespace {

/// How long an accepted connection has to send its opening message.
constexpr auto kOpeningWait = std::chrono::seconds(10);
/// How long one accept waits: the thread looks at its pending connections at least this
/// often, and at once when one arrives. While none is pending it waits longer (closing
/// the listener wakes it at once).
constexpr auto kBusySlice = std::chrono::milliseconds(1);
constexpr auto kIdleSlice = std::chrono::milliseconds(1000);

}  // namespace

struct Rendezvous::State {
  /// An accepted connection whose opening message is awaited.
  struct Pending {
    std::shared_ptr<Endpoint> endpoint;
    std::shared_ptr<std::vector<std::byte>> buffer;  ///< what the posted receive writes
    Request opening;
    Clock::time_point deadline;
  };

  State(std::unique_ptr<Listener> l, size_t max, std::string advertised)
      : listener(std::move(l)),
        max_hello(max),
        address(advertised.empty() ? listener->address() : std::move(advertised)) {}

  void run();
  /// Handles a pending connection whose opening message arrived (or failed).
  void opened(Pending& p);
  void answer_mesh(Pending& p);
  bool stopping_now() {
    std::lock_guard lock(mu);
    return stopping;
  }

  std::unique_ptr<Listener> listener;
  const size_t max_hello;
  const std::string address;

  std::mutex mu;
  std::condition_variable shrink_cv;
  std::deque<Arrival> shrink_hellos;
  std::weak_ptr<World> world;
  uint64_t world_epoch = 0;
  bool stopping = false;

  std::vector<Pending> pending;  ///< the thread's own
};

std::shared_ptr<Rendezvous> Rendezvous::start(std::unique_ptr<Listener> listener, size_t max_hello,
                                              std::string advertised) {
  auto state =
      std::make_shared<State>(std::move(listener), std::max(max_hello, kMeshHelloBytes), std::move(advertised));
  std::shared_ptr<Rendezvous> r(new Rendezvous(state));
  r->thread_ = std::thread([state] { state->run(); });
  return r;
}

Result<std::shared_ptr<Rendezvous>> Rendezvous::listen(Context& ctx, const std::string& host, size_t max_hello) {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string bracketed = v6 && host.front() != '[' ? "[" + host + "]" : host;
  if (ctx.rails().empty()) {
    REMORA_ASSIGN_OR_RETURN(auto listener, ctx.listen(bracketed + ":0"));
    return start(std::move(listener), max_hello);
  }
  REMORA_ASSIGN_OR_RETURN(auto listener, ctx.listen(v6 ? "[::]:0" : "0.0.0.0:0"));
  const std::string advertised = bracketed + ":" + std::to_string(listener->port());
  return start(std::move(listener), max_hello, advertised);
}

Rendezvous::Rendezvous(std::shared_ptr<State> state) : state_(std::move(state)) {}

Rendezvous::~Rendezvous() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->listener->close();  // wakes the thread's accept
  state_->shrink_cv.notify_all();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last World went away on the thread itself: it ends at its next look at `stopping`
  } else if (thread_.joinable()) {
    thread_.join();
  }
}

std::string Rendezvous::address() const { return state_->address; }

void Rendezvous::serve(std::weak_ptr<World> world, uint64_t epoch) {
  std::lock_guard lock(state_->mu);
  state_->world = std::move(world);
  state_->world_epoch = epoch;
}

Result<Rendezvous::Arrival> Rendezvous::next_shrink_hello(Clock::time_point deadline) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (!s.shrink_cv.wait_until(lock, deadline, [&] { return s.stopping || !s.shrink_hellos.empty(); })) {
    return Status(StatusCode::kTimeout, "no shrink hello before the deadline");
  }
  if (s.shrink_hellos.empty()) return Status(StatusCode::kAborted, "the rendezvous is closing");
  Arrival a = std::move(s.shrink_hellos.front());
  s.shrink_hellos.pop_front();
  return a;
}

void Rendezvous::State::run() {
  while (!stopping_now()) {
    auto ep = listener->accept(pending.empty() ? kIdleSlice : kBusySlice);
    if (ep) {
      Pending p;
      p.endpoint = std::move(*ep);
      p.buffer = std::make_shared<std::vector<std::byte>>(max_hello);
      p.opening = p.endpoint->recv(*p.buffer, kOpeningTag);
      p.deadline = Clock::now() + kOpeningWait;
      pending.push_back(std::move(p));
    } else if (ep.status().code() != StatusCode::kTimeout) {
      if (stopping_now()) break;
      REMORA_LOG(kWarn, "collectives: the rendezvous at {} cannot accept: {}", address, ep.status().to_string());
    }
    const auto now = Clock::now();
    for (Pending& p : pending) {
      if (p.opening.test().code() != StatusCode::kInProgress) {
        opened(p);
        p.endpoint.reset();
      } else if (now >= p.deadline) {
        REMORA_LOG(kInfo, "collectives: dropping a connection from {} that sent no opening message",
                   p.endpoint->peer_address());
        p.endpoint->abort();  // its receive fails now: the buffer is not written any more
        p.endpoint.reset();
      }
    }
    std::erase_if(pending, [](const Pending& p) { return !p.endpoint; });
  }
  for (Pending& p : pending) p.endpoint->abort();
  pending.clear();
}

void Rendezvous::State::opened(Pending& p) {
  const Status s = p.opening.test();
  const std::span<const std::byte> got(p.buffer->data(), s.is_ok() ? p.opening.bytes() : 0);
  const uint32_t magic = got.size() >= 4 ? core::load_u32(got.data()) : 0;
  if (s.is_ok() && magic == kMeshMagic && got.size() == kMeshHelloBytes) return answer_mesh(p);
  if (s.is_ok() && magic == kShrinkMagic) {
    {
      std::lock_guard lock(mu);
      shrink_hellos.push_back(Arrival{p.endpoint, std::vector<std::byte>(got.begin(), got.end())});
    }
    shrink_cv.notify_all();
    return;
  }
  REMORA_LOG(kInfo, "collectives: dropping a connection from {}: {}", p.endpoint->peer_address(),
             s.is_ok() ? "its opening message is no rank's hello" : s.to_string());
  p.endpoint->abort();
}

void Rendezvous::State::answer_mesh(Pending& p) {
  const int from = static_cast<int>(core::load_u32(p.buffer->data() + 4));
  const uint64_t epoch = core::load_u64(p.buffer->data() + 8);
  std::shared_ptr<World> w;
  {
    std::lock_guard lock(mu);
    if (epoch == world_epoch) w = world.lock();
  }
  const World::Answer answer = w ? w->offer(from, p.endpoint) : World::Answer::kRefused;
  // The answer's bytes are static: the send may complete after this returns.
  static constexpr uint32_t kAnswers[] = {0, 1, 2};
  (void)p.endpoint->send(std::as_bytes(std::span(&kAnswers[static_cast<uint32_t>(answer)], 1)), kMeshAnswerTag);
  if (answer != World::Answer::kAccepted) p.endpoint->close();  // orderly: the answer still reaches the dialer
}

}  // namespace remora::coll
