//! Refilling a reclaim file's page cache before each call (untimed), two
//! ways that end in the same state: clean page-cache folios of the requested
//! size, no shadow entries, every page mapped young.
//!
//! - **write**: truncate (which drops the folios and the shadow entries the
//!   last reclaim left) and rewrite in folio-sized chunks, then fdatasync.
//!   The page cache allocates each folio at the size of the write. Under TCG
//!   on x86-64 this is slow: the kernel's copy is `rep movsb`, which TCG
//!   executes one byte at a time.
//! - **reread**: the file stays on disk as first written. The mapping is
//!   zapped and the page cache dropped with `POSIX_FADV_DONTNEED`, whose
//!   invalidation also removes the shadow entries (so the refaults are not
//!   workingset hits), then the file is read back: the disk's DMA fills the
//!   folios, no guest copy. Folio sizes on a read come from readahead:
//!   - 4K: `readahead(2)` allocates at the mapping's minimum order, 0;
//!   - 2M and 2M-pte: a fault in a `MADV_HUGEPAGE` mapping reads a whole
//!     PMD-sized folio;
//!   - 16K..1M: faults in order through a `MADV_SEQUENTIAL` mapping, whose
//!     window is the block device's `read_ahead_kb`, set to the folio size
//!     for the read and put back right after. Each window raises the folio
//!     order by two until the window's size caps it, so the region sits
//!     [`pad_for`] bytes into the file, past that ramp, and the pad's folios
//!     are dropped after the read.
//!
//!   The layout is verified after every reread; a mismatch switches the
//!   workload to write for good, with a notice.
//!
//! Write is the default. Reread (`PTELAB_RECLAIM_REFILL=reread`, passed on
//! to guests by `ptelab vm`) is not the same start state: folios read back
//! were never dirty nor marked accessed by a write, and reclaiming them
//! takes about a quarter fewer instructions per call (docs/guests.md), so
//! it is a second experiment, not a faster way to the same figure.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::kernel::region::{madvise, PAGE_SIZE};
use crate::workload::FolioSpec;

/// How the page cache is refilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    Write,
    Reread,
}

impl Refill {
    /// `PTELAB_RECLAIM_REFILL` (`write` or `reread`), else `default`.
    pub fn from_env(default: Refill) -> anyhow::Result<Refill> {
        match std::env::var("PTELAB_RECLAIM_REFILL").ok().as_deref() {
            None | Some("") => Ok(default),
            Some("write") => Ok(Refill::Write),
            Some("reread") => Ok(Refill::Reread),
            Some(other) => bail!("PTELAB_RECLAIM_REFILL={other:?}: expected write or reread"),
        }
    }
}

/// Bytes of file before the region's data, so that a sequential read has
/// ramped up to the folio size by the time it reaches the region: the first
/// window reads order-2 folios and each window adds two orders, so
/// `order/2 + 1` windows of one folio each, and 256K at least.
pub fn pad_for(spec: FolioSpec) -> usize {
    match spec {
        FolioSpec::Mthp(bytes) => (bytes as usize * (spec.order() as usize / 2 + 1)).max(256 << 10),
        FolioSpec::Base | FolioSpec::Pmd | FolioSpec::PmdPte => 0,
    }
}

/// One file mapped over one of the workload's regions, at `pad` bytes.
pub struct Backing {
    pub file: File,
    /// Bytes per write (the folio size, or a page when it does not divide).
    pub chunk: usize,
    /// Where the region's data starts in the file.
    pub pad: usize,
}

impl Backing {
    /// Truncate (dropping page cache and shadow entries), rewrite the
    /// region's part in chunks, fdatasync.
    pub fn write_clean(&self, len: usize) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .set_len(0)
            .context("truncating the reclaim file")?;
        self.file
            .set_len((self.pad + len) as u64)
            .context("sizing the reclaim file")?;
        let buf = vec![0x5Au8; self.chunk];
        let mut off = 0;
        while off < len {
            self.file
                .write_all_at(&buf, (self.pad + off) as u64)
                .context("writing the reclaim file")?;
            off += self.chunk;
        }
        self.file
            .sync_data()
            .context("fdatasync of the reclaim file")
    }

    /// Drop the file's page cache and shadow entries (the region `[addr,
    /// addr+len)` is zapped first: invalidation skips mapped folios), then
    /// read the region's part back in folios of `spec`.
    pub fn reread(&self, addr: *mut u8, len: usize, spec: FolioSpec) -> anyhow::Result<()> {
        madvise(addr, len, libc::MADV_DONTNEED, "MADV_DONTNEED")?;
        self.fadvise(0, 0, libc::POSIX_FADV_DONTNEED)?;
        match spec {
            FolioSpec::Base => {
                // SAFETY: readahead(2) on our own descriptor.
                if unsafe { libc::readahead(self.file.as_raw_fd(), self.pad as i64, len) } != 0 {
                    return Err(std::io::Error::last_os_error()).context("readahead(2)");
                }
            }
            FolioSpec::Pmd | FolioSpec::PmdPte => {
                fault_read(&self.file, self.pad + len, libc::MADV_HUGEPAGE)?;
            }
            _ => {
                let knob = ReadAheadKnob::for_file(&self.file)?;
                knob.set(spec.folio_bytes() >> 10)?;
                // The file's window is copied from the device at open and
                // by POSIX_FADV_NORMAL.
                let read = self
                    .fadvise(0, 0, libc::POSIX_FADV_NORMAL)
                    .and_then(|()| fault_read(&self.file, self.pad + len, libc::MADV_SEQUENTIAL));
                let restored = knob.restore();
                self.fadvise(0, 0, libc::POSIX_FADV_NORMAL)?;
                read?;
                restored?;
                self.fadvise(0, self.pad, libc::POSIX_FADV_DONTNEED)?;
            }
        }
        Ok(())
    }

    fn fadvise(&self, off: usize, len: usize, advice: libc::c_int) -> anyhow::Result<()> {
        // SAFETY: posix_fadvise on our own descriptor.
        let e = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                advice,
            )
        };
        if e != 0 {
            return Err(std::io::Error::from_raw_os_error(e))
                .with_context(|| format!("posix_fadvise(advice {advice})"));
        }
        Ok(())
    }
}

