#include "runtime/node/cluster_transport.hpp"

#include "actors/tls.hpp"

namespace canopy::core {

std::vector<graph_error> check_cluster_transport(const std::optional<cluster_config>& cluster,
                                                 const std::string& host,
                                                 const std::string& endpoint,
                                                 const std::string& file) {
  std::vector<graph_error> out;
  if (cluster && cluster->tls) {
    for (auto& p : check_tls_files(*cluster->tls))
      out.push_back(graph_error{"/cluster/tls/" + p.field, p.message, {}});
    return out;
  }
  if (is_loopback_host(host) || (cluster && cluster->tls_disabled))
    return out;
  // Secure by default: the secret and every step would cross the network
  // in clear.
  out.push_back(graph_error{
    "/cluster/tls",
    endpoint + " is not on a loopback address, and without TLS the cluster secret and "
      "every step cross the network in clear: put \"cluster\": {\"tls\": {\"certificate\": "
      "FILE, \"key\": FILE, \"ca\": FILE}} in " + file + " (see runtime/docs/guide/cluster.md), or "
      "\"tls\": false to accept plain TCP",
    {}});
  return out;
}

} // namespace canopy::core
