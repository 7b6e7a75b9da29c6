// prometheusAlerts: every alert, one group per area (their records are in
// prometheusRules), and alertmanagerInhibitRules.
(import 'node.libsonnet')
+ (import 'fleet.libsonnet')
+ (import 'peer_probes.libsonnet')
+ (import 'lldp_rails.libsonnet')
+ (import 'inhibit.libsonnet')
