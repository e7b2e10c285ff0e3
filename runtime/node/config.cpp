#include "runtime/node/config.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/secrets.hpp"

namespace canopy::core {

namespace {

// -- constants -----------------------------------------------------------------

/// The largest configuration or tools file read, in bytes.
constexpr size_t max_config_bytes = 8u * 1024u * 1024u;

constexpr const char* config_keys = "home, listen, users, allow_inline_commands, max_parallel, "
                                    "max_request_bytes, tools, cluster, quotas, tls_cert, tls_key, "
                                    "insecure_http, retention, providers";

constexpr const char* quota_keys = "live_executions, graphs";

constexpr const char* user_keys = "token, token_file, token_env";

constexpr const char* cluster_keys = "listen, secret, heartbeat, timeout, tls";

constexpr const char* tls_keys = "certificate, key, ca";

// -- helpers -------------------------------------------------------------------

/// Collects every error of one configuration document.
class config_parser {
public:
  /// `base_dir`: the folder relative `token_file` paths start from.
  config_parser(std::vector<graph_error>& errors, std::string base_dir)
    : errors_(errors), base_dir_(std::move(base_dir)) {
    // nop
  }

  void fail(std::string path, std::string message) {
    errors_.push_back(graph_error{std::move(path), std::move(message), {}});
  }

  /// True when `key` is the `$schema` key (checked: a string); the caller
  /// skips it.
  bool schema_key_at(const std::string& key, const json& val, const std::string& path) {
    if (key != schema_key)
      return false;
    if (!val.is_string())
      fail(path, "expected a string (the URL or path of a JSON Schema), " + got(val));
    return true;
  }

  /// Parses a full node configuration into `cfg`.
  void node(const json& doc, node_config& cfg) {
    if (!doc.is_object()) {
      fail("", "a configuration must be a JSON object, " + got(doc));
      return;
    }
    for (auto& [key, val] : doc.items()) {
      auto path = "/" + escape_pointer(key);
      if (schema_key_at(key, val, path))
        continue;
      if (key == "home") {
        if (auto s = non_empty_string(val, path, "a folder"))
          cfg.home = *s;
      } else if (key == "listen") {
        if (auto s = host_port(val, path))
          cfg.listen = *s;
      } else if (key == "users") {
        users(val, path, cfg);
      } else if (key == "allow_inline_commands") {
        if (val.is_boolean())
          cfg.allow_inline_commands = val.get<bool>();
        else
          fail(path, "expected true or false, " + got(val));
      } else if (key == "max_parallel") {
        if (auto n = positive_integer(val, path))
          cfg.max_parallel = *n;
      } else if (key == "max_request_bytes") {
        if (auto n = positive_integer(val, path))
          cfg.max_request_bytes = *n;
      } else if (key == "tools") {
        cfg.tools = parse_tools(val, path, errors_);
      } else if (key == "providers") {
        cfg.providers = parse_providers(val, path, base_dir_, errors_);
      } else if (key == "cluster") {
        cfg.cluster = cluster(val, path, false);
      } else if (key == "quotas") {
        quotas(val, path, cfg.quotas);
      } else if (key == "tls_cert" || key == "tls_key") {
        if (auto s = non_empty_string(val, path, "a PEM file"))
          (key == "tls_cert" ? cfg.tls_cert : cfg.tls_key) = relative_to_file(*s);
      } else if (key == "insecure_http") {
        if (val.is_boolean())
          cfg.insecure_http = val.get<bool>();
        else
          fail(path, "expected true or false, " + got(val));
      } else if (key == "retention") {
        if (auto r = retention_from_json(val, path))
          cfg.retention = std::move(*r);
        else
          fail_with(r.error());
      } else {
        fail(path, "unknown key '" + key + "' (expected one of: " + config_keys + ")");
      }
    }
    // HTTPS needs both files.
    for (auto [have, other, missing] : {std::make_tuple(&cfg.tls_cert, &cfg.tls_key, "tls_key"),
                                        std::make_tuple(&cfg.tls_key, &cfg.tls_cert, "tls_cert")})
      if (!have->empty() && other->empty() && !doc.contains(missing))
        fail(std::string{"/"} + missing,
             std::string{"missing '"} + missing
               + "' (a PEM file): HTTPS needs both tls_cert and tls_key");
  }

  /// Parses the config of a local `run`/`resume` into `cfg` (only `tools`
  /// and `providers`: the rest is a node's).
  void run_file(const json& doc, node_config& cfg) {
    if (!doc.is_object()) {
      fail("", "a configuration must be a JSON object, " + got(doc));
      return;
    }
    for (auto& [key, val] : doc.items()) {
      auto path = "/" + escape_pointer(key);
      if (schema_key_at(key, val, path))
        continue;
      if (key == "tools")
        cfg.tools = parse_tools(val, path, errors_);
      else if (key == "providers")
        cfg.providers = parse_providers(val, path, base_dir_, errors_);
      else
        fail(path, "unknown key '" + key + "' (a local run reads only: tools, providers; the "
                   "other keys are a server's)");
    }
  }

