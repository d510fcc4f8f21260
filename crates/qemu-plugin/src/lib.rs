//! ptelab's QEMU TCG plugin, one library for every QEMU with plugins from
//! 4.2 to 11.x (API levels 1 to 7; Debian 12 ships 7.2, Debian 13 10.0,
//! sid 11.1). Loaded with `-plugin libptelab_qemu_plugin.so,out=FILE`.
//!
//! QEMU reads the level a plugin declares before installing it, so the
//! level is chosen when the library is loaded ([`declare_level`]: the
//! level ptelab names in `PTELAB_QEMU_PLUGIN_API`, else one guessed from
//! what QEMU exports), and every call is bound at install by the newest
//! level QEMU speaks (`ptelab_counts::api::Abi`), since a call's shape
//! follows the QEMU, not the level declared.
//!
//! It watches every guest translation block passively (a plugin changes
//! nothing the guest executes, so icount figures are unchanged) and counts
//! only inside ptelab's sample windows, which the measurement loop marks
//! with marker instructions (`ptelab_counts::Marker`):
//!
//! - `Reset` forgets what was counted (warm-up, calibration);
//! - `Begin(p)` / `End(p)` bracket a timed section of phase `p`;
//! - `Commit` writes what each phase counted since the reset as one window
//!   (`ptelab_counts::record`), numbered by the commits' running count;
//! - `Step` (the guest's init starting its next command) numbers commits
//!   from 0 again and writes the line that separates the commands' windows.
//!
//! Per window and phase: kernel and user instructions, executions and
//! instructions of every kernel translation block (ptelab turns blocks into
//! functions with the guest's symbols), and TLB-maintenance instructions by
//! kind. QEMU calls the plugin from the vCPU thread; guests run with one
//! vCPU, so the hot path uses plain relaxed loads and stores.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use ptelab_counts::api::{self, Abi, InsnData};
use ptelab_counts::record::{self, Window};
use ptelab_counts::{classify, is_kernel_address, Insn, Marker, Target, Tlb, MAX_PHASES};

// ---- The plugin API (qemu-plugin.h), the calls used. ----

type PluginId = u64;
#[repr(C)]
struct QemuPluginTb {
    _opaque: [u8; 0],
}
#[repr(C)]
struct QemuPluginInsn {
    _opaque: [u8; 0],
}

#[repr(C)]
struct VersionRange {
    min: c_int,
    cur: c_int,
}

/// `qemu_info_t` (its leading fields, the same at every level: the rest is
/// not read).
#[repr(C)]
pub struct QemuInfo {
    target_name: *const c_char,
    version: VersionRange,
    system_emulation: bool,
}

/// `QEMU_PLUGIN_CB_NO_REGS`.
const CB_NO_REGS: c_int = 0;

type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);

type TbExecCb = unsafe extern "C" fn(*mut QemuPluginTb, VcpuUdataCb, c_int, *mut c_void);
type InsnExecCb = unsafe extern "C" fn(*mut QemuPluginInsn, VcpuUdataCb, c_int, *mut c_void);
type TbNInsns = unsafe extern "C" fn(*const QemuPluginTb) -> usize;
type TbVaddr = unsafe extern "C" fn(*const QemuPluginTb) -> u64;
type TbGetInsn = unsafe extern "C" fn(*const QemuPluginTb, usize) -> *mut QemuPluginInsn;
type InsnSize = unsafe extern "C" fn(*const QemuPluginInsn) -> usize;
type InsnVaddr = unsafe extern "C" fn(*const QemuPluginInsn) -> u64;

/// The calls whose shape is the same at every level.
struct Calls {
    tb_exec_cb: TbExecCb,
    insn_exec_cb: InsnExecCb,
    tb_n_insns: TbNInsns,
    tb_vaddr: TbVaddr,
    tb_get_insn: TbGetInsn,
    insn_size: InsnSize,
    insn_vaddr: InsnVaddr,
    /// `qemu_plugin_insn_data`, its shape in `insn_data_abi`.
    insn_data: *mut c_void,
    insn_data_abi: InsnData,
}

// SAFETY: function addresses in QEMU, valid for the life of the process.
unsafe impl Send for Calls {}
unsafe impl Sync for Calls {}

