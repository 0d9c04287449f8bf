// python/src/module.cc — the remora._remora extension: the whole C++ API of
// include/remora/*.h for Python (nanobind), one binder per class or concern
// (binding.h lists them and the conventions they share; buffers.h converts Python
// objects to memory). This file only puts them together.
#include <limits>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "binding.h"

using namespace remora;
using namespace remora::python;

NB_MODULE(_remora, m) {
  m.doc() =
      "remora: RDMA-like memory semantics over plain TCP (the C++ library, include/remora/*.h). "
      "See docs/python.md.";
  m.attr("FOREVER") = std::numeric_limits<double>::infinity();
  m.attr("__version__") = version_string();
  m.attr("WIRE_VERSION") = kWireVersion;

  // In this order: a default argument of one of this module's types (Context.register's
  // Access) needs its type bound first, and the type stub (remora/_remora.pyi) lists
  // the module's entries in the order they are bound.
  bind_errors(m);
  bind_context(m);
  bind_endpoint(m);
  bind_region(m);
  bind_request(m);
  bind_collectives(m);
  bind_store(m);
  bind_device(m);
}
