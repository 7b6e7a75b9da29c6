// PromQL label matchers as data: `name op "value", ...` split into
// {name, op, value} (value as written, quoted), so that the dashboards can
// put their `$job` variable in place of a selector's job matcher.
local trim(s) = std.stripChars(s, ' \t\n');

// The selector cut at the commas outside quoted values.
local split(selector) =
  local step(acc, ch) =
    if acc.escaped then acc { cur+: ch, escaped: false }
    else if acc.quoted && ch == '\\' then acc { cur+: ch, escaped: true }
    else if ch == '"' || ch == '`' then acc { cur+: ch, quoted: !acc.quoted }
    else if !acc.quoted && ch == ',' then acc { parts+: [acc.cur], cur: '' }
    else acc { cur+: ch };
  local end = std.foldl(step,
                        std.stringChars(selector),
                        { parts: [], cur: '', quoted: false, escaped: false });
  [trim(p) for p in end.parts + [end.cur] if trim(p) != ''];

// `name op value`: the name is the leading identifier.
local parse(m) =
  local isName(ch) =
    local cp = std.codepoint(ch);
    (cp >= 65 && cp <= 90) || (cp >= 97 && cp <= 122) || (cp >= 48 && cp <= 57) || ch == '_';
  local chars = std.stringChars(m);
  local n = std.length(std.foldl(function(acc, ch) if acc.done || !isName(ch) then acc { done: true }
                                 else acc { s+: ch },
                                 chars,
                                 { s: '', done: false }).s);
  local rest = std.lstripChars(m[n:], ' ');
  local op = if std.startsWith(rest, '=~') || std.startsWith(rest, '!~') || std.startsWith(rest, '!=')
  then rest[0:2] else if std.startsWith(rest, '=') then '=' else error 'not a matcher: ' + m;
  { name: m[0:n], op: op, value: trim(rest[std.length(op):]) };

{
  matchers(selector):: [parse(m) for m in split(selector)],
  text(matchers):: std.join(', ', [m.name + m.op + m.value for m in matchers]),
}
