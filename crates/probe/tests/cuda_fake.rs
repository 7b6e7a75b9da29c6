//! The load test's CUDA driver loader (`roce_probe::load::gpu::CudaDriver`)
//! against a fake driver library built here from C (the system's `cc`):
//! the same exported names and signatures as CUDA's `cuda.h` (12.x) for
//! the calls the loader makes, recording each call in a log file, so the
//! test sees the sequence, the arguments (the PCI address, the dma-buf
//! handle type 1, the page-aligned range) and the release on drop; and the
//! refusals the loader must report (no dma-buf on the GPU, no library, a
//! library without `cuMemGetHandleForAddressRange`). No GPU is needed;
//! without a C compiler the test says so and passes.
#![cfg(feature = "ibverbs")]

use std::path::{Path, PathBuf};
use std::process::Command;

use roce_probe::load::gpu::{CudaDriver, GpuMemory};

/// The fake driver: device 7 for "0000:17:00.0", DMA_BUF_SUPPORTED from
/// the environment, a memfd as the dma-buf, every call logged.
const FAKE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static void logf(const char *fmt, unsigned long long a, unsigned long long b) {
    const char *p = getenv("FAKE_CUDA_LOG");
    FILE *f = p ? fopen(p, "a") : NULL;
    if (!f) return;
    fprintf(f, fmt, a, b);
    fputc('\n', f);
    fclose(f);
}
CUresult cuInit(unsigned int flags) { logf("cuInit %llu %llu", flags, 0); return 0; }
CUresult cuDeviceGetByPCIBusId(int *dev, const char *bus) {
    if (strcmp(bus, "0000:17:00.0") != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = 7; logf("cuDeviceGetByPCIBusId %llu %llu", 7, 0); return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    const char *s = getenv("FAKE_CUDA_DMABUF");
    *v = (attr == 124 && s && s[0] == '1') ? 1 : 0;
    logf("cuDeviceGetAttribute %llu %llu", attr, dev); return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x5000; logf("cuDevicePrimaryCtxRetain %llu %llu", dev, 0); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { logf("cuDevicePrimaryCtxRelease_v2 %llu %llu", dev, 0); return 0; }
CUresult cuCtxSetCurrent(void *ctx) { logf("cuCtxSetCurrent %llu %llu", (unsigned long long)ctx, 0); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = 0x7f0000201000ULL; logf("cuMemAlloc_v2 %llu %llu", n, 0); return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { logf("cuMemFree_v2 %llu %llu", p, 0); return 0; }
CUresult cuMemGetHandleForAddressRange(void *h, CUdeviceptr p, size_t n, int type, unsigned long long flags) {
    logf("cuMemGetHandleForAddressRange %llu %llu", p, n);
    logf("handle type %llu flags %llu", type, flags);
    int fd = (int)syscall(SYS_memfd_create, "fake-dmabuf", 0);
    if (fd < 0) return 999;
    *(int *)h = fd;
    return 0;
}
CUresult cuGetErrorName(CUresult e, const char **s) { *s = e == 101 ? "CUDA_ERROR_INVALID_DEVICE" : "CUDA_ERROR_UNKNOWN"; return 0; }
"#;

/// Builds the fake as `name` (leaving out `cuMemGetHandleForAddressRange`
/// when `without_export`); `None` without a C compiler.
fn build(dir: &Path, name: &str, without_export: bool) -> Option<PathBuf> {
    let mut src = FAKE.to_string();
    if without_export {
        let start = src.find("CUresult cuMemGetHandleForAddressRange")?;
        let end = start + src[start..].find("\n}\n")? + 3;
        src.replace_range(start..end, "");
    }
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).ok()?;
    let so = dir.join(format!("{name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(so)
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-cuda-fake-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_loader_allocates_exports_and_releases_in_cuda_order() {
    let dir = tempdir();
    let Some(lib) = build(&dir, "libcuda-fake", false) else {
        eprintln!("no C compiler: the fake CUDA library was not built, nothing tested");
        return;
    };
    let log = dir.join("calls.log");
    // The fake reads its settings from the environment; one test sets them.
    std::env::set_var("FAKE_CUDA_LOG", &log);
    std::env::set_var("FAKE_CUDA_DMABUF", "1");
    let driver = CudaDriver::load_from(lib.to_str().unwrap()).expect("loads");
    let buf = driver.allocate("0000:17:00.0", 1 << 20).expect("allocates");
    assert_eq!(buf.dptr, 0x7f00_0020_1000);
    assert_eq!(buf.len, 1 << 20);
    // The range is exported from the host page below the pointer.
    assert_eq!(buf.offset, 0);
    drop(buf);
    let calls = std::fs::read_to_string(&log).unwrap();
    let names: Vec<&str> = calls
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cuInit",
            "cuDeviceGetByPCIBusId",
            "cuDeviceGetAttribute",
            "cuDevicePrimaryCtxRetain",
            "cuCtxSetCurrent",
            "cuMemAlloc_v2",
            "cuMemGetHandleForAddressRange",
            "handle",
            "cuCtxSetCurrent",
            "cuMemFree_v2",
            "cuDevicePrimaryCtxRelease_v2",
        ],
        "{calls}"
    );
    assert!(calls.contains("cuDeviceGetAttribute 124 7"), "{calls}");
    assert!(calls.contains("handle type 1 flags 0"), "{calls}");
    assert!(
        calls.contains(&format!(
            "cuMemGetHandleForAddressRange {} {}",
            0x7f00_0020_1000u64,
            1 << 20
        )),
        "{calls}"
    );

    // A GPU without dma-buf: the reason, and nothing allocated.
    std::fs::remove_file(&log).unwrap();
    std::env::set_var("FAKE_CUDA_DMABUF", "0");
    let e = driver.allocate("0000:17:00.0", 1 << 20).unwrap_err();
    assert!(e.contains("does not export dma-buf"), "{e}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(!calls.contains("cuMemAlloc"), "{calls}");
    // An unknown PCI address: CUDA's own error name.
    let e = driver.allocate("0000:99:00.0", 4096).unwrap_err();
    assert!(e.contains("CUDA_ERROR_INVALID_DEVICE"), "{e}");

    // A driver too old to export dma-buf, and no driver at all.
    let old = build(&dir, "libcuda-old", true).expect("builds");
    let e = CudaDriver::load_from(old.to_str().unwrap()).unwrap_err();
    assert!(
        e.contains("cuMemGetHandleForAddressRange missing") && e.contains("11.7"),
        "{e}"
    );
    let e = CudaDriver::load_from("/nonexistent/libcuda.so.1").unwrap_err();
    assert!(e.contains("cannot load /nonexistent/libcuda.so.1"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
