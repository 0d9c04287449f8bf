// coll/allgather_bruck.cc — allgather by Bruck's algorithm (any n, equal blocks).
#include <algorithm>
#include <vector>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

/// Bruck (any n, equal blocks): at distance d a rank sends the min(d, n-d) blocks it
/// holds (its own first) to r-d and receives as many from r+d. The blocks collect in
/// rotated order in a scratch buffer, so this is for small results only.
Status allgather_bruck(Op& op, void* recv, size_t block) {
  const int n = op.size();
  const int r = op.rank();
  std::vector<std::byte> rotated(static_cast<size_t>(n) * block);
  copy_block(rotated.data(), at(recv, static_cast<size_t>(r) * block), block);
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    const size_t len = static_cast<size_t>(std::min(d, n - d)) * block;
    REMORA_RETURN_IF_ERROR(op.sendrecv(mod(r - d, n), rotated.data(), len, mod(r + d, n),
                                       at(rotated.data(), static_cast<size_t>(d) * block), len, round));
  }
  for (int i = 1; i < n; ++i) {
    copy_block(at(recv, static_cast<size_t>(mod(r + i, n)) * block), at(rotated.data(), static_cast<size_t>(i) * block),
               block);
  }
  return Status::ok();
}

}  // namespace remora::coll
