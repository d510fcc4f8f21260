//! The model's representation may change (issue 18 item 6: a compact memmap
//! and TLB model so that 1G cells fit a laptop), its counts may not. Random
//! layouts, strategies and arches (a fixed-seed generator, so the cases are
//! the same on every run) are run call by call, and every counter, histogram,
//! flush, error and final page table is compared with
//! `tests/golden/counters.txt`, written by the dense representation (commit
//! 5a77a48) before the change.
//!
//! A deliberate change to what the model counts (model logic, not
//! representation) re-blesses the file: `PTELAB_BLESS=1 cargo test --release
//! -p ptelab-model --test golden_counters`, and the diff is reviewed.

use std::fmt::Write as _;

use ptelab_model::layout::{build, build_file, FolioPlacement, LayoutSpec, PteTweak};
use ptelab_model::mprotect::mprotect;
use ptelab_model::mremap::mremap_workload;
use ptelab_model::workload::{check_invariants, reclaim_scan};
use ptelab_model::{
    run_model, Arch, ArchConfig, Arm64, Cx, Granule, Lru, ModelConfig, Prot, Strategy, VmFlags,
    Workload, X86,
};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/counters.txt");
/// The strategies the file was written with, by name (a renamed strategy
/// must be re-blessed, not skipped).
const STRATEGIES: [&str; 4] = ["per-pte", "batched", "batched-v6.19", "smallfast"];
const LAYOUT_CASES: u64 = 600;
const CELL_CASES: u64 = 300;

/// splitmix64: fixed, dependency-free, so the cases never change.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn arch_of(rng: &mut Rng) -> ArchConfig {
    let arm = |granule, contpte, bbml2, tlbi_range| {
        ArchConfig::Arm64(Arm64 {
            granule,
            contpte,
            bbml2,
            tlbi_range,
            lpa2: false,
        })
    };
    match rng.below(8) {
        0..=2 => ArchConfig::X86,
        3 | 4 => arm(Granule::K4, true, rng.chance(1, 2), rng.chance(3, 4)),
        5 => arm(Granule::K4, false, false, true),
        6 => arm(Granule::K16, true, rng.chance(1, 2), true),
        _ => arm(Granule::K64, true, false, rng.chance(1, 2)),
    }
}

fn tweak_of(rng: &mut Rng) -> PteTweak {
    match rng.below(7) {
        0 => PteTweak::Old,
        1 => PteTweak::Clean,
        2 => PteTweak::ClearSoftDirty,
        3 => PteTweak::UffdWp,
        4 => PteTweak::WrProtect,
        5 => PteTweak::WriteFault,
        _ => PteTweak::SoftDirty,
    }
}

fn prot_of(rng: &mut Rng) -> Prot {
    [Prot::None, Prot::Read, Prot::ReadWrite][rng.below(3) as usize]
}

/// What a layout case does after fault-in.
#[derive(Debug)]
enum Op {
    /// `(offset from VMA start, pages, prot)`, clamped into the VMA.
    Mprotect(u64, u64, Prot),
    /// Move `[offset, offset + pages)` of the VMA the first number picks
    /// (mprotect may have split the original) past the original's end.
    Mremap(u64, u64, u64),
    /// One reclaim pass over the placed folios.
    Reclaim(Lru),
}

#[derive(Debug)]
struct LayoutCase {
    arch: ArchConfig,
    layout: LayoutSpec,
    file: bool,
    ops: Vec<Op>,
}