  /// Parses a worker's tools file into `cfg` (only `tools` and `cluster.secret`).
  void tools_file(const json& doc, node_config& cfg) {
    if (!doc.is_object()) {
      fail("", "a tools file must be a JSON object such as {\"tools\": {...}}, " + got(doc));
      return;
    }
    for (auto& [key, val] : doc.items()) {
      auto path = "/" + escape_pointer(key);
      if (schema_key_at(key, val, path))
        continue;
      if (key == "tools")
        cfg.tools = parse_tools(val, path, errors_);
      else if (key == "cluster")
        cfg.cluster = cluster(val, path, true);
      else
        fail(path, "unknown key '" + key + "' (a tools file holds only: tools, cluster)");
    }
  }

private:
  /// `path` from the config file's folder when it is relative.
  std::string relative_to_file(const std::string& path) const {
    return path.front() == '/' || base_dir_.empty() ? path : base_dir_ + "/" + path;
  }

  /// An error of a nested parser, whose message starts with its JSON path.
  void fail_with(const caf::error& err) {
    auto text = message_of(err);
    auto colon = text.find(": ");
    if (!text.empty() && text.front() == '/' && colon != std::string::npos)
      fail(text.substr(0, colon), text.substr(colon + 2));
    else
      fail("", text);
  }

  std::optional<std::string> non_empty_string(const json& v, const std::string& path,
                                              const char* what) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      fail(path, std::string{"expected "} + what + " (a non-empty string), "
                   + (v.is_string() ? std::string{"got an empty string"} : got(v)));
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  std::optional<std::string> host_port(const json& v, const std::string& path) {
    if (!v.is_string()) {
      fail(path, "expected HOST:PORT (a string such as \"127.0.0.1:8080\"), " + got(v));
      return std::nullopt;
    }
    auto text = v.get<std::string>();
    std::string host;
    int port = 0;
    if (!split_host_port(text, host, port)) {
      fail(path, "expected HOST:PORT with a port from 0 to 65535 (e.g. \"127.0.0.1:8080\" or "
                 "\"[::1]:8080\"), got '" + text + "'");
      return std::nullopt;
    }
    return text;
  }

  std::optional<size_t> positive_integer(const json& v, const std::string& path) {
    if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() > 0)) {
      auto n = v.get<uint64_t>();
      if (n > 0 && n <= std::numeric_limits<size_t>::max())
        return static_cast<size_t>(n);
    }
    fail(path, "expected an integer >= 1, " + got(v));
    return std::nullopt;
  }

  std::optional<millis> positive_duration(const json& v, const std::string& path) {
    auto d = duration_from_json(v);
    if (!d) {
      fail(path, message_of(d.error()));
      return std::nullopt;
    }
    if (d->count() == 0) {
      fail(path, "must be longer than 0ms");
      return std::nullopt;
    }
    return *d;
  }

  void users(const json& v, const std::string& path, node_config& cfg) {
    if (!v.is_object()) {
      fail(path, "expected an object of users (name -> {\"token\": \"...\"}), " + got(v));
      return;
    }
    std::map<std::string, std::string> owner_of; // token → first user holding it
    for (auto& [name, val] : v.items()) {
      auto upath = path + "/" + escape_pointer(name);
      if (name.empty())
        fail(upath, "a user name must not be empty");
      if (!val.is_object()) {
        fail(upath, "expected an object such as {\"token\": \"...\"}, " + got(val));
        continue;
      }
      auto found = user_token(val, upath);
      if (!found)
        continue;
      auto& [token, kpath] = *found;
      auto [it, fresh] = owner_of.emplace(token, name);
      if (!fresh) {
        fail(kpath, "token is already used by user '" + it->second
                      + "' (tokens must be unique)");
        continue;
      }
      if (!name.empty())
        cfg.users[name] = token;
    }
  }

