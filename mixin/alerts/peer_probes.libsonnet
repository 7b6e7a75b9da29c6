// The peer-probe verdicts across nodes as alerts: which node the others
// lose, which port loses its peers, which path between two ports alone,
// which switch (rules/peer_probes.libsonnet records the verdicts and says
// how they are reached).
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local a = {
    s: s(),
    fleet: p.fleetBy(),
    tgt: p.fleetBy(['peer', 'peer_device']),
    prt: p.fleetBy(['instance', 'device', 'port']),
    lab: c.switchLabel,
    w: p.num(c.peerMinWitnesses),
    named: names.peer + 'unreachable:ratio' + s(),
    nodePort: names.peerNodePort + s(),
    switchOfPort: names.peerSwitchOfPort + s(),
    isolated: names.peerPort + 'isolated:ratio' + s(),
    switch: names.peerSwitch,
  },
  local critical = { severity: 'critical' },
  local warning = { severity: 'warning' },
  local node = '{{ $labels.peer }} ({{ $labels.peer_device }})',
  local port = '{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }}',
  local switch = '{{ $labels.' + c.switchLabel + ' }}',
  local fails = 'at least %s of their last 16 small probes lost' % p.num(c.peerLossMin),
  local exporter = '{{ if $labels.instance }} ({{ $labels.instance }}{{ if $labels.'
                   + c.switchLabel + ' }}, on ' + switch + '{{ end }}){{ end }}',

  prometheusAlerts+:: {
    groups+: [{
      name: 'roce_exporter.fleet.peer_probes',
      rules: [
        // The node's own exporter, port and switch where they are known: a
        // dead exporter's RoceExporterDown and a switch's verdict inhibit it.
        p.alert(
          'RocePeerProbeNodeUnreachable',
          p.expr(|||
            (
              %(named)s
              * on (%(tgt)s) group_left (instance, device, port, %(lab)s)
              (
                %(nodePort)s
                * on (%(prt)s) group_left (%(lab)s) %(switchOfPort)s
                or on (%(tgt)s) %(nodePort)s
              )
            )
            or on (%(tgt)s) %(named)s
          |||, a),
          p.peerVerdictFor,
          critical,
          'Peers lose their probes to node ' + node + exporter,
          'Node ' + node + exporter + ': {{ $value | humanizePercentage }} of the ports '
          + 'probing it (at least ' + a.w + ') fail towards it (' + fails + '): the node is '
          + 'down, its exporter and responder stopped, or its port (NIC, cable, switch '
          + 'port) drops RoCE traffic (then RocePeerProbePortLosesPeers names that port '
          + "too). The other nodes' peer_probe findings about it are this one fault.",
          'RocePeerProbeNodeUnreachable',
          liveInstance=false,
        ),
        p.alert(
          'RocePeerProbePortLosesPeers',
          p.expr(|||
            (
              %(isolated)s
              * on (%(prt)s) group_left (%(lab)s) %(switchOfPort)s
            )
            or on (%(prt)s) %(isolated)s
          |||, a),
          p.peerVerdictFor,
          critical,
          'RDMA port ' + port + ' loses its peers',
          'Probes from ' + port + ' fail towards {{ $value | humanizePercentage }} of the '
          + 'peers it probes (at least ' + a.w + ', ' + fails + ') while the other nodes '
          + "reach those peers: the fault is on this port's side: its NIC, cable or "
          + 'optic, or its switch port{{ if $labels.' + c.switchLabel + ' }} on ' + switch
          + '{{ end }}.',
          'RocePeerProbePortLosesPeers',
        ),
        p.alert(
          'RocePeerProbePairLoss',
          names.peerPair + s(),
          p.findingFor,
          warning,
          'Probes from ' + port + ' to ' + node + ' are lost',
          '{{ $value }} of the last 16 small probes from ' + port + ' to ' + node
          + ' were lost, while neither end loses its other peers nor is lost by them: '
          + 'the path between the two (an ECMP member, a link between switches) drops '
          + 'them.',
          'RocePeerProbePairLoss',
        ),
        p.alert(
          'RocePeerProbeSwitchLosesPeers',
          p.expr(|||
            %(switch)sisolated_ports:ratio%(s)s > 0.5
            and on (%(fleet)s, %(lab)s) %(switch)sports:count%(s)s >= %(w)s
          |||, a),
          p.findingFor,
          critical,
          'The ports cabled to switch ' + switch + ' lose their peers',
          '{{ $value | humanizePercentage }} of the probing ports cabled to ' + switch
          + ' (at least ' + a.w + ') lose most of their peers: the switch or its uplinks '
          + "drop RoCE traffic; its ports' RocePeerProbePortLosesPeers are this one fault.",
          'RocePeerProbeSwitchLosesPeers',
          liveInstance=false,
        ),
      ],
    }],
  },
}
