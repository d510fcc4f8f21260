//! From what ptelab's QEMU plugin counted to a cell's [`Profile`]
//! (docs/guests.md, "Mechanism counters").
//!
//! The plugin writes, per sample window and phase, the executions and
//! instructions of each kernel translation block; the guest's answer says
//! which windows are a cell's and how many mm calls each timed. Blocks
//! become functions through the guest kernel's own symbols (its
//! `/proc/kallsyms`: the guests boot with `nokaslr`, so the addresses are
//! the same every boot of one kernel and are cached per kernel): a block
//! belongs to the function at or below its address, and a block that starts
//! at a function's address is one entry into it. Inlined code has no symbol
//! and counts in its caller.
//!
//! Every per-call figure is the median over the cell's windows, so a window
//! that asynchronous kernel work (a timer, the crypto self-tests of a fresh
//! boot) lands in moves none of them.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};

use anyhow::Context;
use ptelab_counts::record::{Output, Window};
use ptelab_counts::Tlb;

use crate::record::{FunctionCount, Profile, ProfilePart, SampleWindow};

/// A block further than this past the nearest symbol is not attributed to
/// it (module space, or an address past the kernel's text).
const MAX_FUNCTION_BYTES: u64 = 256 << 10;
/// The most symbol text accepted from a guest, inflated.
const MAX_SYMBOLS_BYTES: u64 = 64 << 20;

/// A guest kernel's text symbols, sorted by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symbols {
    addrs: Vec<u64>,
    names: Vec<String>,
}

