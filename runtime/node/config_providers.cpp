// The node config's `providers`: where `llm` steps find their models.
//
//   "providers": {"default": {"base_url": "http://127.0.0.1:8080/v1",
//                             "api_key_env": "OPENAI_API_KEY", "max_retries": 5,
//                             "max_parallel": 8, "price": {"input": 0.15, "output": 0.6}}}
//
// A key comes from `api_key_env` or `api_key_file` (runtime/node/secrets.hpp has
// the rules of both), never from the config text itself, and never travels
// in clear off the host: a provider with a key and a non-loopback address
// must be `https://`. Errors name the key's JSON path and never the key.

#include "runtime/node/config.hpp"

#include <optional>

#include "actors/llm/chat_client.hpp"
#include "actors/tls.hpp"
#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "runtime/node/secrets.hpp"

namespace canopy::core {

namespace {

constexpr const char* provider_keys = "base_url, api_key_env, api_key_file, max_retries, max_parallel, price";

/// The host of `origin` (`http://HOST:PORT`, `http://[V6]:PORT`), unbracketed.
std::string host_of(const std::string& origin) {
  auto host = origin.substr(origin.find("://") + 3);
  if (!host.empty() && host.front() == '[')
    return host.substr(1, host.find(']') - 1);
  return host.substr(0, host.find(':'));
}

void add_error(std::vector<graph_error>& errors, std::string path, std::string message) {
  errors.push_back(graph_error{std::move(path), std::move(message), {}});
}

// -- one provider --------------------------------------------------------------

/// Reads the key `api_key_env` or `api_key_file` (`key`) into `p.api_key`;
/// a relative file is found in `base_dir`. @returns false after an error.
bool read_api_key(chat_provider& p, const std::string& key, const json& val,
                  const std::string& kpath, const std::string& base_dir,
                  std::vector<graph_error>& errors) {
  if (!val.is_string() || val.get_ref<const std::string&>().empty()) {
    add_error(errors, kpath,
              "expected " + std::string{key == "api_key_env" ? "an environment variable's "
                                                               "name"
                                                             : "a file path"}
                + ", " + got(val));
    return false;
  }
  auto where = val.get<std::string>();
  if (key == "api_key_file" && where.front() != '/' && !base_dir.empty())
    where = base_dir + "/" + where;
  auto secret = key == "api_key_env" ? read_token_env(where) : read_token_file(where);
  if (!secret) {
    add_error(errors, kpath, message_of(secret.error()));
    return false;
  }
  if (!p.api_key.empty()) {
    add_error(errors, kpath, "a provider has one key: api_key_env or api_key_file");
    return false;
  }
  p.api_key = std::move(*secret);
  return true;
}

/// Reads the provider field `key` into `p`. @returns false after an error.
bool read_provider_field(chat_provider& p, const std::string& key, const json& val,
                         const std::string& kpath, const std::string& base_dir,
                         std::vector<graph_error>& errors) {
  if (key == "base_url") {
    std::string origin, prefix;
    if (!val.is_string() || !split_base_url(val.get<std::string>(), origin, prefix)) {
      add_error(errors, kpath, "expected an http:// or https:// URL such as "
                               "http://127.0.0.1:8080/v1, " + got(val));
      return false;
    }
    p.base_url = val.get<std::string>();
  } else if (key == "api_key_env" || key == "api_key_file") {
    return read_api_key(p, key, val, kpath, base_dir, errors);
  } else if (key == "max_retries") {
    auto n = val.is_number_integer() ? val.get<int64_t>() : -1;
    if (n < 0 || n > 20) {
      add_error(errors, kpath, "expected an integer from 0 to 20, " + got(val));
      return false;
    }
    p.max_retries = static_cast<int>(n);
  } else if (key == "max_parallel") {
    auto n = val.is_number_integer() ? val.get<int64_t>() : -1;
    if (n < 1 || n > 1024) {
      add_error(errors, kpath, "expected an integer from 1 to 1024 (calls at once on this "
                               "node), " + got(val));
      return false;
    }
    p.max_parallel = static_cast<size_t>(n);
  } else if (key == "price") {
    // Per million tokens, in the unit of the graphs' `budget`.
    auto number = [](const json& x) { return x.is_number() && x.get<double>() >= 0; };
    if (!val.is_object() || val.size() != 2 || !val.contains("input")
        || !val.contains("output") || !number(val["input"]) || !number(val["output"])) {
      add_error(errors, kpath, "expected {\"input\": N, \"output\": N} (non-negative prices "
                               "per million tokens), " + got(val));
      return false;
    }
    p.price = token_price{val["input"].get<double>(), val["output"].get<double>()};
  } else {
    add_error(errors, kpath, "unknown key '" + key + "' (a provider has: " + provider_keys + ")");
    return false;
  }
  return true;
}

/// Reads provider `name`, defined by the object `def` at `ppath`.
/// @returns the provider, or nothing after an error.
std::optional<chat_provider> parse_provider(const std::string& name, const json& def,
                                            const std::string& ppath,
                                            const std::string& base_dir,
                                            std::vector<graph_error>& errors) {
  chat_provider p;
  p.name = name;
  bool ok = true;
  for (auto& [key, val] : def.items())
    if (!read_provider_field(p, key, val, ppath + "/" + escape_pointer(key), base_dir, errors))
      ok = false;
  if (p.base_url.empty() && !def.contains("base_url")) {
    add_error(errors, ppath, "missing 'base_url' (e.g. \"http://127.0.0.1:8080/v1\")");
    ok = false;
  }
  if (ok && !p.api_key.empty() && p.base_url.rfind("http://", 0) == 0) {
    std::string origin, prefix;
    split_base_url(p.base_url, origin, prefix);
    if (!is_loopback_host(host_of(origin))) {
      add_error(errors, ppath + "/base_url", "an API key never travels in clear off this "
                                             "host: use https:// (plain http:// is for a "
                                             "loopback address)");
      ok = false;
    }
  }
  if (!ok)
    return std::nullopt;
  return p;
}

} // namespace

std::map<std::string, chat_provider> parse_providers(const json& v, const std::string& path,
                                                     const std::string& base_dir,
                                                     std::vector<graph_error>& errors) {
  std::map<std::string, chat_provider> out;
  if (!v.is_object()) {
    add_error(errors, path, "expected an object (provider name → {base_url, ...}), " + got(v));
    return out;
  }
  for (auto& [name, def] : v.items()) {
    auto ppath = path + "/" + escape_pointer(name);
    if (!is_name(name)) {
      add_error(errors, ppath,
                "invalid provider name '" + name + "' (use letters, digits, '_' and '-')");
      continue;
    }
    if (!def.is_object()) {
      add_error(errors, ppath, "expected an object such as {\"base_url\": "
                               "\"http://127.0.0.1:8080/v1\"}, " + got(def));
      continue;
    }
    if (auto p = parse_provider(name, def, ppath, base_dir, errors))
      out.emplace(name, std::move(*p));
  }
  return out;
}

} // namespace canopy::core
