// `canopy serve`: the node configuration read, the flags applied over it and
// checked (ports, cluster secret, TLS, users), then the server run.

#include <cstdlib>
#include <iostream>

#include "runtime/cli/cli_common.hpp"
#include "runtime/node/cluster_transport.hpp"
#include "runtime/node/config.hpp"
#include "runtime/server/http_tls.hpp"
#include "runtime/server/server.hpp"

namespace canopy::core::cli {

// -- serve ----------------------------------------------------------------------------------

namespace {

/// Where a setting of the node config goes, for an error that asks for one.
std::string config_place(const serve_flags& f) {
  return f.config.empty() ? std::string{"a file passed with --config FILE"}
                          : "the file of --config (" + f.config + ")";
}

/// Reads the file of `--config` (if any) into `opts.config`.
/// @returns 0, or the exit code after saying what is wrong, path by path.
int read_config(const serve_flags& f, server_options& opts) {
  if (f.config.empty())
    return 0;
  auto parsed = load_node_config(f.config);
  if (!parsed) {
    for (auto& e : parsed.errors) {
      // `error: PATH: MESSAGE`; without a path, the file is the place.
      auto where = !e.path.empty() ? e.path + ": "
                   : e.message.find(f.config) == std::string::npos ? f.config + ": "
                                                                   : std::string{};
      std::cerr << "error: " << where << e.message << "\n";
    }
    if (parsed.errors.empty())
      std::cerr << "error: " << f.config << ": unusable configuration\n";
    return exit_usage;
  }
  opts.config = std::move(*parsed.value);
  return 0;
}

/// Applies `--listen` and `--cluster` over the config. @returns 0, or the
/// exit code of a usage error.
int apply_ports(const serve_flags& f, node_config& cfg) {
  std::string host;
  int port = 0;
  if (!f.listen.empty()) {
    if (!split_host_port(f.listen, host, port))
      return usage_error("--listen '" + f.listen + "': expected HOST:PORT");
    cfg.listen = f.listen;
  }
  if (!f.cluster.empty()) {
    if (!split_host_port(f.cluster, host, port))
      return usage_error("--cluster '" + f.cluster + "': expected HOST:PORT");
    if (!cfg.cluster)
      cfg.cluster.emplace();
    cfg.cluster->listen = f.cluster;
  }
  return 0;
}

/// A cluster port needs the cluster secret (runtime/docs/reference/config.md#cluster),
/// TLS files that load, and no cleartext off loopback unless the config says
/// `"tls": false`. @returns 0, or the exit code after saying what is wrong.
int check_cluster_port(const serve_flags& f, node_config& cfg) {
  if (!cfg.cluster || cfg.cluster->listen.empty())
    return 0;
  if (cfg.cluster->secret.empty()) {
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      cfg.cluster->secret = env;
    else
      return usage_error("the cluster port " + cfg.cluster->listen
                         + " needs a secret that workers present: put \"cluster\": "
                           "{\"secret\": \"...\"} in the file of --config FILE, or set "
                           "$CANOPY_CLUSTER_SECRET");
  }
  std::string host;
  int port = 0;
  split_host_port(cfg.cluster->listen, host, port);
  auto errors = check_cluster_transport(cfg.cluster, host,
                                        "the cluster port " + cfg.cluster->listen,
                                        config_place(f));
  for (auto& e : errors)
    std::cerr << "error: " << e.path << ": " << e.message << "\n";
  return errors.empty() ? 0 : exit_usage;
}

/// HTTPS files that load into `opts.tls`, and no plain HTTP off loopback
/// unless the config says `"insecure_http": true`. @returns 0, or the exit
/// code after saying what is wrong.
int check_http_port(const serve_flags& f, server_options& opts) {
  std::string host;
  int port = 0;
  split_host_port(opts.config.listen, host, port);
  auto transport = load_http_transport(opts.config, host, config_place(f));
  for (auto& e : transport.errors)
    std::cerr << "error: " << e.path << ": " << e.message << "\n";
  if (!transport.errors.empty())
    return exit_usage;
  opts.tls = std::move(transport.tls);
  return 0;
}

} // namespace

/// `canopy serve`: reads the config, applies the flags over it, and runs
/// the server until SIGTERM/SIGINT. `max_parallel_given` says whether
/// `--max-parallel` was on the command line.
int cmd_serve(const global_options& g, bool max_parallel_given, const serve_flags& f) {
  server_options opts;
  auto& cfg = opts.config;
  if (int rc = read_config(f, opts))
    return rc;
  if (int rc = apply_ports(f, cfg))
    return rc;
  if (int rc = check_cluster_port(f, cfg))
    return rc;
  if (int rc = check_http_port(f, opts))
    return rc;
  if (max_parallel_given)
    cfg.max_parallel = g.max_parallel;
  // --home, else the file's home, else $CANOPY_HOME, else ./.canopy.
  if (!g.home.empty())
    cfg.home = g.home;
  else if (cfg.home.empty())
    cfg.home = default_home();
  if (cfg.users.empty())
    if (auto token = std::getenv("CANOPY_TOKEN"); token && *token)
      cfg.users["default"] = token;
  if (cfg.users.empty())
    return usage_error("no users: every request needs a token; add "
                       "\"users\": {\"NAME\": {\"token\": \"...\"}} to the file of "
                       "--config FILE, or set $CANOPY_TOKEN for a user named 'default'");
  opts.resume_interrupted = f.resume_interrupted;
  return run_server(opts);
}

} // namespace canopy::core::cli
