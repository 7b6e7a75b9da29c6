//! The device tables of the processes writing NCCL logs: which RDMA port
//! or interface each of a process's net device indexes is, kept per source
//! file and writer, capped per process and in all, the least recently
//! heard process giving way.

use super::*;

#[derive(Debug)]
pub(super) struct Process {
    /// net name -> device index -> device.
    pub(super) nets: HashMap<String, BTreeMap<u32, NetDevice>>,
    pub(super) sockets: BTreeMap<u32, String>,
    pub(super) last_seen: Instant,
}

impl Process {
    pub(super) fn entries(&self) -> usize {
        self.nets.values().map(BTreeMap::len).sum::<usize>() + self.sockets.len()
    }

    pub(super) fn bytes(&self) -> usize {
        let device = |d: &NetDevice| {
            std::mem::size_of::<NetDevice>()
                + d.members
                    .iter()
                    .map(|m| std::mem::size_of_val(m) + m.device.capacity())
                    .sum::<usize>()
        };
        std::mem::size_of::<Process>()
            + self
                .nets
                .iter()
                .map(|(n, t)| n.capacity() + t.values().map(device).sum::<usize>())
                .sum::<usize>()
            + self
                .sockets
                .values()
                .map(|s| std::mem::size_of::<u32>() + std::mem::size_of::<String>() + s.capacity())
                .sum::<usize>()
    }
}

impl Dropped {
    pub(super) fn add(&mut self, more: Dropped) {
        self.processes += more.processes;
        self.nets += more.nets;
        self.devices += more.devices;
        self.sockets += more.sockets;
    }
}

impl Aggregator {
    pub(super) fn process(&mut self, key: &ProcessKey, now: Instant) -> Option<&mut Process> {
        if !self.processes.contains_key(key) {
            if self.processes.len() >= self.cfg.max_processes {
                self.evict_least_recent(None);
            }
            self.processes.insert(
                key.clone(),
                Process {
                    nets: HashMap::new(),
                    sockets: BTreeMap::new(),
                    last_seen: now,
                },
            );
        }
        let p = self.processes.get_mut(key)?;
        p.last_seen = now;
        Some(p)
    }

    /// Evicts the least recently heard processes (never `keep`) until the
    /// device entries are within their cap.
    pub(super) fn keep_entries_capped(&mut self, keep: &ProcessKey) {
        while self.device_entries > self.cfg.max_device_entries {
            if !self.evict_least_recent(Some(keep)) {
                break;
            }
        }
    }

    pub(super) fn evict_least_recent(&mut self, keep: Option<&ProcessKey>) -> bool {
        let oldest = self
            .processes
            .iter()
            .filter(|(k, _)| Some(*k) != keep)
            .min_by_key(|(_, p)| p.last_seen)
            .map(|(k, _)| k.clone());
        match oldest.and_then(|k| self.processes.remove(&k)) {
            Some(p) => {
                self.device_entries -= p.entries();
                self.dropped.processes += 1;
                true
            }
            None => false,
        }
    }

    /// Bytes of device-table state held (an estimate from the sizes of what
    /// is stored, keys included).
    pub fn state_bytes(&self) -> usize {
        self.processes
            .iter()
            .map(|(k, p)| k.0.capacity() + k.1.capacity() + p.bytes())
            .sum()
    }
}
