// STUB: the rendezvous store arrives in its own commit.
#include "remora/store.h"

namespace remora {
namespace detail {
class StoreServerCore {};
class StoreClientCore {};
}  // namespace detail
StoreServer::~StoreServer() = default;
Store::~Store() = default;
}  // namespace remora
