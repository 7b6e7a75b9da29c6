// The fleet layer: what the fleet dashboard ("RoCE / Fleet") reads instead
// of one raw series per node, port and priority. Three levels: per port
// (`instance_device_port:`, the raw series' own labels, so the cluster and
// other target labels stay), per instance (`instance:`) and per rail
// (`rail:`, the same device and port on every node: GPU clusters wire NIC N
// of every node to the same leaf).
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local r = p.rateRange,
  local port = names.port,
  local args = { s: s(), r: r, on_netdev: p.fleetBy(['instance', 'netdev', 'priority']) },

  // [record after `instance_device_port:`, expression]
  local perPort = [
    // The most paused priority and direction of the port (seconds paused
    // per second; pfc_storm judges the same ratio).
    ['roce_pfc_pause_ratio:max_rate', p.expr(|||
      max without (netdev, priority, direction) (rate(roce_pfc_pause_duration_seconds_total%(s)s[%(r)s]))
    |||, args)],
    ['roce_ecn_marked_per_packet:ratio_rate', p.expr(|||
      rate(roce_ecn_marked_packets_total%(s)s[%(r)s])
        / (rate(roce_port_packets_received_total%(s)s[%(r)s]) > 0)
    |||, args)],
    // Notification point: CNPs sent per packet received.
    ['roce_cnp_sent_per_packet:ratio_rate', p.expr(|||
      rate(roce_cnp_sent_total%(s)s[%(r)s])
        / (rate(roce_port_packets_received_total%(s)s[%(r)s]) > 0)
    |||, args)],
    // Symbol errors per bit at the port's rate (symbol_errors' max_ber):
    // the 64-bit ethtool count where the driver has one, else the 16-bit
    // PMA symbol_error (symbol_errors reads them the same way; on Ethernet
    // the PMA one is exported with the ethernet_pma group only).
    ['roce_bit_error_rate:ratio_rate', p.expr(|||
      (
        max without (netdev) (rate(roce_netdev_phy_symbol_errors_total%(s)s[%(r)s]))
        or rate(roce_port_symbol_errors_total%(s)s[%(r)s])
      )
        / (8 * roce_port_rate_bytes_per_second%(s)s > 0)
    |||, args)],
    // Discards on priorities with PFC on: loss of RoCE traffic.
    ['roce_lossless_discards:rate', p.expr(|||
      sum without (netdev, priority, reason) (
        rate(roce_netdev_priority_discards_total%(s)s[%(r)s])
        * on (%(on_netdev)s) group_left ()
        (roce_pfc_enabled%(s)s == 1)
      )
    |||, args)],
    // The 64-bit ethtool link-down counter where the driver has one, else
    // the 8-bit PMA link_downed (link_flap reads them the same way).
    ['roce_link_flaps:increase', p.expr(|||
      max without (netdev) (increase(roce_netdev_link_down_events_total%(s)s[%(r)s]))
      or increase(roce_port_link_downed_total%(s)s[%(r)s])
    |||, args)],
    // Failed probe rounds over rounds attempted (0 when none failed).
    ['roce_probe_loss:ratio_rate', p.expr(|||
      (
        sum without (reason) (rate(roce_probe_failures_total%(s)s[%(r)s]))
        or 0 * rate(roce_probe_requests_total%(s)s[%(r)s])
      )
      / (rate(roce_probe_requests_total%(s)s[%(r)s]) > 0)
    |||, args)],
    // Peer probes (between hosts) of the port not answered, over those
    // sent, both sizes together (the peer-probe verdicts localize which
    // peer).
    ['roce_peer_probe_loss:ratio_rate', p.expr(|||
      1 - sum without (size) (rate(roce_peer_probe_answered_total%(s)s[%(r)s]))
        / (sum without (size) (rate(roce_peer_probe_sent_total%(s)s[%(r)s])) > 0)
    |||, args)],
    // Blocks the FEC could not correct: frames lost on the wire. The kernel
    // reports the total (lane="") ahead of the per-lane counts, which add up
    // to it: the total alone, or the lanes' sum where a series set has no
    // total.
    ['roce_fec_uncorrectable:rate', p.expr(|||
      sum without (netdev, lane) (rate(roce_fec_uncorrectable_blocks_total%(total)s[%(r)s]))
      or sum without (netdev, lane) (rate(roce_fec_uncorrectable_blocks_total%(lanes)s[%(r)s]))
    |||, args { total: s('lane=""'), lanes: s('lane!=""') })],
  ],

  // Per rail (the fleet dashboard's rail tables) of each per-port record,
  // and how: the worst port (max) or the rail's total (sum). The
  // per-instance worst port is the dashboard's own topk over the per-port
  // series.
  local perRail = [
    ['roce_pfc_pause_ratio:max_rate', 'max'],
    ['roce_ecn_marked_per_packet:ratio_rate', 'max'],
    ['roce_cnp_sent_per_packet:ratio_rate', 'max'],
    ['roce_bit_error_rate:ratio_rate', 'max'],
    ['roce_lossless_discards:rate', 'sum'],
    ['roce_link_flaps:increase', 'sum'],
    ['roce_probe_loss:ratio_rate', 'max'],
    ['roce_peer_probe_loss:ratio_rate', 'max'],
    ['roce_fec_uncorrectable:rate', 'sum'],
  ],
  local inst = p.fleetBy(['instance']),
  local rail = p.fleetBy(['device', 'port']),

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.fleet.recording',
      rules: [{ record: port + x[0], expr: x[1] } for x in perPort]
             + [
               local parts = std.split(x[0], ':');
               {
                 record: 'rail:%s:%s_%s' % [parts[0], x[1], parts[1]],
                 expr: '%s by (%s) (%s%s%s)' % [x[1], rail, port, x[0], s()],
               }
               for x in perRail
             ]
             + [
               {
                 record: 'instance:roce_ports_down:count',
                 expr: 'count by (%s) (roce_port_up%s == 0)' % [inst, s()],
               },
               {
                 record: 'rail:roce_ports_down:count',
                 expr: 'count by (%s) (roce_port_up%s == 0)' % [rail, s()],
               },
               // Per node only: AER and devlink health are per PCI function,
               // not per RDMA port; NCCL per job. AER of the NICs and GPUs
               // and of the bridge ports on their paths (each port once).
               {
                 record: 'instance:roce_pcie_aer_errors:sum_rate',
                 expr: 'sum by (%s) (rate(%s[%s]))' % [
                   p.fleetBy(['instance', 'severity']),
                   s('__name__=~"roce_pcie_aer_errors_total|roce_pcie_bridge_aer_errors_total"'),
                   r,
                 ],
               },
               {
                 record: 'instance:roce_devlink_unhealthy:count',
                 expr: 'count by (%s) (roce_devlink_reporter_healthy%s == 0)' % [inst, s()],
               },
               {
                 record: 'instance:roce_nccl_socket_connections:sum',
                 expr: 'sum by (%s) (roce_nccl_connections%s)' % [inst, s('transport="socket"')],
               },
               {
                 record: 'instance_rule:roce_findings:count',
                 expr: 'count by (%s) (roce_finding%s == 1)' % [
                   p.fleetBy(['instance', 'rule', 'severity']),
                   s(),
                 ],
               },
             ],
    }],
  },
}
