// Text of the rendered files: Prometheus rule files as YAML and Grafana
// dashboards as JSON, written the same way by every jsonnet.
//
// Jsonnet objects have no field order and jsonnet 0.18 writes floats with
// 17 digits (0.2 as 0.20000000000000001) and multi-line strings as one
// escaped line, so these writers order the rule files' fields by `order`
// (alert, expr, for, labels, annotations; dashboards keep jsonnet's sorted
// fields), write each number in the fewest digits that read back to it, and
// write multi-line PromQL as YAML block literals. Everything here keeps to
// jsonnet 0.18's native builtins (std.strReplace, std.join, std.objectHas)
// where it can: its interpreted ones (std.format, std.sort, slices,
// std.escapeStringJson) made rendering take minutes.
local order = [
  'groups',
  'inhibit_rules',
  'name',
  'interval',
  'rules',
  'alert',
  'record',
  'expr',
  'for',
  'labels',
  'annotations',
  'summary',
  'description',
  'runbook_url',
  'source_matchers',
  'target_matchers',
  'equal',
];
local known = std.set(order);
// The fields of `o`: those in `order` as it lists them, then the others
// sorted (std.objectFields sorts; std.sort is interpreted and slow).
local fields(o) =
  [k for k in order if std.objectHas(o, k)]
  + [k for k in std.objectFields(o) if !std.setMember(k, known)];

// The shortest decimal that reads back to x, as Python's repr writes it
// (1e-12, 0.2, 1.5e-08, 100).
local number(x) =
  if x == std.floor(x) && std.abs(x) < 1e16 then std.toString(x)
  else
    local sci = [
      std.format('%.' + p + 'e', x)
      for p in std.range(0, 16)
      if std.parseJson(std.format('%.' + p + 'e', x)) == x
    ][0];
    local parts = std.split(sci, 'e');
    local exp = std.parseInt(std.lstripChars(parts[1], '+'));
    local neg = std.startsWith(parts[0], '-');
    local digits = std.strReplace(std.lstripChars(parts[0], '-'), '.', '');
    local sign = if neg then '-' else '';
    if exp < -4 || exp >= 16 then sci
    else if exp < 0 then sign + '0.' + std.repeat('0', -exp - 1) + digits
    else if std.length(digits) > exp + 1 then
      sign + digits[0:exp + 1] + '.' + digits[exp + 1:]
    else sign + digits + std.repeat('0', exp + 1 - std.length(digits)) + '.0';

// A JSON string. Control characters other than these do not occur in the
// mixin's text (tests/monitoring/run.py parses every rendered file).
local quote(s) = '"' + std.foldl(
  function(t, e) std.strReplace(t, e[0], e[1]),
  [['\\', '\\\\'], ['"', '\\"'], ['\n', '\\n'], ['\t', '\\t']],
  s
) + '"';
local has(hay, needle) = std.length(std.strReplace(hay, needle, '')) != std.length(hay);

local scalarJson(v) =
  if std.isString(v) then quote(v)
  else if std.isNumber(v) then number(v)
  else if std.isBoolean(v) then (if v then 'true' else 'false')
  else if v == null then 'null'
  else error 'not a scalar: ' + std.toString(v);

local json(v, indent='') =
  if std.isObject(v) then
    if std.length(std.objectFields(v)) == 0 then '{}'
    else '{\n' + std.join(',\n', [
      indent + '  ' + quote(k) + ': ' + json(v[k], indent + '  ')
      for k in std.objectFields(v)
    ]) + '\n' + indent + '}'
  else if std.isArray(v) then
    if std.length(v) == 0 then '[]'
    else '[\n' + std.join(',\n', [indent + '  ' + json(x, indent + '  ') for x in v])
         + '\n' + indent + ']'
  else scalarJson(v);

// A YAML scalar: block literal where it spans lines, single quotes where
// that spares escaping double quotes, else a JSON string (valid YAML).
local yamlScalar(v, indent) =
  if std.isString(v) && has(v, '\n') then
    if std.startsWith(v, ' ') || std.endsWith(v, '\n') then error 'no block literal for: ' + v
    else '|-\n' + std.join('\n', [
      if line == '' then '' else std.repeat(' ', indent) + line
      for line in std.split(v, '\n')
    ])
  else if std.isString(v) && has(v, '"') && !has(v, "'") && !has(v, '\\')
  then "'" + v + "'"
  else if std.isObject(v) then '{}'
  else if std.isArray(v) then '[]'
  else scalarJson(v);

local nonEmpty(v) = (std.isObject(v) || std.isArray(v)) && std.length(v) > 0;

// Lines of a YAML value at `indent` spaces, the first one led by `lead`
// in place of the indent (a list item's `- `). (A slice of the text would
// do the same, but slices are interpreted, char by char, in jsonnet 0.18.)
local yaml(v, indent=0, lead=null) =
  local pad = std.repeat(' ', indent);
  local first = if lead == null then pad else lead;
  if std.isObject(v) then
    local keys = fields(v);
    std.join('\n', [
      local k = keys[i];
      local at = if i == 0 then first else pad;
      if nonEmpty(v[k]) then at + k + ':\n' + yaml(v[k], indent + 2)
      else at + k + ': ' + yamlScalar(v[k], indent + 2)
      for i in std.range(0, std.length(keys) - 1)
    ])
  else if std.isArray(v) then
    std.join('\n', [
      yaml(v[i], indent + 2, (if i == 0 then first else pad) + '- ')
      for i in std.range(0, std.length(v) - 1)
    ])
  else first + yamlScalar(v, indent);

{
  number:: number,
  // A JSON document: two-space indent, fields sorted. Without the final
  // newline, which `jsonnet -S -m` adds (mixin/render.py too).
  json(v):: json(v),
  // A YAML document after `header` (comment lines), without the final
  // newline.
  yaml(v, header=''):: header + yaml(v),
}