static CALLS: OnceLock<Calls> = OnceLock::new();

/// A call QEMU exports, by name (`name` NUL-terminated).
fn lookup(name: &str) -> Option<*mut c_void> {
    debug_assert!(name.ends_with('\0'));
    // SAFETY: `name` is a NUL-terminated string; RTLD_DEFAULT searches the
    // QEMU executable, which exports the plugin API.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr() as *const c_char) };
    (!p.is_null()).then_some(p)
}

/// A call QEMU must export, or why not.
fn require(name: &str) -> Result<*mut c_void, String> {
    lookup(name).ok_or_else(|| format!("this QEMU does not export {}", name.trim_end_matches('\0')))
}

/// A call QEMU must export (`name` NUL-terminated), as the function type
/// `F`.
///
/// # Safety
/// `F` is the C signature of that call in this QEMU.
unsafe fn bind<F: Copy>(name: &str) -> Result<F, String> {
    let p = require(name)?;
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
}

impl Calls {
    fn bind(abi: Abi) -> Result<Calls, String> {
        // SAFETY: each type is that call's C signature at every level.
        unsafe {
            Ok(Calls {
                tb_exec_cb: bind::<TbExecCb>("qemu_plugin_register_vcpu_tb_exec_cb\0")?,
                insn_exec_cb: bind::<InsnExecCb>("qemu_plugin_register_vcpu_insn_exec_cb\0")?,
                tb_n_insns: bind::<TbNInsns>("qemu_plugin_tb_n_insns\0")?,
                tb_vaddr: bind::<TbVaddr>("qemu_plugin_tb_vaddr\0")?,
                tb_get_insn: bind::<TbGetInsn>("qemu_plugin_tb_get_insn\0")?,
                insn_size: bind::<InsnSize>("qemu_plugin_insn_size\0")?,
                insn_vaddr: bind::<InsnVaddr>("qemu_plugin_insn_vaddr\0")?,
                insn_data: require("qemu_plugin_insn_data\0")?,
                insn_data_abi: abi.insn_data,
            })
        }
    }

    /// An instruction's bytes, copied into `buf`.
    ///
    /// # Safety
    /// `insn` is an instruction of the block being translated.
    unsafe fn insn_bytes<'b>(&self, insn: *mut QemuPluginInsn, buf: &'b mut [u8; 16]) -> &'b [u8] {
        type Pointer = unsafe extern "C" fn(*const QemuPluginInsn) -> *const c_void;
        type Copy = unsafe extern "C" fn(*const QemuPluginInsn, *mut c_void, usize) -> usize;
        let size = (self.insn_size)(insn).min(buf.len());
        // The pointer form returns `insn_size` valid bytes, or null.
        let from = |p: *const c_void, buf: &mut [u8; 16]| {
            if p.is_null() {
                return 0;
            }
            buf[..size].copy_from_slice(std::slice::from_raw_parts(p as *const u8, size));
            size
        };
        let copy = std::mem::transmute::<*mut c_void, Copy>(self.insn_data);
        let n = match self.insn_data_abi {
            InsnData::Pointer => from(
                std::mem::transmute::<*mut c_void, Pointer>(self.insn_data)(insn),
                buf,
            ),
            InsnData::Copy => copy(insn, buf.as_mut_ptr() as *mut c_void, buf.len()),
            // Called the copying way, the pointer form ignores the two
            // extra arguments (they travel in registers on x86-64 and
            // arm64, the only hosts QEMU plugins run on here) and returns
            // an address, never a length of at most 16.
            InsnData::Either => match copy(insn, buf.as_mut_ptr() as *mut c_void, buf.len()) {
                r @ 0..=16 => r,
                p => from(p as *const c_void, buf),
            },
        };
        &buf[..n.min(size)]
    }
}

/// The level this plugin declares; QEMU reads it after loading the library
/// and before installing the plugin, and refuses a level outside its range.
/// An `AtomicI32` is laid out as the `int` QEMU reads.
#[no_mangle]
pub static qemu_plugin_version: AtomicI32 = AtomicI32::new(1);

/// Runs when QEMU loads the library (an ELF constructor), before QEMU
/// reads [`qemu_plugin_version`].
#[used]
#[link_section = ".init_array"]
static DECLARE_LEVEL: extern "C" fn() = declare_level;