  /// A user's token from exactly one of `token`, `token_file` (relative to
  /// the config file's folder) and `token_env`.
  /// @returns the token and the path of its key, or nothing (errors added).
  std::optional<std::pair<std::string, std::string>> user_token(const json& val,
                                                                const std::string& upath) {
    std::vector<std::string> given;
    std::optional<std::pair<std::string, std::string>> result;
    for (auto& [key, x] : val.items()) {
      auto kpath = upath + "/" + escape_pointer(key);
      if (key != "token" && key != "token_file" && key != "token_env") {
        fail(kpath, "unknown key '" + key + "' (expected one of: " + user_keys + ")");
        continue;
      }
      given.push_back(key);
      auto text = non_empty_string(x, kpath, key == "token"        ? "a bearer token"
                                             : key == "token_file" ? "a file path"
                                                                   : "a variable name");
      if (!text)
        continue;
      caf::expected<std::string> token{*text};
      if (key == "token") {
        if (auto why = token_problem(*text); !why.empty())
          token = make_error(runtime_errc::invalid_input, why);
      } else if (key == "token_file") {
        auto file = text->front() == '/' || base_dir_.empty() ? *text : base_dir_ + "/" + *text;
        token = read_token_file(file);
      } else {
        token = read_token_env(*text);
      }
      if (token)
        result.emplace(std::move(*token), kpath);
      else
        fail(kpath, message_of(token.error()));
    }
    if (given.empty()) {
      fail(upath, "missing 'token' (a non-empty string), or 'token_file' (a file holding it) "
                  "or 'token_env' (an environment variable holding it)");
      return std::nullopt;
    }
    if (given.size() > 1) {
      fail(upath, "expected exactly one of " + std::string{user_keys} + ", got "
                    + given[0] + " and " + given[1]);
      return std::nullopt;
    }
    return result;
  }

  /// The `quotas` object: integers >= 0 (0: unlimited).
  void quotas(const json& v, const std::string& path, quota_config& q) {
    if (!v.is_object()) {
      fail(path, "expected an object such as {\"live_executions\": 1000, \"graphs\": 1000}, "
                   + got(v));
      return;
    }
    for (auto& [key, val] : v.items()) {
      auto kpath = path + "/" + escape_pointer(key);
      size_t* target = key == "live_executions" ? &q.live_executions
                       : key == "graphs"        ? &q.graphs
                                                : nullptr;
      if (target == nullptr)
        fail(kpath, "unknown key '" + key + "' (expected one of: " + quota_keys + ")");
      else if (val.is_number_unsigned() || (val.is_number_integer() && val.get<int64_t>() >= 0))
        *target = static_cast<size_t>(val.get<uint64_t>());
      else
        fail(kpath, "expected an integer >= 0 (0: unlimited), " + got(val));
    }
  }

  /// A config's `cluster` section; a tools file's (`in_tools_file`) has no
  /// `listen`: a worker listens on nothing.
  std::optional<cluster_config> cluster(const json& v, const std::string& path,
                                        bool in_tools_file) {
    if (!v.is_object()) {
      fail(path, "expected an object such as {\"secret\": \"...\"}, " + got(v));
      return std::nullopt;
    }
    cluster_config c;
    bool heartbeat_set = false;
    bool timeout_set = false;
    for (auto& [key, val] : v.items()) {
      auto kpath = path + "/" + escape_pointer(key);
      if (key == "secret") {
        if (auto s = non_empty_string(val, kpath, "a secret"))
          c.secret = *s;
      } else if (in_tools_file && key == "listen") {
        fail(kpath, "unknown key 'listen' (a tools file's cluster holds only: secret, "
                    "heartbeat, timeout, tls)");
      } else if (key == "tls") {
        if (val.is_boolean() && !val.get<bool>())
          c.tls_disabled = true;
        else
          c.tls = tls(val, kpath);
      } else if (key == "listen") {
        if (auto s = host_port(val, kpath))
          c.listen = *s;
      } else if (key == "heartbeat") {
        if (auto d = positive_duration(val, kpath)) {
          c.heartbeat = *d;
          heartbeat_set = true;
        }
      } else if (key == "timeout") {
        if (auto d = positive_duration(val, kpath)) {
          c.timeout = *d;
          timeout_set = true;
        }
      } else {
        fail(kpath, "unknown key '" + key + "' (expected one of: " + cluster_keys + ")");
      }
    }
    // A node is lost after `timeout` without a heartbeat: it needs room for one.
    if (c.heartbeat >= c.timeout && (heartbeat_set || timeout_set))
      fail(path + (heartbeat_set ? "/heartbeat" : "/timeout"),
           "the heartbeat (" + to_duration_string(c.heartbeat)
             + ") must be shorter than the timeout (" + to_duration_string(c.timeout) + ")");
    return c;
  }

