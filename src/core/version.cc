#include "remora/version.h"

namespace remora {
const char* version_string() noexcept { return "0.1.0"; }
}  // namespace remora