extern "C" fn declare_level() {
    let level = std::env::var(api::ENV)
        .ok()
        .and_then(|v| api::parse_level(&v))
        .unwrap_or_else(|| api::level_from_exports(|name| lookup(&format!("{name}\0")).is_some()));
    qemu_plugin_version.store(level, Relaxed);
}

// ---- State. ----

const PHASES: usize = MAX_PHASES as usize;

/// A translation block, allocated at translation and never freed (QEMU may
/// drop and translate a block again; the old record stays valid for the
/// callbacks already registered with it).
struct Block {
    vaddr: u64,
    /// The instructions that execute in it: those QEMU listed, less one
    /// found backed out ([`backed_out`]).
    insns: AtomicU64,
    kernel: bool,
    /// Executions per phase since the last reset.
    hits: [AtomicU64; PHASES],
    /// On the dirty list.
    dirty: AtomicU8,
}

/// Per phase: the instructions and TLB operations of the open window.
struct Totals {
    kernel: [AtomicU64; PHASES],
    user: [AtomicU64; PHASES],
    tlb: [[AtomicU64; Tlb::ALL.len()]; PHASES],
}

static TOTALS: Totals = Totals {
    kernel: [const { AtomicU64::new(0) }; PHASES],
    user: [const { AtomicU64::new(0) }; PHASES],
    tlb: [const { [const { AtomicU64::new(0) }; Tlb::ALL.len()] }; PHASES],
};
/// Bit p: inside a timed section of phase p.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
/// Bit p: phase p was timed since the last reset.
static BEGUN: AtomicU8 = AtomicU8::new(0);
/// Commits so far: the next window's number.
static SEQ: AtomicU64 = AtomicU64::new(0);
static TARGET: OnceLock<Target> = OnceLock::new();
/// Blocks executed in the open window (addresses of leaked `Block`s).
static DIRTY: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static OUT: Mutex<Option<BufWriter<File>>> = Mutex::new(None);

fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed) + n, Relaxed);
}

extern "C" fn block_exec(_vcpu: c_uint, udata: *mut c_void) {
    let active = ACTIVE.load(Relaxed);
    if active == 0 {
        return;
    }
    let raw = udata as usize;
    // SAFETY: a block's userdata is a leaked `Block`.
    let b = unsafe { &*(raw as *const Block) };
    let insns = b.insns.load(Relaxed);
    for p in 0..PHASES {
        if active & (1 << p) == 0 {
            continue;
        }
        if !b.kernel {
            bump(&TOTALS.user[p], insns);
            continue;
        }
        bump(&TOTALS.kernel[p], insns);
        bump(&b.hits[p], 1);
        if b.dirty.load(Relaxed) == 0 {
            b.dirty.store(1, Relaxed);
            DIRTY.lock().unwrap_or_else(|e| e.into_inner()).push(raw);
        }
    }
}

/// Userdata of a counted instruction: 0x100 | marker code, 0x200 | TLB kind.
const MARKER_TAG: usize = 0x100;
const TLB_TAG: usize = 0x200;

extern "C" fn insn_exec(_vcpu: c_uint, udata: *mut c_void) {
    let raw = udata as usize;
    if raw & TLB_TAG != 0 {
        let active = ACTIVE.load(Relaxed);
        for p in 0..PHASES {
            if active & (1 << p) != 0 {
                bump(&TOTALS.tlb[p][raw & 0xFF], 1);
            }
        }
        return;
    }
    match Marker::from_code((raw & 0xFF) as u8) {
        Some(Marker::Reset) => reset(),
        Some(Marker::Begin(p)) => {
            ACTIVE.store(ACTIVE.load(Relaxed) | 1 << p, Relaxed);
            BEGUN.store(BEGUN.load(Relaxed) | 1 << p, Relaxed);
        }
        Some(Marker::End(p)) => ACTIVE.store(ACTIVE.load(Relaxed) & !(1 << p), Relaxed),
        Some(Marker::Commit) => commit(),
        Some(Marker::Step) => step(),
        None => {}
    }
}

