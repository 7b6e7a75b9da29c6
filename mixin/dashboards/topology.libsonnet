// "GPU-NIC topology": GPU x NIC path classes, NUMA, PCIe link state,
// GPUDirect and cabling of one node (or a few).
local common = import 'common.libsonnet';

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local rb = x.withRunbook;
  local dcgm(way, host) = g.target(q(|||
    max by (%(cluster)s, %(host)s, pci_bus_id) (DCGM_FI_PROF_PCIE_%(way)s_BYTES{%(dcgm)s})
    * on (%(cluster)s, %(host)s, pci_bus_id) group_right ()
    dcgm_exporter_gpu:roce_gpu:info{%(n)s}
  |||, { way: way, host: host }), '{{instance}} GPU {{gpu}} ' + std.asciiLower(way));
  x.dashboard('topology',
              'GPU-NIC topology',
              'GPU × NIC path classes, NUMA, PCIe link state and GPUDirect.',
              [
                rb(g.table('GPU to NIC paths',
                           'PCIe path class between every GPU and RDMA device, as '
                           + 'nvidia-smi topo -m names it (PIX best, SYS worst).',
                           'none',
                           q('roce_gpu_nic_path_info{%(d)s}'),
                           hide=['Value'],
                           w=12), ['gpu_nic_path_far']),
                g.table('Nearest NIC per GPU',
                        'The RDMA device(s) with the best path class from each '
                        + 'GPU (the pairs of roce_gpu_nic_path_info marked nearest).',
                        'none',
                        q('roce_gpu_nic_path_info{%(d)s, nearest="true"}'),
                        hide=['Value', 'nearest'],
                        w=12),
                g.table('GPUs',
                        'GPUs in PCI bus order, with NUMA node.',
                        'none',
                        q('roce_gpu_info{%(n)s}'),
                        hide=['Value'],
                        w=12),
                g.table('RDMA devices',
                        'NUMA node and PCI address of each RDMA device.',
                        'none',
                        q('roce_device_info{%(d)s}'),
                        hide=['Value'],
                        w=12),
                g.timeseries('GPU PCIe throughput (dcgm-exporter)',
                             "What dcgm-exporter measures on each GPU's "
                             + 'PCIe link (DCGM_FI_PROF_PCIE_RX_BYTES and _TX_BYTES, headers included), by our '
                             + "GPU index: GPUDirect RDMA traffic of the GPU's nearest NIC crosses it. Joined on "
                             + "dcgm-exporter's Hostname (or hostname) and pci_bus_id through "
                             + 'dcgm_exporter_gpu:roce_gpu:info (docs/deploy.md); empty without dcgm-exporter.',
                             'Bps',
                             [dcgm(way, host) for way in ['RX', 'TX'] for host in ['Hostname', 'hostname']],
                             w=24),
                rb(g.table('PCIe links',
                           'Speed per lane and width of the GPUs and NICs as trained, and what '
                           + 'each function supports (max); of every bridge on the way to the root port too '
                           + 'with --collector.pcie_hops.',
                           'none',
                           q('roce_pcie_link_info{%(n)s}'),
                           hide=['Value'],
                           order=['instance', 'pci_address', 'device', 'speed', 'max_speed', 'width', 'max_width']), ['pcie_downtrained']),
                rb(g.table('PCIe downtrained links',
                           'Links that run below what both ends support (the others are listed, '
                           + 'as 0, with --collector.pcie_hops).',
                           'bool_yes_no',
                           q('roce_pcie_link_downtrained{%(n)s}'),
                           rename={ Value: 'downtrained' }), ['pcie_downtrained']),
                rb(g.table('ACS request redirect',
                           'ACS P2P Request Redirect on bridges between a GPU and '
                           + 'its NIC where it is enabled (it sends peer-to-peer traffic through the root complex) '
                           + 'or unknown (config space unreadable); every bridge with --collector.pcie_hops.',
                           'none',
                           q('roce_pcie_acs_request_redirect{%(n)s} == 1'),
                           hide=['Value'],
                           w=12), ['acs_on_gpu_nic_path']),
                rb(g.table('GPUDirect RDMA',
                           'Whether GPUDirect RDMA can work, per mechanism.',
                           'bool_yes_no',
                           q('roce_gpudirect_rdma_ready{%(n)s}'),
                           rename={ Value: 'ready' },
                           w=12), ['gpudirect_unavailable', 'gpudirect_not_used']),
                g.table('GPUDirect prerequisites',
                        'Prerequisites of each GPUDirect mechanism.',
                        'bool_yes_no',
                        q('roce_gpudirect_rdma_prerequisite{%(n)s}'),
                        rename={ Value: 'met' }),
                rb(g.table('Cabling',
                           'The switch (system name) and switch port each RDMA port reaches, '
                           + 'by LLDP (lldp.mode lldpd or capture), with the GPUs whose nearest NIC it is '
                           + '(gpus, from the PCIe topology: two when a NIC serves two GPUs; empty for a NIC '
                           + 'nearest to none); the rail verdict is on the fleet dashboard\'s "Cabling".',
                           'none',
                           'max by (instance, device, port, netdev, gpus, system_name, port_id, chassis_id) (\n  '
                           + x.cablingGpus(q('roce_lldp_neighbor_info{%(d)s}'),
                                           q('roce_nic_nearest_gpus_info{%(d)s}'),
                                           'instance, device',
                                           'instance, device, port')
                           + '\n)',
                           hide=['Value'],
                           order=['instance', 'device', 'port', 'netdev', 'gpus', 'system_name', 'port_id', 'chassis_id']), ['lldp_neighbor_missing', 'lldp_rail_mismatch', 'lldp_neighbor_changed']),
              ])
