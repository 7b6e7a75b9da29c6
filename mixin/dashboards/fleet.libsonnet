// "Fleet": the fleet on the recording rules (rules/fleet.libsonnet,
// rules/peer_probes.libsonnet, rules/lldp_rails.libsonnet): nodes and
// ports in trouble, the top ports and nodes of each family, the peer-probe
// verdicts, cabling, rails. Tables link each instance to the node
// dashboards.
local common = import 'common.libsonnet';

// The top N of each table.
local n = 10;

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local p = x.p;
  local base = x.base;
  // A threshold of the exporter's rule table, so that the panels draw the
  // line the exporter judges by.
  local ruleDefault(id, key) = [r for r in c.ruleTable.rules if r.id == id][0].config.defaults[key];
  // The fleet's series per instance, per port, per rail (rail: series have
  // no instance: they aggregate over the nodes).
  local fs = x.n;
  local fd = x.d;
  local rd = base + ', device=~"$device"';
  local trouble = 'severity=~"critical|warning"';
  local a = {
    fs: fs,
    fd: fd,
    trouble: trouble,
    inst: p.fleetBy(['instance']),
    port: p.fleetBy(['instance', 'device', 'port']),
  };

  // Data links from a table's instance (and device) cells into the node
  // dashboards, keeping the time range and the variables, and to the
  // runbook sections of what the table shows (on that instance's exporter).
  local nodeLinks(panel, sections=[]) = g.withCellLinks(panel, 'instance', [
    {
      title: l[1],
      url: '/d/%s?var-instance=${__data.fields.instance}&var-device=${__data.fields.device}'
           % (c.dashboardUIDPrefix + l[0]) + '&${__url_time_range}&${cluster:queryparam}'
           + '&${job:queryparam}&${datasource:queryparam}',
    }
    for l in [['overview', 'Node overview'], ['congestion', 'Node congestion'], ['errors', 'Node errors']]
  ] + [
    { title: 'Runbook: ' + s, url: x.runbookURL(s, '${__data.fields.instance}'), targetBlank: true }
    for s in sections
  ]);
  // Runbook links of a table without an instance column: in the panel's
  // menu, where the runbook does not depend on the instance.
  local runbook(panel, sections) =
    if x.perInstance then panel else x.withRunbook(panel, sections);

  // [title, description, unit, per-port record, [rule, threshold] or null,
  // runbook sections]:
  // a top-N table of ports and a per-rail time series each. A family is one
  // entry here once its recording rule exists.
  local topPorts = [
    [
      'PFC pause ratio',
      'Most paused priority of each port (seconds paused per second).',
      'percentunit',
      'instance_device_port:roce_pfc_pause_ratio:max_rate',
      ['pfc_storm', 'pause_ratio'],
      ['pfc_storm'],
    ],
    [
      'ECN marks per packet',
      'ECN-marked RoCE packets per packet received.',
      'percentunit',
      'instance_device_port:roce_ecn_marked_per_packet:ratio_rate',
      ['receiver_congested', 'max_ratio'],
      ['receiver_congested'],
    ],
    [
      'CNPs sent per packet',
      'CNPs sent (notification point) per packet received.',
      'percentunit',
      'instance_device_port:roce_cnp_sent_per_packet:ratio_rate',
      null,
      ['cnp_not_sent'],
    ],
    [
      'Lossless discards',
      'Packets discarded on PFC-enabled priorities per second.',
      'pps',
      'instance_device_port:roce_lossless_discards:rate',
      ['lossless_discards', 'per_second'],
      ['lossless_discards'],
    ],
    [
      'Bit error rate',
      "Symbol errors per bit at the port's rate.",
      'sci',
      'instance_device_port:roce_bit_error_rate:ratio_rate',
      ['symbol_errors', 'max_ber'],
      ['symbol_errors'],
    ],
    [
      'Link flaps',
      'Link-down events within the rate range.',
      'short',
      'instance_device_port:roce_link_flaps:increase',
      null,
      ['link_flap'],
    ],
    [
      'Probe loss',
      'Failed probe rounds per round attempted.',
      'percentunit',
      'instance_device_port:roce_probe_loss:ratio_rate',
      ['probe_failures', 'max_ratio'],
      ['probe_failures'],
    ],
    [
      'Peer probe loss',
      'Probes between hosts (peer_probes) not answered, per probe sent; '
      + "the node's /findings says whether the port, a peer or one path is at fault.",
      'percentunit',
      'instance_device_port:roce_peer_probe_loss:ratio_rate',
      null,
      ['peer_probe_port_isolated', 'peer_probe_peer_unreachable', 'peer_probe_path_loss'],
    ],
    [
      'FEC uncorrectable blocks',
      'Blocks the FEC could not correct per second: frames '
      + 'lost on the wire (cable, optic, switch port).',
      'cps',
      'instance_device_port:roce_fec_uncorrectable:rate',
      null,
      ['fec_uncorrectable'],
    ],
  ];
  local threshold(panel, t) = if t == null then panel else g.withThreshold(panel, ruleDefault(t[0], t[1]));
  // Per node: what is per PCI function or per job rather than per RDMA port.
  local topNodes = [
    [
      'PCIe AER errors',
      "PCIe AER errors per second of the node's NICs and GPUs and of "
      + 'the bridge ports on their paths, by severity (correctable: a marginal link; '
      + 'nonfatal and fatal: lost transactions).',
      'cps',
      'instance:roce_pcie_aer_errors:sum_rate',
      ['pcie_aer_errors', 'pcie_bridge_aer_errors'],
    ],
    [
      'devlink reporters unhealthy',
      'NIC health reporters (devlink health) in error '
      + 'state: firmware, tx/rx queues, PCIe.',
      'none',
      'instance:roce_devlink_unhealthy:count',
      ['devlink_reporter_error'],
    ],
    [
      'NCCL connections over sockets',
      'NET connections NCCL jobs set up over TCP '
      + 'sockets (NET/Socket) instead of RDMA in the window.',
      'none',
      'instance:roce_nccl_socket_connections:sum',
      ['nccl_socket_transport'],
    ],
  ];

  // The peer-probe verdicts: which node the others lose, which port loses
  // its peers, which path between two ports alone, which switch. A line at
  // one half: above it, the verdict (with peerMinWitnesses witnesses, pairs
  // failing from peerLossMin lost). peer: and switch: series aggregate
  // over the probing instances.
  local ps = base;
  local pd = x.d;
  local lossMin = p.num(c.peerLossMin);
  local witnesses = p.num(c.peerMinWitnesses);
  local peerProbes = [
    g.withThreshold(runbook(g.table(
      'Peer probes: top %d nodes lost by their probers' % n,
      "Share of the ports probing a node's port that lose at least " + lossMin + ' of their last 16 '
      + 'small probes to it; above one half (with at least ' + witnesses + ' probers) the node is named '
      + '(RocePeerProbeNodeUnreachable): down, its exporter stopped, or its port.',
      'percentunit',
      'topk(%d, peer:roce_peer_probe_losing_probers:ratio{%s})' % [n, ps],
      rename={ Value: 'probers losing it' },
      w=12
    ), ['RocePeerProbeNodeUnreachable']), 0.5),
    g.withThreshold(nodeLinks(g.table(
      'Peer probes: top %d ports losing their peers' % n,
      "Share of a port's peers (those the other nodes reach) it loses probes to; above "
      + 'one half (with at least ' + witnesses + ' peers) the port is named '
      + '(RocePeerProbePortLosesPeers): its NIC, cable or switch port.',
      'percentunit',
      'topk(%d, instance_device_port:roce_peer_probe_losing_peers:ratio{%s})' % [n, pd],
      rename={ Value: 'peers lost' },
      w=12
    ), ['RocePeerProbePortLosesPeers']), 0.5),
    nodeLinks(g.table(
      'Peer probes: top %d lossy paths' % n,
      'Pairs of ports losing at least ' + lossMin + ' of their last 16 small probes while neither end '
      + 'is named above: the path between the two (RocePeerProbePairLoss).',
      'none',
      'topk(%d, instance_device_port_peer:roce_peer_probe_path_lost:count{%s})' % [n, pd],
      rename={ Value: 'lost of 16' },
      w=12
    ), ['RocePeerProbePairLoss']),
    g.withThreshold(runbook(g.table(
      "Peer probes: top %d switches losing their ports' peers" % n,
      'Share of the probing ports cabled to a switch (LLDP) that lose their peers; above '
      + 'one half the switch is named (RocePeerProbeSwitchLosesPeers). Empty without an '
      + 'LLDP neighbour series.',
      'percentunit',
      'topk(%d, switch:roce_peer_probe_isolated_ports:ratio{%s})' % [n, ps],
      rename={ Value: 'ports losing peers' },
      w=12
    ), ['RocePeerProbeSwitchLosesPeers']), 0.5),
  ];

  // Cabling from each RDMA port's LLDP neighbour: every port with its
  // GPU(s), switch, switch port and rail verdict, and the ports off their
  // pod's rail (the RoceLldpRailOddOneOut verdict, from the recording
  // rules). Each node's own cabling is also on its topology dashboard.
  local cab = {
    switchPod: 'instance_device:roce_lldp_switch:pod{%s}' % fs,
    nodes: 'pod_device_switch:roce_lldp_nodes:count{%s}' % base,
    by: p.fleetBy(['pod', 'device']),
    port: p.fleetBy(['instance', 'device', 'port']),
    judged: p.fleetBy(['instance', 'device', 'system_name']),
    ports: '(\n    %s\n  )' % x.cablingGpus('roce_lldp_neighbor_info{%s}' % fd,
                                            'roce_nic_nearest_gpus_info{%s}' % fd,
                                            p.fleetBy(['instance', 'device']),
                                            self.port),
    // The pod's nodes on each port's switch against the most of the pod on
    // one switch for that NIC: fewer is the odd one out (the alert's
    // expression), as many is on the rail; a node without a pod is not
    // judged. Values rank the rows: WRONG 2, not judged 1, ok 0.
    onSwitch: '%s\n      * on (%s, system_name) group_left ()\n      %s' % [self.switchPod, self.by, self.nodes],
    most: 'max by (%s) (%s)' % [self.by, self.nodes],
  };
  local verdict(value, cmp, rail) = q(|||
    label_replace(
        %(ports)s
        * on (%(judged)s) group_left ()
        (0 * (%(onSwitch)s
          %(cmp)s on (%(by)s) group_left () %(most)s) + %(value)s),
        "rail", "%(rail)s", "", ""
      )
  |||, cab { value: value, cmp: cmp, rail: rail });
  local cabling = [
    nodeLinks(g.table(
      'Cabling',
      'Every RDMA port by its LLDP neighbour: node, NIC, the GPUs whose nearest NIC it '
      + 'is (from the PCIe topology; two when a NIC serves two GPUs), the switch (system '
      + 'name) and switch port, and the rail verdict without a cabling plan: ok when the '
      + 'NIC reaches the switch most nodes of its pod reach with that NIC, WRONG when '
      + 'another (RoceLldpRailOddOneOut), not judged when the node has no pod (its first '
      + 'NIC reports none or two neighbours). WRONG rows first. Empty without LLDP.',
      'none',
      q(|||
        sort_desc(max by (instance, device, gpus, system_name, port_id, rail) (
          %(wrong)s
          or on (%(port)s)
          %(ok)s
          or on (%(port)s)
          label_replace(0 * %(ports)s + 1, "rail", "not judged", "", "")
        ))
      |||, cab { wrong: verdict(2, '<', 'WRONG'), ok: verdict(0, '>=', 'ok') }),
      hide=['Value'],
      order=['instance', 'device', 'gpus', 'system_name', 'port_id', 'rail'],
      rename={ gpus: 'GPUs', system_name: 'switch', port_id: 'switch port' },
      w=12
    ), ['RoceLldpRailOddOneOut', 'lldp_rail_mismatch']),
    nodeLinks(g.table(
      "Cabling: NICs off their pod's rail",
      'RDMA ports whose LLDP neighbour is another switch than the same NIC of most '
      + "nodes of their pod (the pod: the switch a node's first NIC reaches); the value "
      + "is how many of the pod's nodes share that switch (RoceLldpRailOddOneOut). Empty "
      + 'on a fleet cabled right, and without LLDP.',
      'none',
      q(|||
        (
          %(switchPod)s
          * on (%(by)s, system_name) group_left ()
          %(nodes)s
        )
        < on (%(by)s) group_left ()
        max by (%(by)s) (%(nodes)s)
      |||, cab),
      rename={ Value: 'nodes on that switch' },
      w=12
    ), ['RoceLldpRailOddOneOut']),
  ];

  // Each rule links to its runbook section where the runbook does not
  // depend on the instance (the rows aggregate over the instances).
  local findingsByRule =
    local table = g.table('Findings by rule',
                          'Active findings per rule and severity across the '
                          + 'fleet.',
                          'none',
                          q('sum by (rule, severity) (instance_rule:roce_findings:count{%(fs)s})', a),
                          rename={ Value: 'findings' },
                          w=12);
    if x.perInstance then table else g.withCellLinks(table, 'rule', [{
      title: 'Runbook: ${__data.fields.rule}',
      url: x.runbookURL('${__data.fields.rule}', ''),
      targetBlank: true,
    }]);

  local timeline = g.panel(
    'state-timeline',
    'Port state (ports down within the range)',
    'roce_port_up of the ports that were down at some point within the time range.',
    'none',
    [g.target(q(|||
      roce_port_up{%(fd)s}
        and on (%(port)s)
        (min_over_time(roce_port_up{%(fd)s}[$__range]) == 0)
    |||, a), '{{instance}} {{device}}/{{port}}')],
    w=24,
    h=8
  ) {
    fieldConfig+: { defaults+: {
      mappings: [{ type: 'value', options: {
        '0': { text: 'down', color: 'red', index: 0 },
        '1': { text: 'up', color: 'green', index: 1 },
      } }],
      color: { mode: 'thresholds' },
    } },
    options: { showValue: 'never', mergeValues: true, rowHeight: 0.9 },
  };

  x.dashboard('fleet',
              'Fleet',
              'The fleet on recording rules (alerts/roce_exporter.recording.rules.yml): '
              + 'nodes and ports in trouble, top ports, rails.',
              [
                g.stat('Nodes reporting',
                       'Exporters scraped successfully.',
                       'none',
                       q('count(up{%(fs)s} == 1) or vector(0)', a)),
                g.stat('Nodes in trouble',
                       'Nodes with an active critical or warning finding.',
                       'none',
                       q('count(sum by (%(inst)s) '
                         + '(instance_rule:roce_findings:count{%(fs)s, %(trouble)s})) or vector(0)', a),
                       thresholds=[[1, 'red']]),
                g.stat('Ports in trouble',
                       'Ports down or with an active critical or warning finding.',
                       'none',
                       q(|||
                         count(
                           count by (%(port)s) (roce_finding{%(fd)s, port!="", %(trouble)s} == 1)
                           or count by (%(port)s) (roce_port_up{%(fd)s} == 0)
                         ) or vector(0)
                       |||, a),
                       thresholds=[[1, 'red']]),
                g.stat('Ports down',
                       'RDMA ports not ACTIVE and LinkUp.',
                       'none',
                       q('sum(instance:roce_ports_down:count{%(fs)s}) or vector(0)', a),
                       thresholds=[[1, 'red']]),
                g.stat('Critical findings',
                       'Active critical findings in the fleet.',
                       'none',
                       q('sum(instance_rule:roce_findings:count{%(fs)s, severity="critical"}) or vector(0)', a),
                       thresholds=[[1, 'red']]),
                g.stat('Warning findings',
                       'Active warning findings in the fleet.',
                       'none',
                       q('sum(instance_rule:roce_findings:count{%(fs)s, severity="warning"}) or vector(0)', a),
                       thresholds=[[1, 'orange']]),
                findingsByRule,
                nodeLinks(g.table('Nodes with findings',
                                  'Nodes by active findings; the instance '
                                  + 'links to the node dashboards.',
                                  'none',
                                  q('sort_desc(sum by (instance) '
                                    + '(instance_rule:roce_findings:count{%(fs)s, %(trouble)s}))', a),
                                  rename={ Value: 'findings' },
                                  w=12)),
              ] + [
                threshold(nodeLinks(g.table('Top %d ports: %s' % [n, t[0]],
                                            t[1],
                                            t[2],
                                            'topk(%d, %s{%s})' % [n, t[3], fd],
                                            rename={ Value: t[0] },
                                            w=12), t[5]), t[4])
                for t in topPorts
              ] + [
                nodeLinks(g.table('Top %d nodes: %s' % [n, t[0]],
                                  t[1],
                                  t[2],
                                  'topk(%d, %s{%s})' % [n, t[3], fs],
                                  rename={ Value: t[0] },
                                  w=8), t[4])
                for t in topNodes
              ] + peerProbes + cabling + [
                local parts = std.split(t[3], ':');
                local op = parts[2];
                local agg = if op == 'rate' || op == 'increase' then 'sum' else 'max';
                threshold(g.timeseries('Per rail: ' + t[0],
                                       t[1] + ' Per rail: the same device and port '
                                       + 'on every node (%s over nodes).' % agg,
                                       t[2],
                                       [g.target('rail:%s:%s_%s{%s}' % [parts[1], agg, op, rd], '{{device}}/{{port}}')],
                                       w=8), t[4])
                for t in topPorts
              ] + [
                g.timeseries('Per rail: ports down',
                             'Ports not up per rail.',
                             'none',
                             [g.target('rail:roce_ports_down:count{%s}' % rd, '{{device}}/{{port}}')],
                             w=8),
                timeline,
              ],
              x.variables(oneInstance=false),
              // the whole runbook where it does not depend on the instance
              links=if x.perInstance then [] else [x.runbookLink()])
