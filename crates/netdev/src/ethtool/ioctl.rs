//! The `SIOCETHTOOL` ioctl ([`Ioctl`]) and the guarded reply buffer it
//! writes into ([`ReplyBuf`]): with the test that the kernel stops at the
//! guard page, the only `unsafe` of this crate.

use super::{
    u32_at, EthtoolError, EthtoolIo, EthtoolStep, ETHTOOL_GSSET_INFO, ETHTOOL_GSTATS,
    ETHTOOL_GSTRINGS,
};

pub use sys::ReplyBuf;

/// The `SIOCETHTOOL` ioctl on an `AF_INET` datagram socket of the caller's
/// network namespace (the socket stays in the namespace it was opened in).
/// Sends only the three read commands.
#[derive(Debug)]
pub struct Ioctl {
    fd: std::os::fd::OwnedFd,
}

#[allow(unsafe_code)]
mod sys {
    //! The raw ioctl and the guarded reply buffer. Layouts from
    //! `include/uapi/linux/ethtool.h` and `include/uapi/linux/if.h`
    //! (`struct ifreq`).
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::ptr::NonNull;

    pub const SIOCETHTOOL: libc::c_ulong = 0x8946;
    pub const IFNAMSIZ: usize = 16;

    #[repr(C)]
    struct IfReq {
        name: [u8; IFNAMSIZ],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }

    /// A request/reply buffer of `u64` words (aligned for `struct
    /// ethtool_stats`) that is a private anonymous mapping of whole pages,
    /// followed by one page mapped `PROT_NONE`. [`ReplyBuf::words`] is the
    /// whole readable and writable part: whatever writes past its end,
    /// the kernel included, reaches the guard page, where `copy_to_user`
    /// faults and the ioctl fails with `EFAULT`; no other memory of the
    /// process lies in between.
    #[derive(Debug)]
    pub struct ReplyBuf {
        ptr: NonNull<u64>,
        words: usize,
        map_len: usize,
    }

    // SAFETY: the mapping is owned by this value alone (no aliases escape
    // but through borrows of it), so moving it to another thread is sound.
    unsafe impl Send for ReplyBuf {}

    fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|p| *p >= 8).unwrap_or(4096)
    }

    impl ReplyBuf {
        /// A buffer of at least `words` words (rounded up to whole pages),
        /// zeroed.
        pub fn new(words: usize) -> std::io::Result<ReplyBuf> {
            let page = page_size();
            let too_big = || std::io::Error::from_raw_os_error(libc::ENOMEM);
            let data = words
                .max(1)
                .checked_mul(8)
                .ok_or_else(too_big)?
                .checked_next_multiple_of(page)
                .ok_or_else(too_big)?;
            let map_len = data.checked_add(page).ok_or_else(too_big)?;
            // SAFETY: a fresh anonymous mapping at an address the kernel
            // picks; nothing else refers to it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: [p, p + data) lies within the mapping just made; the
            // last page stays PROT_NONE.
            let rc = unsafe { libc::mprotect(p, data, libc::PROT_READ | libc::PROT_WRITE) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: unmaps exactly the mapping made above.
                unsafe { libc::munmap(p, map_len) };
                return Err(e);
            }
            let ptr = NonNull::new(p.cast::<u64>()).ok_or_else(too_big)?;
            Ok(ReplyBuf {
                ptr,
                words: data / 8,
                map_len,
            })
        }

        /// Words in the buffer (its readable and writable part).
        pub fn len(&self) -> usize {
            self.words
        }

        /// Never true: a buffer has at least one page.
        pub fn is_empty(&self) -> bool {
            self.words == 0
        }

        pub fn words(&self) -> &[u64] {
            // SAFETY: ptr is page aligned and the first `words` words are
            // mapped readable and writable for the life of self; anonymous
            // pages start zeroed, so every u64 is initialised.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
        }

        pub fn words_mut(&mut self) -> &mut [u64] {
            // SAFETY: as in `words`, and `&mut self` makes this the only
            // reference.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.words) }
        }
    }

    impl Drop for ReplyBuf {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping `new` made; no borrow of
            // it outlives self.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
        }
    }

    pub fn socket() -> std::io::Result<OwnedFd> {
        // SAFETY: plain socket(2); the descriptor is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Runs one ethtool command whose request/reply buffer is `buf`.
    /// Returns the errno on failure.
    pub fn ethtool(fd: &OwnedFd, name: &[u8; IFNAMSIZ], buf: &mut ReplyBuf) -> Result<(), i32> {
        let mut req = IfReq {
            name: *name,
            data: buf.words_mut().as_mut_ptr().cast(),
            _pad: [0; 16],
        };
        // SAFETY: req is a valid ifreq whose data points to `buf`, which is
        // mutably borrowed for the call. The kernel writes the reply there;
        // a reply longer than `buf` (kernels before 7b07be1ff1cb copy the
        // driver's current count whatever the request says) reaches the
        // PROT_NONE page right after it and fails with EFAULT, so nothing
        // outside `buf` is written. The callers send only GSSET_INFO,
        // GSTRINGS and GSTATS, whose replies go to `data` alone.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfReq) };
        if rc < 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        } else {
            Ok(())
        }
    }
}

impl Ioctl {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> std::io::Result<Ioctl> {
        Ok(Ioctl { fd: sys::socket()? })
    }

    fn ifname(netdev: &str) -> Result<[u8; sys::IFNAMSIZ], EthtoolError> {
        let bytes = netdev.as_bytes();
        if bytes.is_empty() || bytes.len() >= sys::IFNAMSIZ || bytes.contains(&0) {
            return Err(EthtoolError::BadName {
                netdev: netdev.to_string(),
            });
        }
        let mut name = [0u8; sys::IFNAMSIZ];
        name[..bytes.len()].copy_from_slice(bytes);
        Ok(name)
    }
}

impl EthtoolIo for Ioctl {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        let cmd = u32_at(buf.words(), 0);
        if ![ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS].contains(&cmd) {
            return Err(EthtoolError::Command {
                netdev: netdev.to_string(),
                cmd,
            });
        }
        let name = Self::ifname(netdev)?;
        sys::ethtool(&self.fd, &name, buf).map_err(|errno| match errno {
            libc::EOPNOTSUPP => EthtoolError::Unsupported {
                netdev: netdev.to_string(),
            },
            libc::ENODEV => EthtoolError::NoDevice {
                netdev: netdev.to_string(),
            },
            errno => EthtoolError::Ioctl {
                netdev: netdev.to_string(),
                step: EthtoolStep::of_command(cmd),
                errno,
            },
        })
    }
}
