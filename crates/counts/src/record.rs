//! What the plugin writes: one header line, then per committed window and
//! phase a `W` line with its totals, a `T` line per kernel translation block
//! executed in it, and an `E` line.
//!
//! ```text
//! ptelab-plugin v1 target=x86_64
//! W 0 0 91234 812 0 0 0 0 0 0 0 0 1
//! T ffffffff81234560 100 1200
//! E
//! ```
//!
//! `W seq phase kernel-instructions user-instructions` and one count per
//! [`Tlb`] kind in [`Tlb::ALL`] order; `T vaddr executions instructions`.
//! An `S` line starts the windows of the guest's next command (a boot that
//! runs several, [`crate::Marker::Step`]); each command's `seq` starts at 0.
//! A translation block is identified by its first instruction's address;
//! user-space blocks are summed into the `W` line only.

use std::fmt::Write as _;

use crate::{Tlb, MAX_PHASES};

/// The first line of a plugin output file.
pub const HEADER: &str = "ptelab-plugin v1";

/// One phase of one committed sample window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Window {
    /// The guest command it belongs to (0 for the first; `S` lines count).
    pub step: u32,
    /// The commit's running number (0 for the first commit of its command).
    pub seq: u64,
    pub phase: u8,
    pub kernel_insns: u64,
    pub user_insns: u64,
    /// Per [`Tlb`] kind, in [`Tlb::ALL`] order.
    pub tlb: [u64; Tlb::ALL.len()],
    /// Kernel translation blocks: (first instruction's address, executions,
    /// instructions executed).
    pub blocks: Vec<(u64, u64, u64)>,
}

/// A whole output file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Output {
    /// QEMU's target name from the header.
    pub target: String,
    pub windows: Vec<Window>,
}

impl Window {
    /// The record's text.
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "W {} {} {} {}",
            self.seq, self.phase, self.kernel_insns, self.user_insns
        );
        for c in self.tlb {
            let _ = write!(out, " {c}");
        }
        out.push('\n');
        for (vaddr, n, insns) in &self.blocks {
            let _ = writeln!(out, "T {vaddr:x} {n} {insns}");
        }
        out.push_str("E\n");
    }
}

/// The line that starts the next command's windows.
pub const STEP_LINE: &str = "S\n";

impl Output {
    /// The windows of command `step` alone, numbered as that command
    /// numbered them.
    pub fn step(&self, step: u32) -> Output {
        Output {
            target: self.target.clone(),
            windows: self
                .windows
                .iter()
                .filter(|w| w.step == step)
                .cloned()
                .collect(),
        }
    }
}

/// The header line for a guest of `target` (QEMU's name).
pub fn header(target: &str) -> String {
    format!("{HEADER} target={target}\n")
}

/// Why an output file does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

impl std::error::Error for ParseError {}

