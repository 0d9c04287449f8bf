// tools/doctor.h — `remora doctor`: runs the capability probe (remora/capabilities.h)
// and prints its report for people or as JSON. The exit code says whether a device
// zero-copy path exists (see DoctorExit).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "remora/capabilities.h"

namespace remora::tools {

/// `remora doctor`'s exit codes.
enum DoctorExit : int {
  kDoctorDevicePath = 0,    ///< a device zero-copy path exists (a devmem binding succeeded)
  kDoctorProbeFailed = 1,   ///< the probe could not run (e.g. an unknown --interface)
  kDoctorNoDevicePath = 3,  ///< probed: no device zero-copy path on any interface (reasons printed)
};

struct DoctorOptions {
  bool json = false;
  std::vector<std::string> interfaces;  ///< empty: all of this network namespace
  bool no_bind = false;                 ///< skip the bind and zcrx attempts
};

/// The report as JSON (the `--json` document): every answer as
/// {state, detail, reason, fix, errno, errno_name, kernel_message}.
nlohmann::json doctor_json(const CapabilityReport& report);

/// One answer as the doctor prints it: "  label  yes  detail", then the reason, the
/// kernel's words and the fix on their own indented lines (also `remora rxq`'s checks).
void print_answer(std::string_view label, const ProbeAnswer& a);

/// Probes, prints, and returns the exit code.
int run_doctor(const DoctorOptions& options);

}  // namespace remora::tools