impl Symbols {
    /// Parse `/proc/kallsyms` (`ADDR TYPE NAME [MODULE]`) or its compact form
    /// (`ADDR NAME`): text symbols only; the first name at an address wins.
    pub fn parse(text: &str) -> Symbols {
        let mut pairs: Vec<(u64, &str)> = Vec::new();
        for line in text.lines() {
            let mut f = line.split_ascii_whitespace();
            let (Some(addr), Some(second)) = (f.next(), f.next()) else {
                continue;
            };
            let name = match f.next() {
                Some(name) if is_text_type(second) => name,
                Some(_) => continue,
                None => second,
            };
            if let Ok(a) = u64::from_str_radix(addr, 16) {
                if a != 0 {
                    pairs.push((a, name));
                }
            }
        }
        pairs.sort_by_key(|&(a, _)| a);
        pairs.dedup_by_key(|&mut (a, _)| a);
        Symbols {
            addrs: pairs.iter().map(|&(a, _)| a).collect(),
            names: pairs.iter().map(|&(_, n)| n.to_string()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Every name, by address.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Whether `name` is one of the functions blocks are attributed to.
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// The compact form (`ADDR NAME` per line) the guest sends and the
    /// cache keeps.
    pub fn compact(&self) -> String {
        let mut s = String::with_capacity(self.len() * 40);
        for (a, n) in self.addrs.iter().zip(&self.names) {
            s.push_str(&format!("{a:x} {n}\n"));
        }
        s
    }

    /// The function holding `vaddr`, and whether `vaddr` is its first
    /// instruction.
    pub fn lookup(&self, vaddr: u64) -> Option<(&str, bool)> {
        let i = self.addrs.partition_point(|&a| a <= vaddr).checked_sub(1)?;
        let a = self.addrs[i];
        (vaddr - a < MAX_FUNCTION_BYTES).then(|| (self.names[i].as_str(), a == vaddr))
    }
}

/// kallsyms types of text: global, local, weak.
fn is_text_type(t: &str) -> bool {
    matches!(t, "T" | "t" | "W" | "w")
}

/// Deflate (the guest's side of the symbols channel).
pub fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("writing to memory");
    e.finish().expect("writing to memory")
}

/// Inflate what a guest sent, refusing more than [`MAX_SYMBOLS_BYTES`].
pub fn inflate(bytes: &[u8]) -> anyhow::Result<String> {
    let mut out = String::new();
    flate2::read::DeflateDecoder::new(bytes)
        .take(MAX_SYMBOLS_BYTES + 1)
        .read_to_string(&mut out)
        .context("the guest's symbols do not inflate to text")?;
    anyhow::ensure!(
        out.len() as u64 <= MAX_SYMBOLS_BYTES,
        "the guest's symbols inflate to more than {} MiB",
        MAX_SYMBOLS_BYTES >> 20
    );
    Ok(out)
}

/// Where names come from: a table, or why there is none.
pub enum Names<'a> {
    Symbols { table: &'a Symbols, source: String },
    Addresses(String),
}

/// Per-call figures of one window.
struct PerCall {
    kernel: f64,
    user: f64,
    tlb: [f64; Tlb::ALL.len()],
    /// function → (entries, instructions) per call.
    functions: HashMap<String, (f64, f64)>,
}

fn per_call(w: &Window, calls: u64, names: &Names) -> PerCall {
    let c = calls.max(1) as f64;
    let mut functions: HashMap<String, (f64, f64)> = HashMap::new();
    for &(vaddr, n, insns) in &w.blocks {
        let (name, entry) = match names {
            Names::Symbols { table, .. } => match table.lookup(vaddr) {
                Some((name, entry)) => (name.to_string(), entry),
                None => ("[unknown]".to_string(), false),
            },
            // Without symbols each block is its own "function".
            Names::Addresses(_) => (format!("{vaddr:#x}"), true),
        };
        let e = functions.entry(name).or_default();
        if entry {
            e.0 += n as f64 / c;
        }
        e.1 += insns as f64 / c;
    }
    let mut tlb = [0.0; Tlb::ALL.len()];
    for (t, &n) in tlb.iter_mut().zip(&w.tlb) {
        *t = n as f64 / c;
    }
    PerCall {
        kernel: w.kernel_insns as f64 / c,
        user: w.user_insns as f64 / c,
        tlb,
        functions,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A cell's profile from its windows and the plugin's output; an error
/// when a window the guest marked is missing from the output. `parts` names
/// the marked parts of the cell's calls (by marker phase) when its windows
/// are parts ([`SampleWindow::part`]): the cell's figures are then those of
/// each sample's parts added, and each part gets its own.
pub fn profile(
    windows: &[SampleWindow],
    out: &Output,
    names: &Names,
    parts: &[&str],
) -> anyhow::Result<Profile> {
    let by_key: HashMap<(u64, u8), &Window> =
        out.windows.iter().map(|w| ((w.seq, w.phase), w)).collect();
    let mut found = Vec::with_capacity(windows.len());
    for sw in windows {
        let w = by_key.get(&(sw.seq, sw.phase)).with_context(|| {
            format!(
                "the plugin wrote no window {} of phase {} (it wrote {}): the guest and the \
                 plugin disagree on the sample windows",
                sw.seq,
                sw.phase,
                out.windows.len()
            )
        })?;
        anyhow::ensure!(
            !sw.part || usize::from(sw.phase) < parts.len(),
            "the guest marked part {} of a cell whose workload has {} parts",
            sw.phase,
            parts.len()
        );
        found.push((sw, *w));
    }
    anyhow::ensure!(!found.is_empty(), "the cell has no sample window");
    // The cell's windows: a sample's parts added into one.
    let mut whole: Vec<(Window, u64)> = Vec::new();
    let mut seqs: HashMap<u64, usize> = HashMap::new();
    for &(sw, w) in &found {
        if !sw.part {
            whole.push((w.clone(), sw.calls));
            continue;
        }
        match seqs.get(&sw.seq) {
            Some(&i) => {
                let (sum, calls) = &mut whole[i];
                sum.kernel_insns += w.kernel_insns;
                sum.user_insns += w.user_insns;
                for (a, b) in sum.tlb.iter_mut().zip(&w.tlb) {
                    *a += b;
                }
                sum.blocks.extend_from_slice(&w.blocks);
                *calls += sw.calls;
            }
            None => {
                seqs.insert(sw.seq, whole.len());
                whole.push((w.clone(), sw.calls));
            }
        }
    }
    let rows: Vec<PerCall> = whole.iter().map(|(w, c)| per_call(w, *c, names)).collect();
    let s = summarize(&rows);
    let mut part_profiles = Vec::new();
    if !seqs.is_empty() {
        for (i, name) in parts.iter().enumerate() {
            let rows: Vec<PerCall> = found
                .iter()
                .filter(|(sw, _)| sw.part && usize::from(sw.phase) == i)
                .map(|(sw, w)| per_call(w, sw.calls, names))
                .collect();
            anyhow::ensure!(
                !rows.is_empty(),
                "the guest marked no window of the cell's part {name}"
            );
            let p = summarize(&rows);
            part_profiles.push(ProfilePart {
                phase: name.to_string(),
                kernel_instructions: p.kernel,
                user_instructions: p.user,
                tlb: p.tlb,
                functions: p.functions,
            });
        }
    }
    Ok(Profile {
        windows: rows.len() as u64,
        kernel_instructions: s.kernel,
        user_instructions: s.user,
        tlb: s.tlb,
        functions: s.functions,
        symbols: match names {
            Names::Symbols { source, .. } => source.clone(),
            Names::Addresses(why) => format!("addresses only: {why}"),
        },
        max_window_deviation: s.max_window_deviation,
        parts: part_profiles,
    })
}

/// The medians over windows' per-call figures.
struct Summary {
    kernel: f64,
    user: f64,
    tlb: BTreeMap<String, f64>,
    functions: Vec<FunctionCount>,
    max_window_deviation: f64,
}

fn summarize(rows: &[PerCall]) -> Summary {
    let column = |f: &dyn Fn(&PerCall) -> f64| median(rows.iter().map(f).collect());
    let kernel = column(&|r| r.kernel);
    let mut tlb = BTreeMap::new();
    for k in Tlb::ALL {
        let v = column(&|r| r.tlb[k.index()]);
        if rows.iter().any(|r| r.tlb[k.index()] > 0.0) {
            tlb.insert(k.name().to_string(), v);
        }
    }
    let mut names_seen: Vec<&String> = rows.iter().flat_map(|r| r.functions.keys()).collect();
    names_seen.sort();
    names_seen.dedup();
    let mut functions: Vec<FunctionCount> = names_seen
        .into_iter()
        .map(|name| {
            let get = |r: &PerCall, i: usize| {
                r.functions
                    .get(name)
                    .map_or(0.0, |&(e, n)| if i == 0 { e } else { n })
            };
            FunctionCount {
                name: name.clone(),
                entries: median(rows.iter().map(|r| get(r, 0)).collect()),
                instructions: median(rows.iter().map(|r| get(r, 1)).collect()),
            }
        })
        .filter(|f| f.instructions > 0.0)
        .collect();
    functions.sort_by(|a, b| {
        b.instructions
            .total_cmp(&a.instructions)
            .then_with(|| a.name.cmp(&b.name))
    });
    let max_window_deviation = rows
        .iter()
        .map(|r| {
            if kernel > 0.0 {
                (r.kernel - kernel).abs() / kernel
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max);
    Summary {
        kernel,
        user: column(&|r| r.user),
        tlb,
        functions,
        max_window_deviation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 T vm_normal_page
ffffffff81001000 T vm_normal_page_alias
ffffffff81001200 t change_pte_range
ffffffff81002000 D some_data
ffffffff81003000 W weak_fn
0000000000000000 T hidden
ffffffffc0000000 t mod_fn\t[somemod]
";

    fn table() -> Symbols {
        Symbols::parse(KALLSYMS)
    }

    #[test]
    fn kallsyms_text_symbols_only() {
        let s = table();
        assert_eq!(s.len(), 5, "{s:?}");
        assert_eq!(
            s.lookup(0xffff_ffff_8100_1000),
            Some(("vm_normal_page", true))
        );
        assert_eq!(
            s.lookup(0xffff_ffff_8100_1010),
            Some(("vm_normal_page", false))
        );
        assert_eq!(
            s.lookup(0xffff_ffff_8100_1200),
            Some(("change_pte_range", true))
        );
        // Past the data symbol: still change_pte_range's (data is not text).
        assert_eq!(
            s.lookup(0xffff_ffff_8100_2010).map(|x| x.0),
            Some("change_pte_range")
        );
        assert_eq!(s.lookup(0xffff_ffff_8000_0000), None);
        assert_eq!(
            s.lookup(0xffff_ffff_c100_0000),
            None,
            "too far past any symbol"
        );
        assert!(s.contains("change_pte_range") && !s.contains("some_data"));
        // The first name at an address is the one blocks are attributed to.
        assert!(!s.contains("vm_normal_page_alias"));
        assert_eq!(s.names().count(), s.len());
        // The compact form parses to the same table.
        assert_eq!(Symbols::parse(&s.compact()), s);
        let round = inflate(&deflate(s.compact().as_bytes())).unwrap();
        assert_eq!(round, s.compact());
        assert!(inflate(b"not deflate at all \xff\xfe").is_err());
    }

    fn window(seq: u64, phase: u8, blocks: Vec<(u64, u64, u64)>, kernel: u64) -> Window {
        let mut tlb = [0; Tlb::ALL.len()];
        tlb[Tlb::TlbiPage.index()] = 2 * (seq + 1).min(1);
        tlb[Tlb::Dsb.index()] = 4;
        Window {
            step: 0,
            seq,
            phase,
            kernel_insns: kernel,
            user_insns: 10,
            tlb,
            blocks,
        }
    }

    #[test]
    fn medians_per_call_ignore_a_disturbed_window() {
        let f = 0xffff_ffff_8100_1000;
        let g = 0xffff_ffff_8100_1200;
        let normal = |seq| {
            window(
                seq,
                0,
                vec![(f, 200, 2000), (f + 0x20, 100, 500), (g, 2, 300)],
                2800,
            )
        };
        // Window 1 also ran 8M instructions of asynchronous work in _stext.
        let mut noisy = normal(1);
        noisy.blocks.push((0xffff_ffff_8100_0000, 1, 8_000_000));
        noisy.kernel_insns += 8_000_000;
        let out = Output {
            target: "x86_64".into(),
            windows: vec![normal(0), noisy, normal(2)],
        };
        let sw = |seq| SampleWindow {
            seq,
            phase: 0,
            calls: 2,
            part: false,
        };
        let table = table();
        let names = Names::Symbols {
            table: &table,
            source: "test".into(),
        };
        let p = profile(&[sw(0), sw(1), sw(2)], &out, &names, &[]).unwrap();
        assert!(p.parts.is_empty());
        assert_eq!(p.windows, 3);
        assert_eq!(p.kernel_instructions, 1400.0);
        assert_eq!(p.user_instructions, 5.0);
        let vm = p.function("vm_normal_page").unwrap();
        assert_eq!((vm.entries, vm.instructions), (100.0, 1250.0));
        let cpr = p.function("change_pte_range").unwrap();
        assert_eq!((cpr.entries, cpr.instructions), (1.0, 150.0));
        // _stext ran in one window of three: its median is 0, so it is left out.
        assert!(p.function("_stext").is_none(), "{:?}", p.functions);
        assert_eq!(
            p.functions[0].name, "vm_normal_page",
            "most instructions first"
        );
        assert_eq!(p.tlb.get("dsb"), Some(&2.0));
        assert_eq!(p.tlb.get("tlbi-page"), Some(&1.0));
        assert_eq!(p.tlb.get("invlpg"), None, "kinds never seen are left out");
        assert_eq!(p.tlb_invalidations(), 1.0, "a DSB is not an invalidation");
        assert!(
            p.max_window_deviation > 1000.0,
            "{}",
            p.max_window_deviation
        );
        // Phase 1 was never written: the windows disagree.
        let e = profile(
            &[SampleWindow {
                seq: 0,
                phase: 1,
                calls: 1,
                part: false,
            }],
            &out,
            &names,
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("no window 0 of phase 1"), "{e}");
        // Without symbols: blocks by address, each its own entry.
        let p = profile(&[sw(0)], &out, &Names::Addresses("no kallsyms".into()), &[]).unwrap();
        assert_eq!(p.symbols, "addresses only: no kallsyms");
        assert_eq!(
            p.function("0xffffffff81001000").map(|f| f.entries),
            Some(100.0)
        );
    }

    /// A toggle's sample is two marked parts: the cell's figures are the
    /// parts added per sample, each part has its own per call.
    #[test]
    fn marked_parts_add_up_to_the_cell_and_keep_their_own() {
        let f = 0xffff_ffff_8100_1000;
        let g = 0xffff_ffff_8100_1200;
        // Part 0 (3 calls a window): vm_normal_page only; part 1 (3 calls):
        // change_pte_range only, twice the kernel instructions.
        let windows: Vec<Window> = (0..3)
            .flat_map(|seq| {
                [
                    window(seq, 0, vec![(f, 3, 300)], 3000),
                    window(seq, 1, vec![(g, 3, 600)], 6000),
                ]
            })
            .collect();
        let out = Output {
            target: "x86_64".into(),
            windows,
        };
        let sws: Vec<SampleWindow> = (0..3)
            .flat_map(|seq| {
                (0..2).map(move |phase| SampleWindow {
                    seq,
                    phase,
                    calls: 3,
                    part: true,
                })
            })
            .collect();
        let table = table();
        let parts = ["none-to-rw", "rw-to-none"];
        let p = profile(&sws, &out, &names_of(&table), &parts).unwrap();
        assert_eq!(p.windows, 3, "a window per sample, not per part");
        assert_eq!(p.kernel_instructions, 1500.0, "9000 over 6 calls");
        assert_eq!(p.user_instructions, 20.0 / 6.0);
        assert_eq!(p.function("vm_normal_page").unwrap().entries, 0.5);
        assert_eq!(p.function("change_pte_range").unwrap().instructions, 100.0);
        let names: Vec<&str> = p.parts.iter().map(|x| x.phase.as_str()).collect();
        assert_eq!(names, parts);
        assert_eq!(p.parts[0].kernel_instructions, 1000.0);
        assert_eq!(p.parts[1].kernel_instructions, 2000.0);
        assert_eq!(p.parts[0].functions.len(), 1);
        assert_eq!(p.parts[1].functions[0].name, "change_pte_range");
        assert_eq!(p.parts[1].functions[0].instructions, 200.0);
        // A part the workload does not have is refused, not dropped.
        let e = profile(&sws, &out, &names_of(&table), &parts[..1]).unwrap_err();
        assert!(e.to_string().contains("has 1 parts"), "{e}");
    }

    fn names_of(table: &Symbols) -> Names<'_> {
        Names::Symbols {
            table,
            source: "test".into(),
        }
    }
}
