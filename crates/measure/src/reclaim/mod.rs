//! Seed 004 (`reclaim`): mapped, young, clean, file-backed large folios are
//! reclaimed; the time of the reclaim call is measured.
//!
//! What the seed measured: 10 GiB of clean file-backed folios mmap'd in a
//! memory cgroup, 8 GiB reclaimed by one write to `memory.reclaim`, timed with
//! `time`. That path is `try_to_free_mem_cgroup_pages` -> `shrink_folio_list`
//! -> `folio_referenced` -> `folio_referenced_one`, whose young-bit clearing
//! the 2026 series batches per large folio (docs/kernel.md §8.1, §8.4).
//!
//! Two kinds of memory (`PTELAB_RECLAIM_MEMORY=file|anon`; `anon` is the
//! default when `--swapfile SIZE` is given, `file` otherwise):
//!
//! **file** (default): this machine has no swap, so anonymous folios cannot
//! be reclaimed, while clean page-cache folios are simply dropped. The folios
//! come from a temporary file (`O_TMPFILE`, so
//! nothing is left behind even after SIGKILL) in `$PTELAB_RECLAIM_DIR`
//! (default /var/tmp) written with one `pwrite` per folio-sized chunk: on a
//! filesystem with large-folio support (ext4 and xfs on 6.x) the page cache
//! then allocates folios of exactly that size. The file is `fdatasync`ed
//! (clean), mapped with `MAP_SHARED` over the runner's region (so the runner's
//! post-sampling verification observes the file folios), and every page is
//! read so that every PTE is young. The anonymous memory the runner populated
//! is released by that mapping; its verified layout is the "before" layout.
//!
//! **anon** (`--swapfile SIZE`, opt-in): the runner's own anonymous region,
//! populated with the requested folio layout and verified, is swapped out to
//! a temporary swapfile of SIZE ([`crate::kernel::swap::SwapFile`]: created
//! in `$PTELAB_RECLAIM_DIR` per block, swapped off and removed after, and by
//! the next ptelab if this one is killed). The measuring thread enters the
//! child memcg first and the region is refaulted there (charges do not move
//! with a task), with `memory.swappiness` 100 in a v1 child. Before every
//! iteration (untimed) the region is zapped (`MADV_DONTNEED`, which frees the
//! swap slots) and written again, so each reclaim call finds fresh folios of
//! the requested size: swapping the old ones back in by touching them would
//! give order-0 folios (the kernel swaps in large folios only from
//! `SWP_SYNCHRONOUS_IO` devices such as zram, not from a swapfile), and the
//! next call would reclaim a different layout. Reclaimed pages are counted in
//! `/proc/self/pagemap` (pages whose PTE became a swap entry, bit 62).
//! Whether large folios are split on the way out is read from the mTHP
//! counters of the folio size (`hugepages-<N>kB/stats/swpout`,
//! `swpout_fallback`, `split`) around one untimed probe reclaim when the op is
//! built, and shown in the phase label: `swpout-whole` (swapped out as large
//! folios), `swpout-split` (split first: no contiguous swap slots or no
//! large-folio swap-out on this device), `swpout-mixed`, `swpout-unseen`.
//! Label example: `memcg-v1-limit anon ext4 swpout-whole`.
//!
//! Methods, in order of preference (the chosen one is the phase label, with
//! the filesystem type, e.g. `memcg-v1-limit ext4`):
//! 1. `memcg-v2-reclaim`: cgroup v2 with the memory controller; write 80% of
//!    the file size to `memory.reclaim` (the seed's method and fraction).
//! 2. `memcg-v1-limit`: cgroup v1 memory controller; set
//!    `memory.limit_in_bytes` to the usage minus 80% of the file size (the
//!    kernel reclaims in `mem_cgroup_resize_max` before the write returns),
//!    then back to unlimited (untimed). Same reclaim path as (1).
//! 3. `madv-pageout`: no memory cgroup (or not root): `MADV_PAGEOUT` over the
//!    mapping. It reclaims through `reclaim_pages` with
//!    `ignore_references = true`, so `folio_referenced` is **not** called:
//!    this method measures unmapping and freeing, not young-bit batching.
//!
//! `PTELAB_RECLAIM_METHOD=memcg-v2|memcg-v1|pageout` forces a method.
//!
//! Every iteration starts from the same state: the file is truncated (which
//! also drops the shadow entries that would make refaults "workingset" hits
//! and activate them), rewritten, synced, faulted in and read; residency is
//! checked with `mincore` (a DAMON pageout scheme may evict idle file pages).
//! Only the reclaim call is timed; ns per reclaimed page divides by the pages
//! `mincore` saw leave the page cache, not by the target.
//!
//! Cleanup: mappings, files, the cgroup (thread moved home first) and the
//! swapfile (after the mappings, so no swap entry is left in it) are
//! released by `Drop` on success, error, panic and interrupt (the runner turns
//! SIGINT into an error between samples).

