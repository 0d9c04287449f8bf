// remora/launch.h — rank, size and rendezvous address from the launcher's environment.
//
// Recognised, in this order (the first complete set wins):
//   remora:    REMORA_RANK, REMORA_WORLD_SIZE, REMORA_LOCAL_RANK (set by `remora run`)
//   torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, ..._LOCAL_SIZE
//   MPICH/Hydra: PMI_RANK, PMI_SIZE (MPI_LOCALRANKID)
//   Slurm:     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// The store address: REMORA_STORE ("host:port") if set, else MASTER_ADDR:MASTER_PORT.
// Under Open MPI, MPICH and Slurm without either, a store address is required
// (kInvalidArgument says which variable to set).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "remora/status.h"

namespace remora {

struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string launcher;       ///< "remora", "torchrun", "openmpi", "mpich", "slurm"
  std::string store_address;  ///< "host:port" of the rendezvous store
};

/// Reads the process environment. kInvalidArgument (naming the variable) for a
/// malformed or inconsistent value (rank >= size, negative, garbage); kNotFound-like
/// kInvalidArgument "no launcher environment found" when none is present.
Result<LaunchInfo> detect_launch();
/// Same, reading variables through `getenv` (tests).
Result<LaunchInfo> detect_launch(const std::function<std::optional<std::string>(std::string_view)>& getenv);

}  // namespace remora
