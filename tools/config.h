// tools/config.h — `remora config`: the library's configuration table (every REMORA_*
// variable, config_variables()) as a listing with this environment's values, as the
// Markdown tables of docs/configuration.md, and a check that a document holds exactly
// those tables.
#pragma once

#include <string>
#include <string_view>

namespace remora::tools {

struct ConfigCliOptions {
  bool markdown = false;    ///< print every section's table, as docs/configuration.md holds it
  bool names = false;       ///< print every variable's name, one per line
  std::string check_docs;   ///< a Markdown file whose generated tables must equal the table's
  std::string update_docs;  ///< a Markdown file whose generated tables are rewritten from the table
};

/// Runs `remora config`; its exit status (0; 1 when --check-docs found a difference).
int run_config(const ConfigCliOptions& options);

/// The generated block of one section: its opening marker, the table, the closing one.
std::string generated_block(std::string_view section);

}  // namespace remora::tools