mod refill;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use super::marker;
use super::ops::{BatchTime, KernelOp};
use crate::kernel::cgroup::{self, ChildCgroup, Memcg};
use crate::kernel::files::{fs_name, statfs_magic};
use crate::kernel::region::{madvise, Region, PAGE_SIZE};
use crate::kernel::swap::{SwapFile, SwapoutStats};
use crate::kernel::{host, layout, mmenv, procfs};
use crate::workload::FolioSpec;
pub use refill::Refill;
use refill::{pad_for, read_all, Backing};

/// Share of the populated file pages each call asks to reclaim (the seed's
/// 8 GiB of 10 GiB).
const TARGET_NUM: u64 = 4;
const TARGET_DEN: u64 = 5;

/// How the reclaim is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    MemcgV2Reclaim,
    MemcgV1Limit,
    MadvPageout,
}

impl Method {
    /// Name used in the phase label and `PTELAB_RECLAIM_METHOD`.
    pub fn name(self) -> &'static str {
        match self {
            Method::MemcgV2Reclaim => "memcg-v2-reclaim",
            Method::MemcgV1Limit => "memcg-v1-limit",
            Method::MadvPageout => "madv-pageout",
        }
    }

    /// Parse a `PTELAB_RECLAIM_METHOD` value.
    pub fn parse(text: &str) -> anyhow::Result<Method> {
        Ok(match text.trim() {
            "memcg-v2" | "memcg-v2-reclaim" => Method::MemcgV2Reclaim,
            "memcg-v1" | "memcg-v1-limit" => Method::MemcgV1Limit,
            "pageout" | "madv-pageout" => Method::MadvPageout,
            other => {
                bail!("PTELAB_RECLAIM_METHOD={other:?}: expected memcg-v2, memcg-v1 or pageout")
            }
        })
    }
}

/// Pick the method for this machine (`forced` from the environment wins).
pub fn choose(memcg: Option<&Memcg>, root: bool, forced: Option<Method>) -> anyhow::Result<Method> {
    let auto = match (memcg, root) {
        (Some(Memcg::V2(_)), true) => Method::MemcgV2Reclaim,
        (Some(Memcg::V1(_)), true) => Method::MemcgV1Limit,
        _ => Method::MadvPageout,
    };
    let Some(m) = forced else {
        return Ok(auto);
    };
    let ok = match m {
        Method::MemcgV2Reclaim => matches!(memcg, Some(Memcg::V2(_))) && root,
        Method::MemcgV1Limit => matches!(memcg, Some(Memcg::V1(_))) && root,
        Method::MadvPageout => true,
    };
    if !ok {
        bail!(
            "reclaim method {} is not available here (memory cgroup: {}, root: {root})",
            m.name(),
            match memcg {
                Some(Memcg::V2(p)) => format!("v2 at {}", p.display()),
                Some(Memcg::V1(p)) => format!("v1 at {}", p.display()),
                None => "none".into(),
            }
        );
    }
    Ok(m)
}

/// What is reclaimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Clean page-cache folios of a temporary file (dropped, no swap needed).
    File,
    /// The runner's anonymous region, swapped out to a temporary swapfile.
    Anon,
}

