// transport/recv_any.cc — remora::recv_any: one receive that takes the first message
// with its tag from any of several endpoints of one context (MPI_ANY_SOURCE).
//
// Matching lives in each endpoint (transport/matcher.h), so the receive is posted on
// every endpoint as a copy holding one shared claim. Whichever endpoint first pairs a
// copy with a message (one that had already arrived, found while posting, or one that
// arrives later) takes the claim with an atomic exchange and receives it; every other
// copy is then dead: it is skipped and dropped where its endpoint next meets it, so a
// later message goes to the next receive as if the copy had never been posted. Only
// the winner touches the buffer and completes the request. Posting and matching run
// under each endpoint's progress lock, which keeps "already arrived" and "posted"
// exclusive on one endpoint; the claim keeps them exclusive across endpoints.
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "engine/request_state.h"
#include "transport/endpoint_core.h"

namespace remora {

Request recv_any(std::span<Endpoint* const> endpoints, std::span<std::byte> buffer, Tag tag, int* matched) {
  std::shared_ptr<engine::ProgressEngine> engine;
  int live = 0;
  for (Endpoint* ep : endpoints) {
    if (ep == nullptr) continue;
    ++live;
    if (!engine) {
      engine = ep->core_->engine();
    } else if (ep->core_->engine() != engine) {
      return detail::make_request(detail::RequestState::completed(
          Status(StatusCode::kInvalidArgument, "recv_any: the endpoints belong to different contexts"), 0, tag));
    }
  }
  if (live == 0) {
    return detail::make_request(
        detail::RequestState::completed(Status(StatusCode::kInvalidArgument, "recv_any: no endpoint given"), 0, tag));
  }
  auto claim = std::make_shared<detail::RecvClaim>();
  claim->req = detail::RequestState::make(engine, tag);
  claim->matched = matched;
  Request r = detail::make_request(claim->req);
  for (size_t i = 0; i < endpoints.size() && !claim->decided(); ++i) {
    if (endpoints[i] != nullptr) endpoints[i]->core_->post_claimed(buffer, tag, claim, static_cast<int>(i));
  }
  // The hold taken at creation: the last copy to go (orderly closes) fails the receive.
  if (claim->live.fetch_sub(1, std::memory_order_acq_rel) == 1 && claim->take(-1)) {
    claim->req->complete(Status(StatusCode::kPeerFailed,
                                "recv_any: the peer of every endpoint closed it without sending a message with tag " +
                                    std::to_string(static_cast<uint64_t>(tag))),
                         0);
  }
  return r;
}

}  // namespace remora
