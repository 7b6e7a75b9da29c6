//! Tests of the statistics reads against fake drivers and the model
//! kernel, and of the guard page against the real kernel.

use super::stats::overran;
use super::*;

#[test]
fn parses_ethtool_s_text() {
    let text = "NIC statistics:\n     rx_packets: 12\n     [0]: rx_ucast_packets: 7\n     bad line\n     tx_x: -1\n";
    assert_eq!(
        parse_ethtool_s(text),
        vec![
            ("rx_packets".to_string(), 12),
            ("[0]: rx_ucast_packets".to_string(), 7)
        ]
    );
}

#[test]
fn reply_decoders_trust_the_kernels_counts_only_as_far_as_the_buffer() {
    // GSTRINGS: header (cmd, string_set, len = 2), two names, the second
    // without its NUL.
    let mut bytes = Vec::new();
    for v in [0x1bu32, 1, 2] {
        bytes.extend_from_slice(&v.to_ne_bytes());
    }
    let mut a = [0u8; 32];
    a[..10].copy_from_slice(b"rx_packets");
    bytes.extend_from_slice(&a);
    bytes.extend_from_slice(&[b'x'; 32]);
    bytes.resize(bytes.len().div_ceil(8) * 8, 0);
    let words: Vec<u64> = bytes
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        decode_gstrings(&words),
        Some(vec!["rx_packets".to_string(), "x".repeat(32)])
    );
    // A len of 3 or u32::MAX: more names than the buffer holds, none
    // taken.
    let mut more = words.clone();
    set_u32(&mut more, 8, 3);
    assert_eq!(decode_gstrings(&more), None);
    set_u32(&mut more, 8, u32::MAX);
    assert_eq!(decode_gstrings(&more), None);
    assert_eq!(decode_gstrings(&[]), None, "no room for the header");
    // GSTATS: n_stats 2 of a 3-word buffer; n_stats past the buffer
    // gives nothing.
    let mut stats = vec![0u64, 7, 9];
    set_u32(&mut stats, 4, 2);
    assert_eq!(decode_gstats(&stats), Some(&[7, 9][..]));
    set_u32(&mut stats, 4, 3);
    assert_eq!(decode_gstats(&stats), None);
    set_u32(&mut stats, 4, u32::MAX);
    assert_eq!(decode_gstats(&stats), None);
    assert_eq!(decode_gstats(&[]), None);
    // GSSET_INFO: the count only when the set is in the mask.
    let mut info = vec![0u64; 3];
    set_u32(&mut info, 16, 42);
    assert_eq!(decode_sset_info(&info), 0);
    info[1] = 1 << ETH_SS_STATS;
    assert_eq!(decode_sset_info(&info), 42);
}

/// A driver's listing answered through [`answer`], with the commands
/// seen.
struct Fake {
    listing: Vec<(String, u64)>,
    cmds: Vec<u32>,
}

impl EthtoolIo for Fake {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        self.cmds.push(u32_at(buf.words(), 0));
        answer(netdev, buf, &self.listing)
    }
}

#[test]
fn the_count_is_asked_before_every_read_and_names_reread_when_it_changes() {
    let mut fake = Fake {
        listing: vec![("rx_prio3_pause".into(), 5)],
        cmds: vec![],
    };
    let mut cache = StatsCache::new(vec![]);
    cache.sample(&mut fake, "eth0").unwrap();
    cache.sample(&mut fake, "eth0").unwrap();
    assert_eq!(cache.name_reads, 1);
    assert_eq!(
        fake.cmds,
        [
            ETHTOOL_GSSET_INFO,
            ETHTOOL_GSTRINGS,
            ETHTOOL_GSTATS,
            ETHTOOL_GSSET_INFO,
            ETHTOOL_GSTATS
        ]
    );
    fake.listing.push(("tx_prio3_pause".into(), 6));
    fake.cmds.clear();
    let (stats, _) = cache.sample(&mut fake, "eth0").unwrap();
    assert_eq!(cache.name_reads, 2);
    assert_eq!(stats.len(), 2);
    assert_eq!(
        fake.cmds,
        [ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS]
    );
}

#[test]
fn an_absurd_statistics_count_is_refused_before_any_buffer_is_sized() {
    struct Absurd;
    impl EthtoolIo for Absurd {
        fn ethtool(&mut self, _: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
            let words = buf.words_mut();
            assert_eq!(u32_at(words, 0), ETHTOOL_GSSET_INFO, "only the count");
            set_u32(words, 16, u32::MAX);
            Ok(())
        }
    }
    let mut cache = StatsCache::new(vec![]);
    let err = cache.sample(&mut Absurd, "eth0").unwrap_err();
    assert_eq!(
        err.to_string(),
        "eth0: the driver reports 4294967295 ethtool statistics, more than the 65536 read"
    );
}

#[test]
fn a_set_changing_on_every_read_is_an_error_after_a_bounded_number_of_tries() {
    /// Grows by one statistic after every count.
    struct Growing(Vec<(String, u64)>);
    impl EthtoolIo for Growing {
        fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
            let r = answer(netdev, buf, &self.0);
            if u32_at(buf.words(), 0) == ETHTOOL_GSSET_INFO {
                let n = self.0.len();
                self.0.push((format!("ch{n}_events"), 1));
            }
            r
        }
    }
    let mut cache = StatsCache::new(vec![]);
    let mut io = Growing(vec![("rx_packets".into(), 1)]);
    let err = cache.sample(&mut io, "eth0").unwrap_err();
    assert_eq!(
        err,
        EthtoolError::Unstable {
            netdev: "eth0".into(),
            attempts: ATTEMPTS
        }
    );
    assert_eq!(io.0.len(), 1 + ATTEMPTS);
}

