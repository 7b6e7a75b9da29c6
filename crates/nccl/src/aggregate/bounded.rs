//! Bounded state: arrivals counted per second, maps capped by evicting
//! their oldest entry.

use super::*;

/// Counts per second of arrival, so the window count is bounded memory.
pub(super) fn bump(q: &mut VecDeque<(Instant, u64)>, now: Instant) {
    match q.back_mut() {
        Some((t, n)) if now.saturating_duration_since(*t) < Duration::from_secs(1) => *n += 1,
        _ => {
            if q.len() >= 4096 {
                q.pop_front();
            }
            q.push_back((now, 1));
        }
    }
}

pub(super) fn insert_capped<K: std::hash::Hash + Eq + Clone>(
    map: &mut HashMap<K, Instant>,
    key: K,
    now: Instant,
    cap: usize,
) {
    if map.len() >= cap && !map.contains_key(&key) {
        evict_oldest(map, |t| *t);
    }
    map.insert(key, now);
}

pub(super) fn evict_oldest<K: std::hash::Hash + Eq + Clone, V>(
    map: &mut HashMap<K, V>,
    at: impl Fn(&V) -> Instant,
) {
    if let Some(k) = map
        .iter()
        .min_by_key(|(_, v)| at(v))
        .map(|(k, _)| k.clone())
    {
        map.remove(&k);
    }
}