fn layout_case(rng: &mut Rng) -> LayoutCase {
    let arch = arch_of(rng);
    let ptrs_order = arch.granule().page_shift() - 3;
    let max_order = if rng.chance(1, 6) {
        ptrs_order.min(9)
    } else {
        6
    };
    let many = rng.chance(1, 5);
    let nfolios = 1 + rng.below(if many { 40 } else { 7 });
    let folios: Vec<FolioPlacement> = (0..nfolios)
        .map(|_| {
            let order = rng.below(u64::from(max_order) + 1) as u8;
            let n = 1u64 << order;
            let mapped = if rng.chance(3, 4) {
                (0, n)
            } else {
                let lo = rng.below(n);
                (lo, lo + 1 + rng.below(n - lo))
            };
            let exclusive = if rng.chance(3, 4) {
                Vec::new()
            } else {
                (0..n).map(|_| rng.chance(2, 3)).collect()
            };
            let tweaks = (0..rng.below(4))
                .map(|_| (rng.below(n), tweak_of(rng)))
                .collect::<Vec<_>>();
            FolioPlacement {
                order,
                mapped,
                exclusive,
                tweaks,
                va_misaligned: rng.chance(1, 10),
            }
        })
        .collect();
    let shared = rng.chance(1, 3);
    let mut vma_flags = VmFlags::READ | VmFlags::WRITE;
    if shared {
        vma_flags |= VmFlags::SHARED;
    }
    if rng.chance(4, 5) {
        vma_flags |= VmFlags::SOFTDIRTY;
    }
    if rng.chance(1, 5) {
        vma_flags |= VmFlags::UFFD_WP;
    }
    let file = shared && rng.chance(1, 2);
    let mut folios: Vec<FolioPlacement> = folios;
    if !file {
        // A write fault or a soft-dirty bit of its own stands for a file
        // page written since (mprotect.rs tests); on anonymous memory it
        // could make a non-exclusive page writable.
        for f in &mut folios {
            f.tweaks
                .retain(|(_, t)| !matches!(t, PteTweak::WriteFault | PteTweak::SoftDirty));
        }
    }
    let mut ops = Vec::new();
    if !file && rng.chance(1, 4) {
        // Reclaim leaves legal stale young TLB entries that a later
        // mprotect's check would flag: it runs alone, as in `run_model`.
        let lru = if rng.chance(1, 2) {
            Lru::Classic
        } else {
            Lru::Mglru
        };
        return LayoutCase {
            arch,
            layout: LayoutSpec {
                base: (1 << 13) + rng.below(1 << 10),
                vma_flags,
                folios,
                extra_window: 0,
            },
            file,
            ops: vec![Op::Reclaim(lru)],
        };
    }
    for _ in 0..1 + rng.below(4) {
        ops.push(Op::Mprotect(
            rng.below(600),
            1 + rng.below(400),
            prot_of(rng),
        ));
    }
    if !file && rng.chance(1, 3) {
        ops.push(Op::Mremap(rng.below(4), rng.below(600), 1 + rng.below(600)));
    }
    let base = (1 << 13) + rng.below(1 << 10);
    LayoutCase {
        arch,
        layout: LayoutSpec {
            base,
            vma_flags,
            folios,
            extra_window: if matches!(ops.last(), Some(Op::Mremap(..))) {
                1 << 16
            } else {
                0
            },
        },
        file,
        ops,
    }
}

/// Every observable of one layout case under one strategy, as text.
fn run_layout<A: Arch>(arch: A, strategy: Strategy, case: &LayoutCase) -> (Vec<u64>, String) {
    let kernel = strategy.kernel_features();
    let (mut cx, placed): (Cx<A>, _) = if case.file {
        build_file(arch, kernel, &case.layout, true)
    } else {
        build(arch, kernel, &case.layout, true)
    };
    let mut out = String::new();
    let mut total = ptelab_model::Counters::default();
    let (vs, ve) = placed.vma;
    let _ = writeln!(out, "fault-in: {:?}", check_invariants(&cx));
    for op in &case.ops {
        let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
        let r = match *op {
            Op::Mprotect(off, len, prot) => {
                let start = vs + off % (ve - vs);
                let len = len.clamp(1, ve - start);
                cx.tlb_fill(wb, wb + wn);
                let r = mprotect(&mut cx, start, len, prot).and_then(|()| check_invariants(&cx));
                format!("{r:?}")
            }
            Op::Mremap(pick, off, len) => {
                let v = cx.mm.vmas[(pick % cx.mm.vmas.len() as u64) as usize];
                let start = v.start + off % (v.end - v.start);
                let end = start + len.clamp(1, v.end - start);
                let r = mremap_workload(&mut cx, vs, start, end, ve - vs);
                format!("{:?}", r.map(|c| c.label))
            }
            Op::Reclaim(lru) => {
                let r = reclaim_scan(&mut cx, &placed.folios, lru);
                format!("{:?}", r.map(|c| c.label))
            }
        };
        let counters = cx.take_counters();
        let flushes = cx.take_flushes();
        total.add(&counters);
        let _ = writeln!(out, "{op:?}: {r}\n  {counters:?}\n  {flushes:?}");
    }
    let vals: Vec<u64> = (wb_of(&cx)..wb_of(&cx) + cx.mm.pt.len())
        .map(|a| ptelab_model::arch::PteValue::val(cx.peek(a)))
        .collect();
    let _ = writeln!(out, "vmas {:?}\nptes {vals:?}", cx.mm.vmas);
    (total.scalars().into_iter().map(|(_, v)| v).collect(), out)
}

