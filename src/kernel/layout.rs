//! Layout verification from /proc/self/pagemap + /proc/kpageflags (+ smaps for
//! PMD mappings): the observed folio-size histogram of a region.
//!
//! CONTRACT (implemented by the layout helper; keep these signatures):
//!
//! ```ignore
//! /// Whether pagemap PFNs and kpageflags are readable (root, not restricted).
//! pub fn verification_available() -> Result<(), String>;
//! /// Observe [addr, addr+len) and judge it against `spec` (fills `matches`, `mismatch`).
//! pub fn observe(addr: *const u8, len: usize, spec: FolioSpec) -> anyhow::Result<Layout>;
//! ```
