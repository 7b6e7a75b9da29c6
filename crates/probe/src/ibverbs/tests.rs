use super::*;

#[test]
fn errno_survives_sidewayish_transparent_wrapping() {
    #[derive(Debug)]
    struct Kind(std::io::Error);
    impl std::fmt::Display for Kind {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl std::error::Error for Kind {}
    #[derive(Debug)]
    struct Outer(Kind);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("failed to open device")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let e = Outer(Kind(std::io::Error::from_raw_os_error(libc::EACCES)));
    assert_eq!(errno_of(&e), Some(libc::EACCES));
    assert_eq!(
        os_error_in("Cannot allocate memory (os error 12)"),
        Some(12)
    );
    assert_eq!(os_error_in("failed to open device"), None);
}
