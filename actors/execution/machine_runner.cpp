// The execution machine: the runner spec of a `run` or `tool` attempt (or a
// `plan` step's planner), built from the step's definition and resolved
// references. Pure: no process is started here.

#include "actors/execution/machine.hpp"

#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

void execution_machine::start_runner(uint32_t idx, int64_t now) {
  auto& def = g_->steps[idx];
  auto& s = steps_[idx];
  bool remote = (s.held & held_remote) != 0;
  reference_scope scope{&rec_.inputs, this, nullptr};
  fx::spawn_runner out{idx, runner_spec{}, remote, fx::remote_tool{}};
  auto& spec = out.spec;
  spec.step = idx;
  spec.attempt = s.attempt;
  spec.timeout = def.timeout;
  spec.grace = def.grace;
  auto fail = [&](const caf::error& err) { fail_attempt(idx, message_of(err), nullptr, now); };
  std::string unknown;
  bool named_tool = def.kind == step_kind::tool || (def.kind == step_kind::plan && !def.target.empty());
  if (remote && named_tool) {
    // A tool step on a worker: its argv is the worker's.
    auto with = resolve(def.with, scope);
    if (!with)
      return fail(with.error());
    out.tool.tool = def.target;
    out.tool.with_json = dump_json(*with);
    out.tool.inputs_json = dump_json(rec_.inputs);
    out.tool.grace_set = def.grace_set;
  } else if (auto tool = tool_of(def, unknown)) {
    // The tool's argv template, with `${with.KEY}` from the step's resolved
    // `with` and `${inputs.KEY}` from the execution's inputs; its limits
    // apply where the step sets none.
    auto with = resolve(def.with, scope);
    if (!with)
      return fail(with.error());
    reference_scope tool_scope{&rec_.inputs, nullptr, &*with};
    for (auto& item : tool->argv) {
      auto arg = resolve_text(item.get<std::string>(), tool_scope);
      if (!arg)
        return fail_attempt(idx, "tool '" + tool->name + "': " + message_of(arg.error()),
                            nullptr, now);
      spec.process.argv.push_back(std::move(*arg));
    }
    if (!def.timeout)
      spec.timeout = tool->timeout;
    if (!def.grace_set && tool->grace)
      spec.grace = *tool->grace;
  } else if (!unknown.empty()) {
    return fail_attempt(idx, unknown, nullptr, now);
  } else {
    for (auto& item : def.argv) {
      auto arg = resolve_text(item.get<std::string>(), scope);
      if (!arg)
        return fail(arg.error());
      spec.process.argv.push_back(std::move(*arg));
    }
  }
  for (auto& kv : def.env) {
    auto val = resolve_text(kv.second, scope);
    if (!val)
      return fail(val.error());
    spec.process.env[kv.first] = std::move(*val);
  }
  if (def.stdin_data) {
    auto val = resolve_text(*def.stdin_data, scope);
    if (!val)
      return fail(val.error());
    spec.process.stdin_data = std::move(*val);
  }
  std::string cwd = g_->base_dir;
  if (def.cwd) {
    auto val = resolve_text(*def.cwd, scope);
    if (!val)
      return fail(val.error());
    cwd = !val->empty() && (*val)[0] == '/' ? *val : g_->base_dir + "/" + *val;
  }
  spec.process.cwd = cwd;
  s.pid = 0;
  mark_running(idx, remote ? step_phase::placing : step_phase::running_runner, now);
  effects_.emplace_back(std::make_unique<fx::spawn_runner>(std::move(out)));
}

} // namespace canopy::core
