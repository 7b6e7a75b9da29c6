//! Giving memory back after a burst of connections: each connection's
//! buffers (hyper's read buffer up to `max_request_bytes`, TLS state,
//! the encoded response) are freed to glibc's malloc when it closes, but
//! glibc keeps freed memory in its arenas (one per thread that allocated)
//! and returns it to the kernel only from the top of the heap. After 2,000
//! connections the process's RSS stays where the burst took it. When the
//! connection table falls from a burst to a few connections, the table
//! asks malloc to return its free memory (`malloc_trim(0)`: every arena,
//! free pages released with `madvise(MADV_DONTNEED)`), once per burst.
//! Elsewhere than glibc it does nothing (musl's mallocng returns freed
//! memory on its own).

/// Open connections a burst must have reached for its end to be trimmed.
pub(crate) const BURST: usize = 64;

/// Whether a table that reached `peak` open connections since its last trim
/// and has `open` now should trim: the burst is over when at most an eighth
/// of it is left.
pub(crate) fn burst_over(peak: usize, open: usize) -> bool {
    peak >= BURST && open <= peak / 8
}

/// Returns the allocator's free memory to the kernel, where it can.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointer and only walks the allocator's
    // own free lists under its locks; it is safe to call from any thread
    // at any time (glibc's malloc/malloc.c, __malloc_trim).
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(
        released = released != 0,
        "free memory returned after a burst of connections"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_over_at_an_eighth_of_its_peak() {
        assert!(!burst_over(10, 0), "no burst");
        assert!(!burst_over(2000, 251));
        assert!(burst_over(2000, 250));
        assert!(burst_over(64, 8));
        release_free_memory();
    }
}
