#pragma once

// The node configuration of `canopy serve --config FILE` and `canopy worker
// --tools FILE` (runtime/docs/reference/config.md#node-config): plain data, parsed and validated with JSON paths.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/llm/chat_client.hpp"
#include "actors/tls.hpp"
#include "persistence/duration.hpp"
#include "persistence/graph.hpp"
#include "persistence/retention.hpp"
#include "persistence/tools.hpp"

namespace canopy::core {

/// The `cluster` object.
struct cluster_config {
  std::string listen;          ///< HOST:PORT; empty: no cluster port
  std::string secret;          ///< empty: `$CANOPY_CLUSTER_SECRET` applies
  millis heartbeat{1000};
  millis timeout{5000};
  /// `tls`: the node's certificate and key and the cluster's CA (all three
  /// or none; relative paths start from the config or tools file's folder);
  /// unset: plain TCP.
  std::optional<tls_files> tls;
  /// `"tls": false`: plain TCP on purpose, also on a non-loopback address
  /// (without it, a non-loopback cluster port or `--join` is refused).
  bool tls_disabled = false;
};

/// The `quotas` object: what one user may hold at once; 0 is unlimited.
struct quota_config {
  /// Executions a user started or resumed over the API that are queued,
  /// running or stopping (their child executions are not counted).
  size_t live_executions = 1000;
  /// Graph names a user registered (`POST /v1/graphs`; versions count once).
  size_t graphs = 1000;
};

/// A node's configuration; defaults are runtime/docs/reference/config.md#node-config's.
struct node_config {
  std::string home;                        ///< empty: `--home`/`$CANOPY_HOME`/./.canopy
  std::string listen = "127.0.0.1:8080";   ///< HOST:PORT of the HTTP API
  /// User name → bearer token.
  std::map<std::string, std::string> users;
  bool allow_inline_commands = false;
  size_t max_parallel = 4;
  size_t max_request_bytes = 8u * 1024u * 1024u;
  tool_table tools;
  /// `providers`: the model providers of `llm` steps, by name.
  std::map<std::string, chat_provider> providers;
  std::optional<cluster_config> cluster;
  quota_config quotas;
  /// `tls_cert` and `tls_key`: the HTTP API's certificate (chain) and its
  /// unencrypted key, PEM files (both or neither; relative paths start from
  /// the config file's folder). Set: the API speaks HTTPS only.
  std::string tls_cert;
  std::string tls_key;
  /// `"insecure_http": true`: plain HTTP on purpose on a `listen` address
  /// that is not loopback (without it, such a `listen` needs `tls_cert`).
  bool insecure_http = false;
  /// `retention`: how long settled trees are kept, by their root's status,
  /// and how often the server prunes (`interval`); empty: kept for good.
  retention_rules retention;
};

/// Parses a `providers` object found at `path` (runtime/node/config_providers.cpp);
/// `api_key_file` paths are relative to `base_dir`. Each error goes to
/// `errors` with its JSON path; a provider with one is left out.
std::map<std::string, chat_provider> parse_providers(const nlohmann::json& v,
                                                     const std::string& path,
                                                     const std::string& base_dir,
                                                     std::vector<graph_error>& errors);

/// The outcome of parsing a configuration: the config, or every error found,
/// each with the JSON path of its key (e.g. `/tools/writer/timeout`).
struct config_result {
  std::optional<node_config> value;
  std::vector<graph_error> errors;
  explicit operator bool() const { return value.has_value(); }
};

/// Parses a node configuration document (unknown keys and bad values are
/// errors). A user's token is `token`, or read from `token_file` (a path
/// relative to `base_dir`; empty: the working directory) or `token_env`
/// (runtime/node/secrets.hpp has the rules); exactly one of them.
/// Reads those files and the environment; otherwise thread-safe.
config_result parse_node_config(const json& doc, const std::string& base_dir = {});

/// Reads and parses the file `path` (relative `token_file` paths start from
/// its folder); a missing file or malformed JSON is one error with path `""`.
config_result load_node_config(const std::string& path);

/// Reads the config file of a local `canopy run|resume --config FILE`: only
/// its `tools` and `providers` (any other key is an error with its path).
config_result load_run_config(const std::string& path);

/// Parses a worker's tools file: `{"tools": {...}, "cluster": {"secret": ...}}`
/// (only those keys; relative `cluster.tls` paths start from its folder).
/// @returns the config with `tools` (and `cluster`) set, or the errors.
config_result load_tools_file(const std::string& path);

/// Splits `HOST:PORT`. @returns false when it is not of that form (port 0..65535).
bool split_host_port(const std::string& text, std::string& host, int& port);

} // namespace canopy::core