/// Parse a plugin output file. A last window without its `E` line (QEMU
/// killed while writing) is dropped, not an error.
pub fn parse(text: &str) -> Result<Output, ParseError> {
    let err = |line: usize, why: String| ParseError { line, why };
    let mut lines = text.lines().enumerate();
    let target = match lines.next() {
        Some((_, l)) if l.starts_with(HEADER) => l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("target="))
            .unwrap_or("")
            .to_string(),
        _ => return Err(err(1, format!("no '{HEADER}' header"))),
    };
    let mut out = Output {
        target,
        windows: Vec::new(),
    };
    let mut open: Option<Window> = None;
    let mut step = 0u32;
    for (i, line) in lines {
        let n = i + 1;
        let mut f = line.split_ascii_whitespace();
        let num = |s: Option<&str>, hex: bool| -> Result<u64, ParseError> {
            let s = s.ok_or_else(|| err(n, "a field is missing".into()))?;
            if hex {
                u64::from_str_radix(s, 16)
            } else {
                s.parse()
            }
            .map_err(|_| err(n, format!("'{s}' is not a number")))
        };
        match f.next() {
            Some("W") => {
                if open.is_some() {
                    return Err(err(n, "a window begins before the last one ended".into()));
                }
                let mut w = Window {
                    step,
                    seq: num(f.next(), false)?,
                    phase: num(f.next(), false)? as u8,
                    kernel_insns: num(f.next(), false)?,
                    user_insns: num(f.next(), false)?,
                    ..Window::default()
                };
                if w.phase >= MAX_PHASES {
                    return Err(err(n, format!("phase {} out of range", w.phase)));
                }
                for c in w.tlb.iter_mut() {
                    *c = num(f.next(), false)?;
                }
                open = Some(w);
            }
            Some("T") => {
                let w = open
                    .as_mut()
                    .ok_or_else(|| err(n, "a block outside a window".into()))?;
                w.blocks.push((
                    num(f.next(), true)?,
                    num(f.next(), false)?,
                    num(f.next(), false)?,
                ));
            }
            Some("E") => {
                let w = open
                    .take()
                    .ok_or_else(|| err(n, "an end without a window".into()))?;
                out.windows.push(w);
            }
            Some("S") => {
                if open.is_some() {
                    return Err(err(n, "a command begins inside a window".into()));
                }
                step += 1;
            }
            None => {}
            Some(other) => return Err(err(n, format!("unknown record '{other}'"))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(seq: u64, phase: u8) -> Window {
        let mut tlb = [0; Tlb::ALL.len()];
        tlb[Tlb::Invlpg.index()] = 3;
        Window {
            step: 0,
            seq,
            phase,
            kernel_insns: 91_234,
            user_insns: 812,
            tlb,
            blocks: vec![
                (0xffff_ffff_8123_4560, 100, 1200),
                (0xffff_ffff_8100_0000, 1, 7),
            ],
        }
    }

    #[test]
    fn round_trip() {
        let mut text = header("x86_64");
        let ws = vec![window(0, 0), window(0, 1), window(1, 0)];
        for w in &ws {
            w.write(&mut text);
        }
        let out = parse(&text).unwrap();
        assert_eq!(out.target, "x86_64");
        assert_eq!(out.windows, ws);
        assert!(text.contains("T ffffffff81234560 100 1200\n"), "{text}");
    }

    #[test]
    fn each_command_of_a_boot_gets_its_own_windows() {
        let mut text = header("x86_64");
        window(0, 0).write(&mut text);
        window(1, 0).write(&mut text);
        text.push_str(STEP_LINE);
        text.push_str(STEP_LINE);
        window(0, 0).write(&mut text);
        let out = parse(&text).unwrap();
        let steps: Vec<(u32, u64)> = out.windows.iter().map(|w| (w.step, w.seq)).collect();
        assert_eq!(steps, [(0, 0), (0, 1), (2, 0)]);
        assert_eq!(out.step(0).windows.len(), 2);
        assert!(out.step(1).windows.is_empty());
        assert_eq!(out.step(2).windows[0].step, 2);
        let mut cut = header("x86_64");
        cut.push_str("W 0 0 5 5 0 0 0 0 0 0 0 0 0\nS\n");
        assert!(parse(&cut).is_err());
    }

    #[test]
    fn a_cut_last_window_is_dropped() {
        let mut text = header("aarch64");
        window(0, 0).write(&mut text);
        text.push_str("W 1 0 5 5 0 0 0 0 0 0 0 0 0\nT ffff8000 1 1\n");
        assert_eq!(parse(&text).unwrap().windows.len(), 1);
    }

    #[test]
    fn malformed_files_say_where() {
        assert_eq!(parse("").unwrap_err().line, 1);
        let e = parse(&format!("{}T 1 1 1\n", header("x86_64"))).unwrap_err();
        assert_eq!((e.line, e.why.as_str()), (2, "a block outside a window"));
        let e = parse(&format!("{}W 0 0 1 2 3\n", header("x86_64"))).unwrap_err();
        assert!(e.why.contains("missing"), "{e}");
        let e = parse(&format!(
            "{}W 0 7 1 2 0 0 0 0 0 0 0 0 0\n",
            header("x86_64")
        ))
        .unwrap_err();
        assert!(e.why.contains("phase 7"), "{e}");
        let e = parse(&format!("{}X\n", header("x86_64"))).unwrap_err();
        assert!(e.to_string().contains("unknown record 'X'"), "{e}");
    }
}
