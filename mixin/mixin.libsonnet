// roce_exporter's monitoring mixin: the recording rules (prometheusRules),
// alerts (prometheusAlerts), Grafana dashboards (grafanaDashboards) and
// Alertmanager inhibit rules (alertmanagerInhibitRules) of the exporter.
// Parameters: config.libsonnet. The shipped alerts/*.yml and
// dashboards/*.json are render.jsonnet's output at the default _config.
(import 'config.libsonnet')
+ (import 'rules/rules.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