/// The memory kind: `PTELAB_RECLAIM_MEMORY` (`file` or `anon`), else `anon`
/// when a swapfile was asked for, else `file`. Anonymous reclaim without
/// `--swapfile` is refused.
pub fn memory_from_env(swapfile: bool) -> anyhow::Result<Memory> {
    let memory = match std::env::var("PTELAB_RECLAIM_MEMORY").ok().as_deref() {
        None | Some("") if swapfile => Memory::Anon,
        None | Some("") => Memory::File,
        Some("file") => Memory::File,
        Some("anon") => Memory::Anon,
        Some(other) => bail!("PTELAB_RECLAIM_MEMORY={other:?}: expected file or anon"),
    };
    if memory == Memory::Anon && !swapfile {
        bail!(
            "anonymous reclaim needs swap, and ptelab does not use the machine's own: pass \
             --swapfile SIZE (e.g. --swapfile 256M) for a temporary swapfile in \
             $PTELAB_RECLAIM_DIR (default /var/tmp), swapped off and removed after the run"
        );
    }
    if memory == Memory::File && swapfile {
        bail!(
            "--swapfile is for anonymous reclaim, but PTELAB_RECLAIM_MEMORY=file asks for \
             page-cache reclaim, which needs no swap; drop one of them"
        );
    }
    Ok(memory)
}

/// Everything the reclaim workload takes from flags and the environment,
/// read and validated once by the plan stage and carried in the cell plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReclaimOptions {
    pub memory: Memory,
    /// `--swapfile` size in bytes (anonymous reclaim only).
    pub swapfile: Option<u64>,
    /// Where reclaim files and swapfiles are made (`PTELAB_RECLAIM_DIR`).
    pub dir: PathBuf,
    /// `PTELAB_RECLAIM_METHOD`, when set.
    pub forced_method: Option<Method>,
    /// How the page cache is refilled before each call
    /// (`PTELAB_RECLAIM_REFILL`, default write).
    pub refill: Refill,
}

impl ReclaimOptions {
    /// Read the environment once and check it against `--swapfile`.
    pub fn from_env(swapfile: Option<u64>) -> anyhow::Result<ReclaimOptions> {
        let forced_method = std::env::var("PTELAB_RECLAIM_METHOD")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| Method::parse(&v))
            .transpose()?;
        Ok(ReclaimOptions {
            memory: memory_from_env(swapfile.is_some())?,
            swapfile,
            dir: reclaim_dir(),
            forced_method,
            refill: Refill::from_env(Refill::Write)?,
        })
    }
}

