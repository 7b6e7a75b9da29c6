//! GPU memory for a stream's buffer, the way NCCL and perftest give a NIC
//! GPU memory without nvidia-peermem: CUDA's driver library allocates it
//! (`cuMemAlloc`), exports the range as a dma-buf file descriptor
//! (`cuMemGetHandleForAddressRange` with `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`,
//! perftest's cuda_memory.c), and the RDMA layer registers that descriptor
//! (`ibv_reg_dmabuf_mr`). The library is loaded at run time
//! (`libcuda.so.1`): the binary has no link-time CUDA dependency, and a
//! host without it gets the reason, never a failure to start.
//!
//! Values from CUDA's `cuda.h` (12.x): `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`
//! = 124, `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD` = 1; `cuMemAlloc` and
//! `cuMemFree` are exported as `cuMemAlloc_v2` and `cuMemFree_v2`,
//! `cuDevicePrimaryCtxRelease` as `cuDevicePrimaryCtxRelease_v2`.
//!
//! Unproven on hardware: no GPU with an RDMA NIC was available to this
//! project; the loader and the call sequence are tested against a fake
//! library built in the tests (crates/probe/tests/cuda_fake.rs).
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;

/// A GPU allocation exported as a dma-buf, freed on drop (after the
/// memory region over it is deregistered: the RDMA layer drops it last).
pub struct GpuBuffer {
    /// The device address (the registration's I/O virtual address).
    pub dptr: u64,
    /// Bytes usable from `dptr`.
    pub len: usize,
    /// The dma-buf; it covers `dptr - offset` onwards.
    pub fd: OwnedFd,
    /// Where `dptr` lies in the dma-buf.
    pub offset: u64,
    release: Option<Box<dyn FnOnce() + Send>>,
}

impl GpuBuffer {
    /// A buffer over memory owned elsewhere (tests); `release` runs on drop.
    pub fn new(
        dptr: u64,
        len: usize,
        fd: OwnedFd,
        offset: u64,
        release: Box<dyn FnOnce() + Send>,
    ) -> Self {
        GpuBuffer {
            dptr,
            len,
            fd,
            offset,
            release: Some(release),
        }
    }
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBuffer")
            .field("dptr", &format_args!("{:#x}", self.dptr))
            .field("len", &self.len)
            .field("offset", &self.offset)
            .finish()
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if let Some(r) = self.release.take() {
            r();
        }
    }
}

/// Allocates GPU memory exported as a dma-buf.
pub trait GpuMemory: Send + Sync {
    /// `len` bytes on the GPU at `pci_address`; the error is the reason,
    /// as printed beside the host-memory fallback.
    fn allocate(&self, pci_address: &str, len: usize) -> Result<GpuBuffer, String>;
}

#[cfg(feature = "ibverbs")]
pub use driver::CudaDriver;

#[cfg(feature = "ibverbs")]
mod driver {
    use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
    use std::os::fd::FromRawFd;
    use std::sync::Arc;

    use super::{GpuBuffer, GpuMemory};

    type CuResult = c_int;
    const CUDA_SUCCESS: CuResult = 0;
    const DMA_BUF_SUPPORTED: c_int = 124;
    const HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
    /// The library's name in the NVIDIA driver packages.
    pub const LIBCUDA: &str = "libcuda.so.1";

    struct Fns {
        init: unsafe extern "C" fn(c_uint) -> CuResult,
        device_by_pci: unsafe extern "C" fn(*mut c_int, *const c_char) -> CuResult,
        attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
        ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
        ctx_release: unsafe extern "C" fn(c_int) -> CuResult,
        ctx_set: unsafe extern "C" fn(*mut c_void) -> CuResult,
        alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
        free: unsafe extern "C" fn(u64) -> CuResult,
        handle: unsafe extern "C" fn(*mut c_void, u64, usize, c_int, c_ulonglong) -> CuResult,
        error_name: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    }

    /// CUDA's driver library, loaded at run time.
    pub struct CudaDriver {
        fns: Fns,
        // Kept loaded as long as any function pointer above may be called.
        _lib: libloading::Library,
    }

