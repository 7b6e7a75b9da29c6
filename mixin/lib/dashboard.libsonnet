// A small Grafana dashboard builder (schema 39: time series, stat, table,
// heatmap and state timeline panels, query variables), enough for the
// mixin's dashboards and for extending them: every panel takes its width
// and height (`w`, `h`) and `layout` places the panels left to right, top to
// bottom. Every panel and query reads the `datasource` variable.
local ds = { type: 'prometheus', uid: '${datasource}' };

{
  datasource:: ds,

  // One query: a range query (time series) or an instant one (tables,
  // stats), in a Grafana format ('table', 'heatmap').
  target(expr, legend='', format=null, instant=false)::
    { datasource: ds, expr: expr, legendFormat: if legend == '' then '__auto' else legend }
    + (if format != null then { format: format } else {})
    + (if instant then { instant: true, range: false } else { range: true }),

  // A panel of `kind`; its queries get refIds A, B, ...
  panel(kind, title, description, unit, targets, w=12, h=8)::
    {
      type: kind,
      title: title,
      description: description,
      datasource: ds,
      fieldConfig: { defaults: { unit: unit }, overrides: [] },
      targets: [targets[i] { refId: std.char(65 + i) } for i in std.range(0, std.length(targets) - 1)],
      w:: w,
      h:: h,
    },

  timeseries(title, description, unit, targets, w=12, h=8, stack=false)::
    self.panel('timeseries', title, description, unit, targets, w, h) {
      fieldConfig+: { defaults+: { custom: {
        drawStyle: 'line',
        fillOpacity: 10,
        lineWidth: 1,
        showPoints: 'never',
      } + (if stack then { stacking: { mode: 'normal', group: 'A' } } else {}) } },
      options: {
        legend: { displayMode: 'table', placement: 'bottom', calcs: ['max', 'lastNotNull'] },
        tooltip: { mode: 'multi', sort: 'desc' },
      },
    },

  // A single value; `thresholds`: [[value, colour]] above `base` (green;
  // red where a low value is the bad one).
  stat(title, description, unit, expr, w=4, h=4, thresholds=[], base='green')::
    self.panel('stat', title, description, unit, [self.target(expr, instant=true)], w, h) {
      fieldConfig+: { defaults+: { thresholds: {
        mode: 'absolute',
        steps: [{ color: base, value: null }]
               + [{ color: t[1], value: t[0] } for t in thresholds],
      } } },
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        colorMode: 'background',
        graphMode: 'none',
        textMode: 'value',
      },
    },

  // An instant query as a table; `hide`: columns left out (Time,
  // __name__ and job always), `rename`: {column: header}, `order`: the
  // columns named first, in that order (the others follow as Grafana
  // orders them).
  table(title, description, unit, expr, hide=[], w=24, h=8, rename={}, order=[])::
    self.panel('table',
               title,
               description,
               unit,
               [self.target(expr, format='table', instant=true)],
               w,
               h) {
      options: { showHeader: true, cellHeight: 'sm' },
      transformations: [{
        id: 'organize',
        options: {
          excludeByName: { Time: true, __name__: true, job: true } + { [k]: true for k in hide },
          renameByName: rename,
        } + (if std.length(order) > 0
             then { indexByName: { [order[i]]: i for i in std.range(0, std.length(order) - 1) } }
             else {}),
      }],
    },

  // A dashed threshold line (time series) or coloured cells (tables) at
  // `value`.
  withThreshold(panel, value, color='red')::
    panel {
      fieldConfig+: { defaults+: {
        thresholds: {
          mode: 'absolute',
          steps: [{ color: 'green', value: null }, { color: color, value: value }],
        },
      } + (if panel.type == 'timeseries' then { custom+: { thresholdsStyle: { mode: 'dashed' } } }
           else { custom: { cellOptions: { type: 'color-text' } } }) },
    },

  // Links of `column`'s cells (a table's field): [{title, url}]; the url
  // may use ${__data.fields.<column>} of the same row.
  withCellLinks(panel, column, links)::
    panel {
      fieldConfig+: { overrides+: [{
        matcher: { id: 'byName', options: column },
        properties: [{ id: 'links', value: links }],
      }] },
    },

  // Links in the panel's header menu: [{title, url}].
  withPanelLinks(panel, links):: panel { links+: links },

  // Grid positions left to right, top to bottom (a panel that does not fit
  // the 24 columns starts a row below the tallest of the row), and ids.
  layout(panels)::
    local step(acc, p) =
      local wrap = acc.x + p.w > 24;
      local x = if wrap then 0 else acc.x;
      local y = if wrap then acc.y + acc.rowH else acc.y;
      local rowH = if wrap then 0 else acc.rowH;
      {
        x: x + p.w,
        y: y,
        rowH: std.max(rowH, p.h),
        out: acc.out + [p { id: std.length(acc.out) + 1, gridPos: { x: x, y: y, w: p.w, h: p.h } }],
      };
    std.foldl(step, panels, { x: 0, y: 0, rowH: 0, out: [] }).out,

  // A query variable (multi-value, with All unless `all` is false).
  queryVariable(name, label, query, all=true, allValue='.+', current=null)::
    {
      name: name,
      label: label,
      type: 'query',
      datasource: ds,
      definition: query,
      query: { query: query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
      refresh: 2,
      sort: 1,
      multi: true,
      includeAll: all,
      current: if current != null then current
      else if all then { selected: true, text: ['All'], value: ['$__all'] } else {},
      options: [],
      hide: 0,
      regex: '',
    } + (if all then { allValue: allValue } else {}),

  datasourceVariable:: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    current: {},
    hide: 0,
    refresh: 1,
    regex: '',
    options: [],
  },

  // A dashboard; `links`: its header links besides the one to the
  // dashboards that share its first tag.
  dashboard(uid, title, description, tags, refresh, variables, panels, links=[])::
    {
      uid: uid,
      title: title,
      description: description,
      tags: tags,
      editable: true,
      graphTooltip: 1,
      timezone: '',
      refresh: refresh,
      schemaVersion: 39,
      version: 1,
      time: { from: 'now-6h', to: 'now' },
      timepicker: {},
      annotations: { list: [] },
      links: [{
        title: 'roce_exporter dashboards',
        type: 'dashboards',
        tags: tags[0:1],
        asDropdown: true,
        includeVars: true,
        keepTime: true,
      }] + links,
      templating: { list: variables },
      panels: $.layout(panels),
    },
}