/// The directory of reclaim files and swapfiles.
pub fn reclaim_dir() -> PathBuf {
    std::env::var_os("PTELAB_RECLAIM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// An unnamed temporary file in `dir` that cannot outlive ptelab.
fn temp_file(dir: &Path) -> anyhow::Result<File> {
    crate::kernel::files::unlinked_temp_file(dir, "reclaim")
}

/// Resident pages of `[addr, addr+len)` by mincore(2).
fn resident_pages(addr: *mut u8, len: usize) -> anyhow::Result<u64> {
    let mut vec = vec![0u8; len.div_ceil(PAGE_SIZE)];
    // SAFETY: vec has one byte per page of the range, which is our mapping.
    if unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mincore");
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64)
}

/// Present and swapped pages of `[addr, addr+len)` by /proc/self/pagemap
/// (bits 63 and 62; readable without root, which only hides PFNs).
fn pagemap_counts(addr: *mut u8, len: usize) -> anyhow::Result<(u64, u64)> {
    let (mut present, mut swapped) = (0, 0);
    for e in procfs::pagemap(addr, len / PAGE_SIZE)? {
        let v = procfs::raw_entry(e);
        present += v >> 63;
        swapped += (v >> 62) & 1;
    }
    Ok((present, swapped))
}

/// The reclaim workload.
pub struct Reclaim {
    /// The runner's regions: file mode, their ranges now `MAP_SHARED` file
    /// mappings; anon mode, the runner's anonymous memory.
    regions: Vec<Region>,
    files: Vec<Backing>,
    memory: Memory,
    /// Anon mode: the swapfile the region is swapped out to.
    swap: Option<SwapFile>,
    method: Method,
    cg: Option<ChildCgroup>,
    /// memory.limit_in_bytes (v1) or memory.reclaim (v2), open.
    control: Option<File>,
    label: &'static str,
    /// Whether the files are populated, synced, mapped young and resident.
    ready: bool,
    /// How the files are refilled, and whether they were written once.
    refill: Refill,
    written: bool,
    /// Pages reclaimed and calls made, over every timed call.
    reclaimed: u64,
    calls: u64,
}

impl Reclaim {
    /// Set up the method and the memory: file mode replaces the runner's
    /// regions by file mappings; anon mode makes the swapfile and refaults
    /// the regions in the cgroup.
    pub fn new(regions: Vec<Region>, opts: &ReclaimOptions) -> anyhow::Result<Reclaim> {
        let dir = opts.dir.clone();
        let swap_bytes = opts.swapfile;
        let memory = opts.memory;
        let fs = fs_name(statfs_magic(&dir)?);
        if memory == Memory::File
            && matches!(fs, "tmpfs" | "ramfs")
            && host::swap_total_bytes() == 0
        {
            bail!(
                "{} is on {fs}, whose pages are swap-backed or unevictable, and this machine \
                 has no swap: nothing there can be reclaimed (MADV_PAGEOUT and memcg reclaim \
                 do nothing on such pages without swap); set PTELAB_RECLAIM_DIR to a directory \
                 on a disk filesystem",
                dir.display()
            );
        }
        let forced = opts.forced_method;
        let root = procfs::is_root();
        let memcg = cgroup::detect();
        let method = choose(memcg.as_ref(), root, forced)?;
        let swap = match (memory, swap_bytes) {
            (Memory::Anon, Some(b)) => Some(SwapFile::create(&dir, b)?),
            _ => None,
        };
        let lru = match method {
            Method::MadvPageout => String::new(),
            _ => format!(" {}", lru_name(mmenv::mglru())),
        };
        let label: &'static str = Box::leak(match memory {
            Memory::File => format!("{} {fs}{lru}", method.name()).into_boxed_str(),
            Memory::Anon => format!("{} anon {fs}{lru}", method.name()).into_boxed_str(),
        });
        let mut op = Reclaim {
            regions,
            files: Vec::new(),
            memory,
            swap,
            method,
            cg: None,
            control: None,
            label,
            ready: false,
            refill: opts.refill,
            written: false,
            reclaimed: 0,
            calls: 0,
        };
        // The cgroup first: page-cache folios are charged when allocated.
        if let (Some(m), Method::MemcgV1Limit | Method::MemcgV2Reclaim) = (&memcg, method) {
            cgroup::remove_stale(m);
            let cg = ChildCgroup::enter(m)?;
            let name = if method == Method::MemcgV1Limit {
                "memory.limit_in_bytes"
            } else {
                "memory.reclaim"
            };
            op.control = Some(cg.control(name)?);
            if memory == Memory::Anon && method == Method::MemcgV1Limit {
                // A child inherits its parent's swappiness, and 0 would keep
                // memcg reclaim off anonymous memory altogether.
                cg.write("memory.swappiness", "100")?;
            }
            op.cg = Some(cg);
        }
        if memory == Memory::Anon {
            // Refault in the cgroup (charges stay where they were made).
            op.populate()?;
            op.check_layout()?;
            op.probe_split()?;
            return Ok(op);
        }
        for r in &op.regions {
            let file =
                temp_file(&dir).with_context(|| format!("temporary file in {}", dir.display()))?;
            let chunk = r.spec().folio_bytes() as usize;
            let chunk = if r.len() % chunk == 0 {
                chunk
            } else {
                PAGE_SIZE
            };
            let pad = match op.refill {
                Refill::Reread => pad_for(r.spec()),
                Refill::Write => 0,
            };
            file.set_len((pad + r.len()) as u64)
                .context("sizing the file")?;
            map_file_over(r, &file, pad as u64)?;
            op.files.push(Backing { file, chunk, pad });
        }
        op.populate()?;
        op.check_layout()?;
        Ok(op)
    }

    /// One untimed reclaim of large anonymous folios around which the mTHP
    /// swap-out counters are read: were the folios split on the way out? The
    /// verdict joins the phase label.
    fn probe_split(&mut self) -> anyhow::Result<()> {
        let spec = match self.regions.first() {
            Some(r) if r.spec() != FolioSpec::Base => r.spec(),
            _ => return Ok(()),
        };
        let Some(before) = SwapoutStats::read(spec.folio_bytes()) else {
            return Ok(());
        };
        self.reclaim_once()?;
        self.ready = false;
        let Some(after) = SwapoutStats::read(spec.folio_bytes()) else {
            return Ok(());
        };
        let verdict = after.since(before).verdict();
        self.label = Box::leak(format!("{} {verdict}", self.label).into_boxed_str());
        self.populate()
    }

    /// The folios (page cache, or anonymous after a refault) must be the
    /// requested ones. Page-cache pages evicted between population and this
    /// check (a DAMON pageout scheme does that on some machines) are no
    /// verdict: the files are populated again, three times at most.
    fn check_layout(&mut self) -> anyhow::Result<()> {
        for attempt in 0..3 {
            match self.layout_verdict()? {
                0 => return Ok(()),
                missing if attempt == 2 => bail!(
                    "{missing} file pages were evicted between population and the layout check \
                     three times in a row (memory pressure or a DAMON pageout scheme)"
                ),
                _ => self.populate()?,
            }
        }
        unreachable!()
    }

    /// Check the layout: Ok(0) when it is the requested one, Ok(n) when n
    /// page-cache pages are missing (no verdict), an error otherwise.
    fn layout_verdict(&self) -> anyhow::Result<u64> {
        if layout::verification_available().is_err() {
            return Ok(0);
        }
        for r in &self.regions {
            let l = layout::observe(r.addr(), r.len(), r.spec())?;
            let (want, _) = layout::expected(r.spec(), r.len() as u64);
            if self.memory == Memory::File && l.pages_present < l.pages_total {
                return Ok(l.pages_total - l.pages_present);
            }
            if l.histogram != want && self.memory == Memory::Anon {
                bail!(
                    "the anonymous region refaulted in the reclaim cgroup did not get {} folios: \
                     observed {}",
                    r.spec(),
                    l.summary()
                );
            }
            if l.histogram != want {
                bail!(
                    "the page cache of this {} file did not get {} folios on Linux {}: observed {} \
                     (large folios in the page cache need filesystem support: ext4 from Linux \
                     6.16, xfs from 5.18; set PTELAB_RECLAIM_DIR to a directory on such a \
                     filesystem, or use --folio 4K)",
                    self.label.split(' ').nth(1).unwrap_or("?"),
                    r.spec(),
                    std::fs::read_to_string("/proc/sys/kernel/osrelease")
                        .map_or_else(|_| "?".into(), |r| r.trim().to_string()),
                    l.summary()
                );
            }
        }
        Ok(0)
    }

    /// Bring every file to "written in folio-sized chunks, clean, mapped,
    /// every PTE young, fully resident" (untimed).
    fn populate(&mut self) -> anyhow::Result<()> {
        if self.memory == Memory::Anon {
            return self.refill();
        }
        for attempt in 0..3 {
            self.fill_files()?;
            let mut missing = 0;
            for r in &self.regions {
                missing += (r.len() / PAGE_SIZE) as u64 - resident_pages(r.addr(), r.len())?;
            }
            if missing == 0 {
                self.ready = true;
                return Ok(());
            }
            if attempt == 2 {
                bail!(
                    "{missing} file pages were evicted between population and the reclaim call \
                     three times in a row (memory pressure or a DAMON pageout scheme)"
                );
            }
        }
        unreachable!()
    }

    /// Fill the files' page cache by the refill way (module `refill`) and
    /// map every page young. A reread whose layout is not the requested one
    /// switches to write for good.
    fn fill_files(&mut self) -> anyhow::Result<()> {
        if self.refill == Refill::Reread && !self.written {
            // Written once; every fill, the first included, reads it back,
            // so every call starts from reread folios.
            for (r, b) in self.regions.iter().zip(&self.files) {
                b.write_clean(r.len())?;
            }
            self.written = true;
        }
        for (r, b) in self.regions.iter().zip(&self.files) {
            match self.refill {
                Refill::Write => b.write_clean(r.len())?,
                Refill::Reread => b.reread(r.addr(), r.len(), r.spec())?,
            }
            // Read every page: faults map the folios, and the hardware
            // sets the accessed bit of every PTE.
            read_all(r.addr(), r.len());
        }
        if self.refill == Refill::Reread {
            if let Some(why) = self.reread_mismatch()? {
                eprintln!(
                    "ptelab: reclaim: rereading the file did not give the requested folios \
                     ({why}); the page cache is rewritten before each call instead"
                );
                self.refill = Refill::Write;
                return self.fill_files();
            }
        }
        Ok(())
    }

    /// Why the reread folios are not the requested ones, if they are not
    /// (pages missing count as resident here: `populate` deals with those).
    fn reread_mismatch(&self) -> anyhow::Result<Option<String>> {
        if let Err(e) = layout::verification_available() {
            return Ok(Some(format!("the layout cannot be verified: {e:#}")));
        }
        for r in &self.regions {
            let l = layout::observe(r.addr(), r.len(), r.spec())?;
            let (want, _) = layout::expected(r.spec(), r.len() as u64);
            if l.pages_present == l.pages_total && l.histogram != want {
                return Ok(Some(format!("observed {}", l.summary())));
            }
        }
        Ok(None)
    }

    /// Anon mode: zap the region (freeing its swap slots) and fault it in
    /// again with writes, so it holds fresh folios of the requested size, all
    /// present (untimed).
    fn refill(&mut self) -> anyhow::Result<()> {
        for r in &mut self.regions {
            madvise(r.addr(), r.len(), libc::MADV_DONTNEED, "MADV_DONTNEED")?;
            r.populate()?;
            let (present, _) = pagemap_counts(r.addr(), r.len())?;
            let want = (r.len() / PAGE_SIZE) as u64;
            if present != want {
                bail!("only {present} of {want} anonymous pages are present after the refault");
            }
        }
        self.ready = true;
        Ok(())
    }

    /// Pages still to be reclaimed: resident in the page cache (file), or
    /// not yet replaced by a swap entry (anon).
    fn resident(&self) -> anyhow::Result<u64> {
        if self.memory == Memory::Anon {
            let mut left = 0;
            for r in &self.regions {
                let (_, swapped) = pagemap_counts(r.addr(), r.len())?;
                left += (r.len() / PAGE_SIZE) as u64 - swapped;
            }
            return Ok(left);
        }
        self.regions
            .iter()
            .map(|r| resident_pages(r.addr(), r.len()))
            .sum()
    }

    /// The timed reclaim call(s); returns (ns, calls).
    fn reclaim_once(&mut self) -> anyhow::Result<(u64, u64)> {
        let pages: u64 = self
            .regions
            .iter()
            .map(|r| (r.len() / PAGE_SIZE) as u64)
            .sum();
        let target = pages * PAGE_SIZE as u64 * TARGET_NUM / TARGET_DEN;
        match self.method {
            Method::MadvPageout => {
                let t0 = Instant::now();
                marker::begin(0);
                for r in &self.regions {
                    madvise(r.addr(), r.len(), libc::MADV_PAGEOUT, "MADV_PAGEOUT")?;
                }
                marker::end(0);
                Ok((t0.elapsed().as_nanos() as u64, self.regions.len() as u64))
            }
            Method::MemcgV1Limit => {
                let cg = self.cg.as_ref().context("no cgroup")?;
                let usage = cg.usage()?;
                let limit = usage.saturating_sub(target).max(PAGE_SIZE as u64);
                let text = limit.to_string();
                let f = self.control.as_mut().context("no control file")?;
                let t0 = Instant::now();
                marker::begin(0);
                let r = f.write(text.as_bytes());
                marker::end(0);
                let ns = t0.elapsed().as_nanos() as u64;
                let unlimit = f.write(b"-1");
                if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EINTR)) {
                    // SIGINT/SIGTERM arrived while the kernel reclaimed.
                    return Err(super::runner::Interrupted.into());
                }
                if self.memory == Memory::Anon
                    && matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
                {
                    // The retries ran out before the usage fell under the
                    // limit (swap writeback is slower than dropping clean
                    // page cache); pagemap says how much was reclaimed.
                    unlimit.context("restoring memory.limit_in_bytes to unlimited")?;
                    return Ok((ns, 1));
                }
                r.context("lowering memory.limit_in_bytes (reclaim)")?;
                unlimit.context("restoring memory.limit_in_bytes to unlimited")?;
                Ok((ns, 1))
            }
            Method::MemcgV2Reclaim => {
                let text = target.to_string();
                let f = self.control.as_mut().context("no control file")?;
                let t0 = Instant::now();
                marker::begin(0);
                let r = f.write(text.as_bytes());
                marker::end(0);
                let ns = t0.elapsed().as_nanos() as u64;
                match r {
                    Ok(_) => {}
                    // EAGAIN: less than asked could be reclaimed; mincore
                    // says how much was.
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                        return Err(super::runner::Interrupted.into())
                    }
                    Err(e) => return Err(e).context("writing memory.reclaim"),
                }
                Ok((ns, 1))
            }
        }
    }
}

