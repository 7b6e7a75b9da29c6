// "Errors": link and transport errors, FEC, optics, PCIe AER and devlink
// health of one node (or a few).
local common = import 'common.libsonnet';

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local rb = x.withRunbook;
  local port = '{{instance}} {{device}}/{{port}}';
  local netdev = '{{instance}} {{netdev}}';
  local portRate(title, description, metric, unit='cps') =
    g.timeseries(title,
                 description,
                 unit,
                 [g.target(q('rate(%(m)s{%(d)s}[%(r)s])', { m: metric }), port)]);
  x.dashboard('errors',
              'Errors',
              'Symbol errors and BER, retransmissions, sequence errors, link flaps; '
              + 'FEC (rate, per lane, past FEC), optics, carrier transitions, PCIe AER '
              + '(NICs, GPUs and the bridge ports of their paths), devlink health.',
              [
                rb(g.timeseries('Bit error rate', "Symbol errors per bit at the port's rate: the netdev's 64-bit "
                                                  + 'count where the driver has one (mlx5 rx_symbol_err_phy), else the PMA '
                                                  + 'symbol_error, as symbol_errors reads them. Above 1e-12 is RoceSymbolErrors.', 'sci', [g.target(q(|||
                  (
                    rate(roce_netdev_phy_symbol_errors_total{%(d)s}[%(r)s])
                    or ignoring (netdev) rate(roce_port_symbol_errors_total{%(d)s}[%(r)s])
                  )
                    / ignoring (netdev) (8 * roce_port_rate_bytes_per_second{%(d)s} > 0)
                |||), port)]), ['symbol_errors']),
                rb(g.timeseries('Symbol errors', "Minor link errors on the physical lanes: the netdev's 64-bit "
                                                 + 'count where the driver has one, else the PMA symbol_error (16 bits wide, '
                                                 + 'it sticks at 65535).', 'cps', [g.target(q(|||
                  rate(roce_netdev_phy_symbol_errors_total{%(d)s}[%(r)s])
                  or ignoring (netdev) rate(roce_port_symbol_errors_total{%(d)s}[%(r)s])
                |||), port)]), ['symbol_errors']),
                rb(g.timeseries('Link flaps',
                                "Times the link went down (the netdev's 64-bit link_down_events_phy where the driver "
                                + 'has it, else the PMA link_downed) and, on InfiniBand, recovered from errors '
                                + '(link_error_recovery).',
                                'short',
                                [
                                  g.target(q(|||
                                    increase(roce_netdev_link_down_events_total{%(d)s}[%(r)s])
                                    or ignoring (netdev) increase(roce_port_link_downed_total{%(d)s}[%(r)s])
                                  |||), port + ' down'),
                                  g.target(q('increase(roce_port_link_error_recovery_total{%(d)s}[%(r)s])'), port + ' recovery'),
                                ]), ['link_flap']),
                rb(g.timeseries('Retransmissions and ACK timeouts', 'Requester ACK timer expirations (each one '
                                                                    + 'retransmits) and retransmissions where the driver counts them (rxe, efa).', 'cps', [
                  g.target(q('rate(roce_local_ack_timeout_errors_total{%(d)s}[%(r)s])'), port + ' ACK timeouts'),
                  g.target(q('rate(roce_retransmissions_total{%(d)s}[%(r)s])'), port + ' retransmissions'),
                ]), ['retransmissions', 'ack_timeouts']),
                portRate('RNR NAKs', 'Receiver-not-ready NAKs received: the remote side had no '
                                     + 'receive WQE posted.', 'roce_rnr_naks_received_total'),
                rb(portRate('Out-of-sequence packets', 'Packets the responder received beyond the '
                                                       + 'expected PSN.', 'roce_out_of_sequence_packets_total'), ['sequence_errors']),
                rb(portRate('Sequence error NAKs',
                            'NAKs with a PSN sequence error received.',
                            'roce_packet_sequence_errors_total'), ['sequence_errors']),
                portRate('Duplicate requests',
                         'Requests the responder had already executed.',
                         'roce_duplicate_requests_total'),
                portRate('Retry exceeded',
                         'Work requests failed after the transport retry count.',
                         'roce_transport_retries_exceeded_errors_total'),
                portRate('Receive errors', 'Received packets with errors.', 'roce_port_receive_errors_total'),
                portRate('Transmit discards',
                         'Outbound packets discarded (port down or congested).',
                         'roce_port_transmit_discards_total'),
                portRate('ICRC errors', 'RoCE packets received with an invalid ICRC.', 'roce_icrc_errors_total'),
                rb(g.timeseries('Pre-FEC bit error rate', "FEC corrected bits per bit at the netdev's speed "
                                                          + "(ethtool netlink FEC_GET); fec_ber_high divides by the FEC code's line rate "
                                                          + '(425 Gb/s for 400G RS(544,514)) and judges each code against its own limit '
                                                          + '(RS(544,514) 1e-5, RS(528,514) 2e-6, BASE-R 1e-8).', 'sci', [g.target(q(|||
                  rate(roce_fec_corrected_bits_total{%(d)s, lane=""}[%(r)s])
                    / ignoring(lane) (8 * roce_netdev_speed_bytes_per_second{%(d)s} > 0)
                |||), netdev)]), ['fec_ber_high']),
                rb(g.timeseries('FEC uncorrectable blocks',
                                'Codewords FEC could not correct: frames lost on the '
                                + 'link (fec_uncorrectable).',
                                'short',
                                [g.target(q('increase(roce_fec_uncorrectable_blocks_total{%(d)s, lane=""}[%(r)s])'),
                                          netdev)]), ['fec_uncorrectable']),
                rb(g.timeseries('FEC corrected bits per lane', 'Bits FEC corrected on each lane since the link '
                                                               + "came up (mlx5 rx_err_lane_N_phy, or FEC_GET's lanes; the lanes metric group). "
                                                               + 'Lanes of a healthy link count alike; one lane with nearly all of them is the '
                                                               + 'fec_lane_skew finding, judged whether or not the group is on.', 'short', [
                  g.target(q('roce_phy_errors_total{%(d)s, kind="fec_corrected_bits", lane!=""}'),
                           '{{instance}} {{netdev}} lane {{lane}}'),
                  g.target(q('roce_fec_corrected_bits_total{%(d)s, lane!=""}'),
                           '{{instance}} {{netdev}} lane {{lane}} (FEC_GET)'),
                ]), ['fec_lane_skew']),
                rb(g.timeseries('Bits past FEC since link-up',
                                'Error bits FEC did not correct, counted since the '
                                + 'link came up (mlx5 rx_pcs_symbol_err_phy: the firmware clears it at link-up). '
                                + 'From 100 on, the post_fec_errors finding; growth is fec_uncorrectable.',
                                'short',
                                [g.target(q('roce_phy_errors_total{%(d)s, kind="pcs_symbol_errors"}'), netdev)]), ['post_fec_errors']),
                rb(g.timeseries('Module Rx power per lane', 'Optical power each lane of the module receives, in '
                                                            + "dBm; compare with the module's own low warning threshold "
                                                            + '(module_rx_power_low) and with the other lanes (module_lane_imbalance).', 'dBm', [
                  g.target(q('10 * log10(roce_module_rx_power_watts{%(d)s} * 1000 > 0)'),
                           '{{instance}} {{netdev}} lane {{lane}}'),
                  g.target(q('10 * log10(roce_module_threshold{%(d)s, monitor="rx_power_watts", '
                             + 'level="low_warning"} * 1000 > 0)'),
                           '{{instance}} {{netdev}} low warning'),
                ]), ['module_rx_power_low', 'module_lane_imbalance']),
                rb(g.timeseries('Module temperature',
                                'Case temperature of each module (module_temperature_high '
                                + "against the module's own high warning threshold).",
                                'celsius',
                                [g.target(q('roce_module_temperature_celsius{%(d)s}'), netdev)]), ['module_temperature_high']),
                rb(g.timeseries('Carrier down transitions',
                                "Times the netdev's link went down "
                                + '(carrier_down_count, what link_flap counts).',
                                'short',
                                [g.target(q('increase(roce_netdev_carrier_transitions_total{%(d)s, direction="down"}[%(r)s])'),
                                          netdev)]), ['link_flap']),
                rb(g.timeseries('PCIe AER errors',
                                'AER errors of NIC and GPU PCIe functions by severity '
                                + '(pcie_aer_errors: correctable warns, nonfatal and fatal are critical).',
                                'short',
                                [g.target(q('increase(roce_pcie_aer_errors_total{%(n)s}[%(r)s])'),
                                          '{{instance}} {{role}} {{pci}} {{severity}}')]), ['pcie_aer_errors']),
                rb(g.timeseries('PCIe AER errors on bridge ports',
                                'AER errors the root ports and PCIe switch '
                                + 'ports on NIC and GPU paths counted, by severity (pcie_bridge_aer_errors). The '
                                + 'port above a NIC counts the errors of what the NIC sends (its DMA writes, '
                                + 'GPUDirect RDMA into GPU memory): link=nic is that port; netdevs and gpus are '
                                + 'what the port serves.',
                                'short',
                                [g.target(q('increase(roce_pcie_bridge_aer_errors_total{%(n)s}[%(r)s])'),
                                          '{{instance}} {{pci}} ({{link}}: {{netdevs}} {{gpus}}) {{severity}}')]), ['pcie_bridge_aer_errors']),
                rb(g.timeseries('devlink health reporters in error',
                                'NIC devlink health reporters (fw, fw_fatal, '
                                + 'tx, rx, ...) not healthy (devlink_reporter_error).',
                                'short',
                                [g.target(q('roce_devlink_reporter_healthy{%(n)s} == 0'),
                                          '{{instance}} {{netdev}} {{reporter}}')]), ['devlink_reporter_error']),
                portRate('Transmit wait',
                         'Ticks the port had data to send but no flow-control '
                         + 'credits (port_xmit_wait): back-pressure from the peer.',
                         'roce_port_transmit_wait_total',
                         unit='short'),
                // per collector, not per port
                rb(g.timeseries('Collector read errors',
                                'Single reads (files, netlink, ioctls) that failed.',
                                'cps',
                                [g.target(q('rate(roce_collector_errors_total{%(n)s}[%(r)s])'),
                                          '{{instance}} {{collector}}')]), ['collector_failing']),
              ])
