// `show` and `events` on the local home: an execution's document and the
// event log of its subtree, once or followed while another process writes.

#include <iostream>
#include <set>

#include "runtime/cli/cli_common.hpp"
#include "runtime/node/document.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

int cmd_show(const global_options& g, const std::string& id, bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  return print_document(load_document(**db, id), as_json);
}

namespace {

/// Prints one event of a local tree: a JSON line, or a human line.
void print_event(const event_record& e, tree_view& view, bool as_json) {
  if (as_json)
    std::cout << event_document(e).dump() << "\n";
  else
    std::cout << event_line(e, view.label(e.execution_id)) << "\n";
}

} // namespace

/// `canopy events ID [--follow]` on the local home: the events of `id`'s
/// subtree; with `follow_live`, keeps reading the store (another process
/// writes it) until `id` is terminal and every event up to that was printed.
int cmd_events(const global_options& g, const std::string& id, bool follow_live,
               bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(id);
  if (!rec)
    return fail(rec.error());
  // Of a child, only its subtree: the ids known now, and those that join.
  bool whole_tree = id == rec->root_id;
  std::set<std::string> inside, outside;
  if (!whole_tree) {
    auto ids = (*db)->subtree_ids(id);
    if (!ids)
      return fail(ids.error());
    inside = std::move(*ids);
  }
  auto in_subtree = [&](const event_record& e) {
    if (whole_tree || inside.count(e.execution_id))
      return true;
    if (outside.count(e.execution_id))
      return false;
    // A new execution belongs when its parent does (lineage never changes).
    auto parent = e.parent_id;
    if (parent.empty())
      if (auto r = (*db)->execution(e.execution_id))
        parent = r->parent_id;
    bool in = !parent.empty() && inside.count(parent) > 0;
    (in ? inside : outside).insert(e.execution_id);
    return in;
  };
  tree_view view{**db, id};
  auto err = follow_store(**db, id, rec->root_id, follow_live,
                          [&](const execution_record&, const std::vector<event_record>& events) {
                            for (auto& e : events)
                              if (in_subtree(e))
                                print_event(e, view, as_json);
                            std::cout << std::flush;
                            return false;
                          });
  return err ? fail(err) : 0;
}

} // namespace canopy::core::cli