/// Which LRU memcg reclaim ages folios with, for the phase label: the
/// seed's figures are MGLRU's (docs/kernel.md §8.2, §8.4).
fn lru_name(mglru: Option<(String, bool)>) -> &'static str {
    match mglru {
        Some((_, true)) => "mglru",
        _ => "classic-lru",
    }
}

/// `mmap(MAP_SHARED | MAP_FIXED)` of `file` from `offset` over the region's
/// range.
fn map_file_over(r: &Region, file: &File, offset: u64) -> anyhow::Result<()> {
    r.map_shared_file(file, offset)
        .context("mapping the reclaim file")?;
    // PMD-mapping file THPs would take them off the PTE path; 2M-pte asks for
    // PTE-mapped PMD-sized folios.
    let advice = match r.spec() {
        FolioSpec::Pmd => (libc::MADV_HUGEPAGE, "MADV_HUGEPAGE"),
        _ => (libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE"),
    };
    madvise(r.addr(), r.len(), advice.0, advice.1)
}

impl KernelOp for Reclaim {
    fn phases(&self) -> Vec<Option<&'static str>> {
        vec![Some(self.label)]
    }

    fn calls_per_iteration(&self) -> u64 {
        match self.method {
            Method::MadvPageout => self.regions.len() as u64,
            _ => 1,
        }
    }

    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        let (mut ns, mut calls) = (0, 0);
        for _ in 0..iterations {
            self.phase_setup(0)?;
            let before = self.resident()?;
            let (n, c) = self.reclaim_once()?;
            self.ready = false;
            let after = self.resident()?;
            ns += n;
            calls += c;
            self.reclaimed += before.saturating_sub(after);
            self.calls += c;
        }
        if iterations > 0 {
            // Leave the start state again (untimed; the next iteration would
            // do it anyway), so the runner's verification after sampling
            // sees the layout that was reclaimed, not what reclaim left.
            self.populate()?;
        }
        Ok(vec![BatchTime { ns, calls }])
    }

    fn phase_setup(&mut self, _phase: usize) -> anyhow::Result<()> {
        // The flush-counting pass does not poll for SIGINT and each setup
        // writes a file: stop here.
        if crate::kernel::thp::interrupted().load(std::sync::atomic::Ordering::Relaxed) {
            return Err(super::runner::Interrupted.into());
        }
        if !self.ready {
            self.populate()?;
        }
        Ok(())
    }

    fn phase_call(&mut self, _phase: usize) -> anyhow::Result<u64> {
        let (_, c) = self.reclaim_once()?;
        self.ready = false;
        Ok(c)
    }

    fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Every call refills the whole page cache first (untimed, but under
    /// TCG on x86-64 the 64 calls of other workloads' passes were most of a
    /// `reproduce` guest's refills), and a call's flushes vary little from
    /// call to call (205 to 208 per call at 16M 64K, x86-64 7.1.3): 4 calls
    /// count them.
    fn flush_pass_calls(&self) -> u64 {
        4
    }

    /// Mean pages reclaimed per call, as mincore saw them leave.
    fn pages_per_call(&self) -> u64 {
        if self.calls == 0 {
            return 1;
        }
        (self.reclaimed / self.calls).max(1)
    }
}

