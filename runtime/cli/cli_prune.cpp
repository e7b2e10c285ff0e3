// `canopy prune`: deletes settled trees past their age from a local home
//.

#include <cstdio>
#include <iostream>
#include <variant>

#include "persistence/error.hpp"
#include "persistence/retention.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/node/config.hpp"

namespace canopy::core::cli {

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

} // namespace

void add_prune_command(CLI::App& app, prune_options& o) {
  o.cmd = app.add_subcommand("prune", "delete settled trees older than an age");
  auto older = o.cmd->add_option("--older-than", o.older_than,
                                 "age since the tree ended, e.g. 7d, 12h");
  o.cmd->add_option("--config", o.config,
                    "a node config file: prune by its retention rules instead")
    ->excludes(older);
  o.cmd->add_option("--status", o.status, "only trees whose root ended so "
                                          "(completed, failed or stopped; default all three)");
  o.cmd->add_flag("--dry-run", o.dry_run, "count what would go, delete nothing");
  o.cmd->add_flag("--json", o.json, "print the counts as JSON");
}

namespace {

/// The rules of `--older-than D [--status S]`, or of `--config FILE`'s
/// `retention`. @returns them, or the usage error's exit code.
std::variant<retention_rules, int> rules_of(const prune_options& o) {
  if (!o.config.empty()) {
    if (!o.status.empty())
      return usage_error("--status goes with --older-than; --config takes its rules' statuses");
    auto parsed = load_node_config(o.config);
    if (!parsed) {
      for (auto& e : parsed.errors)
        std::cerr << "error: " << o.config << ": " << (e.path.empty() ? "" : e.path + ": ")
                  << e.message << "\n";
      return exit_usage;
    }
    if (parsed.value->retention.empty())
      return usage_error(o.config + ": no \"retention\" rules (e.g. \"retention\": "
                                    "{\"completed\": \"7d\"})");
    return parsed.value->retention;
  }
  if (o.older_than.empty())
    return usage_error("prune needs --older-than AGE (e.g. 7d) or --config FILE with "
                       "\"retention\" rules");
  auto age = parse_age(o.older_than);
  if (!age)
    return usage_error("--older-than: " + message_of(age.error()));
  retention_rules rules;
  execution_status only = execution_status::queued;
  bool any = o.status.empty();
  if (any || (from_string(o.status, only) && is_terminal(only))) {
    if (any || only == execution_status::completed)
      rules.completed = *age;
    if (any || only == execution_status::failed)
      rules.failed = *age;
    if (any || only == execution_status::stopped)
      rules.stopped = *age;
  }
  if (rules.empty())
    return usage_error("--status: '" + o.status + "' is not completed, failed or stopped");
  return rules;
}

} // namespace

int cmd_prune(const global_options& g, const prune_options& o) {
  auto chosen = rules_of(o);
  if (auto code = std::get_if<int>(&chosen))
    return *code;
  auto& rules = std::get<retention_rules>(chosen);
  auto db = open_store(g, o.dry_run ? store_use::read : store_use::write);
  if (!db)
    return fail(db.error());
  auto before = (*db)->usage();
  if (!before)
    return fail(before.error());
  auto result = prune(**db, rules, now_ms(), o.dry_run, [&](write_batch b) {
    return (*db)->commit(b);
  });
  if (!result)
    return fail(result.error());
  auto after = (*db)->usage();
  if (!after)
    return fail(after.error());
  if (o.json) {
    std::cout << json{{"trees", result->trees},
                      {"executions", result->executions},
                      {"dry_run", o.dry_run},
                      {"used_bytes_before", before->used_bytes()},
                      {"used_bytes_after", after->used_bytes()}}
                   .dump()
              << "\n";
    return 0;
  }
  std::cout << (o.dry_run ? "would prune " : "pruned ") << result->trees << " tree"
            << (result->trees == 1 ? "" : "s") << " (" << result->executions << " execution"
            << (result->executions == 1 ? "" : "s") << ")";
  if (!o.dry_run)
    std::cout << "; store in use " << mib(before->used_bytes()) << " -> "
              << mib(after->used_bytes());
  std::cout << "\n";
  return 0;
}

} // namespace canopy::core::cli
