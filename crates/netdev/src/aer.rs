//! PCIe Advanced Error Reporting counters of one PCI function (a NIC or a
//! GPU): `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` in the
//! device's sysfs folder. The files exist only for functions with the AER
//! capability on kernels with `CONFIG_PCIEAER`; a missing file is "not
//! available", never 0.
//!
//! Format from `drivers/pci/pcie/aer.c` (`aer_stats_dev_attr`): one line
//! `"%s %llu\n"` per named error bit ("RxErr", "BadTLP", "BadDLLP",
//! "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF" for
//! correctable errors; "DLP", "SDES", "TLP", "FCP", "CmpltTO", ... for
//! uncorrectable ones), a line for an unnamed bit that counted (older
//! kernels: `<array>_bit[N] <count>`), and last `TOTAL_ERR_COR`,
//! `TOTAL_ERR_NONFATAL` or `TOTAL_ERR_FATAL` with the total.

use std::path::Path;

use roce_host::errno::is_absent;
use roce_host::{Einval, Io, KeptAttr, ReadError, Reading};

/// Why the text of an AER file did not parse: the line (from 1) and its
/// text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AerParseError {
    #[error("line {line}: expected NAME COUNT: {text:?}")]
    NotNameCount { line: usize, text: String },
    #[error("line {line}: not a count: {text:?}")]
    NotACount { line: usize, text: String },
}

/// One AER file: the total and each error kind's count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AerCounts {
    /// The `TOTAL_ERR_*` line; `None` if the file had none.
    pub total: Option<u64>,
    /// (name, count) in file order, the total excluded.
    pub kinds: Vec<(String, u64)>,
}

/// The three AER files of one function; each `None` when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciAer {
    pub correctable: Option<AerCounts>,
    pub nonfatal: Option<AerCounts>,
    pub fatal: Option<AerCounts>,
}

impl PciAer {
    pub fn is_empty(&self) -> bool {
        self.correctable.is_none() && self.nonfatal.is_none() && self.fatal.is_none()
    }
}

/// Parses the text of one AER file. Lines that are not `NAME COUNT` are
/// errors (reported with their number); nothing is guessed.
pub fn parse_aer(text: &str) -> Result<AerCounts, AerParseError> {
    let mut out = AerCounts::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(AerParseError::NotNameCount {
                line: n + 1,
                text: line.to_string(),
            });
        };
        let count: u64 = count.parse().map_err(|_| AerParseError::NotACount {
            line: n + 1,
            text: line.to_string(),
        })?;
        if name.starts_with("TOTAL_ERR_") {
            out.total = Some(count);
        } else {
            out.kinds.push((name.to_string(), count));
        }
    }
    Ok(out)
}

fn read_one(path: &Path, errors: &mut Vec<ReadError>) -> Option<AerCounts> {
    match roce_host::fs::read_text_capped(path, 4096) {
        Ok(text) => match parse_aer(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(ReadError::parse(path, e.to_string()));
                None
            }
        },
        Err(e) if is_absent(&e) => None,
        Err(e) => {
            errors.push(crate::io_error(path, &e));
            None
        }
    }
}

/// Reads the AER files of the PCI function whose sysfs folder is `device`
/// (`/sys/bus/pci/devices/<address>`, or a netdev's `device` link).
pub fn read_aer(device: &Path, errors: &mut Vec<ReadError>) -> PciAer {
    PciAer {
        correctable: read_one(&device.join("aer_dev_correctable"), errors),
        nonfatal: read_one(&device.join("aer_dev_nonfatal"), errors),
        fatal: read_one(&device.join("aer_dev_fatal"), errors),
    }
}

/// The three AER files of one function kept open between samples and
/// read with `pread`; a file found absent is remembered absent (no open
/// until the function is learned again: [`KeptAttr::optional`]).
#[derive(Debug)]
pub struct AerFiles {
    correctable: KeptAttr,
    nonfatal: KeptAttr,
    fatal: KeptAttr,
}

impl AerFiles {
    /// The files of the function whose sysfs folder is `device`; nothing is
    /// opened until the first read.
    pub fn new(device: &Path) -> Self {
        AerFiles {
            correctable: KeptAttr::optional(device.join("aer_dev_correctable")),
            nonfatal: KeptAttr::optional(device.join("aer_dev_nonfatal")),
            fatal: KeptAttr::optional(device.join("aer_dev_fatal")),
        }
    }

    /// Reads the files that exist. `stale` is set when a kept handle went
    /// stale (the function was removed): its owner learns it afresh.
    pub fn read(
        &mut self,
        io: &mut Io<'_>,
        errors: &mut Vec<ReadError>,
        stale: &mut bool,
    ) -> PciAer {
        let mut one = |file: &mut KeptAttr| match file.read(io, Einval::Error, stale) {
            Reading::Value(n) => match parse_aer(&io.buf.text(n)) {
                Ok(c) => Some(c),
                Err(e) => {
                    errors.push(ReadError::parse(&file.path, e.to_string()));
                    None
                }
            },
            Reading::Absent => None,
            Reading::Error(e) => {
                errors.push(e);
                None
            }
        };
        PciAer {
            correctable: one(&mut self.correctable),
            nonfatal: one(&mut self.nonfatal),
            fatal: one(&mut self.fatal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `aer_dev_correctable` as aer.c prints it (one named line per bit of
    /// `aer_correctable_error_string`, then the total).
    const CORRECTABLE: &str = "RxErr 2\nBadTLP 5\nBadDLLP 1\nRollover 0\nTimeout 0\n\
NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 8\n";

    #[test]
    fn correctable_file_of_aer_c() {
        let c = parse_aer(CORRECTABLE).unwrap();
        assert_eq!(c.total, Some(8));
        assert_eq!(c.kinds.len(), 8);
        assert_eq!(c.kinds[1], ("BadTLP".to_string(), 5));
    }

    #[test]
    fn unnamed_bits_and_garbage() {
        let c = parse_aer("dev_cor_errs_bit[9] 3\nTOTAL_ERR_COR 3\n").unwrap();
        assert_eq!(c.kinds, vec![("dev_cor_errs_bit[9]".to_string(), 3)]);
        assert!(parse_aer("RxErr\n").is_err());
        assert!(parse_aer("RxErr x\n").is_err());
        assert!(parse_aer("RxErr 1 2\n").is_err());
        assert_eq!(
            parse_aer("RxErr 1\nBadTLP x\n").unwrap_err().to_string(),
            "line 2: not a count: \"BadTLP x\""
        );
    }

    #[test]
    fn absent_files_are_not_zero() {
        let dir = std::env::temp_dir().join(format!("aer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("aer_dev_correctable"), CORRECTABLE).unwrap();
        let mut errors = Vec::new();
        let aer = read_aer(&dir, &mut errors);
        assert!(errors.is_empty());
        assert_eq!(aer.correctable.unwrap().total, Some(8));
        assert_eq!(aer.nonfatal, None);
        assert_eq!(aer.fatal, None);
        let none = read_aer(&dir.join("missing"), &mut errors);
        assert!(none.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