fn wb_of<A: Arch>(cx: &Cx<A>) -> u64 {
    cx.mm.pt.base()
}

fn cell_case(rng: &mut Rng) -> ModelConfig {
    let workload = [
        Workload::MprotectToggle,
        Workload::MprotectRoRw,
        Workload::ProtTransition,
        Workload::MremapMove,
        Workload::Reclaim,
        Workload::ReclaimMglru,
    ][rng.below(6) as usize];
    let arch = arch_of(rng);
    let g = arch.granule();
    let order = rng.below(u64::from(g.page_shift() - 3) + 1);
    let nr = 1u64 << order;
    let pages = match rng.below(10) {
        0 => 1 + rng.below(1 << 14),
        1..=3 => nr * (1 + rng.below(8)),
        _ => 1 + rng.below(2048),
    };
    let strategy: Strategy = STRATEGIES[rng.below(4) as usize].parse().unwrap();
    let mut cfg = ModelConfig::new(
        workload,
        arch,
        strategy,
        pages * g.page_size(),
        nr * g.page_size(),
    );
    cfg.offset_pages = if rng.chance(1, 3) { rng.below(nr) } else { 0 };
    cfg
}

fn line(id: &str, totals: &[u64], detail: &str) -> String {
    let t: Vec<String> = totals.iter().map(u64::to_string).collect();
    format!("{id}: {} #{:016x}", t.join(","), fnv(detail))
}

/// The golden lines, and the detail text of each (for a failing case).
fn compute() -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let mut rng = Rng(0x5074_656c_6162_0018);
    for i in 0..LAYOUT_CASES {
        let case = layout_case(&mut rng);
        for name in STRATEGIES {
            let s: Strategy = name
                .parse()
                .unwrap_or_else(|e| panic!("{e}: re-bless the golden counters"));
            let (totals, detail) = match case.arch {
                ArchConfig::X86 => run_layout(X86, s, &case),
                ArchConfig::Arm64(a) => run_layout(a, s, &case),
            };
            let id = format!("layout {i} {name} {}", case.arch.name());
            lines.push((line(&id, &totals, &detail), format!("{case:?}\n{detail}")));
        }
    }
    for i in 0..CELL_CASES {
        let cfg = cell_case(&mut rng);
        let (totals, detail) = match run_model(&cfg) {
            Ok(o) => (
                o.total().scalars().into_iter().map(|(_, v)| v).collect(),
                format!(
                    "{:?}\n{:?}\n{} {:?}",
                    o.calls, o.outside, o.ptes_simulated, o.notes
                ),
            ),
            Err(e) => (Vec::new(), e.to_string()),
        };
        let id = format!(
            "cell {i} {} {} {} {}B/{}B+{}",
            cfg.workload.name(),
            cfg.strategy.name(),
            cfg.arch.name(),
            cfg.size_bytes,
            cfg.folio_bytes,
            cfg.offset_pages
        );
        lines.push((line(&id, &totals, &detail), format!("{cfg:?}\n{detail}")));
    }
    lines
}

#[test]
fn counters_equal_the_dense_representation() {
    let got = compute();
    if std::env::var_os("PTELAB_BLESS").is_some() {
        let text: String = got.iter().map(|(l, _)| format!("{l}\n")).collect();
        std::fs::create_dir_all(std::path::Path::new(GOLDEN).parent().unwrap()).unwrap();
        std::fs::write(GOLDEN, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(GOLDEN).expect("tests/golden/counters.txt");
    let want: Vec<&str> = want.lines().collect();
    assert_eq!(want.len(), got.len(), "number of golden cases");
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i].0 != want[i]).collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{} of {} cases differ from the golden counters; first:\n  want {}\n  got  {}\n{}",
            bad.len(),
            got.len(),
            want[i],
            got[i].0,
            got[i].1
        );
    }
}
