#pragma once

// One model call over HTTP: `POST {base_url}/chat/completions`, streamed,
// with the provider's retries inside it (chat_retry.hpp). It runs on the
// calling thread until the answer is complete, the call failed for good, or
// another thread cancelled it; a cancel closes the connection at once, so
// the provider sees the client go away and stops generating.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "actors/llm/base_url.hpp"
#include "actors/llm/chat_codec.hpp"

namespace httplib {
class Client;
} // namespace httplib

namespace canopy::core {

/// Where a model is: a provider of the node config.
struct chat_provider {
  std::string name;
  std::string base_url; ///< e.g. `http://127.0.0.1:8080/v1`
  /// Sent as `Authorization: Bearer KEY`; empty: none. It never appears in
  /// an error message of this client.
  std::string api_key;
  int max_retries = 5; ///< tries after the first, for 429, 5xx and connection errors
  /// Calls at once on one node; more wait `queued` (the node config's
  /// runtime gives each provider a slot pool of this size).
  size_t max_parallel = 8;
  /// What its tokens cost (charged to the tree's `budget`); none: free.
  std::optional<token_price> price;
};

/// How a call ended.
enum class chat_outcome : uint8_t {
  completed, ///< `reply` holds the answer
  failed,    ///< `error` says why (retries were used up, or a 4xx)
  cancelled, ///< `cancel` was called
};

struct chat_result {
  chat_outcome outcome = chat_outcome::failed;
  chat_reply reply;
  std::string error;
  int tries = 0; ///< requests sent
};

/// One model call. Create, `run` on one thread; `cancel` from any thread.
class chat_call {
public:
  /// @param on_text receives streamed content as it arrives (on the run thread)
  /// @param timeout_ms the attempt's time for every try and back-off together;
  ///        negative: none
  chat_call(chat_provider provider, chat_request request,
            std::function<void(std::string_view)> on_text, int64_t timeout_ms);
  ~chat_call();

  /// Sends the request, retrying as chat_retry.hpp says. @returns how it ended.
  chat_result run();

  /// Ends a running call: its connection is closed within milliseconds and
  /// `run` returns `cancelled`. Thread-safe; idempotent.
  void cancel();

private:
  /// One try. Sets `status` (0: no HTTP answer) and `retry_after`.
  chat_result try_once(int& status, std::string& retry_after);
  /// Sleeps `ms` unless cancelled. @returns false when cancelled.
  bool pause(int64_t ms);

  chat_provider provider_;
  chat_request request_;
  std::function<void(std::string_view)> on_text_;
  int64_t timeout_ms_;
  std::mutex mtx_;
  std::condition_variable cv_;
  httplib::Client* client_ = nullptr; ///< the try in flight (guarded by mtx_)
  std::atomic<bool> cancelled_{false};
};

} // namespace canopy::core
