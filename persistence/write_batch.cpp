// The write batch's own methods (its fields: store.hpp): appending, taking
// its events after a commit, its weight and its compact snapshots.

#include "persistence/store.hpp"

#include <utility>

namespace canopy::core {

namespace {

bool fenced(const write_batch& b) {
  return b.lease.outcome == lease_outcome::fenced;
}

size_t event_count(const write_batch& b) {
  if (fenced(b))
    return 0;
  auto n = b.events.size();
  for (auto& x : b.nested)
    n += event_count(x);
  return n;
}

void move_events(write_batch& b, std::vector<event_record>& out) {
  if (fenced(b))
    return;
  for (auto& e : b.events)
    out.push_back(std::move(e));
  b.events.clear();
  for (auto& x : b.nested)
    move_events(x, out);
}

} // namespace

// -- the write batch -----------------------------------------------------------------

void write_batch::append(write_batch&& other) {
  if (other.empty())
    return;
  if (empty()) {
    *this = std::move(other);
    return;
  }
  nested.push_back(std::move(other));
}

void write_batch::take_events(std::vector<event_record>& out) {
  // One allocation of the exact size: a commit's events can be many, and
  // a doubling vector would hold up to twice their size while subscribers
  // read them.
  if (fenced(*this))
    return;
  if (out.empty() && nested.empty()) {
    out = std::move(events);
    events.clear();
    return;
  }
  out.reserve(out.size() + event_count(*this));
  move_events(*this, out);
}

size_t write_batch::weight() const {
  size_t n = executions.size() + steps.size() + graphs.size() + events.size()
             + deleted_executions.size() + deleted_trees.size() + stops.size() + signals.size()
             + settle_stops.size() + counters.size() + registered.size() + agents.size()
             + history.size() + subtree_stops.size();
  for (auto& g : encoded_graphs)
    n += 1 + g.second.size() / 512;
  for (auto& x : nested)
    n += x.weight();
  return n;
}

void write_batch::collect_subtree_stops(std::vector<subtree_stop>& out) const {
  if (fenced(*this))
    return;
  out.insert(out.end(), subtree_stops.begin(), subtree_stops.end());
  for (auto& n : nested)
    n.collect_subtree_stops(out);
}

} // namespace canopy::core
