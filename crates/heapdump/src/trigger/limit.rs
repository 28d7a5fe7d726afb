//! Dumps near the memory limit (`HEAPDUMP_NEAR_LIMIT=PERCENT`, `heapdump
//! run --near-limit PERCENT`): in a container, memory runs out without
//! `malloc` ever failing, and the kernel's OOM killer sends SIGKILL, which
//! nothing can catch. The runtime's helper thread watches the limits that
//! apply to the process and dumps when the memory one of them counts first
//! crosses the share asked, then again at each further step of half the
//! remaining headroom.
//!
//! The limits: the memory cgroup's (`memory.max` and `memory.high` in
//! cgroup v2, `memory.limit_in_bytes` in v1, the tightest of the process's
//! cgroup and its ancestors, found from `/proc/self/cgroup` and
//! `/proc/self/mountinfo`; the cgroup's own usage is what counts),
//! `RLIMIT_AS` (the address space, `VmSize`), `RLIMIT_DATA` (`VmData`) and
//! physical memory (the process's resident size against `MemTotal`).
//!
//! The helper checks them every 100 ms and whenever the live heap has
//! grown by a sixteenth of the headroom since the last check (the
//! allocation path's threshold test, which costs nothing more). A near-limit
//! dump never forks: a forked writer is charged to the same cgroup, and at
//! the limit each page the program writes after the fork would be copied.
//!
//! Written by hand, allocation-free: it runs in the traced process.

use crate::sys;
use core::sync::atomic::{AtomicU64, Ordering};

/// What a limit is, as the LIMIT record numbers it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum Kind {
    CgroupMax = 1,
    CgroupHigh = 2,
    CgroupV1 = 3,
    AddressSpace = 4,
    Data = 5,
    Physical = 6,
}

/// Where a limit's usage is read.
#[derive(Clone, Copy)]
enum Usage {
    /// A cgroup file (`memory.current`, `memory.usage_in_bytes`).
    File,
    VmSize,
    VmData,
    Rss,
}

#[derive(Clone, Copy)]
struct Limit {
    kind: Kind,
    bytes: u64,
    usage: Usage,
}

const PATH: usize = 512;

/// The limits found at start-up.
pub(crate) struct Limits {
    items: [Option<Limit>; 4],
    /// The cgroup usage file, NUL-terminated.
    usage_path: [u8; PATH],
}

/// A limit crossed: what the LIMIT record says.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reading {
    pub kind: u32,
    pub bytes: u64,
    pub used: u64,
}

/// The share (per mille) of the next dump; 0 when near-limit dumps are off.
static NEXT_MARK: AtomicU64 = AtomicU64::new(0);
/// The limit of the dump being written (its LIMIT record).
static LAST_KIND: AtomicU64 = AtomicU64::new(0);
static LAST_BYTES: AtomicU64 = AtomicU64::new(0);
static LAST_USED: AtomicU64 = AtomicU64::new(0);

struct Found {
    limits: Limits,
    ok: bool,
}

struct FoundCell(core::cell::UnsafeCell<Found>);
// SAFETY: written once by `init`, before the helper thread (the only
// reader) starts; never written again.
unsafe impl Sync for FoundCell {}
static FOUND: FoundCell =
    FoundCell(core::cell::UnsafeCell::new(Found { limits: Limits { items: [None; 4], usage_path: [0; PATH] }, ok: false }));

/// Finds the limits (at start-up, before the helper runs) and arms the
/// first mark at `percent`.
pub(crate) fn init(percent: u32) {
    if percent == 0 || percent > 100 {
        return;
    }
    let mut l = Limits { items: [None; 4], usage_path: [0; PATH] };
    let mut n = 0;
    if let Some(c) = cgroup_limit(&mut l.usage_path) {
        l.items[n] = Some(c);
        n += 1;
    }
    for (res, kind, usage) in [(libc::RLIMIT_AS, Kind::AddressSpace, Usage::VmSize), (libc::RLIMIT_DATA, Kind::Data, Usage::VmData)] {
        if let Some(bytes) = sys::soft_limit(res) {
            l.items[n] = Some(Limit { kind, bytes, usage });
            n += 1;
        }
    }
    if let Some(total) = meminfo_total() {
        l.items[n] = Some(Limit { kind: Kind::Physical, bytes: total, usage: Usage::Rss });
    }
    // SAFETY: written once, before the helper thread (its only reader)
    // starts.
    unsafe {
        let f = FOUND.0.get();
        (*f).limits = l;
        (*f).ok = true;
    }
    NEXT_MARK.store(u64::from(percent) * 10, Ordering::Release);
}

/// Whether near-limit dumps are armed.
pub(crate) fn armed() -> bool {
    NEXT_MARK.load(Ordering::Acquire) != 0
}

