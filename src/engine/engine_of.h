// engine/engine_of.h — the progress engine behind a public Context, for the library's
// own upper layers (the collectives' requests and bootstrap) and its tests; never for
// users. Declared here, below the transport, so the collectives can reach it without
// including transport internals; defined with the Context in transport/context.cc.
#pragma once

#include <memory>

#include "engine/progress.h"

namespace remora {
class Context;
}

namespace remora::detail {

/// The context's progress engine.
const std::shared_ptr<engine::ProgressEngine>& engine_of(const Context& context) noexcept;

}  // namespace remora::detail
