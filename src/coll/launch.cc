// coll/launch.cc — rank, size and store address from the launcher's environment.
#include "remora/launch.h"

#include <array>
#include <cstdlib>

#include <fmt/format.h>

#include "core/env.h"
#include "net/address.h"

namespace remora {
namespace {

using Getenv = std::function<std::optional<std::string>(std::string_view)>;

/// One launcher's variable names; empty names are not provided by that launcher.
struct Scheme {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr std::array<Scheme, 5> kSchemes{{
    {"remora", "REMORA_RANK", "REMORA_WORLD_SIZE", "REMORA_LOCAL_RANK", "REMORA_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
}};

/// Ranks beyond this are certainly a garbage value, not a job.
constexpr uint64_t kMaxRanks = uint64_t{1} << 24;

/// Set and non-empty.
std::optional<std::string> lookup(const Getenv& getenv, const char* name) {
  auto v = getenv(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

Result<int> parse_number(const Getenv& getenv, const char* name, uint64_t min, uint64_t max) {
  auto text = lookup(getenv, name);
  if (!text) return Status(StatusCode::kInvalidArgument, fmt::format("{} is not set", name));
  auto v = core::parse_uint(*text, min, max);
  if (!v) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}=\"{}\": {}", name, *text, v.status().message()));
  }
  return static_cast<int>(*v);
}

Result<std::string> store_address(const Getenv& getenv, const LaunchInfo& info) {
  if (auto store = lookup(getenv, "REMORA_STORE")) {
    auto hp = net::parse_host_port(*store);
    if (!hp || hp->host.empty() || hp->port == 0) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("REMORA_STORE=\"{}\" is not host:port (e.g. 10.0.0.1:29500, [fe80::1]:29500)", *store));
    }
    return *store;
  }
  auto addr = lookup(getenv, "MASTER_ADDR");
  auto port_text = lookup(getenv, "MASTER_PORT");
  if (addr && port_text) {
    auto port = core::parse_uint(*port_text, 1, 65535);
    if (!port) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("MASTER_PORT=\"{}\": {}", *port_text, port.status().message()));
    }
    // An IPv6 literal needs brackets in host:port.
    const bool v6 = addr->find(':') != std::string::npos && addr->front() != '[';
    return v6 ? fmt::format("[{}]:{}", *addr, *port) : fmt::format("{}:{}", *addr, *port);
  }
  if (addr || port_text) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} is set but {} is not: set both, or REMORA_STORE=host:port", addr ? "MASTER_ADDR" : "MASTER_PORT",
                              addr ? "MASTER_PORT" : "MASTER_ADDR"));
  }
  // A job of one needs no rendezvous.
  if (info.size == 1) return std::string();
  return Status(StatusCode::kInvalidArgument,
                fmt::format("{} ranks under {} but no rendezvous store address: set REMORA_STORE=host:port (reachable "
                            "from every rank; rank 0 hosts it) or MASTER_ADDR and MASTER_PORT",
                            info.size, info.launcher));
}

}  // namespace

Result<LaunchInfo> detect_launch() {
  return detect_launch([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

Result<LaunchInfo> detect_launch(const Getenv& getenv) {
  for (const Scheme& s : kSchemes) {
    // The first launcher whose rank and size are both present wins.
    if (!lookup(getenv, s.rank) || !lookup(getenv, s.size)) continue;
    LaunchInfo info;
    info.launcher = s.launcher;
    REMORA_ASSIGN_OR_RETURN(info.size, parse_number(getenv, s.size, 1, kMaxRanks));
    REMORA_ASSIGN_OR_RETURN(info.rank, parse_number(getenv, s.rank, 0, kMaxRanks - 1));
    if (info.rank >= info.size) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}={} is not below {}={}", s.rank, info.rank, s.size, info.size));
    }
    const bool has_local_rank = lookup(getenv, s.local_rank).has_value();
    const bool has_local_size = lookup(getenv, s.local_size).has_value();
    if (has_local_size) {
      REMORA_ASSIGN_OR_RETURN(info.local_size, parse_number(getenv, s.local_size, 1, kMaxRanks));
      if (info.local_size > info.size) {
        return Status(StatusCode::kInvalidArgument, fmt::format("{}={} is above {}={}", s.local_size, info.local_size,
                                                                s.size, info.size));
      }
    }
    if (has_local_rank) {
      REMORA_ASSIGN_OR_RETURN(info.local_rank, parse_number(getenv, s.local_rank, 0, kMaxRanks - 1));
      if (!has_local_size) info.local_size = info.local_rank + 1;  // at least this many here
      if (info.local_rank >= info.local_size) {
        return Status(StatusCode::kInvalidArgument, fmt::format("{}={} is not below {}={}", s.local_rank,
                                                                info.local_rank, s.local_size, info.local_size));
      }
      if (info.local_rank >= info.size) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("{}={} is not below {}={}", s.local_rank, info.local_rank, s.size, info.size));
      }
    }
    REMORA_ASSIGN_OR_RETURN(info.store_address, store_address(getenv, info));
    return info;
  }
  return Status(StatusCode::kInvalidArgument,
                "no launcher environment found: run under `remora run -n N`, torchrun, mpirun or srun, or set "
                "REMORA_RANK, REMORA_WORLD_SIZE and REMORA_STORE");
}

}  // namespace remora
