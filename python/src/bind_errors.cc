// python/src/bind_errors.cc — remora's errors in Python: a failed Status raised from
// any binding becomes the remora.Error subclass of its code (remora/_errors.py) with
// the C++ message; error_object makes the same exception as a value (not raised).
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "binding.h"

namespace remora::python {

namespace {

/// The remora.Error subclass of `code`, from remora._errors (imported at first use).
nb::handle error_class(StatusCode code) {
  static nb::object by_code = nb::module_::import_("remora._errors").attr("_BY_CODE");
  static auto* keep = new nb::object(by_code);  // never released: the module outlives every raise
  (void)keep;
  return by_code[nb::int_(static_cast<int>(code))];
}

}  // namespace

nb::object error_object(const Status& s) { return error_class(s.code())(nb::str(s.message().c_str())); }

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::handle cls = error_class(e.status.code());
      PyErr_SetString(cls.ptr(), e.status.message().c_str());
    }
  });

  m.def("_code_names", [] {
    std::vector<std::string> names;
    for (int c = 0; c <= static_cast<int>(StatusCode::kDataCorrupt); ++c) {
      names.emplace_back(to_string(static_cast<StatusCode>(c)));
    }
    return names;
  });
}

}  // namespace remora::python
