#include "runtime/lib/facade.hpp"

#include "persistence/graph.hpp"

namespace canopy {

namespace {

/// The structure only: functions and tools are the runtime's (checked at start).
core::parse_options structural() {
  core::parse_options opts;
  opts.any_fn = true;
  opts.any_tool = true;
  return opts;
}

} // namespace

namespace facade {

result<graph> to_graph(const core::parse_result& parsed) {
  if (!parsed)
    return to_error(parsed.errors);
  return graph{std::make_shared<const graph::state>(graph::state{parsed.value})};
}

} // namespace facade

// -- graph ----------------------------------------------------------------------------

result<graph> graph::parse(const json& document, const std::string& base_dir) {
  return facade::to_graph(core::parse_graph(document, base_dir, structural()));
}

result<graph> graph::load(const std::string& path) {
  return facade::to_graph(core::parse_graph_file(path, structural()));
}

const std::string& graph::name() const {
  return state_->model->name;
}

const std::vector<std::string>& graph::inputs() const {
  return state_->model->inputs;
}

std::vector<std::string> graph::steps() const {
  std::vector<std::string> ids;
  ids.reserve(state_->model->steps.size());
  for (auto& s : state_->model->steps)
    ids.push_back(s.id);
  return ids;
}

const std::string& graph::base_dir() const {
  return state_->model->base_dir;
}

json graph::to_json() const {
  return state_->model->document;
}

// -- graph_builder ------------------------------------------------------------------------

graph_builder::graph_builder(std::string name)
  : doc_{{"name", std::move(name)}, {"steps", json::object()}} {
}

graph_builder& graph_builder::input(const std::string& name) {
  doc_["inputs"].push_back(name);
  return *this;
}

graph_builder& graph_builder::output(const std::string& name, json value) {
  doc_["outputs"][name] = std::move(value);
  return *this;
}

graph_builder& graph_builder::limits(json value) {
  doc_["limits"] = std::move(value);
  return *this;
}

graph_builder& graph_builder::step(const std::string& id) {
  current_ = id;
  if (!doc_["steps"].contains(id))
    doc_["steps"][id] = json::object();
  return *this;
}

json& graph_builder::current(const char* what) {
  if (current_.empty()) {
    // Kept aside and reported by `build`, at the steps' path.
    misuse_.push_back(problem{"/steps", std::string{what} + " called before step()"});
    scratch_ = json::object();
    return scratch_;
  }
  return doc_["steps"][current_];
}

graph_builder& graph_builder::run(std::vector<std::string> argv) {
  current("run()")["run"] = std::move(argv);
  return *this;
}

graph_builder& graph_builder::fn(const std::string& name) {
  current("fn()")["fn"] = name;
  return *this;
}

graph_builder& graph_builder::tool(const std::string& name) {
  current("tool()")["tool"] = name;
  return *this;
}

graph_builder& graph_builder::subgraph(json file_name_or_document) {
  current("subgraph()")["graph"] = std::move(file_name_or_document);
  return *this;
}

graph_builder& graph_builder::wait(const std::string& signal, json options) {
  json spec = options.is_object() ? std::move(options) : json::object();
  spec["signal"] = signal;
  current("wait()")["wait"] = std::move(spec);
  return *this;
}

graph_builder& graph_builder::llm(json spec) {
  current("llm()")["llm"] = std::move(spec);
  return *this;
}

graph_builder& graph_builder::with(json object) {
  current("with()")["with"] = std::move(object);
  return *this;
}

graph_builder& graph_builder::needs(std::initializer_list<std::string> ids) {
  auto& s = current("needs()");
  for (auto& id : ids)
    s["needs"].push_back(id);
  return *this;
}

graph_builder& graph_builder::needs(const std::string& id) {
  return needs({id});
}

graph_builder& graph_builder::when(const std::string& condition) {
  current("when()")["when"] = condition;
  return *this;
}

graph_builder& graph_builder::timeout(const std::string& duration) {
  current("timeout()")["timeout"] = duration;
  return *this;
}

graph_builder& graph_builder::retries(int n) {
  current("retries()")["retries"] = n;
  return *this;
}

graph_builder& graph_builder::set(const std::string& key, json value) {
  current("set()")[key] = std::move(value);
  return *this;
}

json graph_builder::document() const {
  return doc_;
}

result<graph> graph_builder::build(const std::string& base_dir) const {
  auto parsed = core::parse_graph(doc_, base_dir, structural());
  if (misuse_.empty())
    return facade::to_graph(parsed);
  // Misuse first, then what the document itself has wrong.
  std::vector<core::graph_error> errs;
  for (auto& p : misuse_)
    errs.push_back(core::graph_error{p.path, p.message, {}});
  for (auto& e : parsed.errors)
    errs.push_back(e);
  return facade::to_error(errs);
}

} // namespace canopy
