//! Families of the netdev source (skeleton: lands with its issue).

use super::{Family, FamilySamples};
use crate::snapshot::Snapshot;

pub const FAMILIES: &[Family] = &[];

pub fn collect(_snapshot: &Snapshot, _out: &mut Vec<FamilySamples>) {}
