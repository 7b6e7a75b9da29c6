// "Probes": loopback probe RTT and failures of one node (or a few).
local common = import 'common.libsonnet';

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local rb = x.withRunbook;
  local port = '{{instance}} {{device}}/{{port}}';
  local bucket = q('roce_probe_rtt_seconds_bucket{%(d)s}');
  local quantile(phi, name) = g.target(q(
    'histogram_quantile(%(phi)s, sum by (instance, device, port, op, le) (rate(%(b)s[%(r)s])))',
    { phi: phi, b: bucket }
  ), port + ' {{op}} ' + name);
  x.dashboard('probes', 'Probes', 'Loopback probe RTT and failures by reason.', [
    g.panel('heatmap',
            'Probe RTT',
            'Distribution of loopback probe round trip times.',
            's',
            [g.target(q('sum by (le) (increase(%(b)s[%(r)s]))', { b: bucket }),
                      '{{le}}',
                      format='heatmap')],
            w=24,
            h=9) {
      options: {
        calculate: false,
        yAxis: { unit: 's' },
        cellGap: 1,
        color: { mode: 'scheme', scheme: 'Spectral' },
      },
    },
    rb(g.timeseries('Probe RTT p50 / p99',
                    'Quantiles of the probe RTT per port and operation.',
                    's',
                    [quantile('0.5', 'p50'), quantile('0.99', 'p99')]), ['probe_latency_regression']),
    rb(g.timeseries('Probe failures by reason',
                    'Failed probes per second, by reason.',
                    'cps',
                    [g.target(q('sum by (instance, device, port, reason) '
                                + '(rate(roce_probe_failures_total{%(d)s}[%(r)s]))'),
                              port + ' {{reason}}')]), ['probe_failures']),
    g.panel('state-timeline',
            'Probe success',
            "1 when the port's last probe round "
            + 'succeeded.',
            'bool_yes_no',
            [g.target(q('roce_probe_success{%(d)s}'), port)],
            w=24,
            h=6) {
      options: { showValue: 'never', mergeValues: true },
    },
    g.timeseries('Probe requests',
                 'Probes sent per second.',
                 'cps',
                 [g.target(q('rate(roce_probe_requests_total{%(d)s}[%(r)s])'), port)]),
    g.timeseries('Time since last successful probe',
                 "Age of each port's last successful probe.",
                 's',
                 [g.target(q('time() - roce_probe_last_success_timestamp_seconds{%(d)s}'), port)]),
    rb(g.timeseries('Probe failure ratio', 'Failed probes over probes sent.', 'percentunit', [g.target(q(|||
      sum by (instance, device, port) (rate(roce_probe_failures_total{%(d)s}[%(r)s]))
        / sum by (instance, device, port) (rate(roce_probe_requests_total{%(d)s}[%(r)s]))
    |||), port)]), ['probe_failures']),
  ])
