// prometheusRules: every recording rule, one group per area, in the order
// the alerts' and dashboards' records build on each other.
(import 'node.libsonnet')
+ (import 'fleet.libsonnet')
+ (import 'joins.libsonnet')
+ (import 'comparisons.libsonnet')
+ (import 'peer_probes.libsonnet')
+ (import 'lldp_rails.libsonnet')