/// Forget the open window.
fn reset() {
    ACTIVE.store(0, Relaxed);
    BEGUN.store(0, Relaxed);
    let mut dirty = DIRTY.lock().unwrap_or_else(|e| e.into_inner());
    for &raw in dirty.iter() {
        // SAFETY: the dirty list holds leaked `Block`s only.
        let b = unsafe { &*(raw as *const Block) };
        b.hits.iter().for_each(|h| h.store(0, Relaxed));
        b.dirty.store(0, Relaxed);
    }
    dirty.clear();
    for p in 0..PHASES {
        TOTALS.kernel[p].store(0, Relaxed);
        TOTALS.user[p].store(0, Relaxed);
        TOTALS.tlb[p].iter().for_each(|c| c.store(0, Relaxed));
    }
}

/// Write every phase timed in the open window, then reset.
fn commit() {
    let seq = SEQ.load(Relaxed);
    SEQ.store(seq + 1, Relaxed);
    let begun = BEGUN.load(Relaxed);
    let mut text = String::new();
    {
        let dirty = DIRTY.lock().unwrap_or_else(|e| e.into_inner());
        for p in 0..PHASES {
            if begun & (1 << p) == 0 {
                continue;
            }
            // One line per address, however many translations it had.
            let mut by_addr: HashMap<u64, (u64, u64)> = HashMap::new();
            for &raw in dirty.iter() {
                // SAFETY: as in `reset`.
                let b = unsafe { &*(raw as *const Block) };
                let n = b.hits[p].load(Relaxed);
                if n > 0 {
                    let e = by_addr.entry(b.vaddr).or_default();
                    e.0 += n;
                    e.1 += n * b.insns.load(Relaxed);
                }
            }
            let mut blocks: Vec<(u64, u64, u64)> =
                by_addr.into_iter().map(|(a, (n, i))| (a, n, i)).collect();
            blocks.sort_unstable();
            let mut tlb = [0u64; Tlb::ALL.len()];
            for (t, c) in tlb.iter_mut().zip(&TOTALS.tlb[p]) {
                *t = c.load(Relaxed);
            }
            Window {
                step: 0,
                seq,
                phase: p as u8,
                kernel_insns: TOTALS.kernel[p].load(Relaxed),
                user_insns: TOTALS.user[p].load(Relaxed),
                tlb,
                blocks,
            }
            .write(&mut text);
        }
    }
    if let Some(out) = OUT.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let _ = out.write_all(text.as_bytes());
    }
    reset();
}

/// The guest's next command begins: forget the open window, number commits
/// from 0 again (as that command does), and mark where its windows begin.
fn step() {
    reset();
    SEQ.store(0, Relaxed);
    if let Some(out) = OUT.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let _ = out.write_all(ptelab_counts::record::STEP_LINE.as_bytes());
    }
}

/// Translation callback, levels 1 to 6: `(id, tb)`.
extern "C" fn translate_with_id(_id: PluginId, tb: *mut QemuPluginTb) {
    translate(tb)
}

/// Translation callback, level 7 on: `(tb, udata)`.
extern "C" fn translate_with_udata(tb: *mut QemuPluginTb, _udata: *mut c_void) {
    translate(tb)
}

/// Whether this QEMU may list a backed-out instruction ([`backed_out`]):
/// every QEMU from 7.2 on (where none is listed nothing changes). ptelab
/// names the QEMU's version in the `qemu=` argument; without it, 7.2 or
/// later is assumed.
static BACKED_OUT_LISTED: AtomicBool = AtomicBool::new(true);

/// x86 instructions QEMU listed in a block but did not execute there.
///
/// From QEMU 7.2 on, the x86 translator backs out an instruction that
/// would cross into the next page unless it starts the block: the block
/// ends before it and the next block starts with it. QEMU 7.2 (before
/// 9.0's rewrite of plugin code generation) still lists it in the block it
/// hands plugins, with the bytes read before the page boundary, so it would
/// count twice. Measured on Debian 6.17.8 `prot-transition` 400K 4K:
/// `change_protection` counted 323 instructions per call under 7.2 and 322
/// under 10.0 and 11.1 for the same icount figure (41,032 per call); the
/// block at 0xffffffff8165efbc listed 8 instructions under 7.2, the last
/// the first 2 bytes (`4c 89`) of a 3-byte move ending at the page
/// boundary, and 7 under 10.0.
///
/// A listed last instruction that ends exactly at a page boundary is either
/// backed out or a complete instruction that happens to end there; the
/// block that starts at its address tells which: it lists the whole
/// instruction, longer, when it was backed out. That block is translated
/// right after the first run of the one before it, so a backed-out
/// instruction is taken off its block before any window counts it twice
/// but in that first run.
mod backed_out {
    use super::*;