/// A kernel with 7b07be1ff1cb: a non-zero request count that is not
/// the driver's gets a count of 0 and nothing copied; `grow` replaces
/// the listing right after the next count.
struct Fixed {
    listing: Vec<(String, u64)>,
    grow: Option<Vec<(String, u64)>>,
    cmds: Vec<u32>,
}

impl EthtoolIo for Fixed {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        let words = buf.words_mut();
        let cmd = u32_at(words, 0);
        self.cmds.push(cmd);
        let count_at = match cmd {
            ETHTOOL_GSTRINGS => Some(8),
            ETHTOOL_GSTATS => Some(4),
            _ => None,
        };
        if let Some(at) = count_at {
            let asked = u32_at(words, at) as usize;
            if asked != 0 && asked != self.listing.len() {
                set_u32(words, at, 0);
                return Ok(());
            }
        }
        let r = answer(netdev, buf, &self.listing);
        if cmd == ETHTOOL_GSSET_INFO {
            if let Some(grown) = self.grow.take() {
                self.listing = grown;
            }
        }
        r
    }
}

#[test]
fn a_fixed_kernels_empty_answer_to_a_stale_count_is_read_again() {
    let mut io = Fixed {
        listing: vec![("rx_prio3_pause".into(), 5)],
        grow: None,
        cmds: vec![],
    };
    let mut cache = StatsCache::new(vec!["tx_prio3_pause".into()]);
    cache.sample(&mut io, "eth0").unwrap();
    io.cmds.clear();
    io.grow = Some(vec![
        ("rx_prio3_pause".into(), 5),
        ("tx_prio3_pause".into(), 6),
    ]);
    let (stats, raw) = cache.sample(&mut io, "eth0").unwrap();
    assert_eq!(stats.len(), 2);
    assert_eq!(raw.len(), 1);
    assert_eq!(raw[0].value, 6);
    assert_eq!(
        io.cmds,
        [
            ETHTOOL_GSSET_INFO,
            ETHTOOL_GSTATS,
            ETHTOOL_GSSET_INFO,
            ETHTOOL_GSTRINGS,
            ETHTOOL_GSTATS
        ]
    );
}

/// The guard page stops the kernel: a pipe holding more than the
/// buffer is read into it with a length past its end; the kernel's copy
/// ends at the buffer's last byte (the rest stays in the pipe) and
/// nothing lands after it.
#[test]
#[allow(unsafe_code)]
fn the_kernel_cannot_write_past_a_reply_buffer() {
    let mut buf = ReplyBuf::new(1).unwrap();
    let len = buf.len() * 8;
    assert!(len >= 4096 && len.is_multiple_of(4096), "{len}");
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it is given.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let data = vec![0xa5u8; len + 100];
    // SAFETY: writes from a live Vec of that length.
    let wrote = unsafe { libc::write(fds[1], data.as_ptr().cast(), data.len()) };
    assert_eq!(wrote, data.len() as isize);
    // SAFETY: deliberately asks for 100 bytes past the buffer: the
    // kernel must stop at the PROT_NONE page. Without it this would
    // write over whatever follows.
    let read = unsafe { libc::read(fds[0], buf.words_mut().as_mut_ptr().cast(), len + 100) };
    assert_eq!(read, len as isize, "the copy stops at the guard page");
    assert!(buf
        .words()
        .iter()
        .all(|w| *w == u64::from_ne_bytes([0xa5; 8])));
    let mut rest = [0u8; 200];
    // SAFETY: reads into a live local array of that length.
    let left = unsafe { libc::read(fds[0], rest.as_mut_ptr().cast(), rest.len()) };
    assert_eq!(left, 100, "what did not fit is still in the pipe");
    // SAFETY: closes the two descriptors made above.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn the_model_kernel_answers_as_ioctl_c_and_faults_where_the_buffer_ends() {
    let listing: Vec<(String, u64)> = (0..600).map(|i| (format!("s{i}"), i)).collect();
    let mut buf = ReplyBuf::new(1).unwrap();
    // 600 values do not fit one page: the header says 600, the values
    // that fit are written, EFAULT.
    set_u32(buf.words_mut(), 0, ETHTOOL_GSTATS);
    set_u32(buf.words_mut(), 4, 2);
    let err = answer("eth0", &mut buf, &listing).unwrap_err();
    assert!(overran(&err), "{err}");
    assert_eq!(u32_at(buf.words(), 4), 600);
    assert_eq!(decode_gstats(buf.words()), None);
    let mut big = ReplyBuf::new(601).unwrap();
    set_u32(big.words_mut(), 0, ETHTOOL_GSTATS);
    answer("eth0", &mut big, &listing).unwrap();
    assert_eq!(
        decode_gstats(big.words()),
        Some(&(0..600).collect::<Vec<u64>>()[..])
    );
    set_u32(big.words_mut(), 0, ETHTOOL_GSTRINGS);
    set_u32(big.words_mut(), 4, ETH_SS_STATS);
    let err = answer("eth0", &mut big, &listing).unwrap_err();
    assert!(overran(&err), "600 names need 19,212 bytes: {err}");
    let mut names = ReplyBuf::new((12 + 600 * 32) / 8 + 1).unwrap();
    set_u32(names.words_mut(), 0, ETHTOOL_GSTRINGS);
    set_u32(names.words_mut(), 4, ETH_SS_STATS);
    answer("eth0", &mut names, &listing).unwrap();
    let got = decode_gstrings(names.words()).unwrap();
    assert_eq!(got.len(), 600);
    assert_eq!(got[599], "s599");
}
