// remora_rma_peer — the other process of the one-sided (RMA) integration scenarios.
//
//   remora_rma_peer --role=listen|connect --address=HOST:PORT --scenario=NAME --half=target|initiator [options]
//
// Listening on port 0 prints "PORT <n>" on stdout once the listener is up. Exits 0
// when every check passed, non-zero with a message on stderr otherwise. It never
// outlives the test: it dies with its parent (PR_SET_PDEATHSIG) and after
// --max-seconds (SIGALRM) at the latest.
//
// Scenarios (support/rma_scenarios.h says what each half checks):
//   random    random puts/gets against a model (--seed, --region-size, --count,
//             --max-size, --window)
//   atomics   initiator only: --rank, --initiators, --count, --cas-count
//   notify    --seed, --count, --window
//   flush     --seed, --region-size, --rounds
// After its half, the initiator starts the closing handshake and the target
// follows (--close=none skips it, for a target that is killed).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "support/exchange.h"
#include "support/peer_program.h"
#include "support/rma_scenarios.h"
#include "support/test_data.h"

namespace {

using namespace remora;
using namespace remora::itest;


int run(const Flags& f) {
  auto ctx_r = Context::create();
  if (!ctx_r) die("Context::create: " + describe(ctx_r.status()));
  auto ctx = std::move(ctx_r).value();

  const std::string role = f.str("role");
  const std::string address = f.str("address", "127.0.0.1:0");
  const auto timeout = std::chrono::milliseconds(f.num("timeout-ms", 60'000));
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<Listener> listener;
  if (role == "listen") {
    auto l = ctx->listen(address);
    if (!l) die("listen " + address + ": " + describe(l.status()));
    listener = std::move(l).value();
    std::printf("PORT %u\n", static_cast<unsigned>(listener->port()));
    std::fflush(stdout);
    auto a = listener->accept(timeout);
    if (!a) die("accept: " + describe(a.status()));
    ep = std::move(a).value();
  } else if (role == "connect") {
    auto c = ctx->connect(address, timeout);
    if (!c) die("connect " + address + ": " + describe(c.status()));
    ep = std::move(c).value();
  } else {
    die("--role must be listen or connect");
  }

  const std::string scenario = f.str("scenario");
  const std::string half = f.str("half");
  const bool target = half == "target";
  if (!target && half != "initiator") die("--half must be target or initiator");
  const uint64_t seed = f.num("seed", 1);
  const std::string what = scenario + " (" + half + " half)";

  if (scenario == "random") {
    RandomRmaOptions o;
    o.seed = seed;
    o.region_size = f.num("region-size", o.region_size);
    o.count = f.num("count", o.count);
    o.max_size = f.num("max-size", o.max_size);
    o.window = f.num("window", o.window);
    o.timeout = timeout;
    if (target) {
      check(random_rma_target(*ctx, *ep, o), what);
    } else {
      const RandomRmaReport rep = random_rma_initiator(*ep, o);
      check(rep.error, what);
      std::fprintf(stderr, "remora_rma_peer: %llu puts (%llu bytes), %llu gets (%llu bytes) in %.2f s\n",
                   static_cast<unsigned long long>(rep.puts), static_cast<unsigned long long>(rep.bytes_put),
                   static_cast<unsigned long long>(rep.gets), static_cast<unsigned long long>(rep.bytes_got),
                   rep.seconds);
    }
  } else if (scenario == "atomics") {
    if (target) die("the atomics target runs in the test process");
    AtomicsOptions o;
    o.initiators = f.num("initiators", o.initiators);
    o.count = f.num("count", o.count);
    o.cas_count = f.num("cas-count", o.cas_count);
    o.timeout = timeout;
    check(atomics_initiator(*ep, static_cast<uint32_t>(f.num("rank", 0)), o), what);
  } else if (scenario == "notify") {
    NotifyOptions o;
    o.seed = seed;
    o.count = f.num("count", o.count);
    o.window = f.num("window", o.window);
    o.timeout = timeout;
    check(target ? notify_target(*ctx, *ep, o) : notify_initiator(*ep, o), what);
  } else if (scenario == "flush") {
    FlushOptions o;
    o.seed = seed;
    o.region_size = f.num("region-size", o.region_size);
    o.rounds = f.num("rounds", o.rounds);
    o.timeout = timeout;
    check(target ? flush_target(*ctx, *ep, o) : flush_initiator(*ep, o), what);
  } else {
    die("unknown --scenario " + scenario);
  }
  if (f.str("close", "handshake") != "none") check(close_handshake(*ep, !target, timeout), "closing handshake");
  ep.reset();
  listener.reset();
  ctx.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  const auto parent = static_cast<pid_t>(flags.num("parent-pid", 0));
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent != 0 && getppid() != parent) die("parent is gone");
  alarm(static_cast<unsigned>(flags.num("max-seconds", 150)));
  return run(flags);
}