    /// Last instructions ending at a page boundary not yet decided: by
    /// address, their listed size and the blocks listing them.
    static PENDING: Mutex<Vec<(u64, usize, Vec<usize>)>> = Mutex::new(Vec::new());
    /// Instructions found backed out: address and listed size.
    static FOUND: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());

    fn take_one(b: usize) {
        // SAFETY: pending entries hold leaked `Block`s.
        let b = unsafe { &*(b as *const Block) };
        b.insns
            .store(b.insns.load(Relaxed).saturating_sub(1), Relaxed);
    }

    /// `block` lists as its last instruction one of `size` bytes at `vaddr`.
    pub(super) fn last_listed(block: &Block, vaddr: u64, size: usize) {
        if !(vaddr + size as u64).is_multiple_of(4096) {
            return;
        }
        let raw = block as *const Block as usize;
        if FOUND
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(vaddr, size))
        {
            take_one(raw);
            return;
        }
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        match pending
            .iter_mut()
            .find(|(v, s, _)| (*v, *s) == (vaddr, size))
        {
            Some((_, _, blocks)) => blocks.push(raw),
            None => pending.push((vaddr, size, vec![raw])),
        }
    }

    /// A block starts at `vaddr` with an instruction of `size` bytes.
    pub(super) fn next_block(vaddr: u64, size: usize) {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = pending.iter().position(|(v, _, _)| *v == vaddr) else {
            return;
        };
        let (v, listed, blocks) = pending.swap_remove(i);
        if size > listed {
            blocks.into_iter().for_each(take_one);
            FOUND
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((v, listed));
        }
    }
}

fn translate(tb: *mut QemuPluginTb) {
    let (Some(&target), Some(q)) = (TARGET.get(), CALLS.get()) else {
        return;
    };
    // SAFETY: QEMU hands a valid block for the duration of this callback.
    unsafe {
        let n = (q.tb_n_insns)(tb);
        let vaddr = (q.tb_vaddr)(tb);
        if target == Target::X86_64 && BACKED_OUT_LISTED.load(Relaxed) {
            let first = (q.tb_get_insn)(tb, 0);
            backed_out::next_block(vaddr, (q.insn_size)(first));
        }
        let block = Box::leak(Box::new(Block {
            vaddr,
            insns: AtomicU64::new(n as u64),
            kernel: is_kernel_address(vaddr),
            hits: [const { AtomicU64::new(0) }; PHASES],
            dirty: AtomicU8::new(0),
        }));
        if target == Target::X86_64 && BACKED_OUT_LISTED.load(Relaxed) && n >= 2 {
            let last = (q.tb_get_insn)(tb, n - 1);
            backed_out::last_listed(block, (q.insn_vaddr)(last), (q.insn_size)(last));
        }
        let udata = block as *mut Block as *mut c_void;
        (q.tb_exec_cb)(tb, block_exec, CB_NO_REGS, udata);
        let mut buf = [0u8; 16];
        for i in 0..n {
            let insn = (q.tb_get_insn)(tb, i);
            let bytes = q.insn_bytes(insn, &mut buf);
            if bytes.is_empty() {
                continue;
            }
            let tag = match classify(target, bytes) {
                Some(Insn::Marker(m)) => MARKER_TAG | m.code() as usize,
                Some(Insn::Tlb(k)) => TLB_TAG | k.index(),
                None => continue,
            };
            (q.insn_exec_cb)(insn, insn_exec, CB_NO_REGS, tag as *mut c_void);
        }
    }
}

fn flush_output() {
    if let Some(mut out) = OUT.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = out.flush();
    }
}

/// At-exit callback, levels 1 to 6: `(id, udata)`.
extern "C" fn at_exit_with_id(_id: PluginId, _udata: *mut c_void) {
    flush_output()
}

