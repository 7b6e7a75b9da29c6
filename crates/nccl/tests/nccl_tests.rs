//! nccl-tests' output against text laid out from its own format strings
//! (NVIDIA/nccl-tests: src/common.cu up to v2.16, src/util.cu from v2.17;
//! the release is named at each sample), interleaved with NCCL's own INFO
//! lines as one stdout holds them.

use roce_nccl::nccl_tests::{collective_of, Cell, TestsParser, TestsRun};

fn parse(file: &str, text: &str) -> (TestsParser, Vec<TestsRun>) {
    let mut p = TestsParser::new(file);
    let mut runs: Vec<TestsRun> = Vec::new();
    let mut last = 0;
    for l in text.lines() {
        if p.line(l) {
            if p.finished != last || runs.is_empty() {
                runs.push(p.current().clone());
                last = p.finished;
            } else if let Some(r) = runs.last_mut() {
                *r = p.current().clone();
            }
        }
    }
    (p, runs)
}

/// The demo node's healthy run: nccl-tests v2.19.6 on NCCL 2.28.9, 16
/// ranks on two hosts (tests/fixtures/nccl/demo/nccl-tests).
const HEALTHY: &str =
    include_str!("../../../tests/fixtures/nccl/demo/nccl-tests/all_reduce_perf.out");

#[test]
fn header_table_and_footer_of_v2_19() {
    let (_, runs) = parse("all_reduce_perf.out", HEALTHY);
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r.program.as_deref(), Some("all_reduce_perf"));
    assert_eq!(r.collective, Some("AllReduce"));
    assert_eq!(r.nccl_version.as_deref(), Some("2.28.9"));
    assert_eq!(
        (r.n_threads, r.n_gpus, r.validation),
        (Some(1), Some(1), Some(true))
    );
    assert_eq!(r.ranks, 16);
    assert_eq!(r.hosts, vec!["gpu-a", "gpu-b"]);
    assert_eq!(r.nnodes(), Some(2));
    assert_eq!(r.devices.len(), 16);
    assert_eq!(r.devices[4].pci, "0000:83:00");
    assert_eq!(r.rows, 4);
    assert_eq!(r.largest_size(), Some(8 << 30));
    let row = &r.largest[0];
    assert_eq!(
        (row.count, row.dtype.as_str(), row.redop.as_str(), row.root),
        (2147483648, "float", "sum", -1)
    );
    assert_eq!(
        row.out_of_place,
        Some(Cell {
            time_us: 43895.5,
            algbw: 195.69,
            busbw: 366.92,
            wrong: Some(0)
        })
    );
    assert_eq!(r.largest_busbw(), Some((366.92 + 367.42) / 2.0));
    assert_eq!(r.wrong, 0);
    assert_eq!(r.out_of_bounds, Some(0));
    assert_eq!(r.avg_busbw, Some(353.345));
    assert!(r.complete);
}

#[test]
fn v2_13_layout_wrong_elements_and_a_second_run() {
    // common.cu v2.13.9: no version or program line, "[0x%02x]" bus only,
    // "%6.2f" bandwidths and "%5g" #wrong, "# Avg bus bandwidth    : %g %s".
    let text = "\
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  12001 on     node17 device  0 [0x18] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  12001 on     node17 device  1 [0x2a] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
   67108864      16777216     float     sum      -1    612.3  109.60  191.80      0    610.9  109.85  192.24      0
  134217728      33554432     float     sum      -1   1190.4  112.75  197.31     17   1188.2  112.96  197.68      0
# Out of bounds values : 17 FAILED
# Avg bus bandwidth    : 194.758 
#
# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
           8             2     float     sum      -1    26.51    0.00    0.00    N/A    25.98    0.00    0.00    N/A
";
    let (_, runs) = parse("slurm-4711.out", text);
    assert_eq!(runs.len(), 2);
    let r = &runs[0];
    assert_eq!(
        r.program, None,
        "no program line before v2.16, none in the file name"
    );
    assert_eq!(r.collective, None);
    assert_eq!(r.devices[1].pci, "2a");
    assert_eq!(r.nnodes(), Some(1));
    assert_eq!((r.wrong, r.wrong_rows), (17, 1));
    assert_eq!(r.first_wrong.as_ref().map(|w| w.size), Some(134217728));
    assert_eq!(r.out_of_bounds, Some(17));
    let second = &runs[1];
    assert_eq!(second.validation, Some(false));
    assert_eq!(
        second.largest[0].out_of_place.and_then(|c| c.wrong),
        None,
        "N/A"
    );
}

#[test]
fn per_iteration_and_timestamp_columns_are_found_by_name() {
    // util.cu v2.19.6 with -I 1 (i_min i_max i_p99 i_cv% after each
    // placement) and -S 1 (a timestamp "%Y-%m-%d %H:%M:%S" last).
    let text = "\
# Collective test starting: all_gather_perf_mpi
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp
  8589934592     134217728     float    none      -1  24102.1  356.40  334.12       0  24011.3  24301.8  24301.8     0.31  24088.6  356.60  334.31       0  24010.9  24299.1  24299.1     0.30 2026-03-02 10:14:07
";
    let (_, runs) = parse("x.log", text);
    let r = &runs[0];
    assert_eq!(r.collective, Some("AllGather"));
    let row = &r.largest[0];
    assert_eq!(row.out_of_place.map(|c| c.busbw), Some(334.12));
    assert_eq!(
        row.in_place.map(|c| (c.time_us, c.busbw)),
        Some((24088.6, 334.31))
    );
}

#[test]
fn program_from_the_file_name_and_nccl_lines_are_not_rows() {
    let text = "\
gpu-a:100:101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
  1073741824     268435456     float     sum      -1  11543.2   93.02  174.41       0  11521.6   93.19  174.74       0
";
    let (_, runs) = parse("/var/log/nccl/alltoall_perf.gpu-a.out", text);
    assert_eq!(runs[0].collective, Some("AllToAll"));
    assert_eq!(runs[0].rows, 1);
    assert_eq!(
        collective_of("reduce_scatter_perf_mpi"),
        Some("ReduceScatter")
    );
    assert_eq!(collective_of("sendrecv_perf"), None);
}

#[test]
fn garbage_is_no_row() {
    let mut p = TestsParser::new("f");
    for l in [
        "",
        "#",
        "12 34",
        "  99999999999999999999999  1  float sum -1 1 1 1 0 1 1 1 0",
        "  8  2  float  sum  -1  nan  0.00  0.00  0  inf  1  1  0",
        "#  Rank x Group",
        &"9".repeat(5000),
    ] {
        p.line(l);
    }
    assert_eq!(p.current().rows, 0);
    assert_eq!(p.current().ranks, 0);
}
