// The HTTP API's signals and waits: sending a signal to an execution's
// waits, its tree's signals, and the user's inbox of open waits.

#include <spdlog/spdlog.h>

#include "persistence/error.hpp"
#include "runtime/server/http_api.hpp"

namespace canopy::core::api {

namespace {

/// The answer of a decision that is not `store` or `replay`.
http_error refusal(const signal_decision& d) {
  switch (d.outcome) {
    case signal_outcome::not_found:
      return {404, "not_found", d.message, ""};
    case signal_outcome::unknown_signal:
      return {404, "unknown_signal", d.message, ""};
    case signal_outcome::forbidden:
      return {403, "forbidden", d.message, ""};
    case signal_outcome::invalid_value:
      return {400, "invalid_value", d.message, d.path};
    case signal_outcome::too_large:
      return {413, "too_large", d.message, ""};
    case signal_outcome::ended:
      return {409, "wait_ended", d.message, ""};
    case signal_outcome::ambiguous:
      return {409, "ambiguous_wait", d.message, ""};
    case signal_outcome::key_conflict:
      return {409, "idempotency_conflict", d.message, ""};
    default:
      return {500, "internal", "unexpected signal outcome", ""};
  }
}

/// The answer's body: the signal, and the wait that took it (if one did).
json answer_body(const signal_answer& a) {
  auto doc = signal_document(a.decision.record);
  doc["status"] = a.consumed ? "consumed" : "buffered";
  if (a.consumed)
    doc["consumed_by"] = {{"execution_id", a.consumed_execution}, {"step", a.consumed_step}};
  return doc;
}

} // namespace

void api_server::post_signal(call& c) {
  if (!valid_id(c.capture))
    return reply(c.res, not_found("no execution '" + c.capture + "'"));
  http_error err;
  auto body = body_object(c.req, {"value", "fail"}, err);
  if (!body)
    return reply(c.res, err);
  signal_request req;
  req.target = c.capture;
  req.name = c.more.empty() ? std::string{} : c.more.front();
  req.user = c.user;
  req.who = "user:" + c.user;
  req.step = c.req.has_param("step") ? c.req.get_param_value("step") : std::string{};
  req.key = c.req.get_header_value("Idempotency-Key");
  if (req.key.size() > 200)
    return reply(c.res, bad_request("Idempotency-Key is over 200 characters"));
  auto value = body->find("value");
  auto fail = body->find("fail");
  if ((value == body->end()) == (fail == body->end()))
    return reply(c.res, bad_request("expected exactly one of \"value\" and \"fail\""));
  if (fail != body->end()) {
    auto msg = fail->is_object() ? fail->find("message") : fail->end();
    if (!fail->is_object() || fail->size() != 1 || msg == fail->end() || !msg->is_string())
      return reply(c.res, bad_request("expected {\"message\": \"...\"}", "/fail"));
    req.failure = true;
    req.message = msg->get<std::string>();
    if (req.message.size() > 2000)
      return reply(c.res, bad_request("the message is over 2000 bytes", "/fail/message"));
  } else {
    req.value = *value;
  }
  auto a = rt_.signal(std::move(req));
  if (!a)
    return reply(c.res, from_error(a.error()));
  auto& d = a->decision;
  if (d.outcome != signal_outcome::store && d.outcome != signal_outcome::replay) {
    auto e = refusal(d);
    auto doc = error_body(e);
    if (d.outcome == signal_outcome::ended) {
      doc["error"]["status"] = to_string(d.status);
      doc["error"]["reason"] = d.reason == step_reason::none ? json(nullptr)
                                                             : json(to_string(d.reason));
    } else if (d.outcome == signal_outcome::ambiguous) {
      doc["error"]["steps"] = d.steps;
    }
    return reply(c.res, e.status, doc);
  }
  spdlog::info("event=signal user={} execution={} name={} signal={} outcome={} consumed={}",
               c.user, c.capture, d.record.name, d.record.id, to_string(d.outcome),
               a->consumed);
  reply(c.res, a->consumed ? 200 : 202, answer_body(*a));
}

void api_server::list_signals(call& c) {
  auto rec = owned(c, c.capture);
  if (!rec)
    return;
  auto all = db_.signals(rec->root_id.empty() ? rec->id : rec->root_id);
  if (!all)
    return reply(c.res, from_error(all.error()));
  json items = json::array();
  for (auto& s : *all)
    items.push_back(signal_document(s));
  reply(c.res, 200, {{"items", std::move(items)}});
}

void api_server::list_waits(call& c) {
  auto waits = open_waits(db_, c.user);
  if (!waits)
    return reply(c.res, from_error(waits.error()));
  json items = json::array();
  for (auto& w : *waits)
    items.push_back(wait_document(w));
  reply(c.res, 200, {{"items", std::move(items)}});
}

} // namespace canopy::core::api