impl Drop for Reclaim {
    fn drop(&mut self) {
        // Unmap and close the files first (their page cache is freed and
        // uncharged), then leave and remove the cgroup.
        self.regions.clear();
        self.files.clear();
        self.control = None;
        if let Some(mut cg) = self.cg.take() {
            if let Err(e) = cg.remove() {
                eprintln!("ptelab: warning: reclaim cleanup: {e:#}");
            }
        }
        // Last: the mappings holding swap entries are gone, swapoff is quick.
        drop(self.swap.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_choice() {
        let v1 = Memcg::V1("/sys/fs/cgroup/memory".into());
        let v2 = Memcg::V2("/sys/fs/cgroup".into());
        assert_eq!(
            choose(Some(&v2), true, None).unwrap(),
            Method::MemcgV2Reclaim
        );
        assert_eq!(choose(Some(&v1), true, None).unwrap(), Method::MemcgV1Limit);
        assert_eq!(choose(Some(&v1), false, None).unwrap(), Method::MadvPageout);
        assert_eq!(choose(None, true, None).unwrap(), Method::MadvPageout);
        assert!(choose(Some(&v1), true, Some(Method::MemcgV2Reclaim)).is_err());
        assert_eq!(
            choose(Some(&v1), true, Some(Method::MadvPageout)).unwrap(),
            Method::MadvPageout
        );
    }

    #[test]
    fn the_label_names_the_lru() {
        assert_eq!(lru_name(Some(("0x0007".into(), true))), "mglru");
        assert_eq!(lru_name(Some(("0x0000".into(), false))), "classic-lru");
        assert_eq!(lru_name(None), "classic-lru");
    }

    #[test]
    fn method_names_round_trip() {
        for m in [
            Method::MemcgV2Reclaim,
            Method::MemcgV1Limit,
            Method::MadvPageout,
        ] {
            assert_eq!(Method::parse(m.name()).unwrap(), m);
        }
        assert!(Method::parse("drop-caches").is_err());
    }

    /// The temporary directory when it is on a disk filesystem (whose page
    /// cache can be dropped), else `None`, saying why the test skips.
    pub(super) fn disk_temp_dir() -> Option<std::path::PathBuf> {
        let dir = std::env::temp_dir();
        if matches!(
            fs_name(statfs_magic(&dir).unwrap()),
            "tmpfs" | "ramfs" | "unknown-fs"
        ) {
            eprintln!("SKIPPED: {} is not a disk filesystem", dir.display());
            return None;
        }
        Some(dir)
    }

    #[test]
    fn mincore_sees_a_file_leave_with_pageout() {
        let Some(dir) = disk_temp_dir() else {
            return;
        };
        let r = Region::map(256 << 10, FolioSpec::Base, false).unwrap();
        let b = Backing {
            file: temp_file(&dir).unwrap(),
            chunk: PAGE_SIZE,
            pad: 0,
        };
        b.file.set_len(r.len() as u64).unwrap();
        map_file_over(&r, &b.file, 0).unwrap();
        b.write_clean(r.len()).unwrap();
        read_all(r.addr(), r.len());
        assert_eq!(resident_pages(r.addr(), r.len()).unwrap(), 64);
        madvise(r.addr(), r.len(), libc::MADV_PAGEOUT, "MADV_PAGEOUT").unwrap();
        assert!(resident_pages(r.addr(), r.len()).unwrap() < 64);
    }
}