/// Fault in `[0, len)` of `file` page by page, in order, through a
/// temporary read-only shared mapping with `advice`.
fn fault_read(file: &File, len: usize, advice: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: a new mapping of our own file, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context("mmap of the reclaim file to read it");
    }
    let p = p.cast::<u8>();
    let r = madvise(p, len, advice, "madvise of the read mapping").map(|()| read_all(p, len));
    // SAFETY: the mapping made above, no reference into it is left.
    unsafe { libc::munmap(p.cast(), len) };
    r
}

/// Read one byte of every page.
pub fn read_all(addr: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: the range is our readable mapping of a file at least len long.
        unsafe { std::ptr::read_volatile(addr.add(off)) };
        off += PAGE_SIZE;
    }
}

/// A block device's `queue/read_ahead_kb`, with its value when found.
struct ReadAheadKnob {
    path: PathBuf,
    original: String,
}

impl ReadAheadKnob {
    /// The knob of the disk holding `file` (a partition's parent).
    fn for_file(file: &File) -> anyhow::Result<ReadAheadKnob> {
        use std::os::unix::fs::MetadataExt;
        let dev = file.metadata()?.dev();
        let sys = PathBuf::from(format!(
            "/sys/dev/block/{}:{}",
            libc::major(dev),
            libc::minor(dev)
        ));
        let mut dir = std::fs::canonicalize(&sys).with_context(|| {
            format!(
                "the reclaim file is not on a block device ({} is missing)",
                sys.display()
            )
        })?;
        if dir.join("partition").exists() {
            dir.pop();
        }
        let path = dir.join("queue/read_ahead_kb");
        let original = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_string();
        Ok(ReadAheadKnob { path, original })
    }

    fn set(&self, kb: u64) -> anyhow::Result<()> {
        std::fs::write(&self.path, kb.to_string())
            .with_context(|| format!("writing {} to {}", kb, self.path.display()))
    }

    fn restore(&self) -> anyhow::Result<()> {
        std::fs::write(&self.path, &self.original)
            .with_context(|| format!("restoring {} to {}", self.path.display(), self.original))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::disk_temp_dir;
    use super::super::{map_file_over, resident_pages, temp_file};
    use super::*;
    use crate::kernel::region::Region;
    use crate::kernel::{layout, procfs};

    #[test]
    fn the_pad_covers_the_readahead_ramp() {
        assert_eq!(pad_for(FolioSpec::Base), 0);
        assert_eq!(pad_for(FolioSpec::Pmd), 0);
        assert_eq!(pad_for(FolioSpec::PmdPte), 0);
        assert_eq!(pad_for(FolioSpec::Mthp(16 << 10)), 256 << 10);
        assert_eq!(pad_for(FolioSpec::Mthp(64 << 10)), 256 << 10);
        // Order 8: windows of order 2, 4, 6 and 8, then the region.
        assert_eq!(pad_for(FolioSpec::Mthp(1 << 20)), 5 << 20);
    }

    #[test]
    fn a_reread_refills_the_page_cache_with_the_requested_folios() {
        let Some(dir) = disk_temp_dir() else {
            return;
        };
        for spec in [FolioSpec::Base, FolioSpec::Mthp(64 << 10)] {
            if spec != FolioSpec::Base && !procfs::is_root() {
                eprintln!("SKIPPED {spec}: setting the device's read_ahead_kb needs root");
                continue;
            }
            let r = Region::map(1 << 20, spec, false).unwrap();
            let b = Backing {
                file: temp_file(&dir).unwrap(),
                chunk: spec.folio_bytes() as usize,
                pad: pad_for(spec),
            };
            b.file.set_len((b.pad + r.len()) as u64).unwrap();
            map_file_over(&r, &b.file, b.pad as u64).unwrap();
            b.write_clean(r.len()).unwrap();
            let knob = (spec != FolioSpec::Base).then(|| ReadAheadKnob::for_file(&b.file).unwrap());
            b.reread(r.addr(), r.len(), spec).unwrap();
            read_all(r.addr(), r.len());
            assert_eq!(resident_pages(r.addr(), r.len()).unwrap(), 256, "{spec}");
            // SAFETY: the region maps the file, resident and readable.
            assert_eq!(
                unsafe { std::ptr::read_volatile(r.addr().add(3 * PAGE_SIZE + 5)) },
                0x5A
            );
            if let Some(k) = knob {
                let now = std::fs::read_to_string(&k.path).unwrap();
                assert_eq!(
                    now.trim(),
                    k.original,
                    "{} was not put back",
                    k.path.display()
                );
            }
            if layout::verification_available().is_ok() {
                let l = layout::observe(r.addr(), r.len(), spec).unwrap();
                let (want, _) = layout::expected(spec, r.len() as u64);
                assert_eq!(l.histogram, want, "{spec}: observed {}", l.summary());
            }
        }
    }
}