fn limits() -> Option<&'static Limits> {
    // SAFETY: FOUND is written once by `init` before `armed()` is true and
    // never again; this is read only after.
    unsafe {
        let f = &*FOUND.0.get();
        f.ok.then_some(&f.limits)
    }
}

/// The limit nearest to being reached: (reading, share per mille).
pub(crate) fn nearest() -> Option<(Reading, u64)> {
    let l = limits()?;
    let mut best: Option<(Reading, u64)> = None;
    let statm = statm();
    for it in l.items.iter().flatten() {
        let used = match it.usage {
            Usage::File => read_u64(&l.usage_path),
            Usage::VmSize => statm.map(|s| s.0),
            Usage::Rss => statm.map(|s| s.1),
            Usage::VmData => status_kb(b"VmData:"),
        };
        let Some(used) = used else { continue };
        let share = (u128::from(used) * 1000 / u128::from(it.bytes.max(1))) as u64;
        if best.is_none_or(|b| share > b.1) {
            best = Some((Reading { kind: it.kind as u32, bytes: it.bytes, used }, share));
        }
    }
    best
}

/// One look at the limits (on the helper thread, reading them once): the
/// reading of the nearest when it has crossed the mark (a dump is due; the
/// mark moves half-way to the limit), and how much the heap may grow
/// before the next look is due (a sixteenth of the headroom to the mark,
/// at least 1 MiB; `u64::MAX` when nothing is watched).
pub(crate) fn check() -> (Option<Reading>, u64) {
    let mut mark = NEXT_MARK.load(Ordering::Acquire);
    if mark == 0 {
        return (None, u64::MAX);
    }
    let Some((r, share)) = nearest() else { return (None, u64::MAX) };
    let mut due = None;
    if share >= mark {
        // Half the headroom left, but at least 1% of the limit: near 100%
        // the halves would be a dump per page.
        mark = (share + (1000 - share.min(1000)) / 2).max(share + 10);
        NEXT_MARK.store(mark, Ordering::Release);
        LAST_KIND.store(u64::from(r.kind), Ordering::Relaxed);
        LAST_BYTES.store(r.bytes, Ordering::Relaxed);
        LAST_USED.store(r.used, Ordering::Release);
        due = Some(r);
    }
    let at = (u128::from(r.bytes) * u128::from(mark.min(1000)) / 1000) as u64;
    (due, (at.saturating_sub(r.used) / 16).max(1 << 20))
}

/// The reading of the near-limit dump being written.
pub(crate) fn last() -> Reading {
    Reading {
        kind: LAST_KIND.load(Ordering::Relaxed) as u32,
        bytes: LAST_BYTES.load(Ordering::Relaxed),
        used: LAST_USED.load(Ordering::Acquire),
    }
}

/// (VmSize, RSS) in bytes from `/proc/self/statm`.
fn statm() -> Option<(u64, u64)> {
    let mut b = [0u8; 256];
    let n = sys::read_file(c"/proc/self/statm", &mut b).ok()?;
    let mut f = b[..n].split(|&c| c == b' ');
    let size = parse_dec(f.next()?)?;
    let rss = parse_dec(f.next()?)?;
    let page = u64::from(sys::page_size());
    Some((size * page, rss * page))
}

/// The process's resident anonymous memory (`RssAnon`), in bytes: for
/// the dump's MEMORY record (read into a stack buffer, no allocation).
pub(crate) fn resident_anon() -> Option<u64> {
    status_kb(b"RssAnon:")
}

/// A `Key:   N kB` line of `/proc/self/status`, in bytes.
fn status_kb(key: &[u8]) -> Option<u64> {
    let mut b = [0u8; 4096];
    let n = sys::read_file(c"/proc/self/status", &mut b).ok()?;
    kb_line(&b[..n], key)
}

fn meminfo_total() -> Option<u64> {
    let mut b = [0u8; 512];
    let n = sys::read_file(c"/proc/meminfo", &mut b).ok()?;
    kb_line(&b[..n], b"MemTotal:")
}

fn kb_line(text: &[u8], key: &[u8]) -> Option<u64> {
    let line = text.split(|&c| c == b'\n').find(|l| l.starts_with(key))?;
    let num = line[key.len()..].split(|&c| c == b' ' || c == b'\t').find(|w| !w.is_empty())?;
    parse_dec(num)?.checked_mul(1024)
}

fn parse_dec(s: &[u8]) -> Option<u64> {
    let s = s.strip_suffix(b"\n").unwrap_or(s);
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    s.iter().try_fold(0u64, |v, &c| if c.is_ascii_digit() { v.checked_mul(10)?.checked_add(u64::from(c - b'0')) } else { None })
}

