#include "actors/llm/chat_client.hpp"

#include <chrono>
#include <random>

#include <httplib.h>

#include "actors/llm/chat_retry.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

double jitter() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

} // namespace

chat_call::chat_call(chat_provider provider, chat_request request,
                     std::function<void(std::string_view)> on_text, int64_t timeout_ms)
  : provider_(std::move(provider)),
    request_(std::move(request)),
    on_text_(std::move(on_text)),
    timeout_ms_(timeout_ms) {
}

chat_call::~chat_call() = default;

void chat_call::cancel() {
  cancelled_ = true;
  std::lock_guard<std::mutex> guard{mtx_};
  if (client_ != nullptr)
    client_->stop(); // shuts the socket down under the reading thread
  cv_.notify_all();
}

bool chat_call::pause(int64_t ms) {
  std::unique_lock<std::mutex> guard{mtx_};
  cv_.wait_for(guard, std::chrono::milliseconds(ms), [this] { return cancelled_.load(); });
  return !cancelled_;
}

chat_result chat_call::run() {
  auto start = steady_ms();
  chat_result last;
  for (int tries = 1;; ++tries) {
    int status = 0;
    std::string retry_after;
    auto r = try_once(status, retry_after);
    r.tries = tries;
    if (r.outcome != chat_outcome::failed || cancelled_)
      return cancelled_ ? chat_result{chat_outcome::cancelled, {}, {}, tries} : r;
    auto left = timeout_ms_ < 0 ? int64_t{-1} : timeout_ms_ - (steady_ms() - start);
    auto next = decide_chat_retry(status, parse_retry_after(retry_after, wall_ms()), tries,
                                  provider_.max_retries, left, jitter());
    if (!next.again)
      return r;
    if (!pause(next.delay_ms))
      return {chat_outcome::cancelled, {}, {}, tries};
  }
}

chat_result chat_call::try_once(int& status, std::string& retry_after) {
  chat_result out;
  std::string origin, prefix;
  if (!split_base_url(provider_.base_url, origin, prefix)) {
    out.error = "provider '" + provider_.name + "': base_url is not an http(s) URL";
    return out;
  }
  httplib::Client client{origin};
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(300, 0);
  client.set_write_timeout(30, 0);
  client.set_tcp_nodelay(true);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (cancelled_) {
      out.outcome = chat_outcome::cancelled;
      return out;
    }
    client_ = &client;
  }
  std::string error_body;
  chat_stream_decoder decoder{on_text_};
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + "/chat/completions";
  req.body = request_body(request_).dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", request_.stream ? "text/event-stream" : "application/json");
  if (!provider_.api_key.empty())
    req.set_header("Authorization", "Bearer " + provider_.api_key);
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    retry_after = res.get_header_value("Retry-After");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancelled_)
      return false;
    if (status != 200 || !request_.stream) {
      if (error_body.size() < (1u << 20))
        error_body.append(data, n);
      return true;
    }
    return decoder.feed(std::string_view{data, n});
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = client.send(req, res, err);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    client_ = nullptr;
  }
  if (cancelled_) {
    out.outcome = chat_outcome::cancelled;
    return out;
  }
  if (!decoder.error().empty()) {
    out.error = decoder.error();
    return out;
  }
  if (!sent) {
    status = 0;
    out.error = "provider '" + provider_.name + "' could not be reached: " + httplib::to_string(err);
    return out;
  }
  if (status != 200) {
    // A provider may quote the key it refused: never let it reach a record.
    out.error = redact(provider_error(status, error_body), provider_.api_key);
    return out;
  }
  if (request_.stream) {
    if (!decoder.done()) {
      status = 0; // cut off before its end: a connection error
      out.error = "provider '" + provider_.name + "' ended the stream before its end";
      return out;
    }
    out.reply = decoder.take();
  } else {
    auto reply = parse_completion(error_body);
    if (!reply) {
      out.error = message_of(reply.error());
      return out;
    }
    out.reply = std::move(*reply);
  }
  out.outcome = chat_outcome::completed;
  return out;
}

} // namespace canopy::core
