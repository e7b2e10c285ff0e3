// `canopy prune`: deletes settled trees past their age from a local home
// (issue #14).

#include <cstdio>
#include <iostream>

#include "persistence/error.hpp"
#include "persistence/retention.hpp"
#include "runtime/cli_common.hpp"

namespace canopy::cli {

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

} // namespace

void add_prune_command(CLI::App& app, prune_options& o) {
  o.cmd = app.add_subcommand("prune", "delete settled trees older than an age");
  o.cmd->add_option("--older-than", o.older_than, "age since the tree ended, e.g. 7d, 12h")
    ->required();
  o.cmd->add_option("--status", o.status, "only trees whose root ended so "
                                          "(completed, failed or stopped; default all three)");
  o.cmd->add_flag("--dry-run", o.dry_run, "count what would go, delete nothing");
  o.cmd->add_flag("--json", o.json, "print the counts as JSON");
}

int cmd_prune(const global_options& g, const prune_options& o) {
  auto age = parse_age(o.older_than);
  if (!age)
    return usage_error("--older-than: " + message_of(age.error()));
  retention_rules rules;
  if (o.status.empty() || o.status == "completed")
    rules.completed = *age;
  if (o.status.empty() || o.status == "failed")
    rules.failed = *age;
  if (o.status.empty() || o.status == "stopped")
    rules.stopped = *age;
  if (rules.empty())
    return usage_error("--status: '" + o.status + "' is not completed, failed or stopped");
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

} // namespace canopy::cli