/// A cgroup file's number; `None` for `max`, unreadable or absurd.
fn read_u64(path_nul: &[u8]) -> Option<u64> {
    let end = path_nul.iter().position(|&c| c == 0)?;
    let path = core::ffi::CStr::from_bytes_with_nul(&path_nul[..=end]).ok()?;
    let mut b = [0u8; 64];
    let n = sys::read_file(path, &mut b).ok()?;
    parse_dec(&b[..n])
}

/// The memory cgroup's tightest limit over the process's cgroup and its
/// ancestors (up to the mount), with the usage file of the cgroup that
/// sets it written into `usage`.
fn cgroup_limit(usage: &mut [u8; PATH]) -> Option<Limit> {
    // The two files, in a mapping of their own (mountinfo can be long).
    const BUF: usize = 1 << 18;
    let map = sys::mmap_anon(BUF).ok()?;
    // SAFETY: a fresh private mapping of BUF bytes, unmapped below.
    let buf = unsafe { core::slice::from_raw_parts_mut(map, BUF) };
    let (cg, mi) = buf.split_at_mut(BUF / 4);
    let r = (|| {
        let n = sys::read_file(c"/proc/self/cgroup", cg).ok()?;
        let m = sys::read_file(c"/proc/self/mountinfo", mi).ok()?;
        let mut dir = [0u8; PATH];
        let (len, v2, mount_len) = cgroup_dir(&cg[..n], &mi[..m], &mut dir)?;
        tightest(&mut dir, len, mount_len, v2, usage)
    })();
    // SAFETY: our mapping, no longer referenced.
    unsafe { sys::munmap(map, BUF) };
    r
}

/// Walks from the cgroup directory `dir[..len]` up to its mount
/// (`mount_len` bytes) and keeps the smallest limit.
fn tightest(dir: &mut [u8; PATH], mut len: usize, mount_len: usize, v2: bool, usage: &mut [u8; PATH]) -> Option<Limit> {
    let mut best: Option<Limit> = None;
    loop {
        let files: &[(&[u8], Kind)] = if v2 {
            &[(b"/memory.max", Kind::CgroupMax), (b"/memory.high", Kind::CgroupHigh)]
        } else {
            &[(b"/memory.limit_in_bytes", Kind::CgroupV1)]
        };
        for &(name, kind) in files {
            let mut p = [0u8; PATH];
            if !join(&mut p, &dir[..len], name) {
                continue;
            }
            // v1 writes "unlimited" as a number near 2^63.
            let Some(bytes) = read_u64(&p).filter(|&b| b > 0 && b < 1 << 62) else { continue };
            if best.is_none_or(|b| bytes < b.bytes) {
                best = Some(Limit { kind, bytes, usage: Usage::File });
                let uname: &[u8] = if v2 { b"/memory.current" } else { b"/memory.usage_in_bytes" };
                *usage = [0; PATH];
                join(usage, &dir[..len], uname);
            }
        }
        if len <= mount_len {
            break;
        }
        len = dir[..len].iter().rposition(|&c| c == b'/')?.max(mount_len);
    }
    best
}

/// `a` then `b` into `out`, NUL-terminated; false when too long.
fn join(out: &mut [u8; PATH], a: &[u8], b: &[u8]) -> bool {
    if a.len() + b.len() + 1 > PATH {
        return false;
    }
    out[..a.len()].copy_from_slice(a);
    out[a.len()..a.len() + b.len()].copy_from_slice(b);
    out[a.len() + b.len()] = 0;
    true
}

