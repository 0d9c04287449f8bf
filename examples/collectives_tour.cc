// examples/collectives_tour.cc — the README's collectives: one rank of a job that a
// launcher started (CTest runs it under `remora run -n 2`), an allreduce in place and
// an asynchronous allgather. The program between the markers is README.md's
// collectives block verbatim (the ctest readme_excerpts keeps the two identical); it
// exits non-zero on every rank where a result is wrong.
// [readme-collectives begin]
#include <cstdint>
#include <cstdio>
#include <vector>

#include "remora/remora.h"
using namespace std::chrono_literals;

int main() {  // one rank: remora run -n 4 ./app, mpirun, torchrun or srun starts them all
  auto ctx = remora::Context::create().value();
  auto comm = remora::Communicator::init(*ctx).value();  // meets the other ranks via the store
  std::vector<float> grads(1 << 20, 1.0f);
  remora::Status reduced = comm->allreduce(remora::kInPlace, grads.data(), grads.size(), remora::DataType::kFloat32,
                                           remora::ReduceOp::kSum);  // every element becomes size()
  std::vector<uint16_t> mine(1024, uint16_t(comm->rank())), all(mine.size() * comm->size());  // bfloat16 bits
  remora::Request r = comm->iallgather(mine.data(), all.data(), mine.size(), remora::DataType::kBFloat16);
  remora::Status gathered = r.wait(30s);  // the async form: other work could go on before this wait

  const bool ok = reduced && gathered && grads.back() == float(comm->size()) && all.back() == comm->size() - 1;
  std::printf("rank %d of %d: allreduce %s, iallgather %s\n", comm->rank(), comm->size(), reduced.to_string().c_str(),
              gathered.to_string().c_str());
  return ok ? 0 : 1;
}
// [readme-collectives end]