/// At-exit callback, level 7 on: `(udata)`.
extern "C" fn at_exit_with_udata(_udata: *mut c_void) {
    flush_output()
}

/// Register the translation and at-exit callbacks in the shape of `abi`.
///
/// # Safety
/// `id` is the id QEMU gave `qemu_plugin_install`.
unsafe fn register_callbacks(id: PluginId, abi: Abi) -> Result<(), String> {
    let tb_trans = require("qemu_plugin_register_vcpu_tb_trans_cb\0")?;
    let atexit = require("qemu_plugin_register_atexit_cb\0")?;
    type TransWithId = extern "C" fn(PluginId, *mut QemuPluginTb);
    type TransWithUdata = extern "C" fn(*mut QemuPluginTb, *mut c_void);
    type ExitWithId = extern "C" fn(PluginId, *mut c_void);
    type ExitWithUdata = extern "C" fn(*mut c_void);
    let none = std::ptr::null_mut::<c_void>();
    // SAFETY: the registration calls' C signatures at `abi`'s level.
    if abi.callbacks_with_udata {
        std::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(PluginId, TransWithUdata, *mut c_void),
        >(tb_trans)(id, translate_with_udata, none);
        std::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(PluginId, ExitWithUdata, *mut c_void),
        >(atexit)(id, at_exit_with_udata, none);
    } else {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(PluginId, TransWithId)>(tb_trans)(
            id,
            translate_with_id,
        );
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(PluginId, ExitWithId, *mut c_void)>(
            atexit,
        )(id, at_exit_with_id, none);
    }
    Ok(())
}

/// Called by QEMU when it loads the plugin. Arguments: `out=FILE` names the
/// output; `qemu=MAJOR.MINOR` the QEMU's version ([`BACKED_OUT_LISTED`]);
/// `probe=on` only checks that this QEMU loads the plugin, prints
/// `api::PROBE_LINE` with the levels, and declines (QEMU then exits), so that
/// ptelab learns whether a QEMU can count before it boots a guest.
///
/// # Safety
/// QEMU passes a valid `info` and `argc` NUL-terminated strings in `argv`.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let fail = |why: String| {
        eprintln!("ptelab plugin: {why}");
        -1
    };
    let info = &*info;
    let declared = qemu_plugin_version.load(Relaxed);
    let abi = Abi::of(info.version.cur);
    if !info.system_emulation {
        return fail("only system emulation (qemu-system-*) is supported".into());
    }
    let name = CStr::from_ptr(info.target_name).to_string_lossy();
    let Some(target) = Target::from_qemu(&name) else {
        return fail(format!("target {name} is not x86_64 or aarch64"));
    };
    let calls = match Calls::bind(abi) {
        Ok(c) => c,
        Err(why) => return fail(why),
    };
    let mut out = None;
    let mut probe = false;
    for i in 0..argc.max(0) as usize {
        let arg = CStr::from_ptr(*argv.add(i)).to_string_lossy();
        match arg.split_once('=') {
            Some(("out", path)) => out = Some(path.to_string()),
            Some(("probe", "on")) => probe = true,
            Some(("qemu", version)) => {
                if let Some(release) = api::release(version) {
                    BACKED_OUT_LISTED.store(release >= (7, 2), Relaxed);
                }
            }
            _ => {
                return fail(format!(
                    "unknown argument '{arg}' (accepted: out=FILE, probe=on, qemu=MAJOR.MINOR)"
                ))
            }
        }
    }
    if probe {
        eprintln!(
            "{}level {declared}, QEMU accepts {}..{}, target {name}",
            api::PROBE_LINE,
            info.version.min,
            info.version.cur
        );
        return 1;
    }
    let Some(path) = out else {
        return fail("no out=FILE argument".into());
    };
    let mut file = match File::create(&path) {
        Ok(f) => BufWriter::with_capacity(1 << 20, f),
        Err(e) => return fail(format!("cannot create {path}: {e}")),
    };
    if file
        .write_all(record::header(target.name()).as_bytes())
        .is_err()
    {
        return fail(format!("cannot write {path}"));
    }
    let _ = TARGET.set(target);
    let _ = CALLS.set(calls);
    *OUT.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
    if let Err(why) = register_callbacks(id, abi) {
        return fail(why);
    }
    0
}
