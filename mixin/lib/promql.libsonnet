// What every rule file builds its PromQL and annotations from, for one
// _config `c`: selectors, grouping labels, ranges and `for:` derived from
// the scrape interval, alert names and runbook links.
local join(parts) = std.join(', ', [p for p in parts if p != '']);
local uniq(xs) = std.foldl(function(acc, x) if std.member(acc, x) then acc else acc + [x], xs, []);

// The heading anchor GitHub (and most Markdown renderers) gives `## <s>`:
// lower case, punctuation other than `-` and `_` dropped, spaces as `-`.
local anchor(section) =
  local keep(ch) =
    local cp = std.codepoint(ch);
    (cp >= 97 && cp <= 122) || (cp >= 48 && cp <= 57) || ch == '_' || ch == '-' || ch == ' '
    || cp > 127;
  std.strReplace(std.join('', [ch for ch in std.stringChars(std.asciiLower(section)) if keep(ch)]),
                 ' ',
                 '-');

local camel(id) = 'Roce' + std.join('', [
  if w == '' then '' else std.asciiUpper(w[0]) + w[1:]
  for w in std.split(id, '_')
]);

function(c) {
  local p = self,
  assert c.clusterLabel != '' : 'clusterLabel must name a label (series without it are one cluster)',
  assert std.length(c.fleetBy) > 0 : 'fleetBy must name at least one label (job)',
  assert c.scrapeIntervalSeconds > 0 : 'scrapeIntervalSeconds must be above 0',

  // `a, b` of the non-empty matchers, `{...}` around them.
  join(parts):: join(parts),
  uniq(xs):: uniq(xs),
  sel(extra=''):: '{' + join([c.selector, extra]) + '}',
  // A text block (|||) as PromQL: each `%(key)s` of it replaced by
  // args[key], the final newline off. (std.strReplace is native, where
  // std.format and std.rstripChars are interpreted: this is what keeps
  // rendering the mixin fast under jsonnet 0.18.)
  expr(text, args={})::
    local filled = std.foldl(
      function(t, k) std.strReplace(t, '%(' + k + ')s', std.toString(args[k])),
      std.objectFields(args),
      text
    );
    if std.endsWith(filled, '\n') then std.substr(filled, 0, std.length(filled) - 1) else filled,
  // Whether `hay` holds `needle`.
  has(hay, needle):: std.length(std.strReplace(hay, needle, '')) != std.length(hay),

  // Seconds as a Prometheus duration (4m, 90s, 1h).
  duration(seconds)::
    local s = std.floor(seconds);
    if s >= 3600 && s % 3600 == 0 then '%dh' % (s / 3600)
    else if s >= 60 && s % 60 == 0 then '%dm' % (s / 60)
    else '%ds' % s,
  // The range of every rate()/increase(): four scrape intervals, so that a
  // window holds at least three samples whatever their phase.
  rateRange:: p.duration(4 * c.scrapeIntervalSeconds),
  // `for:` of the finding alerts: the finding in two consecutive scrapes
  // (the exporter's own windows and hold time do the rest).
  findingFor:: p.duration(2 * c.scrapeIntervalSeconds),
  // `for:` of the finding alert of rule `id`: findingFor, or the scrapes
  // findingForScrapes gives the rule. peer_probe_port_isolated: the
  // exporter's verdict already holds (every probe to at least two peers
  // lost, four each, and no answer at all) and a local port's history
  // starts empty at each exporter start, so no restart or single loss
  // makes it; alerting at the first evaluation that sees it puts a
  // black-holed port's alert within a minute of the fault at a 30 s scrape
  // (docs/peer-probes.md, "Time to an alert").
  findingForScrapes:: { peer_probe_port_isolated: 0 },
  findingForRule(id)::
    p.duration(std.get(p.findingForScrapes, id, 2) * c.scrapeIntervalSeconds),
  // `for:` of the fleet's peer-probe verdicts on a node and on a local
  // port: held over two evaluations one scrape apart, long enough that an
  // exporter restart (its responder gone for seconds, its probers' losses
  // reset once they read its new endpoints) does not page, short enough
  // that a dead node is named within two minutes of the fault at a 30 s
  // scrape.
  peerVerdictFor:: p.duration(c.scrapeIntervalSeconds),

  // fleetBy, then the cluster label, then `extra`, each once.
  fleetLabels(extra=[]):: uniq([l for l in c.fleetBy + [c.clusterLabel] + extra if l != '']),
  fleetBy(extra=[]):: std.join(', ', p.fleetLabels(extra)),
  // The first fleet label as an alert template names it ({{ $labels.job }}).
  fleetName:: '{{ $labels.' + c.fleetBy[0] + ' }}',

  // The alert of a rule: `Roce` + its id in CamelCase (pfc_storm:
  // RocePfcStorm), a leading `roce` of the id not repeated (roce_tc_shared:
  // RoceTcShared, rocev2_gid_missing: RoceV2GidMissing).
  alertName(id)::
    if std.startsWith(id, 'roce') && std.length(id) > 4 then camel(std.lstripChars(id[4:], '_'))
    else camel(id),
  anchor(section):: anchor(section),

  // The runbook URL of `section` (runbookURLBase's template filled in;
  // '': the whole runbook); `instance`: what {instance} becomes; `anchor`:
  // the section's anchor where it is not a heading's text (a Grafana
  // variable).
  runbookURL(section, instance, anchor=null)::
    local base = c.runbookURLBase;
    local templ = if p.has(base, '{section}') || p.has(base, '{anchor}') || section == ''
    then base else base + '#{anchor}';
    std.strReplace(std.strReplace(std.strReplace(templ, '{instance}', instance),
                                  '{section}',
                                  section),
                   '{anchor}',
                   if anchor == null then p.anchor(section) else anchor),

  // An alert's runbook URL: {instance} is the alert's instance when it is a
  // live exporter, else one exporter of the selector that is up.
  alertRunbookURL(section, liveInstance=true)::
    p.runbookURL(section, if liveInstance then '{{ $labels.instance }}' else
      '{{ with query `up{' + c.selector + '} == 1` }}{{ . | first | label "instance" }}{{ end }}'),

  // An alerting rule; `for` omitted where it is 0s.
  alert(name, expr, for_, labels, summary, description, section, liveInstance=true)::
    { alert: name, expr: expr }
    + (if for_ != '' && for_ != '0s' then { 'for': for_ } else {})
    + (if labels != null && std.length(labels) > 0 then { labels: labels } else {})
    + {
      annotations: {
        summary: summary,
        description: description,
        runbook_url: p.alertRunbookURL(section, liveInstance),
      },
    },

  // A threshold as PromQL writes it.
  num(x):: (import 'manifest.libsonnet').number(x),

  // Severities of findings that notify; info findings are for /findings,
  // `check` and dashboards.
  notify:: ['critical', 'warning'],
  notifies(rule):: std.length([s for s in rule.severities if std.member(p.notify, s)]) > 0,
}
