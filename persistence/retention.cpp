#include "persistence/retention.hpp"

#include "persistence/error.hpp"

namespace canopy::core {

std::optional<millis> retention_rules::age_of(execution_status status) const {
  switch (status) {
    case execution_status::completed: return completed;
    case execution_status::failed: return failed;
    case execution_status::stopped: return stopped;
    default: return std::nullopt;
  }
}

caf::expected<millis> parse_age(const std::string& text) {
  if (text.size() >= 2 && text.size() <= 7 && text.back() == 'd'
      && text.find_first_not_of("0123456789") == text.size() - 1)
    return millis{std::stoll(text.substr(0, text.size() - 1)) * 86'400'000LL};
  auto d = parse_duration(text);
  if (!d)
    return make_error(persistence_errc::invalid_graph,
                      "bad age '" + text + "' (a whole number with unit ms, s, m, h or d, "
                      "e.g. \"7d\")");
  return d;
}

caf::expected<retention_rules> retention_from_json(const nlohmann::json& v,
                                                   const std::string& path) {
  if (!v.is_object())
    return make_error(persistence_errc::invalid_graph,
                      path + ": expected an object such as {\"completed\": \"7d\"}, got "
                        + v.type_name());
  retention_rules out;
  for (auto& [key, value] : v.items()) {
    std::optional<millis> interval;
    execution_status status = execution_status::queued;
    bool terminal = from_string(key, status) && is_terminal(status);
    std::optional<millis>* slot = !terminal                               ? nullptr
                                  : status == execution_status::completed ? &out.completed
                                  : status == execution_status::failed    ? &out.failed
                                                                          : &out.stopped;
    if (key == "interval")
      slot = &interval;
    if (slot == nullptr)
      return make_error(persistence_errc::invalid_graph,
                        path + "/" + key
                          + ": unknown key (expected completed, failed, stopped or interval)");
    if (!value.is_string())
      return make_error(persistence_errc::invalid_graph,
                        path + "/" + key + ": expected an age such as \"7d\", got "
                          + value.dump());
    auto age = parse_age(value.get<std::string>());
    if (!age)
      return make_error(persistence_errc::invalid_graph,
                        path + "/" + key + ": " + message_of(age.error()));
    *slot = *age;
    if (interval) {
      if (*interval < std::chrono::seconds{1})
        return make_error(persistence_errc::invalid_graph,
                          path + "/interval: must be at least 1s, got '"
                            + value.get<std::string>() + "'");
      out.interval = *interval;
    }
  }
  return out;
}

namespace {

/// Roots read per listing page: a prune holds O(page) records, whatever
/// the history holds.
constexpr size_t prune_page = 1024;

} // namespace

caf::expected<prune_result> prune(const store& db, const retention_rules& rules, int64_t now,
                                  bool dry_run, const batch_committer& commit,
                                  size_t trees_per_commit) {
  prune_result out;
  if (rules.empty())
    return out;
  trees_per_commit = std::max<size_t>(1, trees_per_commit);
  std::vector<std::string> due;
  auto flush = [&](size_t keep_below) -> caf::error {
    size_t i = 0;
    for (; due.size() - i > keep_below; i += std::min(trees_per_commit, due.size() - i)) {
      write_batch b;
      for (size_t j = i; j < due.size() && j < i + trees_per_commit; ++j)
        b.deleted_trees.push_back(due[j]);
      if (auto err = commit(std::move(b)))
        return err;
      ++out.commits;
    }
    due.erase(due.begin(), due.begin() + static_cast<std::ptrdiff_t>(i));
    return caf::none;
  };
  // Newest first, a page at a time: a tree deleted meanwhile is older than
  // the cursor already passed, so no page skips or repeats a root.
  execution_filter f;
  f.roots_only = true;
  f.limit = prune_page;
  for (;;) {
    auto roots = db.list(f);
    if (!roots)
      return roots.error();
    for (auto& r : *roots) {
      auto age = rules.age_of(r.status);
      if (!age || r.ended_at == 0 || now - r.ended_at < age->count())
        continue;
      auto ids = db.subtree_ids(r.id);
      if (!ids)
        return ids.error();
      ++out.trees;
      out.executions += ids->size();
      due.push_back(r.id);
    }
    if (!dry_run)
      if (auto err = flush(trees_per_commit - 1))
        return err;
    if (roots->size() < f.limit)
      break;
    f.before = roots->back().id;
  }
  if (!dry_run)
    if (auto err = flush(0))
      return err;
  return out;
}

} // namespace canopy::core
