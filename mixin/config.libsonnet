// The mixin's parameters. Override any of them with
//   (import 'roce-exporter-mixin/mixin.libsonnet') + { _config+:: { job: 'rdma' } }
// Every field that derives from another (selector from job, for example)
// follows an override of the one it derives from.
local ruleTable = std.parseJson(importstr 'rules.json');

{
  _config+:: {
    // The `job` label Prometheus gives the exporter's series (a chart's or
    // ServiceMonitor's job name).
    job: 'roce_exporter',
    // PromQL label matchers selecting the exporter's series in every alert
    // and recording rule, e.g. 'job="rdma", env="prod"'.
    selector: 'job="' + self.job + '"',
    // Matchers of node_exporter's and dcgm-exporter's series, whose joins
    // with ours the recording rules (node_exporter) and dashboards (both)
    // make; empty: their metric names are their own, any job.
    nodeExporterSelector: '',
    dcgmExporterSelector: '',

    // Labels that delimit one fleet for the cross-node rules: each fleet
    // comparison, peer-probe verdict and rail is computed within one value
    // of these, plus clusterLabel.
    fleetBy: ['job'],
    // The label that tells clusters apart where one Prometheus (or Thanos,
    // Mimir) holds several: a target or external label. Absent labels
    // group as empty, so a single cluster needs nothing. The dashboards
    // have a variable for it.
    clusterLabel: 'cluster',

    // Prometheus' scrape interval in seconds, any value: every rate() and
    // increase() range is 4x it (a window holds at least three samples
    // whatever their phase), the finding alerts' `for:` 2x it.
    scrapeIntervalSeconds: 60,

    // runbook_url of every alert. A template: {section} is the alert's
    // `## <section>` of docs/runbook.md (an alert name or rule id),
    // {anchor} that heading's Markdown anchor, {instance} the alert's
    // instance, or one exporter of `selector` that is up where the alert
    // has no live instance (RoceExporterDown, the switch and node
    // verdicts). Without {section} or {anchor}, #{anchor} is appended (a
    // rendered runbook.md). The default opens the runbook the exporter
    // itself serves at /runbook/<section>, so the link works wherever it
    // is installed; with TLS (--web.config.file) use https://, behind a
    // proxy or for a published copy e.g.
    // 'https://github.com/<org>/roce_exporter/blob/main/docs/runbook.md'.
    runbookURLBase: 'http://{instance}/runbook/{section}',

    // Thresholds and windows of the alerts PromQL computes (the findings'
    // own are the exporter's `rules:` configuration, on the nodes):
    // RoceSampleStale: the sample is older than this many sample
    // intervals (and at least 30 s).
    staleIntervals: 3,
    // RoceNicCountDropped: how far back an instance's RDMA device count is
    // remembered.
    nicCountWindow: '1h',
    // Labels of roce_device_info that delimit NICs whose QoS settings and
    // firmware are compared: generations legitimately differ (DCQCN
    // parameters, ETS classes). A target label on every series (a `rail`
    // label) can be added.
    driftGroupBy: ['hca_type', 'driver'],
    // Peer-probe verdicts (over roce_peer_probe_peer_lost, the lost ones of
    // a pair's last 16 small probes): a pair fails from this many lost
    // (one loss in 16 is noise) ...
    peerLossMin: 2,
    // ... and a verdict needs more than half of at least this many
    // witnesses: probers of a node, peers of a port, ports of a switch.
    peerMinWitnesses: 2,
    // The switch a port is cabled to: a series that is 1 per (instance,
    // device, port) with the neighbour's name in switchLabel (LLDP's System
    // Name). Without it the switch verdict returns nothing.
    switchInfo: 'roce_lldp_neighbor_info',
    switchLabel: 'system_name',
    // Which exporter a probed node is: each exporter's responder per port
    // (`node`, `device`, `port`), remembered this long after its last
    // scrape (a dead node's exporter is not scraped).
    nodeInfo: 'roce_peer_probe_endpoint_info',
    nodeInfoWindow: '1h',

    // The exporter's rule table (`roce_exporter docs rules`; mixin/rules.json
    // is docs/rules.json of this version): one alert per rule that can
    // report a warning or critical finding, and the QoS drift entries.
    // Point it at the table of the exporter version the fleet runs.
    ruleTable: ruleTable,

    // Grafana: uid of each dashboard is dashboardUIDPrefix + its name
    // (overview, congestion, ...), tags on every dashboard (the first also
    // links them to each other), titles prefixed, auto refresh.
    dashboardUIDPrefix: 'roce-',
    dashboardTags: ['roce_exporter', 'rdma'],
    dashboardTitlePrefix: 'RoCE / ',
    dashboardRefresh: '30s',
  },
}
