// The peer-probe verdicts across nodes (alerts/peer_probes.libsonnet
// alerts on them, the fleet dashboard's "Peer probes" tables show them).
// One exporter sees one side of each pair it probes
// (roce_peer_probe_peer_lost: of a pair's last 16 small probes, how many
// were lost); the fleet's exporters together say which side is at fault. A
// pair *fails* when at least peerLossMin were lost. A verdict needs more
// than half of at least peerMinWitnesses witnesses:
//   a peer port that the ports probing it fail towards: that node, or its
//     port, is named (RocePeerProbeNodeUnreachable);
//   a local port failing towards its peers: that port (NIC, cable, switch
//     port) (RocePeerProbePortLosesPeers);
//   a failing pair neither end of which is named: the path between the two
//     (RocePeerProbePairLoss);
//   the ports cabled to one switch named: that switch, where a switchInfo
//     series (LLDP) names each port's switch; nothing without one
//     (RocePeerProbeSwitchLosesPeers).
// Each side leaves out what the other explains: a dead node's loss is not
// its probers' ports', and a black-holed prober's loss is not its peers'.
// So the first pass names suspects on the raw votes (peers, then ports
// without the suspect peers), the second names peers without the suspect
// ports' votes and ports without those peers.
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local a = {
    s: s(),
    // per fleet, per peer port, per local port
    fleet: p.fleetBy(),
    tgt: p.fleetBy(['peer', 'peer_device']),
    prt: p.fleetBy(['instance', 'device', 'port']),
    lost: 'roce_peer_probe_peer_lost%s' % s('size="small"'),
    n: p.num(c.peerLossMin),
    w: p.num(c.peerMinWitnesses),
    lab: c.switchLabel,
    sw: c.switchInfo + s(),
    peer: names.peer,
    port: names.peerPort,
    switch: names.peerSwitch,
    pair: 'peer, peer_device, size',
    suspectPeer: names.peer + 'suspect:ratio' + s(),
    suspectPort: names.peerPort + 'suspect:ratio' + s(),
    namedPeer: names.peer + 'unreachable:ratio' + s(),
    nodeSeen: names.peerNodeSeen,
    switchOfPort: names.peerSwitchOfPort,
  },

  // Share of failing pairs per local port, and their number, over the
  // pairs whose peer is not in `unless`.
  local portVote(unless) = {
    ratio: p.expr(|||
      avg without (%(pair)s) (
        (%(lost)s >= bool %(n)s)
        unless on (%(tgt)s) %(unless)s
      )
    |||, a { unless: unless }),
    count: p.expr(|||
      count without (%(pair)s) (
        %(lost)s
        unless on (%(tgt)s) %(unless)s
      )
    |||, a { unless: unless }),
  },
  local first = portVote(a.suspectPeer),
  local second = portVote(a.namedPeer),

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.fleet.peer_probes.recording',
      rules: [
        // Per peer port (named by the probers' `peer` and `peer_device`
        // labels): the ports that report on it, and the share of them whose
        // pair fails; the suspects among them.
        { record: a.peer + 'probers:count', expr: 'count by (%(tgt)s) (%(lost)s)' % a },
        {
          record: a.peer + 'losing_probers:ratio',
          expr: 'avg by (%(tgt)s) (%(lost)s >= bool %(n)s)' % a,
        },
        { record: a.peer + 'suspect:ratio', expr: p.expr(|||
          %(peer)slosing_probers:ratio%(s)s > 0.5
          and on (%(tgt)s) %(peer)sprobers:count%(s)s >= %(w)s
        |||, a) },
        // Suspect local ports: failing towards the peers that are no
        // suspects.
        { record: a.port + 'suspect:ratio', expr: p.expr(|||
          %(ratio)s
          > 0.5
          and on (%(prt)s)
          %(count)s
          >= %(w)s
        |||, a { ratio: first.ratio, count: first.count }) },
        // Named peers: on the votes of the ports that are no suspects.
        { record: a.peer + 'unreachable:ratio', expr: p.expr(|||
          avg by (%(tgt)s) (
            (%(lost)s >= bool %(n)s)
            unless on (%(prt)s) %(suspectPort)s
          )
          > 0.5
          and on (%(tgt)s)
          count by (%(tgt)s) (
            %(lost)s
            unless on (%(prt)s) %(suspectPort)s
          )
          >= %(w)s
        |||, a) },
        // Per local port, over its peers not named (their loss is theirs):
        // how many, the share of them that fail, and the named ports.
        { record: a.port + 'judged_peers:count', expr: second.count },
        { record: a.port + 'losing_peers:ratio', expr: second.ratio },
        { record: a.port + 'isolated:ratio', expr: p.expr(|||
          %(port)slosing_peers:ratio%(s)s > 0.5
          and on (%(prt)s) %(port)sjudged_peers:count%(s)s >= %(w)s
        |||, a) },
        // Failing pairs neither end of which is named: the path between.
        { record: names.peerPair, expr: p.expr(|||
          max without (size) (
            %(lost)s >= %(n)s
            unless on (%(tgt)s) %(namedPeer)s
            unless on (%(prt)s) %(port)sisolated:ratio%(s)s
          )
        |||, a) },
        // Each probed node's exporter and port (from its own endpoint info,
        // as the probers name it: `peer` and `peer_device`), where exactly
        // one was seen within the window (a node that moved is left out).
        { record: a.nodeSeen, expr: p.expr(|||
          max by (%(tgt)s, instance, device, port) (
            label_join(
              label_replace(last_over_time(%(info)s%(s)s[%(window)s]), "peer", "$1", "node", "(.+)"),
              "peer_device", "/", "device", "port"
            )
          )
        |||, a { info: c.nodeInfo, window: c.nodeInfoWindow }) },
        { record: names.peerNodePort, expr: p.expr(|||
          %(nodeSeen)s%(s)s
          unless on (%(tgt)s)
          (count by (%(tgt)s) (%(nodeSeen)s%(s)s) > 1)
        |||, a) },
        // The switch each port is cabled to, where the series names exactly
        // one (a port with two neighbours is left out).
        { record: a.switchOfPort, expr: p.expr(|||
          max by (%(prt)s, %(lab)s) (%(sw)s)
          unless on (%(prt)s)
          (count by (%(prt)s) (max by (%(prt)s, %(lab)s) (%(sw)s)) > 1)
        |||, a) },
        { record: a.switch + 'ports:count', expr: p.expr(|||
          count by (%(fleet)s, %(lab)s) (
            %(port)sjudged_peers:count%(s)s
            * on (%(prt)s) group_left (%(lab)s) %(switchOfPort)s%(s)s
          )
        |||, a) },
        { record: a.switch + 'isolated_ports:ratio', expr: p.expr(|||
          count by (%(fleet)s, %(lab)s) (
            %(port)sisolated:ratio%(s)s
            * on (%(prt)s) group_left (%(lab)s) %(switchOfPort)s%(s)s
          )
          / on (%(fleet)s, %(lab)s) %(switch)sports:count%(s)s
        |||, a) },
      ],
    }],
  },
}