    impl std::fmt::Debug for CudaDriver {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("CudaDriver")
        }
    }

    impl CudaDriver {
        /// `libcuda.so.1` from the loader's search path.
        pub fn load() -> Result<Arc<CudaDriver>, String> {
            CudaDriver::load_from(LIBCUDA)
        }

        /// The library at `path` (a fake one in the tests).
        pub fn load_from(path: &str) -> Result<Arc<CudaDriver>, String> {
            // SAFETY: loading runs the library's initialisers; the CUDA
            // driver library (or the tests' fake) is made to be loaded so.
            let lib = unsafe { libloading::Library::new(path) }
                .map_err(|e| format!("cannot load {path} (no NVIDIA driver here?): {e}"))?;
            // SAFETY: each symbol is given the signature cuda.h declares.
            let fns = unsafe {
                Fns {
                    init: *sym(&lib, b"cuInit\0")?,
                    device_by_pci: *sym(&lib, b"cuDeviceGetByPCIBusId\0")?,
                    attribute: *sym(&lib, b"cuDeviceGetAttribute\0")?,
                    ctx_retain: *sym(&lib, b"cuDevicePrimaryCtxRetain\0")?,
                    ctx_release: *sym(&lib, b"cuDevicePrimaryCtxRelease_v2\0")?,
                    ctx_set: *sym(&lib, b"cuCtxSetCurrent\0")?,
                    alloc: *sym(&lib, b"cuMemAlloc_v2\0")?,
                    free: *sym(&lib, b"cuMemFree_v2\0")?,
                    handle: *sym(&lib, b"cuMemGetHandleForAddressRange\0").map_err(|e| {
                        format!("{e} (CUDA driver older than 11.7: no dma-buf export)")
                    })?,
                    error_name: sym(&lib, b"cuGetErrorName\0").ok().map(|s| *s),
                }
            };
            Ok(Arc::new(CudaDriver { fns, _lib: lib }))
        }

        fn check(&self, what: &str, rc: CuResult) -> Result<(), String> {
            if rc == CUDA_SUCCESS {
                return Ok(());
            }
            let mut name: *const c_char = std::ptr::null();
            let known = self.fns.error_name.is_some_and(|f| {
                // SAFETY: an out-pointer; the string is static in the driver.
                unsafe { f(rc, &mut name) == CUDA_SUCCESS && !name.is_null() }
            });
            let text = if known {
                // SAFETY: non-null, NUL-terminated, owned by the driver.
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned()
            } else {
                format!("CUresult {rc}")
            };
            Err(format!("{what}: {text}"))
        }
    }

    /// # Safety
    /// `T` must be the symbol's real type.
    unsafe fn sym<'a, T>(
        lib: &'a libloading::Library,
        name: &[u8],
    ) -> Result<libloading::Symbol<'a, T>, String> {
        // SAFETY: the caller names the type.
        unsafe { lib.get::<T>(name) }.map_err(|e| {
            format!(
                "{} missing from the CUDA driver library: {e}",
                String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name))
            )
        })
    }

    impl GpuMemory for Arc<CudaDriver> {
        fn allocate(&self, pci_address: &str, len: usize) -> Result<GpuBuffer, String> {
            let d = self.clone();
            let f = &d.fns;
            // SAFETY (every call below): the arguments are valid pointers
            // to locals or values the driver returned, as cuda.h asks.
            d.check("cuInit", unsafe { (f.init)(0) })?;
            let bus =
                CString::new(pci_address).map_err(|_| "PCI address with a NUL".to_string())?;
            let mut dev: c_int = 0;
            d.check(&format!("cuDeviceGetByPCIBusId({pci_address})"), unsafe {
                (f.device_by_pci)(&mut dev, bus.as_ptr())
            })?;
            let mut dmabuf: c_int = 0;
            d.check("cuDeviceGetAttribute(DMA_BUF_SUPPORTED)", unsafe {
                (f.attribute)(&mut dmabuf, DMA_BUF_SUPPORTED, dev)
            })?;
            if dmabuf == 0 {
                return Err(format!(
                    "the GPU at {pci_address} does not export dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0: \
                     the proprietary kernel module, or a kernel without dma-buf support; the open kernel module has it)"
                ));
            }
            let mut ctx: *mut c_void = std::ptr::null_mut();
            d.check("cuDevicePrimaryCtxRetain", unsafe {
                (f.ctx_retain)(&mut ctx, dev)
            })?;
            let release_ctx = |d: &CudaDriver| unsafe { (d.fns.ctx_release)(dev) };
            if let Err(e) = d.check("cuCtxSetCurrent", unsafe { (f.ctx_set)(ctx) }) {
                release_ctx(&d);
                return Err(e);
            }
            let page = host_page();
            let want = len.div_ceil(page) * page;
            let mut dptr: u64 = 0;
            if let Err(e) = d.check(&format!("cuMemAlloc({want})"), unsafe {
                (f.alloc)(&mut dptr, want)
            }) {
                release_ctx(&d);
                return Err(e);
            }
            let aligned = dptr & !(page as u64 - 1);
            let offset = dptr - aligned;
            let size = (want + offset as usize).div_ceil(page) * page;
            let mut fd: c_int = -1;
            let exported = d.check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
                (f.handle)(
                    (&mut fd as *mut c_int).cast(),
                    aligned,
                    size,
                    HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            });
            if let Err(e) = exported.and_then(|()| {
                (fd >= 0)
                    .then_some(())
                    .ok_or_else(|| "cuMemGetHandleForAddressRange gave no descriptor".to_string())
            }) {
                unsafe {
                    (f.free)(dptr);
                }
                release_ctx(&d);
                return Err(e);
            }
            // SAFETY: the driver handed over a fresh descriptor it owns no more.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let owner = d.clone();
            let context = Context(ctx);
            let release = Box::new(move || {
                let f = &owner.fns;
                let ctx = context.get();
                // SAFETY: frees what was allocated above, once, with the
                // context current on the dropping thread.
                unsafe {
                    (f.ctx_set)(ctx);
                    (f.free)(dptr);
                    (f.ctx_release)(dev);
                }
            });
            Ok(GpuBuffer::new(dptr, len, fd, offset, release))
        }
    }

    /// A CUDA context handle, made current on whichever thread frees.
    struct Context(*mut c_void);

    // SAFETY: a CUDA context may be made current on any thread.
    unsafe impl Send for Context {}

    impl Context {
        fn get(&self) -> *mut c_void {
            self.0
        }
    }

    fn host_page() -> usize {
        // SAFETY: sysconf has no memory effects.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    }
}
