// What every dashboard is built from, for one _config `c`: the builder,
// the selectors of its queries, its variables and runbook links.
//
// Every query selects the exporter's series by the `job` and `cluster`
// variables (and the selector's other matchers), so the dashboards follow
// the job a chart or ServiceMonitor gives the exporter: the job variable
// lists every job exporting roce_exporter_build_info and starts on the
// selector's job.
local g = import '../lib/dashboard.libsonnet';
local promql = import '../lib/promql.libsonnet';
local selector = import '../lib/selector.libsonnet';

// (Object fields are evaluated again at each access in jsonnet 0.18, locals
// once: what many panels read is computed in locals here.)
function(c)
  local p = promql(c);
  local matchers = selector.matchers(c.selector);
  local others = selector.text([m for m in matchers if m.name != 'job']);
  local jobs = [std.parseJson(m.value) for m in matchers if m.name == 'job' && m.op == '='];
  local base = p.join([others, 'job=~"$job"', c.clusterLabel + '=~"$cluster"']);
  local n = base + ', instance=~"$instance"';
  local d = n + ', device=~"$device"';
  local args = {
    base: base,
    n: n,
    d: d,
    r: p.rateRange,
    ne: c.nodeExporterSelector,
    dcgm: c.dcgmExporterSelector,
    cluster: c.clusterLabel,
  };
  {
    local x = self,
    g:: g,
    p:: p,
    // The selector's matchers other than its job's, and the job it names.
    others:: others,
    defaultJob:: if std.length(jobs) > 0 then jobs[0] else null,

    // The exporter's series of the selected jobs and clusters; of the
    // selected instances (node level series, no device label); with a device
    // label.
    base:: base,
    n:: n,
    d:: d,
    // The range of every rate()/increase(): 4 scrape intervals (Grafana's
    // $__rate_interval assumes the data source's scrape interval setting, 15 s
    // unless configured, and is one sample wide at 60 s).
    r:: args.r,
    // PromQL of a dashboard: %(base)s, %(n)s, %(d)s, %(r)s, %(ne)s, %(dcgm)s
    // and %(cluster)s filled in.
    q(text, more={}):: p.expr(text, args + more),

    // Data source, cluster, job, instance and device. cluster (an external
    // or target label) may be absent: All matches it empty. The per-node
    // dashboards start on one instance (Grafana selects the first; at 1,000
    // nodes `All` would pull every node into every panel); several can be
    // picked.
    variables(oneInstance=true)::
      local info(more) =
        local m = p.join([others, more]);
        'roce_exporter_build_info' + (if m == '' then '' else '{' + m + '}');
      [
        g.datasourceVariable,
        g.queryVariable('cluster',
                        'Cluster',
                        'label_values(%s, %s)' % [info(''), c.clusterLabel],
                        allValue='.*'),
        g.queryVariable('job',
                        'Job',
                        'label_values(%s, job)' % info(c.clusterLabel + '=~"$cluster"'),
                        current=if x.defaultJob == null then null
                        else { selected: true, text: [x.defaultJob], value: [x.defaultJob] }),
        g.queryVariable('instance',
                        'Instance',
                        'label_values(roce_exporter_build_info{%s}, instance)' % x.base,
                        all=!oneInstance),
        g.queryVariable('device', 'RDMA device', 'label_values(roce_port_info{%s}, device)' % x.n),
      ],

    // Runbook links (runbookURLBase, as the alerts'): a section's URL with
    // {instance} as `instance` (a Grafana expression), and whether the
    // runbook depends on the instance (the exporter serves its own).
    runbookURL(section, instance):: x.p.runbookURL(section, instance, anchor=section),
    perInstance:: x.p.has(c.runbookURLBase, '{instance}'),
    // Links in a per-node panel's menu to the runbook sections of the rules
    // and alerts it shows, on the exporter of the selected instance.
    withRunbook(panel, sections)::
      g.withPanelLinks(panel, [
        { title: 'Runbook: ' + s, url: x.runbookURL(s, '${instance}'), targetBlank: true }
        for s in sections
      ]),
    // The dashboard's header link to the whole runbook: the selected
    // instance's exporter, or the published copy.
    runbookLink(instance='${instance}'):: {
      title: 'Runbook',
      type: 'link',
      url: x.p.runbookURL('', instance, anchor=''),
      targetBlank: true,
      icon: 'doc',
    },

    // Each LLDP neighbour series (`info`) with the GPUs whose nearest NIC its
    // device is (`gpus`: roce_nic_nearest_gpus_info, one series per NIC),
    // kept without them (empty gpus) where the NIC is nearest to no GPU or the
    // topology source is off.
    cablingGpus(info, gpus, by, port)::
      '%s * on (%s) group_left (gpus) %s\n  or on (%s) %s' % [info, by, gpus, port, info],

    // `name`: the uid after dashboardUIDPrefix.
    dashboard(name, title, description, panels, variables=null, links=[x.runbookLink()])::
      g.dashboard(c.dashboardUIDPrefix + name,
                  c.dashboardTitlePrefix + title,
                  description,
                  c.dashboardTags,
                  c.dashboardRefresh,
                  if variables == null then x.variables() else variables,
                  panels,
                  links),
  }
