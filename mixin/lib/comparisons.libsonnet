// The fleet comparisons: each names what deviates. Each member of a
// comparison (an RDMA device, a RoCE netdev, a GID slot) carries its
// setting as a label (a gauge's value becomes one through count_values);
// its record is the number of members of its group that hold the same
// value. The alert names every member whose value is held by fewer members
// than the group's most common one, and every member of a group where no
// value is the most common alone (a tie: no majority to compare with, so
// each side is named). rules/comparisons.libsonnet records them,
// alerts/fleet.libsonnet alerts on them.
local names = import 'names.libsonnet';
local promql = import 'promql.libsonnet';

// Member labels of the comparisons of a netdev.
local netdevMember = ['instance', 'netdev', 'device', 'port'];

function(c) {
  local p = promql(c),
  local s = p.sel,
  local group = c.driftGroupBy,

  // {record, group: the labels of one group besides the fleet's, member:
  // the expression of the members, values: the setting's labels}
  mtu: {
    record: names.mtuSame,
    group: [],
    member: 'count_values without () ("mtu", roce_netdev_mtu_bytes%s)' % s('device!=""'),
    values: ['mtu'],
  },
  firmware: {
    record: names.firmwareSame,
    group: group,
    member: 'max by (%s) (roce_device_info%s)' % [
      p.fleetBy(group + ['instance', 'device', 'fw_version']),
      s('fw_version!=""'),
    ],
    values: ['fw_version'],
  },
  pfc: {
    record: names.pfcSame,
    group: [],
    member: 'max by (%s) (roce_qos_info%s)' % [
      p.fleetBy(netdevMember + ['pfc']),
      s('device!="", pfc!=""'),
    ],
    values: ['pfc'],
  },
  gid: {
    record: names.gidSame,
    group: ['index'],
    member: 'max by (%s) (roce_gid_info%s)' % [
      p.fleetBy(['instance', 'device', 'port', 'netdev', 'index', 'type', 'family']),
      s(),
    ],
    values: ['type', 'family'],
  },
  // The order they are recorded in.
  list:: [self.mtu, self.firmware, self.pfc, self.gid],

  // One comparison per entry of the rule table's `drift` list
  // (crates/rules/src/table.rs DRIFT): each RoCE netdev (device set) with
  // that setting, labelled config=<entry>, compared per `per` label. Only
  // NICs of one comparable group (driftGroupBy, from roce_device_info of
  // the netdev's RDMA device) are compared: two NIC generations in one
  // fleet are two groups.
  drift:: [
    local known = std.join('', [', %s!=""' % v for v in d.values]);
    local raw = d.family + s('device!=""' + known);
    // roce_device_info is 1: the product keeps the setting's value.
    local series = if std.length(group) == 0 then '(%s)' % raw else
      '(%s\n  * on (%s) group_left (%s)\n  max by (%s) (roce_device_info%s))' % [
        raw,
        p.fleetBy(['instance', 'device']),
        std.join(', ', group),
        p.fleetBy(['instance', 'device'] + group),
        s(),
      ];
    local members = p.fleetBy(netdevMember + d.per + group + d.values);
    {
      record: names.qosDrift,
      config: d.config,
      group: d.per + group,
      member: if std.length(d.values) > 0 then 'max by (%s) %s' % [members, series]
      else 'count_values without () ("value", %s)' % series,
      values: if std.length(d.values) > 0 then d.values else ['value'],
    }
    for d in std.get(c.ruleTable, 'drift', [])
  ],
  // The labels of one QoS comparison group over every drift entry (an
  // entry's absent `per` labels group as empty).
  qosGroup:: ['config'] + p.uniq(std.flattenArrays([d.per for d in std.get(c.ruleTable, 'drift', [])]))
             + group,

  // `record`: each member valued with how many members of its group hold
  // the same setting.
  sameValueRule(x)::
    local gv = p.fleetBy(x.group + x.values);
    {
      record: x.record,
      expr: '%s\n* on (%s) group_left ()\ncount by (%s) (\n  %s\n)' % [x.member, gv, gv, x.member],
    } + (if std.objectHas(x, 'config') then { labels: { config: x.config } } else {}),

  // Members of `record` whose value fewer members of their group hold than
  // the most common one, or all members of a group whose most common count
  // is shared by several values.
  deviating(record, group)::
    local g = p.fleetBy(group);
    local r = record + s();
    local top = 'max by (%s) (%s)' % [g, r];
    p.expr(|||
      %(r)s
        < on (%(g)s) group_left ()
        %(top)s
      or
      %(r)s
        and on (%(g)s)
        (
          count by (%(g)s) (%(r)s == on (%(g)s) group_left () %(top)s)
          > on (%(g)s) %(top)s
        )
    |||, { r: r, g: g, top: top }),

  // Where an alert's reader finds every value of the group and how many
  // members hold each.
  hint(record):: '`' + record + "` by the group's labels lists every member with how many share "
                 + 'its value.',
}
