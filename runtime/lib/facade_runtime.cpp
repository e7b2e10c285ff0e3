#include "runtime/lib/facade.hpp"

#include <algorithm>

#include "actors/error.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"

namespace canopy {

namespace {

core::runtime_options to_core(const options& o) {
  core::runtime_options x;
  x.home = o.home;
  x.max_parallel = o.max_parallel;
  x.max_running = o.max_running;
  x.fn_threads = o.fn_threads;
  x.scheduler_threads = o.scheduler_threads;
  x.ignore_sigpipe = o.ignore_sigpipe;
  x.raise_open_files_limit = o.raise_open_files_limit;
  x.tune_malloc = o.tune_malloc;
  return x;
}

/// `g` checked against this runtime: its functions, its tools.
result<std::shared_ptr<const core::graph>> for_runtime(const core::runtime& rt, const graph& g) {
  auto parsed = core::parse_graph(g.to_json(), g.base_dir(), rt.graph_options());
  if (!parsed)
    return facade::to_error(parsed.errors);
  return parsed.value;
}

result<execution> wrap(runtime::state& st, caf::expected<core::execution_handle> h) {
  if (!h)
    return facade::to_error(h.error());
  return execution{std::make_shared<const execution::state>(execution::state{&st, std::move(*h)})};
}

/// The step function the runtime calls for public function `f`.
core::fn_function to_core(fn f) {
  return [f = std::move(f)](core::fn_context& ctx) -> caf::expected<json> {
    fn_context::state st{&ctx};
    fn_context pub{st};
    auto r = f(pub);
    if (r)
      return std::move(*r);
    if (r.error().code() == errc::stopped)
      if (auto stop = ctx.checkpoint())
        return stop; // ends the step as stopped, not failed
    return core::make_error(core::actors_errc::step_failed, r.error().message());
  };
}

} // namespace

// -- runtime::state ---------------------------------------------------------------------

subscription runtime::state::subscribe(std::function<void(const event&)> f,
                                       const std::string& root_id) {
  auto s = std::make_shared<subscription::state>();
  s->root_id = root_id;
  auto forward = [f = std::move(f)](const core::event_record& e) { f(facade::to_event(e)); };
  if (root_id.empty()) {
    s->sub = rt->subscribe(std::move(forward));
  } else {
    auto h = rt->attach(root_id);
    if (!h)
      return subscription{}; // the tree is gone: nothing will come
    s->sub = h->subscribe(std::move(forward));
  }
  std::lock_guard<std::mutex> guard{subs_mtx};
  // Forget the ended ones while here, so the list stays as long as the live ones.
  subs.erase(std::remove_if(subs.begin(), subs.end(), [](auto& w) { return w.expired(); }),
             subs.end());
  subs.push_back(s);
  return subscription{std::move(s)};
}

void runtime::state::drain_followers(const std::string& root_id) {
  std::vector<std::shared_ptr<subscription::state>> followers;
  {
    std::lock_guard<std::mutex> guard{subs_mtx};
    for (auto& w : subs)
      if (auto s = w.lock(); s && (s->root_id.empty() || s->root_id == root_id))
        followers.push_back(std::move(s));
  }
  for (auto& s : followers) {
    std::lock_guard<std::mutex> guard{s->mtx};
    s->sub.drain();
  }
}

void runtime::state::cancel_all() {
  std::vector<std::shared_ptr<subscription::state>> live;
  {
    std::lock_guard<std::mutex> guard{subs_mtx};
    for (auto& w : subs)
      if (auto s = w.lock())
        live.push_back(std::move(s));
    subs.clear();
  }
  for (auto& s : live) {
    std::lock_guard<std::mutex> guard{s->mtx};
    s->sub.cancel();
  }
}

// -- subscription ------------------------------------------------------------------------

subscription::subscription(std::shared_ptr<state> s) : s_(std::move(s)) {
}

subscription::subscription(subscription&&) noexcept = default;

subscription& subscription::operator=(subscription&& other) noexcept {
  if (this != &other) {
    cancel();
    s_ = std::move(other.s_);
  }
  return *this;
}

subscription::~subscription() {
  cancel();
}

void subscription::cancel() {
  if (!s_)
    return;
  {
    std::lock_guard<std::mutex> guard{s_->mtx};
    s_->sub.cancel();
  }
  s_.reset();
}

// -- runtime ------------------------------------------------------------------------------

runtime::runtime(std::unique_ptr<state> s) : s_(std::move(s)) {
}

runtime::~runtime() {
  s_->cancel_all();
  s_->rt.reset(); // stops every execution it runs, each snapshotted
}

result<std::unique_ptr<runtime>> runtime::open(options opts) {
  if (opts.fn_threads == 0)
    return error{errc::invalid, "options.fn_threads must be at least 1"};
  auto rt = core::runtime::open(to_core(opts));
  if (!rt)
    return facade::to_error(rt.error());
  auto st = std::make_unique<state>();
  st->rt = std::move(*rt);
  return std::unique_ptr<runtime>{new runtime{std::move(st)}};
}

result<void> runtime::register_fn(const std::string& name, fn f) {
  if (name.empty())
    return error{errc::invalid, "a function needs a name"};
  if (!f)
    return error{errc::invalid, "function '" + name + "' is empty"};
  if (!s_->rt->register_fn(name, to_core(std::move(f))))
    return error{errc::conflict, "function name '" + name + "' is taken"};
  return {};
}

result<execution> runtime::start(const graph& g, json inputs) {
  auto model = for_runtime(*s_->rt, g);
  if (!model)
    return model.error();
  return wrap(*s_, s_->rt->start(*model, std::move(inputs)));
}

result<execution> runtime::start(const std::string& name, json inputs) {
  auto& rt = *s_->rt;
  auto reg = rt.db()->registered("", name);
  if (!reg)
    return facade::to_error(reg.error());
  auto parsed = rt.parse_document(reg->document);
  if (!parsed)
    return facade::to_error(parsed.errors);
  core::start_options so;
  so.graph_version = reg->version;
  return wrap(*s_, rt.start(parsed.value, std::move(inputs), so));
}

result<int> runtime::register_graph(const std::string& name, const graph& g) {
  if (auto why = core::check_graph_id(name); !why.empty())
    return error{errc::invalid, why};
  auto model = for_runtime(*s_->rt, g);
  if (!model)
    return model.error();
  auto reg = s_->rt->register_graph("", name, g.to_json());
  if (!reg)
    return facade::to_error(reg.error());
  return reg->version;
}

result<execution> runtime::find(const std::string& id) const {
  return wrap(*s_, s_->rt->attach(id));
}

result<execution> runtime::resume(const std::string& id, std::optional<double> budget) {
  return wrap(*s_, s_->rt->resume(id, budget));
}

result<void> runtime::remove(const std::string& id) {
  if (auto err = s_->rt->delete_tree(id))
    return facade::to_error(err);
  return {};
}

std::vector<std::string> runtime::recovered() const {
  return s_->rt->recovered();
}

subscription runtime::events(std::function<void(const event&)> f) {
  return s_->subscribe(std::move(f), {});
}

size_t runtime::live_executions() const {
  return s_->rt->live_executions();
}

// -- agents -----------------------------------------------------------------------------------

result<bool> runtime::create_agent(const std::string& name, const graph& g, busy_policy on_busy) {
  if (auto why = core::check_agent_name(name); !why.empty())
    return error{errc::invalid, why};
  auto model = for_runtime(*s_->rt, g);
  if (!model)
    return model.error();
  if (auto bad = core::check_agent_graph(**model); !bad.empty())
    return facade::to_error(bad);
  auto made = s_->rt->create_agent("", name, **model, static_cast<core::busy_policy>(on_busy));
  if (!made)
    return facade::to_error(made.error());
  return made->second;
}

result<agent_reply> runtime::send(const std::string& name, json message) {
  auto r = s_->rt->send_to_agent("", name, std::move(message));
  if (!r)
    return facade::to_error(r.error());
  if (r->status == core::reply_status::busy)
    return error{errc::busy, r->error.empty() ? "agent '" + name + "' is busy" : r->error};
  agent_reply x;
  x.cancelled = r->status == core::reply_status::cancelled;
  switch (r->status) {
    case core::reply_status::completed: x.status = execution_status::completed; break;
    case core::reply_status::failed: x.status = execution_status::failed; break;
    default: x.status = execution_status::stopped; break;
  }
  x.reason = to_string(r->reason);
  x.reply = r->reply;
  x.execution_id = r->execution_id;
  x.error = r->error;
  return x;
}

result<bool> runtime::cancel_agent(const std::string& name, millis wait) {
  auto r = s_->rt->cancel_agent("", name, "library", wait);
  if (!r)
    return facade::to_error(r.error());
  return *r == core::cancel_result::cancelled;
}

} // namespace canopy
