// Names of the recorded series that more than one file reads (rules,
// alerts and dashboards), so that a rename is one edit.
{
  // Per port (the raw series' own labels), per instance, per rail.
  port: 'instance_device_port:',
  rdmaDevices: 'instance:roce_rdma_devices:count',
  activeRateByHcaType: 'device_port:roce_port_rate_bytes_per_second:active_by_hca_type',
  // Joins with the exporters beside this one.
  nodeExporterJoin: 'node_exporter_device:roce_netdev_port:info',
  dcgmJoin: 'dcgm_exporter_gpu:roce_gpu:info',
  // Fleet comparisons: each member valued with how many of its group share
  // its setting.
  qosDrift: 'instance_netdev:roce_qos_config:same_value_count',
  mtuSame: 'instance_netdev:roce_netdev_mtu_bytes:same_value_count',
  firmwareSame: 'instance_device:roce_device_fw_version:same_value_count',
  pfcSame: 'instance_netdev:roce_pfc_priorities:same_value_count',
  gidSame: 'instance_device_port:roce_gid_type:same_value_count',
  // Peer-probe verdicts: per peer port, per local port, per pair, per switch.
  peer: 'peer:roce_peer_probe_',
  peerPort: 'instance_device_port:roce_peer_probe_',
  peerPair: 'instance_device_port_peer:roce_peer_probe_path_lost:count',
  peerSwitchOfPort: 'instance_device_port:roce_peer_probe_switch:info',
  peerNodeSeen: 'peer:roce_peer_probe_endpoint_info:last',
  peerNodePort: 'peer:roce_peer_probe_port:info',
  peerSwitch: 'switch:roce_peer_probe_',
  // LLDP rails.
  lldpPod: 'instance:roce_lldp_pod:info',
  lldpSwitchPod: 'instance_device:roce_lldp_switch:pod',
  lldpNodes: 'pod_device_switch:roce_lldp_nodes:count',
}