/// The directory of this process's memory cgroup, from the texts of
/// `/proc/self/cgroup` and `/proc/self/mountinfo`: written into `out`;
/// returns (its length, whether it is cgroup v2, the length of its mount
/// point's part). The memory controller is v1's when a v1 hierarchy holds
/// it (hybrid systems), else v2's.
pub(crate) fn cgroup_dir(cgroup: &[u8], mountinfo: &[u8], out: &mut [u8; PATH]) -> Option<(usize, bool, usize)> {
    let mut v1_path: Option<&[u8]> = None;
    let mut v2_path: Option<&[u8]> = None;
    for line in cgroup.split(|&c| c == b'\n') {
        let mut f = line.splitn(3, |&c| c == b':');
        let (Some(id), Some(ctl), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        if id == b"0" && ctl.is_empty() {
            v2_path = Some(path);
        } else if ctl.split(|&c| c == b',').any(|c| c == b"memory") {
            v1_path = Some(path);
        }
    }
    let mut v1_mount: Option<(&[u8], &[u8])> = None;
    let mut v2_mount: Option<(&[u8], &[u8])> = None;
    for line in mountinfo.split(|&c| c == b'\n') {
        // id parent major:minor root mount options [optional...] - fstype source superoptions
        let Some(sep) = line.windows(3).position(|w| w == b" - ") else { continue };
        let (head, tail) = (&line[..sep], &line[sep + 3..]);
        let mut h = head.split(|&c| c == b' ');
        let (Some(_), Some(_), Some(_), Some(root), Some(mount)) = (h.next(), h.next(), h.next(), h.next(), h.next()) else { continue };
        let mut t = tail.split(|&c| c == b' ');
        let (Some(fstype), Some(_), Some(superopts)) = (t.next(), t.next(), t.next()) else { continue };
        if fstype == b"cgroup2" && v2_mount.is_none() {
            v2_mount = Some((root, mount));
        } else if fstype == b"cgroup" && superopts.split(|&c| c == b',').any(|o| o == b"memory") && v1_mount.is_none() {
            v1_mount = Some((root, mount));
        }
    }
    let (path, (root, mount), v2) = match (v1_path, v1_mount, v2_path, v2_mount) {
        (Some(p), Some(m), _, _) => (p, m, false),
        (_, _, Some(p), Some(m)) => (p, m, true),
        _ => return None,
    };
    // The cgroup's path is relative to the hierarchy's root; the mount
    // shows the hierarchy from `root` on.
    let rel = if root == b"/" { path } else { path.strip_prefix(root)? };
    let rel = if rel == b"/" { &b""[..] } else { rel };
    if mount.len() + rel.len() + 32 > PATH {
        return None;
    }
    out[..mount.len()].copy_from_slice(mount);
    out[mount.len()..mount.len() + rel.len()].copy_from_slice(rel);
    Some((mount.len() + rel.len(), v2, mount.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(cgroup: &str, mountinfo: &str) -> Option<(String, bool)> {
        let mut out = [0u8; PATH];
        cgroup_dir(cgroup.as_bytes(), mountinfo.as_bytes(), &mut out).map(|(n, v2, _)| (String::from_utf8(out[..n].to_vec()).unwrap(), v2))
    }

    #[test]
    fn cgroup_layouts_v1_v2_and_hybrid() {
        // cgroup v2 only (a systemd service).
        let v2 = dir(
            "0::/system.slice/app.service\n",
            "24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
        );
        assert_eq!(v2, Some(("/sys/fs/cgroup/system.slice/app.service".into(), true)));
        // A container with its own cgroup namespace: the root is "/".
        assert_eq!(
            dir("0::/\n", "600 590 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"),
            Some(("/sys/fs/cgroup".into(), true))
        );
        // cgroup v1 (memory as its own hierarchy), docker without a namespace:
        // the mount's root is the container's cgroup.
        let v1 = dir(
            "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/\n",
            "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
        );
        assert_eq!(v1, Some(("/sys/fs/cgroup/memory".into(), false)));
        // Hybrid (this machine's kind): memory on v1, an empty v2 beside it.
        let hybrid = dir(
            "4:memory:/process_api/2bc7\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(hybrid, Some(("/sys/fs/cgroup/memory/process_api/2bc7".into(), false)));
        // No memory controller mounted: no cgroup limit.
        assert_eq!(dir("3:cpu:/\n", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), None);
    }

    #[test]
    fn this_machines_cgroup_is_found_and_readable() {
        let cg = std::fs::read("/proc/self/cgroup").unwrap();
        let mi = std::fs::read("/proc/self/mountinfo").unwrap();
        let mut out = [0u8; PATH];
        let Some((n, v2, _)) = cgroup_dir(&cg, &mi, &mut out) else {
            // A machine without a memory cgroup mounted.
            assert!(!String::from_utf8_lossy(&mi).contains("cgroup2") || !String::from_utf8_lossy(&cg).contains("0::"));
            return;
        };
        let d = std::path::PathBuf::from(String::from_utf8(out[..n].to_vec()).unwrap());
        let usage = d.join(if v2 { "memory.current" } else { "memory.usage_in_bytes" });
        let text = std::fs::read_to_string(&usage).unwrap_or_else(|e| panic!("{}: {e}", usage.display()));
        assert!(parse_dec(text.trim().as_bytes()).unwrap() > 0, "{}: {text}", usage.display());
    }

    #[test]
    fn status_and_meminfo_lines_parse() {
        assert_eq!(kb_line(b"Name:\tx\nVmData:\t  2048 kB\n", b"VmData:"), Some(2048 * 1024));
        assert_eq!(kb_line(b"MemTotal:       24576000 kB\n", b"MemTotal:"), Some(24576000 * 1024));
        assert_eq!(parse_dec(b"max\n"), None);
        assert_eq!(parse_dec(b"1048576\n"), Some(1048576));
        assert!(statm().unwrap().0 > statm().unwrap().1 / 2);
        // This process's own, as the kernel writes it (tabs).
        assert!(status_kb(b"VmData:").unwrap() > 0);
        assert!(meminfo_total().unwrap() > 0);
    }
}
