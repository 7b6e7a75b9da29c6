// Alertmanager inhibit_rules (merge into alertmanager.yml): the exporter
// down silences that instance's other alerts; a port down silences the
// alerts on that port's counters (rules whose `port_counters` is true);
// a port below its configured rate silences the same port's peer
// comparison; a switch whose ports lose their peers silences those ports'
// and nodes' peer-probe verdicts.
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local counters = [r.id for r in c.ruleTable.rules if r.port_counters && p.notifies(r)],

  alertmanagerInhibitRules+:: [
    {
      source_matchers: ['alertname="RoceExporterDown"'],
      target_matchers: ['alertname=~"Roce.+"', 'alertname!="RoceExporterDown"'],
      equal: ['instance'],
    },
    {
      source_matchers: ['alertname="%s"' % p.alertName('port_down')],
      target_matchers: ['rule=~"%s"' % std.join('|', counters)],
      equal: ['instance', 'device', 'port'],
    },
    {
      source_matchers: ['alertname="%s"' % p.alertName('link_rate_below_expected')],
      target_matchers: ['alertname="RoceLinkRateBelowPeers"'],
      equal: ['instance', 'device', 'port'],
    },
    {
      // A switch that loses its ports' peers explains each port's loss and
      // each of its nodes lost.
      source_matchers: ['alertname="RocePeerProbeSwitchLosesPeers"'],
      target_matchers: ['alertname=~"RocePeerProbePortLosesPeers|RocePeerProbeNodeUnreachable"'],
      equal: p.fleetLabels([c.switchLabel]),
    },
  ],
}