  /// `cluster.tls`: the three PEM files, all of them (or `false`, handled by
  /// the caller).
  std::optional<tls_files> tls(const json& v, const std::string& path) {
    if (!v.is_object()) {
      fail(path, "expected {\"certificate\": FILE, \"key\": FILE, \"ca\": FILE}, or false "
                 "for plain TCP, " + got(v));
      return std::nullopt;
    }
    tls_files t;
    bool complete = true;
    for (auto [key, out] : {std::make_pair("certificate", &t.certificate),
                            std::make_pair("key", &t.key), std::make_pair("ca", &t.ca)}) {
      if (!v.contains(key)) {
        fail(path + "/" + key, std::string{"missing '"} + key
                                 + "' (a PEM file): TLS needs all of " + tls_keys);
        complete = false;
      } else if (auto s = non_empty_string(v.at(key), path + "/" + key, "a PEM file")) {
        // Relative to the file's folder, as `token_file`.
        *out = relative_to_file(*s);
      } else {
        complete = false;
      }
    }
    for (auto& [key, val] : v.items())
      if (key != "certificate" && key != "key" && key != "ca") {
        fail(path + "/" + escape_pointer(key),
             "unknown key '" + key + "' (expected one of: " + tls_keys + ")");
        complete = false;
      }
    if (!complete)
      return std::nullopt;
    return t;
  }

  std::vector<graph_error>& errors_;
  std::string base_dir_;
};

config_result failed(std::string path, std::string message) {
  config_result result;
  result.errors.push_back(graph_error{std::move(path), std::move(message), {}});
  return result;
}

config_result finish(node_config cfg, std::vector<graph_error> errors) {
  config_result result;
  if (errors.empty())
    result.value = std::move(cfg);
  else
    result.errors = std::move(errors);
  return result;
}

/// Reads and parses the JSON file `path` (a regular file, strict JSON);
/// `what` names it in messages.
caf::expected<json> read_json_file(const std::string& path, const char* what) {
  auto text = read_regular_file(path, max_config_bytes, what);
  if (!text)
    return std::move(text.error());
  auto doc = parse_json_text(*text);
  if (!doc)
    return make_error(persistence_errc::invalid_graph,
                      std::string{"in "} + what + " '" + path + "': " + message_of(doc.error()));
  return doc;
}

/// The folder of the file `path` (empty: the working directory).
std::string folder_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string{}
         : slash == 0              ? std::string{"/"}
                                   : path.substr(0, slash);
}

/// Reads the file `path` and parses it with `parse`, one of the parser's
/// readers of a whole file.
config_result load_file(const std::string& path, const char* what,
                        void (config_parser::*parse)(const json&, node_config&)) {
  auto doc = read_json_file(path, what);
  if (!doc)
    return failed("", message_of(doc.error()));
  try {
    node_config cfg;
    std::vector<graph_error> errors;
    config_parser parser{errors, folder_of(path)};
    (parser.*parse)(*doc, cfg);
    return finish(std::move(cfg), std::move(errors));
  } catch (const std::exception& ex) {
    return failed("", std::string{"cannot read "} + what + ": " + ex.what());
  }
}

} // namespace

// -- parsing -------------------------------------------------------------------

config_result parse_node_config(const json& doc, const std::string& base_dir) {
  try {
    node_config cfg;
    std::vector<graph_error> errors;
    config_parser{errors, base_dir}.node(doc, cfg);
    return finish(std::move(cfg), std::move(errors));
  } catch (const std::exception& ex) {
    return failed("", std::string{"cannot read configuration: "} + ex.what());
  }
}

config_result load_node_config(const std::string& path) {
  auto doc = read_json_file(path, "config file");
  if (!doc)
    return failed("", message_of(doc.error()));
  return parse_node_config(*doc, folder_of(path));
}

config_result load_run_config(const std::string& path) {
  return load_file(path, "config file", &config_parser::run_file);
}

config_result load_tools_file(const std::string& path) {
  return load_file(path, "tools file", &config_parser::tools_file);
}

bool split_host_port(const std::string& text, std::string& host, int& port) {
  std::string h;
  std::string digits;
  if (!text.empty() && text.front() == '[') {
    // [IPv6]:PORT
    auto close = text.find(']');
    if (close == std::string::npos || close == 1 || close + 1 >= text.size()
        || text[close + 1] != ':')
      return false;
    h = text.substr(1, close - 1);
    digits = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return false;
    h = text.substr(0, colon);
    digits = text.substr(colon + 1);
    // A bare IPv6 address is ambiguous: it must be written in brackets.
    if (h.find(':') != std::string::npos)
      return false;
  }
  for (auto c : h)
    if (std::isspace(static_cast<unsigned char>(c)) || c == '[' || c == ']' || c == '/')
      return false;
  if (digits.empty() || digits.size() > 5)
    return false;
  long n = 0;
  for (auto c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
    n = n * 10 + (c - '0');
  }
  if (n > 65535)
    return false;
  host = std::move(h);
  port = static_cast<int>(n);
  return true;
}

} // namespace canopy::core
