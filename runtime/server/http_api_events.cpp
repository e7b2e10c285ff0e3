#include "runtime/server/http_api.hpp"

namespace canopy::core::api {

void api_server::get_events(call& c) {
  auto rec = owned(c, c.capture);
  if (!rec)
    return;
  uint64_t after = 0;
  if (c.req.has_param("after") && !parse_uint(c.req.get_param_value("after"), after))
    return reply(c.res, bad_request("after must be a non-negative integer (an event seq)"));
  if (c.req.has_header("Last-Event-ID")
      && !parse_uint(c.req.get_header_value("Last-Event-ID"), after))
    return reply(c.res, bad_request("Last-Event-ID must be an event seq"));
  bool sse = c.req.get_header_value("Accept").find("text/event-stream") != std::string::npos;
  if (!sse)
    return event_page(c, *rec, after);
  stream_events(c, *rec, after);
}

void api_server::event_page(call& c, const execution_record& rec, uint64_t after) {
  // `cursor` is the previous page's `next`: the last seq it looked at.
  if (c.req.has_param("cursor") && !parse_uint(c.req.get_param_value("cursor"), after))
    return reply(c.res, bad_request("bad cursor '" + c.req.get_param_value("cursor")
                                    + "': pass the previous page's next"));
  size_t limit = max_page;
  if (c.req.has_param("limit") && !page_limit(c, limit))
    return;
  // A page is `limit` events of the tree in seq order; for a child, those of
  // its subtree among them (a page may hold fewer, even none, and still have
  // a next).
  auto scan = subtree_events(rec, after, limit);
  if (!scan)
    return reply(c.res, from_error(scan.error()));
  json items = json::array();
  for (auto& e : scan->events)
    items.push_back(event_document(e));
  json next = scan->full ? json(std::to_string(scan->last_seq)) : json(nullptr);
  reply(c.res, 200, {{"items", std::move(items)}, {"next", std::move(next)}});
}

caf::expected<api_server::event_scan>
api_server::subtree_events(const execution_record& rec, uint64_t after, size_t limit) {
  auto events = db_.tree_events(rec.root_id, after, limit);
  if (!events)
    return events.error();
  event_scan out;
  out.full = limit != 0 && events->size() == limit;
  out.last_seq = events->empty() ? after : events->back().seq;
  if (rec.id == rec.root_id) {
    out.events = std::move(*events);
    return out;
  }
  auto ids = db_.subtree_ids(rec.id);
  if (!ids)
    return ids.error();
  for (auto& e : *events)
    if (ids->count(e.execution_id) > 0)
      out.events.push_back(std::move(e));
  return out;
}

void api_server::stream_events(call& c, const execution_record& rec, uint64_t after) {
  // Where the stream starts reading the tree's log: after `after`, or past
  // the pages of other executions' events the check below looked at.
  uint64_t cursor = after;
  {
    // Status first, then events (see below).
    auto now = db_.execution(rec.id);
    if (!now || !is_stoppable(now->status)) {
      // Is any event of the subtree after `after`? (A child's may come after
      // many of its tree's others.)
      bool any = false;
      for (;;) {
        auto more = subtree_events(rec, cursor, max_page);
        if (!more)
          return reply(c.res, from_error(more.error()));
        any = !more->events.empty();
        if (any || !more->full)
          break;
        cursor = more->last_seq;
      }
      if (!any) {
        c.res.status = 204;
        return;
      }
    }
  }
  struct stream_state {
    uint64_t cursor; ///< the tree's log is read after this seq
    uint64_t sent;   ///< the last seq sent (of the subtree)
    bool opened = false;
  };
  auto st = std::make_shared<stream_state>(stream_state{cursor, after});
  auto id = rec.id;
  c.res.set_header("Cache-Control", "no-cache");
  c.res.set_header("X-Accel-Buffering", "no");
  c.res.set_chunked_content_provider(
    "text/event-stream", [this, st, id, rec](size_t, httplib::DataSink& sink) {
      for (;;) {
        auto gen = events_.generation();
        // Status first, then events: once terminal, everything up to the
        // terminal commit is in the read that follows.
        auto now = db_.execution(id);
        bool settled = !now || !is_stoppable(now->status);
        auto scan = subtree_events(rec, st->cursor, max_page);
        if (!scan)
          return false;
        std::string out;
        if (!st->opened) {
          st->opened = true;
          out = "retry: " + std::to_string(sse_retry_ms) + "\n\n";
        }
        for (auto& e : scan->events) {
          out += "id: " + std::to_string(e.seq) + "\nevent: " + to_string(e.type)
                 + "\ndata: " + dump_json(event_document(e)) + "\n\n";
          st->sent = e.seq;
        }
        // Past what it looked at, its subtree's or not.
        st->cursor = std::max(st->cursor, scan->last_seq);
        if (!out.empty() && !sink.write(out.data(), out.size()))
          return false;
        if (scan->full)
          continue; // more to replay
        if (settled) {
          json end{{"execution_id", id},
                   {"status", now ? json(to_string(now->status)) : json(nullptr)},
                   {"last_seq", st->sent}};
          auto last = "event: end\ndata: " + dump_json(end) + "\n\n";
          if (!sink.write(last.data(), last.size()))
            return false;
          sink.done();
          return true;
        }
        if (!out.empty())
          return true; // let httplib flush; it calls again
        if (!events_.wait(gen, sse_keepalive)) {
          sink.done(); // shutting down
          return true;
        }
        if (events_.generation() == gen) {
          static const std::string keepalive = ": keep-alive\n\n";
          if (!sink.write(keepalive.data(), keepalive.size()))
            return false;
          return true;
        }
      }
    });
}

} // namespace canopy::core::api
