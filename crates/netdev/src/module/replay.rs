//! Recorded module EEPROMs for trees that are not the running kernel:
//! `<dir>/<netdev>.eeprom`, half pages under section headers.

use std::path::PathBuf;

use super::{EepromRead, HalfPage, Pages};
use crate::error::NetdevError;
use crate::genl::{parse_hex_messages, replay_path, ReplayError, ReplayFault};

/// Replays a recorded module EEPROM from `<dir>/<netdev>.eeprom`: sections
/// headed `[i2c 0x50 page 0x00 bank 0 lower]` (or `upper`), each followed by
/// the 128 bytes as hex (see [`parse_hex_messages`]). A missing file is a
/// netdev without a module; a missing section a page the module lacks.
#[derive(Debug, Clone)]
pub struct EepromReplay {
    dir: PathBuf,
}

impl EepromReplay {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        EepromReplay { dir: dir.into() }
    }
}

/// Parses the [`EepromReplay`] text into half pages.
pub fn parse_eeprom_replay(text: &str) -> Result<Pages, ReplayError> {
    let mut pages = Pages::new();
    let mut current: Option<(HalfPage, String)> = None;
    let finish = |cur: Option<(HalfPage, String)>, pages: &mut Pages| -> Result<(), ReplayError> {
        if let Some((id, hex)) = cur {
            let bytes = parse_hex_messages(&hex)?.concat();
            pages.insert(id, bytes);
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            finish(current.take(), &mut pages)?;
            let bad = || ReplayError::new(n + 1, ReplayFault::SectionHeader, "");
            let words: Vec<&str> = header.split_whitespace().collect();
            let ["i2c", i2c, "page", page, "bank", bank, half] = words.as_slice() else {
                return Err(bad());
            };
            let num = |s: &str| -> Option<u8> {
                match s.strip_prefix("0x") {
                    Some(h) => u8::from_str_radix(h, 16).ok(),
                    None => s.parse().ok(),
                }
            };
            let id = HalfPage {
                i2c: num(i2c).ok_or_else(bad)?,
                page: num(page).ok_or_else(bad)?,
                bank: num(bank).ok_or_else(bad)?,
                upper: match *half {
                    "upper" => true,
                    "lower" => false,
                    _ => return Err(bad()),
                },
            };
            current = Some((id, String::new()));
        } else if let Some((_, hex)) = current.as_mut() {
            hex.push_str(trimmed);
            hex.push('\n');
        } else if !trimmed.is_empty() {
            return Err(ReplayError::new(n + 1, ReplayFault::BytesBeforeSection, ""));
        }
    }
    finish(current.take(), &mut pages)?;
    Ok(pages)
}

impl EepromRead for EepromReplay {
    fn read_half(&mut self, netdev: &str, page: HalfPage) -> Result<Option<Vec<u8>>, NetdevError> {
        let Some(path) = replay_path(&self.dir, netdev, "eeprom") else {
            return Ok(None);
        };
        let text = match roce_host::fs::read_text_capped(&path, roce_host::fs::REPLAY_CAP) {
            Ok(t) => t,
            Err(e) if roce_host::errno::is_absent(&e) => return Ok(None),
            Err(e) => return Err(crate::io_error(&path, &e).into()),
        };
        match parse_eeprom_replay(&text) {
            Ok(mut pages) => Ok(pages.remove(&page)),
            Err(source) => Err(NetdevError::Replay { path, source }),
        }
    }
}
