//! ptelab's QEMU TCG plugin (plugin API v1: QEMU 4.2 to 8.2; Debian 12
//! ships 7.2). Loaded with `-plugin libptelab_qemu_plugin.so,out=FILE`.
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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use ptelab_counts::record::{self, Window};
use ptelab_counts::{classify, is_kernel_address, Insn, Marker, Target, Tlb, MAX_PHASES};

// ---- The plugin API (qemu-plugin.h, version 1), the calls used. ----

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

/// `qemu_info_t` (its leading fields: the rest is not read).
#[repr(C)]
pub struct QemuInfo {
    target_name: *const c_char,
    version: VersionRange,
    system_emulation: bool,
}

/// `QEMU_PLUGIN_CB_NO_REGS`.
const CB_NO_REGS: c_int = 0;

type TbTransCb = extern "C" fn(PluginId, *mut QemuPluginTb);
type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);
type UdataCb = extern "C" fn(PluginId, *mut c_void);

extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TbTransCb);
    fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut QemuPluginTb,
        cb: VcpuUdataCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut QemuPluginInsn,
        cb: VcpuUdataCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_tb_n_insns(tb: *const QemuPluginTb) -> usize;
    fn qemu_plugin_tb_vaddr(tb: *const QemuPluginTb) -> u64;
    fn qemu_plugin_tb_get_insn(tb: *const QemuPluginTb, idx: usize) -> *mut QemuPluginInsn;
    fn qemu_plugin_insn_data(insn: *const QemuPluginInsn) -> *const c_void;
    fn qemu_plugin_insn_size(insn: *const QemuPluginInsn) -> usize;
    fn qemu_plugin_register_atexit_cb(id: PluginId, cb: UdataCb, userdata: *mut c_void);
}

/// The API level this plugin is built against; QEMU refuses a plugin whose
/// level is outside its range.
#[no_mangle]
pub static qemu_plugin_version: c_int = ptelab_counts::PLUGIN_API_VERSION;

// ---- State. ----

const PHASES: usize = MAX_PHASES as usize;

/// A kernel translation block, allocated at translation and never freed
/// (QEMU may drop and translate a block again; the old record stays valid
/// for the callbacks already registered with it).
struct Block {
    vaddr: u64,
    insns: u64,
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

/// Userdata of a user-space block: its instruction count, tagged by the low
/// bit (a `Block`'s address is aligned, so its low bit is 0).
fn user_tag(insns: u64) -> *mut c_void {
    ((insns << 1) | 1) as usize as *mut c_void
}

extern "C" fn block_exec(_vcpu: c_uint, udata: *mut c_void) {
    let active = ACTIVE.load(Relaxed);
    if active == 0 {
        return;
    }
    let raw = udata as usize;
    for p in 0..PHASES {
        if active & (1 << p) == 0 {
            continue;
        }
        if raw & 1 == 1 {
            bump(&TOTALS.user[p], (raw >> 1) as u64);
            continue;
        }
        // SAFETY: a kernel block's userdata is a leaked `Block`.
        let b = unsafe { &*(raw as *const Block) };
        bump(&TOTALS.kernel[p], b.insns);
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
                    e.1 += n * b.insns;
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

extern "C" fn translate(_id: PluginId, tb: *mut QemuPluginTb) {
    let Some(&target) = TARGET.get() else { return };
    // SAFETY: QEMU hands a valid block for the duration of this callback;
    // instruction data is valid for its size.
    unsafe {
        let n = qemu_plugin_tb_n_insns(tb);
        let vaddr = qemu_plugin_tb_vaddr(tb);
        let udata = if is_kernel_address(vaddr) {
            let b = Box::leak(Box::new(Block {
                vaddr,
                insns: n as u64,
                hits: [const { AtomicU64::new(0) }; PHASES],
                dirty: AtomicU8::new(0),
            }));
            b as *mut Block as *mut c_void
        } else {
            user_tag(n as u64)
        };
        qemu_plugin_register_vcpu_tb_exec_cb(tb, block_exec, CB_NO_REGS, udata);
        for i in 0..n {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            let data = qemu_plugin_insn_data(insn) as *const u8;
            let size = qemu_plugin_insn_size(insn);
            if data.is_null() || size == 0 {
                continue;
            }
            let bytes = std::slice::from_raw_parts(data, size);
            let tag = match classify(target, bytes) {
                Some(Insn::Marker(m)) => MARKER_TAG | m.code() as usize,
                Some(Insn::Tlb(k)) => TLB_TAG | k.index(),
                None => continue,
            };
            qemu_plugin_register_vcpu_insn_exec_cb(insn, insn_exec, CB_NO_REGS, tag as *mut c_void);
        }
    }
}

extern "C" fn at_exit(_id: PluginId, _udata: *mut c_void) {
    if let Some(mut out) = OUT.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = out.flush();
    }
}

/// Called by QEMU when it loads the plugin: `out=FILE` names the output.
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
    let api = ptelab_counts::PLUGIN_API_VERSION;
    if info.version.min > api || info.version.cur < api {
        return fail(format!(
            "this QEMU speaks plugin API {}..{}, the plugin {api}",
            info.version.min, info.version.cur
        ));
    }
    if !info.system_emulation {
        return fail("only system emulation (qemu-system-*) is supported".into());
    }
    let name = CStr::from_ptr(info.target_name).to_string_lossy();
    let Some(target) = Target::from_qemu(&name) else {
        return fail(format!("target {name} is not x86_64 or aarch64"));
    };
    let mut out = None;
    for i in 0..argc.max(0) as usize {
        let arg = CStr::from_ptr(*argv.add(i)).to_string_lossy();
        match arg.split_once('=') {
            Some(("out", path)) => out = Some(path.to_string()),
            _ => return fail(format!("unknown argument '{arg}' (accepted: out=FILE)")),
        }
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
    *OUT.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
    qemu_plugin_register_atexit_cb(id, at_exit, std::ptr::null_mut());
    0
}
