#include "runtime/lib/facade.hpp"

#include "persistence/records.hpp"

namespace canopy {

// The public enums mirror the store's: the same names in the same order.
static_assert(static_cast<int>(execution_status::failed)
              == static_cast<int>(core::execution_status::failed));
static_assert(static_cast<int>(busy_policy::reject) == static_cast<int>(core::busy_policy::reject));
static_assert(static_cast<int>(stop_mode::force) == static_cast<int>(core::stop_mode::force));

const char* to_string(execution_status x) {
  return core::to_string(static_cast<core::execution_status>(x));
}

bool is_settled(execution_status x) {
  return core::is_terminal(static_cast<core::execution_status>(x));
}

const char* to_string(stop_outcome x) {
  switch (x) {
    case stop_outcome::stopped: return "stopped";
    case stop_outcome::stopping: return "stopping";
    case stop_outcome::not_running: return "not_running";
  }
  return "stopping";
}

namespace facade {

execution_info to_info(const core::execution_record& rec) {
  execution_info x;
  x.id = rec.id;
  x.graph = rec.graph;
  x.status = static_cast<execution_status>(rec.status);
  x.reason = to_string(rec.reason);
  x.error = rec.error;
  x.root_id = rec.root_id;
  x.parent_id = rec.parent_id;
  x.inputs = rec.inputs;
  x.outputs = rec.outputs;
  x.created_at = rec.created_at;
  x.started_at = rec.started_at;
  x.ended_at = rec.ended_at;
  x.agent = rec.agent;
  return x;
}

event to_event(const core::event_record& e) {
  event x;
  x.seq = e.seq;
  x.time = e.time;
  x.type = to_string(e.type);
  x.execution_id = e.execution_id;
  x.root_id = e.root_id;
  x.parent_id = e.parent_id;
  x.step = e.step;
  x.status = to_string(e.status);
  x.reason = to_string(e.reason);
  x.data = e.data;
  return x;
}

} // namespace facade

} // namespace canopy
