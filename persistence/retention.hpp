#pragma once

// Retention: which settled trees are old enough to go, and
// deleting them in small transactions. Plain functions over the store; the
// caller decides how a batch is committed (the store directly from the CLI,
// the store writer inside a node).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "persistence/duration.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// How long a settled root tree is kept, by its root's final status; a
/// status without an age is kept for good.
struct retention_rules {
  std::optional<millis> completed;
  std::optional<millis> failed;
  std::optional<millis> stopped;
  /// How often a server prunes by these rules (`canopy prune` runs once).
  millis interval{std::chrono::hours{1}};

  bool empty() const { return !completed && !failed && !stopped; }
  /// The age after which a root that ended with `status` goes (nullopt:
  /// never; also for every status that is not terminal).
  std::optional<millis> age_of(execution_status status) const;
};

/// Parses an age: a duration (`parse_duration`: ms, s, m, h) or whole days
/// (`"7d"`, for retention only: graphs keep SPEC's units). @returns the age,
/// or an error naming the text. Thread-safe.
caf::expected<millis> parse_age(const std::string& text);

/// Reads `{"completed": "7d", "failed": "30d", "stopped": "30d", "interval":
/// "1h"}` (any subset; `interval` at least 1 s). @returns the rules, or an
/// error whose message starts with the key's path (`PATH/KEY: ...`).
/// Unknown keys are errors. Thread-safe.
caf::expected<retention_rules> retention_from_json(const nlohmann::json& v,
                                                   const std::string& path = "/retention");

/// What a prune found and (unless a dry run) deleted.
struct prune_result {
  size_t trees = 0;      ///< settled root trees past their age
  size_t executions = 0; ///< executions in them, roots included
  size_t commits = 0;    ///< transactions used
};

/// Commits one batch (`store::commit`, or through a node's store writer).
using batch_committer = std::function<caf::error(write_batch)>;

/// Finds every settled root whose `ended_at` is at least its status's age
/// before `now`, and unless `dry_run` deletes each whole tree
/// (`write_batch::deleted_trees`), at most `trees_per_commit` trees per
/// transaction, so that no commit holds the writer long (a tree is deleted
/// whole, in one). The roots are read newest first a page at a time and
/// deleted as each page is read: memory stays O(page) whatever the history
/// holds. A root resumed meanwhile is left alone by the store (and still
/// counted here). @returns the counts, or the first store error (trees
/// deleted before it stay deleted). Any thread.
caf::expected<prune_result> prune(const store& db, const retention_rules& rules, int64_t now,
                                  bool dry_run, const batch_committer& commit,
                                  size_t trees_per_commit = 64);

} // namespace canopy::core
