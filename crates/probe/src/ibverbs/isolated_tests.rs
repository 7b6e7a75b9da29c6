use super::Isolated;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A resource whose destroy fails as on a removed device.
struct Failing(Arc<AtomicUsize>);

impl Drop for Failing {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("assertion `left == right` failed: ibv_destroy_qp returned EIO");
    }
}

#[test]
fn resources_whose_destroy_panics_are_all_dropped_without_aborting() {
    struct Session {
        _a: Isolated<Failing>,
        _b: Isolated<Failing>,
        _c: Isolated<Arc<Failing>>,
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let session = Session {
        _a: Isolated::new(Failing(dropped.clone())),
        _b: Isolated::new(Failing(dropped.clone())),
        _c: Isolated::new(Arc::new(Failing(dropped.clone()))),
    };
    // Without the wrapper the second panic, during the first one's
    // unwinding, would abort this test binary.
    drop(session);
    assert_eq!(dropped.load(Ordering::SeqCst), 3);
}
